//! The stream patterns of the engines users move to past plain DDP, on a
//! host backing whose streams are simulated here, checked against a shadow
//! map: no byte is handed out while a stream that used it is still pending.
//!
//! - FSDP2: each block's parameters are all-gathered on an all-gather
//!   stream into a buffer allocated there, copied out into the unsharded
//!   parameters (their storage resized back from zero, on the compute
//!   stream), resized to zero again after the block's forward and again
//!   after its backward; each gradient is reduce-scattered on a
//!   reduce-scatter stream (`record_stream` of the input there, the output
//!   allocated there and kept until the optimizer step).
//!   With `reshard_after_forward=False` the unsharded parameters live
//!   exactly from the forward's all-gather to the backward's reduce-scatter.
//! - DeepSpeed ZeRO-3: the next module's parameters are prefetched on a
//!   side stream while this one computes, `record_stream`ed on the compute
//!   stream and released (freed) while it may still run.
//! - DeepSpeed ZeRO-2: gradients copied into a bucket allocated on the
//!   compute stream and reduced on a side stream (`record_stream`), freed
//!   before the reduction completes.
//!
//! A stream is a queue: `hold` puts work on it that has not run yet,
//! `drain` runs everything queued. An event recorded on a stream completes
//! when the work queued before it has run, as on a device. Giving a region
//! back to the backing synchronises the device (`cudaFree`, `aclrtFree`);
//! unmapping part of a range does not.
//! `cargo test --release -p tensor-arena-alloc --test engines_streams` runs these.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use tensor_arena_alloc::backing::host_backing;
use tensor_arena_alloc::{Backing, Config, PlannedAllocator, Result};

/// The compute (default) stream and the engines' side streams.
const COMPUTE: usize = 0;
const ALL_GATHER: usize = 0x100;
const REDUCE_SCATTER: usize = 0x200;
const STREAMS: [usize; 3] = [COMPUTE, ALL_GATHER, REDUCE_SCATTER];

/// Work queued and run per stream, and the recorded events.
#[derive(Default)]
struct Queues {
    /// Stream -> (work items queued, work items run).
    work: HashMap<usize, (u64, u64)>,
    /// Event handle - 1 -> (stream, the work it waits for).
    events: Vec<(usize, u64)>,
}

impl Queues {
    fn hold(&mut self, stream: usize) {
        self.work.entry(stream).or_default().0 += 1;
    }
    fn drain(&mut self, stream: usize) {
        let w = self.work.entry(stream).or_default();
        w.1 = w.0;
    }
    /// Whether `stream` has work that has not run.
    fn busy(&self, stream: usize) -> bool {
        self.work.get(&stream).is_some_and(|w| w.0 > w.1)
    }
    /// The mark an event recorded now on `stream` waits for.
    fn mark(&self, stream: usize) -> u64 {
        self.work.get(&stream).map_or(0, |w| w.0)
    }
    fn done(&self, stream: usize, mark: u64) -> bool {
        self.work.get(&stream).map_or(0, |w| w.1) >= mark
    }
}

/// Host pages with the simulated streams' events.
struct SimStreams<B: Backing> {
    inner: B,
    queues: Arc<Mutex<Queues>>,
}

impl<B: Backing> SimStreams<B> {
    fn queues(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<B: Backing> Backing for SimStreams<B> {
    fn name(&self) -> String {
        format!("{} (simulated streams)", self.inner.name())
    }
    fn reserve(&mut self, bytes: usize) -> Result<usize> {
        self.inner.reserve(bytes)
    }
    /// `cudaFree` / `aclrtFree` synchronise the device: every stream's work
    /// runs before the bytes can be reserved again.
    fn release(&mut self, addr: usize) {
        let mut q = self.queues();
        for s in STREAMS {
            q.drain(s);
        }
        drop(q);
        self.inner.release(addr)
    }
    fn fill(&mut self, addr: usize, len: usize, byte: u8) -> Result<()> {
        self.inner.fill(addr, len, byte)
    }
    fn read(&mut self, addr: usize, dst: &mut [u8]) -> Result<()> {
        self.inner.read(addr, dst)
    }
    fn free_memory(&self) -> Option<usize> {
        self.inner.free_memory()
    }
    fn total_memory(&self) -> Option<usize> {
        self.inner.total_memory()
    }
    fn reservations(&self) -> u64 {
        self.inner.reservations()
    }
    fn reserved_bytes(&self) -> u64 {
        self.inner.reserved_bytes()
    }
    fn device(&self) -> i32 {
        self.inner.device()
    }
    fn record_event(&mut self, stream: usize) -> Result<usize> {
        let mut q = self.queues();
        let mark = q.mark(stream);
        q.events.push((stream, mark));
        Ok(q.events.len())
    }
    fn event_done(&mut self, event: usize) -> Result<bool> {
        let q = self.queues();
        let (stream, mark) = q.events[event - 1];
        Ok(q.done(stream, mark))
    }
    fn map_granularity(&self) -> Option<usize> {
        self.inner.map_granularity()
    }
    fn reserve_address(&mut self, bytes: usize) -> Result<usize> {
        self.inner.reserve_address(bytes)
    }
    fn map(&mut self, addr: usize, len: usize) -> Result<()> {
        self.inner.map(addr, len)
    }
    fn unmap(&mut self, addr: usize, len: usize) -> Result<()> {
        self.inner.unmap(addr, len)
    }
    /// Unmapping does not wait for the device (the policy must); giving
    /// the whole range back does, as a region's free does.
    fn release_address(&mut self, base: usize) {
        let mut q = self.queues();
        for s in STREAMS {
            q.drain(s);
        }
        drop(q);
        self.inner.release_address(base)
    }
}

fn overlaps(a: usize, alen: usize, b: usize, blen: usize) -> bool {
    a < b + blen && b < a + alen
}

/// Freed bytes still used: address, bytes, the streams and marks they wait
/// for, and the stream for which they do not.
type Guard = (usize, usize, Vec<(usize, u64)>, Option<usize>);

/// The allocator under test, the streams it sees, and the shadow map.
struct Engine {
    a: PlannedAllocator,
    q: Arc<Mutex<Queues>>,
    /// Live blocks: address -> (bytes, allocation stream, streams recorded).
    live: BTreeMap<usize, (usize, usize, Vec<usize>)>,
    /// Freed bytes still used: (address, bytes, [(stream, mark)], the
    /// stream exempt) until each stream has run up to its mark. The entry of
    /// a block's allocation stream exempts that stream: work queued on it
    /// later runs after the work that used the bytes (torch's per-stream
    /// pools), any other stream would race it.
    guarded: Vec<Guard>,
    allocs: u64,
}

impl Engine {
    fn new(policy: &str) -> Engine {
        let q = Arc::new(Mutex::new(Queues::default()));
        let json = format!(
            r#"{{"backend": "cpu", "log_errors": false, "warmup_steps": 1, "record_steps": 2{policy}}}"#
        );
        let backing = SimStreams {
            inner: host_backing(),
            queues: Arc::clone(&q),
        };
        let a = PlannedAllocator::with_backing(
            Config::from_json(&json).expect("test config"),
            Box::new(backing),
        );
        Engine {
            a,
            q,
            live: BTreeMap::new(),
            guarded: Vec::new(),
            allocs: 0,
        }
    }

    fn queues(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn alloc(&mut self, n: usize, stream: usize) -> std::result::Result<usize, TestCaseError> {
        let p = self
            .a
            .alloc(n, 0, stream)
            .ok_or_else(|| TestCaseError::fail(format!("alloc of {n} on {stream:#x} failed")))?;
        {
            let q = self.q.lock().unwrap_or_else(|e| e.into_inner());
            self.guarded
                .retain(|(_, _, uses, _)| uses.iter().any(|&(s, m)| !q.done(s, m)));
        }
        for (&b, &(blen, _, _)) in &self.live {
            prop_assert!(
                !overlaps(p, n, b, blen),
                "{p:#x}+{n} overlaps live {b:#x}+{blen}"
            );
        }
        for (b, blen, uses, exempt) in &self.guarded {
            prop_assert!(
                *exempt == Some(stream) || !overlaps(p, n, *b, *blen),
                "{p:#x}+{n} on stream {stream:#x} handed out while {uses:?} still use {b:#x}+{blen} (exempt {exempt:?}), step {}",
                self.a.step()
            );
        }
        self.live.insert(p, (n, stream, Vec::new()));
        self.allocs += 1;
        Ok(p)
    }

    /// `tensor.record_stream(stream)`.
    fn record(&mut self, p: usize, stream: usize) {
        let recorded = self.a.record_stream(p, stream);
        let block = self.live.get_mut(&p).expect("a live block");
        let expected = block.1 != stream && !block.2.contains(&stream);
        assert_eq!(recorded, expected, "record_stream({p:#x}, {stream:#x})");
        if expected {
            block.2.push(stream);
        }
    }

    /// The host drops its last reference: the bytes are guarded until the
    /// work queued now on every recorded stream has run. Its allocation
    /// stream orders the bytes' reuse on that stream.
    fn free(&mut self, p: usize) {
        let (n, own, used) = self.live.remove(&p).expect("a live block");
        self.a.free(p);
        let q = self.queues();
        let uses: Vec<(usize, u64)> = used
            .into_iter()
            .filter(|&s| q.busy(s))
            .map(|s| (s, q.mark(s)))
            .collect();
        let own_work = q.busy(own).then(|| (own, q.mark(own)));
        drop(q);
        if !uses.is_empty() {
            self.guarded.push((p, n, uses, None));
        }
        if let Some(w) = own_work {
            self.guarded.push((p, n, vec![w], Some(own)));
        }
    }

    fn hold(&mut self, s: usize) {
        self.queues().hold(s);
    }

    fn drain(&mut self, s: usize) {
        self.queues().drain(s);
    }
}

/// Which engine's pattern a step follows.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    Fsdp2,
    /// FSDP2 with `reshard_after_forward=False` (ZeRO-2 like): each block's
    /// unsharded parameters live from the forward's all-gather to the
    /// backward's reduce-scatter.
    Fsdp2KeepUnsharded,
    Zero3,
    Zero2,
}

/// One program: the pattern, each block's parameter shard bytes, and
/// where streams drain (`drains[i % len]` after the `i`-th operation: a
/// stream index, or none).
#[derive(Debug, Clone)]
struct Program {
    pattern: Pattern,
    shards: Vec<usize>,
    world: usize,
    drains: Vec<Option<usize>>,
    /// Whether the streams drain at the end of each step (a
    /// `synchronize()`); engines do not, so work may cross the boundary.
    sync_at_step_end: bool,
}

/// The state carried from one step to the next: gradient shards kept until
/// the optimizer step (FSDP2's reduce-scatter outputs, ZeRO's partitions).
#[derive(Default)]
struct Carried {
    grads: Vec<usize>,
}

struct Run<'e> {
    e: &'e mut Engine,
    prog: &'e Program,
    ops: usize,
}

impl Run<'_> {
    /// After each operation: the drain the program puts there.
    fn tick(&mut self) {
        if let Some(Some(s)) = self.prog.drains.get(self.ops % self.prog.drains.len()) {
            self.e.drain(STREAMS[*s % STREAMS.len()]);
        }
        self.ops += 1;
    }

    fn alloc(&mut self, n: usize, s: usize) -> std::result::Result<usize, TestCaseError> {
        let p = self.e.alloc(n, s)?;
        self.tick();
        Ok(p)
    }

    fn free(&mut self, p: usize) {
        self.e.free(p);
        self.tick();
    }

    /// FSDP2's unshard of a block: copy-in buffer and all-gather output on
    /// the all-gather stream, the unsharded parameter's storage resized back
    /// on the compute stream, the all-gather output freed after the
    /// copy-out (it waited for the all-gather stream's event).
    fn fsdp_unshard(&mut self, shard: usize) -> std::result::Result<usize, TestCaseError> {
        let w = self.prog.world;
        let input = self.alloc(shard, ALL_GATHER)?;
        let output = self.alloc(shard * w, ALL_GATHER)?;
        self.e.hold(ALL_GATHER);
        self.free(input);
        // The compute stream waits for the all-gather, then copies out.
        let param = self.alloc(shard * w, COMPUTE)?;
        self.e.hold(COMPUTE);
        self.e.record(output, COMPUTE);
        self.free(output);
        Ok(param)
    }

    /// One step of the pattern.
    fn step(&mut self, carried: &mut Carried) -> std::result::Result<(), TestCaseError> {
        let w = self.prog.world;
        let shards = self.prog.shards.clone();
        self.e.a.step_begin().expect("step_begin");
        match self.prog.pattern {
            Pattern::Fsdp2 | Pattern::Fsdp2KeepUnsharded => {
                let keep = matches!(self.prog.pattern, Pattern::Fsdp2KeepUnsharded);
                let mut acts = Vec::new();
                let mut unsharded = Vec::new();
                for &shard in &shards {
                    let param = self.fsdp_unshard(shard)?;
                    acts.push(self.alloc(shard * 3 + 512, COMPUTE)?);
                    self.e.hold(COMPUTE);
                    if keep {
                        // reshard_after_forward=False: the unsharded
                        // parameter lives on until its gradient's reduce-scatter.
                        unsharded.push(param);
                    } else {
                        // Reshard after forward: storage resized to zero.
                        self.free(param);
                    }
                }
                // zero_grad(set_to_none=True) after the last step's optimizer step.
                for g in carried.grads.drain(..) {
                    self.e.free(g);
                }
                for (i, &shard) in shards.iter().enumerate().rev() {
                    let param = match unsharded.pop() {
                        Some(p) => p,
                        None => self.fsdp_unshard(shard)?,
                    };
                    let grad = self.alloc(shard * w, COMPUTE)?;
                    self.e.hold(COMPUTE);
                    self.free(acts[i]);
                    if !keep {
                        self.free(param);
                    }
                    // Reduce-scatter: the unsharded gradient is read on the
                    // reduce-scatter stream, which allocates the output.
                    self.e.record(grad, REDUCE_SCATTER);
                    let out = self.alloc(shard, REDUCE_SCATTER)?;
                    self.e.hold(REDUCE_SCATTER);
                    self.free(grad);
                    if keep {
                        // Freed right after the reduce-scatter is issued,
                        // while compute may still read it.
                        self.free(param);
                    }
                    // The optimizer reads it on the compute stream.
                    self.e.record(out, COMPUTE);
                    carried.grads.push(out);
                }
            }
            Pattern::Zero3 => {
                // The first module's parameters, then each next one's
                // prefetched while this one computes.
                let mut gathered = Some(self.zero3_gather(shards[0])?);
                let mut acts = Vec::new();
                for i in 0..shards.len() {
                    let next = match shards.get(i + 1) {
                        Some(&s) => Some(self.zero3_gather(s)?),
                        None => None,
                    };
                    acts.push(self.alloc(shards[i] * 2 + 256, COMPUTE)?);
                    self.e.hold(COMPUTE);
                    // Released after the module's forward; compute may still read it.
                    if let Some(p) = gathered.take() {
                        self.free(p);
                    }
                    gathered = next;
                }
                for g in carried.grads.drain(..) {
                    self.e.free(g);
                }
                for (i, &shard) in shards.iter().enumerate().rev() {
                    let p = self.zero3_gather(shard)?;
                    let grad = self.alloc(shard * w, COMPUTE)?;
                    self.e.hold(COMPUTE);
                    self.free(acts[i]);
                    self.free(p);
                    // The gradient is reduce-scattered into this rank's
                    // partition on the side stream.
                    self.e.record(grad, REDUCE_SCATTER);
                    let part = self.alloc(shard, REDUCE_SCATTER)?;
                    self.e.hold(REDUCE_SCATTER);
                    self.free(grad);
                    self.e.record(part, COMPUTE);
                    carried.grads.push(part);
                }
            }
            Pattern::Zero2 => {
                let mut acts = Vec::new();
                for &shard in &shards {
                    acts.push(self.alloc(shard * w * 2 + 128, COMPUTE)?);
                    self.e.hold(COMPUTE);
                }
                for g in carried.grads.drain(..) {
                    self.e.free(g);
                }
                let mut bucket: Option<usize> = None;
                for (i, &shard) in shards.iter().enumerate().rev() {
                    let grad = self.alloc(shard * w, COMPUTE)?;
                    self.e.hold(COMPUTE);
                    self.free(acts[i]);
                    // The gradient is copied into the bucket; a full bucket is
                    // reduced on the side stream and freed before it completes.
                    let b = match bucket.take() {
                        Some(b) => b,
                        None => self.alloc(shards.iter().sum::<usize>() * w, COMPUTE)?,
                    };
                    self.free(grad);
                    if i % 2 == 0 {
                        self.e.record(b, REDUCE_SCATTER);
                        self.e.hold(REDUCE_SCATTER);
                        let part = self.alloc(shard, REDUCE_SCATTER)?;
                        self.free(b);
                        self.e.record(part, COMPUTE);
                        carried.grads.push(part);
                    } else {
                        bucket = Some(b);
                    }
                }
                if let Some(b) = bucket {
                    self.free(b);
                }
            }
        }
        // The optimizer step: a temporary per partition on the compute stream.
        for i in 0..carried.grads.len() {
            let n = self.e.live[&carried.grads[i]].0;
            let t = self.alloc(n, COMPUTE)?;
            self.e.hold(COMPUTE);
            self.free(t);
        }
        self.e.a.step_end().expect("step_end");
        if self.prog.sync_at_step_end {
            for s in STREAMS {
                self.e.drain(s);
            }
        }
        Ok(())
    }

    /// ZeRO-3's fetch of a module's parameters: the all-gather output on
    /// the side stream, `record_stream`ed on the compute stream that reads it.
    fn zero3_gather(&mut self, shard: usize) -> std::result::Result<usize, TestCaseError> {
        let p = self.alloc(shard * self.prog.world, ALL_GATHER)?;
        self.e.hold(ALL_GATHER);
        self.e.record(p, COMPUTE);
        Ok(p)
    }
}

/// Runs `prog` for `steps` steps; then drains every stream and checks that
/// nothing waits, nothing is live and nothing was counted as an error.
fn run(prog: &Program, steps: usize, policy: &str) -> std::result::Result<Engine, TestCaseError> {
    let mut e = Engine::new(policy);
    let mut carried = Carried::default();
    for _ in 0..steps {
        let mut r = Run {
            e: &mut e,
            prog,
            ops: 0,
        };
        r.step(&mut carried)?;
    }
    for g in carried.grads.drain(..) {
        e.free(g);
    }
    for s in STREAMS {
        e.drain(s);
    }
    // The next call polls the waiting blocks.
    e.a.step_begin().expect("step_begin");
    e.a.step_end().expect("step_end");
    prop_assert_eq!(e.a.pending_blocks(), 0);
    prop_assert_eq!(e.a.live_blocks(), 0);
    prop_assert!(e.live.is_empty());
    let s = e.a.stats();
    prop_assert_eq!(
        s.errors.double_free + s.errors.unknown_free + s.errors.event_failed,
        0,
        "{:?}",
        s.errors
    );
    prop_assert_eq!(s.errors.guard_violations, 0);
    prop_assert_eq!(s.requests, e.allocs);
    let d = e.a.device_stats();
    prop_assert_eq!(d.allocation.all.current, 0);
    prop_assert_eq!(d.active.all.current, 0);
    Ok(e)
}

const SHARDS: [usize; 4] = [4096, 24_576, 100_000, 1 << 20];

fn program() -> impl Strategy<Value = Program> {
    (
        prop_oneof![
            Just(Pattern::Fsdp2),
            Just(Pattern::Fsdp2KeepUnsharded),
            Just(Pattern::Zero3),
            Just(Pattern::Zero2)
        ],
        prop::collection::vec(prop::sample::select(&SHARDS[..]), 1..5),
        prop_oneof![Just(2usize), Just(4usize)],
        prop::collection::vec(prop::option::weighted(0.4, 0..STREAMS.len()), 1..12),
        any::<bool>(),
    )
        .prop_map(
            |(pattern, shards, world, drains, sync_at_step_end)| Program {
                pattern,
                shards,
                world,
                drains,
                sync_at_step_end,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn engine_stream_patterns_never_hand_out_bytes_a_pending_stream_uses(
        prog in program(),
        steps in 4usize..9,
        checked in any::<bool>(),
    ) {
        run(&prog, steps, &format!(r#", "replan_miss_steps": 1, "checked": {checked}"#))?;
    }
}

/// The steady steps of each pattern, streams lagging across the step
/// boundary (no synchronize), are served by the plan: the compute stream's
/// requests go to the slab once the recorded steps taught it, whatever the
/// side streams still hold.
#[test]
fn engine_patterns_are_planned_once_steady() {
    for pattern in [
        Pattern::Fsdp2,
        Pattern::Fsdp2KeepUnsharded,
        Pattern::Zero3,
        Pattern::Zero2,
    ] {
        let prog = Program {
            pattern,
            shards: vec![24_576, 100_000, 24_576, 1 << 20],
            world: 2,
            // The all-gather stream runs after every few operations, the
            // reduce-scatter stream less often, compute in between.
            drains: vec![None, Some(1), None, Some(0), None, None, Some(2), Some(0)],
            sync_at_step_end: false,
        };
        let e = run(&prog, 12, "").unwrap_or_else(|err| panic!("{pattern:?}: {err}"));
        let s = e.a.stats();
        assert_eq!(s.phase, "serving", "{pattern:?}: {s:?}");
        assert!(s.served_from_plan > 0, "{pattern:?}: {s:?}");
        assert_eq!(
            s.misses.size + s.misses.order + s.misses.unmatched,
            0,
            "{pattern:?}: the same requests every step: {s:?}"
        );
    }
}

/// FSDP's `untyped_storage().resize_(0)` and back: the same parameter's
/// storage freed and allocated again at the same size twice a step (after
/// forward, before backward), with nothing else in between that could take
/// its bytes; the plan serves every one and never hands a live byte out.
#[test]
fn storage_resized_to_zero_and_back_is_planned() {
    let mut e = Engine::new("");
    const PARAM: usize = 3 << 20;
    let mut kept = Vec::new();
    for _ in 0..10 {
        e.a.step_begin().unwrap();
        for _ in 0..2 {
            let p = e.alloc(PARAM, COMPUTE).unwrap();
            let act = e.alloc(PARAM / 4, COMPUTE).unwrap();
            kept.push(act);
            e.free(p);
        }
        for a in kept.drain(..) {
            e.free(a);
        }
        e.a.step_end().unwrap();
    }
    let s = e.a.stats();
    assert_eq!(s.fallback_allocations_last_step, 0, "{s:?}");
    assert_eq!(s.errors.double_free + s.errors.unknown_free, 0);
    assert!(s.served_share.is_some_and(|x| x > 0.6), "{s:?}");
}
