// Masked scale, in place: x = mask != 0 ? x * scale : 0, with the mask in
// the element type of x (-0.0 counts as zero, NaN as set, as on the host)
// or as bytes (the u8 masks ta_bernoulli_u8 writes).
//
// Per tile: the mask becomes a bit mask (Compares NE 0; halves and bytes
// widened first: bytes to half, 256 bytes a compare), x is scaled (in
// float for halves) and selected through it.
#include "ta_common.h"

namespace ta {

template <typename T, typename M>
class KernelApplyMask {
    static constexpr bool kByteMask = IsSameType<M, uint8_t>::value;

public:
    __aicore__ inline KernelApplyMask() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR mask, float scale, uint64_t totalLength, uint64_t blockLength,
                                uint32_t tileLength)
    {
        range_ = OwnRange(totalLength, blockLength);
        tile_ = TileOf(tileLength);
        scale_ = scale;
        if (range_.length == 0) {
            return;
        }
        // Byte masks compare as half: whole 256-byte repeats of 128 halves.
        const uint32_t maskLanes = kByteMask ? AlignUp(tile_, 128) : tile_;
        xGm_.SetGlobalBuffer((__gm__ T *)x + range_.start, range_.length);
        maskGm_.SetGlobalBuffer((__gm__ M *)mask + range_.start, range_.length);
        pipe_.InitBuffer(xQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(maskQueue_, kBufferNum, maskLanes * sizeof(M));
        pipe_.InitBuffer(outQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(bitsBuf_, maskLanes / 8);
        if constexpr (!kIsFloat<T>) {
            pipe_.InitBuffer(xWork_, tile_ * sizeof(float));
        }
        if constexpr (kByteMask) {
            pipe_.InitBuffer(maskWork_, maskLanes * sizeof(half));
        } else if constexpr (!kIsFloat<T>) {
            pipe_.InitBuffer(maskWork_, tile_ * sizeof(float));
        }
    }

    __aicore__ inline void Process()
    {
        for (uint64_t done = 0; done < range_.length; done += tile_) {
            const uint64_t left = range_.length - done;
            const uint32_t n = left < tile_ ? static_cast<uint32_t>(left) : tile_;
            CopyInTile(done, n);
            Compute(n);
            CopyOutTile(done, n);
        }
    }

private:
    __aicore__ inline void CopyInTile(uint64_t done, uint32_t n)
    {
        LocalTensor<T> x = xQueue_.AllocTensor<T>();
        CopyIn(x, xGm_[done], n);
        xQueue_.EnQue(x);
        LocalTensor<M> mask = maskQueue_.AllocTensor<M>();
        CopyIn(mask, maskGm_[done], n);
        maskQueue_.EnQue(mask);
    }

    // The mask's set bits, for m elements.
    __aicore__ inline void MaskBits(const LocalTensor<uint8_t> &bits, const LocalTensor<M> &mask, uint32_t n,
                                    uint32_t m)
    {
        if constexpr (kByteMask) {
            const uint32_t mc = AlignUp(n, 128);
            const LocalTensor<half> mh = maskWork_.Get<half>();
            Cast(mh, mask, RoundMode::CAST_NONE, mc);
            PipeBarrier<PIPE_V>();
            Compares(bits, mh, half(0.0f), CMPMODE::NE, mc);
        } else if constexpr (kIsFloat<T>) {
            Compares(bits, mask, 0.0f, CMPMODE::NE, m);
        } else {
            const LocalTensor<float> mf = maskWork_.Get<float>();
            Widen(mf, mask, m);
            PipeBarrier<PIPE_V>();
            Compares(bits, mf, 0.0f, CMPMODE::NE, m);
        }
    }

    __aicore__ inline void Compute(uint32_t n)
    {
        const uint32_t m = AlignUp(n, kAlign);
        // The scratch buffers are rewritten while the previous tile's last
        // vector instructions may still read them.
        PipeBarrier<PIPE_V>();
        LocalTensor<T> x = xQueue_.DeQue<T>();
        LocalTensor<M> mask = maskQueue_.DeQue<M>();
        const LocalTensor<uint8_t> bits = bitsBuf_.Get<uint8_t>();
        LocalTensor<T> z = outQueue_.AllocTensor<T>();
        MaskBits(bits, mask, n, m);
        ScaleThroughMask(z, x, bits, xWork_, scale_, m);
        outQueue_.EnQue(z);
        xQueue_.FreeTensor(x);
        maskQueue_.FreeTensor(mask);
    }

    __aicore__ inline void CopyOutTile(uint64_t done, uint32_t n)
    {
        LocalTensor<T> z = outQueue_.DeQue<T>();
        CopyOut(xGm_[done], z, n);
        outQueue_.FreeTensor(z);
    }

    TPipe pipe_;
    TQue<QuePosition::VECIN, kBufferNum> xQueue_;
    TQue<QuePosition::VECIN, kBufferNum> maskQueue_;
    TQue<QuePosition::VECOUT, kBufferNum> outQueue_;
    TBuf<TPosition::VECCALC> bitsBuf_;
    TBuf<TPosition::VECCALC> xWork_;
    TBuf<TPosition::VECCALC> maskWork_;
    GlobalTensor<T> xGm_;
    GlobalTensor<M> maskGm_;
    CoreRange range_;
    uint32_t tile_;
    float scale_;
};

} // namespace ta

TA_MASK_KERNEL(ta_apply_mask_f32, ta::KernelApplyMask, float, float)
TA_MASK_KERNEL(ta_apply_mask_f16, ta::KernelApplyMask, half, half)
TA_MASK_KERNEL(ta_apply_mask_bf16, ta::KernelApplyMask, bfloat16_t, bfloat16_t)
// With a u8 mask (any nonzero byte keeps).
TA_MASK_KERNEL(ta_apply_mask_u8_f32, ta::KernelApplyMask, float, uint8_t)
TA_MASK_KERNEL(ta_apply_mask_u8_f16, ta::KernelApplyMask, half, uint8_t)
TA_MASK_KERNEL(ta_apply_mask_u8_bf16, ta::KernelApplyMask, bfloat16_t, uint8_t)
