// Virtual memory management: aclrtReserveMemAddress / aclrtReleaseMemAddress,
// aclrtMallocPhysical / aclrtFreePhysical, aclrtMapMem / aclrtUnmapMem and
// aclrtMemGetAllocationGranularity, with the declarations of CANN's
// acl/acl_rt.h (hicann/runtime include/external/acl/acl_rt.h) and the rules
// of hicann/runtime docs/zh/api_ref/11-04_virtual_memory_management.md
// ("11-04" below). Each rule names its source; what no page states is
// marked ASSUMPTION. README.md lists them.
//
// A reserved range is host address space reserved with PROT_NONE; a
// physical handle's bytes live in a memfd; aclrtMapMem maps that memfd into
// the range (MAP_FIXED | MAP_SHARED) and aclrtUnmapMem puts PROT_NONE back,
// so an unmapped byte is not readable by anything (the runtime's copies
// refuse it, a stray host access faults), and a handle mapped again shows
// its own bytes.
#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include "tasim.h"

using namespace tasim;
using Lock = std::lock_guard<std::recursive_mutex>;

namespace {

// aclrtMemAttr values (acl/acl_rt.h; 25-02_Enumerations.md).
constexpr int kDdrMem = 0, kHbmMem = 1, kDdrMemHuge = 2, kDdrMemNormal = 3, kDdrMemP2pHuge = 6,
              kDdrMemP2pNormal = 7, kHbmMemHuge1g = 10, kHbmMemP2pHuge1g = 11, kMemHuge1g = 14,
              kMemP2pHuge1g = 17;

// The granularity of a memory attribute: 1 GiB pages for the HUGE1G
// attributes, 2 MiB otherwise (25-02_Enumerations.md, aclrtMemAttr: "内存申请
// 粒度为2M" / "内存申请粒度为1G"; 11-04 aclrtMallocPhysical: ACL_HBM_MEM_NORMAL
// "接口内部会按照ACL_HBM_MEM_HUGE类型申请大页内存", normal memory is taken as
// huge pages; the Python API's mem_get_allocation_granularity page: "当前只
// 支持2M"). ASSUMPTION: the recommended granularity equals the minimum.
uint64_t Granularity(int attr)
{
    return attr == kHbmMemHuge1g || attr == kHbmMemP2pHuge1g || attr == kMemHuge1g || attr == kMemP2pHuge1g
               ? kGiB
               : 2 * kMiB;
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// What a 910B (Atlas A2) accepts as prop.memAttr for device memory (11-04,
// aclrtMallocPhysical: the attributes "当前仅支持" are listed; the DDR ones
// "仅支持Host内存"; ACL_MEM_P2P_HUGE1G / ACL_HBM_MEM_P2P_HUGE1G: "Atlas A2系列
// 产品不支持该类型"; ACL_DDR_MEM and ACL_HBM_MEM are not in the list).
const char *RefusedAttr(int attr)
{
    if (attr < kDdrMem || attr > kMemP2pHuge1g) {
        return "not an aclrtMemAttr value";
    }
    if (attr == kDdrMem || attr == kHbmMem) {
        return "ACL_DDR_MEM / ACL_HBM_MEM are aclrtGetMemInfo attributes, not supported by aclrtMallocPhysical";
    }
    if (attr == kDdrMemHuge || attr == kDdrMemNormal || attr == kDdrMemP2pHuge || attr == kDdrMemP2pNormal) {
        return "the DDR attributes are host memory only";
    }
    if (attr == kHbmMemP2pHuge1g || attr == kMemP2pHuge1g) {
        return "P2P 1 GiB pages are not supported on Atlas A2 (910B)";
    }
    return nullptr;
}

Physical *FindPhysical(aclrtDrvMemHandle h)
{
    Physical *p = static_cast<Physical *>(h);
    return Proc().physicals.count(p) != 0 ? p : nullptr;
}

// The range holding [a, a + len) whole, or null.
Range *RangeOf(uintptr_t a, uint64_t len, uintptr_t *base)
{
    auto &ranges = Proc().ranges;
    auto it = ranges.upper_bound(a);
    if (it == ranges.begin()) {
        return nullptr;
    }
    --it;
    if (a - it->first >= it->second.size || len > it->second.size - (a - it->first)) {
        return nullptr;
    }
    *base = it->first;
    return &it->second;
}

// Gives a handle's memory back to its device.
void Destroy(Physical *p)
{
    DeviceOf(p->device).in_use -= p->charged;
    close(p->fd);
    Proc().physicals.erase(p);
    delete p;
}

// Makes [a, a + len) PROT_NONE address space again (nothing behind it).
bool Unback(uintptr_t a, uint64_t len)
{
    void *r = mmap(reinterpret_cast<void *>(a), len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                   -1, 0);
    return r != MAP_FAILED;
}

std::string Bytes(uint64_t n) { return std::to_string(n) + " bytes"; }

} // namespace

namespace tasim {

void ReleaseVmm(Process &p)
{
    for (auto &r : p.ranges) {
        munmap(reinterpret_cast<void *>(r.first), r.second.size);
    }
    p.ranges.clear();
    for (Physical *h : p.physicals) {
        close(h->fd);
        delete h;
    }
    p.physicals.clear();
}

} // namespace tasim

// aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
//     aclrtMemGranularityOptions option, size_t *granularity)
TASIM_EXPORT aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop, aclrtMemGranularityOptions option,
                                                       size_t *granularity)
{
    aclError code;
    if (!Ready("aclrtMemGetAllocationGranularity", &code)) {
        return code;
    }
    if (prop == nullptr || granularity == nullptr) {
        return Fail(kInvalidParam, "aclrtMemGetAllocationGranularity: null prop or granularity");
    }
    if (option != ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM && option != ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
        return Fail(kInvalidParam, "aclrtMemGetAllocationGranularity: option " + std::to_string(int(option)) +
                                       " is neither MINIMUM (0) nor RECOMMENDED (1)");
    }
    *granularity = size_t(Granularity(prop->memAttr));
    Count("aclrtMemGetAllocationGranularity");
    return kSuccess;
}

// aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size,
//     const aclrtPhysicalMemProp *prop, uint64_t flags)
TASIM_EXPORT aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size, const aclrtPhysicalMemProp *prop,
                                          uint64_t flags)
{
    aclError code;
    if (!Ready("aclrtMallocPhysical", &code)) {
        return code;
    }
    Process &proc = Proc();
    Lock lock(proc.mu);
    Thread &me = Me();
    const std::string op = "aclrtMallocPhysical of " + Bytes(size);
    if (handle == nullptr || prop == nullptr || size == 0) {
        return Fail(kInvalidParam, op + ": null handle or prop, or zero size");
    }
    // acl_rt.h: flags "Currently unused, must be zero"; 11-04: "预留，当前只能
    // 设置为0".
    if (flags != 0) {
        return Fail(kInvalidParam, op + ": flags must be 0 (acl_rt.h: currently unused)");
    }
    // 25-04_Structs.md, aclrtPhysicalMemProp: handleType "当前仅支持
    // ACL_MEM_HANDLE_TYPE_NONE", allocationType "当前仅支持
    // ACL_MEM_ALLOCATION_TYPE_PINNED".
    if (prop->handleType != ACL_MEM_HANDLE_TYPE_NONE || prop->allocationType != ACL_MEM_ALLOCATION_TYPE_PINNED) {
        return Fail(kInvalidParam, op + ": handleType must be ACL_MEM_HANDLE_TYPE_NONE and allocationType "
                                        "ACL_MEM_ALLOCATION_TYPE_PINNED");
    }
    // The simulation has device memory only: host physical memory
    // (ACL_MEM_LOCATION_TYPE_HOST) is refused, a deliberate limit.
    if (prop->location.type != ACL_MEM_LOCATION_TYPE_DEVICE || prop->location.id >= proc.device_count) {
        return Fail(kInvalidParam, op + ": prop.location must be a device (ACL_MEM_LOCATION_TYPE_DEVICE) of the " +
                                       std::to_string(proc.device_count) + " simulated");
    }
    if (const char *why = RefusedAttr(prop->memAttr)) {
        return Fail(kInvalidParam, op + ": memAttr " + std::to_string(prop->memAttr) + ": " + why);
    }
    int32_t injected;
    if (me.fail_physical.Trip(&injected)) {
        Count("injected_physical_failures");
        return Fail(injected, op + ": injected failure");
    }
    const int32_t id = int32_t(prop->location.id);
    Device &d = DeviceOf(id);
    // 25-02_Enumerations.md, aclrtMemAttr: "不足2M的倍数，向上2M对齐" (1G for
    // the HUGE1G attributes): the size is charged in whole pages.
    const uint64_t g = Granularity(prop->memAttr);
    const uint64_t charged = RoundUp(size, g);
    const uint64_t limit = d.capacity > d.system_reserved ? d.capacity - d.system_reserved : 0;
    const uint64_t free_bytes = limit > d.in_use ? limit - d.in_use : 0;
    if (charged > free_bytes) {
        // ASSUMPTION: out of memory answers ACL_ERROR_RT_MEMORY_ALLOCATION
        // (207001) as aclrtMalloc does; no page names the code.
        Count("failed_physical_mallocs");
        return Fail(kRtMemoryAllocation, op + ": out of memory on device " + std::to_string(id) + " (" +
                                             Bytes(charged) + " charged, " + Bytes(free_bytes) + " free)");
    }
    const int fd = memfd_create("tasim-physical", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, off_t(charged)) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return Fail(kRtMemoryAllocation, op + ": the host could not provide a memfd: " + std::strerror(errno));
    }
    // Device memory is not zeroed: the recognisable pattern shows reads of
    // bytes nobody wrote (as aclrtMalloc's).
    void *fill = mmap(nullptr, charged, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fill == MAP_FAILED) {
        close(fd);
        return Fail(kRtMemoryAllocation, op + ": the host could not map the memfd: " + std::strerror(errno));
    }
    std::memset(fill, 0xCD, charged);
    munmap(fill, charged);
    Physical *p = new Physical{uint64_t(size), charged, g, id, me.id, fd};
    proc.physicals.insert(p);
    d.in_use += charged;
    if (d.in_use > d.peak) {
        d.peak = d.in_use;
    }
    Count("aclrtMallocPhysical");
    Count("physical_bytes", charged);
    *handle = p;
    return kSuccess;
}

// aclError aclrtFreePhysical(aclrtDrvMemHandle handle)
TASIM_EXPORT aclError aclrtFreePhysical(aclrtDrvMemHandle handle)
{
    Lock lock(Proc().mu);
    Physical *p = FindPhysical(handle);
    if (p == nullptr || p->freed) {
        Count("bad_physical_handles");
        return Fail(kInvalidParam, "aclrtFreePhysical: " + Hex(handle) + " is not a live aclrtMallocPhysical handle");
    }
    Count("aclrtFreePhysical");
    if (p->mapped_at != 0) {
        // 11-04, aclrtFreePhysical: "如果物理内存与虚拟内存之间存在映射关系，则此
        // 处不会实际释放物理内存。只有在调用aclrtUnmapMem接口取消该物理内存与虚拟
        // 内存的映射之后，物理内存才会被真正释放": the memory stays (and stays
        // charged) until the unmap. Counted: the backend never does it.
        Count("free_physical_while_mapped");
        p->freed = true;
        return kSuccess;
    }
    Destroy(p);
    return kSuccess;
}

// aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment,
//     void *expectPtr, uint64_t flags)
TASIM_EXPORT aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr,
                                             uint64_t flags)
{
    aclError code;
    if (!Ready("aclrtReserveMemAddress", &code)) {
        return code;
    }
    (void)flags; // 11-04: "预留参数，建议固定配置为0" (recommended, not required)
    Process &proc = Proc();
    Lock lock(proc.mu);
    const std::string op = "aclrtReserveMemAddress of " + Bytes(size);
    // 11-04: "size不能为0".
    if (virPtr == nullptr || size == 0) {
        return Fail(kInvalidParam, op + ": null virPtr or zero size");
    }
    // 11-04: alignment "预留，当前只能设置为0".
    if (alignment != 0) {
        return Fail(kInvalidParam, op + ": alignment must be 0 (reserved)");
    }
    // 11-04: a non-null expectPtr is an experimental feature ("试验特性 ...
    // 不支持应用于生产环境中"): not simulated, refused.
    if (expectPtr != nullptr) {
        return Fail(kInvalidParam, op + ": expectPtr must be null (a fixed address is experimental in CANN)");
    }
    // ASSUMPTION: the size is a whole number of 2 MiB pages (the granularity
    // is "可用作对齐、地址大小或地址映射的倍数", 11-04
    // aclrtMemGetAllocationGranularity; no page states what another size does).
    if (size % (2 * kMiB) != 0) {
        return Fail(kInvalidParam, op + ": not a multiple of the 2 MiB granularity");
    }
    // The base is aligned to 1 GiB for ranges of 1 GiB or more, else to
    // 2 MiB, as 11-04 requires of a caller's expectPtr ("若size小于1GB，
    // expectPtr需按2的n次方对齐；如果size大于1GB，expectPtr需按1GB对齐"), so
    // 1 GiB pages can be mapped at its base.
    const uint64_t align = size >= kGiB ? kGiB : 2 * kMiB;
    const uint64_t span = size + align;
    void *raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
        return Fail(kRtMemoryAllocation, op + ": the host has no address space left: " + std::strerror(errno));
    }
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t base = RoundUp(start, align);
    if (base > start) {
        munmap(raw, base - start);
    }
    if (start + span > base + size) {
        munmap(reinterpret_cast<void *>(base + size), start + span - (base + size));
    }
    proc.ranges[base] = Range{uint64_t(size), Me().id, {}};
    Count("aclrtReserveMemAddress");
    *virPtr = reinterpret_cast<void *>(base);
    return kSuccess;
}

// aclError aclrtReleaseMemAddress(void *virPtr)
TASIM_EXPORT aclError aclrtReleaseMemAddress(void *virPtr)
{
    Lock lock(Proc().mu);
    auto it = Proc().ranges.find(reinterpret_cast<uintptr_t>(virPtr));
    if (it == Proc().ranges.end()) {
        return Fail(kInvalidParam, "aclrtReleaseMemAddress: " + Hex(virPtr) +
                                       " is not the base of a range aclrtReserveMemAddress gave");
    }
    // 11-04, aclrtReleaseMemAddress: "若该虚拟内存与物理内存存在映射关系，则释放
    // 虚拟内存前，需调用aclrtUnmapMem接口取消该虚拟内存与物理内存的映射".
    if (!it->second.mappings.empty()) {
        Count("release_with_mappings");
        return Fail(kInvalidParam, "aclrtReleaseMemAddress: " + Hex(virPtr) + " still has " +
                                       std::to_string(it->second.mappings.size()) +
                                       " mapping(s): aclrtUnmapMem them first");
    }
    munmap(virPtr, it->second.size);
    Proc().ranges.erase(it);
    Count("aclrtReleaseMemAddress");
    return kSuccess;
}

// aclError aclrtMapMem(void *virPtr, size_t size, size_t offset,
//     aclrtDrvMemHandle handle, uint64_t flags)
TASIM_EXPORT aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags)
{
    aclError code;
    if (!Ready("aclrtMapMem", &code)) {
        return code;
    }
    Process &proc = Proc();
    Lock lock(proc.mu);
    const std::string op = "aclrtMapMem of " + Bytes(size) + " at " + Hex(virPtr);
    Physical *p = FindPhysical(handle);
    if (p == nullptr || p->freed) {
        Count("bad_physical_handles");
        return Fail(kInvalidParam, op + ": " + Hex(handle) + " is not a live aclrtMallocPhysical handle");
    }
    // 11-04, aclrtMapMem: offset "当前只能设置为0", flags "预留，当前只能设置为0"
    // (acl_rt.h: "Currently unused, must be zero").
    if (offset != 0 || flags != 0) {
        return Fail(kInvalidParam, op + ": offset and flags must be 0");
    }
    // 11-04, aclrtMapMem: "size必须与aclrtMallocPhysical接口的size参数值相同，
    // size必须与aclrtMemGetAllocationGranularity接口获取的
    // ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM对齐".
    if (size != p->size || size % p->granularity != 0) {
        return Fail(kInvalidParam, op + ": size must equal the handle's " + Bytes(p->size) +
                                       " (aclrtMallocPhysical) and be a multiple of its " + Bytes(p->granularity) +
                                       " granularity");
    }
    // ASSUMPTION (stated by CUDA's cuMemMap, not by CANN's pages): the
    // address is aligned to the granularity.
    const uintptr_t a = reinterpret_cast<uintptr_t>(virPtr);
    if (a % p->granularity != 0) {
        return Fail(kInvalidParam, op + ": the address is not aligned to the " + Bytes(p->granularity) +
                                       " granularity");
    }
    // 11-04, aclrtMapMem: virPtr lies in a range aclrtReserveMemAddress gave
    // ("这个地址不一定是起始地址，用户也可以根据起始地址自行偏移后，再映射").
    uintptr_t base = 0;
    Range *range = RangeOf(a, size, &base);
    if (range == nullptr) {
        Count("map_outside_ranges");
        return Fail(kInvalidParam, op + ": not inside one range aclrtReserveMemAddress gave");
    }
    // ASSUMPTION (CUDA's rule; CANN's pages say nothing): no byte of the
    // target is mapped already.
    auto next = range->mappings.lower_bound(a);
    const bool overlaps_next = next != range->mappings.end() && next->first < a + size;
    bool overlaps_prev = false;
    if (next != range->mappings.begin()) {
        auto prev = std::prev(next);
        overlaps_prev = prev->first + prev->second->size > a;
    }
    if (overlaps_next || overlaps_prev) {
        Count("double_maps");
        return Fail(kInvalidParam, op + ": some of it is mapped already (aclrtUnmapMem it first)");
    }
    // ASSUMPTION: a handle is mapped at one place at a time.
    if (p->mapped_at != 0) {
        return Fail(kInvalidParam, op + ": the handle is mapped already at " +
                                       Hex(reinterpret_cast<void *>(p->mapped_at)));
    }
    // 11-04, aclrtMapMem: one reserved range "不能同时与两个Device上申请的物理地址
    // 绑定".
    for (const auto &m : range->mappings) {
        if (m.second->device != p->device) {
            return Fail(kInvalidParam, op + ": the range already maps memory of device " +
                                           std::to_string(m.second->device) + ", this handle is on device " +
                                           std::to_string(p->device));
        }
    }
    int32_t injected;
    if (Me().fail_map.Trip(&injected)) {
        Count("injected_map_failures");
        return Fail(injected, op + ": injected failure");
    }
    void *r = mmap(virPtr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, p->fd, 0);
    if (r == MAP_FAILED) {
        Unback(a, size);
        return Fail(kRtInternalError, op + ": the host could not map the handle: " + std::strerror(errno));
    }
    range->mappings[a] = p;
    p->mapped_at = a;
    Count("aclrtMapMem");
    Count("mapped_bytes", size);
    return kSuccess;
}

// aclError aclrtUnmapMem(void *virPtr)
TASIM_EXPORT aclError aclrtUnmapMem(void *virPtr)
{
    Lock lock(Proc().mu);
    const uintptr_t a = reinterpret_cast<uintptr_t>(virPtr);
    uintptr_t base = 0;
    Range *range = RangeOf(a, 1, &base);
    // ASSUMPTION: virPtr is where aclrtMapMem mapped a handle (11-04 names
    // it "待取消映射的虚拟内存地址指针" and aclrtMemMapSelectedLink's notes
    // unmap one mapping per call).
    auto m = range == nullptr ? std::map<uintptr_t, Physical *>::iterator() : range->mappings.find(a);
    if (range == nullptr || m == range->mappings.end()) {
        Count("unmap_not_mapped");
        return Fail(kInvalidParam, "aclrtUnmapMem: nothing is mapped at " + Hex(virPtr) +
                                       " (not an address aclrtMapMem was given)");
    }
    Physical *p = m->second;
    // Queued work may still use the bytes: on a device it would fault.
    if (PendingWork(p->device) != 0) {
        Count("unmap_with_pending_work");
    }
    if (!Unback(a, p->size)) {
        return Fail(kRtInternalError, "aclrtUnmapMem: the host could not unmap " + Hex(virPtr) + ": " +
                                          std::strerror(errno));
    }
    range->mappings.erase(m);
    p->mapped_at = 0;
    Count("aclrtUnmapMem");
    if (p->freed) {
        // Freed while mapped: released now (11-04, aclrtFreePhysical).
        Destroy(p);
    }
    return kSuccess;
}

// Faults of this thread: the nth aclrtMallocPhysical / aclrtMapMem from now
// fails with `code`; 0 disarms.
TASIM_EXPORT void tasim_fail_malloc_physical(uint64_t nth, int32_t code) { Me().fail_physical = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_map(uint64_t nth, int32_t code) { Me().fail_map = Fault{nth, code}; }

// Called by the simulated launch stubs before a kernel runs: the kernel's
// first operand must be device memory for `bytes` (its element count: at
// least a byte each), a further operand for its first byte. A kernel
// touching an unmapped address of a reserved range faults on the device
// (an AI Core exception); the simulation refuses the launch with
// ACL_ERROR_RT_AICORE_EXCEPTION instead of letting the host fault.
// ASSUMPTION: the device reports it at the next synchronisation; here it
// is reported at the launch, with the address.
TASIM_EXPORT uint32_t tasim_check_operands(const char *kernel, const void *x, uint64_t bytes, const void *other)
{
    const std::string name = kernel != nullptr ? kernel : "(unnamed)";
    std::string why = x == nullptr ? "" : NotDevice(x, bytes);
    if (why.empty() && other != nullptr) {
        why = NotDevice(other, 1);
        why = why.empty() ? why : "operand " + Hex(other) + " " + why;
    } else if (!why.empty()) {
        why = "operand " + Hex(x) + " (" + Bytes(bytes) + ") " + why;
    }
    if (why.empty()) {
        return 0;
    }
    Count("bad_kernel_operands");
    return static_cast<uint32_t>(Fail(kRtAicoreException, "launch of " + name + ": " + why));
}
