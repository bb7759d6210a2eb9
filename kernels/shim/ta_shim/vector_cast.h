// Cast between the element types the kernels need, with the round modes
// the shim models (the Cast page of docs/zh/api, Atlas A2 table):
// widening (half/bfloat16 -> float, uint8 -> half) is exact and takes
// CAST_NONE; int32 -> float and float -> half round to nearest even under
// CAST_NONE and CAST_RINT alike (CAST_NONE means RINT where precision is
// lost); float -> bfloat16 takes CAST_RINT; half -> uint8 rounds to
// nearest even. Costs: table 7 of the performance appendix, 256 bytes of
// the wider type per cycle.
#ifndef TA_SHIM_VECTOR_CAST_H
#define TA_SHIM_VECTOR_CAST_H

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "vector_common.h"

namespace ta_shim {

template <typename A, typename B>
struct Wider {
    using type = typename std::conditional<(sizeof(A) >= sizeof(B)), A, B>::type;
};

} // namespace ta_shim

namespace ta_shim {

inline const char *RoundName(AscendC::RoundMode m)
{
    static const char *const names[] = {"CAST_NONE",  "CAST_RINT",  "CAST_FLOOR", "CAST_CEIL",
                                        "CAST_ROUND", "CAST_TRUNC", "CAST_ODD"};
    return names[static_cast<int>(m)];
}

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
struct CastRule<half, uint8_t> {
    static constexpr bool kSupported = true;
    static bool Mode(AscendC::RoundMode m) { return m == AscendC::RoundMode::CAST_NONE; }
    static half Apply(uint8_t v) { return half(static_cast<float>(v)); }
};
// Values outside [0, 255] (only ever stale lanes here) saturate and NaN
// gives 0: an assumption, the Cast page does not say.
template <>
struct CastRule<uint8_t, half> {
    static constexpr bool kSupported = true;
    static bool Mode(AscendC::RoundMode m)
    {
        return m == AscendC::RoundMode::CAST_NONE || m == AscendC::RoundMode::CAST_RINT;
    }
    static uint8_t Apply(half v)
    {
        const float f = static_cast<float>(v);
        if (!(f > 0.0f)) {
            return 0;
        }
        if (f >= 255.0f) {
            return 255;
        }
        return static_cast<uint8_t>(std::nearbyint(f));
    }
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
    ta_shim::VecInstr<typename ta_shim::Wider<T1, T2>::type> ins("Cast", calCount);
    const uint32_t n = ins.n;
    const T2 *s = srcLocal.Read(ins, "src", n);
    T1 *d = dstLocal.Write(ins, "dst", n);
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

#endif // TA_SHIM_VECTOR_CAST_H
