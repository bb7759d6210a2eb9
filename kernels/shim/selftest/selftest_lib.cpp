// Self-tests of the AscendC shim, built as their own shared library:
//
// - aclrtlaunch_ta_selftest(numBlocks, stream, x, rule, n): small kernels
//   that each break one rule on purpose (see enum Rule), so the Rust tests
//   can show every rule is caught;
// - ta_shim_unit_tests: checks of the shim's instruction semantics (bit
//   layouts, rounding, padding, block iteration) and of the kernels'
//   vector Philox4x32-10 (ta_philox.h) against a reference checked with
//   the Random123 known-answer vectors;
// - ta_shim_{half,bf16}_{to,from}_float: the shim's conversions, for an
//   exhaustive comparison with the `half` crate.
#include <cmath>
#include <string>

#include "kernel_operator.h"
#include "ta_shim/exports.h"
#include "ta_shim/launch.h"

#include "ta_common.h"
#include "ta_philox.h"

namespace selftest {

using namespace AscendC;

// Kept in step with tests/ascend_shim_rules.rs.
enum Rule : uint32_t {
    kShortDataCopy = 0,   // DataCopy of n floats with n * 4 not a multiple of 32
    kMisalignedUb = 1,    // DataCopy into a tensor starting 12 bytes into a buffer
    kUbOverflow = 2,      // queues larger than the UB
    kFreeUnallocated = 3, // FreeTensor of a tensor the queue never handed out
    kDoubleFree = 4,      // FreeTensor twice
    kDeQueEmpty = 5,      // DeQue with nothing queued
    kEnQueOverDepth = 6,  // EnQue beyond the queue depth
    kAllocExhausted = 7,  // AllocTensor with every buffer in use
    kUseAfterFree = 8,    // DataCopy into a freed tensor
    kUseWhileQueued = 9,  // vector op on an EnQue'd tensor
    kLeak = 10,           // tensor never freed
    kCompareCount = 11,   // Compares on 100 floats (400 bytes)
    kMissingSToV = 12,    // SetValue then a vector op, no S_V sync
    kMissingVToS = 13,    // vector op then SetValue, no V_S sync
    kCrossCore = 14,      // every block writes the whole output
    kGmOutOfBounds = 15,  // DataCopy past the GlobalTensor's end
    kWaitWithoutSet = 16, // WaitFlag with no SetFlag
    kWrongPosition = 17,  // DataCopy GM->UB into a VECCALC TBuf
    kCorrect = 18,        // a well-formed mul_scalar by 2: no violation
    kAndWordCount = 19,   // And on uint32 with the word count (the c220 pitfall)
    kMissingBarrier = 20, // a vector op reads another's result, no PipeBarrier<PIPE_V>
    kMissingDeQue = 21,   // a vector op reads a VECIN copy, no EnQue/DeQue
    kThroughVecout = 22,  // GM -> VECOUT -> GM with an MTE2_MTE3 flag: no violation
    kShiftTooFar = 23,    // ShiftRight of uint32 by 33
    kInt32Less = 24,      // Compares on int32 with CMPMODE::LT
    kSelectMode = 25,     // Select with a scalar in VSEL_TENSOR_TENSOR_MODE
    kAndHalfCount = 26,   // the same And with uint16 and twice the count: no violation
};

constexpr uint32_t kTile = 256;

// x[0, n) *= 2 with plain DataCopy, no tail handling: the classic bug.
void ShortDataCopy(GM_ADDR x, uint64_t n)
{
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> in;
    TQue<QuePosition::VECOUT, 1> out;
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float *)x, n);
    pipe.InitBuffer(in, 1, kTile * sizeof(float));
    pipe.InitBuffer(out, 1, kTile * sizeof(float));
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopy(a, gm, static_cast<uint32_t>(n));
    in.EnQue(a);
    a = in.DeQue<float>();
    LocalTensor<float> b = out.AllocTensor<float>();
    Muls(b, a, 2.0f, static_cast<int32_t>(ta::AlignUp(static_cast<uint32_t>(n), ta::kAlign)));
    out.EnQue(b);
    in.FreeTensor(a);
    b = out.DeQue<float>();
    DataCopy(gm, b, static_cast<uint32_t>(n));
    out.FreeTensor(b);
}

// The same with the tails handled (ta::CopyIn/CopyOut): the control case.
void Correct(GM_ADDR x, uint64_t n)
{
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> in;
    TQue<QuePosition::VECOUT, 1> out;
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float *)x, n);
    pipe.InitBuffer(in, 1, kTile * sizeof(float));
    pipe.InitBuffer(out, 1, kTile * sizeof(float));
    LocalTensor<float> a = in.AllocTensor<float>();
    ta::CopyIn(a, gm, static_cast<uint32_t>(n));
    in.EnQue(a);
    a = in.DeQue<float>();
    LocalTensor<float> b = out.AllocTensor<float>();
    Muls(b, a, 2.0f, static_cast<int32_t>(ta::AlignUp(static_cast<uint32_t>(n), ta::kAlign)));
    out.EnQue(b);
    in.FreeTensor(a);
    b = out.DeQue<float>();
    ta::CopyOut(gm, b, static_cast<uint32_t>(n));
    out.FreeTensor(b);
}

// x = x >= 0 ? x : 0 over n = 100 floats with one Compares of 400 bytes:
// only the first 64 elements are compared, and the Select after it reads
// mask bits that were never written for the rest.
void CompareCount(GM_ADDR x, uint64_t n)
{
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> in;
    TQue<QuePosition::VECOUT, 1> out;
    TBuf<TPosition::VECCALC> maskBuf;
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float *)x, n);
    pipe.InitBuffer(in, 1, kTile * sizeof(float));
    pipe.InitBuffer(out, 1, kTile * sizeof(float));
    pipe.InitBuffer(maskBuf, kTile / 8);
    LocalTensor<float> a = in.AllocTensor<float>();
    ta::CopyIn(a, gm, static_cast<uint32_t>(n));
    in.EnQue(a);
    a = in.DeQue<float>();
    LocalTensor<uint8_t> mask = maskBuf.Get<uint8_t>();
    Compares(mask, a, 0.0f, CMPMODE::GE, static_cast<uint32_t>(n));
    LocalTensor<float> b = out.AllocTensor<float>();
    Select(b, mask, a, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, static_cast<uint32_t>(n));
    out.EnQue(b);
    in.FreeTensor(a);
    b = out.DeQue<float>();
    ta::CopyOut(gm, b, static_cast<uint32_t>(n));
    out.FreeTensor(b);
}

// x[0, n) = x * 2 copied GM -> VECOUT -> GM (n a multiple of 8): allowed
// on A2, ordered by an MTE2 -> MTE3 flag.
void ThroughVecout(GM_ADDR x, uint64_t n)
{
    TPipe pipe;
    TQue<QuePosition::VECOUT, 1> out;
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float *)x, n);
    pipe.InitBuffer(out, 1, kTile * sizeof(float));
    LocalTensor<float> t = out.AllocTensor<float>();
    DataCopy(t, gm, static_cast<uint32_t>(n));
    SetFlag<HardEvent::MTE2_MTE3>(0);
    WaitFlag<HardEvent::MTE2_MTE3>(0);
    DataCopy(gm[0], t, static_cast<uint32_t>(n));
    out.FreeTensor(t);
}

// The words of x[0, n) (n a multiple of 64) keep only their low 16 bits:
// And with 0x0000FFFF, on uint32 with the word count (the pitfall) or on
// uint16 with twice the count (correct).
void AndLowHalves(uint32_t rule, GM_ADDR x, uint64_t n)
{
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> in;
    TQue<QuePosition::VECOUT, 1> out;
    TBuf<TPosition::VECCALC> maskBuf;
    GlobalTensor<uint32_t> gm;
    gm.SetGlobalBuffer((__gm__ uint32_t *)x, n);
    pipe.InitBuffer(in, 1, kTile * sizeof(uint32_t));
    pipe.InitBuffer(out, 1, kTile * sizeof(uint32_t));
    pipe.InitBuffer(maskBuf, kTile * sizeof(uint32_t));
    LocalTensor<uint32_t> mask = maskBuf.Get<uint32_t>();
    Duplicate(mask, 0x0000FFFFu, static_cast<int32_t>(n));
    LocalTensor<uint32_t> a = in.AllocTensor<uint32_t>();
    DataCopy(a, gm, static_cast<uint32_t>(n));
    in.EnQue(a);
    a = in.DeQue<uint32_t>();
    LocalTensor<uint32_t> b = out.AllocTensor<uint32_t>();
    // Words the And does not reach stay all ones.
    Duplicate(b, 0xFFFFFFFFu, static_cast<int32_t>(n));
    PipeBarrier<PIPE_V>();
    if (rule == kAndWordCount) {
        And(b, a, mask, static_cast<int32_t>(n));
    } else {
        And(b.ReinterpretCast<uint16_t>(), a.ReinterpretCast<uint16_t>(), mask.ReinterpretCast<uint16_t>(),
            static_cast<int32_t>(2 * n));
    }
    out.EnQue(b);
    in.FreeTensor(a);
    b = out.DeQue<uint32_t>();
    DataCopy(gm, b, static_cast<uint32_t>(n));
    out.FreeTensor(b);
}

void VectorMisuse(uint32_t rule, GM_ADDR x, uint64_t n)
{
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> in;
    TBuf<TPosition::VECCALC> aBuf;
    TBuf<TPosition::VECCALC> bBuf;
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float *)x, n);
    pipe.InitBuffer(in, 1, kTile * sizeof(float));
    pipe.InitBuffer(aBuf, kTile * sizeof(float));
    pipe.InitBuffer(bBuf, kTile * sizeof(float));
    LocalTensor<float> a = aBuf.Get<float>();
    LocalTensor<float> b = bBuf.Get<float>();
    switch (rule) {
    case kMissingBarrier:
        Duplicate(a, 1.0f, 64);
        Muls(b, a, 2.0f, 64);
        break;
    case kMissingDeQue: {
        LocalTensor<float> t = in.AllocTensor<float>();
        DataCopy(t, gm, 64);
        Muls(b, t, 2.0f, 64);
        in.FreeTensor(t);
        break;
    }
    case kShiftTooFar: {
        LocalTensor<uint32_t> u = aBuf.Get<uint32_t>();
        ShiftRight(u, u, 33u, 64);
        break;
    }
    case kInt32Less: {
        LocalTensor<int32_t> i = aBuf.Get<int32_t>();
        Compares(bBuf.Get<uint8_t>(), i, 0, CMPMODE::LT, 64);
        break;
    }
    case kSelectMode:
        Select(b, bBuf.Get<uint8_t>(), a, 0.0f, SELMODE::VSEL_TENSOR_TENSOR_MODE, 64);
        break;
    default:
        break;
    }
}

void QueueMisuse(uint32_t rule, GM_ADDR x, uint64_t n)
{
    TPipe pipe;
    TQue<QuePosition::VECIN, 1> in;
    TQue<QuePosition::VECIN, 1> other;
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float *)x, n);
    pipe.InitBuffer(in, 2, kTile * sizeof(float));
    pipe.InitBuffer(other, 1, kTile * sizeof(float));
    switch (rule) {
    case kFreeUnallocated: {
        LocalTensor<float> t = other.AllocTensor<float>();
        in.FreeTensor(t);
        break;
    }
    case kDoubleFree: {
        LocalTensor<float> t = in.AllocTensor<float>();
        in.FreeTensor(t);
        in.FreeTensor(t);
        break;
    }
    case kDeQueEmpty: {
        LocalTensor<float> t = in.DeQue<float>();
        in.FreeTensor(t);
        break;
    }
    case kEnQueOverDepth: {
        LocalTensor<float> t0 = in.AllocTensor<float>();
        in.EnQue(t0);
        LocalTensor<float> t1 = in.AllocTensor<float>();
        in.EnQue(t1);
        break;
    }
    case kAllocExhausted: {
        in.AllocTensor<float>();
        in.AllocTensor<float>();
        in.AllocTensor<float>();
        break;
    }
    case kUseAfterFree: {
        LocalTensor<float> t = in.AllocTensor<float>();
        in.FreeTensor(t);
        DataCopy(t, gm, 8);
        break;
    }
    case kUseWhileQueued: {
        LocalTensor<float> t = in.AllocTensor<float>();
        in.EnQue(t);
        Duplicate(t, 1.0f, 64);
        break;
    }
    case kLeak: {
        LocalTensor<float> t = in.AllocTensor<float>();
        DataCopy(t, gm, 8);
        break;
    }
    default:
        break;
    }
}

void Run(uint32_t rule, GM_ADDR x, uint64_t n)
{
    switch (rule) {
    case kShortDataCopy:
        ShortDataCopy(x, n);
        return;
    case kCorrect:
        Correct(x, n);
        return;
    case kCompareCount:
        CompareCount(x, n);
        return;
    case kMisalignedUb: {
        TPipe pipe;
        TQue<QuePosition::VECIN, 1> in;
        GlobalTensor<float> gm;
        gm.SetGlobalBuffer((__gm__ float *)x, n);
        pipe.InitBuffer(in, 1, kTile * sizeof(float));
        LocalTensor<float> t = in.AllocTensor<float>();
        DataCopy(t[3], gm, 8);
        in.FreeTensor(t);
        return;
    }
    case kUbOverflow: {
        TPipe pipe;
        TQue<QuePosition::VECIN, 2> in;
        TQue<QuePosition::VECOUT, 2> out;
        pipe.InitBuffer(in, 2, 64 * 1024);
        pipe.InitBuffer(out, 2, 64 * 1024);
        return;
    }
    case kMissingSToV:
    case kMissingVToS: {
        TPipe pipe;
        TBuf<TPosition::VECCALC> bitsBuf;
        TBuf<TPosition::VECCALC> valueBuf;
        pipe.InitBuffer(bitsBuf, 64 * sizeof(int32_t));
        pipe.InitBuffer(valueBuf, 64 * sizeof(float));
        LocalTensor<int32_t> bits = bitsBuf.Get<int32_t>();
        LocalTensor<float> value = valueBuf.Get<float>();
        if (rule == kMissingSToV) {
            bits.SetValue(0, 1);
            Cast(value, bits, RoundMode::CAST_NONE, 64);
        } else {
            Duplicate(bits, 0, 64);
            bits.SetValue(0, 1);
        }
        return;
    }
    case kCrossCore: {
        TPipe pipe;
        TQue<QuePosition::VECOUT, 1> out;
        GlobalTensor<float> gm;
        gm.SetGlobalBuffer((__gm__ float *)x, n);
        pipe.InitBuffer(out, 1, kTile * sizeof(float));
        LocalTensor<float> t = out.AllocTensor<float>();
        Duplicate(t, static_cast<float>(GetBlockIdx()), 64);
        out.EnQue(t);
        t = out.DeQue<float>();
        ta::CopyOut(gm, t, static_cast<uint32_t>(n));
        out.FreeTensor(t);
        return;
    }
    case kGmOutOfBounds: {
        TPipe pipe;
        TQue<QuePosition::VECIN, 1> in;
        GlobalTensor<float> gm;
        gm.SetGlobalBuffer((__gm__ float *)x, n);
        pipe.InitBuffer(in, 1, kTile * sizeof(float));
        LocalTensor<float> t = in.AllocTensor<float>();
        DataCopy(t, gm[n / 8 * 8], 64);
        in.FreeTensor(t);
        return;
    }
    case kWaitWithoutSet:
        WaitFlag<HardEvent::MTE2_V>(0);
        return;
    case kWrongPosition: {
        TPipe pipe;
        TBuf<TPosition::VECCALC> calc;
        GlobalTensor<float> gm;
        gm.SetGlobalBuffer((__gm__ float *)x, n);
        pipe.InitBuffer(calc, kTile * sizeof(float));
        DataCopy(calc.Get<float>(), gm, 8);
        return;
    }
    case kThroughVecout:
        ThroughVecout(x, n);
        return;
    case kAndWordCount:
    case kAndHalfCount:
        AndLowHalves(rule, x, n);
        return;
    case kMissingBarrier:
    case kMissingDeQue:
    case kShiftTooFar:
    case kInt32Less:
    case kSelectMode:
        VectorMisuse(rule, x, n);
        return;
    default:
        QueueMisuse(rule, x, n);
        return;
    }
}

} // namespace selftest

extern "C" TA_SHIM_EXPORT uint32_t aclrtlaunch_ta_selftest(uint32_t numBlocks, void *stream, void *x, uint32_t rule,
                                                          uint64_t n)
{
    (void)stream;
    return ta_shim::Launch("ta_selftest", numBlocks,
                           [&] { selftest::Run(rule, static_cast<GM_ADDR>(x), n); });
}

extern "C" TA_SHIM_EXPORT float ta_shim_half_to_float(uint16_t h) { return ta_shim::HalfBitsToFloat(h); }
extern "C" TA_SHIM_EXPORT uint16_t ta_shim_half_from_float(float f) { return ta_shim::FloatToHalfBits(f); }
extern "C" TA_SHIM_EXPORT float ta_shim_bf16_to_float(uint16_t b) { return ta_shim::Bf16BitsToFloat(b); }
extern "C" TA_SHIM_EXPORT uint16_t ta_shim_bf16_from_float(float f) { return ta_shim::FloatToBf16Bits(f); }

#include "unit_tests.inc"
