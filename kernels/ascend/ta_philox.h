// Philox4x32-10 on the A2/A3 vector unit: the keep mask of a tile of a
// random kernel, as a bit mask Select can use, bit for bit the stream of
// docs/rng.md.
//
// Why this shape (kernels/ascend/README.md has the cost figures, all of
// them estimates of the shim's cost model):
// - The A2 vector unit has no uint32 multiply, no widening or high-half
//   multiply and no Xor in the basic API (the Mul/Muls, And/Or pages of
//   docs/zh/api/SIMD-API/基础API/ for Atlas A2). The 32x32->64 Philox
//   products are built from 16-bit limbs: four int32 Muls of a 16-bit limb
//   of the word by a 16-bit limb of the constant, whose products lie below
//   2^32, then shifts and adds. The pages list int32 for Mul/Muls and Add
//   but say nothing about overflow; a limb product at or above 2^31 and the
//   sums of limb terms rely on int32 results keeping their low 32 bits.
//   That is an ASSUMPTION no page states; CANN's own A2 Philox relies on
//   exactly it (hicann/ops-math random/sim_thread_exponential/op_kernel/
//   sim_thread_exponential.h, multiply_uint64: Mul<int32_t> of 16-bit
//   limbs, Add<int32_t> of the terms). No 32x32 product is ever formed.
// - Xor is (a | b) - (a & b): the two operands of the subtraction share no
//   borrow. And/Or run on uint16 views with twice the count (the c220 And
//   on 32-bit types processes only half the words). ShiftRight runs on
//   uint32 views (logical, the ShiftRight page).
// - Lanes are Philox blocks. Element i of a 32-element group takes word
//   (s + i) % 4 of block 8t + (s + i) / 4 of the tile (s = the first
//   element's word, t = the group), so the lanes are laid out as G
//   sub-arrays of W lanes (sub-array j holds blocks 8t + j), G = 8 (9 when
//   s > 0: a misaligned group touches 9 blocks). Then the mask word of
//   group t is a sum of shifted lane values at the same index t of each
//   sub-array: whole-vector instructions, no gather.
// - Every instruction of a round runs over all G * W lanes (round keys
//   are duplicated over all lanes each round rather than applied
//   sub-array by sub-array): the issue cost of an instruction is charged
//   once per 4 Ki elements, not once per sub-array.
// - UB bank groups (arch 2201, the "避免bank冲突（NPU架构版本2201）" guide
//   page: group = (address / 32) mod 16, one row per group per cycle): the
//   lane arrays are in two classes, E at addresses = 0 mod 512 from the
//   buffer start and O at 256 mod 512, and every binary instruction of the
//   rounds reads one source of each class, so its two sources never share
//   a bank group (the class of each array is listed at the enum).
// - A lane keeps its element when (word >> 8) < T, T = ceil(q * 2^24):
//   ((word >> 8) - T) >> 31 is that test, exact for 24-bit values.
#ifndef TA_PHILOX_H
#define TA_PHILOX_H

#include "ta_common.h"

namespace ta {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
// Sub-arrays at most (one more than the 8 blocks of a 32-element group).
constexpr uint32_t kMaxGroups = 9;
// Lane arrays the generator keeps: 10 of bank class E, 11 of class O (see
// the enum).
constexpr uint32_t kLaneArrays = 21;
constexpr uint32_t kClassArrays = 10;
// Offset between the two bank classes of lane arrays (ta_common.h).
constexpr uint32_t kClassShift = kHalfBankPeriod;

// ceil(q * 2^24) for q in [0, 1]: the integer form of u < q (docs/rng.md).
// q * 2^24 is exact in float (a power-of-two scaling), as is the
// conversion of its integral part.
__aicore__ inline uint32_t KeepThreshold(float q)
{
    const float x = q * 16777216.0f;
    uint32_t t = static_cast<uint32_t>(x);
    if (static_cast<float>(t) < x) {
        t += 1;
    }
    return t;
}

using U32 = LocalTensor<uint32_t>;

// Word-wise operations on uint32 lane arrays through the views A2 has.
__aicore__ inline void AndW(const U32 &d, const U32 &a, const U32 &b, uint32_t n)
{
    And(d.ReinterpretCast<uint16_t>(), a.ReinterpretCast<uint16_t>(), b.ReinterpretCast<uint16_t>(),
        static_cast<int32_t>(2 * n));
}
__aicore__ inline void OrW(const U32 &d, const U32 &a, const U32 &b, uint32_t n)
{
    Or(d.ReinterpretCast<uint16_t>(), a.ReinterpretCast<uint16_t>(), b.ReinterpretCast<uint16_t>(),
       static_cast<int32_t>(2 * n));
}
__aicore__ inline void AddW(const U32 &d, const U32 &a, const U32 &b, uint32_t n)
{
    Add(d.ReinterpretCast<int32_t>(), a.ReinterpretCast<int32_t>(), b.ReinterpretCast<int32_t>(),
        static_cast<int32_t>(n));
}
__aicore__ inline void SubW(const U32 &d, const U32 &a, const U32 &b, uint32_t n)
{
    Sub(d.ReinterpretCast<int32_t>(), a.ReinterpretCast<int32_t>(), b.ReinterpretCast<int32_t>(),
        static_cast<int32_t>(n));
}
// Products of 16-bit values by 16-bit limbs (below 2^32), or of 0/1 by any
// constant: never a 32x32 product.
__aicore__ inline void MulsW(const U32 &d, const U32 &a, uint32_t c, uint32_t n)
{
    Muls(d.ReinterpretCast<int32_t>(), a.ReinterpretCast<int32_t>(), static_cast<int32_t>(c),
         static_cast<int32_t>(n));
}
__aicore__ inline void AddsW(const U32 &d, const U32 &a, uint32_t c, uint32_t n)
{
    Adds(d.ReinterpretCast<int32_t>(), a.ReinterpretCast<int32_t>(), static_cast<int32_t>(c),
         static_cast<int32_t>(n));
}
__aicore__ inline void ShrW(const U32 &d, const U32 &a, uint32_t s, uint32_t n)
{
    ShiftRight(d, a, s, static_cast<int32_t>(n));
}
__aicore__ inline void ShlW(const U32 &d, const U32 &a, uint32_t s, uint32_t n)
{
    ShiftLeft(d, a, s, static_cast<int32_t>(n));
}
__aicore__ inline void DupW(const U32 &d, uint32_t v, uint32_t n) { Duplicate(d, v, static_cast<int32_t>(n)); }

// Generates, tile by tile, the mask of the elements a random kernel keeps:
// bit i of the mask is 1 where stream element `first + i` of the call has
// u < q.
class PhiloxMask {
public:
    __aicore__ inline PhiloxMask() {}

    // UB bytes of the lane arrays for tiles of `tile` elements (what Init
    // reserves besides the mask: abi.rs ub_footprint repeats it).
    __aicore__ static inline uint32_t LaneBytes(uint32_t tile)
    {
        return kLaneArrays * ArrayStride(LanesPerGroup(tile)) + kClassShift;
    }

    // Reserves the UB for tiles of up to `tile` elements (a multiple of
    // kAlign) of the stream under `seed`; elements are kept with
    // probability q.
    __aicore__ inline void Init(TPipe &pipe, uint32_t tile, uint64_t seed, float q)
    {
        cap_ = LanesPerGroup(tile);
        stride_ = ArrayStride(cap_) / sizeof(uint32_t);
        k0_ = static_cast<uint32_t>(seed);
        k1_ = static_cast<uint32_t>(seed >> 32);
        threshold_ = KeepThreshold(q);
        pipe.InitBuffer(lanesBuf_, LaneBytes(tile));
        pipe.InitBuffer(maskBuf_, cap_ * sizeof(uint32_t));
        // The tensors are fetched once (TBuf::Get is non-const).
        lanes_ = lanesBuf_.Get<uint32_t>();
        mask_ = maskBuf_.Get<uint32_t>();
        DupW(Lane(kLow), 0x0000FFFFu, kMaxGroups * cap_);
        width_ = 0;
    }

    // The mask of the n elements (n <= tile) from stream position g: n bits,
    // as at least ceil(n / 32) words. Valid until the next call.
    __aicore__ inline U32 Generate(uint64_t g, uint32_t n)
    {
        GenerateInto(mask_, g, n);
        return mask_;
    }

    // The same into `mask` (at least MaskWords(n) words, e.g. a VECOUT
    // queue buffer when the mask goes to global memory).
    __aicore__ inline void GenerateInto(const U32 &mask, uint64_t g, uint32_t n)
    {
        Run(g, n);
        Pack(mask, static_cast<uint32_t>(g & 3));
    }

    // Words of the mask of n elements, at most, over whole 32-byte blocks.
    __aicore__ static inline uint32_t MaskWords(uint32_t n) { return LanesPerGroup(n); }

    // The Philox words of the blocks elements [g, g + n) read: lane
    // j * Width() + t of Word(w) is word w of block g / 4 + 8t + j, for
    // j < Groups() (the known-answer self-test reads them).
    __aicore__ inline void Run(uint64_t g, uint32_t n)
    {
        groups_ = (g & 3) == 0 ? 8 : kMaxGroups;
        SetWidth(LanesPerGroup(n));
        n_ = groups_ * width_;
        for (int i = 0; i < 4; ++i) {
            slot_[i] = kWord0 + i;
        }
        c1Zero_ = false;
        Counters(g >> 2);
        FirstRound();
        for (uint32_t r = 1; r < 10; ++r) {
            Round(k0_ + r * kPhiloxW0, k1_ + r * kPhiloxW1);
        }
    }

    __aicore__ inline U32 Word(int w) const { return Lane(slot_[w]); }
    __aicore__ inline uint32_t Width() const { return width_; }
    __aicore__ inline uint32_t Groups() const { return groups_; }

private:
    // Lane arrays. Class E (indices below kClassArrays) start at 0 mod 512
    // bytes from the buffer, class O at 256 mod 512; the comments give each
    // one's use. Every binary instruction of the rounds reads one E and one
    // O source.
    enum : uint32_t {
        kWord0 = 0, // E: 4 Philox words, slots rotating each round
        kL0 = 4,    // E: low limb of word 0; then c1 | k0, hi0 | c3
        kQ0,        // E: limb product, then the middle sum of hi0
        kQ1,        // E: limb product, then the middle sum of hi1
        kR1,        // E: limb product, then with the middle's low half
        kH1,        // E: high limb of word 2; then c3 & k1, hi1 & c1
        kOffset,    // E: 8 * t + j at lane j * W + t
        kLow,       // O (the first of its class): 0x0000FFFF in every lane
        kK0,        // O: this round's key word 0 in every lane
        kK1,        // O: this round's key word 1 in every lane
        kH0,        // O: high limb of word 0; then c1 & k0, hi0 & c3
        kL1,        // O: low limb of word 2; then c3 | k1, hi1 | c1
        kP0,        // O: limb products by M0 (P0, R0, S0: S0 becomes hi0)
        kR0,
        kS0,
        kP1,        // O: limb products by M1 (S1 becomes hi1)
        kS1,
        kX,         // O: P1 >> 16, then the middle's low half of hi1
    };
    static_assert(kLow == kClassArrays && kX + 1 == kLaneArrays, "10 class-E arrays, then 11 class-O");

    // Lanes per sub-array for n elements: one 32-element group per lane,
    // whole 32-byte blocks.
    __aicore__ static inline uint32_t LanesPerGroup(uint32_t n) { return AlignUp((n + 31) / 32, 8); }

    // Bytes from one lane array to the next: whole bank periods.
    __aicore__ static inline uint32_t ArrayStride(uint32_t cap)
    {
        return AlignUp(kMaxGroups * cap * static_cast<uint32_t>(sizeof(uint32_t)), kBankPeriod);
    }

    __aicore__ inline U32 Lane(uint32_t k) const
    {
        const uint32_t shift = k < kClassArrays ? 0 : kClassShift / static_cast<uint32_t>(sizeof(uint32_t));
        return lanes_[k * stride_ + shift];
    }

    __aicore__ inline void SetWidth(uint32_t w)
    {
        if (w == width_) {
            return;
        }
        width_ = w;
        const U32 off = Lane(kOffset);
        CreateVecIndex(off.ReinterpretCast<int32_t>(), 0, w);
        PipeBarrier<PIPE_V>();
        MulsW(off, off, 8, w);
        PipeBarrier<PIPE_V>();
        for (uint32_t j = 1; j < kMaxGroups; ++j) {
            AddsW(off[j * w], off, j, w);
        }
        PipeBarrier<PIPE_V>();
    }

    // Counters of the tile's blocks: lane j * W + t is block base + 8t + j
    // (wrapping at 2^62 blocks: stream positions wrap at 2^64). Word 0 gets
    // the low half; the high half stays a scalar unless the low half wraps
    // inside the tile.
    __aicore__ inline void Counters(uint64_t base)
    {
        const uint32_t lo = static_cast<uint32_t>(base);
        hi_ = static_cast<uint32_t>(base >> 32);
        const U32 off = Lane(kOffset);
        AddsW(Word(0), off, lo, n_);
        const uint64_t last = 8ull * (width_ - 1) + groups_ - 1;
        c1Tensor_ = static_cast<uint64_t>(lo) + last > 0xFFFFFFFFull;
        if (!c1Tensor_) {
            return;
        }
        // Lanes with offset >= 2^32 - lo carry into the high half.
        const uint32_t carryFrom = static_cast<uint32_t>((1ull << 32) - lo);
        const uint32_t hiNext = (hi_ + 1) & 0x3FFFFFFFu;
        const U32 c1 = Word(1);
        AddsW(c1, off, 0u - carryFrom, n_);
        PipeBarrier<PIPE_V>();
        ShrW(c1, c1, 31, n_); // 1 where the lane does not carry
        PipeBarrier<PIPE_V>();
        MulsW(c1, c1, hi_ - hiNext, n_); // 0 or 1 times a constant
        PipeBarrier<PIPE_V>();
        AddsW(c1, c1, hiNext, n_);
    }

    // Limb products of word c (L = low, H = high limb) by the constant m:
    // P = L mL, Q = L mH, R = H mL, S = H mH, each below 2^32.
    __aicore__ inline void Products(uint32_t l, uint32_t h, uint32_t p, uint32_t q, uint32_t r, uint32_t s,
                                    uint32_t m)
    {
        MulsW(Lane(p), Lane(l), m & 0xFFFFu, n_);
        MulsW(Lane(q), Lane(l), m >> 16, n_);
        MulsW(Lane(r), Lane(h), m & 0xFFFFu, n_);
        MulsW(Lane(s), Lane(h), m >> 16, n_);
    }

    // Round 0: words 2 and 3 start at 0, so only word 0 is multiplied and
    // the new word 1 is 0. Its key word 1 goes into word 2's slot (class E,
    // unused until round 1 writes it).
    __aicore__ inline void FirstRound()
    {
        const uint32_t n = n_;
        const U32 c0 = Word(0);
        const U32 c1 = Word(1);
        const U32 c2 = Word(2);
        const U32 c3 = Word(3);
        PipeBarrier<PIPE_V>();
        AndW(Lane(kL0), c0, Lane(kLow), n);
        ShrW(Lane(kH0), c0, 16, n);
        DupW(c2, k1_, n);
        if (c1Tensor_) {
            DupW(Lane(kK0), k0_, n);
        }
        PipeBarrier<PIPE_V>();
        Products(kL0, kH0, kP0, kQ0, kR0, kS0, kPhiloxM0);
        if (c1Tensor_) {
            OrW(Lane(kL1), c1, Lane(kK0), n);
            AndW(Lane(kH1), c1, Lane(kK0), n);
        }
        PipeBarrier<PIPE_V>();
        AddW(Lane(kQ0), Lane(kQ0), Lane(kR0), n);
        // New word 0 = word 1 ^ k0, in word 1's slot.
        if (c1Tensor_) {
            SubW(c1, Lane(kL1), Lane(kH1), n);
        } else {
            DupW(c1, hi_ ^ k0_, n);
        }
        PipeBarrier<PIPE_V>();
        LowHigh0(c0);
        // New word 2 = hi0 ^ k1, in word 3's slot.
        OrW(Lane(kL0), Lane(kS0), c2, n);
        AndW(Lane(kH0), Lane(kS0), c2, n);
        PipeBarrier<PIPE_V>();
        SubW(c3, Lane(kL0), Lane(kH0), n);
        PipeBarrier<PIPE_V>();
        Rotate();
        c1Zero_ = true;
    }

    // From Q0 = Q + R (the middle limb terms), P0 and S0 of word 0 by M0:
    // the low word (Q + R) << 16 + P into c0 and the high word into S0.
    // (Q + R + P >> 16) never overflows 32 bits for M0, whose limbs sum
    // below 2^16. Ends after a barrier, S0 = hi0.
    __aicore__ inline void LowHigh0(const U32 &c0)
    {
        const uint32_t n = n_;
        ShlW(c0, Lane(kQ0), 16, n);
        ShrW(Lane(kR0), Lane(kP0), 16, n);
        PipeBarrier<PIPE_V>();
        AddW(c0, c0, Lane(kP0), n); // lo0
        AddW(Lane(kQ0), Lane(kQ0), Lane(kR0), n);
        PipeBarrier<PIPE_V>();
        ShrW(Lane(kQ0), Lane(kQ0), 16, n);
        PipeBarrier<PIPE_V>();
        AddW(Lane(kS0), Lane(kS0), Lane(kQ0), n); // hi0
        PipeBarrier<PIPE_V>();
    }

    // One round after the first, with round keys (k0, k1):
    // (c0, c1, c2, c3) <- (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0)).
    // The new words overwrite c1, c2, c3 and c0 in place, so the slots
    // rotate. Both products run side by side to fill each barrier interval.
    __aicore__ inline void Round(uint32_t k0, uint32_t k1)
    {
        const uint32_t n = n_;
        const U32 c0 = Word(0);
        const U32 c1 = Word(1);
        const U32 c2 = Word(2);
        const U32 c3 = Word(3);
        AndW(Lane(kL0), c0, Lane(kLow), n);
        ShrW(Lane(kH0), c0, 16, n);
        AndW(Lane(kL1), c2, Lane(kLow), n);
        ShrW(Lane(kH1), c2, 16, n);
        if (!c1Zero_) {
            DupW(Lane(kK0), k0, n);
        }
        DupW(Lane(kK1), k1, n);
        PipeBarrier<PIPE_V>();
        Products(kL0, kH0, kP0, kQ0, kR0, kS0, kPhiloxM0);
        Products(kL1, kH1, kP1, kQ1, kR1, kS1, kPhiloxM1);
        PipeBarrier<PIPE_V>();
        AddW(Lane(kQ0), Lane(kQ0), Lane(kR0), n);
        ShrW(Lane(kX), Lane(kP1), 16, n);
        if (c1Zero_) {
            // Word 1 is still zero (round 1): c1 ^ k0 is k0.
            DupW(c1, k0, n);
        } else {
            OrW(Lane(kL0), c1, Lane(kK0), n);
            AndW(Lane(kH0), c1, Lane(kK0), n);
        }
        OrW(Lane(kL1), c3, Lane(kK1), n);
        AndW(Lane(kH1), c3, Lane(kK1), n);
        PipeBarrier<PIPE_V>();
        // Word 0's low and high words, with the M1 side interleaved.
        ShlW(c0, Lane(kQ0), 16, n);
        ShrW(Lane(kR0), Lane(kP0), 16, n);
        AddW(Lane(kQ1), Lane(kQ1), Lane(kX), n); // mid1 = Q1 + P1 >> 16
        if (!c1Zero_) {
            SubW(c1, Lane(kL0), Lane(kH0), n); // c1 ^ k0
        }
        SubW(c3, Lane(kL1), Lane(kH1), n); // c3 ^ k1
        PipeBarrier<PIPE_V>();
        AddW(c0, c0, Lane(kP0), n); // lo0: new word 3
        AddW(Lane(kQ0), Lane(kQ0), Lane(kR0), n);
        // M1's limbs sum above 2^16: mid1 + R1 could overflow, so mid1's
        // low half is added to R1 and its high half to S1 apart.
        AndW(Lane(kX), Lane(kQ1), Lane(kLow), n);
        ShrW(c2, Lane(kQ1), 16, n);
        PipeBarrier<PIPE_V>();
        ShrW(Lane(kQ0), Lane(kQ0), 16, n);
        AddW(Lane(kR1), Lane(kR1), Lane(kX), n); // R1' = R1 + mid1 % 2^16
        AddW(Lane(kS1), Lane(kS1), c2, n);
        PipeBarrier<PIPE_V>();
        AddW(Lane(kS0), Lane(kS0), Lane(kQ0), n); // hi0
        // lo1 = (R1' - P1 >> 16) << 16 + P1 = (Q1 + R1) << 16 + P1.
        ShrW(Lane(kX), Lane(kP1), 16, n);
        ShrW(Lane(kH1), Lane(kR1), 16, n);
        PipeBarrier<PIPE_V>();
        SubW(c2, Lane(kR1), Lane(kX), n);
        AddW(Lane(kS1), Lane(kS1), Lane(kH1), n); // hi1
        OrW(Lane(kL0), Lane(kS0), c3, n);
        AndW(Lane(kH0), Lane(kS0), c3, n);
        PipeBarrier<PIPE_V>();
        ShlW(c2, c2, 16, n);
        SubW(c3, Lane(kL0), Lane(kH0), n); // new word 2
        OrW(Lane(kL1), Lane(kS1), c1, n);
        AndW(Lane(kH1), Lane(kS1), c1, n);
        PipeBarrier<PIPE_V>();
        AddW(c2, c2, Lane(kP1), n); // lo1: new word 1
        SubW(c1, Lane(kL1), Lane(kH1), n); // new word 0
        PipeBarrier<PIPE_V>();
        Rotate();
        c1Zero_ = false;
    }

    // New words 0..3 sit in the slots of old words 1, 2, 3, 0.
    __aicore__ inline void Rotate()
    {
        const uint32_t old0 = slot_[0];
        slot_[0] = slot_[1];
        slot_[1] = slot_[2];
        slot_[2] = slot_[3];
        slot_[3] = old0;
    }

    // Keep bits from the four words, then one mask word per 32 elements:
    // word t = sum over sub-arrays j of nibble(j, t) << (4j - s), where
    // nibble bit w is lane (j, t)'s word-w keep bit.
    __aicore__ inline void Pack(const U32 &mask, uint32_t s)
    {
        const uint32_t n = n_;
        const uint32_t keep[4] = {kL0, kH0, kL1, kH1};
        for (int w = 0; w < 4; ++w) {
            ShrW(Lane(keep[w]), Word(w), 8, n);
        }
        PipeBarrier<PIPE_V>();
        for (int w = 0; w < 4; ++w) {
            AddsW(Lane(keep[w]), Lane(keep[w]), 0u - threshold_, n);
        }
        PipeBarrier<PIPE_V>();
        for (int w = 0; w < 4; ++w) {
            ShrW(Lane(keep[w]), Lane(keep[w]), 31, n);
        }
        PipeBarrier<PIPE_V>();
        for (int w = 1; w < 4; ++w) {
            ShlW(Lane(keep[w]), Lane(keep[w]), static_cast<uint32_t>(w), n);
        }
        PipeBarrier<PIPE_V>();
        AddW(Lane(kL0), Lane(kL0), Lane(kH0), n);
        AddW(Lane(kL1), Lane(kL1), Lane(kH1), n);
        PipeBarrier<PIPE_V>();
        AddW(Lane(kL0), Lane(kL0), Lane(kL1), n);
        PipeBarrier<PIPE_V>();
        // Each sub-array's nibbles moved to their bits, then summed
        // (disjoint bits: sum = or) over whole halves of the sub-arrays:
        // sub-arrays 0..3 += 4..7, 0..1 += 2..3, 0 += 1, then 0 += 8. These
        // few short instructions per tile read sources 512 k bytes apart,
        // which share bank groups; the model charges them.
        const U32 nib = Lane(kL0);
        const U32 part = Lane(kP0);
        const uint32_t w = width_;
        for (uint32_t j = 0; j < groups_; ++j) {
            if (j == 0) {
                ShrW(part, nib, s, w);
            } else {
                ShlW(part[j * w], nib[j * w], 4 * j - s, w);
            }
        }
        PipeBarrier<PIPE_V>();
        for (uint32_t span = 4; span >= 1; span /= 2) {
            AddW(part, part, part[span * w], span * w);
            PipeBarrier<PIPE_V>();
        }
        if (groups_ > 8) {
            AddW(part, part, part[8 * w], w);
            PipeBarrier<PIPE_V>();
        }
        AddsW(mask, part, 0, w);
        PipeBarrier<PIPE_V>();
    }

    TBuf<TPosition::VECCALC> lanesBuf_;
    TBuf<TPosition::VECCALC> maskBuf_;
    U32 lanes_;
    U32 mask_;
    uint32_t cap_ = 0;
    uint32_t stride_ = 0;
    uint32_t width_ = 0;
    uint32_t groups_ = 8;
    uint32_t n_ = 0;
    uint32_t k0_ = 0;
    uint32_t k1_ = 0;
    uint32_t hi_ = 0;
    uint32_t threshold_ = 0;
    uint32_t slot_[4] = {0, 1, 2, 3};
    bool c1Tensor_ = false;
    bool c1Zero_ = false;
};

} // namespace ta

#endif // TA_PHILOX_H
