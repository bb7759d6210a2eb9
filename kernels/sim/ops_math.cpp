// The ops-math operators tensor-arena calls (hicann/ops-math
// math/{add,sub,mul,greater,reduce_sum}/op_api/aclnn_*.h), built into
// libopapi_math.so, and into libopapi.so with ops_nn.cpp for the combined
// layout. Computed on the CPU in float32 from float32, float16 or bfloat16
// operands, results rounded to the output's type.
#include <array>
#include <string>

#include "aclnn_sim.h"

using namespace tasim;

// ---- elementwise with broadcasting -----------------------------------------

namespace {

// selfRef = selfRef (op) alpha * other, `other` broadcast to selfRef.
aclnnStatus InplaceBinary(const char *op, aclTensor *self, const aclTensor *other, double alpha, int kind,
                          uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (aclnnStatus s = NeedFloating(op, {self, other}); s != kSuccess) {
        return s;
    }
    if (workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, std::string(op) + ": null output pointer");
    }
    if (!BroadcastsTo(*other, *self)) {
        return Invalid(op, other->Shape() + " does not broadcast to " + self->Shape());
    }
    const aclTensor x = *self, y = *other;
    const float a = float(alpha);
    aclOpExecutor *e = MakeExecutor(op, 0, {self, other}, [x, y, a, kind](uint8_t *) {
        ForEach(x, [&](const int64_t *idx) {
            const int64_t at = x.At(idx);
            const float v = x.Load(at);
            const float w = y.Load(BroadcastAt(y, idx, x.ndim));
            switch (kind) {
            case 0: x.Store(at, v + a * w); break;
            case 1: x.Store(at, v - a * w); break;
            default: x.Store(at, v * w); break;
            }
        });
    });
    return FinishFirstPhase(e, workspaceSize, executor);
}

} // namespace

TASIM_EXPORT aclnnStatus aclnnInplaceAddGetWorkspaceSize(aclTensor *selfRef, const aclTensor *other,
                                                         const aclScalar *alpha, uint64_t *workspaceSize,
                                                         aclOpExecutor **executor)
{
    if (alpha == nullptr) {
        return Fail(kNnParamNullptr, "aclnnInplaceAdd: null alpha");
    }
    return InplaceBinary("aclnnInplaceAdd", selfRef, other, alpha->value, 0, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnInplaceAdd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                         aclrtStream stream)
{
    return RunSecondPhase("aclnnInplaceAdd", workspace, workspaceSize, executor, stream);
}

TASIM_EXPORT aclnnStatus aclnnInplaceSubGetWorkspaceSize(aclTensor *selfRef, const aclTensor *other,
                                                         const aclScalar *alpha, uint64_t *workspaceSize,
                                                         aclOpExecutor **executor)
{
    if (alpha == nullptr) {
        return Fail(kNnParamNullptr, "aclnnInplaceSub: null alpha");
    }
    return InplaceBinary("aclnnInplaceSub", selfRef, other, alpha->value, 1, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnInplaceSub(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                         aclrtStream stream)
{
    return RunSecondPhase("aclnnInplaceSub", workspace, workspaceSize, executor, stream);
}

TASIM_EXPORT aclnnStatus aclnnInplaceMulGetWorkspaceSize(aclTensor *selfRef, const aclTensor *other,
                                                         uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return InplaceBinary("aclnnInplaceMul", selfRef, other, 1.0, 2, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnInplaceMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                         aclrtStream stream)
{
    return RunSecondPhase("aclnnInplaceMul", workspace, workspaceSize, executor, stream);
}

TASIM_EXPORT aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                                  uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *op = "aclnnMul";
    if (aclnnStatus s = NeedFloating(op, {self, other, out}); s != kSuccess) {
        return s;
    }
    if (workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnMul: null output pointer");
    }
    aclTensor shape;
    if (!BroadcastShape(*self, *other, &shape) || !SameShape(shape, *out)) {
        return Invalid(op, self->Shape() + " and " + other->Shape() + " do not broadcast to " + out->Shape());
    }
    const aclTensor a = *self, b = *other, c = *out;
    aclOpExecutor *e = MakeExecutor(op, 0, {self, other, out}, [a, b, c](uint8_t *) {
        ForEach(c, [&](const int64_t *idx) {
            c.Store(c.At(idx), a.Load(BroadcastAt(a, idx, c.ndim)) * b.Load(BroadcastAt(b, idx, c.ndim)));
        });
    });
    return FinishFirstPhase(e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return RunSecondPhase("aclnnMul", workspace, workspaceSize, executor, stream);
}

TASIM_EXPORT aclnnStatus aclnnGtScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
                                                       uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *op = "aclnnGtScalar";
    if (aclnnStatus s = NeedFloating(op, {self}); s != kSuccess) {
        return s;
    }
    if (other == nullptr || out == nullptr || workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnGtScalar: null argument");
    }
    if (!IsFloating(out->dtype) && out->dtype != kBool && out->dtype != kUint8) {
        return Invalid(op, std::string("tasim writes floating, bool or uint8 results (got ") + DtypeName(out->dtype) +
                               ")");
    }
    if (!SameShape(*self, *out)) {
        return Invalid(op, "out " + out->Shape() + " differs from self " + self->Shape());
    }
    const aclTensor x = *self, y = *out;
    const float t = float(other->value);
    aclOpExecutor *e = MakeExecutor(op, 0, {self, out}, [x, y, t](uint8_t *) {
        ForEach(x, [&](const int64_t *idx) { y.Store(y.At(idx), x.Load(x.At(idx)) > t ? 1.0f : 0.0f); });
    });
    return FinishFirstPhase(e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnGtScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                       aclrtStream stream)
{
    return RunSecondPhase("aclnnGtScalar", workspace, workspaceSize, executor, stream);
}

// ---- reductions --------------------------------------------------------------

TASIM_EXPORT aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDims,
                                                        int dtype, aclTensor *out, uint64_t *workspaceSize,
                                                        aclOpExecutor **executor)
{
    const char *op = "aclnnReduceSum";
    if (aclnnStatus s = NeedFloating(op, {self}); s != kSuccess) {
        return s;
    }
    if (aclnnStatus s = NeedFloating(op, {out}); s != kSuccess) {
        return s;
    }
    if (dim == nullptr || workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnReduceSum: null argument");
    }
    if (dtype != out->dtype) {
        return Invalid(op, std::string("dtype ") + DtypeName(dtype) + " differs from out's " + DtypeName(out->dtype));
    }
    bool reduced[kMaxDims] = {};
    for (int64_t d : dim->values) {
        const int64_t k = d < 0 ? d + self->ndim : d;
        if (k < 0 || k >= self->ndim || reduced[k]) {
            return Invalid(op, "dimension " + std::to_string(d) + " is out of range or repeated for " + self->Shape());
        }
        reduced[k] = true;
    }
    // The result's shape, with and without the kept size-1 dimensions.
    aclTensor kept = *self;
    aclTensor shape;
    shape.ndim = 0;
    for (int64_t k = 0; k < self->ndim; ++k) {
        if (reduced[k]) {
            kept.dims[k] = 1;
            if (keepDims) {
                shape.dims[shape.ndim++] = 1;
            }
        } else {
            shape.dims[shape.ndim++] = self->dims[k];
        }
    }
    if (!SameShape(shape, *out)) {
        return Invalid(op, "out " + out->Shape() + " is not the reduced shape of " + self->Shape());
    }
    const aclTensor x = *self, y = *out;
    const int64_t outs = kept.Elements();
    std::array<bool, kMaxDims> gone;
    std::copy(std::begin(reduced), std::end(reduced), gone.begin());
    // Sums accumulate in the workspace, one float per output element.
    const uint64_t ws = uint64_t(outs) * 4;
    aclOpExecutor *e = MakeExecutor(op, ws, {self, out}, [x, y, kept, outs, keepDims, gone](uint8_t *scratch) {
        float *acc = reinterpret_cast<float *>(scratch);
        for (int64_t i = 0; i < outs; ++i) {
            acc[i] = 0.0f;
        }
        // Visiting the input in row-major order adds each output's terms
        // in index order.
        ForEach(x, [&](const int64_t *idx) {
            int64_t pos = 0;
            for (int64_t k = 0; k < x.ndim; ++k) {
                pos = pos * kept.dims[k] + (gone[k] ? 0 : idx[k]);
            }
            acc[pos] += x.Load(x.At(idx));
        });
        int64_t pos = 0;
        ForEach(kept, [&](const int64_t *idx) {
            int64_t oidx[kMaxDims] = {};
            int64_t n = 0;
            for (int64_t k = 0; k < kept.ndim; ++k) {
                if (!gone[k]) {
                    oidx[n++] = idx[k];
                } else if (keepDims) {
                    oidx[n++] = 0;
                }
            }
            y.Store(y.At(oidx), acc[pos++]);
        });
    });
    return FinishFirstPhase(e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnReduceSum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                        aclrtStream stream)
{
    return RunSecondPhase("aclnnReduceSum", workspace, workspaceSize, executor, stream);
}
