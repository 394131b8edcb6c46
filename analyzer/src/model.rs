//! The analyzer's own in-memory model of one trace, converted from the wire types in one pass
//! over the causal (merged) order. DESIGN.md: serialised types stay at the edge; everything after
//! this module works on these types.
//!
//! What is kept: lock critical sections (acquisitions with their request, acquire and release
//! positions and the locks held at the request), the waits that can hold a lock hostage (join,
//! barrier, condition and semaphore waits), the senders those waits depend on, and the
//! happens-before clocks. Memory accesses are not kept: they only add reads-from edges to the
//! clocks, and dropping them keeps the model small on long traces.

use std::collections::HashMap;

use foresight_trace::event::{
    AtomicOp, EventKind, LockMode, MemoryOrder, ObjectId, SiteId, WaitOutcome,
};
use foresight_trace::reader::Tables;
use foresight_trace::tables::{ClassKey, ObjectKind};
use foresight_trace::Trace;

use crate::hb::{Channel, HappensBefore, HbBuilder};

/// A source location, symbolised when the trace has symbols.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: u32,
    /// `function (file:line)`, or `module+0xoffset` when not symbolised.
    pub text: String,
    /// Every frame of the site, innermost first.
    pub stack: Vec<String>,
}

/// Read or write mode of an acquisition (a plain mutex is always `Write`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Write,
    Read,
}

impl Mode {
    /// Whether two holders in these modes exclude each other.
    pub fn conflicts(self, other: Mode) -> bool {
        !(self == Mode::Read && other == Mode::Read)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireHow {
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
    pub thread: u32,
    pub lock: u32,
    pub mode: Mode,
    pub how: AcquireHow,
    /// Position of the request (where the thread would block); the acquire's for a trylock.
    pub request: u32,
    /// `u32::MAX` for a request still pending when the trace ended (never granted).
    pub acquired: u32,
    /// Position of the release; `None` if the lock was still held when the trace ended.
    pub release: Option<u32>,
    /// Index of the acquire in the merged order: the trace order the lock rule compares.
    pub seq: u64,
    pub site: SiteId,
    /// Acquisitions (indices) held by the thread at the request, outermost first.
    pub held: std::ops::Range<u32>,
    /// The lock's subclass annotation in force when it was acquired (0: the class itself).
    /// Per acquisition, like lockdep's `mutex_lock_nested`: one account is the first lock of
    /// one transfer and the second of another.
    pub subclass: u32,
}

/// A lock object of the trace.
#[derive(Clone, Debug)]
pub struct LockModel {
    pub object: ObjectId,
    /// The instance, for reports (its variable when static, else kind and id).
    pub name: String,
    /// The class, as a name stable across runs of one build (the node of the lock-order graph).
    pub class: String,
    pub kind: ObjectKind,
    /// The declared rank (`LockRank` annotation), once the trace has declared it.
    pub rank: Option<u32>,
    /// The subclass annotation in force (the last one seen in the merged order).
    pub subclass: u32,
    /// A monitor lock: the mutex of a condition wait, or the innermost lock held at a signal or
    /// broadcast. Its critical sections read and write the state that decides whether threads
    /// wait, proceed or join (a "done" flag, a counter), so the data flowing between them —
    /// which a lock-only trace does not record — must be assumed: the closure keeps them in
    /// trace order (`deadlock.rs`, the monitor rule).
    pub monitor: bool,
}

/// An acquisition of a ranked lock while a lock of the same or a higher rank was held.
#[derive(Clone, Copy, Debug)]
pub struct RankViolation {
    /// The held acquisition with the highest rank.
    pub held: u32,
    /// The acquisition that broke the order.
    pub acquisition: u32,
    pub held_rank: u32,
    pub rank: u32,
}

#[derive(Clone, Debug)]
pub struct ThreadModel {
    pub id: foresight_trace::ThreadId,
    pub name: String,
    pub len: u32,
}

/// What a blocking wait waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitKind {
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
}

/// A blocking wait entered while holding locks.
#[derive(Clone, Debug)]
pub struct Wait {
    pub thread: u32,
    pub pos: u32,
    pub kind: WaitKind,
    pub site: SiteId,
    /// Acquisitions held during the wait (for a condition wait, not its own mutex).
    pub held: std::ops::Range<u32>,
    /// The wait timed out in the trace: a timed wait, which ends by itself.
    pub timed_out: bool,
}

/// A sender one kind of wait depends on (a signal, a post, a barrier arrival).
#[derive(Clone, Copy, Debug)]
pub struct SyncPoint {
    pub thread: u32,
    pub pos: u32,
    pub site: SiteId,
    /// Index in the merged order.
    pub seq: u64,
}

/// A read acquisition of an rwlock already read-held by the same thread.
#[derive(Clone, Debug)]
pub struct ReadRecursion {
    pub thread: u32,
    pub lock: u32,
    /// The outer read acquisition.
    pub outer: u32,
    pub pos: u32,
    pub site: SiteId,
}

/// One trace, converted.
#[derive(Debug, Default)]
pub struct Run {
    /// The trace's path, for reports.
    pub source: String,
    pub threads: Vec<ThreadModel>,
    pub locks: Vec<LockModel>,
    pub acquisitions: Vec<Acquisition>,
    /// Backing store of every `held` range.
    pub held_pool: Vec<u32>,
    /// Per thread: acquisition indices in program order.
    pub thread_acquisitions: Vec<Vec<u32>>,
    /// Per (thread, lock): acquisition indices in program order.
    pub by_thread_lock: IndexMap<(u32, u32), Vec<u32>>,
    /// Per lock: the threads that acquire it.
    pub lock_threads: Vec<Vec<u32>>,
    /// The locks acquired by two threads or more: the only ones the lock rule can apply to.
    pub contended_locks: Vec<u32>,
    pub waits: Vec<Wait>,
    pub signals: HashMap<ObjectId, Vec<SyncPoint>>,
    pub posts: HashMap<ObjectId, Vec<SyncPoint>>,
    /// Successful semaphore waits (including `sem_trywait`).
    pub sem_takes: HashMap<ObjectId, Vec<SyncPoint>>,
    pub sem_initial: HashMap<ObjectId, u32>,
    /// Arrivals at (barrier, generation).
    pub arrivals: HashMap<(ObjectId, u64), Vec<SyncPoint>>,
    pub read_recursions: Vec<ReadRecursion>,
    /// Acquisitions against the declared ranks, in trace order.
    pub rank_violations: Vec<RankViolation>,
    pub hb: HappensBefore,
    pub sites: HashMap<SiteId, Location>,
    /// Names of the objects that are not locks (barriers, conditions, semaphores), for reports.
    pub object_names: HashMap<ObjectId, String>,
    pub events: u64,
}

impl Run {
    pub fn held(&self, acq: &Acquisition) -> &[u32] {
        &self.held_pool[acq.held.start as usize..acq.held.end as usize]
    }

    pub fn held_range(&self, r: &std::ops::Range<u32>) -> &[u32] {
        &self.held_pool[r.start as usize..r.end as usize]
    }

    pub fn location(&self, site: SiteId) -> Location {
        self.sites.get(&site).cloned().unwrap_or_else(|| Location {
            text: format!("site#{site}"),
            ..Location::default()
        })
    }

    /// The lock class of an acquisition: its lock's class, with `/N` for subclass N > 0.
    pub fn acquisition_class(&self, a: &Acquisition) -> String {
        let base = &self.locks[a.lock as usize].class;
        if a.subclass == 0 {
            base.clone()
        } else {
            format!("{base}/{}", a.subclass)
        }
    }

    pub fn thread_label(&self, t: u32) -> String {
        let th = &self.threads[t as usize];
        format!("thread {} \"{}\"", th.id, th.name)
    }
}

/// A hasher for keys made of the analyzer's own dense indices (never values chosen by the
/// trace, so there is nothing to flood): a multiply-rotate step per word, much cheaper than
/// SipHash on the per-acquisition path.
#[derive(Clone, Copy, Debug, Default)]
pub struct IndexHasher(u64);

impl std::hash::Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(n as u64);
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(29) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

pub type IndexMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IndexHasher>>;

struct HeldEntry {
    lock: u32,
    acq: u32,
    depth: u32,
    /// The highest (rank, acquisition) among this entry and those below it: the rank check is
    /// one comparison with the top of the stack.
    max_rank: Option<(u32, u32)>,
}

/// Converts a decoded trace. `progress` is called now and then with the events done.
pub fn build_run(trace: &Trace, progress: &mut dyn FnMut(u64)) -> Run {
    let tables = &trace.tables;
    let n = trace.threads.len();
    let dense = ThreadIndex::new(trace);
    let mut run = Run {
        source: trace.path.display().to_string(),
        threads: trace
            .threads
            .iter()
            .map(|t| ThreadModel {
                id: t.thread,
                name: tables
                    .thread_name(t.thread)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("thread-{}", t.thread)),
                len: t.events.len() as u32,
            })
            .collect(),
        thread_acquisitions: vec![Vec::new(); n],
        sites: convert_sites(tables),
        object_names: tables
            .objects
            .values()
            .filter(|o| !o.kind.is_lock())
            .map(|o| (o.id, tables.describe_object(o.id)))
            .collect(),
        events: trace.event_count(),
        ..Run::default()
    };

    // Which generation each barrier arrival belongs to: the generation of the thread's next
    // departure from that barrier. Known before the merged pass so that arrivals can publish.
    let mut arrival_generation: HashMap<(usize, u32), u64> = HashMap::new();
    for (ti, t) in trace.threads.iter().enumerate() {
        let mut next_departure: HashMap<ObjectId, u64> = HashMap::new();
        for (pos, ev) in t.events.iter().enumerate().rev() {
            match ev.kind {
                EventKind::BarrierWaitEnd {
                    barrier,
                    generation,
                    ..
                } => {
                    next_departure.insert(barrier, generation);
                }
                EventKind::BarrierWaitBegin { barrier, .. } => {
                    if let Some(&g) = next_departure.get(&barrier) {
                        arrival_generation.insert((ti, pos as u32), g);
                    }
                    next_departure.remove(&barrier);
                }
                _ => {}
            }
        }
    }

    let mut lock_index: HashMap<ObjectId, u32> = HashMap::new();
    let mut class_names: HashMap<ObjectId, String> = HashMap::new();
    let mut subclasses: HashMap<ObjectId, u32> = HashMap::new();
    let mut ranks: HashMap<ObjectId, u32> = HashMap::new();
    let mut held: Vec<Vec<HeldEntry>> = (0..n).map(|_| Vec::new()).collect();
    let mut pending: Vec<Option<(ObjectId, u32)>> = vec![None; n];
    let mut pending_site: Vec<SiteId> = vec![0; n];
    let mut requested_mode: Vec<Mode> = vec![Mode::Write; n];
    let mut cond_site: Vec<SiteId> = vec![0; n];
    let mut waits_entered: Vec<usize> = vec![usize::MAX; n];
    let mut hb = HbBuilder::new(n);

    for (seq, me) in trace.merged().enumerate() {
        if seq & 0xf_ffff == 0 {
            progress(seq as u64);
        }
        let Some(t) = dense.get(me.thread) else {
            continue;
        };
        let pos = me.index as u32;
        hb.step(t, pos);
        if pos == 0 {
            hb.receive(t, pos, &Channel::Fork(t));
        }
        let tu = t as u32;
        match me.event.kind {
            EventKind::Read { addr, .. } => hb.read(t, pos, addr),
            EventKind::Write { addr, .. } => hb.write(t, pos, addr),
            EventKind::ThreadCreate { child, .. } => {
                if let Some(c) = dense.get(child) {
                    hb.send(t, Channel::Fork(c));
                }
            }
            EventKind::JoinRequest { child, site } => {
                if let Some(c) = dense.get(child) {
                    let h = push_held(&mut run, &held[t], None);
                    if !h.is_empty() {
                        run.waits.push(Wait {
                            thread: tu,
                            pos,
                            kind: WaitKind::Join { child: c as u32 },
                            site,
                            held: h,
                            timed_out: false,
                        });
                    }
                }
            }
            EventKind::JoinEnd { child, joined } => {
                if let (true, Some(c)) = (joined, dense.get(child)) {
                    hb.receive_thread(t, pos, c);
                }
            }
            EventKind::LockRequest { lock, site, mode } => {
                pending[t] = Some((lock, pos));
                pending_site[t] = site;
                requested_mode[t] = mode_of(mode);
            }
            EventKind::LockFailed { .. } => pending[t] = None,
            EventKind::LockAcquired { lock, mode } => {
                let (request, site) = match pending[t].take() {
                    Some((l, p)) if l == lock => (p, pending_site[t]),
                    _ => (pos, pending_site[t]),
                };
                let l = lock_of(
                    &mut run,
                    &mut lock_index,
                    (&ranks, &subclasses),
                    tables,
                    lock,
                );
                acquire(
                    &mut run,
                    &mut held[t],
                    tu,
                    l,
                    mode_of(mode),
                    AcquireHow::Blocking,
                    request,
                    pos,
                    seq as u64,
                    site,
                );
            }
            EventKind::LockTry {
                lock,
                mode,
                site,
                acquired: true,
            } => {
                let l = lock_of(
                    &mut run,
                    &mut lock_index,
                    (&ranks, &subclasses),
                    tables,
                    lock,
                );
                acquire(
                    &mut run,
                    &mut held[t],
                    tu,
                    l,
                    mode_of(mode),
                    AcquireHow::Try,
                    pos,
                    pos,
                    seq as u64,
                    site,
                );
            }
            EventKind::LockRelease { lock, .. } => {
                if let Some(&l) = lock_index.get(&lock) {
                    release(&mut run, &mut held[t], l, pos);
                }
            }
            EventKind::CondWaitBegin { cond, mutex, site } => {
                cond_site[t] = site;
                waits_entered[t] = run.waits.len();
                if let Some(&l) = lock_index.get(&mutex) {
                    run.locks[l as usize].monitor = true;
                    release(&mut run, &mut held[t], l, pos);
                }
                let h = push_held(&mut run, &held[t], None);
                if !h.is_empty() {
                    run.waits.push(Wait {
                        thread: tu,
                        pos,
                        kind: WaitKind::Condition { cond, mutex },
                        site,
                        held: h,
                        timed_out: false,
                    });
                }
            }
            EventKind::CondWaitEnd {
                cond,
                mutex,
                outcome,
            } => {
                if outcome == WaitOutcome::TimedOut {
                    mark_timed_out(&mut run, &waits_entered, tu);
                }
                hb.receive(t, pos, &Channel::Condition(cond));
                let l = lock_of(
                    &mut run,
                    &mut lock_index,
                    (&ranks, &subclasses),
                    tables,
                    mutex,
                );
                acquire(
                    &mut run,
                    &mut held[t],
                    tu,
                    l,
                    Mode::Write,
                    AcquireHow::CondReacquire,
                    pos,
                    pos,
                    seq as u64,
                    cond_site[t],
                );
            }
            EventKind::CondSignal { cond, site } | EventKind::CondBroadcast { cond, site } => {
                if let Some(h) = held[t].last() {
                    run.locks[h.lock as usize].monitor = true;
                }
                hb.send(t, Channel::Condition(cond));
                run.signals.entry(cond).or_default().push(SyncPoint {
                    thread: tu,
                    pos,
                    site,
                    seq: seq as u64,
                });
            }
            EventKind::BarrierWaitBegin { barrier, site } => {
                let generation = arrival_generation.get(&(t, pos)).copied();
                if let Some(g) = generation {
                    hb.send(t, Channel::Barrier(barrier, g));
                    run.arrivals
                        .entry((barrier, g))
                        .or_default()
                        .push(SyncPoint {
                            thread: tu,
                            pos,
                            site,
                            seq: seq as u64,
                        });
                }
                let h = push_held(&mut run, &held[t], None);
                if !h.is_empty() {
                    run.waits.push(Wait {
                        thread: tu,
                        pos,
                        kind: WaitKind::Barrier {
                            barrier,
                            generation,
                        },
                        site,
                        held: h,
                        timed_out: false,
                    });
                }
            }
            EventKind::BarrierWaitEnd {
                barrier,
                generation,
                ..
            } => hb.receive(t, pos, &Channel::Barrier(barrier, generation)),
            EventKind::OnceEnd { once } => hb.send(t, Channel::Once(once)),
            EventKind::OnceSkip { once } => hb.receive(t, pos, &Channel::Once(once)),
            EventKind::SemInit { sem, value, .. } => {
                run.sem_initial.insert(sem, value);
            }
            EventKind::SemPost { sem, site } => {
                hb.send(t, Channel::Semaphore(sem));
                run.posts.entry(sem).or_default().push(SyncPoint {
                    thread: tu,
                    pos,
                    site,
                    seq: seq as u64,
                });
            }
            EventKind::SemWaitBegin { sem, site } => {
                pending_site[t] = site;
                waits_entered[t] = run.waits.len();
                let h = push_held(&mut run, &held[t], None);
                if !h.is_empty() {
                    run.waits.push(Wait {
                        thread: tu,
                        pos,
                        kind: WaitKind::Semaphore { sem },
                        site,
                        held: h,
                        timed_out: false,
                    });
                }
            }
            EventKind::SemWaitEnd {
                sem,
                acquired: true,
            } => {
                hb.receive(t, pos, &Channel::Semaphore(sem));
                run.sem_takes.entry(sem).or_default().push(SyncPoint {
                    thread: tu,
                    pos,
                    site: pending_site[t],
                    seq: seq as u64,
                });
            }
            EventKind::SemWaitEnd {
                acquired: false, ..
            } => mark_timed_out(&mut run, &waits_entered, tu),
            EventKind::SemTry {
                sem,
                site,
                acquired: true,
            } => {
                hb.receive(t, pos, &Channel::Semaphore(sem));
                run.sem_takes.entry(sem).or_default().push(SyncPoint {
                    thread: tu,
                    pos,
                    site,
                    seq: seq as u64,
                });
            }
            EventKind::HappensBefore { tag, .. } => hb.send(t, Channel::Tag(tag)),
            EventKind::HappensAfter { tag, .. } => hb.receive(t, pos, &Channel::Tag(tag)),
            EventKind::Atomic {
                op, addr, order, ..
            } => {
                // Which store a load read from is not recorded: joining every earlier release
                // on the address over-approximates the order (sound for prediction).
                let acquires = matches!(
                    order,
                    MemoryOrder::Acquire
                        | MemoryOrder::Consume
                        | MemoryOrder::AcqRel
                        | MemoryOrder::SeqCst
                ) && !matches!(op, AtomicOp::Store);
                let releases =
                    matches!(
                        order,
                        MemoryOrder::Release | MemoryOrder::AcqRel | MemoryOrder::SeqCst
                    ) && matches!(op, AtomicOp::Store | AtomicOp::Rmw | AtomicOp::CasSuccess);
                if acquires {
                    hb.receive(t, pos, &Channel::Atomic(addr));
                }
                if !matches!(op, AtomicOp::Store) {
                    hb.read(t, pos, addr);
                }
                if matches!(op, AtomicOp::Store | AtomicOp::Rmw | AtomicOp::CasSuccess) {
                    hb.write(t, pos, addr);
                }
                if releases {
                    hb.send(t, Channel::Atomic(addr));
                }
            }
            EventKind::LockClassName { lock, name } => {
                if let Some(s) = tables.string(name) {
                    class_names.insert(lock, s.to_string());
                }
            }
            EventKind::LockSubclass { lock, subclass } => {
                // Applies to the acquisitions after it (the program declares the level of the
                // lock it is about to take).
                subclasses.insert(lock, subclass);
                if let Some(&l) = lock_index.get(&lock) {
                    run.locks[l as usize].subclass = subclass;
                }
            }
            EventKind::LockRank { lock, rank } => {
                // Applies from here on: acquisitions before the declaration are not checked.
                ranks.insert(lock, rank);
                if let Some(&l) = lock_index.get(&lock) {
                    run.locks[l as usize].rank = Some(rank);
                }
            }
            _ => {}
        }
    }
    // A request never granted: the thread was blocked there when the recording ended (a
    // program that hung, stopped with a signal). It is a request that can be a pattern event,
    // never a critical section: its acquire position is past every frontier.
    for (t, p) in pending.iter().enumerate() {
        if let Some((lock, request)) = *p {
            let l = lock_of(
                &mut run,
                &mut lock_index,
                (&ranks, &subclasses),
                tables,
                lock,
            );
            let seq = run.events;
            acquire(
                &mut run,
                &mut held[t],
                t as u32,
                l,
                requested_mode[t],
                AcquireHow::Blocking,
                request,
                u32::MAX,
                seq,
                pending_site[t],
            );
        }
    }
    run.hb = hb.finish();
    run.contended_locks = (0..run.locks.len() as u32)
        .filter(|&l| run.lock_threads[l as usize].len() >= 2)
        .collect();
    // A semaphore whose init was not recorded started with at least as many tokens as the
    // trace took before posting them: assuming fewer would let a prediction block a wait that
    // cannot block.
    for (sem, takes) in &run.sem_takes {
        if run.sem_initial.contains_key(sem) {
            continue;
        }
        let mut ops: Vec<(u64, i64)> = takes.iter().map(|p| (p.seq, -1)).collect();
        ops.extend(run.posts.get(sem).into_iter().flatten().map(|p| (p.seq, 1)));
        ops.sort_unstable();
        let (mut balance, mut lowest) = (0i64, 0i64);
        for (_, d) in ops {
            balance += d;
            lowest = lowest.min(balance);
        }
        run.sem_initial.insert(*sem, (-lowest) as u32);
    }
    for lock in &mut run.locks {
        let base = class_names
            .get(&lock.object)
            .cloned()
            .unwrap_or_else(|| class_name(tables, lock.object, &run.source));
        // The subclass is per acquisition (`Run::acquisition_class`), not part of the lock's.
        lock.class = base;
    }
    run
}

/// The wait the thread entered last (`waits_entered[t]`, an index into `run.waits` if it was
/// recorded) ended by a timeout.
fn mark_timed_out(run: &mut Run, waits_entered: &[usize], thread: u32) {
    if let Some(w) = run.waits.get_mut(waits_entered[thread as usize]) {
        if w.thread == thread {
            w.timed_out = true;
        }
    }
}

/// Trace thread id → position in `Trace::threads` (looked up for every event).
struct ThreadIndex {
    small: Vec<u32>,
    large: HashMap<foresight_trace::ThreadId, usize>,
}

impl ThreadIndex {
    const NONE: u32 = u32::MAX;
    /// Ids up to this are looked up in a table; larger ones (unusual) in a map.
    const TABLE: u32 = 1 << 16;

    fn new(trace: &Trace) -> Self {
        let mut ix = ThreadIndex {
            small: Vec::new(),
            large: HashMap::new(),
        };
        for (i, t) in trace.threads.iter().enumerate() {
            if t.thread < Self::TABLE {
                let id = t.thread as usize;
                if ix.small.len() <= id {
                    ix.small.resize(id + 1, Self::NONE);
                }
                ix.small[id] = i as u32;
            } else {
                ix.large.insert(t.thread, i);
            }
        }
        ix
    }

    fn get(&self, id: foresight_trace::ThreadId) -> Option<usize> {
        match self.small.get(id as usize) {
            Some(&i) if i != Self::NONE => Some(i as usize),
            Some(_) => None,
            None => self.large.get(&id).copied(),
        }
    }
}

/// The dense index of a lock object, adding it on first sight.
fn lock_of(
    run: &mut Run,
    index: &mut HashMap<ObjectId, u32>,
    (ranks, subclasses): (&HashMap<ObjectId, u32>, &HashMap<ObjectId, u32>),
    tables: &Tables,
    object: ObjectId,
) -> u32 {
    *index.entry(object).or_insert_with(|| {
        let id = run.locks.len() as u32;
        let kind = tables
            .objects
            .get(&object)
            .map_or(ObjectKind::Mutex, |o| o.kind);
        run.locks.push(LockModel {
            object,
            name: tables.describe_object(object),
            class: String::new(),
            kind,
            rank: ranks.get(&object).copied(),
            subclass: subclasses.get(&object).copied().unwrap_or(0),
            monitor: false,
        });
        run.lock_threads.push(Vec::new());
        id
    })
}

fn mode_of(m: LockMode) -> Mode {
    match m {
        LockMode::Exclusive => Mode::Write,
        LockMode::Shared => Mode::Read,
    }
}

fn push_held(run: &mut Run, held: &[HeldEntry], except: Option<u32>) -> std::ops::Range<u32> {
    let start = run.held_pool.len() as u32;
    run.held_pool.extend(
        held.iter()
            .filter(|h| Some(h.lock) != except)
            .map(|h| h.acq),
    );
    start..run.held_pool.len() as u32
}

#[allow(clippy::too_many_arguments)]
fn acquire(
    run: &mut Run,
    held: &mut Vec<HeldEntry>,
    thread: u32,
    lock: u32,
    mode: Mode,
    how: AcquireHow,
    request: u32,
    acquired: u32,
    seq: u64,
    site: SiteId,
) {
    if let Some(h) = held.iter_mut().find(|h| h.lock == lock) {
        // Re-acquired while held: a recursive mutex, or a recursive read of an rwlock. Only
        // the outermost acquisition is a critical section.
        h.depth += 1;
        let outer = h.acq;
        if mode == Mode::Read && run.acquisitions[outer as usize].mode == Mode::Read {
            run.read_recursions.push(ReadRecursion {
                thread,
                lock,
                outer,
                pos: request,
                site,
            });
        }
        return;
    }
    let index = run.acquisitions.len() as u32;
    let below = held.last().and_then(|h| h.max_rank);
    let rank = run.locks[lock as usize].rank;
    if let (Some(rank), Some((held_rank, held_acq)), false) = (rank, below, how == AcquireHow::Try)
    {
        // A successful trylock never waited, so it cannot close a cycle: like lockdep, only
        // acquisitions that can block are held to the order.
        if rank <= held_rank {
            run.rank_violations.push(RankViolation {
                held: held_acq,
                acquisition: index,
                held_rank,
                rank,
            });
        }
    }
    let h = push_held(run, held, None);
    run.acquisitions.push(Acquisition {
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
        subclass: run.locks[lock as usize].subclass,
    });
    run.thread_acquisitions[thread as usize].push(index);
    let list = run.by_thread_lock.entry((thread, lock)).or_default();
    if list.is_empty() {
        run.lock_threads[lock as usize].push(thread);
    }
    list.push(index);
    held.push(HeldEntry {
        lock,
        acq: index,
        depth: 1,
        max_rank: higher_rank(below, rank.map(|r| (r, index))),
    });
}

fn release(run: &mut Run, held: &mut Vec<HeldEntry>, lock: u32, pos: u32) {
    let Some(i) = held.iter().rposition(|h| h.lock == lock) else {
        return;
    };
    held[i].depth -= 1;
    if held[i].depth == 0 {
        let h = held.remove(i);
        run.acquisitions[h.acq as usize].release = Some(pos);
        // Out-of-order release: the entries above it recompute their maximum (LIFO releases,
        // the common case, recompute nothing).
        let mut below = i.checked_sub(1).and_then(|j| held[j].max_rank);
        for e in &mut held[i..] {
            let own = run.locks[e.lock as usize].rank.map(|r| (r, e.acq));
            e.max_rank = higher_rank(below, own);
            below = e.max_rank;
        }
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

/// The class of a lock, as a name that is the same in every run of one build: the static
/// variable, or the (symbolised) site of its init or first use. Objects the table does not
/// know get a name private to their trace, so that they never match across traces.
fn class_name(tables: &Tables, object: ObjectId, source: &str) -> String {
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
            format!(
                "{} initialised at {}",
                info.kind.name(),
                tables.describe_site(*site)
            )
        }
        ClassKey::FirstUse(site) => {
            format!(
                "{} first used at {}",
                info.kind.name(),
                tables.describe_site(*site)
            )
        }
    }
}

fn convert_sites(tables: &Tables) -> HashMap<SiteId, Location> {
    tables
        .sites
        .iter()
        .map(|(&id, info)| {
            let loc = tables.site_location(id);
            let function = loc
                .and_then(|l| l.function)
                .and_then(|f| tables.string(f))
                .map(str::to_string);
            let file = loc
                .and_then(|l| l.file)
                .and_then(|f| tables.string(f))
                .map(str::to_string);
            (
                id,
                Location {
                    function,
                    file,
                    line: loc.map_or(0, |l| l.line),
                    text: tables.describe_site(id),
                    stack: info
                        .frames
                        .iter()
                        .map(|f| tables.describe_frame(f))
                        .collect(),
                },
            )
        })
        .collect()
}
