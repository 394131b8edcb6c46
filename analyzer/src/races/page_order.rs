//! Pages on which every two accesses of different threads are ordered (decision 0033).
//!
//! A race, and a candidate for prediction, is a pair of accesses of different threads to the
//! same bytes, one a write, that are not ordered by both of the race pass's orders
//! (happens-before with lock hand-offs, and without them). If no such pair exists on a 4 KiB
//! page even when every two accesses to the page are taken as overlapping, none exists at
//! the bytes either, and the race pass can leave every access of the page out of its shadow
//! memory. Which pages those are depends on the whole trace, later accesses included, so a
//! pass of its own finds them before the walk: it follows the same two orders over the same
//! merged stream, and keeps per page, per thread, the position of its last read and its last
//! write. An access then meets another thread's earlier ones on the page unordered exactly
//! when its thread does not know that thread's last conflicting one (a thread's events are
//! known as a prefix).
//!
//! Real programs hand buffers and workspaces from thread to thread through queues whose
//! hand-offs order every access: zstd's two-worker trace has 19,826 pages that more than one
//! thread touches, and 163 on which two accesses are not ordered both ways. Its race pass
//! kept 67 M accesses in the shadow; with this pass, under one million.

use foldhash::{HashMap, HashMapExt};

use foresight_trace::event::{Event, EventKind};

use crate::hb::{EdgeKinds, HbPass};
use crate::stream::{Op, Pass, Stream, StreamEvent};

use super::private::PrivatePages;

/// Threads beyond which the pass concludes nothing (every page may hold unordered pairs):
/// its clocks would keep a place for every thread ever created, which the race pass's own
/// let go of.
const MAX_THREADS: usize = 4096;
/// Pages kept at most (40 bytes a page, 24 more per thread that uses it, and the index's
/// entry); beyond, nothing is concluded.
const MAX_PAGES: usize = 1 << 21;
/// Page visits beyond the first of each access (a wide copy or a large block's free visits
/// each of its pages); beyond, nothing is concluded.
const MAX_VISITS: u64 = 1 << 28;
/// Threads a page keeps apart; a page more threads touch is taken as holding an unordered
/// pair (each access compares with every other thread's uses).
const MAX_USERS: usize = 64;
/// No access of the thread there yet.
const NONE: u32 = u32::MAX;

/// One thread's last read and last write of a page.
#[derive(Clone, Copy, Debug)]
struct Use {
    thread: u32,
    read: u32,
    write: u32,
    /// The page's `version` after this thread's last use, and whether the other threads'
    /// reads were checked then too (a write's check): until another thread uses the page, the
    /// thread's clocks, which only grow, still know every other use, and its next access
    /// (a read, or a write if `checked_reads`) need not ask them again.
    seen: u64,
    checked_reads: bool,
}

/// What the pass keeps of a page.
#[derive(Clone, Debug, Default)]
struct PageUses {
    /// Two accesses of different threads here were found not ordered both ways.
    unordered: bool,
    /// Counts the uses noted.
    version: u64,
    uses: Vec<Use>,
}

/// What the pass found: the pages that hold a pair of accesses not ordered both ways.
#[derive(Debug, Default)]
pub struct PageOrders {
    unordered: foldhash::HashSet<u64>,
    /// False when the pass concluded nothing (too many threads, pages or visits, or clocks
    /// over their budget).
    complete: bool,
}

impl PageOrders {
    /// Whether every two accesses of different threads to `page` (an address shifted by 12)
    /// are ordered both ways, as far as the pass knows.
    pub fn ordered(&self, page: u64) -> bool {
        self.complete && !self.unordered.contains(&page)
    }
}

/// The pass (a [`Pass`] over the merged stream, as the race pass reads it).
pub struct PageOrderPass<'p> {
    /// The first pass's pages: accesses to a page one thread alone touches, and reads of a
    /// page no other thread writes, are part of no conflicting pair and are not followed.
    private: Option<&'p PrivatePages>,
    with_locks: HbPass,
    without_locks: HbPass,
    index: HashMap<u64, u32>,
    pages: Vec<PageUses>,
    /// Live heap blocks (a free names no size, and writes its whole block).
    blocks: HashMap<u64, u64>,
    visits: u64,
    gave_up: bool,
    /// The page and thread of the last single-page access, what the first pass says of it
    /// (the thread's accesses there are left out; its reads are), and its index in `pages`
    /// (`NONE` before it has one): a thread's next access is mostly on the same page.
    last: (u64, u32, Skip, u32),
}

/// What the first pass lets the pass skip of a thread's accesses to a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Skip {
    Nothing,
    Reads,
    All,
}

impl<'p> PageOrderPass<'p> {
    /// A pass over `threads` threads; `private` is the first pass's table, when there is one.
    fn new(threads: usize, private: Option<&'p PrivatePages>) -> Self {
        PageOrderPass {
            private,
            with_locks: HbPass::streaming(threads, EdgeKinds::SYNC | EdgeKinds::LOCK),
            without_locks: HbPass::streaming(threads, EdgeKinds::SYNC),
            index: HashMap::new(),
            pages: Vec::new(),
            blocks: HashMap::new(),
            visits: 0,
            gave_up: threads > MAX_THREADS,
            last: (u64::MAX, 0, Skip::Nothing, NONE),
        }
    }

    /// Runs the pass over `events` (the walk's merged stream), or concludes nothing at once
    /// for a trace of more threads than it follows.
    pub fn run(
        threads: usize,
        private: Option<&'p PrivatePages>,
        stream: &Stream<'_>,
        events: impl crate::stream::EventSource,
    ) -> PageOrders {
        let mut pass = Self::new(threads, private);
        if pass.gave_up {
            return PageOrders::default();
        }
        stream.walk(events, &mut pass, &mut |_| {});
        pass.finish()
    }

    #[inline]
    fn sync(&mut self, ev: &StreamEvent) {
        self.with_locks.handle(ev);
        self.without_locks.handle(ev);
    }

    /// An access of `thread` at `pos` to `size` bytes at `addr`.
    #[inline(always)]
    fn access(&mut self, thread: u32, pos: u32, addr: u64, size: u64, write: bool) {
        if self.gave_up {
            return;
        }
        let first = addr >> 12;
        let last = addr.saturating_add(size.max(1) - 1) >> 12;
        if first == last {
            if (self.last.0, self.last.1) != (first, thread) {
                let skip = match self.private.map(|p| p.page(first)) {
                    Some(page) if page.private() => Skip::All,
                    Some(page) if page.read_races_nothing(thread) => Skip::Reads,
                    _ => Skip::Nothing,
                };
                self.last = (first, thread, skip, NONE);
            }
            let skip = self.last.2;
            if skip == Skip::All || !write && skip == Skip::Reads {
                return;
            }
            let i = match self.last.3 {
                NONE => {
                    let i = self.index_of(first);
                    self.last.3 = i;
                    i
                }
                i => i,
            };
            self.use_page(thread, pos, i, write);
            return;
        }
        self.visits = self.visits.saturating_add(last - first);
        if self.visits > MAX_VISITS {
            self.gave_up = true;
            return;
        }
        for page in first..=last {
            let i = self.index_of(page);
            self.use_page(thread, pos, i, write);
        }
    }

    /// The index of `page` in `pages`, a new one if it has none (`NONE` once the pass has
    /// given up for want of room).
    #[inline]
    fn index_of(&mut self, page: u64) -> u32 {
        if let Some(&i) = self.index.get(&page) {
            return i;
        }
        if self.pages.len() >= MAX_PAGES {
            self.gave_up = true;
            return NONE;
        }
        let i = self.pages.len() as u32;
        self.index.insert(page, i);
        self.pages.push(PageUses::default());
        i
    }

    /// Notes a use of page `i`, and whether it meets another thread's unordered.
    #[inline(always)]
    fn use_page(&mut self, thread: u32, pos: u32, i: u32, write: bool) {
        let Some(p) = self.pages.get_mut(i as usize) else {
            return;
        };
        if p.unordered {
            return;
        }
        p.version += 1;
        let version = p.version;
        let mine = p.uses.iter().position(|u| u.thread == thread);
        // Whether the other threads' uses are as they were at this thread's last use, and
        // were checked for this kind of access then.
        let unchanged = mine.is_some_and(|j| {
            let u = &p.uses[j];
            u.seen + 1 == version && (!write || u.checked_reads)
        });
        if !unchanged {
            let (with_locks, without_locks) = (&self.with_locks, &self.without_locks);
            let known = |other: u32, at: u32| {
                at == NONE
                    || with_locks.knows_prefix(thread, other) > at
                        && without_locks.knows_prefix(thread, other) > at
            };
            let meets_unordered = p.uses.iter().any(|u| {
                u.thread != thread
                    && (!known(u.thread, u.write) || write && !known(u.thread, u.read))
            });
            if meets_unordered {
                p.unordered = true;
                p.uses = Vec::new();
                return;
            }
        }
        let j = match mine {
            Some(j) => j,
            None if p.uses.len() >= MAX_USERS => {
                p.unordered = true;
                p.uses = Vec::new();
                return;
            }
            None => {
                p.uses.push(Use {
                    thread,
                    read: NONE,
                    write: NONE,
                    seen: 0,
                    checked_reads: false,
                });
                p.uses.len() - 1
            }
        };
        let u = &mut p.uses[j];
        if write {
            u.write = pos;
        } else {
            u.read = pos;
        }
        // A check for a write looked at the others' reads too; one skipped leaves it as it was.
        u.checked_reads = if unchanged { u.checked_reads } else { write };
        u.seen = version;
    }
}

impl Pass for PageOrderPass<'_> {
    type Output = PageOrders;

    /// The race pass's events as it takes them (`RacePass::handle`): plain and atomic accesses,
    /// a free as a write of its whole block, everything else to the two orders.
    fn handle(&mut self, ev: &StreamEvent) {
        match ev.op {
            Op::Read { addr, size, .. } => {
                self.access(ev.thread, ev.pos, addr, u64::from(size), false)
            }
            Op::Write { addr, size, .. } => {
                self.access(ev.thread, ev.pos, addr, u64::from(size), true)
            }
            Op::Atomic(a) => {
                self.sync(ev);
                self.access(ev.thread, ev.pos, a.addr, u64::from(a.size), a.stores);
            }
            Op::Alloc { addr, size, .. } => {
                self.blocks.insert(addr, size);
                self.sync(ev);
            }
            Op::Free { addr, .. } => {
                if let Some(size) = self.blocks.remove(&addr) {
                    self.access(ev.thread, ev.pos, addr, size, true);
                }
                self.sync(ev);
            }
            _ => self.sync(ev),
        }
    }

    /// Plain accesses, most of a run, taken as they are; the rest converted.
    #[inline]
    fn handle_run(
        &mut self,
        stream: &Stream<'_>,
        thread: u32,
        first: u32,
        seq: u64,
        events: &[Event],
    ) {
        for (i, ev) in events.iter().enumerate() {
            let pos = first + i as u32;
            match ev.kind {
                EventKind::Read { addr, size, .. } => {
                    self.access(thread, pos, addr, u64::from(size), false)
                }
                EventKind::Write { addr, size, .. } => {
                    self.access(thread, pos, addr, u64::from(size), true)
                }
                kind => self.handle(&StreamEvent {
                    thread,
                    pos,
                    seq: seq + i as u64,
                    op: stream.convert(thread, pos, kind),
                }),
            }
        }
    }

    fn finish(self) -> PageOrders {
        let complete = !self.gave_up && self.with_locks.complete() && self.without_locks.complete();
        if !complete {
            return PageOrders::default();
        }
        let unordered = self
            .index
            .iter()
            .filter(|&(_, &i)| self.pages[i as usize].unordered)
            .map(|(&page, _)| page)
            .collect();
        PageOrders {
            unordered,
            complete,
        }
    }
}
