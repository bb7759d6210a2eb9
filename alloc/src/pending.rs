//! Stream-safe reuse, the bookkeeping: which live blocks other streams use
//! (`record_stream`), and which freed blocks wait for events recorded on
//! those streams at their free before their bytes may be handed out again.
//! Plain data: the allocator records and queries the events through its
//! backing (allocator/streams.rs).

use std::collections::HashMap;

/// Where a pending block's bytes live, and what completing it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Home {
    /// A planned slot (of the current or a retiring slab): its bytes stay
    /// out of serving until completion.
    Slab {
        /// The slot's bytes.
        slot: u64,
        /// The bytes asked for.
        size: u64,
    },
    /// A fallback block, still allocated in the caching model.
    Fallback,
    /// A scratch-pool block, still allocated in its caching model.
    Scratch,
    /// A warm-up exact region, not yet released.
    Exact,
}

/// A freed block waiting for its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Its address.
    pub addr: usize,
    /// Bytes kept out of use from `addr`.
    pub len: u64,
    /// Where it lives.
    pub home: Home,
    /// `(stream, event)` pairs not completed yet.
    pub events: Vec<(usize, usize)>,
    /// An event could not be recorded: the block waits until `reset`
    /// (never handed out on a guess).
    pub stuck: bool,
}

/// The stream state of one allocator.
#[derive(Debug, Default)]
pub struct StreamUses {
    /// Live block address -> the streams recorded on it (other than its
    /// allocation stream).
    uses: HashMap<usize, Vec<usize>>,
    /// Freed blocks whose events are pending.
    pending: Vec<Pending>,
}

impl StreamUses {
    /// Notes that the live block at `addr` is used on `stream`; `false`
    /// when it was noted already.
    pub fn record(&mut self, addr: usize, stream: usize) -> bool {
        let streams = self.uses.entry(addr).or_default();
        if streams.contains(&stream) {
            return false;
        }
        streams.push(stream);
        true
    }

    /// Forgets `stream` for the live block at `addr`; `true` when it was
    /// recorded.
    pub fn erase_live(&mut self, addr: usize, stream: usize) -> bool {
        let Some(streams) = self.uses.get_mut(&addr) else {
            return false;
        };
        let before = streams.len();
        streams.retain(|&s| s != stream);
        let erased = streams.len() != before;
        if streams.is_empty() {
            self.uses.remove(&addr);
        }
        erased
    }

    /// The streams recorded on the block at `addr`, taken at its free
    /// (`None` when there were none: the common, cheap case).
    pub fn take(&mut self, addr: usize) -> Option<Vec<usize>> {
        if self.uses.is_empty() {
            return None;
        }
        self.uses.remove(&addr)
    }

    /// Adds a freed block whose events are pending.
    pub fn push(&mut self, p: Pending) {
        self.pending.push(p);
    }

    /// Whether no freed block waits.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Freed blocks waiting.
    pub fn pending(&self) -> &[Pending] {
        &self.pending
    }

    /// Mutable access for polling.
    pub fn pending_mut(&mut self) -> &mut Vec<Pending> {
        &mut self.pending
    }

    /// The waiting block starting at `addr`.
    pub fn pending_at(&self, addr: usize) -> Option<usize> {
        self.pending.iter().position(|p| p.addr == addr)
    }

    /// Whether some waiting block holds a byte of `[addr, addr + len)`.
    pub fn overlaps(&self, addr: usize, len: u64) -> bool {
        let end = addr as u128 + len as u128;
        self.pending
            .iter()
            .any(|p| (p.addr as u128) < end && (addr as u128) < p.addr as u128 + p.len as u128)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(addr: usize, len: u64) -> Pending {
        Pending {
            addr,
            len,
            home: Home::Fallback,
            events: vec![(1, 7)],
            stuck: false,
        }
    }

    #[test]
    fn uses_are_per_block_and_per_stream() {
        let mut u = StreamUses::default();
        assert!(u.take(100).is_none());
        assert!(u.record(100, 1));
        assert!(!u.record(100, 1));
        assert!(u.record(100, 2));
        assert!(u.erase_live(100, 1));
        assert!(!u.erase_live(100, 1));
        assert_eq!(u.take(100), Some(vec![2]));
        assert!(u.take(100).is_none());
    }

    #[test]
    fn overlap_is_half_open() {
        let mut u = StreamUses::default();
        u.push(waiting(1000, 512));
        // Every byte position checked against a plain interval test.
        for start in (0..2000).step_by(64) {
            for len in [1u64, 64, 512, 1024] {
                let expect = start < 1512 && start + len as usize > 1000;
                assert_eq!(u.overlaps(start, len), expect, "{start}+{len}");
            }
        }
        assert_eq!(u.pending_at(1000), Some(0));
    }
}
