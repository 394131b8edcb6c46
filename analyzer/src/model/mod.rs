//! The analyzer's own in-memory model of one trace (a [`Run`]), built in one walk over the
//! merged stream (`stream.rs`) by the deadlock model's passes. Serialised types stay at the edge
//! (ARCHITECTURE.md, "Layers"); everything after this module works on
//! these types.
//!
//! What is kept: lock critical sections (acquisitions with their request, acquire and release
//! positions and the locks held at the request), the waits that can hold a lock hostage (join,
//! barrier, condition and semaphore waits), the senders those waits depend on, and the
//! happens-before clocks. Memory accesses are not kept: they only add reads-from edges to the
//! clocks, and dropping them keeps the model small on long traces.
//!
//! [`ModelPass`] composes one visitor per concern, each owning its state:
//! - `HbPass` (`hb.rs`): the happens-before clocks, with the deadlock analysis's edge kinds;
//! - `annotations.rs`: lock class names, subclasses and ranks in force;
//! - `locks.rs`: the lock table, critical sections, held stacks, read recursions, the rank check
//!   and monitor locks;
//! - `waits.rs`: blocking waits entered while holding locks (it reads the held stacks);
//! - `senders.rs`: signals, posts, barrier arrivals, semaphore takes and initial values;
//! - `pending.rs`: the blocking call each thread was inside when the trace ended, and the
//!   trace's end states (read by `analyses/observed`).
//!
//! [`walk`] runs the race pass (`races/`) beside the model in the same walk, and keeps
//! what it found in [`Run::races`].
//!
//! [`walk`] cuts the walk into segments of a bounded number of events: at each cut
//! the passes hand over what they kept for prediction (critical sections, stored clocks, waits,
//! senders, race candidates) as the segment's own [`Run`], which is analysed and dropped, and
//! keep only what crosses the cut (current clocks, lock table, held stacks — the sections
//! open at the cut become the next segment's first acquisitions —, pending calls, annotations,
//! semaphore counts, shadow memory). A segment's `Run::start` is where its closures start.

use std::sync::Arc;

use foldhash::HashMap;

use foresight_trace::event::{EventKind, ObjectId, SiteId, ThreadId};
use foresight_trace::tables::Tables;
use foresight_trace::tables::{ClassKey, EndReason, ObjectKind};
use foresight_trace::Trace;

use crate::hb::{EdgeKinds, HappensBefore, HbPass};
use crate::races::{DataNames, RaceOutput, RacePass};
use crate::sites::{Location, Wrappers};
use crate::stream::{mode_of, EventSource, Mode, Op, Pass, Stream, StreamEvent};

mod annotations;
mod blocking;
mod heap;
mod locks;
mod marks;
mod monitors;
mod pending;
mod sections;
mod segment_threads;
mod senders;
mod signals;
mod waits;

use annotations::Annotations;
pub(crate) use blocking::HeldBlocking;
use blocking::HeldBlockingCalls;
use heap::HeapBlocks;
pub(crate) use locks::AcquisitionLists;
use locks::{LockSections, SegmentLocks};
pub use marks::MarksSource;
pub(crate) use marks::{AccessMarks, SegmentMarks};
pub use monitors::MonitorScan;
use pending::PendingCalls;
pub(crate) use pending::{Blocking, PendingCall, RunEnd};
pub use sections::{Iter as SectionsIter, Sections};
pub(crate) use segment_threads::SegmentThreads;
pub(crate) use senders::Handoffs;
use senders::Senders;
pub(crate) use signals::SignalContexts;
use signals::SignalScan;
use waits::HeldWaits;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireHow {
    /// A blocking `lock`/`rdlock`/`wrlock`.
    Blocking,
    /// A successful `trylock`: it never waited.
    Try,
    /// The mutex taken back when a condition wait returns (it blocks like a lock).
    CondReacquire,
}

/// One critical section: the outermost acquisition of a lock by a thread and its release.
#[derive(Clone, Debug)]
pub struct Acquisition {
    /// The thread (dense index in [`Run::threads`]).
    pub thread: u32,
    /// The lock (index in [`Run::locks`]).
    pub lock: u32,
    pub(crate) mode: Mode,
    pub(crate) how: AcquireHow,
    /// Position of the request (where the thread would block); the acquire's for a trylock.
    pub(crate) request: u32,
    /// `u32::MAX` for a request still pending when the trace ended (never granted).
    pub(crate) acquired: u32,
    /// Position of the release; `None` if the lock was still held when the trace ended.
    pub(crate) release: Option<u32>,
    /// Index of the acquire in the merged order: the trace order the lock rule compares.
    pub(crate) seq: u64,
    /// Where the lock was requested.
    pub site: SiteId,
    /// Acquisitions (indices) held by the thread at the request, outermost first.
    pub(crate) held: std::ops::Range<u32>,
    /// The lock's subclass annotation in force when it was acquired (0: the class itself).
    /// Per acquisition, like lockdep's `mutex_lock_nested`: one account is the first lock of
    /// one transfer and the second of another.
    pub(crate) subclass: u32,
    /// The number of its (thread, lock) pair in the segment, given when it is noted, so that
    /// the segment's lists by pair are made in one pass without a look-up (it sits in what
    /// would be padding: the record stays 56 bytes).
    pub(crate) pair: u32,
}

#[cfg(test)]
impl Acquisition {
    /// A blocking write acquisition of `lock` by `thread` at `site`, its events and what it
    /// held all zero: what the unit tests build runs and tables of.
    pub(crate) fn blocking_write(thread: u32, lock: u32, site: SiteId, pair: u32) -> Self {
        Acquisition {
            thread,
            lock,
            mode: Mode::Write,
            how: AcquireHow::Blocking,
            request: 0,
            acquired: 0,
            release: None,
            seq: 0,
            site,
            held: 0..0,
            subclass: 0,
            pair,
        }
    }
}

/// A lock object of the trace.
#[derive(Clone, Debug)]
pub struct LockModel {
    /// The trace's id of the lock object.
    pub object: ObjectId,
    /// The instance, for reports (its variable when static, else kind and id).
    pub(crate) name: String,
    /// The class, as a name stable across runs of one build (the node of the lock-order graph).
    pub class: String,
    pub(crate) kind: ObjectKind,
    /// The declared rank (`LockRank` annotation), once the trace has declared it.
    pub(crate) rank: Option<u32>,
    /// The subclass annotation in force (the last one seen in the merged order).
    pub(crate) subclass: u32,
    /// A monitor lock: the mutex of a condition wait, or the innermost lock held at a signal or
    /// broadcast. Its critical sections read and write the state that decides whether threads
    /// wait, proceed or join (a "done" flag, a counter), so the data flowing between them —
    /// which a lock-only trace does not record — must be assumed: the closure keeps them in
    /// trace order (`closure.rs`, the monitor rule).
    pub(crate) monitor: bool,
    /// The heap block holding the lock when it was first seen: its allocation site and the
    /// lock's offset in it (`heap.rs`).
    pub(crate) block: Option<(SiteId, u64)>,
}

/// An acquisition of a ranked lock while a lock of the same or a higher rank was held.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RankViolation {
    /// The held acquisition with the highest rank.
    pub(crate) held: u32,
    /// The acquisition that broke the order.
    pub(crate) acquisition: u32,
    pub(crate) held_rank: u32,
    pub(crate) rank: u32,
}

/// A thread of the trace, at its dense index (the trace's order of threads): its id, 4
/// bytes, its name kept apart (`ThreadNames`, read with `Run::thread_name`: a process may
/// have created 10^5 threads, most of them with no name or one that many share).
#[derive(Clone, Debug)]
pub struct ThreadModel {
    /// The trace's id of the thread.
    pub id: foresight_trace::ThreadId,
}

impl ThreadModel {
    /// The threads of these ids; the model names them from the trace's tables
    /// (`ThreadNames`).
    pub fn of_ids(ids: impl Iterator<Item = foresight_trace::ThreadId>) -> Vec<Self> {
        ids.map(|id| ThreadModel { id }).collect()
    }
}

/// The trace's threads by dense index (the trace's order of threads): their ids, as a range
/// when they are consecutive — a recorder numbers the threads it sees start, so a process that
/// created 10^5 threads costs nothing here — or listed.
#[derive(Clone, Debug)]
pub enum ThreadIds {
    /// Dense index `t` is id `first + t`.
    Range {
        /// The id of the first thread.
        first: foresight_trace::ThreadId,
        /// How many threads.
        count: u32,
    },
    /// Dense index `t` is id `ids[t]`.
    List(Arc<[foresight_trace::ThreadId]>),
}

impl Default for ThreadIds {
    fn default() -> Self {
        ThreadIds::Range { first: 0, count: 0 }
    }
}

impl ThreadIds {
    /// The threads of `threads`, in their order.
    pub fn of(threads: &[ThreadModel]) -> Self {
        let consecutive = threads
            .windows(2)
            .all(|w| w[0].id.checked_add(1) == Some(w[1].id));
        match (threads.first(), u32::try_from(threads.len())) {
            (None, _) => ThreadIds::default(),
            (Some(first), Ok(count)) if consecutive => ThreadIds::Range {
                first: first.id,
                count,
            },
            _ => ThreadIds::List(threads.iter().map(|t| t.id).collect()),
        }
    }

    /// How many threads.
    pub fn len(&self) -> usize {
        match self {
            ThreadIds::Range { count, .. } => *count as usize,
            ThreadIds::List(ids) => ids.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of the thread at dense index `t` (panics past the last, as an index would).
    pub fn id(&self, t: usize) -> foresight_trace::ThreadId {
        match self {
            ThreadIds::Range { first, count } => {
                assert!(t < *count as usize, "thread {t} of {count}");
                first + t as u32
            }
            ThreadIds::List(ids) => ids[t],
        }
    }

    /// The ids, in dense order.
    pub fn iter(&self) -> impl Iterator<Item = foresight_trace::ThreadId> + '_ {
        (0..self.len()).map(|t| self.id(t))
    }

    /// The dense index of the thread of id `id`, if the trace has it.
    pub fn position(&self, id: foresight_trace::ThreadId) -> Option<usize> {
        match self {
            ThreadIds::Range { first, count } => {
                let t = id.checked_sub(*first)?;
                (t < *count).then_some(t as usize)
            }
            ThreadIds::List(ids) => ids.iter().position(|&x| x == id),
        }
    }
}

/// The names the program gave its threads, for the threads that have one: 8 bytes for each
/// such thread and each name once, where a name per thread would be a pointer for every
/// thread of the trace.
#[derive(Debug, Default)]
pub(crate) struct ThreadNames {
    /// (dense index of a named thread, its name's index in `names`), by dense index.
    named: Vec<(u32, u32)>,
    names: Vec<String>,
}

impl ThreadNames {
    /// The names `tables` gives `threads` (dense order).
    fn of(tables: &Tables, threads: &[ThreadModel]) -> Self {
        // Keyed by string ids, from the tables rather than the events.
        let mut index: HashMap<foresight_trace::StringId, u32> = HashMap::default();
        let mut names = ThreadNames::default();
        for (t, th) in threads.iter().enumerate() {
            let Some(n) = tables.threads.get(&th.id).and_then(|i| i.name) else {
                continue;
            };
            let at = match index.get(&n) {
                Some(&at) => at,
                None => {
                    let Some(name) = tables.string(n) else {
                        continue;
                    };
                    let at = names.names.len() as u32;
                    names.names.push(name.to_string());
                    index.insert(n, at);
                    at
                }
            };
            names.named.push((t as u32, at));
        }
        names.named.shrink_to_fit();
        names
    }

    /// The name the program gave thread `t`, if any.
    fn get(&self, t: u32) -> Option<&str> {
        let i = self.named.binary_search_by_key(&t, |&(u, _)| u).ok()?;
        self.names.get(self.named[i].1 as usize).map(String::as_str)
    }
}

/// What a blocking wait waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WaitKind {
    Join {
        child: u32,
    },
    /// `generation` is `None` when the thread never left the barrier (the trace ends there).
    Barrier {
        barrier: ObjectId,
        generation: Option<u64>,
    },
    Condition {
        cond: ObjectId,
        mutex: ObjectId,
    },
    Semaphore {
        sem: ObjectId,
    },
    /// A blocking read of a pipe, socketpair or eventfd (`channel`, read through `fd`).
    Handoff {
        channel: u32,
        kind: foresight_trace::event::ChannelKind,
        fd: u32,
    },
}

/// A blocking wait entered while holding locks.
#[derive(Clone, Debug)]
pub(crate) struct Wait {
    pub(crate) thread: u32,
    pub(crate) pos: u32,
    pub(crate) kind: WaitKind,
    pub(crate) site: SiteId,
    /// Acquisitions held during the wait (for a condition wait, not its own mutex).
    pub(crate) held: std::ops::Range<u32>,
    /// The wait timed out in the trace: a timed wait, which ends by itself.
    pub(crate) timed_out: bool,
}

/// A sender one kind of wait depends on (a signal, a post, a barrier arrival).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SyncPoint {
    pub(crate) thread: u32,
    pub(crate) pos: u32,
    pub(crate) site: SiteId,
}

/// A read acquisition of an rwlock already read-held by the same thread.
#[derive(Clone, Debug)]
pub(crate) struct ReadRecursion {
    pub(crate) thread: u32,
    pub(crate) lock: u32,
    /// The outer read acquisition.
    pub(crate) outer: u32,
    pub(crate) pos: u32,
    pub(crate) site: SiteId,
}

/// One trace, converted.
#[derive(Debug, Default)]
pub struct Run {
    /// The trace's path, for reports.
    pub(crate) source: String,
    /// The trace's threads, by dense index: one table shared by every segment's run (a
    /// program may have created 10^5 threads).
    pub threads: ThreadIds,
    /// The names the program gave them, shared like `threads` ([`Run::thread_name`]).
    pub(crate) thread_names: Arc<ThreadNames>,
    /// The lock objects, by dense lock index.
    pub locks: Vec<LockModel>,
    /// Every critical section; the lock graph and the analyses name them by index here.
    pub acquisitions: Sections,
    /// Backing store of every `held` range.
    pub(crate) held_pool: Vec<u32>,
    /// Per thread and per (thread, lock): acquisition indices in program order
    /// ([`Run::thread_acquisitions`], [`Run::pair_acquisitions`]).
    pub(crate) acquisition_lists: AcquisitionLists,
    /// Per lock: the threads that acquire it.
    pub(crate) lock_threads: Vec<Vec<u32>>,
    /// The locks acquired by two threads or more: the only ones the lock rule can apply to.
    pub(crate) contended_locks: Vec<u32>,
    pub(crate) waits: Vec<Wait>,
    /// Blocking calls (I/O, sleeps, child waits) made while holding locks.
    pub(crate) blocking: Vec<HeldBlocking>,
    /// Where threads ran signal handlers and which signals they blocked.
    pub(crate) signal_contexts: SignalContexts,
    pub(crate) signals: HashMap<ObjectId, Vec<SyncPoint>>,
    pub(crate) posts: HashMap<ObjectId, Vec<SyncPoint>>,
    /// Successful semaphore waits (including `sem_trywait`).
    pub(crate) sem_takes: HashMap<ObjectId, Vec<SyncPoint>>,
    pub(crate) sem_initial: HashMap<ObjectId, u32>,
    /// Arrivals at (barrier, generation).
    pub(crate) arrivals: HashMap<(ObjectId, u64), Vec<SyncPoint>>,
    /// Writes and reads of the hand-off channels (pipes, socketpairs, eventfds).
    pub(crate) handoffs: Handoffs,
    pub(crate) read_recursions: Vec<ReadRecursion>,
    /// Acquisitions against the declared ranks, in trace order.
    pub(crate) rank_violations: Vec<RankViolation>,
    /// The happens-before clocks of the run (`hb.rs`).
    pub hb: HappensBefore,
    /// Shared by the segments of one trace: named once.
    pub(crate) sites: Arc<HashMap<SiteId, Location>>,
    /// Names of the objects that are not locks (barriers, conditions, semaphores), for reports.
    pub(crate) object_names: Arc<HashMap<ObjectId, String>>,
    /// Events of the run: of its segment, when the walk was cut into segments.
    pub events: u64,
    /// Per thread, its position where this run's segment of the trace starts (empty: the
    /// whole trace, every thread from 0). Every closure starts there: the trace up to the
    /// segment is an execution as it ran, and only the segment's events are reordered
    /// (`closure.rs`, `walk`).
    pub(crate) start: Arc<Starts>,
    /// Per thread whose exit is in the trace up to this run's end: how many events it
    /// recorded, all of them. A witness counts the threads it runs whole instead of listing
    /// each (`describe::witness_threads`).
    pub(crate) lives: Lives,
    /// The threads the closures keep state for, found when the first closure asks.
    segment_threads: std::sync::OnceLock<SegmentThreads>,
    /// The first `carried` acquisitions were open when the segment started (their request and
    /// acquire are in an earlier segment, their lock-order edges counted there).
    pub(crate) carried: u32,
    /// Which segment of its trace this run is (0, 1, …).
    pub(crate) segment: usize,
    /// More segments of the trace follow this one.
    pub(crate) segments_follow: bool,
    /// What the happens-before race pass found (`races/`), read in the same walk.
    pub races: RaceOutput,
    /// Where the segment's threads read and write memory (empty when no race analysis runs),
    /// kept by the walk or read again when first asked for (`marks.rs`).
    pub(crate) marks: SegmentMarks,
    /// How the threads' recording ended: blocking calls still open, end states.
    pub(crate) end: RunEnd,
    /// The lock-order edges the flight recorder saw before its window (FORMAT.md §7.15).
    pub(crate) earlier: Vec<EarlierEdge>,
    /// The trace is a flight recorder's window of its run.
    pub(crate) window: Option<WindowInfo>,
    /// What the trace's tables tell of the program's synchronisation: its language runtime,
    /// its semaphores (the coverage notes start from these).
    pub(crate) recording: crate::recording::RecordingFacts,
}

/// The threads that exited in the trace up to a run's end, with their events: the run's end
/// positions, shared with its marks and the next segment's start, and a bit per thread for
/// whether it exited (4 bytes and a bit per thread ever created, where a list of its own
/// would be 4 more bytes per thread for each segment alive).
#[derive(Debug, Default)]
pub(crate) struct Lives {
    /// Per thread, its events up to the run's end.
    ends: Arc<Vec<u32>>,
    /// Bit `t % 64` of word `t / 64`: thread `t` exited.
    exited: Box<[u64]>,
}

impl Lives {
    /// `exited`: bit `t % 64` of word `t / 64` set when thread `t` exited.
    fn new(ends: Arc<Vec<u32>>, exited: &[u64]) -> Self {
        Lives {
            ends,
            exited: exited.into(),
        }
    }

    /// Thread `t`'s events, all of them, when it exited (and recorded some).
    fn of(&self, t: u32) -> Option<u32> {
        let t = t as usize;
        let exited = self
            .exited
            .get(t / 64)
            .is_some_and(|w| w >> (t % 64) & 1 == 1);
        if !exited {
            return None;
        }
        self.ends.get(t).copied().filter(|&n| n > 0)
    }
}

/// Where a segment starts in each thread: at its first event in the segment, or, for a thread
/// without one, where it ends ([`Lives`]). Only the threads with events in the segment are
/// listed (the walk notes each at its first event there): a thread per request makes a few
/// thousand of those a segment, against 10^5 threads ever created, and a position per thread
/// ever created, kept by the walk beside the one it counts on, was 0.4 MB of its peak.
#[derive(Debug, Default)]
pub(crate) struct Starts {
    /// Not a segment: every thread starts at 0.
    segment: bool,
    /// (thread, position), by thread.
    at: Vec<(u32, u32)>,
}

impl Starts {
    /// A segment's starts, from its threads' first events (in any order).
    fn of_segment(mut at: Vec<(u32, u32)>) -> Self {
        at.sort_unstable();
        Starts { segment: true, at }
    }

    /// Where the segment starts in thread `t`, whose events in the trace up to the segment's
    /// end are `end`.
    #[inline]
    pub(crate) fn of(&self, t: u32, end: u32) -> u32 {
        if !self.segment {
            return 0;
        }
        match self.at.binary_search_by_key(&t, |&(u, _)| u) {
            Ok(i) => self.at[i].1,
            Err(_) => end,
        }
    }
}

/// A lock-order edge seen before the flight recorder's window: a thread holding `held`
/// requested `lock` (both dense lock indices), `count` times.
#[derive(Clone, Debug)]
pub(crate) struct EarlierEdge {
    pub(crate) held: u32,
    pub(crate) lock: u32,
    pub(crate) count: u64,
    /// The trace's id of one thread that took it (it may have no events in the window).
    pub(crate) thread: foresight_trace::event::ThreadId,
    pub(crate) held_site: SiteId,
    pub(crate) site: SiteId,
}

/// What a flight recorder's window left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WindowInfo {
    pub(crate) keep_last: u64,
    pub(crate) events_dropped: u64,
    /// Threads with events dropped.
    pub(crate) threads_dropped: usize,
    /// The window is a snapshot taken on this signal while the process ran (`--dump-on`).
    pub(crate) snapshot_signal: Option<u32>,
}

impl WindowInfo {
    pub(crate) fn of(tables: &Tables) -> Option<Self> {
        let first = tables.window.values().next()?;
        Some(WindowInfo {
            keep_last: first.keep_last,
            events_dropped: tables.window.values().map(|w| w.events_dropped).sum(),
            threads_dropped: tables
                .window
                .values()
                .filter(|w| w.events_dropped > 0)
                .count(),
            snapshot_signal: tables.snapshot_signal(),
        })
    }
}

impl Run {
    /// The acquisitions of thread `t` (indices into `acquisitions`), in program order.
    pub(crate) fn thread_acquisitions(&self, t: usize) -> &[u32] {
        self.acquisition_lists.of_thread(&self.acquisitions, t)
    }

    /// The acquisitions of `lock` by `thread`, in program order, if it has any.
    pub(crate) fn pair_acquisitions(&self, thread: u32, lock: u32) -> Option<&[u32]> {
        self.acquisition_lists
            .of_pair(&self.acquisitions, thread, lock)
    }

    /// The acquisitions of `lock` by a `thread` that has some.
    pub(crate) fn pair_acquisitions_of(&self, thread: u32, lock: u32) -> &[u32] {
        self.pair_acquisitions(thread, lock)
            .expect("a (thread, lock) pair with acquisitions")
    }

    /// The acquisitions `acq`'s thread held when it requested `acq`, outermost first.
    pub fn held(&self, acq: &Acquisition) -> &[u32] {
        &self.held_pool[acq.held.start as usize..acq.held.end as usize]
    }

    pub(crate) fn held_range(&self, r: &std::ops::Range<u32>) -> &[u32] {
        &self.held_pool[r.start as usize..r.end as usize]
    }

    /// Where `site` is in the program (`site#N` when the trace does not name it).
    pub fn location(&self, site: SiteId) -> Location {
        self.sites.get(&site).cloned().unwrap_or_else(|| Location {
            text: format!("site#{site}"),
            ..Location::default()
        })
    }

    /// The lock class of an acquisition: its lock's class, with `/N` for subclass N > 0.
    pub(crate) fn acquisition_class(&self, a: &Acquisition) -> String {
        let base = &self.locks[a.lock as usize].class;
        if a.subclass == 0 {
            base.clone()
        } else {
            format!("{base}/{}", a.subclass)
        }
    }

    /// The run is one segment of its trace, not the whole trace.
    pub(crate) fn segmented(&self) -> bool {
        self.segment > 0 || self.start.segment || self.segments_follow
    }

    /// Where the segment starts in thread `t` (0 for a whole trace).
    #[inline]
    pub(crate) fn start_of(&self, t: u32) -> u32 {
        let end = self.lives.ends.get(t as usize).copied().unwrap_or(0);
        self.start.of(t, end)
    }

    /// Whether thread `t` has events in this run's segment (true when the run does not know
    /// where its threads end: a run put together by hand).
    pub(crate) fn has_events_in_segment(&self, t: u32) -> bool {
        self.lives
            .ends
            .get(t as usize)
            .is_none_or(|&end| end > self.start_of(t))
    }

    /// The threads the segment's closures keep state for ([`SegmentThreads`]).
    pub(crate) fn segment_threads(&self) -> &SegmentThreads {
        self.segment_threads
            .get_or_init(|| SegmentThreads::of(self))
    }

    /// Thread `t`'s events, when the trace up to this run's end has every one of them (it
    /// exited there).
    pub(crate) fn whole_life(&self, t: u32) -> Option<u32> {
        self.lives.of(t)
    }

    pub(crate) fn thread_label(&self, t: u32) -> String {
        let id = self.threads.id(t as usize);
        format!("thread {id} \"{}\"", self.thread_name(t))
    }

    /// Thread `t`'s name in reports: the one the program gave it, or `thread-N`.
    pub fn thread_name(&self, t: u32) -> std::borrow::Cow<'_, str> {
        match self.thread_names.get(t) {
            Some(name) => std::borrow::Cow::Borrowed(name),
            None => std::borrow::Cow::Owned(format!("thread-{}", self.threads.id(t as usize))),
        }
    }
}

/// Room for a segment's buffer that the last segment filled to `last`: once the buffer holds
/// its first few items (those pushed at a cut, while the last segment's run is still being
/// analysed), it is made as large as that and a sixteenth more in one step, rather than grown
/// by doubling from nothing (up to half of a doubled buffer is unused at the segment's end,
/// where the walk's heap peaks).
#[inline]
pub(crate) fn room_as_before<T>(buf: &mut Vec<T>, last: usize) {
    if buf.len() == buf.capacity() && buf.len() >= 64 && buf.capacity() < last {
        buf.reserve_exact(last + last / 16 - buf.len());
    }
}

/// A map keyed by the analyzer's own dense indices (never values chosen by the trace, so there
/// is nothing to flood): foldhash with a fixed seed, much cheaper than SipHash on the
/// per-acquisition path, and the same layout from run to run.
pub(crate) type IndexMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// Converts a decoded trace. `progress` is called now and then with the events done.
pub fn build_run(trace: &Trace, progress: &mut dyn FnMut(u64)) -> Run {
    build_run_with(trace, &Wrappers::default(), progress)
}

/// [`build_run`], with the project's lock wrappers (`sites.rs`) skipped in the sites it names.
pub fn build_run_with(trace: &Trace, wrappers: &Wrappers, progress: &mut dyn FnMut(u64)) -> Run {
    let stream = Stream::of_trace(trace);
    let model = ModelPass::for_trace(trace)
        .with_wrappers(
            wrappers
                .clone()
                .for_recorded_depth(trace.header.stack_depth),
        )
        .with_end_reason(trace.trailer.as_ref().map(|t| t.reason))
        .with_process(&trace.header);
    walk(
        &stream,
        model,
        trace.merged().map(|m| (m.thread, m.index, m.event.kind)),
        progress,
        SegmentBounds::of_events(0),
        &mut |_| {},
        None,
    )
}

/// The default of `--segment-events`: the events whose model one segment holds (about 23
/// bytes an event on a lock-heavy trace: some 100 MB).
pub const DEFAULT_SEGMENT_EVENTS: u64 = 4 << 20;

/// The default of `--segment-threads`: the threads that may start in one segment before it is
/// cut. What a segment keeps of a thread that started in it — its start, its stored receive
/// clocks, its sections, its pending calls — is kept until the segment is analysed, whether the
/// thread still runs or not; a program that runs a thread per request would otherwise keep
/// every request since the last cut (16,384 of them are about 5 MB of model).
pub const DEFAULT_SEGMENT_THREADS: u64 = 1 << 14;

/// When the walk cuts a trace into segments ([`walk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentBounds {
    /// Events in a segment (0: one segment, the whole trace, whatever `threads` says).
    pub events: u64,
    /// Threads that start in a segment (0: no bound).
    pub threads: u64,
}

impl SegmentBounds {
    /// Segments of `events` events and the default bound on threads.
    pub fn of_events(events: u64) -> Self {
        SegmentBounds {
            events,
            threads: DEFAULT_SEGMENT_THREADS,
        }
    }

    /// Whether a trace of `events` events (unknown: `None`) and `threads` threads may be cut.
    pub fn may_cut(&self, events: Option<u64>, threads: usize) -> bool {
        self.events > 0
            && (events.is_none_or(|n| n > self.events)
                || (self.threads > 0 && threads as u64 > self.threads))
    }
}

impl Default for SegmentBounds {
    fn default() -> Self {
        Self::of_events(DEFAULT_SEGMENT_EVENTS)
    }
}

/// The events of the walk again from the start, in the same merged order (thread id,
/// position in the thread, event): a second read of the same file.
pub(crate) type Replay<'r> =
    &'r dyn Fn() -> Box<dyn Iterator<Item = (ThreadId, usize, EventKind)> + 'r>;

/// The walk of one trace, the one entry every command and library caller uses: reads the
/// events once into the model and the race pass, side by side, in segments of
/// `bounds.events` events (0: one segment, the whole trace): each time that many events were
/// read, or before the first event of a thread once `bounds.threads` threads started in the
/// segment, the model of the segment's events is handed to `on_segment` as a [`Run`] of its own, which the caller analyses like a whole trace and
/// drops, and the walk goes on with what crosses the cut — current clocks, the lock table,
/// the locks held (their sections become the next segment's first acquisitions), pending
/// calls, annotations, semaphore counts, the race pass's shadow memory. Returns the last
/// segment's run, which holds the end of the trace (observed deadlocks) and the race pass's
/// happens-before races. Memory: one segment's model, not the trace's.
///
/// Sound: a segment's closures start with the whole trace before it inside (`Run::start`),
/// so a reordering never moves an event across the cut; a finding that would need that is
/// only potential (its edges are in two segments) or missed.
///
/// With `replay`, the race pass is left out of the walk until the trace's first memory
/// access (a plain read or write, or an atomic) when `replay` can read the events again: a
/// trace with none — a program not built for race detection, a lock-heavy trace — never
/// pays for the race pass's clocks and locksets. At the first access, a race pass is made
/// and fed the events before it again (`replay`, the first `seq` of them), so it holds what
/// it would have held had it seen them as they went by, and it goes on from there: the same
/// findings. Before the first access the race pass finds nothing, and every segment's race
/// output is what it would have been: no pairs, no accesses. (A replay that reads fewer events
/// than the walk did — the file shrank — marks the race pass incomplete: no race is reported
/// from the trace.)
pub fn walk(
    stream: &Stream<'_>,
    model: ModelPass<'_>,
    events: impl EventSource,
    progress: &mut dyn FnMut(u64),
    bounds: SegmentBounds,
    on_segment: &mut dyn FnMut(Run),
    replay: Option<Replay<'_>>,
) -> Run {
    let without_races = !model.race_pass;
    let races = match replay {
        Some(_) => None,
        None if without_races => None,
        None => Some(
            RacePass::new(model.threads.len(), Some(model.tables), model.race_memory)
                .with_data_names(model.data_names)
                .with_private_pages(model.private_pages),
        ),
    };
    let mut passes = Segmented {
        stream,
        model,
        races,
        without_races,
        replay,
        every: bounds.events,
        every_threads: if bounds.events > 0 { bounds.threads } else { 0 },
        in_segment: 0,
        started: 0,
        handed_out: 0,
        on_segment,
    };
    let read = events.feed(stream, &mut passes, progress);
    // What the walk read and no segment before this one counted (events of threads the trace
    // does not list are read but handed to no pass).
    let handed_out = passes.handed_out;
    let races = match passes.races {
        Some(r) => r.finish(),
        None => RaceOutput::without_accesses(),
    };
    let mut run = passes.model.finish();
    run.events = read.saturating_sub(handed_out);
    run.races = races;
    run
}

/// The model and the race pass, cut every `every` events and before the first event of a
/// thread once `every_threads` started in the segment.
struct Segmented<'t, 'f, 's, 'r> {
    stream: &'s Stream<'s>,
    model: ModelPass<'t>,
    /// `None` until the first memory access when the walk can be replayed.
    races: Option<RacePass<'t>>,
    /// The race pass switched off ([`ModelPass::without_race_pass`]): `races` stays `None`.
    without_races: bool,
    replay: Option<Replay<'r>>,
    every: u64,
    /// 0: no bound on the threads of a segment.
    every_threads: u64,
    in_segment: u64,
    /// Threads whose first event is in the segment.
    started: u64,
    /// Events of the segments handed out.
    handed_out: u64,
    on_segment: &'f mut dyn FnMut(Run),
}

impl Segmented<'_, '_, '_, '_> {
    /// The first memory access, event `seq` of the walk: a race pass fed the events before it
    /// again.
    #[cold]
    #[inline(never)]
    fn start_races(&mut self, seq: u64) {
        let mut races = RacePass::new(
            self.model.threads.len(),
            Some(self.model.tables),
            self.model.race_memory,
        )
        .with_data_names(self.model.data_names)
        .with_private_pages(self.model.private_pages);
        if let Some(replay) = self.replay {
            let before = usize::try_from(seq).unwrap_or(usize::MAX);
            let read = self
                .stream
                .drive(replay().take(before), &mut races, &mut |_| {});
            if read != seq {
                races.abandon();
            }
        }
        self.races = Some(races);
    }
}

/// How many events ahead of the one handled the walk asks for the shadow slot of an access
/// ([`RacePass::prefetch`]): far enough for the slot to arrive before its look-up, near
/// enough for it to be still in the cache then.
const PREFETCH_AHEAD: usize = 8;

/// How many events ahead the walk asks for an access's spilled shadow entries
/// ([`RacePass::prefetch_entries`]), its slot asked for [`PREFETCH_AHEAD`] events ahead having
/// arrived by then.
const PREFETCH_ENTRIES_AHEAD: usize = 3;

impl Pass for Segmented<'_, '_, '_, '_> {
    type Output = ();

    #[inline]
    fn handle(&mut self, ev: &StreamEvent) {
        // Cut before the first event of the next segment, so that a trace of exactly `every`
        // events is one segment.
        if self.in_segment == self.every && self.every > 0 {
            self.cut();
        }
        if ev.pos == 0 {
            self.thread_starts();
        }
        self.model.touch(ev.thread, ev.pos);
        self.handle_one(ev);
        self.in_segment += 1;
    }

    fn finish(self) {}

    /// The run's events, a segment's share at a time: the cut is looked for once per run
    /// (and once per cut), not once per event, and the events go to the passes without a
    /// call each.
    #[inline]
    fn handle_run(
        &mut self,
        stream: &Stream<'_>,
        thread: u32,
        first: u32,
        seq: u64,
        events: &[foresight_trace::event::Event],
    ) {
        if first == 0 && !events.is_empty() {
            if self.every > 0 && self.in_segment == self.every {
                self.cut();
            }
            self.thread_starts();
        }
        let mut done = 0;
        while done < events.len() {
            // As in `handle`: the cut comes before the first event of the next segment.
            let mut n = events.len() - done;
            if self.every > 0 {
                if self.in_segment == self.every {
                    self.cut();
                }
                n = n.min(usize::try_from(self.every - self.in_segment).unwrap_or(usize::MAX));
            }
            if n > 0 {
                self.model.touch(thread, first + done as u32);
            }
            for (i, ev) in events[done..done + n].iter().enumerate() {
                let pos = first + (done + i) as u32;
                let seq = seq + (done + i) as u64;
                if let Some(races) = &self.races {
                    if let Some(ahead) = events.get(done + i + PREFETCH_AHEAD) {
                        races.prefetch(&ahead.kind);
                    }
                    if let Some(near) = events.get(done + i + PREFETCH_ENTRIES_AHEAD) {
                        races.prefetch_entries(&near.kind);
                    }
                }
                // Lock operations (past the thread's first event) go to the model unconverted
                // while there is no race pass (they are no memory access, which would start
                // it): what `handle_one` would do with them, without making an `Op` to match
                // again.
                if pos != 0 && self.races.is_none() {
                    let model = &mut self.model;
                    match ev.kind {
                        EventKind::LockRequest { lock, mode, site } => {
                            model.lock_request(thread, pos, lock, mode_of(mode), site);
                            continue;
                        }
                        EventKind::LockAcquired { lock, mode } => {
                            model.lock_acquired(thread, pos, seq, lock, mode_of(mode));
                            continue;
                        }
                        EventKind::LockRelease { lock, .. } => {
                            model.lock_released(thread, pos, lock);
                            continue;
                        }
                        _ => {}
                    }
                }
                self.handle_one(&StreamEvent {
                    thread,
                    pos,
                    seq,
                    op: stream.convert(thread, pos, ev.kind),
                });
            }
            // The events above updated the clocks and sections; where the thread's next
            // segment would start is set once.
            self.model.seen_up_to(thread, first + (done + n) as u32);
            self.in_segment += n as u64;
            done += n;
        }
    }
}

impl Segmented<'_, '_, '_, '_> {
    /// One event to the model and (once there is one) the race pass.
    #[inline(always)]
    fn handle_one(&mut self, ev: &StreamEvent) {
        self.model.handle(ev);
        match &mut self.races {
            Some(r) => r.handle(ev),
            None if ev.op.is_access() && !self.without_races => {
                self.start_races(ev.seq);
                if let Some(r) = &mut self.races {
                    r.handle(ev);
                }
            }
            None => {}
        }
    }

    /// A thread's first event comes next: the segment is cut first when it holds as many
    /// threads' starts as it may.
    #[inline]
    fn thread_starts(&mut self) {
        if self.every_threads > 0 && self.started == self.every_threads {
            self.cut();
        }
        self.started += 1;
    }

    /// Ends the segment: its run to `on_segment`.
    #[cold]
    #[inline(never)]
    fn cut(&mut self) {
        let mut run = self.model.cut();
        run.events = self.in_segment;
        run.races = match &mut self.races {
            Some(r) => r.cut(),
            None => RaceOutput::without_accesses(),
        };
        self.handed_out += self.in_segment;
        self.in_segment = 0;
        self.started = 0;
        (self.on_segment)(run);
        self.model.resume();
    }
}

/// The deadlock model of one trace as a [`Pass`]: its visitors, fed in an order that lets each
/// read what the earlier ones made of the same event (a wait reads the held stack after the
/// condition wait released its mutex).
pub struct ModelPass<'t> {
    tables: &'t Tables,
    source: String,
    threads: ThreadIds,
    thread_names: Arc<ThreadNames>,
    events: u64,
    hb: HbPass,
    annotations: Annotations<'t>,
    heap: HeapBlocks,
    locks: LockSections<'t>,
    waits: HeldWaits,
    blocking: HeldBlockingCalls,
    signals: SignalScan,
    senders: Senders,
    pending: PendingCalls,
    marks: AccessMarks,
    /// Where the segments' marks are read from when asked for, instead of kept by the walk.
    marks_source: Option<Arc<dyn MarksSource>>,
    /// The walk keeps the marks: a race analysis runs and they cannot be read again.
    keep_marks: bool,
    wrappers: Wrappers,
    end_reason: Option<EndReason>,
    process: Option<(u32, u64)>,
    /// The race pass's memory budget, bytes (`--race-memory`; 0: no race analysis).
    race_memory: u64,
    /// Memory one thread alone touches ([`ModelPass::with_private_pages`]).
    private_pages: Option<&'t crate::races::PrivatePages>,
    /// The same, asked by the plain accesses the clocks' reads-from would look at.
    reads_from_private: crate::races::PrivateLookup<'t>,
    /// Names the race pass's static data instead of the tables ([`ModelPass::with_data_names`]).
    data_names: Option<&'t dyn DataNames>,
    /// The walk runs the race pass (off only to measure the rest of the walk alone).
    race_pass: bool,
    /// Per thread, events seen so far: where the next segment starts (empty while a segment
    /// cut off is analysed).
    seen: Vec<u32>,
    /// The positions of `seen` at the last cut, held by that segment's run while it is
    /// analysed, and taken back when the walk resumes.
    cut_at: Option<Arc<Vec<u32>>>,
    /// Bit `t % 64` of word `t / 64`: thread `t` has had an event in the current segment, at
    /// the position `touched_at` gives (`Starts`).
    touched: Vec<u64>,
    touched_at: Vec<(u32, u32)>,
    /// How many threads the last segment had events of.
    touched_before: usize,
    /// Segments handed out so far.
    segments: usize,
    /// Named once, shared by every segment's run.
    sites: Option<Arc<HashMap<SiteId, Location>>>,
    object_names: Option<Arc<HashMap<ObjectId, String>>>,
}

impl<'t> ModelPass<'t> {
    /// A model of a trace with these threads (in the stream's dense order) and `events` events
    /// in all.
    pub fn new(tables: &'t Tables, source: String, threads: Vec<ThreadModel>, events: u64) -> Self {
        let n = threads.len();
        ModelPass {
            tables,
            source,
            thread_names: Arc::new(ThreadNames::of(tables, &threads)),
            threads: ThreadIds::of(&threads),
            events,
            hb: HbPass::new(n, EdgeKinds::DEADLOCK),
            annotations: Annotations::new(tables),
            heap: HeapBlocks::new(tables),
            locks: LockSections::new(tables, n),
            waits: HeldWaits::new(),
            blocking: HeldBlockingCalls::new(),
            signals: SignalScan::new(n),
            senders: Senders::new(),
            pending: PendingCalls::new(n),
            marks: AccessMarks::default(),
            marks_source: None,
            keep_marks: true,
            wrappers: Wrappers::default(),
            end_reason: None,
            process: None,
            race_memory: crate::races::DEFAULT_MEMORY_MIB << 20,
            data_names: None,
            private_pages: None,
            reads_from_private: crate::races::PrivateLookup::new(None),
            race_pass: true,
            seen: vec![0; n],
            cut_at: None,
            touched: vec![0; n.div_ceil(64)],
            touched_at: Vec::new(),
            touched_before: 0,
            segments: 0,
            sites: None,
            object_names: None,
        }
    }

    /// A model of a streamed trace whose threads are named by their ids (`thread-N`), for
    /// tests and benchmarks that do not read the threads' names from the tables.
    pub fn of_stream(stream: &'t foresight_trace::TraceStream, source: &str) -> Self {
        let threads = stream.threads().map(|id| ThreadModel { id }).collect();
        let mut model = Self::new(stream.tables(), source.to_string(), threads, 0);
        model.thread_names = Arc::default();
        model
    }

    /// The trace's monitor locks, scanned before a walk that is cut into segments
    /// ([`MonitorScan`]): each is a monitor from its first section on.
    pub fn with_monitors(mut self, monitors: MonitorScan) -> Self {
        self.locks.known_monitors = monitors.monitors;
        self
    }

    /// How the process ended, from the trace's trailer (none for a trace cut short).
    pub fn with_end_reason(mut self, reason: Option<EndReason>) -> Self {
        self.end_reason = reason;
        self
    }

    /// The recorded process, from the trace's header: its pid and the start of recording
    /// (a trace that ends in an `exec` is continued by a trace of the same pid that started
    /// later, unless the program it executed could not be recorded).
    pub fn with_process(mut self, header: &foresight_trace::tables::Header) -> Self {
        self.process = Some((header.pid, header.start_unix_ns));
        self
    }

    /// The project's lock wrappers, skipped (with the standard library's) when a site is named
    /// (`Wrappers::for_recorded_depth` with the trace header's stack depth, to trust the
    /// frames the recorder unwound through).
    pub fn with_wrappers(mut self, wrappers: Wrappers) -> Self {
        self.wrappers = wrappers;
        self
    }

    /// The race pass's memory budget, bytes (`--race-memory`); 0 leaves the race analysis
    /// out (`graph`, which reports no race).
    pub fn with_race_memory(mut self, bytes: u64) -> Self {
        self.race_memory = bytes;
        self.keep_marks(bytes != 0 && self.marks_source.is_none());
        self
    }

    /// Static data named by `names` rather than by the trace's data records (a trace that was
    /// not symbolised: the command line names the variables its findings hold from the
    /// binaries, [`DataNames`]).
    pub fn with_data_names(mut self, names: &'t dyn DataNames) -> Self {
        self.data_names = Some(names);
        self
    }

    /// The pages of memory one thread alone touches over the whole trace, found by a first
    /// pass ([`crate::races::PrivatePages`]): the race pass leaves their accesses out, and so
    /// do the clocks' reads-from edges, which such memory never draws (its writer is always
    /// the reader's own thread); and, of both, reads of memory no other thread writes.
    pub fn with_private_pages(mut self, private: &'t crate::races::PrivatePages) -> Self {
        self.private_pages = Some(private);
        self.reads_from_private = crate::races::PrivateLookup::new(Some(private));
        self
    }

    /// A walk without the race pass: every segment's race output is that of a trace without
    /// accesses, the rest of the walk (the merged read, the model, the clocks and reads-from)
    /// the same. For measuring that rest alone (`examples/race_bench.rs`, `walk`); no command
    /// offers it, since the report would then say nothing of races.
    pub fn without_race_pass(mut self) -> Self {
        self.race_pass = false;
        self
    }

    /// Whether the walk keeps the marks; a walk that does not holds no entry per thread for
    /// them (a program may have created 10^5 threads). One that does makes its table at the
    /// first event (`handle_other`), not while the model is being set up, when a later
    /// setting may drop it again.
    fn keep_marks(&mut self, keep: bool) {
        self.keep_marks = keep;
        self.marks = AccessMarks::default();
    }

    /// The trace can be read again (a file): each segment's marks of where threads read and
    /// write are read from `source` when an analysis first asks for them, not kept by the
    /// walk (`marks.rs`), so that a walk whose segments never need them does not pay for them.
    pub fn with_marks_from(mut self, source: Arc<dyn MarksSource>) -> Self {
        self.marks_source = Some(source);
        self.keep_marks(false);
        self
    }

    /// A model for the lock-order graph alone (`graph`): no race analysis, and no reads-from,
    /// so no table of last writers (`last_writers.rs`). The runs' clocks then lack the
    /// reads-from edges every prediction needs: nothing may be predicted from them.
    pub fn lock_order_only(mut self) -> Self {
        self.race_memory = 0;
        self.keep_marks(false);
        self.hb = HbPass::new(
            self.threads.len(),
            EdgeKinds::DEADLOCK.without(EdgeKinds::READS_FROM),
        );
        self
    }

    pub(crate) fn for_trace(trace: &'t Trace) -> Self {
        let tables = &trace.tables;
        let threads = ThreadModel::of_ids(trace.threads.iter().map(|t| t.thread));
        Self::new(
            tables,
            trace.path.display().to_string(),
            threads,
            trace.event_count(),
        )
    }
}

impl ModelPass<'_> {
    /// One event to the visitors.
    #[inline(always)]
    fn handle_event(&mut self, ev: &StreamEvent) {
        let (t, pos) = (ev.thread as usize, ev.pos);
        if let Some(s) = self.seen.get_mut(t) {
            *s = pos + 1;
        }
        // The lock operations that make most of a lock-heavy trace go, past a thread's first
        // event, straight to the three visitors that read them (the clocks' step, the lock
        // sections, the pending calls: the others ignore them), in the visitors' order.
        if pos != 0 {
            match ev.op {
                Op::LockRequest { lock, mode, site } => {
                    return self.lock_request(ev.thread, pos, lock, mode, site)
                }
                Op::LockAcquired { lock, mode } => {
                    return self.lock_acquired(ev.thread, pos, ev.seq, lock, mode)
                }
                Op::LockRelease { lock, .. } => return self.lock_released(ev.thread, pos, lock),
                // Plain reads and writes, most of an instrumented trace, matter to the model
                // only through the clocks' reads-from (`handle_other`): settled here without
                // a call, unless the walk keeps the marks. A read of memory no other thread
                // writes, and a write of memory no other thread touches, draw no reads-from
                // edge, and are not looked at: the clocks are the same, as when reads-from is
                // not asked for (the thread's own entry is stepped at its next
                // synchronisation).
                Op::Read { addr, size, .. } if !self.keep_marks => {
                    let page = self.reads_from_private.page(addr, size);
                    // On a page whose accesses are all ordered (decision 0033), the thread
                    // knows every earlier write of another thread there, by the
                    // synchronisation alone, which these clocks follow too.
                    if page.read_races_nothing(ev.thread) || page.ordered() {
                        return;
                    }
                    // Nor does a read whose thread already knows every other writer's last
                    // write of the page and its frees (each taken as past, `seen` past all):
                    // each granule's last writer is known, and the look-up would learn
                    // nothing (SQLite's threads reading what another left under a lock).
                    let hb = &self.hb;
                    if page.writes_known_by(
                        ev.thread,
                        |_| u32::MAX,
                        |w| hb.knows_prefix(ev.thread, w),
                    ) {
                        return;
                    }
                    return self.hb.plain_read(t, pos, addr, size);
                }
                Op::Write { addr, size, .. } if !self.keep_marks => {
                    // A write of a page whose accesses are all ordered: every read of it is
                    // left out above, and one over it and other pages finds a writer it
                    // knows, this one or an earlier.
                    let page = self.reads_from_private.page(addr, size);
                    if page.private() || page.ordered() {
                        return;
                    }
                    return self.hb.plain_write(t, pos, addr, size);
                }
                _ => {}
            }
        }
        self.handle_other(ev);
    }

    /// A lock request past its thread's first event, but for `seen`: what
    /// [`ModelPass::handle_event`] does with one.
    #[inline(always)]
    fn lock_request(&mut self, t: u32, pos: u32, lock: ObjectId, mode: Mode, site: SiteId) {
        self.hb.lock_wait(t as usize, pos);
        let s = self.locks.alive.slot(t as usize);
        self.locks.lock_request(s, lock, mode, site, pos);
        self.pending
            .lock_request(t as usize, s, pos, site, lock, mode);
    }

    /// A lock acquired past its thread's first event, but for `seen`.
    #[inline(always)]
    fn lock_acquired(&mut self, t: u32, pos: u32, seq: u64, lock: ObjectId, mode: Mode) {
        self.hb.lock_acquired(t as usize, pos, lock, mode);
        let s = self.locks.alive.slot(t as usize);
        let (annotations, heap) = (&self.annotations, &self.heap);
        self.locks
            .lock_acquired(t, s, lock, mode, pos, seq, annotations, heap);
        self.pending.lock_outcome(s, lock);
    }

    /// A lock released past its thread's first event, but for `seen`.
    #[inline(always)]
    fn lock_released(&mut self, t: u32, pos: u32, lock: ObjectId) {
        self.hb.lock_released(t as usize, pos, lock);
        let s = self.locks.alive.slot(t as usize);
        self.locks.lock_released(s, lock, pos);
    }

    /// Thread `t`'s event at `pos` is in the current segment: the segment starts there in it
    /// unless an earlier one was.
    #[inline(always)]
    fn touch(&mut self, t: u32, pos: u32) {
        let (w, bit) = ((t / 64) as usize, 1u64 << (t % 64));
        if self.touched.len() <= w {
            self.touched.resize(w + 1, 0);
        }
        if self.touched[w] & bit == 0 {
            self.touched[w] |= bit;
            room_as_before(&mut self.touched_at, self.touched_before);
            self.touched_at.push((t, pos));
        }
    }

    /// Where the current segment starts, taken for its run; the next one's will be noted.
    fn take_starts(&mut self, whole: bool) -> Starts {
        if whole {
            // Never cut: the trace whole, every thread from 0.
            self.touched_at.clear();
            return Starts::default();
        }
        for &(t, _) in &self.touched_at {
            self.touched[(t / 64) as usize] &= !(1u64 << (t % 64));
        }
        self.touched_before = self.touched_at.len();
        let mut at = std::mem::take(&mut self.touched_at);
        at.shrink_to_fit();
        Starts::of_segment(at)
    }

    /// Thread `t` has been seen up to position `next` (excluded): where the next segment
    /// starts in it.
    #[inline(always)]
    fn seen_up_to(&mut self, t: u32, next: u32) {
        if let Some(s) = self.seen.get_mut(t as usize) {
            *s = next;
        }
    }

    /// Every event but the lock operations [`ModelPass::handle_event`] settles: each visitor
    /// in turn.
    #[inline(never)]
    fn handle_other(&mut self, ev: &StreamEvent) {
        self.hb.handle(ev);
        self.heap.handle(ev);
        if self.keep_marks {
            if self.marks.unmade() {
                // Where the segment starts in each thread, as far as the walk has gone: at the
                // first event noted for the threads it touched, where the others stand.
                let mut starts = self.seen.clone();
                for &(t, pos) in &self.touched_at {
                    if let Some(s) = starts.get_mut(t as usize) {
                        *s = pos;
                    }
                }
                let start = |t: usize| starts.get(t).copied().unwrap_or(0);
                self.marks = AccessMarks::new(self.threads.len(), start);
            }
            self.marks.handle(ev);
        }
        // Reads and writes matter to the model only through the clocks' reads-from.
        if matches!(ev.op, Op::Read { .. } | Op::Write { .. }) {
            return;
        }
        // The thread's slot in the tables of the threads alive; the lock sections give it
        // back at the thread's exit, after which the pending calls only reset its entry.
        let s = self.locks.alive.slot(ev.thread as usize);
        self.annotations.handle(ev, &mut self.locks);
        self.locks.handle(ev, s, &self.annotations, &self.heap);
        self.waits.handle(ev, &mut self.locks);
        self.blocking.handle(ev, &mut self.locks);
        self.signals.handle(ev);
        self.senders.handle(ev);
        self.pending.handle(ev, s);
    }
}

impl Pass for ModelPass<'_> {
    type Output = Run;

    #[inline(always)]
    fn handle(&mut self, ev: &StreamEvent) {
        self.handle_event(ev)
    }

    fn finish(mut self) -> Run {
        let earlier = self.earlier_edges();
        let end = Arc::new(std::mem::take(&mut self.seen));
        let lives = Lives::new(end.clone(), self.pending.exited());
        let start = Arc::new(self.take_starts(self.segments == 0));
        let marks = self.segment_marks(&start, &end);
        // The threads' end needs their slots (held by the lock sections) before `finish`
        // takes the sections.
        let run_end = self.pending.finish(
            &self.locks.alive,
            self.tables,
            &self.threads,
            self.end_reason,
            self.process,
        );
        let locks = self
            .locks
            .finish(&self.annotations, &self.heap, self.events);
        let carried = locks.carried;
        let segment = SegmentLocks {
            lock_threads: locks.lock_threads,
            acquisitions: locks.acquisitions,
            held_pool: locks.held_pool,
            lists: locks.lists,
            read_recursions: locks.read_recursions,
            rank_violations: locks.rank_violations,
        };
        let parts = RunParts {
            locks: locks.locks,
            segment,
            carried,
            hb: self.hb.finish(),
            waits: self.waits.finish(),
            blocking: self.blocking.finish(),
            signal_contexts: self.signals.finish(),
            senders: self.senders.finish(),
            marks,
            // Only the last segment (or the whole trace) has the trace's end.
            end: run_end,
        };
        let mut run = Self::assemble(
            self.tables,
            &self.wrappers,
            &self.source,
            &self.threads,
            &mut self.sites,
            &mut self.object_names,
            &self.annotations,
            start,
            self.segments,
            parts,
        );
        run.earlier = earlier;
        run.lives = lives;
        run.thread_names = self.thread_names.clone();
        run
    }
}

/// What one segment's walk made, before it is a [`Run`].
struct RunParts {
    locks: Vec<LockModel>,
    segment: SegmentLocks,
    carried: u32,
    hb: HappensBefore,
    waits: Vec<Wait>,
    blocking: Vec<HeldBlocking>,
    signal_contexts: SignalContexts,
    senders: Senders,
    marks: SegmentMarks,
    end: RunEnd,
}

impl<'t> ModelPass<'t> {
    /// Ends a segment of the walk (`walk`): the run of the events since the last
    /// cut; what crosses the cut stays in the pass.
    fn cut(&mut self) -> Run {
        let earlier = self.earlier_edges();
        // The positions themselves, not a copy: the walk takes them back at `resume`.
        let end = Arc::new(std::mem::take(&mut self.seen));
        self.cut_at = Some(end.clone());
        let lives = Lives::new(end.clone(), self.pending.exited());
        let start = Arc::new(self.take_starts(false));
        let carried_here = self.locks.carried;
        let segment = self.locks.cut();
        let parts = RunParts {
            locks: self.locks.locks.clone(),
            segment,
            carried: carried_here,
            hb: self.hb.cut(),
            waits: self.waits.cut(),
            blocking: self.blocking.cut(),
            signal_contexts: self.signals.cut(),
            senders: self.senders.cut(),
            marks: self.segment_marks(&start, &end),
            end: RunEnd::default(),
        };
        let mut run = Self::assemble(
            self.tables,
            &self.wrappers,
            &self.source,
            &self.threads,
            &mut self.sites,
            &mut self.object_names,
            &self.annotations,
            start,
            self.segments,
            parts,
        );
        run.earlier = earlier;
        run.lives = lives;
        run.thread_names = self.thread_names.clone();
        run.segments_follow = true;
        self.segments += 1;
        run
    }

    /// The walk goes on after a cut: where it stands, from the segment's end.
    fn resume(&mut self) {
        // The segment's run is dropped by now: the positions are the walk's again, uncopied.
        if let Some(end) = self.cut_at.take() {
            self.seen = Arc::try_unwrap(end).unwrap_or_else(|shared| shared.to_vec());
        }
    }

    /// The marks of the segment that ends here (at `end`): those the walk kept, or where to
    /// read them.
    fn segment_marks(&mut self, start: &Arc<Starts>, end: &Arc<Vec<u32>>) -> SegmentMarks {
        match &self.marks_source {
            Some(source) if self.race_memory != 0 => SegmentMarks::read_later(
                source.clone(),
                self.threads.clone(),
                start.clone(),
                end.clone(),
            ),
            _ => SegmentMarks::kept(self.marks.cut(end)),
        }
    }

    /// The lock-order edges the flight recorder saw before its window: in the first
    /// segment's run only, so that they are counted once.
    fn earlier_edges(&mut self) -> Vec<EarlierEdge> {
        if self.segments > 0 {
            return Vec::new();
        }
        self.tables
            .earlier_lock_order
            .iter()
            .map(|e| EarlierEdge {
                held: self
                    .locks
                    .summary_lock(e.held, &self.annotations, &self.heap),
                lock: self
                    .locks
                    .summary_lock(e.requested, &self.annotations, &self.heap),
                count: e.count,
                thread: e.thread,
                held_site: e.held_site,
                site: e.site,
            })
            .filter(|e| e.held != e.lock)
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        tables: &Tables,
        wrappers: &Wrappers,
        source: &str,
        threads: &ThreadIds,
        sites_cache: &mut Option<Arc<HashMap<SiteId, Location>>>,
        names_cache: &mut Option<Arc<HashMap<ObjectId, String>>>,
        annotations: &Annotations,
        start: Arc<Starts>,
        segment_index: usize,
        parts: RunParts,
    ) -> Run {
        let sites = sites_cache
            .get_or_insert_with(|| Arc::new(convert_sites(tables, wrappers)))
            .clone();
        let object_names = names_cache
            .get_or_insert_with(|| {
                Arc::new(
                    tables
                        .objects
                        .values()
                        .filter(|o| !o.kind.is_lock())
                        .map(|o| (o.id, tables.describe_object(o.id)))
                        .collect(),
                )
            })
            .clone();
        let RunParts {
            mut locks,
            segment,
            carried,
            hb,
            waits,
            blocking,
            signal_contexts,
            senders,
            marks,
            end,
        } = parts;
        for lock in &mut locks {
            // The subclass is per acquisition (`Run::acquisition_class`), not part of the lock's.
            lock.class = annotations
                .class_name(lock.object)
                .map(str::to_string)
                .unwrap_or_else(|| class_name(tables, &sites, lock, source));
        }
        let contended_locks = (0..segment.lock_threads.len() as u32)
            .filter(|&l| segment.lock_threads[l as usize].len() >= 2)
            .collect();
        Run {
            source: source.to_string(),
            threads: threads.clone(),
            thread_names: Arc::default(),
            locks,
            acquisitions: segment.acquisitions,
            held_pool: segment.held_pool,
            acquisition_lists: segment.lists,
            lock_threads: segment.lock_threads,
            contended_locks,
            waits,
            blocking,
            signal_contexts,
            signals: senders.signals,
            posts: senders.posts,
            sem_takes: senders.sem_takes,
            sem_initial: senders.sem_initial,
            arrivals: senders.arrivals,
            handoffs: senders.handoffs,
            read_recursions: segment.read_recursions,
            rank_violations: segment.rank_violations,
            hb,
            sites,
            object_names,
            events: 0,
            races: RaceOutput::default(),
            marks,
            end,
            earlier: Vec::new(),
            window: WindowInfo::of(tables),
            recording: crate::recording::RecordingFacts::of(tables),
            start,
            lives: Lives::default(),
            segment_threads: std::sync::OnceLock::new(),
            carried,
            segment: segment_index,
            segments_follow: false,
        }
    }
}

/// The class of a lock, as a name that is the same in every run of one build: the static
/// variable; else the site of its init; else, for a lock inside a heap block, the block's
/// allocation site and the lock's offset in it; else the site of its first use. Sites are
/// named at the user's frame (`sites.rs`), so that a lock a wrapper initialises or allocates
/// is keyed by the wrapper's caller: one class per role. Objects the table does not know get
/// a name private to their trace, so that they never match across traces.
fn class_name(
    tables: &Tables,
    sites: &HashMap<SiteId, Location>,
    lock: &LockModel,
    source: &str,
) -> String {
    let object = lock.object;
    let site_text = |site: &SiteId| {
        sites
            .get(site)
            .map_or_else(|| tables.describe_site(*site), |l| l.text.clone())
    };
    let Some(info) = tables.objects.get(&object) else {
        return format!("object#{object} of {source}");
    };
    match &info.class {
        ClassKey::Static(frame) => tables
            .symbols
            .get(frame)
            .and_then(|s| s.locations.first())
            .and_then(|l| l.function)
            .and_then(|f| tables.string(f))
            .map(str::to_string)
            .unwrap_or_else(|| tables.describe_frame(frame)),
        ClassKey::InitSite(site) => {
            format!("{} initialised at {}", info.kind.name(), site_text(site))
        }
        ClassKey::FirstUse(site) => match lock.block {
            Some((alloc, 0)) => format!(
                "{} in a block allocated at {}",
                info.kind.name(),
                site_text(&alloc)
            ),
            Some((alloc, offset)) => format!(
                "{} at offset {offset} of a block allocated at {}",
                info.kind.name(),
                site_text(&alloc)
            ),
            None => format!("{} first used at {}", info.kind.name(), site_text(site)),
        },
    }
}

/// Every site of the trace, named at the user's frame (`sites.rs`).
fn convert_sites(tables: &Tables, wrappers: &Wrappers) -> HashMap<SiteId, Location> {
    // Named in one order whatever the tables' hash map's seed: the names outlive the segment
    // they are made in, and where they land among its freed blocks decided whether a 10^5-thread
    // run peaked at 18.5 or 20.4 MB (one run in three low, by the seed); in falling id order
    // every run takes the low one (`docs/perf/many-threads.md`).
    let mut ids: Vec<SiteId> = tables.sites.keys().copied().collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids.into_iter()
        .map(|id| (id, crate::sites::user_location(tables, id, wrappers)))
        .collect()
}

#[cfg(test)]
mod thread_ids_tests {
    use super::{ThreadIds, ThreadModel};

    fn of(ids: &[u32]) -> ThreadIds {
        let threads: Vec<ThreadModel> = ids.iter().map(|&id| ThreadModel { id }).collect();
        ThreadIds::of(&threads)
    }

    #[test]
    fn consecutive_ids_are_a_range_and_others_a_list_with_the_same_answers() {
        let range = of(&[5, 6, 7]);
        assert!(matches!(range, ThreadIds::Range { first: 5, count: 3 }));
        let list = of(&[5, 7, 9]);
        assert!(matches!(list, ThreadIds::List(_)));
        for (ids, t) in [(&range, [5, 6, 7]), (&list, [5, 7, 9])] {
            assert_eq!(ids.len(), 3);
            assert_eq!(ids.iter().collect::<Vec<_>>(), t);
            assert_eq!(ids.id(1), t[1]);
            assert_eq!(ids.position(t[2]), Some(2));
            assert_eq!(ids.position(4), None);
            assert_eq!(ids.position(100), None);
        }
        assert!(of(&[]).is_empty());
        assert_eq!(of(&[u32::MAX]).id(0), u32::MAX);
    }
}
