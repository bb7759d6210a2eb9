//! The alloc + free pair on the planned path, called through the C ABI,
//! against the same requests served by the live caching fallback, by the
//! caching-allocator model alone, and by `posix_memalign` + `free` (what
//! torch's default CPU allocator, `c10::alloc_cpu`, calls). The requests
//! are one steady step of a recorded GPT-2 training run
//! (tests/data/gpt2_cpu_trace.csv), replayed whole per iteration; the
//! figure per element is the time of one alloc + free pair.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tensor_arena::caching::{BlockId, CachingAllocator};
use tensor_arena_alloc::ffi::*;
use tensor_arena_alloc::trace::{self, TraceEvent};
use tensor_arena_alloc::{Fallback, Origin, Platform, backing, caching_config};

/// One request or free of the replayed step: frees name the request index
/// that allocated the block, in this step or (`prev`) the one before.
#[derive(Clone, Copy)]
enum Op {
    Alloc { k: usize, size: usize },
    Free { k: usize, prev: bool },
}

/// The ops of step `which` (1-based) of the trace, and the request count.
fn step_ops(events: &[TraceEvent], which: usize) -> (Vec<Op>, usize) {
    let mut step = 0;
    let mut owner: HashMap<usize, (usize, usize)> = HashMap::new(); // addr -> (step, k)
    let (mut ops, mut k) = (Vec::new(), 0);
    let mut count = 0;
    for e in events {
        match *e {
            TraceEvent::StepBegin => {
                step += 1;
                k = 0;
            }
            TraceEvent::StepEnd => {
                if step == which {
                    count = k;
                }
            }
            TraceEvent::Alloc { addr, size, .. } => {
                owner.insert(addr, (step, k));
                if step == which {
                    ops.push(Op::Alloc { k, size });
                }
                k += 1;
            }
            TraceEvent::Free { addr, .. } => {
                if let Some((s, j)) = owner.remove(&addr)
                    && step == which
                    && (s == which || s + 1 == which)
                {
                    ops.push(Op::Free {
                        k: j,
                        prev: s != which,
                    });
                }
            }
            TraceEvent::SegmentAlloc { .. }
            | TraceEvent::SegmentFree { .. }
            | TraceEvent::Phase(_) => {}
        }
    }
    (ops, count)
}

/// Something that serves allocations by address.
trait Pair {
    fn alloc(&mut self, size: usize) -> usize;
    fn free(&mut self, addr: usize);
}

/// The planned allocator through its C ABI.
struct Planned;

impl Pair for Planned {
    fn alloc(&mut self, size: usize) -> usize {
        tensor_arena_alloc(size, 0, std::ptr::null_mut()) as usize
    }
    fn free(&mut self, addr: usize) {
        tensor_arena_free(addr as *mut c_void, 0, 0, std::ptr::null_mut())
    }
}

/// The live caching fallback over host regions.
struct Live(
    Fallback,
    tensor_arena_alloc::backing::DeviceBacking<tensor_arena::HostDevice>,
);

impl Pair for Live {
    fn alloc(&mut self, size: usize) -> usize {
        self.0
            .malloc(&mut self.1, size as u64, 0, Origin::OUTSIDE)
            .unwrap_or(0)
    }
    fn free(&mut self, addr: usize) {
        self.0.free(&mut self.1, addr);
    }
}

/// The caching-allocator model alone: handles, no memory.
struct Model(CachingAllocator, HashMap<usize, BlockId>, usize);

impl Pair for Model {
    fn alloc(&mut self, size: usize) -> usize {
        let id = self.0.malloc(size as u64).expect("unlimited model");
        self.2 += 1;
        self.1.insert(self.2, id);
        self.2
    }
    fn free(&mut self, addr: usize) {
        if let Some(id) = self.1.remove(&addr) {
            self.0.free(id);
        }
    }
}

/// posix_memalign + free: what torch's default CPU allocator calls.
struct Libc;

impl Pair for Libc {
    fn alloc(&mut self, size: usize) -> usize {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer and a power-of-two alignment (c10's 64).
        unsafe { libc::posix_memalign(&mut p, 64, size) };
        p as usize
    }
    fn free(&mut self, addr: usize) {
        // SAFETY: `addr` came from posix_memalign and is freed once.
        unsafe { libc::free(black_box(addr) as *mut c_void) }
    }
}

/// Replays `ops` once; `cur` / `prev` hold this and the last iteration's
/// blocks by request index (blocks carried into the next step stay in
/// `prev`).
fn replay(ops: &[Op], cur: &mut [usize], prev: &mut [usize], p: &mut impl Pair) {
    for op in ops {
        match *op {
            Op::Alloc { k, size } => cur[k] = p.alloc(size),
            Op::Free { k, prev: true } => p.free(std::mem::take(&mut prev[k])),
            Op::Free { k, prev: false } => p.free(std::mem::take(&mut cur[k])),
        }
    }
    prev.copy_from_slice(cur);
}

fn run(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    ops: &[Op],
    n: usize,
    p: &mut impl Pair,
    steps: bool,
) {
    let (mut cur, mut prev) = (vec![0usize; n], vec![0usize; n]);
    let mut one = |p: &mut _| {
        if steps {
            tensor_arena_step_begin();
        }
        replay(ops, &mut cur, &mut prev, p);
        if steps {
            tensor_arena_step_end();
        }
    };
    for _ in 0..5 {
        one(p);
    }
    g.bench_function(name, |b| b.iter(|| one(p)));
}

fn bench(c: &mut Criterion) {
    let text = include_str!("../tests/data/gpt2_cpu_trace.csv");
    let events = trace::parse(text).expect("the checked-in trace parses");
    let (ops, n) = step_ops(&events, 6);
    let mut g = c.benchmark_group("alloc_free_pair");
    g.throughput(Throughput::Elements(n as u64));

    let config = CString::new(r#"{"backend": "cpu", "log_errors": false}"#).unwrap();
    // SAFETY: a NUL-terminated string.
    assert_eq!(unsafe { tensor_arena_configure(config.as_ptr()) }, 0);
    run(&mut g, "planned, C ABI", &ops, n, &mut Planned, true);
    let mut stats = vec![0u8; 1 << 16];
    // SAFETY: the buffer holds its length in bytes.
    let len = unsafe { tensor_arena_stats_json(stats.as_mut_ptr().cast(), stats.len()) };
    let stats: serde_json::Value = serde_json::from_slice(&stats[..len]).unwrap();
    assert_eq!(
        stats["served_from_plan"], stats["requests_after_warmup"],
        "{stats}"
    );

    let mut live = Live(
        Fallback::new(caching_config(Platform::Cuda)),
        backing::host_backing(),
    );
    run(&mut g, "caching fallback (live)", &ops, n, &mut live, false);
    let mut model = Model(
        CachingAllocator::new(caching_config(Platform::Cuda)),
        HashMap::new(),
        0,
    );
    run(&mut g, "caching model", &ops, n, &mut model, false);
    run(
        &mut g,
        "posix_memalign + free (torch's CPU allocator)",
        &ops,
        n,
        &mut Libc,
        false,
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
