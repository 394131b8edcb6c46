//! A table keyed by granule (or by page of granules: the shadow's index of pages,
//! `pages.rs`): open addressing with linear probing over one array of slots, each a key beside
//! its value, so that the usual lookup — a key already held, found at its home — reads one
//! slot, with no allocation, no control bytes and no hasher state to build per access.
//!
//! Keys come from an untrusted trace, so the hash is keyed by a random value drawn per
//! table (as foldhash does) before the multiplication whose high bits pick the slot: a
//! trace cannot be crafted to make its granules collide. The table is at most three quarters
//! full; removal shifts the following run back (no tombstones), so a table whose granules come
//! and go (heap blocks freed and reused) never fills up with dead slots.

use std::hash::BuildHasher;

/// No granule. A slot holds its granule plus one (`addr >> 3` is below 2^61), so that an
/// empty slot is all zero bytes with an empty cell: a table freshly allocated is zeroed
/// memory the system maps on first touch, and the slots of a sparse table that no probe
/// reaches cost no resident memory.
const EMPTY: u64 = 0;

/// The smallest table allocated (slots).
const MIN_SLOTS: usize = 64;

/// A granule's key and its cell, side by side: the probe that finds the key has the cell's
/// first bytes in the same cache line.
#[derive(Debug, Clone, Default)]
struct Slot<V> {
    /// The granule plus one, or [`EMPTY`].
    key: u64,
    cell: V,
}

/// Bytes a slot of a table of `V` takes (what the shadow's budget counts per slot of its
/// index of pages).
pub const fn slot_bytes<V>() -> usize {
    std::mem::size_of::<Slot<V>>()
}

/// Cells of type `V` keyed by granule.
#[derive(Debug)]
pub struct GranuleTable<V> {
    slots: Vec<Slot<V>>,
    len: usize,
    /// log2 of the slots (0 while nothing is allocated).
    bits: u32,
    seed: u64,
}

impl<V: Default> Default for GranuleTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Default> GranuleTable<V> {
    pub fn new() -> Self {
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x6a09_e667_u64);
        GranuleTable {
            slots: Vec::new(),
            len: 0,
            bits: 0,
            seed,
        }
    }

    /// Granules held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Slots allocated (held or free).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Whether holding one more granule would grow the table (past three quarters full).
    #[inline(always)]
    fn at_load_limit(&self) -> bool {
        (self.len + 1) * 4 > self.slots.len() * 3
    }

    /// The slots the table would have after holding one more granule.
    pub fn slots_for_one_more(&self) -> usize {
        if self.at_load_limit() {
            (self.slots.len() * 2).max(MIN_SLOTS)
        } else {
            self.slots.len()
        }
    }

    #[inline]
    fn home(&self, granule: u64) -> usize {
        let h = (granule ^ self.seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - self.bits)) as usize
    }

    /// The cell of `granule`, a fresh one (`V::default()`) if it had none. Always inlined:
    /// every access looks its granule up, and where the check was compiled apart (the split
    /// race pass's back) the call left out of it cost some 20 instructions an access.
    #[inline(always)]
    pub fn cell(&mut self, granule: u64) -> &mut V {
        if self.at_load_limit() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let key = granule + 1;
        let mut i = self.home(granule);
        loop {
            let k = self.slots[i].key;
            if k == key {
                return &mut self.slots[i].cell;
            }
            if k == EMPTY {
                self.slots[i].key = key;
                self.len += 1;
                return &mut self.slots[i].cell;
            }
            i = (i + 1) & mask;
        }
    }

    fn slot_of(&self, granule: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.slots.len() - 1;
        let key = granule + 1;
        let mut i = self.home(granule);
        loop {
            let k = self.slots[i].key;
            if k == key {
                return Some(i);
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Drops the cell of `granule`, if any, and hands it back.
    pub fn remove(&mut self, granule: u64) -> Option<V> {
        let i = self.slot_of(granule)?;
        let cell = std::mem::take(&mut self.slots[i].cell);
        self.vacate(i);
        Some(cell)
    }

    /// Empties slot `i`, then moves back every later key of its run that may live closer to
    /// its home, so that no lookup stops early at the hole.
    fn vacate(&mut self, mut hole: usize) {
        let mask = self.slots.len() - 1;
        self.slots[hole] = Slot::default();
        self.len -= 1;
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let k = self.slots[i].key;
            if k == EMPTY {
                return;
            }
            let home = self.home(k - 1);
            // `k` may move to the hole when its home is not in (hole, i], cyclically.
            let stays = if hole <= i {
                hole < home && home <= i
            } else {
                hole < home || home <= i
            };
            if !stays {
                // The hole is empty (`EMPTY` and a default cell): swapped, slot `i` is too.
                self.slots.swap(hole, i);
                hole = i;
            }
        }
    }

    fn allocate(&mut self, bits: u32) {
        let slots = 1usize << bits;
        self.bits = bits;
        // Written as the default slot (all zero bytes) over and over, the allocation is
        // zeroed memory that the system maps on first touch.
        self.slots = std::iter::repeat_with(Slot::default).take(slots).collect();
    }

    #[cold]
    fn grow(&mut self) {
        let bits = if self.bits == 0 {
            MIN_SLOTS.trailing_zeros()
        } else {
            self.bits + 1
        };
        let old = std::mem::take(&mut self.slots);
        self.len = 0;
        self.allocate(bits);
        for s in old {
            if s.key != EMPTY {
                *self.cell(s.key - 1) = s.cell;
            }
        }
    }

    /// The cell of `granule`, if it has one.
    pub fn get(&self, granule: u64) -> Option<&V> {
        self.slot_of(granule).map(|i| &self.slots[i].cell)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foldhash::{HashMap, HashMapExt};

    #[test]
    fn behaves_as_a_map_through_inserts_and_removals() {
        let mut t: GranuleTable<u64> = GranuleTable::new();
        let mut want: HashMap<u64, u64> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Keys clustered, as granules of one block are, and sometimes far apart.
            let g = if x % 3 == 0 {
                x >> 3
            } else {
                0x1000 + x % 3000
            };
            if x % 5 < 2 {
                t.remove(g);
                want.remove(&g);
            } else {
                *t.cell(g) += step;
                *want.entry(g).or_default() += step;
            }
        }
        assert_eq!(t.len(), want.len());
        for (g, v) in &want {
            assert_eq!(t.get(*g), Some(v), "granule {g:#x}");
        }
        for g in 0x1000..0x1000 + 3000 {
            assert_eq!(t.get(g), want.get(&g));
        }
    }

    /// One operation on a table, on a granule picked among a few clustered ones, the lowest
    /// and the highest a trace can name (a slot holds its granule plus one).
    #[derive(Clone, Debug)]
    enum Op {
        Cell(u64, u64),
        Remove(u64),
    }

    fn granule() -> impl proptest::strategy::Strategy<Value = u64> {
        use proptest::prelude::*;
        prop_oneof![
            8 => 0x2000..0x2100u64,
            1 => Just(0u64),
            1 => Just((1u64 << 61) - 1),
            1 => any::<u64>().prop_map(|g| g >> 3),
        ]
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            8 => (granule(), any::<u64>()).prop_map(|(g, v)| Op::Cell(g, v)),
            4 => granule().prop_map(Op::Remove),
        ]
    }

    proptest::proptest! {
        /// The table of slots (key beside value) holds what a map holds through every
        /// operation the index of pages makes, keys 0 and 2^61 - 1 included, and says how
        /// many slots one more key takes before it grows.
        #[test]
        fn slots_hold_what_a_map_holds(ops in proptest::collection::vec(op(), 1..800)) {
            let mut t: GranuleTable<u64> = GranuleTable::new();
            let mut want: HashMap<u64, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Cell(g, v) => {
                        let (after, held) = (t.slots_for_one_more(), want.contains_key(&g));
                        *t.cell(g) ^= v;
                        if !held {
                            proptest::prop_assert_eq!(t.slots(), after);
                        }
                        *want.entry(g).or_default() ^= v;
                    }
                    Op::Remove(g) => {
                        proptest::prop_assert_eq!(t.remove(g), want.remove(&g));
                    }
                }
                proptest::prop_assert_eq!(t.len(), want.len());
                proptest::prop_assert!(t.len() * 4 <= t.slots() * 3);
            }
            for (g, v) in &want {
                proptest::prop_assert_eq!(t.get(*g), Some(v));
            }
        }
    }
}
