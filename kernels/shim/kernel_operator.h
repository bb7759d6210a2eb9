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

// Measurement hook for the scalar-unit Philox design: charges n scalar
// instructions of plain C++ kernel code to the cost model.
namespace ta_shim {
inline void ScalarWork(uint64_t n)
{
    Timeline &tl = Core().tl;
    tl.scalar_now += static_cast<double>(n);
    tl.P(Pipe::kS).busy += static_cast<double>(n);
    tl.P(Pipe::kS).free_at = tl.scalar_now;
}
} // namespace ta_shim
#define TA_SHIM_SCALAR_WORK(n) ::ta_shim::ScalarWork(n)

#endif // TA_SHIM_KERNEL_OPERATOR_H
