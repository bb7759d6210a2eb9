//! Checked mode: guard bytes after every buffer, poisoning of step-scoped
//! buffers when their lease ends, and reports that name the buffer that
//! overran.
//!
//! Every buffer's slab slot ends with at least 32 bytes past its padded
//! capacity (the ACL `+ 32` rule, plus alignment), which no view can reach.
//! In checked mode those bytes hold [`GUARD_BYTE`] while a lease is live and
//! are verified when it ends: any other value means something wrote past
//! the buffer's capacity (a device kernel with a tail bug, or a raw-pointer
//! write). When a step-scoped buffer's lifetime ends (its last phase is
//! left, or the step ends) its bytes are filled with [`POISON_BYTE`] (NaN in
//! every float type, -1 in `i32`), so a read of stale data — through a
//! buffer sharing those bytes, or in the next step — shows up. Off by
//! default; when off, the hot path pays one branch per lease.

use super::Arena;
use super::book::Slot;
use crate::device::Device;
use crate::error::GuardViolation;
use crate::plan::LifetimeKind;

/// The byte guard regions are filled with.
pub const GUARD_BYTE: u8 = 0xA5;
/// The byte step-scoped buffers are filled with when their lease ends.
pub const POISON_BYTE: u8 = 0xFF;

/// Arena settings chosen at creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaOptions {
    /// Guard zones and poisoning (see the module docs).
    pub checked: bool,
}

impl ArenaOptions {
    /// Checked mode on.
    pub fn checked() -> ArenaOptions {
        ArenaOptions { checked: true }
    }

    /// Checked mode when the environment variable `TENSOR_ARENA_CHECKED`
    /// is set to `1`, so a run can be checked without changing code.
    /// [`Arena::new`](crate::Arena::new) reads it; `Arena::with_options`
    /// takes the options it is given.
    pub fn from_env() -> ArenaOptions {
        ArenaOptions {
            checked: std::env::var("TENSOR_ARENA_CHECKED").is_ok_and(|v| v == "1"),
        }
    }
}

/// Whether `slot`'s lifetime ends when a step of mode `mode` goes from
/// timeline slot `from` to `to` (`None`: the step ends): the rule checked
/// mode poisons by, in the arena and in the
/// [`LeaseBook`](super::LeaseBook): at the end of a step, every
/// step-scoped buffer of the step's mode (the other modes' buffers were not
/// alive in it); at a phase change, the spans whose last phase lies in
/// `from..to`, all of the step's mode, whose phases are consecutive slots.
pub(crate) fn lifetime_ends(slot: &Slot, mode: u16, from: usize, to: Option<usize>) -> bool {
    match (slot.kind, to) {
        (LifetimeKind::Persistent, _) => false,
        (_, None) => slot.mode == mode,
        (LifetimeKind::Step, Some(_)) => false,
        (LifetimeKind::Phases, Some(to)) => slot.last >= from && slot.last < to,
    }
}

/// Pattern source for writes: device copies take byte slices, and a static
/// buffer avoids allocating on the lease path.
const CHUNK: usize = 4096;
static GUARD_FILL: [u8; CHUNK] = [GUARD_BYTE; CHUNK];
static POISON_FILL: [u8; CHUNK] = [POISON_BYTE; CHUNK];

impl<D: Device> Arena<D> {
    /// Fills `len` bytes at `offset` with `pattern` (a static buffer).
    fn fill(&self, offset: usize, len: usize, pattern: &'static [u8; CHUNK]) {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK);
            // A failed device copy leaves the guard unchecked rather than
            // failing the lease; verification then reports what it finds.
            let _ = self.device.write(&self.slab, offset + done, &pattern[..n]);
            done += n;
        }
    }

    /// Guard bytes of `slot`: `[offset + capacity bytes, offset + size)`.
    fn guard_range(slot: &Slot) -> (usize, usize) {
        let start = slot.offset + slot.capacity_bytes;
        (start, slot.offset + slot.size - start)
    }

    /// Poisons every step-scoped buffer and arms the persistent buffers'
    /// guards (creation). A step-scoped buffer's guard is armed when it is
    /// leased: until then its bytes may hold another buffer's data.
    pub(crate) fn arm_all(&self) {
        for slot in self.book.slots.iter() {
            if slot.kind == LifetimeKind::Persistent {
                let (start, len) = Self::guard_range(slot);
                self.fill(start, len, &GUARD_FILL);
            } else {
                self.fill(slot.offset, slot.size, &POISON_FILL);
            }
        }
    }

    /// On lease: re-arm the guard (another buffer may have used the bytes)
    /// and remember who holds the buffer. Kept out of line so the unchecked
    /// lease path stays as short as before.
    #[cold]
    #[inline(never)]
    pub(crate) fn on_acquire(&self, slot: &Slot) {
        let (start, len) = Self::guard_range(slot);
        self.fill(start, len, &GUARD_FILL);
        let c = &self.book.counters;
        slot.holder
            .set((slot.leases.get(), c.steps.get(), self.book.phase.get()));
    }

    /// On release: verify the guard and record a violation.
    #[cold]
    #[inline(never)]
    pub(crate) fn on_release(&self, slot: &Slot, view_elements: usize) {
        if let Some(v) = self.inspect(slot, view_elements) {
            self.violations.borrow_mut().push(v);
        }
    }

    /// Poisons the buffers whose lifetime ends when the step goes from
    /// phase `from` to `to` (see [`lifetime_ends`]).
    pub(crate) fn poison_ended(&self, from: usize, to: Option<usize>) {
        let mode = self.book.mode.get();
        for slot in self.book.slots.iter() {
            if lifetime_ends(slot, mode, from, to) {
                // The whole slot, guard included: no live lease shares it
                // (it was alive until now), the guard is re-armed by the
                // next lease, and a larger buffer reusing these bytes must
                // not read guard bytes as data.
                self.fill(slot.offset, slot.size, &POISON_FILL);
            }
        }
    }

    /// Reads `slot`'s guard and describes any damage.
    pub(crate) fn inspect(&self, slot: &Slot, view_elements: usize) -> Option<GuardViolation> {
        let (start, len) = Self::guard_range(slot);
        let mut buf = [0u8; 512];
        let mut last_bad = None;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(buf.len());
            if self
                .device
                .read(&self.slab, start + done, &mut buf[..n])
                .is_err()
            {
                break;
            }
            if let Some(i) = buf[..n].iter().rposition(|&b| b != GUARD_BYTE) {
                last_bad = Some(done + i);
            }
            done += n;
        }
        let last_bad = last_bad?;
        let (lease, step, phase) = slot.holder.get();
        Some(GuardViolation {
            buffer: self.plan.buffers()[slot.index as usize].name().to_owned(),
            capacity_bytes: slot.capacity_bytes,
            overrun_bytes: last_bad + 1,
            guard_offset: start,
            lease,
            step,
            phase: self.plan.phase_name(phase).to_owned(),
            view_elements,
        })
    }

    /// Verifies the guards of the persistent buffers (theirs are never
    /// shared, so they can be checked at any time).
    pub(crate) fn check_persistent(&self) {
        for slot in self.book.slots.iter() {
            if slot.kind == LifetimeKind::Persistent
                && !slot.live.get()
                && let Some(v) = self.inspect(slot, slot.elements)
            {
                self.violations.borrow_mut().push(v);
                // Re-arm so the same damage is reported once.
                let (start, len) = Self::guard_range(slot);
                self.fill(start, len, &GUARD_FILL);
            }
        }
    }
}
