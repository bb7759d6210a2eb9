//! The model on an arena: a token MLP with mean pooling and a linear head,
//! trained with Adam. Every tensor of a step is a lease; nothing allocates.
//!
//! ```text
//! x      [B*L, F]  tokens, input-masked (bernoulli_ + apply_mask_)
//! h      [B*L, H]  relu(x W1 + b1), then dropout_
//! pooled [B, H]    mean of h over each sample's real tokens
//! logits [B, C]    pooled W2 + b2 -> softmax cross-entropy
//! ```

use ndarray::Ix2;
use tensor_arena::ops::gemm;
use tensor_arena::{
    Arena, Buffer, Device, DropoutMask, HostDevice, Lease, Phase, Planner, Result, Step,
};

use crate::data::{Batch, Dataset};

/// Model and training sizes.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub features: usize,
    pub hidden: usize,
    pub classes: usize,
    pub max_batch: usize,
    /// Longest sequence, rounded up to a multiple of 16.
    pub max_len: usize,
}

/// Hyper-parameters.
#[derive(Clone, Copy, Debug)]
pub struct Hyper {
    pub lr: f32,
    /// Probability of keeping an input feature (input masking).
    pub input_keep: f32,
    /// Dropout probability on the hidden layer.
    pub dropout: f32,
}

/// One parameter tensor with its gradient and Adam moments.
#[derive(Clone, Copy)]
struct Param {
    value: Buffer<f32>,
    grad: Buffer<f32>,
    m: Buffer<f32>,
    v: Buffer<f32>,
}

/// Handles of every buffer, declared once.
pub struct Net {
    pub sizes: Sizes,
    w1: Param,
    b1: Param,
    w2: Param,
    b2: Param,
    x: Buffer<f32>,
    keep: Buffer<f32>,
    h: Buffer<f32>,
    pooled: Buffer<f32>,
    logits: Buffer<f32>,
    lengths: Buffer<i32>,
    labels: Buffer<i32>,
    dpooled: Buffer<f32>,
    dh: Buffer<f32>,
    relu: Buffer<f32>,
    backward: Phase,
    update: Phase,
    steps: u32,
}

/// What one step measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepStats {
    pub loss_sum: f64,
    pub correct: usize,
    pub samples: usize,
}

impl Net {
    /// Declares every buffer of the model on `planner`.
    pub fn declare(planner: &mut Planner, sizes: Sizes) -> Result<Net> {
        let forward = planner.phase("forward")?;
        let backward = planner.phase("backward")?;
        let update = planner.phase("update")?;
        let Sizes {
            features: f,
            hidden: h,
            classes: c,
            max_batch: b,
            max_len: l,
        } = sizes;
        let param = |p: &mut Planner, name: &str, shape: &[usize]| -> Result<Param> {
            Ok(Param {
                value: p.persistent::<f32>(name, shape)?,
                grad: p.span::<f32>(&format!("{name}.grad"), shape, backward, update)?,
                m: p.persistent::<f32>(&format!("{name}.adam_m"), shape)?,
                v: p.persistent::<f32>(&format!("{name}.adam_v"), shape)?,
            })
        };
        let w1 = param(planner, "w1", &[f, h])?;
        let b1 = param(planner, "b1", &[h])?;
        let w2 = param(planner, "w2", &[h, c])?;
        let b2 = param(planner, "b2", &[c])?;
        Ok(Net {
            sizes,
            w1,
            b1,
            w2,
            b2,
            x: planner.span::<f32>("x", &[b * l, f], forward, backward)?,
            keep: planner.span::<f32>("input_keep_mask", &[b * l, f], forward, forward)?,
            h: planner.span::<f32>("h", &[b * l, h], forward, backward)?,
            pooled: planner.span::<f32>("pooled", &[b, h], forward, backward)?,
            logits: planner.span::<f32>("logits", &[b, c], forward, backward)?,
            lengths: planner.span::<i32>("lengths", &[b], forward, backward)?,
            labels: planner.span::<i32>("labels", &[b], forward, backward)?,
            dpooled: planner.span::<f32>("dpooled", &[b, h], backward, backward)?,
            dh: planner.span::<f32>("dh", &[b * l, h], backward, backward)?,
            relu: planner.span::<f32>("relu_mask", &[b * l, h], backward, backward)?,
            backward,
            update,
            steps: 0,
        })
    }

    /// Initial weights (scaled uniform from the Philox stream), zero biases
    /// and moments.
    pub fn init<D: Device>(&self, arena: &mut Arena<D>, seed: u64) -> Result<()> {
        let Sizes {
            features: f,
            hidden: h,
            classes: c,
            ..
        } = self.sizes;
        arena.write(self.w1.value, &uniform(f * h, f, seed ^ 1))?;
        arena.write(self.w2.value, &uniform(h * c, h, seed ^ 2))?;
        for p in [self.w1, self.b1, self.w2, self.b2] {
            let n = arena.plan().buffer(p.value.id())?.capacity();
            let zeros = vec![0.0; n];
            if p.value == self.b1.value || p.value == self.b2.value {
                arena.write(p.value, &zeros)?;
            }
            arena.write(p.m, &zeros)?;
            arena.write(p.v, &zeros)?;
        }
        Ok(())
    }

    /// One training step on `batch`: forward, loss, backward, Adam.
    pub fn train_step(
        &mut self,
        arena: &mut Arena<HostDevice>,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<StepStats> {
        self.steps += 1;
        let t = self.steps;
        let net = &*self;
        arena.step(|s| -> Result<StepStats> {
            let (fwd, stats) = net.forward(s, data, batch, hyper)?;
            s.enter(net.backward)?;
            net.backward(s, fwd, batch)?;
            s.enter(net.update)?;
            for p in [net.w1, net.b1, net.w2, net.b2] {
                adam(s, p, hyper.lr, t)?;
            }
            Ok(stats)
        })
    }

    /// Loss and accuracy on `batch` without masking, dropout or update.
    pub fn evaluate(
        &self,
        arena: &mut Arena<HostDevice>,
        data: &Dataset,
        batch: &Batch<'_>,
    ) -> Result<StepStats> {
        let plain = Hyper {
            lr: 0.0,
            input_keep: 1.0,
            dropout: 0.0,
        };
        arena.step(|s| self.forward(s, data, batch, &plain).map(|(_, stats)| stats))
    }

    fn forward<'s>(
        &self,
        s: &'s Step<'_, HostDevice>,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<(Forward<'s>, StepStats)> {
        let Sizes {
            features: f,
            hidden: hd,
            classes: c,
            ..
        } = self.sizes;
        let (b, l) = (batch.samples.len(), batch.len);
        let rows = b * l;
        let mut lengths = s.lease(self.lengths)?.with_shape(&[b])?;
        let mut labels = s.lease(self.labels)?.with_shape(&[b])?;
        for (k, &sample) in batch.samples.iter().enumerate() {
            lengths.as_mut_slice()[k] = data.lengths[sample] as i32;
            labels.as_mut_slice()[k] = data.labels[sample] as i32;
        }
        let mut x = s.lease(self.x)?.with_shape(&[rows, f])?;
        load_tokens(data, batch, x.as_mut_slice());
        {
            // Input masking: a stored mask, applied with its 1/keep scale.
            let mut keep = s.lease(self.keep)?.with_shape(&[rows, f])?;
            keep.bernoulli_(hyper.input_keep)?;
            x.apply_mask_(&keep, 1.0 / hyper.input_keep)?;
        }
        let w1 = s.lease(self.w1.value)?;
        let b1 = s.lease(self.b1.value)?;
        let mut h = s.lease(self.h)?.with_shape(&[rows, hd])?;
        gemm(
            1.0,
            x.view::<Ix2>()?,
            w1.view::<Ix2>()?,
            0.0,
            h.view_mut::<Ix2>()?,
        )?;
        for row in h.as_mut_slice().chunks_exact_mut(hd) {
            for (v, bias) in row.iter_mut().zip(b1.as_slice()) {
                *v = (*v + bias).max(0.0);
            }
        }
        // Fused dropout: no mask buffer; backward regenerates it.
        let mask = h.dropout_(hyper.dropout)?;
        let mut pooled = s.lease(self.pooled)?.with_shape(&[b, hd])?;
        mean_pool(
            h.as_slice(),
            lengths.as_slice(),
            l,
            hd,
            pooled.as_mut_slice(),
        );
        let w2 = s.lease(self.w2.value)?;
        let b2 = s.lease(self.b2.value)?;
        let mut logits = s.lease(self.logits)?.with_shape(&[b, c])?;
        gemm(
            1.0,
            pooled.view::<Ix2>()?,
            w2.view::<Ix2>()?,
            0.0,
            logits.view_mut::<Ix2>()?,
        )?;
        let stats = softmax_xent(logits.as_mut_slice(), b2.as_slice(), labels.as_slice(), c);
        let fwd = Forward {
            x,
            h,
            pooled,
            probs: logits,
            lengths,
            labels,
            w2,
            mask,
        };
        Ok((fwd, stats))
    }

    fn backward(
        &self,
        s: &Step<'_, HostDevice>,
        fwd: Forward<'_>,
        batch: &Batch<'_>,
    ) -> Result<()> {
        let Sizes {
            hidden: hd,
            classes: c,
            ..
        } = self.sizes;
        let (b, l) = (batch.samples.len(), batch.len);
        let Forward {
            x,
            h,
            pooled,
            probs: mut dlogits,
            lengths,
            labels,
            w2,
            mask,
        } = fwd;
        // Probabilities become dL/dlogits in place.
        for (row, &y) in dlogits
            .as_mut_slice()
            .chunks_exact_mut(c)
            .zip(labels.as_slice())
        {
            row[y as usize] -= 1.0;
            row.iter_mut().for_each(|v| *v /= b as f32);
        }
        let mut gw2 = s.lease(self.w2.grad)?;
        gemm(
            1.0,
            pooled.view::<Ix2>()?.t(),
            dlogits.view::<Ix2>()?,
            0.0,
            gw2.view_mut::<Ix2>()?,
        )?;
        let mut gb2 = s.lease(self.b2.grad)?;
        column_sums(dlogits.as_slice(), c, gb2.as_mut_slice());
        let mut dpooled = s.lease(self.dpooled)?.with_shape(&[b, hd])?;
        gemm(
            1.0,
            dlogits.view::<Ix2>()?,
            w2.view::<Ix2>()?.t(),
            0.0,
            dpooled.view_mut::<Ix2>()?,
        )?;
        let mut dh = s.lease(self.dh)?.with_shape(&[b * l, hd])?;
        unpool(
            dpooled.as_slice(),
            lengths.as_slice(),
            l,
            hd,
            dh.as_mut_slice(),
        );
        dh.dropout_backward_(&mask)?;
        let mut relu = s.lease(self.relu)?.with_shape(&[b * l, hd])?;
        for (r, &v) in relu.as_mut_slice().iter_mut().zip(h.as_slice()) {
            *r = if v > 0.0 { 1.0 } else { 0.0 };
        }
        dh.mul_(&relu)?;
        let mut gw1 = s.lease(self.w1.grad)?;
        gemm(
            1.0,
            x.view::<Ix2>()?.t(),
            dh.view::<Ix2>()?,
            0.0,
            gw1.view_mut::<Ix2>()?,
        )?;
        let mut gb1 = s.lease(self.b1.grad)?;
        column_sums(dh.as_slice(), hd, gb1.as_mut_slice());
        Ok(())
    }

    /// A checksum of the weights, to compare runs.
    pub fn checksum(&self, arena: &mut Arena<HostDevice>) -> Result<f64> {
        let mut total = 0.0;
        for p in [self.w1, self.b1, self.w2, self.b2] {
            let n = arena.plan().buffer(p.value.id())?.shape().elements();
            let mut host = vec![0.0f32; n];
            arena.read(p.value, &mut host)?;
            total += host
                .iter()
                .enumerate()
                .map(|(i, &v)| f64::from(v) * (1.0 + (i % 7) as f64))
                .sum::<f64>();
        }
        Ok(total)
    }
}

/// The forward pass's leases that the backward pass reads.
struct Forward<'s> {
    x: Lease<'s, f32, HostDevice>,
    h: Lease<'s, f32, HostDevice>,
    pooled: Lease<'s, f32, HostDevice>,
    probs: Lease<'s, f32, HostDevice>,
    lengths: Lease<'s, i32, HostDevice>,
    labels: Lease<'s, i32, HostDevice>,
    w2: Lease<'s, f32, HostDevice>,
    mask: DropoutMask,
}

/// Copies the batch's tokens into `x` (`[B*L, F]`), zero past each length.
pub fn load_tokens(data: &Dataset, batch: &Batch<'_>, x: &mut [f32]) {
    let (f, l) = (data.features, batch.len);
    for (k, &sample) in batch.samples.iter().enumerate() {
        let len = data.lengths[sample];
        let dst = &mut x[k * l * f..(k + 1) * l * f];
        let src = &data.tokens[sample * data.max_len * f..][..len * f];
        dst[..len * f].copy_from_slice(src);
        dst[len * f..].fill(0.0);
    }
}

/// `pooled[b] = mean(h[b, t] for t < len_b)`.
pub fn mean_pool(h: &[f32], lengths: &[i32], l: usize, hd: usize, pooled: &mut [f32]) {
    for (k, (out, &len)) in pooled.chunks_exact_mut(hd).zip(lengths).enumerate() {
        out.fill(0.0);
        for t in 0..len as usize {
            let row = &h[(k * l + t) * hd..][..hd];
            out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
        }
        let inv = 1.0 / len as f32;
        out.iter_mut().for_each(|o| *o *= inv);
    }
}

/// The gradient of `mean_pool`: `dh[b, t] = dpooled[b] / len_b` for real
/// tokens, 0 for padding.
pub fn unpool(dpooled: &[f32], lengths: &[i32], l: usize, hd: usize, dh: &mut [f32]) {
    for (k, (g, &len)) in dpooled.chunks_exact(hd).zip(lengths).enumerate() {
        let inv = 1.0 / len as f32;
        for t in 0..l {
            let row = &mut dh[(k * l + t) * hd..][..hd];
            if t < len as usize {
                row.iter_mut().zip(g).for_each(|(d, v)| *d = v * inv);
            } else {
                row.fill(0.0);
            }
        }
    }
}

/// Adds the bias, replaces logits by softmax probabilities, and returns the
/// summed cross-entropy and the number of correct predictions.
pub fn softmax_xent(logits: &mut [f32], bias: &[f32], labels: &[i32], c: usize) -> StepStats {
    let mut stats = StepStats::default();
    for (row, &y) in logits.chunks_exact_mut(c).zip(labels) {
        row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
        let (mut best, mut max) = (0, f32::NEG_INFINITY);
        for (j, &v) in row.iter().enumerate() {
            if v > max {
                (best, max) = (j, v);
            }
        }
        let mut sum = 0.0;
        row.iter_mut().for_each(|v| {
            *v = (*v - max).exp();
            sum += *v;
        });
        row.iter_mut().for_each(|v| *v /= sum);
        stats.loss_sum -= f64::from(row[y as usize].max(1e-30).ln());
        stats.correct += usize::from(best == y as usize);
        stats.samples += 1;
    }
    stats
}

/// `out[j] = sum over rows of m[row, j]`.
pub fn column_sums(m: &[f32], cols: usize, out: &mut [f32]) {
    out.fill(0.0);
    for row in m.chunks_exact(cols) {
        out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
    }
}

/// One Adam update of a parameter from its gradient (bias-corrected,
/// beta1 0.9, beta2 0.999).
fn adam(s: &Step<'_, HostDevice>, p: Param, lr: f32, t: u32) -> Result<()> {
    let mut w = s.lease(p.value)?;
    let g = s.lease(p.grad)?;
    let mut m = s.lease(p.m)?;
    let mut v = s.lease(p.v)?;
    update(
        w.as_mut_slice(),
        g.as_slice(),
        m.as_mut_slice(),
        v.as_mut_slice(),
        adam_step_size(lr, t),
    );
    Ok(())
}

/// Adam's bias-corrected step size at step `t` (beta1 0.9, beta2 0.999).
pub fn adam_step_size(lr: f32, t: u32) -> f32 {
    const B1: f32 = 0.9;
    const B2: f32 = 0.999;
    lr * (1.0 - B2.powi(t as i32)).sqrt() / (1.0 - B1.powi(t as i32))
}

/// `n` initial weights, uniform in `±sqrt(6 / fan_in)`, from the Philox
/// stream of `stream_seed`.
pub fn uniform(n: usize, fan_in: usize, stream_seed: u64) -> Vec<f32> {
    let bound = (6.0 / fan_in as f32).sqrt();
    (0..n as u64)
        .map(|i| {
            let w = tensor_arena::ops::philox::stream_word(stream_seed, i);
            ((w >> 8) as f32 / 16_777_216.0 * 2.0 - 1.0) * bound
        })
        .collect()
}

pub fn update(w: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], step_size: f32) {
    for (((w, g), m), v) in w.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
        *m = 0.9 * *m + 0.1 * g;
        *v = 0.999 * *v + 0.001 * g * g;
        *w -= step_size * *m / (v.sqrt() + 1e-8);
    }
}
