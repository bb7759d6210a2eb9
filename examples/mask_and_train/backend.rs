//! The model's operations, once per backend. The model (`model.rs`) is
//! written once against [`Backend`], so the host and the Ascend device run
//! the same steps in the same order: the host computes each operation on
//! slices of its slab (this file), the Ascend backend runs a CANN aclnn
//! operator on the device for each (`ascend.rs`). The in-place kernels
//! (bernoulli, mask, multiply, dropout) are lease methods and run on
//! whichever device holds the slab.

use ndarray::{ArrayView2, Ix2};
use tensor_arena::ops::gemm;
use tensor_arena::{HostDevice, Kernels, Lease, Result, Step};

use crate::model::Sizes;

/// A leased f32 buffer on device `D`.
pub type L<'s, D> = Lease<'s, f32, D>;

/// Adam's settings: AdamW with no weight decay, as `aclnnApplyAdamWV2`
/// computes it.
#[derive(Clone, Copy, Debug)]
pub struct AdamSettings {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

/// Where the model runs.
pub trait Backend {
    /// The device holding the arena.
    type Dev: Kernels + Clone;

    /// A handle to the device, for the arena.
    fn device(&self) -> Self::Dev;

    /// One line saying where the model runs.
    fn describe(&self) -> String;

    /// Device workspace the model's operators need at the largest shapes
    /// (0: none). Declared in the plan, so steps allocate nothing.
    fn workspace_bytes(&self, sizes: &Sizes) -> Result<usize>;

    /// Tells the backend which planned buffer is its workspace.
    fn bind_workspace(&self, workspace: Option<tensor_arena::Buffer<u8>>);

    /// Writes `dst`'s values from the host: `fill` gets a slice of the
    /// lease's length.
    fn upload(&self, dst: &mut L<'_, Self::Dev>, fill: impl FnOnce(&mut [f32])) -> Result<()>;

    /// Reads `src`'s values on the host.
    fn download<R>(&self, src: &L<'_, Self::Dev>, read: impl FnOnce(&[f32]) -> R) -> Result<R>;

    /// `out = op(a) · op(b)`, `op` transposing 2-D views when asked.
    fn matmul(
        &self,
        s: &Step<'_, Self::Dev>,
        a: &L<'_, Self::Dev>,
        ta: bool,
        b: &L<'_, Self::Dev>,
        tb: bool,
        out: &mut L<'_, Self::Dev>,
    ) -> Result<()>;

    /// `h = relu(h + bias)`, `bias` broadcast over rows.
    fn bias_relu(
        &self,
        s: &Step<'_, Self::Dev>,
        h: &mut L<'_, Self::Dev>,
        bias: &L<'_, Self::Dev>,
    ) -> Result<()>;

    /// Mean pooling over each sample's real tokens: `h` (`[b·len, H]`) has
    /// its padding rows zeroed by `tokmask` (1 real, 0 padding), then
    /// `pooled[k] = Σ_t h[k, t] · inv_len[k]`.
    #[allow(clippy::too_many_arguments)]
    fn pool(
        &self,
        s: &Step<'_, Self::Dev>,
        h: &mut L<'_, Self::Dev>,
        tokmask: &L<'_, Self::Dev>,
        inv_len: &L<'_, Self::Dev>,
        pooled: &mut L<'_, Self::Dev>,
        len: usize,
    ) -> Result<()>;

    /// The gradient of `pool`: `dpooled[k] *= inv_len[k]`, then
    /// `dh[k, t] = dpooled[k] · tokmask[k, t]`.
    #[allow(clippy::too_many_arguments)]
    fn unpool(
        &self,
        s: &Step<'_, Self::Dev>,
        dpooled: &mut L<'_, Self::Dev>,
        tokmask: &L<'_, Self::Dev>,
        inv_len: &L<'_, Self::Dev>,
        dh: &mut L<'_, Self::Dev>,
        len: usize,
    ) -> Result<()>;

    /// `logits += bias`, then `probs = softmax(logits)` by rows.
    fn bias_softmax(
        &self,
        s: &Step<'_, Self::Dev>,
        logits: &mut L<'_, Self::Dev>,
        bias: &L<'_, Self::Dev>,
        probs: &mut L<'_, Self::Dev>,
    ) -> Result<()>;

    /// `x -= y`.
    fn sub(
        &self,
        s: &Step<'_, Self::Dev>,
        x: &mut L<'_, Self::Dev>,
        y: &L<'_, Self::Dev>,
    ) -> Result<()>;

    /// `out[j] = Σ_rows m[row, j]`.
    fn column_sums(
        &self,
        s: &Step<'_, Self::Dev>,
        m: &L<'_, Self::Dev>,
        out: &mut L<'_, Self::Dev>,
    ) -> Result<()>;

    /// `out = h > 0 ? 1 : 0`.
    fn relu_mask(
        &self,
        s: &Step<'_, Self::Dev>,
        h: &L<'_, Self::Dev>,
        out: &mut L<'_, Self::Dev>,
    ) -> Result<()>;

    /// One AdamW step of `w` from gradient `g`; `step` holds `t` (one f32).
    #[allow(clippy::too_many_arguments)]
    fn adam(
        &self,
        s: &Step<'_, Self::Dev>,
        w: &mut L<'_, Self::Dev>,
        m: &mut L<'_, Self::Dev>,
        v: &mut L<'_, Self::Dev>,
        g: &L<'_, Self::Dev>,
        step: &L<'_, Self::Dev>,
        a: &AdamSettings,
    ) -> Result<()>;
}

/// The host backend: every operation a loop over slices of the slab
/// (matrix products through the allocation-free `ops::gemm`).
pub struct HostBackend {
    device: HostDevice,
}

impl HostBackend {
    pub fn new(threads: usize) -> Result<HostBackend> {
        Ok(HostBackend {
            device: HostDevice::new().with_threads(threads)?,
        })
    }
}

fn view2<'a>(l: &'a L<'_, HostDevice>, transpose: bool) -> Result<ArrayView2<'a, f32>> {
    let v = l.view::<Ix2>()?;
    Ok(if transpose { v.reversed_axes() } else { v })
}

impl Backend for HostBackend {
    type Dev = HostDevice;

    fn device(&self) -> HostDevice {
        self.device.clone()
    }

    fn describe(&self) -> String {
        format!("the host device, {} thread(s)", self.device.threads())
    }

    fn workspace_bytes(&self, _sizes: &Sizes) -> Result<usize> {
        Ok(0)
    }

    fn bind_workspace(&self, _workspace: Option<tensor_arena::Buffer<u8>>) {}

    fn upload(&self, dst: &mut L<'_, HostDevice>, fill: impl FnOnce(&mut [f32])) -> Result<()> {
        fill(dst.as_mut_slice());
        Ok(())
    }

    fn download<R>(&self, src: &L<'_, HostDevice>, read: impl FnOnce(&[f32]) -> R) -> Result<R> {
        Ok(read(src.as_slice()))
    }

    fn matmul(
        &self,
        _s: &Step<'_, HostDevice>,
        a: &L<'_, HostDevice>,
        ta: bool,
        b: &L<'_, HostDevice>,
        tb: bool,
        out: &mut L<'_, HostDevice>,
    ) -> Result<()> {
        gemm(
            1.0,
            view2(a, ta)?,
            view2(b, tb)?,
            0.0,
            out.view_mut::<Ix2>()?,
        )
    }

    fn bias_relu(
        &self,
        _s: &Step<'_, HostDevice>,
        h: &mut L<'_, HostDevice>,
        bias: &L<'_, HostDevice>,
    ) -> Result<()> {
        let b = bias.as_slice();
        for row in h.as_mut_slice().chunks_exact_mut(b.len()) {
            for (v, bias) in row.iter_mut().zip(b) {
                let x = *v + bias;
                *v = if x > 0.0 { x } else { 0.0 };
            }
        }
        Ok(())
    }

    fn pool(
        &self,
        _s: &Step<'_, HostDevice>,
        h: &mut L<'_, HostDevice>,
        tokmask: &L<'_, HostDevice>,
        inv_len: &L<'_, HostDevice>,
        pooled: &mut L<'_, HostDevice>,
        len: usize,
    ) -> Result<()> {
        let hd = pooled.shape()[1];
        let h = h.as_mut_slice();
        for (row, &m) in h.chunks_exact_mut(hd).zip(tokmask.as_slice()) {
            row.iter_mut().for_each(|v| *v *= m);
        }
        for (k, (out, &inv)) in pooled
            .as_mut_slice()
            .chunks_exact_mut(hd)
            .zip(inv_len.as_slice())
            .enumerate()
        {
            out.fill(0.0);
            for row in h[k * len * hd..(k + 1) * len * hd].chunks_exact(hd) {
                out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
            }
            out.iter_mut().for_each(|o| *o *= inv);
        }
        Ok(())
    }

    fn unpool(
        &self,
        _s: &Step<'_, HostDevice>,
        dpooled: &mut L<'_, HostDevice>,
        tokmask: &L<'_, HostDevice>,
        inv_len: &L<'_, HostDevice>,
        dh: &mut L<'_, HostDevice>,
        len: usize,
    ) -> Result<()> {
        let hd = dpooled.shape()[1];
        let dp = dpooled.as_mut_slice();
        for (g, &inv) in dp.chunks_exact_mut(hd).zip(inv_len.as_slice()) {
            g.iter_mut().for_each(|v| *v *= inv);
        }
        for (r, (row, &m)) in dh
            .as_mut_slice()
            .chunks_exact_mut(hd)
            .zip(tokmask.as_slice())
            .enumerate()
        {
            let g = &dp[(r / len) * hd..][..hd];
            row.iter_mut().zip(g).for_each(|(d, v)| *d = v * m);
        }
        Ok(())
    }

    fn bias_softmax(
        &self,
        _s: &Step<'_, HostDevice>,
        logits: &mut L<'_, HostDevice>,
        bias: &L<'_, HostDevice>,
        probs: &mut L<'_, HostDevice>,
    ) -> Result<()> {
        let b = bias.as_slice();
        let c = b.len();
        for (row, out) in logits
            .as_mut_slice()
            .chunks_exact_mut(c)
            .zip(probs.as_mut_slice().chunks_exact_mut(c))
        {
            row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
            let mut max = f32::NEG_INFINITY;
            for &v in row.iter() {
                if v > max {
                    max = v;
                }
            }
            let mut sum = 0.0;
            for (o, &v) in out.iter_mut().zip(row.iter()) {
                *o = (v - max).exp();
                sum += *o;
            }
            out.iter_mut().for_each(|o| *o /= sum);
        }
        Ok(())
    }

    fn sub(
        &self,
        _s: &Step<'_, HostDevice>,
        x: &mut L<'_, HostDevice>,
        y: &L<'_, HostDevice>,
    ) -> Result<()> {
        x.as_mut_slice()
            .iter_mut()
            .zip(y.as_slice())
            .for_each(|(a, b)| *a -= b);
        Ok(())
    }

    fn column_sums(
        &self,
        _s: &Step<'_, HostDevice>,
        m: &L<'_, HostDevice>,
        out: &mut L<'_, HostDevice>,
    ) -> Result<()> {
        let out = out.as_mut_slice();
        out.fill(0.0);
        for row in m.as_slice().chunks_exact(out.len()) {
            out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
        }
        Ok(())
    }

    fn relu_mask(
        &self,
        _s: &Step<'_, HostDevice>,
        h: &L<'_, HostDevice>,
        out: &mut L<'_, HostDevice>,
    ) -> Result<()> {
        for (r, &v) in out.as_mut_slice().iter_mut().zip(h.as_slice()) {
            *r = if v > 0.0 { 1.0 } else { 0.0 };
        }
        Ok(())
    }

    fn adam(
        &self,
        _s: &Step<'_, HostDevice>,
        w: &mut L<'_, HostDevice>,
        m: &mut L<'_, HostDevice>,
        v: &mut L<'_, HostDevice>,
        g: &L<'_, HostDevice>,
        step: &L<'_, HostDevice>,
        a: &AdamSettings,
    ) -> Result<()> {
        let t = step.as_slice()[0];
        let bc1 = 1.0 - a.beta1.powf(t);
        let bc2 = 1.0 - a.beta2.powf(t);
        let (m, v) = (m.as_mut_slice(), v.as_mut_slice());
        for (((w, &g), m), v) in w.as_mut_slice().iter_mut().zip(g.as_slice()).zip(m).zip(v) {
            *m = a.beta1 * *m + (1.0 - a.beta1) * g;
            *v = a.beta2 * *v + (1.0 - a.beta2) * g * g;
            let denom = (*v / bc2).sqrt() + a.eps;
            *w -= a.lr * (*m / bc1) / denom;
        }
        Ok(())
    }
}
