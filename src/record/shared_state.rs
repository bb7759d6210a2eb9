//! The recorder's state shared with its steps and leases: the bookkeeping
//! ([`SiteBook`]), and, while recording, the host pools that serve each
//! site, the random stream and the pool counters. Steps reach it through
//! `&`, so everything that changes inside a step sits in a `Cell` or
//! `RefCell` whose borrows never outlive a call.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::lease::Pooled;
use super::site_book::SiteBook;
use crate::dtype::{DType, Element};
use crate::error::{Available, Error, Result};
use crate::ops::RngState;
use crate::plan::PlannerConfig;

/// Running totals of the recording pool.
#[derive(Debug, Default)]
pub(crate) struct PoolCounters {
    pub requests: Cell<u64>,
    pub allocations: Cell<u64>,
    pub bytes: Cell<u64>,
}

#[derive(Debug)]
pub(crate) struct SharedState {
    /// Identity of the recorder's mode, phase and buffer handles.
    pub id: u64,
    pub config: PlannerConfig,
    pub book: SiteBook,
    /// Recording pool memory of each site, by site index (taken out while
    /// leased). Sized in `u64` words so that every element type is aligned.
    pub pools: RefCell<Vec<Vec<u64>>>,
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
            book: SiteBook::new(config.default_rounding),
            pools: RefCell::new(Vec::new()),
            rng: Cell::new(RngState::default()),
            pool: PoolCounters::default(),
        }
    }

    /// The name of mode `mode`.
    pub fn mode_name(&self, mode: u16) -> &str {
        self.book.mode_name(mode)
    }

    /// Serves a temporary of `shape` for `name` in the current mode from
    /// the pool, recording the request. Fails, recording nothing, if the
    /// request does not fit the site's earlier ones (element type; number
    /// of dimensions for a per-dimension site), the site is already leased
    /// or its memory cannot grow.
    pub fn request<T: Element>(&self, name: &str, shape: &[usize]) -> Result<Pooled<'_, T>> {
        let granted = self
            .book
            .request(name, T::DTYPE, shape, |index, elements| {
                self.ensure_capacity(index, T::DTYPE, elements)
            })?;
        self.pool.requests.set(self.pool.requests.get() + 1);
        let site = self.site_name(granted.index);
        let data = self.take_pool(granted.index);
        Ok(Pooled::new(self, site, data, granted, shape))
    }

    /// Leases the declared persistent buffer `index` from the pool.
    pub fn lease_persistent<T: Element>(&self, index: usize) -> Result<Pooled<'_, T>> {
        let (shape, granted) = self.book.lease_persistent(index, |index, elements| {
            self.ensure_capacity(index, T::DTYPE, elements)
        })?;
        let site = self.site_name(index);
        let data = self.take_pool(index);
        Ok(Pooled::new(self, site, data, granted, &shape))
    }

    fn site_name(&self, index: usize) -> Arc<str> {
        // The book granted `index`: the site exists.
        self.book
            .table()
            .sites
            .get(index)
            .map_or_else(|| Arc::from(""), |s| Arc::clone(&s.name))
    }

    fn take_pool(&self, index: usize) -> Vec<u64> {
        self.pools
            .borrow_mut()
            .get_mut(index)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Grows site `index`'s pool memory to hold `elements` of `dtype`
    /// (zero-filled), the only place the pool allocates.
    pub fn ensure_capacity(&self, index: usize, dtype: DType, elements: usize) -> Result<()> {
        let oom = |needed| Error::OutOfMemory {
            device: "recording pool".to_owned(),
            needed,
            available: Available::Unknown,
        };
        let bytes = elements
            .checked_mul(dtype.size())
            .ok_or_else(|| oom(usize::MAX))?;
        let words = bytes.div_ceil(8);
        let mut pools = self.pools.borrow_mut();
        if pools.len() <= index {
            pools.resize_with(index + 1, Vec::new);
        }
        let data = &mut pools[index];
        if data.len() < words {
            let more = words - data.len();
            data.try_reserve_exact(more).map_err(|_| oom(bytes))?;
            data.resize(words, 0);
            self.pool.allocations.set(self.pool.allocations.get() + 1);
            self.pool
                .bytes
                .set(self.pool.bytes.get() + (more * 8) as u64);
        }
        Ok(())
    }

    /// Takes back a pooled lease's memory and records the phase it ended in.
    pub fn release(&self, index: usize, data: Vec<u64>) {
        // Never contended: no borrow of the pools outlives a call.
        if let Ok(mut pools) = self.pools.try_borrow_mut()
            && let Some(slot) = pools.get_mut(index)
        {
            *slot = data;
        }
        self.book.release(index);
    }

    /// Starts a recording step in mode `mode`: its first phase, and no site
    /// leased (leases leaked with `mem::forget` took their memory with
    /// them; the site allocates afresh).
    pub fn begin_recording_step(&self, mode: u16) {
        self.book.begin_step(mode);
    }
}
