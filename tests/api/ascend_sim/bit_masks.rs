//! The bit-mask dropout on the simulated device, through the backend
//! (`ta_dropout_bitmask_*` and `ta_apply_bitmask_*` launched by
//! `AscendDevice`): the activation, the gradient and the used bits equal the
//! host's bit for bit, and the fused pair's results on the same device, for
//! every element type, lengths around bytes and tiles, core counts 1 to 48
//! and stream positions whose Philox block index crosses 2^32; wrong
//! lengths are refused by the device as by the host.

use super::open;
use crate::support::elem::Elem;
use crate::support::sim::{self, sim};
use tensor_arena::ops::{Kernel, RngState, bit_mask_bytes, philox};
use tensor_arena::{
    Arena, DType, Device, Error, HostDevice, Kernels, Planner, Region, Result, bf16, f16,
};

/// What one device computed: the bit-mask path's activation, gradient and
/// bits, then the fused path's activation and gradient.
struct Out {
    x: Vec<u32>,
    grad: Vec<u32>,
    bits: Vec<u8>,
    fused_x: Vec<u32>,
    fused_grad: Vec<u32>,
}

fn run<T: Elem, D: Kernels>(dev: D, n: usize, p: f32, rng: RngState) -> Result<Out> {
    let mut planner = Planner::new();
    let x = planner.step::<T>("x", &[n])?;
    let g = planner.step::<T>("g", &[n])?;
    let bits = planner.step::<u8>("bits", &[bit_mask_bytes(n)])?;
    let mut arena = Arena::new(dev, planner.plan()?)?;
    let (xv, gv) = (super::values::<T>(n, 5), super::values::<T>(n, 6));
    let read = |l: &tensor_arena::Lease<'_, T, D>| -> Result<Vec<u32>> {
        let mut v = vec![T::from_f32(0.0); n];
        l.copy_to_host(&mut v)?;
        Ok(v.into_iter().map(Elem::bits).collect())
    };
    arena.set_rng_state(rng);
    let (xb, gb, bb) = arena.step(|s| -> Result<_> {
        let (mut xl, mut gl, mut bl) = (s.lease(x)?, s.lease(g)?, s.lease(bits)?);
        xl.copy_from_host(&xv)?;
        gl.copy_from_host(&gv)?;
        let mask = xl.dropout_with_bits_(p, &mut bl)?;
        gl.dropout_backward_with_bits_(&mask, &bl)?;
        let mut b = vec![0u8; bit_mask_bytes(n)];
        bl.copy_to_host(&mut b)?;
        Ok((read(&xl)?, read(&gl)?, b))
    })?;
    arena.set_rng_state(rng);
    let (xf, gf) = arena.step(|s| -> Result<_> {
        let (mut xl, mut gl) = (s.lease(x)?, s.lease(g)?);
        xl.copy_from_host(&xv)?;
        gl.copy_from_host(&gv)?;
        let mask = xl.dropout_(p)?;
        gl.dropout_backward_(&mask)?;
        Ok((read(&xl)?, read(&gl)?))
    })?;
    Ok(Out {
        x: xb,
        grad: gb,
        bits: bb,
        fused_x: xf,
        fused_grad: gf,
    })
}

/// The first element where two runs differ.
fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

fn bit_masks_match<T: Elem>() -> Result<()> {
    let cases = [
        (1usize, 1u32, 0.25f32, RngState::new(1)),
        (
            7,
            2,
            0.5,
            RngState {
                seed: 9,
                offset: (1 << 34) - 4,
            },
        ),
        (9, 48, 0.0, RngState::new(2)),
        (65, 3, 1.0, RngState::new(3)),
        (
            4097,
            8,
            0.1,
            RngState {
                seed: u64::MAX,
                offset: (1 << 34) - 1000,
            },
        ),
        (
            70_001,
            48,
            0.6,
            RngState {
                seed: 0xfeed,
                offset: (1 << 34) - 40_000,
            },
        ),
        (70_001, 5, 0.3, RngState::new(4)),
    ];
    for (n, blocks, p, rng) in cases {
        let what = format!("{} n {n} blocks {blocks} p {p} {rng:?}", T::DTYPE);
        let host = run::<T, _>(HostDevice::new(), n, p, rng)?;
        let dev = open(sim::config().max_blocks(blocks));
        let npu = run::<T, _>(dev.clone(), n, p, rng)?;
        for (name, h, a) in [
            ("activation", &host.x, &npu.x),
            ("gradient", &host.grad, &npu.grad),
            ("fused activation", &host.x, &npu.fused_x),
            ("fused gradient", &host.grad, &npu.fused_grad),
            ("host fused activation", &host.x, &host.fused_x),
            ("host fused gradient", &host.grad, &host.fused_grad),
        ] {
            if let Some(i) = first_difference(h, a) {
                panic!("{what}: {name} element {i}: {:#x} vs {:#x}", h[i], a[i]);
            }
        }
        // The used bits only: the device leaves the rest unspecified.
        let used = |b: &[u8], e: usize| (b[e / 8] >> (e % 8)) & 1;
        if let Some(e) = (0..n).find(|&e| used(&host.bits, e) != used(&npu.bits, e)) {
            panic!("{what}: bit {e} differs");
        }
        // What docs/kernels.md says of the bits past the last element: 0 on
        // the host; on the device (these kernels, through the shim) the keep
        // decisions of the stream elements that follow the call.
        let tail = bit_mask_bytes(n) * 8;
        assert!((n..tail).all(|e| used(&host.bits, e) == 0), "{what}");
        let q = 1.0 - p;
        for e in n..tail {
            let w = philox::stream_word(rng.seed, rng.offset.wrapping_add(e as u64));
            let kept = (w >> 8) as f32 * (1.0 / 16_777_216.0) < q;
            assert_eq!(used(&npu.bits, e) == 1, kept, "{what}: tail bit {e}");
        }
        drop(dev);
        sim().assert_clean();
    }
    Ok(())
}

#[test]
fn bit_mask_dropout_matches_the_host_bit_for_bit_f32() -> Result<()> {
    bit_masks_match::<f32>()
}

#[test]
fn bit_mask_dropout_matches_the_host_bit_for_bit_f16() -> Result<()> {
    bit_masks_match::<f16>()
}

#[test]
fn bit_mask_dropout_matches_the_host_bit_for_bit_bf16() -> Result<()> {
    bit_masks_match::<bf16>()
}

#[test]
fn the_device_refuses_bit_masks_of_the_wrong_length() -> Result<()> {
    let dev = open(sim::config());
    let slab = dev.reserve(8192, 512)?;
    let x = Region {
        offset: 0,
        len: 4000,
    };
    let bytes_per_element = Region {
        offset: 4096,
        len: 1000,
    };
    let launches = sim().counter("kernel_launches");
    for k in [
        Kernel::DropoutBits {
            p: 0.5,
            rng: RngState::new(1),
        },
        Kernel::ApplyBits { scale: 2.0 },
    ] {
        let e = dev
            .launch(&slab, &k, DType::F32, x, Some(bytes_per_element))
            .unwrap_err();
        assert!(
            matches!(&e, Error::Device { device, message, .. }
                if device == "ascend:0" && message.contains("ceil(1000 / 8) = 125 bytes")),
            "{e}"
        );
    }
    assert_eq!(
        sim().counter("kernel_launches"),
        launches,
        "nothing launched"
    );
    let bits = Region {
        offset: 4096,
        len: 125,
    };
    let k = Kernel::ApplyBits { scale: 2.0 };
    dev.launch(&slab, &k, DType::F32, x, Some(bits))?;
    dev.synchronize()?;
    drop(slab);
    drop(dev);
    sim().assert_clean();
    Ok(())
}
