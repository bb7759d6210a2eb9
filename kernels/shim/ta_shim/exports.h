// The shim's C interface for test harnesses and the simulated ACL runtime.
// Include in exactly one translation unit of each shared library.
//
// Everything acts on the calling thread's state: the violations its
// launches recorded and the UB capacity its launches get.
#ifndef TA_SHIM_EXPORTS_H
#define TA_SHIM_EXPORTS_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cost.h"
#include "launch.h"
#include "state.h"

extern "C" {

// Rule violations recorded since the last ta_shim_reset.
TA_SHIM_EXPORT uint64_t ta_shim_violation_count(void) { return ta_shim::Core().violations; }

// Copies the violation messages (the first 64), one per line, into `buf`
// (NUL-terminated, truncated to `cap` bytes); returns the full length.
TA_SHIM_EXPORT size_t ta_shim_report(char *buf, size_t cap)
{
    std::string all;
    for (const std::string &m : ta_shim::Core().messages) {
        all += m;
        all += '\n';
    }
    if (buf != nullptr && cap > 0) {
        const size_t n = all.size() < cap - 1 ? all.size() : cap - 1;
        std::memcpy(buf, all.data(), n);
        buf[n] = '\0';
    }
    return all.size();
}

// Forgets recorded violations.
TA_SHIM_EXPORT void ta_shim_reset(void)
{
    ta_shim::Core().violations = 0;
    ta_shim::Core().messages.clear();
}

// Unified Buffer bytes a simulated core's kernel may reserve (default
// 188416: the 184 KiB TOTAL_VEC_LOCAL_SIZE of a 910B).
TA_SHIM_EXPORT void ta_shim_set_ub_capacity(uint32_t bytes) { ta_shim::Core().ub_capacity = bytes; }

TA_SHIM_EXPORT uint32_t ta_shim_ub_capacity(void) { return ta_shim::Core().ub_capacity; }

// The cost model's figures for this thread's last launch: an estimate from
// documented throughputs (ta_shim/cost.h), never a measurement. Pipes are
// indexed S, V, MTE2, MTE3.
struct ta_shim_cost {
    uint32_t blocks;
    uint32_t critical_block;
    double critical_cycles;
    double critical_busy[4];
    double total_busy[4];
    uint64_t critical_instructions[4];
    uint64_t total_instructions[4];
    uint64_t gm_bytes;
    // The critical block's vector-pipe cycles: repeats as if conflict-free,
    // extra cycles of UB bank conflicts, per-instruction issue.
    double vector_repeat_cycles;
    double bank_conflict_cycles;
    double issue_cycles;
};

TA_SHIM_EXPORT void ta_shim_last_cost(struct ta_shim_cost *out)
{
    const ta_shim::LaunchCost &c = ta_shim::Core().last_launch;
    out->blocks = c.blocks;
    out->critical_block = c.critical_block;
    out->critical_cycles = c.critical_cycles;
    for (int p = 0; p < ta_shim::kPipes; ++p) {
        out->critical_busy[p] = c.critical_busy[p];
        out->total_busy[p] = c.total_busy[p];
        out->critical_instructions[p] = c.critical_instructions[p];
        out->total_instructions[p] = c.total_instructions[p];
    }
    out->gm_bytes = c.gm_bytes;
    out->vector_repeat_cycles = c.vector_repeat_cycles;
    out->bank_conflict_cycles = c.bank_conflict_cycles;
    out->issue_cycles = c.issue_cycles;
}

// The model's parameters for a 910B2: clock (Hz), vector cores, HBM
// bandwidth (bytes/s).
TA_SHIM_EXPORT void ta_shim_cost_params(double *clock_hz, uint32_t *cores, double *hbm_bytes_per_s)
{
    *clock_hz = ta_shim::kClockHz;
    *cores = ta_shim::kVectorCores;
    *hbm_bytes_per_s = ta_shim::kHbmBytesPerSecond;
}

// The model's measured rates (ta_shim/cost.h): chip-wide read and write
// bandwidth (bytes/s) and the issue cycles of one vector instruction.
TA_SHIM_EXPORT void ta_shim_cost_rates(double *read_bytes_per_s, double *write_bytes_per_s, double *issue_cycles)
{
    *read_bytes_per_s = ta_shim::kReadBytesPerSecond;
    *write_bytes_per_s = ta_shim::kWriteBytesPerSecond;
    *issue_cycles = ta_shim::kIssueCycles;
}

} // extern "C"

#endif // TA_SHIM_EXPORTS_H
