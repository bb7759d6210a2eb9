//! Exact, anytime search: fit a capacity, or minimise the height, within a
//! time limit, starting from a known placement (the incumbent).
//!
//! The branch and bound is in `engine.rs`. This file drives it:
//!
//! - **Fit** a capacity: MiniMalloc's round robin. The three preorders run
//!   in turn with a node limit that doubles each round, so an order that
//!   suits the instance finishes early and none can stall the others.
//! - **Minimise**: bisect between the proven lower bound and the best
//!   height found. Each target gets a node budget per preorder; a target
//!   that runs out of budget counts as "probably infeasible" for this
//!   round, and when the bisection closes the budget doubles and the
//!   unproven range is searched again. The first target is the lower bound
//!   itself, since real instances are often packed perfectly, and it is
//!   searched like a capacity (the round robin above) with an eighth of
//!   the time and nodes left: MiniMalloc's F fits its lower bound in a
//!   fraction of a second this way, where small budgets for every target
//!   left it at 1.041x after 30 s, and an instance whose lower bound is
//!   out of reach (D) keeps most of the time for the bisection. Heights are sums of sizes, so targets step by the sizes'
//!   greatest common divisor.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::engine::{Engine, PREORDERS, Run};
use super::sweep::Sweep;
use super::{GreedyOrder, Interval, greedy, height, lower_bound, validate};

/// Minimising spends `1 / LOWER_BOUND_SHARE` of its time and nodes on the
/// lower bound before bisecting.
const LOWER_BOUND_SHARE: u32 = 8;

/// Settings of [`search`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchConfig {
    /// Fit mode: find a placement of height at most this. Without it the
    /// search minimises.
    pub capacity: Option<usize>,
    /// Keep lowering the height after fitting the capacity, until the
    /// optimum is proven or the limits are reached.
    pub minimize: bool,
    /// Wall-clock limit for the whole search.
    pub time_limit: Duration,
    /// Limit on search nodes over the whole search (for reproducible runs;
    /// the time limit applies as well).
    pub node_limit: Option<u64>,
}

impl Default for SearchConfig {
    /// Minimise for at most 10 seconds.
    fn default() -> Self {
        SearchConfig {
            capacity: None,
            minimize: true,
            time_limit: Duration::from_secs(10),
            node_limit: None,
        }
    }
}

/// What the search established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SearchStatus {
    /// The height is proven minimal.
    Optimal,
    /// The placement fits the capacity (any placement, when there is no
    /// capacity); a lower one may exist.
    Feasible,
    /// Proven: no placement fits the capacity.
    Infeasible,
    /// No placement within the capacity was found before the limits, and
    /// none was proven impossible.
    Unknown,
}

/// The result of [`search`]: always a valid placement (the incumbent if
/// nothing better was found).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchOutcome {
    /// One offset per item; no two buffers alive together share a byte.
    pub offsets: Vec<usize>,
    /// Height of `offsets`.
    pub height: usize,
    /// A proven lower bound on the optimal height: at least
    /// [`lower_bound`], raised by targets the search proved infeasible.
    pub proven_bound: usize,
    /// What was established.
    pub status: SearchStatus,
    /// Search nodes visited.
    pub nodes: u64,
    /// Time spent.
    pub elapsed: Duration,
}

/// How one attempt at a target ended.
enum Attempt {
    Found,
    Infeasible,
    OutOfBudget,
    Stopped,
}

struct Driver<'a> {
    items: &'a [Interval],
    sweep: &'a Sweep,
    engine: Engine<'a>,
    deadline: Option<Instant>,
    nodes_left: u64,
    nodes: u64,
    best: Vec<usize>,
    best_height: usize,
}

impl Driver<'_> {
    /// One run of the engine; on success the placement becomes the best.
    fn run(&mut self, capacity: usize, preorder: usize, limit: u64) -> Run {
        let limit = limit.min(self.nodes_left);
        let run = self
            .engine
            .run(capacity, PREORDERS[preorder], limit, self.deadline);
        let used = self.engine.nodes().min(limit);
        self.nodes += used;
        self.nodes_left -= used;
        if run == Run::Found {
            let mut offsets = vec![0usize; self.items.len()];
            for (k, &id) in self.sweep.ids.iter().enumerate() {
                offsets[id] = self.engine.solution()[k];
            }
            let h = height(self.items, &offsets);
            if h < self.best_height {
                self.best = offsets;
                self.best_height = h;
            }
        }
        run
    }

    /// Every preorder once with `limit` nodes each.
    fn attempt(&mut self, capacity: usize, limit: u64) -> Attempt {
        for preorder in 0..PREORDERS.len() {
            // The engine looks at the clock every 256 nodes; short runs
            // would never see the deadline.
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Attempt::Stopped;
            }
            match self.run(capacity, preorder, limit) {
                Run::Found => return Attempt::Found,
                Run::Infeasible => return Attempt::Infeasible,
                Run::Deadline => return Attempt::Stopped,
                Run::NodeLimit if self.nodes_left == 0 => return Attempt::Stopped,
                Run::NodeLimit => {}
            }
        }
        Attempt::OutOfBudget
    }

    /// MiniMalloc's round robin with doubling node limits.
    fn fit(&mut self, capacity: usize) -> Attempt {
        let mut limit = (self.sweep.len() as u64).max(1);
        loop {
            limit = limit.saturating_mul(2);
            match self.attempt(capacity, limit) {
                Attempt::OutOfBudget => continue,
                other => return other,
            }
        }
    }

    /// [`Driver::fit`] at `capacity` with `1 / LOWER_BOUND_SHARE` of the
    /// time and of the nodes left; running out of that share is
    /// `OutOfBudget`, out of the whole `Stopped`.
    fn fit_for_share(&mut self, capacity: usize) -> Attempt {
        let whole = self.deadline;
        let now = Instant::now();
        self.deadline = whole.map(|d| now + d.saturating_duration_since(now) / LOWER_BOUND_SHARE);
        let nodes_left = self.nodes_left;
        self.nodes_left = nodes_left / u64::from(LOWER_BOUND_SHARE);
        let before = self.nodes;
        let attempt = self.fit(capacity);
        self.deadline = whole;
        self.nodes_left = nodes_left - (self.nodes - before);
        match attempt {
            Attempt::Stopped if self.nodes_left > 0 && whole.is_none_or(|d| Instant::now() < d) => {
                Attempt::OutOfBudget
            }
            other => other,
        }
    }

    /// Bisection between the proven bound `lo` and the best height;
    /// returns the raised proven bound.
    /// `lo` is a multiple of `step`; buffers that take no room keep the
    /// height at least `floor`, so the search stops there.
    fn minimize(&mut self, mut lo: usize, step: usize, floor: usize) -> usize {
        let mut budget = (2 * self.sweep.len() as u64).max(64);
        let mut soft = lo;
        let mut first = true;
        while lo < self.best_height && floor < self.best_height {
            if soft >= self.best_height {
                budget = budget.saturating_mul(2);
                soft = lo;
            }
            if first {
                first = false;
                // The lower bound first, as hard as a capacity would be
                // searched for, with a share of the time left: real instances
                // are often packed perfectly, and the bisection's small
                // budgets would give up on it.
                match self.fit_for_share(lo) {
                    Attempt::Found => {}
                    Attempt::Infeasible => {
                        lo += step;
                        soft = lo;
                    }
                    Attempt::OutOfBudget => soft = lo + step,
                    Attempt::Stopped => break,
                }
                continue;
            }
            let target = {
                // The highest multiple of `step` below the best height; `soft`
                // is a multiple of `step` below it, so `soft <= top`.
                let top = (self.best_height - 1) / step * step;
                let mid = soft + (top - soft) / 2;
                (mid - mid % step).max(soft)
            };
            match self.attempt(target, budget) {
                Attempt::Found => {}
                Attempt::Infeasible => {
                    lo = target + step;
                    soft = soft.max(lo);
                }
                Attempt::OutOfBudget => soft = target + step,
                Attempt::Stopped => break,
            }
        }
        lo
    }
}

/// Branch and bound over canonical placements (see the module docs),
/// seeded with `incumbent` (greedy by size if it is `None` or invalid).
///
/// Problems with more than 4096 buffers that take room, or whose sizes add
/// up to half of `usize` or more, are not searched: the incumbent comes
/// back with status `Feasible` or `Unknown` (`Optimal` if it meets the
/// lower bound).
///
/// With a capacity and `minimize == false`, stops at the first placement
/// that fits; otherwise keeps lowering the height until it is proven
/// optimal or a limit is reached. Always returns a valid placement: the
/// best one seen.
///
/// ```
/// use std::time::Duration;
/// use tensor_arena::plan::placement::{Interval, SearchConfig, SearchStatus, search, validate};
/// // Every greedy placer needs 8 bytes here; the optimum is 7.
/// let items = [
///     Interval { lower: 2, upper: 4, size: 4 },
///     Interval { lower: 0, upper: 1, size: 4 },
///     Interval { lower: 0, upper: 2, size: 2 },
///     Interval { lower: 1, upper: 3, size: 1 },
///     Interval { lower: 0, upper: 3, size: 1 },
///     Interval { lower: 3, upper: 4, size: 3 },
/// ];
/// let config = SearchConfig { capacity: Some(7), ..SearchConfig::default() };
/// let out = search(&items, None, &config);
/// validate(&items, &out.offsets, Some(7))?;
/// assert_eq!(out.status, SearchStatus::Optimal);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn search(
    items: &[Interval],
    incumbent: Option<&[usize]>,
    config: &SearchConfig,
) -> SearchOutcome {
    search_above(items, None, incumbent, config)
}

/// [`search`] with every buffer i at or above `release[i]` (the room below
/// held by buffers outside `items`); `incumbent` must respect it.
pub(super) fn search_above(
    items: &[Interval],
    release: Option<&[usize]>,
    incumbent: Option<&[usize]>,
    config: &SearchConfig,
) -> SearchOutcome {
    search_held(items, release, None, incumbent, config)
}

/// [`search_above`] where some buffers are held: `pin[i]` is the offset
/// buffer i must keep (`usize::MAX` where it is free to move). Held
/// buffers are obstacles with their own lifetimes: a free buffer may take
/// a hole under or between them at the times it lives. `incumbent` must
/// respect the releases and the pins (and `release[i]` should be
/// `pin[i]` for a held buffer; it is raised to it here).
pub(super) fn search_held(
    items: &[Interval],
    release: Option<&[usize]>,
    pin: Option<&[usize]>,
    incumbent: Option<&[usize]>,
    config: &SearchConfig,
) -> SearchOutcome {
    let start = Instant::now();
    // A held buffer's pin is its release too.
    let merged: Option<Vec<usize>> = pin.map(|p| {
        (0..items.len())
            .map(|i| {
                let r = release.map_or(0, |r| r[i]);
                if p[i] == usize::MAX { r } else { r.max(p[i]) }
            })
            .collect()
    });
    let release = merged.as_deref().or(release);
    let respects = |offsets: &[usize]| {
        release.is_none_or(|r| offsets.iter().zip(r).all(|(o, r)| o >= r))
            && pin.is_none_or(|p| {
                offsets
                    .iter()
                    .zip(p)
                    .zip(items)
                    .all(|((o, p), it)| it.is_trivial() || *p == usize::MAX || o == p)
            })
    };
    let best = match incumbent {
        Some(offsets) if validate(items, offsets, None).is_ok() && respects(offsets) => {
            offsets.to_vec()
        }
        _ if release.is_some() => {
            // Nothing to start from: the caller always gives one.
            return SearchOutcome {
                offsets: incumbent.map_or_else(|| vec![0; items.len()], <[usize]>::to_vec),
                height: usize::MAX,
                proven_bound: 0,
                status: SearchStatus::Unknown,
                nodes: 0,
                elapsed: start.elapsed(),
            };
        }
        _ => greedy(items, GreedyOrder::Size),
    };
    let best_height = height(items, &best);
    // Trivial buffers sit at offset 0, so the largest one is a floor too.
    let trivial_floor = items
        .iter()
        .filter(|it| it.is_trivial())
        .map(|it| it.size)
        .max()
        .unwrap_or(0);
    let step = items
        .iter()
        .filter(|it| !it.is_trivial())
        .fold(0usize, |g, it| gcd(g, it.size));
    // With releases, canonical offsets are a release plus sizes.
    let step = release
        .map_or(step, |r| {
            items
                .iter()
                .zip(r)
                .filter(|(it, _)| !it.is_trivial())
                .fold(step, |g, (_, &x)| gcd(g, x))
        })
        .max(1);
    // Canonical placements stack whole buffers, so the optimal height of
    // the buffers that take room is a multiple of `step`.
    let mut aligned_bound = lower_bound(items).div_ceil(step).saturating_mul(step);
    let proven = aligned_bound.max(trivial_floor);
    let mut outcome = SearchOutcome {
        offsets: best,
        height: best_height,
        proven_bound: proven.min(best_height),
        status: SearchStatus::Unknown,
        nodes: 0,
        elapsed: Duration::ZERO,
    };
    let fits = |h: usize| config.capacity.is_none_or(|c| h <= c);
    let Ok(sweep) = Sweep::new(items) else {
        // Too large to search: the incumbent is all there is.
        outcome.status = if best_height <= proven {
            SearchStatus::Optimal
        } else if fits(best_height) {
            SearchStatus::Feasible
        } else {
            SearchStatus::Unknown
        };
        outcome.elapsed = start.elapsed();
        return outcome;
    };
    let mut engine = Engine::new(&sweep);
    if let Some(r) = release {
        let by_sweep: Vec<usize> = sweep.ids.iter().map(|&id| r[id]).collect();
        engine.set_release(&by_sweep);
        if let Some(p) = pin {
            let by_sweep: Vec<usize> = sweep.ids.iter().map(|&id| p[id]).collect();
            engine.set_pins(&by_sweep);
        }
        // Each section's bytes sit above its lowest release.
        let floors = sweep_floor_bound(&sweep, &by_sweep);
        aligned_bound = aligned_bound.max(floors / step * step);
    }
    let mut driver = Driver {
        items,
        sweep: &sweep,
        engine,
        deadline: start.checked_add(config.time_limit),
        nodes_left: config.node_limit.unwrap_or(u64::MAX),
        nodes: 0,
        best: outcome.offsets,
        best_height,
    };
    let mut status = None;
    if let Some(capacity) = config.capacity
        && driver.best_height > capacity
    {
        if trivial_floor > capacity {
            status = Some(SearchStatus::Infeasible);
        } else {
            match driver.fit(capacity) {
                Attempt::Found => {}
                Attempt::Infeasible => status = Some(SearchStatus::Infeasible),
                Attempt::OutOfBudget | Attempt::Stopped => status = Some(SearchStatus::Unknown),
            }
        }
    }
    let mut proven = proven;
    if status.is_none() && (config.minimize || config.capacity.is_none()) {
        proven = driver
            .minimize(aligned_bound, step, trivial_floor)
            .max(trivial_floor);
    }
    let status = status.unwrap_or(if driver.best_height <= proven {
        SearchStatus::Optimal
    } else {
        SearchStatus::Feasible
    });
    if status == SearchStatus::Infeasible
        && let Some(capacity) = config.capacity
    {
        proven = proven.max(capacity.saturating_add(1));
    }
    SearchOutcome {
        proven_bound: proven.min(driver.best_height),
        height: driver.best_height,
        offsets: driver.best,
        status,
        nodes: driver.nodes,
        elapsed: start.elapsed(),
    }
}

/// The most any section needs with releases: its lowest release plus its
/// bytes.
fn sweep_floor_bound(sweep: &Sweep, release: &[usize]) -> usize {
    (0..sweep.sections())
        .map(|s| {
            let row = sweep.members.row(s as u32);
            let low = row.iter().map(|&c| release[c as usize]).min().unwrap_or(0);
            low + sweep.totals[s]
        })
        .max()
        .unwrap_or(0)
}

/// The greatest common divisor (`gcd(0, b) == b`): the step of a set of
/// sizes.
pub(super) fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{iv, random_items, xorshift};
    use super::*;

    #[test]
    fn gcd_of_sizes() {
        assert_eq!(gcd(0, 12), 12);
        assert_eq!(gcd(12, 18), 6);
        assert_eq!(gcd(7, 1), 1);
    }

    #[test]
    fn empty_and_trivial_problems() {
        let out = search(&[], None, &SearchConfig::default());
        assert_eq!(out.status, SearchStatus::Optimal);
        assert!(out.offsets.is_empty());
        let items = [iv(2, 2, 10), iv(0, 1, 0)];
        let out = search(&items, None, &SearchConfig::default());
        assert_eq!(out.offsets, vec![0, 0]);
        assert_eq!(out.height, 10);
        assert_eq!(out.status, SearchStatus::Optimal);
    }

    #[test]
    fn infeasible_capacity_is_proven() {
        let items = [iv(0, 2, 10), iv(1, 3, 10)];
        let config = SearchConfig {
            capacity: Some(15),
            minimize: false,
            ..SearchConfig::default()
        };
        let out = search(&items, None, &config);
        assert_eq!(out.status, SearchStatus::Infeasible);
        assert_eq!(out.height, 20, "the incumbent comes back");
        validate(&items, &out.offsets, None).unwrap();
    }

    /// Every greedy placer (both rules, every order) needs 8; the optimum
    /// is the lower bound, 7.
    fn trap() -> [Interval; 6] {
        [
            iv(2, 4, 4),
            iv(0, 1, 4),
            iv(0, 2, 2),
            iv(1, 3, 1),
            iv(0, 3, 1),
            iv(3, 4, 3),
        ]
    }

    #[test]
    fn greedy_trap_is_solved() {
        let items = trap();
        let (_, greedy_best) = super::super::best_of_orders(&items);
        assert_eq!(height(&items, &greedy_best), 8);
        let out = search(&items, Some(&greedy_best), &SearchConfig::default());
        validate(&items, &out.offsets, None).unwrap();
        assert_eq!(out.height, 7);
        assert_eq!(out.height, lower_bound(&items));
        assert_eq!(out.status, SearchStatus::Optimal);
        // Fit mode stops at the first placement within the capacity.
        let config = SearchConfig {
            capacity: Some(7),
            minimize: false,
            ..SearchConfig::default()
        };
        let out = search(&items, Some(&greedy_best), &config);
        assert_eq!(out.height, 7);
        validate(&items, &out.offsets, Some(7)).unwrap();
    }

    #[test]
    fn problems_beyond_the_limit_keep_the_incumbent() {
        let items: Vec<Interval> = (0..4097).map(|i| iv(i, i + 3, 1 + i % 3)).collect();
        let out = search(&items, None, &SearchConfig::default());
        assert_eq!(out.nodes, 0);
        validate(&items, &out.offsets, None).unwrap();
        assert_eq!(out.offsets, greedy(&items, GreedyOrder::Size));
        let huge = [iv(0, 2, usize::MAX / 2), iv(1, 3, 1)];
        let out = search(&huge, None, &SearchConfig::default());
        assert_eq!(out.nodes, 0);
        validate(&huge, &out.offsets, None).unwrap();
    }

    #[test]
    fn zero_time_limit_returns_the_incumbent() {
        let items = trap();
        let config = SearchConfig {
            time_limit: Duration::ZERO,
            ..SearchConfig::default()
        };
        let out = search(&items, None, &config);
        validate(&items, &out.offsets, None).unwrap();
        assert_eq!(out.status, SearchStatus::Feasible);
        assert_eq!(out.nodes, 0);
    }

    #[test]
    fn node_limit_stops_and_keeps_the_incumbent() {
        let items: Vec<Interval> = (0..30)
            .map(|i| iv(i % 7, i % 7 + 1 + i % 5, 3 + (i * 7919) % 17))
            .collect();
        let incumbent = greedy(&items, GreedyOrder::Size);
        let config = SearchConfig {
            node_limit: Some(1),
            ..SearchConfig::default()
        };
        let out = search(&items, Some(&incumbent), &config);
        assert!(out.nodes <= 1);
        assert!(out.height <= height(&items, &incumbent));
        validate(&items, &out.offsets, None).unwrap();
    }

    #[test]
    fn releases_are_respected_and_the_incumbent_never_beaten_upwards() {
        let mut draw = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut next = move |m: usize| draw(m as u64);
        for _ in 0..40 {
            let count = 3 + next(30);
            let items = random_items(&mut next, count, 20, 10, 12);
            let incumbent = greedy(&items, GreedyOrder::Start);
            // Releases at or below the incumbent's offsets, so it respects them.
            let release: Vec<usize> = incumbent.iter().map(|&o| o - next(o + 1)).collect();
            let config = SearchConfig {
                node_limit: Some(20_000),
                ..SearchConfig::default()
            };
            let out = search_above(&items, Some(&release), Some(&incumbent), &config);
            validate(&items, &out.offsets, None).unwrap();
            for (i, it) in items.iter().enumerate() {
                if !it.is_trivial() {
                    assert!(out.offsets[i] >= release[i], "buffer {i} below its release");
                }
            }
            assert!(out.height <= height(&items, &incumbent));
            assert!(out.proven_bound <= out.height);
        }
        // (held buffers: `held_buffers_stay_and_their_holes_are_used`.)
        // A release that lifts one buffer above the other: the optimum of
        // 5 (side by side in time) is out of reach, 8 is the best.
        let items = [iv(0, 2, 5), iv(2, 4, 3)];
        let out = search_above(
            &items,
            Some(&[0, 5]),
            Some(&[0, 5]),
            &SearchConfig::default(),
        );
        assert_eq!(out.height, 8);
        assert_eq!(out.offsets, vec![0, 5]);
    }

    #[test]
    fn a_free_buffer_takes_the_hole_under_a_held_one() {
        // H is held at 5 over a hole [0, 5) for times 1-10 (G fills it at
        // time 0 only); X lies on H. On a release X cannot pass under H
        // (height 15); around H as an obstacle it takes the hole (10).
        let items = [iv(0, 1, 5), iv(0, 10, 5), iv(2, 8, 5)];
        let incumbent = [0, 5, 10];
        let held = [usize::MAX, 5, usize::MAX];
        let config = SearchConfig {
            node_limit: Some(10_000),
            ..SearchConfig::default()
        };
        let out = search_held(&items, None, Some(&held), Some(&incumbent), &config);
        validate(&items, &out.offsets, None).unwrap();
        assert_eq!(out.height, 10);
        assert_eq!(out.offsets[1], 5, "the held buffer stays");
        assert_eq!(out.offsets[2], 0);
        assert_eq!(out.status, SearchStatus::Optimal);
        let above = search_above(&items, Some(&[0, 5, 10]), Some(&incumbent), &config);
        assert_eq!(above.height, 15);
    }

    /// The lowest height over every integer offset of the free buffers
    /// below `limit`, the held ones where `incumbent` has them.
    fn brute_force(items: &[Interval], held: &[usize], limit: usize) -> usize {
        let free: Vec<usize> = (0..items.len())
            .filter(|&i| held[i] == usize::MAX && !items[i].is_trivial())
            .collect();
        let mut offsets: Vec<usize> = held
            .iter()
            .map(|&p| if p == usize::MAX { 0 } else { p })
            .collect();
        fn go(
            k: usize,
            free: &[usize],
            items: &[Interval],
            offsets: &mut Vec<usize>,
            limit: usize,
            best: &mut usize,
        ) {
            if k == free.len() {
                if validate(items, offsets, None).is_ok() {
                    *best = (*best).min(height(items, offsets));
                }
                return;
            }
            let i = free[k];
            for o in 0..=limit.saturating_sub(items[i].size) {
                offsets[i] = o;
                go(k + 1, free, items, offsets, limit, best);
            }
        }
        let mut best = usize::MAX;
        go(0, &free, items, &mut offsets, limit, &mut best);
        best
    }

    #[test]
    fn held_buffers_stay_and_their_holes_are_used() {
        let mut draw = xorshift(0x1f83_d9ab_fb41_bd6bu64);
        let mut next = move |m: usize| draw(m as u64);
        for round in 0..300 {
            let n = 3 + next(if round < 200 { 5 } else { 30 });
            let items: Vec<Interval> = (0..n)
                .map(|_| {
                    let lower = next(10);
                    iv(lower, lower + 1 + next(6), 1 + next(5))
                })
                .collect();
            let incumbent = greedy(&items, GreedyOrder::Start);
            let held: Vec<usize> = incumbent
                .iter()
                .map(|&o| if next(2) == 0 { o } else { usize::MAX })
                .collect();
            let config = SearchConfig {
                node_limit: Some(50_000),
                ..SearchConfig::default()
            };
            let out = search_held(&items, None, Some(&held), Some(&incumbent), &config);
            validate(&items, &out.offsets, None).unwrap();
            for (i, it) in items.iter().enumerate() {
                if held[i] != usize::MAX && !it.is_trivial() {
                    assert_eq!(out.offsets[i], held[i], "held buffer {i} moved");
                }
            }
            let before = height(&items, &incumbent);
            assert!(out.height <= before);
            assert!(out.proven_bound <= out.height);
            // Small enough to try every offset: the search's optimum (and
            // every bound it proves) is the true one.
            let free = held.iter().filter(|&&p| p == usize::MAX).count();
            if round < 200 && free <= 4 {
                let best = brute_force(&items, &held, before);
                assert!(out.height >= best);
                assert!(
                    out.proven_bound <= best,
                    "round {round}: bound above the optimum"
                );
                if out.status == SearchStatus::Optimal {
                    assert_eq!(out.height, best, "round {round}");
                }
            }
        }
    }
}
