//! Blocks, their slot table and the free-block pools.
//!
//! Blocks live in a slot table and point at their segment neighbours by
//! index, the way torch's `Block` keeps `prev`/`next` pointers. A slot
//! carries a generation so that a stale [`BlockId`](super::BlockId) is
//! detected instead of freeing someone else's block.

use std::collections::BTreeSet;
use std::ops::{Index, IndexMut};

/// "No block": the end of a segment's chain, or a plain segment.
pub(super) const NONE: u32 = u32::MAX;

/// Free blocks ordered as torch's `BlockComparatorSize`: stream, size,
/// address (the slot index is the payload).
pub(super) type SizeKey = (u32, u64, u64, u32);
/// Unmapped ranges of expandable segments ordered as
/// `BlockComparatorAddress`: stream, address.
pub(super) type AddrKey = (u32, u64, u32);

/// A piece of a segment: handed out, cached free, or (in an expandable
/// segment) address space without pages behind it.
#[derive(Debug, Clone)]
pub(super) struct Block {
    pub addr: u64,
    pub size: u64,
    /// Bytes the caller asked for, while allocated.
    pub requested: u64,
    pub stream: u32,
    pub small: bool,
    pub allocated: bool,
    /// Always true outside expandable segments.
    pub mapped: bool,
    /// Index of the expandable segment, or [`NONE`].
    pub expandable: u32,
    pub prev: u32,
    pub next: u32,
    pub generation: u32,
    pub live: bool,
    /// The pool's `get_free_block` count when the block last entered the
    /// pool: its age for garbage collection is the count now minus this
    /// (`gc_count` in torch_npu, `gc_count_base` in PyTorch).
    pub gc_base: u64,
}

impl Block {
    pub fn is_split(&self) -> bool {
        self.prev != NONE || self.next != NONE
    }

    pub fn is_expandable(&self) -> bool {
        self.expandable != NONE
    }

    pub fn size_key(&self, index: u32) -> SizeKey {
        (self.stream, self.size, self.addr, index)
    }

    pub fn addr_key(&self, index: u32) -> AddrKey {
        (self.stream, self.addr, index)
    }
}

/// Slot table of blocks; freed slots are reused.
#[derive(Debug, Clone, Default)]
pub(super) struct Blocks {
    slots: Vec<Block>,
    vacant: Vec<u32>,
}

impl Blocks {
    pub fn insert(&mut self, block: Block) -> u32 {
        match self.vacant.pop() {
            Some(i) => {
                let generation = self.slots[i as usize].generation.wrapping_add(1);
                self.slots[i as usize] = Block {
                    generation,
                    live: true,
                    ..block
                };
                i
            }
            None => {
                self.slots.push(Block {
                    live: true,
                    ..block
                });
                (self.slots.len() - 1) as u32
            }
        }
    }

    pub fn remove(&mut self, index: u32) {
        let b = &mut self.slots[index as usize];
        b.live = false;
        b.generation = b.generation.wrapping_add(1);
        self.vacant.push(index);
    }

    pub fn get(&self, index: u32) -> Option<&Block> {
        self.slots.get(index as usize).filter(|b| b.live)
    }

    /// Live blocks with their slot indices.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Block)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, b)| b.live)
            .map(|(i, b)| (i as u32, b))
    }
}

impl Index<u32> for Blocks {
    type Output = Block;
    fn index(&self, index: u32) -> &Block {
        &self.slots[index as usize]
    }
}

impl IndexMut<u32> for Blocks {
    fn index_mut(&mut self, index: u32) -> &mut Block {
        &mut self.slots[index as usize]
    }
}

/// One of the two pools (small: blocks up to 1 MiB; large: the rest).
#[derive(Debug, Clone, Default)]
pub(super) struct Pool {
    /// Cached free, mapped blocks.
    pub blocks: BTreeSet<SizeKey>,
    /// Unmapped ranges of expandable segments.
    pub unmapped: BTreeSet<AddrKey>,
    /// Searches of this pool so far (`get_free_blocks_call_count`).
    pub gc_calls: u64,
}
