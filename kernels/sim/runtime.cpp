// The ACL runtime entry points tensor-arena uses (acl/acl_rt.h,
// acl/acl_base_rt.h), on host memory, plus the launch hook kernel libraries
// call and the scratch allocation of the simulated launch stubs. See
// README.md for the behaviour modelled and where each rule comes from.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tasim.h"

namespace tasim {

using Lock = std::lock_guard<std::recursive_mutex>;

Process::~Process()
{
    // Whatever the process leaked goes with it, so leak checkers report
    // the tests' counters rather than this memory.
    for (auto &a : allocations) {
        std::free(reinterpret_cast<void *>(a.first));
    }
    for (Stream *s : streams) {
        delete s;
    }
    for (Event *e : events) {
        delete e;
    }
    ReleaseVmm(*this);
}

Process &Proc()
{
    static Process process;
    return process;
}

Thread &Me()
{
    static std::atomic<uint64_t> next{1};
    static thread_local Thread thread = [] {
        Thread t;
        t.id = next.fetch_add(1);
        return t;
    }();
    return thread;
}

Device &DeviceOf(int32_t id) { return Proc().devices[id]; }

int32_t Fail(int32_t code, const std::string &message)
{
    Me().errors.push_back("[tasim] " + message + " (error " + std::to_string(code) + ")");
    return code;
}

std::string NotDevice(const void *p, uint64_t bytes)
{
    Lock lock(Proc().mu);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const auto &all = Proc().allocations;
    auto it = all.upper_bound(a);
    if (it != all.begin()) {
        --it;
        if (a - it->first <= it->second.size && bytes <= it->second.size - (a - it->first)) {
            return "";
        }
    }
    // A reserved range: device memory where, and only where, a handle is
    // mapped; the bytes may span adjacent mappings of different handles
    // (hicann/runtime docs/zh/api_ref/11-04_virtual_memory_management.md:
    // the range is "地址连续的虚拟内存", contiguous addresses over separate
    // physical allocations).
    const auto &ranges = Proc().ranges;
    auto r = ranges.upper_bound(a);
    if (r == ranges.begin()) {
        return "not inside a live allocation or a reserved range";
    }
    --r;
    const uintptr_t base = r->first;
    const Range &range = r->second;
    if (a - base >= range.size) {
        return "not inside a live allocation or a reserved range";
    }
    // A zero-byte access still names one byte.
    const uint64_t need = bytes == 0 ? 1 : bytes;
    if (need > range.size - (a - base)) {
        return "runs past the end of its reserved range";
    }
    uintptr_t at = a;
    const uintptr_t end = a + need;
    while (at < end) {
        auto m = range.mappings.upper_bound(at);
        bool mapped = false;
        if (m != range.mappings.begin()) {
            --m;
            mapped = at - m->first < m->second->size;
        }
        if (!mapped) {
            Count("unmapped_accesses");
            return "lies in a reserved range where the byte " + std::to_string(at - base) +
                   " from its base is not mapped (no aclrtMapMem there)";
        }
        at = m->first + m->second->size;
    }
    return "";
}

bool IsDevice(const void *p, uint64_t bytes) { return NotDevice(p, bytes).empty(); }

Stream *FindStream(aclrtStream s)
{
    Process &p = Proc();
    if (s == nullptr) {
        const int32_t d = Me().device;
        return d < 0 ? nullptr : &DeviceOf(d).default_stream;
    }
    Stream *st = static_cast<Stream *>(s);
    return p.streams.count(st) != 0 ? st : nullptr;
}

uint64_t PendingWork(int32_t device)
{
    Process &p = Proc();
    const uint64_t me = Me().id;
    uint64_t n = 0;
    for (Stream *s : p.streams) {
        if (s->device == device && s->owner == me) {
            n += s->pending;
        }
    }
    return n;
}

bool Ready(const char *op, aclError *code)
{
    Lock lock(Proc().mu);
    if (Proc().init_refs <= 0) {
        *code = Fail(kUninitialize, std::string(op) + ": aclInit has not been called");
        return false;
    }
    if (Me().device < 0) {
        *code = Fail(kRtContextNull, std::string(op) + ": no device set on this thread (aclrtSetDevice)");
        return false;
    }
    return true;
}

namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

} // namespace

std::string Hex(const void *p)
{
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%#llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
    return buf;
}

// aclrtMalloc's accounting (hicann/runtime src/acl/aclrt_impl/memory.cpp,
// aclMallocMemInner and GetAlignedAndPaddingSize; docs/zh/api_ref/
// 25-02_Enumerations.md, aclrtMemMallocPolicy): the size is aligned up to
// 32 bytes plus 32 of padding, except on 1 GiB pages; HUGE_FIRST takes 2 MiB
// pages above 1 MiB, HUGE_ONLY always; a policy outside the enum falls back
// to the default (huge pages from 2 MiB, else normal pages;
// 11-01_device_memory_malloc_and_free.md).
uint64_t Charged(uint64_t size, int policy)
{
    const uint64_t padded = RoundUp(size, 32) + 32;
    switch (policy) {
    case kHugeFirst:
    case kHugeFirstP2p:
        return size > kMiB ? RoundUp(padded, 2 * kMiB) : padded;
    case kHugeOnly:
    case kHugeOnlyP2p:
        return RoundUp(padded, 2 * kMiB);
    case kNormalOnly:
    case kNormalOnlyP2p:
        return padded;
    case kHuge1gOnly:
    case kHuge1gOnlyP2p:
        return RoundUp(RoundUp(size, 32), kGiB);
    default:
        return size >= 2 * kMiB ? RoundUp(padded, 2 * kMiB) : padded;
    }
}

aclError Allocate(void **devPtr, size_t size, int policy, bool launch)
{
    const char *op = launch ? "the launch stub's aclrtMalloc" : "aclrtMalloc";
    aclError code;
    if (!Ready(op, &code)) {
        return code;
    }
    Process &p = Proc();
    Lock lock(p.mu);
    Thread &me = Me();
    if (devPtr == nullptr || size == 0) {
        return Fail(kInvalidParam, std::string(op) + ": null pointer or zero size");
    }
    if (policy < kHugeFirst || policy > kHuge1gOnlyP2p) {
        // Not one enum value (an OR of values, say): the runtime takes the
        // default, as memory.cpp does for any policy it does not know.
        Count("malloc_policy_fallbacks");
    }
    int32_t injected;
    if ((launch ? me.fail_launch_malloc : me.fail_malloc).Trip(&injected)) {
        Count(launch ? "injected_launch_malloc_failures" : "injected_malloc_failures");
        return Fail(injected, std::string(op) + ": injected failure for " + std::to_string(size) + " bytes");
    }
    Device &d = DeviceOf(me.device);
    const uint64_t charged = Charged(size, policy);
    const uint64_t limit = d.capacity > d.system_reserved ? d.capacity - d.system_reserved : 0;
    const uint64_t free_bytes = limit > d.in_use ? limit - d.in_use : 0;
    if (charged > free_bytes) {
        Count(launch ? "failed_launch_mallocs" : "failed_mallocs");
        return Fail(kRtMemoryAllocation, std::string(op) + ": out of memory on device " + std::to_string(me.device) +
                                             ": " + std::to_string(size) + " bytes asked (" +
                                             std::to_string(charged) + " charged), " + std::to_string(free_bytes) +
                                             " free");
    }
    // Host memory for the bytes asked for only: a charge of a whole 1 GiB
    // page costs nothing here.
    const uint64_t host = RoundUp(uint64_t(size) + 32, 64);
    void *ptr = std::aligned_alloc(64, host);
    if (ptr == nullptr) {
        return Fail(kRtMemoryAllocation, std::string(op) + ": the host could not provide " + std::to_string(host) +
                                             " bytes");
    }
    // Device memory is not zeroed; a recognisable pattern shows reads of
    // bytes nobody wrote.
    std::memset(ptr, 0xCD, host);
    p.allocations[reinterpret_cast<uintptr_t>(ptr)] = Alloc{uint64_t(size), charged, me.device, me.id, launch};
    d.in_use += charged;
    if (d.in_use > d.peak) {
        d.peak = d.in_use;
    }
    if (launch) {
        Count("launch_mallocs");
        Count("launch_malloc_bytes", charged);
    } else {
        Count("aclrtMalloc");
        if (policy >= kHugeFirst && policy <= kHuge1gOnlyP2p) {
            Count(("malloc_policy_" + std::to_string(policy)).c_str());
        }
        Count("malloc_bytes", charged);
        if (d.in_use > me.counters["peak_bytes"]) {
            me.counters["peak_bytes"] = d.in_use;
        }
    }
    *devPtr = ptr;
    return kSuccess;
}

aclError Release(void *devPtr, bool launch)
{
    Process &p = Proc();
    Lock lock(p.mu);
    auto it = p.allocations.find(reinterpret_cast<uintptr_t>(devPtr));
    if (devPtr == nullptr || it == p.allocations.end()) {
        return Fail(kRtMemoryFree, "aclrtFree: not the start of a live allocation");
    }
    // aclrtFree does not wait for queued work (the launch stubs free their
    // scratch right after queueing the kernel, as CANN's generated stubs do).
    if (!launch && PendingWork(it->second.device) != 0) {
        Count("free_with_pending_work");
    }
    DeviceOf(it->second.device).in_use -= it->second.charged;
    p.allocations.erase(it);
    std::free(devPtr);
    Count(launch ? "launch_frees" : "aclrtFree");
    return kSuccess;
}

} // namespace tasim

using namespace tasim;
using Lock = std::lock_guard<std::recursive_mutex>;

namespace {

// Releases what a device's default context owns once its last reference
// goes (04_device_management.md, aclrtResetDevice).
void ReleaseDevice(int32_t id)
{
    Process &p = Proc();
    bool live = false;
    for (auto it = p.streams.begin(); it != p.streams.end();) {
        if ((*it)->device == id) {
            live = true;
            delete *it;
            it = p.streams.erase(it);
        } else {
            ++it;
        }
    }
    for (const auto &a : p.allocations) {
        live = live || a.second.device == id;
    }
    for (const Physical *h : p.physicals) {
        live = live || h->device == id;
    }
    if (live) {
        Count("reset_with_live_resources");
    }
    DeviceOf(id).default_stream.pending = 0;
}

bool Deinitialise()
{
    Process &p = Proc();
    const bool live = !p.allocations.empty() || !p.streams.empty() || !p.physicals.empty() || !p.ranges.empty();
    if (live) {
        Count("finalize_with_live_resources");
    }
    p.init_refs = 0;
    Count("deinitialisations");
    return live;
}

} // namespace

// aclInit counts references (02_initialization_and_deinitialization.md):
// every call adds one, a repeated call still answers
// ACL_ERROR_REPEAT_INITIALIZE for compatibility.
TASIM_EXPORT aclError aclInit(const char *configPath)
{
    (void)configPath;
    Lock lock(Proc().mu);
    Count("aclInit");
    if (Proc().init_refs++ > 0) {
        return Fail(kRepeatInitialize, "aclInit: already initialised");
    }
    return kSuccess;
}

// aclFinalize clears the count and deinitialises at once.
TASIM_EXPORT aclError aclFinalize(void)
{
    Lock lock(Proc().mu);
    Count("aclFinalize");
    if (Proc().init_refs <= 0) {
        return Fail(kRepeatFinalize, "aclFinalize: not initialised");
    }
    Deinitialise();
    return kSuccess;
}

// aclFinalizeReference takes one reference back and deinitialises at zero.
TASIM_EXPORT aclError aclFinalizeReference(uint64_t *refCount)
{
    Lock lock(Proc().mu);
    Count("aclFinalizeReference");
    Process &p = Proc();
    if (p.init_refs <= 0) {
        return Fail(kRepeatFinalize, "aclFinalizeReference: not initialised");
    }
    if (--p.init_refs == 0) {
        Deinitialise();
    }
    if (refCount != nullptr) {
        *refCount = uint64_t(p.init_refs);
    }
    return kSuccess;
}

// Every message since the last call, newest first, then cleared; the
// pointer stays valid until the next call on this thread
// (13_exception_handling.md).
TASIM_EXPORT const char *aclGetRecentErrMsg(void)
{
    Thread &me = Me();
    if (me.errors.empty()) {
        return nullptr;
    }
    std::string all;
    for (auto it = me.errors.rbegin(); it != me.errors.rend(); ++it) {
        all += (all.empty() ? "" : "\n") + *it;
    }
    me.errors.clear();
    me.returned.swap(all);
    return me.returned.c_str();
}

TASIM_EXPORT const char *aclrtGetSocName(void)
{
    const char *name = std::getenv("TASIM_SOC_NAME");
    return name != nullptr && *name != '\0' ? name : "Ascend910B2";
}

TASIM_EXPORT aclError aclrtGetDeviceCount(uint32_t *count)
{
    Lock lock(Proc().mu);
    if (count == nullptr) {
        return Fail(kInvalidParam, "aclrtGetDeviceCount: null count");
    }
    if (Proc().init_refs <= 0) {
        return Fail(kUninitialize, "aclrtGetDeviceCount: aclInit has not been called");
    }
    *count = Proc().device_count;
    return kSuccess;
}

// Threads that set the same device share its default context; the count
// of sets and resets is per process (04_device_management.md).
TASIM_EXPORT aclError aclrtSetDevice(int32_t deviceId)
{
    Lock lock(Proc().mu);
    Process &p = Proc();
    Count("aclrtSetDevice");
    if (p.init_refs <= 0) {
        return Fail(kUninitialize, "aclrtSetDevice: aclInit has not been called");
    }
    if (deviceId < 0 || static_cast<uint32_t>(deviceId) >= p.device_count) {
        return Fail(kRtInvalidDeviceId, "aclrtSetDevice: device " + std::to_string(deviceId) + " does not exist (" +
                                            std::to_string(p.device_count) + " simulated)");
    }
    Device &d = DeviceOf(deviceId);
    d.refs += 1;
    d.default_stream.device = deviceId;
    Me().device = deviceId;
    Me().device_refs[deviceId] += 1;
    return kSuccess;
}

TASIM_EXPORT aclError aclrtResetDevice(int32_t deviceId)
{
    Lock lock(Proc().mu);
    Count("aclrtResetDevice");
    auto it = Proc().devices.find(deviceId);
    if (it == Proc().devices.end() || it->second.refs <= 0) {
        return Fail(kRtInvalidDeviceId, "aclrtResetDevice: device " + std::to_string(deviceId) + " is not set");
    }
    Thread &me = Me();
    int64_t &mine = me.device_refs[deviceId];
    if (mine > 0) {
        mine -= 1;
    }
    if (--it->second.refs == 0) {
        ReleaseDevice(deviceId);
    }
    if (me.device == deviceId && mine == 0) {
        me.device = -1;
    }
    return kSuccess;
}

TASIM_EXPORT aclError aclGetDeviceCapability(uint32_t deviceId, int deviceInfo, int64_t *value)
{
    Lock lock(Proc().mu);
    if (value == nullptr || deviceId >= Proc().device_count) {
        return Fail(kInvalidParam, "aclGetDeviceCapability: bad device or null value");
    }
    const uint32_t cores = DeviceOf(int32_t(deviceId)).vector_cores;
    switch (deviceInfo) {
    case 0: // ACL_DEVICE_INFO_AI_CORE_NUM: a 910B2 pairs two vector cores with each cube core
        *value = cores / 2 > 0 ? cores / 2 : 1;
        return kSuccess;
    case 1: // ACL_DEVICE_INFO_VECTOR_CORE_NUM
        *value = cores;
        return kSuccess;
    default:
        return Fail(kInvalidParam, "aclGetDeviceCapability: info " + std::to_string(deviceInfo) + " not simulated");
    }
}

TASIM_EXPORT aclError aclrtCreateStream(aclrtStream *stream)
{
    aclError code;
    if (!Ready("aclrtCreateStream", &code)) {
        return code;
    }
    if (stream == nullptr) {
        return Fail(kInvalidParam, "aclrtCreateStream: null stream pointer");
    }
    Lock lock(Proc().mu);
    Stream *s = new Stream();
    s->device = Me().device;
    s->owner = Me().id;
    Proc().streams.insert(s);
    Count("aclrtCreateStream");
    *stream = s;
    return kSuccess;
}

TASIM_EXPORT aclError aclrtDestroyStream(aclrtStream stream)
{
    Lock lock(Proc().mu);
    Stream *s = static_cast<Stream *>(stream);
    if (stream == nullptr || Proc().streams.count(s) == 0) {
        return Fail(kRtStreamContext, "aclrtDestroyStream: not a live stream");
    }
    if (s->pending != 0) {
        Count("destroy_stream_with_pending_work");
    }
    Proc().streams.erase(s);
    delete s;
    Count("aclrtDestroyStream");
    return kSuccess;
}

TASIM_EXPORT aclError aclrtSynchronizeStream(aclrtStream stream)
{
    aclError code;
    if (!Ready("aclrtSynchronizeStream", &code)) {
        return code;
    }
    Lock lock(Proc().mu);
    Stream *s = FindStream(stream);
    if (s == nullptr) {
        return Fail(kRtStreamContext, "aclrtSynchronizeStream: not a live stream");
    }
    if (s->held) {
        // A device would wait until the held work completes; here nothing
        // else can release it while this thread waits, so the call is
        // refused instead of hanging (README.md, "Held streams").
        Count("synchronize_held_stream");
        return Fail(kRtInternalError, "aclrtSynchronizeStream: the stream is held by tasim_hold_stream (release it "
                                      "first: a device would wait for its work here)");
    }
    Count("aclrtSynchronizeStream");
    s->pending = 0;
    int32_t injected;
    if (Me().fail_sync.Trip(&injected)) {
        Count("injected_sync_failures");
        return Fail(injected, "aclrtSynchronizeStream: injected asynchronous failure of queued work");
    }
    return kSuccess;
}

TASIM_EXPORT aclError aclrtMalloc(void **devPtr, size_t size, int policy)
{
    return Allocate(devPtr, size, policy, false);
}

TASIM_EXPORT aclError aclrtFree(void *devPtr) { return Release(devPtr, false); }

// A zero count succeeds before any check (memory.cpp, aclrtMemsetImpl).
TASIM_EXPORT aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    if (count == 0) {
        Count("empty_copies");
        return kSuccess;
    }
    aclError code;
    if (!Ready("aclrtMemset", &code)) {
        return code;
    }
    if (count > maxCount) {
        return Fail(kInvalidParam, "aclrtMemset: count > maxCount");
    }
    const std::string why = NotDevice(devPtr, maxCount);
    if (!why.empty()) {
        return Fail(kInvalidParam, "aclrtMemset: " + std::to_string(maxCount) + " bytes at " + Hex(devPtr) + ": " +
                                       why);
    }
    Lock lock(Proc().mu);
    if (PendingWork(Me().device) != 0) {
        Count("unsynchronized_copies");
    }
    std::memset(devPtr, value, count);
    Count("aclrtMemset");
    return kSuccess;
}

// A zero count succeeds before any check (memory.cpp, aclrtMemcpyImpl).
TASIM_EXPORT aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, int kind)
{
    if (count == 0) {
        Count("empty_copies");
        return kSuccess;
    }
    aclError code;
    if (!Ready("aclrtMemcpy", &code)) {
        return code;
    }
    if (dst == nullptr || src == nullptr || count > destMax) {
        return Fail(kInvalidParam, "aclrtMemcpy: null pointer or count > destMax");
    }
    std::string why;
    switch (kind) {
    case 0: // host to host
        break;
    case 1: // host to device
        why = NotDevice(dst, count);
        why = why.empty() ? why : "destination " + Hex(dst) + " " + why;
        break;
    case 2: // device to host
        why = NotDevice(src, count);
        why = why.empty() ? why : "source " + Hex(src) + " " + why;
        break;
    case 3: // device to device
        why = NotDevice(dst, count);
        why = why.empty() ? why : "destination " + Hex(dst) + " " + why;
        if (why.empty()) {
            why = NotDevice(src, count);
            why = why.empty() ? why : "source " + Hex(src) + " " + why;
        }
        break;
    default:
        return Fail(kInvalidParam, "aclrtMemcpy: kind " + std::to_string(kind) + " is not simulated");
    }
    if (!why.empty()) {
        Count("bad_device_pointers");
        return Fail(kInvalidParam, "aclrtMemcpy of " + std::to_string(count) + " bytes: " + why);
    }
    int32_t injected;
    if (Me().fail_memcpy.Trip(&injected)) {
        Count("injected_memcpy_failures");
        return Fail(injected, "aclrtMemcpy: injected copy failure");
    }
    Lock lock(Proc().mu);
    if (PendingWork(Me().device) != 0) {
        // aclrtMemcpy is not ordered with any stream: on a device the
        // queued work may not have run (or may still read the bytes).
        Count("unsynchronized_copies");
    }
    std::memmove(dst, src, count);
    Count("aclrtMemcpy");
    Count("memcpy_bytes", count);
    return kSuccess;
}

// Device-wide, without the system's reservation; an attribute the device
// lacks answers free = total = 0 (11-01_device_memory_malloc_and_free.md,
// aclrtGetMemInfo). The simulated devices have HBM (a 910B): the DDR
// attributes are the ones they lack.
TASIM_EXPORT aclError aclrtGetMemInfo(int attr, size_t *free, size_t *total)
{
    aclError code;
    if (!Ready("aclrtGetMemInfo", &code)) {
        return code;
    }
    if (free == nullptr || total == nullptr || attr < 0 || attr > 17) {
        return Fail(kInvalidParam, "aclrtGetMemInfo: null output or attribute out of range");
    }
    Lock lock(Proc().mu);
    Count("aclrtGetMemInfo");
    Count(("mem_info_attr_" + std::to_string(attr)).c_str());
    // ACL_DDR_MEM, ACL_DDR_MEM_HUGE, ACL_DDR_MEM_NORMAL, ACL_DDR_MEM_P2P_*.
    if (attr == 0 || attr == 2 || attr == 3 || attr == 6 || attr == 7) {
        *free = 0;
        *total = 0;
        return kSuccess;
    }
    const Device &d = DeviceOf(Me().device);
    const uint64_t limit = d.capacity > d.system_reserved ? d.capacity - d.system_reserved : 0;
    *total = limit;
    *free = limit > d.in_use ? limit - d.in_use : 0;
    return kSuccess;
}

// Called by a kernel library's aclrtlaunch_* functions before they run a
// kernel, as CANN's generated launch code hands the kernel to the runtime.
// Returns non-zero to refuse the launch.
TASIM_EXPORT uint32_t tasim_kernel_launch(void *stream, const char *kernel, uint32_t numBlocks)
{
    aclError code;
    const std::string name = kernel != nullptr ? kernel : "(unnamed)";
    if (!Ready(("launch of " + name).c_str(), &code)) {
        return static_cast<uint32_t>(code);
    }
    Lock lock(Proc().mu);
    Stream *s = FindStream(stream);
    if (s == nullptr) {
        Count("bad_streams");
        return static_cast<uint32_t>(Fail(kRtStreamContext, "launch of " + name + ": not a live stream"));
    }
    int32_t injected;
    if (Me().fail_launch.Trip(&injected)) {
        Count("injected_launch_failures");
        return static_cast<uint32_t>(Fail(injected, "launch of " + name + " on " + std::to_string(numBlocks) +
                                                         " cores: injected kernel failure"));
    }
    s->pending += 1;
    Count("kernel_launches");
    return 0;
}

// The simulated launch stubs' scratch buffers: the runtime's own memory
// (CANN's stubs allocate it with aclrtMalloc, asc-devkit
// tools/build/asc_rt/ascendc_runtime.cpp AllocAscendMemDevice), counted
// apart from the application's aclrtMalloc calls.
TASIM_EXPORT uint32_t tasim_launch_malloc(void **devPtr, uint64_t size, int policy)
{
    return static_cast<uint32_t>(Allocate(devPtr, size_t(size), policy, true));
}

TASIM_EXPORT uint32_t tasim_launch_free(void *devPtr) { return static_cast<uint32_t>(Release(devPtr, true)); }

// Events (acl/acl_rt.h; hicann/runtime docs/zh/api_ref, event management).
// Work runs at once on the CPU, so an event recorded on a stream that is
// not held completes at once; one recorded on a held stream completes when
// tasim_release_stream releases that stream.

namespace {

Event *FindEvent(aclrtEvent e)
{
    Event *ev = static_cast<Event *>(e);
    return Proc().events.count(ev) != 0 ? ev : nullptr;
}

bool EventDone(const Event &e)
{
    if (!e.recorded || e.held_stream == nullptr) {
        return true;
    }
    // A stream destroyed since then has nothing left to run.
    if (Proc().streams.count(e.held_stream) == 0 &&
        e.held_stream != &DeviceOf(e.device).default_stream) {
        return true;
    }
    return e.held_stream->releases != e.release;
}

} // namespace

TASIM_EXPORT aclError aclrtCreateEvent(aclrtEvent *event)
{
    aclError code;
    if (!Ready("aclrtCreateEvent", &code)) {
        return code;
    }
    if (event == nullptr) {
        return Fail(kInvalidParam, "aclrtCreateEvent: null event pointer");
    }
    Lock lock(Proc().mu);
    Event *e = new Event();
    e->device = Me().device;
    Proc().events.insert(e);
    Count("aclrtCreateEvent");
    *event = e;
    return kSuccess;
}

TASIM_EXPORT aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)
{
    aclError code;
    if (!Ready("aclrtRecordEvent", &code)) {
        return code;
    }
    Lock lock(Proc().mu);
    Event *e = FindEvent(event);
    if (e == nullptr) {
        return Fail(kInvalidParam, "aclrtRecordEvent: not a live event");
    }
    Stream *s = FindStream(stream);
    if (s == nullptr) {
        return Fail(kRtStreamContext, "aclrtRecordEvent: not a live stream");
    }
    e->recorded = true;
    e->device = s->device;
    e->held_stream = s->held ? s : nullptr;
    e->release = s->releases;
    Count("aclrtRecordEvent");
    if (s->held) {
        Count("events_recorded_held");
    }
    return kSuccess;
}

TASIM_EXPORT aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status)
{
    aclError code;
    if (!Ready("aclrtQueryEventStatus", &code)) {
        return code;
    }
    if (status == nullptr) {
        return Fail(kInvalidParam, "aclrtQueryEventStatus: null status pointer");
    }
    Lock lock(Proc().mu);
    Event *e = FindEvent(event);
    if (e == nullptr) {
        return Fail(kInvalidParam, "aclrtQueryEventStatus: not a live event");
    }
    const bool done = EventDone(*e);
    *status = done ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
    Count(done ? "event_queries_complete" : "event_queries_not_ready");
    return kSuccess;
}

TASIM_EXPORT aclError aclrtDestroyEvent(aclrtEvent event)
{
    Lock lock(Proc().mu);
    Event *e = FindEvent(event);
    if (e == nullptr) {
        return Fail(kInvalidParam, "aclrtDestroyEvent: not a live event");
    }
    if (!EventDone(*e)) {
        // CANN destroys it once its work completes; nothing waits for it.
        Count("destroy_pending_event");
    }
    Proc().events.erase(e);
    delete e;
    Count("aclrtDestroyEvent");
    return kSuccess;
}

// Holds `stream` (null: this thread's device's default stream): events
// recorded on it stay pending and aclrtSynchronizeStream on it is refused
// until tasim_release_stream. 0, or ACL_ERROR_RT_STREAM_CONTEXT for a
// stream that is not live.
TASIM_EXPORT aclError tasim_hold_stream(aclrtStream stream)
{
    Lock lock(Proc().mu);
    Stream *s = FindStream(stream);
    if (s == nullptr) {
        return Fail(kRtStreamContext, "tasim_hold_stream: not a live stream");
    }
    s->held = true;
    Count("holds");
    return kSuccess;
}

// Releases a held stream: its queued work completes, and with it every
// event recorded on it while held. Releasing a stream that is not held
// does nothing.
TASIM_EXPORT aclError tasim_release_stream(aclrtStream stream)
{
    Lock lock(Proc().mu);
    Stream *s = FindStream(stream);
    if (s == nullptr) {
        return Fail(kRtStreamContext, "tasim_release_stream: not a live stream");
    }
    if (s->held) {
        s->held = false;
        s->releases += 1;
        s->pending = 0;
        Count("releases");
    }
    return kSuccess;
}
