// What every vector instruction shares: the enums of the level-2 ("first n
// elements") forms, the count check, and the element-type sets of the
// Atlas A2 API pages (docs/zh/api/SIMD-API/基础API/Memory矢量计算/).
//
// Only the element types A2 supports compile: there is no uint32 or
// bfloat16 arithmetic, And/Or/Not take 16-bit types, Select and Compares
// take half and float (Compares also int32, EQ only). Every operand must be
// a usable tensor that starts 32-byte aligned and holds the elements the
// count asks for; every instruction runs on the vector pipe (PIPE_V) and
// costs whole 256-byte repeats, bank conflicts and its issue (cost.h).
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

// The UB address an operand starts at (after its Read/Write check).
template <typename U>
uint32_t UbAddress(const AscendC::LocalTensor<U> &t)
{
    return t.rec_ == nullptr ? 0 : t.rec_->offset + t.byte_offset_;
}

// A vector instruction over `count` elements whose widest operand is T.
// Its cost (cost.h): whole repeats, more where its two sources share bank
// groups, plus the issue cost of every machine instruction the API issues.
template <typename T>
struct VecInstr : Instr {
    uint32_t n;
    // UB addresses of the two tensor sources of a binary instruction.
    bool two_sources = false;
    uint32_t source[2] = {0, 0};
    // Machine instructions the API issues before this one (the c220 Select
    // in scalar mode: a one-repeat Duplicate and a set_cmpmask) and their
    // repeats.
    uint32_t extra_issues = 0;
    double extra_repeats = 0;

    VecInstr(const char *name, int64_t count) : Instr(name, Pipe::kV), n(VectorCount(name, count)) {}

    template <typename U>
    void Sources(const AscendC::LocalTensor<U> &src0, const AscendC::LocalTensor<U> &src1)
    {
        two_sources = true;
        source[0] = UbAddress(src0);
        source[1] = UbAddress(src1);
    }

    ~VecInstr()
    {
        if (std::uncaught_exceptions() != 0) {
            return;
        }
        const double base = VectorCycles(n, Rate256<T>());
        const double repeats =
            two_sources ? TwoSourceRepeatCycles(source[0], source[1], uint64_t(n) * sizeof(T)) : base;
        const double issue = kIssueCycles * static_cast<double>(1 + extra_issues);
        Timeline &tl = Core().tl;
        tl.vector_repeat_cycles += base + extra_repeats;
        tl.bank_conflict_cycles += repeats - base;
        tl.issue_cycles += issue;
        Done(repeats + extra_repeats + issue);
    }
};

} // namespace ta_shim

#endif // TA_SHIM_VECTOR_COMMON_H
