// tasim: a CPU simulation of the parts of the ACL runtime and the aclnn
// operator library that tensor-arena uses, for testing its Ascend backend
// on machines without CANN or an NPU. Host memory stands in for HBM.
//
// All state is per calling thread: each OS thread sees its own simulated
// process (initialisation, device, memory, streams, counters, faults), so
// tests running in parallel threads never see each other. An ACL context is
// per thread on a real device too; the backend keeps each device on the
// thread that opened it.
#ifndef TASIM_H
#define TASIM_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#if defined(__GNUC__)
#define TASIM_EXPORT extern "C" __attribute__((visibility("default")))
#else
#define TASIM_EXPORT extern "C"
#endif

typedef int aclError;
typedef int32_t aclnnStatus;
typedef void *aclrtStream;

namespace tasim {

// Codes from acl_base_rt.h, rt_error_codes.h and the aclnn docs.
constexpr aclError kSuccess = 0;
constexpr aclError kInvalidParam = 100000;      // ACL_ERROR_INVALID_PARAM
constexpr aclError kUninitialize = 100001;      // ACL_ERROR_UNINITIALIZE
constexpr aclError kRepeatInitialize = 100002;  // ACL_ERROR_REPEAT_INITIALIZE
constexpr aclError kRepeatFinalize = 100037;    // ACL_ERROR_REPEAT_FINALIZE
constexpr aclError kRtParamInvalid = 107000;    // ACL_ERROR_RT_PARAM_INVALID
constexpr aclError kRtInvalidDeviceId = 107001; // ACL_ERROR_RT_INVALID_DEVICEID
constexpr aclError kRtContextNull = 107002;     // ACL_ERROR_RT_CONTEXT_NULL
constexpr aclError kRtStreamContext = 107003;   // ACL_ERROR_RT_STREAM_CONTEXT
constexpr aclError kRtMemoryAllocation = 207001; // ACL_ERROR_RT_MEMORY_ALLOCATION
constexpr aclError kRtMemoryFree = 207002;      // ACL_ERROR_RT_MEMORY_FREE
constexpr aclnnStatus kNnParamNullptr = 161001; // ACLNN_ERR_PARAM_NULLPTR
constexpr aclnnStatus kNnParamInvalid = 161002; // ACLNN_ERR_PARAM_INVALID
constexpr aclnnStatus kNnRuntimeError = 361001; // ACLNN_ERR_RUNTIME_ERROR

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
    // Work queued since the last synchronisation. Everything executes at
    // once on the CPU; the count only exists to catch reads of results
    // that a real device may not have produced yet.
    uint64_t pending = 0;
};

struct State {
    bool initialized = false;
    int32_t device = -1;
    std::map<int32_t, int64_t> device_refs;
    uint32_t device_count = 1;
    uint32_t vector_cores = 8;
    uint64_t capacity = uint64_t(1) << 30;
    uint64_t system_reserved = 0;
    uint64_t in_use = 0;
    struct Alloc {
        uint64_t size;    // bytes asked for (the range kernels may touch)
        uint64_t charged; // bytes taken from capacity (ACL's +32 rule)
    };
    // Live allocations by start address.
    std::map<uintptr_t, Alloc> allocations;
    std::set<Stream *> streams;
    Stream default_stream;
    std::map<std::string, uint64_t> counters;
    Fault fail_malloc, fail_memcpy, fail_launch, fail_op, fail_sync;
    std::string last_error;
    std::string returned_error;

    ~State();
};

State &St();

// Adds to a named counter (see README.md for the names).
inline void Count(const char *name, uint64_t n = 1) { St().counters[name] += n; }

// Records `message` as the recent error message and returns `code`.
int32_t Fail(int32_t code, const std::string &message);

// Whether [p, p + bytes) lies inside one live allocation.
bool IsDevice(const void *p, uint64_t bytes);

// The stream `s` names (null: the default stream), or null if it is not live.
Stream *FindStream(aclrtStream s);

// Work queued on any stream and not yet synchronised.
uint64_t PendingWork();

// Whether ACL is initialised and a device set on this thread; if not,
// records the error and stores its code in *code.
bool Ready(const char *op, aclError *code);

} // namespace tasim

#endif // TASIM_H
