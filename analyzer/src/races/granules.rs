//! The table that holds the shadow memory's cells, keyed by granule: open addressing with
//! linear probing over one array of slots, each a granule's key beside its cell, so that the
//! usual lookup — a granule already tracked, found at its home — reads one slot (one cache
//! miss where a granule not in cache cost two with the keys apart: the key, then the cell),
//! with no allocation, no control bytes and no hasher state to build per access.
//!
//! Granules come from an untrusted trace, so the hash is keyed by a random value drawn per
//! table (as foldhash does) before the multiplication whose high bits pick the slot: a
//! trace cannot be crafted to make its granules collide. The table is at most three quarters
//! full; removal shifts the following run back (no tombstones), so a table whose granules come
//! and go (heap blocks freed and reused) never fills up with dead slots. It doubles where it
//! is: the high bits that pick a slot make a doubling send the granules of slot `i` to `2i` or
//! `2i + 1`, and a large table holds the address space of the largest its owner allows, so
//! that no doubling holds two tables or zeroes memory twice. Its sizes are `m·2^k` slots for
//! one `m` of 4 to 7 (the hash's high bits scaled by the size pick the slot, which keeps the
//! doubling's rule), so that the largest a budget allows takes at least four fifths of it,
//! where powers of two could take only half.

use std::hash::BuildHasher;

/// No granule. A slot holds its granule plus one (`addr >> 3` is below 2^61), so that an
/// empty slot is all zero bytes with an empty cell: a table freshly allocated is zeroed
/// memory the system maps on first touch, and the slots of a sparse table that no probe
/// reaches cost no resident memory.
const EMPTY: u64 = 0;

/// The smallest table allocated (slots) when its sizes are powers of two; a table of `m·2^k`
/// slots starts at `m·16`.
const MIN_SLOTS: usize = 64;

/// The smallest table backed by huge pages where the system has them (slots; 4 MiB of
/// 64-byte slots): a granule's slot is found by hashing, so a large table is read at random,
/// and with 4 KiB pages nearly every look-up of a granule not in cache also missed the TLB
/// (a page walk, twice as long under a hypervisor). A table this large touches every one of
/// its pages anyway, so huge pages hold no more of it; smaller tables are left as they were.
const HUGE_PAGES_FROM_SLOTS: usize = 1 << 16;

/// Slots moved at a time when the table doubles ([`GranuleTable::grow`]).
const GROW_BLOCK: usize = 1024;

/// Granules a full table weighs to choose the one that gives way to a new one
/// ([`GranuleTable::give_way`]): a few neighbours of the new granule's home, one or two cache
/// lines further at three quarters full.
const GIVE_WAY_CANDIDATES: usize = 8;

/// A granule's key and its cell, side by side, aligned to a cache line: the probe that finds
/// the key has the cell in the same line when the two take 64 bytes, as the shadow's do.
#[derive(Debug, Clone, Default)]
#[repr(align(64))]
struct Slot<V> {
    /// The granule plus one, or [`EMPTY`].
    key: u64,
    cell: V,
}

/// The first size of a table with room for `room` slots: `m·16` for the `m` of 4 to 7 whose
/// `m·2^k` comes closest to `room` without passing it (64, powers of two, for a room below
/// 128 slots or none).
fn first_slots(room: usize) -> usize {
    if room < 2 * MIN_SLOTS {
        return MIN_SLOTS;
    }
    // The top three bits of `room`: `m` of 4 to 7.
    let shift = room.ilog2() - 2;
    (room >> shift) * (MIN_SLOTS / 4)
}

/// Bytes a slot of a table of `V` takes (what the shadow's budget counts per slot).
pub const fn slot_bytes<V>() -> usize {
    std::mem::size_of::<Slot<V>>()
}

/// Cells of type `V` keyed by granule.
#[derive(Debug)]
pub struct GranuleTable<V> {
    slots: Vec<Slot<V>>,
    len: usize,
    /// The most granules held at once.
    peak: usize,
    /// The slots of the first table allocated (`m·16`): every size is this one doubled.
    first: usize,
    seed: u64,
    /// The most slots the table's owner lets it grow to ([`GranuleTable::with_room`]): once
    /// large, the table takes the address space for as many at once, so that it doubles
    /// where it is.
    room: usize,
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
            peak: 0,
            first: MIN_SLOTS,
            seed,
            room: 0,
        }
    }

    /// A table its owner lets grow to at most `room` slots (a memory budget's worth). Its
    /// sizes are `m·2^k` for the `m` of 4 to 7 whose largest size within `room` comes
    /// closest to it (powers of two alone could leave half of it unused); once large
    /// ([`HUGE_PAGES_FROM_SLOTS`]), it reserves the address space of that largest table at
    /// once, touched only as it doubles into it.
    pub fn with_room(room: usize) -> Self {
        GranuleTable {
            room,
            first: first_slots(room),
            ..Self::new()
        }
    }

    /// The slots of the largest table within `room` (of the first, when even it is larger).
    fn largest_within(&self, room: usize) -> usize {
        let mut largest = self.first;
        while largest * 2 <= room {
            largest *= 2;
        }
        largest
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
        self.slots.len()
    }

    /// The cell of `granule` if it has one, or a fresh one if holding it needs no more than
    /// `max_slots` slots; `None` when the table would have to grow past them.
    #[inline(always)]
    pub fn cell_within(&mut self, granule: u64, max_slots: usize) -> Option<&mut V> {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            let grown = (self.slots.len() * 2).max(self.first);
            if grown > max_slots {
                let i = self.slot_of(granule)?;
                return Some(&mut self.slots[i].cell);
            }
        }
        Some(self.cell(granule))
    }

    /// The granules held in `[first, last]`, in order.
    pub fn granules_in(&self, first: u64, last: u64) -> Vec<u64> {
        let mut held: Vec<u64> = self
            .slots
            .iter()
            .filter(|s| s.key != EMPTY)
            .map(|s| s.key - 1)
            .filter(|&g| first <= g && g <= last)
            .collect();
        held.sort_unstable();
        held
    }

    /// Whether holding one more granule would grow the table (past three quarters full).
    #[inline(always)]
    pub fn at_load_limit(&self) -> bool {
        (self.len + 1) * 4 > self.slots.len() * 3
    }

    /// Whether holding one more granule would need more than `max_slots` slots.
    #[inline(always)]
    pub fn full_at(&self, max_slots: usize) -> bool {
        (self.len + 1) * 4 > self.slots.len() * 3
            && (self.slots.len() * 2).max(self.first) > max_slots
    }

    /// The cells held, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.slots
            .iter_mut()
            .filter(|s| s.key != EMPTY)
            .map(|s| &mut s.cell)
    }

    /// The cells held.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots
            .iter()
            .filter(|s| s.key != EMPTY)
            .map(|s| &s.cell)
    }

    /// The hash's high bits scaled by the table's size: for `2^k` slots the top `k` bits,
    /// and for any size a doubling sends home `i` to `2i` or `2i + 1` (`⌊2x⌋` is `2⌊x⌋` or
    /// one more), keeping the order of homes that [`GranuleTable::double_in_place`] relies on.
    #[inline]
    fn home(&self, granule: u64) -> usize {
        let h = (granule ^ self.seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((u128::from(h) * self.slots.len() as u128) >> 64) as usize
    }

    /// Reads the home slots' keys of `first..=last` (at most eight) before any of them is
    /// needed, so that a buffer read or copied over several granules waits for their cache
    /// misses together rather than one after another (the keys' values are not used).
    #[inline(always)]
    pub fn touch(&self, first: u64, last: u64) {
        if self.slots.is_empty() {
            return;
        }
        let mut keys = 0u64;
        for g in first..=last.min(first + 7) {
            keys ^= self.slots[self.home(g)].key;
        }
        std::hint::black_box(keys);
    }

    /// Starts bringing the home slot of `granule` into the cache (see
    /// `foresight_trace::memory::prefetch`): called a few accesses ahead of the look-up.
    #[inline(always)]
    pub fn prefetch(&self, granule: u64) {
        if !self.slots.is_empty() {
            foresight_trace::memory::prefetch(&self.slots[self.home(granule)]);
        }
    }

    /// The cell of `granule` if its home slot holds it (no probe further): what a prefetch
    /// ahead of the look-up reads, the slot having been prefetched earlier still.
    #[inline(always)]
    pub fn at_home(&self, granule: u64) -> Option<&V> {
        if self.slots.is_empty() {
            return None;
        }
        let slot = &self.slots[self.home(granule)];
        (slot.key == granule + 1).then_some(&slot.cell)
    }

    /// The cell of `granule`, a fresh one (`V::default()`) if it had none. Always inlined:
    /// every access looks its granule up, and where the check was compiled apart (the split
    /// race pass's back) the call left out of it cost some 20 instructions an access.
    #[inline(always)]
    pub fn cell(&mut self, granule: u64) -> &mut V {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
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
                self.peak = self.peak.max(self.len);
                return &mut self.slots[i].cell;
            }
            i = self.next_slot(i);
        }
    }

    fn slot_of(&self, granule: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
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
            i = self.next_slot(i);
        }
    }

    /// The slot after `i`, the first after the last.
    #[inline(always)]
    fn next_slot(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// Drops the cell of `granule`, if any, and hands it back.
    pub fn remove(&mut self, granule: u64) -> Option<V> {
        let i = self.slot_of(granule)?;
        let cell = std::mem::take(&mut self.slots[i].cell);
        self.vacate(i);
        Some(cell)
    }

    /// Drops, to make room for `granule` (which the table does not hold), the granule of
    /// least `cost` among the first [`GIVE_WAY_CANDIDATES`] held from `granule`'s home on
    /// (the first of them on a tie), and hands it back with its cell; `None` when the table
    /// holds none. The slots looked at lie at and just after the new granule's home, in the
    /// lines its own probe reads.
    pub fn give_way(
        &mut self,
        granule: u64,
        mut cost: impl FnMut(&V) -> usize,
    ) -> Option<(u64, V)> {
        if self.len == 0 {
            return None;
        }
        let mut i = self.home(granule);
        let mut best: Option<(usize, usize)> = None;
        let mut seen = 0;
        for _ in 0..self.slots.len() {
            if self.slots[i].key != EMPTY {
                let c = cost(&self.slots[i].cell);
                if best.is_none_or(|(b, _)| c < b) {
                    best = Some((c, i));
                }
                seen += 1;
                if seen == GIVE_WAY_CANDIDATES {
                    break;
                }
            }
            i = self.next_slot(i);
        }
        let (_, at) = best?;
        let key = self.slots[at].key;
        let cell = std::mem::take(&mut self.slots[at].cell);
        self.vacate(at);
        Some((key - 1, cell))
    }

    /// Empties slot `i`, then moves back every later key of its run that may live closer to
    /// its home, so that no lookup stops early at the hole.
    fn vacate(&mut self, mut hole: usize) {
        self.slots[hole] = Slot::default();
        self.len -= 1;
        let mut i = hole;
        loop {
            i = self.next_slot(i);
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

    /// Keeps only the cells `keep` says yes to (it may change them first), in place: no
    /// second table is allocated, so a table at its memory budget can shed cells. `keep` may
    /// see a cell it kept twice (a removal can move one back into the slot looked at).
    pub fn retain_cells(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        let mut i = 0;
        while i < self.slots.len() {
            if self.slots[i].key != EMPTY && !keep(&mut self.slots[i].cell) {
                // Removal moves later keys of the run back, possibly into slot `i` (never
                // into one looked at already but `i`, except from a run that wrapped around,
                // whose cells were looked at already): look at `i` again.
                self.vacate(i);
                continue;
            }
            i += 1;
        }
    }

    /// Keeps only the granules `keep` says yes to, in place, as [`GranuleTable::retain_cells`]
    /// does: a table rebuilt instead was allocated and zeroed anew at every large block freed
    /// (a compressor frees its window buffers job after job), which cost a real program's
    /// analysis more time in the kernel's page clearing than its look-ups of those granules.
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &V) -> bool) {
        let mut i = 0;
        while i < self.slots.len() {
            let key = self.slots[i].key;
            if key != EMPTY && !keep(key - 1, &self.slots[i].cell) {
                // As in `retain_cells`: a later key of the run may move into slot `i`.
                self.vacate(i);
                continue;
            }
            i += 1;
        }
    }

    /// Doubles the table where it is. A granule's home is the top bits of its hash, so the
    /// granules of home `i` go to home `2i` or `2i + 1`: the slots are moved from the top of
    /// the old half down, a block at a time, each to the first free slot from its new home.
    /// A table that grew into a new allocation instead held the old one beside it and had all
    /// of it zeroed twice (by the system, then as default slots): a tenth of the analysis of a
    /// compressor's trace, and 166 MiB of its 658 MiB peak. A large table has its room's
    /// address space already (untouched memory costs nothing resident), so it moves no page:
    /// a `realloc` remapping it would split its huge pages.
    #[cold]
    fn grow(&mut self) {
        if self.slots.is_empty() {
            // Written as the default slot (all zero bytes) over and over, the first table is
            // zeroed memory that the system maps on first touch; larger ones double from it.
            self.slots = std::iter::repeat_with(Slot::default)
                .take(self.first)
                .collect();
            return;
        }
        self.double_in_place(GROW_BLOCK);
    }

    /// [`GranuleTable::grow`] of an allocated table, moving `block` slots at a time.
    fn double_in_place(&mut self, block: usize) {
        let old = self.slots.len();
        let large = 2 * old >= HUGE_PAGES_FROM_SLOTS;
        if self.slots.capacity() < 2 * old {
            let largest = self.largest_within(self.room);
            // The room's address space if it can be had (a `--race-memory` larger than the
            // system would map is not an error), else this doubling's.
            if !(large && largest > 2 * old && self.slots.try_reserve_exact(largest - old).is_ok())
            {
                self.slots.reserve_exact(old);
            }
            if large {
                // Before the first touch of the new memory…
                foresight_trace::memory::advise_huge_pages(self.slots.spare_capacity_mut());
            }
        }
        self.slots
            .extend(std::iter::repeat_with(Slot::default).take(old));
        if large {
            // …and all of it: a table without room was moved by `realloc`, its old half
            // perhaps copied before any advice (left to the kernel's collapsing of pages).
            foresight_trace::memory::advise_huge_pages(&self.slots);
        }
        let held = self.len;
        self.len = 0;
        // Below `unmoved` lie the slots not moved yet, as the old half placed them; a slot
        // moved goes where its probe from its new home stays above them (a slot emptied
        // there later would cut its run), or waits until every slot has moved.
        let mut unmoved = old;
        let mut moving = Vec::with_capacity(block.min(old));
        let mut waiting = Vec::new();
        while unmoved > 0 {
            let from = unmoved.saturating_sub(block);
            moving.extend(
                self.slots[from..unmoved]
                    .iter_mut()
                    .filter(|s| s.key != EMPTY)
                    .map(std::mem::take),
            );
            unmoved = from;
            for slot in moving.drain(..) {
                if let Err(slot) = self.place_above(unmoved, slot) {
                    waiting.push(slot);
                }
            }
        }
        for slot in waiting {
            self.place(slot);
        }
        debug_assert_eq!(self.len, held);
    }

    /// Puts `slot`, whose granule the table does not hold, in the first free slot from its
    /// home, if its home is not below `floor` and the probe does not wrap past the end (to
    /// the slots below); gives it back otherwise. (A slot of the old half that had not
    /// wrapped there never wraps in the doubled one: the granules of new homes from `2h` on
    /// came from old homes from `h` on, at most `n - h` of them where `2n - 2h` slots wait.
    /// The check costs a comparison and keeps a run from being cut if that ever changed.)
    fn place_above(&mut self, floor: usize, slot: Slot<V>) -> Result<(), Slot<V>> {
        let mut i = self.home(slot.key - 1);
        if i < floor {
            return Err(slot);
        }
        while self.slots[i].key != EMPTY {
            i += 1;
            if i == self.slots.len() {
                return Err(slot);
            }
        }
        self.slots[i] = slot;
        self.len += 1;
        Ok(())
    }

    /// Puts `slot`, whose granule the table does not hold, in the first free slot from its
    /// home (the table is below its load limit, so there is one).
    fn place(&mut self, slot: Slot<V>) {
        let mut i = self.home(slot.key - 1);
        while self.slots[i].key != EMPTY {
            i = self.next_slot(i);
        }
        self.slots[i] = slot;
        self.len += 1;
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

    /// The next of a xorshift sequence of granules and values.
    fn next(x: &mut u64) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
    }

    #[test]
    fn behaves_as_a_map_through_inserts_and_removals() {
        let mut t: GranuleTable<u64> = GranuleTable::new();
        let mut want: HashMap<u64, u64> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for step in 0..200_000u64 {
            next(&mut x);
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
                t.retain(|g, _| g % 7 != 0);
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

    /// Every held granule is found by a probe from its home that meets no free slot first,
    /// and each is held once.
    fn assert_probes_reach_every_granule<V: Default>(t: &GranuleTable<V>) {
        let n = t.slots.len();
        let mut seen = std::collections::HashSet::new();
        for (at, s) in t.slots.iter().enumerate() {
            if s.key == EMPTY {
                continue;
            }
            assert!(seen.insert(s.key), "granule {:#x} held twice", s.key - 1);
            let mut i = t.home(s.key - 1);
            while i != at {
                assert_ne!(
                    t.slots[i].key,
                    EMPTY,
                    "granule {:#x}: free slot {i} before slot {at}",
                    s.key - 1
                );
                i = (i + 1) % n;
            }
        }
        assert_eq!(seen.len(), t.len());
    }

    #[test]
    fn a_table_s_sizes_are_one_m_of_4_to_7_doubled_up_to_its_room() {
        for (room, first, largest) in [
            (0, 64, 64),
            (127, 64, 64),
            (128, 64, 128),
            (6 << 20, 96, 6 << 20),
            ((7 << 20) - 1, 96, 6 << 20),
            (7 << 20, 112, 7 << 20),
            ((448 << 20) / 64 / 8 * 7, 96, 6 << 20),
            (1 << 22, 64, 1 << 22),
            (5 << 21, 80, 5 << 21),
        ] {
            let t: GranuleTable<u64> = GranuleTable::with_room(room);
            assert_eq!(t.first, first, "room {room}");
            assert_eq!(t.largest_within(room), largest, "room {room}");
        }
    }

    #[test]
    fn a_table_doubled_in_place_finds_every_granule_wrapped_runs_included() {
        // Tables of every size up to 2^17 slots (and 5, 6 and 7 times powers of two), each
        // doubling checked: granules at random (runs wrap past the end of the table) and in
        // dense blocks (long runs).
        for (seed, room) in [
            (1u64, 0),
            (2, 0),
            (3, 0),
            (4, 5 << 20),
            (5, 6 << 20),
            (6, 7 << 20),
        ] {
            let mut t: GranuleTable<u64> = GranuleTable::with_room(room);
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut held = Vec::new();
            let mut slots = 0;
            for n in 0..90_000u64 {
                next(&mut x);
                let g = if n % 2 == 0 { x >> 3 } else { 0x10_0000 + n };
                *t.cell(g) = n;
                held.push((g, n));
                if t.slots() != slots {
                    slots = t.slots();
                    assert_probes_reach_every_granule(&t);
                }
            }
            assert_probes_reach_every_granule(&t);
            for &(g, n) in &held {
                assert_eq!(t.get(g), Some(&n), "granule {g:#x}");
            }
            assert_eq!(t.len(), held.len());
        }
    }

    #[test]
    fn a_table_doubled_a_few_slots_at_a_time_finds_every_granule() {
        // Blocks of one slot and a few: most slots then move while slots below them, of the
        // long runs of a dense table, have not, and those whose new home lies among them wait.
        for (block, m) in [
            (1, 4),
            (2, 4),
            (3, 4),
            (7, 4),
            (64, 4),
            (1, 7),
            (3, 6),
            (7, 5),
        ] {
            let mut t: GranuleTable<u64> = GranuleTable::with_room(m << 20);
            let mut x = 0x2545_f491_4f6c_dd1d_u64 ^ block as u64;
            let mut held = Vec::new();
            while !t.at_load_limit() || t.slots() < m * 1024 {
                next(&mut x);
                // Half the granules in one dense block: runs of many slots.
                let g = if x % 2 == 0 {
                    x >> 3
                } else {
                    0x4000 + x % 3000
                };
                if t.get(g).is_none() {
                    *t.cell(g) = x;
                    held.push((g, x));
                }
            }
            t.double_in_place(block);
            assert_eq!(t.slots(), m * 2048);
            assert_probes_reach_every_granule(&t);
            assert_eq!(t.len(), held.len());
            for &(g, v) in &held {
                assert_eq!(t.get(g), Some(&v), "block {block}, granule {g:#x}");
            }
        }
    }

    #[test]
    fn a_run_wrapped_past_the_end_of_the_old_half_is_found_after_doubling() {
        // A known seed, to place granules by their homes: 2^11 slots doubled to 2^12 (more
        // than one block moved), with twelve granules whose home is the last slot (their run
        // wraps to the first slots, which move last, beside the granules of the first homes).
        let mut t: GranuleTable<u64> = GranuleTable::new();
        t.seed = 0;
        let home =
            |g: u64, bits: u32| (g.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize;
        let (mut top, mut bottom, mut others) = (Vec::new(), Vec::new(), Vec::new());
        for g in 1u64.. {
            if home(g, 12) == 4095 && top.len() < 12 {
                top.push(g);
            } else if home(g, 11) < 8 && bottom.len() < 24 {
                bottom.push(g);
            } else if others.len() < 1500 {
                others.push(g);
            }
            if top.len() == 12 && bottom.len() == 24 && others.len() == 1500 {
                break;
            }
        }
        for &g in bottom.iter().chain(&top).chain(&others) {
            *t.cell(g) = g;
            if t.slots() == 2048 && t.len() * 4 + 4 > t.slots() * 3 {
                break;
            }
        }
        assert_eq!(t.slots(), 2048);
        let before = t.len();
        // The next granule doubles the table.
        *t.cell(u64::MAX >> 4) = 0;
        assert_eq!(t.slots(), 4096);
        assert_probes_reach_every_granule(&t);
        assert_eq!(t.len(), before + 1);
        for &g in bottom.iter().chain(&top) {
            assert_eq!(t.get(g), Some(&g), "granule {g:#x}");
        }
    }

    #[test]
    fn a_granule_gives_way_to_a_new_one_by_least_cost_among_its_neighbours() {
        for seed in 1..20u64 {
            let mut t: GranuleTable<u64> = GranuleTable::new();
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut held = HashMap::new();
            while !t.at_load_limit() || t.slots() < 256 {
                next(&mut x);
                let g = x >> 3;
                *t.cell(g) = x % 5;
                held.insert(g, x % 5);
            }
            let new = 0x77u64;
            assert!(t.get(new).is_none());
            // The candidates: the first held slots from the new granule's home.
            let mut i = t.home(new);
            let mut near = Vec::new();
            while near.len() < GIVE_WAY_CANDIDATES {
                if t.slots[i].key != EMPTY {
                    near.push((t.slots[i].cell, t.slots[i].key - 1));
                }
                i = (i + 1) % t.slots();
            }
            let least = near.iter().map(|&(c, _)| c).min().unwrap();
            let first_least = near.iter().find(|&&(c, _)| c == least).unwrap().1;
            let len = t.len();
            assert_eq!(t.give_way(new, |&c| c as usize), Some((first_least, least)));
            held.remove(&first_least);
            assert_eq!(t.len(), len - 1);
            assert_probes_reach_every_granule(&t);
            for (g, v) in &held {
                assert_eq!(t.get(*g), Some(v));
            }
        }
        let mut empty: GranuleTable<u64> = GranuleTable::new();
        assert_eq!(empty.give_way(1, |_| 0), None);
    }

    #[test]
    fn the_look_ahead_reads_only_cells_at_home_and_changes_nothing() {
        let mut t: GranuleTable<u64> = GranuleTable::new();
        // An empty table has no slot to fetch or read.
        t.prefetch(7);
        assert_eq!(t.at_home(7), None);
        for g in 0..5_000u64 {
            *t.cell(g * 3) = g;
        }
        let (mut home, mut away) = (0, 0);
        for g in 0..15_000u64 {
            t.prefetch(g);
            match t.at_home(g) {
                Some(v) => {
                    assert_eq!(Some(v), t.get(g), "granule {g}");
                    home += 1;
                }
                None if t.get(g).is_some() => away += 1,
                None => {}
            }
        }
        // Most granules are at home; those a collision pushed on are left to the look-up.
        assert_eq!(home + away, 5_000);
        assert!(home > away, "{home} at home, {away} away");
        assert_eq!(t.len(), 5_000);
    }

    #[test]
    fn a_large_table_asks_for_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            // A kernel without transparent huge pages refuses the advice: nothing to see.
            return;
        }
        // Slots of the shadow's size, so that the table spans whole huge pages; with room to
        // double where it is and without.
        for room in [0, 1 << 20] {
            let mut t: GranuleTable<[u64; 7]> = GranuleTable::with_room(room);
            for g in 0..HUGE_PAGES_FROM_SLOTS as u64 {
                t.cell(g * 977)[0] = g;
            }
            assert!(t.slots() > HUGE_PAGES_FROM_SLOTS);
            let start = t.slots.as_ptr() as usize;
            let middle = start + t.slots.len() * slot_bytes::<[u64; 7]>() / 2;
            assert_eq!(
                foresight_trace::memory::huge_pages_advised(middle),
                Some(true),
                "room {room}"
            );
            if room > 0 {
                // The room's address space, taken when the table became large.
                assert_eq!(t.slots.capacity(), room);
                for _ in 0..2 {
                    t.double_in_place(GROW_BLOCK);
                }
                assert_eq!(t.slots.as_ptr() as usize, start, "the table moved");
            }
            for g in (0..HUGE_PAGES_FROM_SLOTS as u64).step_by(101) {
                assert_eq!(t.get(g * 977).map(|c| c[0]), Some(g));
            }
        }
    }

    /// One operation on a table, on a granule picked among a few clustered ones, the lowest
    /// and the highest a trace can name (a slot holds its granule plus one).
    #[derive(Clone, Debug)]
    enum Op {
        Cell(u64, u64),
        Within(u64, u64, usize),
        Remove(u64),
        Retain(u64),
        RetainCells(u64),
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
            2 => (granule(), any::<u64>(), 0..600usize).prop_map(|(g, v, m)| Op::Within(g, v, m)),
            4 => granule().prop_map(Op::Remove),
            1 => (2..9u64).prop_map(Op::Retain),
            1 => (2..9u64).prop_map(Op::RetainCells),
        ]
    }

    proptest::proptest! {
        /// The table of slots (key beside cell) holds what a map holds through every
        /// operation the shadow makes, granules 0 and 2^61 - 1 included, and refuses a new
        /// granule only when holding it would grow past the slots allowed.
        #[test]
        fn slots_hold_what_a_map_holds(
            ops in proptest::collection::vec(op(), 1..800),
            room in proptest::prop_oneof![proptest::strategy::Just(0usize), 0..1usize << 24],
        ) {
            let mut t: GranuleTable<u64> = GranuleTable::with_room(room);
            let mut want: HashMap<u64, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Cell(g, v) => {
                        *t.cell(g) ^= v;
                        *want.entry(g).or_default() ^= v;
                    }
                    Op::Within(g, v, max) => {
                        let grows = t.at_load_limit() && (t.slots() * 2).max(t.first) > max;
                        match t.cell_within(g, max) {
                            Some(c) => {
                                *c ^= v;
                                *want.entry(g).or_default() ^= v;
                            }
                            None => proptest::prop_assert!(grows && !want.contains_key(&g)),
                        }
                    }
                    Op::Remove(g) => {
                        proptest::prop_assert_eq!(t.remove(g), want.remove(&g));
                    }
                    Op::Retain(m) => {
                        t.retain(|g, _| g % m != 0);
                        want.retain(|g, _| g % m != 0);
                    }
                    Op::RetainCells(m) => {
                        // The change is idempotent: `keep` may see a cell it kept twice.
                        let keep = |v: &mut u64| {
                            *v |= 1 << 63;
                            (*v & !(1 << 63)) % m != 0
                        };
                        t.retain_cells(keep);
                        want.retain(|_, v| keep(v));
                    }
                }
                proptest::prop_assert_eq!(t.len(), want.len());
                proptest::prop_assert!(t.len() * 4 <= t.slots() * 3);
            }
            for (g, v) in &want {
                proptest::prop_assert_eq!(t.get(*g), Some(v));
            }
            let mut held: Vec<u64> = want.keys().copied().collect();
            held.sort_unstable();
            proptest::prop_assert_eq!(t.granules_in(0, u64::MAX), held);
            let near: Vec<u64> = want.keys().copied().filter(|g| (0x2000..0x2100).contains(g)).collect();
            proptest::prop_assert_eq!(t.granules_in(0x2000, 0x20ff).len(), near.len());
        }
    }
}
