// Philox4x32-10 on the A2/A3 vector unit: the keep mask of a tile of a
// random kernel, as a bit mask Select can use, bit for bit the stream of
// docs/rng.md.
//
// Why this shape (kernels/ascend/README.md has the cost figures):
// - The vector unit has no uint32 multiply, no widening multiply and no
//   Xor (A2 API pages). The 32x32->64 Philox products are built from
//   16-bit limbs: int32 Muls keep the low 32 bits, exact for 16x16 limb
//   products, and a multiply by the whole constant gives the low word.
//   Xor is (a | b) - (a & b): the two operands of the subtraction share no
//   borrow. And/Or run on uint16 views with twice the count (the c220 And
//   on 32-bit types processes only half the words). ShiftRight runs on
//   uint32 views (logical).
// - Lanes are Philox blocks. Element i of a 32-element group takes word
//   (s + i) % 4 of block 8t + (s + i) / 4 of the tile (s = the first
//   element's word, t = the group), so the lanes are laid out as G
//   sub-arrays of W lanes (sub-array j holds blocks 8t + j), G = 8 (9 when
//   s > 0: a misaligned group touches 9 blocks). Then the mask word of
//   group t is a sum of shifted lane values at the same index t of each
//   sub-array: whole-vector instructions, no gather.
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
// Lane arrays the generator keeps: 4 Philox words, 12 limb products and
// temporaries, one more temporary, the 0x0000FFFF constant, the lane
// offsets.
constexpr uint32_t kLaneArrays = 19;
// Round keys: 10 rounds of (k0, k1), one sub-array wide each, made once
// per kernel (the key XORs run sub-array by sub-array on them).
constexpr uint32_t kKeyArrays = 20;

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

// Generates, tile by tile, the mask of the elements a random kernel keeps:
// bit i of the mask is 1 where stream element `first + i` of the call has
// u < q.
class PhiloxMask {
public:
    __aicore__ inline PhiloxMask() {}

    // Reserves the UB for tiles of up to `tile` elements (a multiple of
    // kAlign) of the stream under `seed`; elements are kept with
    // probability q.
    __aicore__ inline void Init(TPipe &pipe, uint32_t tile, uint64_t seed, float q)
    {
        cap_ = LanesPerGroup(tile);
        k0_ = static_cast<uint32_t>(seed);
        k1_ = static_cast<uint32_t>(seed >> 32);
        threshold_ = KeepThreshold(q);
        pipe.InitBuffer(lanesBuf_, kLaneArrays * kMaxGroups * cap_ * sizeof(uint32_t));
        pipe.InitBuffer(maskBuf_, cap_ * sizeof(uint32_t));
        pipe.InitBuffer(keysBuf_, kKeyArrays * cap_ * sizeof(uint32_t));
        Duplicate(Lane(kLow), 0x0000FFFFu, static_cast<int32_t>(kMaxGroups * cap_));
        for (uint32_t r = 0; r < 10; ++r) {
            Duplicate(Key(r, 0), k0_ + r * kPhiloxW0, static_cast<int32_t>(cap_));
            Duplicate(Key(r, 1), k1_ + r * kPhiloxW1, static_cast<int32_t>(cap_));
        }
        width_ = 0;
    }

    // The mask of the n elements (n <= tile) from stream position g: n bits,
    // as at least ceil(n / 32) words. Valid until the next call.
    __aicore__ inline U32 Generate(uint64_t g, uint32_t n)
    {
        const U32 mask = maskBuf_.Get<uint32_t>();
        GenerateInto(mask, g, n);
        return mask;
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
        lanes_ = groups_ * width_;
        for (int i = 0; i < 4; ++i) {
            slot_[i] = kWord0 + i;
        }
        c1Zero_ = false;
        Counters(g >> 2);
        FirstRound();
        for (uint32_t r = 1; r < 10; ++r) {
            Round(Key(r, 0), Key(r, 1));
        }
    }

    __aicore__ inline U32 Word(int w) const { return Lane(slot_[w]); }
    __aicore__ inline uint32_t Width() const { return width_; }
    __aicore__ inline uint32_t Groups() const { return groups_; }

private:
    // Lane arrays, by index into lanesBuf_.
    enum : uint32_t {
        kWord0 = 0, // 4 Philox words, slots rotating each round
        kL0 = 4,
        kH0,
        kP0,
        kQ0,
        kR0,
        kS0,
        kL1,
        kH1,
        kP1,
        kQ1,
        kR1,
        kS1,
        kT,      // a temporary
        kLow,    // 0x0000FFFF in every lane
        kOffset, // 8 * lane, for the first sub-array
    };

    // Lanes per sub-array for n elements: one 32-element group per lane,
    // whole 32-byte blocks.
    __aicore__ static inline uint32_t LanesPerGroup(uint32_t n) { return AlignUp((n + 31) / 32, 8); }

    __aicore__ inline U32 Lane(uint32_t k) const
    {
        return lanesBuf_.Get<uint32_t>()[k * kMaxGroups * cap_];
    }

    // Round r's key word i, one sub-array wide.
    __aicore__ inline U32 Key(uint32_t r, uint32_t i) const
    {
        return keysBuf_.Get<uint32_t>()[(2 * r + i) * cap_];
    }

    // (a | key) and (a & key) into o and d, sub-array by sub-array: the
    // two halves of a ^ key = (a | key) - (a & key).
    __aicore__ inline void OrAndKey(const U32 &o, const U32 &d, const U32 &a, const U32 &key)
    {
        const uint32_t w = width_;
        for (uint32_t j = 0; j < groups_; ++j) {
            OrW(o[j * w], a[j * w], key, w);
            AndW(d[j * w], a[j * w], key, w);
        }
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
        const U32 c0 = Word(0);
        for (uint32_t j = 0; j < groups_; ++j) {
            AddsW(c0[j * width_], off, lo + j, width_);
        }
        const uint64_t last = 8ull * (width_ - 1) + groups_ - 1;
        c1Tensor_ = static_cast<uint64_t>(lo) + last > 0xFFFFFFFFull;
        if (!c1Tensor_) {
            return;
        }
        // Lanes with offset >= 2^32 - lo carry into the high half.
        const uint32_t carryFrom = static_cast<uint32_t>((1ull << 32) - lo);
        const uint32_t hiNext = (hi_ + 1) & 0x3FFFFFFFu;
        const U32 c1 = Word(1);
        for (uint32_t j = 0; j < groups_; ++j) {
            AddsW(c1[j * width_], off, j - carryFrom, width_);
        }
        PipeBarrier<PIPE_V>();
        ShrW(c1, c1, 31, lanes_); // 1 where the lane does not carry
        PipeBarrier<PIPE_V>();
        MulsW(c1, c1, hi_ - hiNext, lanes_);
        PipeBarrier<PIPE_V>();
        AddsW(c1, c1, hiNext, lanes_);
    }

    // Round 0: words 2 and 3 start at 0, so only word 0 is multiplied and
    // the new word 1 is 0.
    __aicore__ inline void FirstRound()
    {
        const uint32_t n = lanes_;
        const U32 c0 = Word(0);
        const U32 c1 = Word(1);
        const U32 c3 = Word(3);
        PipeBarrier<PIPE_V>();
        AndW(Lane(kL0), c0, Lane(kLow), n);
        ShrW(Lane(kH0), c0, 16, n);
        PipeBarrier<PIPE_V>();
        Products0(c0);
        if (c1Tensor_) {
            OrAndKey(Lane(kL1), Lane(kH1), c1, Key(0, 0));
        }
        PipeBarrier<PIPE_V>();
        ShrW(Lane(kP0), Lane(kP0), 16, n);
        // New word 0 = word 1 ^ k0, in word 1's slot.
        if (c1Tensor_) {
            SubW(c1, Lane(kL1), Lane(kH1), n);
        } else {
            Duplicate(c1, hi_ ^ k0_, static_cast<int32_t>(n));
        }
        PipeBarrier<PIPE_V>();
        HighHalf0(n);
        // New word 2 = hi0 ^ k1, in word 3's slot.
        OrAndKey(Lane(kL0), Lane(kH0), Lane(kS0), Key(0, 1));
        PipeBarrier<PIPE_V>();
        SubW(c3, Lane(kL0), Lane(kH0), n);
        PipeBarrier<PIPE_V>();
        Rotate();
        c1Zero_ = true;
    }

    // hi0 = mulhi(M0, c0) into S0 from the limb products of Products0 and
    // P0 already shifted: (MH L + ML L >> 16 + ML H) never overflows 32
    // bits for M0, whose limbs sum below 2^16.
    __aicore__ inline void HighHalf0(uint32_t n)
    {
        AddW(Lane(kQ0), Lane(kQ0), Lane(kP0), n);
        PipeBarrier<PIPE_V>();
        AddW(Lane(kQ0), Lane(kQ0), Lane(kR0), n);
        PipeBarrier<PIPE_V>();
        ShrW(Lane(kQ0), Lane(kQ0), 16, n);
        PipeBarrier<PIPE_V>();
        AddW(Lane(kS0), Lane(kS0), Lane(kQ0), n);
        PipeBarrier<PIPE_V>();
    }

    // Limb products of word 0 (L0 = low, H0 = high limb) by M0, and word 0
    // replaced by the low word of the product.
    __aicore__ inline void Products0(const U32 &c0)
    {
        const uint32_t n = lanes_;
        MulsW(Lane(kP0), Lane(kL0), kPhiloxM0 & 0xFFFFu, n);
        MulsW(Lane(kQ0), Lane(kL0), kPhiloxM0 >> 16, n);
        MulsW(Lane(kR0), Lane(kH0), kPhiloxM0 & 0xFFFFu, n);
        MulsW(Lane(kS0), Lane(kH0), kPhiloxM0 >> 16, n);
        MulsW(c0, c0, kPhiloxM0, n);
    }

    // One round after the first, with round keys (k0, k1):
    // (c0, c1, c2, c3) <- (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0)).
    // The new words overwrite c1, c2, c3 and c0 in place, so the slots
    // rotate. Both products run side by side to fill each barrier interval.
    __aicore__ inline void Round(const U32 &k0, const U32 &k1)
    {
        const uint32_t n = lanes_;
        const U32 c0 = Word(0);
        const U32 c1 = Word(1);
        const U32 c2 = Word(2);
        const U32 c3 = Word(3);
        // With word 1 still zero (round 1), k0 itself is word 1 ^ k0, and
        // word 1's slot is free for a temporary.
        const U32 spare = c1Zero_ ? c1 : Lane(kT);
        AndW(Lane(kL0), c0, Lane(kLow), n);
        ShrW(Lane(kH0), c0, 16, n);
        AndW(Lane(kL1), c2, Lane(kLow), n);
        ShrW(Lane(kH1), c2, 16, n);
        PipeBarrier<PIPE_V>();
        Products0(c0);
        MulsW(Lane(kP1), Lane(kL1), kPhiloxM1 & 0xFFFFu, n);
        MulsW(Lane(kQ1), Lane(kL1), kPhiloxM1 >> 16, n);
        MulsW(Lane(kR1), Lane(kH1), kPhiloxM1 & 0xFFFFu, n);
        MulsW(Lane(kS1), Lane(kH1), kPhiloxM1 >> 16, n);
        MulsW(c2, c2, kPhiloxM1, n);
        PipeBarrier<PIPE_V>();
        ShrW(Lane(kP0), Lane(kP0), 16, n);
        ShrW(Lane(kP1), Lane(kP1), 16, n);
        if (!c1Zero_) {
            OrAndKey(Lane(kL0), Lane(kH0), c1, k0);
        }
        OrAndKey(Lane(kL1), Lane(kH1), c3, k1);
        PipeBarrier<PIPE_V>();
        AddW(Lane(kQ0), Lane(kQ0), Lane(kP0), n);
        AddW(Lane(kQ1), Lane(kQ1), Lane(kP1), n); // mid1 = MH L1 + ML L1 >> 16
        if (!c1Zero_) {
            SubW(c1, Lane(kL0), Lane(kH0), n); // c1 ^ k0
        }
        SubW(c3, Lane(kL1), Lane(kH1), n); // c3 ^ k1
        PipeBarrier<PIPE_V>();
        AddW(Lane(kQ0), Lane(kQ0), Lane(kR0), n);
        // M1's limbs sum above 2^16: mid1 + ML H1 could overflow, so its
        // low half is added to ML H1 and its high half to MH H1 apart.
        AndW(Lane(kP1), Lane(kQ1), Lane(kLow), n);
        ShrW(spare, Lane(kQ1), 16, n);
        PipeBarrier<PIPE_V>();
        ShrW(Lane(kQ0), Lane(kQ0), 16, n);
        AddW(Lane(kR1), Lane(kR1), Lane(kP1), n);
        AddW(Lane(kS1), Lane(kS1), spare, n);
        PipeBarrier<PIPE_V>();
        AddW(Lane(kS0), Lane(kS0), Lane(kQ0), n); // hi0
        ShrW(Lane(kR1), Lane(kR1), 16, n);
        PipeBarrier<PIPE_V>();
        AddW(Lane(kS1), Lane(kS1), Lane(kR1), n); // hi1
        OrW(Lane(kL0), Lane(kS0), c3, n);
        AndW(Lane(kH0), Lane(kS0), c3, n);
        PipeBarrier<PIPE_V>();
        if (c1Zero_) {
            OrAndKey(Lane(kL1), Lane(kH1), Lane(kS1), k0);
        } else {
            OrW(Lane(kL1), Lane(kS1), c1, n);
            AndW(Lane(kH1), Lane(kS1), c1, n);
        }
        SubW(c3, Lane(kL0), Lane(kH0), n); // new word 2
        PipeBarrier<PIPE_V>();
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
        const uint32_t n = lanes_;
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
        // pairwise (disjoint bits: sum = or).
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
        for (uint32_t step = 1; step < groups_; step *= 2) {
            for (uint32_t j = 0; j + step < groups_; j += 2 * step) {
                AddW(part[j * w], part[j * w], part[(j + step) * w], w);
            }
            PipeBarrier<PIPE_V>();
        }
        AddsW(mask, part, 0, w);
        PipeBarrier<PIPE_V>();
    }

    TBuf<TPosition::VECCALC> lanesBuf_;
    TBuf<TPosition::VECCALC> maskBuf_;
    TBuf<TPosition::VECCALC> keysBuf_;
    uint32_t cap_ = 0;
    uint32_t width_ = 0;
    uint32_t groups_ = 8;
    uint32_t lanes_ = 0;
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
