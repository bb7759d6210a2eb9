//! What a recorder knows about each site: its mode, element type, the
//! shape its buffer must hold (by the site's shape rule), the phases it was
//! alive in. Its memory, while recording, is the Rust recorder's own.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::rule::SiteShape;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Rounding, Shape, ShapeRule};

/// How long a site lives, as learned or declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Life {
    /// Declared persistent: contents survive steps, never shares bytes.
    Persistent,
    /// Alive for a whole step of its mode (learned when the mode has no
    /// phases, or loaded as such).
    Step,
    /// Alive from phase `.0` to phase `.1` of its mode, inclusive.
    Span(usize, usize),
}

impl Life {
    /// The smallest lifetime covering both.
    pub fn union(self, other: Life) -> Life {
        match (self, other) {
            (Life::Persistent, _) | (_, Life::Persistent) => Life::Persistent,
            (Life::Step, _) | (_, Life::Step) => Life::Step,
            (Life::Span(a, b), Life::Span(c, d)) => Life::Span(a.min(c), b.max(d)),
        }
    }
}

/// One site: a recorded temporary of one mode, or a declared persistent
/// buffer.
#[derive(Debug)]
pub(crate) struct Site {
    pub name: Arc<str>,
    /// Its mode; `None` for a persistent buffer.
    pub mode: Option<u16>,
    pub dtype: DType,
    /// The shape the site's buffer is planned for, by the site's rule (the
    /// declared shape for persistent buffers).
    pub size: SiteShape,
    pub rounding: Option<Rounding>,
    /// `None` until the site is first requested.
    pub life: Option<Life>,
    /// Learned by recording (or loaded as learned) rather than declared.
    pub recorded: bool,
    /// Requests served for the site while recording.
    pub requests: u64,
    /// A lease of the site is live.
    pub live: bool,
}

impl Site {
    /// A temporary of mode `mode`, not yet sized.
    pub fn temp(name: &str, mode: u16, dtype: DType) -> Site {
        Site {
            name: Arc::from(name),
            mode: Some(mode),
            dtype,
            size: SiteShape::new(ShapeRule::Elements),
            rounding: None,
            life: None,
            recorded: true,
            requests: 0,
            live: false,
        }
    }

    pub fn persistent(name: &str, dtype: DType, shape: &[usize], padded: usize) -> Site {
        Site {
            mode: None,
            size: SiteShape::sized(ShapeRule::Elements, shape, padded),
            life: Some(Life::Persistent),
            recorded: false,
            ..Site::temp(name, 0, dtype)
        }
    }

    pub fn is_persistent(&self) -> bool {
        self.mode.is_none()
    }

    /// Checks that `shape` may be recorded for this site: the same element
    /// type as before and, for a per-dimension site, the same number of
    /// dimensions.
    pub fn check_compatible(&self, dtype: DType, shape: &[usize]) -> Result<()> {
        if self.dtype != dtype {
            return Err(Error::DTypeMismatch {
                buffer: self.name.to_string(),
                declared: self.dtype.name(),
                requested: dtype.name(),
            });
        }
        self.size.check_rank(&self.name, shape)
    }
}

/// All sites of a recorder, in first-seen order, with name indexes per
/// mode and for persistent buffers.
///
/// The indexes hash with FxHash: names come from the program, not from an
/// adversary, and a frozen step looks one up per request, so a hash of a
/// few nanoseconds matters more than SipHash's flooding resistance.
#[derive(Debug, Default)]
pub(crate) struct Table {
    pub sites: Vec<Site>,
    by_mode: Vec<FxHashMap<Arc<str>, u32>>,
    persistent: FxHashMap<Arc<str>, u32>,
}

impl Table {
    /// The temporary called `name` in mode `mode`. Hashes the name;
    /// allocates nothing.
    #[inline]
    pub fn find(&self, mode: u16, name: &str) -> Option<usize> {
        self.by_mode
            .get(usize::from(mode))
            .and_then(|m| m.get(name))
            .map(|&i| i as usize)
    }

    /// The persistent buffer called `name`.
    #[inline]
    pub fn find_persistent(&self, name: &str) -> Option<usize> {
        self.persistent.get(name).map(|&i| i as usize)
    }

    /// Whether any mode has a temporary called `name`.
    pub fn any_temp(&self, name: &str) -> bool {
        self.by_mode.iter().any(|m| m.contains_key(name))
    }

    /// Adds a site (its name must be new in its mode, or among persistent
    /// buffers).
    pub fn insert(&mut self, site: Site) -> Result<usize> {
        let index = u32::try_from(self.sites.len()).map_err(|_| Error::SizeOverflow {
            buffer: site.name.to_string(),
            shape: site.size.max.to_vec(),
            what: "the number of sites",
            limit: u64::from(u32::MAX),
        })?;
        let map = match site.mode {
            None => &mut self.persistent,
            Some(m) => {
                let m = usize::from(m);
                if self.by_mode.len() <= m {
                    self.by_mode.resize_with(m + 1, FxHashMap::default);
                }
                &mut self.by_mode[m]
            }
        };
        map.insert(Arc::clone(&site.name), index);
        self.sites.push(site);
        Ok(index as usize)
    }
}

/// Validates a requested shape and returns it padded by `rounding`.
pub(crate) fn padded(name: &str, shape: &[usize], rounding: Rounding) -> Result<Shape> {
    Shape::new(name, shape)?.rounded(name, rounding)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_unite() {
        assert_eq!(Life::Span(1, 1).union(Life::Span(0, 2)), Life::Span(0, 2));
        assert_eq!(Life::Span(2, 2).union(Life::Span(0, 0)), Life::Span(0, 2));
        assert_eq!(Life::Step.union(Life::Span(1, 2)), Life::Step);
        assert_eq!(Life::Persistent.union(Life::Step), Life::Persistent);
    }

    #[test]
    fn sites_are_sized_by_element_count_unless_opted_in() {
        let mut s = Site::temp("x", 0, DType::F32);
        s.size.widen(&[4, 10], 64);
        s.size.widen(&[7, 3], 112);
        s.size.widen(&[2, 12], 32);
        assert_eq!(s.size.max(), &[7, 3], "the largest padded request");
        // Any rank, by element count.
        s.check_compatible(DType::F32, &[1, 1, 1]).unwrap();
        let mut d = Site::temp("y", 0, DType::F32);
        d.size.set_rule(ShapeRule::Dims);
        d.size.widen(&[4, 10], 64);
        d.size.widen(&[7, 3], 112);
        assert_eq!(d.size.max(), &[7, 10], "the largest of each dimension");
        let e = d.check_compatible(DType::F32, &[1, 1, 1]).unwrap_err();
        assert!(e.to_string().contains("number of dimensions"), "{e}");
        let e = d.check_compatible(DType::I32, &[1, 1]).unwrap_err();
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    }

    #[test]
    fn the_indexes_find_sites_by_mode_and_name() {
        let mut t = Table::default();
        t.insert(Site::temp("a", 1, DType::F32)).unwrap();
        t.insert(Site::persistent("b", DType::U8, &[2], 16))
            .unwrap();
        t.insert(Site::temp("a", 2, DType::F32)).unwrap();
        assert_eq!(t.find(1, "a"), Some(0));
        assert_eq!(t.find(2, "a"), Some(2));
        assert_eq!(t.find(0, "a"), None);
        assert_eq!(t.find_persistent("b"), Some(1));
        assert!(t.any_temp("a") && !t.any_temp("b"));
        assert!(t.sites[1].is_persistent());
    }
}
