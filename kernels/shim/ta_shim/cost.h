// The shim's cost model: cycles per instruction from the documented
// throughputs, per core and per pipe, for an Atlas A2 Ascend 910B2.
//
// An ESTIMATE, not a measurement: it has never been compared with a real
// NPU. It counts what the AscendC documentation states (instruction
// throughputs, one scalar instruction per cycle at best, the chip's clock,
// core count and HBM bandwidth) and lets pipes overlap exactly as far as the
// kernel's handshakes allow (timeline.h). It does not model pipeline
// latencies, the drain a PipeBarrier costs, DMA start-up latency, UB bank
// conflicts, L2 hits or instruction-queue limits: real figures will be
// slower, never faster, than an ideal kernel under these assumptions.
#ifndef TA_SHIM_COST_H
#define TA_SHIM_COST_H

#include <algorithm>
#include <cstdint>

#include "timeline.h"

namespace ta_shim {

// AI Core clock of a 910B2: 1800 MHz, CANN's platform file
// `<arch>-linux/data/platform_config/Ascend910B2.ini`, [AICoreSpec]
// cube_freq=1800 (the vector cores share the clock; Atlas A2 "频率 1.8" in
// hicann/ops-nn docs/zh/develop/cross_platform_migration_guide.md).
constexpr double kClockHz = 1.8e9;
// Vector (AIV) cores of a 910B2: Ascend910B2.ini [SoCInfo]
// vector_core_cnt=48.
constexpr uint32_t kVectorCores = 48;
// HBM bandwidth of an Atlas A2 (910B2): 1.6 TB/s, "Memory带宽 1.6TB/s" in
// hicann/ops-nn docs/zh/develop/cross_platform_migration_guide.md.
constexpr double kHbmBytesPerSecond = 1.6e12;

// Elements per cycle of the vector instructions the kernels use, from
// cannmirror/asc-devkit docs/zh/api/附录/Vector指令理论性能汇总.md, tables
// 3-15 (Atlas A2/A3). Every entry here is 256 bytes of the wider operand
// per cycle: table 3 (Add/Sub/Mul/Adds/Muls: half/int16 128, int32/float
// 64), table 4 (And/Or/Not 128 on 16-bit types; ShiftLeft/ShiftRight 128
// on 16-bit, 64 on 32-bit), table 6 (Compares half 128, float/int32 64;
// Select half 128, float 64), table 7 (Cast: uint8->half and half->uint8
// 128; half/bfloat16->float, float->half/bfloat16, int32->float 64), table
// 10 (Duplicate and CreateVecIndex 128 on 16-bit, 64 on 32-bit).
template <typename T>
constexpr double Rate256()
{
    return 256.0 / static_cast<double>(sizeof(T));
}

// Vector cycles of a level-2 instruction over `count` elements at `rate`
// elements per cycle: whole repeats, as the count mode issues them.
inline double VectorCycles(uint64_t count, double rate)
{
    const double repeats = static_cast<double>((count + static_cast<uint64_t>(rate) - 1) /
                                               static_cast<uint64_t>(rate));
    return std::max(repeats, 1.0);
}

// Global-memory bytes per cycle one core gets when `active` cores stream
// at once: the HBM bandwidth shared equally (no per-core DMA limit is
// modelled; none is documented).
inline double GmBytesPerCycle(uint32_t active)
{
    const uint32_t cores = std::max<uint32_t>(1, std::min(active, kVectorCores));
    return kHbmBytesPerSecond / kClockHz / static_cast<double>(cores);
}

// What one launch cost, by the model.
struct LaunchCost {
    uint32_t blocks = 0;
    // Cycles of the slowest block (the launch's critical path, all blocks
    // running concurrently on their own cores) and its index.
    double critical_cycles = 0;
    uint32_t critical_block = 0;
    // Busy cycles and instruction counts per pipe (S, V, MTE2, MTE3): of
    // the critical block, and summed over all blocks.
    double critical_busy[kPipes] = {0, 0, 0, 0};
    double total_busy[kPipes] = {0, 0, 0, 0};
    uint64_t critical_instructions[kPipes] = {0, 0, 0, 0};
    uint64_t total_instructions[kPipes] = {0, 0, 0, 0};
    uint64_t gm_bytes = 0;

    void Add(uint32_t block, Timeline &tl)
    {
        const double end = tl.End();
        if (blocks == 0 || end > critical_cycles) {
            critical_cycles = end;
            critical_block = block;
            for (int p = 0; p < kPipes; ++p) {
                critical_busy[p] = tl.pipe[p].busy;
                critical_instructions[p] = tl.pipe[p].count;
            }
        }
        for (int p = 0; p < kPipes; ++p) {
            total_busy[p] += tl.pipe[p].busy;
            total_instructions[p] += tl.pipe[p].count;
        }
        gm_bytes += tl.gm_bytes;
        blocks += 1;
    }
};

} // namespace ta_shim

#endif // TA_SHIM_COST_H
