//! Record, then plan: recording allocates (and the counters see it); once
//! frozen, a step of requests by site name makes no heap allocation and no
//! device allocation. One test in this file, so the counts are its own.

use ndarray::Ix2;
use tensor_arena::ops::gemm;
use tensor_arena::{CountingAllocator, Device, HostDevice, Recorder};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn frozen_steps_allocate_nothing() -> tensor_arena::Result<()> {
    let dev = HostDevice::new();
    let mut rec = Recorder::new(dev.clone());
    rec.phase("forward")?;
    let bwd = rec.phase("backward")?;
    let w = rec.persistent::<f32>("w", &[64, 64])?;
    rec.write(w, &vec![0.01; 64 * 64])?;
    rec.set_seed(5);

    let run = |rec: &mut Recorder<HostDevice>, batch: usize| {
        rec.step(|s| -> tensor_arena::Result<f32> {
            let w = s.lease(w)?;
            let mut x = s.temp::<f32>("x", &[batch, 64])?;
            x.as_mut_slice().fill(1.0);
            {
                let mut keep = s.temp::<f32>("keep", &[batch, 64])?;
                keep.bernoulli_(0.9)?;
                x.apply_mask_(&keep, 1.0 / 0.9)?;
            }
            let mut h = s.temp::<f32>("h", &[batch, 64])?;
            gemm(
                1.0,
                x.view::<Ix2>()?,
                w.view::<Ix2>()?,
                0.0,
                h.view_mut::<Ix2>()?,
            )?;
            let mask = h.dropout_(0.2)?;
            s.enter(bwd)?;
            let mut g = s.temp::<f32>(tensor_arena::call_site!(), &[batch, 64])?;
            g.as_mut_slice().copy_from_slice(h.as_slice());
            g.dropout_backward_(&mask)?;
            g.mul_(&h)?;
            g.mul_scalar_(0.5)?;
            Ok(g.as_slice()[0])
        })
    };

    // Recording: served from the pool, which allocates and counts it.
    let heap_before = CountingAllocator::thread_counts();
    for batch in [32, 17, 25] {
        run(&mut rec, batch)?;
    }
    let recording = CountingAllocator::thread_counts() - heap_before;
    let stats = rec.stats();
    assert!(stats.pool_allocations >= 4, "{stats:?}");
    assert!(recording.allocations >= stats.pool_allocations);
    assert_eq!(stats.pool_requests, 12);
    assert_eq!(
        dev.counters().alloc_calls,
        0,
        "no device memory while recording"
    );

    // Freeze: one device allocation, the pool's memory goes back.
    rec.freeze()?;
    assert_eq!(dev.counters().alloc_calls, 1);
    assert_eq!(rec.stats().pool_bytes, 0);

    // Frozen: every step, the first one included, allocates nothing.
    let heap_before = CountingAllocator::thread_counts();
    let dev_before = dev.counters().alloc_calls;
    for step in 0..100 {
        run(&mut rec, 1 + step % 32)?;
    }
    let heap = CountingAllocator::thread_counts() - heap_before;
    assert_eq!(heap.allocations, 0, "heap allocations in 100 frozen steps");
    assert_eq!(dev.counters().alloc_calls - dev_before, 0);
    let arena = rec.arena().map(|a| a.stats());
    assert_eq!(arena.map(|a| (a.steps, a.total_leases)), Some((100, 500)));

    // The counter does see allocations, so the zero above means something.
    let before = CountingAllocator::thread_counts();
    let v = std::hint::black_box(vec![0u8; 10]);
    assert_eq!((CountingAllocator::thread_counts() - before).allocations, 1);
    drop(v);
    Ok(())
}
