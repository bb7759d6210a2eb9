//! The recorder: records steps, freezes into a planned arena, and can go
//! back to recording between epochs.

use super::shared_state::SharedState;
use super::site::{self, Site};
use super::specs::SpecSet;
use super::step::RecordStep;
use crate::arena::Arena;
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::ops::RngState;
use crate::plan::{Buffer, BufferId, Mode, Phase, Plan, Planner, PlannerConfig, next_owner_id};

/// A typed, `Copy` handle to a persistent buffer declared on a
/// [`Recorder`]: the [`Buffer`] handle every step type leases
/// ([`RecordStep::lease`], and [`StepScope::lease`](crate::StepScope::lease)
/// in code written for both).
pub type Persistent<T> = Buffer<T>;

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
            plans: 0,
        }
    }

    /// A recorder whose plans use `config` (checked as
    /// [`Planner::with_config`] checks it).
    pub fn with_config(device: D, config: PlannerConfig) -> Result<Recorder<D>> {
        Planner::with_config(config)?;
        let mut rec = Recorder::new(device);
        rec.shared = SharedState::new(rec.shared.id, config);
        Ok(rec)
    }

    /// Declares a mode: a kind of step (`train`, `eval`, ...) with its own
    /// phases and sites, sharing the persistent buffers (see
    /// [`Planner::mode`]). Steps of a mode run with
    /// [`step_in`](Recorder::step_in); what they request is learned for
    /// that mode, and the plan lets sites of different modes share bytes.
    /// A site name may be used in several modes: each mode learns its own.
    pub fn mode(&mut self, name: &str) -> Result<Mode> {
        let index = self.shared.book.mode(name)?;
        Ok(Mode {
            planner: self.shared.id,
            index,
        })
    }

    /// The default mode, the one [`step`](Recorder::step) runs in.
    pub fn default_mode(&self) -> Mode {
        Mode {
            planner: self.shared.id,
            index: 0,
        }
    }

    fn mode_index(&self, mode: Mode) -> Result<u16> {
        if mode.planner != self.shared.id || mode.index() >= self.shared.book.mode_count() {
            return Err(Error::ForeignMode {
                index: mode.index(),
                owner: "recorder",
            });
        }
        Ok(mode.index)
    }

    /// Declares the next phase of a step of the default mode; phases run
    /// in declaration order. Declare them all before the first step.
    pub fn phase(&mut self, name: &str) -> Result<Phase> {
        self.phase_in(self.default_mode(), name)
    }

    /// Declares the next phase of a step of `mode`.
    pub fn phase_in(&mut self, mode: Mode, name: &str) -> Result<Phase> {
        let m = self.mode_index(mode)?;
        let index = self.shared.book.phase(m, name)?;
        Ok(Phase {
            planner: self.shared.id,
            mode: m,
            // Fits: the book numbers phases in u16.
            index: index as u16,
        })
    }

    /// Declares a persistent buffer (weights, optimizer state): its contents
    /// survive steps, recording and freezing, and every mode shares it.
    /// Declaring the same name again with the same element type and shape
    /// (as after [`preload`](Recorder::preload)) returns the same handle.
    pub fn persistent<T: Element>(&mut self, name: &str, shape: &[usize]) -> Result<Buffer<T>> {
        let handle = |index: usize| -> Result<Buffer<T>> {
            let index = u32::try_from(index).map_err(|_| Error::ForeignHandle {
                index,
                owner: "recorder",
            })?;
            Ok(Buffer::new(BufferId {
                planner: self.shared.id,
                index,
                dtype: T::DTYPE,
            }))
        };
        let known = self.shared.book.len();
        let index = self.shared.book.persistent(name, T::DTYPE, shape)?;
        if index >= known {
            let padded = site::padded(name, shape, self.shared.config.default_rounding)?;
            self.shared
                .ensure_capacity(index, T::DTYPE, padded.elements())?;
        }
        handle(index)
    }

    /// Declares up front the largest shape the site `name` of `mode` must
    /// hold, so the worst case need not be recorded: the site's buffer is
    /// planned for at least `max_shape` (by the site's rule: its element
    /// count, or each dimension for a site that opted in with
    /// [`per_dimension`](Recorder::per_dimension)); recorded requests can
    /// still raise it. Its lifetime is still learned; a site bounded but
    /// never requested is planned for the whole step of its mode.
    ///
    /// ```
    /// use tensor_arena::{HostDevice, Recorder};
    /// let mut rec = Recorder::new(HostDevice::new());
    /// let m = rec.default_mode();
    /// rec.bound::<f32>(m, "flat", &[32 * 128, 64])?;
    /// rec.step(|s| s.temp::<f32>("flat", &[17, 64]).map(drop))?;
    /// rec.freeze()?;
    /// // Never recorded, but within the declared bound.
    /// rec.step(|s| s.temp::<f32>("flat", &[32 * 128, 64]).map(drop))?;
    /// # Ok::<(), tensor_arena::Error>(())
    /// ```
    pub fn bound<T: Element>(&mut self, mode: Mode, name: &str, max_shape: &[usize]) -> Result<()> {
        let m = self.mode_index(mode)?;
        self.shared.book.bound(m, name, T::DTYPE, max_shape)
    }

    /// Opts the site `name` of `mode` in to per-dimension limits
    /// ([`ShapeRule::Dims`]): it learns the largest of each dimension over
    /// its requests (they must keep the number of dimensions), and once
    /// frozen refuses a view beyond any of them, even one whose element
    /// count would fit. Sites without it are sized, and checked, by element
    /// count. Call it before the site's first request.
    pub fn per_dimension<T: Element>(&mut self, mode: Mode, name: &str) -> Result<()> {
        let m = self.mode_index(mode)?;
        self.shared.book.per_dimension(m, name, T::DTYPE)
    }

    /// Merges a spec set (say, loaded from a checked-in file) into what the
    /// recorder knows, as if its steps had been recorded here: maxima and
    /// lifetimes unite with the recorded ones, persistent buffers are
    /// declared. The set's phases must be the recorder's, in order. Then
    /// [`freeze`](Recorder::freeze) plans without any recording step.
    pub fn preload(&mut self, specs: &SpecSet) -> Result<()> {
        let known = self.shared.book.len();
        self.shared.book.preload(specs, "Recorder::preload")?;
        // Persistent buffers the specs declared get their pool memory.
        let default = self.shared.config.default_rounding;
        for (index, site) in self.shared.book.sites().iter().enumerate().skip(known) {
            if site.mode.is_none() {
                let rounding = site.rounding.unwrap_or(default);
                let padded = site::padded(&site.name, &site.shape, rounding)?;
                self.shared
                    .ensure_capacity(index, site.dtype, padded.elements())?;
            }
        }
        Ok(())
    }

    /// Runs one step of the default mode. While recording, its requests
    /// are served from the pool and recorded; once frozen, they lease
    /// planned buffers and allocate nothing. Leases made in `f` cannot
    /// escape it.
    pub fn step<R>(&mut self, f: impl FnOnce(&RecordStep<'_, D>) -> R) -> R {
        self.run_step(0, f)
    }

    /// Runs one step of `mode` (see [`Recorder::mode`]); fails with
    /// [`Error::ForeignMode`] if `mode` comes from another recorder.
    pub fn step_in<R, E: From<Error>>(
        &mut self,
        mode: Mode,
        f: impl FnOnce(&RecordStep<'_, D>) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        let m = self.mode_index(mode)?;
        self.run_step(m, f)
    }

    fn run_step<R>(&mut self, mode: u16, f: impl FnOnce(&RecordStep<'_, D>) -> R) -> R {
        let recording = self.frozen.is_none();
        if recording {
            self.shared.begin_recording_step(mode);
        }
        let out = {
            let frozen = self.frozen.as_mut().map(|Frozen { arena, ids }| {
                let ids: &[BufferId] = ids;
                // The plan has the recorder's modes, in the same order
                // (modes cannot be added while frozen).
                (arena.open(mode), ids)
            });
            let step = RecordStep {
                shared: &self.shared,
                mode,
                frozen,
            };
            f(&step)
        };
        if recording {
            self.shared.book.end_step();
        }
        out
    }

    /// Steps the learned specs stand for (see [`RecordStats::learned_steps`]).
    fn learned_steps(&self) -> u64 {
        self.shared.book.learned_steps()
    }

    /// Everything known so far as a spec set: the modes and phases,
    /// persistent buffers as declared, and every site sized by a request or
    /// a bound, with its mode, the shape its buffer must hold, its shape
    /// rule, its phase span (or the whole step, when its mode has no phases
    /// or it was never requested) and the number of steps it was learned
    /// from. In first-seen order.
    pub fn specs(&self) -> SpecSet {
        self.shared.book.specs()
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
        for (i, site) in self.shared.book.table_mut().sites.iter().enumerate() {
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
        self.shared.book.rerecord();
        let pool = &self.shared.pool;
        let pools = self.shared.pools.get_mut();
        for (i, data) in saved {
            pool.allocations.set(pool.allocations.get() + 1);
            pool.bytes.set(pool.bytes.get() + data.len() as u64 * 8);
            if pools.len() <= i {
                pools.resize_with(i + 1, Vec::new);
            }
            pools[i] = data;
        }
        Ok(())
    }

    fn check_handle<T: Element>(&self, buffer: Buffer<T>) -> Result<usize> {
        let index = buffer.id.index();
        let persistent = self
            .shared
            .book
            .table()
            .sites
            .get(index)
            .is_some_and(Site::is_persistent);
        if buffer.id.planner != self.shared.id || !persistent {
            return Err(Error::ForeignHandle {
                index,
                owner: "recorder",
            });
        }
        Ok(index)
    }

    /// Copies `data` into a persistent buffer, outside any step. `data`
    /// must hold exactly its declared shape; see
    /// [`write_prefix`](Recorder::write_prefix).
    pub fn write<T: Element>(&mut self, buffer: Buffer<T>, data: &[T]) -> Result<()> {
        self.copy_exact("write", buffer, data.len())?;
        self.write_prefix(buffer, data)
    }

    /// Copies `data` into the first `data.len()` elements of a persistent
    /// buffer, outside any step: a partial [`write`](Recorder::write), up
    /// to the buffer's capacity.
    pub fn write_prefix<T: Element>(&mut self, buffer: Buffer<T>, data: &[T]) -> Result<()> {
        let index = self.check_handle(buffer)?;
        if let Some(f) = &mut self.frozen {
            let b = typed(&f.ids, buffer)?;
            return f.arena.write_prefix(b, data);
        }
        let pooled = self.pool_slice::<T>(index, data.len())?;
        pooled.copy_from_slice(data);
        Ok(())
    }

    /// Copies a persistent buffer into `out`, outside any step. `out` must
    /// hold exactly its declared shape; see
    /// [`read_prefix`](Recorder::read_prefix).
    pub fn read<T: Element>(&mut self, buffer: Buffer<T>, out: &mut [T]) -> Result<()> {
        self.copy_exact("read", buffer, out.len())?;
        self.read_prefix(buffer, out)
    }

    /// Copies the first `out.len()` elements of a persistent buffer into
    /// `out`, outside any step.
    pub fn read_prefix<T: Element>(&mut self, buffer: Buffer<T>, out: &mut [T]) -> Result<()> {
        let index = self.check_handle(buffer)?;
        if let Some(f) = &mut self.frozen {
            let b = typed(&f.ids, buffer)?;
            return f.arena.read_prefix(b, out);
        }
        let pooled = self.pool_slice::<T>(index, out.len())?;
        out.copy_from_slice(pooled);
        Ok(())
    }

    fn copy_exact<T: Element>(
        &self,
        op: &'static str,
        buffer: Buffer<T>,
        len: usize,
    ) -> Result<()> {
        let index = self.check_handle(buffer)?;
        let table = self.shared.book.table();
        let site = &table.sites[index];
        let expected: usize = site.size.max().iter().product();
        if len != expected {
            return Err(Error::CopyLength {
                op,
                buffer: site.name.to_string(),
                given: len,
                expected,
                shape: site.size.max.to_vec(),
            });
        }
        Ok(())
    }

    /// The first `len` elements of a persistent site's pool memory, if its
    /// capacity holds them.
    fn pool_slice<T: Element>(&mut self, index: usize, len: usize) -> Result<&mut [T]> {
        let default = self.shared.config.default_rounding;
        let table = self.shared.book.table();
        let site = table.sites.get(index).ok_or(Error::ForeignHandle {
            index,
            owner: "recorder",
        })?;
        let padded = site::padded(
            &site.name,
            site.size.max(),
            site.rounding.unwrap_or(default),
        )?;
        let capacity = padded.elements();
        let pools = self.shared.pools.get_mut();
        let data = pools.get_mut(index).map_or(&mut [][..], Vec::as_mut_slice);
        let all = bytemuck::cast_slice_mut::<u64, T>(data);
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
            recorded_steps: self.shared.book.recorded_steps(),
            learned_steps: self.learned_steps(),
            pool_requests: pool.requests.get(),
            pool_allocations: pool.allocations.get(),
            pool_bytes: pool.bytes.get(),
            sites: self.shared.book.len(),
            plans: self.plans,
            frozen: self.frozen.is_some(),
        }
    }
}

fn typed<T: Element>(ids: &[BufferId], buffer: Buffer<T>) -> Result<Buffer<T>> {
    let index = buffer.id.index();
    ids.get(index)
        .copied()
        .and_then(BufferId::typed::<T>)
        .ok_or(Error::ForeignHandle {
            index,
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
            self.shared.pools.get_mut().clear();
            self.shared.book.freeze();
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
        // The specs list the sized sites in table order; a site never sized
        // (opted in to per-dimension limits, never requested) has no buffer.
        let mut planned = declared.ids();
        let table = self.shared.book.table();
        let pools = self.shared.pools.borrow();
        let none = BufferId {
            planner: 0,
            index: u32::MAX,
            dtype: DType::U8,
        };
        let ids: Box<[BufferId]> = table
            .sites
            .iter()
            .map(|s| match !s.size.is_sized() {
                true => none,
                false => planned.next().unwrap_or(none),
            })
            .collect();
        let mut arena = Arena::new(self.device.clone(), planner.plan()?)?;
        for (i, (site, &id)) in table.sites.iter().zip(ids.iter()).enumerate() {
            if site.is_persistent() {
                let data = pools.get(i).map_or(&[][..], Vec::as_slice);
                let bytes = bytemuck::cast_slice::<u64, u8>(data);
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
            .field("modes", &self.shared.book.mode_names().collect::<Vec<_>>())
            .field("stats", &self.stats())
            .finish()
    }
}
