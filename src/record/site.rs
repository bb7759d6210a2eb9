//! What a recorder knows about each site: its element type, the largest
//! shape asked for, the phases it was alive in and, while recording, the
//! host memory that serves it.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Dims, Rounding, Shape};

/// How long a site lives, as learned or declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Life {
    /// Declared persistent: contents survive steps, never shares bytes.
    Persistent,
    /// Alive for a whole step (learned when no phases are declared, or
    /// loaded as such).
    Step,
    /// Alive from phase `.0` to phase `.1` inclusive.
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

/// One site: a recorded temporary or a declared persistent buffer.
#[derive(Debug)]
pub(crate) struct Site {
    pub name: Arc<str>,
    pub dtype: DType,
    /// The largest shape asked for, dimension by dimension (the declared
    /// shape for persistent buffers).
    pub max: Dims,
    pub rounding: Option<Rounding>,
    pub life: Life,
    /// Learned by recording (or loaded as learned) rather than declared.
    pub recorded: bool,
    /// Requests served for the site while recording.
    pub requests: u64,
    /// Recording pool memory of the site (taken out while leased). Sized in
    /// `u64` words so that every element type is aligned.
    pub data: Vec<u64>,
    /// A lease of the site is live.
    pub live: bool,
}

impl Site {
    pub fn temp(name: &str, dtype: DType, shape: &[usize], life: Life) -> Site {
        Site {
            name: Arc::from(name),
            dtype,
            max: shape.iter().copied().collect(),
            rounding: None,
            life,
            recorded: true,
            requests: 0,
            data: Vec::new(),
            live: false,
        }
    }

    pub fn persistent(name: &str, dtype: DType, shape: &[usize]) -> Site {
        Site {
            life: Life::Persistent,
            recorded: false,
            ..Site::temp(name, dtype, shape, Life::Persistent)
        }
    }

    pub fn is_persistent(&self) -> bool {
        self.life == Life::Persistent
    }

    /// Grows the recorded maximum to cover `shape` (same rank, checked by
    /// the caller).
    pub fn widen(&mut self, shape: &[usize]) {
        for (m, &d) in self.max.iter_mut().zip(shape) {
            *m = (*m).max(d);
        }
    }

    /// Checks that `shape` may be recorded for this site: same element type
    /// and number of dimensions as before.
    pub fn check_compatible(&self, dtype: DType, shape: &[usize]) -> Result<()> {
        if self.dtype != dtype {
            return Err(Error::DTypeMismatch {
                buffer: self.name.to_string(),
                declared: self.dtype.name(),
                requested: dtype.name(),
            });
        }
        if self.max.len() != shape.len() {
            return Err(Error::InvalidView {
                buffer: self.name.to_string(),
                shape: shape.to_vec(),
                reason: "a site keeps the number of dimensions it was first requested with",
            });
        }
        Ok(())
    }
}

/// All sites of a recorder, in first-seen order, with a name index.
///
/// The index hashes with FxHash: names come from the program, not from an
/// adversary, and a frozen step looks one up per request, so a hash of a
/// few nanoseconds matters more than SipHash's flooding resistance.
#[derive(Debug, Default)]
pub(crate) struct Table {
    pub sites: Vec<Site>,
    index: FxHashMap<Arc<str>, u32>,
}

impl Table {
    /// The site called `name`. Hashes the name; allocates nothing.
    #[inline]
    pub fn find(&self, name: &str) -> Option<usize> {
        self.index.get(name).map(|&i| i as usize)
    }

    /// Adds a site (its name must be new).
    pub fn insert(&mut self, site: Site) -> Result<usize> {
        let index = u32::try_from(self.sites.len()).map_err(|_| Error::SizeOverflow {
            buffer: site.name.to_string(),
            shape: site.max.to_vec(),
            what: "the number of sites",
            limit: u64::from(u32::MAX),
        })?;
        self.index.insert(Arc::clone(&site.name), index);
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
    fn maxima_are_per_dimension_and_ranks_are_fixed() {
        let mut s = Site::temp("x", DType::F32, &[4, 10], Life::Step);
        s.widen(&[7, 3]);
        s.widen(&[2, 12]);
        assert_eq!(s.max.as_slice(), &[7, 12]);
        s.check_compatible(DType::F32, &[1, 1]).unwrap();
        let e = s.check_compatible(DType::F32, &[1, 1, 1]).unwrap_err();
        assert!(e.to_string().contains("number of dimensions"), "{e}");
        let e = s.check_compatible(DType::I32, &[1, 1]).unwrap_err();
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    }

    #[test]
    fn the_index_finds_sites_by_name() {
        let mut t = Table::default();
        t.insert(Site::temp("a", DType::F32, &[1], Life::Span(0, 0)))
            .unwrap();
        t.insert(Site::persistent("b", DType::U8, &[2])).unwrap();
        assert_eq!(t.find("b"), Some(1));
        assert_eq!(t.find("c"), None);
        assert!(t.sites[1].is_persistent());
    }
}
