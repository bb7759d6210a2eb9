// CPU shim of the AscendC kernel API: the subset of kernel_operator.h that
// tensor-arena's kernels use, on host memory, with the device's rules
// enforced (see kernels/shim/README.md). Kernel sources include this file
// exactly as they include the CANN header.
#ifndef TA_SHIM_KERNEL_OPERATOR_H
#define TA_SHIM_KERNEL_OPERATOR_H

#include "ta_shim/types.h"
#include "ta_shim/state.h"
#include "ta_shim/tensor.h"
#include "ta_shim/pipe.h"
#include "ta_shim/copy.h"
#include "ta_shim/vector_arith.h"
#include "ta_shim/vector_cast.h"
#include "ta_shim/vector_logic.h"
#include "ta_shim/vector_select.h"

#endif // TA_SHIM_KERNEL_OPERATOR_H
