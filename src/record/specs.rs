//! A set of buffer specs that stands on its own: modes and phases by name,
//! buffers with lifetimes as phase indices of their mode. A recorder
//! exports one; it is written to and read from a TOML file or Rust code,
//! and declared on a planner.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::plan::{Buffer, BufferId, BufferSpec, Lifetime, Mode, Phase, Planner};
use crate::shape::{Rounding, ShapeRule};

/// How long a buffer of a [`SpecSet`] lives; phases are indices into the
/// phases of the buffer's mode ([`SpecSet::phases`] for the default mode,
/// [`SpecMode::phases`] for a declared one).
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
    /// The shape the buffer is planned for, before rounding.
    pub shape: Vec<usize>,
    /// How long it lives.
    pub lifetime: SpecLifetime,
    /// The mode of a step-scoped buffer, by name; `None` for the default
    /// mode and for persistent buffers (every mode shares them).
    pub mode: Option<String>,
    /// The [`ShapeRule`] its views are checked by.
    pub shape_rule: ShapeRule,
    /// Rounding, if not the planner's default.
    pub rounding: Option<Rounding>,
    /// Steps it was learned from; `None` if declared by hand.
    pub recorded_steps: Option<u64>,
}

impl SpecEntry {
    /// A step-scoped buffer of the default mode, by the element-count rule,
    /// with the planner's rounding, declared by hand: set the other fields
    /// as needed.
    ///
    /// ```
    /// use tensor_arena::record::{SpecEntry, SpecLifetime};
    /// use tensor_arena::DType;
    /// let e = SpecEntry {
    ///     lifetime: SpecLifetime::Phases { first: 0, last: 0 },
    ///     mode: Some("eval".into()),
    ///     ..SpecEntry::new("x", DType::F32, &[256, 32])
    /// };
    /// assert_eq!(e.shape, [256, 32]);
    /// ```
    pub fn new(name: impl Into<String>, dtype: DType, shape: &[usize]) -> SpecEntry {
        SpecEntry {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            lifetime: SpecLifetime::Step,
            mode: None,
            shape_rule: ShapeRule::Elements,
            rounding: None,
            recorded_steps: None,
        }
    }
}

/// A declared mode of a [`SpecSet`]: its name and phases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecMode {
    /// The mode's name.
    pub name: String,
    /// Its phases, in order.
    pub phases: Vec<String>,
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
    pub(crate) modes: Vec<SpecMode>,
    pub(crate) buffers: Vec<SpecEntry>,
}

impl SpecSet {
    /// A set with these phases (of the default mode) and buffers, checked:
    /// names non-empty and unique, phase indices in range and in order,
    /// shapes valid. No modes but the default one: see
    /// [`with_modes`](SpecSet::with_modes).
    pub fn new(phases: Vec<String>, buffers: Vec<SpecEntry>) -> Result<SpecSet> {
        SpecSet::with_modes(phases, Vec::new(), buffers)
    }

    /// A set with the default mode's `phases`, declared `modes` and
    /// buffers, checked as [`new`](SpecSet::new) checks, and every
    /// buffer's mode declared.
    pub fn with_modes(
        phases: Vec<String>,
        modes: Vec<SpecMode>,
        buffers: Vec<SpecEntry>,
    ) -> Result<SpecSet> {
        let set = SpecSet {
            phases,
            modes,
            buffers,
        };
        set.validate().map_err(|reason| Error::InvalidSpecs {
            source_name: "SpecSet::new".to_owned(),
            reason,
        })?;
        Ok(set)
    }

    /// Phase names of the default mode, in order.
    pub fn phases(&self) -> &[String] {
        &self.phases
    }

    /// The declared modes (besides the default one), in order.
    pub fn modes(&self) -> &[SpecMode] {
        &self.modes
    }

    /// The phases of the mode called `mode` (`None`: the default mode), if
    /// it exists.
    pub fn phases_of(&self, mode: Option<&str>) -> Option<&[String]> {
        match mode {
            None => Some(&self.phases),
            Some(name) => self
                .modes
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.phases.as_slice()),
        }
    }

    /// Buffers, in declaration order.
    pub fn buffers(&self) -> &[SpecEntry] {
        &self.buffers
    }

    /// The buffer called `name` (the first of that name, whatever its
    /// mode; see [`get_in`](SpecSet::get_in)).
    pub fn get(&self, name: &str) -> Option<&SpecEntry> {
        self.buffers.iter().find(|b| b.name == name)
    }

    /// The buffer called `name` in the mode called `mode` (`None`: the
    /// default mode), or the persistent buffer of that name.
    pub fn get_in(&self, mode: Option<&str>, name: &str) -> Option<&SpecEntry> {
        self.buffers.iter().find(|b| {
            b.name == name && (b.mode.as_deref() == mode || b.lifetime == SpecLifetime::Persistent)
        })
    }

    /// The lifetime as text: `persistent`, `step`, a phase name, or
    /// `first..last`, with phases of the default mode (see
    /// [`entry_lifetime_label`](SpecSet::entry_lifetime_label)).
    pub fn lifetime_label(&self, lifetime: SpecLifetime) -> String {
        self.label_in(&self.phases, lifetime)
    }

    /// The lifetime of `entry` as text, with phases of its own mode.
    pub fn entry_lifetime_label(&self, entry: &SpecEntry) -> String {
        let phases = self.phases_of(entry.mode.as_deref()).unwrap_or(&[]);
        self.label_in(phases, entry.lifetime)
    }

    fn label_in(&self, phases: &[String], lifetime: SpecLifetime) -> String {
        let name = |i: usize| phases.get(i).map_or("?", String::as_str);
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
        use std::collections::HashSet;
        // Names of each mode (phases and buffers), the default mode first,
        // and of persistent buffers, which every mode shares.
        let mut names: Vec<HashSet<&str>> = vec![HashSet::new(); self.modes.len() + 1];
        let mut persistent: HashSet<&str> = HashSet::new();
        let mut mode_names: HashSet<&str> = HashSet::from([crate::plan::DEFAULT_MODE]);
        for m in &self.modes {
            if m.name.is_empty() {
                return Err((None, "a mode has an empty name".to_owned()));
            }
            if !mode_names.insert(m.name.as_str()) {
                return Err((None, format!("the mode '{}' is declared twice", m.name)));
            }
        }
        let phase_lists = std::iter::once(&self.phases).chain(self.modes.iter().map(|m| &m.phases));
        for (k, phases) in phase_lists.enumerate() {
            for p in phases {
                if p.is_empty() {
                    return Err((None, "a phase has an empty name".to_owned()));
                }
                if !names[k].insert(p.as_str()) {
                    return Err((None, format!("the name '{p}' is used twice")));
                }
            }
        }
        for (i, b) in self.buffers.iter().enumerate() {
            let at = |reason: String| (Some(i), reason);
            if b.name.is_empty() {
                return Err(at("a buffer has an empty name".to_owned()));
            }
            let mode = match b.mode.as_deref() {
                None => 0,
                Some(name) => match self.modes.iter().position(|m| m.name == name) {
                    Some(k) => k + 1,
                    None => {
                        return Err(at(format!(
                            "buffer '{}': mode '{name}' is not declared",
                            b.name
                        )));
                    }
                },
            };
            let taken = if b.lifetime == SpecLifetime::Persistent {
                b.mode.is_some()
                    || !persistent.insert(b.name.as_str())
                    || names.iter().any(|n| n.contains(b.name.as_str()))
            } else {
                persistent.contains(b.name.as_str()) || !names[mode].insert(b.name.as_str())
            };
            if taken && b.lifetime == SpecLifetime::Persistent && b.mode.is_some() {
                return Err(at(format!(
                    "buffer '{}': a persistent buffer belongs to every mode, not to mode '{}'",
                    b.name,
                    b.mode.as_deref().unwrap_or_default()
                )));
            }
            if taken {
                return Err(at(format!("the name '{}' is used twice", b.name)));
            }
            crate::shape::Shape::new(&b.name, &b.shape).map_err(|e| at(e.to_string()))?;
            let phases = if mode == 0 {
                &self.phases
            } else {
                &self.modes[mode - 1].phases
            };
            if let SpecLifetime::Phases { first, last } = b.lifetime {
                if last >= phases.len() {
                    return Err(at(format!(
                        "buffer '{}': phase index {last} is out of range ({} phases)",
                        b.name,
                        phases.len()
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

    /// Declares the modes and phases, then every buffer, on `planner`
    /// (which must not already use any of their names), and returns the
    /// handles by name. Buffers keep their order, so the plan equals the
    /// plan of the same declarations written by hand.
    pub fn declare_on(&self, planner: &mut Planner) -> Result<Declared> {
        self.validate().map_err(|reason| Error::InvalidSpecs {
            source_name: "SpecSet::declare_on".to_owned(),
            reason,
        })?;
        let mut modes = vec![(String::new(), planner.default_mode())];
        for m in &self.modes {
            modes.push((m.name.clone(), planner.mode(&m.name)?));
        }
        let mut phases: Vec<Vec<(String, Phase)>> = Vec::with_capacity(modes.len());
        let lists = std::iter::once(&self.phases).chain(self.modes.iter().map(|m| &m.phases));
        for (list, &(_, mode)) in lists.zip(&modes) {
            phases.push(
                list.iter()
                    .map(|name| Ok((name.clone(), planner.phase_in(mode, name)?)))
                    .collect::<Result<Vec<_>>>()?,
            );
        }
        let mut ids = Vec::with_capacity(self.buffers.len());
        for b in &self.buffers {
            // Declared: checked by validate above.
            let k = b
                .mode
                .as_deref()
                .and_then(|name| self.modes.iter().position(|m| m.name == name))
                .map_or(0, |k| k + 1);
            let lifetime = match b.lifetime {
                SpecLifetime::Persistent => Lifetime::Persistent,
                SpecLifetime::Step => Lifetime::Step,
                // In range: checked by validate above.
                SpecLifetime::Phases { first, last } => {
                    Lifetime::span(phases[k][first].1, phases[k][last].1)
                }
            };
            let mut spec = BufferSpec::new(b.name.clone(), b.dtype, &b.shape)
                .lifetime(lifetime)
                .mode(modes[k].1)
                .shape_rule(b.shape_rule);
            if let Some(r) = b.rounding {
                spec = spec.rounding(r);
            }
            if let Some(steps) = b.recorded_steps {
                spec = spec.recorded(steps);
            }
            let owner = match b.lifetime {
                SpecLifetime::Persistent => Owner::All,
                _ => Owner::Mode(b.mode.clone()),
            };
            ids.push((b.name.clone(), owner, planner.declare_dyn(spec)?));
        }
        let modes = modes.into_iter().skip(1).collect();
        let phases = phases
            .into_iter()
            .zip(std::iter::once(None).chain(self.modes.iter().map(|m| Some(m.name.clone()))))
            .flat_map(|(list, mode)| {
                list.into_iter()
                    .map(move |(name, p)| (mode.clone(), name, p))
            })
            .collect();
        Ok(Declared { modes, phases, ids })
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
        let timeline = if self.modes.is_empty() {
            format!("phases: {phases}")
        } else {
            let arrows = |p: &[String]| match p.is_empty() {
                true => "no phases".to_owned(),
                false => p.join(" -> "),
            };
            let mut modes: Vec<String> = self
                .modes
                .iter()
                .map(|m| format!("{} ({})", m.name, arrows(&m.phases)))
                .collect();
            if !self.phases.is_empty() {
                modes.insert(0, format!("default ({phases})"));
            }
            format!("modes: {}", modes.join(", "))
        };
        writeln!(
            f,
            "specs: {} buffers, {learned} learned by recording; {timeline}",
            self.buffers.len(),
        )?;
        let header = ["buffer", "dtype", "shape", "lifetime", "origin"];
        let rows: Vec<[String; 5]> = self
            .buffers
            .iter()
            .map(|b| {
                let lifetime = self.entry_lifetime_label(b);
                [
                    b.name.clone(),
                    b.dtype.name().to_owned(),
                    format!("{:?}", b.shape),
                    match (&b.mode, b.shape_rule) {
                        (Some(m), ShapeRule::Elements) => format!("{m}: {lifetime}"),
                        (Some(m), ShapeRule::Dims) => format!("{m}: {lifetime}, per-dimension"),
                        (None, ShapeRule::Elements) => lifetime,
                        (None, ShapeRule::Dims) => format!("{lifetime}, per-dimension"),
                    },
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
    modes: Vec<(String, Mode)>,
    /// (mode name, phase name, handle); `None`: the default mode.
    phases: Vec<(Option<String>, String, Phase)>,
    ids: Vec<(String, Owner, BufferId)>,
}

/// Which modes a declared buffer belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    /// Persistent: every mode.
    All,
    /// One mode, by name (`None`: the default mode).
    Mode(Option<String>),
}

impl Declared {
    /// The declared mode called `name`.
    pub fn mode(&self, name: &str) -> Result<Mode> {
        self.modes
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, m)| m)
            .ok_or_else(|| Error::UnknownName {
                name: name.to_owned(),
                kind: "mode",
                context: "the declared specs",
            })
    }

    /// The phase called `name` of the default mode.
    pub fn phase(&self, name: &str) -> Result<Phase> {
        self.phase_in(None, name)
    }

    /// The phase called `name` of the mode called `mode` (`None`: the
    /// default mode).
    pub fn phase_in(&self, mode: Option<&str>, name: &str) -> Result<Phase> {
        self.phases
            .iter()
            .find(|(m, n, _)| n == name && m.as_deref() == mode)
            .map(|&(_, _, p)| p)
            .ok_or_else(|| Error::UnknownName {
                name: name.to_owned(),
                kind: "phase",
                context: "the declared specs",
            })
    }

    /// The untyped handle of the buffer called `name` in the default mode,
    /// or of the persistent buffer of that name.
    pub fn id(&self, name: &str) -> Result<BufferId> {
        self.id_in(None, name)
    }

    /// The untyped handle of the buffer called `name` in the mode called
    /// `mode` (`None`: the default mode), or of the persistent buffer of
    /// that name.
    pub fn id_in(&self, mode: Option<&str>, name: &str) -> Result<BufferId> {
        self.ids
            .iter()
            .find(|(n, owner, _)| {
                n == name
                    && match owner {
                        Owner::All => true,
                        Owner::Mode(m) => m.as_deref() == mode,
                    }
            })
            .map(|&(_, _, id)| id)
            .ok_or_else(|| Error::UnknownName {
                name: name.to_owned(),
                kind: "buffer",
                context: "the declared specs",
            })
    }

    /// The typed handle of the buffer called `name` (default mode or
    /// persistent); fails if `T` is not its element type.
    pub fn buffer<T: Element>(&self, name: &str) -> Result<Buffer<T>> {
        self.buffer_in(None, name)
    }

    /// The typed handle of the buffer called `name` in the mode called
    /// `mode` (`None`: the default mode), or of the persistent buffer of
    /// that name.
    pub fn buffer_in<T: Element>(&self, mode: Option<&str>, name: &str) -> Result<Buffer<T>> {
        let id = self.id_in(mode, name)?;
        id.typed::<T>().ok_or_else(|| Error::DTypeMismatch {
            buffer: name.to_owned(),
            declared: id.dtype().name(),
            requested: T::DTYPE.name(),
        })
    }

    /// Every buffer handle, in the set's order.
    pub fn ids(&self) -> impl ExactSizeIterator<Item = BufferId> + '_ {
        self.ids.iter().map(|&(_, _, id)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, lifetime: SpecLifetime) -> SpecEntry {
        SpecEntry {
            lifetime,
            recorded_steps: Some(3),
            ..SpecEntry::new(name, DType::F32, &[4, 4])
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

    #[test]
    fn modes_scope_names_and_phases() {
        let modes = vec![SpecMode {
            name: "eval".to_owned(),
            phases: vec!["f".to_owned()],
        }];
        let in_eval = |name: &str| SpecEntry {
            mode: Some("eval".to_owned()),
            ..entry(name, SpecLifetime::Phases { first: 0, last: 0 })
        };
        let set = SpecSet::with_modes(
            vec!["f".to_owned(), "b".to_owned()],
            modes.clone(),
            vec![
                entry("x", SpecLifetime::Phases { first: 0, last: 1 }),
                in_eval("x"),
                entry("w", SpecLifetime::Persistent),
            ],
        )
        .unwrap();
        assert_eq!(set.entry_lifetime_label(&set.buffers()[1]), "f");
        let mut p = Planner::new();
        let d = set.declare_on(&mut p).unwrap();
        let eval = d.mode("eval").unwrap();
        assert_eq!(d.phase_in(Some("eval"), "f").unwrap().mode(), eval);
        assert_ne!(d.id_in(Some("eval"), "x").unwrap(), d.id("x").unwrap());
        assert_eq!(d.id_in(Some("eval"), "w").unwrap(), d.id("w").unwrap());
        let plan = p.plan().unwrap();
        assert_eq!(plan.modes().len(), 2);
        let text = set.to_string();
        assert!(text.contains("modes: default (f -> b), eval (f)"), "{text}");
        assert!(text.contains("eval: f"), "{text}");
        for (buffers, needle) in [
            (vec![in_eval("x"), in_eval("x")], "used twice"),
            (
                vec![SpecEntry {
                    mode: Some("train".to_owned()),
                    ..entry("y", SpecLifetime::Step)
                }],
                "not declared",
            ),
            (
                vec![SpecEntry {
                    mode: Some("eval".to_owned()),
                    ..entry("w", SpecLifetime::Persistent)
                }],
                "belongs to every mode",
            ),
            (
                vec![entry("w", SpecLifetime::Persistent), in_eval("w")],
                "used twice",
            ),
            (
                vec![SpecEntry {
                    mode: Some("eval".to_owned()),
                    ..entry("y", SpecLifetime::Phases { first: 0, last: 1 })
                }],
                "out of range",
            ),
        ] {
            let e = SpecSet::with_modes(vec!["f".to_owned()], modes.clone(), buffers).unwrap_err();
            assert!(e.to_string().contains(needle), "{needle}: {e}");
        }
    }
}
