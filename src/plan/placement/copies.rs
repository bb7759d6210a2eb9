//! Overlapping copies of one instance placed as rigid blocks.
//!
//! An instance made of `k` copies of one base, copy j shifted in time by
//! `j × step` with the copies overlapping (`step` shorter than the base's
//! span), does not split in time, and best fit on the union can do much
//! worse than the base alone: MiniMalloc's E alone is placed at its bound by
//! the search, nineteen copies half overlapping came out 1.21x above the
//! union's bound, where two copies stacked on each other are 1.002x (its
//! load is nearly flat, so two copies alive together need twice its height
//! anyway). Here the base is placed once and every copy, in time order, is
//! put as a rigid block (the base's offsets, or the base's placement
//! upside down) at the lowest offset where none of its buffers meets a
//! buffer of an earlier copy alive with it. Lanes (copy j at `j mod alive`
//! base heights) are the fallback: never worse than one base's height per
//! copy alive at once.
//!
//! Detection ([`detect`]) is exact: the buffers sorted by (start, end,
//! size) are peeled into chains `b, b + step, ..., b + (k-1) step` from the
//! earliest remaining one, which succeeds exactly when the multiset is such
//! a union (the earliest remaining buffer always starts a chain).
//! O(n log n) per tried (step, k), a few tried.
//!
//! Stacking compares every pair of buffers of different copies alive
//! together ([`pairs`], counted beforehand from the lifetimes alone, so
//! that instances with too many are skipped before any time is spent:
//! copies of idealloc's S_1 have about 10^8 such pairs per copy, and their
//! peaked load makes rigid blocks a poor fit anyway).

use super::Interval;
use super::search::gcd;

/// At most this many copies alive at once (more means a step tiny against
/// the span; stacking is skipped).
pub(super) const MAX_ALIVE: usize = 64;

/// Steps tried (the smallest distinct ones that fit the first buffer).
const STEPS_TRIED: usize = 4;

/// Copy counts tried per step.
const COUNTS_TRIED: usize = 3;

/// An instance as `count` copies of one base shifted by `step`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Copies {
    /// The time shift between consecutive copies (> 0).
    pub step: usize,
    /// How many copies (>= 2).
    pub count: usize,
    /// `chains[r * count + j]`: the index of base buffer r's copy j (copy 0
    /// is the base).
    pub chains: Vec<usize>,
}

impl Copies {
    /// Buffers per copy.
    pub fn base_len(&self) -> usize {
        self.chains.len() / self.count
    }

    /// The indices of the base's buffers (copy 0).
    pub fn base(&self) -> Vec<usize> {
        self.chains.iter().step_by(self.count).copied().collect()
    }

    /// How many copies are alive at one time at most (the base's span over
    /// the step, rounded up).
    pub fn alive(&self, items: &[Interval]) -> usize {
        let base = self.base();
        let lo = base.iter().map(|&i| items[i].lower).min().unwrap_or(0);
        let hi = base.iter().map(|&i| items[i].upper).max().unwrap_or(0);
        (hi.saturating_sub(lo)).div_ceil(self.step).max(1)
    }
}

type Key = (usize, usize, usize);

fn key(it: &Interval) -> Key {
    (it.lower, it.upper, it.size)
}

/// `items` as overlapping or consecutive copies of one base, if they are.
/// Deterministic; `None` for fewer than 4 buffers.
pub(super) fn detect(items: &[Interval]) -> Option<Copies> {
    let n = items.len();
    if n < 4 {
        return None;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by_key(|&i| (key(&items[i]), i));
    // `keys[p]` is the key of the p-th buffer in sorted order.
    let keys: Vec<Key> = order.iter().map(|&i| key(&items[i])).collect();
    // Every shape's count must be a multiple of the copy count; the
    // rarest shape's earliest buffer starts a chain (a chain's first
    // buffer is its earliest), and its later buffers give the steps.
    let mut shapes: Vec<(usize, usize, usize)> =
        keys.iter().map(|k| (k.1 - k.0, k.2, k.0)).collect();
    shapes.sort_unstable();
    let mut shape_gcd = 0usize;
    let mut rarest: Option<(usize, usize)> = None; // (count, start position)
    let mut from = 0usize;
    for p in 0..shapes.len() {
        let (len, size, _) = shapes[p];
        if p + 1 == shapes.len() || (shapes[p + 1].0, shapes[p + 1].1) != (len, size) {
            let run = p + 1 - from;
            shape_gcd = gcd(shape_gcd, run);
            if rarest.is_none_or(|(c, _)| run < c) {
                rarest = Some((run, from));
            }
            from = p + 1;
        }
    }
    if shape_gcd < 2 {
        return None;
    }
    let (run, from) = rarest?;
    let (len, size, lower) = shapes[from];
    let first = (lower, lower + len, size);
    let mut steps: Vec<usize> = shapes[from + 1..from + run]
        .iter()
        .filter(|s| s.2 > lower)
        .map(|s| s.2 - lower)
        .collect();
    steps.dedup();
    let find = |k: Key| {
        keys.binary_search(&k)
            .ok()
            .map(|_| keys.partition_point(|x| *x < k))
    };
    for &step in steps.iter().take(STEPS_TRIED) {
        // The first buffer's chain bounds the count.
        let mut longest = 1usize;
        while let Some(shift) = longest.checked_mul(step)
            && let (Some(lo), Some(hi)) = (first.0.checked_add(shift), first.1.checked_add(shift))
            && find((lo, hi, size)).is_some()
        {
            longest += 1;
        }
        let counts = (2..=longest.min(n / 2))
            .rev()
            .filter(|&k| n.is_multiple_of(k) && shape_gcd.is_multiple_of(k))
            .take(COUNTS_TRIED);
        for count in counts {
            if let Some(chains) = peel(&keys, &order, step, count) {
                return Some(Copies {
                    step,
                    count,
                    chains,
                });
            }
        }
    }
    None
}

/// The chains of `count` copies `step` apart, peeled from the earliest
/// remaining buffer; `None` when one is missing.
fn peel(keys: &[Key], order: &[usize], step: usize, count: usize) -> Option<Vec<usize>> {
    let n = keys.len();
    // taken[g]: how many of the equal keys starting at position g are used.
    let mut taken = vec![0u32; n];
    let mut group = vec![0usize; n];
    for p in 1..n {
        group[p] = if keys[p] == keys[p - 1] {
            group[p - 1]
        } else {
            p
        };
    }
    let mut chains = Vec::with_capacity(n);
    for p in 0..n {
        let g = group[p];
        if (p - g) < taken[g] as usize {
            continue;
        }
        taken[g] += 1;
        chains.push(order[p]);
        let (lo, hi, size) = keys[p];
        for j in 1..count {
            let shift = j.checked_mul(step)?;
            let want = (lo.checked_add(shift)?, hi.checked_add(shift)?, size);
            let q = keys.partition_point(|x| *x < want);
            if q >= n || keys[q] != want {
                return None;
            }
            let used = taken[q] as usize;
            if q + used >= n || keys[q + used] != want {
                return None;
            }
            taken[q] += 1;
            chains.push(order[q + used]);
        }
    }
    Some(chains)
}

/// Pairs of buffers of different copies alive together: what
/// [`stack`] compares (from the lifetimes alone).
pub(super) fn pairs(items: &[Interval], copies: &Copies) -> u128 {
    let base: Vec<Interval> = copies
        .base()
        .iter()
        .map(|&i| items[i])
        .filter(|it| !it.is_trivial())
        .collect();
    let mut lowers: Vec<usize> = base.iter().map(|it| it.lower).collect();
    let mut uppers: Vec<usize> = base.iter().map(|it| it.upper).collect();
    lowers.sort_unstable();
    uppers.sort_unstable();
    let alive = copies.alive(items);
    let mut total = 0u128;
    // Copy j against copy j - delta, shifted: the same count for every j
    // at least delta.
    for delta in 1..alive.min(copies.count) {
        let shift = delta * copies.step;
        let mut per = 0u128;
        for it in &base {
            // Earlier copy's buffers p (times minus shift) with p.lower <
            // it.upper + shift... expressed on the later copy: p.lower +
            // 0 < it.upper + shift and p.upper > it.lower + shift.
            let started = lowers.partition_point(|&l| l < it.upper + shift);
            let ended = uppers.partition_point(|&u| u <= it.lower + shift);
            per += started.saturating_sub(ended) as u128;
        }
        total += per * (copies.count - delta) as u128;
    }
    total
}

/// The copies of `copies` placed as rigid blocks, each at the lowest offset
/// where it meets no earlier copy, the base's placement as given
/// (`base_offsets`, in the order of [`Copies::base`]) or upside down,
/// whichever sits lower. `None` when there are more than [`MAX_ALIVE`]
/// copies alive at once.
pub(super) fn stack(
    items: &[Interval],
    copies: &Copies,
    base_offsets: &[usize],
) -> Option<Vec<usize>> {
    let count = copies.count;
    let m = copies.base_len();
    let alive = copies.alive(items);
    if alive > MAX_ALIVE || base_offsets.len() != m {
        return None;
    }
    let base: Vec<usize> = copies.base();
    let settled;
    let base_offsets = if m <= SETTLE_MAX {
        let base_items: Vec<Interval> = base.iter().map(|&i| items[i]).collect();
        settled = settle(&base_items, base_offsets);
        &settled[..]
    } else {
        base_offsets
    };
    let top = base
        .iter()
        .zip(base_offsets)
        .filter(|(i, _)| !items[**i].is_trivial())
        .map(|(&i, &o)| o + items[i].size)
        .max()
        .unwrap_or(0);
    let flipped: Vec<usize> = base
        .iter()
        .zip(base_offsets)
        .map(|(&i, &o)| top.saturating_sub(o + items[i].size))
        .collect();
    // The base's buffers sorted by start, with their rank r.
    let mut by_start: Vec<usize> = (0..m).filter(|&r| !items[base[r]].is_trivial()).collect();
    by_start.sort_unstable_by_key(|&r| (items[base[r]].lower, r));
    let mut offsets = vec![0usize; items.len()];
    // Each placed copy's block offset and orientation.
    let mut placed: Vec<(usize, bool)> = Vec::with_capacity(count);
    let mut forbidden: Vec<(usize, usize)> = Vec::new();
    for j in 0..count {
        let mut best: Option<(usize, bool)> = None;
        for flip in [false, true] {
            let own = if flip { &flipped } else { base_offsets };
            forbidden.clear();
            for (delta, &(at, pflip)) in placed.iter().rev().enumerate().take(alive - 1) {
                let delta = delta + 1;
                let other = if pflip { &flipped } else { base_offsets };
                let shift = delta * copies.step;
                collide(
                    items,
                    &base,
                    &by_start,
                    shift,
                    own,
                    other,
                    at,
                    &mut forbidden,
                );
            }
            let o = lowest_free(&mut forbidden);
            if best.is_none_or(|(b, _)| o < b) {
                best = Some((o, flip));
            }
        }
        let (at, flip) = best.unwrap_or((0, false));
        let own = if flip { &flipped } else { base_offsets };
        for (r, &o) in own.iter().enumerate() {
            let i = copies.chains[r * count + j];
            offsets[i] = if items[i].is_trivial() { 0 } else { at + o };
        }
        placed.push((at, flip));
    }
    Some(offsets)
}

/// The upper and lower edges of one copy's placement over its times:
/// `top[k]` the highest end and `bot[k]` the lowest offset of the buffers
/// alive during `[times[k], times[k + 1])` (`None` where none is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Edges {
    times: Vec<usize>,
    span: Vec<Option<(usize, usize)>>, // (bot, top)
}

impl Edges {
    /// The edges of `offsets` (a placement of `items`). O(n log n).
    pub(super) fn of(items: &[Interval], offsets: &[usize]) -> Edges {
        use std::collections::BTreeMap;
        let mut events: Vec<(usize, bool, usize)> = Vec::new();
        for (i, it) in items.iter().enumerate() {
            if !it.is_trivial() {
                events.push((it.lower, true, i));
                events.push((it.upper, false, i));
            }
        }
        events.sort_unstable();
        let mut ends: BTreeMap<usize, u32> = BTreeMap::new();
        let mut starts: BTreeMap<usize, u32> = BTreeMap::new();
        let (mut times, mut span) = (Vec::new(), Vec::new());
        let mut k = 0;
        while k < events.len() {
            let t = events[k].0;
            while k < events.len() && events[k].0 == t {
                let (_, start, i) = events[k];
                let (o, e) = (offsets[i], offsets[i] + items[i].size);
                for (map, key) in [(&mut starts, o), (&mut ends, e)] {
                    if start {
                        *map.entry(key).or_insert(0) += 1;
                    } else if let Some(c) = map.get_mut(&key) {
                        *c -= 1;
                        if *c == 0 {
                            map.remove(&key);
                        }
                    }
                }
                k += 1;
            }
            times.push(t);
            span.push(
                starts
                    .keys()
                    .next()
                    .copied()
                    .zip(ends.keys().next_back().copied()),
            );
        }
        Edges { times, span }
    }

    /// The same placement upside down within `top`.
    fn flipped(&self, top: usize) -> Edges {
        Edges {
            times: self.times.clone(),
            span: self
                .span
                .iter()
                .map(|s| s.map(|(b, t)| (top.saturating_sub(t), top.saturating_sub(b))))
                .collect(),
        }
    }

    /// How far above this block (its times shifted by `own`) the block
    /// of `upper` (its times shifted by `shift`) must start so that, at
    /// every time both have buffers alive, the upper one's lowest offset is
    /// at or above this one's highest end (signed: may be negative);
    /// `None` when they are never alive together.
    fn clearance(&self, own: usize, upper: &Edges, shift: usize) -> Option<i128> {
        let (a, b) = (&self.times, &upper.times);
        let (mut i, mut j) = (0usize, 0usize);
        let mut need: Option<i128> = None;
        while i + 1 < a.len() && j + 1 < b.len() {
            let lo = (a[i] + own).max(b[j] + shift);
            let hi = (a[i + 1] + own).min(b[j + 1] + shift);
            if lo < hi
                && let (Some((_, top)), Some((bot, _))) = (self.span[i], upper.span[j])
            {
                let d = top as i128 - bot as i128;
                need = Some(need.map_or(d, |n| n.max(d)));
            }
            if a[i + 1] + own <= b[j + 1] + shift {
                i += 1;
            } else {
                j += 1;
            }
        }
        need
    }
}

/// The copies placed as rigid blocks by their edges alone (the holes of
/// a block are not used): each copy, in time order, the base's placement
/// or its mirror image, whichever starts lower, at the lowest offset where
/// its lower edge clears the upper edges of the earlier copies alive with
/// it. O(n log n + k · alive) after the edges. `None` when more than
/// [`MAX_ALIVE`] copies are alive at once.
pub(super) fn stack_by_edges(
    items: &[Interval],
    copies: &Copies,
    base_offsets: &[usize],
) -> Option<Vec<usize>> {
    let base = copies.base();
    let (placed, orient) = edge_offsets(items, copies, base_offsets)?;
    let top = block_top(items, &base, base_offsets);
    let count = copies.count;
    let mut offsets = vec![0usize; items.len()];
    for (j, (&at, &flip)) in placed.iter().zip(&orient).enumerate() {
        for (r, &b) in base.iter().enumerate() {
            let i = copies.chains[r * count + j];
            let own = if flip {
                top.saturating_sub(base_offsets[r] + items[b].size)
            } else {
                base_offsets[r]
            };
            offsets[i] = if items[i].is_trivial() { 0 } else { at + own };
        }
    }
    Some(offsets)
}

/// The highest end of the base's placement.
fn block_top(items: &[Interval], base: &[usize], offsets: &[usize]) -> usize {
    base.iter()
        .zip(offsets)
        .filter(|(i, _)| !items[**i].is_trivial())
        .map(|(&i, &o)| o + items[i].size)
        .max()
        .unwrap_or(0)
}

/// Each copy's block offset and orientation (true: upside down) by edges.
fn edge_offsets(
    items: &[Interval],
    copies: &Copies,
    base_offsets: &[usize],
) -> Option<(Vec<usize>, Vec<bool>)> {
    let alive = copies.alive(items);
    let base = copies.base();
    if alive > MAX_ALIVE || base_offsets.len() != base.len() {
        return None;
    }
    let base_items: Vec<Interval> = base.iter().map(|&i| items[i]).collect();
    let edges = Edges::of(&base_items, base_offsets);
    let top = block_top(items, &base, base_offsets);
    let both = [edges.clone(), edges.flipped(top)];
    Some(place_blocks(&both, copies.step, alive, copies.count))
}

/// Block offsets and orientations (true: upside down) of `count` copies
/// `step` apart, at most `alive` alive at once, from the edges of the
/// base's placement both ways up: each copy at the lowest offset clearing
/// the earlier ones, the orientation that sits lower (the upright one on
/// a tie).
fn place_blocks(
    both: &[Edges; 2],
    step: usize,
    alive: usize,
    count: usize,
) -> (Vec<usize>, Vec<bool>) {
    // gap[delta][a][b]: the offsets of orientation b, delta copies later,
    // that meet orientation a at offset 0 (above: at least the first,
    // below: at most minus the second).
    let mut gap = vec![[[(None, None); 2]; 2]; alive];
    for (delta, row) in gap.iter_mut().enumerate().skip(1) {
        for a in 0..2 {
            for b in 0..2 {
                row[a][b] = (
                    both[a].clearance(0, &both[b], delta * step),
                    both[b].clearance(delta * step, &both[a], 0),
                );
            }
        }
    }
    let (mut placed, mut orient) = (Vec::with_capacity(count), Vec::<bool>::with_capacity(count));
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for j in 0..count {
        let mut best: Option<(usize, bool)> = None;
        for (b, flip) in [(0, false), (1, true)] {
            ranges.clear();
            for (delta, row) in gap.iter().enumerate().take(alive.min(j + 1)).skip(1) {
                let i = j - delta;
                let a = usize::from(orient[i]);
                if let (Some(above), Some(below)) = row[a][b] {
                    // Forbidden: placed[i] - below < o < placed[i] + above.
                    let lo = placed[i] as i128 - below + 1;
                    let hi = placed[i] as i128 + above - 1;
                    if hi >= 0 && lo <= hi {
                        let lo = usize::try_from(lo.max(0)).unwrap_or(0);
                        let hi = usize::try_from(hi).unwrap_or(usize::MAX - 1);
                        ranges.push((lo, hi));
                    }
                }
            }
            let at = lowest_free(&mut ranges);
            if best.is_none_or(|(o, _)| at < o) {
                best = Some((at, flip));
            }
        }
        let (at, flip) = best.unwrap_or((0, false));
        placed.push(at);
        orient.push(flip);
    }
    (placed, orient)
}

/// `offsets` (a valid placement of `base`) settled ([`settle`]), and the
/// same upside down within its height: the two ways a held copy of the
/// base is tried (`pair.rs`, the held cylinders of `strategy.rs`).
pub(super) fn settled_both_ways(base: &[Interval], offsets: &[usize]) -> [Vec<usize>; 2] {
    let low = settle(base, offsets);
    let top = super::height(base, &low);
    let flipped = base
        .iter()
        .zip(&low)
        .map(|(b, &o)| if b.is_trivial() { 0 } else { top - o - b.size })
        .collect();
    [low, flipped]
}

/// Bases up to this many buffers are settled before stacking (O(m²)).
pub(super) const SETTLE_MAX: usize = 8192;

/// `offsets` (a valid placement of `items`) with every buffer, lowest
/// first, moved down to the lowest offset where it meets none of those
/// already moved: valid, no buffer higher than before, and the placement's
/// upper edge hugs its load more closely (what a block stacked upside down
/// on it needs).
pub(super) fn settle(items: &[Interval], offsets: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len())
        .filter(|&i| !items[i].is_trivial())
        .collect();
    order.sort_unstable_by_key(|&i| (offsets[i], i));
    let mut out = offsets.to_vec();
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // (offset, end, lower, upper)
    for i in order {
        let it = &items[i];
        let mut cursor = 0usize;
        for &(o, end, lo, hi) in &placed {
            if !(it.lower < hi && lo < it.upper) {
                continue;
            }
            if o >= cursor.saturating_add(it.size) {
                break;
            }
            cursor = cursor.max(end);
        }
        out[i] = cursor.min(offsets[i]);
        let at = placed.partition_point(|p| p.0 <= out[i]);
        placed.insert(at, (out[i], out[i] + it.size, it.lower, it.upper));
    }
    out
}

/// The copies in lanes: copy j upright at `(j mod alive) × height` of the
/// base, so that copies alive together never share an address range: at
/// most one base height per copy alive at once, what the stacks are
/// measured against.
pub(super) fn lanes(items: &[Interval], copies: &Copies, base_offsets: &[usize]) -> Vec<usize> {
    let base = copies.base();
    let top = block_top(items, &base, base_offsets);
    let alive = copies.alive(items);
    let count = copies.count;
    let mut offsets = vec![0usize; items.len()];
    for j in 0..count {
        let at = (j % alive).saturating_mul(top);
        for (r, &o) in base_offsets.iter().enumerate() {
            let i = copies.chains[r * count + j];
            offsets[i] = if items[i].is_trivial() { 0 } else { at + o };
        }
    }
    offsets
}

/// The block offsets at which the later copy (its buffers at `own`
/// relative to its block) meets the earlier one `shift` earlier in time
/// (its buffers at `at + other`): one range per pair alive together.
#[allow(clippy::too_many_arguments)]
fn collide(
    items: &[Interval],
    base: &[usize],
    by_start: &[usize],
    shift: usize,
    own: &[usize],
    other: &[usize],
    at: usize,
    out: &mut Vec<(usize, usize)>,
) {
    // Times of the later copy relative to the earlier one: + shift. A
    // merge over both in start order, each side's live buffers kept.
    let (mut a, mut b) = (0usize, 0usize);
    let mut live_early: Vec<usize> = Vec::new();
    let mut live_late: Vec<usize> = Vec::new();
    let n = by_start.len();
    // Buffer `r` of the earlier copy and `q` of the later one alive together.
    let pair = |out: &mut Vec<(usize, usize)>, r: usize, q: usize| {
        push_range(
            out,
            at + other[r],
            items[base[r]].size,
            own[q],
            items[base[q]].size,
        );
    };
    while a < n || b < n {
        let early_next = a < n
            && (b >= n || items[base[by_start[a]]].lower <= items[base[by_start[b]]].lower + shift);
        if early_next {
            let r = by_start[a];
            a += 1;
            let t = items[base[r]].lower;
            live_late.retain(|&q| items[base[q]].upper + shift > t);
            for &q in &live_late {
                pair(out, r, q);
            }
            live_early.push(r);
        } else {
            let q = by_start[b];
            b += 1;
            let t = items[base[q]].lower + shift;
            live_early.retain(|&r| items[base[r]].upper > t);
            for &r in &live_early {
                pair(out, r, q);
            }
            live_late.push(q);
        }
    }
}

/// Block offsets o with `[o + own, o + own + size)` meeting `[fixed,
/// fixed + fixed_size)`: `fixed - own - size < o < fixed + fixed_size -
/// own`, kept where o >= 0.
fn push_range(
    out: &mut Vec<(usize, usize)>,
    fixed: usize,
    fixed_size: usize,
    own: usize,
    size: usize,
) {
    let end = fixed + fixed_size;
    if end <= own {
        return;
    }
    let hi = end - own - 1;
    let lo = (fixed + 1).saturating_sub(own + size);
    out.push((lo, hi));
}

/// The lowest offset >= 0 in none of the closed ranges.
pub(super) fn lowest_free(ranges: &mut [(usize, usize)]) -> usize {
    ranges.sort_unstable();
    let mut o = 0usize;
    for &(lo, hi) in ranges.iter() {
        if lo > o {
            break;
        }
        o = o.max(hi + 1);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{iv, xorshift};
    use super::super::{height, lower_bound, validate};
    use super::*;

    fn copies_of(base: &[Interval], count: usize, step: usize) -> Vec<Interval> {
        // Interleaved in the input (copy-major would be too easy).
        let mut out = Vec::new();
        for (r, it) in base.iter().enumerate() {
            for j in 0..count {
                let j = (j + r) % count;
                out.push(iv(it.lower + j * step, it.upper + j * step, it.size));
            }
        }
        out
    }

    #[test]
    fn detects_overlapping_copies_and_nothing_else() {
        let base = [
            iv(0, 4, 8),
            iv(1, 3, 4),
            iv(2, 6, 4),
            iv(2, 6, 4),
            iv(5, 6, 0),
        ];
        let items = copies_of(&base, 5, 2);
        let found = detect(&items).unwrap();
        assert_eq!((found.step, found.count), (2, 5));
        assert_eq!(found.base_len(), base.len());
        let mut got: Vec<_> = found.base().iter().map(|&i| items[i]).collect();
        got.sort_unstable_by_key(key);
        let mut want = base.to_vec();
        want.sort_unstable_by_key(key);
        assert_eq!(got, want);
        // Every chain is one buffer shifted by the step.
        for r in 0..found.base_len() {
            for j in 0..found.count {
                let (a, b) = (items[found.chains[r * 5]], items[found.chains[r * 5 + j]]);
                assert_eq!(
                    (b.lower, b.upper, b.size),
                    (a.lower + 2 * j, a.upper + 2 * j, a.size)
                );
            }
        }
        // One buffer off: no copies.
        let mut off = items.clone();
        off[3].size += 1;
        assert_eq!(detect(&off), None);
        // A single instance is not copies of itself.
        assert_eq!(detect(&base), None);
    }

    #[test]
    fn stacked_copies_are_valid_and_no_higher_than_one_base_per_copy_alive() {
        // A flat base: four buffers filling height 10 over [0, 8).
        let base = [iv(0, 8, 4), iv(0, 3, 6), iv(3, 8, 3), iv(3, 5, 3)];
        let items = copies_of(&base, 6, 4);
        let found = detect(&items).unwrap();
        let base_items: Vec<Interval> = found.base().iter().map(|&i| items[i]).collect();
        let base_offsets =
            super::super::greedy_lowest(&base_items, super::super::GreedyOrder::Size);
        let h1 = height(&base_items, &base_offsets);
        let offsets = stack(&items, &found, &base_offsets).unwrap();
        validate(&items, &offsets, None).unwrap();
        assert!(height(&items, &offsets) <= 2 * h1);
        assert_eq!(height(&items, &offsets), lower_bound(&items));
        let by_edges = stack_by_edges(&items, &found, &base_offsets).unwrap();
        validate(&items, &by_edges, None).unwrap();
        assert!(height(&items, &by_edges) <= 2 * h1);
    }

    #[test]
    fn random_copies_are_found_and_both_stacks_are_valid() {
        let mut draw = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut next = move |m: usize| draw(m as u64);
        let mut found_count = 0;
        for _ in 0..40 {
            let span = 8 + next(40);
            let base: Vec<Interval> = (0..3 + next(30))
                .map(|_| {
                    let lower = next(span - 1);
                    iv(lower, lower + 1 + next(span - lower), 1 + next(64))
                })
                .collect();
            let count = 2 + next(8);
            let step = 1 + next(span);
            let items = copies_of(&base, count, step);
            // Detection tries a few steps and counts only: it may miss.
            let Some(found) = detect(&items) else {
                continue;
            };
            found_count += 1;
            // The copies found may be coarser or finer (a base that is
            // itself copies), but they rebuild the same multiset.
            assert_eq!(found.chains.len(), items.len());
            let mut seen = found.chains.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), items.len());
            let base_items: Vec<Interval> = found.base().iter().map(|&i| items[i]).collect();
            let base_offsets =
                super::super::greedy_lowest(&base_items, super::super::GreedyOrder::Size);
            let h1 = height(&base_items, &base_offsets);
            let alive = found.alive(&items);
            for offsets in [
                stack(&items, &found, &base_offsets),
                stack_by_edges(&items, &found, &base_offsets),
            ] {
                validate(&items, &offsets.unwrap(), None).unwrap();
            }
            // Lanes: one base height per copy alive at once.
            let lanes = lanes(&items, &found, &base_offsets);
            validate(&items, &lanes, None).unwrap();
            assert!(height(&items, &lanes) <= alive * h1);
        }
        assert!(found_count >= 30, "found {found_count} of 40");
    }
}
