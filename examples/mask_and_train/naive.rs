//! The same training written the way the field's bad loop is written: every
//! step creates its masks and temporaries anew, at the shape of that step,
//! and the matrix products allocate their results (ndarray `dot`, which also
//! allocates packing buffers inside matrixmultiply).
//!
//! On an NPU each of those temporaries is a request to torch_npu's caching
//! allocator; here they also go through this crate's model of it, so the
//! run can report the device-side traffic the arena removes.

use std::time::Instant;

use ndarray::{Array1, Array2, Axis};
use tensor_arena::caching::{BlockId, CachingAllocator, CachingConfig, CachingStats};
use tensor_arena::ops::{self, RngState};
use tensor_arena::{CountingAllocator, Result};

use crate::data::{Batch, Dataset, Loader};
use crate::model::initial_weights;
use crate::train::{Config, Progress};

/// What the naive run measured.
pub struct NaiveReport {
    pub steps_per_sec: f64,
    pub last_loss: f64,
    pub steady_heap_allocs: u64,
    pub steady_steps: u64,
    /// Temporaries requested from the caching-allocator model, summed over
    /// steady steps.
    pub steady_device_requests: u64,
    pub model: CachingStats,
}

/// The caching-allocator model standing in for the device: every temporary
/// is requested when created and released at the end of the step.
struct DeviceModel {
    alloc: CachingAllocator,
    live: Vec<BlockId>,
    requests: u64,
}

impl DeviceModel {
    fn track<T>(&mut self, a: T, bytes: usize) -> T {
        if let Ok(id) = self.alloc.malloc(bytes as u64) {
            self.live.push(id);
        }
        self.requests += 1;
        a
    }

    fn end_step(&mut self) {
        for id in self.live.drain(..) {
            self.alloc.free(id);
        }
    }
}

struct Params {
    w1: Array2<f32>,
    b1: Array1<f32>,
    w2: Array2<f32>,
    b2: Array1<f32>,
    moments: [(Vec<f32>, Vec<f32>); 4],
}

fn init(cfg: &Config) -> Params {
    let (f, h, c) = (cfg.sizes.features, cfg.sizes.hidden, cfg.sizes.classes);
    let uniform = |n, fan_in, stream| initial_weights(cfg.seed, n, fan_in, stream);
    let zeros = |n: usize| (vec![0.0; n], vec![0.0; n]);
    Params {
        w1: Array2::from_shape_vec((f, h), uniform(f * h, f, 1))
            .unwrap_or_else(|_| Array2::zeros((f, h))),
        b1: Array1::zeros(h),
        w2: Array2::from_shape_vec((h, c), uniform(h * c, h, 2))
            .unwrap_or_else(|_| Array2::zeros((h, c))),
        b2: Array1::zeros(c),
        moments: [zeros(f * h), zeros(h), zeros(h * c), zeros(c)],
    }
}

/// A fresh mask from the stream, advancing it: what a framework's
/// `bernoulli` returns as a new tensor each call.
fn fresh_mask(rng: &mut RngState, p: f32, rows: usize, cols: usize) -> Result<Array2<f32>> {
    let mut v = vec![0.0; rows * cols];
    ops::bernoulli(&mut v, p, *rng)?;
    *rng = rng.advanced(v.len())?;
    Ok(Array2::from_shape_vec((rows, cols), v).unwrap_or_else(|_| Array2::zeros((rows, cols))))
}

/// Runs the naive loop for `cfg.steps` steps.
pub fn train_naive(cfg: &Config, mut progress: impl FnMut(&Progress)) -> Result<NaiveReport> {
    let (train, _) = crate::train::datasets(cfg);
    let mut params = init(cfg);
    let mut loader = Loader::new(train.len(), cfg.batch, cfg.seed);
    let mut dev = DeviceModel {
        alloc: CachingAllocator::new(CachingConfig::default()),
        live: Vec::new(),
        requests: 0,
    };
    let mut rng = RngState::new(cfg.seed);
    let log_every = cfg.log_every.max(1);
    let (mut heap, mut requests, mut steady) = (0u64, 0u64, 0u64);
    let (mut loss_sum, mut correct, mut samples, mut window_steps) = (0.0, 0usize, 0usize, 0usize);
    let mut last_loss = f64::NAN;
    let started = Instant::now();
    let mut window_start = Instant::now();
    for step in 1..=cfg.steps {
        let heap_before = CountingAllocator::thread_counts().allocations;
        let req_before = dev.requests;
        let batch = loader.next(&train);
        let (l, c, n) = bad_step(
            cfg,
            &train,
            &batch,
            &mut params,
            &mut rng,
            &mut dev,
            step as i32,
        )?;
        dev.end_step();
        if step > 1 {
            heap += CountingAllocator::thread_counts().allocations - heap_before;
            requests += dev.requests - req_before;
            steady += 1;
        }
        (loss_sum, correct, samples, window_steps) =
            (loss_sum + l, correct + c, samples + n, window_steps + 1);
        if step % log_every == 0 || step == cfg.steps {
            last_loss = loss_sum / samples.max(1) as f64;
            progress(&Progress {
                step,
                loss: last_loss,
                accuracy: correct as f64 / samples.max(1) as f64,
                steps_per_sec: window_steps as f64 / window_start.elapsed().as_secs_f64(),
            });
            (loss_sum, correct, samples, window_steps) = (0.0, 0, 0, 0);
            window_start = Instant::now();
        }
    }
    Ok(NaiveReport {
        steps_per_sec: cfg.steps as f64 / started.elapsed().as_secs_f64(),
        last_loss,
        steady_heap_allocs: heap,
        steady_steps: steady,
        steady_device_requests: requests,
        model: dev.alloc.stats(),
    })
}

/// One step, every tensor a new allocation. Returns (loss sum, correct, samples).
fn bad_step(
    cfg: &Config,
    data: &Dataset,
    batch: &Batch<'_>,
    p: &mut Params,
    rng: &mut RngState,
    dev: &mut DeviceModel,
    t: i32,
) -> Result<(f64, usize, usize)> {
    let (f, hd, c) = (cfg.sizes.features, cfg.sizes.hidden, cfg.sizes.classes);
    let (b, l) = (batch.samples.len(), batch.len);
    let rows = b * l;
    let bytes = |n: usize| n * 4;

    let mut x = dev.track(Array2::<f32>::zeros((rows, f)), bytes(rows * f));
    for (k, &s) in batch.samples.iter().enumerate() {
        let len = data.lengths[s];
        let src = &data.tokens[s * data.max_len * f..][..len * f];
        for (t, tok) in src.chunks_exact(f).enumerate() {
            x.row_mut(k * l + t)
                .iter_mut()
                .zip(tok)
                .for_each(|(d, v)| *d = *v);
        }
    }
    let keep = dev.track(
        fresh_mask(rng, cfg.hyper.input_keep, rows, f)?,
        bytes(rows * f),
    );
    let x = dev.track(&x * &keep * (1.0 / cfg.hyper.input_keep), bytes(rows * f));
    let pre = dev.track(x.dot(&p.w1) + &p.b1, bytes(rows * hd));
    let relu = dev.track(pre.mapv(|v| v.max(0.0)), bytes(rows * hd));
    let q = 1.0 - cfg.hyper.dropout;
    let drop_mask = dev.track(fresh_mask(rng, q, rows, hd)?, bytes(rows * hd));
    let h = dev.track(&relu * &drop_mask * (1.0 / q), bytes(rows * hd));
    let mut pooled = dev.track(Array2::<f32>::zeros((b, hd)), bytes(b * hd));
    for (k, &s) in batch.samples.iter().enumerate() {
        let len = data.lengths[s];
        let mean = h
            .slice(ndarray::s![k * l..k * l + len, ..])
            .mean_axis(Axis(0));
        if let Some(mean) = mean {
            pooled.row_mut(k).assign(&mean);
        }
    }
    let logits = dev.track(pooled.dot(&p.w2) + &p.b2, bytes(b * c));
    let mut probs = dev.track(logits.clone(), bytes(b * c));
    let (mut loss, mut correct) = (0.0, 0);
    for (k, mut row) in probs.axis_iter_mut(Axis(0)).enumerate() {
        let y = data.labels[batch.samples[k]];
        let max = row.fold(f32::NEG_INFINITY, |a, &v| a.max(v));
        let best = row.iter().position(|&v| v == max).unwrap_or(0);
        row.mapv_inplace(|v| (v - max).exp());
        let sum = row.sum();
        row.mapv_inplace(|v| v / sum);
        loss -= f64::from(row[y].max(1e-30).ln());
        correct += usize::from(best == y);
    }

    let mut dlogits = dev.track(probs.clone(), bytes(b * c));
    for (k, mut row) in dlogits.axis_iter_mut(Axis(0)).enumerate() {
        row[data.labels[batch.samples[k]]] -= 1.0;
        row.mapv_inplace(|v| v / b as f32);
    }
    let gw2 = dev.track(pooled.t().dot(&dlogits), bytes(hd * c));
    let gb2 = dev.track(dlogits.sum_axis(Axis(0)), bytes(c));
    let dpooled = dev.track(dlogits.dot(&p.w2.t()), bytes(b * hd));
    let mut dh = dev.track(Array2::<f32>::zeros((rows, hd)), bytes(rows * hd));
    for (k, &s) in batch.samples.iter().enumerate() {
        let len = data.lengths[s];
        let g = dev.track(dpooled.row(k).mapv(|v| v / len as f32), bytes(hd));
        for t in 0..len {
            dh.row_mut(k * l + t).assign(&g);
        }
    }
    let dh = dev.track(&dh * &drop_mask * (1.0 / q), bytes(rows * hd));
    let relu_mask = dev.track(
        relu.mapv(|v| if v > 0.0 { 1.0f32 } else { 0.0 }),
        bytes(rows * hd),
    );
    let dh = dev.track(&dh * &relu_mask, bytes(rows * hd));
    let gw1 = dev.track(x.t().dot(&dh), bytes(f * hd));
    let gb1 = dev.track(dh.sum_axis(Axis(0)), bytes(hd));

    let lr = cfg.hyper.lr;
    // AdamW without weight decay, as the arena loop (and aclnnApplyAdamWV2).
    let bc1 = 1.0 - 0.9f32.powf(t as f32);
    let bc2 = 1.0 - 0.999f32.powf(t as f32);
    let grads: [&[f32]; 4] = [
        gw1.as_slice().unwrap_or_default(),
        gb1.as_slice().unwrap_or_default(),
        gw2.as_slice().unwrap_or_default(),
        gb2.as_slice().unwrap_or_default(),
    ];
    let values: [&mut [f32]; 4] = [
        p.w1.as_slice_mut().unwrap_or_default(),
        p.b1.as_slice_mut().unwrap_or_default(),
        p.w2.as_slice_mut().unwrap_or_default(),
        p.b2.as_slice_mut().unwrap_or_default(),
    ];
    for ((w, g), (m, v)) in values.into_iter().zip(grads).zip(p.moments.iter_mut()) {
        // Written as a framework would: each expression a new tensor.
        let g = Array1::from(g.to_vec());
        let new_m = dev.track(Array1::from(m.clone()) * 0.9 + &g * 0.1, bytes(g.len()));
        let new_v = dev.track(
            Array1::from(v.clone()) * 0.999 + &g * &g * 0.001,
            bytes(g.len()),
        );
        let delta = dev.track(
            &new_m.mapv(|m| lr * (m / bc1)) / &(new_v.mapv(|v| (v / bc2).sqrt()) + 1e-8),
            bytes(g.len()),
        );
        w.iter_mut().zip(delta.iter()).for_each(|(w, d)| *w -= d);
        *m = new_m.to_vec();
        *v = new_v.to_vec();
    }
    Ok((loss, correct, b))
}
