//! Checks the ordering invariant (`FORMAT.md`): the merged order of a trace must be one that
//! could have happened. A recorder bug, a clock that is not shared by all cores, or a forged file
//! shows up here as a lock acquired while another thread holds it, a thread that runs before it
//! was created, and so on.
//!
//! `Checker` takes the merged order one event at a time, so that it runs inside a streaming
//! pass (`MergedStream::with_ordering_check`) as well as over a decoded
//! [`Trace`] ([`check`]). Its state is per thread and per synchronisation object, never per
//! event.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use crate::error::{Problem, ProblemKind};
use crate::event::{Event, EventKind, LockMode, ObjectId, ThreadId};
use crate::reader::Trace;
use crate::tables::{ObjectKind, Tables};

/// At most this many ordering problems are listed; the rest are counted.
const MAX_LISTED: usize = 20;

#[derive(Default)]
struct LockState {
    exclusive: Option<(ThreadId, u32)>,
    shared: HashMap<ThreadId, u32>,
}

#[derive(Default)]
struct BarrierState {
    count: Option<u32>,
    /// Arrivals not yet matched to a generation.
    waiting: u64,
    /// The generation whose departures are under way.
    departing: Option<u64>,
}

/// Object ids below this are kept in tables indexed by id ([`LockTable`]); the recorder
/// numbers objects from 0, so a real trace's ids are small, and a hostile trace's
/// huge ones go to maps instead of making a huge table.
const DIRECT_IDS: u32 = 1 << 16;

/// The state of every lock that was acquired, by object id: a lock never acquired (or
/// destroyed since) reads as the default state, which is what the checker assumes of it.
#[derive(Default)]
struct LockTable {
    small: Vec<LockState>,
    large: HashMap<ObjectId, LockState>,
}

impl LockTable {
    #[inline]
    fn get_mut(&mut self, lock: ObjectId) -> Option<&mut LockState> {
        if lock < DIRECT_IDS {
            self.small.get_mut(lock as usize)
        } else {
            self.large.get_mut(&lock)
        }
    }

    #[inline]
    fn entry(&mut self, lock: ObjectId) -> &mut LockState {
        if lock < DIRECT_IDS {
            let i = lock as usize;
            if i >= self.small.len() {
                self.small.resize_with(i + 1, LockState::default);
            }
            &mut self.small[i]
        } else {
            self.large.entry(lock).or_default()
        }
    }

    fn remove(&mut self, lock: ObjectId) {
        if let Some(st) = self.get_mut(lock) {
            *st = LockState::default();
        }
        self.large.remove(&lock);
    }
}

/// Thread ids below this are kept in [`ThreadSet`]'s bits (512 KiB at most): the recorder
/// numbers threads from 0, and a process may create 10^5 of them over its life.
const DIRECT_THREADS: u32 = 1 << 22;

/// A set of threads by id: a bit each, for the ids a recorder gives; a hostile trace's huge
/// ones in a map instead of making a huge table.
#[derive(Default)]
struct ThreadSet {
    small: Vec<u64>,
    large: HashSet<ThreadId>,
}

impl ThreadSet {
    #[inline]
    fn contains(&self, thread: ThreadId) -> bool {
        if thread >= DIRECT_THREADS {
            return self.large.contains(&thread);
        }
        self.small
            .get(thread as usize / 64)
            .is_some_and(|w| w & (1 << (thread % 64)) != 0)
    }

    /// Notes `thread`; returns whether it is new.
    fn insert(&mut self, thread: ThreadId) -> bool {
        if thread >= DIRECT_THREADS {
            return self.large.insert(thread);
        }
        let w = thread as usize / 64;
        if w >= self.small.len() {
            // By doubling, as a thread-per-request program's ids come one after another.
            self.small.resize((w + 1).max(2 * self.small.len()), 0);
        }
        let bit = 1 << (thread % 64);
        let new = self.small[w] & bit == 0;
        self.small[w] |= bit;
        new
    }
}

/// Returns one problem per break of the invariant (at most `MAX_LISTED`, then a summary).
pub fn check(trace: &Trace) -> Vec<Problem> {
    let mut remaining: HashMap<ThreadId, usize> = trace
        .threads
        .iter()
        .map(|t| (t.thread, t.events.len()))
        .collect();
    let mut checker = Checker::new(&trace.tables);
    for m in trace.merged() {
        if let Some(r) = remaining.get_mut(&m.thread) {
            *r = r.saturating_sub(1);
        }
        let at = trace.thread(m.thread).map_or(0, |te| te.offset_of(m.index));
        checker.observe(m.thread, m.event, at, |t| {
            remaining.get(&t).is_some_and(|&r| r > 0)
        });
    }
    checker.finish(trace.file_len)
}

/// The ordering invariant checked one merged event at a time.
pub(crate) struct Checker<'t> {
    tables: &'t Tables,
    listed: Vec<Problem>,
    total: usize,
    seen_create: ThreadSet,
    /// The threads that have had an event.
    started: ThreadSet,
    /// Threads that started before any `thread-create` named them, with the offset of their
    /// first event: reported if a creation of them comes later.
    started_uncreated: HashMap<ThreadId, u64>,
    locks: LockTable,
    barriers: HashMap<ObjectId, BarrierState>,
    once_ran: HashSet<ObjectId>,
    once_done: HashSet<ObjectId>,
    sems: HashMap<ObjectId, i64>,
    /// The thread of the previous event, already in `started`.
    last_thread: Option<ThreadId>,
}

impl<'t> Checker<'t> {
    pub fn new(tables: &'t Tables) -> Self {
        Checker {
            tables,
            listed: Vec::new(),
            total: 0,
            seen_create: ThreadSet::default(),
            started: ThreadSet::default(),
            started_uncreated: HashMap::new(),
            locks: LockTable::default(),
            barriers: HashMap::new(),
            once_ran: HashSet::new(),
            once_done: HashSet::new(),
            sems: HashMap::new(),
            last_thread: None,
        }
    }

    fn report(&mut self, offset: u64, msg: String) {
        self.total += 1;
        if self.listed.len() < MAX_LISTED {
            self.listed.push(Problem {
                offset,
                kind: ProblemKind::Ordering(msg),
            });
        }
    }

    fn name(&self, o: ObjectId) -> String {
        self.tables.describe_object(o)
    }

    /// Whether [`Checker::observe`] does nothing with an event of the same thread as the one
    /// before it (it only notes the thread's first event): memory events, lock requests and
    /// every other kind that changes no state the check keeps.
    #[inline]
    pub(crate) fn ignores_past_thread_switch(kind: &EventKind) -> bool {
        matches!(
            kind,
            EventKind::Read { .. }
                | EventKind::Write { .. }
                | EventKind::Atomic { .. }
                | EventKind::Fence { .. }
                | EventKind::Alloc { .. }
                | EventKind::Free { .. }
                | EventKind::LockRequest { .. }
                | EventKind::LockFailed { .. }
                | EventKind::ThreadStart
                | EventKind::ThreadExit
                | EventKind::JoinRequest { .. }
                | EventKind::ThreadDetach { .. }
                | EventKind::ObjectInit { .. }
                | EventKind::CondSignal { .. }
                | EventKind::CondBroadcast { .. }
                | EventKind::OnceBegin { .. }
                | EventKind::SemWaitBegin { .. }
        )
    }

    /// Takes the next event of the merged order: `thread`'s event, from the chunk at byte
    /// `offset`. `unfinished(t)` says whether thread `t` still has events after this one (a
    /// join of a thread that has is reported).
    ///
    /// Lock acquisitions and releases, most of what it looks at in a lock-heavy trace, are
    /// checked here; every other kind in [`Checker::observe_other`].
    #[inline]
    pub(crate) fn observe(
        &mut self,
        thread: ThreadId,
        event: &Event,
        offset: u64,
        unfinished: impl Fn(ThreadId) -> bool,
    ) {
        let t = thread;
        // Most events are memory accesses of the thread seen last: one comparison for them.
        if self.last_thread != Some(t) {
            self.switch_to(t, offset);
        }
        match event.kind {
            EventKind::LockAcquired { lock, mode } => {
                self.acquire(t, offset, lock, mode, &unfinished)
            }
            EventKind::LockRelease { lock, .. } => self.release(t, lock),
            // A request changes nothing (a run's first event is often one).
            EventKind::LockRequest { .. } => {}
            _ => self.observe_other(t, event, offset, unfinished),
        }
    }

    /// The first event of a run of `thread`'s events.
    #[inline]
    fn switch_to(&mut self, t: ThreadId, at: u64) {
        self.last_thread = Some(t);
        // A thread seen before (all but a thread's first run) changes nothing.
        if self.started.insert(t) && !self.seen_create.contains(t) {
            self.started_uncreated.insert(t, at);
        }
    }

    /// A lock release: the releasing holder's depth goes down (a release by a thread that
    /// does not hold the lock changes nothing).
    #[inline]
    fn release(&mut self, t: ThreadId, lock: ObjectId) {
        if let Some(st) = self.locks.get_mut(lock) {
            match st.exclusive {
                Some((h, d)) if h == t => {
                    st.exclusive = if d > 1 { Some((h, d - 1)) } else { None };
                }
                _ => {
                    if let Some(c) = st.shared.get_mut(&t) {
                        *c -= 1;
                        if *c == 0 {
                            st.shared.remove(&t);
                        }
                    }
                }
            }
        }
    }

    /// [`Checker::observe`] of every kind but a lock acquisition or release, once the thread
    /// switch is noted.
    #[inline(never)]
    fn observe_other(
        &mut self,
        t: ThreadId,
        event: &Event,
        at: u64,
        unfinished: impl Fn(ThreadId) -> bool,
    ) {
        match event.kind {
            EventKind::ThreadCreate { child, .. } => {
                self.seen_create.insert(child);
                if let Some(first) = self.started_uncreated.remove(&child) {
                    self.report(
                        first,
                        format!("thread {child} runs before the event that creates it"),
                    );
                }
            }
            EventKind::JoinEnd {
                child,
                joined: true,
            } if unfinished(child) => {
                self.report(
                    at,
                    format!("thread {t} joins thread {child} before it finished"),
                );
            }
            EventKind::LockAcquired { lock, mode } => self.acquire(t, at, lock, mode, &unfinished),
            EventKind::LockTry {
                lock,
                mode,
                acquired: true,
                ..
            } => self.acquire(t, at, lock, mode, &unfinished),
            EventKind::LockRelease { lock, .. } => self.release(t, lock),
            EventKind::CondWaitBegin { mutex, .. } => {
                if let Some(st) = self.locks.get_mut(mutex) {
                    if st.exclusive.is_some_and(|(h, _)| h == t) {
                        st.exclusive = None;
                    }
                    st.shared.remove(&t);
                }
            }
            EventKind::CondWaitEnd { mutex, .. } => {
                self.acquire(t, at, mutex, LockMode::Exclusive, &unfinished)
            }
            EventKind::ObjectDestroy { object, .. } => {
                self.locks.remove(object);
            }
            EventKind::BarrierInit { barrier, count, .. } => {
                self.barriers.insert(
                    barrier,
                    BarrierState {
                        count: Some(count),
                        ..Default::default()
                    },
                );
            }
            EventKind::BarrierWaitBegin { barrier, .. } => {
                self.barriers.entry(barrier).or_default().waiting += 1;
            }
            EventKind::BarrierWaitEnd {
                barrier,
                generation,
                ..
            } => {
                let st = self.barriers.entry(barrier).or_default();
                if st.departing != Some(generation) {
                    let mut early = None;
                    if let Some(count) = st.count {
                        if st.waiting < count as u64 {
                            early = Some((st.waiting, count));
                        }
                        st.waiting = st.waiting.saturating_sub(count as u64);
                    }
                    st.departing = Some(generation);
                    if let Some((waiting, count)) = early {
                        let msg = format!(
                            "thread {t} leaves {} (generation {generation}) after only {waiting} of {count} arrivals",
                            self.name(barrier),
                        );
                        self.report(at, msg);
                    }
                }
            }
            EventKind::OnceRun { once } => {
                self.once_ran.insert(once);
            }
            EventKind::OnceEnd { once } => {
                self.once_done.insert(once);
            }
            EventKind::OnceSkip { once }
                if self.once_ran.contains(&once) && !self.once_done.contains(&once) =>
            {
                let msg = format!(
                    "thread {t} skips {} before its initialiser ended",
                    self.name(once)
                );
                self.report(at, msg);
            }
            EventKind::SemInit { sem, value, .. } => {
                self.sems.insert(sem, value as i64);
            }
            EventKind::SemPost { sem, .. } => {
                if let Some(v) = self.sems.get_mut(&sem) {
                    *v += 1;
                }
            }
            EventKind::SemWaitEnd {
                sem,
                acquired: true,
            }
            | EventKind::SemTry {
                sem,
                acquired: true,
                ..
            } => {
                if let Some(v) = self.sems.get_mut(&sem) {
                    *v -= 1;
                    if *v < 0 {
                        *v = 0;
                        let msg = format!(
                            "thread {t} takes {} before a post made it available",
                            self.name(sem)
                        );
                        self.report(at, msg);
                    }
                }
            }
            _ => {}
        }
    }

    /// A lock acquisition. An exclusive one of a lock in the table that nobody holds (most
    /// acquisitions) is settled inline; everything else in [`Checker::acquire_checked`].
    #[inline]
    fn acquire(
        &mut self,
        t: ThreadId,
        at: u64,
        lock: ObjectId,
        mode: LockMode,
        unfinished: &impl Fn(ThreadId) -> bool,
    ) {
        if mode == LockMode::Exclusive {
            // The table holds ids below `DIRECT_IDS` only: larger ones are never found here.
            if let Some(st) = self.locks.small.get_mut(lock as usize) {
                if st.exclusive.is_none() && st.shared.is_empty() {
                    st.exclusive = Some((t, 1));
                    return;
                }
            }
        }
        self.acquire_checked(t, at, lock, mode, unfinished);
    }

    /// A holder whose events have all been seen no longer keeps the lock from others: it
    /// ended holding it, and only a robust mutex is taken from a holder that died (with
    /// `EOWNERDEAD`), or its release was never written (recording stopped, FORMAT.md §7.13).
    #[inline(never)]
    fn acquire_checked(
        &mut self,
        t: ThreadId,
        at: u64,
        lock: ObjectId,
        mode: LockMode,
        unfinished: &impl Fn(ThreadId) -> bool,
    ) {
        // Looked up only for a re-entry: the object table is not consulted per acquisition.
        let tables = self.tables;
        let recursive = || {
            tables
                .objects
                .get(&lock)
                .is_some_and(|o| matches!(o.kind, ObjectKind::RecursiveMutex))
        };
        let st = self.locks.entry(lock);
        if st.exclusive.is_some_and(|(h, _)| h != t && !unfinished(h)) {
            st.exclusive = None;
        }
        st.shared.retain(|&h, _| h == t || unfinished(h));
        // Who holds the lock in a conflicting mode, and how.
        let conflict = match mode {
            LockMode::Exclusive => match st.exclusive.as_mut() {
                Some((holder, depth)) if *holder == t && recursive() => {
                    *depth += 1;
                    None
                }
                Some((holder, _)) => Some((*holder, "", "holds")),
                None => match st.shared.keys().find(|&&h| h != t) {
                    Some(&other) => Some((other, " for writing", "reads")),
                    None => {
                        st.exclusive = Some((t, 1));
                        None
                    }
                },
            },
            LockMode::Shared => match st.exclusive {
                Some((holder, _)) if holder != t => Some((holder, " for reading", "writes")),
                _ => {
                    *st.shared.entry(t).or_default() += 1;
                    None
                }
            },
        };
        if let Some((holder, how, does)) = conflict {
            let msg = format!(
                "thread {t} acquires {}{how} while thread {holder} {does} it",
                self.name(lock)
            );
            self.report(at, msg);
        }
    }

    /// The breaks found (at most `MAX_LISTED`, then a count of the rest at `end_offset`).
    pub fn finish(self, end_offset: u64) -> Vec<Problem> {
        self.snapshot(end_offset)
    }

    /// The breaks found so far, as [`Checker::finish`] would give them.
    pub fn snapshot(&self, end_offset: u64) -> Vec<Problem> {
        let mut out = self.listed.clone();
        if self.total > out.len() {
            let more = self.total - out.len();
            out.push(Problem {
                offset: end_offset,
                kind: ProblemKind::Ordering(format!("{more} more breaks not listed")),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_set_holds_small_ids_as_bits_and_huge_ones_apart() {
        let mut set = ThreadSet::default();
        for id in [
            0,
            63,
            64,
            100_000,
            DIRECT_THREADS - 1,
            DIRECT_THREADS,
            u32::MAX,
        ] {
            assert!(!set.contains(id));
            assert!(set.insert(id), "{id} is new");
            assert!(set.contains(id));
            assert!(!set.insert(id), "{id} is there already");
        }
        assert!(!set.contains(1) && !set.contains(65) && !set.contains(99_999));
        assert_eq!(set.large.len(), 2);
        assert!(set.small.len() <= (DIRECT_THREADS / 64) as usize);
    }
}
