// Arithmetic and fill instructions: Duplicate, CreateVecIndex, Add, Sub,
// Mul, Adds, Muls.
//
// A2 types (API pages and asc-devkit impl/basic_api/dav_c220/
// kernel_operator_vec_binary_impl.h): Add/Sub/Mul/Adds/Muls on half,
// int16, int32 and float; no uint32 and no bfloat16. Integer results keep
// the low bits (wrap modulo 2^16 / 2^32), so uint32 arithmetic is done on
// reinterpreted int32 tensors. Half sums and products round once to the
// nearest half (products are exact in float, sums in double).
#ifndef TA_SHIM_VECTOR_ARITH_H
#define TA_SHIM_VECTOR_ARITH_H

#include <cmath>
#include <cstdint>
#include <cstring>

#include "vector_common.h"

namespace ta_shim {

// The half nearest a + b (or a - b, with b negated): the sum of two halves
// is exact in double; rounding it to float to odd keeps the one rounding
// to half (to nearest even) correct.
inline half HalfSum(half a, half b, bool subtract)
{
    const double d = static_cast<double>(static_cast<float>(a)) +
                     (subtract ? -1.0 : 1.0) * static_cast<double>(static_cast<float>(b));
    float f = static_cast<float>(d);
    if (static_cast<double>(f) != d && std::isfinite(f)) {
        uint32_t bits = 0;
        std::memcpy(&bits, &f, sizeof bits);
        if ((bits & 1u) == 0) {
            f = std::nextafter(f, static_cast<float>(d > static_cast<double>(f) ? INFINITY : -INFINITY));
        }
    }
    return half(f);
}

// Wrapping integer arithmetic and IEEE float and half arithmetic, one
// element.
template <typename T>
T WrapAdd(T a, T b)
{
    if constexpr (AscendC::IsSameType<T, half>::value) {
        return HalfSum(a, b, false);
    } else if constexpr (AscendC::IsSameType<T, float>::value) {
        return a + b;
    } else if constexpr (sizeof(T) == 4) {
        return static_cast<T>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
    } else {
        return static_cast<T>(static_cast<uint16_t>(static_cast<uint16_t>(a) + static_cast<uint16_t>(b)));
    }
}

template <typename T>
T WrapSub(T a, T b)
{
    if constexpr (AscendC::IsSameType<T, half>::value) {
        return HalfSum(a, b, true);
    } else if constexpr (AscendC::IsSameType<T, float>::value) {
        return a - b;
    } else if constexpr (sizeof(T) == 4) {
        return static_cast<T>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b));
    } else {
        return static_cast<T>(static_cast<uint16_t>(static_cast<uint16_t>(a) - static_cast<uint16_t>(b)));
    }
}

template <typename T>
T WrapMul(T a, T b)
{
    if constexpr (AscendC::IsSameType<T, float>::value) {
        return a * b;
    } else if constexpr (AscendC::IsSameType<T, half>::value) {
        return half(static_cast<float>(a) * static_cast<float>(b));
    } else if constexpr (sizeof(T) == 4) {
        return static_cast<T>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
    } else {
        return static_cast<T>(static_cast<uint16_t>(static_cast<uint32_t>(static_cast<uint16_t>(a)) *
                                                    static_cast<uint16_t>(b)));
    }
}

template <typename T>
constexpr bool kAddable = kOneOf<T, float, half, int16_t, int32_t>;
template <typename T>
constexpr bool kMultipliable = kOneOf<T, float, half, int16_t, int32_t>;

template <typename T, typename F>
void Binary(const char *api, const AscendC::LocalTensor<T> &dst, const AscendC::LocalTensor<T> &src0,
            const AscendC::LocalTensor<T> &src1, int32_t count, F f)
{
    VecInstr<T> ins(api, count);
    const T *a = src0.Read(ins, "src0", ins.n);
    const T *b = src1.Read(ins, "src1", ins.n);
    ins.Sources(src0, src1);
    T *d = dst.Write(ins, "dst", ins.n);
    for (uint32_t i = 0; i < ins.n; ++i) {
        d[i] = f(a[i], b[i]);
    }
}

template <typename T, typename F>
void WithScalar(const char *api, const AscendC::LocalTensor<T> &dst, const AscendC::LocalTensor<T> &src,
                int32_t count, F f)
{
    VecInstr<T> ins(api, count);
    const T *a = src.Read(ins, "src", ins.n);
    T *d = dst.Write(ins, "dst", ins.n);
    for (uint32_t i = 0; i < ins.n; ++i) {
        d[i] = f(a[i]);
    }
}

} // namespace ta_shim

namespace AscendC {

template <typename T>
void Duplicate(const LocalTensor<T> &dst, const T &scalarValue, const int32_t &calCount)
{
    static_assert(ta_shim::kOneOf<T, float, half, bfloat16_t, int32_t, uint32_t, int16_t, uint16_t>,
                  "Duplicate: A2 fills half, bfloat16, (u)int16, (u)int32 and float");
    ta_shim::VecInstr<T> ins("Duplicate", calCount);
    T *d = dst.Write(ins, "dst", ins.n);
    for (uint32_t i = 0; i < ins.n; ++i) {
        d[i] = scalarValue;
    }
}

// dst[i] = firstValue + i.
template <typename T>
void CreateVecIndex(LocalTensor<T> dst, const T &firstValue, uint32_t calCount)
{
    static_assert(ta_shim::kOneOf<T, int16_t, int32_t, float, half>,
                  "CreateVecIndex: A2 supports int16, half, int32 and float");
    ta_shim::VecInstr<T> ins("CreateVecIndex", calCount);
    T *d = dst.Write(ins, "dst", ins.n);
    for (uint32_t i = 0; i < ins.n; ++i) {
        if constexpr (ta_shim::kIsFloatLike<T>) {
            d[i] = T(static_cast<float>(firstValue) + static_cast<float>(i));
        } else {
            d[i] = ta_shim::WrapAdd(firstValue, static_cast<T>(i));
        }
    }
}

template <typename T>
void Add(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, const int32_t &calCount)
{
    static_assert(!IsSameType<T, uint32_t>::value, "A2 has no uint32 Add: reinterpret as int32");
    static_assert(ta_shim::kAddable<T>, "Add: A2 adds half, int16, int32 and float");
    ta_shim::Binary("Add", dst, src0, src1, calCount, [](T a, T b) { return ta_shim::WrapAdd(a, b); });
}

template <typename T>
void Sub(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, const int32_t &calCount)
{
    static_assert(!IsSameType<T, uint32_t>::value, "A2 has no uint32 Sub: reinterpret as int32");
    static_assert(ta_shim::kAddable<T>, "Sub: A2 subtracts half, int16, int32 and float");
    ta_shim::Binary("Sub", dst, src0, src1, calCount, [](T a, T b) { return ta_shim::WrapSub(a, b); });
}

template <typename T>
void Mul(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, const int32_t &calCount)
{
    static_assert(!IsSameType<T, uint32_t>::value, "A2/A3 vector units have no uint32 multiply");
    static_assert(ta_shim::kMultipliable<T>, "Mul: A2 multiplies half, int16, int32 and float");
    ta_shim::Binary("Mul", dst, src0, src1, calCount, [](T a, T b) { return ta_shim::WrapMul(a, b); });
}

template <typename T>
void Adds(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalarValue, const int32_t &calCount)
{
    static_assert(!IsSameType<T, uint32_t>::value, "A2 has no uint32 Adds: reinterpret as int32");
    static_assert(ta_shim::kAddable<T>, "Adds: A2 adds half, int16, int32 and float");
    const T s = scalarValue;
    ta_shim::WithScalar("Adds", dst, src, calCount, [s](T a) { return ta_shim::WrapAdd(a, s); });
}

template <typename T>
void Muls(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalarValue, const int32_t &calCount)
{
    static_assert(!IsSameType<T, uint32_t>::value, "A2/A3 vector units have no uint32 multiply");
    static_assert(ta_shim::kMultipliable<T>, "Muls: A2 multiplies half, int16, int32 and float");
    const T s = scalarValue;
    ta_shim::WithScalar("Muls", dst, src, calCount, [s](T a) { return ta_shim::WrapMul(a, s); });
}

} // namespace AscendC

#endif // TA_SHIM_VECTOR_ARITH_H
