//! The recorded training loops (tests/data/loops/*.csv.gz) replayed whole
//! through the policy over a backing that holds no memory, against the
//! same requests replayed through the caching-allocator model alone (the
//! baseline, in the same run): how long judging a policy change on a loop
//! takes, and what the policy costs per request beside the model.

#[path = "../tests/support/loops.rs"]
mod loops;

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tensor_arena::caching::{CachingAllocator, CachingConfig};
use tensor_arena_alloc::replay::{self, ReplayConfig};
use tensor_arena_alloc::trace::TraceEvent;

fn model_replay(events: &[TraceEvent]) -> u64 {
    let mut m = CachingAllocator::new(CachingConfig::cuda());
    let mut live = HashMap::new();
    for e in events {
        match *e {
            TraceEvent::Alloc { addr, size, stream } => {
                if let Ok(id) = m.malloc_on(size as u64, stream as u32) {
                    live.insert(addr, id);
                }
            }
            TraceEvent::Free { addr, .. } => {
                if let Some(id) = live.remove(&addr) {
                    m.free(id);
                }
            }
            _ => {}
        }
    }
    m.stats().reserved_bytes.peak
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("loops");
    g.sample_size(10);
    for (name, events) in loops::all() {
        let requests = events
            .iter()
            .filter(|e| matches!(e, TraceEvent::Alloc { .. }))
            .count();
        g.throughput(Throughput::Elements(requests as u64));
        g.bench_function(format!("{name}/policy"), |b| {
            b.iter(|| {
                let p = replay::replay(black_box(&events), &ReplayConfig::default());
                black_box(p.map(|p| p.peak_reserved_bytes).unwrap_or(0))
            })
        });
        g.bench_function(format!("{name}/caching_model"), |b| {
            b.iter(|| black_box(model_replay(black_box(&events))))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
