// What every vector instruction shares: the enums of the level-2 ("first n
// elements") forms, the count check, and the element-type sets of the
// Atlas A2 API pages (docs/zh/api/SIMD-API/基础API/Memory矢量计算/).
//
// Only the element types A2 supports compile: there is no uint32 or
// bfloat16 arithmetic, And/Or/Not take 16-bit types, Select and Compares
// take half and float (Compares also int32, EQ only). Every operand must be
// a usable tensor that starts 32-byte aligned and holds the elements the
// count asks for; every instruction runs on the vector pipe (PIPE_V) and
// costs whole 256-byte repeats (cost.h).
#ifndef TA_SHIM_VECTOR_COMMON_H
#define TA_SHIM_VECTOR_COMMON_H

#include <cstdint>
#include <string>

#include "cost.h"
#include "state.h"
#include "tensor.h"

namespace AscendC {

enum class CMPMODE : uint8_t { LT = 0, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR = 0, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };

} // namespace AscendC

namespace ta_shim {

template <typename T, typename... Ts>
constexpr bool kOneOf = (AscendC::IsSameType<T, Ts>::value || ...);

template <typename T>
constexpr bool kIsFloatLike = kOneOf<T, float, half>;

inline uint32_t VectorCount(const char *api, int64_t count)
{
    if (count <= 0) {
        Violation(Severity::kFatal, "vector-count",
                  std::string(api) + ": count " + std::to_string(count) + " must be positive");
    }
    return static_cast<uint32_t>(count);
}

// A vector instruction over `count` elements whose widest operand is T.
template <typename T>
struct VecInstr : Instr {
    uint32_t n;

    VecInstr(const char *name, int64_t count) : Instr(name, Pipe::kV), n(VectorCount(name, count)) {}

    ~VecInstr()
    {
        if (std::uncaught_exceptions() == 0) {
            Done(VectorCycles(n, Rate256<T>()));
        }
    }
};

} // namespace ta_shim

#endif // TA_SHIM_VECTOR_COMMON_H
