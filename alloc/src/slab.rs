//! A planned slab being served: the plan's sites at their offsets in one
//! reserved region, and which of them hold a live block.
//!
//! Live blocks never share a byte: a site is served only when no live
//! site's bytes intersect its own, which one predecessor query over the
//! sites sorted by offset answers (live blocks are disjoint, so the live
//! site starting last below the new block's end is the only candidate).

use crate::live_set::LiveSet;
use crate::site_plan::SitePlan;

/// A served slab.
pub struct PlannedSlab {
    /// The plan.
    pub plan: SitePlan,
    /// Address of the slab's first byte.
    pub base: usize,
    /// Bytes of the reserved region (at least the plan's slab).
    pub region_bytes: usize,
    /// Position of each site in offset order.
    position: Vec<u32>,
    /// Offset-ordered sites: `(offset, end, site)`.
    by_offset: Vec<(u64, u64, u32)>,
    /// Per site: the first position whose offset is at or past the site's
    /// end (the bound of its overlap query, fixed by the plan).
    end_bound: Vec<u32>,
    live: LiveSet,
    /// Per site: the step and the bytes of its live block.
    live_block: Vec<(u64, u64)>,
    live_count: usize,
}

/// Why a planned site could not be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The request index is beyond the plan.
    Order,
    /// The site has no slot (its request outlived steps, or another
    /// stream).
    Unplanned,
    /// Larger than the site's capacity.
    Size,
    /// A live block holds some of the site's bytes.
    Overlap,
}

impl PlannedSlab {
    /// Serves `plan` from the `region_bytes` reserved at `base`.
    pub fn new(plan: SitePlan, base: usize, region_bytes: usize) -> PlannedSlab {
        let mut by_offset: Vec<(u64, u64, u32)> = plan
            .sites
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let end = if s.unplanned.is_some() {
                    s.offset
                } else {
                    s.offset + s.slot
                };
                (s.offset, end, k as u32)
            })
            .collect();
        by_offset.sort_unstable();
        let mut position = vec![0u32; plan.sites.len()];
        for (pos, &(_, _, k)) in by_offset.iter().enumerate() {
            position[k as usize] = pos as u32;
        }
        let n = plan.sites.len();
        let end_bound = plan
            .sites
            .iter()
            .map(|s| by_offset.partition_point(|&(o, _, _)| o < s.offset + s.slot) as u32)
            .collect();
        PlannedSlab {
            end_bound,
            plan,
            base,
            region_bytes,
            position,
            by_offset,
            live: LiveSet::new(n),
            live_block: vec![(0, 0); n],
            live_count: 0,
        }
    }

    /// Whether `addr` lies in this slab.
    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.base && ((addr - self.base) as u64) < self.plan.slab_bytes
    }

    /// Live blocks in the slab.
    pub fn live_count(&self) -> usize {
        self.live_count
    }

    /// Serves request `k` of `size` bytes in step `step`: its address.
    pub fn serve(&mut self, k: usize, size: u64, step: u64) -> Result<usize, Refusal> {
        let site = *self.plan.sites.get(k).ok_or(Refusal::Order)?;
        if site.unplanned.is_some() {
            return Err(Refusal::Unplanned);
        }
        if size > site.capacity {
            return Err(Refusal::Size);
        }
        if let Some(p) = self.live.predecessor(self.end_bound[k] as usize)
            && self.by_offset[p].1 > site.offset
        {
            return Err(Refusal::Overlap);
        }
        self.live.insert(self.position[k] as usize);
        self.live_block[k] = (step, size);
        self.live_count += 1;
        Ok(self.base + site.offset as usize)
    }

    /// Frees the live block at `addr`: its site, step and bytes; `None`
    /// when no live block starts there.
    pub fn free(&mut self, addr: usize) -> Option<(usize, u64, u64)> {
        let k = self.live_site_at(addr)?;
        self.live.remove(self.position[k] as usize);
        self.live_count -= 1;
        let (step, size) = self.live_block[k];
        Some((k, step, size))
    }

    /// The site whose live block starts at `addr`.
    pub fn live_site_at(&self, addr: usize) -> Option<usize> {
        if !self.contains(addr) {
            return None;
        }
        let offset = (addr - self.base) as u64;
        let lo = self.by_offset.partition_point(|&(o, _, _)| o < offset);
        let hi = self.by_offset.partition_point(|&(o, _, _)| o <= offset);
        let p = self.live.predecessor(hi)?;
        (p >= lo).then(|| self.by_offset[p].2 as usize)
    }

    /// Live sites with their addresses and bytes, in address order.
    pub fn live_blocks(&self) -> impl Iterator<Item = (usize, usize, u64)> + '_ {
        self.by_offset
            .iter()
            .enumerate()
            .filter(|(p, _)| self.live.contains(*p))
            .map(|(_, &(offset, _, k))| {
                (
                    k as usize,
                    self.base + offset as usize,
                    self.live_block[k as usize].1,
                )
            })
    }
}
