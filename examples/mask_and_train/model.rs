//! The model on an arena: a token MLP with mean pooling and a linear head,
//! trained with Adam. Every tensor of a step is a lease; nothing allocates.
//! Written once against [`Backend`]: the same steps run on the host and on
//! an Ascend device.
//!
//! ```text
//! x      [B*L, F]  tokens, input-masked (bernoulli_ + apply_mask_)
//! h      [B*L, H]  relu(x W1 + b1), then dropout_
//! pooled [B, H]    mean of h over each sample's real tokens
//! logits [B, C]    pooled W2 + b2 -> softmax cross-entropy
//! ```

use tensor_arena::{
    Arena, Buffer, Device, DropoutMask, Kernels, Lease, Phase, Planner, Result, Step,
};

use crate::backend::{AdamSettings, Backend};
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
    probs: Buffer<f32>,
    /// Per token: 1 for a real token, 0 for padding.
    tokmask: Buffer<f32>,
    /// Per sample: 1 / its length.
    inv_len: Buffer<f32>,
    /// Per sample: the label, one-hot.
    onehot: Buffer<f32>,
    dpooled: Buffer<f32>,
    dh: Buffer<f32>,
    relu: Buffer<f32>,
    /// Adam's step number, one f32 (the device operator reads it there).
    adam_step: Buffer<f32>,
    /// Device operators' workspace, when the backend needs one.
    pub workspace: Option<Buffer<u8>>,
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

pub const ADAM: AdamSettings = AdamSettings {
    lr: 0.0,
    beta1: 0.9,
    beta2: 0.999,
    eps: 1e-8,
};

impl Net {
    /// Declares every buffer of the model on `planner`, with a
    /// `workspace`-byte device workspace when that is not 0.
    pub fn declare(planner: &mut Planner, sizes: Sizes, workspace: usize) -> Result<Net> {
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
        let workspace = match workspace {
            0 => None,
            n => Some(planner.persistent::<u8>("aclnn.workspace", &[n])?),
        };
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
            logits: planner.span::<f32>("logits", &[b, c], forward, forward)?,
            probs: planner.span::<f32>("probs", &[b, c], forward, backward)?,
            tokmask: planner.span::<f32>("token_mask", &[b * l], forward, backward)?,
            inv_len: planner.span::<f32>("inv_len", &[b], forward, backward)?,
            onehot: planner.span::<f32>("onehot", &[b, c], forward, backward)?,
            dpooled: planner.span::<f32>("dpooled", &[b, h], backward, backward)?,
            dh: planner.span::<f32>("dh", &[b * l, h], backward, backward)?,
            relu: planner.span::<f32>("relu_mask", &[b * l, h], backward, backward)?,
            adam_step: planner.persistent::<f32>("adam.step", &[1])?,
            workspace,
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
        arena.write(self.w1.value, &initial_weights(seed, f * h, f, 1))?;
        arena.write(self.w2.value, &initial_weights(seed, h * c, h, 2))?;
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
    pub fn train_step<B: Backend>(
        &mut self,
        be: &B,
        arena: &mut Arena<B::Dev>,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<StepStats> {
        self.steps += 1;
        let t = self.steps as f32;
        let net = &*self;
        arena.step(|s| -> Result<StepStats> {
            let (fwd, stats) = net.forward(be, s, data, batch, hyper)?;
            s.enter(net.backward)?;
            net.backward(be, s, fwd, batch)?;
            s.enter(net.update)?;
            let mut step = s.lease(net.adam_step)?;
            be.upload(&mut step, |v| v[0] = t)?;
            let a = AdamSettings {
                lr: hyper.lr,
                ..ADAM
            };
            for p in [net.w1, net.b1, net.w2, net.b2] {
                let mut w = s.lease(p.value)?;
                let g = s.lease(p.grad)?;
                let mut m = s.lease(p.m)?;
                let mut v = s.lease(p.v)?;
                be.adam(s, &mut w, &mut m, &mut v, &g, &step, &a)?;
            }
            Ok(stats)
        })
    }

    /// Loss and accuracy on `batch` without masking, dropout or update.
    pub fn evaluate<B: Backend>(
        &self,
        be: &B,
        arena: &mut Arena<B::Dev>,
        data: &Dataset,
        batch: &Batch<'_>,
    ) -> Result<StepStats> {
        let plain = Hyper {
            lr: 0.0,
            input_keep: 1.0,
            dropout: 0.0,
        };
        arena.step(|s| {
            self.forward(be, s, data, batch, &plain)
                .map(|(_, stats)| stats)
        })
    }

    fn forward<'s, B: Backend>(
        &self,
        be: &B,
        s: &'s Step<'_, B::Dev>,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<(Forward<'s, B::Dev>, StepStats)> {
        let Sizes {
            features: f,
            hidden: hd,
            classes: c,
            ..
        } = self.sizes;
        let (b, l) = (batch.samples.len(), batch.len);
        let rows = b * l;
        // Host data in: tokens, the padding mask, 1 / length, one-hot labels.
        let mut x = s.lease(self.x)?.with_shape(&[rows, f])?;
        be.upload(&mut x, |x| load_tokens(data, batch, x))?;
        let mut tokmask = s.lease(self.tokmask)?.with_shape(&[rows])?;
        be.upload(&mut tokmask, |m| token_mask(data, batch, m))?;
        let mut inv_len = s.lease(self.inv_len)?.with_shape(&[b])?;
        be.upload(&mut inv_len, |v| inverse_lengths(data, batch, v))?;
        let mut onehot = s.lease(self.onehot)?.with_shape(&[b, c])?;
        be.upload(&mut onehot, |o| one_hot(data, batch, c, o))?;
        {
            // Input masking: a stored mask, applied with its 1/keep scale.
            let mut keep = s.lease(self.keep)?.with_shape(&[rows, f])?;
            keep.bernoulli_(hyper.input_keep)?;
            x.apply_mask_(&keep, 1.0 / hyper.input_keep)?;
        }
        let w1 = s.lease(self.w1.value)?;
        let b1 = s.lease(self.b1.value)?;
        let mut h = s.lease(self.h)?.with_shape(&[rows, hd])?;
        be.matmul(s, &x, false, &w1, false, &mut h)?;
        be.bias_relu(s, &mut h, &b1)?;
        // Fused dropout: no mask buffer; backward regenerates it.
        let mask = h.dropout_(hyper.dropout)?;
        let mut pooled = s.lease(self.pooled)?.with_shape(&[b, hd])?;
        be.pool(s, &mut h, &tokmask, &inv_len, &mut pooled, l)?;
        let w2 = s.lease(self.w2.value)?;
        let b2 = s.lease(self.b2.value)?;
        let mut probs = s.lease(self.probs)?.with_shape(&[b, c])?;
        {
            let mut logits = s.lease(self.logits)?.with_shape(&[b, c])?;
            be.matmul(s, &pooled, false, &w2, false, &mut logits)?;
            be.bias_softmax(s, &mut logits, &b2, &mut probs)?;
        }
        // The loss is read back, as a training loop reads `loss.item()`.
        let stats = be.download(&probs, |p| cross_entropy(p, data, batch, c))?;
        let fwd = Forward {
            x,
            h,
            pooled,
            probs,
            tokmask,
            inv_len,
            onehot,
            w2,
            mask,
        };
        Ok((fwd, stats))
    }

    fn backward<B: Backend>(
        &self,
        be: &B,
        s: &Step<'_, B::Dev>,
        fwd: Forward<'_, B::Dev>,
        batch: &Batch<'_>,
    ) -> Result<()> {
        let hd = self.sizes.hidden;
        let (b, l) = (batch.samples.len(), batch.len);
        let Forward {
            x,
            h,
            pooled,
            probs: mut dlogits,
            tokmask,
            inv_len,
            onehot,
            w2,
            mask,
        } = fwd;
        // Probabilities become dL/dlogits in place: (p - onehot) / B.
        be.sub(s, &mut dlogits, &onehot)?;
        dlogits.mul_scalar_(1.0 / b as f32)?;
        let mut gw2 = s.lease(self.w2.grad)?;
        be.matmul(s, &pooled, true, &dlogits, false, &mut gw2)?;
        let mut gb2 = s.lease(self.b2.grad)?;
        be.column_sums(s, &dlogits, &mut gb2)?;
        let mut dpooled = s.lease(self.dpooled)?.with_shape(&[b, hd])?;
        be.matmul(s, &dlogits, false, &w2, true, &mut dpooled)?;
        let mut dh = s.lease(self.dh)?.with_shape(&[b * l, hd])?;
        be.unpool(s, &mut dpooled, &tokmask, &inv_len, &mut dh, l)?;
        dh.dropout_backward_(&mask)?;
        let mut relu = s.lease(self.relu)?.with_shape(&[b * l, hd])?;
        be.relu_mask(s, &h, &mut relu)?;
        dh.mul_(&relu)?;
        let mut gw1 = s.lease(self.w1.grad)?;
        be.matmul(s, &x, true, &dh, false, &mut gw1)?;
        let mut gb1 = s.lease(self.b1.grad)?;
        be.column_sums(s, &dh, &mut gb1)?;
        Ok(())
    }

    /// The weights, for comparing runs element by element.
    pub fn weights<D: Device>(&self, arena: &mut Arena<D>) -> Result<Vec<f32>> {
        let mut all = Vec::new();
        for p in [self.w1, self.b1, self.w2, self.b2] {
            let n = arena.plan().buffer(p.value.id())?.shape().elements();
            let mut host = vec![0.0f32; n];
            arena.read(p.value, &mut host)?;
            all.extend(host);
        }
        Ok(all)
    }
}

/// The forward pass's leases that the backward pass reads.
struct Forward<'s, D: Kernels> {
    x: Lease<'s, f32, D>,
    h: Lease<'s, f32, D>,
    pooled: Lease<'s, f32, D>,
    probs: Lease<'s, f32, D>,
    tokmask: Lease<'s, f32, D>,
    inv_len: Lease<'s, f32, D>,
    onehot: Lease<'s, f32, D>,
    w2: Lease<'s, f32, D>,
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

/// 1 for each sample's real tokens, 0 for its padding (`[B*L]`).
pub fn token_mask(data: &Dataset, batch: &Batch<'_>, m: &mut [f32]) {
    let l = batch.len;
    for (row, &sample) in m.chunks_exact_mut(l).zip(batch.samples) {
        let len = data.lengths[sample];
        row[..len].fill(1.0);
        row[len..].fill(0.0);
    }
}

/// Per sample: 1 / its length.
pub fn inverse_lengths(data: &Dataset, batch: &Batch<'_>, v: &mut [f32]) {
    for (v, &sample) in v.iter_mut().zip(batch.samples) {
        *v = 1.0 / data.lengths[sample] as f32;
    }
}

/// Per sample: its label, one-hot over `c` classes.
pub fn one_hot(data: &Dataset, batch: &Batch<'_>, c: usize, o: &mut [f32]) {
    o.fill(0.0);
    for (row, &sample) in o.chunks_exact_mut(c).zip(batch.samples) {
        row[data.labels[sample]] = 1.0;
    }
}

/// The initial weights of a `n`-element parameter with `fan_in` inputs:
/// uniform in ±sqrt(6 / fan_in), from the Philox stream `seed ^ stream`.
pub fn initial_weights(seed: u64, n: usize, fan_in: usize, stream: u64) -> Vec<f32> {
    let bound = (6.0 / fan_in as f32).sqrt();
    (0..n as u64)
        .map(|i| {
            let w = tensor_arena::ops::philox::stream_word(seed ^ stream, i);
            ((w >> 8) as f32 / 16_777_216.0 * 2.0 - 1.0) * bound
        })
        .collect()
}

/// Summed cross-entropy and correct predictions from the probabilities.
pub fn cross_entropy(probs: &[f32], data: &Dataset, batch: &Batch<'_>, c: usize) -> StepStats {
    let mut stats = StepStats::default();
    for (row, &sample) in probs.chunks_exact(c).zip(batch.samples) {
        let y = data.labels[sample];
        let (mut best, mut max) = (0, f32::NEG_INFINITY);
        for (j, &v) in row.iter().enumerate() {
            if v > max {
                (best, max) = (j, v);
            }
        }
        stats.loss_sum -= f64::from(row[y].max(1e-30).ln());
        stats.correct += usize::from(best == y);
        stats.samples += 1;
    }
    stats
}
