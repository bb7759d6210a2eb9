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
#include "dropout_bitmask.cpp"

// The launch stubs ascendc_library generates, one per kernel in the
// kernel list of ta_common.h: numBlocks and stream first, GM pointers as
// void*, scalars unchanged.
#define TA_LAUNCH_STUB(kernel, params, args)                                                            \
    extern "C" TA_SHIM_EXPORT uint32_t aclrtlaunch_##kernel params                                      \
    {                                                                                                  \
        return ta_shim::Launch(#kernel, numBlocks, stream, [&] { kernel args; });                      \
    }

#define TA_RANDOM_ENTRY(kernel)                                                                        \
    TA_LAUNCH_STUB(kernel,                                                                             \
                   (uint32_t numBlocks, void *stream, void *x, float p, uint64_t seed, uint64_t offset,  \
                    uint64_t totalLength, uint64_t blockLength, uint32_t tileLength),                  \
                   (static_cast<GM_ADDR>(x), p, seed, offset, totalLength, blockLength, tileLength))

#define TA_RANDOM_BITS_ENTRY(kernel)                                                                   \
    TA_LAUNCH_STUB(kernel,                                                                             \
                   (uint32_t numBlocks, void *stream, void *x, void *bits, float p, uint64_t seed,      \
                    uint64_t offset, uint64_t totalLength, uint64_t blockLength, uint32_t tileLength),  \
                   (static_cast<GM_ADDR>(x), static_cast<GM_ADDR>(bits), p, seed, offset, totalLength,   \
                    blockLength, tileLength))

#define TA_MASK_ENTRY(kernel)                                                                          \
    TA_LAUNCH_STUB(kernel,                                                                             \
                   (uint32_t numBlocks, void *stream, void *x, void *mask, float scale,                 \
                    uint64_t totalLength, uint64_t blockLength, uint32_t tileLength),                  \
                   (static_cast<GM_ADDR>(x), static_cast<GM_ADDR>(mask), scale, totalLength, blockLength, \
                    tileLength))

#define TA_BINARY_ENTRY(kernel)                                                                        \
    TA_LAUNCH_STUB(kernel,                                                                             \
                   (uint32_t numBlocks, void *stream, void *x, void *y, uint64_t totalLength,           \
                    uint64_t blockLength, uint32_t tileLength),                                        \
                   (static_cast<GM_ADDR>(x), static_cast<GM_ADDR>(y), totalLength, blockLength, tileLength))

#define TA_SCALAR_ENTRY(kernel)                                                                        \
    TA_LAUNCH_STUB(kernel,                                                                             \
                   (uint32_t numBlocks, void *stream, void *x, float s, uint64_t totalLength,           \
                    uint64_t blockLength, uint32_t tileLength),                                        \
                   (static_cast<GM_ADDR>(x), s, totalLength, blockLength, tileLength))

TA_FOR_EACH_KERNEL(TA_RANDOM_ENTRY, TA_RANDOM_BITS_ENTRY, TA_MASK_ENTRY, TA_BINARY_ENTRY, TA_SCALAR_ENTRY)
