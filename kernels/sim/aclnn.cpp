// The aclnn entry points tensor-arena uses (aclnn/acl_meta.h and the
// aclnnop/aclnn_*.h operator headers), computed on the CPU in float32.
//
// Two phases as in CANN: xGetWorkspaceSize checks the operands, sizes a
// workspace and returns an executor holding a copy of the operands; x(...)
// checks that every operand and the workspace are live device memory, runs
// the computation (keeping intermediates in the workspace, so a workspace
// that overlaps live data corrupts results as it would on a device), and
// frees the executor.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tasim.h"

using namespace tasim;

namespace {

constexpr int kMaxDims = 8;
constexpr int kFloat = 0; // ACL_FLOAT
constexpr int kBool = 12; // ACL_BOOL

int64_t DtypeSize(int dtype)
{
    switch (dtype) {
    case 0: case 3: case 8: return 4;   // float, int32, uint32
    case 1: case 6: case 7: case 27: return 2; // float16, int16, uint16, bfloat16
    case 2: case 4: case 12: return 1;  // int8, uint8, bool
    case 9: case 10: case 11: return 8; // int64, uint64, double
    default: return 0;
    }
}

} // namespace

struct aclTensor {
    int64_t ndim = 0;
    int64_t dims[kMaxDims] = {};
    int64_t strides[kMaxDims] = {};
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
    float *F(int64_t at) const { return static_cast<float *>(data) + at; }
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

struct aclOpExecutor {
    std::string name;
    uint64_t workspace = 0;
    std::vector<aclTensor> operands;
    std::function<void(float *)> run;
};

namespace {

aclnnStatus Invalid(const std::string &op, const std::string &why)
{
    return Fail(kNnParamInvalid, op + ": " + why);
}

// Checks the common rules and returns kSuccess, or the error.
aclnnStatus NeedFloat(const std::string &op, std::initializer_list<const aclTensor *> ts)
{
    for (const aclTensor *t : ts) {
        if (t == nullptr) {
            return Fail(kNnParamNullptr, op + ": a tensor argument is null");
        }
        if (t->dtype != kFloat) {
            return Invalid(op, "tasim computes float32 only (dtype " + std::to_string(t->dtype) + ")");
        }
    }
    return kSuccess;
}

bool SameShape(const aclTensor &a, const aclTensor &b)
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
bool BroadcastsTo(const aclTensor &t, const aclTensor &shape)
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
bool BroadcastShape(const aclTensor &a, const aclTensor &b, aclTensor *out)
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
int64_t BroadcastAt(const aclTensor &t, const int64_t *idx, int64_t n)
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

// Makes an executor; `workspace` in bytes.
aclOpExecutor *Make(const char *name, uint64_t workspace, std::initializer_list<const aclTensor *> operands,
                    std::function<void(float *)> run)
{
    aclOpExecutor *e = new aclOpExecutor();
    e->name = name;
    e->workspace = workspace;
    for (const aclTensor *t : operands) {
        if (t != nullptr) {
            e->operands.push_back(*t);
        }
    }
    e->run = std::move(run);
    Count("live_executors");
    return e;
}

aclnnStatus Finish(aclnnStatus status, uint64_t workspace, aclOpExecutor *e, uint64_t *ws, aclOpExecutor **ex)
{
    if (status != kSuccess) {
        return status;
    }
    *ws = workspace;
    *ex = e;
    Count("aclnn_first_phase");
    return kSuccess;
}

void Release(aclOpExecutor *e)
{
    St().counters["live_executors"] -= 1;
    delete e;
}

// The second phase shared by every operator.
aclnnStatus Run(const char *op, void *workspace, uint64_t workspaceSize, aclOpExecutor *e, aclrtStream stream)
{
    if (e == nullptr) {
        return Fail(kNnParamNullptr, std::string(op) + ": null executor");
    }
    aclError code;
    if (!Ready(op, &code)) {
        Release(e);
        return code;
    }
    Stream *s = FindStream(stream);
    if (s == nullptr) {
        Release(e);
        Count("bad_streams");
        return Fail(kRtStreamContext, std::string(op) + ": not a live stream");
    }
    if (e->name != op) {
        const std::string made = e->name;
        Release(e);
        return Invalid(op, "the executor was made by " + made);
    }
    for (const aclTensor &t : e->operands) {
        const uint64_t bytes = uint64_t(t.storage) * uint64_t(DtypeSize(t.dtype));
        if (t.data == nullptr || !IsDevice(t.data, bytes)) {
            Release(e);
            Count("bad_device_pointers");
            return Fail(kNnRuntimeError, std::string(op) + ": a " + t.Shape() +
                                             " operand is not inside one live device allocation");
        }
    }
    if (workspaceSize < e->workspace || (e->workspace > 0 && !IsDevice(workspace, e->workspace))) {
        Release(e);
        Count("bad_workspaces");
        return Fail(kNnRuntimeError, std::string(op) + ": needs " + std::to_string(e->workspace) +
                                         " workspace bytes of device memory, got " + std::to_string(workspaceSize));
    }
    int32_t injected;
    if (St().fail_op.Trip(&injected)) {
        Release(e);
        Count("injected_op_failures");
        return Fail(injected, std::string(op) + ": injected operator failure");
    }
    e->run(static_cast<float *>(workspace));
    s->pending += 1;
    Count("aclnn_ops");
    Release(e);
    return kSuccess;
}

// Validates a tensor description.
bool ValidTensor(const int64_t *dims, uint64_t n, int dtype, const int64_t *strides, int64_t offset,
                 const int64_t *storageDims, uint64_t storageNum, aclTensor *out)
{
    if (n > kMaxDims || (n > 0 && dims == nullptr) || DtypeSize(dtype) == 0 || offset < 0) {
        return false;
    }
    out->ndim = int64_t(n);
    out->dtype = dtype;
    out->offset = offset;
    int64_t stride = 1;
    for (int64_t i = int64_t(n) - 1; i >= 0; --i) {
        if (dims[i] < 0) {
            return false;
        }
        out->dims[i] = dims[i];
        out->strides[i] = strides != nullptr ? strides[i] : stride;
        if (out->strides[i] < 0) {
            return false;
        }
        stride *= dims[i];
    }
    int64_t extent = offset;
    if (out->Elements() > 0) {
        extent += 1;
        for (int64_t i = 0; i < int64_t(n); ++i) {
            extent += (out->dims[i] - 1) * out->strides[i];
        }
    }
    int64_t storage = 1;
    if (storageDims != nullptr) {
        for (uint64_t i = 0; i < storageNum; ++i) {
            storage *= storageDims[i];
        }
    } else {
        storage = extent;
    }
    if (storage < extent) {
        return false;
    }
    out->storage = storage;
    return true;
}

} // namespace

TASIM_EXPORT aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, int dataType,
                                        const int64_t *stride, int64_t offset, int format,
                                        const int64_t *storageDims, uint64_t storageDimsNum, void *tensorData)
{
    aclTensor t;
    if (format != 2 /* ACL_FORMAT_ND */ ||
        !ValidTensor(viewDims, viewDimsNum, dataType, stride, offset, storageDims, storageDimsNum, &t)) {
        Fail(kNnParamInvalid, "aclCreateTensor: invalid shape, strides, type, format or storage");
        return nullptr;
    }
    t.data = tensorData;
    Count("live_tensors");
    Count("aclCreateTensor");
    return new aclTensor(t);
}

TASIM_EXPORT aclnnStatus aclDestroyTensor(const aclTensor *tensor)
{
    if (tensor == nullptr) {
        return Fail(kNnParamNullptr, "aclDestroyTensor: null");
    }
    St().counters["live_tensors"] -= 1;
    delete tensor;
    return kSuccess;
}

TASIM_EXPORT aclScalar *aclCreateScalar(void *value, int dataType)
{
    if (value == nullptr) {
        Fail(kNnParamNullptr, "aclCreateScalar: null value");
        return nullptr;
    }
    aclScalar *s = new aclScalar();
    switch (dataType) {
    case 0: { float v; std::memcpy(&v, value, 4); s->value = v; break; }
    case 11: { double v; std::memcpy(&v, value, 8); s->value = v; break; }
    case 3: { int32_t v; std::memcpy(&v, value, 4); s->value = v; break; }
    case 9: { int64_t v; std::memcpy(&v, value, 8); s->value = double(v); break; }
    default:
        delete s;
        Fail(kNnParamInvalid, "aclCreateScalar: dtype " + std::to_string(dataType) + " not simulated");
        return nullptr;
    }
    Count("live_scalars");
    return s;
}

TASIM_EXPORT aclnnStatus aclDestroyScalar(const aclScalar *scalar)
{
    if (scalar == nullptr) {
        return Fail(kNnParamNullptr, "aclDestroyScalar: null");
    }
    St().counters["live_scalars"] -= 1;
    delete scalar;
    return kSuccess;
}

TASIM_EXPORT aclIntArray *aclCreateIntArray(const int64_t *value, uint64_t size)
{
    if (value == nullptr && size > 0) {
        Fail(kNnParamNullptr, "aclCreateIntArray: null values");
        return nullptr;
    }
    aclIntArray *a = new aclIntArray();
    a->values.assign(value, value + size);
    Count("live_int_arrays");
    return a;
}

TASIM_EXPORT aclnnStatus aclDestroyIntArray(const aclIntArray *array)
{
    if (array == nullptr) {
        return Fail(kNnParamNullptr, "aclDestroyIntArray: null");
    }
    St().counters["live_int_arrays"] -= 1;
    delete array;
    return kSuccess;
}

TASIM_EXPORT aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor)
{
    if (executor == nullptr) {
        return Fail(561103, "aclDestroyAclOpExecutor: null");
    }
    Release(executor);
    return kSuccess;
}

// ---- aclnnMm: out = self · mat2 -------------------------------------------

TASIM_EXPORT aclnnStatus aclnnMmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                                 int8_t cubeMathType, uint64_t *workspaceSize,
                                                 aclOpExecutor **executor)
{
    const char *op = "aclnnMm";
    if (aclnnStatus s = NeedFloat(op, {self, mat2, out}); s != kSuccess) {
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
    aclOpExecutor *e = Make(op, ws, {self, mat2, out}, [a, b, c, m, k, n](float *acc) {
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                float sum = 0.0f;
                for (int64_t p = 0; p < k; ++p) {
                    sum += *a.F(a.offset + i * a.strides[0] + p * a.strides[1]) *
                           *b.F(b.offset + p * b.strides[0] + j * b.strides[1]);
                }
                acc[i * n + j] = sum;
            }
        }
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                *c.F(c.offset + i * c.strides[0] + j * c.strides[1]) = 0.0f + acc[i * n + j];
            }
        }
    });
    return Finish(kSuccess, ws, e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnMm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return Run("aclnnMm", workspace, workspaceSize, executor, stream);
}

// ---- elementwise with broadcasting -----------------------------------------

namespace {

// selfRef = selfRef (op) alpha * other, `other` broadcast to selfRef.
aclnnStatus InplaceBinary(const char *op, aclTensor *self, const aclTensor *other, double alpha, int kind,
                          uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (aclnnStatus s = NeedFloat(op, {self, other}); s != kSuccess) {
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
    aclOpExecutor *e = Make(op, 0, {self, other}, [x, y, a, kind](float *) {
        ForEach(x, [&](const int64_t *idx) {
            float *v = x.F(x.At(idx));
            const float w = *y.F(BroadcastAt(y, idx, x.ndim));
            switch (kind) {
            case 0: *v = *v + a * w; break;
            case 1: *v = *v - a * w; break;
            default: *v = *v * w; break;
            }
        });
    });
    return Finish(kSuccess, 0, e, workspaceSize, executor);
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
    return Run("aclnnInplaceAdd", workspace, workspaceSize, executor, stream);
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
    return Run("aclnnInplaceSub", workspace, workspaceSize, executor, stream);
}

TASIM_EXPORT aclnnStatus aclnnInplaceMulGetWorkspaceSize(aclTensor *selfRef, const aclTensor *other,
                                                         uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return InplaceBinary("aclnnInplaceMul", selfRef, other, 1.0, 2, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnInplaceMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                         aclrtStream stream)
{
    return Run("aclnnInplaceMul", workspace, workspaceSize, executor, stream);
}

TASIM_EXPORT aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out,
                                                  uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *op = "aclnnMul";
    if (aclnnStatus s = NeedFloat(op, {self, other, out}); s != kSuccess) {
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
    aclOpExecutor *e = Make(op, 0, {self, other, out}, [a, b, c](float *) {
        ForEach(c, [&](const int64_t *idx) {
            *c.F(c.At(idx)) = *a.F(BroadcastAt(a, idx, c.ndim)) * *b.F(BroadcastAt(b, idx, c.ndim));
        });
    });
    return Finish(kSuccess, 0, e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream)
{
    return Run("aclnnMul", workspace, workspaceSize, executor, stream);
}

TASIM_EXPORT aclnnStatus aclnnInplaceReluGetWorkspaceSize(aclTensor *selfRef, uint64_t *workspaceSize,
                                                          aclOpExecutor **executor)
{
    const char *op = "aclnnInplaceRelu";
    if (aclnnStatus s = NeedFloat(op, {selfRef}); s != kSuccess) {
        return s;
    }
    if (workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnInplaceRelu: null output pointer");
    }
    const aclTensor x = *selfRef;
    aclOpExecutor *e = Make(op, 0, {selfRef}, [x](float *) {
        ForEach(x, [&](const int64_t *idx) {
            float *v = x.F(x.At(idx));
            *v = *v > 0.0f ? *v : 0.0f;
        });
    });
    return Finish(kSuccess, 0, e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnInplaceRelu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                          aclrtStream stream)
{
    return Run("aclnnInplaceRelu", workspace, workspaceSize, executor, stream);
}

TASIM_EXPORT aclnnStatus aclnnGtScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out,
                                                       uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *op = "aclnnGtScalar";
    if (aclnnStatus s = NeedFloat(op, {self}); s != kSuccess) {
        return s;
    }
    if (other == nullptr || out == nullptr || workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnGtScalar: null argument");
    }
    if (out->dtype != kFloat && out->dtype != kBool) {
        return Invalid(op, "tasim writes float32 or bool results only");
    }
    if (!SameShape(*self, *out)) {
        return Invalid(op, "out " + out->Shape() + " differs from self " + self->Shape());
    }
    const aclTensor x = *self, y = *out;
    const float t = float(other->value);
    aclOpExecutor *e = Make(op, 0, {self, out}, [x, y, t](float *) {
        ForEach(x, [&](const int64_t *idx) {
            const bool gt = *x.F(x.At(idx)) > t;
            if (y.dtype == kFloat) {
                *y.F(y.At(idx)) = gt ? 1.0f : 0.0f;
            } else {
                static_cast<uint8_t *>(y.data)[y.At(idx)] = gt ? 1 : 0;
            }
        });
    });
    return Finish(kSuccess, 0, e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnGtScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                       aclrtStream stream)
{
    return Run("aclnnGtScalar", workspace, workspaceSize, executor, stream);
}

// ---- reductions and softmax ------------------------------------------------

TASIM_EXPORT aclnnStatus aclnnReduceSumGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDims,
                                                        int dtype, aclTensor *out, uint64_t *workspaceSize,
                                                        aclOpExecutor **executor)
{
    const char *op = "aclnnReduceSum";
    if (aclnnStatus s = NeedFloat(op, {self, out}); s != kSuccess) {
        return s;
    }
    if (dim == nullptr || workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnReduceSum: null argument");
    }
    if (dtype != kFloat) {
        return Invalid(op, "tasim sums to float32 only");
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
    aclOpExecutor *e = Make(op, ws, {self, out}, [x, y, kept, outs, keepDims, gone](float *acc) {
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
            acc[pos] += *x.F(x.At(idx));
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
            *y.F(y.At(oidx)) = acc[pos++];
        });
    });
    return Finish(kSuccess, ws, e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnReduceSum(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                        aclrtStream stream)
{
    return Run("aclnnReduceSum", workspace, workspaceSize, executor, stream);
}

TASIM_EXPORT aclnnStatus aclnnSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim, aclTensor *out,
                                                      uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *op = "aclnnSoftmax";
    if (aclnnStatus s = NeedFloat(op, {self, out}); s != kSuccess) {
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
    // Each row's maximum and sum live in the workspace.
    const uint64_t ws = uint64_t(count) * 8;
    aclOpExecutor *e = Make(op, ws, {self, out}, [x, y, rows, d, count](float *scratch) {
        float *maxes = scratch;
        float *sums = scratch + count;
        int64_t r = 0;
        ForEach(rows, [&](const int64_t *base) {
            int64_t idx[kMaxDims];
            std::memcpy(idx, base, sizeof(idx));
            maxes[r] = -INFINITY;
            for (int64_t j = 0; j < x.dims[d]; ++j) {
                idx[d] = j;
                const float v = *x.F(x.At(idx));
                if (v > maxes[r]) {
                    maxes[r] = v;
                }
            }
            sums[r] = 0.0f;
            for (int64_t j = 0; j < x.dims[d]; ++j) {
                idx[d] = j;
                const float v = std::exp(*x.F(x.At(idx)) - maxes[r]);
                *y.F(y.At(idx)) = v;
                sums[r] += v;
            }
            for (int64_t j = 0; j < x.dims[d]; ++j) {
                idx[d] = j;
                *y.F(y.At(idx)) /= sums[r];
            }
            ++r;
        });
    });
    return Finish(kSuccess, ws, e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnSoftmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                      aclrtStream stream)
{
    return Run("aclnnSoftmax", workspace, workspaceSize, executor, stream);
}

// ---- optimiser ---------------------------------------------------------------

TASIM_EXPORT aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(aclTensor *varRef, aclTensor *mRef, aclTensor *vRef,
                                                           aclTensor *maxGradNormOptionalRef, const aclTensor *grad,
                                                           const aclTensor *step, float lr, float beta1, float beta2,
                                                           float weightDecay, float eps, bool amsgrad, bool maximize,
                                                           uint64_t *workspaceSize, aclOpExecutor **executor)
{
    const char *op = "aclnnApplyAdamWV2";
    if (aclnnStatus s = NeedFloat(op, {varRef, mRef, vRef, grad, step}); s != kSuccess) {
        return s;
    }
    if (workspaceSize == nullptr || executor == nullptr) {
        return Fail(kNnParamNullptr, "aclnnApplyAdamWV2: null output pointer");
    }
    if (amsgrad || maximize || maxGradNormOptionalRef != nullptr) {
        return Invalid(op, "tasim implements amsgrad = false, maximize = false only");
    }
    if (!SameShape(*varRef, *mRef) || !SameShape(*varRef, *vRef) || !SameShape(*varRef, *grad) ||
        step->Elements() != 1) {
        return Invalid(op, "var, m, v and grad must share a shape and step must hold one element");
    }
    const aclTensor w = *varRef, m = *mRef, v = *vRef, g = *grad, t = *step;
    aclOpExecutor *e = Make(op, 0, {varRef, mRef, vRef, grad, step}, [=](float *) {
        const float n = *t.F(t.offset);
        const float bc1 = 1.0f - std::pow(beta1, n);
        const float bc2 = 1.0f - std::pow(beta2, n);
        ForEach(w, [&](const int64_t *idx) {
            float *wv = w.F(w.At(idx));
            float *mv = m.F(m.At(idx));
            float *vv = v.F(v.At(idx));
            const float gv = *g.F(g.At(idx));
            if (weightDecay != 0.0f) {
                *wv = *wv * (1.0f - lr * weightDecay);
            }
            *mv = beta1 * *mv + (1.0f - beta1) * gv;
            *vv = beta2 * *vv + (1.0f - beta2) * gv * gv;
            const float denom = std::sqrt(*vv / bc2) + eps;
            *wv = *wv - lr * (*mv / bc1) / denom;
        });
    });
    return Finish(kSuccess, 0, e, workspaceSize, executor);
}

TASIM_EXPORT aclnnStatus aclnnApplyAdamWV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                           aclrtStream stream)
{
    return Run("aclnnApplyAdamWV2", workspace, workspaceSize, executor, stream);
}
