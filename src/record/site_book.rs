//! A recorder's bookkeeping without its memory: the site table, the modes
//! and their phases, the open step's mode and phase, and what each site
//! learned (element type, shape by its rule, phase span, bounds), exported
//! as a [`SpecSet`] and merged from one. The Rust [`Recorder`] keeps its
//! host pools beside it; the Python package records on a torch device and
//! uses it alone, so both learn the same specs with the same errors.
//!
//! [`Recorder`]: super::Recorder

use std::cell::{Cell, Ref, RefCell};

use super::rule::check_frozen_request;
use super::site::{self, Life, Site, Table};
use super::specs::{SpecEntry, SpecLifetime, SpecMode, SpecSet};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::plan::{DEFAULT_MODE, PlannedBuffer, new_mode_index};
use crate::shape::{Dims, Rounding, Shape, ShapeRule};

/// A mode of the recorder: its name and phases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModeInfo {
    pub name: String,
    pub phases: Vec<String>,
}

/// What a request was granted: the site's index, the request's shape after
/// rounding (the capacity it needs) and the site's shape rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// The site's index, in first-seen order.
    pub index: usize,
    /// The requested shape, padded by the site's rounding.
    pub padded: Shape,
    /// The rule the site is sized and checked by.
    pub rule: ShapeRule,
}

/// One site as a [`SiteBook`] knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteInfo {
    /// The site's name.
    pub name: String,
    /// Its mode's index; `None` for a persistent buffer.
    pub mode: Option<u16>,
    /// Its element type.
    pub dtype: DType,
    /// The shape its buffer is planned for (empty while unsized).
    pub shape: Vec<usize>,
    /// The rule it is sized and checked by.
    pub rule: ShapeRule,
    /// Its rounding, if not the book's default.
    pub rounding: Option<Rounding>,
}

impl SiteInfo {
    /// Whether a request, a bound or a declaration sized it (only sized
    /// sites are planned).
    pub fn is_sized(&self) -> bool {
        !self.shape.is_empty()
    }
}

/// The bookkeeping of a recorder, without memory: which sites were
/// requested in which mode, with what element type, what shape their
/// buffer must hold (by the site's [`ShapeRule`], see
/// [`SiteShape`](super::SiteShape)) and what phase span, united over steps.
///
/// Declarations (modes, phases, persistent buffers, bounds, per-dimension
/// opt-ins, [`preload`](SiteBook::preload)) take `&mut self`; a step's
/// requests, releases and phase moves take `&self`, so that leases handed
/// out during a step can reach the book through a shared borrow. A
/// [`freeze`](SiteBook::freeze)d book refuses new declarations until
/// [`rerecord`](SiteBook::rerecord).
///
/// ```
/// use tensor_arena::record::{SiteBook, SpecLifetime};
/// use tensor_arena::{DType, Rounding};
/// let mut book = SiteBook::new(Rounding::Inner16);
/// let fwd = book.phase(0, "forward")?;
/// let bwd = book.phase(0, "backward")?;
/// for batch in [32, 17] {
///     book.begin_step(0);
///     let h = book.request("h", DType::F32, &[batch, 100], |_, _| Ok(()))?;
///     book.enter(0, bwd)?;
///     book.release(h.index);
///     let g = book.request("g", DType::F32, &[batch, 100], |_, _| Ok(()))?;
///     assert_eq!(g.padded.dims(), &[batch, 112]);
///     book.end_step();
/// }
/// let specs = book.specs();
/// let h = specs.get("h").expect("recorded");
/// assert_eq!(h.shape, vec![32, 100]);
/// assert_eq!(h.lifetime, SpecLifetime::Phases { first: fwd, last: bwd });
/// assert_eq!(h.recorded_steps, Some(2));
/// // A fresh book learns the same from the spec set.
/// let mut again = SiteBook::new(Rounding::Inner16);
/// again.phase(0, "forward")?;
/// again.phase(0, "backward")?;
/// again.preload(&specs, "example")?;
/// assert_eq!(again.specs(), specs);
/// # Ok::<(), tensor_arena::Error>(())
/// ```
#[derive(Debug)]
pub struct SiteBook {
    /// Mode 0 is the default mode.
    modes: Vec<ModeInfo>,
    table: RefCell<Table>,
    /// Mode of the open recording step.
    mode: Cell<u16>,
    /// Phase of the open recording step (an index into its mode's phases).
    phase: Cell<usize>,
    rounding: Rounding,
    recorded_steps: u64,
    /// The most steps any preloaded spec set was learned from.
    imported_steps: u64,
    frozen: bool,
}

impl SiteBook {
    /// An empty book whose sites round by `rounding` unless a loaded spec
    /// says otherwise.
    pub fn new(rounding: Rounding) -> SiteBook {
        SiteBook {
            modes: vec![ModeInfo {
                name: DEFAULT_MODE.to_owned(),
                phases: Vec::new(),
            }],
            table: RefCell::new(Table::default()),
            mode: Cell::new(0),
            phase: Cell::new(0),
            rounding,
            recorded_steps: 0,
            imported_steps: 0,
            frozen: false,
        }
    }

    /// The default rounding.
    pub fn rounding(&self) -> Rounding {
        self.rounding
    }

    pub(crate) fn table(&self) -> Ref<'_, Table> {
        self.table.borrow()
    }

    pub(crate) fn table_mut(&mut self) -> &mut Table {
        self.table.get_mut()
    }

    /// Refuses declarations once frozen: modes, phases and sites belong to
    /// the plan.
    fn check_not_frozen(&self, name: &str) -> Result<()> {
        if self.frozen {
            return Err(Error::InvalidSpecs {
                source_name: "Recorder".to_owned(),
                reason: format!(
                    "'{name}': the recorder is frozen; declare modes, phases, persistent buffers and bounds before freezing (or call rerecord() first)"
                ),
            });
        }
        Ok(())
    }

    /// Marks the book frozen: a plan was made of its specs, and modes,
    /// phases and sites cannot change while it holds.
    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    /// Back to recording; what was learned is kept.
    pub fn rerecord(&mut self) {
        self.frozen = false;
    }

    /// Whether [`freeze`](SiteBook::freeze) holds.
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Declares a mode; returns its index (the default mode is 0).
    pub fn mode(&mut self, name: &str) -> Result<u16> {
        let taken = self.modes.iter().any(|m| m.name == name);
        let index = new_mode_index(name, taken, self.modes.len())?;
        self.check_not_frozen(name)?;
        self.modes.push(ModeInfo {
            name: name.to_owned(),
            phases: Vec::new(),
        });
        Ok(index)
    }

    /// Mode `index`, if declared; else [`Error::ForeignMode`].
    pub fn mode_index(&self, index: usize) -> Result<u16> {
        match u16::try_from(index) {
            Ok(m) if index < self.modes.len() => Ok(m),
            _ => Err(Error::ForeignMode {
                index,
                owner: "recorder",
            }),
        }
    }

    /// Number of modes, the default one included.
    pub fn mode_count(&self) -> usize {
        self.modes.len()
    }

    /// Mode names, the default mode first.
    pub fn mode_names(&self) -> impl Iterator<Item = &str> {
        self.modes.iter().map(|m| m.name.as_str())
    }

    /// The name of mode `mode`.
    pub fn mode_name(&self, mode: u16) -> &str {
        self.modes
            .get(usize::from(mode))
            .map_or(DEFAULT_MODE, |m| m.name.as_str())
    }

    /// The phases of mode `mode`, in order (empty for an unknown mode).
    pub fn phases(&self, mode: u16) -> &[String] {
        self.modes
            .get(usize::from(mode))
            .map_or(&[], |m| m.phases.as_slice())
    }

    /// Declares the next phase of mode `mode`; returns its index in the
    /// mode. A phase name may not be a site of the mode or a persistent
    /// buffer.
    pub fn phase(&mut self, mode: u16, name: &str) -> Result<usize> {
        let m = self.mode_index(usize::from(mode))?;
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        let table = self.table.get_mut();
        if self.modes[usize::from(m)].phases.iter().any(|p| p == name)
            || table.find(m, name).is_some()
            || table.find_persistent(name).is_some()
        {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        self.check_not_frozen(name)?;
        let phases = &mut self.modes[usize::from(m)].phases;
        if u16::try_from(phases.len()).is_err() {
            return Err(Error::SizeOverflow {
                buffer: name.to_owned(),
                shape: Vec::new(),
                what: "the number of phases",
                limit: u64::from(u16::MAX),
            });
        }
        phases.push(name.to_owned());
        Ok(phases.len() - 1)
    }

    /// Declares a persistent buffer; returns its site index (the same index
    /// for the same declaration again).
    pub fn persistent(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<usize> {
        let table = self.table.get_mut();
        if let Some(index) = table.find_persistent(name) {
            let site = &table.sites[index];
            if site.dtype == dtype && site.size.max() == shape {
                return Ok(index);
            }
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        if table.any_temp(name)
            || self
                .modes
                .iter()
                .any(|m| m.phases.iter().any(|p| p == name))
        {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        self.check_not_frozen(name)?;
        let padded = site::padded(name, shape, self.rounding)?;
        let site = Site::persistent(name, dtype, shape, padded.elements());
        self.table.get_mut().insert(site)
    }

    /// Declares up front the largest shape site `name` of `mode` must hold
    /// (by the site's rule), so the worst case need not be recorded.
    pub fn bound(
        &mut self,
        mode: u16,
        name: &str,
        dtype: DType,
        max_shape: &[usize],
    ) -> Result<()> {
        let index = self.site_for(mode, name, dtype, max_shape)?;
        let default = self.rounding;
        let site = &mut self.table.get_mut().sites[index];
        let padded = site::padded(name, max_shape, site.rounding.unwrap_or(default))?;
        site.size.widen(max_shape, padded.elements());
        Ok(())
    }

    /// Opts site `name` of `mode` in to per-dimension limits
    /// ([`ShapeRule::Dims`]), before its first request.
    pub fn per_dimension(&mut self, mode: u16, name: &str, dtype: DType) -> Result<()> {
        let index = self.site_for(mode, name, dtype, &[])?;
        let site = &mut self.table.get_mut().sites[index];
        if site.size.rule() == ShapeRule::Dims {
            return Ok(());
        }
        if site.requests > 0 {
            return Err(Error::InvalidView {
                buffer: name.to_owned(),
                shape: site.size.max().to_vec(),
                reason: "per-dimension limits must be chosen before the site's first request",
            });
        }
        site.size.set_rule(ShapeRule::Dims);
        Ok(())
    }

    /// The site `name` of `mode`, declared now (not yet sized) if new.
    fn site_for(&mut self, mode: u16, name: &str, dtype: DType, shape: &[usize]) -> Result<usize> {
        let m = self.mode_index(usize::from(mode))?;
        let table = self.table.get_mut();
        if let Some(i) = table.find(m, name) {
            let site = &table.sites[i];
            if !shape.is_empty() {
                site.check_compatible(dtype, shape)?;
            } else if site.dtype != dtype {
                site.check_compatible(dtype, site.size.max())?;
            }
            return Ok(i);
        }
        self.check_not_frozen(name)?;
        if !shape.is_empty() {
            site::padded(name, shape, self.rounding)?;
        }
        self.check_new_temp(&self.table.borrow(), m, name, shape)?;
        self.table.get_mut().insert(Site::temp(name, m, dtype))
    }

    /// Checks that a new temporary may be called `name` in mode `mode`: not
    /// empty, not a persistent buffer, not a phase of the mode.
    fn check_new_temp(&self, table: &Table, mode: u16, name: &str, shape: &[usize]) -> Result<()> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        if table.find_persistent(name).is_some() {
            return Err(crate::arena::persistent_by_name(name, shape));
        }
        if self.phases(mode).iter().any(|p| p == name) {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    /// Starts a recording step of mode `mode` (a checked index) in its
    /// first phase, no site leased.
    pub fn begin_step(&self, mode: u16) {
        self.mode.set(mode);
        self.phase.set(0);
        for site in self.table.borrow_mut().sites.iter_mut() {
            site.live = false;
        }
    }

    /// The open step's mode.
    pub fn step_mode(&self) -> u16 {
        self.mode.get()
    }

    /// The open step's phase index.
    pub fn phase_index(&self) -> usize {
        self.phase.get()
    }

    /// Name of the current phase (`"step"` when the mode has none).
    pub fn phase_name(&self) -> &str {
        self.phases(self.mode.get())
            .get(self.phase.get())
            .map_or("step", String::as_str)
    }

    /// The lifetime of a request made now: the current phase, or the whole
    /// step when the mode has no phases.
    fn life_now(&self) -> Life {
        if self.phases(self.mode.get()).is_empty() {
            Life::Step
        } else {
            let p = self.phase.get();
            Life::Span(p, p)
        }
    }

    /// Records a request for site `name` in the open step's mode and marks
    /// the site leased. `reserve(index, elements)` runs once the request is
    /// known to fit (element type; number of dimensions for a per-dimension
    /// site; not already leased) and before anything is recorded: a caller
    /// with memory of its own grows it there, and an error from it records
    /// nothing.
    pub fn request(
        &self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        reserve: impl FnOnce(usize, usize) -> Result<()>,
    ) -> Result<Granted> {
        let default = self.rounding;
        let mode = self.mode.get();
        let mut table = self.table.borrow_mut();
        let index = match table.find(mode, name) {
            Some(i) => {
                table.sites[i].check_compatible(dtype, shape)?;
                i
            }
            None => {
                self.check_new_temp(&table, mode, name, shape)?;
                site::padded(name, shape, default)?;
                table.insert(Site::temp(name, mode, dtype))?
            }
        };
        let now = self.life_now();
        let site = &mut table.sites[index];
        if site.live {
            return Err(Error::AlreadyLeased {
                buffer: name.to_owned(),
            });
        }
        let padded = site::padded(name, shape, site.rounding.unwrap_or(default))?;
        reserve(index, padded.elements())?;
        site.size.widen(shape, padded.elements());
        site.life = Some(site.life.map_or(now, |l| l.union(now)));
        site.requests += 1;
        site.live = true;
        Ok(Granted {
            index,
            padded,
            rule: site.size.rule(),
        })
    }

    /// Marks the persistent site `index` leased; returns its declared shape
    /// and what it was granted. `reserve` runs as for
    /// [`request`](SiteBook::request).
    pub(crate) fn lease_persistent(
        &self,
        index: usize,
        reserve: impl FnOnce(usize, usize) -> Result<()>,
    ) -> Result<(Dims, Granted)> {
        let mut table = self.table.borrow_mut();
        let site = table.sites.get_mut(index).ok_or(Error::ForeignHandle {
            index,
            owner: "recorder",
        })?;
        if site.live {
            return Err(Error::AlreadyLeased {
                buffer: site.name.to_string(),
            });
        }
        let shape = site.size.max.clone();
        let padded = site::padded(&site.name, &shape, site.rounding.unwrap_or(self.rounding))?;
        reserve(index, padded.elements())?;
        site.live = true;
        let granted = Granted {
            index,
            padded,
            rule: site.size.rule(),
        };
        Ok((shape, granted))
    }

    /// Records the end of site `index`'s lease in the current phase (an
    /// unknown index is ignored).
    pub fn release(&self, index: usize) {
        let phase = self.phase.get();
        // Never contended: no borrow of the table outlives a call.
        if let Ok(mut table) = self.table.try_borrow_mut()
            && let Some(site) = table.sites.get_mut(index)
        {
            site.live = false;
            if let Some(Life::Span(first, last)) = site.life {
                site.life = Some(Life::Span(first, last.max(phase)));
            }
        }
    }

    /// Checks that phase `index` of mode `mode` exists and belongs to a
    /// step of mode `step_mode`.
    pub fn check_phase(&self, step_mode: u16, mode: u16, index: usize) -> Result<()> {
        let known = self.modes.get(usize::from(mode));
        let Some(info) = known.filter(|m| index < m.phases.len()) else {
            return Err(Error::ForeignPhase {
                index,
                owner: "recorder",
            });
        };
        if mode != step_mode {
            return Err(Error::WrongMode {
                what: "phase",
                name: info.phases[index].clone(),
                mode: info.name.clone(),
                step_mode: self.mode_name(step_mode).to_owned(),
            });
        }
        Ok(())
    }

    /// Moves the open step to phase `index` of `mode` (phases only move
    /// forward; a phase of another mode is [`Error::WrongMode`]).
    pub fn enter(&self, mode: u16, index: usize) -> Result<()> {
        self.check_phase(self.mode.get(), mode, index)?;
        if index < self.phase.get() {
            return Err(Error::PhaseOrder {
                current: self.phase_name().to_owned(),
                requested: self.phases(mode)[index].clone(),
            });
        }
        self.phase.set(index);
        Ok(())
    }

    /// Ends a recording step: sites still leased end in the current phase.
    pub fn end_step(&mut self) {
        let phase = self.phase.get();
        for site in self.table.get_mut().sites.iter_mut().filter(|s| s.live) {
            site.live = false;
            if let Some(Life::Span(first, last)) = site.life {
                site.life = Some(Life::Span(first, last.max(phase)));
            }
        }
        self.recorded_steps += 1;
        self.phase.set(0);
    }

    /// Frozen: checks a request for site `name` of `mode` against its
    /// planned buffer, which `planned(index)` finds for a sized site (the
    /// caller keeps the plan). Returns the site's index and the view's
    /// element count. A site never sized in `mode` is an
    /// [`Error::UnrecordedSite`]; then the element type must be the site's
    /// and the shape fit the planned buffer by the site's rule
    /// ([`check_frozen_request`](super::check_frozen_request)). Hashes the
    /// name; allocates nothing unless it fails.
    #[inline]
    pub fn planned_request<'p>(
        &self,
        mode: u16,
        name: &str,
        dtype: DType,
        shape: &[usize],
        planned: impl FnOnce(usize) -> Option<&'p PlannedBuffer>,
    ) -> Result<(usize, usize)> {
        let table = self.table.borrow();
        let Some(index) = table.find(mode, name) else {
            if table.find_persistent(name).is_some() {
                return Err(crate::arena::persistent_by_name(name, shape));
            }
            return Err(self.unrecorded(mode, name));
        };
        let site = &table.sites[index];
        // A site opted in to per-dimension limits but never sized has no
        // buffer.
        let buffer = planned(index).filter(|_| site.size.is_sized());
        let Some(buffer) = buffer else {
            return Err(self.unrecorded(mode, name));
        };
        if site.dtype != dtype {
            return Err(Error::DTypeMismatch {
                buffer: name.to_owned(),
                declared: site.dtype.name(),
                requested: dtype.name(),
            });
        }
        let elements = check_frozen_request(self.mode_name(mode), shape, buffer)?;
        Ok((index, elements))
    }

    #[cold]
    fn unrecorded(&self, mode: u16, name: &str) -> Error {
        Error::UnrecordedSite {
            site: name.to_owned(),
            mode: self.mode_name(mode).to_owned(),
        }
    }

    /// Steps recorded.
    pub fn recorded_steps(&self) -> u64 {
        self.recorded_steps
    }

    /// Steps the learned specs stand for: recorded ones plus the most any
    /// preloaded spec set was learned from.
    pub fn learned_steps(&self) -> u64 {
        self.recorded_steps + self.imported_steps
    }

    /// Sites known: recorded temporaries and persistent buffers.
    pub fn len(&self) -> usize {
        self.table.borrow().sites.len()
    }

    /// Whether no site is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The temporary called `name` in mode `mode`.
    pub fn find(&self, mode: u16, name: &str) -> Option<usize> {
        self.table.borrow().find(mode, name)
    }

    /// The persistent buffer called `name`.
    pub fn find_persistent(&self, name: &str) -> Option<usize> {
        self.table.borrow().find_persistent(name)
    }

    /// Site `index`.
    pub fn site(&self, index: usize) -> Option<SiteInfo> {
        self.table.borrow().sites.get(index).map(|s| SiteInfo {
            name: s.name.to_string(),
            mode: s.mode,
            dtype: s.dtype,
            shape: s.size.max().to_vec(),
            rule: s.size.rule(),
            rounding: s.rounding,
        })
    }

    /// Every site, in first-seen order.
    pub fn sites(&self) -> Vec<SiteInfo> {
        (0..self.len()).filter_map(|i| self.site(i)).collect()
    }

    /// The declared modes, as a spec set lists them.
    fn spec_modes(&self) -> Vec<SpecMode> {
        self.modes
            .iter()
            .skip(1)
            .map(|m| SpecMode {
                name: m.name.clone(),
                phases: m.phases.clone(),
            })
            .collect()
    }

    /// Everything known so far as a spec set: the modes and phases,
    /// persistent buffers as declared, and every site sized by a request or
    /// a bound, with its mode, the shape its buffer must hold, its shape
    /// rule, its phase span (or the whole step, when its mode has no phases
    /// or it was never requested) and the number of steps it was learned
    /// from. In first-seen order.
    pub fn specs(&self) -> SpecSet {
        let steps = self.learned_steps();
        let table = self.table.borrow();
        let buffers = table
            .sites
            .iter()
            .filter(|s| s.size.is_sized())
            .map(|s| SpecEntry {
                name: s.name.to_string(),
                dtype: s.dtype,
                shape: s.size.max.to_vec(),
                lifetime: match s.life {
                    Some(Life::Persistent) => SpecLifetime::Persistent,
                    Some(Life::Step) | None => SpecLifetime::Step,
                    Some(Life::Span(first, last)) => SpecLifetime::Phases { first, last },
                },
                mode: s
                    .mode
                    .filter(|&m| m > 0)
                    .map(|m| self.mode_name(m).to_owned()),
                shape_rule: s.size.rule(),
                rounding: s.rounding,
                recorded_steps: (s.recorded && s.life.is_some()).then_some(steps),
            })
            .collect();
        SpecSet {
            phases: self.modes[0].phases.clone(),
            modes: self.spec_modes(),
            buffers,
        }
    }

    /// The index of a (validated) entry's mode.
    fn mode_of_entry(&self, e: &SpecEntry) -> u16 {
        e.mode
            .as_deref()
            .and_then(|name| self.modes.iter().position(|m| m.name == name))
            // Fits: modes are numbered in u16.
            .map_or(0, |m| m as u16)
    }

    /// Merges a spec set (say, loaded from a checked-in file) as if its
    /// steps had been recorded here: maxima and lifetimes unite with the
    /// recorded ones, persistent buffers are declared. The set's modes and
    /// phases must be the book's, in order; every entry is checked before
    /// anything changes. `source` names the caller in errors.
    pub fn preload(&mut self, specs: &SpecSet, source: &str) -> Result<()> {
        let invalid = |reason: String| Error::InvalidSpecs {
            source_name: source.to_owned(),
            reason,
        };
        if self.frozen {
            return Err(invalid(
                "the recorder is frozen; call rerecord() before preloading specs".to_owned(),
            ));
        }
        specs.validate().map_err(invalid)?;
        let ours = self.spec_modes();
        if specs.phases != self.modes[0].phases || specs.modes != ours {
            return Err(invalid(format!(
                "the specs' phases {:?} and modes {:?} differ from the recorder's {:?} and {:?}; declare the same modes and phases in the same order first",
                specs.phases, specs.modes, self.modes[0].phases, ours
            )));
        }
        {
            let table = self.table.borrow();
            for e in &specs.buffers {
                let persistent = e.lifetime == SpecLifetime::Persistent;
                let found = match persistent {
                    true => table.find_persistent(&e.name),
                    false => table.find(self.mode_of_entry(e), &e.name),
                };
                let clash = match persistent {
                    true => table.any_temp(&e.name),
                    false => table.find_persistent(&e.name).is_some(),
                };
                let differs = found.is_some_and(|i| {
                    let site = &table.sites[i];
                    site.check_compatible(e.dtype, &e.shape).is_err()
                        || (persistent && site.size.max() != e.shape.as_slice())
                        || (site.size.rule() != e.shape_rule && site.requests > 0)
                });
                if clash || differs {
                    return Err(invalid(format!(
                        "buffer '{}' is declared differently in the specs ({}, {:?}) and in the recorder",
                        e.name,
                        specs.entry_lifetime_label(e),
                        e.shape
                    )));
                }
            }
        }
        for e in &specs.buffers {
            self.merge(e)?;
        }
        let steps = specs
            .buffers
            .iter()
            .filter_map(|b| b.recorded_steps)
            .max()
            .unwrap_or(0);
        self.imported_steps = self.imported_steps.max(steps);
        Ok(())
    }

    fn merge(&mut self, e: &SpecEntry) -> Result<()> {
        let life = match e.lifetime {
            SpecLifetime::Persistent => Life::Persistent,
            SpecLifetime::Step => Life::Step,
            SpecLifetime::Phases { first, last } => Life::Span(first, last),
        };
        let mode = self.mode_of_entry(e);
        let padded = site::padded(&e.name, &e.shape, e.rounding.unwrap_or(self.rounding))?;
        let table = self.table.get_mut();
        let found = match life {
            Life::Persistent => table.find_persistent(&e.name),
            _ => table.find(mode, &e.name),
        };
        if let Some(i) = found {
            let site = &mut table.sites[i];
            site.size.set_rule(e.shape_rule);
            site.rounding = e.rounding.or(site.rounding);
            if life != Life::Persistent {
                site.size.widen(&e.shape, padded.elements());
                site.life = Some(site.life.map_or(life, |l| l.union(life)));
            }
            site.recorded |= e.recorded_steps.is_some();
            return Ok(());
        }
        let mut site = if life == Life::Persistent {
            Site::persistent(&e.name, e.dtype, &e.shape, padded.elements())
        } else {
            let mut s = Site::temp(&e.name, mode, e.dtype);
            s.size = super::rule::SiteShape::sized(e.shape_rule, &e.shape, padded.elements());
            s.life = Some(life);
            s
        };
        site.rounding = e.rounding;
        site.recorded = e.recorded_steps.is_some() && life != Life::Persistent;
        table.insert(site)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(_: usize, _: usize) -> Result<()> {
        Ok(())
    }

    #[test]
    fn a_failed_reserve_records_nothing() {
        let book = SiteBook::new(Rounding::Inner16);
        book.begin_step(0);
        let e = book
            .request("x", DType::F32, &[4, 4], |_, _| Err(Error::EmptyPlan))
            .unwrap_err();
        assert!(matches!(e, Error::EmptyPlan));
        assert!(book.specs().buffers().is_empty());
        let g = book.request("x", DType::F32, &[4, 4], ok).unwrap();
        assert_eq!(g.padded.dims(), &[4, 16]);
        assert!(matches!(
            book.request("x", DType::F32, &[4, 4], ok),
            Err(Error::AlreadyLeased { .. })
        ));
    }

    #[test]
    fn frozen_requests_are_checked_against_the_planned_buffer() {
        let mut book = SiteBook::new(Rounding::Inner16);
        book.per_dimension(0, "d", DType::F32).unwrap();
        book.persistent("w", DType::F32, &[8]).unwrap();
        book.begin_step(0);
        book.request("x", DType::F32, &[4, 10], ok).unwrap();
        book.end_step();
        let mut planner = crate::Planner::new();
        let declared = book.specs().declare_on(&mut planner).unwrap();
        let ids: Vec<_> = declared.ids().collect();
        let plan = planner.plan().unwrap();
        // Sites: d (never sized, no buffer), w, x; the specs list w and x.
        let planned = |i: usize| i.checked_sub(1).and_then(|b| plan.buffer(ids[b]).ok());
        let (index, elements) = book
            .planned_request(0, "x", DType::F32, &[2, 16], planned)
            .unwrap();
        assert_eq!((index, elements), (2, 32));
        let e = book
            .planned_request(0, "x", DType::F32, &[5, 16], planned)
            .unwrap_err();
        assert!(matches!(e, Error::ExceedsRecorded { .. }), "{e}");
        let e = book
            .planned_request(0, "x", DType::I32, &[2], planned)
            .unwrap_err();
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
        for name in ["d", "y"] {
            let e = book
                .planned_request(0, name, DType::F32, &[2], planned)
                .unwrap_err();
            assert!(matches!(e, Error::UnrecordedSite { .. }), "{name}: {e}");
        }
        let e = book
            .planned_request(0, "w", DType::F32, &[8], planned)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidView { .. }), "{e}");
    }

    #[test]
    fn a_frozen_book_refuses_declarations() {
        let mut book = SiteBook::new(Rounding::Inner16);
        book.freeze();
        assert!(matches!(book.mode("eval"), Err(Error::InvalidSpecs { .. })));
        assert!(matches!(
            book.bound(0, "x", DType::F32, &[4]),
            Err(Error::InvalidSpecs { .. })
        ));
        let specs = SiteBook::new(Rounding::Inner16).specs();
        assert!(matches!(
            book.preload(&specs, "test"),
            Err(Error::InvalidSpecs { .. })
        ));
        book.rerecord();
        book.mode("eval").unwrap();
        assert_eq!(book.mode_names().collect::<Vec<_>>(), ["default", "eval"]);
    }

    #[test]
    fn end_step_ends_live_leases_in_the_current_phase() {
        let mut book = SiteBook::new(Rounding::Inner16);
        book.phase(0, "a").unwrap();
        let b = book.phase(0, "b").unwrap();
        book.begin_step(0);
        book.request("x", DType::F32, &[4], ok).unwrap();
        book.enter(0, b).unwrap();
        book.end_step();
        let specs = book.specs();
        let x = specs.get("x").unwrap();
        assert_eq!(x.lifetime, SpecLifetime::Phases { first: 0, last: 1 });
        assert_eq!(book.recorded_steps(), 1);
        assert_eq!(book.phase_name(), "a");
    }
}
