//! The two-phase aclnn call: `aclnnXxxGetWorkspaceSize` builds an executor
//! from host objects (`aclTensor`, `aclScalar`, `aclIntArray`), then
//! `aclnnXxx` runs it on the stream with the workspace.

use std::ffi::{c_int, c_void};

use super::op::Op;
use super::view::TensorView;
use crate::device::ascend::AscendDevice;
use crate::device::ascend::result;
use crate::device::ascend::sys::{
    ACL_BF16, ACL_FLOAT, ACL_FLOAT16, ACL_FORMAT_ND, ACL_INT32, ACL_UINT8, AclIntArray,
    AclOpExecutor, AclScalar, AclTensor, AclnnStatus, NnFns, RunFn,
};
use crate::dtype::DType;
use crate::error::{Error, Result};

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
    destroy: unsafe extern "C" fn(*const T) -> AclnnStatus,
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
        result::check_nn(self.runtime_ref().rt(), name, "GetWorkspaceSize", status)
            .map_err(|f| self.fail(f))?;
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
    pub(crate) fn run_op(
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
        let status = unsafe { (first.run)(ws, first.workspace, first.executor, self.stream()) };
        result::check_nn(self.runtime_ref().rt(), op.name(), "", status).map_err(|f| self.fail(f))
    }
}
