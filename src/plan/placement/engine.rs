//! The branch and bound itself: one depth-first run at a fixed capacity
//! with one static buffer preorder and a node limit.
//!
//! The ideas are MiniMalloc's (M. D. Moffitt, "MiniMalloc: A Lightweight
//! Memory Allocator for Hardware-Accelerated Machine Learning", ASPLOS
//! 2023); the code is this crate's own:
//!
//! - *Canonical solutions.* Every buffer goes to its lowest offset given
//!   the buffers placed before it (its *min offset*), and buffers are placed
//!   in non-decreasing (offset, preorder rank). Any placement can be turned
//!   into such a one without raising its height, so nothing is lost.
//! - *Lower-bound pruning (section inference).* In every section, the
//!   buffers not yet placed need their total size above the section's
//!   floor: the lowest min offset among them (kept exact here), and never
//!   below the offset of the last placement. Above the capacity: prune.
//! - *Dominance.* A placement at or above the lowest `min offset + size` of
//!   any unplaced buffer leaves a gap that buffer could fill below it; the
//!   partial solution with that buffer placed first dominates, so skip it.
//!   A buffer with nothing unplaced over it ("hatless") is best placed at
//!   its min offset, so if that fails no sibling can succeed.
//! - *Dynamic decomposition.* When no unplaced buffer spans a section
//!   boundary any more, the two sides are independent: solve them one after
//!   the other, and a failure of one fails the placement that split them.
//!
//! The search is iterative (an explicit frame stack), so deep problems
//! cannot overflow the call stack, and every change is undone through a
//! trail, so the state after a run equals the state before it.

use std::time::Instant;

use super::sweep::Sweep;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Run {
    /// A placement within the capacity; see [`Engine::solution`].
    Found,
    /// Proven: no placement within the capacity.
    Infeasible,
    /// The node limit ran out.
    NodeLimit,
    /// The deadline passed.
    Deadline,
}

/// One key of a static preorder; all sort largest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    /// The largest section total (at the time of ordering) over the
    /// buffer's sections.
    Total,
    /// Lifetime length.
    Width,
    /// Size × lifetime length.
    Area,
}

/// MiniMalloc's three default preorders, tried round robin.
pub(super) const PREORDERS: [[Key; 3]; 3] = [
    [Key::Width, Key::Area, Key::Total],
    [Key::Total, Key::Area, Key::Width],
    [Key::Total, Key::Width, Key::Area],
];

/// The min offset of a placed buffer: above every real one, so minima
/// over a section skip placed buffers without a test.
const PLACED: usize = usize::MAX;

/// An unplaced buffer in a node's ordering.
#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: usize,
    rank: u32,
    buf: u32,
}

impl Entry {
    #[inline]
    fn key(&self) -> (usize, u32) {
        (self.offset, self.rank)
    }
}

/// An independent piece of the problem: a section range and its buffers.
#[derive(Debug, Clone, Copy)]
struct Part {
    sec_lo: u32,
    sec_hi: u32,
    bufs_start: u32,
    bufs_end: u32,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    part: u32,
    ord_start: u32,
    ord_end: u32,
    /// Next ordering position to try, and one past the last candidate.
    cursor: u32,
    stop: u32,
    /// The canonical lower bound on the next placement.
    last_offset: usize,
    last_rank: u32,
    started: bool,
    /// The placement whose subtree is being searched.
    placed: Option<Placement>,
}

#[derive(Debug, Clone, Copy)]
struct Placement {
    buf: u32,
    offset: usize,
    min_offset_mark: u32,
    floor_mark: u32,
    hatless: bool,
}

#[derive(Debug, Clone, Copy)]
struct Split {
    parts_start: u32,
    parts_end: u32,
    next: u32,
    part_bufs_mark: u32,
}

#[derive(Debug, Clone, Copy)]
enum Frame {
    Node(Node),
    Split(Split),
}

/// Search state; reused across runs.
pub(super) struct Engine<'a> {
    sw: &'a Sweep,
    capacity: usize,
    preorder: [Key; 3],
    /// Min offset of each unplaced buffer; `PLACED` for placed ones.
    min_offset: Vec<usize>,
    floor: Vec<usize>,
    /// The lowest offset each buffer may take (0 unless set by
    /// [`Engine::set_release`]), and each section's floor from them.
    release: Vec<usize>,
    release_floor: Vec<usize>,
    /// The offset a held buffer must take ([`Engine::set_pins`]);
    /// `usize::MAX` for a free one.
    pin: Vec<usize>,
    /// Whether the last [`Engine::place`] pushed a held buffer above its
    /// pin.
    broken: bool,
    /// Whether any buffer is held (the checks are skipped otherwise).
    held: bool,
    /// For each free buffer, the rooms `[pin, pin + size)` of the held
    /// buffers alive with it, by pin: its min offset skips them (see
    /// [`Engine::clear_of_held`]).
    obstacles: Vec<Vec<(usize, usize)>>,
    /// For each section, the rooms of its held buffers, by pin.
    section_rooms: Vec<Vec<(usize, usize)>>,
    total: Vec<usize>,
    cuts: Vec<u32>,
    solution: Vec<usize>,
    min_offset_trail: Vec<(u32, usize)>,
    floor_trail: Vec<(u32, usize)>,
    stamp: Vec<u32>,
    generation: u32,
    dirty: Vec<u32>,
    new_cuts: Vec<u32>,
    ord: Vec<Entry>,
    parts: Vec<Part>,
    part_bufs: Vec<u32>,
    frames: Vec<Frame>,
    keys: Vec<([u128; 3], u32)>,
    nodes: u64,
    node_limit: u64,
    deadline: Option<Instant>,
}

impl<'a> Engine<'a> {
    pub(super) fn new(sw: &'a Sweep) -> Engine<'a> {
        let n = sw.len();
        let s = sw.sections();
        Engine {
            sw,
            capacity: 0,
            preorder: PREORDERS[0],
            min_offset: vec![0; n],
            floor: vec![0; s],
            release: vec![0; n],
            release_floor: vec![0; s],
            pin: vec![usize::MAX; n],
            broken: false,
            held: false,
            obstacles: Vec::new(),
            section_rooms: Vec::new(),
            total: sw.totals.clone(),
            cuts: sw.cuts.clone(),
            solution: vec![0; n],
            min_offset_trail: Vec::new(),
            floor_trail: Vec::new(),
            stamp: vec![0; s],
            generation: 0,
            dirty: Vec::new(),
            new_cuts: Vec::new(),
            ord: Vec::new(),
            parts: Vec::new(),
            part_bufs: Vec::new(),
            frames: Vec::new(),
            keys: Vec::new(),
            nodes: 0,
            node_limit: 0,
            deadline: None,
        }
    }

    /// Every buffer (by the sweep's numbers) placed at or above
    /// `release[b]`: what lies below is held by buffers not in this
    /// search.
    pub(super) fn set_release(&mut self, release: &[usize]) {
        self.release.copy_from_slice(release);
        for s in 0..self.release_floor.len() {
            self.release_floor[s] = section_min(self.sw, s, release);
        }
    }

    /// Held buffers (by the sweep's numbers): `pin[b]` is the offset `b`
    /// must take (its release as well, see [`Engine::set_release`]),
    /// `usize::MAX` where `b` is free. A held buffer is placed in its turn
    /// of the canonical order like any other, but a placement that pushes
    /// its min offset above its pin fails, and no buffer is placed after
    /// it in the order while it is unplaced: the holes under a held buffer
    /// stay usable by the free buffers placed before it.
    pub(super) fn set_pins(&mut self, pin: &[usize]) {
        self.pin.copy_from_slice(pin);
        self.held = pin.iter().any(|&p| p != usize::MAX);
        self.obstacles.clear();
        self.section_rooms.clear();
        if !self.held {
            return;
        }
        let sw = self.sw;
        self.obstacles = (0..sw.len() as u32)
            .map(|b| {
                if pin[b as usize] != usize::MAX {
                    return Vec::new();
                }
                held_spans(sw.overlaps.row(b), pin, &sw.size)
            })
            .collect();
        self.section_rooms = (0..sw.sections() as u32)
            .map(|s| held_spans(sw.members.row(s), pin, &sw.size))
            .collect();
    }

    /// The lowest offset at or above `at` where free buffer `b` clears
    /// every held buffer alive with it. Not needed for soundness (a held
    /// buffer across `b`'s min offset stops the candidates at itself, so
    /// `b` is never placed across it), but it raises the section floors
    /// and the dominance cut to where `b` can really go. The hole under a
    /// held buffer stays open to `b` while `b` fits below it.
    fn clear_of_held(&self, b: usize, at: usize) -> usize {
        let size = self.sw.size[b];
        let mut at = at;
        for &(lo, hi) in &self.obstacles[b] {
            if lo >= at.saturating_add(size) {
                break;
            }
            if hi > at {
                at = hi;
            }
        }
        at
    }

    /// Offsets of the last run that returned [`Run::Found`], by the
    /// sweep's buffer numbers.
    pub(super) fn solution(&self) -> &[usize] {
        &self.solution
    }

    /// Nodes visited by the last run.
    pub(super) fn nodes(&self) -> u64 {
        self.nodes
    }

    /// Searches for a placement of height at most `capacity`.
    pub(super) fn run(
        &mut self,
        capacity: usize,
        preorder: [Key; 3],
        node_limit: u64,
        deadline: Option<Instant>,
    ) -> Run {
        self.capacity = capacity;
        self.preorder = preorder;
        self.node_limit = node_limit;
        self.deadline = deadline;
        self.nodes = 0;
        self.reset();
        if self.sw.len() == 0 {
            return Run::Found;
        }
        // The root splits the whole time axis at every zero cut.
        let all: Vec<u32> = (0..self.sw.len() as u32).collect();
        let cuts: Vec<u32> = (0..self.cuts.len() as u32)
            .filter(|&s| self.cuts[s as usize] == 0)
            .map(|s| s + 1)
            .collect();
        let split = self.split(0, self.sw.sections() as u32, &cuts, all.into_iter());
        self.frames.push(Frame::Split(split));
        self.drive()
    }

    fn reset(&mut self) {
        self.min_offset.copy_from_slice(&self.release);
        self.floor.copy_from_slice(&self.release_floor);
        if self.held {
            for b in 0..self.min_offset.len() {
                if self.pin[b] == usize::MAX {
                    self.min_offset[b] = self.clear_of_held(b, self.min_offset[b]);
                }
            }
            // Floors are exact minima (`place` relies on it).
            for s in 0..self.floor.len() {
                self.floor[s] = section_min(self.sw, s, &self.min_offset);
            }
        }
        self.total.copy_from_slice(&self.sw.totals);
        self.cuts.copy_from_slice(&self.sw.cuts);
        self.min_offset_trail.clear();
        self.floor_trail.clear();
        self.ord.clear();
        self.parts.clear();
        self.part_bufs.clear();
        self.frames.clear();
    }

    /// The main loop: `ret` carries a finished frame's result to its parent.
    fn drive(&mut self) -> Run {
        let mut ret: Option<Run> = None;
        while let Some(frame) = self.frames.pop() {
            match frame {
                Frame::Split(split) => ret = self.step_split(split, ret),
                Frame::Node(node) => ret = self.step_node(node, ret),
            }
        }
        ret.unwrap_or(Run::Found)
    }

    /// Advances a split: solves its parts in turn. Returns `Some(result)`
    /// when the split is finished (and popped), `None` when it pushed a
    /// child.
    fn step_split(&mut self, mut split: Split, ret: Option<Run>) -> Option<Run> {
        if let Some(r) = ret {
            if r != Run::Found {
                self.pop_split(split);
                return Some(r);
            }
            split.next += 1;
        }
        if split.next == split.parts_end {
            self.pop_split(split);
            return Some(Run::Found);
        }
        let part_id = split.next;
        self.frames.push(Frame::Split(split));
        let part = self.parts[part_id as usize];
        let ord_start = self.ord.len() as u32;
        self.order_part(part);
        let ord_end = self.ord.len() as u32;
        self.frames.push(Frame::Node(Node {
            part: part_id,
            ord_start,
            ord_end,
            cursor: ord_start,
            stop: ord_start,
            last_offset: 0,
            last_rank: 0,
            started: false,
            placed: None,
        }));
        None
    }

    fn pop_split(&mut self, split: Split) {
        self.parts.truncate(split.parts_start as usize);
        self.part_bufs.truncate(split.part_bufs_mark as usize);
    }

    /// Advances a search node. Returns `Some(result)` when the node is
    /// finished (and popped), `None` when it pushed a child.
    fn step_node(&mut self, mut node: Node, ret: Option<Run>) -> Option<Run> {
        if !node.started {
            node.started = true;
            self.nodes += 1;
            if self.nodes > self.node_limit {
                return self.finish_node(node, Run::NodeLimit);
            }
            if self.nodes & 255 == 0 && self.deadline.is_some_and(|d| Instant::now() >= d) {
                return self.finish_node(node, Run::Deadline);
            }
            let (start, end) = (node.ord_start as usize, node.ord_end as usize);
            if start == end {
                return self.finish_node(node, Run::Found);
            }
            let entries = &self.ord[start..end];
            let min_height = entries
                .iter()
                .map(|e| e.offset.saturating_add(self.sw.size[e.buf as usize]))
                .min()
                .unwrap_or(usize::MAX);
            // Whatever is placed next at `x`, every section must still hold
            // its unplaced bytes above `x`: no candidate above
            // `capacity - largest total` can succeed, and below it only
            // sections whose floor rises need checking (see `refine`).
            let part = self.parts[node.part as usize];
            let (lo, hi) = (part.sec_lo as usize, part.sec_hi as usize);
            let largest = self.total[lo..hi].iter().copied().max().unwrap_or(0);
            let Some(highest) = self.capacity.checked_sub(largest) else {
                return self.finish_node(node, Run::Infeasible);
            };
            let bound = (node.last_offset, node.last_rank);
            let first = entries.partition_point(|e| e.key() < bound);
            // A held buffer below the last placement can never be placed.
            if self.held
                && entries[..first]
                    .iter()
                    .any(|e| self.pin[e.buf as usize] != usize::MAX)
            {
                return self.finish_node(node, Run::Infeasible);
            }
            let mut stop = first
                + entries[first..]
                    .partition_point(|e| e.offset < min_height && e.offset <= highest);
            // Nothing goes after an unplaced held buffer in the order.
            if self.held
                && let Some(k) = entries[first..stop]
                    .iter()
                    .position(|e| self.pin[e.buf as usize] != usize::MAX)
            {
                stop = first + k + 1;
            }
            node.cursor = (start + first) as u32;
            node.stop = (start + stop) as u32;
        } else if let Some(placement) = node.placed.take() {
            self.unplace(placement);
            match ret {
                Some(Run::Infeasible) | None => {
                    if placement.hatless {
                        return self.finish_node(node, Run::Infeasible);
                    }
                }
                Some(r) => return self.finish_node(node, r),
            }
        }
        let part = self.parts[node.part as usize];
        while node.cursor < node.stop {
            let e = self.ord[node.cursor as usize];
            node.cursor += 1;
            let placement = self.place(e.buf, e.offset);
            if self.broken || !self.refine(e.offset) {
                self.unplace(placement);
                if placement.hatless {
                    break;
                }
                continue;
            }
            node.placed = Some(placement);
            self.frames.push(Frame::Node(node));
            if self.new_cuts.is_empty() {
                let child = self.child(node, e);
                self.frames.push(Frame::Node(child));
            } else {
                let cuts = std::mem::take(&mut self.new_cuts);
                let unplaced: Vec<u32> = self.ord[node.ord_start as usize..node.ord_end as usize]
                    .iter()
                    .map(|x| x.buf)
                    .filter(|&b| b != e.buf)
                    .collect();
                let split = self.split(part.sec_lo, part.sec_hi, &cuts, unplaced.into_iter());
                self.new_cuts = cuts;
                self.frames.push(Frame::Split(split));
            }
            return None;
        }
        self.finish_node(node, Run::Infeasible)
    }

    fn finish_node(&mut self, node: Node, result: Run) -> Option<Run> {
        self.ord.truncate(node.ord_start as usize);
        Some(result)
    }

    /// The child of `node` after placing `e`: the other entries with their
    /// new min offsets, re-sorted (only raised offsets move, and only
    /// right, so insertion sort is near linear).
    fn child(&mut self, node: Node, e: Entry) -> Node {
        let start = self.ord.len();
        for k in node.ord_start as usize..node.ord_end as usize {
            let x = self.ord[k];
            if x.buf != e.buf {
                self.ord.push(Entry {
                    offset: self.min_offset[x.buf as usize],
                    ..x
                });
            }
        }
        let entries = &mut self.ord[start..];
        for i in 1..entries.len() {
            let x = entries[i];
            let mut j = i;
            while j > 0 && entries[j - 1].key() > x.key() {
                entries[j] = entries[j - 1];
                j -= 1;
            }
            entries[j] = x;
        }
        Node {
            part: node.part,
            ord_start: start as u32,
            ord_end: self.ord.len() as u32,
            cursor: 0,
            stop: 0,
            last_offset: e.offset,
            last_rank: e.rank,
            started: false,
            placed: None,
        }
    }

    /// Groups `bufs` (unplaced, within `[sec_lo, sec_hi)`) into the pieces
    /// between `cuts` (sorted section indices where a new piece starts).
    fn split(
        &mut self,
        sec_lo: u32,
        sec_hi: u32,
        cuts: &[u32],
        bufs: impl Iterator<Item = u32>,
    ) -> Split {
        let parts_start = self.parts.len() as u32;
        let part_bufs_mark = self.part_bufs.len() as u32;
        let pieces = cuts.len() + 1;
        let mut groups: Vec<Vec<u32>> = vec![Vec::new(); pieces];
        for b in bufs {
            let piece = cuts.partition_point(|&c| c <= self.sw.sec_lo[b as usize]);
            groups[piece].push(b);
        }
        for (k, group) in groups.into_iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            let lo = if k == 0 { sec_lo } else { cuts[k - 1] };
            let hi = if k == cuts.len() { sec_hi } else { cuts[k] };
            let bufs_start = self.part_bufs.len() as u32;
            self.part_bufs.extend_from_slice(&group);
            self.parts.push(Part {
                sec_lo: lo,
                sec_hi: hi,
                bufs_start,
                bufs_end: self.part_bufs.len() as u32,
            });
        }
        Split {
            parts_start,
            parts_end: self.parts.len() as u32,
            next: parts_start,
            part_bufs_mark,
        }
    }

    /// Appends the root ordering of `part`: its buffers ranked by the
    /// preorder (computed from the current section totals), then sorted by
    /// (min offset, rank).
    fn order_part(&mut self, part: Part) {
        let sw = self.sw;
        self.keys.clear();
        for &b in &self.part_bufs[part.bufs_start as usize..part.bufs_end as usize] {
            let i = b as usize;
            let total = (sw.sec_lo[i]..sw.sec_hi[i])
                .map(|s| self.total[s as usize])
                .max()
                .unwrap_or(0) as u128;
            let width = sw.width[i] as u128;
            let area = sw.size[i] as u128 * width;
            let mut key = [0u128; 3];
            for (slot, k) in key.iter_mut().zip(self.preorder) {
                *slot = match k {
                    Key::Total => total,
                    Key::Width => width,
                    Key::Area => area,
                };
            }
            self.keys.push((key, b));
        }
        self.keys
            .sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let start = self.ord.len();
        for (rank, &(_, b)) in self.keys.iter().enumerate() {
            self.ord.push(Entry {
                offset: self.min_offset[b as usize],
                rank: rank as u32,
                buf: b,
            });
        }
        self.ord[start..].sort_unstable_by_key(Entry::key);
    }

    /// Places `b` at `offset` and propagates: min offsets of the buffers it
    /// overlaps, section floors and totals, cuts (new zero cuts are left in
    /// `new_cuts`).
    fn place(&mut self, b: u32, offset: usize) -> Placement {
        let sw = self.sw;
        let i = b as usize;
        let size = sw.size[i];
        let top = offset.saturating_add(size);
        self.min_offset[i] = PLACED;
        self.solution[i] = offset;
        self.broken = false;
        let placement = Placement {
            buf: b,
            offset,
            min_offset_mark: self.min_offset_trail.len() as u32,
            floor_mark: self.floor_trail.len() as u32,
            hatless: !sw
                .overlaps
                .row(b)
                .iter()
                .any(|&c| self.min_offset[c as usize] != PLACED),
        };
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamp.fill(0);
            self.generation = 1;
        }
        self.dirty.clear();
        for s in sw.sec_lo[i]..sw.sec_hi[i] {
            let si = s as usize;
            self.floor_trail.push((s, self.floor[si]));
            self.floor[si] = top;
            self.total[si] -= size;
            self.stamp[si] = self.generation;
            self.dirty.push(s);
        }
        for &c in sw.overlaps.row(b) {
            let ci = c as usize;
            let old = self.min_offset[ci];
            if old >= top {
                continue;
            }
            let raised = if self.held && self.pin[ci] == usize::MAX {
                self.clear_of_held(ci, top)
            } else {
                top
            };
            self.min_offset_trail.push((c, old));
            self.min_offset[ci] = raised;
            if raised > self.pin[ci] {
                self.broken = true;
            }
            // Floors are exact minima, so only sections where c was at the
            // minimum can rise.
            for s in sw.sec_lo[ci]..sw.sec_hi[ci] {
                let si = s as usize;
                if self.floor[si] == old && self.stamp[si] != self.generation {
                    self.stamp[si] = self.generation;
                    self.dirty.push(s);
                }
            }
        }
        self.new_cuts.clear();
        for s in sw.sec_lo[i]..sw.sec_hi[i].saturating_sub(1) {
            let cut = &mut self.cuts[s as usize];
            *cut -= 1;
            if *cut == 0 {
                self.new_cuts.push(s + 1);
            }
        }
        placement
    }

    /// Section inference after [`Engine::place`] at `offset`: brings the
    /// floors of the marked sections up to their exact minima and checks
    /// that each still holds its unplaced bytes within the capacity.
    ///
    /// Only these sections need checking. At the parent every section had
    /// `floor + total <= capacity`, and the candidate cut in `step_node`
    /// ensures `offset + total <= capacity` everywhere; a section of the
    /// placed buffer whose floor stays at the buffer's top has
    /// `top + (total - size) = offset + total`; any other section keeps its
    /// floor and total.
    fn refine(&mut self, offset: usize) -> bool {
        let sw = self.sw;
        let mut ok = true;
        for k in 0..self.dirty.len() {
            let s = self.dirty[k];
            let si = s as usize;
            let lowest = sw
                .members
                .row(s)
                .iter()
                .map(|&c| self.min_offset[c as usize])
                .min()
                .unwrap_or(PLACED);
            if lowest != PLACED && lowest > self.floor[si] {
                self.floor_trail.push((s, self.floor[si]));
                self.floor[si] = lowest;
                if lowest.max(offset).saturating_add(self.total[si]) > self.capacity {
                    ok = false;
                    break;
                }
            }
            if self.held && !self.free_bytes_fit(s, offset) {
                ok = false;
                break;
            }
        }
        self.dirty.clear();
        ok
    }

    /// With held buffers: whether the free buffers still unplaced in
    /// section `s` can fit between its held buffers, below the capacity
    /// and above both `offset` (canonical order) and their lowest min
    /// offset. A gap between held buffers narrower than the smallest of
    /// them is lost; the rest counts in full (a bound, not a packing).
    fn free_bytes_fit(&self, s: u32, offset: usize) -> bool {
        let sw = self.sw;
        let mut bytes = 0usize;
        let mut smallest = usize::MAX;
        let mut low = usize::MAX;
        for &c in sw.members.row(s) {
            let ci = c as usize;
            if self.pin[ci] == usize::MAX && self.min_offset[ci] != PLACED {
                bytes += sw.size[ci];
                smallest = smallest.min(sw.size[ci]);
                low = low.min(self.min_offset[ci]);
            }
        }
        if bytes == 0 {
            return true;
        }
        let low = low.max(offset);
        let mut room = 0usize;
        let mut at = low;
        for &(lo, hi) in &self.section_rooms[s as usize] {
            if hi <= at {
                continue;
            }
            if lo >= self.capacity {
                break;
            }
            if lo > at && lo - at >= smallest {
                room += lo - at;
            }
            at = at.max(hi);
            if room >= bytes {
                return true;
            }
        }
        if self.capacity > at && self.capacity - at >= smallest {
            room += self.capacity - at;
        }
        room >= bytes
    }

    /// Undoes [`Engine::place`].
    fn unplace(&mut self, p: Placement) {
        let sw = self.sw;
        let i = p.buf as usize;
        while self.min_offset_trail.len() > p.min_offset_mark as usize {
            if let Some((c, old)) = self.min_offset_trail.pop() {
                self.min_offset[c as usize] = old;
            }
        }
        while self.floor_trail.len() > p.floor_mark as usize {
            if let Some((s, old)) = self.floor_trail.pop() {
                self.floor[s as usize] = old;
            }
        }
        for s in sw.sec_lo[i]..sw.sec_hi[i] {
            self.total[s as usize] += sw.size[i];
        }
        for s in sw.sec_lo[i]..sw.sec_hi[i].saturating_sub(1) {
            self.cuts[s as usize] += 1;
        }
        self.min_offset[i] = p.offset;
    }
}

/// The least of `values` (per buffer, by the sweep's numbers) over the
/// members of section `s`; 0 for an empty section.
fn section_min(sw: &Sweep, s: usize, values: &[usize]) -> usize {
    sw.members
        .row(s as u32)
        .iter()
        .map(|&c| values[c as usize])
        .min()
        .unwrap_or(0)
}

/// The spans `[pin, pin + size)` of the held buffers among `ids` (a row of
/// the sweep: a buffer's overlaps, or a section's members), sorted: the
/// rooms a free buffer alive with them must clear.
fn held_spans(ids: &[u32], pin: &[usize], size: &[usize]) -> Vec<(usize, usize)> {
    let mut spans: Vec<(usize, usize)> = ids
        .iter()
        .map(|&c| c as usize)
        .filter(|&c| pin[c] != usize::MAX)
        .map(|c| (pin[c], pin[c].saturating_add(size[c])))
        .collect();
    spans.sort_unstable();
    spans
}
