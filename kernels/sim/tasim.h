// tasim: a CPU simulation of the parts of the ACL runtime and the aclnn
// operator libraries that tensor-arena uses, for testing its Ascend backend
// on machines without CANN or an NPU. Host memory stands in for HBM.
//
// State is split the way a real process splits it (README.md, "Process and
// threads"): initialisation, devices (their memory, reference counts and
// default streams), allocations and streams belong to the process and are
// shared by every thread; the current device, the error-message stack, the
// counters and the armed faults belong to the calling thread, so tests
// running in parallel threads share one simulated HBM but each sees its own
// counters and trips only its own faults.
#ifndef TASIM_H
#define TASIM_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#if defined(__GNUC__)
#define TASIM_EXPORT extern "C" __attribute__((visibility("default")))
#define TASIM_SHARED __attribute__((visibility("default")))
#else
#define TASIM_EXPORT extern "C"
#define TASIM_SHARED
#endif

typedef int aclError;
typedef int32_t aclnnStatus;
typedef void *aclrtStream;
typedef void *aclrtEvent; // acl/acl_base_rt.h

// acl/acl_rt.h
typedef enum aclrtEventRecordedStatus {
    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
} aclrtEventRecordedStatus;

// Virtual memory management (acl/acl_rt.h and acl/acl_base_rt.h of
// hicann/runtime; hicann/runtime docs/zh/api_ref/25-04_Structs.md
// aclrtPhysicalMemProp, 25-02_Enumerations.md aclrtMemAttr).
typedef void *aclrtDrvMemHandle;
typedef enum aclrtMemHandleType {
    ACL_MEM_HANDLE_TYPE_NONE = 0,
} aclrtMemHandleType;
typedef enum aclrtMemAllocationType {
    ACL_MEM_ALLOCATION_TYPE_PINNED = 0,
} aclrtMemAllocationType;
typedef enum aclrtMemLocationType {
    ACL_MEM_LOCATION_TYPE_HOST = 0,
    ACL_MEM_LOCATION_TYPE_DEVICE,
} aclrtMemLocationType;
typedef struct aclrtMemLocation {
    uint32_t id;
    aclrtMemLocationType type;
} aclrtMemLocation;
typedef int aclrtMemAttr; // the C enum: ACL_DDR_MEM = 0 ... ACL_MEM_P2P_HUGE1G = 17
typedef struct aclrtPhysicalMemProp {
    aclrtMemHandleType handleType;
    aclrtMemAllocationType allocationType;
    aclrtMemAttr memAttr;
    aclrtMemLocation location;
    uint64_t reserve;
} aclrtPhysicalMemProp;
static_assert(sizeof(aclrtPhysicalMemProp) == 32, "acl_rt.h's layout: 3 enums, a location, a uint64_t");
typedef enum aclrtMemGranularityOptions {
    ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
    ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
    ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF = 0xFFFF,
} aclrtMemGranularityOptions;

namespace tasim {

// Codes from acl_base_rt.h, error_codes/rt_error_codes.h and the aclnn
// return-code table (hicann/opbase docs/en/api/nnopbase/opdev/aclnn_return_code/).
constexpr aclError kSuccess = 0;
constexpr aclError kInvalidParam = 100000;       // ACL_ERROR_INVALID_PARAM
constexpr aclError kUninitialize = 100001;       // ACL_ERROR_UNINITIALIZE
constexpr aclError kRepeatInitialize = 100002;   // ACL_ERROR_REPEAT_INITIALIZE
constexpr aclError kRepeatFinalize = 100037;     // ACL_ERROR_REPEAT_FINALIZE
constexpr aclError kRtParamInvalid = 107000;     // ACL_ERROR_RT_PARAM_INVALID
constexpr aclError kRtInvalidDeviceId = 107001;  // ACL_ERROR_RT_INVALID_DEVICEID
constexpr aclError kRtContextNull = 107002;      // ACL_ERROR_RT_CONTEXT_NULL
constexpr aclError kRtStreamContext = 107003;    // ACL_ERROR_RT_STREAM_CONTEXT
constexpr aclError kRtMemoryAllocation = 207001; // ACL_ERROR_RT_MEMORY_ALLOCATION
constexpr aclError kRtMemoryFree = 207002;       // ACL_ERROR_RT_MEMORY_FREE
constexpr aclError kRtInternalError = 507899;    // ACL_ERROR_RT_INTERNAL_ERROR
constexpr aclError kRtAicoreException = 507015;  // ACL_ERROR_RT_AICORE_EXCEPTION
constexpr aclnnStatus kNnParamNullptr = 161001;  // ACLNN_ERR_PARAM_NULLPTR
constexpr aclnnStatus kNnParamInvalid = 161002;  // ACLNN_ERR_PARAM_INVALID
constexpr aclnnStatus kNnRuntimeError = 361001;  // ACLNN_ERR_RUNTIME_ERROR
constexpr aclnnStatus kNnInner = 561000;         // ACLNN_ERR_INNER
constexpr aclnnStatus kNnInnerNullptr = 561103;  // ACLNN_ERR_INNER_NULLPTR

// aclrtMemMallocPolicy values (acl_rt.h).
constexpr int kHugeFirst = 0, kHugeOnly = 1, kNormalOnly = 2, kHugeFirstP2p = 3, kHugeOnlyP2p = 4,
              kNormalOnlyP2p = 5, kHuge1gOnly = 6, kHuge1gOnlyP2p = 7;

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr uint64_t kGiB = uint64_t(1) << 30;

// One armed fault: the `countdown`-th matching call from when it was armed
// fails with `code`.
struct Fault {
    uint64_t countdown = 0;
    int32_t code = 0;
    // Whether this call is the one that fails (and disarms).
    bool Trip(int32_t *out)
    {
        if (countdown == 0) {
            return false;
        }
        if (--countdown == 0) {
            *out = code;
            return true;
        }
        return false;
    }
};

struct Stream {
    int32_t device = 0;
    uint64_t owner = 0; // creating thread
    // Work queued since the last synchronisation. Everything executes at
    // once on the CPU; the count only exists to catch reads of results
    // that a real device may not have produced yet.
    uint64_t pending = 0;
    // Held by tasim_hold_stream: its work counts as not completed (events
    // recorded on it stay pending) until tasim_release_stream.
    bool held = false;
    // tasim_release_stream calls so far: an event recorded while the
    // stream was held completes once this moves past its value then.
    uint64_t releases = 0;
};

// An aclrtEvent: where and when it was last recorded.
struct Event {
    int32_t device = 0;
    bool recorded = false;
    // The stream it was recorded on, while it was held (null: recorded on
    // a stream that was not held, complete at once).
    Stream *held_stream = nullptr;
    uint64_t release = 0; // the stream's `releases` at the record
};

// One simulated NPU: its memory and the default context every thread that
// sets it shares.
struct Device {
    uint64_t capacity = 64 * kGiB;          // an Atlas 800T A2 910B2: 64 GB HBM
    uint64_t system_reserved = 300 * kMiB;  // the system's share, not reported
    uint64_t in_use = 0;                    // bytes charged by live allocations
    uint64_t peak = 0;
    uint32_t vector_cores = 48;             // 910B2 vector_core_cnt
    int64_t refs = 0;                       // aclrtSetDevice minus aclrtResetDevice, process-wide
    Stream default_stream;
};

// One aclrtMallocPhysical handle: device memory with no address until it
// is mapped. Its bytes live in a memfd, so a mapping shows the handle's own
// bytes (unmapping and mapping again elsewhere keeps them).
struct Physical {
    uint64_t size;    // bytes asked for (what aclrtMapMem must be given)
    uint64_t charged; // the size rounded up to the attribute's granularity
    uint64_t granularity;
    int32_t device;   // prop.location.id
    uint64_t owner;   // allocating thread
    int fd;           // the memfd holding the bytes
    uintptr_t mapped_at = 0; // where it is mapped (0: nowhere)
    bool freed = false;      // aclrtFreePhysical called while mapped
};

// One aclrtReserveMemAddress range: host address space reserved with
// PROT_NONE, into which handles are mapped (MAP_FIXED) and unmapped.
struct Range {
    uint64_t size;
    uint64_t owner; // reserving thread
    std::map<uintptr_t, Physical *> mappings; // by mapped address
};

struct Alloc {
    uint64_t size;    // bytes asked for (the range kernels may touch)
    uint64_t charged; // bytes taken from the device (alignment, pages)
    int32_t device;
    uint64_t owner;   // allocating thread
    bool launch;      // a launch stub's scratch buffer
};

// What the process shares. Every access holds `mu`.
struct Process {
    std::recursive_mutex mu;
    int64_t init_refs = 0;     // aclInit calls not yet finalised
    uint32_t device_count = 8; // an 8-NPU server
    std::map<int32_t, Device> devices;
    std::map<uintptr_t, Alloc> allocations;
    std::set<Stream *> streams;
    std::set<Event *> events;
    std::set<const void *> executors;
    std::set<Physical *> physicals;
    std::map<uintptr_t, Range> ranges; // by base
    ~Process();
};

// What belongs to the calling thread.
struct Thread {
    uint64_t id = 0;
    int32_t device = -1; // set by aclrtSetDevice on this thread
    std::map<int32_t, int64_t> device_refs; // this thread's sets minus resets
    std::map<std::string, uint64_t> counters;
    Fault fail_malloc, fail_memcpy, fail_launch, fail_op, fail_sync, fail_launch_malloc, refuse_repeatable,
        fail_physical, fail_map;
    std::vector<std::string> errors; // oldest first; aclGetRecentErrMsg returns newest first
    std::string returned;            // what the last aclGetRecentErrMsg handed out
};

TASIM_SHARED Process &Proc();
TASIM_SHARED Thread &Me();
TASIM_SHARED Device &DeviceOf(int32_t id); // caller holds Proc().mu

// Adds to a named counter of this thread (see README.md for the names).
inline void Count(const char *name, uint64_t n = 1) { Me().counters[name] += n; }

// Pushes `message` on this thread's error stack and returns `code`.
TASIM_SHARED int32_t Fail(int32_t code, const std::string &message);

// Whether [p, p + bytes) lies inside one live allocation, or inside one
// reserved range in mapped memory only.
TASIM_SHARED bool IsDevice(const void *p, uint64_t bytes);

// Why [p, p + bytes) is not device memory ("" when it is): outside every
// allocation and range, or in a reserved range where some of it is not
// mapped (counted as "unmapped_accesses").
TASIM_SHARED std::string NotDevice(const void *p, uint64_t bytes);

// `p` as 0x... for messages.
TASIM_SHARED std::string Hex(const void *p);

// Unmaps and returns what the process still holds of reserved ranges and
// physical handles (at exit, vmm.cpp).
void ReleaseVmm(Process &p);

// The stream `s` names (null: the current device's default stream), or
// null if it is not live. Caller holds Proc().mu.
TASIM_SHARED Stream *FindStream(aclrtStream s);

// Work the calling thread queued on its streams of `device` and has not
// synchronised (what one of its copies or frees could race with; other
// threads' streams work on their own memory). Caller holds Proc().mu.
TASIM_SHARED uint64_t PendingWork(int32_t device);

// Whether ACL is initialised and a device set on this thread; if not,
// records the error and stores its code in *code.
TASIM_SHARED bool Ready(const char *op, aclError *code);

// Bytes an allocation of `size` with `policy` takes from the device.
TASIM_SHARED uint64_t Charged(uint64_t size, int policy);

// The allocation behind aclrtMalloc and the launch stubs' scratch buffers.
TASIM_SHARED aclError Allocate(void **devPtr, size_t size, int policy, bool launch);
TASIM_SHARED aclError Release(void *devPtr, bool launch);

} // namespace tasim

#endif // TASIM_H
