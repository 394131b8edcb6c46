//! The last write of each 8-byte granule of the recorded program's memory: what the deadlock
//! walk's reads-from (`hb.rs`) looks up at every read and sets at every write, the most
//! frequent lookups of the walk on an instrumented trace.
//!
//! Granules are kept in pages of [`PAGE_GRANULES`] consecutive granules, found through a map
//! keyed by page number, with the pages used lately remembered in a direct-mapped table:
//! programs read and write memory in runs (a buffer copied, a struct's fields one after
//! another) and over and over in the same tables, so most accesses find their page there at
//! the cost of a comparison and an array index, not a hash lookup that misses the cache. A page costs 8 bytes a granule where a hash map of granules cost about
//! 18; a page with one granule in use costs 256 bytes, so a program that touches one word in
//! every 256 bytes costs more than before. Either way the table grows with the memory the
//! program touched, not with the trace's length; it is not budgeted, since a reads-from edge
//! left out would make predictions unsound.
//!
//! Page numbers come from an untrusted trace: the map's hash is foldhash's, seeded per map, so
//! a trace cannot be crafted to make its pages collide.

use foldhash::{HashMap, HashMapExt};

/// Granules a page holds: 256 bytes of the program's memory.
pub const PAGE_GRANULES: usize = 32;

/// The writer of a granule: (thread, position in the thread); `NONE` in its thread when no
/// write was seen (a trace's thread index is below `u32::MAX`).
pub type Writer = (u32, u32);

const NONE: u32 = u32::MAX;

type Page = [Writer; PAGE_GRANULES];

pub struct LastWriters {
    pages: Vec<Page>,
    /// Page number (granule / [`PAGE_GRANULES`]) → index in `pages`.
    index: HashMap<u64, u32>,
    /// Pages found lately, by page number modulo [`RECENT`]: (page number, index in
    /// `pages`); `u64::MAX` for none (a granule is below 2^61, so no page number is that).
    recent: Box<[(u64, u32)]>,
}

/// Pages remembered in `recent`: 4 MiB of the program's memory when they are consecutive, so
/// that the tables a compressor probes at random mostly skip the map.
const RECENT: usize = 1 << 14;

impl Default for LastWriters {
    fn default() -> Self {
        Self::new()
    }
}

impl LastWriters {
    pub fn new() -> Self {
        LastWriters {
            pages: Vec::new(),
            index: HashMap::new(),
            recent: vec![(u64::MAX, 0); RECENT].into_boxed_slice(),
        }
    }

    /// The last writer of `granule`, if any.
    #[inline]
    pub fn get(&mut self, granule: u64) -> Option<Writer> {
        let page = granule / PAGE_GRANULES as u64;
        let slot = (granule % PAGE_GRANULES as u64) as usize;
        let recent = &mut self.recent[page as usize % RECENT];
        let i = if recent.0 == page {
            recent.1
        } else {
            let i = *self.index.get(&page)?;
            *recent = (page, i);
            i
        };
        let w = self.pages[i as usize][slot];
        (w.0 != NONE).then_some(w)
    }

    /// Sets the last writer of every granule in `first..=last`.
    #[inline]
    pub fn set(&mut self, first: u64, last: u64, writer: Writer) {
        let mut g = first;
        loop {
            let page = g / PAGE_GRANULES as u64;
            let i = self.page_for_write(page) as usize;
            let from = (g % PAGE_GRANULES as u64) as usize;
            let page_last = page * PAGE_GRANULES as u64 + (PAGE_GRANULES as u64 - 1);
            let to = (last.min(page_last) % PAGE_GRANULES as u64) as usize;
            self.pages[i][from..=to].fill(writer);
            if last <= page_last {
                return;
            }
            g = page_last + 1;
        }
    }

    #[inline]
    fn page_for_write(&mut self, page: u64) -> u32 {
        let recent = &mut self.recent[page as usize % RECENT];
        if recent.0 == page {
            return recent.1;
        }
        let next = self.pages.len() as u32;
        let i = *self.index.entry(page).or_insert(next);
        if i == next {
            self.pages.push([(NONE, 0); PAGE_GRANULES]);
        }
        *recent = (page, i);
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_found_granule_by_granule_across_pages() {
        let mut w = LastWriters::new();
        let p = PAGE_GRANULES as u64;
        assert_eq!(w.get(5), None);
        w.set(p - 2, p + 1, (1, 7)); // the end of page 0, the start of page 1
        for g in p - 2..=p + 1 {
            assert_eq!(w.get(g), Some((1, 7)), "granule {g}");
        }
        assert_eq!(w.get(p - 3), None);
        assert_eq!(w.get(p + 2), None);
        w.set(p, p, (2, 9));
        assert_eq!(w.get(p), Some((2, 9)));
        assert_eq!(w.get(p - 1), Some((1, 7)));
        assert_eq!(w.pages.len(), 2);
        // A write spanning several pages, and granules at the top of the address space.
        w.set(10 * p + 3, 13 * p, (0, 1));
        assert_eq!(w.get(11 * p + 5), Some((0, 1)));
        assert_eq!(w.get(13 * p + 1), None);
        // Two pages that share a slot of the recent table are told apart.
        let far = (RECENT as u64) * p;
        w.set(far, far, (4, 4));
        assert_eq!(w.get(0), None);
        assert_eq!(w.get(far), Some((4, 4)));
        assert_eq!(w.get(p), Some((2, 9)));
        assert_eq!(w.get(far + 2 * p), None);
        let top = (u64::MAX >> 3) - 1;
        w.set(top, top + 1, (3, 3));
        assert_eq!(w.get(top + 1), Some((3, 3)));
        assert_eq!(w.get(top - 1), None);
    }
}
