//! The table that holds the shadow memory's cells, by page: a page is [`PAGE`] consecutive
//! granules of the program's memory, and its cells lie side by side in one block, found
//! through a table of page numbers ([`GranuleTable`]) with the last page looked up
//! remembered. A buffer read or copied in order so finds its next granule's cell next to the
//! last one, without a probe, and the index holds a key per page, not per granule, so that it
//! mostly stays in cache.
//!
//! What a page costs is its whole block, however few of its granules are held: [`page_bytes`],
//! and the index's slot. [`PageTable::bytes`] is what the shadow's budget counts.

use super::granules::GranuleTable;

/// log2 of the granules in a page.
pub(crate) const PAGE_BITS: u32 = 6;

/// Granules in a page: 64 granules, 512 bytes of the program's memory, so that which of them
/// are held is one word.
pub(crate) const PAGE: usize = 1 << PAGE_BITS;

const _: () = assert!(PAGE <= 64);

/// One page's cells.
#[derive(Debug)]
struct Page<V> {
    /// The page's number (its first granule shifted right by [`PAGE_BITS`]).
    number: u64,
    /// Bit `i`: granule `i` of the page is held.
    held: u64,
    cells: [V; PAGE],
}

/// Bytes a page of `V` takes: its block with the allocator's header, its pointer in the list
/// of pages, and its share of the index (a 16-byte slot at most three quarters full, counted
/// apart in [`PageTable::bytes`]).
pub const fn page_bytes<V>() -> usize {
    std::mem::size_of::<Page<V>>() + 16 + std::mem::size_of::<usize>()
}

/// Cells of type `V` keyed by granule, held by page.
#[derive(Debug)]
pub struct PageTable<V> {
    /// Page number to its place in `pages`.
    index: GranuleTable<u32>,
    pages: Vec<Box<Page<V>>>,
    /// Granules held.
    len: usize,
    /// The most granules held at once.
    peak: usize,
    /// The page last looked up (its number plus one, 0 for none) and its place.
    last_key: u64,
    last_place: u32,
}

impl<V: Default> Default for PageTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Default> PageTable<V> {
    pub fn new() -> Self {
        PageTable {
            index: GranuleTable::new(),
            pages: Vec::new(),
            len: 0,
            peak: 0,
            last_key: 0,
            last_place: 0,
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

    /// Granules the pages allocated can hold.
    pub fn capacity(&self) -> usize {
        self.pages.len() * PAGE
    }

    /// Bytes the table takes: its pages and its index.
    pub fn bytes(&self) -> usize {
        self.pages.len() * page_bytes::<V>() + self.index.slots() * INDEX_SLOT_BYTES
    }

    /// Bytes one more page would add (with the index's growth if it needs to grow).
    pub fn page_cost(&self) -> usize {
        page_bytes::<V>()
            + (self.index.slots_for_one_more() - self.index.slots()) * INDEX_SLOT_BYTES
    }

    /// The place of page `page` in `pages`, remembered for the next look-up.
    #[inline(always)]
    fn place(&mut self, page: u64) -> Option<usize> {
        if self.last_key == page + 1 {
            return Some(self.last_place as usize);
        }
        let place = *self.index.get(page)?;
        self.last_key = page + 1;
        self.last_place = place;
        Some(place as usize)
    }

    /// Whether the page of `granule` is held (then [`PageTable::cell`] allocates nothing).
    #[inline(always)]
    pub fn holds_page_of(&mut self, granule: u64) -> bool {
        self.place(granule >> PAGE_BITS).is_some()
    }

    /// The cell of `granule`, a fresh one (`V::default()`) if it had none; its page is
    /// allocated if it had none.
    #[inline(always)]
    pub fn cell(&mut self, granule: u64) -> &mut V {
        let place = match self.place(granule >> PAGE_BITS) {
            Some(p) => p,
            None => self.add_page(granule >> PAGE_BITS),
        };
        let i = granule as usize & (PAGE - 1);
        let page = &mut self.pages[place];
        let bit = 1u64 << i;
        if page.held & bit == 0 {
            page.held |= bit;
            self.len += 1;
            self.peak = self.peak.max(self.len);
        }
        &mut page.cells[i]
    }

    /// The cell of `granule` if its page is held or one more page fits within `max_bytes`;
    /// `None` otherwise.
    #[inline]
    pub fn cell_within(&mut self, granule: u64, max_bytes: usize) -> Option<&mut V> {
        if !self.holds_page_of(granule) && self.bytes() + self.page_cost() > max_bytes {
            return None;
        }
        Some(self.cell(granule))
    }

    #[cold]
    #[inline(never)]
    fn add_page(&mut self, number: u64) -> usize {
        let place = self.pages.len();
        self.pages.push(Box::new(Page {
            number,
            held: 0,
            cells: std::array::from_fn(|_| V::default()),
        }));
        *self.index.cell(number) = place as u32;
        self.last_key = number + 1;
        self.last_place = place as u32;
        place
    }

    /// Frees the page at `place` (none of its granules held); the last page takes its place.
    fn remove_page(&mut self, place: usize) {
        let number = self.pages[place].number;
        self.index.remove(number);
        self.pages.swap_remove(place);
        if let Some(moved) = self.pages.get(place) {
            *self.index.cell(moved.number) = place as u32;
        }
        self.last_key = 0;
    }

    /// The granules held in `[first, last]`, in order.
    pub fn granules_in(&self, first: u64, last: u64) -> Vec<u64> {
        let (lo, hi) = (first >> PAGE_BITS, last >> PAGE_BITS);
        let mut held = Vec::new();
        for page in &self.pages {
            if page.number < lo || page.number > hi {
                continue;
            }
            let base = page.number << PAGE_BITS;
            held.extend(
                held_bits(page.held)
                    .map(|i| base + i as u64)
                    .filter(|&g| first <= g && g <= last),
            );
        }
        held.sort_unstable();
        held
    }

    /// The cells held, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.pages.iter_mut().flat_map(|p| {
            let held = p.held;
            p.cells
                .iter_mut()
                .enumerate()
                .filter(move |(i, _)| held >> i & 1 != 0)
                .map(|(_, c)| c)
        })
    }

    /// The cells held.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.pages
            .iter()
            .flat_map(|p| held_bits(p.held).map(move |i| &p.cells[i]))
    }

    /// The cell of `granule`, if it has one.
    pub fn get(&self, granule: u64) -> Option<&V> {
        let page = granule >> PAGE_BITS;
        let place = if self.last_key == page + 1 {
            self.last_place
        } else {
            *self.index.get(page)?
        };
        let i = granule as usize & (PAGE - 1);
        let page = &self.pages[place as usize];
        (page.held >> i & 1 != 0).then(|| &page.cells[i])
    }

    /// Drops the cell of `granule`, if any, and hands it back; a page left with no granule
    /// held is freed.
    pub fn remove(&mut self, granule: u64) -> Option<V> {
        let place = self.place(granule >> PAGE_BITS)?;
        let i = granule as usize & (PAGE - 1);
        let page = &mut self.pages[place];
        if page.held >> i & 1 == 0 {
            return None;
        }
        page.held &= !(1u64 << i);
        let cell = std::mem::take(&mut page.cells[i]);
        self.len -= 1;
        if page.held == 0 {
            self.remove_page(place);
        }
        Some(cell)
    }

    /// Keeps only the cells `keep` says yes to, given the granule and the cell (which it may
    /// change first); pages left with none are freed.
    fn retain_by(&mut self, mut keep: impl FnMut(u64, &mut V) -> bool) {
        let mut place = 0;
        while place < self.pages.len() {
            let page = &mut self.pages[place];
            let base = page.number << PAGE_BITS;
            for i in held_bits(page.held) {
                if !keep(base + i as u64, &mut page.cells[i]) {
                    page.cells[i] = V::default();
                    page.held &= !(1u64 << i);
                    self.len -= 1;
                }
            }
            if page.held == 0 {
                // The last page moves here: look at this place again.
                self.remove_page(place);
                continue;
            }
            place += 1;
        }
    }

    /// Keeps only the cells `keep` says yes to (it may change them first).
    pub fn retain_cells(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        self.retain_by(|_, cell| keep(cell));
    }

    /// Keeps only the granules `keep` says yes to.
    pub fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        self.retain_by(|g, _| keep(g));
    }
}

/// Bytes of one slot of the index (a page number beside its place).
const INDEX_SLOT_BYTES: usize = super::granules::slot_bytes::<u32>();

/// The indices of the bits set in `held`, lowest first.
fn held_bits(mut held: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if held == 0 {
            return None;
        }
        let i = held.trailing_zeros() as usize;
        held &= held - 1;
        Some(i)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use foldhash::{HashMap, HashMapExt};

    /// One operation on a table, on a granule picked among a few clustered ones (spanning
    /// several pages), the lowest and the highest a trace can name.
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
            2 => (granule(), any::<u64>(), 0..20_000usize).prop_map(|(g, v, m)| Op::Within(g, v, m)),
            4 => granule().prop_map(Op::Remove),
            1 => (2..9u64).prop_map(Op::Retain),
            1 => (2..9u64).prop_map(Op::RetainCells),
        ]
    }

    proptest::proptest! {
        /// The table of pages holds what a map holds through every operation the shadow
        /// makes, granules 0 and 2^61 - 1 included; it refuses a new granule only when its
        /// page is not held and one more would take more than the bytes allowed, and never
        /// takes more than they allow when it refuses.
        #[test]
        fn pages_hold_what_a_map_holds(ops in proptest::collection::vec(op(), 1..800)) {
            let mut t: PageTable<u64> = PageTable::new();
            let mut want: HashMap<u64, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Cell(g, v) => {
                        *t.cell(g) ^= v;
                        *want.entry(g).or_default() ^= v;
                    }
                    Op::Within(g, v, max) => {
                        let page_held = want.keys().any(|&h| h >> PAGE_BITS == g >> PAGE_BITS);
                        let room = t.bytes() + t.page_cost() <= max;
                        match t.cell_within(g, max) {
                            Some(c) => {
                                proptest::prop_assert!(page_held || room);
                                *c ^= v;
                                *want.entry(g).or_default() ^= v;
                                if !page_held {
                                    proptest::prop_assert!(t.bytes() <= max);
                                }
                            }
                            None => proptest::prop_assert!(!page_held && !room),
                        }
                    }
                    Op::Remove(g) => {
                        proptest::prop_assert_eq!(t.remove(g), want.remove(&g));
                    }
                    Op::Retain(m) => {
                        t.retain(|g| g % m != 0);
                        want.retain(|g, _| g % m != 0);
                    }
                    Op::RetainCells(m) => {
                        let keep = |v: &mut u64| {
                            *v |= 1 << 63;
                            (*v & !(1 << 63)) % m != 0
                        };
                        t.retain_cells(keep);
                        want.retain(|_, v| keep(v));
                    }
                }
                proptest::prop_assert_eq!(t.len(), want.len());
                // A page is held exactly while one of its granules is.
                let mut pages: Vec<u64> = want.keys().map(|g| g >> PAGE_BITS).collect();
                pages.sort_unstable();
                pages.dedup();
                proptest::prop_assert_eq!(t.capacity(), pages.len() * PAGE);
            }
            for (g, v) in &want {
                proptest::prop_assert_eq!(t.get(*g), Some(v));
            }
            let mut values: Vec<u64> = t.values().copied().collect();
            let mut wanted: Vec<u64> = want.values().copied().collect();
            values.sort_unstable();
            wanted.sort_unstable();
            proptest::prop_assert_eq!(values, wanted);
            let mut held: Vec<u64> = want.keys().copied().collect();
            held.sort_unstable();
            proptest::prop_assert_eq!(t.granules_in(0, u64::MAX), held);
            let near: Vec<u64> = want.keys().copied().filter(|g| (0x2010..0x20f0).contains(g)).collect();
            proptest::prop_assert_eq!(t.granules_in(0x2010, 0x20ef).len(), near.len());
        }
    }
}
