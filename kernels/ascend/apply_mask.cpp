// Masked scale, in place: x = mask != 0 ? x * scale : 0, with the mask in
// the element type of x (-0.0 counts as zero, NaN as set, as on the host).
#include "ta_common.h"

namespace ta {

template <typename T>
class KernelApplyMask {
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
        xGm_.SetGlobalBuffer((__gm__ T *)x + range_.start, range_.length);
        maskGm_.SetGlobalBuffer((__gm__ T *)mask + range_.start, range_.length);
        pipe_.InitBuffer(xQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(maskQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(outQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(bitsBuf_, tile_ / 8);
        if constexpr (!IsSameType<T, float>::value) {
            pipe_.InitBuffer(xWork_, tile_ * sizeof(float));
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
        LocalTensor<T> mask = maskQueue_.AllocTensor<T>();
        CopyIn(mask, maskGm_[done], n);
        maskQueue_.EnQue(mask);
    }

    __aicore__ inline void Compute(uint32_t n)
    {
        const uint32_t m = AlignUp(n, kAlign);
        // The scratch buffers are rewritten while the previous tile's last
        // vector instructions may still read them.
        PipeBarrier<PIPE_V>();
        LocalTensor<T> x = xQueue_.DeQue<T>();
        LocalTensor<T> mask = maskQueue_.DeQue<T>();
        LocalTensor<uint8_t> bits = bitsBuf_.Get<uint8_t>();
        LocalTensor<T> z = outQueue_.AllocTensor<T>();
        if constexpr (IsSameType<T, float>::value) {
            Compares(bits, mask, 0.0f, CMPMODE::NE, m);
            Muls(z, x, scale_, m);
            PipeBarrier<PIPE_V>();
            Select(z, bits, z, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, m);
        } else {
            LocalTensor<float> xf = xWork_.Get<float>();
            LocalTensor<float> mf = maskWork_.Get<float>();
            Widen(mf, mask, m);
            Widen(xf, x, m);
            PipeBarrier<PIPE_V>();
            Compares(bits, mf, 0.0f, CMPMODE::NE, m);
            Muls(xf, xf, scale_, m);
            PipeBarrier<PIPE_V>();
            Select(xf, bits, xf, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, m);
            PipeBarrier<PIPE_V>();
            Narrow(z, xf, m);
        }
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
    GlobalTensor<T> maskGm_;
    CoreRange range_;
    uint32_t tile_;
    float scale_;
};

template <typename T>
__aicore__ inline void RunApplyMask(GM_ADDR x, GM_ADDR mask, float scale, uint64_t totalLength,
                                    uint64_t blockLength, uint32_t tileLength)
{
    KernelApplyMask<T> op;
    op.Init(x, mask, scale, totalLength, blockLength, tileLength);
    op.Process();
}

} // namespace ta

extern "C" __global__ __aicore__ void ta_apply_mask_f32(GM_ADDR x, GM_ADDR mask, float scale, uint64_t totalLength,
                                                        uint64_t blockLength, uint32_t tileLength)
{
    ta::RunApplyMask<float>(x, mask, scale, totalLength, blockLength, tileLength);
}

extern "C" __global__ __aicore__ void ta_apply_mask_f16(GM_ADDR x, GM_ADDR mask, float scale, uint64_t totalLength,
                                                        uint64_t blockLength, uint32_t tileLength)
{
    ta::RunApplyMask<half>(x, mask, scale, totalLength, blockLength, tileLength);
}

extern "C" __global__ __aicore__ void ta_apply_mask_bf16(GM_ADDR x, GM_ADDR mask, float scale,
                                                         uint64_t totalLength, uint64_t blockLength,
                                                         uint32_t tileLength)
{
    ta::RunApplyMask<bfloat16_t>(x, mask, scale, totalLength, blockLength, tileLength);
}
