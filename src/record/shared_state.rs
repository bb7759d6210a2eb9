//! The recorder's state shared with its steps and leases: the modes and
//! their phases, the site table, and, while recording, the current mode and
//! phase, the random stream and the pool counters. Steps reach it through
//! `&`, so everything that changes inside a step sits in a `Cell` or
//! `RefCell` whose borrows never outlive a call.

use std::cell::{Cell, RefCell};

use super::lease::Pooled;
use super::site::{self, Life, Site, Table};
use crate::dtype::Element;
use crate::error::{Available, Error, Result};
use crate::ops::RngState;
use crate::plan::{DEFAULT_MODE, PlannerConfig};

/// Running totals of the recording pool.
#[derive(Debug, Default)]
pub(crate) struct PoolCounters {
    pub requests: Cell<u64>,
    pub allocations: Cell<u64>,
    pub bytes: Cell<u64>,
}

/// A mode of the recorder: its name and phases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModeInfo {
    pub name: String,
    pub phases: Vec<String>,
}

#[derive(Debug)]
pub(crate) struct SharedState {
    /// Identity of the recorder's mode, phase and buffer handles.
    pub id: u64,
    pub config: PlannerConfig,
    /// Mode 0 is the default mode.
    pub modes: Vec<ModeInfo>,
    pub table: RefCell<Table>,
    /// Mode of the open recording step.
    pub mode: Cell<u16>,
    /// Phase of the open recording step (an index into its mode's phases).
    pub phase: Cell<usize>,
    /// Random stream position while recording (the arena holds it once
    /// frozen).
    pub rng: Cell<RngState>,
    pub pool: PoolCounters,
}

impl SharedState {
    pub fn new(id: u64, config: PlannerConfig) -> SharedState {
        SharedState {
            id,
            config,
            modes: vec![ModeInfo {
                name: DEFAULT_MODE.to_owned(),
                phases: Vec::new(),
            }],
            table: RefCell::new(Table::default()),
            mode: Cell::new(0),
            phase: Cell::new(0),
            rng: Cell::new(RngState::default()),
            pool: PoolCounters::default(),
        }
    }

    /// The name of mode `mode`.
    pub fn mode_name(&self, mode: u16) -> &str {
        self.modes
            .get(usize::from(mode))
            .map_or(DEFAULT_MODE, |m| m.name.as_str())
    }

    /// The lifetime of a request made now: the current phase, or the whole
    /// step when the mode has no phases.
    fn life_now(&self) -> Life {
        let phases = self
            .modes
            .get(usize::from(self.mode.get()))
            .map_or(0, |m| m.phases.len());
        if phases == 0 {
            Life::Step
        } else {
            let p = self.phase.get();
            Life::Span(p, p)
        }
    }

    /// Serves a temporary of `shape` for `name` in the current mode from
    /// the pool, recording the request. Fails, recording nothing, if the
    /// request does not fit the site's earlier ones (element type; number
    /// of dimensions for a per-dimension site) or the site is already
    /// leased.
    pub fn request<T: Element>(&self, name: &str, shape: &[usize]) -> Result<Pooled<'_, T>> {
        let default = self.config.default_rounding;
        let mode = self.mode.get();
        let mut table = self.table.borrow_mut();
        let index = match table.find(mode, name) {
            Some(i) => {
                table.sites[i].check_compatible(T::DTYPE, shape)?;
                i
            }
            None => {
                self.check_new_temp(&table, mode, name, shape)?;
                site::padded(name, shape, default)?;
                table.insert(Site::temp(name, mode, T::DTYPE))?
            }
        };
        let site = &mut table.sites[index];
        if site.live {
            return Err(Error::AlreadyLeased {
                buffer: name.to_owned(),
            });
        }
        let padded = site::padded(name, shape, site.rounding.unwrap_or(default))?;
        self.ensure_capacity(site, padded.elements())?;
        site.size.widen(shape, padded.elements());
        let now = self.life_now();
        site.life = Some(site.life.map_or(now, |l| l.union(now)));
        site.requests += 1;
        site.live = true;
        self.pool.requests.set(self.pool.requests.get() + 1);
        Ok(Pooled::new(self, index, site, shape, padded))
    }

    /// Checks that a new temporary may be called `name` in mode `mode`: not
    /// empty, not a phase of the mode, not a persistent buffer.
    pub fn check_new_temp(
        &self,
        table: &Table,
        mode: u16,
        name: &str,
        shape: &[usize],
    ) -> Result<()> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        if table.find_persistent(name).is_some() {
            return Err(crate::arena::persistent_by_name(name, shape));
        }
        let phases = self.modes.get(usize::from(mode)).map(|m| &m.phases);
        if phases.is_some_and(|p| p.iter().any(|p| p == name)) {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    /// Leases the declared persistent buffer `index` from the pool.
    pub fn lease_persistent<T: Element>(&self, index: usize) -> Result<Pooled<'_, T>> {
        let default = self.config.default_rounding;
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
        let padded = site::padded(&site.name, &shape, site.rounding.unwrap_or(default))?;
        self.ensure_capacity(site, padded.elements())?;
        site.live = true;
        Ok(Pooled::new(self, index, site, &shape, padded))
    }

    /// Grows the site's pool memory to hold `elements` (zero-filled), the
    /// only place the pool allocates.
    pub fn ensure_capacity(&self, site: &mut Site, elements: usize) -> Result<()> {
        let oom = |needed| Error::OutOfMemory {
            device: "recording pool".to_owned(),
            needed,
            available: Available::Unknown,
        };
        let bytes = elements
            .checked_mul(site.dtype.size())
            .ok_or_else(|| oom(usize::MAX))?;
        let words = bytes.div_ceil(8);
        if site.data.len() < words {
            let more = words - site.data.len();
            site.data.try_reserve_exact(more).map_err(|_| oom(bytes))?;
            site.data.resize(words, 0);
            self.pool.allocations.set(self.pool.allocations.get() + 1);
            self.pool
                .bytes
                .set(self.pool.bytes.get() + (more * 8) as u64);
        }
        Ok(())
    }

    /// Takes back a pooled lease's memory and records the phase it ended in.
    pub fn release(&self, index: usize, data: Vec<u64>) {
        let phase = self.phase.get();
        // Never contended: no borrow of the table outlives a call.
        if let Ok(mut table) = self.table.try_borrow_mut()
            && let Some(site) = table.sites.get_mut(index)
        {
            site.data = data;
            site.live = false;
            if let Some(Life::Span(first, last)) = site.life {
                site.life = Some(Life::Span(first, last.max(phase)));
            }
        }
    }

    /// Starts a recording step in mode `mode`: its first phase, and no site
    /// leased (leases leaked with `mem::forget` took their memory with
    /// them; the site allocates afresh).
    pub fn begin_recording_step(&self, mode: u16) {
        self.mode.set(mode);
        self.phase.set(0);
        for site in self.table.borrow_mut().sites.iter_mut() {
            site.live = false;
        }
    }

    /// Name of the current recording phase.
    pub fn phase_name(&self) -> &str {
        self.modes
            .get(usize::from(self.mode.get()))
            .and_then(|m| m.phases.get(self.phase.get()))
            .map_or("step", String::as_str)
    }
}
