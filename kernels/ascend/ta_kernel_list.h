// The kernel library's entry points, as one list with no dependencies, so
// that the AscendC sources (ta_common.h), the CPU shim's launch functions
// and the simulated runtime's launch stubs (kernels/sim/kernel_stub.cpp)
// are made from the same names and can never disagree.
#ifndef TA_KERNEL_LIST_H
#define TA_KERNEL_LIST_H

// Every entry point, by launch signature: RANDOM(name) for (x, p, seed,
// offset, ...), RANDOM_BITS(name) for (x, bits, p, seed, offset, ...),
// MASK(name) for (x, mask, scale, ...), BINARY(name) for (x, y, ...),
// SCALAR(name) for (x, s, ...). The shim build makes its aclrtlaunch_*
// functions from this list.
#define TA_FOR_EACH_KERNEL(RANDOM, RANDOM_BITS, MASK, BINARY, SCALAR)                                      \
    RANDOM(ta_bernoulli_f32)                                                                             \
    RANDOM(ta_bernoulli_f16)                                                                             \
    RANDOM(ta_bernoulli_bf16)                                                                            \
    RANDOM(ta_bernoulli_u8)                                                                              \
    RANDOM(ta_dropout_f32)                                                                               \
    RANDOM(ta_dropout_f16)                                                                               \
    RANDOM(ta_dropout_bf16)                                                                              \
    RANDOM(ta_dropout_backward_f32)                                                                      \
    RANDOM(ta_dropout_backward_f16)                                                                      \
    RANDOM(ta_dropout_backward_bf16)                                                                     \
    RANDOM_BITS(ta_dropout_bitmask_f32)                                                                  \
    RANDOM_BITS(ta_dropout_bitmask_f16)                                                                  \
    RANDOM_BITS(ta_dropout_bitmask_bf16)                                                                 \
    MASK(ta_apply_bitmask_f32)                                                                           \
    MASK(ta_apply_bitmask_f16)                                                                           \
    MASK(ta_apply_bitmask_bf16)                                                                          \
    MASK(ta_apply_mask_f32)                                                                              \
    MASK(ta_apply_mask_f16)                                                                              \
    MASK(ta_apply_mask_bf16)                                                                             \
    MASK(ta_apply_mask_u8_f32)                                                                           \
    MASK(ta_apply_mask_u8_f16)                                                                           \
    MASK(ta_apply_mask_u8_bf16)                                                                          \
    BINARY(ta_mul_f32)                                                                                   \
    BINARY(ta_mul_f16)                                                                                   \
    BINARY(ta_mul_bf16)                                                                                  \
    SCALAR(ta_mul_scalar_f32)                                                                            \
    SCALAR(ta_mul_scalar_f16)                                                                            \
    SCALAR(ta_mul_scalar_bf16)

#endif // TA_KERNEL_LIST_H
