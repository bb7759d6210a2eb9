// The shim build of tensor-arena's AscendC kernels: the kernel sources from
// kernels/ascend/, compiled unmodified against the shim's kernel_operator.h,
// behind entry points with the signatures CANN's ascendc_library generates
// (`aclrtlaunch_<kernel>(numBlocks, stream, args...)`, GM pointers as
// void*). A launch runs to completion before it returns; the stream only
// goes to the simulated runtime's launch hook, when one is loaded
// (ta_shim/launch.h).
//
// The kernel sources are included, not linked, so the compiler checks every
// entry point's argument list against the kernel it calls.
#include "kernel_operator.h"
#include "ta_shim/exports.h"
#include "ta_shim/launch.h"

#include "bernoulli.cpp"
#include "dropout.cpp"
#include "mul.cpp"
#include "apply_mask.cpp"

#define TA_RANDOM_ENTRY(kernel)                                                                          \
    extern "C" TA_SHIM_EXPORT uint32_t aclrtlaunch_##kernel(uint32_t numBlocks, void *stream, void *x, float p, \
                                                            uint64_t seed, uint64_t offset,                \
                                                            uint64_t totalLength, uint64_t blockLength,     \
                                                            uint32_t tileLength)                            \
    {                                                                                                      \
        return ta_shim::Launch(#kernel, numBlocks, stream, [&] {                                                   \
            kernel(static_cast<GM_ADDR>(x), p, seed, offset, totalLength, blockLength, tileLength);       \
        });                                                                                                \
    }

#define TA_BINARY_ENTRY(kernel)                                                                          \
    extern "C" TA_SHIM_EXPORT uint32_t aclrtlaunch_##kernel(uint32_t numBlocks, void *stream, void *x, void *y, \
                                                            uint64_t totalLength, uint64_t blockLength,     \
                                                            uint32_t tileLength)                            \
    {                                                                                                      \
        return ta_shim::Launch(#kernel, numBlocks, stream, [&] {                                                   \
            kernel(static_cast<GM_ADDR>(x), static_cast<GM_ADDR>(y), totalLength, blockLength, tileLength); \
        });                                                                                                \
    }

#define TA_MASK_ENTRY(kernel)                                                                            \
    extern "C" TA_SHIM_EXPORT uint32_t aclrtlaunch_##kernel(uint32_t numBlocks, void *stream, void *x,         \
                                                            void *mask, float scale, uint64_t totalLength,  \
                                                            uint64_t blockLength, uint32_t tileLength)      \
    {                                                                                                      \
        return ta_shim::Launch(#kernel, numBlocks, stream, [&] {                                                   \
            kernel(static_cast<GM_ADDR>(x), static_cast<GM_ADDR>(mask), scale, totalLength, blockLength,   \
                   tileLength);                                                                            \
        });                                                                                                \
    }

#define TA_SCALAR_ENTRY(kernel)                                                                          \
    extern "C" TA_SHIM_EXPORT uint32_t aclrtlaunch_##kernel(uint32_t numBlocks, void *stream, void *x, float s, \
                                                            uint64_t totalLength, uint64_t blockLength,     \
                                                            uint32_t tileLength)                            \
    {                                                                                                      \
        return ta_shim::Launch(#kernel, numBlocks, stream, [&] {                                                   \
            kernel(static_cast<GM_ADDR>(x), s, totalLength, blockLength, tileLength);                     \
        });                                                                                                \
    }

TA_RANDOM_ENTRY(ta_bernoulli_f32)
TA_RANDOM_ENTRY(ta_bernoulli_f16)
TA_RANDOM_ENTRY(ta_bernoulli_bf16)
TA_RANDOM_ENTRY(ta_dropout_f32)
TA_RANDOM_ENTRY(ta_dropout_f16)
TA_RANDOM_ENTRY(ta_dropout_bf16)
TA_RANDOM_ENTRY(ta_dropout_backward_f32)
TA_RANDOM_ENTRY(ta_dropout_backward_f16)
TA_RANDOM_ENTRY(ta_dropout_backward_bf16)
TA_MASK_ENTRY(ta_apply_mask_f32)
TA_MASK_ENTRY(ta_apply_mask_f16)
TA_MASK_ENTRY(ta_apply_mask_bf16)
TA_BINARY_ENTRY(ta_mul_f32)
TA_BINARY_ENTRY(ta_mul_f16)
TA_BINARY_ENTRY(ta_mul_bf16)
TA_SCALAR_ENTRY(ta_mul_scalar_f32)
TA_SCALAR_ENTRY(ta_mul_scalar_f16)
TA_SCALAR_ENTRY(ta_mul_scalar_bf16)
