// The launcher behind the aclrtlaunch_* entry points: runs a kernel body once
// per block index, then checks what the blocks did to global memory.
#ifndef TA_SHIM_LAUNCH_H
#define TA_SHIM_LAUNCH_H

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#endif

#include "cost.h"
#include "state.h"

#if defined(__GNUC__)
#define TA_SHIM_EXPORT __attribute__((visibility("default")))
#else
#define TA_SHIM_EXPORT
#endif

namespace ta_shim {

// Blocks of one launch run one after another, so a race between cores shows
// only as two blocks touching the same global bytes with at least one write.
inline void CheckCrossCore(const char *kernel)
{
    std::vector<GmAccess> &acc = Core().accesses;
    std::vector<GmAccess> writes;
    for (const GmAccess &a : acc) {
        if (a.write) {
            writes.push_back(a);
        }
    }
    std::sort(writes.begin(), writes.end(), [](const GmAccess &x, const GmAccess &y) { return x.lo < y.lo; });
    // Longest write, to bound how far back an overlapping write can start.
    uintptr_t longest = 0;
    for (const GmAccess &w : writes) {
        longest = std::max(longest, w.hi - w.lo);
    }
    for (const GmAccess &a : acc) {
        auto it = std::lower_bound(writes.begin(), writes.end(), a.lo > longest ? a.lo - longest : 0,
                                   [](const GmAccess &w, uintptr_t v) { return w.lo < v; });
        for (; it != writes.end() && it->lo < a.hi; ++it) {
            if (it->block != a.block && it->hi > a.lo) {
                Violation(Severity::kRecorded, "cross-core",
                          std::string(kernel) + ": block " + std::to_string(a.block) + " " +
                              (a.write ? "writes" : "reads") + " global bytes that block " +
                              std::to_string(it->block) +
                              " writes; cores run concurrently on the device");
                acc.clear();
                return;
            }
        }
    }
    acc.clear();
}

// Runs `body` for block indices 0..numBlocks-1 and returns 0, or
// kViolationCode when any rule was broken (the report says which), or
// kParamInvalidCode for an invalid block count.
template <typename Body>
uint32_t Launch(const char *kernel, uint32_t numBlocks, Body &&body)
{
    CoreState &c = Core();
    const uint64_t before = c.violations;
    if (numBlocks == 0 || numBlocks > 65535) {
        try {
            Violation(Severity::kRecorded, "launch",
                      std::string(kernel) + ": numBlocks " + std::to_string(numBlocks) +
                          " must lie in [1, 65535]");
        } catch (...) {
        }
        return kParamInvalidCode;
    }
    c.accesses.clear();
    c.last_launch = LaunchCost();
    for (uint32_t b = 0; b < numBlocks; ++b) {
        c.block_idx = b;
        c.block_num = numBlocks;
        c.flags.clear();
        // Every block is a core of its own, sharing HBM with the others.
        c.tl = Timeline();
        c.tl.read_bytes_per_cycle = GmBytesPerCycle(numBlocks, kReadBytesPerSecond);
        c.tl.write_bytes_per_cycle = GmBytesPerCycle(numBlocks, kWriteBytesPerSecond);
        c.in_kernel = true;
        bool stopped = false;
        try {
            ResetUb();
            body();
        } catch (const Fatal &) {
            stopped = true;
        }
        c.in_kernel = false;
        c.last_launch.Add(b, c.tl);
        if (stopped) {
            // An AI Core exception ends the whole kernel.
            c.accesses.clear();
            return kViolationCode;
        }
    }
    CheckCrossCore(kernel);
    return c.violations == before ? 0 : kViolationCode;
}

// A runtime's launch hook: CANN's generated aclrtlaunch_* code hands the
// kernel to the runtime it is linked with; the shim looks for the simulated
// runtime's `tasim_kernel_launch` in the process's global scope (where the
// Ascend backend loads the runtime) and, when present, lets it check the
// stream, count the launch and inject failures. Absent, launches run as
// before.
using RuntimeHook = uint32_t (*)(void *stream, const char *kernel, uint32_t numBlocks);

inline RuntimeHook FindRuntimeHook()
{
#if defined(__unix__) || defined(__APPLE__)
    return reinterpret_cast<RuntimeHook>(dlsym(RTLD_DEFAULT, "tasim_kernel_launch"));
#else
    return nullptr;
#endif
}

// Launch on `stream`: the runtime hook (if any) may refuse it with an error
// code, which is returned without running the kernel.
template <typename Body>
uint32_t Launch(const char *kernel, uint32_t numBlocks, void *stream, Body &&body)
{
    if (numBlocks != 0 && numBlocks <= 65535) {
        if (RuntimeHook hook = FindRuntimeHook()) {
            const uint32_t refused = hook(stream, kernel, numBlocks);
            if (refused != 0) {
                return refused;
            }
        }
    }
    return Launch(kernel, numBlocks, body);
}

} // namespace ta_shim

#endif // TA_SHIM_LAUNCH_H
