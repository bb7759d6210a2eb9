//! Recorded steps merged into one sequence of sites, one step at a time, as
//! each step is recorded, so that the step boundary where a plan is made
//! only places.
//!
//! A [`Merger`] holds the merged sites and, per step folded in, the site of
//! each of its requests. [`Merger::fold`] adds a step:
//!
//! - a step that made the same requests (sizes, streams, phases, in order)
//!   as one already folded takes that step's sites, checked request by
//!   request: no alignment at all (a fixed-shape loop);
//! - a step served by a plan made from this merger brings the site the
//!   serving matcher gave each request as it was made ([`crate::align::find`],
//!   one cursor per phase): those are kept where they stay in order
//!   (anchors), and only the runs of requests between two anchors that
//!   took no site are aligned, against the sites between those anchors, by
//!   the banded alignment ([`crate::align::align_steps`]);
//! - any other step is aligned whole by the banded alignment.
//!
//! A request that aligns with no site becomes a new site where it
//! occurred, before the site after the last one its step took.
//!
//! [`Merger::restrict`] gives the merge of a chosen set of steps: the sites
//! none of them took dropped, each site's smallest and largest request
//! counted again from those steps alone. A plan keeps the restricted merger
//! it was made from, so a re-plan starts from the plan's sites (the
//! anchors' indices) and folds only the steps the plan did not see.

use crate::align::{self, Shape};
use crate::record::StepRecord;
use crate::request_phase::RequestPhase;

/// The anchor of a request that took no site of the serving plan.
pub const NO_SITE: u32 = u32::MAX;

/// The fewest anchors in a row, on consecutive sites, that are trusted.
const SOLID: usize = 4;

/// One step folded in.
#[derive(Debug, Clone)]
struct Folded {
    /// The step's number.
    step: u64,
    /// A hash of its requests' sizes, streams and phases.
    key: u64,
    /// Per request: its site.
    map: Vec<u32>,
}

/// Steps merged into one sequence of sites (see the module's text).
#[derive(Debug, Clone, Default)]
pub struct Merger {
    shapes: Vec<Shape>,
    folded: Vec<Folded>,
    /// Per site the merger had when it was made (by [`Merger::restrict`]:
    /// a plan's sites, what anchors refer to), its index now.
    renumber: Vec<u32>,
    /// Requests aligned by the banded alignment (not anchored, not copied
    /// from an equal step) since the merger was made (by
    /// [`Merger::new`] or [`Merger::restrict`]).
    aligned: u64,
}

/// What one fold did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// The step was in already.
    Present,
    /// The first step: its requests are the sites.
    Reference,
    /// Copied from an equal step.
    Copied,
    /// Aligned; `aligned` requests went through the banded alignment.
    Aligned {
        /// Requests the banded alignment saw.
        aligned: usize,
    },
}

/// Where a request of a step being folded goes.
#[derive(Clone, Copy)]
enum Assign {
    /// An existing site.
    Site(u32),
    /// A new site, before the existing site at this index.
    Before(u32),
}

fn shape_of(size: u64, stream: u32, phase: RequestPhase) -> Shape {
    Shape {
        min: size,
        max: size,
        capacity: size,
        stream,
        phase,
    }
}

/// A hash of the requests' sizes, streams and phases, in order (FNV-1a
/// over the three words of each; a match is checked, not trusted).
fn key_of(rec: &StepRecord) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for r in &rec.requests {
        for word in [r.size, u64::from(r.stream), r.phase.code() as u64] {
            h ^= word;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h ^ rec.requests.len() as u64
}

/// The longest subsequence of `items` (request, site) whose sites strictly
/// increase (the earliest such, by patience sorting: O(n log n)).
fn longest_increasing(items: &[(usize, u32)]) -> Vec<(usize, u32)> {
    // tails[l]: the index of the smallest last site of an increasing run
    // of length l + 1; prev: each item's predecessor in its run.
    let mut tails: Vec<usize> = Vec::new();
    let mut prev: Vec<Option<usize>> = vec![None; items.len()];
    for (i, &(_, a)) in items.iter().enumerate() {
        let l = tails.partition_point(|&t| items[t].1 < a);
        prev[i] = l.checked_sub(1).map(|p| tails[p]);
        if l == tails.len() {
            tails.push(i);
        } else {
            tails[l] = i;
        }
    }
    let mut out = Vec::with_capacity(tails.len());
    let mut at = tails.last().copied();
    while let Some(i) = at {
        out.push(items[i]);
        at = prev[i];
    }
    out.reverse();
    out
}

impl Merger {
    /// An empty merger.
    pub fn new() -> Merger {
        Merger::default()
    }

    /// The merged sites, in order.
    pub fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    /// The steps folded in, in the order they were.
    pub fn steps(&self) -> impl Iterator<Item = u64> + '_ {
        self.folded.iter().map(|f| f.step)
    }

    /// The sites of step `step`'s requests, if it was folded in.
    pub fn map(&self, step: u64) -> Option<&[u32]> {
        self.folded
            .iter()
            .find(|f| f.step == step)
            .map(|f| f.map.as_slice())
    }

    /// Requests that went through the banded alignment since the merger
    /// was made.
    pub fn aligned_requests(&self) -> u64 {
        self.aligned
    }

    /// Folds `rec` in (see the module's text). `anchors`, when the step
    /// was served by a plan made from this merger, holds per request the
    /// site serving gave it ([`NO_SITE`] for none).
    pub fn fold(&mut self, rec: &StepRecord, anchors: Option<&[u32]>) -> Fold {
        if self.folded.iter().any(|f| f.step == rec.step) {
            return Fold::Present;
        }
        let key = key_of(rec);
        if self.shapes.is_empty() {
            self.shapes = rec
                .requests
                .iter()
                .map(|r| shape_of(r.size, r.stream, r.phase))
                .collect();
            let map: Vec<u32> = (0..rec.requests.len() as u32).collect();
            self.renumber = map.clone();
            self.folded.push(Folded {
                step: rec.step,
                key,
                map,
            });
            return Fold::Reference;
        }
        if let Some(map) = self.equal_step(rec, key) {
            self.folded.push(Folded {
                step: rec.step,
                key,
                map,
            });
            return Fold::Copied;
        }
        let requests: Vec<(u64, u32, RequestPhase)> = rec
            .requests
            .iter()
            .map(|r| (r.size, r.stream, r.phase))
            .collect();
        let (found, aligned) = match anchors {
            Some(a) if a.len() == requests.len() => {
                let a: Vec<u32> = a
                    .iter()
                    .map(|&j| self.renumber.get(j as usize).copied().unwrap_or(NO_SITE))
                    .collect();
                let (found, aligned) = self.anchored(&requests, &a);
                // Serving that lost its place (a run of requests it could
                // not match, anchors on either side of it adjacent) leaves
                // requests no site between: when more than a few are left,
                // the whole step is aligned and the better of the two kept
                // (fewer requests without a site).
                let left = found.iter().filter(|f| f.is_none()).count();
                if left > (requests.len() / 32).max(8) {
                    let whole = align::align_steps(&self.shapes, &requests);
                    let whole_left = whole.iter().filter(|f| f.is_none()).count();
                    if whole_left < left {
                        (whole, aligned + requests.len())
                    } else {
                        (found, aligned + requests.len())
                    }
                } else {
                    (found, aligned)
                }
            }
            _ => (align::align_steps(&self.shapes, &requests), requests.len()),
        };
        self.aligned += aligned as u64;
        self.insert(rec, key, &requests, found);
        Fold::Aligned { aligned }
    }

    /// The sites of a folded step that made the same requests, when every
    /// request lies within its site's recorded sizes.
    fn equal_step(&self, rec: &StepRecord, key: u64) -> Option<Vec<u32>> {
        let f = self
            .folded
            .iter()
            .rev()
            .find(|f| f.key == key && f.map.len() == rec.requests.len())?;
        let fits = rec.requests.iter().zip(&f.map).all(|(r, &j)| {
            self.shapes.get(j as usize).is_some_and(|s| {
                s.stream == r.stream && s.phase == r.phase && s.min <= r.size && r.size <= s.max
            })
        });
        fits.then(|| f.map.clone())
    }

    /// The serving matcher's sites where they stay in order and agree in
    /// stream and phase; the runs between them aligned against the sites
    /// between their neighbouring anchors. Returns the sites and how many
    /// requests the banded alignment saw.
    fn anchored(
        &self,
        requests: &[(u64, u32, RequestPhase)],
        anchors: &[u32],
    ) -> (Vec<Option<u32>>, usize) {
        let n = requests.len();
        // The plausible anchors: what the serving matcher could have given
        // (a site of the request's stream and phase whose sizes bracket it,
        // or one whose size changes).
        let plausible: Vec<(usize, u32)> = requests
            .iter()
            .zip(anchors)
            .enumerate()
            .filter(|&(_, (&(size, stream, phase), &a))| {
                self.shapes.get(a as usize).is_some_and(|s| {
                    s.stream == stream
                        && s.phase == phase
                        && ((s.min <= size && size <= s.max) || s.min < s.max)
                })
            })
            .map(|(k, (_, &a))| (k, a))
            .collect();
        // Of those, the most that stay in order (a longest increasing run
        // of sites), so that one anchor out of order (a cursor that jumped
        // to an entry) costs itself, not every anchor after it.
        // Of those, only runs of at least `SOLID` requests on consecutive
        // sites are trusted: a lone anchor may be a size that happens to
        // recur further on (the matcher takes an exact size within its
        // window), which the banded alignment, preferring positions,
        // would not take. The rest is aligned.
        let kept = longest_increasing(&plausible);
        let mut found: Vec<Option<u32>> = vec![None; n];
        let mut i = 0;
        while i < kept.len() {
            let mut j = i + 1;
            while j < kept.len() && kept[j].0 == kept[j - 1].0 + 1 && kept[j].1 == kept[j - 1].1 + 1
            {
                j += 1;
            }
            if j - i >= SOLID {
                for &(k, a) in &kept[i..j] {
                    found[k] = Some(a);
                }
            }
            i = j;
        }
        let mut aligned = 0;
        let mut k = 0;
        while k < n {
            if found[k].is_some() {
                k += 1;
                continue;
            }
            let start = k;
            while k < n && found[k].is_none() {
                k += 1;
            }
            let lo = found[..start]
                .iter()
                .rev()
                .flatten()
                .next()
                .map_or(0, |&j| j as usize + 1);
            let hi = found
                .get(k)
                .copied()
                .flatten()
                .map_or(self.shapes.len(), |j| j as usize);
            if lo < hi {
                aligned += k - start;
                let local = align::align_steps(&self.shapes[lo..hi], &requests[start..k]);
                for (t, got) in local.into_iter().enumerate() {
                    found[start + t] = got.map(|j| lo as u32 + j);
                }
            }
        }
        (found, aligned)
    }

    /// Records `rec`'s sites: widens the sites it took, makes new sites of
    /// the requests that took none (before the site after the last one
    /// taken, in the order they occurred) and renumbers every folded map.
    fn insert(
        &mut self,
        rec: &StepRecord,
        key: u64,
        requests: &[(u64, u32, RequestPhase)],
        found: Vec<Option<u32>>,
    ) {
        let mut assign = Vec::with_capacity(requests.len());
        let mut cursor = 0usize;
        for (&(size, _, _), got) in requests.iter().zip(found) {
            match got {
                Some(j) => {
                    let s = &mut self.shapes[j as usize];
                    s.min = s.min.min(size);
                    s.max = s.max.max(size);
                    s.capacity = s.max;
                    assign.push(Assign::Site(j));
                    cursor = j as usize + 1;
                }
                None => assign.push(Assign::Before(cursor as u32)),
            }
        }
        let mut inserts: Vec<(u32, usize)> = assign
            .iter()
            .enumerate()
            .filter_map(|(k, a)| match *a {
                Assign::Before(at) => Some((at, k)),
                Assign::Site(_) => None,
            })
            .collect();
        if inserts.is_empty() {
            let map = assign
                .iter()
                .map(|a| match *a {
                    Assign::Site(j) | Assign::Before(j) => j,
                })
                .collect();
            self.folded.push(Folded {
                step: rec.step,
                key,
                map,
            });
            return;
        }
        inserts.sort_by_key(|&(at, k)| (at, k));
        let mut shapes = Vec::with_capacity(self.shapes.len() + inserts.len());
        let mut old_to_new = vec![0u32; self.shapes.len()];
        let mut new_of_request = vec![0u32; requests.len()];
        let mut next = inserts.iter().peekable();
        for (j, shape) in self.shapes.iter().enumerate() {
            while let Some(&&(at, k)) = next.peek() {
                if at as usize > j {
                    break;
                }
                let (size, stream, phase) = requests[k];
                new_of_request[k] = shapes.len() as u32;
                shapes.push(shape_of(size, stream, phase));
                next.next();
            }
            old_to_new[j] = shapes.len() as u32;
            shapes.push(*shape);
        }
        for &(_, k) in next {
            let (size, stream, phase) = requests[k];
            new_of_request[k] = shapes.len() as u32;
            shapes.push(shape_of(size, stream, phase));
        }
        for f in &mut self.folded {
            for j in f.map.iter_mut() {
                *j = old_to_new[*j as usize];
            }
        }
        for j in &mut self.renumber {
            *j = old_to_new[*j as usize];
        }
        let map = assign
            .iter()
            .enumerate()
            .map(|(k, a)| match *a {
                Assign::Site(j) => old_to_new[j as usize],
                Assign::Before(_) => new_of_request[k],
            })
            .collect();
        self.folded.push(Folded {
            step: rec.step,
            key,
            map,
        });
        self.shapes = shapes;
    }

    /// The merge of `steps` alone (folding in, whole, any not folded yet):
    /// their maps in their order, the sites none of them took dropped, and
    /// each site's sizes counted again from these steps' requests.
    pub fn restrict(&mut self, steps: &[&StepRecord]) -> Merger {
        for rec in steps {
            self.fold(rec, None);
        }
        let mut used = vec![false; self.shapes.len()];
        let chosen: Vec<&Folded> = steps
            .iter()
            .filter_map(|rec| self.folded.iter().find(|f| f.step == rec.step))
            .collect();
        for f in &chosen {
            for &j in &f.map {
                used[j as usize] = true;
            }
        }
        let mut new_index = vec![NO_SITE; self.shapes.len()];
        let mut shapes = Vec::with_capacity(self.shapes.len());
        for (j, s) in self.shapes.iter().enumerate() {
            if used[j] {
                new_index[j] = shapes.len() as u32;
                shapes.push(Shape {
                    min: u64::MAX,
                    max: 0,
                    capacity: 0,
                    ..*s
                });
            }
        }
        let mut folded = Vec::with_capacity(chosen.len());
        for (rec, f) in steps.iter().zip(&chosen) {
            let map: Vec<u32> = f.map.iter().map(|&j| new_index[j as usize]).collect();
            for (r, &j) in rec.requests.iter().zip(&map) {
                let s = &mut shapes[j as usize];
                s.min = s.min.min(r.size);
                s.max = s.max.max(r.size);
                s.capacity = s.max;
            }
            folded.push(Folded {
                step: f.step,
                key: f.key,
                map,
            });
        }
        Merger {
            renumber: (0..shapes.len() as u32).collect(),
            shapes,
            folded,
            aligned: 0,
        }
    }

    /// Per folded step, in order: the site of each request.
    pub fn maps(&self) -> impl Iterator<Item = &[u32]> {
        self.folded.iter().map(|f| f.map.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Request;

    fn rec(step: u64, sizes: &[u64]) -> StepRecord {
        StepRecord {
            step,
            requests: sizes
                .iter()
                .map(|&size| Request {
                    size,
                    stream: 0,
                    phase: RequestPhase::Train,
                    freed: None,
                })
                .collect(),
            ..StepRecord::default()
        }
    }

    fn sizes_of(m: &Merger, step: u64, r: &StepRecord) -> Vec<(u64, u64)> {
        let map = m.map(step).expect("folded");
        r.requests
            .iter()
            .zip(map)
            .map(|(q, &j)| (q.size, m.shapes()[j as usize].max))
            .collect()
    }

    #[test]
    fn the_longest_increasing_run_of_anchors_is_kept() {
        let items = [(0, 9), (1, 1), (2, 2), (3, 3), (4, 0), (5, 4)];
        let got: Vec<usize> = longest_increasing(&items).iter().map(|x| x.0).collect();
        assert_eq!(got, vec![1, 2, 3, 5]);
        assert!(longest_increasing(&[]).is_empty());
    }

    #[test]
    fn an_equal_step_is_copied_without_alignment() {
        let mut m = Merger::new();
        let a = rec(1, &[100, 200, 300]);
        assert_eq!(m.fold(&a, None), Fold::Reference);
        assert_eq!(m.fold(&rec(2, &[100, 200, 300]), None), Fold::Copied);
        assert_eq!(m.fold(&rec(2, &[1]), None), Fold::Present);
        assert_eq!(m.aligned_requests(), 0);
        assert_eq!(m.map(2), Some(&[0, 1, 2][..]));
    }

    #[test]
    fn anchors_leave_only_the_runs_between_them_to_align() {
        let mut m = Merger::new();
        m.fold(
            &rec(1, &[100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]),
            None,
        );
        // Served: four and four took their sites; 550 and 650 took none
        // (a new shape of the two in the middle).
        let r = rec(2, &[100, 200, 300, 400, 550, 650, 700, 800, 900, 1000]);
        let anchors = [0, 1, 2, 3, NO_SITE, NO_SITE, 6, 7, 8, 9];
        assert_eq!(m.fold(&r, Some(&anchors)), Fold::Aligned { aligned: 2 });
        assert_eq!(m.map(2), Some(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9][..]));
        // The two middle sites now hold both shapes.
        assert_eq!(m.shapes()[4].min, 500);
        assert_eq!(m.shapes()[4].max, 550);
    }

    #[test]
    fn out_of_order_and_lone_anchors_are_not_trusted() {
        let sizes = [100, 200, 300, 400, 500, 600];
        let mut m = Merger::new();
        m.fold(&rec(1, &sizes), None);
        let r = rec(2, &sizes);
        // Equal requests are copied whatever the anchors say.
        assert!(matches!(
            m.fold(&r, Some(&[5, 0, 99, 1, 1, 1])),
            Fold::Copied
        ));
        // A lone anchor (a size that recurs further on, taken by the
        // matcher's window) is not trusted: the step is aligned whole, by
        // position.
        let mut m = Merger::new();
        m.fold(&rec(1, &[100, 200, 300, 400, 500, 600]), None);
        let r = rec(2, &[200, 210, 310, 410, 510, 610]);
        assert_eq!(
            m.fold(&r, Some(&[1, NO_SITE, NO_SITE, NO_SITE, NO_SITE, NO_SITE])),
            Fold::Aligned { aligned: 6 }
        );
        let got = sizes_of(&m, 2, &r);
        assert!(got.iter().all(|&(size, max)| size == max), "{got:?}");
        assert_eq!(
            m.map(2),
            Some(&[0, 1, 2, 3, 4, 5][..]),
            "position by position"
        );
        // Anchors going backwards, past the end or of a size the site never
        // had are dropped; a run of four in order is kept.
        let mut m = Merger::new();
        m.fold(&rec(1, &sizes), None);
        let r = rec(2, &[100, 200, 300, 400, 555, 600]);
        assert_eq!(
            m.fold(&r, Some(&[0, 1, 2, 3, 0, 99])),
            Fold::Aligned { aligned: 2 }
        );
        assert_eq!(m.map(2), Some(&[0, 1, 2, 3, 4, 5][..]));
    }

    #[test]
    fn a_request_that_aligns_with_nothing_is_a_new_site_in_place() {
        let mut m = Merger::new();
        m.fold(&rec(1, &[100, 200, 300, 400, 500, 600, 700, 800]), None);
        let r = rec(2, &[100, 200, 300, 400, 7, 500, 600, 700, 800]);
        m.fold(&r, Some(&[0, 1, 2, 3, NO_SITE, 4, 5, 6, 7]));
        assert_eq!(m.shapes().len(), 9);
        assert_eq!(m.map(2), Some(&[0, 1, 2, 3, 4, 5, 6, 7, 8][..]));
        assert_eq!(m.map(1), Some(&[0, 1, 2, 3, 5, 6, 7, 8][..]), "renumbered");
    }

    #[test]
    fn anchors_keep_referring_to_the_plans_sites_after_inserts() {
        let sizes = [100, 200, 300, 400, 500, 600, 700, 800];
        let mut m = Merger::new();
        let a = rec(1, &sizes);
        m.fold(&a, None);
        let mut m = m.restrict(&[&a]);
        // Step 2 inserts a site before site 4; step 3's anchors still name
        // the plan's sites 0..8.
        let b = rec(2, &[100, 200, 300, 400, 7, 500, 600, 700, 800]);
        m.fold(&b, Some(&[0, 1, 2, 3, NO_SITE, 4, 5, 6, 7]));
        let r = rec(3, &[100, 200, 300, 400, 500, 600, 700, 850]);
        // Renumbered, the last three anchors (sites 5, 6, 7 now, after the
        // inserted site 4) are a run of three: aligned with the last
        // request.
        assert_eq!(
            m.fold(&r, Some(&[0, 1, 2, 3, 4, 5, 6, NO_SITE])),
            Fold::Aligned { aligned: 4 }
        );
        assert_eq!(m.map(3), Some(&[0, 1, 2, 3, 5, 6, 7, 8][..]));
        assert_eq!(m.shapes()[8].max, 850);
    }

    #[test]
    fn restrict_drops_sites_and_sizes_of_steps_left_out() {
        let mut m = Merger::new();
        let a = rec(1, &[100, 200, 300]);
        let b = rec(2, &[100, 250, 9, 300]);
        m.fold(&a, None);
        m.fold(&b, None);
        let c = rec(3, &[100, 200, 300]);
        let r = m.restrict(&[&a, &c]);
        assert_eq!(r.shapes().len(), 3, "the site only step 2 made is gone");
        assert_eq!(r.shapes()[1].max, 200, "step 2's 250 no longer counts");
        assert_eq!(r.steps().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(r.maps().count(), 2);
    }

    #[test]
    fn folding_matches_the_whole_alignment_on_a_shifted_step() {
        // With no anchors, a fold is the banded alignment of the whole step.
        let sizes: Vec<u64> = (1..=40).map(|i| 64 * i).collect();
        let mut m = Merger::new();
        m.fold(&rec(1, &sizes), None);
        let mut other = sizes.clone();
        other.remove(10);
        other.insert(20, 5);
        let r = rec(2, &other);
        m.fold(&r, None);
        let got = sizes_of(&m, 2, &r);
        assert!(got.iter().all(|&(size, max)| size == max), "{got:?}");
        assert_eq!(m.shapes().len(), 41);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// A step: sizes from a small set (so sizes recur), on two phases.
        fn steps() -> impl Strategy<Value = Vec<Vec<(u64, bool)>>> {
            prop::collection::vec(
                prop::collection::vec((1u64..12, any::<bool>()), 0..40),
                1..6,
            )
        }

        proptest! {
            /// Whatever the anchors say (garbage included), every folded
            /// step maps each request to a site of its stream and phase
            /// whose recorded sizes hold it, in increasing site order, and
            /// a restriction keeps exactly the sites its steps use.
            #[test]
            fn folds_keep_every_map_valid(
                raw in steps(),
                anchors in prop::collection::vec(prop::collection::vec(any::<u32>(), 0..40), 6),
            ) {
                let recs: Vec<StepRecord> = raw
                    .iter()
                    .enumerate()
                    .map(|(i, step)| StepRecord {
                        step: i as u64 + 1,
                        requests: step
                            .iter()
                            .map(|&(size, eval)| Request {
                                size: 64 * size,
                                stream: 0,
                                phase: if eval { RequestPhase::Eval } else { RequestPhase::Train },
                                freed: None,
                            })
                            .collect(),
                        ..StepRecord::default()
                    })
                    .collect();
                let mut m = Merger::new();
                for (rec, a) in recs.iter().zip(&anchors) {
                    let a: Vec<u32> = (0..rec.requests.len())
                        .map(|k| a.get(k).map_or(NO_SITE, |&x| x % 64))
                        .collect();
                    m.fold(rec, Some(&a));
                }
                let check = |m: &Merger| -> Result<(), TestCaseError> {
                    for (rec, map) in recs.iter().zip(m.maps()) {
                        prop_assert_eq!(map.len(), rec.requests.len());
                        prop_assert!(map.windows(2).all(|w| w[0] < w[1]), "{:?}", map);
                        for (r, &j) in rec.requests.iter().zip(map) {
                            let s = m.shapes()[j as usize];
                            prop_assert!(s.phase == r.phase && s.stream == r.stream);
                            prop_assert!(s.min <= r.size && r.size <= s.max);
                        }
                    }
                    Ok(())
                };
                check(&m)?;
                let refs: Vec<&StepRecord> = recs.iter().collect();
                let r = m.restrict(&refs);
                check(&r)?;
                let mut used = vec![false; r.shapes().len()];
                for map in r.maps() {
                    for &j in map {
                        used[j as usize] = true;
                    }
                }
                prop_assert!(used.iter().all(|&u| u));
            }
        }
    }
}
