// Compare and select: Compares (CompareScalar on older releases) and
// Select, per the Compares and Select pages of docs/zh/api for Atlas A2.
//
// - Compares: half and float in every mode, int32 in EQ only; writes a
//   uint8 bit mask (element i -> bit i % 8 of byte i / 8); the level-2
//   count must cover whole 256-byte repeats.
// - Select: half and float; the mask may be uint8/16/32/64 (the same bits,
//   little-endian). Mode 0 (VSEL_CMPMASK_SPR) reuses the first
//   256 / sizeof(T) mask bits for every repeat; modes 1 (tensor, scalar)
//   and 2 (tensor, tensor) consume the mask continuously, bit i for
//   element i.
#ifndef TA_SHIM_VECTOR_SELECT_H
#define TA_SHIM_VECTOR_SELECT_H

#include <cstdint>
#include <string>

#include "vector_common.h"

namespace ta_shim {

// Level-2 Compare/Compares: only whole 256-byte repeats take part.
template <typename T>
uint32_t CompareCount(const char *api, uint32_t count)
{
    const uint64_t bytes = uint64_t(count) * sizeof(T);
    if (bytes % kRepeatBytes != 0) {
        const uint32_t kept = static_cast<uint32_t>(bytes / kRepeatBytes * kRepeatBytes / sizeof(T));
        Violation(Severity::kRecorded, "compare-count",
                  std::string(api) + " of " + std::to_string(count) + " elements = " +
                      std::to_string(bytes) + " bytes, not a multiple of 256: only the first " +
                      std::to_string(kept) + " elements are compared");
        return kept;
    }
    return count;
}

template <typename T>
bool CompareOne(T a, T b, AscendC::CMPMODE mode)
{
    switch (mode) {
    case AscendC::CMPMODE::LT: return a < b;
    case AscendC::CMPMODE::GT: return a > b;
    case AscendC::CMPMODE::EQ: return a == b;
    case AscendC::CMPMODE::LE: return a <= b;
    case AscendC::CMPMODE::GE: return a >= b;
    case AscendC::CMPMODE::NE: return a != b;
    }
    return false;
}

// Halves compare as their float values (exact).
inline float Wide(float v) { return v; }
inline float Wide(half v) { return static_cast<float>(v); }
inline int32_t Wide(int32_t v) { return v; }

template <typename U>
constexpr bool kMaskType = kOneOf<U, uint8_t, uint16_t, uint32_t, uint64_t>;

// The mask bit Select uses for element i.
template <typename T>
uint32_t SelectBit(AscendC::SELMODE mode, uint32_t i)
{
    return mode == AscendC::SELMODE::VSEL_CMPMASK_SPR ? i % (kRepeatBytes / sizeof(T)) : i;
}

template <typename T, typename U>
const uint8_t *SelectMask(const Instr &ins, const AscendC::LocalTensor<U> &selMask, AscendC::SELMODE mode,
                          uint32_t n)
{
    const uint32_t bits = mode == AscendC::SELMODE::VSEL_CMPMASK_SPR ? kRepeatBytes / sizeof(T) : n;
    const uint32_t bytes = (bits + 7) / 8;
    const uint32_t elems = static_cast<uint32_t>((bytes + sizeof(U) - 1) / sizeof(U));
    return reinterpret_cast<const uint8_t *>(selMask.Read(ins, "selMask", elems));
}

} // namespace ta_shim

namespace AscendC {

// dst bit i (bit i % 8 of byte i / 8) = src0[i] <cmpMode> src1Scalar.
template <typename T, typename U>
void Compares(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const T src1Scalar, CMPMODE cmpMode,
              uint32_t calCount)
{
    static_assert(IsSameType<U, uint8_t>::value, "Compares writes a uint8_t bit mask");
    static_assert(!IsSameType<T, uint32_t>::value, "A2/A3 vector units have no uint32 compare");
    static_assert(ta_shim::kIsFloatLike<T> || IsSameType<T, int32_t>::value,
                  "Compares: half, float or int32 (EQ only)");
    ta_shim::VecInstr<T> ins("Compares", calCount);
    if (IsSameType<T, int32_t>::value && cmpMode != CMPMODE::EQ) {
        ta_shim::Violation(ta_shim::Severity::kFatal, "unsupported",
                           "Compares on int32 supports CMPMODE::EQ only on A2/A3");
    }
    const uint32_t n = ta_shim::CompareCount<T>(ins.api, ins.n);
    const T *a = src0.Read(ins, "src0", n);
    uint8_t *m = dst.Write(ins, "dst", n / 8);
    const auto b = ta_shim::Wide(src1Scalar);
    for (uint32_t byte = 0; byte < n / 8; ++byte) {
        uint8_t bits = 0;
        for (uint32_t k = 0; k < 8; ++k) {
            if (ta_shim::CompareOne(ta_shim::Wide(a[byte * 8 + k]), b, cmpMode)) {
                bits |= static_cast<uint8_t>(1u << k);
            }
        }
        m[byte] = bits;
    }
}

// The name older CANN releases use.
template <typename T, typename U>
void CompareScalar(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const T src1Scalar, CMPMODE cmpMode,
                   uint32_t calCount)
{
    Compares(dst, src0, src1Scalar, cmpMode, calCount);
}

// Mode 1: dst[i] = mask bit i ? src0[i] : src1Scalar.
template <typename T, typename U>
void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0, T src1Scalar,
            SELMODE selMode, uint32_t calCount)
{
    static_assert(ta_shim::kMaskType<U>, "Select: the mask is uint8/16/32/64");
    static_assert(ta_shim::kIsFloatLike<T>, "Select: A2 selects half or float");
    {
        // The implementation's own PipeBarrier<PIPE_V> (below).
        ta_shim::Timeline &tl = ta_shim::Core().tl;
        tl.Receive(ta_shim::Pipe::kV, tl.Snapshot(ta_shim::Pipe::kV));
    }
    ta_shim::VecInstr<T> ins("Select", calCount);
    if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE) {
        ta_shim::Violation(ta_shim::Severity::kFatal, "unsupported",
                           "Select with a scalar operand needs SELMODE::VSEL_TENSOR_SCALAR_MODE");
    }
    // The c220 implementation (asc-devkit impl/basic_api/dav_c220/
    // kernel_operator_vec_cmpsel_impl.h, VselImpl with a scalar src1)
    // duplicates the scalar over one repeat, PipeBarrier<PIPE_V>, moves it to
    // the compare-mask register (set_cmpmask), PipeBarrier<PIPE_V>, then
    // selects: two more machine instructions, and the barriers order the
    // Select after every earlier vector instruction.
    ins.extra_issues = 2;
    ins.extra_repeats = 1;
    const uint8_t *m = ta_shim::SelectMask<T>(ins, selMask, selMode, ins.n);
    const T *a = src0.Read(ins, "src0", ins.n);
    T *d = dst.Write(ins, "dst", ins.n);
    for (uint32_t i = 0; i < ins.n; ++i) {
        d[i] = ((m[i / 8] >> (i % 8)) & 1u) != 0 ? a[i] : src1Scalar;
    }
}

// Modes 0 and 2: dst[i] = mask bit ? src0[i] : src1[i].
template <typename T, typename U>
void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0,
            const LocalTensor<T> &src1, SELMODE selMode, uint32_t calCount)
{
    static_assert(ta_shim::kMaskType<U>, "Select: the mask is uint8/16/32/64");
    static_assert(ta_shim::kIsFloatLike<T>, "Select: A2 selects half or float");
    ta_shim::VecInstr<T> ins("Select", calCount);
    if (selMode == SELMODE::VSEL_TENSOR_SCALAR_MODE) {
        ta_shim::Violation(ta_shim::Severity::kFatal, "unsupported",
                           "Select with two tensors needs SELMODE::VSEL_CMPMASK_SPR or VSEL_TENSOR_TENSOR_MODE");
    }
    const uint8_t *m = ta_shim::SelectMask<T>(ins, selMask, selMode, ins.n);
    const T *a = src0.Read(ins, "src0", ins.n);
    const T *b = src1.Read(ins, "src1", ins.n);
    ins.Sources(src0, src1);
    T *d = dst.Write(ins, "dst", ins.n);
    for (uint32_t i = 0; i < ins.n; ++i) {
        const uint32_t bit = ta_shim::SelectBit<T>(selMode, i);
        d[i] = ((m[bit / 8] >> (bit % 8)) & 1u) != 0 ? a[i] : b[i];
    }
}

} // namespace AscendC

#endif // TA_SHIM_VECTOR_SELECT_H
