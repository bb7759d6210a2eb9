//! Bit-mask dropout: `dropout_with_bits_` and `dropout_backward_with_bits_`
//! give the fused, regenerating pair's bits exactly (the activation, the
//! gradient and the stream position), and their bits are the decisions of
//! a u8 mask drawn at the same stream position; on host leases with one and
//! several threads, on plain slices chunk by chunk, on a recorder while
//! recording and frozen, through the step API shared by both; and every
//! misuse is an error naming the buffers and lengths. The simulated Ascend
//! device is compared with the host in `ascend_sim.rs`.

use tensor_arena::ops::{self, Kernel, RngState, bit_mask_bytes};
use tensor_arena::{
    Arena, DType, Device, Error, HostDevice, Kernels, LeaseOps, Phase, Planner, Recorder, Region,
    StepScope, bf16, f16,
};

use crate::support::elem::Elem;

type R = tensor_arena::Result<()>;

/// Lengths around bytes, Philox tiles, chunks and the thread threshold.
const LENGTHS: [usize; 9] = [1, 7, 8, 9, 63, 64, 65, 4097, 100_003];

/// Stream positions: the start, and two whose Philox block index crosses
/// 2^32 inside the call (at once, and after 1024 elements).
const RNGS: [RngState; 3] = [
    RngState {
        seed: 0x5eed,
        offset: 0,
    },
    RngState {
        seed: 77,
        offset: (1 << 34) - 4,
    },
    RngState {
        seed: u64::MAX,
        offset: (1 << 34) - 1024,
    },
];

const PS: [f32; 4] = [0.25, 0.0, 1.0, 0.9];

fn values<T: Elem>(n: usize, salt: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f32(((i * 7 + salt) % 101) as f32 * 0.31 - 15.0))
        .collect()
}

fn bits_of<T: Elem>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.bits()).collect()
}

/// Bit `e` of a bit mask.
fn bit(bits: &[u8], e: usize) -> bool {
    (bits[e / 8] >> (e % 8)) & 1 == 1
}

/// What one path produced: activation, gradient (as bits), the stream
/// position after, and (for the bit-mask path) the bits.
struct Run {
    x: Vec<u32>,
    grad: Vec<u32>,
    after: RngState,
    bits: Vec<u8>,
}

fn both_paths<T: Elem>(
    n: usize,
    threads: usize,
    p: f32,
    rng: RngState,
) -> tensor_arena::Result<(Run, Run, Vec<u8>)> {
    let mut planner = Planner::new();
    let x = planner.step::<T>("x", &[n])?;
    let g = planner.step::<T>("g", &[n])?;
    let bits = planner.step::<u8>("bits", &[bit_mask_bytes(n)])?;
    let keep = planner.step::<u8>("keep", &[n])?;
    let mut arena = Arena::new(HostDevice::new().with_threads(threads)?, planner.plan()?)?;
    let (xv, gv) = (values::<T>(n, 1), values::<T>(n, 2));

    arena.set_rng_state(rng);
    let (x1, g1) = arena.step(|s| -> tensor_arena::Result<_> {
        let (mut xl, mut gl) = (s.lease(x)?, s.lease(g)?);
        xl.copy_from_host(&xv)?;
        gl.copy_from_host(&gv)?;
        let mask = xl.dropout_(p)?;
        assert_eq!(mask.rng, rng);
        gl.dropout_backward_(&mask)?;
        Ok((bits_of(xl.as_slice()), bits_of(gl.as_slice())))
    })?;
    let fused = Run {
        x: x1,
        grad: g1,
        after: arena.rng_state(),
        bits: Vec::new(),
    };

    arena.set_rng_state(rng);
    let (x2, g2, b2) = arena.step(|s| -> tensor_arena::Result<_> {
        let (mut xl, mut gl, mut bl) = (s.lease(x)?, s.lease(g)?, s.lease(bits)?);
        xl.copy_from_host(&xv)?;
        gl.copy_from_host(&gv)?;
        bl.as_mut_slice().fill(0xA5);
        let mask = xl.dropout_with_bits_(p, &mut bl)?;
        assert_eq!(
            (mask.p, mask.rng, mask.len, mask.bytes()),
            (p, rng, n, bit_mask_bytes(n))
        );
        gl.dropout_backward_with_bits_(&mask, &bl)?;
        Ok((
            bits_of(xl.as_slice()),
            bits_of(gl.as_slice()),
            bl.as_slice().to_vec(),
        ))
    })?;
    let with_bits = Run {
        x: x2,
        grad: g2,
        after: arena.rng_state(),
        bits: b2,
    };

    arena.set_rng_state(rng);
    let keep_bytes = arena.step(|s| -> tensor_arena::Result<_> {
        let mut k = s.lease(keep)?;
        k.bernoulli_(1.0 - p)?;
        Ok(k.as_slice().to_vec())
    })?;
    Ok((fused, with_bits, keep_bytes))
}

fn host_paths_agree<T: Elem>() -> R {
    let mut case = 0;
    for &n in &LENGTHS {
        for threads in [1, 3] {
            for rng in RNGS {
                let p = PS[case % PS.len()];
                case += 1;
                let what = format!("{} n {n} threads {threads} p {p} {rng:?}", T::DTYPE);
                let (fused, with_bits, keep) = both_paths::<T>(n, threads, p, rng)?;
                assert_eq!(fused.x, with_bits.x, "{what}: activation");
                assert_eq!(fused.grad, with_bits.grad, "{what}: gradient");
                assert_eq!(
                    fused.after, with_bits.after,
                    "{what}: the stream moves alike"
                );
                assert_eq!(with_bits.bits.len(), bit_mask_bytes(n));
                if let Some(e) = (0..n).find(|&e| bit(&with_bits.bits, e) != (keep[e] == 1)) {
                    panic!("{what}: bit {e} is not the u8 mask's decision");
                }
                if n % 8 != 0 {
                    assert_eq!(
                        with_bits.bits[n / 8] >> (n % 8),
                        0,
                        "{what}: bits past the end"
                    );
                }
                // And the reference on plain slices.
                let mut xs = values::<T>(n, 1);
                let mut reference = vec![0xFFu8; bit_mask_bytes(n)];
                ops::dropout_bits(&mut xs, &mut reference, p, rng)?;
                assert_eq!(bits_of(&xs), with_bits.x, "{what}: ops::dropout_bits");
                assert_eq!(reference, with_bits.bits, "{what}: ops::dropout_bits bits");
            }
        }
    }
    Ok(())
}

#[test]
fn host_bit_mask_dropout_is_the_fused_dropout_bit_for_bit() -> R {
    host_paths_agree::<f32>()?;
    host_paths_agree::<f16>()?;
    host_paths_agree::<bf16>()
}

fn chunked_runs_agree<T: Elem>() -> R {
    let n = 100_003;
    let rng = RNGS[2];
    let x = values::<T>(n, 3);
    let mut whole = x.clone();
    let mut whole_bits = vec![0u8; bit_mask_bytes(n)];
    ops::dropout_bits(&mut whole, &mut whole_bits, 0.4, rng)?;
    let mut grad = values::<T>(n, 4);
    ops::dropout(&mut grad, 0.4, rng)?;
    let k = Kernel::DropoutBits { p: 0.4, rng };
    let apply = Kernel::ApplyBits {
        scale: 1.0 / (1.0 - 0.4),
    };
    for chunk in [64usize, 192, 4096, 65_536] {
        let mut xs = x.clone();
        let mut bits = vec![0xFFu8; bit_mask_bytes(n)];
        for (c, (xc, bc)) in xs
            .chunks_mut(chunk)
            .zip(bits.chunks_mut(chunk / 8))
            .enumerate()
        {
            k.run_chunk_writing_bits(xc, bc, c * chunk);
        }
        assert_eq!(
            bits_of(&xs),
            bits_of(&whole),
            "{} chunks of {chunk}",
            T::DTYPE
        );
        assert_eq!(bits, whole_bits, "{} chunks of {chunk}", T::DTYPE);
        let mut gs = values::<T>(n, 4);
        for (c, (gc, bc)) in gs.chunks_mut(chunk).zip(bits.chunks(chunk / 8)).enumerate() {
            apply.run_chunk_bits(gc, bc, c * chunk);
        }
        assert_eq!(
            bits_of(&gs),
            bits_of(&grad),
            "{} apply in chunks of {chunk}",
            T::DTYPE
        );
    }
    Ok(())
}

#[test]
fn chunked_bit_masks_equal_one_call() -> R {
    chunked_runs_agree::<f32>()?;
    chunked_runs_agree::<f16>()?;
    chunked_runs_agree::<bf16>()
}

/// One forward and backward through the step API: written once, run on an
/// arena and on a recorder. Returns the activation and the gradient.
fn generic_step<S: StepScope>(
    s: &S,
    bwd: Phase,
    n: usize,
) -> tensor_arena::Result<(Vec<f32>, Vec<f32>)>
where
    S::Device: Kernels + tensor_arena::HostAccessible,
{
    let mut h = s.temp::<f32>("h", &[n])?;
    h.as_mut_slice()
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as f32 - 50.0);
    let mut bits = s.temp::<u8>("h.keep_bits", &[bit_mask_bytes(n)])?;
    let mask = h.dropout_with_bits_(0.3, &mut bits)?;
    s.enter(bwd)?;
    let mut dh = s.temp::<f32>("dh", &[n])?;
    dh.as_mut_slice().fill(2.0);
    dh.dropout_backward_with_bits_(&mask, &bits)?;
    Ok((h.as_slice().to_vec(), dh.as_slice().to_vec()))
}

#[test]
fn recorded_frozen_and_planned_bit_masks_agree() -> R {
    let n = 300;
    let mut p = Planner::new();
    let fwd = p.phase("forward")?;
    let bwd = p.phase("backward")?;
    p.span::<f32>("h", &[n], fwd, bwd)?;
    p.span::<u8>("h.keep_bits", &[bit_mask_bytes(n)], fwd, bwd)?;
    p.span::<f32>("dh", &[n], bwd, bwd)?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    arena.set_seed(21);
    let planned = arena.step(|s| generic_step(s, bwd, n))?;

    let mut rec = Recorder::new(HostDevice::new());
    rec.phase("forward")?;
    let rbwd = rec.phase("backward")?;
    rec.set_seed(21);
    let recorded = rec.step(|s| generic_step(s, rbwd, n))?;
    assert_eq!(recorded, planned);
    let plan = rec.freeze()?;
    let spec = plan
        .buffers()
        .iter()
        .find(|b| b.name() == "h.keep_bits")
        .expect("the bits were recorded");
    assert_eq!((spec.dtype(), spec.shape().dims()), (DType::U8, &[38][..]));
    assert_eq!(plan.slab_bytes(), arena.plan().slab_bytes());
    rec.set_seed(21);
    let frozen = rec.step(|s| generic_step(s, rbwd, n))?;
    assert_eq!(frozen, planned);

    // The fused, regenerating pair gives the same numbers.
    let mut h: Vec<f32> = (0..n).map(|i| i as f32 - 50.0).collect();
    ops::dropout(&mut h, 0.3, RngState::new(21))?;
    let mut dh = vec![2.0f32; n];
    ops::dropout(&mut dh, 0.3, RngState::new(21))?;
    assert_eq!(planned, (h, dh));
    Ok(())
}

#[test]
fn bit_mask_misuse_is_an_error_naming_buffers_and_lengths() -> R {
    let mut p = Planner::new();
    let h = p.step::<f32>("h", &[100])?;
    let bits = p.step::<u8>("h.keep_bits", &[13])?;
    let short = p.step::<u8>("short_bits", &[12])?;
    let dh = p.step::<f32>("dh", &[100])?;
    let mut arena = Arena::new(HostDevice::new(), p.plan()?)?;
    let mut other = {
        let mut q = Planner::new();
        let b = q.step::<u8>("other_bits", &[13])?;
        (Arena::new(HostDevice::new(), q.plan()?)?, b)
    };
    arena.set_seed(3);
    arena.step(|s| -> R {
        let (mut hl, mut bl, mut sl, mut dl) =
            (s.lease(h)?, s.lease(bits)?, s.lease(short)?, s.lease(dh)?);
        let e = hl.dropout_with_bits_(0.5, &mut sl).unwrap_err();
        assert_eq!(
            e,
            Error::BitMaskBytes {
                op: "dropout_with_bits_",
                buffer: "h".into(),
                elements: 100,
                mask: "short_bits".into(),
                bytes: 12,
                needed: 13,
            }
        );
        let text = e.to_string();
        for part in [
            "'short_bits' has 12 bytes",
            "100 elements of 'h'",
            "need 13",
        ] {
            assert!(text.contains(part), "{text}");
        }
        assert!(matches!(
            hl.dropout_with_bits_(1.5, &mut bl),
            Err(Error::InvalidProbability { .. })
        ));
        let ob = other.1;
        other.0.step(|o| -> R {
            let mut ol = o.lease(ob)?;
            assert!(matches!(
                hl.dropout_with_bits_(0.5, &mut ol),
                Err(Error::ArenaMismatch { .. })
            ));
            Ok(())
        })?;
        // Nothing ran, the stream did not move.
        let mask = hl.dropout_with_bits_(0.5, &mut bl)?;
        assert_eq!(mask.rng, RngState::new(3));
        dl.set_shape(&[99])?;
        let e = dl.dropout_backward_with_bits_(&mask, &bl).unwrap_err();
        assert_eq!(
            e,
            Error::BitMaskElements {
                op: "dropout_backward_with_bits_",
                buffer: "dh".into(),
                len: 99,
                expected: 100,
            }
        );
        assert!(
            e.to_string().contains("forward bit mask covered 100"),
            "{e}"
        );
        dl.set_shape(&[100])?;
        assert!(matches!(
            dl.dropout_backward_with_bits_(&mask, &sl),
            Err(Error::BitMaskBytes {
                bytes: 12,
                needed: 13,
                ..
            })
        ));
        dl.dropout_backward_with_bits_(&mask, &bl)
    })?;
    Ok(())
}

#[test]
fn recorder_bit_mask_misuse_is_an_error() -> R {
    let mut rec = Recorder::new(HostDevice::new());
    rec.step(|s| -> R {
        let mut h = s.temp::<f32>("h", &[64])?;
        let mut bits = s.temp::<u8>("bits", &[64])?;
        assert!(matches!(
            h.dropout_with_bits_(0.5, &mut bits),
            Err(Error::BitMaskBytes {
                bytes: 64,
                needed: 8,
                ..
            })
        ));
        bits.set_shape(&[8])?;
        let mask = h.dropout_with_bits_(0.5, &mut bits)?;
        assert_eq!(mask.rng.offset, 0, "the refused call drew nothing");
        let mut dh = s.temp::<f32>("dh", &[65])?;
        assert!(matches!(
            dh.dropout_backward_with_bits_(&mask, &bits),
            Err(Error::BitMaskElements {
                len: 65,
                expected: 64,
                ..
            })
        ));
        dh.set_shape(&[64])?;
        dh.dropout_backward_with_bits_(&mask, &bits)
    })
}

#[test]
fn devices_refuse_bit_mask_launches_of_the_wrong_shape() -> R {
    let dev = HostDevice::new();
    let slab = dev.reserve(8192, 512)?;
    let rng = RngState::new(1);
    let forward = Kernel::DropoutBits { p: 0.5, rng };
    let apply = Kernel::ApplyBits { scale: 2.0 };
    // 1000 f32 elements, whose bit mask is 125 bytes.
    let x = Region {
        offset: 0,
        len: 4000,
    };
    let bits = Region {
        offset: 4096,
        len: 125,
    };
    dev.launch(&slab, &forward, DType::F32, x, Some(bits))?;
    dev.launch(&slab, &apply, DType::F32, x, Some(bits))?;
    let bytes_per_element = Region {
        offset: 4096,
        len: 1000,
    };
    for k in [forward, apply] {
        let e = dev
            .launch(&slab, &k, DType::F32, x, Some(bytes_per_element))
            .unwrap_err();
        assert!(
            matches!(&e, Error::Device { message, .. } if message.contains("ceil(1000 / 8) = 125 bytes")),
            "{e}"
        );
        assert!(matches!(
            dev.launch(&slab, &k, DType::F32, x, None),
            Err(Error::Device { .. })
        ));
        let overlapping = Region {
            offset: 3968,
            len: 125,
        };
        assert!(matches!(
            dev.launch(&slab, &k, DType::F32, x, Some(overlapping)),
            Err(Error::AliasedOperands { .. } | Error::Device { .. })
        ));
        // The values must be floats.
        let u8_values = Region {
            offset: 0,
            len: 1000,
        };
        assert!(
            dev.launch(&slab, &k, DType::U8, u8_values, Some(bits))
                .is_err()
        );
    }
    let half = Region {
        offset: 0,
        len: 2000,
    };
    dev.launch(&slab, &forward, DType::F16, half, Some(bits))?;
    Ok(())
}
