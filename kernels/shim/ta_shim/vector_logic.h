// Bitwise instructions: And, Or, Not, ShiftLeft, ShiftRight.
//
// A2 (the And/Or/Not/ShiftLeft/ShiftRight pages of docs/zh/api and
// asc-devkit impl/basic_api/dav_c220/kernel_operator_vec_binary_impl.h):
// - And/Or/Not operate on int16/uint16. The level-2 And and Or also accept
//   int32/uint32, but run them as int16 with the same count, so only the
//   first count/2 words are processed (the page says to pass twice the
//   count; the impl reinterprets "for compatibility"). The shim reproduces
//   that and records it (`logic-count`), so a kernel that falls into the
//   pitfall fails its bit-exact tests and the rule tests.
// - ShiftLeft/ShiftRight take (u)int16 and (u)int32; both are logical on
//   unsigned types and arithmetic on signed ones (ShiftLeft keeps the sign
//   bit, per the ShiftLeft page); the shift lies in [0, 16] or [0, 32].
// - There is no Xor in the A2 basic API. The advanced Xor exists on A2 for
//   int16/uint16 (asc-devkit docs/zh/api/SIMD-API/高阶API/数学计算/Xor接口/
//   Xor-82.md; 4 basic instructions in its implementation); the kernels'
//   (a | b) - (a & b) takes 3 and the shim does not model the advanced one.
#ifndef TA_SHIM_VECTOR_LOGIC_H
#define TA_SHIM_VECTOR_LOGIC_H

#include <cstdint>
#include <string>
#include <type_traits>

#include "vector_common.h"

namespace ta_shim {

template <typename T>
constexpr bool kShort = kOneOf<T, int16_t, uint16_t>;
template <typename T>
constexpr bool kWord = kOneOf<T, int32_t, uint32_t>;

template <typename T, typename F>
void Bitwise(const char *api, const AscendC::LocalTensor<T> &dst, const AscendC::LocalTensor<T> &src0,
             const AscendC::LocalTensor<T> &src1, int32_t count, F f)
{
    static_assert(kShort<T> || kWord<T>, "And/Or: A2 supports (u)int16 (and (u)int32 with a halved count)");
    if constexpr (kWord<T>) {
        const uint32_t n = VectorCount(api, count);
        Violation(Severity::kRecorded, "logic-count",
                  std::string(api) + " on a 32-bit type with count " + std::to_string(n) +
                      ": A2 runs it as int16 with the same count, so only the first " + std::to_string(n / 2) +
                      " words are processed (reinterpret as uint16 with twice the count)");
        Bitwise(api, dst.template ReinterpretCast<uint16_t>(), src0.template ReinterpretCast<uint16_t>(),
                src1.template ReinterpretCast<uint16_t>(), count,
                [f](uint16_t a, uint16_t b) { return static_cast<uint16_t>(f(a, b)); });
    } else {
        VecInstr<T> ins(api, count);
        const T *a = src0.Read(ins, "src0", ins.n);
        const T *b = src1.Read(ins, "src1", ins.n);
        ins.Sources(src0, src1);
        T *d = dst.Write(ins, "dst", ins.n);
        for (uint32_t i = 0; i < ins.n; ++i) {
            d[i] = static_cast<T>(f(a[i], b[i]));
        }
    }
}

template <typename T>
uint32_t ShiftCount(const char *api, T s)
{
    const int64_t v = static_cast<int64_t>(s);
    const int64_t width = static_cast<int64_t>(sizeof(T) * 8);
    if (v < 0 || v > width) {
        Violation(Severity::kFatal, "unsupported",
                  std::string(api) + ": shift " + std::to_string(v) + " outside [0, " + std::to_string(width) +
                      "] for a " + std::to_string(width) + "-bit type on A2");
    }
    return static_cast<uint32_t>(v);
}

} // namespace ta_shim

namespace AscendC {

template <typename T>
void And(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, const int32_t &count)
{
    ta_shim::Bitwise("And", dst, src0, src1, count, [](auto a, auto b) { return a & b; });
}

template <typename T>
void Or(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, const int32_t &count)
{
    ta_shim::Bitwise("Or", dst, src0, src1, count, [](auto a, auto b) { return a | b; });
}

template <typename T>
void Not(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t &count)
{
    static_assert(ta_shim::kShort<T>, "Not: A2 supports int16/uint16 only");
    ta_shim::VecInstr<T> ins("Not", count);
    const T *a = src.Read(ins, "src", ins.n);
    T *d = dst.Write(ins, "dst", ins.n);
    for (uint32_t i = 0; i < ins.n; ++i) {
        d[i] = static_cast<T>(~a[i]);
    }
}

template <typename T>
void ShiftLeft(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalarValue, const int32_t &count)
{
    static_assert(ta_shim::kShort<T> || ta_shim::kWord<T>, "ShiftLeft: A2 supports (u)int16 and (u)int32");
    ta_shim::VecInstr<T> ins("ShiftLeft", count);
    const uint32_t s = ta_shim::ShiftCount(ins.api, scalarValue);
    const T *a = src.Read(ins, "src", ins.n);
    T *d = dst.Write(ins, "dst", ins.n);
    using Bits = typename std::conditional<sizeof(T) == 4, uint32_t, uint16_t>::type;
    constexpr Bits sign = static_cast<Bits>(Bits(1) << (sizeof(T) * 8 - 1));
    for (uint32_t i = 0; i < ins.n; ++i) {
        const Bits v = static_cast<Bits>(a[i]);
        const Bits shifted = s >= sizeof(T) * 8 ? Bits(0) : static_cast<Bits>(uint64_t(v) << s);
        if constexpr (IsSameType<T, int32_t>::value || IsSameType<T, int16_t>::value) {
            // Arithmetic: the sign bit stays, the bit below it is dropped
            // (the ShiftLeft page: 1010101010101010 as int16 << 1 is
            // 1101010101010100).
            d[i] = static_cast<T>(static_cast<Bits>((v & sign) | (shifted & static_cast<Bits>(~sign))));
        } else {
            d[i] = static_cast<T>(shifted);
        }
    }
}

template <typename T>
void ShiftRight(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalarValue, const int32_t &count)
{
    static_assert(ta_shim::kShort<T> || ta_shim::kWord<T>, "ShiftRight: A2 supports (u)int16 and (u)int32");
    ta_shim::VecInstr<T> ins("ShiftRight", count);
    const uint32_t s = ta_shim::ShiftCount(ins.api, scalarValue);
    const uint32_t width = sizeof(T) * 8;
    const T *a = src.Read(ins, "src", ins.n);
    T *d = dst.Write(ins, "dst", ins.n);
    for (uint32_t i = 0; i < ins.n; ++i) {
        if constexpr (IsSameType<T, int32_t>::value || IsSameType<T, int16_t>::value) {
            // Arithmetic: a shift by the full width leaves the sign.
            const int64_t v = static_cast<int64_t>(a[i]);
            d[i] = static_cast<T>(v >> (s >= width ? width - 1 : s));
        } else {
            d[i] = static_cast<T>(s >= width ? 0u : static_cast<uint32_t>(a[i]) >> s);
        }
    }
}

} // namespace AscendC

#endif // TA_SHIM_VECTOR_LOGIC_H
