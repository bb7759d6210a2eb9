//! The model: a token MLP with mean pooling and a linear head, trained with
//! Adam, written once. Its steps are generic over
//! [`StepScope`](tensor_arena::StepScope): the same code runs on a planned
//! arena (buffers declared by hand in [`Net::declare_with`]) and on a
//! recorder (specs learned by site name, `--record`), and over
//! [`Compute`]: the same steps run on the host and on an Ascend device.
//! Every tensor of a step is a lease; nothing allocates.
//!
//! ```text
//! x      [B*L, F]  tokens, input-masked (bernoulli_ into a u8 mask + apply_mask_)
//! h      [B*L, H]  relu(x W1 + b1), then dropout_with_bits_: its keep
//!                  decisions in h.keep_bits, one bit each ([B*L*H / 8] u8),
//!                  which the backward applies (no random numbers there)
//! pooled [B, H]    mean of h over each sample's real tokens
//! logits [B, C]    pooled W2 + b2 -> softmax cross-entropy
//! ```
//!
//! Two modes share the parameters: `train` (forward, backward, update) and
//! `eval` (forward only, no masking, no dropout, larger batches), whose
//! step-scoped buffers share the slab's bytes.

use tensor_arena::ops::bit_mask_bytes;
use tensor_arena::{
    Arena, Buffer, BufferSpec, DType, Device, DropoutBitMask, Element, Kernels, LeaseOf, LeaseOps,
    Lifetime, Mode, Phase, Planner, RecordStep, Recorder, Result, Step, StepScope,
};

use crate::backend::{AdamSettings, AscendMask, Compute};
use crate::data::{Batch, Dataset};

/// Model and training sizes of one mode.
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

/// One parameter: its value and Adam moments (persistent), and the name of
/// its gradient, a temporary from backward to update.
#[derive(Clone)]
struct Param {
    value: Buffer<f32>,
    m: Buffer<f32>,
    v: Buffer<f32>,
    grad: &'static str,
    shape: Vec<usize>,
}

/// The handles of the model: modes, phases and persistent buffers. Every
/// temporary is asked for by name, with the shape of the batch.
pub struct Net {
    pub sizes: Sizes,
    w1: Param,
    b1: Param,
    w2: Param,
    b2: Param,
    /// Adam's step number, one f32 (the device operator reads it there).
    adam_step: Buffer<f32>,
    /// Device operators' workspace, when the backend needs one.
    pub workspace: Option<Buffer<u8>>,
    train: Mode,
    eval: Option<Mode>,
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

/// The modes' names, phases and the parameters, declared the same way on a
/// planner and on a recorder.
trait Declare {
    fn mode(&mut self, name: &str) -> Result<Mode>;
    fn phase_in(&mut self, mode: Mode, name: &str) -> Result<Phase>;
    fn persistent(&mut self, name: &str, shape: &[usize]) -> Result<Buffer<f32>>;
}

impl Declare for Planner {
    fn mode(&mut self, name: &str) -> Result<Mode> {
        Planner::mode(self, name)
    }
    fn phase_in(&mut self, mode: Mode, name: &str) -> Result<Phase> {
        Planner::phase_in(self, mode, name)
    }
    fn persistent(&mut self, name: &str, shape: &[usize]) -> Result<Buffer<f32>> {
        Planner::persistent(self, name, shape)
    }
}

impl<D: Device> Declare for Recorder<D> {
    fn mode(&mut self, name: &str) -> Result<Mode> {
        Recorder::mode(self, name)
    }
    fn phase_in(&mut self, mode: Mode, name: &str) -> Result<Phase> {
        Recorder::phase_in(self, mode, name)
    }
    fn persistent(&mut self, name: &str, shape: &[usize]) -> Result<Buffer<f32>> {
        Recorder::persistent(self, name, shape)
    }
}

/// Where the weights live outside a step: an arena or a recorder.
pub trait Weights {
    fn write(&mut self, buffer: Buffer<f32>, data: &[f32]) -> Result<()>;
    fn read(&mut self, buffer: Buffer<f32>, out: &mut [f32]) -> Result<()>;
}

impl<D: Device> Weights for Arena<D> {
    fn write(&mut self, buffer: Buffer<f32>, data: &[f32]) -> Result<()> {
        Arena::write(self, buffer, data)
    }
    fn read(&mut self, buffer: Buffer<f32>, out: &mut [f32]) -> Result<()> {
        Arena::read(self, buffer, out)
    }
}

impl<D: Device> Weights for Recorder<D> {
    fn write(&mut self, buffer: Buffer<f32>, data: &[f32]) -> Result<()> {
        Recorder::write(self, buffer, data)
    }
    fn read(&mut self, buffer: Buffer<f32>, out: &mut [f32]) -> Result<()> {
        Recorder::read(self, buffer, out)
    }
}

impl Net {
    /// The train mode only, with the input mask of the Ascend backend's
    /// type ([`AscendMask`]): the model the fault-injection rig trains.
    // Used by the fault-injection tests, not by `main`.
    #[allow(dead_code)]
    pub fn declare(planner: &mut Planner, sizes: Sizes, workspace: usize) -> Result<Net> {
        Net::declare_with(planner, sizes, None, workspace, AscendMask::DTYPE)
    }

    /// Declares every buffer of the model on `planner`, by hand: the
    /// `train` mode's temporaries at `sizes`, the `eval` mode's at `eval`
    /// (when given), the parameters and Adam moments, and a
    /// `workspace`-byte device workspace when that is not 0. `mask` is the
    /// input mask's element type (u8 on the host).
    pub fn declare_with(
        planner: &mut Planner,
        sizes: Sizes,
        eval: Option<Sizes>,
        workspace: usize,
        mask: DType,
    ) -> Result<Net> {
        let (mut net, forward, eval_forward) = Net::declare_common(planner, sizes, eval.is_some())?;
        net.workspace = match workspace {
            0 => None,
            n => Some(planner.persistent::<u8>("aclnn.workspace", &[n])?),
        };
        let (fwd, bwd, upd) = (forward, net.backward, net.update);
        let Sizes {
            features: f,
            hidden: hd,
            classes: c,
            max_batch: b,
            max_len: l,
        } = sizes;
        let rows = b * l;
        for p in [&net.w1, &net.b1, &net.w2, &net.b2] {
            planner.span::<f32>(p.grad, &p.shape, bwd, upd)?;
        }
        planner.span::<f32>("x", &[rows, f], fwd, bwd)?;
        planner.declare_dyn(
            BufferSpec::new("input_keep_mask", mask, &[rows, f]).lifetime(Lifetime::phase(fwd)),
        )?;
        planner.span::<f32>("h", &[rows, hd], fwd, bwd)?;
        planner.span::<u8>("h.keep_bits", &[bit_mask_bytes(rows * hd)], fwd, bwd)?;
        planner.span::<f32>("pooled", &[b, hd], fwd, bwd)?;
        planner.span::<f32>("logits", &[b, c], fwd, fwd)?;
        planner.span::<f32>("probs", &[b, c], fwd, bwd)?;
        planner.span::<f32>("token_mask", &[rows], fwd, bwd)?;
        planner.span::<f32>("inv_len", &[b], fwd, bwd)?;
        planner.span::<f32>("onehot", &[b, c], fwd, bwd)?;
        planner.span::<f32>("dpooled", &[b, hd], bwd, bwd)?;
        planner.span::<f32>("dh", &[rows, hd], bwd, bwd)?;
        planner.span::<f32>("relu_mask", &[rows, hd], bwd, bwd)?;
        if let (Some(e), Some(efwd)) = (eval, eval_forward) {
            // Evaluation: no masks, no gradients, larger batches.
            let (b, rows) = (e.max_batch, e.max_batch * e.max_len);
            planner.span::<f32>("x", &[rows, f], efwd, efwd)?;
            planner.span::<f32>("token_mask", &[rows], efwd, efwd)?;
            planner.span::<f32>("inv_len", &[b], efwd, efwd)?;
            planner.span::<f32>("h", &[rows, hd], efwd, efwd)?;
            planner.span::<f32>("pooled", &[b, hd], efwd, efwd)?;
            planner.span::<f32>("logits", &[b, c], efwd, efwd)?;
            planner.span::<f32>("probs", &[b, c], efwd, efwd)?;
        }
        Ok(net)
    }

    /// Declares the modes, phases and persistent buffers on `rec`; the
    /// recorder learns every temporary by name from the steps.
    pub fn declare_recorded<D: Device>(
        rec: &mut Recorder<D>,
        sizes: Sizes,
        with_eval: bool,
    ) -> Result<Net> {
        Net::declare_common(rec, sizes, with_eval).map(|(net, _, _)| net)
    }

    /// Modes, phases, parameters and Adam's step: what both ways of
    /// declaring have in common. Returns the `forward` phases too.
    fn declare_common(
        d: &mut impl Declare,
        sizes: Sizes,
        with_eval: bool,
    ) -> Result<(Net, Phase, Option<Phase>)> {
        let train = d.mode("train")?;
        let forward = d.phase_in(train, "forward")?;
        let backward = d.phase_in(train, "backward")?;
        let update = d.phase_in(train, "update")?;
        let (eval, eval_forward) = match with_eval {
            true => {
                let eval = d.mode("eval")?;
                (Some(eval), Some(d.phase_in(eval, "forward")?))
            }
            false => (None, None),
        };
        let Sizes {
            features: f,
            hidden: h,
            classes: c,
            ..
        } = sizes;
        let mut param = |name: &str, grad: &'static str, shape: &[usize]| -> Result<Param> {
            Ok(Param {
                value: d.persistent(name, shape)?,
                m: d.persistent(&format!("{name}.adam_m"), shape)?,
                v: d.persistent(&format!("{name}.adam_v"), shape)?,
                grad,
                shape: shape.to_vec(),
            })
        };
        let (w1, b1) = (
            param("w1", "w1.grad", &[f, h])?,
            param("b1", "b1.grad", &[h])?,
        );
        let (w2, b2) = (
            param("w2", "w2.grad", &[h, c])?,
            param("b2", "b2.grad", &[c])?,
        );
        let net = Net {
            sizes,
            w1,
            b1,
            w2,
            b2,
            adam_step: d.persistent("adam.step", &[1])?,
            workspace: None,
            train,
            eval,
            backward,
            update,
            steps: 0,
        };
        Ok((net, forward, eval_forward))
    }

    /// Initial weights (scaled uniform from the Philox stream), zero biases
    /// and moments.
    pub fn init(&self, w: &mut impl Weights, seed: u64) -> Result<()> {
        let Sizes {
            features: f,
            hidden: h,
            classes: c,
            ..
        } = self.sizes;
        w.write(self.w1.value, &initial_weights(seed, f * h, f, 1))?;
        w.write(self.w2.value, &initial_weights(seed, h * c, h, 2))?;
        for p in [&self.w1, &self.b1, &self.w2, &self.b2] {
            let zeros = vec![0.0; p.shape.iter().product()];
            if p.value == self.b1.value || p.value == self.b2.value {
                w.write(p.value, &zeros)?;
            }
            w.write(p.m, &zeros)?;
            w.write(p.v, &zeros)?;
        }
        Ok(())
    }

    /// One training step on a planned arena (mode `train`).
    pub fn train_step<D: Kernels, B>(
        &mut self,
        be: &B,
        arena: &mut Arena<D>,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<StepStats>
    where
        B: for<'a> Compute<Step<'a, D>>,
    {
        let t = self.steps + 1;
        let net = &*self;
        let stats = arena.step_in(net.train, |s| net.train_body(be, s, data, batch, hyper, t))?;
        self.steps = t;
        Ok(stats)
    }

    /// One training step on a recorder (mode `train`): recorded, or served
    /// from its frozen plan. Adam's step counter only moves when the step
    /// succeeds, so a step refused for an oversized request can run again
    /// after re-recording.
    pub fn train_step_recorded<D: Kernels, B>(
        &mut self,
        be: &B,
        rec: &mut Recorder<D>,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<StepStats>
    where
        B: for<'r> Compute<RecordStep<'r, D>>,
    {
        let t = self.steps + 1;
        let net = &*self;
        let stats = rec.step_in(net.train, |s| net.train_body(be, s, data, batch, hyper, t))?;
        self.steps = t;
        Ok(stats)
    }

    /// Loss and accuracy on `batch` in mode `eval` of a planned arena: no
    /// masking, no dropout, no update.
    pub fn evaluate<D: Kernels, B>(
        &self,
        be: &B,
        arena: &mut Arena<D>,
        data: &Dataset,
        batch: &Batch<'_>,
    ) -> Result<StepStats>
    where
        B: for<'a> Compute<Step<'a, D>>,
    {
        arena.step_in(self.eval_mode()?, |s| self.eval_body(be, s, data, batch))
    }

    /// [`Net::evaluate`] on a recorder.
    pub fn evaluate_recorded<D: Kernels, B>(
        &self,
        be: &B,
        rec: &mut Recorder<D>,
        data: &Dataset,
        batch: &Batch<'_>,
    ) -> Result<StepStats>
    where
        B: for<'r> Compute<RecordStep<'r, D>>,
    {
        rec.step_in(self.eval_mode()?, |s| self.eval_body(be, s, data, batch))
    }

    fn eval_mode(&self) -> Result<Mode> {
        self.eval
            .ok_or_else(|| tensor_arena::Error::InvalidArgument {
                what: "mode",
                value: "eval".to_owned(),
                reason: "this model was declared without an eval mode".to_owned(),
            })
    }

    /// One training step, whatever the step type.
    fn train_body<S, B>(
        &self,
        be: &B,
        s: &S,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
        t: u32,
    ) -> Result<StepStats>
    where
        S: StepScope,
        S::Device: Kernels,
        B: Compute<S>,
    {
        let (fwd, stats) = self.forward(be, s, data, batch, Some(hyper))?;
        s.enter(self.backward)?;
        self.backward(be, s, fwd, batch)?;
        s.enter(self.update)?;
        let mut step = s.lease(self.adam_step)?;
        be.upload(&mut step, |v| v[0] = t as f32)?;
        let a = AdamSettings {
            lr: hyper.lr,
            ..ADAM
        };
        for p in [&self.w1, &self.b1, &self.w2, &self.b2] {
            let mut w = s.lease(p.value)?;
            let g = s.temp::<f32>(p.grad, &p.shape)?;
            let mut m = s.lease(p.m)?;
            let mut v = s.lease(p.v)?;
            be.adam(s, &mut w, &mut m, &mut v, &g, &step, &a)?;
        }
        Ok(stats)
    }

    fn eval_body<S, B>(&self, be: &B, s: &S, data: &Dataset, batch: &Batch<'_>) -> Result<StepStats>
    where
        S: StepScope,
        S::Device: Kernels,
        B: Compute<S>,
    {
        self.forward(be, s, data, batch, None)
            .map(|(_, stats)| stats)
    }

    /// The forward pass; `train` carries the masking and dropout settings
    /// (none in evaluation).
    fn forward<'s, S, B>(
        &self,
        be: &B,
        s: &'s S,
        data: &Dataset,
        batch: &Batch<'_>,
        train: Option<&Hyper>,
    ) -> Result<(Forward<'s, S>, StepStats)>
    where
        S: StepScope,
        S::Device: Kernels,
        B: Compute<S>,
    {
        let Sizes {
            features: f,
            hidden: hd,
            classes: c,
            ..
        } = self.sizes;
        let (b, l) = (batch.samples.len(), batch.len);
        let rows = b * l;
        // Every batch-sized request comes before any mask is drawn or any
        // parameter written, so a step refused for an oversized request
        // changed nothing that lasts (see `record_train.rs`).
        let mut x = s.temp::<f32>("x", &[rows, f])?;
        let mut tokmask = s.temp::<f32>("token_mask", &[rows])?;
        let mut inv_len = s.temp::<f32>("inv_len", &[b])?;
        let mut onehot = match train {
            Some(_) => Some(s.temp::<f32>("onehot", &[b, c])?),
            None => None,
        };
        // Dropout's keep decisions, one bit per element of h.
        let mut keep_bits = match train {
            Some(_) => Some(s.temp::<u8>("h.keep_bits", &[bit_mask_bytes(rows * hd)])?),
            None => None,
        };
        // Host data in: tokens, the padding mask, 1 / length, one-hot labels.
        be.upload(&mut x, |x| load_tokens(data, batch, x))?;
        be.upload(&mut tokmask, |m| token_mask(data, batch, m))?;
        be.upload(&mut inv_len, |v| inverse_lengths(data, batch, v))?;
        if let Some(o) = &mut onehot {
            be.upload(o, |o| one_hot(data, batch, c, o))?;
        }
        if let Some(hyper) = train {
            // Input masking: a stored mask (u8 on the host), applied with
            // its 1 / keep scale.
            let mut keep = s.temp::<B::Mask>("input_keep_mask", &[rows, f])?;
            keep.bernoulli_(hyper.input_keep)?;
            x.apply_mask_(&keep, 1.0 / hyper.input_keep)?;
        }
        let w1 = s.lease(self.w1.value)?;
        let b1 = s.lease(self.b1.value)?;
        let mut h = s.temp::<f32>("h", &[rows, hd])?;
        be.matmul(s, &x, false, &w1, false, &mut h)?;
        be.bias_relu(s, &mut h, &b1)?;
        // Dropout that stores its keep decisions, one bit per element (64
        // KiB here), so the backward is a pass bounded by memory bandwidth
        // instead of a second run of the random stream; the same numbers as
        // the regenerating `dropout_` / `dropout_backward_` pair, bit for
        // bit (docs/kernels.md: which to choose).
        let mask = match (train, keep_bits.as_mut()) {
            (Some(hyper), Some(bits)) => Some(h.dropout_with_bits_(hyper.dropout, bits)?),
            _ => None,
        };
        let mut pooled = s.temp::<f32>("pooled", &[b, hd])?;
        be.pool(s, &mut h, &tokmask, &inv_len, &mut pooled, l)?;
        let w2 = s.lease(self.w2.value)?;
        let b2 = s.lease(self.b2.value)?;
        let mut probs = s.temp::<f32>("probs", &[b, c])?;
        {
            let mut logits = s.temp::<f32>("logits", &[b, c])?;
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
            keep_bits,
        };
        Ok((fwd, stats))
    }

    fn backward<S, B>(&self, be: &B, s: &S, fwd: Forward<'_, S>, batch: &Batch<'_>) -> Result<()>
    where
        S: StepScope,
        S::Device: Kernels,
        B: Compute<S>,
    {
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
            keep_bits,
        } = fwd;
        let (Some(onehot), Some(mask), Some(keep_bits)) = (onehot, mask, keep_bits) else {
            return Err(tensor_arena::Error::InvalidArgument {
                what: "forward",
                value: "evaluation".to_owned(),
                reason: "backward needs a training forward pass".to_owned(),
            });
        };
        // Probabilities become dL/dlogits in place: (p - onehot) / B.
        be.sub(s, &mut dlogits, &onehot)?;
        dlogits.mul_scalar_(1.0 / b as f32)?;
        let mut gw2 = s.temp::<f32>(self.w2.grad, &self.w2.shape)?;
        be.matmul(s, &pooled, true, &dlogits, false, &mut gw2)?;
        let mut gb2 = s.temp::<f32>(self.b2.grad, &self.b2.shape)?;
        be.column_sums(s, &dlogits, &mut gb2)?;
        let mut dpooled = s.temp::<f32>("dpooled", &[b, hd])?;
        be.matmul(s, &dlogits, false, &w2, true, &mut dpooled)?;
        let mut dh = s.temp::<f32>("dh", &[b * l, hd])?;
        be.unpool(s, &mut dpooled, &tokmask, &inv_len, &mut dh, l)?;
        dh.dropout_backward_with_bits_(&mask, &keep_bits)?;
        let mut relu = s.temp::<f32>("relu_mask", &[b * l, hd])?;
        be.relu_mask(s, &h, &mut relu)?;
        dh.mul_(&relu)?;
        let mut gw1 = s.temp::<f32>(self.w1.grad, &self.w1.shape)?;
        be.matmul(s, &x, true, &dh, false, &mut gw1)?;
        let mut gb1 = s.temp::<f32>(self.b1.grad, &self.b1.shape)?;
        be.column_sums(s, &dh, &mut gb1)?;
        Ok(())
    }

    /// The weights (w1, b1, w2, b2, flattened), for comparing runs element
    /// by element.
    pub fn weights(&self, w: &mut impl Weights) -> Result<Vec<f32>> {
        let mut all = Vec::new();
        for p in [&self.w1, &self.b1, &self.w2, &self.b2] {
            let mut host = vec![0.0f32; p.shape.iter().product()];
            w.read(p.value, &mut host)?;
            all.extend(host);
        }
        Ok(all)
    }
}

/// The forward pass's leases that the backward pass reads.
struct Forward<'s, S: StepScope + 's> {
    x: LeaseOf<'s, S, f32>,
    h: LeaseOf<'s, S, f32>,
    pooled: LeaseOf<'s, S, f32>,
    probs: LeaseOf<'s, S, f32>,
    tokmask: LeaseOf<'s, S, f32>,
    inv_len: LeaseOf<'s, S, f32>,
    /// One-hot labels (training only).
    onehot: Option<LeaseOf<'s, S, f32>>,
    w2: LeaseOf<'s, S, f32>,
    /// What the dropout used (training only).
    mask: Option<DropoutBitMask>,
    /// Its keep decisions, one bit per element of `h` (training only).
    keep_bits: Option<LeaseOf<'s, S, u8>>,
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
