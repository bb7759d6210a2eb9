//! The Ascend backend of the model: every operation a CANN aclnn operator
//! (matrix products through `aclnnMm`, bias and masks through broadcasting
//! `aclnnInplaceAdd` / `aclnnInplaceMul` / `aclnnMul`, pooling and bias
//! gradients through `aclnnReduceSum`, `aclnnSoftmax`, `aclnnGtScalar`,
//! AdamW through `aclnnApplyAdamWV2`), run on the device's stream with the
//! workspace the plan reserved. Host data reaches the device through
//! staging buffers made once, so steps allocate nothing on either side.

use std::cell::{Cell, RefCell};

use tensor_arena::device::ascend::{AscendConfig, AscendDevice, AscendRuntime, Op, TensorView};
use tensor_arena::{Buffer, DType, Result, Step};

use crate::backend::{AdamSettings, AscendMask, Compute, L, Setup};
use crate::model::Sizes;

pub struct AscendBackend {
    device: AscendDevice,
    workspace: Cell<Option<Buffer<u8>>>,
    /// Host staging for uploads and downloads, sized at the first use of
    /// the largest shapes and reused.
    staging: RefCell<Vec<f32>>,
}

impl AscendBackend {
    pub fn new(config: AscendConfig) -> Result<AscendBackend> {
        Ok(AscendBackend {
            device: AscendDevice::new(config)?,
            workspace: Cell::new(None),
            staging: RefCell::new(Vec::new()),
        })
    }

    /// The backend `--device ascend` runs on: the runtime `config` finds,
    /// and only that. Without one the error names every place searched, how
    /// to set up CANN, and `--device ascend-sim` for the simulation: a run
    /// meant for an NPU never falls back to a test double.
    // Used by main.rs and tests/mask_and_train.rs.
    #[allow(dead_code)]
    pub fn real(config: AscendConfig) -> std::result::Result<AscendBackend, String> {
        AscendBackend::new(config).map_err(|e| {
            format!(
                "--device ascend: {e}\n(--device ascend runs only on a CANN runtime; the CPU \
                 simulation of it built with this crate, a test double and not an NPU, is \
                 --device ascend-sim)"
            )
        })
    }

    /// The backend `--device ascend-sim` runs on: the CPU simulation of the
    /// ACL runtime this crate's build made (`kernels/sim/`), and nothing
    /// installed on the machine: a test double, not an NPU. `device` is
    /// the simulated device id.
    // Used by main.rs; the tests that include this module open the backend
    // with `new`.
    #[allow(dead_code)]
    pub fn simulation(device: Option<i32>) -> std::result::Result<AscendBackend, String> {
        let Some(dir) = option_env!("TENSOR_ARENA_SIM_DIR") else {
            return Err(
                "--device ascend-sim: the simulated ACL runtime was not built with this crate \
                 (build.rs needs a C++ compiler such as g++; install one and rebuild)"
                    .into(),
            );
        };
        let mut config = AscendConfig::new().search_dir(dir).system_search(false);
        if let Some(id) = device {
            config = config.device(id);
        }
        AscendBackend::new(config).map_err(|e| format!("--device ascend-sim: {e}"))
    }

    /// What the simulated runtime allocated for itself over the run (its
    /// launch stubs' status buffers), when this is the simulation; a real
    /// runtime makes the same allocations but does not count them for us.
    // Used by main.rs (see `simulation`).
    #[allow(dead_code)]
    pub fn runtime_allocations(&self) -> Option<u64> {
        let path = self.device.runtime().library_path().to_path_buf();
        // SAFETY: the runtime library is already loaded (this returns the
        // same instance); nothing new is initialised.
        let lib = unsafe { libloading::Library::new(&path) }.ok()?;
        // SAFETY: `uint64_t tasim_counter(const char *)` in the simulation;
        // a real runtime has no such symbol and this returns None.
        let counter = unsafe {
            lib.get::<unsafe extern "C" fn(*const std::ffi::c_char) -> u64>(b"tasim_counter")
        }
        .ok()?;
        // SAFETY: a NUL-terminated name that outlives the call.
        Some(unsafe { counter(c"launch_mallocs".as_ptr()) })
    }

    /// Makes the staging buffer hold `elements` values, once.
    pub fn reserve_staging(&self, elements: usize) {
        let mut st = self.staging.borrow_mut();
        if st.len() < elements {
            st.resize(elements, 0.0);
        }
    }

    pub fn runtime(&self) -> AscendRuntime {
        self.device.runtime()
    }

    fn run(&self, s: &Step<'_, AscendDevice>, op: &Op<'_>) -> Result<()> {
        match self.workspace.get() {
            Some(ws) => {
                let mut w = s.lease(ws)?;
                s.aclnn(op, Some(&mut w))
            }
            None => s.aclnn(op, None),
        }
    }
}

fn t2<'a>(l: &'a L<'_, AscendDevice>, transpose: bool) -> Result<TensorView<'a>> {
    let v = l.tensor();
    if transpose { v.t() } else { Ok(v) }
}

impl Setup for AscendBackend {
    type Dev = AscendDevice;

    fn device(&self) -> AscendDevice {
        self.device.clone()
    }

    fn describe(&self) -> String {
        format!(
            "{} (runtime {}, kernels {}, {} cores per launch)",
            tensor_arena::Device::name(&self.device),
            self.device.runtime().library_path().display(),
            self.device
                .kernel_library()
                .map_or_else(|| "none".to_owned(), |p| p.display().to_string()),
            self.device.max_blocks()
        )
    }

    fn workspace_bytes(&self, sizes: &Sizes) -> Result<usize> {
        let Sizes {
            features: f,
            hidden: h,
            classes: c,
            max_batch: b,
            max_len: l,
        } = *sizes;
        let r = b * l;
        let v = |shape: &[usize]| TensorView::detached(DType::F32, shape);
        let ops = [
            Op::Mm {
                a: v(&[r, f])?,
                b: v(&[f, h])?,
                out: v(&[r, h])?,
            },
            Op::Mm {
                a: v(&[b, h])?,
                b: v(&[h, c])?,
                out: v(&[b, c])?,
            },
            Op::Mm {
                a: v(&[b, h])?.t()?,
                b: v(&[b, c])?,
                out: v(&[h, c])?,
            },
            Op::Mm {
                a: v(&[b, c])?,
                b: v(&[h, c])?.t()?,
                out: v(&[b, h])?,
            },
            Op::Mm {
                a: v(&[r, f])?.t()?,
                b: v(&[r, h])?,
                out: v(&[f, h])?,
            },
            Op::AddInplace {
                x: v(&[r, h])?,
                other: v(&[h])?,
                alpha: 1.0,
            },
            Op::AddInplace {
                x: v(&[b, c])?,
                other: v(&[c])?,
                alpha: 1.0,
            },
            Op::ReluInplace { x: v(&[r, h])? },
            Op::MulInplace {
                x: v(&[b, l, h])?,
                other: v(&[b, l, 1])?,
            },
            Op::MulInplace {
                x: v(&[b, h])?,
                other: v(&[b, 1])?,
            },
            Op::ReduceSum {
                x: v(&[b, l, h])?,
                dims: &[1],
                keep_dims: false,
                out: v(&[b, h])?,
            },
            Op::ReduceSum {
                x: v(&[b, c])?,
                dims: &[0],
                keep_dims: false,
                out: v(&[c])?,
            },
            Op::ReduceSum {
                x: v(&[r, h])?,
                dims: &[0],
                keep_dims: false,
                out: v(&[h])?,
            },
            Op::Mul {
                a: v(&[b, 1, h])?,
                b: v(&[b, l, 1])?,
                out: v(&[b, l, h])?,
            },
            Op::Softmax {
                x: v(&[b, c])?,
                dim: 1,
                out: v(&[b, c])?,
            },
            Op::SubInplace {
                x: v(&[b, c])?,
                other: v(&[b, c])?,
                alpha: 1.0,
            },
            Op::GtScalar {
                x: v(&[r, h])?,
                value: 0.0,
                out: v(&[r, h])?,
            },
        ];
        let mut need = 0;
        for op in &ops {
            need = need.max(self.device.workspace_size(op)?);
        }
        for shape in [&[f, h][..], &[h], &[h, c], &[c]] {
            let p = v(shape)?;
            let op = Op::AdamW {
                var: p,
                m: p,
                v: p,
                grad: p,
                step: v(&[1])?,
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                weight_decay: 0.0,
                eps: 1e-8,
            };
            need = need.max(self.device.workspace_size(&op)?);
        }
        // Uploads: tokens are the largest.
        self.reserve_staging((r * f).max(b * c));
        Ok(need as usize)
    }

    fn bind_workspace(&self, workspace: Option<Buffer<u8>>) {
        self.workspace.set(workspace);
    }
}

/// Every operation an aclnn operator on the step's stream.
impl<'a> Compute<Step<'a, AscendDevice>> for AscendBackend {
    type Mask = AscendMask;

    fn upload(&self, dst: &mut L<'_, AscendDevice>, fill: impl FnOnce(&mut [f32])) -> Result<()> {
        let n = dst.len();
        self.reserve_staging(n);
        let mut st = self.staging.borrow_mut();
        fill(&mut st[..n]);
        dst.copy_from_host(&st[..n])
    }

    fn download<R>(&self, src: &L<'_, AscendDevice>, read: impl FnOnce(&[f32]) -> R) -> Result<R> {
        let n = src.len();
        self.reserve_staging(n);
        let mut st = self.staging.borrow_mut();
        src.copy_to_host(&mut st[..n])?;
        Ok(read(&st[..n]))
    }

    fn matmul(
        &self,
        s: &Step<'_, AscendDevice>,
        a: &L<'_, AscendDevice>,
        ta: bool,
        b: &L<'_, AscendDevice>,
        tb: bool,
        out: &mut L<'_, AscendDevice>,
    ) -> Result<()> {
        let op = Op::Mm {
            a: t2(a, ta)?,
            b: t2(b, tb)?,
            out: out.tensor(),
        };
        self.run(s, &op)
    }

    fn bias_relu(
        &self,
        s: &Step<'_, AscendDevice>,
        h: &mut L<'_, AscendDevice>,
        bias: &L<'_, AscendDevice>,
    ) -> Result<()> {
        self.run(
            s,
            &Op::AddInplace {
                x: h.tensor(),
                other: bias.tensor(),
                alpha: 1.0,
            },
        )?;
        self.run(s, &Op::ReluInplace { x: h.tensor() })
    }

    fn pool(
        &self,
        s: &Step<'_, AscendDevice>,
        h: &mut L<'_, AscendDevice>,
        tokmask: &L<'_, AscendDevice>,
        inv_len: &L<'_, AscendDevice>,
        pooled: &mut L<'_, AscendDevice>,
        len: usize,
    ) -> Result<()> {
        let (b, hd) = (pooled.shape()[0], pooled.shape()[1]);
        let h3 = h.tensor().reshape(&[b, len, hd])?;
        self.run(
            s,
            &Op::MulInplace {
                x: h3,
                other: tokmask.tensor().reshape(&[b, len, 1])?,
            },
        )?;
        self.run(
            s,
            &Op::ReduceSum {
                x: h3,
                dims: &[1],
                keep_dims: false,
                out: pooled.tensor(),
            },
        )?;
        self.run(
            s,
            &Op::MulInplace {
                x: pooled.tensor(),
                other: inv_len.tensor().reshape(&[b, 1])?,
            },
        )
    }

    fn unpool(
        &self,
        s: &Step<'_, AscendDevice>,
        dpooled: &mut L<'_, AscendDevice>,
        tokmask: &L<'_, AscendDevice>,
        inv_len: &L<'_, AscendDevice>,
        dh: &mut L<'_, AscendDevice>,
        len: usize,
    ) -> Result<()> {
        let (b, hd) = (dpooled.shape()[0], dpooled.shape()[1]);
        self.run(
            s,
            &Op::MulInplace {
                x: dpooled.tensor(),
                other: inv_len.tensor().reshape(&[b, 1])?,
            },
        )?;
        let op = Op::Mul {
            a: dpooled.tensor().reshape(&[b, 1, hd])?,
            b: tokmask.tensor().reshape(&[b, len, 1])?,
            out: dh.tensor().reshape(&[b, len, hd])?,
        };
        self.run(s, &op)
    }

    fn bias_softmax(
        &self,
        s: &Step<'_, AscendDevice>,
        logits: &mut L<'_, AscendDevice>,
        bias: &L<'_, AscendDevice>,
        probs: &mut L<'_, AscendDevice>,
    ) -> Result<()> {
        self.run(
            s,
            &Op::AddInplace {
                x: logits.tensor(),
                other: bias.tensor(),
                alpha: 1.0,
            },
        )?;
        self.run(
            s,
            &Op::Softmax {
                x: logits.tensor(),
                dim: 1,
                out: probs.tensor(),
            },
        )
    }

    fn sub(
        &self,
        s: &Step<'_, AscendDevice>,
        x: &mut L<'_, AscendDevice>,
        y: &L<'_, AscendDevice>,
    ) -> Result<()> {
        self.run(
            s,
            &Op::SubInplace {
                x: x.tensor(),
                other: y.tensor(),
                alpha: 1.0,
            },
        )
    }

    fn column_sums(
        &self,
        s: &Step<'_, AscendDevice>,
        m: &L<'_, AscendDevice>,
        out: &mut L<'_, AscendDevice>,
    ) -> Result<()> {
        self.run(
            s,
            &Op::ReduceSum {
                x: m.tensor(),
                dims: &[0],
                keep_dims: false,
                out: out.tensor(),
            },
        )
    }

    fn relu_mask(
        &self,
        s: &Step<'_, AscendDevice>,
        h: &L<'_, AscendDevice>,
        out: &mut L<'_, AscendDevice>,
    ) -> Result<()> {
        self.run(
            s,
            &Op::GtScalar {
                x: h.tensor(),
                value: 0.0,
                out: out.tensor(),
            },
        )
    }

    fn adam(
        &self,
        s: &Step<'_, AscendDevice>,
        w: &mut L<'_, AscendDevice>,
        m: &mut L<'_, AscendDevice>,
        v: &mut L<'_, AscendDevice>,
        g: &L<'_, AscendDevice>,
        step: &L<'_, AscendDevice>,
        a: &AdamSettings,
    ) -> Result<()> {
        let op = Op::AdamW {
            var: w.tensor(),
            m: m.tensor(),
            v: v.tensor(),
            grad: g.tensor(),
            step: step.tensor(),
            lr: a.lr,
            beta1: a.beta1,
            beta2: a.beta2,
            weight_decay: 0.0,
            eps: a.eps,
        };
        self.run(s, &op)
    }
}
