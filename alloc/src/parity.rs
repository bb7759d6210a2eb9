//! Two offsets per site: a plan whose even and odd steps place their
//! blocks apart (issue 38).
//!
//! A **doubled** site makes its block of one step before the block it made
//! in the step before is freed (a batch made before the last one is
//! dropped): two instances are alive at once, so the site alternates
//! between two slots by the step's parity. With one offset for every other
//! site, neither slot is ever free in both parities at the same moment
//! (the even instance lives from its request to past the next step's
//! request, the odd one the other way round), so both stay reserved for
//! the whole step and the slab holds the site twice: 35 of the 40 loops of
//! generated seed 3 had such sites in their last plan, a median 4.5% of the
//! slab, and on fixed-shape loops the slab's whole excess over its steps'
//! bound was theirs (docs/allocator.md, "Doubled sites").
//!
//! Here every site gets one offset per parity: the nodes are (site,
//! parity), their lifetimes laid on the circle of two steps (the odd copy
//! shifted by one step), two nodes conflict when their lifetimes meet on
//! that circle, and each node goes, in a given order, to the lowest offset
//! clear of the nodes it meets that were placed before it. Serving already
//! takes a site's slot by the step's parity (`PlannedSlab::serve`), so a
//! site whose two offsets differ is served as a doubled one is. The plan
//! keeps this placement only when it is lower than the one-offset plan
//! (`site_plan::plan`).

/// At most this many conflicts (each stored both ways) are built; a larger
/// instance keeps its one-offset plan.
const EDGES_MAX: usize = 1 << 22;

/// Per site: its lifetime on the step's circle of `n` positions, `(start,
/// end)` with `start < n` and `end <= 2n` (past `n`: it ends in the next
/// step), and its slot bytes (0 for a site without a slot).
#[derive(Debug, Clone, Copy)]
pub struct Life {
    /// Where it starts.
    pub start: usize,
    /// Where it ends (exclusive), at most two steps on.
    pub end: usize,
    /// Slot bytes.
    pub size: u64,
}

/// The conflicts of the (site, parity) nodes: node `2i + p` is site `i` in
/// steps of parity `p`; built once, placed in several orders.
pub struct Conflicts(Vec<Vec<u32>>);

/// The (site, parity) nodes of `lives` placed on the circle of two steps
/// by their `conflicts`, clear of the `held` extents (bytes blocks kept
/// past their step hold in every step): per site its `[even, odd]` offsets
/// and the height, placed in the order of `priority` (one value per site;
/// lower first, ties larger first).
pub fn place(
    lives: &[Life],
    conflicts: &Conflicts,
    priority: &[u64],
    held: &[(u64, u64)],
) -> (Vec<[u64; 2]>, u64) {
    let adj = &conflicts.0;
    let size = |v: usize| lives[v / 2].size;
    let mut order: Vec<usize> = (0..2 * lives.len()).filter(|&v| size(v) > 0).collect();
    order.sort_unstable_by_key(|&v| (priority[v / 2], std::cmp::Reverse(size(v)), v));
    let mut offsets = vec![0u64; 2 * lives.len()];
    let mut placed = vec![false; 2 * lives.len()];
    let mut taken: Vec<(u64, u64)> = Vec::new();
    let mut height = 0u64;
    for v in order {
        taken.clear();
        taken.extend(
            adj[v]
                .iter()
                .map(|&u| u as usize)
                .filter(|&u| placed[u])
                .map(|u| (offsets[u], offsets[u] + size(u))),
        );
        taken.extend_from_slice(held);
        taken.sort_unstable();
        // The lowest offset whose slot meets none of the taken extents.
        let mut at = 0u64;
        for &(lo, hi) in &taken {
            if lo >= at + size(v) {
                break;
            }
            at = at.max(hi);
        }
        offsets[v] = at;
        placed[v] = true;
        height = height.max(at + size(v));
    }
    let pairs = (0..lives.len())
        .map(|i| [offsets[2 * i], offsets[2 * i + 1]])
        .collect();
    (pairs, height)
}

/// Conflicts of the (site, parity) nodes of `lives` on the circle of `2n`
/// positions, by a sweep over their pieces (a lifetime past the circle's
/// end wraps to its start); `None` when they are more than [`EDGES_MAX`].
pub fn conflicts(lives: &[Life], n: usize) -> Option<Conflicts> {
    let len = 2 * n;
    let nodes = 2 * lives.len();
    u32::try_from(nodes).ok()?;
    let mut pieces: Vec<(usize, usize, u32)> = Vec::with_capacity(2 * nodes);
    for (i, life) in lives.iter().enumerate() {
        if life.size == 0 {
            continue;
        }
        for p in 0..2 {
            let v = (2 * i + p) as u32;
            let (a, b) = (
                life.start + p * n,
                (life.end + p * n).max(life.start + p * n + 1),
            );
            let (a, b) = if a >= len { (a - len, b - len) } else { (a, b) };
            pieces.push((a, b.min(len), v));
            if b > len {
                pieces.push((0, (b - len).min(len), v));
            }
        }
    }
    pieces.sort_unstable();
    let mut adj: Vec<Vec<u32>> = vec![Vec::new(); nodes];
    let mut active: Vec<(usize, u32)> = Vec::new();
    let mut edges = 0usize;
    for &(a, b, v) in &pieces {
        active.retain(|&(end, _)| end > a);
        for &(_, u) in &active {
            if u != v {
                adj[u as usize].push(v);
                adj[v as usize].push(u);
                edges += 1;
            }
        }
        if edges > EDGES_MAX {
            return None;
        }
        active.push((b, v));
    }
    Some(Conflicts(adj))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether two nodes' lifetimes meet on the circle of two steps,
    /// position by position (the shadow of [`conflicts`]).
    fn meet(lives: &[Life], n: usize, u: usize, v: usize) -> bool {
        let covers = |w: usize, t: usize| {
            let l = lives[w / 2];
            let (a, b) = (l.start + (w % 2) * n, l.end.max(l.start + 1) + (w % 2) * n);
            (a..b).any(|x| x % (2 * n) == t)
        };
        (0..2 * n).any(|t| covers(u, t) && covers(v, t))
    }

    fn check(lives: &[Life], n: usize) {
        let prio: Vec<u64> = (0..lives.len() as u64).collect();
        let edges = conflicts(lives, n).expect("small");
        let (offsets, height) = place(lives, &edges, &prio, &[]);
        for u in 0..2 * lives.len() {
            for v in u + 1..2 * lives.len() {
                let (su, sv) = (lives[u / 2].size, lives[v / 2].size);
                if su == 0 || sv == 0 || !meet(lives, n, u, v) {
                    continue;
                }
                let (ou, ov) = (offsets[u / 2][u % 2], offsets[v / 2][v % 2]);
                assert!(
                    ou + su <= ov || ov + sv <= ou,
                    "nodes {u} and {v} meet and overlap: {ou}+{su}, {ov}+{sv}"
                );
            }
        }
        let top = (0..2 * lives.len())
            .map(|v| offsets[v / 2][v % 2] + lives[v / 2].size)
            .max()
            .unwrap_or(0);
        assert_eq!(height, top);
    }

    #[test]
    fn a_doubled_site_shares_its_second_slot_with_sites_of_the_other_parity() {
        // n = 4: site 0 (the batch) from 1 to past the next step's 1 (its
        // free at 2 of the next step); site 1 a temporary in 2..4 of every
        // step, as large. One offset per site needs three slots (the
        // batch's two, each reserved all the time); by parity two: the
        // temporary of an even step takes the slot the odd batch is not
        // holding yet.
        let lives = [
            Life {
                start: 1,
                end: 6,
                size: 100,
            },
            Life {
                start: 2,
                end: 4,
                size: 100,
            },
        ];
        check(&lives, 4);
        let edges = conflicts(&lives, 4).unwrap();
        let (_, height) = place(&lives, &edges, &[0, 1], &[]);
        assert_eq!(height, 200);
    }

    #[test]
    fn random_lifetimes_never_share_bytes_they_meet_on() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..200 {
            let n = 2 + next(12) as usize;
            let lives: Vec<Life> = (0..1 + next(10))
                .map(|_| {
                    let start = next(n as u64) as usize;
                    let end = start + 1 + next(2 * n as u64 - start as u64) as usize;
                    Life {
                        start,
                        end: end.min(2 * n),
                        size: next(4) * 16,
                    }
                })
                .collect();
            check(&lives, n);
        }
    }
}
