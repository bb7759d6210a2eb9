// Shared pieces of tensor-arena's AscendC kernels: the per-core split, tile
// copies that handle ragged tails, and Philox4x32-10 on the scalar unit.
//
// Tiling contract (every kernel): element e of the call belongs to core
// e / blockLength; a core walks its elements in tiles of tileLength
// (rounded down to a multiple of kAlign, at least kAlign). Vector
// instructions run on the tile count rounded up to kAlign, so every Compare
// covers whole 256-byte repeats; the extra lanes hold stale UB data and are
// never copied out.
#ifndef TA_COMMON_H
#define TA_COMMON_H

#include "kernel_operator.h"

#ifndef TA_SHIM_SCALAR_WORK
#define TA_SHIM_SCALAR_WORK(n)
#endif

namespace ta {

using namespace AscendC;

constexpr int32_t kBufferNum = 2;
// 64 floats = 256 bytes: one vector repeat, a whole number of 32-byte blocks
// for every element type.
constexpr uint32_t kAlign = 64;
constexpr uint32_t kBlockBytes = 32;

__aicore__ inline uint32_t AlignUp(uint32_t n, uint32_t a) { return (n + a - 1) / a * a; }

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

// Philox4x32-10 (Salmon et al., SC'11) on counter c and key (k0, k1), in
// place. The 32x32->64 products need the scalar unit: A2/A3 vector units
// have no widening multiply.
__aicore__ inline void Philox10(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    constexpr uint64_t kM0 = 0xD2511F53u;
    constexpr uint64_t kM1 = 0xCD9E8D57u;
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint64_t p0 = kM0 * c[0];
        const uint64_t p1 = kM1 * c[2];
        const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0;
        const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = static_cast<uint32_t>(p1);
        c[2] = n2;
        c[3] = static_cast<uint32_t>(p0);
    }
}

// dst[i] = word(first + i) >> 8 for i < n, where word(g) is word g % 4 of
// the Philox block with counter (g / 4 lo, g / 4 hi, 0, 0) under key
// (seed lo, seed hi), stream positions wrapping at 2^64 (RNG.md). The 24-bit
// values are exact as int32 and as float.
__aicore__ inline void FillStreamBits(const LocalTensor<int32_t> &dst, uint32_t n, uint64_t seed,
                                      uint64_t first)
{
    const uint32_t k0 = static_cast<uint32_t>(seed);
    const uint32_t k1 = static_cast<uint32_t>(seed >> 32);
    uint64_t g = first;
    uint32_t i = 0;
    while (i < n) {
        const uint64_t block = g >> 2;
        uint32_t c[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0};
        Philox10(c, k0, k1);
        // Scalar instructions per block at one per cycle, fully unrolled:
        // Philox rounds 2 multiplies + 2 shifts + 4 xors (+ 2 key adds
        // after round 0) = 98, block index and counter setup 3.
        TA_SHIM_SCALAR_WORK(101);
        for (uint32_t w = static_cast<uint32_t>(g & 3); w < 4 && i < n; ++w, ++i, ++g) {
            dst.SetValue(i, static_cast<int32_t>(c[w] >> 8));
            // Per element besides the store: >> 8, three increments, two
            // compares and a branch.
            TA_SHIM_SCALAR_WORK(6);
        }
    }
}

// Orders the scalar unit after every vector instruction issued so far, so
// it may overwrite UB the vector unit was reading.
__aicore__ inline void VectorToScalar()
{
    const event_t id = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::V_S));
    SetFlag<HardEvent::V_S>(id);
    WaitFlag<HardEvent::V_S>(id);
}

// Orders vector instructions after the scalar unit's UB writes.
__aicore__ inline void ScalarToVector()
{
    const event_t id = static_cast<event_t>(GetTPipePtr()->FetchEventID(HardEvent::S_V));
    SetFlag<HardEvent::S_V>(id);
    WaitFlag<HardEvent::S_V>(id);
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

// The random kernels' comparison: u < p with u = bits * 2^-24 is
// bits < p * 2^24, and p * 2^24 is exact in float (a power-of-two scaling
// of a value in [0, 1]), as is every 24-bit `bits`.
__aicore__ inline float StreamThreshold(float p) { return p * 16777216.0f; }

} // namespace ta

#endif // TA_COMMON_H
