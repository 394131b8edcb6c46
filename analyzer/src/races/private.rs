//! Memory one thread alone touches over a whole trace (decision 0031), and the threads that
//! write each page (decision 0032).
//!
//! A race needs two threads on the same bytes. The analyzer reads a finished trace, so a first
//! pass over each thread's events can find the pages (4 KiB) that only one thread reads,
//! writes, allocates or frees; the race pass then leaves their accesses out of the shadow,
//! where they could only ever meet their own thread's entries. A race also needs a write: a
//! read of a page no other thread writes is left out too, and one after every other writer's
//! last write of its page is checked but not kept. Nothing the pass reports changes but what a
//! full memory budget drops (fewer granules compete for it).

use foresight_trace::event::{AtomicOp, EventKind};
use foresight_trace::ThreadId;

/// Pages are 2^12 bytes: the programs measured touch a few hundred to a few thousand of them,
/// so the table stays in the processor's cache (where the shadow's granules do not), and
/// almost every access that touches a granule another thread touches also touches a page
/// another thread touches (docs/perf/analysis-speed-and-memory.md).
const PAGE_SHIFT: u32 = 12;
/// Pages the table holds at most (4 GiB of memory touched, a table of some 180 MiB: 76 bytes
/// a page and the hash table's room); beyond, no page is private and the race pass looks at
/// every access, as without this pass. Tables noted side by side ([`PrivatePages::share_of`])
/// hold their share each: merging them may take twice that for a moment, before the race
/// pass's shadow memory is allocated.
const MAX_PAGES: usize = 1 << 20;
/// Pages the first pass visits beyond the first of each access (a look-up each): a trace of
/// many huge accesses stops here, and nothing is private. An access's first page costs one
/// look-up at most, bounded by the trace's events. The real traces measured visit a few
/// hundred thousand.
const MAX_VISITS: u64 = 64 << 20;
/// An access over more pages than this is never left out: the race pass's own bounds for
/// wide accesses apply, and the question costs at most this many look-ups.
const MAX_ACCESS_PAGES: u64 = 16;
/// The same for an access over ordered pages ([`Page::ordered`]): a wide copy into a buffer
/// that another thread reads once handed over is left out whole, a look-up a page rather
/// than a shadow slot per 8 bytes.
const MAX_ORDERED_PAGES: u64 = 1 << 12;
/// A page more than one thread touches.
const SHARED: u32 = u32::MAX;
/// Writers a page keeps apart: beyond, it is written by too many to say anything of a read.
const WRITERS: usize = 4;

/// One thread's writes of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Writer {
    thread: u32,
    /// The position of its last plain or atomic write of the page (0 when it only frees).
    last_write: u32,
    /// The positions of its first and last free of a block over the page (`u32::MAX` and 0
    /// when it frees none).
    first_free: u32,
    last_free: u32,
}

/// What the first pass knows of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// The one thread that reads, writes, allocates or frees it, or `SHARED`.
    owner: u32,
    /// Threads that write it (plain or atomic stores, frees): `writers[..written]`;
    /// `written` is `WRITERS + 1` when more threads than `WRITERS` do.
    written: u8,
    /// Every two accesses of different threads to it, one a write, are ordered by both of
    /// the race pass's orders ([`super::page_order`], decision 0033).
    ordered: bool,
    /// Times a thread's accesses came to it from another page (saturating): how much of a
    /// trace's work is on pages that threads share ([`PrivatePages::shared_visits`]).
    visits: u32,
    writers: [Writer; WRITERS],
}

const _: () = assert!(std::mem::size_of::<Page>() == 76);

impl Page {
    /// A page first noted by `owner`, written by nobody yet.
    const fn new(owner: u32) -> Page {
        Page {
            owner,
            written: 0,
            ordered: false,
            visits: 0,
            writers: [Writer {
                thread: SHARED,
                last_write: 0,
                first_free: u32::MAX,
                last_free: 0,
            }; WRITERS],
        }
    }

    /// A page of which nothing is known: shared, written by many.
    const UNKNOWN: Page = Page {
        owner: SHARED,
        written: WRITERS as u8 + 1,
        ..Page::new(SHARED)
    };

    /// Memory one thread alone touches, the thread not said (an access over several pages).
    const PRIVATE: Page = Page::new(SHARED - 1);

    /// Memory on pages whose every two accesses of different threads are ordered, the pages
    /// not said (an access over several pages).
    const ORDERED: Page = Page {
        ordered: true,
        ..Page::UNKNOWN
    };

    /// Whether one thread alone touches it.
    #[inline]
    pub fn private(&self) -> bool {
        self.owner != SHARED
    }

    /// Whether every two accesses of different threads to it, one a write, are ordered by
    /// both of the race pass's orders: no access to it is one of a race or a candidate.
    #[inline]
    pub fn ordered(&self) -> bool {
        self.ordered
    }

    /// The writers apart, or `None` when too many write it.
    #[inline]
    fn writers(&self) -> Option<&[Writer]> {
        self.writers.get(..usize::from(self.written))
    }

    /// Whether a plain read of it by `thread` can race with nothing in the whole trace: no
    /// other thread writes the page (a race needs a write).
    #[inline]
    pub fn read_races_nothing(&self, thread: u32) -> bool {
        self.owner != SHARED
            || self
                .writers()
                .is_some_and(|w| w.iter().all(|w| w.thread == thread))
    }

    /// Whether nothing that another thread does from now on can conflict with a read of the
    /// page by `reader`: every other thread that writes the page wrote it for the last time
    /// before its event the walk is at (`seen(thread)`: the events of it the walk has seen),
    /// and frees a block over it, if ever again, only after joining the reader (`joins(thread)`
    /// is where it first does, `u32::MAX` if never), which orders the reader's every event
    /// before the free by every order the race pass judges with.
    #[inline]
    pub fn written_for_good(
        &self,
        reader: u32,
        seen: impl Fn(u32) -> u32,
        joins: impl Fn(u32) -> u32,
    ) -> bool {
        self.every_other_writer(reader, |w| {
            let seen = seen(w.thread);
            w.last_write < seen
                && (w.last_free < seen || w.first_free >= seen && joins(w.thread) < w.first_free)
        })
    }

    /// Whether `reader` already knows every write and free of the page that another thread
    /// has made so far (`known(thread)`: how many of that thread's events come before the
    /// reader's next one by every order the race pass judges with; `seen(thread)` as for
    /// [`Page::written_for_good`]). A read that is only checked finds nothing then: each entry
    /// another thread left on the page is ordered before it, and the shadow need not be asked.
    #[inline]
    pub fn writes_known_by(
        &self,
        reader: u32,
        seen: impl Fn(u32) -> u32,
        known: impl Fn(u32) -> u32,
    ) -> bool {
        self.every_other_writer(reader, |w| {
            let known = known(w.thread);
            w.last_write < known && (w.last_free < known || w.first_free >= seen(w.thread))
        })
    }

    /// Whether each writer of the page but `reader` passes `test` (false when too many write
    /// it to tell them apart).
    #[inline]
    fn every_other_writer(&self, reader: u32, test: impl Fn(&Writer) -> bool) -> bool {
        self.writers()
            .is_some_and(|writers| writers.iter().filter(|w| w.thread != reader).all(test))
    }
}

/// The pages of a trace's memory, each with the one thread that touches it (or `SHARED`) and
/// the threads that write it, with their last writes and frees there.
pub struct PrivatePages {
    pages: foldhash::HashMap<u64, Page>,
    /// Each heap block's largest size at its address: a free names no size, and frees the
    /// whole block.
    blocks: foldhash::HashMap<u64, u64>,
    /// Frees (thread, position, block), noted once every allocation is known (`finish`).
    frees: Vec<(u32, u32, u64)>,
    /// The position of the first successful join of a thread by another, by (joiner,
    /// joined).
    joins: foldhash::HashMap<(u32, u32), u32>,
    /// The page and thread noted last: a thread's next access is mostly on the same page.
    last: Option<(u64, u32)>,
    /// The page and thread of the last write noted, and its position, not yet in `pages`: a
    /// thread writing a page byte by byte costs a compare a byte.
    last_write: Option<(u64, u32, u32)>,
    /// Pages visited so far (`MAX_VISITS`).
    visits: u64,
    /// More pages than `max_pages`, or more visits than `MAX_VISITS`: nothing is private.
    overflowed: bool,
    /// The most pages this table holds: `MAX_PAGES`, or its share of it
    /// ([`PrivatePages::share_of`]).
    max_pages: usize,
    /// Shared pages found ordered ([`PrivatePages::ordered_pages`]).
    ordered_pages: usize,
    /// Visits of the shared pages not ordered ([`PrivatePages::unordered_visits`]).
    unordered_visits: u64,
}

impl Default for PrivatePages {
    fn default() -> Self {
        PrivatePages {
            pages: Default::default(),
            blocks: Default::default(),
            frees: Vec::new(),
            joins: Default::default(),
            last: None,
            last_write: None,
            visits: 0,
            overflowed: false,
            max_pages: MAX_PAGES,
            ordered_pages: 0,
            unordered_visits: 0,
        }
    }
}

impl PrivatePages {
    /// A table for one of `tables` that note threads side by side, to be merged
    /// ([`PrivatePages::merge`]): it holds at most its share of the pages one table may, so
    /// that together they take no more memory than one table would.
    pub fn share_of(tables: usize) -> Self {
        PrivatePages {
            max_pages: MAX_PAGES / tables.max(1),
            ..Self::default()
        }
    }

    /// Notes event `pos` of thread `thread` (threads numbered as the walk numbers them,
    /// positions as it counts a thread's events; each thread's events in any order, the
    /// threads one after another or interleaved).
    #[inline(always)]
    pub fn note(&mut self, thread: usize, pos: u32, kind: &EventKind) {
        let thread = u32::try_from(thread).unwrap_or(SHARED - 2).min(SHARED - 2);
        match *kind {
            EventKind::Read { addr, size, .. } => self.touch(thread, addr, u64::from(size)),
            EventKind::Write { addr, size, .. } => self.write(thread, pos, addr, u64::from(size)),
            EventKind::Atomic { addr, size, op, .. } => {
                if matches!(op, AtomicOp::Store | AtomicOp::Rmw | AtomicOp::CasSuccess) {
                    self.write(thread, pos, addr, u64::from(size))
                } else {
                    self.touch(thread, addr, u64::from(size))
                }
            }
            EventKind::Alloc { addr, size, .. } => {
                let largest = self.blocks.entry(addr).or_insert(0);
                *largest = (*largest).max(size);
                self.touch(thread, addr, size);
            }
            EventKind::Free { addr, .. } => self.frees.push((thread, pos, addr)),
            _ => {}
        }
    }

    /// Notes event `pos` of thread `thread` as `note` does, and a join as `note_join` does;
    /// `index_of` numbers a joined thread as the walk does.
    // Always: the first read calls it for every event of the trace, and the compiler, left
    // to itself, once made it a call of its own (SQLite's first read 1.2x its CPU time).
    #[inline(always)]
    pub fn note_event(
        &mut self,
        thread: usize,
        pos: u32,
        kind: &EventKind,
        index_of: impl Fn(ThreadId) -> Option<usize>,
    ) {
        match *kind {
            EventKind::JoinEnd {
                child,
                joined: true,
            } => {
                if let Some(c) = index_of(child) {
                    self.note_join(thread, pos, c);
                }
            }
            _ => self.note(thread, pos, kind),
        }
    }

    /// Notes that thread `joiner` joined thread `joined` at its event `pos`.
    pub fn note_join(&mut self, joiner: usize, pos: u32, joined: usize) {
        let (Ok(joiner), Ok(joined)) = (u32::try_from(joiner), u32::try_from(joined)) else {
            return;
        };
        let at = self.joins.entry((joiner, joined)).or_insert(pos);
        *at = (*at).min(pos);
    }

    /// Where thread `joiner` first joins thread `joined` (`u32::MAX`: never).
    #[inline]
    pub fn joined_at(&self, joiner: u32, joined: u32) -> u32 {
        self.joins
            .get(&(joiner, joined))
            .copied()
            .unwrap_or(u32::MAX)
    }

    /// Takes in what another first pass noted, as if this one had noted it too: threads'
    /// events may so be read side by side, each into a table of its own, and the tables
    /// merged before [`PrivatePages::finish`].
    pub fn merge(&mut self, mut other: PrivatePages) {
        self.flush_write();
        other.flush_write();
        self.last = None;
        self.visits = self.visits.saturating_add(other.visits);
        // The merged table may hold as many pages as the two shares together.
        self.max_pages = self
            .max_pages
            .saturating_add(other.max_pages)
            .min(MAX_PAGES);
        if self.overflowed || other.overflowed || self.visits > MAX_VISITS {
            return self.overflow();
        }
        if self.pages.len() < other.pages.len() {
            std::mem::swap(&mut self.pages, &mut other.pages);
        }
        for (page, theirs) in other.pages {
            if self.pages.len() >= self.max_pages && !self.pages.contains_key(&page) {
                return self.overflow();
            }
            let Some(ours) = self.pages.get_mut(&page) else {
                self.pages.insert(page, theirs);
                continue;
            };
            if ours.owner != theirs.owner {
                ours.owner = SHARED;
            }
            ours.visits = ours.visits.saturating_add(theirs.visits);
            match theirs.writers() {
                Some(writers) => writers.iter().for_each(|w| add_writer(ours, w)),
                None => ours.written = WRITERS as u8 + 1,
            }
        }
        for (addr, size) in other.blocks {
            let largest = self.blocks.entry(addr).or_insert(0);
            *largest = (*largest).max(size);
        }
        self.frees.extend(other.frees);
        for (pair, pos) in other.joins {
            let at = self.joins.entry(pair).or_insert(pos);
            *at = (*at).min(pos);
        }
    }

    /// Once every event is noted: each free writes its block, at the largest size a block at
    /// that address had (a free of a block the trace did not see allocated writes its page).
    pub fn finish(&mut self) {
        self.flush_write();
        self.last = None;
        for (thread, pos, addr) in std::mem::take(&mut self.frees) {
            let size = self.blocks.get(&addr).copied().unwrap_or(1);
            let (first, last) = pages(addr, size);
            self.visit(thread, first, last, Write::Free(pos));
            self.last = None;
        }
        self.blocks = Default::default();
    }

    /// A read (or an allocation): the pages' owners.
    #[inline]
    fn touch(&mut self, thread: u32, addr: u64, size: u64) {
        let (first, last) = pages(addr, size);
        if first == last && self.last == Some((first, thread)) {
            return;
        }
        self.visit(thread, first, last, Write::None);
    }

    /// A write at `pos`: the pages' owners and writers.
    #[inline]
    fn write(&mut self, thread: u32, pos: u32, addr: u64, size: u64) {
        let (first, last) = pages(addr, size);
        if first == last {
            if let Some((page, t, at)) = &mut self.last_write {
                if *page == first && *t == thread {
                    *at = (*at).max(pos);
                    return;
                }
            }
        }
        self.flush_write();
        if first == last && self.last == Some((first, thread)) {
            // The page this thread touched last, already in the table: its writer is noted
            // when the next write moves on (one look-up, not two).
            self.last_write = Some((first, thread, pos));
            return;
        }
        self.visit(thread, first, last, Write::Plain(pos));
        if first == last && !self.overflowed {
            self.last_write = Some((first, thread, pos));
        }
    }

    /// Puts the last write noted into its page.
    fn flush_write(&mut self) {
        if let Some((page, thread, pos)) = self.last_write.take() {
            if let Some(p) = self.pages.get_mut(&page) {
                written(p, thread, Write::Plain(pos));
            }
        }
    }

    #[inline(never)]
    fn visit(&mut self, thread: u32, first: u64, last: u64, write: Write) {
        if self.overflowed {
            return;
        }
        self.visits = self.visits.saturating_add(last - first);
        if self.visits > MAX_VISITS {
            return self.overflow();
        }
        for page in first..=last {
            if self.pages.len() >= self.max_pages && !self.pages.contains_key(&page) {
                return self.overflow();
            }
            let p = self.pages.entry(page).or_insert(Page::new(thread));
            if p.owner != thread {
                p.owner = SHARED;
            }
            p.visits = p.visits.saturating_add(1);
            written(p, thread, write);
        }
        self.last = Some((last, thread));
    }

    fn overflow(&mut self) {
        self.overflowed = true;
        self.pages = Default::default();
        self.last_write = None;
    }

    /// Whether every page of `size` bytes at `addr` is touched by one thread alone (and so,
    /// for an access the trace holds, by the accessing thread); false for an access over more
    /// than `MAX_ACCESS_PAGES` pages.
    #[inline]
    pub fn private(&self, addr: u64, size: u32) -> bool {
        let (first, last) = pages(addr, u64::from(size));
        last - first < MAX_ACCESS_PAGES && (first..=last).all(|p| self.page(p).private())
    }

    /// Visits of pages more than one thread touches (`Page::visits`): a thread coming to
    /// such a page from another, the accesses the race pass may have to look at in its
    /// shadow memory, counted by runs.
    pub fn shared_visits(&self) -> u64 {
        self.pages
            .values()
            .filter(|p| !p.private())
            .map(|p| u64::from(p.visits))
            .sum()
    }

    /// Visits of pages that threads share and on which some two accesses are not ordered
    /// (after [`PrivatePages::note_orders`]; 0 before it), counted as
    /// [`PrivatePages::shared_visits`] counts them.
    pub fn unordered_visits(&self) -> u64 {
        self.unordered_visits
    }

    /// Takes in what the page-order pass found ([`super::PageOrderPass`]): which pages hold no
    /// pair of accesses of different threads that is not ordered both ways.
    pub fn note_orders(&mut self, orders: &super::page_order::PageOrders) {
        self.ordered_pages = 0;
        self.unordered_visits = 0;
        for (&page, p) in self.pages.iter_mut() {
            p.ordered = orders.ordered(page);
            if !p.private() {
                self.ordered_pages += usize::from(p.ordered);
                if !p.ordered {
                    self.unordered_visits += u64::from(p.visits);
                }
            }
        }
    }

    /// Pages that threads share and on which every two accesses are ordered
    /// ([`PrivatePages::note_orders`]).
    pub fn ordered_pages(&self) -> usize {
        self.ordered_pages
    }

    /// Whether every page of `size` bytes at `addr` is ordered ([`Page::ordered`]); false for
    /// an access over more than `MAX_ORDERED_PAGES` pages.
    fn ordered(&self, addr: u64, size: u32) -> bool {
        let (first, last) = pages(addr, u64::from(size));
        last - first < MAX_ORDERED_PAGES && (first..=last).all(|p| self.page(p).ordered())
    }

    /// What the first pass knows of page `page` (an address shifted by `PAGE_SHIFT`).
    #[inline]
    pub fn page(&self, page: u64) -> &Page {
        self.pages.get(&page).unwrap_or(&UNKNOWN)
    }

    /// The page of `addr`, as `page` takes it.
    #[inline]
    pub fn page_of(addr: u64) -> u64 {
        addr >> PAGE_SHIFT
    }

    /// Pages noted, private or not (0 after an overflow).
    #[cfg(test)]
    fn pages_noted(&self) -> usize {
        self.pages.len()
    }
}

/// What a thread did to a page it touched.
#[derive(Clone, Copy)]
enum Write {
    /// It read it (or allocated a block over it).
    None,
    /// A plain or atomic write, at this position.
    Plain(u32),
    /// A free of a block over it, at this position.
    Free(u32),
}

/// The writes of `thread` that page `p` keeps, a new writer if it has none yet; `None` when
/// more threads than `WRITERS` write the page (which it then says).
fn writer_of(p: &mut Page, thread: u32) -> Option<&mut Writer> {
    let n = usize::from(p.written);
    let i = p.writers.get(..n)?.iter().position(|w| w.thread == thread);
    match i {
        Some(i) => Some(&mut p.writers[i]),
        None if n < WRITERS => {
            p.written += 1;
            p.writers[n].thread = thread;
            Some(&mut p.writers[n])
        }
        None => {
            p.written = WRITERS as u8 + 1;
            None
        }
    }
}

/// Adds `w`'s writes to page `p`'s: the same thread's as its own, widened to both.
fn add_writer(p: &mut Page, w: &Writer) {
    if let Some(ours) = writer_of(p, w.thread) {
        ours.last_write = ours.last_write.max(w.last_write);
        ours.first_free = ours.first_free.min(w.first_free);
        ours.last_free = ours.last_free.max(w.last_free);
    }
}

/// Notes what `thread` did to page `p`.
#[inline]
fn written(p: &mut Page, thread: u32, write: Write) {
    if matches!(write, Write::None) {
        return;
    }
    let Some(w) = writer_of(p, thread) else {
        return;
    };
    match write {
        Write::Plain(pos) => w.last_write = w.last_write.max(pos),
        Write::Free(pos) => {
            w.first_free = w.first_free.min(pos);
            w.last_free = w.last_free.max(pos);
        }
        Write::None => {}
    }
}

/// Asks [`PrivatePages`] about a stream of accesses, remembering the page asked last: a
/// thread's next access is mostly on the same page, so most accesses cost a compare.
#[derive(Clone, Copy)]
pub struct PrivateLookup<'t> {
    pages: Option<&'t PrivatePages>,
    /// The page asked last (`u64::MAX`, which no address shifted right is, before the first)
    /// and the answer.
    last: (u64, &'t Page),
}

/// The answers for memory the first pass did not see (or any, without a first pass), and for
/// an access over several pages all private.
static UNKNOWN: Page = Page::UNKNOWN;
static PRIVATE: Page = Page::PRIVATE;
static ORDERED: Page = Page::ORDERED;

impl<'t> PrivateLookup<'t> {
    /// Asks `pages`; `None`: no memory is private.
    pub fn new(pages: Option<&'t PrivatePages>) -> Self {
        PrivateLookup {
            pages,
            last: (u64::MAX, &UNKNOWN),
        }
    }

    /// What the first pass knows of the memory of `size` bytes at `addr`: of its page, for an
    /// access on one page; else only whether all its pages are private.
    #[inline(always)]
    pub fn page(&mut self, addr: u64, size: u32) -> &'t Page {
        let Some(p) = self.pages else {
            return &UNKNOWN;
        };
        let page = PrivatePages::page_of(addr);
        if page != PrivatePages::page_of(addr.saturating_add(u64::from(size.max(1)) - 1)) {
            return if p.private(addr, size) {
                &PRIVATE
            } else if p.ordered(addr, size) {
                &ORDERED
            } else {
                &UNKNOWN
            };
        }
        if self.last.0 != page {
            self.last = (page, p.page(page));
        }
        self.last.1
    }

    /// Whether an access at `addr` may reach the race pass's shadow, as far as the page of
    /// its first byte tells (not private, not ordered): for fetching its shadow slot ahead.
    /// `last` holds the page asked last and the answer.
    #[inline(always)]
    pub fn may_reach_shadow(&self, addr: u64, last: &std::cell::Cell<(u64, bool)>) -> bool {
        let Some(p) = self.pages else {
            return true;
        };
        let page = PrivatePages::page_of(addr);
        let (asked, answer) = last.get();
        if asked == page {
            return answer;
        }
        let found = p.page(page);
        let answer = !(found.private() || found.ordered());
        last.set((page, answer));
        answer
    }

    /// The granules of `size` bytes at `addr` that lie on pages not ordered (`Page::ordered`),
    /// as runs (first and last granule), into `runs`: when the access spans pages of which
    /// some are ordered and some not (a copy into a buffer of which a few pages are also
    /// used unordered). Left empty otherwise: the access is one page's, or its pages are all
    /// ordered or all not, or it spans more than `MAX_ORDERED_PAGES`.
    pub fn unordered_runs(&self, addr: u64, size: u32, runs: &mut Vec<(u64, u64)>) {
        runs.clear();
        let Some(p) = self.pages else {
            return;
        };
        let (first, last) = pages(addr, u64::from(size));
        if first == last || last - first >= MAX_ORDERED_PAGES {
            return;
        }
        const GRANULES_SHIFT: u32 = PAGE_SHIFT - 3;
        let end = addr.saturating_add(u64::from(size.max(1)) - 1);
        let mut ordered = false;
        let mut run = None;
        for page in first..=last {
            if p.page(page).ordered() {
                ordered = true;
                if let Some(from) = run.take() {
                    runs.push((from, (page << GRANULES_SHIFT) - 1));
                }
            } else if run.is_none() {
                run = Some((page << GRANULES_SHIFT).max(addr >> 3));
            }
        }
        if let Some(from) = run {
            runs.push((from, end >> 3));
        }
        if !ordered {
            runs.clear();
        }
    }

    /// Whether `size` bytes at `addr` lie on pages one thread alone touches.
    #[inline(always)]
    pub fn private(&mut self, addr: u64, size: u32) -> bool {
        self.page(addr, size).private()
    }

    /// Where thread `joiner` first joins thread `joined` (`u32::MAX`: never, or not known).
    #[inline]
    pub fn joined_at(&self, joiner: u32, joined: u32) -> u32 {
        self.pages.map_or(u32::MAX, |p| p.joined_at(joiner, joined))
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
        p.note(0, 0, &write(0x1000, 8));
        p.note(0, 0, &read(0x1ff8, 8));
        p.note(1, 0, &read(0x2010, 4));
        p.note(0, 0, &write(0x2ff0, 8));
        p.note(1, 0, &write(0x3000, 8));
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
            0,
            &EventKind::Free {
                addr: 0x10_0000,
                site: 0,
            },
        );
        p.note(0, 0, &alloc(0x10_0000, 3 * 4096));
        p.note(0, 0, &write(0x10_2000, 8));
        p.note(0, 0, &write(0x20_0000, 8));
        p.finish();
        assert!(!p.private(0x10_2000, 8), "the block's last page");
        assert!(!p.private(0x10_0000, 1), "its first");
        assert!(p.private(0x20_0000, 8), "thread 0's other memory");
    }

    #[test]
    fn a_read_after_every_other_writer_s_last_write_is_written_for_good() {
        let mut p = PrivatePages::default();
        // Threads 1 and 2 write the page (at their events 5 and 7); thread 2 frees the
        // block over it at its event 9, after joining thread 3 at its event 8.
        p.note(0, 0, &alloc(0x1000, 64));
        p.note(1, 5, &write(0x1000, 8));
        p.note(2, 7, &write(0x1008, 8));
        p.note(3, 2, &read(0x1010, 8));
        p.note_join(2, 8, 3);
        p.note(
            2,
            9,
            &EventKind::Free {
                addr: 0x1000,
                site: 0,
            },
        );
        p.finish();
        let page = p.page(1);
        let joins = |w| p.joined_at(w, 3);
        assert!(!page.read_races_nothing(3), "two other threads write it");
        let seen = |s1, s2| move |t| if t == 1 { s1 } else { s2 };
        assert!(page.written_for_good(3, seen(6, 8), joins), "both past");
        assert!(
            !page.written_for_good(3, seen(5, 8), joins),
            "thread 1 not past"
        );
        assert!(
            !page.written_for_good(3, seen(6, 7), joins),
            "thread 2 not past"
        );
        assert!(
            !page.written_for_good(1, seen(6, 8), |w| p.joined_at(w, 1)),
            "thread 2 frees before joining thread 1"
        );
        assert!(
            page.written_for_good(2, seen(6, 0), |w| p.joined_at(w, 2)),
            "its own writes and frees do not count"
        );
        // What the reader knows by every order: each other writer's last write, and a free
        // only once it is past.
        let known = |k1, k2| move |t| if t == 1 { k1 } else { k2 };
        assert!(
            !page.writes_known_by(3, seen(6, 8), known(5, 8)),
            "thread 1's last write not known"
        );
        assert!(
            page.writes_known_by(3, seen(6, 8), known(6, 8)),
            "both last writes known, thread 2's free still to come"
        );
        assert!(
            !page.writes_known_by(3, seen(6, 10), known(6, 8)),
            "thread 2's free is past and not known"
        );
        assert!(page.writes_known_by(3, seen(6, 10), known(6, 10)));
        assert!(
            page.writes_known_by(1, seen(0, 8), known(0, 8)),
            "its own writes do not count"
        );
        // A fifth writer: too many to tell apart.
        let mut q = PrivatePages::default();
        for t in 0..5 {
            q.note(t, 1, &write(0x1000, 8));
        }
        q.finish();
        let page = q.page(1);
        assert!(!page.read_races_nothing(9));
        assert!(!page.written_for_good(9, |_| u32::MAX, |_| 0));
        assert!(!page.writes_known_by(9, |_| u32::MAX, |_| u32::MAX));
    }

    #[test]
    fn too_many_pages_leave_nothing_private() {
        let mut p = PrivatePages::default();
        p.note(0, 0, &write(0, 8));
        // One access over more pages than the table holds.
        p.note(
            0,
            0,
            &alloc(1 << 20, ((MAX_PAGES as u64) + 1) << PAGE_SHIFT),
        );
        p.finish();
        assert!(!p.private(0, 8));
        assert_eq!(p.pages_noted(), 0);
        // A share of two holds half as many; two halves merged, as many as one table.
        let half = |thread, from: u64, pages: u64| {
            let mut p = PrivatePages::share_of(2);
            p.note(thread, 0, &write(from, 8));
            p.note(thread, 0, &alloc(from + 0x1000, pages << PAGE_SHIFT));
            p
        };
        let mut over = half(0, 0, MAX_PAGES as u64 / 2);
        over.finish();
        assert!(!over.private(0, 8), "one page more than its share");
        let mut a = half(0, 0, MAX_PAGES as u64 / 2 - 1);
        a.merge(half(1, 1 << 40, MAX_PAGES as u64 / 2 - 1));
        a.finish();
        assert!(
            a.private(0, 8) && a.private(1 << 40, 8),
            "both shares merged"
        );
        assert_eq!(a.pages_noted(), MAX_PAGES);
    }

    #[test]
    fn many_huge_accesses_stop_the_pass_and_a_wide_access_is_never_private() {
        let mut p = PrivatePages::default();
        p.note(0, 0, &write(0, 8));
        // More page visits than the pass makes (here in one allocation, counted before any
        // page is visited; many 4 GiB accesses of the same pages add up the same way).
        p.note(0, 0, &alloc(1 << 32, (MAX_VISITS + 2) << PAGE_SHIFT));
        p.finish();
        assert!(!p.private(0, 8), "nothing private after too many visits");
        let mut q = PrivatePages::default();
        q.note(1, 0, &write(0, 1 << 20));
        q.finish();
        assert!(q.private(0, 4096), "one page of it");
        assert!(!q.private(0, 1 << 20), "all of it, 256 pages");
    }

    /// What a table says of each page it noted, writers in thread order.
    fn pages_said(p: &PrivatePages) -> Vec<(u64, u32, Option<Vec<Writer>>)> {
        let mut said: Vec<_> = p
            .pages
            .iter()
            .map(|(&page, q)| {
                let writers = q.writers().map(|w| {
                    let mut w = w.to_vec();
                    w.sort_by_key(|w| w.thread);
                    w
                });
                (page, q.owner, writers)
            })
            .collect();
        said.sort_by_key(|&(page, ..)| page);
        said
    }

    proptest::proptest! {
        /// Events noted into two tables, split at random (even one thread's), and merged say
        /// what one table noting every event says: the pages' owners and writers, frees
        /// included, and the joins.
        #[test]
        fn tables_merged_say_what_one_table_says(
            steps in proptest::collection::vec((0u8..6, 0u8..4, 0u8..6), 1..60),
            split in proptest::num::u64::ANY,
        ) {
            let event = |kind: u8, page: u8| {
                let addr = 0x10_000 + u64::from(page) * 0x800;
                match kind {
                    0 => read(addr, 8),
                    1 => write(addr, 8),
                    2 => alloc(addr, 0x1800),
                    _ => EventKind::Free { addr, site: 0 },
                }
            };
            let mut one = PrivatePages::default();
            let mut parts = [PrivatePages::default(), PrivatePages::default()];
            let mut pos = [0u32; 6];
            for (i, &(thread, kind, page)) in steps.iter().enumerate() {
                let t = usize::from(thread);
                let part = &mut parts[(split >> (i % 64) & 1) as usize];
                if kind == 3 && page % 2 == 0 {
                    // A join of the next thread.
                    let joined = (t + 1) % 6;
                    one.note_join(t, pos[t], joined);
                    part.note_join(t, pos[t], joined);
                } else {
                    one.note(t, pos[t], &event(kind, page));
                    part.note(t, pos[t], &event(kind, page));
                }
                pos[t] += 1;
            }
            one.finish();
            let [mut merged, other] = parts;
            merged.merge(other);
            merged.finish();
            proptest::prop_assert_eq!(pages_said(&merged), pages_said(&one));
            proptest::prop_assert_eq!(&merged.joins, &one.joins);
        }
    }
}
