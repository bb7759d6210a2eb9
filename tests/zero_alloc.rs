//! A steady-state step makes no heap allocation and no device allocation,
//! measured with a counting global allocator.

use ndarray::Ix2;
use tensor_arena::ops::bit_mask_bytes;
use tensor_arena::{Arena, CountingAllocator, Device, HostDevice, Planner};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn steady_state_steps_allocate_nothing() -> tensor_arena::Result<()> {
    let mut p = Planner::new();
    let fwd = p.phase("forward")?;
    let bwd = p.phase("backward")?;
    let w = p.persistent::<f32>("w", &[64, 64])?;
    let x = p.step::<f32>("x", &[32, 64])?;
    let h = p.span::<f32>("h", &[32, 64], fwd, bwd)?;
    let t = p.span::<f32>("t", &[32, 64], fwd, fwd)?;
    let g = p.span::<f32>("g", &[32, 64], bwd, bwd)?;
    let bits = p.span::<u8>("h.keep_bits", &[bit_mask_bytes(32 * 64)], fwd, bwd)?;
    let dev = HostDevice::new();
    let mut arena = Arena::new(dev.clone(), p.plan()?)?;

    let run = |arena: &mut Arena<HostDevice>, batch: usize| {
        arena.step(|s| -> tensor_arena::Result<f32> {
            let w = s.lease(w)?;
            let mut x = s.lease(x)?.with_shape(&[batch, 64])?;
            x.as_mut_slice().fill(1.0);
            let mut h = s.lease(h)?.with_shape(&[batch, 64])?;
            {
                let mut t = s.lease(t)?.with_shape(&[batch, 64])?;
                let mut tv = t.view_mut::<Ix2>()?;
                tv.fill(0.5);
                h.as_mut_slice().copy_from_slice(t.as_slice());
            }
            s.enter(bwd)?;
            let mut g = s.lease(g)?.with_shape(&[batch, 64])?;
            for ((gi, hi), wi) in g
                .as_mut_slice()
                .iter_mut()
                .zip(h.as_slice())
                .zip(w.as_slice())
            {
                *gi = hi * wi;
            }
            // The kernels allocate nothing either.
            let mask = h.dropout_(0.2)?;
            g.dropout_backward_(&mask)?;
            let mut b = s.lease(bits)?.with_shape(&[bit_mask_bytes(batch * 64)])?;
            let mask = h.dropout_with_bits_(0.2, &mut b)?;
            g.dropout_backward_with_bits_(&mask, &b)?;
            g.mul_(&h)?;
            g.mul_scalar_(0.5)?;
            Ok(g.as_slice()[0])
        })
    };

    run(&mut arena, 32)?; // warm-up: first-touch effects are not steady state
    let heap_before = CountingAllocator::thread_counts();
    let dev_before = dev.counters().alloc_calls;
    for step in 0..100 {
        run(&mut arena, 17 + step % 16)?;
    }
    let heap = CountingAllocator::thread_counts() - heap_before;
    assert_eq!(heap.allocations, 0, "heap allocations in 100 steady steps");
    assert_eq!(dev.counters().alloc_calls - dev_before, 0);
    assert_eq!(arena.stats().steps, 101);
    assert_eq!(arena.stats().total_leases, 101 * 6);

    // The counter does see allocations, so the zero above means something.
    let before = CountingAllocator::thread_counts();
    let v = std::hint::black_box(vec![0u8; 10]);
    assert_eq!((CountingAllocator::thread_counts() - before).allocations, 1);
    drop(v);
    Ok(())
}
