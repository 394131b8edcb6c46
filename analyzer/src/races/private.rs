//! Memory one thread alone touches over a whole trace (decision 0031).
//!
//! A race needs two threads on the same bytes. The analyzer reads a finished trace, so a first
//! pass over each thread's events can find the pages (4 KiB) that only one thread reads,
//! writes, allocates or frees; the race pass then leaves their accesses out of the shadow,
//! where they could only ever meet their own thread's entries. Nothing the pass reports
//! changes but what a full memory budget drops (fewer granules compete for it).

use foresight_trace::event::EventKind;

/// Pages are 2^12 bytes: the programs measured touch a few hundred to a few thousand of them,
/// so the table stays in the processor's cache (where the shadow's granules do not), and
/// almost every access that touches a granule another thread touches also touches a page
/// another thread touches (docs/perf/analysis-speed-and-memory.md).
const PAGE_SHIFT: u32 = 12;
/// Pages the table holds at most (4 GiB of memory touched, a table of some 32 MiB); beyond, no
/// page is private and the race pass looks at every access, as without this pass.
const MAX_PAGES: usize = 1 << 20;
/// Pages the first pass visits in all (each page of each access, but a thread's runs on one
/// page): a trace of many huge accesses stops here, and nothing is private. The real traces
/// measured visit a few hundred thousand.
const MAX_VISITS: u64 = 64 << 20;
/// An access over more pages than this is never left out: the race pass's own bounds for
/// wide accesses apply, and the question costs at most this many look-ups.
const MAX_ACCESS_PAGES: u64 = 16;
/// A page more than one thread touches.
const SHARED: u32 = u32::MAX;

/// The pages of a trace's memory, each with the one thread that touches it or `SHARED`.
#[derive(Default)]
pub struct PrivatePages {
    owner: foldhash::HashMap<u64, u32>,
    /// Each heap block's largest size at its address: a free names no size, and frees the
    /// whole block.
    blocks: foldhash::HashMap<u64, u64>,
    /// Frees, noted once every allocation is known (`finish`).
    frees: Vec<(u32, u64)>,
    /// The page and thread noted last: a thread's next access is mostly on the same page.
    last: Option<(u64, u32)>,
    /// Pages visited so far (`MAX_VISITS`).
    visits: u64,
    /// More pages than `MAX_PAGES`, or more visits than `MAX_VISITS`: nothing is private.
    overflowed: bool,
}

impl PrivatePages {
    /// Notes one event of thread `thread` (threads numbered as the walk numbers them; each
    /// thread's events in any order, the threads one after another or interleaved).
    #[inline]
    pub fn note(&mut self, thread: usize, kind: &EventKind) {
        let thread = u32::try_from(thread).unwrap_or(SHARED - 1);
        match *kind {
            EventKind::Read { addr, size, .. }
            | EventKind::Write { addr, size, .. }
            | EventKind::Atomic { addr, size, .. } => self.touch(thread, addr, u64::from(size)),
            EventKind::Alloc { addr, size, .. } => {
                let largest = self.blocks.entry(addr).or_insert(0);
                *largest = (*largest).max(size);
                self.touch(thread, addr, size);
            }
            EventKind::Free { addr, .. } => self.frees.push((thread, addr)),
            _ => {}
        }
    }

    /// Once every event is noted: each free touches its block, at the largest size a block at
    /// that address had (a free of a block the trace did not see allocated touches its page).
    pub fn finish(&mut self) {
        self.last = None;
        for (thread, addr) in std::mem::take(&mut self.frees) {
            let size = self.blocks.get(&addr).copied().unwrap_or(1);
            self.touch(thread, addr, size);
            self.last = None;
        }
        self.blocks = Default::default();
    }

    #[inline]
    fn touch(&mut self, thread: u32, addr: u64, size: u64) {
        let (first, last) = pages(addr, size);
        if first == last && self.last == Some((first, thread)) {
            return;
        }
        if self.overflowed {
            return;
        }
        self.visits = self.visits.saturating_add(last - first + 1);
        if self.visits > MAX_VISITS {
            return self.overflow();
        }
        for page in first..=last {
            if self.owner.len() >= MAX_PAGES && !self.owner.contains_key(&page) {
                return self.overflow();
            }
            let owner = self.owner.entry(page).or_insert(thread);
            if *owner != thread {
                *owner = SHARED;
            }
        }
        self.last = Some((last, thread));
    }

    fn overflow(&mut self) {
        self.overflowed = true;
        self.owner = Default::default();
    }

    /// Whether every page of `size` bytes at `addr` is touched by one thread alone (and so,
    /// for an access the trace holds, by the accessing thread); false for an access over more
    /// than `MAX_ACCESS_PAGES` pages.
    #[inline]
    pub fn private(&self, addr: u64, size: u32) -> bool {
        let (first, last) = pages(addr, u64::from(size));
        last - first < MAX_ACCESS_PAGES && (first..=last).all(|p| self.page_private(p))
    }

    /// Whether page `page` (an address shifted by `PAGE_SHIFT`) is touched by one thread alone.
    #[inline]
    pub fn page_private(&self, page: u64) -> bool {
        matches!(self.owner.get(&page), Some(&o) if o != SHARED)
    }

    /// The page of `addr`, as `page_private` takes it.
    #[inline]
    pub fn page_of(addr: u64) -> u64 {
        addr >> PAGE_SHIFT
    }

    /// Pages noted, private or not (0 after an overflow).
    #[cfg(test)]
    fn pages_noted(&self) -> usize {
        self.owner.len()
    }
}

/// The first and last page of `size` bytes at `addr` (at least one byte).
#[inline]
fn pages(addr: u64, size: u64) -> (u64, u64) {
    let end = addr.saturating_add(size.max(1) - 1);
    (addr >> PAGE_SHIFT, end >> PAGE_SHIFT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(addr: u64, size: u32) -> EventKind {
        EventKind::Read {
            addr,
            size,
            site: 0,
        }
    }

    fn write(addr: u64, size: u32) -> EventKind {
        EventKind::Write {
            addr,
            size,
            site: 0,
        }
    }

    fn alloc(addr: u64, size: u64) -> EventKind {
        EventKind::Alloc {
            addr,
            size,
            site: 0,
        }
    }

    #[test]
    fn a_page_two_threads_touch_is_shared_and_one_thread_s_is_private() {
        let mut p = PrivatePages::default();
        p.note(0, &write(0x1000, 8));
        p.note(0, &read(0x1ff8, 8));
        p.note(1, &read(0x2010, 4));
        p.note(0, &write(0x2ff0, 8));
        p.note(1, &write(0x3000, 8));
        p.finish();
        assert!(p.private(0x1000, 8), "thread 0's alone");
        assert!(!p.private(0x2010, 4), "both threads touch the page");
        assert!(p.private(0x3008, 8), "thread 1's alone");
        assert!(
            !p.private(0x1ffc, 8),
            "an access over a private page and a shared one"
        );
        assert!(
            !p.private(0x9000, 1),
            "a page no thread touches is not private"
        );
    }

    #[test]
    fn a_free_by_another_thread_touches_the_whole_block() {
        let mut p = PrivatePages::default();
        // Thread 1 frees what thread 0 allocated and wrote (the free comes first here: each
        // thread's events are noted one thread after another).
        p.note(
            1,
            &EventKind::Free {
                addr: 0x10_0000,
                site: 0,
            },
        );
        p.note(0, &alloc(0x10_0000, 3 * 4096));
        p.note(0, &write(0x10_2000, 8));
        p.note(0, &write(0x20_0000, 8));
        p.finish();
        assert!(!p.private(0x10_2000, 8), "the block's last page");
        assert!(!p.private(0x10_0000, 1), "its first");
        assert!(p.private(0x20_0000, 8), "thread 0's other memory");
    }

    #[test]
    fn too_many_pages_leave_nothing_private() {
        let mut p = PrivatePages::default();
        p.note(0, &write(0, 8));
        // One access over more pages than the table holds.
        p.note(0, &alloc(1 << 20, ((MAX_PAGES as u64) + 1) << PAGE_SHIFT));
        p.finish();
        assert!(!p.private(0, 8));
        assert_eq!(p.pages_noted(), 0);
    }

    #[test]
    fn many_huge_accesses_stop_the_pass_and_a_wide_access_is_never_private() {
        let mut p = PrivatePages::default();
        p.note(0, &write(0, 8));
        // More page visits than the pass makes (here in one allocation, counted before any
        // page is visited; many 4 GiB accesses of the same pages add up the same way).
        p.note(0, &alloc(1 << 32, (MAX_VISITS + 1) << PAGE_SHIFT));
        p.finish();
        assert!(!p.private(0, 8), "nothing private after too many visits");
        let mut q = PrivatePages::default();
        q.note(1, &write(0, 1 << 20));
        q.finish();
        assert!(q.private(0, 4096), "one page of it");
        assert!(!q.private(0, 1 << 20), "all of it, 256 pages");
    }
}
