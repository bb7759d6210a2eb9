//! Stream-safe reuse on the simulated ACL runtime: the NPU backing records
//! and queries real `aclrtRecordEvent` / `aclrtQueryEventStatus` calls of
//! the simulation, whose `tasim_hold_stream` / `tasim_release_stream` keep
//! a side stream's work (and the events recorded after it) pending, as a
//! collective still reading a buffer does on a device.
//! `cargo test --release -p tensor-arena-alloc record_stream` runs these.

use std::collections::{BTreeMap, HashSet};
use std::ffi::c_void;
use std::sync::Mutex;

use libloading::Library;
use proptest::prelude::*;
use tensor_arena_alloc::{Config, PlannedAllocator};

/// One simulated runtime per process: the tests take turns.
static TURN: Mutex<()> = Mutex::new(());

fn sim_lib() -> String {
    let dir = tensor_arena::device::ascend::SIMULATED_RUNTIME_DIR.expect(
        "the simulated ACL runtime is built with the crate when g++ exists (apt-get install g++)",
    );
    format!("{dir}/libascendcl.so")
}

type Stream = *mut c_void;

/// The simulation's stream functions, from the library the backing loaded.
struct Sim {
    create: unsafe extern "C" fn(*mut Stream) -> i32,
    destroy: unsafe extern "C" fn(Stream) -> i32,
    hold: unsafe extern "C" fn(Stream) -> i32,
    release: unsafe extern "C" fn(Stream) -> i32,
    _lib: Library,
}

impl Sim {
    fn open() -> Sim {
        // SAFETY: the simulated runtime's initialisers have no
        // preconditions; it is loaded already (the backing's copy), so this
        // is the same instance.
        let lib = unsafe { Library::new(sim_lib()) }.expect("the simulated runtime loads");
        // SAFETY: the symbols have these C signatures (kernels/sim/runtime.cpp).
        unsafe {
            Sim {
                create: *lib.get(b"aclrtCreateStream").unwrap(),
                destroy: *lib.get(b"aclrtDestroyStream").unwrap(),
                hold: *lib.get(b"tasim_hold_stream").unwrap(),
                release: *lib.get(b"tasim_release_stream").unwrap(),
                _lib: lib,
            }
        }
    }

    /// A new stream on this thread's device (the allocator set it).
    fn stream(&self) -> usize {
        let mut s: Stream = std::ptr::null_mut();
        // SAFETY: a valid out pointer.
        assert_eq!(unsafe { (self.create)(&mut s) }, 0);
        s as usize
    }

    fn hold(&self, s: usize) {
        // SAFETY: a live stream of the simulation.
        assert_eq!(unsafe { (self.hold)(s as Stream) }, 0);
    }

    fn release(&self, s: usize) {
        // SAFETY: as above.
        assert_eq!(unsafe { (self.release)(s as Stream) }, 0);
    }

    fn destroy(&self, s: usize) {
        // SAFETY: a live stream, not used afterwards.
        assert_eq!(unsafe { (self.destroy)(s as Stream) }, 0);
    }
}

fn npu_allocator(policy: &str) -> PlannedAllocator {
    let json = format!(
        r#"{{"backend": "npu", "log_errors": false, "npu_runtime_lib": "{}", "warmup_steps": 1, "record_steps": 1{policy}}}"#,
        sim_lib()
    );
    PlannedAllocator::new(Config::from_json(&json).unwrap())
        .expect("the NPU backing on the simulation")
}

fn overlaps(a: usize, alen: usize, b: usize, blen: usize) -> bool {
    a < b + blen && b < a + alen
}

/// Per step: `x` is allocated, used on a side stream that is then held (a
/// collective still reading it), freed by the host, and `y` of the same
/// size is allocated while the side stream is still held. Returns, per
/// step, whether `y` shares a byte with `x`, and the allocator.
fn side_stream_steps(record: bool, steps: usize) -> (Vec<bool>, PlannedAllocator) {
    let mut a = npu_allocator("");
    let sim = Sim::open();
    let side = sim.stream();
    const N: usize = 1 << 20;
    let mut shared = Vec::new();
    for _ in 0..steps {
        a.step_begin().unwrap();
        let x = a.alloc(N, 0, 0).unwrap();
        if record {
            assert!(a.record_stream(x, side));
        }
        sim.hold(side);
        a.free(x);
        let y = a.alloc(N, 0, 0).unwrap();
        shared.push(overlaps(x, N, y, N));
        a.free(y);
        sim.release(side);
        a.step_end().unwrap();
    }
    sim.destroy(side);
    (shared, a)
}

#[test]
fn record_stream_keeps_bytes_a_held_stream_uses_until_it_is_released() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    // Without the hook the hazard is real: the freed bytes go out again
    // while the side stream still reads them, from the plan's first step
    // on (before the plan every request has a device region of its own).
    let (shared, a) = side_stream_steps(false, 8);
    assert!(shared[2], "the plan reuses x's bytes at once: {shared:?}");
    assert!(shared[7], "the plan reuses x's bytes at once: {shared:?}");
    assert_eq!(a.phase(), tensor_arena_alloc::Phase::Serving);
    // With it, never; and the plan learns the site: steady steps are
    // served from the plan with no pending miss once it re-planned.
    let (shared, a) = side_stream_steps(true, 12);
    assert!(shared.iter().all(|&s| !s), "{shared:?}");
    let s = a.stats();
    assert_eq!(s.errors.event_failed, 0);
    assert_eq!(
        a.pending_blocks(),
        0,
        "released streams leave nothing waiting"
    );
    assert_eq!(a.live_blocks(), 0);
    assert_eq!(
        s.fallback_allocations_last_step, 0,
        "the last step is served from the plan: {s:?}"
    );
    let d = a.device_stats();
    assert_eq!(d.allocation.all.current, 0);
    assert_eq!(d.active.all.current, 0);
}

#[test]
fn record_stream_events_complete_in_the_caching_fallback_only_after_release() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut a = npu_allocator("");
    let sim = Sim::open();
    let side = sim.stream();
    // Outside steps: the fallback (an exact region before the first plan).
    let x = a.alloc(4096, 0, 0).unwrap();
    assert!(a.record_stream(x, side));
    sim.hold(side);
    a.free(x);
    assert_eq!(a.pending_blocks(), 1);
    let d = a.device_stats();
    // torch's accounting: no longer allocated, still active.
    assert_eq!(d.allocation.all.current, 0);
    assert_eq!(d.active.all.current, 1);
    for _ in 0..4 {
        let y = a.alloc(4096, 0, 0).unwrap();
        assert!(!overlaps(x, 4096, y, 4096));
        a.free(y);
    }
    assert_eq!(a.pending_blocks(), 1);
    sim.release(side);
    // The next call polls.
    let y = a.alloc(4096, 0, 0).unwrap();
    assert_eq!(a.pending_blocks(), 0);
    a.free(y);
    assert_eq!(a.device_stats().active.all.current, 0);
    // erase_stream drops the wait as torch_npu's eraseStream does.
    let z = a.alloc(4096, 0, 0).unwrap();
    assert!(a.record_stream(z, side));
    sim.hold(side);
    a.free(z);
    assert_eq!(a.pending_blocks(), 1);
    assert!(a.erase_stream(z, side));
    assert_eq!(a.pending_blocks(), 0);
    sim.release(side);
    sim.destroy(side);
    assert_eq!(a.stats().errors.double_free, 0);
}

/// One operation of a random multi-stream program.
#[derive(Debug, Clone)]
enum Op {
    /// Allocate `SIZES[size]` on stream `stream` (0: the default stream).
    Alloc {
        size: usize,
        stream: usize,
    },
    /// Mark the `block`-th live block (mod the count) as used on a side
    /// stream.
    Record {
        block: usize,
        side: usize,
    },
    /// Free the `block`-th live block.
    Free {
        block: usize,
    },
    Hold {
        side: usize,
    },
    Release {
        side: usize,
    },
}

const SIZES: [usize; 5] = [512, 4096, 100_000, 1 << 20, 3 << 20];
const SIDES: usize = 2;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SIZES.len(), 0..=SIDES).prop_map(|(size, s)| Op::Alloc {
            size,
            // Mostly the default stream: the plan's.
            stream: if s == SIDES { 1 } else { 0 },
        }),
        2 => (0..64usize, 0..SIDES).prop_map(|(block, side)| Op::Record { block, side }),
        3 => (0..64usize).prop_map(|block| Op::Free { block }),
        1 => (0..SIDES).prop_map(|side| Op::Hold { side }),
        1 => (0..SIDES).prop_map(|side| Op::Release { side }),
    ]
}

/// The shadow: live blocks, and the byte ranges freed while a stream that
/// used them was held (with those streams).
#[derive(Default)]
struct Shadow {
    /// Address -> bytes, allocation stream, streams recorded on it.
    live: BTreeMap<usize, (usize, usize, HashSet<usize>)>,
    guarded: Vec<(usize, usize, HashSet<usize>)>,
    held: HashSet<usize>,
    /// The block kept across steps (outside `live`: the steps' ops never
    /// free it).
    keep: Option<(usize, usize)>,
}

impl Shadow {
    fn check_new(&self, addr: usize, len: usize) -> Result<(), TestCaseError> {
        if let Some((b, blen)) = self.keep {
            prop_assert!(
                !overlaps(addr, len, b, blen),
                "{addr:#x}+{len} overlaps the kept block"
            );
        }
        for (&b, &(blen, _, _)) in &self.live {
            prop_assert!(
                !overlaps(addr, len, b, blen),
                "{addr:#x}+{len} overlaps live {b:#x}+{blen}"
            );
        }
        for (b, blen, streams) in &self.guarded {
            prop_assert!(
                !overlaps(addr, len, *b, *blen),
                "{addr:#x}+{len} handed out while streams {streams:?} still use {b:#x}+{blen}"
            );
        }
        Ok(())
    }

    fn release(&mut self, side: usize) {
        self.held.remove(&side);
        for g in &mut self.guarded {
            g.2.remove(&side);
        }
        self.guarded.retain(|g| !g.2.is_empty());
    }
}

/// Runs `body` in every one of `steps` steps (plus a persistent block
/// outside steps that a side stream uses): warm-up and recorded steps go
/// through the caching pools, later ones through the plan.
fn run_program(
    body: &[Op],
    steps: usize,
    release_between: &[bool],
    checked: bool,
) -> Result<(), TestCaseError> {
    let mut a = npu_allocator(&format!(
        r#", "replan_miss_steps": 1, "checked": {checked}"#
    ));
    let sim = Sim::open();
    let sides: Vec<usize> = (0..SIDES).map(|_| sim.stream()).collect();
    let mut shadow = Shadow::default();
    let mut allocs = 0usize;
    let mut frees = 0usize;
    let keep = a.alloc(8192, 0, 0).unwrap();
    shadow.check_new(keep, 8192)?;
    shadow.keep = Some((keep, 8192));
    allocs += 1;
    for step in 0..steps {
        a.step_begin().unwrap();
        for op in body {
            match *op {
                Op::Alloc { size, stream } => {
                    let n = SIZES[size];
                    let s = if stream == 0 { 0 } else { sides[0] };
                    let p = a.alloc(n, 0, s).expect("the simulated device has room");
                    shadow.check_new(p, n)?;
                    shadow.live.insert(p, (n, s, HashSet::new()));
                    allocs += 1;
                }
                Op::Record { block, side } => {
                    if shadow.live.is_empty() {
                        continue;
                    }
                    let addr = *shadow.live.keys().nth(block % shadow.live.len()).unwrap();
                    a.record_stream(addr, sides[side]);
                    // Its own stream orders its reuse already (torch
                    // ignores it too).
                    let block = shadow.live.get_mut(&addr).unwrap();
                    if block.1 != sides[side] {
                        block.2.insert(sides[side]);
                    }
                }
                Op::Free { block } => {
                    if shadow.live.is_empty() {
                        continue;
                    }
                    let addr = *shadow.live.keys().nth(block % shadow.live.len()).unwrap();
                    let (len, _, used) = shadow.live.remove(&addr).unwrap();
                    a.free(addr);
                    frees += 1;
                    let waiting: HashSet<usize> =
                        used.intersection(&shadow.held).copied().collect();
                    if !waiting.is_empty() {
                        shadow.guarded.push((addr, len, waiting));
                    }
                }
                Op::Hold { side } => {
                    sim.hold(sides[side]);
                    shadow.held.insert(sides[side]);
                }
                Op::Release { side } => {
                    sim.release(sides[side]);
                    shadow.release(sides[side]);
                }
            }
        }
        // What the step made and did not free goes now (except the
        // persistent block).
        let rest: Vec<usize> = shadow.live.keys().copied().collect();
        for p in rest {
            let (len, _, used) = shadow.live.remove(&p).unwrap();
            a.free(p);
            frees += 1;
            let waiting: HashSet<usize> = used.intersection(&shadow.held).copied().collect();
            if !waiting.is_empty() {
                shadow.guarded.push((p, len, waiting));
            }
        }
        a.step_end().unwrap();
        if release_between[step % release_between.len()] {
            for &s in &sides {
                sim.release(s);
                shadow.release(s);
            }
        }
    }
    // The kept block (a fallback block by now) is used on a side stream
    // and freed while that stream may be held.
    prop_assert!(a.record_stream(keep, sides[1]));
    a.free(keep);
    shadow.keep = None;
    frees += 1;
    if shadow.held.contains(&sides[1]) {
        shadow.guarded.push((keep, 8192, HashSet::from([sides[1]])));
    }
    let late = a.alloc(8192, 0, 0).unwrap();
    shadow.check_new(late, 8192)?;
    a.free(late);
    prop_assert_eq!(allocs, frees);
    prop_assert_eq!(a.phase(), tensor_arena_alloc::Phase::Serving);
    for &s in &sides {
        sim.release(s);
        shadow.release(s);
    }
    // The next call polls: nothing waits, nothing is live.
    a.step_begin().unwrap();
    a.step_end().unwrap();
    prop_assert_eq!(a.pending_blocks(), 0);
    prop_assert_eq!(a.live_blocks(), 0);
    let s = a.stats();
    prop_assert_eq!(
        s.errors.double_free + s.errors.unknown_free,
        0,
        "every block freed once: {:?}",
        s.errors
    );
    prop_assert_eq!(s.errors.event_failed, 0);
    // Checked mode poisons a waiting slot only once its events completed,
    // and finds every guard intact.
    prop_assert_eq!(s.errors.guard_violations, 0);
    let d = a.device_stats();
    prop_assert_eq!(d.allocation.all.current, 0);
    prop_assert_eq!(d.active.all.current, 0);
    prop_assert_eq!(d.requested_bytes.all.current, 0);
    for s in sides {
        sim.destroy(s);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn record_stream_programs_never_hand_out_bytes_a_held_stream_uses(
        body in prop::collection::vec(op(), 1..24),
        // A loose first plan waits up to three recorded steps
        // (allocator/first_plan.rs): warm-up, recording and three waits
        // leave a sixth step served.
        steps in 6usize..10,
        release_between in prop::collection::vec(any::<bool>(), 1..4),
        checked in any::<bool>(),
    ) {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        run_program(&body, steps, &release_between, checked)?;
    }
}

#[test]
fn a_shrinking_replan_keeps_the_pages_of_blocks_a_held_stream_uses() {
    // Found by the property above (checked mode): every step frees a block
    // used on a held side stream; a re-plan whose slab is lower shrank the
    // region to its highest live block and unmapped the pages past it,
    // the waiting blocks' among them (their guards then unreadable: four
    // guard violations, and on a device the side stream's kernels would
    // have read unmapped memory).
    let size = |size| Op::Alloc { size, stream: 0 };
    let body = [
        size(0),
        size(4),
        size(0),
        Op::Hold { side: 0 },
        size(0),
        size(0),
        Op::Record { block: 53, side: 0 },
    ];
    for checked in [true, false] {
        run_program(&body, 6, &[false], checked).expect("no byte of a waiting block lost");
    }
}

#[test]
fn record_stream_steady_steps_are_planned_when_a_side_stream_lags_a_step() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    // A collective (the side stream) still reads step N's bucket at the
    // start of step N + 1: the plan gives the bucket's site two slots used
    // by alternate steps, each kept for the whole step, so neither the next
    // step's first request nor this step's later ones miss or overlap.
    let mut a = npu_allocator("");
    let sim = Sim::open();
    let side = sim.stream();
    const B: usize = 256 << 10;
    let mut prev: Option<usize> = None;
    for _ in 0..12 {
        a.step_begin().unwrap();
        let act = a.alloc(1 << 20, 0, 0).unwrap();
        if let Some(prev) = prev {
            assert!(
                !overlaps(act, 1 << 20, prev, B),
                "the last step's bucket is still read"
            );
        }
        // The last step's collective completes; this step's starts.
        sim.release(side);
        sim.hold(side);
        let bucket = a.alloc(B, 0, 0).unwrap();
        assert!(a.record_stream(bucket, side));
        a.free(act);
        a.free(bucket);
        let tmp = a.alloc(B, 0, 0).unwrap();
        assert!(!overlaps(tmp, B, bucket, B), "the bucket is still read");
        a.free(tmp);
        a.step_end().unwrap();
        prev = Some(bucket);
    }
    sim.release(side);
    let s = a.stats();
    assert_eq!(s.fallback_allocations_last_step, 0, "{s:?}");
    assert_eq!(
        s.misses.pending, 0,
        "the recorded steps taught the plan already: {s:?}"
    );
    assert!(
        a.slab()
            .unwrap()
            .plan
            .sites
            .iter()
            .any(|s| s.alternate.is_some())
    );
    sim.destroy(side);
}

#[test]
fn record_stream_bad_input_is_counted_never_acted_on() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut a = npu_allocator("");
    let sim = Sim::open();
    let side = sim.stream();
    // Not a live block: nothing recorded.
    assert!(!a.record_stream(0x1234, side));
    assert!(!a.erase_stream(0x1234, side));
    let x = a.alloc(4096, 0, 0).unwrap();
    assert!(a.record_stream(x, side));
    sim.hold(side);
    a.free(x);
    // A second free of a block that waits: a double free, not a second wait.
    a.free(x);
    assert_eq!(a.stats().errors.double_free, 1);
    assert_eq!(a.pending_blocks(), 1);
    // record_stream on a freed block does nothing.
    assert!(!a.record_stream(x, side));
    sim.release(side);
    a.step_begin().unwrap();
    a.step_end().unwrap();
    assert_eq!(a.pending_blocks(), 0);
    assert_eq!(a.live_blocks(), 0);
    sim.destroy(side);
}
