//! The model's operations, once per backend. The model (`model.rs`) is
//! written once against [`Compute`], generic over the step type
//! ([`StepScope`]): the host computes each operation on slices of its slab
//! or of the recorder's pool (this file), the Ascend backend runs a CANN
//! aclnn operator on the device for each (`ascend.rs`, implementing
//! [`Compute`] for planned steps on the Ascend device). The in-place kernels (bernoulli, mask, multiply, dropout)
//! are lease methods and run on whichever device holds the slab.

use ndarray::Ix2;
use tensor_arena::{HostDevice, Kernels, Lease, LeaseOf, LeaseOps, Result, StepScope};

use crate::model::Sizes;

/// A leased f32 buffer on device `D`.
pub type L<'s, D> = Lease<'s, f32, D>;

/// The input mask's element type on the Ascend backend: u8, as on the host
/// (`ta_bernoulli_u8`, `ta_apply_mask_u8_*`); a quarter of an f32 mask's
/// bytes, the same decisions bit for bit.
pub type AscendMask = u8;
/// Adam's settings: AdamW with no weight decay, as `aclnnApplyAdamWV2`
/// computes it.
#[derive(Clone, Copy, Debug)]
pub struct AdamSettings {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
}

/// What the training driver needs of a backend besides the step's
/// operations: the device, a description, and the operators' workspace.
pub trait Setup {
    /// The device holding the arena.
    type Dev: Kernels + Clone + 'static;
    /// A handle to the device, for the arena.
    fn device(&self) -> Self::Dev;
    /// One line saying where the model runs.
    fn describe(&self) -> String;
    /// Device workspace the model's operators need at `sizes` (0: none).
    fn workspace_bytes(&self, sizes: &Sizes) -> Result<usize>;
    /// Tells the backend which planned buffer is its workspace.
    fn bind_workspace(&self, workspace: Option<tensor_arena::Buffer<u8>>);
}

/// The leased f32 buffer of step type `S`.
pub type T<'s, S> = LeaseOf<'s, S, f32>;

/// The model's operations on the leases of step type `S` (a planned step
/// or a recording one): what `model.rs` is written against.
pub trait Compute<S: StepScope> {
    /// The input mask's element type.
    type Mask: tensor_arena::ops::MaskFor<f32>;
    /// Writes `dst`'s values from the host.
    fn upload(&self, dst: &mut T<'_, S>, fill: impl FnOnce(&mut [f32])) -> Result<()>;
    /// Reads `src`'s values on the host.
    fn download<R>(&self, src: &T<'_, S>, read: impl FnOnce(&[f32]) -> R) -> Result<R>;
    /// `out = op(a) · op(b)`.
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &self,
        s: &S,
        a: &T<'_, S>,
        ta: bool,
        b: &T<'_, S>,
        tb: bool,
        out: &mut T<'_, S>,
    ) -> Result<()>;
    /// `h = relu(h + bias)`.
    fn bias_relu(&self, s: &S, h: &mut T<'_, S>, bias: &T<'_, S>) -> Result<()>;
    /// Mean pooling over each sample's real tokens.
    #[allow(clippy::too_many_arguments)]
    fn pool(
        &self,
        s: &S,
        h: &mut T<'_, S>,
        tokmask: &T<'_, S>,
        inv_len: &T<'_, S>,
        pooled: &mut T<'_, S>,
        len: usize,
    ) -> Result<()>;
    /// The gradient of `pool`.
    #[allow(clippy::too_many_arguments)]
    fn unpool(
        &self,
        s: &S,
        dpooled: &mut T<'_, S>,
        tokmask: &T<'_, S>,
        inv_len: &T<'_, S>,
        dh: &mut T<'_, S>,
        len: usize,
    ) -> Result<()>;
    /// `logits += bias`, then `probs = softmax(logits)` by rows.
    fn bias_softmax(
        &self,
        s: &S,
        logits: &mut T<'_, S>,
        bias: &T<'_, S>,
        probs: &mut T<'_, S>,
    ) -> Result<()>;
    /// `x -= y`.
    fn sub(&self, s: &S, x: &mut T<'_, S>, y: &T<'_, S>) -> Result<()>;
    /// `out[j] = Σ_rows m[row, j]`.
    fn column_sums(&self, s: &S, m: &T<'_, S>, out: &mut T<'_, S>) -> Result<()>;
    /// `out = h > 0 ? 1 : 0`.
    fn relu_mask(&self, s: &S, h: &T<'_, S>, out: &mut T<'_, S>) -> Result<()>;
    /// One AdamW step of `w` from gradient `g`.
    #[allow(clippy::too_many_arguments)]
    fn adam(
        &self,
        s: &S,
        w: &mut T<'_, S>,
        m: &mut T<'_, S>,
        v: &mut T<'_, S>,
        g: &T<'_, S>,
        step: &T<'_, S>,
        a: &AdamSettings,
    ) -> Result<()>;
}

/// The host backend: every operation a loop over slices of the slab, or of
/// the recorder's pool while recording (matrix products through the
/// allocation-free `ops::gemm`), for any step type on the host device.
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

impl Setup for HostBackend {
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
}

impl<S: StepScope<Device = HostDevice>> Compute<S> for HostBackend {
    type Mask = u8;

    fn upload(&self, dst: &mut T<'_, S>, fill: impl FnOnce(&mut [f32])) -> Result<()> {
        fill(dst.as_mut_slice());
        Ok(())
    }

    fn download<R>(&self, src: &T<'_, S>, read: impl FnOnce(&[f32]) -> R) -> Result<R> {
        Ok(read(src.as_slice()))
    }

    fn matmul(
        &self,
        _s: &S,
        a: &T<'_, S>,
        ta: bool,
        b: &T<'_, S>,
        tb: bool,
        out: &mut T<'_, S>,
    ) -> Result<()> {
        host::matmul(
            a.view::<Ix2>()?,
            ta,
            b.view::<Ix2>()?,
            tb,
            out.view_mut::<Ix2>()?,
        )
    }

    fn bias_relu(&self, _s: &S, h: &mut T<'_, S>, bias: &T<'_, S>) -> Result<()> {
        host::bias_relu(h.as_mut_slice(), bias.as_slice());
        Ok(())
    }

    fn pool(
        &self,
        _s: &S,
        h: &mut T<'_, S>,
        tokmask: &T<'_, S>,
        inv_len: &T<'_, S>,
        pooled: &mut T<'_, S>,
        len: usize,
    ) -> Result<()> {
        let hd = pooled.shape()[1];
        host::pool(
            h.as_mut_slice(),
            tokmask.as_slice(),
            inv_len.as_slice(),
            pooled.as_mut_slice(),
            len,
            hd,
        );
        Ok(())
    }

    fn unpool(
        &self,
        _s: &S,
        dpooled: &mut T<'_, S>,
        tokmask: &T<'_, S>,
        inv_len: &T<'_, S>,
        dh: &mut T<'_, S>,
        len: usize,
    ) -> Result<()> {
        let hd = dpooled.shape()[1];
        host::unpool(
            dpooled.as_mut_slice(),
            tokmask.as_slice(),
            inv_len.as_slice(),
            dh.as_mut_slice(),
            len,
            hd,
        );
        Ok(())
    }

    fn bias_softmax(
        &self,
        _s: &S,
        logits: &mut T<'_, S>,
        bias: &T<'_, S>,
        probs: &mut T<'_, S>,
    ) -> Result<()> {
        host::bias_softmax(logits.as_mut_slice(), bias.as_slice(), probs.as_mut_slice());
        Ok(())
    }

    fn sub(&self, _s: &S, x: &mut T<'_, S>, y: &T<'_, S>) -> Result<()> {
        host::sub(x.as_mut_slice(), y.as_slice());
        Ok(())
    }

    fn column_sums(&self, _s: &S, m: &T<'_, S>, out: &mut T<'_, S>) -> Result<()> {
        host::column_sums(m.as_slice(), out.as_mut_slice());
        Ok(())
    }

    fn relu_mask(&self, _s: &S, h: &T<'_, S>, out: &mut T<'_, S>) -> Result<()> {
        host::relu_mask(h.as_slice(), out.as_mut_slice());
        Ok(())
    }

    fn adam(
        &self,
        _s: &S,
        w: &mut T<'_, S>,
        m: &mut T<'_, S>,
        v: &mut T<'_, S>,
        g: &T<'_, S>,
        step: &T<'_, S>,
        a: &AdamSettings,
    ) -> Result<()> {
        let t = step.as_slice()[0];
        host::adam(
            w.as_mut_slice(),
            m.as_mut_slice(),
            v.as_mut_slice(),
            g.as_slice(),
            t,
            a,
        );
        Ok(())
    }
}

/// The host's arithmetic on plain slices.
pub mod host {
    use ndarray::{ArrayView2, ArrayViewMut2};
    use tensor_arena::Result;
    use tensor_arena::ops::gemm;

    use super::AdamSettings;

    /// `out = op(a) · op(b)`, `op` transposing when asked.
    pub fn matmul(
        a: ArrayView2<'_, f32>,
        ta: bool,
        b: ArrayView2<'_, f32>,
        tb: bool,
        out: ArrayViewMut2<'_, f32>,
    ) -> Result<()> {
        let a = if ta { a.reversed_axes() } else { a };
        let b = if tb { b.reversed_axes() } else { b };
        gemm(1.0, a, b, 0.0, out)
    }

    /// `h = relu(h + bias)`, `bias` broadcast over rows.
    pub fn bias_relu(h: &mut [f32], b: &[f32]) {
        for row in h.chunks_exact_mut(b.len()) {
            for (v, bias) in row.iter_mut().zip(b) {
                let x = *v + bias;
                *v = if x > 0.0 { x } else { 0.0 };
            }
        }
    }

    /// Zeroes padding rows of `h` (`tokmask`), then
    /// `pooled[k] = Σ_t h[k, t] · inv_len[k]`.
    pub fn pool(
        h: &mut [f32],
        tokmask: &[f32],
        inv_len: &[f32],
        pooled: &mut [f32],
        len: usize,
        hd: usize,
    ) {
        for (row, &m) in h.chunks_exact_mut(hd).zip(tokmask) {
            row.iter_mut().for_each(|v| *v *= m);
        }
        for (k, (out, &inv)) in pooled.chunks_exact_mut(hd).zip(inv_len).enumerate() {
            out.fill(0.0);
            for row in h[k * len * hd..(k + 1) * len * hd].chunks_exact(hd) {
                out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
            }
            out.iter_mut().for_each(|o| *o *= inv);
        }
    }

    /// The gradient of `pool`: `dpooled[k] *= inv_len[k]`, then
    /// `dh[k, t] = dpooled[k] · tokmask[k, t]`.
    pub fn unpool(
        dpooled: &mut [f32],
        tokmask: &[f32],
        inv_len: &[f32],
        dh: &mut [f32],
        len: usize,
        hd: usize,
    ) {
        for (g, &inv) in dpooled.chunks_exact_mut(hd).zip(inv_len) {
            g.iter_mut().for_each(|v| *v *= inv);
        }
        for (r, (row, &m)) in dh.chunks_exact_mut(hd).zip(tokmask).enumerate() {
            let g = &dpooled[(r / len) * hd..][..hd];
            row.iter_mut().zip(g).for_each(|(d, v)| *d = v * m);
        }
    }

    /// `logits += bias`, then `probs = softmax(logits)` by rows.
    pub fn bias_softmax(logits: &mut [f32], b: &[f32], probs: &mut [f32]) {
        let c = b.len();
        for (row, out) in logits.chunks_exact_mut(c).zip(probs.chunks_exact_mut(c)) {
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
    }

    /// `x -= y`.
    pub fn sub(x: &mut [f32], y: &[f32]) {
        x.iter_mut().zip(y).for_each(|(a, b)| *a -= b);
    }

    /// `out[j] = Σ_rows m[row, j]`.
    pub fn column_sums(m: &[f32], out: &mut [f32]) {
        out.fill(0.0);
        for row in m.chunks_exact(out.len()) {
            out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
        }
    }

    /// `out = h > 0 ? 1 : 0`.
    pub fn relu_mask(h: &[f32], out: &mut [f32]) {
        for (r, &v) in out.iter_mut().zip(h) {
            *r = if v > 0.0 { 1.0 } else { 0.0 };
        }
    }

    /// One AdamW step (no weight decay) at step `t`, as `aclnnApplyAdamWV2`
    /// computes it.
    pub fn adam(w: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32], t: f32, a: &AdamSettings) {
        let bc1 = 1.0 - a.beta1.powf(t);
        let bc2 = 1.0 - a.beta2.powf(t);
        for (((w, &g), m), v) in w.iter_mut().zip(g).zip(m).zip(v) {
            *m = a.beta1 * *m + (1.0 - a.beta1) * g;
            *v = a.beta2 * *v + (1.0 - a.beta2) * g * g;
            let denom = (*v / bc2).sqrt() + a.eps;
            *w -= a.lr * (*m / bc1) / denom;
        }
    }
}
