//! Matching a step's requests to the sites of a plan, in order, so that a
//! request inserted or missing somewhere (a shape-dependent code path, an
//! eval pass, data made at another point) shifts nothing after it.
//!
//! A cursor walks the sites. A request takes the first site at or after
//! the cursor, within a window, whose recorded sizes bracket it (the
//! smallest recorded at most the request, the capacity at least: the same
//! tensor at the same or a recorded shape), on its stream; failing that,
//! the site at the cursor if it fits (the next tensor at a shape not
//! recorded yet). The cursor then moves past the site taken. A request
//! that matches nothing takes no site and leaves the cursor where it was.
//! The same matcher aligns recorded steps with each other when a plan is
//! made ([`crate::site_plan`]) and serves requests against the plan
//! ([`crate::slab`]), so both read a step the same way.
//!
//! A request matches only sites of its own phase
//! ([`crate::request_phase`]): an eval pass never takes the training
//! forward's sites, whatever their sizes. Serving walks one cursor per
//! phase over that phase's sites.

/// How far past the cursor a request looks for its own sizes: inserted
/// requests of up to this many sites are skipped.
pub const WINDOW: usize = 64;

use crate::request_phase::RequestPhase;

/// What the matcher knows of a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The smallest request recorded at it.
    pub min: u64,
    /// The largest request recorded at it.
    pub max: u64,
    /// The most it holds.
    pub capacity: u64,
    /// Its stream.
    pub stream: u32,
    /// The phase its requests were made in.
    pub phase: RequestPhase,
}

impl Shape {
    /// A site whose recorded requests all had one size.
    #[inline]
    fn fixed(&self) -> bool {
        self.min == self.max
    }

    /// Whether the request is the site's own at a recorded size.
    #[inline]
    fn brackets(&self, size: u64, stream: u32) -> bool {
        self.stream == stream && self.min <= size && size <= self.max
    }
}

/// The site a request of `size` bytes on `stream` takes, the cursor at
/// `cursor`; `None` when it matches none. In order of preference: the site
/// at the cursor when its recorded sizes bracket the request; the site at
/// the cursor when its size changes from step to step (it was recorded at
/// different sizes: the request is that tensor at a shape not recorded,
/// and is refused by size if it does not fit); the first site in the
/// window that was always recorded at exactly this size (the requests
/// before it were skipped this step). Anything else is taken as a request
/// the plan does not know (inserted), and the cursor stays for the next.
#[inline]
pub fn find<S>(
    sites: &[S],
    shape: impl Fn(&S) -> Shape,
    cursor: usize,
    size: u64,
    stream: u32,
) -> Option<usize> {
    let first = shape(sites.get(cursor)?);
    if first.brackets(size, stream) || (first.stream == stream && !first.fixed()) {
        return Some(cursor);
    }
    let end = sites.len().min(cursor.saturating_add(WINDOW));
    (cursor + 1..end).find(|&j| {
        let s = shape(&sites[j]);
        s.fixed() && s.brackets(size, stream)
    })
}

/// Scores of the offline alignment: a request of exactly the size a
/// fixed-size site always had (the same tensor), one inside the recorded
/// range of a site whose size changes (likely the same tensor at another
/// shape), one only at the same position on the same stream; opening a
/// gap (skipping sites or requests) costs `GAP_OPEN`, each further skipped
/// one `GAP_EXTEND` (affine gaps). The numbers keep two facts: skipping one
/// inserted request to match the next exactly beats two positional matches
/// (`EXACT - GAP_OPEN > 2 * POSITIONAL`), and one coincidence of sizes
/// further on never pays for leaving and rejoining the diagonal
/// (`2 * GAP_OPEN > EXACT - POSITIONAL`), so steps of different shapes stay
/// aligned position by position.
const EXACT: f64 = 16.0;
const IN_RANGE: f64 = 6.0;
const POSITIONAL: f64 = 4.0;
const GAP_OPEN: f64 = 7.0;
const GAP_EXTEND: f64 = 1.0;

/// A match with an earlier site scores this much more, at most (summed
/// over a whole step it stays far below one unit of the scores above): of
/// two equally good alignments the one that takes sites first wins, as
/// the online matcher takes them ([`find`]), so that the plan's lifetimes
/// are those serving will see.
const EARLIER: f64 = 1e-9;

/// Half the width of the band [`align_steps`] searches around the
/// diagonal, beyond the difference of the two lengths.
const BAND: usize = 32;

/// The most cells of the traceback (3 bytes each) one alignment keeps.
const MAX_CELLS: usize = 1 << 24;

/// Aligns a recorded step's requests (`(size, stream, phase)`) with
/// `sites` when a plan is made, where the whole step is known: the
/// best-scoring alignment (see the scores above, affine gaps), searched in
/// a band around the diagonal (O((sites + requests) x band)); a request
/// never matches a site of another stream or phase. Returns the site of
/// each request, `None` for a request aligned with no site.
pub fn align_steps(sites: &[Shape], requests: &[(u64, u32, RequestPhase)]) -> Vec<Option<u32>> {
    let (m, n) = (sites.len(), requests.len());
    if m == 0 || n == 0 {
        return vec![None; n];
    }
    const NONE: f64 = f64::NEG_INFINITY;
    // The band reaches as far off the diagonal as the lengths differ (a
    // block of requests one step has and the other has not: an eval pass),
    // within a bound on the traceback's memory.
    let band = (BAND + m.abs_diff(n)).min(BAND.max(MAX_CELLS / m));
    let width = 2 * band + 1;
    // Row i covers requests j in [lo(i), lo(i) + width).
    let lo = |i: usize| (i * n / m).saturating_sub(band);
    let earlier = |i: usize| EARLIER * (m - i) as f64 / m as f64;
    let score_of = |i: usize, j: usize| -> f64 {
        let (size, stream, phase) = requests[j];
        let s = sites[i];
        if s.stream != stream || s.phase != phase {
            NONE
        } else if s.fixed() && size == s.min {
            EXACT + earlier(i)
        } else if s.brackets(size, stream) {
            IN_RANGE + earlier(i)
        } else {
            POSITIONAL + earlier(i)
        }
    };
    // Three states per cell (Gotoh): the last step matched (M), skipped a
    // site (U) or skipped a request (L). `from` records, per state, the
    // state of the cell it came from.
    const M: u8 = 0;
    const U: u8 = 1;
    const L: u8 = 2;
    let at = |row: &[[f64; 3]], row_lo: usize, j: usize| -> [f64; 3] {
        if j < row_lo || j - row_lo >= width {
            [NONE; 3]
        } else {
            row[j - row_lo]
        }
    };
    let mut prev = vec![[NONE; 3]; width];
    let mut cur = vec![[NONE; 3]; width];
    let mut from = vec![[M; 3]; (m + 1) * width];
    // Row 0: requests skipped before any site (a gap of j requests).
    for (d, p) in prev.iter_mut().enumerate() {
        let j = lo(0) + d;
        if j == 0 {
            *p = [0.0, NONE, NONE];
        } else if j <= n {
            *p = [NONE, NONE, -GAP_OPEN - (j - 1) as f64 * GAP_EXTEND];
        }
    }
    for i in 1..=m {
        let (l, pl) = (lo(i), lo(i - 1));
        for d in 0..width {
            let j = l + d;
            if j > n {
                cur[d] = [NONE; 3];
                continue;
            }
            let mut cell = [NONE; 3];
            let mut how = [M; 3];
            // M: a match of site i-1 with request j-1, from any state.
            if j > 0 {
                let p = at(&prev, pl, j - 1);
                let s = score_of(i - 1, j - 1);
                for state in [M, U, L] {
                    let v = p[state as usize] + s;
                    if v > cell[M as usize] {
                        cell[M as usize] = v;
                        how[M as usize] = state;
                    }
                }
            }
            // U: site i-1 skipped, from the cell above.
            let p = at(&prev, pl, j);
            for (state, cost) in [(M, GAP_OPEN), (U, GAP_EXTEND), (L, GAP_OPEN)] {
                let v = p[state as usize] - cost;
                if v > cell[U as usize] {
                    cell[U as usize] = v;
                    how[U as usize] = state;
                }
            }
            // L: request j-1 skipped, from the cell to the left.
            if d > 0 {
                let p = cur[d - 1];
                for (state, cost) in [(M, GAP_OPEN), (U, GAP_OPEN), (L, GAP_EXTEND)] {
                    let v = p[state as usize] - cost;
                    if v > cell[L as usize] {
                        cell[L as usize] = v;
                        how[L as usize] = state;
                    }
                }
            }
            cur[d] = cell;
            from[i * width + d] = how;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let mut out = vec![None; n];
    let (mut i, mut j) = (m, n);
    // The end: the best state of the last cell (when it lies in the band).
    let mut state = {
        let c = at(&prev, lo(m), n);
        let mut s = M;
        for t in [U, L] {
            if c[t as usize] > c[s as usize] {
                s = t;
            }
        }
        s
    };
    while i > 0 && j > 0 {
        let l = lo(i);
        if j < l {
            i -= 1;
            state = U;
            continue;
        }
        if j - l >= width {
            j -= 1;
            state = L;
            continue;
        }
        let came = from[i * width + (j - l)][state as usize];
        match state {
            M => {
                out[j - 1] = Some((i - 1) as u32);
                i -= 1;
                j -= 1;
            }
            U => i -= 1,
            _ => j -= 1,
        }
        state = came;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes(sizes: &[u64]) -> Vec<Shape> {
        sizes
            .iter()
            .map(|&s| Shape {
                min: s,
                max: s,
                capacity: s,
                stream: 0,
                phase: RequestPhase::Train,
            })
            .collect()
    }

    fn walk(sites: &[Shape], requests: &[u64]) -> Vec<Option<usize>> {
        let mut cursor = 0;
        requests
            .iter()
            .map(|&size| {
                let got = find(sites, |s| *s, cursor, size, 0);
                if let Some(j) = got {
                    cursor = j + 1;
                }
                got
            })
            .collect()
    }

    #[test]
    fn an_inserted_request_shifts_nothing_after_it() {
        let sites = shapes(&[100, 200, 300, 400]);
        // 5000 fits no site: unmatched, and 200.. still find theirs.
        assert_eq!(
            walk(&sites, &[100, 5000, 200, 300, 400]),
            vec![Some(0), None, Some(1), Some(2), Some(3)]
        );
    }

    #[test]
    fn a_missing_request_is_skipped_over() {
        let sites = shapes(&[100, 200, 300, 400]);
        assert_eq!(
            walk(&sites, &[100, 300, 400]),
            vec![Some(0), Some(2), Some(3)]
        );
    }

    #[test]
    fn a_new_shape_takes_a_changing_site_at_the_cursor() {
        let site = |min, max, capacity| Shape {
            min,
            max,
            capacity,
            stream: 0,
            phase: RequestPhase::Train,
        };
        let sites = vec![
            site(1000, 2000, 2048),
            site(64, 64, 512),
            site(4096, 4096, 4096),
        ];
        // 700 is below every recorded size of site 0, and site 0 is known
        // to change size: it is that tensor at another shape.
        assert_eq!(walk(&sites, &[700, 64]), vec![Some(0), Some(1)]);
        // Site 2 always had 4096 bytes: a smaller request is not it.
        assert_eq!(find(&sites, |s| *s, 2, 1000, 0), None);
        // A request too large for a changing site still takes it (and is
        // refused by size when served), keeping the step in step.
        assert_eq!(find(&sites, |s| *s, 0, 8192, 0), Some(0));
    }

    #[test]
    fn streams_must_agree() {
        let sites = shapes(&[100]);
        assert_eq!(find(&sites, |s| *s, 0, 100, 1), None);
    }

    #[test]
    fn offline_alignment_prefers_positions_to_coincidences() {
        // A step at another shape: every size differs from the sites', one
        // coincides with a later site. Position by position wins.
        let sites = shapes(&[210, 410, 610, 810, 110, 300]);
        let req: Vec<(u64, u32, RequestPhase)> = [100, 200, 300, 400, 50, 150]
            .iter()
            .map(|&s| (s, 0, RequestPhase::Train))
            .collect();
        let got = align_steps(&sites, &req);
        let index: Vec<Option<u32>> = (0..6).map(Some).collect();
        assert_eq!(got, index);
    }

    #[test]
    fn offline_alignment_skips_inserted_and_missing_requests() {
        let sizes: Vec<u64> = (1..=12).map(|i| 100 * i).collect();
        let sites = shapes(&sizes);
        // 7 inserted after the first request; the ninth site's request
        // (900) missing.
        let t = RequestPhase::Train;
        let mut req: Vec<(u64, u32, RequestPhase)> = vec![(100, 0, t), (7, 0, t)];
        req.extend(sizes[1..].iter().filter(|&&s| s != 900).map(|&s| (s, 0, t)));
        let got = align_steps(&sites, &req);
        assert_eq!(got[1], None, "the inserted request");
        for (k, &(size, _, _)) in req.iter().enumerate().filter(|(k, _)| *k != 1) {
            let site = got[k].expect("matched") as usize;
            assert_eq!(sizes[site], size, "request {k}");
        }
    }

    #[test]
    fn offline_alignment_of_long_steps_stays_in_order() {
        let sizes: Vec<u64> = (0..5000u64).map(|i| 512 * (1 + i % 37)).collect();
        let sites = shapes(&sizes);
        // The same step with every 100th request missing and a few added.
        let mut req = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            if i % 100 != 0 {
                req.push((s, 0, RequestPhase::Train));
            }
            if i % 250 == 0 {
                req.push((3, 0, RequestPhase::Train));
            }
        }
        let got = align_steps(&sites, &req);
        let matched: Vec<u32> = got.iter().flatten().copied().collect();
        assert!(matched.windows(2).all(|w| w[0] < w[1]));
        let exact = got
            .iter()
            .zip(&req)
            .filter(|(g, r)| g.is_some_and(|j| sizes[j as usize] == r.0))
            .count();
        assert!(exact >= req.len() - 25, "{exact} of {}", req.len());
    }

    #[test]
    fn an_eval_pass_never_takes_the_training_sites_it_copies() {
        // The reference: an eval pass (eval) of the forward's sizes, then
        // the forward (train). A step without the eval pass aligns its
        // forward with the training sites, not with the eval pass before
        // them, whose sizes are the same.
        let fwd = [4096u64, 1024, 8192, 512];
        let mut sites = Vec::new();
        for (phase, sizes) in [(RequestPhase::Eval, fwd), (RequestPhase::Train, fwd)] {
            sites.extend(sizes.iter().map(|&s| Shape {
                min: s,
                max: s,
                capacity: s,
                stream: 0,
                phase,
            }));
        }
        let req: Vec<(u64, u32, RequestPhase)> =
            fwd.iter().map(|&s| (s, 0, RequestPhase::Train)).collect();
        let got = align_steps(&sites, &req);
        assert_eq!(got, vec![Some(4), Some(5), Some(6), Some(7)]);
    }

    #[test]
    fn the_window_bounds_the_search() {
        let mut sizes = vec![1u64; WINDOW + 4];
        sizes[WINDOW + 2] = 999;
        let sites = shapes(&sizes);
        assert_eq!(find(&sites, |s| *s, 0, 999, 0), None);
        assert_eq!(find(&sites, |s| *s, 3, 999, 0), Some(WINDOW + 2));
    }
}
