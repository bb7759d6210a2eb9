// The aclnn host objects (aclnn/acl_meta.h) as the simulation represents
// them, element access for every element type the operators compute, and
// the two-phase executor machinery, shared by libnnopbase (nnopbase.cpp,
// linked into the runtime library) and the operator libraries
// (ops_math.cpp, ops_nn.cpp).
#ifndef TASIM_ACLNN_SIM_H
#define TASIM_ACLNN_SIM_H

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "tasim.h"

namespace tasim {

constexpr int kMaxDims = 8;
// aclDataType values (acl_base.h).
constexpr int kFloat = 0, kFloat16 = 1, kInt32 = 3, kUint8 = 4, kInt64 = 9, kBool = 12, kBf16 = 27;

inline int64_t DtypeSize(int dtype)
{
    switch (dtype) {
    case 0: case 3: case 8: return 4;          // float, int32, uint32
    case 1: case 6: case 7: case 27: return 2; // float16, int16, uint16, bfloat16
    case 2: case 4: case 12: return 1;         // int8, uint8, bool
    case 9: case 10: case 11: return 8;        // int64, uint64, double
    default: return 0;
    }
}

inline bool IsFloating(int dtype) { return dtype == kFloat || dtype == kFloat16 || dtype == kBf16; }

inline const char *DtypeName(int dtype)
{
    switch (dtype) {
    case kFloat: return "float32";
    case kFloat16: return "float16";
    case kBf16: return "bfloat16";
    case kInt32: return "int32";
    case kUint8: return "uint8";
    case kInt64: return "int64";
    case kBool: return "bool";
    default: return "an unsimulated type";
    }
}

// IEEE binary16 and bfloat16 from and to float, rounding to nearest even
// (as the `half` crate the Rust side compares with).
inline float F16ToF32(uint16_t h)
{
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else {
            int e = -1;
            do {
                ++e;
                man <<= 1;
            } while ((man & 0x400) == 0);
            x = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 0x1f) {
        x = sign | 0x7f800000 | (man << 13);
    } else {
        x = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

inline uint16_t F32ToF16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t exp = (x >> 23) & 0xff;
    uint32_t man = x & 0x7fffff;
    if (exp == 0xff) {
        return uint16_t(sign | 0x7c00 | (man != 0 ? 0x200 | (man >> 13) : 0));
    }
    const int32_t e = int32_t(exp) - 127 + 15;
    if (e >= 0x1f) {
        return uint16_t(sign | 0x7c00);
    }
    if (e <= 0) {
        if (e < -10) {
            return uint16_t(sign);
        }
        man |= 0x800000;
        const int shift = 14 - e;
        uint32_t half = man >> shift;
        const uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1) != 0)) {
            ++half;
        }
        return uint16_t(sign | half);
    }
    uint32_t half = sign | (uint32_t(e) << 10) | (man >> 13);
    const uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1) != 0)) {
        ++half;
    }
    return uint16_t(half);
}

inline float Bf16ToF32(uint16_t b)
{
    const uint32_t x = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

inline uint16_t F32ToBf16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) {
        return uint16_t((x >> 16) | 0x40);
    }
    return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

} // namespace tasim

struct aclTensor {
    int64_t ndim = 0;
    int64_t dims[tasim::kMaxDims] = {};
    int64_t strides[tasim::kMaxDims] = {};
    int dtype = 0;
    int64_t offset = 0;
    int64_t storage = 0; // elements
    void *data = nullptr;

    int64_t Elements() const
    {
        int64_t n = 1;
        for (int64_t i = 0; i < ndim; ++i) {
            n *= dims[i];
        }
        return n;
    }
    // Element offset (from data) of a multi-index.
    int64_t At(const int64_t *idx) const
    {
        int64_t o = offset;
        for (int64_t i = 0; i < ndim; ++i) {
            o += idx[i] * strides[i];
        }
        return o;
    }
    // Element `at` as a float, whatever the element type.
    float Load(int64_t at) const
    {
        const char *p = static_cast<const char *>(data);
        switch (dtype) {
        case tasim::kFloat: { float v; std::memcpy(&v, p + at * 4, 4); return v; }
        case tasim::kFloat16: { uint16_t v; std::memcpy(&v, p + at * 2, 2); return tasim::F16ToF32(v); }
        case tasim::kBf16: { uint16_t v; std::memcpy(&v, p + at * 2, 2); return tasim::Bf16ToF32(v); }
        case tasim::kInt32: { int32_t v; std::memcpy(&v, p + at * 4, 4); return float(v); }
        case tasim::kInt64: { int64_t v; std::memcpy(&v, p + at * 8, 8); return float(v); }
        case tasim::kUint8: case tasim::kBool: return float(static_cast<const uint8_t *>(data)[at]);
        default: return 0.0f;
        }
    }
    // Stores `v` as element `at`, rounded to the element type.
    void Store(int64_t at, float v) const
    {
        char *p = static_cast<char *>(data);
        switch (dtype) {
        case tasim::kFloat: std::memcpy(p + at * 4, &v, 4); break;
        case tasim::kFloat16: { const uint16_t h = tasim::F32ToF16(v); std::memcpy(p + at * 2, &h, 2); break; }
        case tasim::kBf16: { const uint16_t b = tasim::F32ToBf16(v); std::memcpy(p + at * 2, &b, 2); break; }
        case tasim::kInt32: { const int32_t i = int32_t(v); std::memcpy(p + at * 4, &i, 4); break; }
        case tasim::kUint8: case tasim::kBool: static_cast<uint8_t *>(data)[at] = v != 0.0f ? 1 : 0; break;
        default: break;
        }
    }
    std::string Shape() const
    {
        std::string s = "[";
        for (int64_t i = 0; i < ndim; ++i) {
            s += (i ? ", " : "") + std::to_string(dims[i]);
        }
        return s + "]";
    }
};

struct aclScalar {
    double value = 0;
};

struct aclIntArray {
    std::vector<int64_t> values;
};

// An executor: the operands as the first phase saw them (addresses
// included: a repeatable executor runs on the addresses it was made with),
// the computation, and whether the application took ownership
// (aclSetAclOpExecutorRepeatable).
struct aclOpExecutor {
    std::string name;
    uint64_t workspace = 0;
    std::vector<aclTensor> operands;
    std::function<void(uint8_t *)> run;
    bool repeatable = false;
    uint64_t runs = 0;
};

namespace tasim {

inline aclnnStatus Invalid(const std::string &op, const std::string &why) { return Fail(kNnParamInvalid, op + ": " + why); }

// Checks that every tensor is given and all share one floating element type
// (float32, float16 or bfloat16); returns kSuccess or the error.
inline aclnnStatus NeedFloating(const std::string &op, std::initializer_list<const aclTensor *> ts)
{
    int dtype = -1;
    for (const aclTensor *t : ts) {
        if (t == nullptr) {
            return Fail(kNnParamNullptr, op + ": a tensor argument is null");
        }
        if (!IsFloating(t->dtype)) {
            return Invalid(op, std::string("tasim computes float32, float16 and bfloat16 (got ") + DtypeName(t->dtype) +
                                   ")");
        }
        if (dtype >= 0 && t->dtype != dtype) {
            return Invalid(op, std::string("operands of ") + DtypeName(dtype) + " and " + DtypeName(t->dtype) +
                                   ": tasim does not promote types");
        }
        dtype = t->dtype;
    }
    return kSuccess;
}

inline bool SameShape(const aclTensor &a, const aclTensor &b)
{
    if (a.ndim != b.ndim) {
        return false;
    }
    for (int64_t i = 0; i < a.ndim; ++i) {
        if (a.dims[i] != b.dims[i]) {
            return false;
        }
    }
    return true;
}

// Whether `t` broadcasts to `shape` (numpy rules, aligned on the right).
inline bool BroadcastsTo(const aclTensor &t, const aclTensor &shape)
{
    if (t.ndim > shape.ndim) {
        return false;
    }
    for (int64_t k = 0; k < t.ndim; ++k) {
        const int64_t d = t.dims[k], o = shape.dims[shape.ndim - t.ndim + k];
        if (d != o && d != 1) {
            return false;
        }
    }
    return true;
}

// The broadcast shape of `a` and `b` in `out` (dims only); false if none.
inline bool BroadcastShape(const aclTensor &a, const aclTensor &b, aclTensor *out)
{
    const int64_t n = a.ndim > b.ndim ? a.ndim : b.ndim;
    out->ndim = n;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t ia = i - (n - a.ndim), ib = i - (n - b.ndim);
        const int64_t da = ia >= 0 ? a.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            return false;
        }
        out->dims[i] = da == 1 ? db : da;
    }
    return true;
}

// Element offset in `t` of output index `idx` (of `n` dims) under broadcasting.
inline int64_t BroadcastAt(const aclTensor &t, const int64_t *idx, int64_t n)
{
    int64_t o = t.offset;
    for (int64_t k = 0; k < t.ndim; ++k) {
        const int64_t i = idx[n - t.ndim + k];
        o += (t.dims[k] == 1 ? 0 : i) * t.strides[k];
    }
    return o;
}

// Calls f(idx) for every index of `shape`, last dimension fastest.
template <typename F>
void ForEach(const aclTensor &shape, F &&f)
{
    if (shape.Elements() == 0) {
        return;
    }
    int64_t idx[kMaxDims] = {};
    for (;;) {
        f(idx);
        int64_t k = shape.ndim - 1;
        while (k >= 0 && ++idx[k] == shape.dims[k]) {
            idx[k] = 0;
            --k;
        }
        if (k < 0) {
            return;
        }
    }
}

// Makes an executor of `workspace` bytes over `operands`.
TASIM_SHARED aclOpExecutor *MakeExecutor(const char *name, uint64_t workspace,
                                         std::initializer_list<const aclTensor *> operands,
                                         std::function<void(uint8_t *)> run);

// Hands the executor and its workspace size out of a first phase.
TASIM_SHARED aclnnStatus FinishFirstPhase(aclOpExecutor *e, uint64_t *workspaceSize, aclOpExecutor **executor);

// The second phase shared by every operator.
TASIM_SHARED aclnnStatus RunSecondPhase(const char *op, void *workspace, uint64_t workspaceSize, aclOpExecutor *e,
                                        aclrtStream stream);

} // namespace tasim

#endif // TASIM_ACLNN_SIM_H
