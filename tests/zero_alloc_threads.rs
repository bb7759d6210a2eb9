//! Kernels on worker threads in steady state: heap allocations counted over
//! the whole process (this file holds one test, so nothing else runs).

use tensor_arena::device::PARALLEL_THRESHOLD;
use tensor_arena::{Arena, CountingAllocator, HostDevice, Planner};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

#[test]
fn threaded_kernels_allocate_nothing_per_step() -> tensor_arena::Result<()> {
    let n = 2 * PARALLEL_THRESHOLD;
    let mut p = Planner::new();
    let x = p.step::<f32>("x", &[n])?;
    let y = p.step::<f32>("y", &[n])?;
    let mut arena = Arena::new(HostDevice::new().with_threads(2)?, p.plan()?)?;
    let step = |arena: &mut Arena<HostDevice>| {
        arena.step(|s| -> tensor_arena::Result<()> {
            let mut x = s.lease(x)?;
            let mut y = s.lease(y)?;
            y.bernoulli_(0.5)?;
            x.mul_scalar_(1.0)?;
            x.apply_mask_(&y, 2.0)?;
            let mask = x.dropout_(0.1)?;
            x.dropout_backward_(&mask)?;
            x.mul_(&y)
        })
    };
    for _ in 0..5 {
        step(&mut arena)?; // warm up the worker threads and their queues
    }
    let before = CountingAllocator::global_counts();
    for _ in 0..30 {
        step(&mut arena)?;
    }
    let heap = CountingAllocator::global_counts() - before;
    assert_eq!(heap.allocations, 0, "{heap:?}");
    Ok(())
}
