//! Overlapping copies placed from a solved window of consecutive copies.
//!
//! Rigid blocks (`copies.rs`) give every copy the base's placement, so the
//! buffers of two copies alive together cannot interleave. Here a small
//! instance of `w` consecutive copies (the window, `step` apart like the
//! copies) is solved as a whole, interleaving included, and its placement
//! is reused:
//!
//! - **Fewer copies than the window** ([`restricted`]): any `count`
//!   consecutive copies of a valid placement of the window are a valid
//!   placement of `count` copies (the same buffers at the same relative
//!   times), moved down to offset 0, then every buffer as far down as it
//!   goes (the window's other copies leave holes). Two copies of MiniMalloc's F half
//!   overlapping came out 1.021x the load bound solved alone, where four
//!   came out 1.013x.
//! - **A cylinder** ([`on_cylinder`]): one placement of `period`
//!   consecutive copies that repeats, copy j taking the offsets of copy
//!   j mod `period`, each of its buffers kept apart from every buffer of
//!   every copy alive with it in the repeat (copy i's buffers meet those
//!   of copies i ± 1, ..., i ± (alive - 1) taken mod `period`). Valid for
//!   any number of copies, so k copies are never placed higher than the
//!   same repeat of more copies; the period must be at least the number
//!   of copies alive at once (a buffer must not meet its own repeat).
//!   Placed node by node, in the order of the offsets a placement of
//!   consecutive copies already has (the stack, a window) or by size, at
//!   the lowest offset free of the nodes it meets.

use std::time::Instant;

use super::copies::{Copies, SETTLE_MAX, lowest_free, settle};
use super::pair::{above_releases, minimise_around_held};
use super::{Interval, height, validate};

/// The instance of `w` consecutive copies of `copies`' base: copy i's
/// buffer r (in the order of [`Copies::base`]) at index `i × m + r`.
pub(super) fn window_items(items: &[Interval], copies: &Copies, w: usize) -> Vec<Interval> {
    let base: Vec<Interval> = copies.base().iter().map(|&i| items[i]).collect();
    (0..w)
        .flat_map(|i| {
            let shift = i * copies.step;
            base.iter().map(move |it| Interval {
                lower: it.lower + shift,
                upper: it.upper + shift,
                size: it.size,
            })
        })
        .collect()
}

/// The lowest placement of the `copies.count` copies taken as consecutive
/// copies of the window (`window_offsets`, a placement of
/// [`window_items`]`(items, copies, w)`), moved down to offset 0. `None`
/// when the window is shorter than the copies or the offsets do not match.
pub(super) fn restricted(
    items: &[Interval],
    copies: &Copies,
    window_offsets: &[usize],
    w: usize,
) -> Option<Vec<usize>> {
    let (count, m) = (copies.count, copies.base_len());
    if w < count || window_offsets.len() != w * m {
        return None;
    }
    let base = copies.base();
    let live: Vec<usize> = (0..m).filter(|&r| !items[base[r]].is_trivial()).collect();
    let mut best: Option<(usize, Vec<usize>)> = None;
    for s in 0..=w - count {
        let block = |j: usize, r: usize| window_offsets[(s + j) * m + r];
        let lowest = (0..count)
            .flat_map(|j| live.iter().map(move |&r| block(j, r)))
            .min()
            .unwrap_or(0);
        let mut offsets = vec![0usize; items.len()];
        for j in 0..count {
            for &r in &live {
                offsets[copies.chains[r * count + j]] = block(j, r) - lowest;
            }
        }
        // The window's other copies leave holes: every buffer moved down
        // as far as it goes.
        if items.len() <= SETTLE_MAX {
            offsets = settle(items, &offsets);
        }
        let h = height(items, &offsets);
        if best.as_ref().is_none_or(|b| h < b.0) {
            best = Some((h, offsets));
        }
    }
    best.map(|b| b.1)
}

/// The conflicts on a cylinder of `period` copies: node `i × m + r` (copy
/// i mod `period`, base buffer r in the order of [`Copies::base`]) meets
/// node `i' × m + s` when r of some copy j meets s of a copy j' alive with
/// it, j ≡ i and j' ≡ i' (mod `period`). `None` when `period` is below the
/// copies alive at once (a buffer would meet its own repeat) or when
/// comparing every pair of base buffers at every shift would cost more
/// than `max_work`, or when the cylinder has more than
/// [`CYLINDER_EDGES_MAX`] conflicts.
fn cylinder_edges(
    items: &[Interval],
    copies: &Copies,
    period: usize,
    max_work: u128,
) -> Option<Vec<Vec<u32>>> {
    let m = copies.base_len();
    let alive = copies.alive(items);
    let nodes = period.checked_mul(m)?;
    if period < alive || (m as u128) * (m as u128) * (alive as u128) > max_work {
        return None;
    }
    u32::try_from(nodes).ok()?;
    let base: Vec<Interval> = copies.base().iter().map(|&i| items[i]).collect();
    // Every (r, s, d): r of copy i meets s of copy i + d.
    let mut meeting: Vec<(u32, u32, u32)> = Vec::new();
    for d in 0..alive {
        let shift = d * copies.step;
        for (r, a) in base.iter().enumerate() {
            if a.is_trivial() {
                continue;
            }
            for (s, b) in base.iter().enumerate() {
                let meets =
                    !b.is_trivial() && a.lower < b.upper + shift && b.lower + shift < a.upper;
                if meets && (d > 0 || s > r) {
                    meeting.push((r as u32, s as u32, d as u32));
                }
                if meeting.len().saturating_mul(period) > CYLINDER_EDGES_MAX {
                    return None;
                }
            }
        }
    }
    let mut adj: Vec<Vec<u32>> = vec![Vec::new(); nodes];
    for &(r, s, d) in &meeting {
        for i in 0..period {
            let u = i * m + r as usize;
            let v = ((i + d as usize) % period) * m + s as usize;
            adj[u].push(v as u32);
            adj[v].push(u as u32);
        }
    }
    Some(adj)
}

/// At most this many conflicts on a cylinder (each stored both ways: 64
/// MiB of node indices).
const CYLINDER_EDGES_MAX: usize = 1 << 23;

/// Offsets of the cylinder's nodes (see [`cylinder_edges`]), each placed
/// in `order` (node indices; every node once) at the lowest offset where
/// it meets none of the nodes placed before it.
fn cylinder_place(sizes: &[usize], adj: &[Vec<u32>], order: &[usize]) -> Vec<usize> {
    let mut offsets = vec![0usize; sizes.len()];
    let mut placed = vec![false; sizes.len()];
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &v in order {
        ranges.clear();
        for &u in &adj[v] {
            let u = u as usize;
            if placed[u] && sizes[u] > 0 {
                // Offsets o with [o, o + size) meeting [off_u, off_u + size_u).
                let lo = (offsets[u] + 1).saturating_sub(sizes[v]);
                ranges.push((lo, offsets[u] + sizes[u] - 1));
            }
        }
        offsets[v] = lowest_free(&mut ranges);
        placed[v] = true;
    }
    offsets
}

/// The copies placed on a cylinder of `period` copies: one placement of
/// `period` consecutive copies that repeats (copy j takes the offsets of
/// copy j mod `period`), valid for any number of copies because each of
/// its buffers was kept apart from every buffer of every copy alive with
/// it in the repeat. Each node goes, lowest first by `priority` (ties by
/// size, larger first), to the lowest offset where it meets no node placed
/// before it. `priority` gives one value per node (`i × m + r`); `None`
/// as [`cylinder_edges`], or when `priority` does not match.
pub(super) fn on_cylinder(
    items: &[Interval],
    copies: &Copies,
    period: usize,
    priority: &[usize],
    max_work: u128,
) -> Option<Vec<usize>> {
    let m = copies.base_len();
    let adj = cylinder_edges(items, copies, period, max_work)?;
    if priority.len() != adj.len() {
        return None;
    }
    let base = copies.base();
    let size = |v: usize| {
        let it = &items[base[v % m]];
        if it.is_trivial() { 0 } else { it.size }
    };
    let sizes: Vec<usize> = (0..adj.len()).map(size).collect();
    let mut order: Vec<usize> = (0..adj.len()).collect();
    order.sort_unstable_by_key(|&v| (priority[v], std::cmp::Reverse(sizes[v]), v));
    let node_offsets = cylinder_place(&sizes, &adj, &order);
    let count = copies.count;
    let mut offsets = vec![0usize; items.len()];
    for j in 0..count {
        for r in 0..m {
            let i = copies.chains[r * count + j];
            let v = (j % period) * m + r;
            offsets[i] = if sizes[v] == 0 { 0 } else { node_offsets[v] };
        }
    }
    Some(offsets)
}

/// Priorities for [`on_cylinder`]: the offsets `period` consecutive copies
/// have in a placement of the copies (`offsets`), from copy `from` on.
pub(super) fn priority_from(
    copies: &Copies,
    offsets: &[usize],
    period: usize,
    from: usize,
) -> Option<Vec<usize>> {
    let (count, m) = (copies.count, copies.base_len());
    if from + period > count {
        return None;
    }
    Some(
        (0..period * m)
            .map(|v| offsets[copies.chains[(v % m) * count + from + v / m]])
            .collect(),
    )
}

/// The copies on a cylinder of `period` copies placed copy by copy with
/// the exact search: residue 0 takes `base_offsets` (a valid placement of
/// the base, in the order of [`Copies::base`]); residue c = 1, ...,
/// `period` - 1 is searched (minimising, at most `nodes` nodes) with every
/// buffer of the repeat's copies alive with copy c whose residue is
/// already placed held where it is (an obstacle with its own lifetime,
/// its holes usable), starting from the lower of residue 0's block lifted
/// clear of them and its buffers greedily above them. Copy j takes
/// residue j mod `period`'s offsets: each residue was kept apart from
/// every residue it meets in the repeat, so the whole is valid for any
/// number of copies, and residue c tops at most (c + 1) base heights
/// (with a period of the copies alive at once, never above the lanes).
/// The copies are then settled. `None` for a period below the copies
/// alive at once, or where a search gives nothing valid.
pub(super) fn held_cylinder(
    items: &[Interval],
    copies: &Copies,
    period: usize,
    base_offsets: &[usize],
    nodes: u64,
    deadline: Option<Instant>,
) -> Option<Vec<usize>> {
    let (count, m) = (copies.count, copies.base_len());
    let alive = copies.alive(items);
    if period < alive || base_offsets.len() != m {
        return None;
    }
    let base: Vec<Interval> = copies.base().iter().map(|&i| items[i]).collect();
    let ring = Ring {
        step: copies.step,
        alive,
        period,
    };
    let mut residues: Vec<Vec<usize>> = vec![base_offsets.to_vec()];
    for c in 1..period {
        // Past the deadline a residue keeps its first placement (the
        // search's incumbent), so the cylinder is still whole.
        let placed = residue_around(&base, &ring, c, &residues, nodes, deadline)?;
        residues.push(placed);
    }
    let mut offsets = vec![0usize; items.len()];
    for j in 0..count {
        for (r, &o) in residues[j % period].iter().enumerate() {
            let i = copies.chains[r * count + j];
            offsets[i] = if items[i].is_trivial() { 0 } else { o };
        }
    }
    if items.len() <= SETTLE_MAX {
        offsets = settle(items, &offsets);
    }
    validate(items, &offsets, None).ok()?;
    Some(offsets)
}

/// A cylinder's shape: the copies' time step, how many are alive at once
/// and the period.
struct Ring {
    step: usize,
    alive: usize,
    period: usize,
}

/// Residue `c` of a cylinder searched (minimising, at most `nodes` nodes)
/// around the buffers of the placed residues (`residues[r]` for r <
/// `residues.len()`, r != c) alive with it, held: the free copy's offsets,
/// `None` where the search's placement is not valid.
fn residue_around(
    base: &[Interval],
    ring: &Ring,
    c: usize,
    residues: &[Vec<usize>],
    nodes: u64,
    deadline: Option<Instant>,
) -> Option<Vec<usize>> {
    let Ring {
        step,
        alive,
        period,
    } = *ring;
    let m = base.len();
    let lo = base.iter().map(|b| b.lower).min().unwrap_or(0);
    let at = |b: &Interval, j: isize| -> Interval {
        // Copy j of base buffer b, on a time axis where copy
        // -(alive - 1) - period starts at 0.
        let shift = (j + (alive + period) as isize) as usize * step;
        Interval {
            lower: b.lower - lo + shift,
            upper: b.upper - lo + shift,
            size: b.size,
        }
    };
    let mut sub: Vec<Interval> = Vec::new();
    let mut pin: Vec<usize> = Vec::new();
    let free: Vec<Interval> = base.iter().map(|b| at(b, c as isize)).collect();
    for d in 1..alive as isize {
        for j in [c as isize - d, c as isize + d] {
            let r = j.rem_euclid(period as isize) as usize;
            if r == c || r >= residues.len() {
                continue;
            }
            for (b, &o) in base.iter().zip(&residues[r]) {
                let it = at(b, j);
                if it.is_trivial() {
                    continue;
                }
                if free
                    .iter()
                    .any(|f| !f.is_trivial() && f.overlaps_in_time(&it))
                {
                    sub.push(it);
                    pin.push(o);
                }
            }
        }
    }
    let held = sub.len();
    let release: Vec<usize> = free
        .iter()
        .map(|f| {
            sub.iter()
                .zip(&pin)
                .filter(|(h, _)| h.overlaps_in_time(f))
                .map(|(h, &o)| o + h.size)
                .max()
                .unwrap_or(0)
        })
        .collect();
    // The lower of the free copy greedily above the held buffers
    // alive with each of its buffers, and residue 0's rigid
    // block lifted just clear of them (what a cylinder of rigid
    // blocks gives at worst).
    let greedy = above_releases(&free, &release);
    let mut lift = 0usize;
    for (f, &o) in free.iter().zip(&residues[0]) {
        if f.is_trivial() {
            continue;
        }
        for (h, &p) in sub.iter().zip(&pin) {
            if h.overlaps_in_time(f) {
                lift = lift.max((p + h.size).saturating_sub(o));
            }
        }
    }
    let rigid: Vec<usize> = residues[0].iter().map(|&o| o + lift).collect();
    let top = |offsets: &[usize]| {
        free.iter()
            .zip(offsets)
            .map(|(f, &o)| o + f.size)
            .max()
            .unwrap_or(0)
    };
    let own = if top(&rigid) < top(&greedy) {
        rigid
    } else {
        greedy
    };
    let mut incumbent = pin.clone();
    incumbent.extend(
        own.iter()
            .zip(&free)
            .map(|(&o, f)| if f.is_trivial() { 0 } else { o }),
    );
    sub.extend(free.iter().copied());
    pin.extend(std::iter::repeat_n(usize::MAX, m));
    let out = minimise_around_held(&sub, &pin, &incumbent, nodes, deadline);
    validate(&sub, &out.offsets, None).ok()?;
    Some(
        out.offsets[held..]
            .iter()
            .zip(&free)
            .map(|(&o, f)| if f.is_trivial() { 0 } else { o })
            .collect(),
    )
}

/// Priorities for [`on_cylinder`]: larger buffers first, then longer
/// lifetimes (the order best fit by size uses).
#[cfg(test)]
pub(super) fn priority_by_size(items: &[Interval], copies: &Copies, period: usize) -> Vec<usize> {
    let base = copies.base();
    let m = base.len();
    let mut keyed: Vec<(usize, usize, usize)> = (0..period * m)
        .map(|v| {
            let it = &items[base[v % m]];
            (usize::MAX - it.size, usize::MAX - (it.upper - it.lower), v)
        })
        .collect();
    keyed.sort_unstable();
    let mut priority = vec![0usize; period * m];
    for (rank, &(_, _, v)) in keyed.iter().enumerate() {
        priority[v] = rank;
    }
    priority
}

#[cfg(test)]
mod tests {
    use super::super::copies::detect;
    use super::super::test_support::{iv, xorshift};
    use super::super::{GreedyOrder, greedy_lowest, height, lower_bound, validate};
    use super::*;

    fn copies_of(base: &[Interval], count: usize, step: usize) -> Vec<Interval> {
        (0..count)
            .flat_map(|j| {
                base.iter()
                    .map(move |it| iv(it.lower + j * step, it.upper + j * step, it.size))
            })
            .collect()
    }

    /// Copies of a random base: a span of 8 to 47, 3 to `base_more` + 2
    /// buffers (one in eight of size 0), 2 to `count_more` + 1 copies at a
    /// random step (the draws in this order).
    fn random_copies(
        next: &mut impl FnMut(u64) -> usize,
        base_more: u64,
        count_more: u64,
    ) -> Vec<Interval> {
        let span = 8 + next(40);
        let base: Vec<Interval> = (0..3 + next(base_more))
            .map(|_| {
                let lower = next(span as u64 - 1);
                let size = if next(8) == 0 { 0 } else { 1 + next(64) };
                iv(lower, lower + 1 + next((span - lower) as u64), size)
            })
            .collect();
        let count = 2 + next(count_more);
        let step = 1 + next(span as u64);
        copies_of(&base, count, step)
    }

    #[test]
    fn window_items_are_the_first_copies() {
        let base = [iv(0, 4, 8), iv(1, 3, 4), iv(2, 6, 2)];
        let items = copies_of(&base, 5, 2);
        let found = detect(&items).unwrap();
        let mut got = window_items(&items, &found, 3);
        let mut want = copies_of(&base, 3, 2);
        got.sort_unstable_by_key(|it| (it.lower, it.upper, it.size));
        want.sort_unstable_by_key(|it| (it.lower, it.upper, it.size));
        assert_eq!(got, want);
    }

    #[test]
    fn windows_and_cylinders_give_valid_placements() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut checked = (0, 0);
        for _ in 0..80 {
            let items = random_copies(&mut next, 25, 10);
            let Some(found) = detect(&items) else {
                continue;
            };
            let w = found.count + 1 + next(3);
            let window = window_items(&items, &found, w);
            let offsets = greedy_lowest(&window, GreedyOrder::Size);
            validate(&window, &offsets, None).unwrap();
            let fewer = restricted(&items, &found, &offsets, w).unwrap();
            validate(&items, &fewer, None).unwrap();
            assert!(height(&items, &fewer) <= height(&window, &offsets));
            checked.0 += 1;
            let alive = found.alive(&items);
            // A period below the copies alive at once would make a
            // buffer meet its own repeat.
            if alive > 1 {
                let by_size = priority_by_size(&items, &found, alive - 1);
                assert_eq!(
                    on_cylinder(&items, &found, alive - 1, &by_size, 1 << 30),
                    None
                );
            }
            let stacked = greedy_lowest(&items, GreedyOrder::Start);
            for period in [alive, alive + 1, 2 * alive] {
                let mut priorities = vec![priority_by_size(&items, &found, period)];
                priorities.extend(priority_from(&found, &stacked, period, 0));
                for priority in priorities {
                    let offsets = on_cylinder(&items, &found, period, &priority, 1 << 30).unwrap();
                    validate(&items, &offsets, None).unwrap();
                    checked.1 += 1;
                }
            }
        }
        assert!(checked.0 >= 40 && checked.1 >= 120, "checked {checked:?}");
    }

    #[test]
    fn a_held_cylinder_interleaves_what_rigid_copies_cannot() {
        // The base of the test below: A [0, 3) and B [0, 1), one byte
        // each, copies two time units apart (two alive at once, load 3).
        // Every copy with the same offsets, or in two lanes, is 4 high;
        // residue 1 searched around residue 0's copies before and after
        // it comes to the load, for any number of copies.
        let base = [iv(0, 3, 1), iv(0, 1, 1)];
        for count in [5, 9, 40] {
            let items = copies_of(&base, count, 2);
            let found = detect(&items).unwrap();
            let base_items: Vec<Interval> = found.base().iter().map(|&i| items[i]).collect();
            let base_offsets = greedy_lowest(&base_items, GreedyOrder::Size);
            assert_eq!(height(&base_items, &base_offsets), 2);
            assert_eq!(
                held_cylinder(&items, &found, 1, &base_offsets, 1000, None),
                None
            );
            let offsets = held_cylinder(&items, &found, 2, &base_offsets, 1000, None).unwrap();
            validate(&items, &offsets, None).unwrap();
            assert_eq!(
                height(&items, &offsets),
                lower_bound(&items),
                "{count} copies"
            );
            assert_eq!(lower_bound(&items), 3);
        }
    }

    #[test]
    fn held_cylinders_are_valid_and_no_higher_than_lanes() {
        // Residue c starts from residue 0's block lifted clear of the
        // residues before it, so no residue tops (c + 1) base heights:
        // with a period of the copies alive at once, the cylinder is
        // never above the lanes (one base height per copy alive).
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let mut checked = 0;
        for _ in 0..60 {
            let items = random_copies(&mut next, 20, 12);
            let Some(found) = detect(&items) else {
                continue;
            };
            let base_items: Vec<Interval> = found.base().iter().map(|&i| items[i]).collect();
            let base_offsets = greedy_lowest(&base_items, GreedyOrder::Size);
            let alive = found.alive(&items);
            let nodes = [0, 50, 5_000][next(3)] as u64;
            for period in [alive, alive + 1] {
                let offsets =
                    held_cylinder(&items, &found, period, &base_offsets, nodes, None).unwrap();
                validate(&items, &offsets, None).unwrap();
                // (c + 1) base heights for residue c < period.
                let most = period * height(&base_items, &base_offsets);
                assert!(height(&items, &offsets) <= most.max(lower_bound(&items)));
                checked += 1;
            }
        }
        assert!(checked >= 60, "checked {checked}");
    }

    #[test]
    fn a_cylinder_alternates_what_one_offset_per_buffer_cannot() {
        // One buffer A [0, 3) and one B [0, 1) per copy, two time units
        // apart: A of copy j meets B of copy j and A and B of copy j+1,
        // so three are alive at times 2j + 2. The same offsets for every
        // copy cannot work (A would meet its own next copy); a cylinder
        // of two copies (A of even copies low, of odd copies high, every
        // B in between) repeats at the load, for any number of copies.
        let base = [iv(0, 3, 1), iv(0, 1, 1)];
        for count in [2, 3, 9, 40] {
            let items = copies_of(&base, count, 2);
            let found = detect(&items).unwrap();
            assert_eq!(
                (found.step, found.count, found.alive(&items)),
                (2, count, 2)
            );
            assert_eq!(on_cylinder(&items, &found, 1, &[0, 1], 1 << 20), None);
            // Base order: B [0, 1) then A [0, 3) (sorted by end); A first.
            let priority = [1, 0, 1, 0];
            let offsets = on_cylinder(&items, &found, 2, &priority, 1 << 20).unwrap();
            validate(&items, &offsets, None).unwrap();
            assert_eq!(lower_bound(&items), 3);
            assert_eq!(height(&items, &offsets), 3, "{count} copies");
        }
        // Fewer copies from a longer window: two of nine in two lanes
        // (copy j at (j mod 2) x 2), settled down to their load.
        let nine = copies_of(&base, 9, 2);
        let found_nine = detect(&nine).unwrap();
        let window = window_items(&nine, &found_nine, 9);
        let lanes: Vec<usize> = (0..window.len()).map(|k| (k / 2 % 2) * 2 + k % 2).collect();
        validate(&window, &lanes, None).unwrap();
        let two = copies_of(&base, 2, 2);
        let found_two = detect(&two).unwrap();
        let fewer = restricted(&two, &found_two, &lanes, 9).unwrap();
        validate(&two, &fewer, None).unwrap();
        assert_eq!(height(&two, &fewer), lower_bound(&two));
    }
}
