// Shared pieces of tensor-arena's AscendC kernels: the per-core split,
// tile copies that handle ragged tails, half-type conversions, and the
// macros that make every kernel's extern "C" entry points.
//
// Tiling contract (every kernel): element e of the call belongs to core
// e / blockLength; a core walks its elements in tiles of tileLength
// (rounded down to a multiple of kAlign, at least kAlign). Vector
// instructions run on the tile count rounded up to kAlign; the extra lanes
// hold stale UB data and are never copied out.
#ifndef TA_COMMON_H
#define TA_COMMON_H

#include "kernel_operator.h"

namespace ta {

using namespace AscendC;

constexpr int32_t kBufferNum = 2;
// 64 floats = 256 bytes: one vector repeat, a whole number of 32-byte blocks
// for every element type.
constexpr uint32_t kAlign = 64;
constexpr uint32_t kBlockBytes = 32;

__aicore__ inline uint32_t AlignUp(uint32_t n, uint32_t a) { return (n + a - 1) / a * a; }

// UB bank groups on arch 2201 (the "避免bank冲突（NPU架构版本2201）" guide
// page of asc-devkit): group = (address / 32) mod 16, so addresses 512 bytes
// apart share a group, and a vector repeat reading its two sources from
// the same groups takes twice the cycles. Two sources 256 bytes apart (mod
// 512) use disjoint groups.
constexpr uint32_t kBankPeriod = 512;
constexpr uint32_t kHalfBankPeriod = 256;

// Bytes to reserve before a buffer so that it starts half a bank period
// (mod 512) after a buffer whose start lies `gap` bytes before it
// otherwise: 0 when it already does.
__aicore__ inline uint32_t BankShiftPad(uint32_t gap)
{
    return (kHalfBankPeriod + kBankPeriod - gap % kBankPeriod) % kBankPeriod;
}

// The elements [start, start + length) of the call that this core owns.
struct CoreRange {
    uint64_t start;
    uint64_t length;
};

__aicore__ inline CoreRange OwnRange(uint64_t totalLength, uint64_t blockLength)
{
    CoreRange r{0, 0};
    const uint64_t idx = static_cast<uint64_t>(GetBlockIdx());
    if (blockLength == 0 || idx >= (totalLength + blockLength - 1) / blockLength) {
        return r;
    }
    r.start = idx * blockLength;
    const uint64_t left = totalLength - r.start;
    r.length = left < blockLength ? left : blockLength;
    return r;
}

__aicore__ inline uint32_t TileOf(uint32_t tileLength)
{
    const uint32_t t = tileLength / kAlign * kAlign;
    return t == 0 ? kAlign : t;
}

// GM -> UB for n elements: whole 32-byte blocks with DataCopy, a ragged
// count with DataCopyPad (DataCopy would round it down).
template <typename T>
__aicore__ inline void CopyIn(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t n)
{
    if ((n * sizeof(T)) % kBlockBytes == 0) {
        DataCopy(dst, src, n);
    } else {
        DataCopyExtParams params{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
        DataCopyPadExtParams<T> pad{false, 0, 0, 0};
        DataCopyPad(dst, src, params, pad);
    }
}

// UB -> GM for exactly n elements.
template <typename T>
__aicore__ inline void CopyOut(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t n)
{
    if ((n * sizeof(T)) % kBlockBytes == 0) {
        DataCopy(dst, src, n);
    } else {
        DataCopyExtParams params{1, static_cast<uint32_t>(n * sizeof(T)), 0, 0, 0};
        DataCopyPad(dst, src, params);
    }
}

// Widens m elements of a half/bfloat16 tile to float (exact).
template <typename T>
__aicore__ inline void Widen(const LocalTensor<float> &dst, const LocalTensor<T> &src, uint32_t m)
{
    Cast(dst, src, RoundMode::CAST_NONE, m);
}

// Rounds m floats to T, to nearest even.
template <typename T>
__aicore__ inline void Narrow(const LocalTensor<T> &dst, const LocalTensor<float> &src, uint32_t m)
{
    Cast(dst, src, RoundMode::CAST_RINT, m);
}

template <typename T>
constexpr bool kIsFloat = IsSameType<T, float>::value;

// y = keep ? x * scale : 0 for m elements, keep read from the Select mask
// bits (uint8 bytes or uint32 words: bit i is element i); halves computed
// in float in work (a VECCALC buffer of m floats, unused for float). The
// TBuf is taken by non-const reference: TBuf::Get is non-const in
// asc-devkit's kernel_tpipe.h.
template <typename T, typename Bits>
__aicore__ inline void ScaleThroughMask(const LocalTensor<T> &y, const LocalTensor<T> &x,
                                        const LocalTensor<Bits> &bits, TBuf<TPosition::VECCALC> &work,
                                        float scale, uint32_t m)
{
    if constexpr (kIsFloat<T>) {
        Muls(y, x, scale, m);
        PipeBarrier<PIPE_V>();
        Select(y, bits, y, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, m);
    } else {
        const LocalTensor<float> w = work.Get<float>();
        Widen(w, x, m);
        PipeBarrier<PIPE_V>();
        Muls(w, w, scale, m);
        PipeBarrier<PIPE_V>();
        Select(w, bits, w, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, m);
        PipeBarrier<PIPE_V>();
        Narrow(y, w, m);
    }
}

} // namespace ta

// Every kernel's extern "C" entry points, one per element type, come from
// these macros, one per launch signature (kernels/ascend/README.md).
// ascendc_library finds kernels in the preprocessed source, so the
// definitions the macros expand to get their aclrtlaunch_<name> stubs.
#define TA_RANDOM_KERNEL(name, Kernel, T)                                                                  \
    extern "C" __global__ __aicore__ void name(GM_ADDR x, float p, uint64_t seed, uint64_t offset,            \
                                               uint64_t totalLength, uint64_t blockLength, uint32_t tileLength) \
    {                                                                                                    \
        Kernel<T> op;                                                                                    \
        op.Init(x, p, seed, offset, totalLength, blockLength, tileLength);                               \
        op.Process();                                                                                    \
    }

#define TA_RANDOM_BITS_KERNEL(name, Kernel, T)                                                             \
    extern "C" __global__ __aicore__ void name(GM_ADDR x, GM_ADDR bits, float p, uint64_t seed, uint64_t offset, \
                                               uint64_t totalLength, uint64_t blockLength, uint32_t tileLength) \
    {                                                                                                     \
        Kernel<T> op;                                                                                     \
        op.Init(x, bits, p, seed, offset, totalLength, blockLength, tileLength);                          \
        op.Process();                                                                                     \
    }

#define TA_MASK_KERNEL(name, Kernel, T, M)                                                                  \
    extern "C" __global__ __aicore__ void name(GM_ADDR x, GM_ADDR mask, float scale, uint64_t totalLength,     \
                                               uint64_t blockLength, uint32_t tileLength)                     \
    {                                                                                                     \
        Kernel<T, M> op;                                                                                  \
        op.Init(x, mask, scale, totalLength, blockLength, tileLength);                                    \
        op.Process();                                                                                     \
    }

#define TA_BINARY_KERNEL(name, Kernel, T)                                                                   \
    extern "C" __global__ __aicore__ void name(GM_ADDR x, GM_ADDR y, uint64_t totalLength, uint64_t blockLength, \
                                               uint32_t tileLength)                                           \
    {                                                                                                     \
        Kernel<T, false> op;                                                                              \
        op.Init(x, y, 0.0f, totalLength, blockLength, tileLength);                                        \
        op.Process();                                                                                     \
    }

#define TA_SCALAR_KERNEL(name, Kernel, T)                                                                   \
    extern "C" __global__ __aicore__ void name(GM_ADDR x, float s, uint64_t totalLength, uint64_t blockLength,   \
                                               uint32_t tileLength)                                           \
    {                                                                                                     \
        Kernel<T, true> op;                                                                               \
        op.Init(x, nullptr, s, totalLength, blockLength, tileLength);                                     \
        op.Process();                                                                                     \
    }

#include "ta_kernel_list.h"

#endif // TA_COMMON_H
