//! Maps keyed by addresses (or 8-byte granules) of the recorded program: the race pass's shadow
//! memory and the reads-from writers of `hb.rs`. Per-event lookups, so the hash is a
//! multiply-xorshift rather than SipHash; the addresses come from an untrusted trace, so it is
//! keyed by a random value drawn per map, and a trace cannot be crafted to make every key
//! collide.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// A map from addresses to `V`.
pub type AddrMap<V> = HashMap<u64, V, AddrHasherBuilder>;

/// A keyed multiply-xorshift hash of an address. Addresses come from an untrusted trace, so the
/// key is drawn per map: a trace cannot be crafted to collide every key.
#[derive(Clone, Copy, Debug)]
pub struct AddrHasherBuilder {
    key: u64,
}

impl AddrHasherBuilder {
    pub fn new() -> Self {
        let key = std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64) | 1;
        Self { key }
    }
}

impl Default for AddrHasherBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BuildHasher for AddrHasherBuilder {
    type Hasher = AddrHasher;
    fn build_hasher(&self) -> AddrHasher {
        AddrHasher {
            key: self.key,
            state: 0,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct AddrHasher {
    key: u64,
    state: u64,
}

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        let h = (self.state ^ self.key).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.state = self.state.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.state = self.state.rotate_left(23) ^ n;
    }
}
