//! Live blocks of a CPU allocator, each written whole with a tag when made
//! and checked whole when freed: a page the allocator left unmapped under
//! a block faults, a byte another block wrote fails the check.

use std::collections::BTreeMap;

use tensor_arena_alloc::PlannedAllocator;

/// Live blocks by address: `addr -> (size, tag)`.
#[derive(Default)]
pub struct Written(pub BTreeMap<usize, (usize, u8)>);

impl Written {
    /// A block of `size` bytes from `a`, written whole.
    pub fn alloc(&mut self, a: &mut PlannedAllocator, size: usize) -> usize {
        let addr = a.alloc(size, 0, 0).expect("cpu memory");
        let tag = (self.0.len() % 251) as u8 + 1;
        // SAFETY: a live block of `size` bytes of host memory the allocator
        // just gave (the CPU backend, a mapped range); nothing else writes
        // it. A page the allocator failed to map would fault here.
        unsafe { std::ptr::write_bytes(addr as *mut u8, tag, size) };
        assert!(
            self.0.insert(addr, (size, tag)).is_none(),
            "{addr:#x} twice"
        );
        addr
    }

    /// Checks the block at `addr` whole, then frees it.
    pub fn free(&mut self, a: &mut PlannedAllocator, addr: usize) {
        let (size, tag) = self.0.remove(&addr).expect("freed once");
        // SAFETY: the block is live until the free below: `size` readable
        // bytes of host memory.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, size) };
        assert!(bytes.iter().all(|&b| b == tag), "{addr:#x} lost its bytes");
        a.free(addr);
    }
}

/// Replays a recorded trace's `events` through `a`, every block written
/// whole when made and checked whole when freed; the blocks still live at
/// the end are freed too.
pub fn replay_written(a: &mut PlannedAllocator, events: &[tensor_arena_alloc::trace::TraceEvent]) {
    use tensor_arena_alloc::trace::TraceEvent;
    let mut sh = Written::default();
    let mut live = std::collections::HashMap::new();
    for e in events {
        match *e {
            TraceEvent::StepBegin => a.step_begin().expect("begin"),
            TraceEvent::StepEnd => a.step_end().expect("end"),
            TraceEvent::Alloc { addr, size, .. } => {
                let got = sh.alloc(a, size.max(1));
                if let Some(old) = live.insert(addr, got) {
                    sh.free(a, old);
                }
            }
            TraceEvent::Free { addr, .. } => {
                if let Some(got) = live.remove(&addr) {
                    sh.free(a, got);
                }
            }
            TraceEvent::Phase(p) => a.set_request_phase(p),
            TraceEvent::SegmentAlloc { .. } | TraceEvent::SegmentFree { .. } => {}
        }
    }
    for (_, got) in live {
        sh.free(a, got);
    }
}

/// The trace at `path` replayed on host pages through
/// [`replay_written`], checked mode off and on: the allocator ends
/// serving, with no guard violation and nothing leaked.
pub fn replay_written_both_modes(path: &std::path::Path) {
    let events = super::loops::read_gz(path);
    for checked in [false, true] {
        let mut a = super::cpu(&format!(r#""checked": {checked}"#));
        replay_written(&mut a, &events);
        let s = a.stats();
        assert_eq!(s.phase, "serving", "{path:?}");
        assert_eq!(s.errors.guard_violations, 0, "{path:?}");
        assert_eq!(a.reset(), 0, "{path:?}: nothing leaked");
    }
}
