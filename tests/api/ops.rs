//! In-place kernels on leases: RNG contract, statistics, dropout forward and
//! backward, chunking and threads, half types, bad input.

use approx::assert_relative_eq;
use tensor_arena::device::PARALLEL_THRESHOLD;
use tensor_arena::ops::{self, RngState};
use tensor_arena::{Arena, Error, HostDevice, Planner, bf16, f16};

type R = tensor_arena::Result<()>;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn rng_md_check_value_through_a_lease() -> R {
    let mut p = Planner::new();
    let m = p.step::<f32>("m", &[16])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.set_seed(1234);
    arena.step(|s| -> R {
        let mut m = s.lease(m)?;
        let used = m.bernoulli_(0.5)?;
        assert_eq!(used, RngState::new(1234));
        let got: Vec<u8> = m.as_slice().iter().map(|&v| v as u8).collect();
        assert_eq!(got, [1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0]);
        Ok(())
    })?;
    // 16 elements advance the stream by 16.
    assert_eq!(arena.rng_state().offset, 16);
    Ok(())
}

#[test]
fn bernoulli_frequency_is_within_five_sigma() -> R {
    const N: usize = 1_000_000;
    let mut p = Planner::new();
    let m = p.step::<f32>("m", &[N])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.set_seed(0x5eed);
    for prob in [0.01f32, 0.1, 0.5, 0.9, 0.999] {
        let ones = arena.step(|s| -> tensor_arena::Result<f64> {
            let mut m = s.lease(m)?;
            m.bernoulli_(prob)?;
            Ok(m.as_slice().iter().map(|&v| f64::from(v)).sum())
        })?;
        let p = f64::from(prob);
        let mean = N as f64 * p;
        let sigma = (N as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (ones - mean).abs() < 5.0 * sigma,
            "p {prob}: {ones} ones, expected {mean} +- {sigma}"
        );
    }
    Ok(())
}

#[test]
fn dropout_preserves_the_mean_and_backward_replays_the_mask() -> R {
    const N: usize = 200_000;
    let mut p = Planner::new();
    let fwd = p.phase("forward")?;
    let bwd = p.phase("backward")?;
    let x = p.span::<f32>("x", &[N], fwd, fwd)?;
    let g = p.span::<f32>("g", &[N], bwd, bwd)?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.set_seed(77);
    arena.step(|s| -> R {
        let mut x = s.lease(x)?;
        x.as_mut_slice().fill(1.0);
        let mask = x.dropout_(0.3)?;
        let kept: Vec<bool> = x.as_slice().iter().map(|&v| v != 0.0).collect();
        let mean = x.as_slice().iter().map(|&v| f64::from(v)).sum::<f64>() / N as f64;
        // Each element is 1/0.7 with probability 0.7: mean 1, variance 3/7.
        let sigma = (0.3 / 0.7 / N as f64).sqrt();
        assert!((mean - 1.0).abs() < 5.0 * sigma, "mean {mean}");
        drop(x);
        s.enter(bwd)?;
        let mut g = s.lease(g)?;
        g.as_mut_slice().fill(2.0);
        g.dropout_backward_(&mask)?;
        for (i, (&gv, &k)) in g.as_slice().iter().zip(&kept).enumerate() {
            let want = if k { 2.0 * (1.0 / 0.7f32) } else { 0.0 };
            assert_eq!(gv.to_bits(), want.to_bits(), "element {i}");
        }
        // A backward on a view of another length is refused.
        g.set_shape(&[N - 1])?;
        assert!(matches!(
            g.dropout_backward_(&mask),
            Err(Error::MaskLengthMismatch { .. })
        ));
        Ok(())
    })?;
    // Backward does not move the stream; forward moved it by N.
    assert_eq!(arena.rng_state().offset, N as u64);
    Ok(())
}

#[test]
fn full_chunked_and_threaded_runs_are_identical() -> R {
    let n = 3 * PARALLEL_THRESHOLD + 1234;
    let rng = RngState {
        seed: 0xfeed,
        offset: 40,
    };
    let input: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 48.0).collect();

    // Full, through the slice API.
    let mut full = input.clone();
    ops::dropout(&mut full, 0.25, rng)?;

    // Chunked at awkward boundaries: each chunk starts where it sits.
    let mut chunked = input.clone();
    let mut pos = 0;
    for len in [1, 3, 62, 64, 65, 1000, 4097].iter().cycle() {
        if pos >= n {
            break;
        }
        let end = (pos + len).min(n);
        let at = RngState {
            seed: rng.seed,
            offset: rng.offset + pos as u64,
        };
        ops::dropout(&mut chunked[pos..end], 0.25, at)?;
        pos = end;
    }
    assert_eq!(bits(&full), bits(&chunked));

    // Threaded, through an arena on a host device with workers.
    for threads in [1, 2, 3] {
        let mut p = Planner::new();
        let x = p.step::<f32>("x", &[n])?;
        let dev = HostDevice::new().with_threads(threads)?;
        assert_eq!(dev.threads(), threads);
        let mut arena = Arena::new(dev, p.plan()?)?;
        arena.set_rng_state(rng);
        let out = arena.step(|s| -> tensor_arena::Result<Vec<f32>> {
            let mut x = s.lease(x)?;
            x.copy_from_host(&input)?;
            x.dropout_(0.25)?;
            Ok(x.as_slice().to_vec())
        })?;
        assert_eq!(bits(&full), bits(&out), "{threads} threads");
    }
    Ok(())
}

#[test]
fn saved_rng_state_redraws_the_same_masks() -> R {
    let mut p = Planner::new();
    let m = p.step::<f32>("m", &[1000])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.set_seed(5);
    let draw = |arena: &mut Arena<HostDevice>| {
        arena.step(|s| -> tensor_arena::Result<Vec<f32>> {
            let mut m = s.lease(m)?;
            m.bernoulli_(0.5)?;
            Ok(m.as_slice().to_vec())
        })
    };
    draw(&mut arena)?;
    let checkpoint = arena.rng_state();
    let a = draw(&mut arena)?;
    let b = draw(&mut arena)?;
    assert_ne!(a, b, "consecutive draws differ");
    arena.set_rng_state(checkpoint);
    assert_eq!(draw(&mut arena)?, a);
    assert_eq!(draw(&mut arena)?, b);
    Ok(())
}

#[test]
fn half_types_agree_with_f32_within_their_precision() -> R {
    const N: usize = 4096;
    let mut p = Planner::new();
    let xf = p.step::<f32>("xf", &[N])?;
    let xh = p.step::<f16>("xh", &[N])?;
    let xb = p.step::<bf16>("xb", &[N])?;
    let y = p.step::<f16>("y", &[N])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    let input: Vec<f32> = (0..N).map(|i| (i as f32 * 0.37).sin() * 4.0).collect();
    arena.step(|s| -> R {
        let rng = RngState::new(11);
        let mut f = s.lease(xf)?;
        f.copy_from_host(&input)?;
        let mut h = s.lease(xh)?;
        h.copy_from_host(&input.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>())?;
        let mut b = s.lease(xb)?;
        b.copy_from_host(&input.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>())?;
        ops::dropout(f.as_mut_slice(), 0.5, rng)?;
        ops::dropout(h.as_mut_slice(), 0.5, rng)?;
        ops::dropout(b.as_mut_slice(), 0.5, rng)?;
        for i in 0..N {
            let (fv, hv, bv) = (
                f.as_slice()[i],
                h.as_slice()[i].to_f32(),
                b.as_slice()[i].to_f32(),
            );
            // Same mask: zero in the same places.
            assert_eq!(fv == 0.0, hv == 0.0, "element {i}");
            assert_eq!(fv == 0.0, bv == 0.0, "element {i}");
            assert_relative_eq!(fv, hv, max_relative = 1e-3, epsilon = 1e-3);
            assert_relative_eq!(fv, bv, max_relative = 1e-2, epsilon = 1e-2);
        }
        // Two-operand kernels on f16 leases.
        let mut yv = s.lease(y)?;
        yv.copy_from_host(&vec![f16::from_f32(0.5); N])?;
        h.mul_(&yv)?;
        h.mul_scalar_(2.0)?;
        for i in 0..N {
            assert_relative_eq!(
                h.as_slice()[i].to_f32(),
                f.as_slice()[i],
                max_relative = 1e-3,
                epsilon = 1e-3
            );
        }
        Ok(())
    })
}

#[test]
fn mask_and_multiply_on_leases() -> R {
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[8])?;
    let m = p.step::<f32>("m", &[8])?;
    let other = p.step::<f32>("other", &[4])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.step(|s| -> R {
        let mut x = s.lease(x)?;
        x.copy_from_host(&[1., 2., 3., 4., 5., 6., 7., 8.])?;
        let mut m = s.lease(m)?;
        m.copy_from_host(&[1., 0., 1., 0., 1., 0., 1., 0.])?;
        x.apply_mask_(&m, 2.0)?;
        assert_eq!(x.as_slice(), &[2., 0., 6., 0., 10., 0., 14., 0.]);
        x.mul_(&m)?;
        assert_eq!(x.as_slice(), &[2., 0., 6., 0., 10., 0., 14., 0.]);
        x.mul_scalar_(0.5)?;
        assert_eq!(x.as_slice(), &[1., 0., 3., 0., 5., 0., 7., 0.]);
        // Shapes must match: same element count but another shape is refused.
        m.set_shape(&[2, 4])?;
        let err = x.mul_(&m).unwrap_err();
        assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
        assert!(err.to_string().contains("'x'") && err.to_string().contains("'m'"));
        let o = s.lease(other)?;
        assert!(matches!(
            x.apply_mask_(&o, 1.0),
            Err(Error::ShapeMismatch { .. })
        ));
        // Bad probabilities leave the view and the stream alone.
        let before = x.as_slice().to_vec();
        for bad in [-0.5, 1.01, f32::NAN] {
            assert!(matches!(
                x.bernoulli_(bad),
                Err(Error::InvalidProbability { .. })
            ));
            assert!(matches!(
                x.dropout_(bad),
                Err(Error::InvalidProbability { .. })
            ));
        }
        assert_eq!(x.as_slice(), &before[..]);
        Ok(())
    })?;
    assert_eq!(arena.rng_state().offset, 0);
    Ok(())
}

#[test]
fn operands_from_another_arena_are_refused() -> R {
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[8])?;
    let plan = p.plan()?;
    let mut a = Arena::new(HostDevice::new(), plan.clone())?;
    let mut b = Arena::new(HostDevice::new(), plan)?;
    let sa = a.begin_step();
    let sb = b.begin_step();
    let mut xa = sa.lease(x)?;
    let xb = sb.lease(x)?;
    assert!(matches!(xa.mul_(&xb), Err(Error::ArenaMismatch { .. })));
    Ok(())
}
