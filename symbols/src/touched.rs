//! The static data a trace's memory accesses touched: one streaming pass over the events
//! (`TraceStream`, each thread on its own, the threads shared out among workers) that keeps, of
//! every read, write and atomic inside a module's image, the 8-byte granules it touched, as a
//! sparse bitmap (a 64-byte bit set per 4 KiB page touched). Heap and stack addresses, the
//! bulk of most traces, cost a range check each and are not kept.
//!
//! Memory is bounded by the static data touched (about 100 bytes per page), never by the
//! number of events, and capped at [`MAX_PAGES`] pages (1 GiB of touched data), past which
//! further pages are counted but not kept.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use foresight_trace::tables::Tables;
use foresight_trace::{EventKind, TraceError, TraceStream};

/// Granules per page: 4 KiB of 8-byte granules.
const PAGE_SHIFT: u32 = 12;
const GRANULE_SHIFT: u32 = 3;
const WORDS: usize = 1 << (PAGE_SHIFT - GRANULE_SHIFT - 6);
/// Pages kept: 2^18 pages of 4 KiB, 1 GiB of touched static data, about 25 MB of bitmap.
pub(crate) const MAX_PAGES: usize = 1 << 18;

type Bits = [u64; WORDS];

/// 8-byte granules touched, by 4 KiB page (run-time addresses).
#[derive(Default)]
pub(crate) struct PageSet {
    pages: HashMap<u64, Bits>,
    /// The page being filled: consecutive accesses to one page (a loop over an array) cost
    /// no hash lookup.
    current: Option<(u64, Bits)>,
    /// Accesses whose page was not kept because the set was full.
    pub overflowed: u64,
}

impl PageSet {
    /// Marks the granules of `[lo, hi)` (`lo < hi`).
    fn mark(&mut self, lo: u64, hi: u64) {
        let mut g = lo >> GRANULE_SHIFT;
        let last = (hi - 1) >> GRANULE_SHIFT;
        let per_page = PAGE_SHIFT - GRANULE_SHIFT;
        if g == last {
            // Most accesses touch one granule.
            let bit = (g & ((1 << per_page) - 1)) as usize;
            if let Some(bits) = self.page(g >> per_page) {
                bits[bit / 64] |= 1 << (bit % 64);
            }
            return;
        }
        loop {
            let page = g >> per_page;
            let first_bit = (g & ((1 << per_page) - 1)) as usize;
            let page_last = ((page + 1) << per_page) - 1;
            let last_bit = (last.min(page_last) - (page << per_page)) as usize;
            match self.page(page) {
                Some(bits) => set_bits(bits, first_bit, last_bit),
                // The set is full: the rest of a long range (a hostile trace may give every
                // access 4 GiB) would only count more pages that are not kept.
                None => return,
            }
            if last <= page_last {
                return;
            }
            g = page_last + 1;
        }
    }

    fn page(&mut self, page: u64) -> Option<&mut Bits> {
        if self.current.is_none_or(|(p, _)| p != page) {
            self.flush();
            if !self.pages.contains_key(&page) && self.pages.len() >= MAX_PAGES {
                self.overflowed += 1;
                return None;
            }
            let bits = self.pages.remove(&page).unwrap_or([0; WORDS]);
            self.current = Some((page, bits));
        }
        self.current.as_mut().map(|(_, b)| b)
    }

    fn flush(&mut self) {
        if let Some((p, b)) = self.current.take() {
            self.pages.insert(p, b);
        }
    }

    fn merge(&mut self, mut other: PageSet) {
        self.flush();
        other.flush();
        self.overflowed += other.overflowed;
        for (p, b) in other.pages {
            if let Some(mine) = self.pages.get_mut(&p) {
                for (m, o) in mine.iter_mut().zip(b) {
                    *m |= o;
                }
            } else if self.pages.len() < MAX_PAGES {
                self.pages.insert(p, b);
            } else {
                self.overflowed += 1;
            }
        }
    }

    /// The granules touched.
    pub(crate) fn granules(&self) -> u64 {
        let current = self.current.iter().map(|(_, b)| b);
        self.pages
            .values()
            .chain(current)
            .flat_map(|b| b.iter())
            .map(|w| w.count_ones() as u64)
            .sum()
    }

    /// The touched granules as sorted, disjoint `[start, end)` runs of run-time addresses.
    fn runs(mut self) -> Vec<(u64, u64)> {
        self.flush();
        let mut pages: Vec<(u64, Bits)> = self.pages.into_iter().collect();
        pages.sort_unstable_by_key(|(p, _)| *p);
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (page, bits) in pages {
            let base = page << PAGE_SHIFT;
            for (w, word) in bits.iter().enumerate() {
                let mut word = *word;
                while word != 0 {
                    let bit = word.trailing_zeros() as u64;
                    let ones = (!(word >> bit)).trailing_zeros() as u64;
                    let lo = base + (((w as u64) * 64 + bit) << GRANULE_SHIFT);
                    let hi = lo + (ones << GRANULE_SHIFT);
                    match runs.last_mut() {
                        Some(last) if last.1 == lo => last.1 = hi,
                        _ => runs.push((lo, hi)),
                    }
                    // `ones` may be 64 (a full word): shifting by it would overflow.
                    word = if bit + ones >= 64 {
                        0
                    } else {
                        word & !(((1u64 << ones) - 1) << bit)
                    };
                }
            }
        }
        runs
    }
}

/// Sets bits `first..=last` of a page.
fn set_bits(bits: &mut Bits, first: usize, last: usize) {
    for (w, word) in bits
        .iter_mut()
        .enumerate()
        .take(last / 64 + 1)
        .skip(first / 64)
    {
        let (lo, hi) = (w * 64, w * 64 + 63);
        let from = first.max(lo) - lo;
        let to = last.min(hi) - lo;
        let n = to - from + 1;
        *word |= if n == 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << from
        };
    }
}

/// What the pass found.
pub(crate) struct Touched {
    /// The touched granules of each module (by the module id `Tables::module_of` gives), as
    /// sorted, disjoint runs of module offsets.
    pub by_module: BTreeMap<u32, Vec<(u64, u64)>>,
    /// Granules touched in all modules.
    pub granules: u64,
    /// Memory events (reads, writes, atomics) read.
    pub accesses: u64,
    /// Accesses (or pages, when threads' sets were merged) left out because the set was full.
    pub overflowed: u64,
}

/// The module images as disjoint, sorted ranges of run-time addresses: what an access must
/// fall in to be static data of some module.
fn images(tables: &Tables) -> Vec<(u64, u64)> {
    let mut r: Vec<(u64, u64)> = tables
        .modules
        .values()
        .filter(|m| m.size > 0)
        .map(|m| (m.base, m.base.saturating_add(m.size)))
        .collect();
    r.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(r.len());
    for (lo, hi) in r {
        match merged.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

/// Reads every thread's events of the trace at `path` and collects the static data their
/// memory accesses touched. Damaged chunks cost only their events (the stream skips them).
pub(crate) fn collect(path: &Path) -> Result<Touched, TraceError> {
    let stream = TraceStream::open(path)?;
    let images = images(stream.tables());
    let threads: Vec<u32> = stream.threads().collect();
    let mut set = PageSet::default();
    let mut accesses = 0u64;
    if !images.is_empty() && !threads.is_empty() {
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(threads.len());
        let next = AtomicUsize::new(0);
        let results: Vec<(PageSet, u64)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = PageSet::default();
                        let mut n = 0u64;
                        while let Some(&t) = threads.get(next.fetch_add(1, Ordering::Relaxed)) {
                            n += scan_thread(&stream, t, &images, &mut mine);
                        }
                        (mine, n)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for (s, n) in results {
            set.merge(s);
            accesses += n;
        }
    }
    let granules = set.granules();
    let overflowed = set.overflowed;
    let by_module = split_by_module(stream.tables(), set.runs());
    Ok(Touched {
        by_module,
        granules,
        accesses,
        overflowed,
    })
}

/// Marks the static data one thread's accesses touched; returns the accesses read.
fn scan_thread(stream: &TraceStream, thread: u32, images: &[(u64, u64)], set: &mut PageSet) -> u64 {
    let mut accesses = 0u64;
    // The last image an access fell in, and the last page that fell in none (the heap page a
    // loop works on): most accesses repeat one of the two.
    let mut image = (0u64, 0u64);
    let mut outside = u64::MAX;
    for ev in stream.thread_events(thread) {
        let (addr, size) = match ev.kind {
            EventKind::Read { addr, size, .. }
            | EventKind::Write { addr, size, .. }
            | EventKind::Atomic { addr, size, .. } => (addr, size),
            _ => continue,
        };
        accesses += 1;
        if addr >> PAGE_SHIFT == outside {
            continue;
        }
        if !(addr >= image.0 && addr < image.1) {
            let i = images.partition_point(|r| r.1 <= addr);
            match images.get(i) {
                Some(&r) if r.0 <= addr => image = r,
                _ => {
                    outside = addr >> PAGE_SHIFT;
                    continue;
                }
            }
        }
        // A range (`memcpy`) is cut at the image's end; the rest of it, if any, is in no
        // image or in the next one, which one event cannot say: it is left out.
        let hi = addr.saturating_add(size.max(1) as u64).min(image.1);
        set.mark(addr, hi);
    }
    accesses
}

/// Splits run-time runs among the modules that hold them (`Tables::module_of`: the smallest
/// image that contains an address), as runs of module offsets.
fn split_by_module(tables: &Tables, runs: Vec<(u64, u64)>) -> BTreeMap<u32, Vec<(u64, u64)>> {
    // Between two consecutive module boundaries, one module (or none) holds every address.
    let mut bounds: Vec<u64> = tables
        .modules
        .values()
        .flat_map(|m| [m.base, m.base.saturating_add(m.size)])
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut out: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for (lo, hi) in runs {
        let mut at = lo;
        while at < hi {
            let i = bounds.partition_point(|&b| b <= at);
            let end = bounds.get(i).map_or(hi, |&b| b.min(hi));
            if let Some(m) = tables.module_of(at) {
                let list = out.entry(m.id).or_default();
                let (a, b) = (at - m.base, end - m.base);
                match list.last_mut() {
                    Some(last) if last.1 == a => last.1 = b,
                    _ => list.push((a, b)),
                }
            }
            at = end;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granules_and_runs_cross_words_and_pages() {
        let mut s = PageSet::default();
        s.mark(0x1000, 0x1001);
        s.mark(0x1004, 0x1010); // the same granule, then the next
        s.mark(0x11f8, 0x1208); // across a word boundary
        s.mark(0x1ff8, 0x2010); // across a page
        s.mark(0x5000, 0x5000 + 4096 * 3); // whole pages, whole words
        assert_eq!(s.granules(), 2 + 2 + 3 + 3 * 512);
        assert_eq!(
            s.runs(),
            [
                (0x1000, 0x1010),
                (0x11f8, 0x1208),
                (0x1ff8, 0x2010),
                (0x5000, 0x8000)
            ]
        );
    }

    #[test]
    fn the_set_keeps_at_most_its_cap_of_pages() {
        let mut s = PageSet::default();
        for p in 0..(MAX_PAGES as u64 + 10) {
            s.mark(p << PAGE_SHIFT, (p << PAGE_SHIFT) + 8);
        }
        s.flush();
        assert_eq!(s.pages.len(), MAX_PAGES);
        assert_eq!(s.overflowed, 10);
    }
}
