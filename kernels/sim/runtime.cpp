// The ACL runtime entry points tensor-arena uses (acl/acl_rt.h,
// acl/acl_base_rt.h), on host memory, plus the launch hook kernel libraries
// call. See README.md for the behaviour modelled.
#include <cstdlib>
#include <cstring>
#include <string>

#include "tasim.h"

namespace tasim {

State::~State()
{
    // Whatever a thread leaked goes with it, so leak checkers report the
    // test's counters rather than this memory.
    for (auto &a : allocations) {
        std::free(reinterpret_cast<void *>(a.first));
    }
    for (Stream *s : streams) {
        delete s;
    }
}

State &St()
{
    static thread_local State state;
    return state;
}

int32_t Fail(int32_t code, const std::string &message)
{
    St().last_error = "[tasim] " + message + " (error " + std::to_string(code) + ")";
    return code;
}

bool IsDevice(const void *p, uint64_t bytes)
{
    const auto &all = St().allocations;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = all.upper_bound(a);
    if (it == all.begin()) {
        return false;
    }
    --it;
    return a >= it->first && a - it->first <= it->second.size && bytes <= it->second.size - (a - it->first);
}

Stream *FindStream(aclrtStream s)
{
    State &st = St();
    if (s == nullptr) {
        return &st.default_stream;
    }
    Stream *p = static_cast<Stream *>(s);
    return st.streams.count(p) != 0 ? p : nullptr;
}

uint64_t PendingWork()
{
    State &st = St();
    uint64_t n = st.default_stream.pending;
    for (Stream *s : st.streams) {
        n += s->pending;
    }
    return n;
}

bool Ready(const char *op, aclError *code)
{
    State &st = St();
    if (!st.initialized) {
        *code = Fail(kUninitialize, std::string(op) + ": aclInit has not been called");
        return false;
    }
    if (st.device < 0) {
        *code = Fail(kRtContextNull, std::string(op) + ": no device set on this thread (aclrtSetDevice)");
        return false;
    }
    return true;
}

} // namespace tasim

using namespace tasim;

TASIM_EXPORT aclError aclInit(const char *configPath)
{
    (void)configPath;
    State &st = St();
    Count("aclInit");
    if (st.initialized) {
        return Fail(kRepeatInitialize, "aclInit: already initialised");
    }
    st.initialized = true;
    return kSuccess;
}

TASIM_EXPORT aclError aclFinalize(void)
{
    State &st = St();
    Count("aclFinalize");
    if (!st.initialized) {
        return Fail(kRepeatFinalize, "aclFinalize: not initialised");
    }
    if (!st.allocations.empty() || !st.streams.empty()) {
        Count("finalize_with_live_resources");
    }
    st.initialized = false;
    return kSuccess;
}

TASIM_EXPORT const char *aclGetRecentErrMsg(void)
{
    State &st = St();
    if (st.last_error.empty()) {
        return nullptr;
    }
    // The pointer stays valid until the next call, as the header says.
    st.returned_error.swap(st.last_error);
    st.last_error.clear();
    return st.returned_error.c_str();
}

TASIM_EXPORT aclError aclrtGetDeviceCount(uint32_t *count)
{
    State &st = St();
    if (count == nullptr) {
        return Fail(kInvalidParam, "aclrtGetDeviceCount: null count");
    }
    if (!st.initialized) {
        return Fail(kUninitialize, "aclrtGetDeviceCount: aclInit has not been called");
    }
    *count = st.device_count;
    return kSuccess;
}

TASIM_EXPORT aclError aclrtSetDevice(int32_t deviceId)
{
    State &st = St();
    Count("aclrtSetDevice");
    if (!st.initialized) {
        return Fail(kUninitialize, "aclrtSetDevice: aclInit has not been called");
    }
    if (deviceId < 0 || static_cast<uint32_t>(deviceId) >= st.device_count) {
        return Fail(kRtInvalidDeviceId, "aclrtSetDevice: device " + std::to_string(deviceId) + " does not exist (" +
                                            std::to_string(st.device_count) + " simulated)");
    }
    st.device_refs[deviceId] += 1;
    st.device = deviceId;
    return kSuccess;
}

TASIM_EXPORT aclError aclrtResetDevice(int32_t deviceId)
{
    State &st = St();
    Count("aclrtResetDevice");
    auto it = st.device_refs.find(deviceId);
    if (it == st.device_refs.end() || it->second <= 0) {
        return Fail(kRtInvalidDeviceId, "aclrtResetDevice: device " + std::to_string(deviceId) + " is not set");
    }
    if (--it->second == 0) {
        if (!st.allocations.empty() || !st.streams.empty()) {
            Count("reset_with_live_resources");
        }
        if (st.device == deviceId) {
            st.device = -1;
        }
    }
    return kSuccess;
}

TASIM_EXPORT aclError aclGetDeviceCapability(uint32_t deviceId, int deviceInfo, int64_t *value)
{
    State &st = St();
    if (value == nullptr || deviceId >= st.device_count) {
        return Fail(kInvalidParam, "aclGetDeviceCapability: bad device or null value");
    }
    switch (deviceInfo) {
    case 0: // ACL_DEVICE_INFO_AI_CORE_NUM
        *value = st.vector_cores / 2 > 0 ? st.vector_cores / 2 : 1;
        return kSuccess;
    case 1: // ACL_DEVICE_INFO_VECTOR_CORE_NUM
        *value = st.vector_cores;
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
    Stream *s = new Stream();
    St().streams.insert(s);
    Count("aclrtCreateStream");
    *stream = s;
    return kSuccess;
}

TASIM_EXPORT aclError aclrtDestroyStream(aclrtStream stream)
{
    State &st = St();
    Stream *s = static_cast<Stream *>(stream);
    if (stream == nullptr || st.streams.count(s) == 0) {
        return Fail(kRtStreamContext, "aclrtDestroyStream: not a live stream");
    }
    if (s->pending != 0) {
        Count("destroy_stream_with_pending_work");
    }
    st.streams.erase(s);
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
    Stream *s = FindStream(stream);
    if (s == nullptr) {
        return Fail(kRtStreamContext, "aclrtSynchronizeStream: not a live stream");
    }
    Count("aclrtSynchronizeStream");
    s->pending = 0;
    int32_t injected;
    if (St().fail_sync.Trip(&injected)) {
        Count("injected_sync_failures");
        return Fail(injected, "aclrtSynchronizeStream: injected asynchronous failure of queued work");
    }
    return kSuccess;
}

TASIM_EXPORT aclError aclrtMalloc(void **devPtr, size_t size, int policy)
{
    aclError code;
    if (!Ready("aclrtMalloc", &code)) {
        return code;
    }
    State &st = St();
    if (devPtr == nullptr || size == 0) {
        return Fail(kInvalidParam, "aclrtMalloc: null pointer or zero size");
    }
    if (policy < 0 || policy > 7) {
        return Fail(kInvalidParam, "aclrtMalloc: policy " + std::to_string(policy) + " is not one value of aclrtMemMallocPolicy");
    }
    int32_t injected;
    if (st.fail_malloc.Trip(&injected)) {
        Count("injected_malloc_failures");
        return Fail(injected, "aclrtMalloc: injected failure for " + std::to_string(size) + " bytes");
    }
    // The A2/A3 rule: size rounded up to 32, plus 32.
    const uint64_t charged = ((uint64_t(size) + 31) / 32) * 32 + 32;
    const uint64_t limit = st.capacity > st.system_reserved ? st.capacity - st.system_reserved : 0;
    const uint64_t free_bytes = limit > st.in_use ? limit - st.in_use : 0;
    if (charged > free_bytes) {
        Count("failed_mallocs");
        return Fail(kRtMemoryAllocation, "aclrtMalloc: out of memory: " + std::to_string(size) + " bytes asked (" +
                                             std::to_string(charged) + " with padding), " +
                                             std::to_string(free_bytes) + " free");
    }
    void *p = std::aligned_alloc(64, ((charged + 63) / 64) * 64);
    if (p == nullptr) {
        return Fail(kRtMemoryAllocation, "aclrtMalloc: the host could not provide " + std::to_string(charged) + " bytes");
    }
    // Device memory is not zeroed; a recognisable pattern shows reads of
    // bytes nobody wrote.
    std::memset(p, 0xCD, charged);
    st.allocations[reinterpret_cast<uintptr_t>(p)] = State::Alloc{uint64_t(size), charged};
    st.in_use += charged;
    Count("aclrtMalloc");
    Count(("malloc_policy_" + std::to_string(policy)).c_str());
    Count("malloc_bytes", charged);
    if (st.in_use > st.counters["peak_bytes"]) {
        st.counters["peak_bytes"] = st.in_use;
    }
    *devPtr = p;
    return kSuccess;
}

TASIM_EXPORT aclError aclrtFree(void *devPtr)
{
    State &st = St();
    auto it = st.allocations.find(reinterpret_cast<uintptr_t>(devPtr));
    if (devPtr == nullptr || it == st.allocations.end()) {
        return Fail(kRtMemoryFree, "aclrtFree: not the start of a live allocation");
    }
    if (PendingWork() != 0) {
        // aclrtFree does not wait: queued kernels could still use the memory.
        Count("free_with_pending_work");
    }
    st.in_use -= it->second.charged;
    st.allocations.erase(it);
    std::free(devPtr);
    Count("aclrtFree");
    return kSuccess;
}

TASIM_EXPORT aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    aclError code;
    if (!Ready("aclrtMemset", &code)) {
        return code;
    }
    if (count > maxCount || !IsDevice(devPtr, maxCount)) {
        return Fail(kInvalidParam, "aclrtMemset: range is not inside one device allocation, or count > maxCount");
    }
    if (PendingWork() != 0) {
        Count("unsynchronized_copies");
    }
    std::memset(devPtr, value, count);
    Count("aclrtMemset");
    return kSuccess;
}

TASIM_EXPORT aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, int kind)
{
    aclError code;
    if (!Ready("aclrtMemcpy", &code)) {
        return code;
    }
    State &st = St();
    if (dst == nullptr || src == nullptr || count > destMax) {
        return Fail(kInvalidParam, "aclrtMemcpy: null pointer or count > destMax");
    }
    bool ok;
    switch (kind) {
    case 0: // host to host
        ok = true;
        break;
    case 1: // host to device
        ok = IsDevice(dst, count);
        break;
    case 2: // device to host
        ok = IsDevice(src, count);
        break;
    case 3: // device to device
        ok = IsDevice(dst, count) && IsDevice(src, count);
        break;
    default:
        return Fail(kInvalidParam, "aclrtMemcpy: kind " + std::to_string(kind) + " is not simulated");
    }
    if (!ok) {
        Count("bad_device_pointers");
        return Fail(kInvalidParam, "aclrtMemcpy: the device side is not inside one live allocation");
    }
    int32_t injected;
    if (st.fail_memcpy.Trip(&injected)) {
        Count("injected_memcpy_failures");
        return Fail(injected, "aclrtMemcpy: injected copy failure");
    }
    if (PendingWork() != 0) {
        // aclrtMemcpy is not ordered with any stream: on a device the
        // queued work may not have run (or may still read the bytes).
        Count("unsynchronized_copies");
    }
    std::memmove(dst, src, count);
    Count("aclrtMemcpy");
    Count("memcpy_bytes", count);
    return kSuccess;
}

TASIM_EXPORT aclError aclrtGetMemInfo(int attr, size_t *free, size_t *total)
{
    aclError code;
    if (!Ready("aclrtGetMemInfo", &code)) {
        return code;
    }
    if (free == nullptr || total == nullptr || attr < 0 || attr > 17) {
        return Fail(kInvalidParam, "aclrtGetMemInfo: null output or attribute out of range");
    }
    State &st = St();
    const uint64_t limit = st.capacity > st.system_reserved ? st.capacity - st.system_reserved : 0;
    *total = limit;
    *free = limit > st.in_use ? limit - st.in_use : 0;
    Count("aclrtGetMemInfo");
    Count(("mem_info_attr_" + std::to_string(attr)).c_str());
    return kSuccess;
}

// Called by a kernel library's aclrtlaunch_* functions before they run a
// kernel, as CANN's generated launch code calls into the runtime. Returns
// non-zero to refuse the launch.
TASIM_EXPORT uint32_t tasim_kernel_launch(void *stream, const char *kernel, uint32_t numBlocks)
{
    aclError code;
    const std::string name = kernel != nullptr ? kernel : "(unnamed)";
    if (!Ready(("launch of " + name).c_str(), &code)) {
        return static_cast<uint32_t>(code);
    }
    Stream *s = FindStream(stream);
    if (s == nullptr) {
        Count("bad_streams");
        return static_cast<uint32_t>(Fail(kRtStreamContext, "launch of " + name + ": not a live stream"));
    }
    int32_t injected;
    if (St().fail_launch.Trip(&injected)) {
        Count("injected_launch_failures");
        return static_cast<uint32_t>(Fail(injected, "launch of " + name + " on " + std::to_string(numBlocks) +
                                                         " cores: injected kernel failure"));
    }
    s->pending += 1;
    Count("kernel_launches");
    return 0;
}
