// Scalar types and qualifiers of the AscendC kernel language, for g++.
//
// `half` and `bfloat16_t` are storage types here: conversions to and from
// float round to nearest even, overflow to infinity (the INF/NAN mode that
// Atlas A2/A3 use by default) and quiet NaNs while keeping the top payload
// bits, exactly as x86 F16C and the Rust `half` crate do, so results can be
// compared bit for bit with the host reference.
#ifndef TA_SHIM_TYPES_H
#define TA_SHIM_TYPES_H

#include <cstdint>
#include <cstring>

// Address-space and function qualifiers of the device compiler mean nothing
// on the host.
#define __aicore__
#define __global__
#define __gm__
#define GM_ADDR uint8_t *

namespace ta_shim {

inline uint32_t FloatBits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float BitsFloat(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Round-to-nearest-even test for a value whose kept part ends at bit
// `round_bit << 1`: round up when the first dropped bit is set and either a
// later dropped bit or the last kept bit is set.
inline bool RoundsUp(uint32_t bits, uint32_t round_bit)
{
    return (bits & round_bit) != 0 && (bits & (3 * round_bit - 1)) != 0;
}

inline uint16_t FloatToHalfBits(float value)
{
    const uint32_t x = FloatBits(value);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t exp = x & 0x7F800000u;
    const uint32_t man = x & 0x007FFFFFu;
    if (exp == 0x7F800000u) {
        const uint32_t quiet = man != 0 ? 0x0200u : 0u;
        return static_cast<uint16_t>(sign | 0x7C00u | quiet | (man >> 13));
    }
    const int32_t half_exp = static_cast<int32_t>(exp >> 23) - 127 + 15;
    if (half_exp >= 0x1F) {
        return static_cast<uint16_t>(sign | 0x7C00u);
    }
    if (half_exp <= 0) {
        if (14 - half_exp > 24) {
            return static_cast<uint16_t>(sign);
        }
        const uint32_t full = man | 0x00800000u;
        uint32_t half_man = full >> (14 - half_exp);
        if (RoundsUp(full, 1u << (13 - half_exp))) {
            half_man += 1;
        }
        return static_cast<uint16_t>(sign | half_man);
    }
    const uint32_t bits = sign | (static_cast<uint32_t>(half_exp) << 10) | (man >> 13);
    return static_cast<uint16_t>(RoundsUp(man, 0x1000u) ? bits + 1 : bits);
}

inline float HalfBitsToFloat(uint16_t h)
{
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = h & 0x7C00u;
    uint32_t man = h & 0x03FFu;
    if ((h & 0x7FFFu) == 0) {
        return BitsFloat(sign);
    }
    if (exp == 0x7C00u) {
        return BitsFloat(man == 0 ? (sign | 0x7F800000u) : (sign | 0x7FC00000u | (man << 13)));
    }
    if (exp == 0) {
        // Subnormal half: normalise into a float.
        int32_t e = -1;
        do {
            man <<= 1;
            e += 1;
        } while ((man & 0x0400u) == 0);
        const uint32_t fexp = static_cast<uint32_t>(127 - 15 - e) << 23;
        return BitsFloat(sign | fexp | ((man & 0x03FFu) << 13));
    }
    const uint32_t fexp = ((exp >> 10) + 127 - 15) << 23;
    return BitsFloat(sign | fexp | (man << 13));
}

inline uint16_t FloatToBf16Bits(float value)
{
    const uint32_t x = FloatBits(value);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
        return static_cast<uint16_t>((x >> 16) | 0x0040u);
    }
    const uint32_t kept = x >> 16;
    return static_cast<uint16_t>(RoundsUp(x, 0x8000u) ? kept + 1 : kept);
}

inline float Bf16BitsToFloat(uint16_t b)
{
    if ((b & 0x7FFFu) > 0x7F80u) {
        return BitsFloat(static_cast<uint32_t>(b | 0x0040u) << 16);
    }
    return BitsFloat(static_cast<uint32_t>(b) << 16);
}

} // namespace ta_shim

// IEEE binary16, as the device compiler's `half`.
struct half {
    uint16_t bits = 0;
    half() = default;
    half(float f) : bits(ta_shim::FloatToHalfBits(f)) {}
    operator float() const { return ta_shim::HalfBitsToFloat(bits); }
};

// bfloat16, as AscendC's `bfloat16_t`.
struct bfloat16_t {
    uint16_t bits = 0;
    bfloat16_t() = default;
    bfloat16_t(float f) : bits(ta_shim::FloatToBf16Bits(f)) {}
    operator float() const { return ta_shim::Bf16BitsToFloat(bits); }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16_t) == 2, "16-bit storage types");

#endif // TA_SHIM_TYPES_H
