// Fused dropout, in place: with q = 1 - p and scale = 1 / q (float),
// x[e] = u(offset + e) < q ? x[e] * scale : 0 (docs/rng.md). The backward
// pass is the same kernel run on the gradient with the forward's (seed,
// offset): it regenerates the mask instead of storing it.
//
// Per tile the vector unit generates the keep mask (ta_philox.h) while
// MTE2 brings x in, then scales x and selects through the mask; halves are
// widened to float and rounded back, as the host reference does.
#include "ta_philox.h"

namespace ta {

template <typename T>
class KernelDropout {
public:
    __aicore__ inline KernelDropout() {}

    __aicore__ inline void Init(GM_ADDR x, float p, uint64_t seed, uint64_t offset, uint64_t totalLength,
                                uint64_t blockLength, uint32_t tileLength)
    {
        range_ = OwnRange(totalLength, blockLength);
        tile_ = TileOf(tileLength);
        first_ = offset + range_.start;
        const float q = 1.0f - p;
        scale_ = 1.0f / q;
        if (range_.length == 0) {
            return;
        }
        xGm_.SetGlobalBuffer((__gm__ T *)x + range_.start, range_.length);
        pipe_.InitBuffer(inQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(outQueue_, kBufferNum, tile_ * sizeof(T));
        philox_.Init(pipe_, tile_, seed, q);
        if constexpr (!kIsFloat<T>) {
            pipe_.InitBuffer(workBuf_, tile_ * sizeof(float));
        }
    }

    __aicore__ inline void Process()
    {
        for (uint64_t done = 0; done < range_.length; done += tile_) {
            const uint64_t left = range_.length - done;
            const uint32_t n = left < tile_ ? static_cast<uint32_t>(left) : tile_;
            CopyInTile(done, n);
            Compute(done, n);
            CopyOutTile(done, n);
        }
    }

private:
    __aicore__ inline void CopyInTile(uint64_t done, uint32_t n)
    {
        LocalTensor<T> x = inQueue_.AllocTensor<T>();
        CopyIn(x, xGm_[done], n);
        inQueue_.EnQue(x);
    }

    __aicore__ inline void Compute(uint64_t done, uint32_t n)
    {
        const uint32_t m = AlignUp(n, kAlign);
        const U32 mask = philox_.Generate(first_ + done, n);
        LocalTensor<T> x = inQueue_.DeQue<T>();
        LocalTensor<T> y = outQueue_.AllocTensor<T>();
        ScaleThroughMask(y, x, mask, workBuf_, scale_, m);
        outQueue_.EnQue(y);
        inQueue_.FreeTensor(x);
    }

    __aicore__ inline void CopyOutTile(uint64_t done, uint32_t n)
    {
        LocalTensor<T> y = outQueue_.DeQue<T>();
        CopyOut(xGm_[done], y, n);
        outQueue_.FreeTensor(y);
    }

    TPipe pipe_;
    TQue<QuePosition::VECIN, kBufferNum> inQueue_;
    TQue<QuePosition::VECOUT, kBufferNum> outQueue_;
    TBuf<TPosition::VECCALC> workBuf_;
    PhiloxMask philox_;
    GlobalTensor<T> xGm_;
    CoreRange range_;
    uint32_t tile_;
    uint64_t first_;
    float scale_;
};

} // namespace ta

// Forward: x is the activation.
TA_RANDOM_KERNEL(ta_dropout_f32, ta::KernelDropout, float)
TA_RANDOM_KERNEL(ta_dropout_f16, ta::KernelDropout, half)
TA_RANDOM_KERNEL(ta_dropout_bf16, ta::KernelDropout, bfloat16_t)
// Backward: x is the incoming gradient; pass the forward's seed and offset.
TA_RANDOM_KERNEL(ta_dropout_backward_f32, ta::KernelDropout, float)
TA_RANDOM_KERNEL(ta_dropout_backward_f16, ta::KernelDropout, half)
TA_RANDOM_KERNEL(ta_dropout_backward_bf16, ta::KernelDropout, bfloat16_t)
