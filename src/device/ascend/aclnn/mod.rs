//! CANN's aclnn operators on leased device memory.
//!
//! A [`TensorView`] describes a lease (or a shape, for workspace queries)
//! as an `aclTensor`: element type, shape and strides in elements, on the
//! lease's bytes. An [`Op`] names one operator and its operands.
//! [`AscendDevice::workspace_size`](crate::device::ascend::AscendDevice::workspace_size) runs the first phase
//! (`aclnnXxxGetWorkspaceSize`) to learn the workspace an operator needs,
//! so a plan can reserve the largest at startup; `Step::aclnn` runs both
//! phases on the device's stream with the workspace leased from the plan,
//! and fails with [`Error::WorkspaceTooSmall`](crate::Error::WorkspaceTooSmall) rather than allocate.
//!
//! Executors follow CANN's documented lifetime: a non-repeatable one runs
//! once (its second phase frees it); one whose second phase will not run is
//! made repeatable and destroyed. Because an arena's addresses never
//! change, the executor of a call is made repeatable once and reused for
//! every later call with the same operator, operands (shapes, types,
//! strides, addresses) and scalars, up to
//! [`AscendConfig::executor_cache`](crate::device::ascend::AscendConfig::executor_cache)
//! entries per device: steady steps run the second phase only
//! ([`AscendDevice::executor_stats`](crate::device::ascend::AscendDevice::executor_stats)
//! counts hits and misses).
//!
//! Operators resolve from CANN's per-repository libraries
//! (`libopapi_nn.so`: Mm, Relu, Softmax, ApplyAdamWV2; `libopapi_math.so`:
//! Add, Sub, Mul, GtScalar, ReduceSum) when installed, else from the
//! combined `libopapi.so`; a missing operator is reported when used, naming
//! every library searched.
//!
//! Views can only be made from leases of an arena on an [`AscendDevice`](crate::device::ascend::AscendDevice),
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

// The executor cache's keys and table: pure data.
mod cache;
// aclCreateTensor & co., the two aclnn phases and executor lifetimes,
// through function pointers.
#[allow(unsafe_code)]
mod call;
mod op;
mod view;

pub use cache::ExecutorStats;
pub(crate) use call::Executors;
pub use op::Op;
pub use view::{MAX_VIEW_DIMS, TensorView};
