//! The fallback: tensor-arena's caching-allocator model made live. The
//! model decides sizes, pools, splits and which segments exist; every
//! segment it creates is backed by one real region, and every segment it
//! frees releases that region. Requests the plan does not serve come here.

use std::collections::{BTreeMap, HashMap};

use tensor_arena::caching::{BlockId, CachingAllocator, CachingConfig, SegmentView};

use crate::backing::Backing;
use crate::record::Origin;

/// A live fallback block.
#[derive(Debug, Clone, Copy)]
pub struct FallbackBlock {
    /// The model's handle.
    pub id: BlockId,
    /// Bytes asked for.
    pub size: u64,
    /// Which request made it.
    pub origin: Origin,
    /// The stream id it was allocated on.
    pub stream: u32,
}

/// One backed segment of the model.
#[derive(Debug, Clone, Copy)]
struct Segment {
    len: u64,
    addr: usize,
}

/// The live caching allocator.
pub struct Fallback {
    model: CachingAllocator,
    /// Model address of each segment's start -> its real region.
    segments: BTreeMap<u64, Segment>,
    blocks: HashMap<usize, FallbackBlock>,
    seen_device_allocs: u64,
    seen_device_frees: u64,
}

impl Fallback {
    /// An empty fallback following `config`'s rules.
    pub fn new(config: CachingConfig) -> Fallback {
        Fallback {
            model: CachingAllocator::new(config),
            segments: BTreeMap::new(),
            blocks: HashMap::with_capacity(4096),
            seen_device_allocs: 0,
            seen_device_frees: 0,
        }
    }

    /// Serves `size` bytes on `stream`; `None` when neither the cache nor
    /// the backing has room (after releasing the cache once).
    pub fn malloc(
        &mut self,
        backing: &mut dyn Backing,
        size: u64,
        stream: u32,
        origin: Origin,
    ) -> Option<usize> {
        for attempt in 0..2 {
            let Ok(id) = self.model.malloc_on(size, stream) else {
                return None;
            };
            if self.sync(backing)
                && let Some(addr) = self.real_address(id)
            {
                self.blocks.insert(
                    addr,
                    FallbackBlock {
                        id,
                        size,
                        origin,
                        stream,
                    },
                );
                return Some(addr);
            }
            // The backing refused a segment the model made: undo, give the
            // cache back to the device and try once more.
            self.model.free(id);
            self.model.empty_cache();
            self.sync(backing);
            if attempt == 1 {
                break;
            }
        }
        None
    }

    /// Frees the block at `addr`; `None` when no live block starts there.
    pub fn free(&mut self, backing: &mut dyn Backing, addr: usize) -> Option<FallbackBlock> {
        let block = self.blocks.remove(&addr)?;
        self.model.free(block.id);
        self.sync(backing);
        Some(block)
    }

    /// Whether `addr` lies in one of the fallback's regions.
    pub fn owns_region_of(&self, addr: usize) -> bool {
        self.segments
            .values()
            .any(|s| addr >= s.addr && addr < s.addr + s.len as usize)
    }

    /// Returns every entirely free cached segment to the backing.
    pub fn release_cached(&mut self, backing: &mut dyn Backing) {
        self.model.empty_cache();
        self.sync(backing);
    }

    /// Bytes of live blocks' requests, the blocks and their origins.
    pub fn live(&self) -> impl Iterator<Item = (&usize, &FallbackBlock)> {
        self.blocks.iter()
    }

    /// The live block at `addr`.
    pub fn block(&self, addr: usize) -> Option<&FallbackBlock> {
        self.blocks.get(&addr)
    }

    /// Live blocks.
    pub fn live_count(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes the fallback holds from the backing.
    pub fn reserved_bytes(&self) -> u64 {
        self.model.stats().reserved_bytes.current
    }

    /// The model's counters.
    pub fn model(&self) -> &CachingAllocator {
        &self.model
    }

    /// Segments as the model lists them, with their real addresses.
    pub fn segments(&self) -> Vec<(usize, SegmentView)> {
        self.model
            .segments()
            .into_iter()
            .filter_map(|seg| {
                let start = seg.blocks.first()?.address;
                let real = self.segments.get(&start)?.addr;
                Some((real, seg))
            })
            .collect()
    }

    /// Drops every block and segment, returning their regions.
    pub fn clear(&mut self, backing: &mut dyn Backing) {
        for seg in self.segments.values() {
            backing.release(seg.addr);
        }
        let config = *self.model.config();
        *self = Fallback::new(config);
    }

    fn real_address(&self, id: BlockId) -> Option<usize> {
        let addr = self.model.address(id)?;
        let (&start, seg) = self.segments.range(..=addr).next_back()?;
        (addr < start + seg.len).then(|| seg.addr + (addr - start) as usize)
    }

    /// Brings the real regions in line with the model's segments after a
    /// call that may have created or freed some. `false` when the backing
    /// refused a new one.
    fn sync(&mut self, backing: &mut dyn Backing) -> bool {
        let stats = self.model.stats();
        if stats.num_device_alloc == self.seen_device_allocs
            && stats.num_device_free == self.seen_device_frees
        {
            return true;
        }
        self.seen_device_allocs = stats.num_device_alloc;
        self.seen_device_frees = stats.num_device_free;
        let current: BTreeMap<u64, u64> = self
            .model
            .segments()
            .iter()
            .filter_map(|s| Some((s.blocks.first()?.address, s.mapped_bytes())))
            .collect();
        let gone: Vec<u64> = self
            .segments
            .iter()
            .filter(|(start, seg)| current.get(start) != Some(&seg.len))
            .map(|(&start, _)| start)
            .collect();
        for start in gone {
            if let Some(seg) = self.segments.remove(&start) {
                backing.release(seg.addr);
            }
        }
        let mut ok = true;
        for (&start, &len) in &current {
            if self.segments.contains_key(&start) {
                continue;
            }
            match backing.reserve(len as usize) {
                Ok(addr) => {
                    self.segments.insert(start, Segment { len, addr });
                }
                Err(_) => ok = false,
            }
        }
        ok
    }
}
