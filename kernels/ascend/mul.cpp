// Elementwise multiply, in place: mul_ (x = x * y) and mul_scalar_
// (x = x * s). Halves are widened to float, multiplied and rounded back to
// nearest even, as the host reference does.
#include "ta_common.h"

namespace ta {

template <typename T, bool kScalar>
class KernelMul {
public:
    __aicore__ inline KernelMul() {}

    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, float s, uint64_t totalLength, uint64_t blockLength,
                                uint32_t tileLength)
    {
        range_ = OwnRange(totalLength, blockLength);
        tile_ = TileOf(tileLength);
        s_ = s;
        if (range_.length == 0) {
            return;
        }
        xGm_.SetGlobalBuffer((__gm__ T *)x + range_.start, range_.length);
        pipe_.InitBuffer(xQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(outQueue_, kBufferNum, tile_ * sizeof(T));
        const uint32_t bytes = AlignUp(tile_ * sizeof(T), kBlockBytes);
        if constexpr (!kScalar) {
            yGm_.SetGlobalBuffer((__gm__ T *)y + range_.start, range_.length);
            // Mul reads x and y together: float reads them from the queue
            // buffers (x_i and y_i pair up), so y starts half a bank period
            // after x, past x's and the out queue's buffers.
            if constexpr (IsSameType<T, float>::value) {
                Pad(BankShiftPad(4 * bytes));
            }
            pipe_.InitBuffer(yQueue_, kBufferNum, tile_ * sizeof(T));
        }
        if constexpr (!IsSameType<T, float>::value) {
            pipe_.InitBuffer(xWork_, tile_ * sizeof(float));
            if constexpr (!kScalar) {
                // Halves multiply their float copies: the same for them.
                Pad(BankShiftPad(tile_ * sizeof(float)));
                pipe_.InitBuffer(yWork_, tile_ * sizeof(float));
            }
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
    // Unused UB that moves the next buffer to another set of bank groups.
    __aicore__ inline void Pad(uint32_t bytes)
    {
        if (bytes != 0) {
            pipe_.InitBuffer(padBuf_, bytes);
        }
    }

    __aicore__ inline void CopyInTile(uint64_t done, uint32_t n)
    {
        LocalTensor<T> x = xQueue_.AllocTensor<T>();
        CopyIn(x, xGm_[done], n);
        xQueue_.EnQue(x);
        if constexpr (!kScalar) {
            LocalTensor<T> y = yQueue_.AllocTensor<T>();
            CopyIn(y, yGm_[done], n);
            yQueue_.EnQue(y);
        }
    }

    __aicore__ inline void Compute(uint32_t n)
    {
        const uint32_t m = AlignUp(n, kAlign);
        // The scratch buffers are rewritten while the previous tile's last
        // vector instructions may still read them.
        PipeBarrier<PIPE_V>();
        LocalTensor<T> x = xQueue_.DeQue<T>();
        LocalTensor<T> z = outQueue_.AllocTensor<T>();
        if constexpr (kScalar) {
            if constexpr (IsSameType<T, float>::value) {
                Muls(z, x, s_, m);
            } else {
                LocalTensor<float> xf = xWork_.Get<float>();
                Widen(xf, x, m);
                PipeBarrier<PIPE_V>();
                Muls(xf, xf, s_, m);
                PipeBarrier<PIPE_V>();
                Narrow(z, xf, m);
            }
        } else {
            LocalTensor<T> y = yQueue_.DeQue<T>();
            if constexpr (IsSameType<T, float>::value) {
                Mul(z, x, y, m);
            } else {
                LocalTensor<float> xf = xWork_.Get<float>();
                LocalTensor<float> yf = yWork_.Get<float>();
                Widen(xf, x, m);
                Widen(yf, y, m);
                PipeBarrier<PIPE_V>();
                Mul(xf, xf, yf, m);
                PipeBarrier<PIPE_V>();
                Narrow(z, xf, m);
            }
            yQueue_.FreeTensor(y);
        }
        outQueue_.EnQue(z);
        xQueue_.FreeTensor(x);
    }

    __aicore__ inline void CopyOutTile(uint64_t done, uint32_t n)
    {
        LocalTensor<T> z = outQueue_.DeQue<T>();
        CopyOut(xGm_[done], z, n);
        outQueue_.FreeTensor(z);
    }

    TPipe pipe_;
    TQue<QuePosition::VECIN, kBufferNum> xQueue_;
    TQue<QuePosition::VECIN, kBufferNum> yQueue_;
    TQue<QuePosition::VECOUT, kBufferNum> outQueue_;
    TBuf<TPosition::VECCALC> xWork_;
    TBuf<TPosition::VECCALC> yWork_;
    TBuf<TPosition::VECCALC> padBuf_;
    GlobalTensor<T> xGm_;
    GlobalTensor<T> yGm_;
    CoreRange range_;
    uint32_t tile_;
    float s_;
};

} // namespace ta

TA_BINARY_KERNEL(ta_mul_f32, ta::KernelMul, float)
TA_BINARY_KERNEL(ta_mul_f16, ta::KernelMul, half)
TA_BINARY_KERNEL(ta_mul_bf16, ta::KernelMul, bfloat16_t)
TA_SCALAR_KERNEL(ta_mul_scalar_f32, ta::KernelMul, float)
TA_SCALAR_KERNEL(ta_mul_scalar_f16, ta::KernelMul, half)
TA_SCALAR_KERNEL(ta_mul_scalar_bf16, ta::KernelMul, bfloat16_t)
