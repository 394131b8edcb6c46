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
//! program touched, not with the trace's length, up to a memory budget ([`MEMORY_BUDGET`]): a
//! trace can claim writes over gigabytes in a few bytes. Past the budget, writes to memory
//! without a page yet are not followed, and counted ([`LastWriters::writes_not_followed`]); the
//! report says that predictions may then reorder a read of that memory before its writer.
//!
//! Page numbers come from an untrusted trace: the map's hash is foldhash's, seeded per map, so
//! a trace cannot be crafted to make its pages collide.

use foldhash::{HashMap, HashMapExt};

/// Granules a page holds: 256 bytes of the program's memory.
pub const PAGE_GRANULES: usize = 32;

/// Bytes the pages and their index take at most: about 230 MiB of the program's memory
/// written (the whole walk of zstd's compressor over 32 MiB of input peaks at 124 MB).
pub const MEMORY_BUDGET: usize = 256 << 20;

/// Bytes a page takes, with its share of the index (key, value and the map's slack).
const PAGE_BYTES: usize = std::mem::size_of::<Page>() + 32;

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
    /// The most pages kept.
    max_pages: usize,
    /// Writes (or parts of writes) to memory that had no page when the budget was full.
    writes_not_followed: u64,
}

/// Pages remembered in `recent` at most: 4 MiB of the program's memory when they are
/// consecutive, so that the tables a compressor probes at random mostly skip the map.
const RECENT: usize = 1 << 14;
/// Pages remembered in `recent` at first (16 KiB): the table grows fourfold whenever the pages
/// outnumber its slots, up to [`RECENT`], so that a program touching little memory does not
/// pay the largest table (256 KiB, as much again as the rest of the analysis of a 10^8-event
/// trace of one shared array).
const RECENT_FIRST: usize = 1 << 10;

impl Default for LastWriters {
    fn default() -> Self {
        Self::new()
    }
}

impl LastWriters {
    pub fn new() -> Self {
        Self::with_budget(MEMORY_BUDGET)
    }

    /// A table whose pages take at most about `bytes`.
    pub fn with_budget(bytes: usize) -> Self {
        LastWriters {
            pages: Vec::new(),
            index: HashMap::new(),
            // Made with the first page: a builder that never sees a write (the race pass's
            // clocks, most traces' atomics) keeps none.
            recent: Box::default(),
            max_pages: bytes / PAGE_BYTES,
            writes_not_followed: 0,
        }
    }

    /// Writes not followed for want of room (a write over several pages counts once).
    pub fn writes_not_followed(&self) -> u64 {
        self.writes_not_followed
    }

    /// The last writer of `granule`, if any.
    #[inline]
    pub fn get(&mut self, granule: u64) -> Option<Writer> {
        let page = granule / PAGE_GRANULES as u64;
        let slot = (granule % PAGE_GRANULES as u64) as usize;
        if self.recent.is_empty() {
            // No page yet.
            return None;
        }
        let mask = self.recent.len() - 1;
        let recent = &mut self.recent[page as usize & mask];
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

    /// Sets the last writer of every granule in `first..=last` (those the budget has room
    /// for).
    #[inline]
    pub fn set(&mut self, first: u64, last: u64, writer: Writer) {
        let mut g = first;
        let mut refused = false;
        loop {
            let page = g / PAGE_GRANULES as u64;
            let page_last = page * PAGE_GRANULES as u64 + (PAGE_GRANULES as u64 - 1);
            match self.page_for_write(page) {
                Some(i) => {
                    let from = (g % PAGE_GRANULES as u64) as usize;
                    let to = (last.min(page_last) % PAGE_GRANULES as u64) as usize;
                    self.pages[i as usize][from..=to].fill(writer);
                }
                None => {
                    refused = true;
                    if last > page_last
                        && last - page_last > self.pages.len() as u64 * PAGE_GRANULES as u64
                    {
                        // No room, and more of the write ahead than the pages kept: only
                        // those pages can still take it, in time bounded by the budget.
                        self.set_kept(page_last + 1, last, writer);
                        break;
                    }
                }
            }
            if last <= page_last {
                break;
            }
            g = page_last + 1;
        }
        if refused {
            self.writes_not_followed += 1;
        }
    }

    /// Sets the writer of the granules in `first..=last` that kept pages hold.
    #[cold]
    fn set_kept(&mut self, first: u64, last: u64, writer: Writer) {
        let (first_page, last_page) = (first / PAGE_GRANULES as u64, last / PAGE_GRANULES as u64);
        for (&page, &i) in &self.index {
            if page < first_page || page > last_page {
                continue;
            }
            let base = page * PAGE_GRANULES as u64;
            let from = (first.max(base) - base) as usize;
            let to = (last.min(base + PAGE_GRANULES as u64 - 1) - base) as usize;
            self.pages[i as usize][from..=to].fill(writer);
        }
    }

    /// The page of `page`'s granules, made if the budget has room.
    #[inline]
    fn page_for_write(&mut self, page: u64) -> Option<u32> {
        if self.recent.is_empty() {
            self.recent = vec![(u64::MAX, 0); RECENT_FIRST].into_boxed_slice();
        }
        let slot = page as usize & (self.recent.len() - 1);
        let recent = self.recent[slot];
        if recent.0 == page {
            return Some(recent.1);
        }
        let i = match self.index.get(&page) {
            Some(&i) => i,
            None if self.pages.len() >= self.max_pages => return None,
            None => {
                let next = self.pages.len() as u32;
                self.index.insert(page, next);
                self.pages.push([(NONE, 0); PAGE_GRANULES]);
                if self.pages.len() > self.recent.len() && self.recent.len() < RECENT {
                    // A cache: the larger table starts empty and fills as pages are found.
                    let len = (self.recent.len() * 4).min(RECENT);
                    self.recent = vec![(u64::MAX, 0); len].into_boxed_slice();
                }
                next
            }
        };
        let slot = page as usize & (self.recent.len() - 1);
        self.recent[slot] = (page, i);
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recent_table_grows_with_the_pages_and_every_page_is_still_found() {
        let mut w = LastWriters::new();
        let p = PAGE_GRANULES as u64;
        let pages = (RECENT_FIRST * 20) as u64;
        for n in 0..pages {
            w.set(n * 3 * p + 1, n * 3 * p + 1, (n as u32, 1));
        }
        assert_eq!(
            w.recent.len(),
            RECENT,
            "grown fourfold twice, to the largest table"
        );
        for n in (0..pages).rev() {
            assert_eq!(w.get(n * 3 * p + 1), Some((n as u32, 1)), "page {n}");
            assert_eq!(w.get(n * 3 * p), None);
        }
    }

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

    #[test]
    fn a_full_budget_leaves_new_pages_unfollowed_and_counts_the_writes() {
        let p = PAGE_GRANULES as u64;
        let mut w = LastWriters::with_budget(3 * PAGE_BYTES);
        w.set(0, 2 * p - 1, (1, 1)); // two pages
        assert_eq!(w.writes_not_followed(), 0);
        // A write over 2^40 granules: the third page is made, the rest refused, quickly.
        w.set(p, 1 << 40, (2, 2));
        assert_eq!(w.writes_not_followed(), 1);
        assert_eq!(w.pages.len(), 3);
        assert_eq!(w.get(0), Some((1, 1)));
        assert_eq!(w.get(p), Some((2, 2)));
        assert_eq!(w.get(2 * p), Some((2, 2)));
        assert_eq!(w.get(5 * p), None);
        // The pages kept still take their part of a write refused elsewhere.
        w.set(p - 1, 1 << 40, (3, 3));
        assert_eq!(w.writes_not_followed(), 2);
        assert_eq!(
            (w.get(p - 1), w.get(3 * p - 1)),
            (Some((3, 3)), Some((3, 3)))
        );
        assert_eq!(w.get(0), Some((1, 1)));
        w.set(1 << 41, (1 << 41) + 1, (3, 4));
        assert_eq!(w.writes_not_followed(), 3);
        assert_eq!(w.get(1 << 41), None);
    }
}
