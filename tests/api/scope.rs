//! One step API: a model step written once against `StepScope` runs on a
//! planned arena and on a recorder (recording, then frozen) with the same
//! results, through every lease operation; the recorder learns the specs
//! the arena's planner was given by hand.

use ndarray::Ix2;
use tensor_arena::ops::gemm;
use tensor_arena::{
    Arena, Buffer, Error, HostAccessible, HostDevice, Kernels, LeaseOf, LeaseOps, Mode, Phase,
    Planner, Recorder, StepScope,
};

type R = tensor_arena::Result<()>;

/// The handles the step needs, whichever way they were declared.
#[derive(Clone, Copy)]
struct Handles {
    w: Buffer<f32>,
    train: Mode,
    eval: Mode,
    bwd: Phase,
}

/// One training step of every lease operation: host copies and views, a
/// product, a u8 input mask, dropout and its backward, products with
/// operands, reshapes.
fn train<S>(s: &S, h: Handles, batch: usize) -> tensor_arena::Result<Vec<f32>>
where
    S: StepScope,
    S::Device: Kernels + HostAccessible,
{
    let w = s.lease(h.w)?;
    let mut x: LeaseOf<'_, S, f32> = s.temp("x", &[batch, 16])?;
    let data: Vec<f32> = (0..batch * 16)
        .map(|i| (i % 13) as f32 * 0.25 - 1.5)
        .collect();
    x.copy_from_host(&data)?;
    {
        let mut keep = s.temp::<u8>("keep", &[batch, 16])?;
        keep.bernoulli_(0.75)?;
        x.apply_mask_(&keep, 1.0 / 0.75)?;
    }
    let mut y = s.temp::<f32>("y", &[batch, 16])?;
    gemm(
        1.0,
        x.view::<Ix2>()?,
        w.view::<Ix2>()?,
        0.0,
        y.view_mut::<Ix2>()?,
    )?;
    let mask = y.dropout_(0.1)?;
    assert!(!y.is_empty() && y.capacity() >= y.len());
    s.enter(h.bwd)?;
    let mut g = s.temp::<f32>("g", &[batch, 16])?;
    g.as_mut_slice().copy_from_slice(y.as_slice());
    g.dropout_backward_(&mask)?;
    g.mul_(&y)?;
    g.mul_scalar_(0.5)?;
    // A flattened view of the same buffer: the element-count rule.
    g.set_shape(&[batch * 16])?;
    let g = g.with_shape(&[16, batch])?;
    assert_eq!(g.shape(), &[16, batch]);
    let mut out = vec![0.0; g.len()];
    g.copy_to_host(&mut out)?;
    assert_eq!(g.name(), "g");
    Ok(out)
}

/// An evaluation step, in its own mode, with a larger batch.
fn eval<S>(s: &S, h: Handles, batch: usize) -> tensor_arena::Result<f32>
where
    S: StepScope,
    S::Device: Kernels + HostAccessible,
{
    let w = s.lease(h.w)?;
    let mut x = s.temp::<f32>("x", &[batch, 16])?;
    x.as_mut_slice().fill(1.0);
    let mut y = s.temp::<f32>("y", &[batch, 16])?;
    gemm(
        1.0,
        x.view::<Ix2>()?,
        w.view::<Ix2>()?,
        0.0,
        y.view_mut::<Ix2>()?,
    )?;
    assert!(!s.is_recording() || s.phase() == "forward");
    Ok(y.as_slice().iter().sum())
}

fn weights() -> Vec<f32> {
    (0..256).map(|i| (i % 11) as f32 * 0.1 - 0.5).collect()
}

#[test]
fn one_model_runs_on_a_planned_arena_and_on_a_recorder() -> R {
    // Planned: every buffer declared by hand.
    let mut p = Planner::new();
    let train_mode = p.mode("train")?;
    let eval_mode = p.mode("eval")?;
    let fwd = p.phase_in(train_mode, "forward")?;
    let bwd = p.phase_in(train_mode, "backward")?;
    let efwd = p.phase_in(eval_mode, "forward")?;
    let w = p.persistent::<f32>("w", &[16, 16])?;
    p.span::<f32>("x", &[8, 16], fwd, bwd)?;
    p.span::<u8>("keep", &[8, 16], fwd, fwd)?;
    p.span::<f32>("y", &[8, 16], fwd, bwd)?;
    p.span::<f32>("g", &[8, 16], bwd, bwd)?;
    p.span::<f32>("x", &[64, 16], efwd, efwd)?;
    p.span::<f32>("y", &[64, 16], efwd, efwd)?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.write(w, &weights())?;
    arena.set_seed(21);
    let hp = Handles {
        w,
        train: train_mode,
        eval: eval_mode,
        bwd,
    };

    // Recorded: the modes, phases and the weight declared, the rest learned.
    let mut rec = Recorder::new(HostDevice::new());
    let rtrain = rec.mode("train")?;
    let reval = rec.mode("eval")?;
    rec.phase_in(rtrain, "forward")?;
    let rbwd = rec.phase_in(rtrain, "backward")?;
    rec.phase_in(reval, "forward")?;
    let rw = rec.persistent::<f32>("w", &[16, 16])?;
    rec.write(rw, &weights())?;
    rec.set_seed(21);
    let hr = Handles {
        w: rw,
        train: rtrain,
        eval: reval,
        bwd: rbwd,
    };

    for (k, batch) in [8, 5, 8, 3].into_iter().enumerate() {
        if k == 2 {
            rec.freeze()?;
        }
        let planned = arena.step_in(hp.train, |s| train(s, hp, batch))?;
        let recorded = rec.step_in(hr.train, |s| train(s, hr, batch))?;
        assert_eq!(planned, recorded, "training step {k}");
        let planned = arena.step_in(hp.eval, |s| eval(s, hp, 64))?;
        let recorded = rec.step_in(hr.eval, |s| eval(s, hr, 64))?;
        assert_eq!(planned, recorded, "evaluation step {k}");
    }
    // The recorder learned what was declared by hand.
    let (a, b) = (arena.plan(), rec.plan().ok_or(Error::EmptyPlan)?);
    assert_eq!(a.slab_bytes(), b.slab_bytes());
    let shapes = |p: &tensor_arena::Plan| {
        p.buffers()
            .iter()
            .map(|b| {
                (
                    b.name().to_owned(),
                    b.mode(),
                    b.padded_shape().to_vec(),
                    b.dtype().name(),
                )
            })
            .collect::<Vec<_>>()
    };
    let (mut sa, mut sb) = (shapes(a), shapes(b));
    sa.sort();
    sb.sort();
    assert_eq!(sa, sb);
    assert_eq!(rec.arena().map(|a| a.stats().device.alloc_calls), Some(1));
    Ok(())
}
