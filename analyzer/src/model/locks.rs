//! Lock critical sections: the lock table (dense indices, on first sight), each thread's stack
//! of held locks, the acquisitions with the held set at their request, read recursions, the
//! rank check, and which locks are monitors.
//!
//! Recursive re-acquisitions are depth counts, not sections. A request still pending when the
//! trace ends (the program hung) becomes, at [`LockSections::finish`], an acquisition whose
//! acquire position is `u32::MAX`: a pattern event, never a critical section.
//!
//! The rank check runs here, while the held stack is built: each held entry keeps the highest
//! (rank, acquisition) at or below it, so an acquisition compares with the top once (an
//! out-of-order release recomputes the entries above it); trylocks and unranked locks are not
//! checked.

use foldhash::HashMap;

use foresight_trace::event::{ObjectId, SiteId};
use foresight_trace::tables::ObjectKind;
use foresight_trace::tables::Tables;

use super::annotations::Annotations;
use super::heap::HeapBlocks;
use super::{
    room_as_before, AcquireHow, Acquisition, IndexMap, LockModel, Mode, RankViolation,
    ReadRecursion, Sections,
};
use crate::alive::{Alive, BySlot};
use crate::stream::{Op, StreamEvent};

/// Lock object id → dense lock index, looked up at every lock operation. The recorder numbers
/// objects from 0, so small ids (almost all) are a table lookup; larger ones go to a map, so
/// that a hostile trace's huge ids cost no huge table.
#[derive(Default)]
struct LockIndex {
    small: Vec<u32>,
    large: HashMap<ObjectId, u32>,
}

impl LockIndex {
    const NONE: u32 = u32::MAX;
    /// Ids below this are kept in the table (4 MiB at most).
    const TABLE: ObjectId = 1 << 20;

    #[inline]
    fn get(&self, object: ObjectId) -> Option<u32> {
        match self.small.get(object as usize) {
            Some(&l) if l != Self::NONE => Some(l),
            Some(_) => None,
            None if object < Self::TABLE => None,
            None => self.large.get(&object).copied(),
        }
    }

    fn insert(&mut self, object: ObjectId, lock: u32) {
        if object < Self::TABLE {
            let i = object as usize;
            if self.small.len() <= i {
                self.small.resize(i + 1, Self::NONE);
            }
            self.small[i] = lock;
        } else {
            self.large.insert(object, lock);
        }
    }
}

/// A thread's lock request waiting for its outcome, and its last condition wait's site.
#[derive(Clone, Copy)]
struct Request {
    /// The request, (object, position), until its outcome.
    pending: Option<(ObjectId, u32)>,
    site: SiteId,
    mode: Mode,
    /// The site of the thread's last condition wait (the re-acquisition's site).
    cond_site: SiteId,
}

impl Default for Request {
    fn default() -> Self {
        Request {
            pending: None,
            site: 0,
            mode: Mode::Write,
            cond_site: 0,
        }
    }
}

struct HeldEntry {
    lock: u32,
    acq: u32,
    depth: u32,
    /// The highest (rank, acquisition) among this entry and those below it: the rank check is
    /// one comparison with the top of the stack.
    max_rank: Option<(u32, u32)>,
}

/// The lock-section visitor's state; [`finish`](LockSections::finish) hands it to the `Run`.
pub(super) struct LockSections<'t> {
    tables: &'t Tables,
    index: LockIndex,
    pub locks: Vec<LockModel>,
    /// Per lock: the threads that acquire it.
    pub lock_threads: Vec<Vec<u32>>,
    pub acquisitions: Sections,
    /// Backing store of every `held` range (also the waits').
    pub held_pool: Vec<u32>,
    /// Handed over by `pairs` when the walk ends.
    pub lists: AcquisitionLists,
    pairs: PairLists,
    pub read_recursions: Vec<ReadRecursion>,
    pub rank_violations: Vec<RankViolation>,
    /// The slot of each thread alive, by which the two tables below (and the pending calls',
    /// `pending.rs`) keep it.
    pub alive: Alive,
    /// Per slot: the locks its thread holds, outermost first.
    held: BySlot<Vec<HeldEntry>>,
    /// Per slot: its thread's lock request waiting for an outcome, and the site of its last
    /// condition wait.
    requests: BySlot<Request>,
    /// The first acquisitions of this segment, open at its start (`cut`).
    pub carried: u32,
    /// Locks known to be monitors before the walk (`monitors.rs`).
    pub known_monitors: foldhash::HashSet<ObjectId>,
}

/// What one segment's walk made of the locks ([`LockSections::cut`]).
pub(super) struct SegmentLocks {
    pub lock_threads: Vec<Vec<u32>>,
    pub acquisitions: Sections,
    pub held_pool: Vec<u32>,
    pub lists: AcquisitionLists,
    pub read_recursions: Vec<ReadRecursion>,
    pub rank_violations: Vec<RankViolation>,
}

impl<'t> LockSections<'t> {
    pub fn new(tables: &'t Tables, threads: usize) -> Self {
        LockSections {
            tables,
            index: LockIndex::default(),
            locks: Vec::new(),
            lock_threads: Vec::new(),
            acquisitions: Sections::default(),
            held_pool: Vec::new(),
            lists: AcquisitionLists::default(),
            pairs: PairLists::default(),
            read_recursions: Vec::new(),
            rank_violations: Vec::new(),
            alive: Alive::new(threads),
            held: BySlot::default(),
            requests: BySlot::default(),
            carried: 0,
            known_monitors: Default::default(),
        }
    }

    /// The dense index of a lock object already seen.
    pub fn index(&self, object: ObjectId) -> Option<u32> {
        self.index.get(object)
    }

    /// One event of the thread in slot `s`.
    #[inline]
    pub fn handle(
        &mut self,
        ev: &StreamEvent,
        s: usize,
        annotations: &Annotations,
        heap: &HeapBlocks,
    ) {
        let (t, pos, seq) = (ev.thread, ev.pos, ev.seq);
        match ev.op {
            Op::LockRequest { lock, mode, site } => self.lock_request(s, lock, mode, site, pos),
            Op::LockFailed { .. } => self.requests.get_mut(s).pending = None,
            Op::LockAcquired { lock, mode } => {
                self.lock_acquired(t, s, lock, mode, pos, seq, annotations, heap)
            }
            Op::LockTry {
                lock,
                mode,
                site,
                acquired: true,
            } => {
                let l = self.lock_of(lock, annotations, heap);
                self.acquire(t, s, l, mode, AcquireHow::Try, pos, pos, seq, site);
            }
            Op::LockRelease { lock, .. } => self.lock_released(s, lock, pos),
            Op::CondWaitBegin { mutex, site, .. } => {
                self.requests.get_mut(s).cond_site = site;
                if let Some(l) = self.index(mutex) {
                    self.locks[l as usize].monitor = true;
                    self.release(s, l, pos);
                }
            }
            Op::CondWaitEnd { mutex, .. } => {
                let l = self.lock_of(mutex, annotations, heap);
                let site = self.requests.get(s).map_or(0, |r| r.cond_site);
                self.acquire(
                    t,
                    s,
                    l,
                    Mode::Write,
                    AcquireHow::CondReacquire,
                    pos,
                    pos,
                    seq,
                    site,
                );
            }
            Op::CondSignal { .. } => {
                if let Some(h) = self.held.get(s).and_then(|h| h.last()) {
                    self.locks[h.lock as usize].monitor = true;
                }
            }
            // A thread that exited holding nothing and waiting for nothing lets its slot go
            // to a later thread: memory follows the threads alive, not those created over the
            // program's life. (A lock it still holds is released by no one; a request still
            // waiting is the walk's end's: such a thread keeps its slot.)
            Op::ThreadExit => {
                let idle = self.held.get(s).is_none_or(Vec::is_empty)
                    && self.requests.get(s).is_none_or(|r| r.pending.is_none());
                if idle {
                    self.held.get_mut(s).clear();
                    *self.requests.get_mut(s) = Request::default();
                    self.alive.release(t as usize);
                }
            }
            _ => {}
        }
    }

    /// A lock request of the thread in slot `s`: what [`LockSections::handle`] does with one.
    #[inline(always)]
    pub fn lock_request(&mut self, s: usize, lock: ObjectId, mode: Mode, site: SiteId, pos: u32) {
        let r = self.requests.get_mut(s);
        r.pending = Some((lock, pos));
        r.site = site;
        r.mode = mode;
    }

    /// A lock acquired: what [`LockSections::handle`] does with one.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn lock_acquired(
        &mut self,
        t: u32,
        s: usize,
        lock: ObjectId,
        mode: Mode,
        pos: u32,
        seq: u64,
        annotations: &Annotations,
        heap: &HeapBlocks,
    ) {
        let r = self.requests.get_mut(s);
        let site = r.site;
        let request = match r.pending.take() {
            Some((l, p)) if l == lock => p,
            _ => pos,
        };
        let l = self.lock_of(lock, annotations, heap);
        self.acquire(t, s, l, mode, AcquireHow::Blocking, request, pos, seq, site);
    }

    /// A lock released by the thread in slot `s`: what [`LockSections::handle`] does with one.
    #[inline(always)]
    pub fn lock_released(&mut self, s: usize, lock: ObjectId, pos: u32) {
        if let Some(l) = self.index(lock) {
            self.release(s, l, pos);
        }
    }

    /// Copies the thread's held acquisitions (outermost first) into the pool.
    pub fn push_held(&mut self, thread: u32) -> std::ops::Range<u32> {
        let start = self.held_pool.len() as u32;
        let held = self
            .alive
            .get(thread as usize)
            .and_then(|s| self.held.get(s));
        self.held_pool
            .extend(held.into_iter().flatten().map(|h| h.acq));
        start..self.held_pool.len() as u32
    }

    /// Sets the subclass a lock's later acquisitions are taken at.
    pub fn set_subclass(&mut self, object: ObjectId, subclass: u32) {
        if let Some(l) = self.index(object) {
            self.locks[l as usize].subclass = subclass;
        }
    }

    /// Sets the rank a lock's later acquisitions are checked against.
    pub fn set_rank(&mut self, object: ObjectId, rank: u32) {
        if let Some(l) = self.index(object) {
            self.locks[l as usize].rank = Some(rank);
        }
    }

    /// The dense index of a lock object, adding it on first sight.
    #[inline(always)]
    fn lock_of(&mut self, object: ObjectId, annotations: &Annotations, heap: &HeapBlocks) -> u32 {
        match self.index(object) {
            Some(l) => l,
            None => self.add_lock(object, annotations, heap),
        }
    }

    /// A lock object seen for the first time: its dense index.
    #[cold]
    #[inline(never)]
    fn add_lock(&mut self, object: ObjectId, annotations: &Annotations, heap: &HeapBlocks) -> u32 {
        let id = self.locks.len() as u32;
        let info = self.tables.objects.get(&object);
        let kind = info.map_or(ObjectKind::Mutex, |o| o.kind);
        self.locks.push(LockModel {
            object,
            name: self.tables.describe_object(object),
            class: String::new(),
            kind,
            rank: annotations.rank(object),
            subclass: annotations.subclass(object),
            monitor: self.known_monitors.contains(&object),
            block: info.and_then(|o| heap.block_of(o.address)),
        });
        self.lock_threads.push(Vec::new());
        self.index.insert(object, id);
        id
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn acquire(
        &mut self,
        thread: u32,
        slot: usize,
        lock: u32,
        mode: Mode,
        how: AcquireHow,
        request: u32,
        acquired: u32,
        seq: u64,
        site: SiteId,
    ) {
        let held = self.held.get_mut(slot);
        if let Some(h) = held.iter_mut().find(|h| h.lock == lock) {
            // Re-acquired while held: a recursive mutex, or a recursive read of an rwlock. Only
            // the outermost acquisition is a critical section.
            h.depth += 1;
            let outer = h.acq;
            if mode == Mode::Read && self.acquisitions[outer as usize].mode == Mode::Read {
                self.read_recursions.push(ReadRecursion {
                    thread,
                    lock,
                    outer,
                    pos: request,
                    site,
                });
            }
            return;
        }
        let index = self.acquisitions.len() as u32;
        let below = held.last().and_then(|h| h.max_rank);
        let rank = self.locks[lock as usize].rank;
        if let (Some(rank), Some((held_rank, held_acq)), false) =
            (rank, below, how == AcquireHow::Try)
        {
            // A successful trylock never waited, so it cannot close a cycle: like lockdep, only
            // acquisitions that can block are held to the order.
            if rank <= held_rank {
                self.rank_violations.push(RankViolation {
                    held: held_acq,
                    acquisition: index,
                    held_rank,
                    rank,
                });
            }
        }
        // The held set at the request, then this section on the stack: one borrow of it.
        let start = self.held_pool.len() as u32;
        self.held_pool.extend(held.iter().map(|h| h.acq));
        let h = start..self.held_pool.len() as u32;
        held.push(HeldEntry {
            lock,
            acq: index,
            depth: 1,
            max_rank: higher_rank(below, rank.map(|r| (r, index))),
        });
        let (new_pair, pair) = self.pairs.push(thread, slot, lock);
        self.acquisitions.push(Acquisition {
            thread,
            lock,
            mode,
            how,
            request,
            acquired,
            release: None,
            seq,
            site,
            held: h,
            subclass: self.locks[lock as usize].subclass,
            pair,
        });
        if new_pair {
            self.lock_threads[lock as usize].push(thread);
        }
    }

    #[inline(always)]
    fn release(&mut self, slot: usize, lock: u32, pos: u32) {
        let held = self.held.get_mut(slot);
        let Some(i) = held.iter().rposition(|h| h.lock == lock) else {
            return;
        };
        held[i].depth -= 1;
        if held[i].depth == 0 {
            // Releases are mostly in reverse order of acquisition: the top goes.
            let h = if i + 1 == held.len() {
                held.pop()
            } else {
                Some(held.remove(i))
            };
            let Some(h) = h else {
                return;
            };
            self.acquisitions[h.acq as usize].release = Some(pos);
            // Out-of-order release: the entries above it recompute their maximum (LIFO
            // releases, the common case, recompute nothing).
            let mut below = i.checked_sub(1).and_then(|j| held[j].max_rank);
            for e in &mut held[i..] {
                let own = self.locks[e.lock as usize].rank.map(|r| (r, e.acq));
                e.max_rank = higher_rank(below, own);
                below = e.max_rank;
            }
        }
    }

    /// Ends the walk. A request never granted: the thread was blocked there when the recording
    /// ended (a program that hung, stopped with a signal). It is a request that can be a
    /// pattern event, never a critical section: its acquire position is past every frontier,
    /// its `seq` past every event (`events`).
    /// The dense index of a lock object named only by the flight recorder's summary of
    /// edges before its window (FORMAT.md §7.15), added if the window never took it.
    pub fn summary_lock(
        &mut self,
        object: ObjectId,
        annotations: &Annotations,
        heap: &HeapBlocks,
    ) -> u32 {
        self.lock_of(object, annotations, heap)
    }

    /// Ends a segment of the walk (`model::walk`): hands over the segment's critical
    /// sections, waits' held sets, read recursions and rank violations, and starts the next
    /// segment with the sections still open — the locks held at the cut — as its first
    /// acquisitions (`carried`, renumbered from 0 in their order, with an empty held set: their
    /// lock-order edges were counted in the segment of their request). Their acquire is before
    /// every closure's start, so the lock rule keeps another thread's later section on the
    /// lock after their release; a release without its acquire in the segment finds them. The
    /// lock table, held stacks and pending requests go on.
    pub fn cut(&mut self) -> SegmentLocks {
        // (section, the slot of its thread), by section.
        let mut open: Vec<(u32, usize)> = self
            .held
            .entries()
            .enumerate()
            .flat_map(|(slot, held)| held.iter().map(move |h| (h.acq, slot)))
            .collect();
        open.sort_unstable();
        let acquisitions = std::mem::take(&mut self.acquisitions);
        let lists = self.pairs.take();
        let segment = SegmentLocks {
            lock_threads: std::mem::replace(
                &mut self.lock_threads,
                vec![Vec::new(); self.locks.len()],
            ),
            lists,
            acquisitions,
            held_pool: std::mem::take(&mut self.held_pool),
            read_recursions: std::mem::take(&mut self.read_recursions),
            rank_violations: std::mem::take(&mut self.rank_violations),
        };
        for &(old, slot) in &open {
            let mut a = segment.acquisitions[old as usize].clone();
            a.held = 0..0;
            let (new_pair, pair) = self.pairs.push(a.thread, slot, a.lock);
            a.pair = pair;
            if new_pair {
                self.lock_threads[a.lock as usize].push(a.thread);
            }
            self.acquisitions.push(a);
        }
        let renumber = |old: u32| {
            open.binary_search_by_key(&old, |&(a, _)| a)
                .expect("an open section") as u32
        };
        for h in self.held.entries_mut().flatten() {
            h.acq = renumber(h.acq);
            h.max_rank = h.max_rank.map(|(r, a)| (r, renumber(a)));
        }
        self.carried = open.len() as u32;
        segment
    }

    pub fn finish(mut self, annotations: &Annotations, heap: &HeapBlocks, events: u64) -> Self {
        for t in 0..self.alive.threads() {
            let Some(s) = self.alive.get(t) else {
                continue;
            };
            let Some(&Request {
                pending: Some((lock, request)),
                mode,
                site,
                ..
            }) = self.requests.get(s)
            else {
                continue;
            };
            let l = self.lock_of(lock, annotations, heap);
            self.acquire(
                t as u32,
                s,
                l,
                mode,
                AcquireHow::Blocking,
                request,
                u32::MAX,
                events,
                site,
            );
        }
        self.lists = self.pairs.take();
        self
    }
}

/// Which (thread, lock) pairs have acquisitions so far, each with its number; the lists
/// themselves are made from the acquisitions when an analysis asks ([`AcquisitionLists`]),
/// not grown one per pair as the walk goes (a thread per request makes a pair per thread).
#[derive(Default)]
struct PairLists {
    /// Per lock (dense index): the thread that acquired it last and their pair's number.
    last: Vec<(u32, u32)>,
    /// By slot of a thread alive: its first pairs of the segment, as (thread, lock, pair).
    /// A thread's pairs are looked up only while it lives, so they are found where the thread
    /// is, not in a map of every pair of the segment (a thread per request makes a pair per
    /// thread: the map was the largest table of the walk after the sections and the clocks).
    of_slot: BySlot<Vec<(u32, u32, u32)>>,
    /// The pairs of a thread past its first [`PAIRS_BY_SLOT`].
    more: IndexMap<(u32, u32), u32>,
    /// Per pair, in the order they were made: its (thread, lock).
    pairs: Vec<(u32, u32)>,
    /// How many pairs the last segment made.
    pairs_before: usize,
    /// Per pair: its acquisitions noted so far. (Nothing is counted by thread: a table by
    /// thread would have an entry for every thread of the trace in every segment; a thread's
    /// acquisitions are those of its pairs.)
    pair_counts: Vec<u32>,
}

/// Pairs of a thread kept by its slot and found by looking through them; more are in a map.
const PAIRS_BY_SLOT: usize = 16;

impl PairLists {
    /// Notes an acquisition of `lock` by `thread` (in `slot`); returns whether the pair is new
    /// (the thread's first acquisition of the lock in the segment) and its number.
    #[inline(always)]
    fn push(&mut self, thread: u32, slot: usize, lock: u32) -> (bool, u32) {
        match self.last.get(lock as usize) {
            Some(&(t, pair)) if t == thread => {
                self.pair_counts[pair as usize] += 1;
                (false, pair)
            }
            _ => self.push_looked_up(thread, slot, lock),
        }
    }

    #[inline(never)]
    fn push_looked_up(&mut self, thread: u32, slot: usize, lock: u32) -> (bool, u32) {
        let mine = self.of_slot.get_mut(slot);
        // The slot's pairs are of its thread before, if it had one.
        if mine.first().is_some_and(|&(t, _, _)| t != thread) {
            mine.clear();
        }
        let found = match mine.iter().find(|&&(_, l, _)| l == lock) {
            Some(&(_, _, pair)) => Some(pair),
            None if mine.len() == PAIRS_BY_SLOT => self.more.get(&(thread, lock)).copied(),
            None => None,
        };
        let (new, pair) = match found {
            Some(pair) => (false, pair),
            None => {
                let pair = self.pairs.len() as u32;
                room_as_before(&mut self.pairs, self.pairs_before);
                room_as_before(&mut self.pair_counts, self.pairs_before);
                self.pairs.push((thread, lock));
                self.pair_counts.push(0);
                if mine.len() < PAIRS_BY_SLOT {
                    mine.push((thread, lock, pair));
                } else {
                    self.more.insert((thread, lock), pair);
                }
                (true, pair)
            }
        };
        self.pair_counts[pair as usize] += 1;
        let l = lock as usize;
        if self.last.len() <= l {
            self.last.resize(l + 1, (u32::MAX, 0));
        }
        self.last[l] = (thread, pair);
        (new, pair)
    }

    /// What the lists of the acquisitions noted since the last take (by thread and by pair)
    /// are made from; starts afresh.
    fn take(&mut self) -> AcquisitionLists {
        self.last.clear();
        for mine in self.of_slot.entries_mut() {
            mine.clear();
        }
        self.more.clear();
        self.pairs_before = self.pairs.len();
        let mut pairs = std::mem::take(&mut self.pairs);
        pairs.shrink_to_fit();
        let mut pair_counts = std::mem::take(&mut self.pair_counts);
        pair_counts.shrink_to_fit();
        // The segment's readers find a pair by (thread, lock): its numbers in that order.
        let mut by_key: Vec<u32> = (0..pairs.len() as u32).collect();
        by_key.sort_unstable_by_key(|&p| pairs[p as usize]);
        AcquisitionLists {
            pairs,
            by_key,
            pair_counts,
            built: std::sync::OnceLock::new(),
        }
    }
}

/// Where each group starts, given the groups' sizes: their running sums from 0, one more at
/// the end.
fn starts_of(mut counts: Vec<u32>) -> Vec<u32> {
    let mut sum = 0;
    for c in &mut counts {
        let n = *c;
        *c = sum;
        sum += n;
    }
    counts.push(sum);
    counts
}

/// A segment's acquisitions by thread and by (thread, lock) pair, each list in program order.
/// The counts and each acquisition's pair number are kept as the walk notes them
/// ([`PairLists`]); the lists are made in one pass over the acquisitions when an analysis first
/// asks for one. Many segments are never asked (no lock-order cycle to check, no race candidate
/// under a lock), and the pass reads every acquisition record again: on a lock-heavy trace it
/// was a tenth of the analysis. Lists grown per thread during the walk instead would cost a list
/// and its allocation for each of the 10^5 threads of a thread-per-request program.
#[derive(Debug, Default)]
pub(crate) struct AcquisitionLists {
    /// Per pair number: its (thread, lock).
    pairs: Vec<(u32, u32)>,
    /// The pair numbers by (thread, lock).
    by_key: Vec<u32>,
    pair_counts: Vec<u32>,
    built: std::sync::OnceLock<BuiltLists>,
}

/// Every list in one vector per grouping, and where each group starts (one more at the end).
#[derive(Debug, Default)]
struct BuiltLists {
    /// The threads with acquisitions in the segment, ascending: the groups of `by_thread`.
    threads: Vec<u32>,
    thread_starts: Vec<u32>,
    by_thread: Vec<u32>,
    pair_starts: Vec<u32>,
    by_pair: Vec<u32>,
}

impl AcquisitionLists {
    fn built(&self, acquisitions: &Sections) -> &BuiltLists {
        self.built.get_or_init(|| {
            // The pairs' numbers hold when the walk noted every acquisition; a run put
            // together by hand (tests) noted none, and its threads are read from the
            // acquisitions themselves.
            let noted =
                self.pair_counts.iter().map(|&c| c as usize).sum::<usize>() == acquisitions.len();
            let mut threads: Vec<u32> = if noted {
                self.pairs.iter().map(|&(t, _)| t).collect()
            } else {
                acquisitions.iter().map(|a| a.thread).collect()
            };
            threads.sort_unstable();
            threads.dedup();
            let ordinal = |t: u32| threads.binary_search(&t).unwrap_or(0);
            // Each pair's thread, by its place in `threads`: one look-up per pair, not per
            // acquisition.
            let mut pair_thread = vec![0u32; if noted { self.pair_counts.len() } else { 0 }];
            for (o, &(t, _)) in pair_thread.iter_mut().zip(&self.pairs) {
                *o = ordinal(t) as u32;
            }
            let thread_of = |a: &Acquisition| match pair_thread.get(a.pair as usize) {
                Some(&o) if noted => o as usize,
                _ => ordinal(a.thread),
            };
            let mut thread_counts = vec![0u32; threads.len()];
            for a in acquisitions {
                thread_counts[thread_of(a)] += 1;
            }
            let mut pair_next = starts_of(self.pair_counts.clone());
            let mut thread_next = starts_of(thread_counts);
            let pair_starts = pair_next.clone();
            let thread_starts = thread_next.clone();
            let mut by_pair = vec![0u32; pair_starts.last().map_or(0, |&n| n as usize)];
            let mut by_thread = vec![0u32; acquisitions.len()];
            for (i, a) in acquisitions.iter().enumerate() {
                if let Some(at) = pair_next.get_mut(a.pair as usize) {
                    if let Some(slot) = by_pair.get_mut(*at as usize) {
                        *slot = i as u32;
                        *at += 1;
                    }
                }
                let at = &mut thread_next[thread_of(a)];
                by_thread[*at as usize] = i as u32;
                *at += 1;
            }
            BuiltLists {
                threads,
                thread_starts,
                by_thread,
                pair_starts,
                by_pair,
            }
        })
    }

    /// The acquisitions of thread `t` (indices into `acquisitions`, the segment's), in
    /// program order.
    pub(crate) fn of_thread<'a>(&'a self, acquisitions: &Sections, t: usize) -> &'a [u32] {
        let b = self.built(acquisitions);
        let Ok(o) = u32::try_from(t).map_or(Err(0), |t| b.threads.binary_search(&t)) else {
            return &[];
        };
        match (b.thread_starts.get(o), b.thread_starts.get(o + 1)) {
            (Some(&s), Some(&e)) => &b.by_thread[s as usize..e as usize],
            _ => &[],
        }
    }

    /// The acquisitions of `lock` by `thread`, in program order, if it has any.
    pub(crate) fn of_pair<'a>(
        &'a self,
        acquisitions: &Sections,
        thread: u32,
        lock: u32,
    ) -> Option<&'a [u32]> {
        let i = self
            .by_key
            .binary_search_by_key(&(thread, lock), |&p| self.pairs[p as usize])
            .ok()?;
        let g = self.by_key[i] as usize;
        let b = self.built(acquisitions);
        Some(&b.by_pair[b.pair_starts[g] as usize..b.pair_starts[g + 1] as usize])
    }
}

/// The higher of two (rank, acquisition) pairs; the later acquisition on a tie.
fn higher_rank(a: Option<(u32, u32)>, b: Option<(u32, u32)>) -> Option<(u32, u32)> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.0 >= x.0 { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquisition(thread: u32, lock: u32, pair: u32) -> Acquisition {
        Acquisition::blocking_write(thread, lock, 0, pair)
    }

    #[test]
    fn a_threads_acquisitions_are_grouped_from_its_pairs_whatever_its_index() {
        let mut pairs = PairLists::default();
        let mut acquisitions = Sections::default();
        for (thread, lock) in [(70_000, 0), (3, 0), (70_000, 1), (70_000, 0), (3, 1)] {
            let (_, pair) = pairs.push(thread, thread as usize % 2, lock);
            acquisitions.push(acquisition(thread, lock, pair));
        }
        let lists = pairs.take();
        assert_eq!(lists.of_thread(&acquisitions, 70_000), &[0, 2, 3]);
        assert_eq!(lists.of_thread(&acquisitions, 3), &[1, 4]);
        assert!(lists.of_thread(&acquisitions, 4).is_empty());
        assert!(lists.of_thread(&acquisitions, usize::MAX).is_empty());
        assert_eq!(lists.of_pair(&acquisitions, 70_000, 0), Some(&[0, 3][..]));
        assert_eq!(lists.of_pair(&acquisitions, 3, 1), Some(&[4][..]));
        assert_eq!(lists.of_pair(&acquisitions, 3, 2), None);
        // A run put together by hand noted nothing: its threads come from its acquisitions.
        let by_hand = AcquisitionLists::default();
        assert_eq!(by_hand.of_thread(&acquisitions, 70_000), &[0, 2, 3]);
        assert_eq!(by_hand.of_thread(&acquisitions, 3), &[1, 4]);
    }

    #[test]
    fn a_pair_is_found_again_past_the_pairs_kept_by_slot_and_not_for_the_slots_next_thread() {
        let mut pairs = PairLists::default();
        let locks = 3 * PAIRS_BY_SLOT as u32;
        let made: Vec<u32> = (0..locks).map(|l| pairs.push(5, 0, l).1).collect();
        assert_eq!(made, (0..locks).collect::<Vec<_>>());
        // Thread 6 takes every lock in between, so that thread 5 is not the last holder.
        for l in 0..locks {
            pairs.push(6, 1, l);
        }
        for l in (0..locks).rev() {
            assert_eq!(pairs.push(5, 0, l), (false, l), "lock {l}");
        }
        // Thread 7 takes slot 0 after thread 5: its pairs are its own.
        assert_eq!(pairs.push(7, 0, 0), (true, 2 * locks));
        assert_eq!(pairs.push(6, 1, 0), (false, locks));
        assert_eq!(pairs.push(7, 0, 0), (false, 2 * locks));
        let lists = pairs.take();
        assert_eq!(lists.pairs.len(), 2 * locks as usize + 1);
        let keys: Vec<(u32, u32)> = lists
            .by_key
            .iter()
            .map(|&p| lists.pairs[p as usize])
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(lists.pair_counts[0], 2);
        assert_eq!(lists.pair_counts[2 * locks as usize], 2);
    }

    #[test]
    fn lock_ids_small_and_huge_find_their_index() {
        let mut ix = LockIndex::default();
        ix.insert(3, 0);
        ix.insert(LockIndex::TABLE + 5, 1);
        ix.insert(u32::MAX, 2);
        assert_eq!(ix.get(3), Some(0));
        assert_eq!(ix.get(LockIndex::TABLE + 5), Some(1));
        assert_eq!(ix.get(u32::MAX), Some(2));
        assert_eq!(ix.get(2), None, "a gap in the table");
        assert_eq!(ix.get(1000), None, "past the table's end, below its bound");
        assert_eq!(ix.get(LockIndex::TABLE), None);
        assert!(ix.small.len() <= 4, "huge ids take no room in the table");
    }
}
