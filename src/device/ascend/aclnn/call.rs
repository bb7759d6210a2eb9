//! The two-phase aclnn call: `aclnnXxxGetWorkspaceSize` builds an executor
//! from host objects (`aclTensor`, `aclScalar`, `aclIntArray`), then
//! `aclnnXxx` runs it on the stream with the workspace; and executor reuse.
//!
//! The documented lifetime (hicann/opbase
//! `docs/en/api/nnopbase/aclnn/aclSetAclOpExecutorRepeatable.md`,
//! `aclDestroyAclOpExecutor.md`): the second phase frees a non-repeatable
//! executor, so it runs once and is never destroyed by the caller;
//! `aclSetAclOpExecutorRepeatable`, right after the first phase, hands the
//! executor to the caller, who may run it again and destroys it with
//! `aclDestroyAclOpExecutor`. So an executor whose second phase will not run
//! (a workspace query, a workspace too small) is made repeatable and then
//! destroyed; cached executors are repeatable, run every step, and are
//! destroyed when evicted or when the device closes, after the stream has
//! drained (their work may still be queued).

use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};

use super::cache::{ExecutorStats, Lru, OpKey};
use super::op::Op;
use super::view::TensorView;
use crate::device::ascend::AscendDevice;
use crate::device::ascend::result;
use crate::device::ascend::sys::{
    ACL_BF16, ACL_FLOAT, ACL_FLOAT16, ACL_FORMAT_ND, ACL_INT32, ACL_UINT8, AclIntArray,
    AclOpExecutor, AclScalar, AclTensor, AclnnStatus, AclrtStream, NnFns, OpEntry, RunFn,
    RuntimeFns, repo_of,
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

impl Objects {
    fn new(nn: &'static NnFns) -> Objects {
        Objects {
            nn,
            tensors: Default::default(),
            scalar: None,
            array: None,
        }
    }
}

/// A repeatable executor and the host objects it was made from, destroyed
/// together (the executor first) when dropped.
struct Entry {
    executor: *mut AclOpExecutor,
    run: RunFn,
    workspace: u64,
    objs: Objects,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(destroy) = self.objs.nn.destroy_executor {
            // SAFETY: the executor was made repeatable, so it is the
            // caller's to destroy, once, here; no queued work uses it (the
            // stream drained before entries are dropped, see `Executors`).
            let _ = unsafe { destroy(self.executor) };
        }
    }
}

/// A device's repeatable executors: a bounded cache, and entries retired
/// from it (evicted, or failed) whose queued work may not have run yet,
/// destroyed at the device's next stream synchronisation.
pub(crate) struct Executors {
    cache: RefCell<Lru<Entry>>,
    retired: RefCell<Vec<Entry>>,
    stats: Cell<ExecutorStats>,
    rt: &'static RuntimeFns,
    stream: AclrtStream,
}

/// Retired entries kept before a synchronisation is forced.
const RETIRED: usize = 16;

impl Executors {
    /// An empty cache of `capacity` entries for executors run on `stream`.
    pub(crate) fn new(capacity: usize, rt: &'static RuntimeFns, stream: AclrtStream) -> Executors {
        Executors {
            cache: RefCell::new(Lru::new(capacity)),
            retired: RefCell::new(Vec::with_capacity(RETIRED)),
            stats: Cell::new(ExecutorStats {
                capacity,
                ..ExecutorStats::default()
            }),
            rt,
            stream,
        }
    }

    fn bump(&self, f: impl FnOnce(&mut ExecutorStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// The counts so far.
    pub(crate) fn stats(&self) -> ExecutorStats {
        let mut s = self.stats.get();
        s.cached = self.cache.borrow().len();
        s
    }

    /// Destroys the retired entries: call right after the stream drained.
    pub(crate) fn drained(&self) {
        self.retired.borrow_mut().clear();
    }

    /// Retires `entry`; synchronises first when the retired list is full.
    fn retire(&self, entry: Entry) -> std::result::Result<(), result::Failure> {
        let full = self.retired.borrow().len() >= RETIRED;
        if full {
            // SAFETY: the stream is the device's, live while it is.
            unsafe { result::synchronize(self.rt, self.stream) }?;
            self.drained();
        }
        self.retired.borrow_mut().push(entry);
        Ok(())
    }
}

impl Drop for Executors {
    fn drop(&mut self) {
        let cached = self.cache.get_mut().clear();
        if cached.is_empty() && self.retired.get_mut().is_empty() {
            return;
        }
        // SAFETY: the stream is still live (the device's stream is dropped
        // after its executors); draining it first means no queued work
        // uses the executors destroyed below. A failure cannot be reported
        // from a destructor.
        let _ = unsafe { result::synchronize(self.rt, self.stream) };
        drop(cached);
        self.retired.get_mut().clear();
    }
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

    fn missing(nn: &NnFns, op: &'static str) -> Error {
        let (repo, lib) = match repo_of(op) {
            Some(r) => (
                r.name(),
                if r == crate::device::ascend::sys::OpRepo::Nn {
                    "libopapi_nn.so"
                } else {
                    "libopapi_math.so"
                },
            ),
            None => ("an unknown", "its repository's library"),
        };
        Error::MissingSymbol {
            library: format!(
                "the aclnn operator libraries searched: {}",
                if nn.searched.is_empty() {
                    "none".to_owned()
                } else {
                    nn.searched.join("; ")
                }
            ),
            symbol: format!("{op}GetWorkspaceSize and {op}"),
            message: "no library searched exports both phases".to_owned(),
            hint: format!(
                "{op} is an {repo} operator: CANN ships it in {lib} (and in libopapi.so, which CANN is retiring); install the operator packages of a CANN 8.x toolkit and load its set_env.sh"
            ),
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
                let OpEntry { ws: f, run, .. } = nn.mm.ok_or_else(|| Self::missing(nn, name))?;
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
                let OpEntry { ws: f, run, .. } = pair.ok_or_else(|| Self::missing(nn, name))?;
                let (x, other) = (
                    self.make_tensor(objs, 0, &x, base)?,
                    self.make_tensor(objs, 1, &other, base)?,
                );
                let alpha = self.make_scalar(objs, alpha)?;
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(x, other, alpha, &mut ws, &mut exec) }, run)
            }
            Op::MulInplace { x, other } => {
                let OpEntry { ws: f, run, .. } =
                    nn.inplace_mul.ok_or_else(|| Self::missing(nn, name))?;
                let (x, other) = (
                    self.make_tensor(objs, 0, &x, base)?,
                    self.make_tensor(objs, 1, &other, base)?,
                );
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(x, other, &mut ws, &mut exec) }, run)
            }
            Op::Mul { a, b, out } => {
                let OpEntry { ws: f, run, .. } = nn.mul.ok_or_else(|| Self::missing(nn, name))?;
                let (a, b, out) = (
                    self.make_tensor(objs, 0, &a, base)?,
                    self.make_tensor(objs, 1, &b, base)?,
                    self.make_tensor(objs, 2, &out, base)?,
                );
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(a, b, out, &mut ws, &mut exec) }, run)
            }
            Op::ReluInplace { x } => {
                let OpEntry { ws: f, run, .. } =
                    nn.inplace_relu.ok_or_else(|| Self::missing(nn, name))?;
                let x = self.make_tensor(objs, 0, &x, base)?;
                // SAFETY: header type; live operands; valid out pointers (see above).
                (unsafe { f(x, &mut ws, &mut exec) }, run)
            }
            Op::GtScalar { x, value, out } => {
                let OpEntry { ws: f, run, .. } =
                    nn.gt_scalar.ok_or_else(|| Self::missing(nn, name))?;
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
                let OpEntry { ws: f, run, .. } =
                    nn.reduce_sum.ok_or_else(|| Self::missing(nn, name))?;
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
                let OpEntry { ws: f, run, .. } =
                    nn.softmax.ok_or_else(|| Self::missing(nn, name))?;
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
                let OpEntry { ws: f, run, .. } =
                    nn.apply_adam_w.ok_or_else(|| Self::missing(nn, name))?;
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

    /// Hands a fresh executor to the caller (`aclSetAclOpExecutorRepeatable`,
    /// right after its first phase); `false` when the runtime lacks the call
    /// or refuses (an operator that cannot repeat), leaving the executor
    /// non-repeatable.
    fn make_repeatable(&self, nn: &NnFns, executor: *mut AclOpExecutor) -> bool {
        let Some(set) = nn.set_repeatable else {
            return false;
        };
        // SAFETY: the executor came from the first phase just run and has
        // not run yet.
        let status = unsafe { set(executor) };
        if status != 0 {
            // The refusal is not an error of the call: consume its message
            // so it does not surface with a later failure.
            let _ = result::recent_message(self.runtime_ref().rt());
            self.executors().bump(|s| s.refused += 1);
        }
        status == 0
    }

    /// Releases an executor whose second phase will not run: destroyed if
    /// it is (or can be made) repeatable, else left to the framework, the
    /// only owner the documentation gives a non-repeatable executor.
    fn dispose(&self, nn: &NnFns, executor: *mut AclOpExecutor, repeatable: bool) {
        if executor.is_null() {
            return;
        }
        let destroy = nn
            .destroy_executor
            .filter(|_| repeatable || self.make_repeatable(nn, executor));
        match destroy {
            Some(destroy) => {
                // SAFETY: the executor is repeatable, so the caller's, and
                // is destroyed once, here; it never ran, so nothing queued
                // uses it.
                let _ = unsafe { destroy(executor) };
            }
            None => self.executors().bump(|s| s.abandoned += 1),
        }
    }

    /// Workspace bytes `op` needs for its operands' shapes: the first phase
    /// only, its executor released the documented way (made repeatable,
    /// then destroyed). Ask with the largest shapes at startup (with
    /// [`TensorView::detached`] operands) and declare a workspace buffer of
    /// at least the largest answer.
    pub fn workspace_size(&self, op: &Op<'_>) -> Result<u64> {
        let nn = self.nn()?;
        let mut objs = Objects::new(nn);
        let first = self.first_phase(op, std::ptr::null_mut(), &mut objs)?;
        self.dispose(nn, first.executor, false);
        Ok(first.workspace)
    }

    /// How executor reuse has gone on this device so far.
    pub fn executor_stats(&self) -> ExecutorStats {
        self.executors().stats()
    }

    /// Both phases of `op` on the slab at `base` of arena `arena`, with the
    /// given workspace (device address and bytes); or, when this call was
    /// seen before, the second phase of its cached executor.
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
        let nn = self.nn()?;
        let rt = self.runtime_ref().rt();
        let execs = self.executors();
        let (ws_ptr, reserved) = workspace.unwrap_or((std::ptr::null_mut(), 0));
        let ws_for = |needed: u64| {
            if needed == 0 {
                std::ptr::null_mut()
            } else {
                ws_ptr
            }
        };
        let too_small = |needed: u64| Error::WorkspaceTooSmall {
            op: op.name(),
            needed,
            reserved,
        };
        let reuse = execs.cache.borrow().capacity() > 0
            && nn.set_repeatable.is_some()
            && nn.destroy_executor.is_some();
        let key = if reuse {
            OpKey::new(op, base as usize)
        } else {
            None
        };
        if let Some(key) = &key {
            let mut cache = execs.cache.borrow_mut();
            if let Some(entry) = cache.get(key) {
                if entry.workspace > reserved {
                    return Err(too_small(entry.workspace));
                }
                // SAFETY: the executor is repeatable and was made for
                // exactly these operands at these addresses (the key holds
                // them), which are leased for the call; the workspace is
                // `entry.workspace` bytes of a leased buffer (or null when
                // none is needed); the stream is this device's.
                let status = unsafe {
                    (entry.run)(
                        ws_for(entry.workspace),
                        entry.workspace,
                        entry.executor,
                        self.stream(),
                    )
                };
                execs.bump(|s| s.hits += 1);
                if let Err(f) = result::check_nn(rt, op.name(), "", status) {
                    // An executor that failed is not trusted again.
                    if let Some(failed) = cache.remove(key) {
                        drop(cache);
                        let _ = execs.retire(failed);
                    }
                    return Err(self.fail(f));
                }
                return Ok(());
            }
        }
        let mut objs = Objects::new(nn);
        let first = self.first_phase(op, base, &mut objs)?;
        let repeatable = key.is_some() && self.make_repeatable(nn, first.executor);
        if first.workspace > reserved {
            self.dispose(nn, first.executor, repeatable);
            return Err(too_small(first.workspace));
        }
        // SAFETY: the executor came from the first phase just run, with
        // operands on leased device memory that stays leased for the call;
        // the workspace is `first.workspace` bytes of a leased buffer (or
        // null when none is needed); the stream is this device's. A
        // non-repeatable executor is consumed by this call.
        let status = unsafe {
            (first.run)(
                ws_for(first.workspace),
                first.workspace,
                first.executor,
                self.stream(),
            )
        };
        let checked = result::check_nn(rt, op.name(), "", status).map_err(|f| self.fail(f));
        let Some(key) = key.filter(|_| repeatable) else {
            execs.bump(|s| s.one_shot += 1);
            return checked;
        };
        let entry = Entry {
            executor: first.executor,
            run: first.run,
            workspace: first.workspace,
            objs,
        };
        if let Err(e) = checked {
            let _ = execs.retire(entry);
            return Err(e);
        }
        execs.bump(|s| s.misses += 1);
        let evicted = execs.cache.borrow_mut().insert(key, entry);
        if let Some(old) = evicted {
            execs.bump(|s| s.evictions += 1);
            execs.retire(old).map_err(|f| self.fail(f))?;
        }
        Ok(())
    }
}
