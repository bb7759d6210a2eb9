// Vector-unit instructions (level-2 "first n elements" forms) on the UB.
//
// Only the element types Atlas A2/A3 support are accepted, at compile time:
// there is no uint32 multiply or compare, Compare on int32 has EQ only, and
// Cast exists for the listed pairs. Every operand must be a usable tensor
// that starts 32-byte aligned and holds the elements the count asks for.
#ifndef TA_SHIM_VECTOR_H
#define TA_SHIM_VECTOR_H

#include <cmath>
#include <cstdint>
#include <string>

#include "state.h"
#include "tensor.h"

namespace AscendC {

enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

} // namespace AscendC

namespace ta_shim {

template <typename T>
constexpr bool kIsFloatLike = AscendC::IsSameType<T, float>::value || AscendC::IsSameType<T, half>::value;

inline uint32_t VectorCount(const char *api, int64_t count)
{
    if (count <= 0) {
        Violation(Severity::kFatal, "vector-count",
                  std::string(api) + ": count " + std::to_string(count) + " must be positive");
    }
    return static_cast<uint32_t>(count);
}

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

// Widened value of a float-like element, so half compares and multiplies in
// float, which is exact for products and comparisons of halves.
inline float Wide(float v) { return v; }
inline float Wide(half v) { return static_cast<float>(v); }
inline int32_t Wide(int32_t v) { return v; }

} // namespace ta_shim

namespace AscendC {

template <typename T>
void Duplicate(const LocalTensor<T> &dst, const T &scalarValue, const int32_t &calCount)
{
    static_assert(ta_shim::kIsFloatLike<T> || IsSameType<T, int32_t>::value ||
                      IsSameType<T, int16_t>::value || IsSameType<T, uint16_t>::value,
                  "Duplicate: element type not modelled");
    const uint32_t n = ta_shim::VectorCount("Duplicate", calCount);
    T *d = dst.Use("Duplicate", "dst", n, ta_shim::Unit::kVector);
    for (uint32_t i = 0; i < n; ++i) {
        d[i] = scalarValue;
    }
}

template <typename T>
void Mul(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1,
         const int32_t &calCount)
{
    static_assert(!IsSameType<T, uint32_t>::value, "A2/A3 vector units have no uint32 multiply");
    static_assert(ta_shim::kIsFloatLike<T>, "Mul: the shim models half and float only");
    const uint32_t n = ta_shim::VectorCount("Mul", calCount);
    const T *a = src0.Use("Mul", "src0", n, ta_shim::Unit::kVector);
    const T *b = src1.Use("Mul", "src1", n, ta_shim::Unit::kVector);
    T *d = dst.Use("Mul", "dst", n, ta_shim::Unit::kVector);
    for (uint32_t i = 0; i < n; ++i) {
        d[i] = T(ta_shim::Wide(a[i]) * ta_shim::Wide(b[i]));
    }
}

template <typename T>
void Muls(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalarValue,
          const int32_t &calCount)
{
    static_assert(!IsSameType<T, uint32_t>::value, "A2/A3 vector units have no uint32 multiply");
    static_assert(ta_shim::kIsFloatLike<T>, "Muls: the shim models half and float only");
    const uint32_t n = ta_shim::VectorCount("Muls", calCount);
    const T *a = src.Use("Muls", "src", n, ta_shim::Unit::kVector);
    T *d = dst.Use("Muls", "dst", n, ta_shim::Unit::kVector);
    const float s = ta_shim::Wide(scalarValue);
    for (uint32_t i = 0; i < n; ++i) {
        d[i] = T(ta_shim::Wide(a[i]) * s);
    }
}

// dst bit i (bit i % 8 of byte i / 8) = src0[i] <cmpMode> src1Scalar.
template <typename T, typename U>
void Compares(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const T src1Scalar,
              CMPMODE cmpMode, uint32_t calCount)
{
    static_assert(IsSameType<U, uint8_t>::value, "Compares writes a uint8_t bit mask");
    static_assert(!IsSameType<T, uint32_t>::value, "A2/A3 vector units have no uint32 compare");
    static_assert(ta_shim::kIsFloatLike<T> || IsSameType<T, int32_t>::value,
                  "Compares: half, float or int32 (EQ only)");
    if (IsSameType<T, int32_t>::value && cmpMode != CMPMODE::EQ) {
        ta_shim::Violation(ta_shim::Severity::kFatal, "unsupported",
                           "Compares on int32 supports CMPMODE::EQ only on A2/A3");
    }
    const uint32_t n = ta_shim::CompareCount<T>("Compares", ta_shim::VectorCount("Compares", calCount));
    const T *a = src0.Use("Compares", "src0", n, ta_shim::Unit::kVector);
    uint8_t *m = dst.Use("Compares", "dst", n / 8, ta_shim::Unit::kVector);
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
void CompareScalar(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const T src1Scalar,
                   CMPMODE cmpMode, uint32_t calCount)
{
    Compares(dst, src0, src1Scalar, cmpMode, calCount);
}

// dst[i] = bit i of selMask ? src0[i] : src1Scalar.
template <typename T, typename U>
void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0,
            T src1Scalar, SELMODE selMode, uint32_t calCount)
{
    static_assert(IsSameType<U, uint8_t>::value, "Select reads a uint8_t bit mask");
    static_assert(ta_shim::kIsFloatLike<T>, "Select: half or float");
    if (selMode != SELMODE::VSEL_TENSOR_SCALAR_MODE) {
        ta_shim::Violation(ta_shim::Severity::kFatal, "unsupported",
                           "Select with a scalar operand needs SELMODE::VSEL_TENSOR_SCALAR_MODE");
    }
    const uint32_t n = ta_shim::VectorCount("Select", calCount);
    const uint8_t *m = selMask.Use("Select", "selMask", (n + 7) / 8, ta_shim::Unit::kVector);
    const T *a = src0.Use("Select", "src0", n, ta_shim::Unit::kVector);
    T *d = dst.Use("Select", "dst", n, ta_shim::Unit::kVector);
    for (uint32_t i = 0; i < n; ++i) {
        d[i] = ((m[i / 8] >> (i % 8)) & 1u) != 0 ? a[i] : src1Scalar;
    }
}

// dst[i] = bit i of selMask ? src0[i] : src1[i].
template <typename T, typename U>
void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0,
            const LocalTensor<T> &src1, SELMODE selMode, uint32_t calCount)
{
    static_assert(IsSameType<U, uint8_t>::value, "Select reads a uint8_t bit mask");
    static_assert(ta_shim::kIsFloatLike<T>, "Select: half or float");
    if (selMode != SELMODE::VSEL_TENSOR_TENSOR_MODE) {
        ta_shim::Violation(ta_shim::Severity::kFatal, "unsupported",
                           "Select with two tensors needs SELMODE::VSEL_TENSOR_TENSOR_MODE");
    }
    const uint32_t n = ta_shim::VectorCount("Select", calCount);
    const uint8_t *m = selMask.Use("Select", "selMask", (n + 7) / 8, ta_shim::Unit::kVector);
    const T *a = src0.Use("Select", "src0", n, ta_shim::Unit::kVector);
    const T *b = src1.Use("Select", "src1", n, ta_shim::Unit::kVector);
    T *d = dst.Use("Select", "dst", n, ta_shim::Unit::kVector);
    for (uint32_t i = 0; i < n; ++i) {
        d[i] = ((m[i / 8] >> (i % 8)) & 1u) != 0 ? a[i] : b[i];
    }
}

} // namespace AscendC

namespace ta_shim {

inline const char *RoundName(AscendC::RoundMode m)
{
    static const char *const names[] = {"CAST_NONE",  "CAST_RINT",  "CAST_FLOOR", "CAST_CEIL",
                                        "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
    return names[static_cast<int>(m)];
}

// The conversions the kernels need, with the round modes the shim models.
// Widening (half/bfloat16 -> float) is exact and takes CAST_NONE; int32 ->
// float and float -> half round to nearest even under CAST_NONE and
// CAST_RINT alike (CAST_NONE means RINT where precision is lost);
// float -> bfloat16 takes CAST_RINT.
template <typename D, typename S>
struct CastRule {
    static constexpr bool kSupported = false;
};
template <>
struct CastRule<float, half> {
    static constexpr bool kSupported = true;
    static bool Mode(AscendC::RoundMode m) { return m == AscendC::RoundMode::CAST_NONE; }
    static float Apply(half v) { return static_cast<float>(v); }
};
template <>
struct CastRule<float, bfloat16_t> {
    static constexpr bool kSupported = true;
    static bool Mode(AscendC::RoundMode m) { return m == AscendC::RoundMode::CAST_NONE; }
    static float Apply(bfloat16_t v) { return static_cast<float>(v); }
};
template <>
struct CastRule<half, float> {
    static constexpr bool kSupported = true;
    static bool Mode(AscendC::RoundMode m)
    {
        return m == AscendC::RoundMode::CAST_RINT || m == AscendC::RoundMode::CAST_NONE;
    }
    static half Apply(float v) { return half(v); }
};
template <>
struct CastRule<bfloat16_t, float> {
    static constexpr bool kSupported = true;
    static bool Mode(AscendC::RoundMode m) { return m == AscendC::RoundMode::CAST_RINT; }
    static bfloat16_t Apply(float v) { return bfloat16_t(v); }
};
template <>
struct CastRule<float, int32_t> {
    static constexpr bool kSupported = true;
    static bool Mode(AscendC::RoundMode m)
    {
        return m == AscendC::RoundMode::CAST_NONE || m == AscendC::RoundMode::CAST_RINT;
    }
    static float Apply(int32_t v) { return static_cast<float>(v); }
};

} // namespace ta_shim

namespace AscendC {

template <typename T1, typename T2>
void Cast(const LocalTensor<T1> &dstLocal, const LocalTensor<T2> &srcLocal, const RoundMode &round_mode,
          const uint32_t calCount)
{
    using Rule = ta_shim::CastRule<T1, T2>;
    static_assert(Rule::kSupported, "Cast: conversion not available on A2/A3 or not modelled");
    if (!Rule::Mode(round_mode)) {
        ta_shim::Violation(ta_shim::Severity::kFatal, "unsupported",
                           std::string("Cast: round mode ") + ta_shim::RoundName(round_mode) +
                               " is not modelled for this conversion");
    }
    const uint32_t n = ta_shim::VectorCount("Cast", calCount);
    const T2 *s = srcLocal.Use("Cast", "src", n, ta_shim::Unit::kVector);
    T1 *d = dstLocal.Use("Cast", "dst", n, ta_shim::Unit::kVector);
    if (static_cast<const void *>(s) != static_cast<const void *>(d) && sizeof(T1) != sizeof(T2)) {
        // Different widths must not overlap partially; equal starts are in place.
        const uint8_t *sb = reinterpret_cast<const uint8_t *>(s);
        const uint8_t *db = reinterpret_cast<const uint8_t *>(d);
        if (sb < db + n * sizeof(T1) && db < sb + n * sizeof(T2)) {
            ta_shim::Violation(ta_shim::Severity::kFatal, "ub-bounds",
                               "Cast: src and dst overlap without starting at the same address");
        }
    }
    if (static_cast<const void *>(s) == static_cast<const void *>(d) && sizeof(T1) != sizeof(T2)) {
        ta_shim::Violation(ta_shim::Severity::kFatal, "unsupported",
                           "Cast in place between types of different widths is not modelled");
    }
    for (uint32_t i = 0; i < n; ++i) {
        d[i] = Rule::Apply(s[i]);
    }
}

} // namespace AscendC

#endif // TA_SHIM_VECTOR_H
