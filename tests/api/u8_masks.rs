//! u8 masks: `bernoulli_` into a u8 buffer and `apply_mask_` with a u8
//! mask make the f32 path's decisions bit for bit, on host leases (one and
//! several threads), on a recorder while recording and frozen, and, once
//! the AscendC u8 kernels are in the kernel library, on the simulated
//! Ascend device and the AscendC CPU shim.

use tensor_arena::device::PARALLEL_THRESHOLD;
use tensor_arena::device::ascend::AscendDevice;
use tensor_arena::ops::{self, Kernel, RngState};
use tensor_arena::{
    Arena, DType, Device, Error, HostDevice, Kernels, Planner, Recorder, Region, bf16, f16,
};

use crate::support::elem::Elem;
use crate::support::sim;

type R = tensor_arena::Result<()>;

/// Lengths around the tile, chunk and thread boundaries.
const LENGTHS: [usize; 6] = [1, 63, 64, 1000, 4097, PARALLEL_THRESHOLD + 333];

fn values<T: Elem>(n: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f32((i % 97) as f32 * 0.37 - 11.0))
        .collect()
}

/// A host arena with `threads` threads draws a mask of `T` and a u8 mask
/// from the same stream position and applies each to the same values:
/// returns the float mask (as 0/1 bytes), the u8 mask and both results.
type Paths<T> = (Vec<u8>, Vec<u8>, Vec<T>, Vec<T>);

fn on_host<T: Elem>(n: usize, threads: usize, p: f32, seed: u64) -> tensor_arena::Result<Paths<T>> {
    let mut planner = Planner::new();
    let xf = planner.step::<T>("xf", &[n])?;
    let mf = planner.step::<T>("mf", &[n])?;
    let xu = planner.step::<T>("xu", &[n])?;
    let mu = planner.step::<u8>("mu", &[n])?;
    let device = HostDevice::new().with_threads(threads)?;
    let mut arena = Arena::new(device, planner.plan()?)?;
    let x = values::<T>(n);
    let scale = 1.0 / p.max(1e-3);
    let one = T::from_f32(1.0).bits();
    arena.set_seed(seed);
    let (fmask, by_f) = arena.step(|s| -> tensor_arena::Result<_> {
        let mut m = s.lease(mf)?;
        m.bernoulli_(p)?;
        let mut v = s.lease(xf)?;
        v.copy_from_host(&x)?;
        v.apply_mask_(&m, scale)?;
        let mask = m
            .as_slice()
            .iter()
            .map(|b| u8::from(b.bits() == one))
            .collect();
        Ok((mask, v.as_slice().to_vec()))
    })?;
    arena.set_seed(seed);
    let (umask, by_u) = arena.step(|s| -> tensor_arena::Result<_> {
        let mut m = s.lease(mu)?;
        m.bernoulli_(p)?;
        let mut v = s.lease(xu)?;
        v.copy_from_host(&x)?;
        v.apply_mask_(&m, scale)?;
        Ok((m.as_slice().to_vec(), v.as_slice().to_vec()))
    })?;
    Ok((fmask, umask, by_f, by_u))
}

fn host_paths_agree<T: Elem>() -> R {
    for (k, &n) in LENGTHS.iter().enumerate() {
        for threads in [1, 3] {
            let p = [0.9, 0.5, 1.0 / 16_777_216.0, 1.0, 0.0, 0.3][k];
            let (fmask, umask, by_f, by_u) = on_host::<T>(n, threads, p, 77 + k as u64)?;
            assert_eq!(umask.len(), n);
            assert_eq!(
                fmask,
                umask,
                "{} n {n} threads {threads}: the decisions differ",
                T::DTYPE
            );
            let bits = |v: &[T]| v.iter().map(|x| x.bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&by_f),
                bits(&by_u),
                "{} n {n} threads {threads}",
                T::DTYPE
            );
            // And the reference on plain slices.
            let mut reference = vec![0u8; n];
            let rng = RngState::new(77 + k as u64);
            ops::bernoulli(&mut reference, p, rng)?;
            assert_eq!(reference, umask);
        }
    }
    Ok(())
}

#[test]
fn u8_masks_on_host_leases_are_the_f32_masks_bit_for_bit() -> R {
    host_paths_agree::<f32>()?;
    host_paths_agree::<f16>()?;
    host_paths_agree::<bf16>()
}

#[test]
fn u8_masks_advance_the_stream_as_f32_masks_do() -> R {
    let mut p = Planner::new();
    let a = p.step::<u8>("a", &[10])?;
    let b = p.step::<f32>("b", &[10])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.set_seed(5);
    let (ra, rb) = arena.step(|s| -> tensor_arena::Result<_> {
        Ok((s.lease(a)?.bernoulli_(0.5)?, s.lease(b)?.bernoulli_(0.5)?))
    })?;
    assert_eq!((ra.offset, rb.offset), (0, 12), "10 rounded up to 4");
    Ok(())
}

#[test]
fn u8_mask_misuse_is_an_error() -> R {
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[64])?;
    let m = p.step::<u8>("m", &[32])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.step(|s| -> R {
        let mut x = s.lease(x)?;
        let mut m = s.lease(m)?;
        assert!(matches!(
            m.bernoulli_(1.5),
            Err(Error::InvalidProbability { .. })
        ));
        assert!(matches!(
            x.apply_mask_(&m, 2.0),
            Err(Error::ShapeMismatch { .. })
        ));
        x.set_shape(&[32])?;
        m.bernoulli_(0.5)?;
        x.apply_mask_(&m, 2.0)
    })?;
    // The device refuses what no lease method can ask for.
    let dev = HostDevice::new();
    let slab = dev.reserve(4096, 512)?;
    let x = Region {
        offset: 0,
        len: 256,
    };
    let bytes = Region {
        offset: 1024,
        len: 64,
    };
    let wrong = Region {
        offset: 1024,
        len: 256,
    };
    let k = Kernel::ApplyMaskU8 { scale: 1.0 };
    dev.launch(&slab, &k, DType::F32, x, Some(bytes))?;
    assert!(
        dev.launch(&slab, &k, DType::F32, x, Some(wrong)).is_err(),
        "a mask of 64 elements of f32"
    );
    assert!(
        dev.launch(&slab, &k, DType::U8, bytes, Some(x)).is_err(),
        "u8 values"
    );
    let mul = Kernel::MulScalar { s: 2.0 };
    assert!(
        dev.launch(&slab, &mul, DType::U8, bytes, None).is_err(),
        "only bernoulli writes u8"
    );
    Ok(())
}

#[test]
fn recorded_and_frozen_u8_masks_match_planned_ones() -> R {
    let step = |rec: &mut Recorder<HostDevice>| {
        rec.step(|s| -> tensor_arena::Result<Vec<f32>> {
            let mut x = s.temp::<f32>("x", &[300])?;
            x.as_mut_slice()
                .iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v = i as f32);
            let mut keep = s.temp::<u8>("keep", &[300])?;
            keep.bernoulli_(0.7)?;
            x.apply_mask_(&keep, 2.0)?;
            Ok(x.as_slice().to_vec())
        })
    };
    let mut rec = Recorder::new(HostDevice::new());
    rec.set_seed(11);
    let recorded = step(&mut rec)?;
    let plan = rec.freeze()?;
    assert_eq!(plan.buffers()[1].dtype(), DType::U8);
    rec.set_seed(11);
    let frozen = step(&mut rec)?;
    assert_eq!(recorded, frozen);
    let mut mask = vec![0u8; 300];
    ops::bernoulli(&mut mask, 0.7, RngState::new(11))?;
    let want: Vec<f32> = (0..300)
        .map(|i| if mask[i] == 1 { 2.0 * i as f32 } else { 0.0 })
        .collect();
    assert_eq!(recorded, want);
    Ok(())
}

/// u8 masks on the simulated Ascend device: bit for bit the host's.
fn ascend_u8_masks<T: Elem>(dev: &AscendDevice) -> R {
    for n in [1usize, 64, 1000, 70_001] {
        let p = 0.6f32;
        let mut planner = Planner::new();
        let x = planner.step::<T>("x", &[n])?;
        let m = planner.step::<u8>("m", &[n])?;
        let mut arena = Arena::new(dev.clone(), planner.plan()?)?;
        arena.set_seed(1234);
        let (mask, out) = arena.step(|s| -> tensor_arena::Result<_> {
            let mut m = s.lease(m)?;
            m.bernoulli_(p)?;
            let mut x = s.lease(x)?;
            x.copy_from_host(&values::<T>(n))?;
            x.apply_mask_(&m, 1.5)?;
            let mut mask = vec![0u8; n];
            m.copy_to_host(&mut mask)?;
            let mut out = vec![T::from_f32(0.0); n];
            x.copy_to_host(&mut out)?;
            Ok((mask, out))
        })?;
        let mut want_mask = vec![0u8; n];
        ops::bernoulli(&mut want_mask, p, RngState::new(1234))?;
        assert_eq!(mask, want_mask, "{} n {n}", T::DTYPE);
        let mut want = values::<T>(n);
        ops::apply_mask(&mut want, &want_mask, 1.5)?;
        let bits = |v: &[T]| v.iter().map(|x| x.bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out), bits(&want), "{} n {n}", T::DTYPE);
    }
    Ok(())
}

#[test]
fn u8_masks_on_the_simulated_device_run_their_own_kernels() -> R {
    // The kernel library has ta_bernoulli_u8 and ta_apply_mask_u8_*: a u8
    // mask runs through them (a missing symbol would be MissingSymbol
    // naming it, never a kernel of another element type).
    let s = sim::sim();
    s.reset();
    let dev = AscendDevice::new(sim::config())?;
    let mut planner = Planner::new();
    let m = planner.step::<u8>("m", &[256])?;
    let x = planner.step::<f32>("x", &[256])?;
    let mut arena = Arena::new(dev.clone(), planner.plan()?)?;
    arena.step(|s| s.lease(m)?.bernoulli_(0.5).map(drop))?;
    arena.step(|s| -> R {
        let m = s.lease(m)?;
        s.lease(x)?.apply_mask_(&m, 1.0)
    })?;
    drop(arena);
    drop(dev);
    s.assert_clean();
    Ok(())
}

#[test]
fn ascend_u8_masks_match_the_host_bit_for_bit() -> R {
    let s = sim::sim();
    s.reset();
    let dev = AscendDevice::new(sim::config())?;
    ascend_u8_masks::<f32>(&dev)?;
    ascend_u8_masks::<f16>(&dev)?;
    ascend_u8_masks::<bf16>(&dev)?;
    drop(dev);
    s.assert_clean();
    Ok(())
}
