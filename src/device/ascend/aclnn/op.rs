//! [`Op`]: the aclnn operators the crate calls, with their operands.

use super::view::TensorView;

/// One aclnn operator call. Element types follow the operator's header;
/// the simulated runtime computes f32, f16 and bf16 operands (in f32,
/// results rounded to the output's type).
// Passed by reference and built on the stack: the size difference costs
// nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy)]
pub enum Op<'a> {
    /// `out = a · b` (aclnnMm; 2-D operands, transposed views allowed;
    /// `cubeMathType` 0: compute in the operands' type).
    Mm {
        /// `m × k`.
        a: TensorView<'a>,
        /// `k × n`.
        b: TensorView<'a>,
        /// `m × n`.
        out: TensorView<'a>,
    },
    /// `x = x + alpha · other`, `other` broadcast to `x` (aclnnInplaceAdd).
    AddInplace {
        /// Updated in place.
        x: TensorView<'a>,
        /// Broadcast operand.
        other: TensorView<'a>,
        /// Its factor.
        alpha: f32,
    },
    /// `x = x - alpha · other`, broadcasting (aclnnInplaceSub).
    SubInplace {
        /// Updated in place.
        x: TensorView<'a>,
        /// Broadcast operand.
        other: TensorView<'a>,
        /// Its factor.
        alpha: f32,
    },
    /// `x = x · other`, broadcasting (aclnnInplaceMul).
    MulInplace {
        /// Updated in place.
        x: TensorView<'a>,
        /// Broadcast operand.
        other: TensorView<'a>,
    },
    /// `out = a · b` elementwise, broadcasting both to `out` (aclnnMul).
    Mul {
        /// First operand.
        a: TensorView<'a>,
        /// Second operand.
        b: TensorView<'a>,
        /// Result, of the broadcast shape.
        out: TensorView<'a>,
    },
    /// `x = max(x, 0)` (aclnnInplaceRelu).
    ReluInplace {
        /// Updated in place.
        x: TensorView<'a>,
    },
    /// `out = x > value`, as 1 or 0 in `out`'s element type (aclnnGtScalar).
    GtScalar {
        /// Compared.
        x: TensorView<'a>,
        /// The threshold.
        value: f32,
        /// Result, `x`'s shape.
        out: TensorView<'a>,
    },
    /// `out = Σ x over dims` (aclnnReduceSum, result in `out`'s type).
    ReduceSum {
        /// Summed.
        x: TensorView<'a>,
        /// Dimensions summed over.
        dims: &'a [i64],
        /// Keep them as size-1 dimensions.
        keep_dims: bool,
        /// Result.
        out: TensorView<'a>,
    },
    /// `out = softmax(x)` along `dim` (aclnnSoftmax).
    Softmax {
        /// Logits.
        x: TensorView<'a>,
        /// The dimension normalised.
        dim: i64,
        /// Probabilities, `x`'s shape.
        out: TensorView<'a>,
    },
    /// One AdamW step (aclnnApplyAdamWV2, no AMSGrad, minimising):
    /// `m = β1·m + (1-β1)·g`, `v = β2·v + (1-β2)·g²`,
    /// `var -= lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)` after
    /// `var *= 1 - lr·weight_decay`; `t` is read from `step` (one f32).
    AdamW {
        /// Parameters, updated.
        var: TensorView<'a>,
        /// First moment, updated.
        m: TensorView<'a>,
        /// Second moment, updated.
        v: TensorView<'a>,
        /// Gradient.
        grad: TensorView<'a>,
        /// The step number `t` (1 for the first step), one f32 on the device.
        step: TensorView<'a>,
        /// Learning rate.
        lr: f32,
        /// First-moment decay.
        beta1: f32,
        /// Second-moment decay.
        beta2: f32,
        /// Decoupled weight decay.
        weight_decay: f32,
        /// Denominator guard.
        eps: f32,
    },
}

impl Op<'_> {
    /// The aclnn operator's name (`aclnnMm`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Mm { .. } => "aclnnMm",
            Op::AddInplace { .. } => "aclnnInplaceAdd",
            Op::SubInplace { .. } => "aclnnInplaceSub",
            Op::MulInplace { .. } => "aclnnInplaceMul",
            Op::Mul { .. } => "aclnnMul",
            Op::ReluInplace { .. } => "aclnnInplaceRelu",
            Op::GtScalar { .. } => "aclnnGtScalar",
            Op::ReduceSum { .. } => "aclnnReduceSum",
            Op::Softmax { .. } => "aclnnSoftmax",
            Op::AdamW { .. } => "aclnnApplyAdamWV2",
        }
    }

    /// Every tensor operand, for place checks.
    pub(super) fn views(&self) -> [Option<TensorView<'_>>; 5] {
        match *self {
            Op::Mm { a, b, out } | Op::Mul { a, b, out } => {
                [Some(a), Some(b), Some(out), None, None]
            }
            Op::AddInplace { x, other, .. }
            | Op::SubInplace { x, other, .. }
            | Op::MulInplace { x, other } => [Some(x), Some(other), None, None, None],
            Op::ReluInplace { x } => [Some(x), None, None, None, None],
            Op::GtScalar { x, out, .. }
            | Op::ReduceSum { x, out, .. }
            | Op::Softmax { x, out, .. } => [Some(x), Some(out), None, None, None],
            Op::AdamW {
                var,
                m,
                v,
                grad,
                step,
                ..
            } => [Some(var), Some(m), Some(v), Some(grad), Some(step)],
        }
    }
}
