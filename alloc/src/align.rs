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

/// How far past the cursor a request looks for its own sizes: inserted
/// requests of up to this many sites are skipped.
pub const WINDOW: usize = 64;

/// What the matcher knows of a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The smallest request recorded at it.
    pub min: u64,
    /// The most it holds.
    pub capacity: u64,
    /// Its stream.
    pub stream: u32,
}

impl Shape {
    #[inline]
    fn brackets(&self, size: u64, stream: u32) -> bool {
        self.stream == stream && self.min <= size && size <= self.capacity
    }
}

/// The site a request of `size` bytes on `stream` takes, the cursor at
/// `cursor`; `None` when it matches none.
#[inline]
pub fn find<S>(
    sites: &[S],
    shape: impl Fn(&S) -> Shape,
    cursor: usize,
    size: u64,
    stream: u32,
) -> Option<usize> {
    let end = sites.len().min(cursor.saturating_add(WINDOW));
    if let Some(first) = sites.get(cursor) {
        let s = shape(first);
        if s.brackets(size, stream) {
            return Some(cursor);
        }
        for (j, site) in sites.iter().enumerate().take(end).skip(cursor + 1) {
            if shape(site).brackets(size, stream) {
                return Some(j);
            }
        }
        if s.stream == stream && size <= s.capacity {
            return Some(cursor);
        }
    }
    None
}

/// The score of a request bracketed by its site's recorded sizes, and of
/// one only at the same position: more than twice, so that skipping one
/// inserted request to bracket the next beats two positional matches, and
/// less than three times, so that one coincidence of sizes further on does
/// not pull a step of another shape out of position.
const BRACKETED: i32 = 9;
const POSITIONAL: i32 = 4;

/// Half the width of the band [`align_steps`] searches around the
/// diagonal.
const BAND: usize = 96;

/// Aligns a recorded step's requests (`(size, stream)`) with `sites` when a
/// plan is made, where the whole step is known: the alignment that matches
/// the most requests, a request bracketed by its site's recorded sizes
/// counting more than twice as much (the same tensor at a recorded shape)
/// as any other on the same stream (the same position at another shape), searched in
/// a band around the diagonal (O((sites + requests) x band)). Returns the
/// site of each request, `None` for a request aligned with no site.
pub fn align_steps(sites: &[Shape], requests: &[(u64, u32)]) -> Vec<Option<u32>> {
    let (m, n) = (sites.len(), requests.len());
    if m == 0 || n == 0 {
        return vec![None; n];
    }
    // Row i covers requests j in [lo(i), lo(i) + width).
    let width = 2 * BAND + 1;
    let lo = |i: usize| (i * n / m).saturating_sub(BAND);
    let score_of = |i: usize, j: usize| -> i32 {
        let (size, stream) = requests[j];
        let s = sites[i];
        if s.stream != stream {
            0
        } else if s.min <= size && size <= s.capacity {
            BRACKETED
        } else {
            POSITIONAL
        }
    };
    // score[i][j - lo(i)]; a cell outside the band is -1 (unreachable).
    const DIAG: u8 = 0;
    const UP: u8 = 1; // skip a site
    const LEFT: u8 = 2; // skip a request
    let mut prev = vec![-1i32; width];
    let mut cur = vec![-1i32; width];
    let mut back = vec![LEFT; (m + 1) * width];
    // Row 0: no site used, any number of requests skipped.
    for (d, p) in prev.iter_mut().enumerate() {
        if lo(0) + d <= n {
            *p = 0;
        }
    }
    let get = |row: &[i32], row_lo: usize, j: usize| -> i32 {
        if j < row_lo || j - row_lo >= width {
            -1
        } else {
            row[j - row_lo]
        }
    };
    for i in 1..=m {
        let (l, pl) = (lo(i), lo(i - 1));
        for d in 0..width {
            let j = l + d;
            if j > n {
                cur[d] = -1;
                continue;
            }
            let mut best = -1;
            let mut how = LEFT;
            let up = get(&prev, pl, j);
            if up > best {
                best = up;
                how = UP;
            }
            if j > 0 {
                let diag = get(&prev, pl, j - 1);
                let s = score_of(i - 1, j - 1);
                if diag >= 0 && s > 0 && diag + s >= best {
                    best = diag + s;
                    how = DIAG;
                }
                let left = if d > 0 { cur[d - 1] } else { -1 };
                if left > best {
                    best = left;
                    how = LEFT;
                }
            }
            cur[d] = best;
            back[i * width + d] = how;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let mut out = vec![None; n];
    let (mut i, mut j) = (m, n);
    // The end cell may lie outside the last row's band when the two
    // lengths differ a lot: walk to it through skipped requests.
    while i > 0 || j > 0 {
        if i == 0 {
            break;
        }
        let l = lo(i);
        if j < l || j - l >= width {
            // Outside the band: skip a site (or a request) toward it.
            if j < l {
                i -= 1;
            } else {
                j -= 1;
            }
            continue;
        }
        match back[i * width + (j - l)] {
            DIAG => {
                out[j - 1] = Some((i - 1) as u32);
                i -= 1;
                j -= 1;
            }
            UP => i -= 1,
            _ => {
                if j == 0 {
                    i -= 1;
                } else {
                    j -= 1;
                }
            }
        }
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
                capacity: s,
                stream: 0,
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
    fn a_new_shape_takes_the_site_at_the_cursor_when_it_fits() {
        let sites = vec![
            Shape {
                min: 1000,
                capacity: 2048,
                stream: 0,
            },
            Shape {
                min: 64,
                capacity: 64,
                stream: 0,
            },
        ];
        // 700 is below every recorded size of site 0 but fits it.
        assert_eq!(walk(&sites, &[700, 64]), vec![Some(0), Some(1)]);
        // Too large for the site at the cursor and bracketed by none.
        assert_eq!(walk(&sites, &[4096]), vec![None]);
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
        let req: Vec<(u64, u32)> = [100, 200, 300, 400, 50, 150]
            .iter()
            .map(|&s| (s, 0))
            .collect();
        let got = align_steps(&sites, &req);
        let index: Vec<Option<u32>> = (0..6).map(Some).collect();
        assert_eq!(got, index);
    }

    #[test]
    fn offline_alignment_skips_inserted_and_missing_requests() {
        let sites = shapes(&[100, 200, 300, 400, 500]);
        let req: Vec<(u64, u32)> = [100, 7, 200, 400, 500].iter().map(|&s| (s, 0)).collect();
        let got = align_steps(&sites, &req);
        assert_eq!(got[0], Some(0));
        assert_eq!(got[2], Some(1));
        assert_eq!(&got[3..], &[Some(3), Some(4)]);
        // Matches are in order and never share a site.
        let matched: Vec<u32> = got.iter().flatten().copied().collect();
        assert!(matched.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn offline_alignment_of_long_steps_stays_in_order() {
        let sizes: Vec<u64> = (0..5000u64).map(|i| 512 * (1 + i % 37)).collect();
        let sites = shapes(&sizes);
        // The same step with every 100th request missing and a few added.
        let mut req = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            if i % 100 != 0 {
                req.push((s, 0));
            }
            if i % 250 == 0 {
                req.push((3, 0));
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
    fn the_window_bounds_the_search() {
        let mut sizes = vec![1u64; WINDOW + 4];
        sizes[WINDOW + 2] = 999;
        let sites = shapes(&sizes);
        assert_eq!(find(&sites, |s| *s, 0, 999, 0), None);
        assert_eq!(find(&sites, |s| *s, 3, 999, 0), Some(WINDOW + 2));
    }
}
