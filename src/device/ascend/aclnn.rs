//! CANN's aclnn operators on leased device memory.
//!
//! A [`TensorView`] describes a lease (or a shape, for workspace queries)
//! as an `aclTensor`: element type, shape and strides in elements, on the
//! lease's bytes. An [`Op`] names one operator and its operands.
//! [`AscendDevice::workspace_size`] runs the first phase
//! (`aclnnXxxGetWorkspaceSize`) to learn the workspace an operator needs,
//! so a plan can reserve the largest at startup; `Step::aclnn` runs both
//! phases on the device's stream with the workspace leased from the plan,
//! and fails with [`Error::WorkspaceTooSmall`] rather than allocate.
//!
//! Views can only be made from leases of an arena on an [`AscendDevice`],
//! and only cover the lease's capacity, so an operator cannot reach bytes
//! of another buffer. (An Ascend slab is not host memory: no Rust
//! reference to it ever exists, so operators writing through a view made
//! from a shared lease borrow break no aliasing rule.)
//!
//! ```no_run
//! # // Needs the CANN runtime (or the simulated one): not run as a doc test.
//! use tensor_arena::device::ascend::{AscendConfig, AscendDevice, Op, TensorView};
//! use tensor_arena::{Arena, DType, Planner};
//!
//! let dev = AscendDevice::new(AscendConfig::from_env()?)?;
//! // Startup: ask the operator how much workspace the largest shapes need.
//! let q = |s: &[usize]| TensorView::detached(DType::F32, s);
//! let need = dev.workspace_size(&Op::Mm { a: q(&[64, 32])?, b: q(&[32, 16])?, out: q(&[64, 16])? })?;
//! let mut p = Planner::new();
//! let (a, b, c) = (p.step::<f32>("a", &[64, 32])?, p.step::<f32>("b", &[32, 16])?, p.step::<f32>("c", &[64, 16])?);
//! let ws = p.persistent::<u8>("aclnn.workspace", &[need.max(1) as usize])?;
//! let mut arena = Arena::new(dev, p.plan()?)?;
//! arena.step(|s| {
//!     let (a, b, c) = (s.lease(a)?, s.lease(b)?, s.lease(c)?);
//!     let mut ws = s.lease(ws)?;
//!     s.aclnn(&Op::Mm { a: a.tensor(), b: b.tensor(), out: c.tensor() }, Some(&mut ws))
//! })?;
//! # Ok::<(), tensor_arena::Error>(())
//! ```

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;

use super::device::AscendDevice;
use super::result::{self, Failure};
use super::sys::{
    ACL_BF16, ACL_FLOAT, ACL_FLOAT16, ACL_FORMAT_ND, ACL_INT32, ACL_UINT8, AclIntArray,
    AclOpExecutor, AclScalar, AclTensor, NnFns, RunFn,
};
use crate::arena::{Arena, Lease, Step};
use crate::device::Slab;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

/// Most dimensions a view may have (the crate's shape limit).
pub const MAX_VIEW_DIMS: usize = crate::shape::MAX_DIMS;

/// Where a view's elements are: which arena, the buffer's slab offset and
/// its capacity in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    arena: usize,
    offset: usize,
    capacity: usize,
}

/// An operand of an aclnn operator: element type, shape and strides (in
/// elements) over a lease's bytes, or over nothing for workspace queries
/// ([`TensorView::detached`]).
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    place: Option<Place>,
    dtype: DType,
    ndim: u8,
    dims: [i64; MAX_VIEW_DIMS],
    strides: [i64; MAX_VIEW_DIMS],
    _lease: PhantomData<&'a ()>,
}

impl<T: Element> Lease<'_, T, super::AscendDevice> {
    /// This lease's current view as an aclnn operand: its shape, row-major.
    pub fn tensor(&self) -> TensorView<'_> {
        let place = Place {
            arena: std::ptr::from_ref(self.arena) as usize,
            offset: self.slot.offset,
            capacity: self.slot.capacity,
        };
        TensorView::contiguous(Some(place), T::DTYPE, self.shape())
    }
}

impl<'a> TensorView<'a> {
    fn contiguous(place: Option<Place>, dtype: DType, shape: &[usize]) -> TensorView<'a> {
        let mut v = TensorView {
            place,
            dtype,
            ndim: shape.len().min(MAX_VIEW_DIMS) as u8,
            dims: [0; MAX_VIEW_DIMS],
            strides: [0; MAX_VIEW_DIMS],
            _lease: PhantomData,
        };
        let mut stride = 1i64;
        for i in (0..usize::from(v.ndim)).rev() {
            v.dims[i] = shape[i] as i64;
            v.strides[i] = stride;
            stride = stride.saturating_mul(shape[i] as i64);
        }
        v
    }

    fn invalid(&self, shape: &[usize], reason: &'static str) -> Error {
        Error::InvalidView {
            buffer: format!("aclnn tensor {:?}", self.shape()),
            shape: shape.to_vec(),
            reason,
        }
    }

    /// A view of no memory with `shape`, for
    /// [`AscendDevice::workspace_size`]; operators refuse to run on it.
    ///
    /// ```
    /// use tensor_arena::device::ascend::TensorView;
    /// let v = TensorView::detached(tensor_arena::DType::F32, &[4, 3])?;
    /// assert_eq!(v.shape(), [4, 3]);
    /// assert_eq!(v.t()?.strides(), [1, 3]);
    /// assert!(TensorView::detached(tensor_arena::DType::F32, &[]).is_err());
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn detached(dtype: DType, shape: &[usize]) -> Result<TensorView<'static>> {
        let v = TensorView::contiguous(None, dtype, &[]);
        if shape.is_empty() || shape.len() > MAX_VIEW_DIMS {
            return Err(v.invalid(shape, "a tensor has 1 to 8 dimensions"));
        }
        if shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .is_none_or(|n| n > i64::MAX as usize)
        {
            return Err(v.invalid(shape, "the element count overflows"));
        }
        Ok(TensorView::contiguous(None, dtype, shape))
    }

    /// The same elements with another row-major shape of equal element
    /// count (only for row-major views).
    pub fn reshape(self, shape: &[usize]) -> Result<TensorView<'a>> {
        if shape.is_empty() || shape.len() > MAX_VIEW_DIMS {
            return Err(self.invalid(shape, "a tensor has 1 to 8 dimensions"));
        }
        if !self.is_row_major() {
            return Err(self.invalid(shape, "only a row-major view can be reshaped"));
        }
        let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if n != Some(self.elements()) {
            return Err(self.invalid(shape, "a reshape keeps the element count"));
        }
        Ok(TensorView::contiguous(self.place, self.dtype, shape))
    }

    /// The transpose of a 2-D view (strides swapped, no data moved).
    pub fn t(self) -> Result<TensorView<'a>> {
        if self.ndim != 2 {
            return Err(self.invalid(&[], "only a 2-D view can be transposed"));
        }
        let mut v = self;
        v.dims.swap(0, 1);
        v.strides.swap(0, 1);
        Ok(v)
    }

    /// The shape.
    pub fn shape(&self) -> &[i64] {
        &self.dims[..usize::from(self.ndim)]
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        &self.strides[..usize::from(self.ndim)]
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Elements in the view.
    pub fn elements(&self) -> usize {
        self.shape().iter().map(|&d| d as usize).product()
    }

    /// Elements of storage the view spans (largest index + 1).
    fn extent(&self) -> usize {
        if self.elements() == 0 {
            return 0;
        }
        1 + self
            .shape()
            .iter()
            .zip(self.strides())
            .map(|(&d, &s)| (d as usize - 1) * s as usize)
            .sum::<usize>()
    }

    fn is_row_major(&self) -> bool {
        let mut stride = 1i64;
        for i in (0..usize::from(self.ndim)).rev() {
            if self.dims[i] != 1 && self.strides[i] != stride {
                return false;
            }
            stride *= self.dims[i];
        }
        true
    }
}

/// One aclnn operator call. Element types follow the operator's header;
/// the simulated runtime implements f32.
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
    fn views(&self) -> [Option<TensorView<'_>>; 5] {
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

fn acl_dtype(d: DType) -> c_int {
    match d {
        DType::F32 => ACL_FLOAT,
        DType::F16 => ACL_FLOAT16,
        DType::BF16 => ACL_BF16,
        DType::I32 => ACL_INT32,
        DType::U8 => ACL_UINT8,
    }
}

/// An aclnn host object (`aclTensor`, `aclScalar`, `aclIntArray`),
/// destroyed with its own destroy function when dropped.
struct Handle<T> {
    raw: *mut T,
    destroy: unsafe extern "C" fn(*const T) -> super::sys::AclnnStatus,
}

impl<T> Drop for Handle<T> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from the matching aclCreate* call, `destroy` is
        // that object's aclDestroy* function, and it runs once, here.
        let _ = unsafe { (self.destroy)(self.raw) };
    }
}

/// The host-side objects of one call, kept until the call is done; no
/// heap allocation on the Rust side.
struct Objects {
    nn: &'static NnFns,
    tensors: [Option<Handle<AclTensor>>; 5],
    scalar: Option<Handle<AclScalar>>,
    array: Option<Handle<AclIntArray>>,
}

/// The first phase's result.
struct FirstPhase {
    workspace: u64,
    executor: *mut AclOpExecutor,
    run: RunFn,
}

impl AscendDevice {
    fn nn(&self) -> Result<&'static NnFns> {
        self.runtime_ref().nn()
    }

    fn missing(op: &'static str) -> Error {
        Error::MissingSymbol {
            library: "the aclnn libraries (libopapi.so, libnnopbase.so)".to_owned(),
            symbol: op.to_owned(),
            message: "not exported".to_owned(),
            hint: "the operator needs a newer CANN toolkit (8.x)".to_owned(),
        }
    }

    fn make_tensor(
        &self,
        objs: &mut Objects,
        slot: usize,
        v: &TensorView<'_>,
        base: *mut u8,
    ) -> Result<*mut AclTensor> {
        let data = match v.place {
            Some(p) if !base.is_null() => base.wrapping_add(p.offset).cast::<c_void>(),
            _ => std::ptr::null_mut(),
        };
        let storage = [v.extent() as i64];
        // SAFETY: dims and strides hold `ndim` valid entries; storage holds
        // one; `data` is null (a query) or the lease's device address,
        // whose capacity covers `storage` elements (views never exceed
        // it). The function only reads the arrays during the call.
        let raw = unsafe {
            (objs.nn.create_tensor)(
                v.dims.as_ptr(),
                u64::from(v.ndim),
                acl_dtype(v.dtype),
                v.strides.as_ptr(),
                0,
                ACL_FORMAT_ND,
                storage.as_ptr(),
                1,
                data,
            )
        };
        if raw.is_null() {
            return Err(Error::Device {
                device: self.name_string(),
                operation: "aclCreateTensor",
                message: format!(
                    "returned null for a {} tensor of shape {:?}",
                    v.dtype,
                    v.shape()
                ),
            });
        }
        objs.tensors[slot] = Some(Handle {
            raw,
            destroy: objs.nn.destroy_tensor,
        });
        Ok(raw)
    }

    fn make_scalar(&self, objs: &mut Objects, value: f32) -> Result<*mut AclScalar> {
        let mut value = value;
        // SAFETY: `value` is a live f32 for the call, matching ACL_FLOAT;
        // the function copies it.
        let raw =
            unsafe { (objs.nn.create_scalar)(std::ptr::from_mut(&mut value).cast(), ACL_FLOAT) };
        if raw.is_null() {
            return Err(Error::Device {
                device: self.name_string(),
                operation: "aclCreateScalar",
                message: "returned null".to_owned(),
            });
        }
        objs.scalar = Some(Handle {
            raw,
            destroy: objs.nn.destroy_scalar,
        });
        Ok(raw)
    }

    fn make_array(&self, objs: &mut Objects, values: &[i64]) -> Result<*mut AclIntArray> {
        // SAFETY: `values` is valid for its length during the call; the
        // function copies it.
        let raw = unsafe { (objs.nn.create_int_array)(values.as_ptr(), values.len() as u64) };
        if raw.is_null() {
            return Err(Error::Device {
                device: self.name_string(),
                operation: "aclCreateIntArray",
                message: format!("returned null for {values:?}"),
            });
        }
        objs.array = Some(Handle {
            raw,
            destroy: objs.nn.destroy_int_array,
        });
        Ok(raw)
    }

    fn name_string(&self) -> String {
        crate::device::Device::name(self).to_owned()
    }

    /// Runs the first phase of `op` with tensors on `base` (null for a
    /// query); the objects it created are kept in `objs`.
    fn first_phase(&self, op: &Op<'_>, base: *mut u8, objs: &mut Objects) -> Result<FirstPhase> {
        let nn = objs.nn;
        let mut ws = 0u64;
        let mut exec: *mut AclOpExecutor = std::ptr::null_mut();
        let name = op.name();
        // Every workspace call below: each function pointer has its
        // header's type; every tensor, scalar and array passed was just
        // created and is alive (held by `objs`); `ws` and `exec` are valid
        // out pointers.
        let (status, run) = match *op {
            Op::Mm { a, b, out } => {
                let (f, run) = nn.mm.ok_or_else(|| Self::missing(name))?;
                let (a, b, out) = (
                    self.make_tensor(objs, 0, &a, base)?,
                    self.make_tensor(objs, 1, &b, base)?,
                    self.make_tensor(objs, 2, &out, base)?,
                );
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(a, b, out, 0, &mut ws, &mut exec) }, run)
            }
            Op::AddInplace { x, other, alpha } | Op::SubInplace { x, other, alpha } => {
                let pair = if matches!(op, Op::AddInplace { .. }) {
                    nn.inplace_add
                } else {
                    nn.inplace_sub
                };
                let (f, run) = pair.ok_or_else(|| Self::missing(name))?;
                let (x, other) = (
                    self.make_tensor(objs, 0, &x, base)?,
                    self.make_tensor(objs, 1, &other, base)?,
                );
                let alpha = self.make_scalar(objs, alpha)?;
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(x, other, alpha, &mut ws, &mut exec) }, run)
            }
            Op::MulInplace { x, other } => {
                let (f, run) = nn.inplace_mul.ok_or_else(|| Self::missing(name))?;
                let (x, other) = (
                    self.make_tensor(objs, 0, &x, base)?,
                    self.make_tensor(objs, 1, &other, base)?,
                );
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(x, other, &mut ws, &mut exec) }, run)
            }
            Op::Mul { a, b, out } => {
                let (f, run) = nn.mul.ok_or_else(|| Self::missing(name))?;
                let (a, b, out) = (
                    self.make_tensor(objs, 0, &a, base)?,
                    self.make_tensor(objs, 1, &b, base)?,
                    self.make_tensor(objs, 2, &out, base)?,
                );
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(a, b, out, &mut ws, &mut exec) }, run)
            }
            Op::ReluInplace { x } => {
                let (f, run) = nn.inplace_relu.ok_or_else(|| Self::missing(name))?;
                let x = self.make_tensor(objs, 0, &x, base)?;
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(x, &mut ws, &mut exec) }, run)
            }
            Op::GtScalar { x, value, out } => {
                let (f, run) = nn.gt_scalar.ok_or_else(|| Self::missing(name))?;
                let (x, out) = (
                    self.make_tensor(objs, 0, &x, base)?,
                    self.make_tensor(objs, 1, &out, base)?,
                );
                let value = self.make_scalar(objs, value)?;
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(x, value, out, &mut ws, &mut exec) }, run)
            }
            Op::ReduceSum {
                x,
                dims,
                keep_dims,
                out,
            } => {
                let (f, run) = nn.reduce_sum.ok_or_else(|| Self::missing(name))?;
                let (xt, ot) = (
                    self.make_tensor(objs, 0, &x, base)?,
                    self.make_tensor(objs, 1, &out, base)?,
                );
                let dims = self.make_array(objs, dims)?;
                // SAFETY: header type; live operands; valid out pointers (see above).
                (
                    unsafe {
                        f(
                            xt,
                            dims,
                            keep_dims,
                            acl_dtype(out.dtype),
                            ot,
                            &mut ws,
                            &mut exec,
                        )
                    },
                    run,
                )
            }
            Op::Softmax { x, dim, out } => {
                let (f, run) = nn.softmax.ok_or_else(|| Self::missing(name))?;
                let (x, out) = (
                    self.make_tensor(objs, 0, &x, base)?,
                    self.make_tensor(objs, 1, &out, base)?,
                );
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(x, dim, out, &mut ws, &mut exec) }, run)
            }
            Op::AdamW {
                var,
                m,
                v,
                grad,
                step,
                lr,
                beta1,
                beta2,
                weight_decay,
                eps,
            } => {
                let (f, run) = nn.apply_adam_w.ok_or_else(|| Self::missing(name))?;
                let var = self.make_tensor(objs, 0, &var, base)?;
                let m = self.make_tensor(objs, 1, &m, base)?;
                let v = self.make_tensor(objs, 2, &v, base)?;
                let grad = self.make_tensor(objs, 3, &grad, base)?;
                let step = self.make_tensor(objs, 4, &step, base)?;
                // SAFETY: header type; live operands; valid out pointers (see above).
                let status = unsafe {
                    f(
                        var,
                        m,
                        v,
                        std::ptr::null_mut(),
                        grad,
                        step,
                        lr,
                        beta1,
                        beta2,
                        weight_decay,
                        eps,
                        false,
                        false,
                        &mut ws,
                        &mut exec,
                    )
                };
                (status, run)
            }
        };
        if status != 0 {
            return Err(self.fail(Failure {
                op: format!("{name}GetWorkspaceSize"),
                code: status,
                message: result::recent_message(self.runtime_ref().rt()),
            }));
        }
        Ok(FirstPhase {
            workspace: ws,
            executor: exec,
            run,
        })
    }

    fn release(&self, objs: &Objects, executor: *mut AclOpExecutor) {
        if let Some(destroy) = objs.nn.destroy_executor
            && !executor.is_null()
        {
            // SAFETY: the executor came from a first phase whose second
            // phase will not run; it is destroyed once.
            let _ = unsafe { destroy(executor) };
        }
    }

    /// Workspace bytes `op` needs for its operands' shapes: the first phase
    /// only, its executor released. Ask with the largest shapes at startup
    /// (with [`TensorView::detached`] operands) and declare a workspace
    /// buffer of at least the largest answer.
    pub fn workspace_size(&self, op: &Op<'_>) -> Result<u64> {
        let mut objs = Objects {
            nn: self.nn()?,
            tensors: Default::default(),
            scalar: None,
            array: None,
        };
        let first = self.first_phase(op, std::ptr::null_mut(), &mut objs)?;
        self.release(&objs, first.executor);
        Ok(first.workspace)
    }

    /// Both phases of `op` on the slab at `base` of arena `arena`, with the
    /// given workspace (device address and bytes).
    fn run_op(
        &self,
        op: &Op<'_>,
        base: *mut u8,
        arena: usize,
        workspace: Option<(*mut c_void, u64)>,
    ) -> Result<()> {
        for v in op.views().into_iter().flatten() {
            match v.place {
                Some(p) if p.arena == arena => {}
                _ => {
                    return Err(Error::InvalidArgument {
                        what: "aclnn operand",
                        value: format!("{} tensor of shape {:?}", v.dtype, v.shape()),
                        reason: format!(
                            "{}: operands must be views of leases of this step's arena (detached views are for workspace queries)",
                            op.name()
                        ),
                    });
                }
            }
        }
        let mut objs = Objects {
            nn: self.nn()?,
            tensors: Default::default(),
            scalar: None,
            array: None,
        };
        let first = self.first_phase(op, base, &mut objs)?;
        let (ws_ptr, reserved) = workspace.unwrap_or((std::ptr::null_mut(), 0));
        if first.workspace > reserved {
            self.release(&objs, first.executor);
            return Err(Error::WorkspaceTooSmall {
                op: op.name(),
                needed: first.workspace,
                reserved,
            });
        }
        let ws = if first.workspace == 0 {
            std::ptr::null_mut()
        } else {
            ws_ptr
        };
        // SAFETY: the executor came from the first phase just run, with
        // operands on leased device memory that stays leased for the call;
        // the workspace is `first.workspace` bytes of a leased buffer (or
        // null when none is needed); the stream is this device's. The
        // second phase consumes the executor.
        // SAFETY: header type; live operands; valid out pointers (see above).
        let status = unsafe { (first.run)(ws, first.workspace, first.executor, self.stream()) };
        if status != 0 {
            return Err(self.fail(Failure {
                op: op.name().to_owned(),
                code: status,
                message: result::recent_message(self.runtime_ref().rt()),
            }));
        }
        Ok(())
    }
}

impl Step<'_, AscendDevice> {
    /// Runs aclnn operator `op` on the device's stream, its operands views
    /// of this step's leases, with `workspace` (a leased `u8` buffer the
    /// plan sized with [`AscendDevice::workspace_size`]) when the operator
    /// asks for one. Asynchronous like a kernel launch: copies to the host
    /// wait for it. Allocates nothing on the device: an operator that
    /// needs more workspace than the lease holds fails with
    /// [`Error::WorkspaceTooSmall`].
    pub fn aclnn(
        &self,
        op: &Op<'_>,
        workspace: Option<&mut Lease<'_, u8, AscendDevice>>,
    ) -> Result<()> {
        let arena: &Arena<AscendDevice> = self.arena;
        let id = std::ptr::from_ref(arena) as usize;
        let base = arena.slab.base();
        let ws = match workspace {
            Some(l) if std::ptr::eq(l.arena, arena) => Some((
                base.wrapping_add(l.slot.offset).cast::<c_void>(),
                l.capacity() as u64,
            )),
            Some(l) => {
                return Err(Error::ArenaMismatch {
                    op: op.name(),
                    buffer: l.name().to_owned(),
                    other: "this step's arena".to_owned(),
                });
            }
            None => None,
        };
        arena.device.run_op(op, base, id, ws)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_know_their_extent() {
        let v = TensorView::detached(DType::F32, &[4, 3]).unwrap();
        assert_eq!((v.elements(), v.extent()), (12, 12));
        let t = v.t().unwrap();
        assert_eq!(
            (t.shape(), t.strides(), t.extent()),
            (&[3i64, 4][..], &[1i64, 3][..], 12)
        );
        assert!(!t.is_row_major());
        assert!(t.reshape(&[12]).is_err());
        let r = v.reshape(&[2, 6, 1]).unwrap();
        assert_eq!(r.strides(), [6, 1, 1]);
        assert!(v.reshape(&[5, 2]).is_err());
        assert!(r.t().is_err());
    }
}
