//! The same model step written once against the recorder API: no buffer is
//! declared except the parameters, their Adam moments and Adam's step
//! counter; every temporary is asked for by name with the shape this batch
//! needs. While recording, the recorder learns the specs that `model.rs`
//! writes by hand; once frozen, the same code leases a planned slab and
//! allocates nothing.
//!
//! The arithmetic is the host backend's own (`backend::host`, plus
//! `model.rs`'s data helpers), in the same order, so a recorded run trains
//! bit for bit like the hand-declared one on the host.

use ndarray::Ix2;
use tensor_arena::{
    DropoutMask, HostDevice, Persistent, Phase, RecordStep, Recorder, Result, SiteLease,
};

use crate::backend::{AdamSettings, host};
use crate::data::{Batch, Dataset};
use crate::model::{
    ADAM, Hyper, Sizes, StepStats, cross_entropy, initial_weights, inverse_lengths, load_tokens,
    one_hot, token_mask,
};

/// One parameter: its value and Adam moments (persistent), and the name of
/// its gradient, a temporary that lives from backward to update.
struct Param {
    value: Persistent<f32>,
    m: Persistent<f32>,
    v: Persistent<f32>,
    grad: &'static str,
    shape: Vec<usize>,
}

/// The parameters and phases; everything else is found by name.
pub struct RecNet {
    pub sizes: Sizes,
    w1: Param,
    b1: Param,
    w2: Param,
    b2: Param,
    adam_step: Persistent<f32>,
    backward: Phase,
    update: Phase,
    steps: u32,
}

type L<'s> = SiteLease<'s, f32, HostDevice>;

impl RecNet {
    /// Declares the phases and the persistent buffers on `rec`.
    pub fn declare(rec: &mut Recorder<HostDevice>, sizes: Sizes) -> Result<RecNet> {
        rec.phase("forward")?;
        let backward = rec.phase("backward")?;
        let update = rec.phase("update")?;
        let Sizes {
            features: f,
            hidden: h,
            classes: c,
            ..
        } = sizes;
        let mut param = |name: &'static str, grad: &'static str, shape: &[usize]| {
            Ok::<_, tensor_arena::Error>(Param {
                value: rec.persistent::<f32>(name, shape)?,
                m: rec.persistent::<f32>(&format!("{name}.adam_m"), shape)?,
                v: rec.persistent::<f32>(&format!("{name}.adam_v"), shape)?,
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
        Ok(RecNet {
            sizes,
            w1,
            b1,
            w2,
            b2,
            adam_step: rec.persistent::<f32>("adam.step", &[1])?,
            backward,
            update,
            steps: 0,
        })
    }

    /// The same initial weights as `Net::init`; zero biases and moments.
    pub fn init(&self, rec: &mut Recorder<HostDevice>, seed: u64) -> Result<()> {
        let Sizes {
            features: f,
            hidden: h,
            classes: c,
            ..
        } = self.sizes;
        rec.write(self.w1.value, &initial_weights(seed, f * h, f, 1))?;
        rec.write(self.w2.value, &initial_weights(seed, h * c, h, 2))?;
        for p in [&self.b1, &self.b2] {
            rec.write(p.value, &vec![0.0; p.shape.iter().product()])?;
        }
        // Moments start at zero: the pool and the slab are zero-filled.
        Ok(())
    }

    /// One training step: forward, loss, backward, Adam. The Adam step
    /// counter only moves when the step succeeds, so a step that failed on
    /// an oversized request can be run again after re-recording.
    pub fn train_step(
        &mut self,
        rec: &mut Recorder<HostDevice>,
        data: &Dataset,
        batch: &Batch<'_>,
        hyper: &Hyper,
    ) -> Result<StepStats> {
        let t = self.steps + 1;
        let net = &*self;
        let stats = rec.step(|s| -> Result<StepStats> {
            let (fwd, stats) = net.forward(s, data, batch, hyper)?;
            s.enter(net.backward)?;
            net.backward(s, fwd, batch)?;
            s.enter(net.update)?;
            let mut step = s.lease(net.adam_step)?;
            step.as_mut_slice()[0] = t as f32;
            let a = AdamSettings {
                lr: hyper.lr,
                ..ADAM
            };
            for p in [&net.w1, &net.b1, &net.w2, &net.b2] {
                adam(s, p, step.as_slice()[0], &a)?;
            }
            Ok(stats)
        })?;
        self.steps = t;
        Ok(stats)
    }

    /// Loss and accuracy on `batch` without masking, dropout or update.
    pub fn evaluate(
        &self,
        rec: &mut Recorder<HostDevice>,
        data: &Dataset,
        batch: &Batch<'_>,
    ) -> Result<StepStats> {
        let plain = Hyper {
            lr: 0.0,
            input_keep: 1.0,
            dropout: 0.0,
        };
        rec.step(|s| self.forward(s, data, batch, &plain).map(|(_, stats)| stats))
    }

    fn forward<'s>(
        &self,
        s: &'s RecordStep<'_, HostDevice>,
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
        // Every batch-sized request comes before any mask is drawn or any
        // parameter written, so a step refused for an oversized request
        // changed nothing (see `record_train.rs`).
        let mut x = s.temp::<f32>("x", &[rows, f])?;
        let mut tokmask = s.temp::<f32>("token_mask", &[rows])?;
        let mut inv_len = s.temp::<f32>("inv_len", &[b])?;
        let mut onehot = s.temp::<f32>("onehot", &[b, c])?;
        load_tokens(data, batch, x.as_mut_slice());
        token_mask(data, batch, tokmask.as_mut_slice());
        inverse_lengths(data, batch, inv_len.as_mut_slice());
        one_hot(data, batch, c, onehot.as_mut_slice());
        {
            let mut keep = s.temp::<f32>("input_keep_mask", &[rows, f])?;
            keep.bernoulli_(hyper.input_keep)?;
            x.apply_mask_(&keep, 1.0 / hyper.input_keep)?;
        }
        let w1 = s.lease(self.w1.value)?;
        let b1 = s.lease(self.b1.value)?;
        let mut h = s.temp::<f32>("h", &[rows, hd])?;
        host::matmul(
            x.view::<Ix2>()?,
            false,
            w1.view::<Ix2>()?,
            false,
            h.view_mut::<Ix2>()?,
        )?;
        host::bias_relu(h.as_mut_slice(), b1.as_slice());
        let mask = h.dropout_(hyper.dropout)?;
        let mut pooled = s.temp::<f32>("pooled", &[b, hd])?;
        host::pool(
            h.as_mut_slice(),
            tokmask.as_slice(),
            inv_len.as_slice(),
            pooled.as_mut_slice(),
            l,
            hd,
        );
        let w2 = s.lease(self.w2.value)?;
        let b2 = s.lease(self.b2.value)?;
        let mut probs = s.temp::<f32>("probs", &[b, c])?;
        {
            let mut logits = s.temp::<f32>("logits", &[b, c])?;
            host::matmul(
                pooled.view::<Ix2>()?,
                false,
                w2.view::<Ix2>()?,
                false,
                logits.view_mut::<Ix2>()?,
            )?;
            host::bias_softmax(logits.as_mut_slice(), b2.as_slice(), probs.as_mut_slice());
        }
        let stats = cross_entropy(probs.as_slice(), data, batch, c);
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

    fn backward(
        &self,
        s: &RecordStep<'_, HostDevice>,
        fwd: Forward<'_>,
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
        host::sub(dlogits.as_mut_slice(), onehot.as_slice());
        dlogits.mul_scalar_(1.0 / b as f32)?;
        let mut gw2 = s.temp::<f32>(self.w2.grad, &self.w2.shape)?;
        host::matmul(
            pooled.view::<Ix2>()?,
            true,
            dlogits.view::<Ix2>()?,
            false,
            gw2.view_mut::<Ix2>()?,
        )?;
        let mut gb2 = s.temp::<f32>(self.b2.grad, &self.b2.shape)?;
        host::column_sums(dlogits.as_slice(), gb2.as_mut_slice());
        let mut dpooled = s.temp::<f32>("dpooled", &[b, hd])?;
        host::matmul(
            dlogits.view::<Ix2>()?,
            false,
            w2.view::<Ix2>()?,
            true,
            dpooled.view_mut::<Ix2>()?,
        )?;
        let mut dh = s.temp::<f32>("dh", &[b * l, hd])?;
        host::unpool(
            dpooled.as_mut_slice(),
            tokmask.as_slice(),
            inv_len.as_slice(),
            dh.as_mut_slice(),
            l,
            hd,
        );
        dh.dropout_backward_(&mask)?;
        let mut relu = s.temp::<f32>("relu_mask", &[b * l, hd])?;
        host::relu_mask(h.as_slice(), relu.as_mut_slice());
        dh.mul_(&relu)?;
        let mut gw1 = s.temp::<f32>(self.w1.grad, &self.w1.shape)?;
        host::matmul(
            x.view::<Ix2>()?,
            true,
            dh.view::<Ix2>()?,
            false,
            gw1.view_mut::<Ix2>()?,
        )?;
        let mut gb1 = s.temp::<f32>(self.b1.grad, &self.b1.shape)?;
        host::column_sums(dh.as_slice(), gb1.as_mut_slice());
        Ok(())
    }

    /// The weights (w1, b1, w2, b2, flattened), as `Net::weights`.
    pub fn weights(&self, rec: &mut Recorder<HostDevice>) -> Result<Vec<f32>> {
        let mut all = Vec::new();
        for p in [&self.w1, &self.b1, &self.w2, &self.b2] {
            let mut host = vec![0.0f32; p.shape.iter().product()];
            rec.read(p.value, &mut host)?;
            all.extend(host);
        }
        Ok(all)
    }
}

/// The forward pass's leases that the backward pass reads.
struct Forward<'s> {
    x: L<'s>,
    h: L<'s>,
    pooled: L<'s>,
    probs: L<'s>,
    tokmask: L<'s>,
    inv_len: L<'s>,
    onehot: L<'s>,
    w2: L<'s>,
    mask: DropoutMask,
}

/// One AdamW update of a parameter from its gradient, which backward left
/// in the gradient's site.
fn adam(s: &RecordStep<'_, HostDevice>, p: &Param, t: f32, a: &AdamSettings) -> Result<()> {
    let mut w = s.lease(p.value)?;
    let g = s.temp::<f32>(p.grad, &p.shape)?;
    let mut m = s.lease(p.m)?;
    let mut v = s.lease(p.v)?;
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
