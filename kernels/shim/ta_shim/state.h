// Per-core state of the simulated AI Core and the rule-violation log.
//
// A launch runs the kernel body once per block index on the calling thread,
// so all state is thread-local: test threads running kernels at the same
// time do not see each other's violations or Unified Buffer settings.
#ifndef TA_SHIM_STATE_H
#define TA_SHIM_STATE_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cost.h"
#include "timeline.h"

namespace ta_shim {

// Unified Buffer of an Atlas A2 (910B, arch 2201) vector core that kernels
// may reserve: 184 KiB of its 192 KiB (asc-devkit
// impl/basic_api/utils/kernel_utils_constants.h, TOTAL_VEC_LOCAL_SIZE; the
// other 8 KiB are the scratch Select modes 1 and 2 use, per the Select page
// of docs/zh/api).
constexpr uint32_t kDefaultUbBytes = 184 * 1024;
// kBlockBytes and kRepeatBytes: cost.h.
// What aclrtlaunch_* returns after a rule violation (the code an AI Core
// exception has in the ACL runtime).
constexpr uint32_t kViolationCode = 507015;
// What it returns for invalid launch parameters (ACL_ERROR_RT_PARAM_INVALID).
constexpr uint32_t kParamInvalidCode = 107000;
// Messages kept per thread; the count goes on past it.
constexpr size_t kMaxMessages = 64;

// Thrown by a fatal violation: the hardware would fault, hang or corrupt
// memory, so the block stops there.
struct Fatal {
};

// One global-memory access of a block, kept to find races between cores.
struct GmAccess {
    uintptr_t lo;
    uintptr_t hi;
    uint32_t block;
    bool write;
};

struct CoreState {
    uint32_t block_idx = 0;
    uint32_t block_num = 1;
    bool in_kernel = false;
    uint32_t ub_capacity = kDefaultUbBytes;
    // The simulated UB of the running core (each block gets it fresh).
    std::unique_ptr<uint8_t[], void (*)(void *)> ub{nullptr, std::free};
    uint32_t ub_allocated = 0;
    // The running block's pipes: sync state and cycle counts.
    Timeline tl;
    // Flags set and not yet waited for: (event << 8 | id) and what they carry.
    std::vector<std::pair<uint32_t, SyncToken>> flags;
    std::vector<GmAccess> accesses;
    uint64_t violations = 0;
    std::vector<std::string> messages;
    // The cost model's figures for the last launch on this thread.
    LaunchCost last_launch;
};

inline thread_local CoreState tls_core;

inline CoreState &Core() { return tls_core; }

enum class Severity {
    // The hardware would carry on with a different result (a rounded-down
    // copy, a missing sync): recorded, and the kernel goes on.
    kRecorded,
    // The hardware would fault or hang: recorded, and the block stops.
    kFatal,
};

inline bool AbortOnViolation()
{
    const char *v = std::getenv("TA_SHIM_ABORT");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
}

// Records a broken rule. `rule` is a short tag tests can search for.
inline void Violation(Severity severity, const char *rule, const std::string &what)
{
    CoreState &c = Core();
    std::string msg = "[" + std::string(rule) + "] ";
    if (c.in_kernel) {
        msg += "block " + std::to_string(c.block_idx) + "/" + std::to_string(c.block_num) + ": ";
    }
    msg += what;
    if (severity == Severity::kFatal) {
        msg += " (fatal: the block stops here)";
    }
    c.violations += 1;
    if (c.messages.size() < kMaxMessages) {
        c.messages.push_back(msg);
    }
    if (AbortOnViolation()) {
        std::fprintf(stderr, "AscendC shim: %s\n", msg.c_str());
        std::abort();
    }
    if (severity == Severity::kFatal) {
        throw Fatal{};
    }
}

inline uint32_t AlignUp(uint64_t n, uint32_t a)
{
    return static_cast<uint32_t>((n + a - 1) / a * a);
}

// Gives the running core a fresh Unified Buffer filled with 0xFF bytes, so
// reading memory that was never written shows up as NaN (or -1).
inline void ResetUb()
{
    CoreState &c = Core();
    const uint32_t bytes = AlignUp(c.ub_capacity == 0 ? kBlockBytes : c.ub_capacity, 64);
    c.ub.reset(static_cast<uint8_t *>(std::aligned_alloc(64, bytes)));
    if (!c.ub) {
        Violation(Severity::kFatal, "ub-capacity",
                  "cannot allocate a simulated UB of " + std::to_string(bytes) + " bytes");
    }
    std::memset(c.ub.get(), 0xFF, bytes);
    c.ub_allocated = 0;
}

} // namespace ta_shim

#endif // TA_SHIM_STATE_H
