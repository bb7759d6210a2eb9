//! A hasher for maps keyed by addresses.
//!
//! The comparison models look every request's address up in a map on
//! their worker thread; with std's SipHash that hashing was a fifth of the
//! worker's time (`perf` of `benches/alloc_pair.rs`), and the worker
//! shares the machine's cores with the training thread. Addresses are not
//! chosen by an adversary here, so one multiply does: the product's high
//! half is folded into the low bits, which hold the bucket index (the
//! addresses' own low bits are zero, 512-byte aligned).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-and-fold hashing of one `usize` key.
#[derive(Default, Clone, Copy)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Keys other than one integer (not used here) still hash.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_usize(&mut self, x: usize) {
        self.0 = (self.0 ^ x as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by addresses, hashed by [`AddrHasher`].
pub type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn aligned_addresses_spread_over_the_low_bits() {
        let build = BuildHasherDefault::<AddrHasher>::default();
        let buckets: std::collections::HashSet<u64> = (0..1024usize)
            .map(|i| build.hash_one(0x7f00_0000_0000 + i * 512) & 1023)
            .collect();
        // A hash that kept the addresses' zero low bits would put all of
        // them in one bucket of 1024.
        assert!(buckets.len() > 512, "{} buckets used", buckets.len());
    }

    #[test]
    fn the_map_finds_what_it_holds() {
        let mut m: AddrMap<u32> = AddrMap::default();
        for i in 0..10_000usize {
            m.insert(i * 512, i as u32);
        }
        assert!((0..10_000usize).all(|i| m.get(&(i * 512)) == Some(&(i as u32))));
        assert_eq!(m.get(&1), None);
    }
}
