//! A set of positions `0..len` with predecessor queries in O(log64 len),
//! allocation-free after construction: the serving path asks it which
//! planned block, if any, is live just below an address.

/// Bits per word.
const W: usize = 64;

/// A hierarchy of bit words: level 0 holds one bit per position, each
/// higher level one bit per non-zero word of the level below.
#[derive(Debug, Clone, Default)]
pub struct LiveSet {
    levels: Vec<Vec<u64>>,
    len: usize,
}

impl LiveSet {
    /// An empty set over positions `0..len`.
    pub fn new(len: usize) -> LiveSet {
        let mut levels = Vec::new();
        let mut n = len.max(1);
        loop {
            let words = n.div_ceil(W);
            levels.push(vec![0u64; words]);
            if words == 1 {
                break;
            }
            n = words;
        }
        LiveSet { levels, len }
    }

    /// Number of positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set has no positions at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `pos` is in the set.
    pub fn contains(&self, pos: usize) -> bool {
        pos < self.len && self.levels[0][pos / W] & (1 << (pos % W)) != 0
    }

    /// Adds `pos` (a position at or past `len` is ignored).
    pub fn insert(&mut self, pos: usize) {
        if pos >= self.len {
            return;
        }
        let mut p = pos;
        for level in &mut self.levels {
            let was = level[p / W];
            level[p / W] = was | (1 << (p % W));
            if was != 0 {
                break;
            }
            p /= W;
        }
    }

    /// Removes `pos`.
    pub fn remove(&mut self, pos: usize) {
        if pos >= self.len {
            return;
        }
        let mut p = pos;
        for level in &mut self.levels {
            let word = &mut level[p / W];
            *word &= !(1 << (p % W));
            if *word != 0 {
                break;
            }
            p /= W;
        }
    }

    /// The largest position in the set below `bound`, if any.
    pub fn predecessor(&self, bound: usize) -> Option<usize> {
        let bound = bound.min(self.len);
        if bound == 0 {
            return None;
        }
        // At each level, look for a set bit at or below the last position
        // under the bound; level L + 1 holds one bit per word of level L,
        // so "a word before this one" is a bound one level up.
        let mut last = bound - 1;
        let mut level = 0;
        let found = loop {
            let (word_index, bit) = (last / W, last % W);
            let mask = if bit == W - 1 {
                u64::MAX
            } else {
                (1u64 << (bit + 1)) - 1
            };
            let below = self.levels[level][word_index] & mask;
            if below != 0 {
                break word_index * W + (63 - below.leading_zeros() as usize);
            }
            if word_index == 0 || level + 1 == self.levels.len() {
                return None;
            }
            last = word_index - 1;
            level += 1;
        };
        let mut pos = found;
        while level > 0 {
            level -= 1;
            let word = self.levels[level][pos];
            pos = pos * W + (63 - word.leading_zeros() as usize);
        }
        Some(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_bound_on_a_word_boundary_sees_the_whole_word_below() {
        for len in [64, 128, 4096, 4160] {
            let mut s = LiveSet::new(len);
            s.insert(0);
            assert_eq!(s.predecessor(len), Some(0), "len {len}");
            assert_eq!(s.predecessor(64), Some(0), "len {len}");
            s.insert(63);
            assert_eq!(s.predecessor(64), Some(63), "len {len}");
        }
    }

    #[test]
    fn predecessor_across_levels() {
        let mut s = LiveSet::new(10_000);
        assert_eq!(s.predecessor(10_000), None);
        s.insert(3);
        s.insert(4_200);
        assert_eq!(s.predecessor(4_200), Some(3));
        assert_eq!(s.predecessor(4_201), Some(4_200));
        assert_eq!(s.predecessor(3), None);
        s.remove(3);
        assert_eq!(s.predecessor(4_200), None);
        assert!(s.contains(4_200));
        assert!(!s.contains(3));
    }

    proptest! {
        #[test]
        fn matches_a_btreeset(len in prop_oneof![1usize..300, 1usize..20_000, Just(64usize), Just(4096usize), Just(4097usize)], ops in prop::collection::vec((any::<bool>(), 0usize..20_000, 0usize..20_001), 1..200)) {
            let mut s = LiveSet::new(len);
            let mut model = BTreeSet::new();
            for (add, pos, q) in ops {
                let pos = pos % len;
                if add { s.insert(pos); model.insert(pos); } else { s.remove(pos); model.remove(&pos); }
                let q = q % (len + 1);
                prop_assert_eq!(s.predecessor(q), model.range(..q).next_back().copied());
            }
        }
    }
}
