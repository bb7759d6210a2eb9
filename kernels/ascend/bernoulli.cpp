// In-place bernoulli_: x[e] = 1 where u(offset + e) < p, else 0, with
// u(g) = (Philox word g >> 8) * 2^-24 (RNG.md). x is only written.
//
// Per tile: the scalar unit writes the tile's 24-bit stream values into UB
// (int32), the vector unit converts them to float, compares them with
// p * 2^24 into a bit mask and selects 1 or 0, and halves are rounded from
// float at the end.
#include "ta_common.h"

namespace ta {

template <typename T>
class KernelBernoulli {
public:
    __aicore__ inline KernelBernoulli() {}

    __aicore__ inline void Init(GM_ADDR x, float p, uint64_t seed, uint64_t offset, uint64_t totalLength,
                                uint64_t blockLength, uint32_t tileLength)
    {
        range_ = OwnRange(totalLength, blockLength);
        tile_ = TileOf(tileLength);
        seed_ = seed;
        first_ = offset + range_.start;
        threshold_ = StreamThreshold(p);
        if (range_.length == 0) {
            return;
        }
        xGm_.SetGlobalBuffer((__gm__ T *)x + range_.start, range_.length);
        pipe_.InitBuffer(outQueue_, kBufferNum, tile_ * sizeof(T));
        pipe_.InitBuffer(bitsBuf_, tile_ * sizeof(int32_t));
        pipe_.InitBuffer(valueBuf_, tile_ * sizeof(float));
        pipe_.InitBuffer(onesBuf_, tile_ * sizeof(float));
        pipe_.InitBuffer(maskBuf_, tile_ / 8);
        Duplicate(onesBuf_.Get<float>(), 1.0f, static_cast<int32_t>(tile_));
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
        LocalTensor<int32_t> bits = bitsBuf_.Get<int32_t>();
        LocalTensor<float> value = valueBuf_.Get<float>();
        LocalTensor<uint8_t> mask = maskBuf_.Get<uint8_t>();
        VectorToScalar();
        FillStreamBits(bits, n, seed_, first_ + done);
        ScalarToVector();
        Cast(value, bits, RoundMode::CAST_NONE, m);
        PipeBarrier<PIPE_V>();
        Compares(mask, value, threshold_, CMPMODE::LT, m);
        PipeBarrier<PIPE_V>();
        LocalTensor<T> y = outQueue_.AllocTensor<T>();
        if constexpr (IsSameType<T, float>::value) {
            Select(y, mask, onesBuf_.Get<float>(), 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, m);
        } else {
            Select(value, mask, onesBuf_.Get<float>(), 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, m);
            PipeBarrier<PIPE_V>();
            Narrow(y, value, m);
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
    TBuf<TPosition::VECCALC> bitsBuf_;
    TBuf<TPosition::VECCALC> valueBuf_;
    TBuf<TPosition::VECCALC> onesBuf_;
    TBuf<TPosition::VECCALC> maskBuf_;
    GlobalTensor<T> xGm_;
    CoreRange range_;
    uint32_t tile_;
    uint64_t seed_;
    uint64_t first_;
    float threshold_;
};

template <typename T>
__aicore__ inline void RunBernoulli(GM_ADDR x, float p, uint64_t seed, uint64_t offset, uint64_t totalLength,
                                    uint64_t blockLength, uint32_t tileLength)
{
    KernelBernoulli<T> op;
    op.Init(x, p, seed, offset, totalLength, blockLength, tileLength);
    op.Process();
}

} // namespace ta

extern "C" __global__ __aicore__ void ta_bernoulli_f32(GM_ADDR x, float p, uint64_t seed, uint64_t offset,
                                                       uint64_t totalLength, uint64_t blockLength,
                                                       uint32_t tileLength)
{
    ta::RunBernoulli<float>(x, p, seed, offset, totalLength, blockLength, tileLength);
}

extern "C" __global__ __aicore__ void ta_bernoulli_f16(GM_ADDR x, float p, uint64_t seed, uint64_t offset,
                                                       uint64_t totalLength, uint64_t blockLength,
                                                       uint32_t tileLength)
{
    ta::RunBernoulli<half>(x, p, seed, offset, totalLength, blockLength, tileLength);
}

extern "C" __global__ __aicore__ void ta_bernoulli_bf16(GM_ADDR x, float p, uint64_t seed, uint64_t offset,
                                                        uint64_t totalLength, uint64_t blockLength,
                                                        uint32_t tileLength)
{
    ta::RunBernoulli<bfloat16_t>(x, p, seed, offset, totalLength, blockLength, tileLength);
}
