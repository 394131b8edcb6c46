//! The table that holds the shadow memory's cells, keyed by granule: open addressing with
//! linear probing over two parallel arrays (the keys, probed alone, then the cells), so that
//! the usual lookup — a granule already tracked — reads one key and the cell beside it, with
//! no allocation, no control bytes and no hasher state to build per access.
//!
//! Granules come from an untrusted trace, so the hash is keyed by a random value drawn per
//! table (as foldhash does) before the multiplication whose high bits pick the slot: a
//! trace cannot be crafted to make its granules collide. The table is at most three quarters
//! full; removal shifts the following run back (no tombstones), so a table whose granules come
//! and go (heap blocks freed and reused) never fills up with dead slots.

use std::hash::BuildHasher;

/// No granule: `addr >> 3` is below 2^61.
const EMPTY: u64 = u64::MAX;

/// The smallest table allocated (slots).
const MIN_SLOTS: usize = 64;

/// Cells of type `V` keyed by granule.
#[derive(Debug)]
pub struct GranuleTable<V> {
    keys: Vec<u64>,
    cells: Vec<V>,
    len: usize,
    /// The most granules held at once.
    peak: usize,
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
            keys: Vec::new(),
            cells: Vec::new(),
            len: 0,
            peak: 0,
            bits: 0,
            seed,
        }
    }

    /// Granules held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The most granules held at once.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Slots allocated (held or free).
    pub fn slots(&self) -> usize {
        self.keys.len()
    }

    /// The cell of `granule` if it has one, or a fresh one if holding it needs no more than
    /// `max_slots` slots; `None` when the table would have to grow past them.
    #[inline(always)]
    pub fn cell_within(&mut self, granule: u64, max_slots: usize) -> Option<&mut V> {
        if (self.len + 1) * 4 > self.keys.len() * 3 {
            let grown = (self.keys.len() * 2).max(MIN_SLOTS);
            if grown > max_slots {
                let i = self.slot_of(granule)?;
                return Some(&mut self.cells[i]);
            }
        }
        Some(self.cell(granule))
    }

    /// The granules held in `[first, last]`, in order.
    pub fn granules_in(&self, first: u64, last: u64) -> Vec<u64> {
        let mut held: Vec<u64> = self
            .keys
            .iter()
            .copied()
            .filter(|&k| k != EMPTY && first <= k && k <= last)
            .collect();
        held.sort_unstable();
        held
    }

    /// Whether holding one more granule would grow the table (past three quarters full).
    #[inline(always)]
    pub fn at_load_limit(&self) -> bool {
        (self.len + 1) * 4 > self.keys.len() * 3
    }

    /// Whether holding one more granule would need more than `max_slots` slots.
    #[inline(always)]
    pub fn full_at(&self, max_slots: usize) -> bool {
        (self.len + 1) * 4 > self.keys.len() * 3 && (self.keys.len() * 2).max(MIN_SLOTS) > max_slots
    }

    /// The cells held, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.keys
            .iter()
            .zip(self.cells.iter_mut())
            .filter(|(k, _)| **k != EMPTY)
            .map(|(_, v)| v)
    }

    /// The cells held.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.keys
            .iter()
            .zip(&self.cells)
            .filter(|(k, _)| **k != EMPTY)
            .map(|(_, v)| v)
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
        if (self.len + 1) * 4 > self.keys.len() * 3 {
            self.grow();
        }
        let mask = self.keys.len() - 1;
        let mut i = self.home(granule);
        loop {
            let k = self.keys[i];
            if k == granule {
                return &mut self.cells[i];
            }
            if k == EMPTY {
                self.keys[i] = granule;
                self.len += 1;
                self.peak = self.peak.max(self.len);
                return &mut self.cells[i];
            }
            i = (i + 1) & mask;
        }
    }

    fn slot_of(&self, granule: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.keys.len() - 1;
        let mut i = self.home(granule);
        loop {
            let k = self.keys[i];
            if k == granule {
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
        let cell = std::mem::take(&mut self.cells[i]);
        self.vacate(i);
        Some(cell)
    }

    /// Empties slot `i`, then moves back every later key of its run that may live closer to
    /// its home, so that no lookup stops early at the hole.
    fn vacate(&mut self, mut hole: usize) {
        let mask = self.keys.len() - 1;
        self.keys[hole] = EMPTY;
        self.cells[hole] = V::default();
        self.len -= 1;
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let k = self.keys[i];
            if k == EMPTY {
                return;
            }
            let home = self.home(k);
            // `k` may move to the hole when its home is not in (hole, i], cyclically.
            let stays = if hole <= i {
                hole < home && home <= i
            } else {
                hole < home || home <= i
            };
            if !stays {
                self.keys[hole] = k;
                self.keys[i] = EMPTY;
                self.cells.swap(hole, i);
                hole = i;
            }
        }
    }

    /// Keeps only the cells `keep` says yes to (it may change them first), in place: no
    /// second table is allocated, so a table at its memory budget can shed cells. `keep` may
    /// see a cell it kept twice (a removal can move one back into the slot looked at).
    pub fn retain_cells(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        let mut i = 0;
        while i < self.keys.len() {
            if self.keys[i] != EMPTY && !keep(&mut self.cells[i]) {
                // Removal moves later keys of the run back, possibly into slot `i` (never
                // into one looked at already but `i`, except from a run that wrapped around,
                // whose cells were looked at already): look at `i` again.
                self.vacate(i);
                continue;
            }
            i += 1;
        }
    }

    /// Keeps only the granules `keep` says yes to.
    pub fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        let old_keys = std::mem::take(&mut self.keys);
        let old_cells = std::mem::take(&mut self.cells);
        let bits = self.bits;
        self.len = 0;
        self.bits = 0;
        let kept: Vec<(u64, V)> = old_keys
            .into_iter()
            .zip(old_cells)
            .filter(|(k, _)| *k != EMPTY && keep(*k))
            .collect();
        self.allocate(bits.max(MIN_SLOTS.trailing_zeros()));
        for (k, v) in kept {
            *self.cell(k) = v;
        }
    }

    fn allocate(&mut self, bits: u32) {
        let slots = 1usize << bits;
        self.bits = bits;
        self.keys = vec![EMPTY; slots];
        self.cells = std::iter::repeat_with(V::default).take(slots).collect();
    }

    #[cold]
    fn grow(&mut self) {
        let bits = if self.bits == 0 {
            MIN_SLOTS.trailing_zeros()
        } else {
            self.bits + 1
        };
        let old_keys = std::mem::take(&mut self.keys);
        let old_cells = std::mem::take(&mut self.cells);
        self.len = 0;
        self.allocate(bits);
        for (k, v) in old_keys.into_iter().zip(old_cells) {
            if k != EMPTY {
                *self.cell(k) = v;
            }
        }
    }

    /// The cell of `granule`, if it has one.
    pub fn get(&self, granule: u64) -> Option<&V> {
        self.slot_of(granule).map(|i| &self.cells[i])
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
            if step % 50_000 == 0 {
                t.retain(|g| g % 7 != 0);
                want.retain(|g, _| g % 7 != 0);
            }
            if step % 50_000 == 25_000 {
                // In place, changing the cells kept.
                t.retain_cells(|v| {
                    *v |= 1;
                    *v % 3 != 0
                });
                want.retain(|_, v| {
                    *v |= 1;
                    *v % 3 != 0
                });
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
}
