//! The same model step written once against the recorder API: no buffer is
//! declared except the parameters and their Adam moments; every temporary
//! is asked for by name with the shape this batch needs. While recording,
//! the recorder learns the specs that `model.rs` writes by hand; once
//! frozen, the same code leases a planned slab and allocates nothing.
//!
//! The arithmetic is `model.rs`'s own (its helper functions), so a recorded
//! run trains bit for bit like the hand-declared one.

use ndarray::Ix2;
use tensor_arena::ops::gemm;
use tensor_arena::{
    DropoutMask, HostDevice, Persistent, Phase, RecordStep, Recorder, Result, SiteLease,
};

use crate::data::{Batch, Dataset};
use crate::model::{
    Hyper, Sizes, StepStats, adam_step_size, column_sums, load_tokens, mean_pool, softmax_xent,
    uniform, unpool, update,
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
    backward: Phase,
    update: Phase,
    steps: u32,
}

type L<'s, T> = SiteLease<'s, T, HostDevice>;

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
        Ok(RecNet {
            sizes,
            w1: param("w1", "w1.grad", &[f, h])?,
            b1: param("b1", "b1.grad", &[h])?,
            w2: param("w2", "w2.grad", &[h, c])?,
            b2: param("b2", "b2.grad", &[c])?,
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
        rec.write(self.w1.value, &uniform(f * h, f, seed ^ 1))?;
        rec.write(self.w2.value, &uniform(h * c, h, seed ^ 2))?;
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
            for p in [&net.w1, &net.b1, &net.w2, &net.b2] {
                adam(s, p, hyper.lr, t)?;
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
        let mut lengths = s.temp::<i32>("lengths", &[b])?;
        let mut labels = s.temp::<i32>("labels", &[b])?;
        for (k, &sample) in batch.samples.iter().enumerate() {
            lengths.as_mut_slice()[k] = data.lengths[sample] as i32;
            labels.as_mut_slice()[k] = data.labels[sample] as i32;
        }
        let mut x = s.temp::<f32>("x", &[rows, f])?;
        load_tokens(data, batch, x.as_mut_slice());
        {
            let mut keep = s.temp::<f32>("input_keep_mask", &[rows, f])?;
            keep.bernoulli_(hyper.input_keep)?;
            x.apply_mask_(&keep, 1.0 / hyper.input_keep)?;
        }
        let w1 = s.lease(self.w1.value)?;
        let b1 = s.lease(self.b1.value)?;
        let mut h = s.temp::<f32>("h", &[rows, hd])?;
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
        let mask = h.dropout_(hyper.dropout)?;
        let mut pooled = s.temp::<f32>("pooled", &[b, hd])?;
        mean_pool(
            h.as_slice(),
            lengths.as_slice(),
            l,
            hd,
            pooled.as_mut_slice(),
        );
        let w2 = s.lease(self.w2.value)?;
        let b2 = s.lease(self.b2.value)?;
        let mut logits = s.temp::<f32>("logits", &[b, c])?;
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
        s: &RecordStep<'_, HostDevice>,
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
        for (row, &y) in dlogits
            .as_mut_slice()
            .chunks_exact_mut(c)
            .zip(labels.as_slice())
        {
            row[y as usize] -= 1.0;
            row.iter_mut().for_each(|v| *v /= b as f32);
        }
        let mut gw2 = s.temp::<f32>(self.w2.grad, &self.w2.shape)?;
        gemm(
            1.0,
            pooled.view::<Ix2>()?.t(),
            dlogits.view::<Ix2>()?,
            0.0,
            gw2.view_mut::<Ix2>()?,
        )?;
        let mut gb2 = s.temp::<f32>(self.b2.grad, &self.b2.shape)?;
        column_sums(dlogits.as_slice(), c, gb2.as_mut_slice());
        let mut dpooled = s.temp::<f32>("dpooled", &[b, hd])?;
        gemm(
            1.0,
            dlogits.view::<Ix2>()?,
            w2.view::<Ix2>()?.t(),
            0.0,
            dpooled.view_mut::<Ix2>()?,
        )?;
        let mut dh = s.temp::<f32>("dh", &[b * l, hd])?;
        unpool(
            dpooled.as_slice(),
            lengths.as_slice(),
            l,
            hd,
            dh.as_mut_slice(),
        );
        dh.dropout_backward_(&mask)?;
        let mut relu = s.temp::<f32>("relu_mask", &[b * l, hd])?;
        for (r, &v) in relu.as_mut_slice().iter_mut().zip(h.as_slice()) {
            *r = if v > 0.0 { 1.0 } else { 0.0 };
        }
        dh.mul_(&relu)?;
        let mut gw1 = s.temp::<f32>(self.w1.grad, &self.w1.shape)?;
        gemm(
            1.0,
            x.view::<Ix2>()?.t(),
            dh.view::<Ix2>()?,
            0.0,
            gw1.view_mut::<Ix2>()?,
        )?;
        let mut gb1 = s.temp::<f32>(self.b1.grad, &self.b1.shape)?;
        column_sums(dh.as_slice(), hd, gb1.as_mut_slice());
        Ok(())
    }

    /// A checksum of the weights, computed as `Net::checksum` does.
    pub fn checksum(&self, rec: &mut Recorder<HostDevice>) -> Result<f64> {
        let mut total = 0.0;
        for p in [&self.w1, &self.b1, &self.w2, &self.b2] {
            let mut host = vec![0.0f32; p.shape.iter().product()];
            rec.read(p.value, &mut host)?;
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
    x: L<'s, f32>,
    h: L<'s, f32>,
    pooled: L<'s, f32>,
    probs: L<'s, f32>,
    lengths: L<'s, i32>,
    labels: L<'s, i32>,
    w2: L<'s, f32>,
    mask: DropoutMask,
}

/// One Adam update of a parameter from its gradient, which backward left in
/// the gradient's site.
fn adam(s: &RecordStep<'_, HostDevice>, p: &Param, lr: f32, t: u32) -> Result<()> {
    let mut w = s.lease(p.value)?;
    let g = s.temp::<f32>(p.grad, &p.shape)?;
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
