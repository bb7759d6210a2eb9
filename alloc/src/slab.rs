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
    /// Position of each site's slots in offset order (the second one for
    /// a site with an alternate slot, else the first again).
    position: Vec<[u32; 2]>,
    /// Offset-ordered slots: `(offset, end, site)`.
    by_offset: Vec<(u64, u64, u32)>,
    /// Per position: the first position whose offset is at or past the
    /// slot's end (the bound of its overlap query, fixed by the plan).
    end_bound: Vec<u32>,
    live: LiveSet,
    /// Per position: the step and the bytes of its live block.
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
        let mut by_offset: Vec<(u64, u64, u32)> = Vec::with_capacity(plan.sites.len());
        for (k, s) in plan.sites.iter().enumerate() {
            let len = if s.unplanned.is_some() { 0 } else { s.slot };
            by_offset.push((s.offset, s.offset + len, k as u32));
            if let Some(alt) = s.alternate {
                by_offset.push((alt, alt + len, k as u32));
            }
        }
        by_offset.sort_unstable();
        let mut position = vec![[u32::MAX; 2]; plan.sites.len()];
        for (pos, &(offset, _, k)) in by_offset.iter().enumerate() {
            let site = &plan.sites[k as usize];
            let which = usize::from(site.alternate == Some(offset) && site.offset != offset);
            position[k as usize][which] = pos as u32;
        }
        for p in &mut position {
            if p[1] == u32::MAX {
                p[1] = p[0];
            }
        }
        let n = by_offset.len();
        let end_bound = by_offset
            .iter()
            .map(|&(_, end, _)| by_offset.partition_point(|&(o, _, _)| o < end) as u32)
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
        let pos = self.position[k][(step % 2) as usize] as usize;
        let (offset, _, _) = self.by_offset[pos];
        if let Some(p) = self.live.predecessor(self.end_bound[pos] as usize)
            && self.by_offset[p].1 > offset
        {
            return Err(Refusal::Overlap);
        }
        self.live.insert(pos);
        self.live_block[pos] = (step, size);
        self.live_count += 1;
        Ok(self.base + offset as usize)
    }

    /// Frees the live block at `addr`: its site, step and bytes; `None`
    /// when no live block starts there.
    pub fn free(&mut self, addr: usize) -> Option<(usize, u64, u64)> {
        let pos = self.live_position_at(addr)?;
        self.live.remove(pos);
        self.live_count -= 1;
        let (step, size) = self.live_block[pos];
        Some((self.by_offset[pos].2 as usize, step, size))
    }

    /// The position of the live slot whose block starts at `addr`.
    fn live_position_at(&self, addr: usize) -> Option<usize> {
        if !self.contains(addr) {
            return None;
        }
        // Live slots are disjoint, so the live slot starting last at or
        // below the offset is the only one that can start at it.
        let offset = (addr - self.base) as u64;
        let hi = self.by_offset.partition_point(|&(o, _, _)| o <= offset);
        let p = self.live.predecessor(hi)?;
        (self.by_offset[p].0 == offset).then_some(p)
    }

    /// The site whose live block starts at `addr`.
    pub fn live_site_at(&self, addr: usize) -> Option<usize> {
        self.live_position_at(addr)
            .map(|p| self.by_offset[p].2 as usize)
    }

    /// Live sites with their addresses and bytes, in address order.
    pub fn live_blocks(&self) -> impl Iterator<Item = (usize, usize, u64)> + '_ {
        self.by_offset
            .iter()
            .enumerate()
            .filter(|(p, _)| self.live.contains(*p))
            .map(|(p, &(offset, _, k))| {
                (
                    k as usize,
                    self.base + offset as usize,
                    self.live_block[p].1,
                )
            })
    }

    /// The live block starting at `addr`: its site, step and bytes
    /// (stream-safe reuse needs them before the block is freed).
    pub fn live_block_at(&self, addr: usize) -> Option<(usize, u64, u64)> {
        let p = self.live_position_at(addr)?;
        let (step, size) = self.live_block[p];
        Some((self.by_offset[p].2 as usize, step, size))
    }
}
