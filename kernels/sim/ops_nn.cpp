// The ops-nn operators tensor-arena calls (hicann/ops-nn
// matmul/mat_mul_v3, activation/relu, activation/softmax_v2,
// optim/apply_adam_w_v2: op_api/aclnn_*.h), built into libopapi_nn.so, and
// into libopapi.so with ops_math.cpp for the combined layout. Computed on
// the CPU in float32 from float32, float16 or bfloat16 operands, results
// rounded to the output's type.
#include <cmath>
#include <string>

#include "aclnn_sim.h"

using namespace tasim;

namespace {

// ApplyAdamWV2's system workspace on Atlas A2 (hicann/ops-nn
// optim/apply_adam_w_v2/op_host/apply_adam_w_v2_tiling.cpp, WORKSPACE_SIZE).
constexpr uint64_t kAdamWSystemWorkspace = 16 * kMiB;

// Marks both ends of a system workspace as in use, as the operator's
// kernels would: a workspace that overlaps live data shows in the results.
void TouchSystemWorkspace(uint8_t *ws, uint64_t bytes)
{
    constexpr uint64_t kEdge = 64;
    std::memset(ws, 0x5A, kEdge);
    std::memset(ws + bytes - kEdge, 0x5A, kEdge);
}

} // namespace

// ---- aclnnMm: out = self · mat2 -------------------------------------------

TASIM_EXPORT aclnnStatus aclnnMmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                                 int8_t cubeMathType, uint64_t *workspaceSize,
                                                 aclOpExecutor **executor)
{
    const char *op = "aclnnMm";
    if (aclnnStatus s = NeedFloating(op, {self, mat2, out}); s != kSuccess) {
        return s;
    }
    if (workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnMm: null output pointer");
    }
    if (self->ndim != 2 || mat2->ndim != 2 || out->ndim != 2 || self->dims[1] != mat2->dims[0] ||
        out->dims[0] != self->dims[0] || out->dims[1] != mat2->dims[1]) {
        return Invalid(op, "shapes " + self->Shape() + " · " + mat2->Shape() + " -> " + out->Shape() +
                               " do not form a matrix product");
    }
    if (cubeMathType < 0 || cubeMathType > 3) {
        return Invalid(op, "cubeMathType " + std::to_string(cubeMathType) + " is not 0..3");
    }
    const aclTensor a = *self, b = *mat2, c = *out;
    const int64_t m = a.dims[0], k = a.dims[1], n = b.dims[1];
    // Accumulators live in the workspace, one float per output element.
    const uint64_t ws = uint64_t(m * n) * 4;
    aclOpExecutor *e = MakeExecutor(op, ws, {self, mat2, out}, [a, b, c, m, k, n](uint8_t *scratch) {
        float *acc = reinterpret_cast<float *>(scratch);
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                float sum = 0.0f;
                for (int64_t p = 0; p < k; ++p) {
                    sum += a.Load(a.offset + i * a.strides[0] + p * a.strides[1]) *
                           b.Load(b.offset + p * b.strides[0] + j * b.strides[1]);
                }
                acc[i * n + j] = sum;
            }
        }
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                c.Store(c.offset + i * c.strides[0] + j * c.strides[1], 0.0f + acc[i * n + j]);
            }
        }
    });
    return FinishFirstPhase(e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnMm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return RunSecondPhase("aclnnMm", workspace, workspaceSize, executor, stream);
}

// ---- aclnnInplaceRelu ----------------------------------------------------------

TASIM_EXPORT aclnnStatus aclnnInplaceReluGetWorkspaceSize(aclTensor *selfRef, uint64_t *workspaceSize,
                                                          aclOpExecutor **executor)
{
    const char *op = "aclnnInplaceRelu";
    if (aclnnStatus s = NeedFloating(op, {selfRef}); s != kSuccess) {
        return s;
    }
    if (workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnInplaceRelu: null output pointer");
    }
    const aclTensor x = *selfRef;
    aclOpExecutor *e = MakeExecutor(op, 0, {selfRef}, [x](uint8_t *) {
        ForEach(x, [&](const int64_t *idx) {
            const int64_t at = x.At(idx);
            const float v = x.Load(at);
            x.Store(at, v > 0.0f ? v : 0.0f);
        });
    });
    return FinishFirstPhase(e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnInplaceRelu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                          aclrtStream stream)
{
    return RunSecondPhase("aclnnInplaceRelu", workspace, workspaceSize, executor, stream);
}

// ---- aclnnSoftmax ------------------------------------------------------------------

TASIM_EXPORT aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim, aclTensor *out,
                                                      uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *op = "aclnnSoftmax";
    if (aclnnStatus s = NeedFloating(op, {self, out}); s != kSuccess) {
        return s;
    }
    if (workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnSoftmax: null output pointer");
    }
    const int64_t d = dim < 0 ? dim + self->ndim : dim;
    if (d < 0 || d >= self->ndim || !SameShape(*self, *out)) {
        return Invalid(op, "dim " + std::to_string(dim) + " or out " + out->Shape() + " does not fit " + self->Shape());
    }
    const aclTensor x = *self, y = *out;
    aclTensor rows = x;
    rows.dims[d] = 1;
    const int64_t count = rows.Elements();
    // Each row's maximum and sum live in the workspace; the exponentials
    // stay in float until the final division.
    const uint64_t ws = uint64_t(count) * 8;
    aclOpExecutor *e = MakeExecutor(op, ws, {self, out}, [x, y, rows, d, count](uint8_t *scratch) {
        float *maxes = reinterpret_cast<float *>(scratch);
        float *sums = maxes + count;
        int64_t r = 0;
        ForEach(rows, [&](const int64_t *base) {
            int64_t idx[kMaxDims];
            std::memcpy(idx, base, sizeof(idx));
            maxes[r] = -INFINITY;
            for (int64_t j = 0; j < x.dims[d]; ++j) {
                idx[d] = j;
                const float v = x.Load(x.At(idx));
                if (v > maxes[r]) {
                    maxes[r] = v;
                }
            }
            sums[r] = 0.0f;
            for (int64_t j = 0; j < x.dims[d]; ++j) {
                idx[d] = j;
                sums[r] += std::exp(x.Load(x.At(idx)) - maxes[r]);
            }
            for (int64_t j = 0; j < x.dims[d]; ++j) {
                idx[d] = j;
                y.Store(y.At(idx), std::exp(x.Load(x.At(idx)) - maxes[r]) / sums[r]);
            }
            ++r;
        });
    });
    return FinishFirstPhase(e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnSoftmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                      aclrtStream stream)
{
    return RunSecondPhase("aclnnSoftmax", workspace, workspaceSize, executor, stream);
}

// ---- optimiser ---------------------------------------------------------------

TASIM_EXPORT aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(aclTensor *varRef, aclTensor *mRef, aclTensor *vRef,
                                                           aclTensor *maxGradNormOptionalRef, const aclTensor *grad,
                                                           const aclTensor *step, float lr, float beta1, float beta2,
                                                           float weightDecay, float eps, bool amsgrad, bool maximize,
                                                           uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *op = "aclnnApplyAdamWV2";
    if (aclnnStatus s = NeedFloating(op, {varRef, mRef, vRef, grad}); s != kSuccess) {
        return s;
    }
    if (step == nullptr || workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnApplyAdamWV2: null step or output pointer");
    }
    if (step->dtype != kFloat && step->dtype != kInt64) {
        return Invalid(op, std::string("step is float32 or int64 (got ") + DtypeName(step->dtype) + ")");
    }
    if (amsgrad || maximize || maxGradNormOptionalRef != nullptr) {
        return Invalid(op, "tasim implements amsgrad = false, maximize = false only");
    }
    if (!SameShape(*varRef, *mRef) || !SameShape(*varRef, *vRef) || !SameShape(*varRef, *grad) ||
        step->Elements() != 1) {
        return Invalid(op, "var, m, v and grad must share a shape and step must hold one element");
    }
    const aclTensor w = *varRef, m = *mRef, v = *vRef, g = *grad, t = *step;
    const uint64_t ws = kAdamWSystemWorkspace;
    aclOpExecutor *e = MakeExecutor(op, ws, {varRef, mRef, vRef, grad, step}, [=](uint8_t *scratch) {
        TouchSystemWorkspace(scratch, ws);
        const float n = t.Load(t.offset);
        const float bc1 = 1.0f - std::pow(beta1, n);
        const float bc2 = 1.0f - std::pow(beta2, n);
        ForEach(w, [&](const int64_t *idx) {
            const int64_t wi = w.At(idx), mi = m.At(idx), vi = v.At(idx);
            float wv = w.Load(wi);
            const float gv = g.Load(g.At(idx));
            if (weightDecay != 0.0f) {
                wv = wv * (1.0f - lr * weightDecay);
            }
            const float mv = beta1 * m.Load(mi) + (1.0f - beta1) * gv;
            const float vv = beta2 * v.Load(vi) + (1.0f - beta2) * gv * gv;
            const float denom = std::sqrt(vv / bc2) + eps;
            m.Store(mi, mv);
            v.Store(vi, vv);
            w.Store(wi, wv - lr * (mv / bc1) / denom);
        });
    });
    return FinishFirstPhase(e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnApplyAdamWV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                           aclrtStream stream)
{
    return RunSecondPhase("aclnnApplyAdamWV2", workspace, workspaceSize, executor, stream);
}
