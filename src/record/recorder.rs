//! The recorder: records steps, freezes into a planned arena, and can go
//! back to recording between epochs.

use std::marker::PhantomData;

use super::shared_state::SharedState;
use super::site::{self, Life, Site};
use super::specs::{SpecEntry, SpecLifetime, SpecSet};
use super::step::RecordStep;
use crate::arena::Arena;
use crate::device::Device;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::ops::RngState;
use crate::plan::{BufferId, Phase, Plan, Planner, PlannerConfig, next_owner_id};

/// A typed, `Copy` handle to a persistent buffer declared on a
/// [`Recorder`]; lease it in a step with [`RecordStep::lease`].
pub struct Persistent<T: Element> {
    pub(crate) owner: u64,
    pub(crate) index: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> Clone for Persistent<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Element> Copy for Persistent<T> {}
impl<T: Element> PartialEq for Persistent<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.owner, self.index) == (other.owner, other.index)
    }
}
impl<T: Element> Eq for Persistent<T> {}
impl<T: Element> std::fmt::Debug for Persistent<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Persistent<{}>#{}", T::DTYPE, self.index)
    }
}

/// What a recorder has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Steps this recorder recorded.
    pub recorded_steps: u64,
    /// Steps the learned specs stand for: recorded ones plus the most any
    /// preloaded spec set was learned from. The plan report shows it.
    pub learned_steps: u64,
    /// Requests served from the recording pool.
    pub pool_requests: u64,
    /// Host allocations the pool made (a site's memory growing, persistent
    /// buffers, and their copies on [`Recorder::rerecord`]).
    pub pool_allocations: u64,
    /// Bytes the pool holds now (none once frozen).
    pub pool_bytes: u64,
    /// Sites known: recorded temporaries and persistent buffers.
    pub sites: usize,
    /// Plans made by [`Recorder::freeze`].
    pub plans: u64,
    /// Whether the recorder serves from a plan now.
    pub frozen: bool,
}

/// Learns buffer specs by recording steps, then plans them and serves the
/// same requests from one slab with no allocation.
///
/// A step is written once, against [`RecordStep`]: temporaries are asked
/// for by site name with the shape this step needs
/// ([`RecordStep::temp`]), persistent buffers (weights, optimizer state) are
/// declared up front ([`Recorder::persistent`]). While recording, requests
/// come from a growable host pool and every site's element type, largest
/// shape and phase span is kept; [`freeze`](Recorder::freeze) turns those
/// into specs, plans them with the [`Planner`], reserves the slab once, and
/// from then on the same calls lease planned buffers. A request beyond the
/// recorded maxima after freezing is an [`Error::ExceedsRecorded`]; call
/// [`rerecord`](Recorder::rerecord), run steps of the new size, and freeze
/// again.
///
/// ```
/// use tensor_arena::{CountingAllocator, HostDevice, record::Recorder};
/// let mut rec = Recorder::new(HostDevice::new());
/// let fwd = rec.phase("forward")?;
/// let bwd = rec.phase("backward")?;
/// let w = rec.persistent::<f32>("w", &[64])?;
/// rec.write(w, &[0.5; 64])?;
/// let mut step = |rec: &mut Recorder<HostDevice>, batch: usize| {
///     rec.step(|s| {
///         let w = s.lease(w)?;
///         let mut h = s.temp::<f32>("h", &[batch, 64])?;
///         for row in h.as_mut_slice().chunks_mut(64) {
///             row.copy_from_slice(w.as_slice());
///         }
///         s.enter(bwd)?;
///         let mut g = s.temp::<f32>("g", &[batch, 64])?;
///         g.as_mut_slice().copy_from_slice(h.as_slice());
///         Ok::<_, tensor_arena::Error>(())
///     })
/// };
/// // Record two steps of different sizes, then plan.
/// step(&mut rec, 30)?;
/// step(&mut rec, 20)?;
/// println!("{}", rec.specs().to_toml()?);
/// let plan = rec.freeze()?;
/// println!("{plan}");
/// assert_eq!(plan.buffers()[1].shape().dims(), &[30, 64]);
/// // Frozen: the same step, any size up to the recorded one.
/// step(&mut rec, 25)?;
/// assert!(step(&mut rec, 31).is_err());
/// assert_eq!(rec.arena().map(|a| a.stats().device.alloc_calls), Some(1));
/// # let _ = fwd;
/// # Ok::<(), tensor_arena::Error>(())
/// ```
pub struct Recorder<D: Device> {
    shared: SharedState,
    device: D,
    frozen: Option<Frozen<D>>,
    recorded_steps: u64,
    imported_steps: u64,
    plans: u64,
}

struct Frozen<D: Device> {
    arena: Arena<D>,
    /// The planned buffer of every site, by site index.
    ids: Box<[BufferId]>,
}

impl<D: Device> Recorder<D> {
    /// A recorder with the planner's default settings, recording.
    pub fn new(device: D) -> Recorder<D> {
        Recorder {
            shared: SharedState::new(next_owner_id(), PlannerConfig::default()),
            device,
            frozen: None,
            recorded_steps: 0,
            imported_steps: 0,
            plans: 0,
        }
    }

    /// A recorder whose plans use `config` (checked as
    /// [`Planner::with_config`] checks it).
    pub fn with_config(device: D, config: PlannerConfig) -> Result<Recorder<D>> {
        Planner::with_config(config)?;
        let mut rec = Recorder::new(device);
        rec.shared.config = config;
        Ok(rec)
    }

    /// Declares the next phase of a step; phases run in declaration order.
    /// Declare them all before the first step.
    pub fn phase(&mut self, name: &str) -> Result<Phase> {
        self.check_new_name(name)?;
        let index = u16::try_from(self.shared.phases.len()).map_err(|_| Error::SizeOverflow {
            buffer: name.to_owned(),
            shape: Vec::new(),
            what: "the number of phases",
            limit: u64::from(u16::MAX),
        })?;
        self.shared.phases.push(name.to_owned());
        Ok(Phase {
            planner: self.shared.id,
            index,
        })
    }

    /// Declares a persistent buffer (weights, optimizer state): its contents
    /// survive steps, recording and freezing. Declaring the same name again
    /// with the same element type and shape (as after
    /// [`preload`](Recorder::preload)) returns the same handle.
    pub fn persistent<T: Element>(&mut self, name: &str, shape: &[usize]) -> Result<Persistent<T>> {
        let owner = self.shared.id;
        let handle = |index| Persistent {
            owner,
            index,
            _t: PhantomData,
        };
        if let Some(index) = self.shared.table.get_mut().find(name) {
            let site = &self.shared.table.get_mut().sites[index];
            if site.is_persistent() && site.dtype == T::DTYPE && site.max.as_slice() == shape {
                return Ok(handle(index));
            }
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        self.check_new_name(name)?;
        if self.frozen.is_some() {
            return Err(Error::UnrecordedSite {
                site: name.to_owned(),
            });
        }
        let rounding = self.shared.config.default_rounding;
        let padded = site::padded(name, shape, rounding)?;
        let mut site = Site::persistent(name, T::DTYPE, shape);
        self.shared.ensure_capacity(&mut site, padded.elements())?;
        let index = self.shared.table.get_mut().insert(site)?;
        Ok(handle(index))
    }

    fn check_new_name(&mut self, name: &str) -> Result<()> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        if self.shared.phases.iter().any(|p| p == name)
            || self.shared.table.get_mut().find(name).is_some()
        {
            return Err(Error::DuplicateName {
                name: name.to_owned(),
            });
        }
        Ok(())
    }

    /// Merges a spec set (say, loaded from a checked-in file) into what the
    /// recorder knows, as if its steps had been recorded here: maxima and
    /// lifetimes unite with the recorded ones, persistent buffers are
    /// declared. The set's phases must be the recorder's, in order. Then
    /// [`freeze`](Recorder::freeze) plans without any recording step.
    pub fn preload(&mut self, specs: &SpecSet) -> Result<()> {
        let invalid = |reason: String| Error::InvalidSpecs {
            source_name: "Recorder::preload".to_owned(),
            reason,
        };
        if self.frozen.is_some() {
            return Err(invalid(
                "the recorder is frozen; call rerecord() before preloading specs".to_owned(),
            ));
        }
        specs.validate().map_err(invalid)?;
        if specs.phases != self.shared.phases {
            return Err(invalid(format!(
                "the specs' phases {:?} differ from the recorder's {:?}; declare the same phases in the same order first",
                specs.phases, self.shared.phases
            )));
        }
        // Check every entry before changing anything.
        {
            let table = self.shared.table.get_mut();
            for e in &specs.buffers {
                if let Some(i) = table.find(&e.name) {
                    let site = &table.sites[i];
                    site.check_compatible(e.dtype, &e.shape)?;
                    let persistent = e.lifetime == SpecLifetime::Persistent;
                    if persistent != site.is_persistent()
                        || (persistent && site.max.as_slice() != e.shape.as_slice())
                    {
                        return Err(invalid(format!(
                            "buffer '{}' is declared differently in the specs ({}, {:?}) and in the recorder",
                            e.name,
                            specs.lifetime_label(e.lifetime),
                            e.shape
                        )));
                    }
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
        let default = self.shared.config.default_rounding;
        let table = self.shared.table.get_mut();
        if let Some(i) = table.find(&e.name) {
            let site = &mut table.sites[i];
            site.widen(&e.shape);
            site.life = site.life.union(life);
            site.rounding = e.rounding.or(site.rounding);
            site.recorded |= e.recorded_steps.is_some();
            return Ok(());
        }
        let rounding = e.rounding.unwrap_or(default);
        let padded = site::padded(&e.name, &e.shape, rounding)?;
        let mut site = if life == Life::Persistent {
            Site::persistent(&e.name, e.dtype, &e.shape)
        } else {
            Site::temp(&e.name, e.dtype, &e.shape, life)
        };
        site.rounding = e.rounding;
        site.recorded = e.recorded_steps.is_some() && life != Life::Persistent;
        if life == Life::Persistent {
            self.shared.ensure_capacity(&mut site, padded.elements())?;
        }
        self.shared.table.get_mut().insert(site)?;
        Ok(())
    }

    /// Runs one step. While recording, its requests are served from the
    /// pool and recorded; once frozen, they lease planned buffers and
    /// allocate nothing. Leases made in `f` cannot escape it.
    pub fn step<R>(&mut self, f: impl FnOnce(&RecordStep<'_, D>) -> R) -> R {
        let recording = self.frozen.is_none();
        if recording {
            self.shared.begin_recording_step();
        }
        let out = {
            let frozen = self.frozen.as_mut().map(|Frozen { arena, ids }| {
                let ids: &[BufferId] = ids;
                (arena.begin_step(), ids)
            });
            let step = RecordStep {
                shared: &self.shared,
                frozen,
            };
            f(&step)
        };
        if recording {
            self.recorded_steps += 1;
            self.shared.phase.set(0);
        }
        out
    }

    /// Steps the learned specs stand for (see [`RecordStats::learned_steps`]).
    fn learned_steps(&self) -> u64 {
        self.recorded_steps + self.imported_steps
    }

    /// Everything known so far as a spec set: persistent buffers as
    /// declared, and every recorded site with its largest shape, its phase
    /// span (or the whole step, when no phases are declared) and the number
    /// of steps it was learned from. In first-seen order.
    pub fn specs(&self) -> SpecSet {
        let steps = self.learned_steps();
        let table = self.shared.table.borrow();
        let buffers = table
            .sites
            .iter()
            .map(|s| SpecEntry {
                name: s.name.to_string(),
                dtype: s.dtype,
                shape: s.max.to_vec(),
                lifetime: match s.life {
                    Life::Persistent => SpecLifetime::Persistent,
                    Life::Step => SpecLifetime::Step,
                    Life::Span(first, last) => SpecLifetime::Phases { first, last },
                },
                rounding: s.rounding,
                recorded_steps: s.recorded.then_some(steps),
            })
            .collect();
        SpecSet {
            phases: self.shared.phases.clone(),
            buffers,
        }
    }

    /// Whether requests are served from a plan.
    pub fn is_frozen(&self) -> bool {
        self.frozen.is_some()
    }

    /// The plan, once frozen.
    pub fn plan(&self) -> Option<&Plan> {
        self.frozen.as_ref().map(|f| f.arena.plan())
    }

    /// The arena, once frozen (for its stats and `memory_summary()`).
    pub fn arena(&self) -> Option<&Arena<D>> {
        self.frozen.as_ref().map(|f| &f.arena)
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// Goes back to recording, keeping everything recorded so far (so the
    /// next plan covers old and new maxima) and the contents of persistent
    /// buffers and the random stream position. Use it between epochs after
    /// an [`Error::ExceedsRecorded`]. Nothing happens if already recording.
    pub fn rerecord(&mut self) -> Result<()> {
        let Some(frozen) = &self.frozen else {
            return Ok(());
        };
        // Read everything first, so that a failed read leaves the recorder
        // frozen and whole.
        let mut saved = Vec::new();
        for (i, site) in self.shared.table.get_mut().sites.iter().enumerate() {
            if !site.is_persistent() {
                continue;
            }
            let id = frozen.ids.get(i).copied().ok_or(Error::ForeignHandle {
                index: i,
                owner: "recorder",
            })?;
            let len = frozen.arena.plan().buffer(id)?.bytes();
            let mut data = vec![0u64; len.div_ceil(8)];
            let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut data)[..len];
            frozen.arena.read_bytes(id, bytes)?;
            saved.push((i, data));
        }
        self.shared.rng.set(frozen.arena.rng_state());
        self.frozen = None;
        let pool = &self.shared.pool;
        let table = self.shared.table.get_mut();
        for (i, data) in saved {
            pool.allocations.set(pool.allocations.get() + 1);
            pool.bytes.set(pool.bytes.get() + data.len() as u64 * 8);
            table.sites[i].data = data;
        }
        Ok(())
    }

    fn check_handle<T: Element>(&self, buffer: Persistent<T>) -> Result<()> {
        if buffer.owner != self.shared.id {
            return Err(Error::ForeignHandle {
                index: buffer.index,
                owner: "recorder",
            });
        }
        Ok(())
    }

    /// Copies `data` into the start of a persistent buffer, outside any
    /// step. `data` may be shorter than the capacity.
    pub fn write<T: Element>(&mut self, buffer: Persistent<T>, data: &[T]) -> Result<()> {
        self.check_handle(buffer)?;
        if let Some(f) = &mut self.frozen {
            let b = typed(&f.ids, buffer)?;
            return f.arena.write(b, data);
        }
        let pooled = self.pool_slice::<T>(buffer.index, data.len())?;
        pooled.copy_from_slice(data);
        Ok(())
    }

    /// Copies the start of a persistent buffer into `out`, outside any step.
    pub fn read<T: Element>(&mut self, buffer: Persistent<T>, out: &mut [T]) -> Result<()> {
        self.check_handle(buffer)?;
        if let Some(f) = &mut self.frozen {
            let b = typed(&f.ids, buffer)?;
            return f.arena.read(b, out);
        }
        let pooled = self.pool_slice::<T>(buffer.index, out.len())?;
        out.copy_from_slice(pooled);
        Ok(())
    }

    /// The first `len` elements of a persistent site's pool memory, if its
    /// capacity holds them.
    fn pool_slice<T: Element>(&mut self, index: usize, len: usize) -> Result<&mut [T]> {
        let default = self.shared.config.default_rounding;
        let site =
            self.shared
                .table
                .get_mut()
                .sites
                .get_mut(index)
                .ok_or(Error::ForeignHandle {
                    index,
                    owner: "recorder",
                })?;
        let padded = site::padded(&site.name, &site.max, site.rounding.unwrap_or(default))?;
        let capacity = padded.elements();
        let all = bytemuck::cast_slice_mut::<u64, T>(&mut site.data);
        if len > capacity || len > all.len() {
            return Err(Error::ViewTooLarge {
                buffer: site.name.to_string(),
                shape: vec![len],
                elements: len,
                capacity,
                padded: padded.to_vec(),
            });
        }
        Ok(&mut all[..len])
    }

    /// Restarts the random stream at element 0 of `seed`.
    pub fn set_seed(&mut self, seed: u64) {
        self.set_rng_state(RngState::new(seed));
    }

    /// Where the next random op will read the stream.
    pub fn rng_state(&self) -> RngState {
        match &self.frozen {
            Some(f) => f.arena.rng_state(),
            None => self.shared.rng.get(),
        }
    }

    /// Restores a saved random-stream position.
    pub fn set_rng_state(&mut self, state: RngState) {
        match &mut self.frozen {
            Some(f) => f.arena.set_rng_state(state),
            None => self.shared.rng.set(state),
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RecordStats {
        let pool = &self.shared.pool;
        RecordStats {
            recorded_steps: self.recorded_steps,
            learned_steps: self.learned_steps(),
            pool_requests: pool.requests.get(),
            pool_allocations: pool.allocations.get(),
            pool_bytes: pool.bytes.get(),
            sites: self.shared.table.borrow().sites.len(),
            plans: self.plans,
            frozen: self.frozen.is_some(),
        }
    }
}

fn typed<T: Element>(ids: &[BufferId], buffer: Persistent<T>) -> Result<crate::plan::Buffer<T>> {
    ids.get(buffer.index)
        .copied()
        .and_then(BufferId::typed::<T>)
        .ok_or(Error::ForeignHandle {
            index: buffer.index,
            owner: "recorder",
        })
}

impl<D: Device + Clone> Recorder<D> {
    /// Plans what was recorded (and preloaded), reserves the slab with one
    /// device allocation, copies the persistent buffers and the random
    /// stream position into it, and frees the pool. From now on steps lease
    /// planned buffers. Returns the plan; its report marks the learned specs
    /// and the number of steps they were learned from. Does nothing but
    /// return the plan if already frozen.
    pub fn freeze(&mut self) -> Result<&Plan> {
        if self.frozen.is_none() {
            let frozen = self.plan_and_reserve()?;
            self.plans += 1;
            for site in self.shared.table.get_mut().sites.iter_mut() {
                site.data = Vec::new();
            }
            self.shared.pool.bytes.set(0);
            self.frozen = Some(frozen);
        }
        self.frozen
            .as_ref()
            .map(|f| f.arena.plan())
            .ok_or(Error::EmptyPlan)
    }

    fn plan_and_reserve(&mut self) -> Result<Frozen<D>> {
        let specs = self.specs();
        let mut planner = Planner::with_config(self.shared.config)?;
        let declared = specs.declare_on(&mut planner)?;
        let ids: Box<[BufferId]> = declared.ids().collect();
        let mut arena = Arena::new(self.device.clone(), planner.plan()?)?;
        for (site, &id) in self.shared.table.get_mut().sites.iter().zip(ids.iter()) {
            if site.is_persistent() {
                let bytes = bytemuck::cast_slice::<u64, u8>(&site.data);
                let n = arena.plan().buffer(id)?.bytes().min(bytes.len());
                arena.write_bytes(id, &bytes[..n])?;
            }
        }
        arena.set_rng_state(self.shared.rng.get());
        Ok(Frozen { arena, ids })
    }
}

impl<D: Device> std::fmt::Debug for Recorder<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("device", &self.device.name())
            .field("phases", &self.shared.phases)
            .field("stats", &self.stats())
            .finish()
    }
}
