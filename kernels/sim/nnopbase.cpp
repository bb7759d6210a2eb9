// libnnopbase's part of the simulation (aclnn/acl_meta.h): tensors,
// scalars, int arrays, and executors with their documented lifetime
// (hicann/opbase docs/en/api/nnopbase/aclnn/aclSetAclOpExecutorRepeatable.md,
// aclDestroyAclOpExecutor.md): the second phase frees a non-repeatable
// executor, which therefore runs once; aclSetAclOpExecutorRepeatable, called
// right after the first phase, hands it to the application, which may run it
// again and destroys it with aclDestroyAclOpExecutor.
#include <string>

#include "aclnn_sim.h"

using namespace tasim;
using Lock = std::lock_guard<std::recursive_mutex>;

namespace {

void DropExecutor(aclOpExecutor *e)
{
    Lock lock(Proc().mu);
    Proc().executors.erase(e);
    Me().counters["live_executors"] -= 1;
    delete e;
}

bool Live(const aclOpExecutor *e)
{
    Lock lock(Proc().mu);
    return Proc().executors.count(e) != 0;
}

// Validates a tensor description.
bool ValidTensor(const int64_t *dims, uint64_t n, int dtype, const int64_t *strides, int64_t offset,
                 const int64_t *storageDims, uint64_t storageNum, aclTensor *out)
{
    if (n > uint64_t(kMaxDims) || (n > 0 && dims == nullptr) || DtypeSize(dtype) == 0 || offset < 0) {
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

namespace tasim {

aclOpExecutor *MakeExecutor(const char *name, uint64_t workspace, std::initializer_list<const aclTensor *> operands,
                            std::function<void(uint8_t *)> run)
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
    Lock lock(Proc().mu);
    Proc().executors.insert(e);
    Count("live_executors");
    return e;
}

aclnnStatus FinishFirstPhase(aclOpExecutor *e, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    *workspaceSize = e->workspace;
    *executor = e;
    Count("aclnn_first_phase");
    return kSuccess;
}

aclnnStatus RunSecondPhase(const char *op, void *workspace, uint64_t workspaceSize, aclOpExecutor *e,
                           aclrtStream stream)
{
    if (e == nullptr) {
        return Fail(kNnParamNullptr, std::string(op) + ": null executor");
    }
    if (!Live(e)) {
        // On a device this is a use after free.
        Count("bad_executors");
        return Fail(kNnInnerNullptr, std::string(op) + ": the executor is not live (a non-repeatable executor runs "
                                                       "once; a destroyed one never)");
    }
    // A non-repeatable executor is the framework's and goes at the end of
    // its only run, whatever the outcome.
    const auto done = [e](aclnnStatus status) {
        if (!e->repeatable) {
            DropExecutor(e);
        }
        return status;
    };
    aclError code;
    if (!Ready(op, &code)) {
        return done(code);
    }
    {
        Lock lock(Proc().mu);
        if (FindStream(stream) == nullptr) {
            Count("bad_streams");
            return done(Fail(kRtStreamContext, std::string(op) + ": not a live stream"));
        }
    }
    if (e->name != op) {
        return done(Invalid(op, "the executor was made by " + e->name));
    }
    for (const aclTensor &t : e->operands) {
        const uint64_t bytes = uint64_t(t.storage) * uint64_t(DtypeSize(t.dtype));
        if (t.data == nullptr || !IsDevice(t.data, bytes)) {
            Count("bad_device_pointers");
            return done(Fail(kNnRuntimeError, std::string(op) + ": a " + t.Shape() +
                                                  " operand is not inside one live device allocation"));
        }
    }
    if (workspaceSize < e->workspace || (e->workspace > 0 && !IsDevice(workspace, e->workspace))) {
        Count("bad_workspaces");
        return done(Fail(kNnRuntimeError, std::string(op) + ": needs " + std::to_string(e->workspace) +
                                              " workspace bytes of device memory, got " +
                                              std::to_string(workspaceSize)));
    }
    int32_t injected;
    if (Me().fail_op.Trip(&injected)) {
        Count("injected_op_failures");
        return done(Fail(injected, std::string(op) + ": injected operator failure"));
    }
    e->run(static_cast<uint8_t *>(workspace));
    e->runs += 1;
    {
        Lock lock(Proc().mu);
        FindStream(stream)->pending += 1;
    }
    Count("aclnn_ops");
    if (e->runs > 1) {
        Count("aclnn_repeated_runs");
    }
    return done(kSuccess);
}

} // namespace tasim

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

// Destroying null succeeds, for every object kind (hicann/opbase
// src/nnopbase/common/api/acl_op_api.cpp).
TASIM_EXPORT aclnnStatus aclDestroyTensor(const aclTensor *tensor)
{
    if (tensor == nullptr) {
        return kSuccess;
    }
    Me().counters["live_tensors"] -= 1;
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
    case kFloat: { float v; std::memcpy(&v, value, 4); s->value = v; break; }
    case 11: { double v; std::memcpy(&v, value, 8); s->value = v; break; }
    case kInt32: { int32_t v; std::memcpy(&v, value, 4); s->value = v; break; }
    case kInt64: { int64_t v; std::memcpy(&v, value, 8); s->value = double(v); break; }
    case kFloat16: { uint16_t v; std::memcpy(&v, value, 2); s->value = F16ToF32(v); break; }
    case kBf16: { uint16_t v; std::memcpy(&v, value, 2); s->value = Bf16ToF32(v); break; }
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
        return kSuccess;
    }
    Me().counters["live_scalars"] -= 1;
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
        return kSuccess;
    }
    Me().counters["live_int_arrays"] -= 1;
    delete array;
    return kSuccess;
}

// Must come right after the first phase, before the executor runs.
TASIM_EXPORT aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor *executor)
{
    if (executor == nullptr) {
        return Fail(kNnInnerNullptr, "aclSetAclOpExecutorRepeatable: null executor");
    }
    if (!Live(executor)) {
        Count("bad_executors");
        return Fail(kNnInnerNullptr, "aclSetAclOpExecutorRepeatable: the executor is not live");
    }
    if (executor->runs > 0) {
        return Fail(kNnInner, "aclSetAclOpExecutorRepeatable: " + executor->name + "'s executor has already run");
    }
    int32_t injected;
    if (Me().refuse_repeatable.Trip(&injected)) {
        Count("refused_repeatable");
        return Fail(injected, "aclSetAclOpExecutorRepeatable: " + executor->name +
                                  "'s executor cannot be made repeatable (injected: as opbase answers for an "
                                  "operator that copies host data)");
    }
    executor->repeatable = true;
    Count("repeatable_executors");
    return kSuccess;
}

// Documented for repeatable executors only; opbase deletes any executor it
// is given, so the simulation does too but counts the misuse.
TASIM_EXPORT aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor *executor)
{
    if (executor == nullptr) {
        return Fail(kNnInnerNullptr, "aclDestroyAclOpExecutor: null");
    }
    if (!Live(executor)) {
        Count("bad_executors");
        return Fail(kNnInnerNullptr, "aclDestroyAclOpExecutor: the executor is not live");
    }
    if (!executor->repeatable) {
        Count("destroyed_non_repeatable");
    }
    Count("aclDestroyAclOpExecutor");
    DropExecutor(executor);
    return kSuccess;
}
