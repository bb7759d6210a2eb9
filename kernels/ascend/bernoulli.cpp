// In-place bernoulli_: x[e] = 1 where u(offset + e) < p, else 0, with
// u(g) = (Philox word g >> 8) * 2^-24 (docs/rng.md). x is only written.
//
// Per tile the vector unit generates the tile's keep mask (ta_philox.h)
// and selects 1 or 0 through it. Select moves 16-bit patterns as they are,
// so bfloat16 selects its own 1.0 (0x3F80) as a half pattern; the u8 mask
// kernel selects half 1 or 0 and casts to uint8.
#include "ta_philox.h"

namespace ta {

// The type Select runs in for T (A2 selects half and float only).
template <typename T>
struct SelectAs {
    using type = half;
};
template <>
struct SelectAs<float> {
    using type = float;
};

template <typename T>
class KernelBernoulli {
    using S = typename SelectAs<T>::type;

public:
    __aicore__ inline KernelBernoulli() {}

    __aicore__ inline void Init(GM_ADDR x, float p, uint64_t seed, uint64_t offset, uint64_t totalLength,
                                uint64_t blockLength, uint32_t tileLength)
    {
        range_ = OwnRange(totalLength, blockLength);
        tile_ = TileOf(tileLength);
        first_ = offset + range_.start;
        if (range_.length == 0) {
            return;
        }
        xGm_.SetGlobalBuffer((__gm__ T *)x + range_.start, range_.length);
        pipe_.InitBuffer(outQueue_, kBufferNum, tile_ * sizeof(T));
        philox_.Init(pipe_, tile_, seed, p);
        pipe_.InitBuffer(onesBuf_, tile_ * sizeof(S));
        if constexpr (IsSameType<T, bfloat16_t>::value) {
            Duplicate(onesBuf_.Get<uint16_t>(), static_cast<uint16_t>(0x3F80), static_cast<int32_t>(tile_));
        } else {
            Duplicate(onesBuf_.Get<S>(), S(1.0f), static_cast<int32_t>(tile_));
        }
        if constexpr (IsSameType<T, uint8_t>::value) {
            pipe_.InitBuffer(workBuf_, tile_ * sizeof(half));
        }
    }

    __aicore__ inline void Process()
    {
        for (uint64_t done = 0; done < range_.length; done += tile_) {
            const uint64_t left = range_.length - done;
            const uint32_t n = left < tile_ ? static_cast<uint32_t>(left) : tile_;
            Compute(done, n);
            CopyOutTile(done, n);
        }
    }

private:
    __aicore__ inline void Compute(uint64_t done, uint32_t n)
    {
        const uint32_t m = AlignUp(n, kAlign);
        const U32 mask = philox_.Generate(first_ + done, n);
        LocalTensor<T> y = outQueue_.AllocTensor<T>();
        const LocalTensor<S> ones = onesBuf_.Get<S>();
        if constexpr (IsSameType<T, uint8_t>::value) {
            const LocalTensor<half> work = workBuf_.Get<half>();
            Select(work, mask, ones, half(0.0f), SELMODE::VSEL_TENSOR_SCALAR_MODE, m);
            PipeBarrier<PIPE_V>();
            Cast(y, work, RoundMode::CAST_NONE, m);
        } else {
            Select(y.template ReinterpretCast<S>(), mask, ones, S(0.0f), SELMODE::VSEL_TENSOR_SCALAR_MODE, m);
        }
        outQueue_.EnQue(y);
    }

    __aicore__ inline void CopyOutTile(uint64_t done, uint32_t n)
    {
        LocalTensor<T> y = outQueue_.DeQue<T>();
        CopyOut(xGm_[done], y, n);
        outQueue_.FreeTensor(y);
    }

    TPipe pipe_;
    TQue<QuePosition::VECOUT, kBufferNum> outQueue_;
    TBuf<TPosition::VECCALC> onesBuf_;
    TBuf<TPosition::VECCALC> workBuf_;
    PhiloxMask philox_;
    GlobalTensor<T> xGm_;
    CoreRange range_;
    uint32_t tile_;
    uint64_t first_;
};

} // namespace ta

TA_RANDOM_KERNEL(ta_bernoulli_f32, ta::KernelBernoulli, float)
TA_RANDOM_KERNEL(ta_bernoulli_f16, ta::KernelBernoulli, half)
TA_RANDOM_KERNEL(ta_bernoulli_bf16, ta::KernelBernoulli, bfloat16_t)
// A u8 mask for apply_mask_u8: byte 1 where u < p, else 0.
TA_RANDOM_KERNEL(ta_bernoulli_u8, ta::KernelBernoulli, uint8_t)
