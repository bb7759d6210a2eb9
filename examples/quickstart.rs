//! A planned arena loop: declare buffers once, plan, reserve, then lease
//! every step with batch sizes that change, and show that no step allocates.
//!
//! ```sh
//! cargo run --release --example quickstart
//! ```

use tensor_arena::{Arena, CountingAllocator, Device, HostDevice, Planner, Result};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

fn main() -> Result<()> {
    const MAX_BATCH: usize = 64;
    const FEATURES: usize = 100;
    let mut planner = Planner::new();
    let fwd = planner.phase("forward")?;
    let bwd = planner.phase("backward")?;
    let weights = planner.persistent::<f32>("weights", &[FEATURES])?;
    let input = planner.span::<f32>("input", &[MAX_BATCH, FEATURES], fwd, bwd)?;
    let scaled = planner.span::<f32>("scaled", &[MAX_BATCH, FEATURES], fwd, fwd)?;
    let grad = planner.span::<f32>("grad", &[MAX_BATCH, FEATURES], bwd, bwd)?;
    let plan = planner.plan()?;
    println!("{plan}");

    let device = HostDevice::new();
    let mut arena = Arena::new(device.clone(), plan)?;
    arena.write(weights, &[0.5; FEATURES])?;

    let mut checksum = 0.0f64;
    let mut heap_before = CountingAllocator::thread_counts();
    let mut device_before = device.counters().alloc_calls;
    for step in 0..50 {
        if step == 1 {
            // Measure from the second step on: the first may warm caches.
            heap_before = CountingAllocator::thread_counts();
            device_before = device.counters().alloc_calls;
        }
        let batch = [64, 64, 64, 37][step % 4];
        checksum += arena.step(|s| -> Result<f64> {
            let w = s.lease(weights)?;
            let mut x = s.lease(input)?.with_shape(&[batch, FEATURES])?;
            for (i, v) in x.as_mut_slice().iter_mut().enumerate() {
                *v = ((i + step) % 7) as f32;
            }
            {
                let mut y = s.lease(scaled)?.with_shape(&[batch, FEATURES])?;
                for (row_out, row_in) in y
                    .as_mut_slice()
                    .chunks_mut(FEATURES)
                    .zip(x.as_slice().chunks(FEATURES))
                {
                    for ((o, i), w) in row_out.iter_mut().zip(row_in).zip(w.as_slice()) {
                        *o = i * w;
                    }
                }
            }
            s.enter(bwd)?;
            // `grad` shares bytes with `scaled`, which is gone by now.
            let mut g = s.lease(grad)?.with_shape(&[batch, FEATURES])?;
            g.as_mut_slice().copy_from_slice(x.as_slice());
            Ok(g.as_slice().iter().map(|&v| f64::from(v)).sum())
        })?;
    }
    let heap = CountingAllocator::thread_counts() - heap_before;
    let device_allocs = device.counters().alloc_calls - device_before;
    println!("{}", arena.memory_summary());
    println!("checksum {checksum}");
    println!(
        "steady-state allocations over 49 steps: host heap {}, device {device_allocs}",
        heap.allocations
    );
    Ok(())
}
