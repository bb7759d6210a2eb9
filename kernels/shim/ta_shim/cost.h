// The shim's cost model: cycles per instruction from the documented
// throughputs, per core and per pipe, for an Atlas A2 Ascend 910B2.
//
// An ESTIMATE, not a measurement: it has never been compared with a real
// NPU. It counts what the AscendC documentation states (instruction
// throughputs, one scalar instruction per cycle at best, the chip's clock
// and core count, the UB bank-group rule of arch 2201) and what one public
// A2 measurement gives (the per-instruction issue cost and the read and
// write bandwidths of asc-devkit's add_high_performance example), and lets
// pipes overlap exactly as far as the kernel's handshakes allow
// (timeline.h). It does not model pipeline latencies, the drain a
// PipeBarrier costs, DMA start-up latency, read-write bank conflicts, L2
// hit rates beyond what the measured bandwidths contain, or
// instruction-queue limits. It is a model: a real device may be slower or
// faster than it says.
#ifndef TA_SHIM_COST_H
#define TA_SHIM_COST_H

#include <algorithm>
#include <cstdint>

#include "timeline.h"

namespace ta_shim {

// UB operands start on 32-byte boundaries (one bank row); DataCopy moves
// 32-byte blocks.
constexpr uint32_t kBlockBytes = 32;
// One vector repeat reads 256 bytes; Compare counts must cover whole repeats.
constexpr uint32_t kRepeatBytes = 256;

// AI Core clock of a 910B2: 1800 MHz, CANN's platform file
// `<arch>-linux/data/platform_config/Ascend910B2.ini`, [AICoreSpec]
// cube_freq=1800 (the vector cores share the clock; Atlas A2 "频率 1.8" in
// hicann/ops-nn docs/zh/develop/cross_platform_migration_guide.md).
constexpr double kClockHz = 1.8e9;
// Vector (AIV) cores of a 910B2: Ascend910B2.ini [SoCInfo]
// vector_core_cnt=48.
constexpr uint32_t kVectorCores = 48;
// HBM bandwidth of an Atlas A2 (910B2): 1.6 TB/s, "Memory带宽 1.6TB/s" in
// hicann/ops-nn docs/zh/develop/cross_platform_migration_guide.md: the
// nominal figure the HBM bound of a kernel is stated against (the copies
// themselves run at the measured rates below).
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

// Per-instruction issue cost of a vector instruction, in cycles beyond its
// repeats: an ESTIMATE from the one public measurement that isolates it,
// asc-devkit examples/01_simd_cpp_api/05_best_practices/00_vector_compute/
// add_high_performance/README.md, case 6 on an Atlas A2: per core 86 Add
// instructions of 127 half repeats (8192 x 8192 halves over 48 cores,
// 16256 per instruction) took aiv_vec_time 6.954 us against the 5.904 us
// of their repeats at 1.85 GHz: (6.954 - 5.904) us x 1.85 GHz / 86 = 22.6
// cycles per instruction. Charged to the vector pipe for every vector
// instruction (the c220 Select in scalar mode issues three: below).
constexpr double kIssueCycles = 22.0;
// Global-memory bandwidth of the whole chip, per direction, from the same
// example (all 48 cores streaming): reads 1.456 TB/s (case 3, reads only,
// "读带宽 1.4560 TB/S"); writes 8192 x 8192 x 2 bytes in the 121.442 us of
// aiv_mte3_time of case 6 = 1.105 TB/s while the reads ran alongside
// (writes land in L2: the mixed figure, 2.35 TB/s, exceeds the nominal
// 1.6 TB/s HBM). MTE2 and MTE3 each get their own link at these rates.
constexpr double kReadBytesPerSecond = 1.456e12;
constexpr double kWriteBytesPerSecond = 8192.0 * 8192.0 * 2.0 / 121.442e-6;

// Global-memory bytes per cycle one core gets when `active` cores stream
// at once in one direction (`total` bytes/s for the chip): shared equally
// (no per-core DMA limit is modelled; none is documented).
inline double GmBytesPerCycle(uint32_t active, double total)
{
    const uint32_t cores = std::max<uint32_t>(1, std::min(active, kVectorCores));
    return total / kClockHz / static_cast<double>(cores);
}

// UB bank groups of arch 2201 (Atlas A2/A3): asc-devkit docs/zh/guide/
// 算子实践参考/SIMD算子性能优化/内存访问/避免UB的bank冲突/
// 避免bank冲突（NPU架构版本2201）.md: 192 KB in 48 banks of 128 rows of 32 B,
// 16 bank groups of 3 banks; row address / 32 mod 16 is the group (0x10000
// in bank 16, 0x10020 in bank 17, 0x20020 in bank 33, bank15/31/47 one
// group). The vector unit reads or writes one row per bank group per
// cycle, and one repeat reads its 256 bytes (8 rows) of each source at
// once (add_high_performance README, case 6: "vec指令一拍读取256B"), so two
// sources whose rows share groups take more than one cycle per repeat:
// the read-read conflict, measured there as 12.846 us -> 6.954 us once the
// second source moved by 256 B.
constexpr uint32_t kBankGroups = 16;

// Cycles of one repeat reading `blocks0` rows from row `row0` and `blocks1`
// from `row1`: the most reads any bank group serves.
inline uint32_t RepeatReadCycles(uint32_t row0, uint32_t blocks0, uint32_t row1, uint32_t blocks1)
{
    uint32_t load[kBankGroups] = {};
    for (uint32_t k = 0; k < blocks0; ++k) {
        load[(row0 + k) % kBankGroups] += 1;
    }
    for (uint32_t k = 0; k < blocks1; ++k) {
        load[(row1 + k) % kBankGroups] += 1;
    }
    uint32_t most = 1;
    for (uint32_t g = 0; g < kBankGroups; ++g) {
        most = std::max(most, load[g]);
    }
    return most;
}

// Repeat cycles of an instruction whose two sources of `bytes` each start
// at UB addresses a0 and a1 (32-byte aligned), with the read-read rule
// above. Without conflicts this is the repeat count. Every repeat moves
// both sources by 256 B (8 groups), which keeps their relative groups, so
// all whole repeats cost the same and only the last, partial one differs.
// Read-write conflicts (a source and the destination in one bank) are not
// charged: which repeat's write meets which repeat's read is pipeline
// timing no page gives.
inline double TwoSourceRepeatCycles(uint32_t a0, uint32_t a1, uint64_t bytes)
{
    const uint64_t whole = bytes / kRepeatBytes;
    const uint32_t tail = static_cast<uint32_t>((bytes % kRepeatBytes + kBlockBytes - 1) / kBlockBytes);
    const uint32_t per = kRepeatBytes / kBlockBytes;
    double cycles = 0;
    if (whole > 0) {
        cycles += static_cast<double>(whole) * RepeatReadCycles(a0 / kBlockBytes, per, a1 / kBlockBytes, per);
    }
    if (tail > 0) {
        const uint32_t shift = static_cast<uint32_t>(whole * per);
        cycles += RepeatReadCycles(a0 / kBlockBytes + shift, tail, a1 / kBlockBytes + shift, tail);
    }
    return std::max(cycles, 1.0);
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
    // The critical block's vector cycles: repeats as if conflict-free,
    // extra cycles of bank conflicts, issue cycles.
    double vector_repeat_cycles = 0;
    double bank_conflict_cycles = 0;
    double issue_cycles = 0;

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
            vector_repeat_cycles = tl.vector_repeat_cycles;
            bank_conflict_cycles = tl.bank_conflict_cycles;
            issue_cycles = tl.issue_cycles;
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
