//! The one walk over a trace that every analysis shares: the merged (causal) stream of events,
//! converted from the wire types into the analyzer's [`Op`], fed to passes.
//!
//! The shape is RAPID's (one engine per analysis, each with its own state and one
//! `handle(event)`): each concern is a [`Pass`] that owns its state and sees every event once, in
//! merged order; `Stream::drive` feeds one stream to one pass, and a tuple of passes runs them
//! side by side in the same walk. The events come from any iterator of (thread id, position in
//! the thread, wire event) in the merged order — `Trace::merged()` today, a reader that keeps one
//! decoded chunk per thread tomorrow — so nothing here needs the whole trace in memory.
//!
//! Conversion happens once, here: the wire types stay at the edge (ARCHITECTURE.md,
//! "Layers"), and what every pass would otherwise work out for itself is worked out
//! once per event — the dense index of a created or joined thread, the generation of a barrier
//! arrival, what an atomic access orders.
//! [`Op`] is a plain `Copy` value; converting costs one match per event, lost in the merge.
//!
//! The one thing known ahead is the generation of a barrier arrival (that of the thread's next
//! departure): read from the thread's next events in a decoded trace, or scanned per thread
//! before the walk (`BarrierGenerations`) by a reader that keeps only a chunk per thread.
//!
//! Invariants: events reach a pass in the merged order (keys non-decreasing, ties by thread and
//! position), `seq` counts every event of the stream (also those of threads the trace does not
//! list, which are skipped), and positions are those of the thread's own event list.

use foldhash::{HashMap, HashMapExt};
use std::cell::OnceCell;

use foresight_trace::event::{
    AtomicOp, BlockingCall, ChannelKind, EventKind, LockMode, MemoryOrder, WaitOutcome,
};
use foresight_trace::stream::MergedStream;
use foresight_trace::tables::ObjectKind;
use foresight_trace::{ObjectId, SiteId, StringId, ThreadId, Trace, TraceStream};

/// One event as a pass sees it.
#[derive(Clone, Copy, Debug)]
pub struct StreamEvent {
    /// The analyzer's dense thread index (the trace's order of threads).
    pub thread: u32,
    /// Position of the event in its thread's event list (as `foresight dump` numbers them).
    pub(crate) pos: u32,
    /// Index of the event in the merged order.
    pub seq: u64,
    /// What happened.
    pub op: Op,
}

/// What an atomic access does, as the analyses need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicAccess {
    pub(crate) addr: u64,
    pub(crate) size: u32,
    pub(crate) site: SiteId,
    /// It reads the location (a load, a read-modify-write, any compare-exchange).
    pub(crate) loads: bool,
    /// It writes the location (a store, a read-modify-write, a compare-exchange that stored).
    pub(crate) stores: bool,
    /// An acquire: it joins what releases on the address published (acquire, consume,
    /// acq-rel or seq-cst order, and it loads).
    pub(crate) acquire: bool,
    /// A release: it publishes the thread's past (release, acq-rel or seq-cst order, and it
    /// stores). Relaxed accesses order nothing.
    pub(crate) release: bool,
}

/// An event of the trace in the analyzer's terms. Thread ids are dense indices (`None`: a thread
/// the trace does not list), lock modes are [`Mode`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A blocking call (I/O on a pipe or socket, a sleep, …) begins, made under a lock.
    BlockingBegin {
        /// Which call.
        call: BlockingCall,
        /// Where in the program.
        site: SiteId,
        /// The longest it asked to wait (a sleep's duration, a poll's timeout); `None`: no limit.
        timeout_ns: Option<u64>,
    },
    /// It returned after `duration_ns`.
    BlockingEnd {
        /// Which call.
        call: BlockingCall,
        /// How long it blocked.
        duration_ns: u64,
    },
    /// The thread starts running the program's handler for `signal`.
    SignalEnter {
        /// The signal's number.
        signal: u8,
    },
    /// That handler returned.
    SignalExit {
        /// The signal's number.
        signal: u8,
    },
    /// The thread's signal mask from here on (bit `s - 1`: signal `s` blocked).
    SignalMask {
        /// The blocked signals.
        blocked: u64,
    },
    /// `amount` bytes (eventfd units) put into hand-off channel `channel` (a pipe, a
    /// socketpair's direction, an eventfd) through descriptor `fd`: a post of that much.
    HandoffWrite {
        /// The channel's index.
        channel: u32,
        /// What the channel is: a pipe, a socketpair's direction, an eventfd.
        kind: ChannelKind,
        /// The descriptor used.
        fd: u32,
        /// Bytes written (eventfd units).
        amount: u64,
        /// Where in the program.
        site: SiteId,
    },
    /// `amount` taken out of it, the oldest first (a datagram channel: one message).
    HandoffRead {
        /// The channel.
        channel: u32,
        /// Its kind, as in `HandoffWrite`.
        kind: ChannelKind,
        /// The descriptor used.
        fd: u32,
        /// Bytes read (eventfd units).
        amount: u64,
        /// Where in the program.
        site: SiteId,
    },
    /// The thread's first event.
    ThreadStart,
    /// The thread's last event.
    ThreadExit,
    /// This thread created `child`.
    Create {
        /// The other thread's dense index (`None`: a thread the trace does not list).
        child: Option<u32>,
        /// Where in the program.
        site: SiteId,
    },
    /// This thread is about to wait for `child` to finish.
    JoinRequest {
        /// The other thread's dense index (`None`: a thread the trace does not list).
        child: Option<u32>,
        /// Where in the program.
        site: SiteId,
    },
    /// A join returned; `joined` is false for a failed `tryjoin`/`timedjoin`.
    Join {
        /// The other thread's dense index (`None`: a thread the trace does not list).
        child: Option<u32>,
        /// False when the join failed (`tryjoin`, `timedjoin`).
        joined: bool,
    },
    /// This thread detached `child`.
    Detach {
        /// The other thread's dense index (`None`: a thread the trace does not list).
        child: Option<u32>,
        /// Where in the program.
        site: SiteId,
    },
    /// The process forked (the child's threads are in another trace).
    Fork {
        /// Where in the program.
        site: SiteId,
    },
    /// The process executed another program.
    Exec {
        /// Where in the program.
        site: SiteId,
    },
    /// A blocking lock request: the thread may wait here.
    LockRequest {
        /// The lock object.
        lock: ObjectId,
        /// The mode asked for.
        mode: Mode,
        /// Where in the program.
        site: SiteId,
    },
    /// The pending request was granted (its site is the request's).
    LockAcquired {
        /// The lock object.
        lock: ObjectId,
        /// The mode granted.
        mode: Mode,
    },
    /// The pending request ended without the lock (a timeout, `EDEADLK`, …).
    LockFailed {
        /// The lock object.
        lock: ObjectId,
    },
    /// A non-blocking attempt (`trylock`): it never waits.
    LockTry {
        /// The lock object.
        lock: ObjectId,
        /// The mode asked for.
        mode: Mode,
        /// Where in the program.
        site: SiteId,
        /// Whether it took the lock.
        acquired: bool,
    },
    /// The lock was released.
    LockRelease {
        /// The lock object.
        lock: ObjectId,
        /// Where in the program.
        site: SiteId,
    },
    /// A synchronisation object was initialised.
    ObjectInit {
        /// The object.
        object: ObjectId,
        /// Where in the program.
        site: SiteId,
    },
    /// A synchronisation object was destroyed.
    ObjectDestroy {
        /// The object.
        object: ObjectId,
        /// Where in the program.
        site: SiteId,
    },
    /// Entering a condition wait: `mutex` is released.
    CondWaitBegin {
        /// The condition variable.
        cond: ObjectId,
        /// The mutex released for the wait.
        mutex: ObjectId,
        /// Where in the program.
        site: SiteId,
    },
    /// The wait returned with `mutex` held again.
    CondWaitEnd {
        /// The condition variable.
        cond: ObjectId,
        /// The mutex held again.
        mutex: ObjectId,
        /// Whether a timed wait timed out.
        timed_out: bool,
    },
    /// A signal or broadcast of a condition variable.
    CondSignal {
        /// The condition variable.
        cond: ObjectId,
        /// Where in the program.
        site: SiteId,
        /// A broadcast (every waiter wakes) rather than a signal.
        broadcast: bool,
    },
    /// A barrier was initialised for `count` threads.
    BarrierInit {
        /// The barrier.
        barrier: ObjectId,
        /// Threads that must arrive for it to open.
        count: u32,
        /// Where in the program.
        site: SiteId,
    },
    /// An arrival; `generation` is that of the thread's next departure from the barrier (`None`
    /// when the thread never left it: the trace ends there).
    BarrierArrive {
        /// The barrier.
        barrier: ObjectId,
        /// Where in the program.
        site: SiteId,
        /// The generation of the thread's next departure (`None`: it never left).
        generation: Option<u64>,
    },
    /// The thread left the barrier.
    BarrierDepart {
        /// The barrier.
        barrier: ObjectId,
        /// The generation it left (one per opening).
        generation: u64,
        /// The one thread of the generation that got `PTHREAD_BARRIER_SERIAL_THREAD`.
        serial: bool,
    },
    /// A once call (`pthread_once`, `call_once`) begins: the thread may wait here.
    OnceBegin {
        /// The once object.
        once: ObjectId,
        /// Where in the program.
        site: SiteId,
    },
    /// This thread runs the initialiser.
    OnceRun {
        /// The once object.
        once: ObjectId,
    },
    /// The initialiser returned.
    OnceEnd {
        /// The once object.
        once: ObjectId,
    },
    /// Another thread ran the initialiser; this call did nothing.
    OnceSkip {
        /// The once object.
        once: ObjectId,
    },
    /// A semaphore was initialised with `value`.
    SemInit {
        /// The semaphore.
        sem: ObjectId,
        /// Its initial count.
        value: u32,
        /// Where in the program.
        site: SiteId,
    },
    /// A post (release) of a semaphore.
    SemPost {
        /// The semaphore.
        sem: ObjectId,
        /// Where in the program.
        site: SiteId,
    },
    /// A semaphore wait begins: the thread may block here.
    SemWaitBegin {
        /// The semaphore.
        sem: ObjectId,
        /// Where in the program.
        site: SiteId,
    },
    /// The wait returned.
    SemWaitEnd {
        /// The semaphore.
        sem: ObjectId,
        /// Whether it took a unit (false: a timeout or an error).
        acquired: bool,
    },
    /// A non-blocking semaphore wait (`sem_trywait`).
    SemTry {
        /// The semaphore.
        sem: ObjectId,
        /// Where in the program.
        site: SiteId,
        /// Whether it took a unit.
        acquired: bool,
    },
    /// A plain read of memory.
    Read {
        /// The first byte's address.
        addr: u64,
        /// Bytes read.
        size: u32,
        /// Where in the program.
        site: SiteId,
    },
    /// A plain write of memory.
    Write {
        /// The first byte's address.
        addr: u64,
        /// Bytes written.
        size: u32,
        /// Where in the program.
        site: SiteId,
    },
    /// An atomic access, with what it orders.
    Atomic(AtomicAccess),
    /// A fence: orders what its thread's atomics publish or see.
    Fence {
        /// An acquire fence (acquire, acq-rel or seq-cst).
        acquire: bool,
        /// A release fence (release, acq-rel or seq-cst).
        release: bool,
        /// Where in the program.
        site: SiteId,
    },
    /// A heap block was allocated.
    Alloc {
        /// Its address.
        addr: u64,
        /// Its size in bytes.
        size: u64,
        /// Where in the program.
        site: SiteId,
    },
    /// A heap block was freed.
    Free {
        /// Its address.
        addr: u64,
        /// Where in the program.
        site: SiteId,
    },
    /// The program named the lock's class (an annotation).
    LockClassName {
        /// The lock object.
        lock: ObjectId,
        /// The class name (in the trace's string table).
        name: StringId,
    },
    /// The program set the lock's subclass (an annotation, as lockdep's `mutex_lock_nested`).
    LockSubclass {
        /// The lock object.
        lock: ObjectId,
        /// The subclass (0: the class itself).
        subclass: u32,
    },
    /// The program declared the lock's rank (an annotation).
    LockRank {
        /// The lock object.
        lock: ObjectId,
        /// The rank: locks must be acquired in increasing rank.
        rank: u32,
    },
    /// A user happens-before edge starts here…
    HappensBefore {
        /// The tag both ends of the edge name.
        tag: u64,
        /// Where in the program.
        site: SiteId,
    },
    /// …and ends here.
    HappensAfter {
        /// The tag both ends of the edge name.
        tag: u64,
        /// Where in the program.
        site: SiteId,
    },
}

impl Op {
    /// A memory access: a plain read or write, or an atomic (what a race is made of).
    #[inline]
    pub(crate) fn is_access(&self) -> bool {
        matches!(self, Op::Read { .. } | Op::Write { .. } | Op::Atomic(_))
    }

    /// A plain read or write, or an allocation or free: memory that synchronises nothing.
    #[inline]
    pub(crate) fn is_plain_memory(&self) -> bool {
        matches!(
            self,
            Op::Read { .. } | Op::Write { .. } | Op::Alloc { .. } | Op::Free { .. }
        )
    }
}

/// An analysis concern that reads the merged stream: it owns its state, sees every event once
/// in merged order, and is finished into its result.
pub trait Pass {
    /// What the pass hands out when finished.
    type Output;
    /// Sees one event, in merged order.
    fn handle(&mut self, ev: &StreamEvent);
    /// Finishes the pass into its result.
    fn finish(self) -> Self::Output;

    /// A run of one thread's consecutive events of a file's merged order
    /// (`Stream::drive_runs`): `events[i]` is at position `first + i` of dense thread
    /// `thread` and at `seq + i` in the merged order. Each converted and handed to
    /// [`Pass::handle`], unless the pass does better with the whole run (one call per run,
    /// not per event: the segmented model).
    #[inline]
    fn handle_run(
        &mut self,
        stream: &Stream<'_>,
        thread: u32,
        first: u32,
        seq: u64,
        events: &[foresight_trace::event::Event],
    ) {
        for (i, ev) in events.iter().enumerate() {
            let pos = first + i as u32;
            self.handle(&StreamEvent {
                thread,
                pos,
                seq: seq + i as u64,
                op: stream.convert(thread, pos, ev.kind),
            });
        }
    }
}

/// Two passes side by side in one walk (nest tuples for more).
impl<A: Pass, B: Pass> Pass for (A, B) {
    type Output = (A::Output, B::Output);
    #[inline]
    fn handle(&mut self, ev: &StreamEvent) {
        self.0.handle(ev);
        self.1.handle(ev);
    }
    fn finish(self) -> Self::Output {
        (self.0.finish(), self.1.finish())
    }
}

/// Where a walk's events come from: any iterator of (thread id, position in the thread, wire
/// event) in merged order, or a file's merged stream read by runs ([`Runs`]).
pub trait EventSource {
    /// Feeds every event to `pass`; returns the events read.
    fn feed<P: Pass>(self, stream: &Stream<'_>, pass: &mut P, progress: &mut dyn FnMut(u64))
        -> u64;
}

impl<I: IntoIterator<Item = (ThreadId, usize, EventKind)>> EventSource for I {
    fn feed<P: Pass>(
        self,
        stream: &Stream<'_>,
        pass: &mut P,
        progress: &mut dyn FnMut(u64),
    ) -> u64 {
        stream.drive(self, pass, progress)
    }
}

/// A file's merged stream, read a run of one thread at a time (`Stream::drive_runs`).
pub struct Runs<'m, 'a>(pub &'m mut MergedStream<'a>);

impl EventSource for Runs<'_, '_> {
    // Into its caller, so that the passes' per-event work is inlined into one loop: left to
    // the inliner, which stopped inlining it when its caller grew, the loop called the race
    // pass's access and check as functions, and the access-heavy 10^8-event trace took 6%
    // longer (docs/perf/analysis-speed-and-memory.md).
    #[inline(always)]
    fn feed<P: Pass>(
        self,
        stream: &Stream<'_>,
        pass: &mut P,
        progress: &mut dyn FnMut(u64),
    ) -> u64 {
        stream.drive_runs(self.0, pass, progress)
    }
}

/// What the driver knows before the events: the threads (their dense order) and where the
/// generation of a barrier arrival comes from.
pub struct Stream<'t> {
    threads: ThreadIndex,
    lookahead: Lookahead<'t>,
}

/// Where the generation of a barrier arrival comes from.
enum Lookahead<'t> {
    /// Scanned before the walk, by a reader that does not hold the trace.
    Scanned(BarrierGenerations),
    /// Read from the decoded trace: the thread's next events after the arrival (its departure
    /// is normally the very next one), at most [`LOOKAHEAD`] of them; past that, the thread is
    /// scanned once and for all, so a hostile trace costs at most one more pass.
    Decoded {
        trace: &'t Trace,
        scanned: Vec<OnceCell<BarrierGenerations>>,
    },
}

/// Events looked at after a barrier arrival before the thread is scanned whole.
const LOOKAHEAD: usize = 64;

impl<'t> Stream<'t> {
    /// A stream over a decoded trace (threads in the trace's order).
    pub(crate) fn of_trace(trace: &'t Trace) -> Self {
        Stream {
            threads: ThreadIndex::new(trace.threads.iter().map(|t| t.thread)),
            lookahead: Lookahead::Decoded {
                trace,
                scanned: trace.threads.iter().map(|_| OnceCell::new()).collect(),
            },
        }
    }

    /// A stream over threads given in dense order, with the barrier generations already
    /// scanned (a reader that does not hold the trace in memory scans each thread first).
    pub(crate) fn new(
        thread_ids: impl IntoIterator<Item = ThreadId>,
        lookahead: BarrierGenerations,
    ) -> Self {
        Stream {
            threads: ThreadIndex::new(thread_ids),
            lookahead: Lookahead::Scanned(lookahead),
        }
    }

    /// A stream over a trace read from its file (`TraceStream`), threads in the file's order.
    /// A trace with barriers is first scanned per thread for the generation each arrival
    /// belongs to.
    pub fn of_stream(stream: &TraceStream) -> Self {
        let ids: Vec<ThreadId> = stream.threads().collect();
        let mut generations = BarrierGenerations::default();
        if stream
            .tables()
            .objects
            .values()
            .any(|o| o.kind == ObjectKind::Barrier)
        {
            for (i, &id) in ids.iter().enumerate() {
                generations.scan_thread(i as u32, stream.thread_events(id).map(|e| e.kind));
            }
        }
        Self::new(ids, generations)
    }

    /// The generation of the arrival at `barrier`, event `pos` of `thread`.
    fn arrival_generation(&self, thread: u32, pos: u32, barrier: ObjectId) -> Option<u64> {
        let (trace, scanned) = match &self.lookahead {
            Lookahead::Scanned(g) => return g.generation(thread, pos),
            Lookahead::Decoded { trace, scanned } => (trace, scanned),
        };
        let events = &trace.threads.get(thread as usize)?.events;
        let next = events.get(pos as usize + 1..).unwrap_or_default();
        for ev in next.iter().take(LOOKAHEAD) {
            match ev.kind {
                EventKind::BarrierWaitEnd {
                    barrier: b,
                    generation,
                    ..
                } if b == barrier => return Some(generation),
                EventKind::BarrierWaitBegin { barrier: b, .. } if b == barrier => return None,
                _ => {}
            }
        }
        if next.len() <= LOOKAHEAD {
            return None;
        }
        scanned[thread as usize]
            .get_or_init(|| {
                let mut g = BarrierGenerations::default();
                g.scan_thread(thread, events.iter().map(|e| &e.kind));
                g
            })
            .generation(thread, pos)
    }

    /// The dense index of a trace thread id.
    pub(crate) fn dense(&self, id: ThreadId) -> Option<u32> {
        self.threads.get(id).map(|i| i as u32)
    }

    /// The walk: feeds every event of `events` (an iterator of (thread id, position in the
    /// thread, event) in the merged order, or a file's merged stream by runs, [`Runs`]) to
    /// `pass`, converted once. `progress` is called now and then with the events done.
    /// Returns the events read.
    pub fn walk<P: Pass>(
        &self,
        events: impl EventSource,
        pass: &mut P,
        progress: &mut dyn FnMut(u64),
    ) -> u64 {
        events.feed(self, pass, progress)
    }

    /// [`Stream::walk`] of an iterator, one event at a time.
    pub(crate) fn drive<P: Pass>(
        &self,
        events: impl IntoIterator<Item = (ThreadId, usize, EventKind)>,
        pass: &mut P,
        progress: &mut dyn FnMut(u64),
    ) -> u64 {
        let mut seq = 0u64;
        for (thread, index, kind) in events {
            if seq & 0xf_ffff == 0 {
                progress(seq);
            }
            if let Some(t) = self.threads.get(thread) {
                let (thread, pos) = (t as u32, index as u32);
                let ev = StreamEvent {
                    thread,
                    pos,
                    seq,
                    op: self.convert(thread, pos, kind),
                };
                pass.handle(&ev);
            }
            seq += 1;
        }
        seq
    }

    /// Feeds a file's merged order to `pass`, a run of one thread's events at a time
    /// (`MergedStream::next_run`): the thread is looked up once per run, and the events of a
    /// run are handed on without the merge looking at the other threads in between. The same
    /// events, positions and `seq` as [`Stream::drive`] over the same stream one event at a
    /// time. Returns the events read.
    pub(crate) fn drive_runs<P: Pass>(
        &self,
        merged: &mut MergedStream<'_>,
        pass: &mut P,
        progress: &mut dyn FnMut(u64),
    ) -> u64 {
        self.for_each_run(merged, progress, |thread, first, seq, events| {
            pass.handle_run(self, thread, first, seq, events)
        })
    }

    /// The runs of the merged order, unconverted: `f(thread, pos, seq, events)` with the dense
    /// thread, the position and `seq` of the run's first event (the others follow one by one:
    /// convert them with [`Stream::convert`]). Runs of threads the trace does not list are
    /// skipped (and counted in `seq`). Returns the events read.
    #[inline]
    pub(crate) fn for_each_run(
        &self,
        merged: &mut MergedStream<'_>,
        progress: &mut dyn FnMut(u64),
        mut f: impl FnMut(u32, u32, u64, &[foresight_trace::event::Event]),
    ) -> u64 {
        let mut seq = 0u64;
        let mut next_progress = 0u64;
        while let Some(run) = merged.next_run() {
            if seq >= next_progress {
                progress(seq);
                next_progress = (seq | 0xf_ffff) + 1;
            }
            if let Some(t) = self.threads.get(run.thread) {
                f(t as u32, run.first_index as u32, seq, run.events);
            }
            seq += run.events.len() as u64;
        }
        seq
    }

    /// The wire event in the analyzer's terms. Always inlined: every event of the walk is
    /// converted here, and an out-of-line call per event (its `Op` returned through memory)
    /// cost the race pass about a tenth of its time once there was more than one call site.
    #[inline(always)]
    pub(crate) fn convert(&self, thread: u32, pos: u32, kind: EventKind) -> Op {
        let dense = |id: ThreadId| self.dense(id);
        match kind {
            EventKind::ThreadStart => Op::ThreadStart,
            EventKind::ThreadExit => Op::ThreadExit,
            EventKind::ThreadCreate { child, site } => Op::Create {
                child: dense(child),
                site,
            },
            EventKind::JoinRequest { child, site } => Op::JoinRequest {
                child: dense(child),
                site,
            },
            EventKind::JoinEnd { child, joined } => Op::Join {
                child: dense(child),
                joined,
            },
            EventKind::ThreadDetach { child, site } => Op::Detach {
                child: dense(child),
                site,
            },
            EventKind::Fork { site, .. } => Op::Fork { site },
            EventKind::Exec { site } => Op::Exec { site },
            EventKind::LockRequest { lock, mode, site } => Op::LockRequest {
                lock,
                mode: mode_of(mode),
                site,
            },
            EventKind::LockAcquired { lock, mode } => Op::LockAcquired {
                lock,
                mode: mode_of(mode),
            },
            EventKind::LockFailed { lock, .. } => Op::LockFailed { lock },
            EventKind::LockTry {
                lock,
                mode,
                site,
                acquired,
            } => Op::LockTry {
                lock,
                mode: mode_of(mode),
                site,
                acquired,
            },
            EventKind::LockRelease { lock, site } => Op::LockRelease { lock, site },
            EventKind::ObjectInit { object, site } => Op::ObjectInit { object, site },
            EventKind::ObjectDestroy { object, site } => Op::ObjectDestroy { object, site },
            EventKind::CondWaitBegin { cond, mutex, site } => {
                Op::CondWaitBegin { cond, mutex, site }
            }
            EventKind::CondWaitEnd {
                cond,
                mutex,
                outcome,
            } => Op::CondWaitEnd {
                cond,
                mutex,
                timed_out: outcome == WaitOutcome::TimedOut,
            },
            EventKind::CondSignal { cond, site } => Op::CondSignal {
                cond,
                site,
                broadcast: false,
            },
            EventKind::CondBroadcast { cond, site } => Op::CondSignal {
                cond,
                site,
                broadcast: true,
            },
            EventKind::BarrierInit {
                barrier,
                count,
                site,
            } => Op::BarrierInit {
                barrier,
                count,
                site,
            },
            EventKind::BarrierWaitBegin {
                barrier,
                site,
                generation,
            } => Op::BarrierArrive {
                barrier,
                site,
                // The recorder says (1.3); older traces: the thread's next departure.
                generation: generation.or_else(|| self.arrival_generation(thread, pos, barrier)),
            },
            EventKind::BarrierWaitEnd {
                barrier,
                generation,
                serial,
            } => Op::BarrierDepart {
                barrier,
                generation,
                serial,
            },
            EventKind::OnceBegin { once, site } => Op::OnceBegin { once, site },
            EventKind::OnceRun { once } => Op::OnceRun { once },
            EventKind::OnceEnd { once } => Op::OnceEnd { once },
            EventKind::OnceSkip { once } => Op::OnceSkip { once },
            EventKind::SemInit { sem, value, site } => Op::SemInit { sem, value, site },
            EventKind::SemPost { sem, site } => Op::SemPost { sem, site },
            EventKind::SemWaitBegin { sem, site } => Op::SemWaitBegin { sem, site },
            EventKind::SemWaitEnd { sem, acquired } => Op::SemWaitEnd { sem, acquired },
            EventKind::SemTry {
                sem,
                site,
                acquired,
            } => Op::SemTry {
                sem,
                site,
                acquired,
            },
            EventKind::Read { addr, size, site } => Op::Read { addr, size, site },
            EventKind::Write { addr, size, site } => Op::Write { addr, size, site },
            EventKind::Atomic {
                op,
                addr,
                size,
                order,
                site,
            } => Op::Atomic(atomic_access(op, addr, size, order, site)),
            EventKind::Fence { order, site } => Op::Fence {
                acquire: is_acquire(order),
                release: is_release(order),
                site,
            },
            EventKind::Alloc { addr, size, site } => Op::Alloc { addr, size, site },
            EventKind::Free { addr, site } => Op::Free { addr, site },
            EventKind::LockClassName { lock, name } => Op::LockClassName { lock, name },
            EventKind::LockSubclass { lock, subclass } => Op::LockSubclass { lock, subclass },
            EventKind::LockRank { lock, rank } => Op::LockRank { lock, rank },
            EventKind::HappensBefore { tag, site } => Op::HappensBefore { tag, site },
            EventKind::HappensAfter { tag, site } => Op::HappensAfter { tag, site },
            EventKind::BlockingBegin {
                call,
                site,
                timeout_ns,
            } => Op::BlockingBegin {
                call,
                site,
                timeout_ns,
            },
            EventKind::BlockingEnd { call, duration_ns } => Op::BlockingEnd { call, duration_ns },
            EventKind::SignalEnter { signal } => Op::SignalEnter { signal },
            EventKind::SignalExit { signal } => Op::SignalExit { signal },
            EventKind::SignalMask { blocked } => Op::SignalMask { blocked },
            EventKind::HandoffWrite {
                channel,
                kind,
                fd,
                amount,
                site,
            } => Op::HandoffWrite {
                channel,
                kind,
                fd,
                amount,
                site,
            },
            EventKind::HandoffRead {
                channel,
                kind,
                fd,
                amount,
                site,
            } => Op::HandoffRead {
                channel,
                kind,
                fd,
                amount,
                site,
            },
        }
    }
}

/// Read or write mode of an acquisition (a plain mutex is always `Write`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Exclusive: a mutex, or the write side of a rwlock.
    Write,
    /// Shared: the read side of a rwlock.
    Read,
}

impl Mode {
    /// Whether two holders in these modes exclude each other.
    pub(crate) fn conflicts(self, other: Mode) -> bool {
        !(self == Mode::Read && other == Mode::Read)
    }
}

#[inline(always)]
pub(crate) fn mode_of(m: LockMode) -> Mode {
    match m {
        LockMode::Exclusive => Mode::Write,
        LockMode::Shared => Mode::Read,
    }
}

fn is_acquire(order: MemoryOrder) -> bool {
    matches!(
        order,
        MemoryOrder::Acquire | MemoryOrder::Consume | MemoryOrder::AcqRel | MemoryOrder::SeqCst
    )
}

fn is_release(order: MemoryOrder) -> bool {
    matches!(
        order,
        MemoryOrder::Release | MemoryOrder::AcqRel | MemoryOrder::SeqCst
    )
}

/// Which store a load read from is not recorded, so an acquire joins every earlier release on
/// the address (`hb.rs`): over-approximated, which is sound for prediction.
fn atomic_access(
    op: AtomicOp,
    addr: u64,
    size: u32,
    order: MemoryOrder,
    site: SiteId,
) -> AtomicAccess {
    let loads = !matches!(op, AtomicOp::Store);
    let stores = matches!(op, AtomicOp::Store | AtomicOp::Rmw | AtomicOp::CasSuccess);
    AtomicAccess {
        addr,
        size,
        site,
        loads,
        stores,
        acquire: loads && is_acquire(order),
        release: stores && is_release(order),
    }
}

/// Which generation each barrier arrival belongs to: the generation of the thread's next
/// departure from that barrier, unless the thread arrives there again first (an arrival
/// publishes to its generation before any departure of it, so this is the one thing the stream
/// must know ahead). Scanned per thread, forward.
#[derive(Debug, Default)]
pub(crate) struct BarrierGenerations {
    generation: HashMap<(u32, u32), u64>,
}

impl BarrierGenerations {
    /// Scans one thread's events (dense index `thread`) in its own order.
    pub(crate) fn scan_thread<E: std::borrow::Borrow<EventKind>>(
        &mut self,
        thread: u32,
        events: impl IntoIterator<Item = E>,
    ) {
        // Per barrier, the thread's arrival still waiting for its departure. A second arrival
        // before a departure replaces the first, which then has no generation.
        let mut pending: HashMap<ObjectId, u32> = HashMap::new();
        for (pos, ev) in events.into_iter().enumerate() {
            match *ev.borrow() {
                EventKind::BarrierWaitBegin { barrier, .. } => {
                    pending.insert(barrier, pos as u32);
                }
                EventKind::BarrierWaitEnd {
                    barrier,
                    generation,
                    ..
                } => {
                    if let Some(arrival) = pending.remove(&barrier) {
                        self.generation.insert((thread, arrival), generation);
                    }
                }
                _ => {}
            }
        }
    }

    /// The generation of the arrival at (`thread`, `pos`), if the thread left the barrier.
    pub(crate) fn generation(&self, thread: u32, pos: u32) -> Option<u64> {
        self.generation.get(&(thread, pos)).copied()
    }
}

/// Trace thread id → dense index (looked up for every event).
struct ThreadIndex {
    /// The ids are `first..first + len`, in order (a recorder numbers its threads from 0 on):
    /// no table at all, where a process may have created 10^5 threads.
    range: Option<(ThreadId, u32)>,
    small: Vec<u32>,
    large: HashMap<ThreadId, u32>,
}

impl ThreadIndex {
    const NONE: u32 = u32::MAX;
    /// Ids below this, or below 4 per thread, are looked up in a table (4 bytes an id);
    /// larger ones (unusual) in a map.
    const TABLE: u32 = 1 << 16;

    fn new(ids: impl IntoIterator<Item = ThreadId>) -> Self {
        let mut ids = ids.into_iter().peekable();
        let table = u32::try_from(ids.size_hint().0.saturating_mul(4))
            .unwrap_or(u32::MAX)
            .max(Self::TABLE);
        let mut ix = ThreadIndex {
            range: None,
            small: Vec::new(),
            large: HashMap::new(),
        };
        // As far as the ids are a range.
        let mut range: Option<(ThreadId, u32)> = None;
        while let Some(&id) = ids.peek() {
            match range {
                None => range = Some((id, 1)),
                Some((first, len)) if u64::from(first) + u64::from(len) == u64::from(id) => {
                    range = Some((first, len + 1));
                }
                Some(_) => break,
            }
            ids.next();
        }
        if ids.peek().is_none() {
            ix.range = range;
            return ix;
        }
        let before = range.map_or(0..0, |(first, len)| first..first + len);
        for (i, id) in before.chain(ids).enumerate() {
            let i = i as u32;
            if id < table {
                if ix.small.len() <= id as usize {
                    ix.small.resize(id as usize + 1, Self::NONE);
                }
                ix.small[id as usize] = i;
            } else {
                ix.large.insert(id, i);
            }
        }
        ix.small.shrink_to_fit();
        ix
    }

    #[inline]
    fn get(&self, id: ThreadId) -> Option<usize> {
        if let Some((first, len)) = self.range {
            let i = id.wrapping_sub(first);
            return (i < len).then_some(i as usize);
        }
        match self.small.get(id as usize) {
            Some(&i) if i != Self::NONE => Some(i as usize),
            Some(_) => None,
            None => self.large.get(&id).map(|&i| i as usize),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arrival_takes_the_generation_of_the_threads_next_departure() {
        let arrive = |barrier| EventKind::BarrierWaitBegin {
            barrier,
            site: 0,
            generation: None,
        };
        let depart = |barrier, generation| EventKind::BarrierWaitEnd {
            barrier,
            generation,
            serial: false,
        };
        let events = [
            arrive(1),
            depart(1, 7),
            arrive(1), // replaced by the next arrival before any departure
            arrive(1),
            depart(1, 9),
            depart(1, 10), // no arrival left
            arrive(2),     // never departs
        ];
        let mut g = BarrierGenerations::default();
        g.scan_thread(3, events);
        assert_eq!(g.generation(3, 0), Some(7));
        assert_eq!(g.generation(3, 2), None);
        assert_eq!(g.generation(3, 3), Some(9));
        assert_eq!(g.generation(3, 6), None);
    }

    #[test]
    fn a_thread_index_of_a_range_of_ids_keeps_no_table() {
        let ix = ThreadIndex::new(5..100_005);
        assert!(ix.small.is_empty() && ix.large.is_empty());
        assert_eq!(ix.get(5), Some(0));
        assert_eq!(ix.get(100_004), Some(99_999));
        assert_eq!(ix.get(4), None);
        assert_eq!(ix.get(100_005), None);
        // A gap: the ids before it and after it in a table and a map.
        let ids = [0, 1, 2, 7, 8, 1 << 20];
        let ix = ThreadIndex::new(ids);
        assert!(ix.range.is_none());
        for (i, id) in ids.into_iter().enumerate() {
            assert_eq!(ix.get(id), Some(i));
        }
        assert_eq!(ix.get(3), None);
        assert_eq!(ix.get(1 << 19), None);
    }

    #[test]
    fn relaxed_atomics_order_nothing() {
        let a = atomic_access(AtomicOp::Rmw, 8, 4, MemoryOrder::Relaxed, 0);
        assert!(a.loads && a.stores && !a.acquire && !a.release);
        let a = atomic_access(AtomicOp::Load, 8, 4, MemoryOrder::SeqCst, 0);
        assert!(a.loads && !a.stores && a.acquire && !a.release);
        let a = atomic_access(AtomicOp::CasFailure, 8, 4, MemoryOrder::AcqRel, 0);
        assert!(a.loads && !a.stores && a.acquire && !a.release);
        let a = atomic_access(AtomicOp::Store, 8, 4, MemoryOrder::Release, 0);
        assert!(!a.loads && a.stores && !a.acquire && a.release);
    }

    #[test]
    fn a_decoded_trace_finds_arrival_generations_near_and_far_as_the_scan_does() {
        use foresight_trace::builder::TraceBuilder;
        use foresight_trace::tables::ObjectKind;
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let t = b.spawn(main, s, "t");
        let (b1, b2) = (
            b.object(ObjectKind::Barrier, "b1"),
            b.object(ObjectKind::Barrier, "b2"),
        );
        let arrive = |barrier| EventKind::BarrierWaitBegin {
            barrier,
            site: s,
            generation: None,
        };
        let depart = |barrier, generation| EventKind::BarrierWaitEnd {
            barrier,
            generation,
            serial: false,
        };
        let filler = |b: &mut TraceBuilder| {
            for i in 0..2 * LOOKAHEAD as u64 {
                b.read(t, 0x100 + i, 4, s);
            }
        };
        b.event(t, arrive(b1)); // 1: the next event departs
        b.event(t, depart(b1, 0));
        b.event(t, arrive(b1)); // 3: departs far later
        filler(&mut b);
        b.event(t, depart(b1, 1));
        b.event(t, arrive(b2)); // far, then arrives again first: none
        filler(&mut b);
        b.event(t, arrive(b2));
        b.event(t, depart(b2, 5));
        b.event(t, arrive(b1)); // never departs
        filler(&mut b);
        let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
        let stream = Stream::of_trace(&trace);
        let mut scanned = BarrierGenerations::default();
        scanned.scan_thread(1, trace.threads[1].events.iter().map(|e| &e.kind));
        let mut found = Vec::new();
        for (pos, e) in trace.threads[1].events.iter().enumerate() {
            if let EventKind::BarrierWaitBegin { barrier, .. } = e.kind {
                let g = stream.arrival_generation(1, pos as u32, barrier);
                assert_eq!(g, scanned.generation(1, pos as u32), "arrival at {pos}");
                found.push(g);
            }
        }
        assert_eq!(found, [Some(0), Some(1), None, Some(5), None]);
    }

    /// Collects (thread, position, seq, op) of what it is fed.
    struct Ops(Vec<(u32, u32, u64, Op)>);
    impl Pass for Ops {
        type Output = Vec<(u32, u32, u64, Op)>;
        fn handle(&mut self, ev: &StreamEvent) {
            self.0.push((ev.thread, ev.pos, ev.seq, ev.op));
        }
        fn finish(self) -> Self::Output {
            self.0
        }
    }

    #[test]
    fn a_file_read_by_runs_feeds_what_the_decoded_merged_order_feeds() {
        use foresight_trace::builder::TraceBuilder;
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let m = b.mutex("m");
        let workers: Vec<_> = (0..3).map(|i| b.spawn(main, s, &format!("w{i}"))).collect();
        for round in 0..4000u64 {
            for (i, &w) in workers.iter().enumerate() {
                // Runs of accesses at one key, and lock hand-offs that end them.
                for k in 0..(round % 5) {
                    b.read(w, 0x1000 * i as u64 + 8 * k, 8, s);
                }
                if round % 3 == i as u64 {
                    b.lock(w, m, s);
                    b.write(w, 0x9000, 8, s);
                    b.unlock(w, m, s);
                }
            }
        }
        for &w in &workers {
            b.join(main, w, s);
        }
        let bytes = b.finish();
        let trace = Trace::from_bytes("t.trace", bytes.clone()).expect("trace reads");
        let mut want = Ops(Vec::new());
        let n = Stream::of_trace(&trace).drive(
            trace.merged().map(|m| (m.thread, m.index, m.event.kind)),
            &mut want,
            &mut |_| {},
        );
        let file = TraceStream::from_bytes("t.trace", bytes).expect("trace streams");
        let mut merged = file.merged().with_ordering_check();
        let mut got = Ops(Vec::new());
        let read = Stream::of_stream(&file).drive_runs(&mut merged, &mut got, &mut |_| {});
        assert_eq!(read, n);
        assert_eq!(got.0, want.0);
        assert!(merged.problems().is_empty(), "{:?}", merged.problems());
    }

    #[test]
    fn passes_side_by_side_see_every_event_once_in_merged_order() {
        use foresight_trace::builder::TraceBuilder;
        /// Collects (thread, position, seq) of what it is fed.
        struct Seen(Vec<(u32, u32, u64)>);
        impl Pass for Seen {
            type Output = Vec<(u32, u32, u64)>;
            fn handle(&mut self, ev: &StreamEvent) {
                self.0.push((ev.thread, ev.pos, ev.seq));
            }
            fn finish(self) -> Self::Output {
                self.0
            }
        }
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let m = b.mutex("m");
        let t = b.spawn(main, s, "t");
        b.lock(t, m, s);
        b.unlock(t, m, s);
        b.join(main, t, s);
        let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
        let mut both = (Seen(Vec::new()), Seen(Vec::new()));
        let read = Stream::of_trace(&trace).drive(
            trace.merged().map(|m| (m.thread, m.index, m.event.kind)),
            &mut both,
            &mut |_| {},
        );
        let (a, b) = both.finish();
        assert_eq!(read, trace.event_count());
        assert_eq!(a, b);
        let merged: Vec<(u32, u32, u64)> = trace
            .merged()
            .enumerate()
            .map(|(seq, m)| (m.thread, m.index as u32, seq as u64))
            .collect();
        assert_eq!(a, merged, "thread ids 0 and 1 are their own dense indices");
    }
}
