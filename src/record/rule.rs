//! The recorder's half of [the one shape rule](crate::ShapeRule): how a
//! site is sized from its requests (and declared bounds), and how a frozen
//! site checks a request against its planned buffer. Public so that every
//! recorder (the Rust one, and the Python package's, which records on a
//! torch device) applies the same rule with the same errors.

use crate::error::{Error, Result};
use crate::plan::PlannedBuffer;
use crate::shape::{Dims, ShapeRule, check_dims, view_elements};

/// The shape a recorded site's buffer must hold, learned by the site's
/// [`ShapeRule`]: by element count (the default), the request whose padded
/// shape has the most elements, so any later request of no more elements
/// fits whatever its dimensions; per dimension (opted in), the largest of
/// each dimension, the number of dimensions kept.
///
/// ```
/// use tensor_arena::record::SiteShape;
/// use tensor_arena::ShapeRule;
/// let mut s = SiteShape::new(ShapeRule::Elements);
/// s.widen(&[4, 10], 64); // padded to [4, 16]: 64 elements
/// s.widen(&[7, 3], 112); // [7, 16]: 112
/// s.widen(&[2, 12], 32);
/// assert_eq!(s.max(), &[7, 3]);
/// let mut d = SiteShape::new(ShapeRule::Dims);
/// d.widen(&[4, 10], 64);
/// d.widen(&[7, 3], 112);
/// assert_eq!(d.max(), &[7, 10]);
/// assert!(d.check_rank("d", &[1, 2, 3]).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteShape {
    /// Empty while nothing sized the site yet.
    pub(crate) max: Dims,
    /// Element-count sites: elements of `max` padded (the planned
    /// capacity), to compare requests by. Unused per dimension.
    pub(crate) padded: usize,
    pub(crate) rule: ShapeRule,
}

impl SiteShape {
    /// A site not yet sized, checked by `rule`.
    pub fn new(rule: ShapeRule) -> SiteShape {
        SiteShape {
            rule,
            ..SiteShape::default()
        }
    }

    /// A site sized to `shape` (whose padded shape has `padded` elements),
    /// checked by `rule`: a declared buffer, or a spec loaded from a file.
    pub fn sized(rule: ShapeRule, shape: &[usize], padded: usize) -> SiteShape {
        let mut s = SiteShape::new(rule);
        s.widen(shape, padded);
        s
    }

    /// The rule the site is sized and checked by.
    pub fn rule(&self) -> ShapeRule {
        self.rule
    }

    /// Changes the rule (before the site is sized: per-dimension limits
    /// learned from element-count maxima would not be the largest of each
    /// dimension).
    pub fn set_rule(&mut self, rule: ShapeRule) {
        self.rule = rule;
    }

    /// The shape the site's buffer is planned for; empty while unsized.
    pub fn max(&self) -> &[usize] {
        &self.max
    }

    /// Whether a request or a bound sized the site.
    pub fn is_sized(&self) -> bool {
        !self.max.is_empty()
    }

    /// Grows what the site is planned for to cover `shape`, a valid shape
    /// whose padded shape has `padded` elements, by the site's rule (check
    /// the number of dimensions first with
    /// [`check_rank`](SiteShape::check_rank)).
    pub fn widen(&mut self, shape: &[usize], padded: usize) {
        match self.rule {
            _ if self.max.is_empty() => {
                self.max = shape.iter().copied().collect();
                self.padded = padded;
            }
            ShapeRule::Elements => {
                if padded > self.padded {
                    self.max = shape.iter().copied().collect();
                    self.padded = padded;
                }
            }
            ShapeRule::Dims => {
                for (m, &d) in self.max.iter_mut().zip(shape) {
                    *m = (*m).max(d);
                }
                self.padded = 0;
            }
        }
    }

    /// Checks that `shape` may be recorded for the site `site`: any number
    /// of dimensions by element count; per dimension, the number it was
    /// first sized with.
    pub fn check_rank(&self, site: &str, shape: &[usize]) -> Result<()> {
        if self.rule == ShapeRule::Dims && !self.max.is_empty() && self.max.len() != shape.len() {
            return Err(Error::InvalidView {
                buffer: site.to_owned(),
                shape: shape.to_vec(),
                reason: "a site with per-dimension limits keeps the number of dimensions it was first sized with",
            });
        }
        Ok(())
    }
}

/// Checks a request of `shape` for a frozen site against its planned
/// buffer `planned` (planned for the site's recorded maximum, with its
/// rule), in a step of mode `mode`, and returns the view's element count:
/// the one shape rule, with the recorder's message for a request beyond
/// the plan ([`Error::ExceedsRecorded`], naming the rule and how to
/// re-plan); a view with no dimensions, too many, or a zero dimension is
/// refused as the arena refuses it.
///
/// ```
/// use tensor_arena::record::check_frozen_request;
/// use tensor_arena::{Error, Planner};
/// let mut p = Planner::new();
/// let h = p.step::<f32>("h", &[128, 64])?;
/// let plan = p.plan()?;
/// let planned = plan.buffer(h.id())?;
/// assert_eq!(check_frozen_request("default", &[64, 128], planned)?, 8192);
/// let e = check_frozen_request("default", &[129, 64], planned).unwrap_err();
/// assert!(matches!(&e, Error::ExceedsRecorded(x) if !x.per_dimension), "{e}");
/// # Ok::<(), tensor_arena::Error>(())
/// ```
#[inline]
pub fn check_frozen_request(mode: &str, shape: &[usize], planned: &PlannedBuffer) -> Result<usize> {
    let name = planned.name();
    let padded = planned.padded_shape();
    let exceeds = |per_dimension| {
        Error::ExceedsRecorded(Box::new(crate::error::ExceedsRecorded {
            site: name.to_owned(),
            mode: mode.to_owned(),
            requested: shape.to_vec(),
            recorded: planned.shape().to_vec(),
            padded: padded.to_vec(),
            capacity: planned.capacity(),
            per_dimension,
        }))
    };
    let elements = match view_elements(name, shape, planned.capacity(), padded) {
        Ok(n) => n,
        Err(Error::ViewTooLarge { .. }) => return Err(exceeds(false)),
        Err(e) => return Err(e),
    };
    if planned.shape_rule() == ShapeRule::Dims && check_dims(name, shape, padded).is_err() {
        return Err(exceeds(true));
    }
    if shape.contains(&0) {
        return Err(Error::EmptyShape {
            buffer: name.to_owned(),
            shape: shape.to_vec(),
        });
    }
    Ok(elements)
}
