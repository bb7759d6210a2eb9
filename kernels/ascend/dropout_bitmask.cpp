// Dropout split in two, as CANN splits it (DropoutGenMask, DropoutDoMask):
// the forward also writes the keep mask, one bit per element (bit i % 8 of
// byte i / 8 for element i of the call: n / 8 bytes), and the backward
// applies that mask instead of regenerating the stream, which makes it a
// pass bounded by memory bandwidth. Same results as the fused kernels in
// dropout.cpp, bit for bit; bits past the last element of the call are
// unspecified.
//
// Per-core ranges and tiles are multiples of 64 elements, so each core's
// and each tile's bits start on their own 8-byte boundary.
#include "ta_philox.h"

namespace ta {

// Mask bytes of n elements.
__aicore__ inline uint32_t MaskBytes(uint32_t n) { return (n + 7) / 8; }

// Forward: dropout of x, and its keep mask into bits.
template <typename T>
class KernelDropoutBitmask {
public:
    __aicore__ inline KernelDropoutBitmask() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR bits, float p, uint64_t seed, uint64_t offset,
                                uint64_t totalLength, uint64_t blockLength, uint32_t tileLength)
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
        bitsGm_.SetGlobalBuffer((__gm__ uint8_t *)bits + range_.start / 8,
                                MaskBytes(static_cast<uint32_t>(range_.length)));
        pipe_.InitBuffer(inQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(outQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(bitsQueue_, kBufferNum, PhiloxMask::MaskWords(tile_) * sizeof(uint32_t));
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
            LocalTensor<T> x = inQueue_.AllocTensor<T>();
            CopyIn(x, xGm_[done], n);
            inQueue_.EnQue(x);
            Compute(done, n);
            CopyOutTile(done, n);
        }
    }

private:
    __aicore__ inline void Compute(uint64_t done, uint32_t n)
    {
        const uint32_t m = AlignUp(n, kAlign);
        LocalTensor<uint32_t> bits = bitsQueue_.AllocTensor<uint32_t>();
        philox_.GenerateInto(bits, first_ + done, n);
        LocalTensor<T> x = inQueue_.DeQue<T>();
        LocalTensor<T> y = outQueue_.AllocTensor<T>();
        ScaleThroughMask(y, x, bits, workBuf_, scale_, m);
        outQueue_.EnQue(y);
        bitsQueue_.EnQue(bits);
        inQueue_.FreeTensor(x);
    }

    __aicore__ inline void CopyOutTile(uint64_t done, uint32_t n)
    {
        LocalTensor<T> y = outQueue_.DeQue<T>();
        CopyOut(xGm_[done], y, n);
        outQueue_.FreeTensor(y);
        LocalTensor<uint8_t> bits = bitsQueue_.DeQue<uint8_t>();
        CopyOut(bitsGm_[done / 8], bits, MaskBytes(n));
        bitsQueue_.FreeTensor(bits);
    }

    TPipe pipe_;
    TQue<QuePosition::VECIN, kBufferNum> inQueue_;
    TQue<QuePosition::VECOUT, kBufferNum> outQueue_;
    TQue<QuePosition::VECOUT, kBufferNum> bitsQueue_;
    TBuf<TPosition::VECCALC> workBuf_;
    PhiloxMask philox_;
    GlobalTensor<T> xGm_;
    GlobalTensor<uint8_t> bitsGm_;
    CoreRange range_;
    uint32_t tile_;
    uint64_t first_;
    float scale_;
};

// Backward (or any masked scale): x = bit ? x * scale : 0.
template <typename T, typename M>
class KernelApplyBitmask {
public:
    __aicore__ inline KernelApplyBitmask() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR bits, float scale, uint64_t totalLength, uint64_t blockLength,
                                uint32_t tileLength)
    {
        range_ = OwnRange(totalLength, blockLength);
        tile_ = TileOf(tileLength);
        scale_ = scale;
        if (range_.length == 0) {
            return;
        }
        xGm_.SetGlobalBuffer((__gm__ T *)x + range_.start, range_.length);
        bitsGm_.SetGlobalBuffer((__gm__ uint8_t *)bits + range_.start / 8,
                                MaskBytes(static_cast<uint32_t>(range_.length)));
        pipe_.InitBuffer(xQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(bitsQueue_, kBufferNum, AlignUp(tile_ / 8, kBlockBytes));
        pipe_.InitBuffer(outQueue_, kBufferNum, tile_ * sizeof(T));
        if constexpr (!kIsFloat<T>) {
            pipe_.InitBuffer(workBuf_, tile_ * sizeof(float));
        }
    }

    __aicore__ inline void Process()
    {
        for (uint64_t done = 0; done < range_.length; done += tile_) {
            const uint64_t left = range_.length - done;
            const uint32_t n = left < tile_ ? static_cast<uint32_t>(left) : tile_;
            LocalTensor<T> x = xQueue_.AllocTensor<T>();
            CopyIn(x, xGm_[done], n);
            xQueue_.EnQue(x);
            LocalTensor<uint8_t> bits = bitsQueue_.AllocTensor<uint8_t>();
            CopyIn(bits, bitsGm_[done / 8], MaskBytes(n));
            bitsQueue_.EnQue(bits);
            Compute(n);
            LocalTensor<T> z = outQueue_.DeQue<T>();
            CopyOut(xGm_[done], z, n);
            outQueue_.FreeTensor(z);
        }
    }

private:
    __aicore__ inline void Compute(uint32_t n)
    {
        const uint32_t m = AlignUp(n, kAlign);
        // The scratch buffer is rewritten while the previous tile's last
        // vector instructions may still read it.
        PipeBarrier<PIPE_V>();
        LocalTensor<T> x = xQueue_.DeQue<T>();
        LocalTensor<uint32_t> bits = bitsQueue_.DeQue<uint32_t>();
        LocalTensor<T> z = outQueue_.AllocTensor<T>();
        ScaleThroughMask(z, x, bits, workBuf_, scale_, m);
        outQueue_.EnQue(z);
        xQueue_.FreeTensor(x);
        bitsQueue_.FreeTensor(bits);
    }

    TPipe pipe_;
    TQue<QuePosition::VECIN, kBufferNum> xQueue_;
    TQue<QuePosition::VECIN, kBufferNum> bitsQueue_;
    TQue<QuePosition::VECOUT, kBufferNum> outQueue_;
    TBuf<TPosition::VECCALC> workBuf_;
    GlobalTensor<T> xGm_;
    GlobalTensor<uint8_t> bitsGm_;
    CoreRange range_;
    uint32_t tile_;
    float scale_;
};

} // namespace ta

TA_RANDOM_BITS_KERNEL(ta_dropout_bitmask_f32, ta::KernelDropoutBitmask, float)
TA_RANDOM_BITS_KERNEL(ta_dropout_bitmask_f16, ta::KernelDropoutBitmask, half)
TA_RANDOM_BITS_KERNEL(ta_dropout_bitmask_bf16, ta::KernelDropoutBitmask, bfloat16_t)
TA_MASK_KERNEL(ta_apply_bitmask_f32, ta::KernelApplyBitmask, float, uint8_t)
TA_MASK_KERNEL(ta_apply_bitmask_f16, ta::KernelApplyBitmask, half, uint8_t)
TA_MASK_KERNEL(ta_apply_bitmask_bf16, ta::KernelApplyBitmask, bfloat16_t, uint8_t)
