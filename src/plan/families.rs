//! Families of placement instances built from a few base instances: copies
//! shifted in time, two instances interleaved, random subsets, sizes
//! scaled. The planner was tuned on a handful of public instances; these
//! families show how it does on the ones it was never tuned on
//! (`cargo run --release --example plan_families`, docs/planner.md).
//!
//! Every construction is deterministic: the same bases, seed and count give
//! the same instances.
//!
//! ```
//! use tensor_arena::plan::families::{self, Base};
//! use tensor_arena::plan::placement::{Interval, lower_bound};
//!
//! let one = vec![
//!     Interval { lower: 0, upper: 2, size: 8 },
//!     Interval { lower: 1, upper: 4, size: 4 },
//! ];
//! // Three copies one after the other: the bound is the single one's.
//! let three = families::copies(&one, 3, 1.0);
//! assert_eq!(three.len(), 6);
//! assert_eq!(lower_bound(&three), lower_bound(&one));
//! let bases = [Base { name: "toy".into(), items: one }];
//! let drawn = families::draw(&bases, 7, 5, 1_000);
//! assert_eq!(drawn.len(), 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::placement::Interval;

/// A named base instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    /// Its name, as the generated instances repeat it.
    pub name: String,
    /// Its buffers.
    pub items: Vec<Interval>,
}

/// A generated instance: a name saying how it was built, and its buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// How it was built, e.g. `S_1 x10 shift0.5`.
    pub name: String,
    /// The base it was built from (the first, for an interleaving).
    pub base: String,
    /// Its buffers.
    pub items: Vec<Interval>,
}

/// The shifts the copies take, in spans of the base.
pub const SHIFTS: [f64; 4] = [1.0, 0.5, 0.25, 0.1];

/// The span of `items`: the latest end, or 1 when there is none (so that
/// shifts stay positive).
fn span(items: &[Interval]) -> usize {
    items.iter().map(|it| it.upper).max().unwrap_or(0).max(1)
}

/// `count` copies of `items`, copy k shifted in time by `k x span x shift`
/// (the span is the latest end). At shift 1 (and above) the copies come one
/// after the other; below 1 they overlap.
pub fn copies(items: &[Interval], count: usize, shift: f64) -> Vec<Interval> {
    let step = ((span(items) as f64) * shift).round().max(1.0) as usize;
    (0..count)
        .flat_map(|k| {
            items.iter().map(move |it| Interval {
                lower: it.lower + k * step,
                upper: it.upper + k * step,
                size: it.size,
            })
        })
        .collect()
}

/// A random instance of `n` buffers shaped like a training run
/// (deterministic, xorshift from `seed`): starts uniform over `n / 8`
/// times, 80% of lifetimes up to 32 times, 18% up to 512, 2% up to 8,192;
/// sizes 512 bytes to 4 MiB, small ones common. The planner bench's,
/// `plan_scale`'s and the large-instance tests' instance.
pub fn random_run(n: usize, seed: u64) -> Vec<Interval> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let horizon = (n / 8).max(1) as u64;
    (0..n)
        .map(|_| {
            let lower = (next() % horizon) as usize;
            let r = next() % 100;
            let len = if r < 80 {
                1 + next() % 32
            } else if r < 98 {
                1 + next() % 512
            } else {
                1 + next() % 8192
            };
            let size = 512 * ((1 + next() % 8192) >> (next() % 12)) as usize;
            Interval {
                lower,
                upper: lower + len as usize,
                size,
            }
        })
        .collect()
}

/// Two instances alive together: both stretched onto the same time axis
/// (times of `a` times the span of `b` and the other way round, so no
/// lifetime becomes empty and both cover the whole axis).
pub fn interleave(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let (sa, sb) = (span(a), span(b));
    let stretch = |items: &[Interval], by: usize| -> Vec<Interval> {
        items
            .iter()
            .map(|it| Interval {
                lower: it.lower * by,
                upper: it.upper * by,
                size: it.size,
            })
            .collect()
    };
    let mut out = stretch(a, sb);
    out.extend(stretch(b, sa));
    out
}

/// Each buffer kept with probability `keep`.
pub fn subset(items: &[Interval], keep: f64, rng: &mut Rng) -> Vec<Interval> {
    items
        .iter()
        .filter(|_| rng.unit() < keep)
        .copied()
        .collect()
}

/// Sizes multiplied by a factor drawn per buffer, uniformly between `low`
/// and `high` (rounded, at least 1 byte).
pub fn scale_sizes(items: &[Interval], low: f64, high: f64, rng: &mut Rng) -> Vec<Interval> {
    items
        .iter()
        .map(|it| {
            let factor = low + (high - low) * rng.unit();
            Interval {
                size: ((it.size as f64) * factor).round().max(1.0) as usize,
                ..*it
            }
        })
        .collect()
}

/// A small deterministic generator (SplitMix64): the families need no
/// statistical quality, only the same draw for the same seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % ((hi - lo) as u64 + 1)) as usize
    }
}

/// `count` instances drawn from `bases` by `seed`, none above
/// `max_buffers` buffers (copies are cut to fit; a base alone above it is
/// never drawn). Each draw takes a base and one construction:
///
/// - copies: 2 to 40 copies at a shift of [`SHIFTS`];
/// - two bases interleaved;
/// - a random subset (half or four fifths of the buffers), then copies;
/// - sizes scaled per buffer by 0.5 to 2, then copies.
///
/// Empty when no base fits.
pub fn draw(bases: &[Base], seed: u64, count: usize, max_buffers: usize) -> Vec<Instance> {
    let fitting: Vec<&Base> = bases
        .iter()
        .filter(|b| !b.items.is_empty() && b.items.len() <= max_buffers)
        .collect();
    if fitting.is_empty() {
        return Vec::new();
    }
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let base = fitting[rng.range(0, fitting.len() - 1)];
        let kind = rng.range(0, 3);
        let (prefix, items) = match kind {
            1 => {
                let other = fitting[rng.range(0, fitting.len() - 1)];
                if base.items.len() + other.items.len() > max_buffers {
                    continue;
                }
                out.push(Instance {
                    name: format!("{} + {} interleaved", base.name, other.name),
                    base: base.name.clone(),
                    items: interleave(&base.items, &other.items),
                });
                continue;
            }
            2 => {
                let keep = if rng.range(0, 1) == 0 { 0.5 } else { 0.8 };
                (
                    format!("{} subset{keep}", base.name),
                    subset(&base.items, keep, &mut rng),
                )
            }
            3 => (
                format!("{} sizes0.5-2", base.name),
                scale_sizes(&base.items, 0.5, 2.0, &mut rng),
            ),
            _ => (base.name.clone(), base.items.clone()),
        };
        if items.is_empty() {
            continue;
        }
        let shift = SHIFTS[rng.range(0, SHIFTS.len() - 1)];
        let wanted = rng.range(2, 40);
        let k = wanted.min(max_buffers / items.len()).max(1);
        out.push(Instance {
            name: format!("{prefix} x{k} shift{shift}"),
            base: base.name.clone(),
            items: copies(&items, k, shift),
        });
    }
    out
}

/// The instance of an allocation trace: every `alloc` line is a buffer
/// alive from its line until the `free` of its address (or the end), times
/// being line numbers. Lines are `event,addr,size,...` as in the allocator
/// suite's recorded traces (alloc/tests/data/loops); other events are
/// skipped, and so are lines that do not parse.
pub fn from_trace(csv: &str) -> Vec<Interval> {
    let mut open: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut items = Vec::new();
    let mut end = 0;
    for (t, line) in csv.lines().enumerate() {
        end = t + 1;
        let mut fields = line.split(',');
        let (Some(event), Some(addr), Some(size)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        match event {
            "alloc" => {
                let Ok(size) = size.parse::<usize>() else {
                    continue;
                };
                open.insert(addr, items.len());
                items.push(Interval {
                    lower: t,
                    upper: usize::MAX,
                    size,
                });
            }
            "free" => {
                if let Some(i) = open.remove(addr) {
                    items[i].upper = t;
                }
            }
            _ => {}
        }
    }
    for it in &mut items {
        if it.upper == usize::MAX {
            it.upper = end;
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::super::placement::lower_bound;
    use super::*;

    fn iv(lower: usize, upper: usize, size: usize) -> Interval {
        Interval { lower, upper, size }
    }

    #[test]
    fn copies_at_shift_one_do_not_overlap() {
        let one = [iv(0, 3, 5), iv(1, 4, 7)];
        let four = copies(&one, 4, 1.0);
        assert_eq!(lower_bound(&four), 12);
        assert_eq!(four[2], iv(4, 7, 5));
        // Half a span (copy k starts at 2k): at time 3 the second buffer
        // of copy 0 (7), the first of copy 1 (5) and the second of copy 1
        // (7) are alive at once: 19, more than one copy's 12.
        assert_eq!(lower_bound(&copies(&one, 4, 0.5)), 19);
    }

    #[test]
    fn interleaving_keeps_both_alive_together() {
        let a = [iv(0, 2, 1)];
        let b = [iv(0, 3, 2)];
        let both = interleave(&a, &b);
        assert_eq!(both, vec![iv(0, 6, 1), iv(0, 6, 2)]);
        assert_eq!(lower_bound(&both), 3);
    }

    #[test]
    fn trace_lines_become_lifetimes() {
        let csv = "event,addr,size,stream\nstep_begin,0,0,0\nalloc,7,64,0\nalloc,8,32,0\nfree,7,64,0\nbogus\n";
        assert_eq!(from_trace(csv), vec![iv(2, 4, 64), iv(3, 6, 32)]);
    }

    #[test]
    fn draws_are_deterministic_and_bounded() {
        let bases = [
            Base {
                name: "a".into(),
                items: vec![iv(0, 3, 5), iv(1, 4, 7), iv(2, 6, 1)],
            },
            Base {
                name: "b".into(),
                items: vec![iv(0, 1, 2), iv(0, 2, 3)],
            },
        ];
        let one = draw(&bases, 3, 40, 30);
        assert_eq!(one, draw(&bases, 3, 40, 30));
        assert_ne!(one, draw(&bases, 4, 40, 30));
        assert_eq!(one.len(), 40);
        assert!(
            one.iter()
                .all(|i| !i.items.is_empty() && i.items.len() <= 30)
        );
        assert!(draw(&bases, 3, 5, 1).is_empty());
    }
}
