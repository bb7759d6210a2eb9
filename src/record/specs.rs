//! A set of buffer specs that stands on its own: phases by name, buffers
//! with lifetimes as phase indices. A recorder exports one; it is written
//! to and read from a TOML file or Rust code, and declared on a planner.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::plan::{Buffer, BufferId, BufferSpec, Lifetime, Phase, Planner};
use crate::shape::Rounding;

/// How long a buffer of a [`SpecSet`] lives; phases are indices into
/// [`SpecSet::phases`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecLifetime {
    /// The whole run.
    Persistent,
    /// A whole step.
    Step,
    /// Phases `first..=last`.
    Phases {
        /// Index of the first phase.
        first: usize,
        /// Index of the last phase.
        last: usize,
    },
}

/// One buffer of a [`SpecSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecEntry {
    /// The buffer (site) name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Largest shape, before rounding.
    pub shape: Vec<usize>,
    /// How long it lives.
    pub lifetime: SpecLifetime,
    /// Rounding, if not the planner's default.
    pub rounding: Option<Rounding>,
    /// Steps it was learned from; `None` if declared by hand.
    pub recorded_steps: Option<u64>,
}

/// Buffer specs independent of any planner: what a
/// [`Recorder`](super::Recorder) learned, ready to be saved as TOML
/// ([`to_toml`](SpecSet::to_toml), [`save`](SpecSet::save)) or Rust code
/// ([`to_rust`](SpecSet::to_rust)), loaded back
/// ([`from_toml`](SpecSet::from_toml), [`load`](SpecSet::load)), and
/// declared on a [`Planner`] at startup ([`declare_on`](SpecSet::declare_on))
/// so that production runs need no recording pass.
///
/// ```
/// use tensor_arena::{Planner, record::SpecSet};
/// let specs = SpecSet::from_toml(r#"
///     version = 1
///     phases = ["forward", "backward"]
///
///     [[buffer]]
///     name = "h"
///     dtype = "f32"
///     shape = [64, 100]
///     lifetime = ["forward", "backward"]
///     recorded_steps = 8
/// "#)?;
/// let mut planner = Planner::new();
/// let declared = specs.declare_on(&mut planner)?;
/// let h = declared.buffer::<f32>("h")?;
/// let plan = planner.plan()?;
/// assert_eq!(plan.buffer(h.id())?.padded_shape().dims(), &[64, 112]);
/// assert_eq!(plan.buffer(h.id())?.recorded_steps(), Some(8));
/// # Ok::<(), tensor_arena::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecSet {
    pub(crate) phases: Vec<String>,
    pub(crate) buffers: Vec<SpecEntry>,
}

impl SpecSet {
    /// A set with these phases and buffers, checked: names non-empty and
    /// unique, phase indices in range and in order, shapes valid.
    pub fn new(phases: Vec<String>, buffers: Vec<SpecEntry>) -> Result<SpecSet> {
        let set = SpecSet { phases, buffers };
        set.validate().map_err(|reason| Error::InvalidSpecs {
            source_name: "SpecSet::new".to_owned(),
            reason,
        })?;
        Ok(set)
    }

    /// Phase names, in order.
    pub fn phases(&self) -> &[String] {
        &self.phases
    }

    /// Buffers, in declaration order.
    pub fn buffers(&self) -> &[SpecEntry] {
        &self.buffers
    }

    /// The buffer called `name`.
    pub fn get(&self, name: &str) -> Option<&SpecEntry> {
        self.buffers.iter().find(|b| b.name == name)
    }

    /// The lifetime as text: `persistent`, `step`, a phase name, or
    /// `first..last`.
    pub fn lifetime_label(&self, lifetime: SpecLifetime) -> String {
        let name = |i: usize| self.phases.get(i).map_or("?", String::as_str);
        match lifetime {
            SpecLifetime::Persistent => "persistent".to_owned(),
            SpecLifetime::Step => "step".to_owned(),
            SpecLifetime::Phases { first, last } if first == last => name(first).to_owned(),
            SpecLifetime::Phases { first, last } => format!("{}..{}", name(first), name(last)),
        }
    }

    /// Checks the set; the reason names the buffer or phase at fault.
    pub(crate) fn validate(&self) -> std::result::Result<(), String> {
        self.check().map_err(|(_, reason)| reason)
    }

    /// As [`validate`](SpecSet::validate), with the index of the buffer at
    /// fault where one is.
    pub(crate) fn check(&self) -> std::result::Result<(), (Option<usize>, String)> {
        let mut names = std::collections::HashSet::new();
        for p in &self.phases {
            if p.is_empty() {
                return Err((None, "a phase has an empty name".to_owned()));
            }
            if !names.insert(p.as_str()) {
                return Err((None, format!("the name '{p}' is used twice")));
            }
        }
        for (i, b) in self.buffers.iter().enumerate() {
            let at = |reason: String| (Some(i), reason);
            if b.name.is_empty() {
                return Err(at("a buffer has an empty name".to_owned()));
            }
            if !names.insert(b.name.as_str()) {
                return Err(at(format!("the name '{}' is used twice", b.name)));
            }
            crate::shape::Shape::new(&b.name, &b.shape).map_err(|e| at(e.to_string()))?;
            if let SpecLifetime::Phases { first, last } = b.lifetime {
                if last >= self.phases.len() {
                    return Err(at(format!(
                        "buffer '{}': phase index {last} is out of range ({} phases)",
                        b.name,
                        self.phases.len()
                    )));
                }
                if first > last {
                    return Err(at(format!(
                        "buffer '{}': its first phase comes after its last",
                        b.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// Declares the phases, then every buffer, on `planner` (which must not
    /// already use any of their names), and returns the handles by name.
    /// Buffers keep their order, so the plan equals the plan of the same
    /// declarations written by hand.
    pub fn declare_on(&self, planner: &mut Planner) -> Result<Declared> {
        self.validate().map_err(|reason| Error::InvalidSpecs {
            source_name: "SpecSet::declare_on".to_owned(),
            reason,
        })?;
        let phases = self
            .phases
            .iter()
            .map(|name| Ok((name.clone(), planner.phase(name)?)))
            .collect::<Result<Vec<(String, Phase)>>>()?;
        let mut ids = Vec::with_capacity(self.buffers.len());
        for b in &self.buffers {
            let lifetime = match b.lifetime {
                SpecLifetime::Persistent => Lifetime::Persistent,
                SpecLifetime::Step => Lifetime::Step,
                // In range: checked by validate above.
                SpecLifetime::Phases { first, last } => {
                    Lifetime::span(phases[first].1, phases[last].1)
                }
            };
            let mut spec = BufferSpec::new(b.name.clone(), b.dtype, &b.shape).lifetime(lifetime);
            if let Some(r) = b.rounding {
                spec = spec.rounding(r);
            }
            if let Some(steps) = b.recorded_steps {
                spec = spec.recorded(steps);
            }
            ids.push((b.name.clone(), planner.declare_dyn(spec)?));
        }
        Ok(Declared { phases, ids })
    }
}

impl std::fmt::Display for SpecSet {
    /// A table, one line per buffer: name, element type, largest shape,
    /// lifetime, and whether it was learned (over how many steps) or
    /// declared.
    ///
    /// ```text
    /// specs: 3 buffers, 2 learned by recording; phases: forward -> backward
    /// buffer  dtype  shape      lifetime           origin
    /// w       f32    [64]       persistent         declared
    /// h       f32    [30, 64]   forward..backward  recorded, 2 steps
    /// g       f32    [30, 64]   backward           recorded, 2 steps
    /// ```
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let learned = self
            .buffers
            .iter()
            .filter(|b| b.recorded_steps.is_some())
            .count();
        let phases = if self.phases.is_empty() {
            "none declared".to_owned()
        } else {
            self.phases.join(" -> ")
        };
        writeln!(
            f,
            "specs: {} buffers, {learned} learned by recording; phases: {phases}",
            self.buffers.len()
        )?;
        let header = ["buffer", "dtype", "shape", "lifetime", "origin"];
        let rows: Vec<[String; 5]> = self
            .buffers
            .iter()
            .map(|b| {
                [
                    b.name.clone(),
                    b.dtype.name().to_owned(),
                    format!("{:?}", b.shape),
                    self.lifetime_label(b.lifetime),
                    match b.recorded_steps {
                        Some(1) => "recorded, 1 step".to_owned(),
                        Some(n) => format!("recorded, {n} steps"),
                        None => "declared".to_owned(),
                    },
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let line = |f: &mut std::fmt::Formatter<'_>, cells: [&str; 5]| {
            for (cell, w) in cells.iter().zip(widths).take(4) {
                write!(f, "{cell:<w$}  ")?;
            }
            writeln!(f, "{}", cells[4])
        };
        line(f, header)?;
        for row in &rows {
            line(f, row.each_ref().map(String::as_str))?;
        }
        Ok(())
    }
}

/// Handles of a [`SpecSet`] declared on a planner, found by name (once, at
/// startup: the lookups compare strings).
#[derive(Debug, Clone)]
pub struct Declared {
    phases: Vec<(String, Phase)>,
    ids: Vec<(String, BufferId)>,
}

impl Declared {
    /// The phase called `name`.
    pub fn phase(&self, name: &str) -> Result<Phase> {
        self.phases
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, p)| p)
            .ok_or_else(|| Error::UnknownName {
                name: name.to_owned(),
                kind: "phase",
                context: "the declared specs",
            })
    }

    /// The untyped handle of the buffer called `name`.
    pub fn id(&self, name: &str) -> Result<BufferId> {
        self.ids
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, id)| id)
            .ok_or_else(|| Error::UnknownName {
                name: name.to_owned(),
                kind: "buffer",
                context: "the declared specs",
            })
    }

    /// The typed handle of the buffer called `name`; fails if `T` is not
    /// its element type.
    pub fn buffer<T: Element>(&self, name: &str) -> Result<Buffer<T>> {
        let id = self.id(name)?;
        id.typed::<T>().ok_or_else(|| Error::DTypeMismatch {
            buffer: name.to_owned(),
            declared: id.dtype().name(),
            requested: T::DTYPE.name(),
        })
    }

    /// Every buffer handle, in the set's order.
    pub fn ids(&self) -> impl ExactSizeIterator<Item = BufferId> + '_ {
        self.ids.iter().map(|&(_, id)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, lifetime: SpecLifetime) -> SpecEntry {
        SpecEntry {
            name: name.to_owned(),
            dtype: DType::F32,
            shape: vec![4, 4],
            lifetime,
            rounding: None,
            recorded_steps: Some(3),
        }
    }

    #[test]
    fn new_checks_names_and_phases() {
        let phases = vec!["a".to_owned(), "b".to_owned()];
        SpecSet::new(
            phases.clone(),
            vec![entry("x", SpecLifetime::Phases { first: 0, last: 1 })],
        )
        .unwrap();
        for (buffers, needle) in [
            (
                vec![entry("x", SpecLifetime::Phases { first: 0, last: 2 })],
                "out of range",
            ),
            (
                vec![entry("x", SpecLifetime::Phases { first: 1, last: 0 })],
                "first phase comes after",
            ),
            (
                vec![
                    entry("x", SpecLifetime::Step),
                    entry("x", SpecLifetime::Step),
                ],
                "used twice",
            ),
            (vec![entry("a", SpecLifetime::Step)], "used twice"),
            (vec![entry("", SpecLifetime::Step)], "empty name"),
        ] {
            let e = SpecSet::new(phases.clone(), buffers).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
        }
        let mut bad = entry("z", SpecLifetime::Step);
        bad.shape = vec![3, 0];
        let e = SpecSet::new(phases, vec![bad]).unwrap_err();
        assert!(e.to_string().contains("no elements"), "{e}");
    }

    #[test]
    fn declared_handles_are_found_by_name() {
        let set = SpecSet::new(
            vec!["f".to_owned()],
            vec![
                entry("x", SpecLifetime::Phases { first: 0, last: 0 }),
                entry("w", SpecLifetime::Persistent),
            ],
        )
        .unwrap();
        let mut p = Planner::new();
        let d = set.declare_on(&mut p).unwrap();
        assert_eq!(d.phase("f").unwrap().index(), 0);
        assert_eq!(d.buffer::<f32>("w").unwrap().id().index(), 1);
        assert!(matches!(
            d.buffer::<i32>("w"),
            Err(Error::DTypeMismatch { .. })
        ));
        let e = d.id("nope").unwrap_err();
        assert!(e.to_string().contains("no buffer named 'nope'"), "{e}");
        assert!(d.phase("g").is_err());
        assert_eq!(d.ids().count(), 2);
        assert_eq!(set.lifetime_label(set.buffers()[0].lifetime), "f");
        let table = set.to_string();
        assert!(table.starts_with("specs: 2 buffers, 2 learned by recording; phases: f\n"));
        assert!(
            table.lines().nth(1).unwrap().starts_with("buffer  dtype"),
            "{table}"
        );
        assert!(
            table.contains("x       f32    [4, 4]  f           recorded, 3 steps"),
            "{table}"
        );
        assert!(
            table.contains("w       f32    [4, 4]  persistent  recorded, 3 steps"),
            "{table}"
        );
        // Declaring twice on one planner collides on names.
        assert!(matches!(
            set.declare_on(&mut p),
            Err(Error::DuplicateName { .. })
        ));
    }
}
