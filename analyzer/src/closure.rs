//! The sync-preserving closure (Tunç, Mathur, Pavlogiannis and Viswanathan, "Sound Dynamic
//! Deadlock Prediction in Linear Time", PLDI 2023; the same closure decides sync-preserving races,
//! Mathur, Pavlogiannis and Viswanathan, "Optimal Prediction of Synchronization-Preserving Races",
//! POPL 2021).
//!
//! Given *pattern events* — at most one per thread — the closure S is the smallest set of events
//! that
//! 1. contains every event before a pattern event in its thread,
//! 2. is closed under thread order and under the happens-before edges of the run's clocks
//!    (`hb.rs` with `EdgeKinds::DEADLOCK`: create, join, barriers, once, semaphores,
//!    conditions, annotations, release/acquire atomics, reads-from — never lock
//!    release → acquire),
//! 3. is closed under the lock rule: for two critical sections on one lock that conflict (at
//!    least one writer) whose acquires are both in S, the release of the one earlier in the
//!    trace is in S (critical sections keep their trace order: that is what makes the
//!    reordering *sync-preserving*, and it is what keeps a prediction sound),
//! 4. is closed under the monitor rule: an acquisition of a *monitor* lock (the mutex of a
//!    condition wait, or the lock held at a signal — `model/locks.rs`) in S brings in every
//!    other thread's critical section on it that came earlier in the trace. The paper's
//!    reordering keeps every read's writer; a lock-only trace records no reads, and the state a
//!    monitor protects (a "done" flag checked before a join, a count checked before a wait) is
//!    exactly what decides what the thread does next. Without this rule, "wait until the child
//!    marked itself done under the lock, then join it while holding the lock" would be
//!    predicted.
//!
//! When S contains none of the pattern events, S in trace order is a feasible reordering of
//! the trace after which every pattern thread is at its pattern event, with the locks it holds
//! there held (an acquire before the pattern event whose release is after it is, by 3, the only
//! open critical section on that lock in S). For a deadlock the pattern events are where the
//! threads would block ([`sync_preserving_closure`], `deadlock.rs`, `waits.rs`); for a race,
//! the two accesses ([`closure_before_within`]): they are then adjacent-able at the end of S — a
//! predicted race.
//!
//! S is represented by a frontier: per thread, the length of the prefix it contains. Every rule
//! only ever raises the frontier, so the computation is a monotone fixpoint: each receive
//! (stored clock) and each acquisition is visited at most once, and each visit of a newly
//! entered acquisition marks its lock for one check of the lock rule. One closure costs
//! O(R·T + A + D·T_l²) for R receives and A acquisitions inside S, D lock checks and T_l
//! threads per lock: linear in the part of the trace before the pattern. [`ClosureState`] is
//! resumable: moving a pattern event later and closing again only adds the new events, which is
//! what makes the searches over many candidate patterns linear (`deadlock.rs`'s
//! `search_abstract_pattern`).
//!
//! What the closure does not know, and so cannot make unsound: only recorded events exist (a
//! lock-only trace has no data dependencies); reads-from of plain memory is taken from the
//! merged order, exact for accesses ordered by synchronisation but not for racy ones.

use crate::model::{Acquisition, Run, SegmentThreads};
use crate::stream::Mode;

/// The pattern event of one thread: it must stay outside the closure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatternEvent {
    pub thread: u32,
    /// Position of the blocking event; the closure may contain only events before it.
    pub pos: u32,
}

/// Why a closure reached a pattern event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotPredicted {
    /// Two pattern events in one thread.
    SameThread,
    /// The work budget ran out before the closure was decided.
    OutOfBudget,
    /// The closure contains the pattern event of `thread` (it must happen first).
    Reached { thread: u32, by: Reach },
}

/// What forced a pattern event into the closure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// A happens-before edge (create/join, barrier, once, semaphore, condition, …).
    HappensBefore,
    /// The lock rule on `lock`: its critical sections cannot be reordered that way.
    LockOrder { lock: u32 },
    /// A lock needed in the reordering is never released in the trace (or in the segment
    /// analysed).
    NeverReleased { lock: u32 },
    /// The pattern event is before the start of the segment analysed (`Run::start`): the
    /// reordering of a segment keeps everything before it as it ran.
    BeforeSegment,
}

/// The closure, as a per-thread prefix length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closure {
    pub frontier: Vec<u32>,
}

/// Computes the sync-preserving closure of the events before `pattern` (a receive at a pattern
/// event itself — the wake-up of a condition wait whose mutex re-acquisition is the pattern
/// event — is in it: see [`ClosureState::block_at`]).
pub fn sync_preserving_closure(
    run: &Run,
    pattern: &[PatternEvent],
) -> Result<Closure, NotPredicted> {
    let mut state = ClosureState::new(run, u64::MAX);
    for (i, b) in pattern.iter().enumerate() {
        if pattern[..i].iter().any(|o| o.thread == b.thread) {
            return Err(NotPredicted::SameThread);
        }
        state.block_at(*b)?;
    }
    state.choose_strategy();
    state.close()?;
    Ok(state.into_closure())
}

/// A closure being computed; it can be resumed after a pattern event moved later (as
/// `deadlock::search_abstract_pattern` does), since every rule only ever adds events.
///
/// Its state is kept per slot of the segment's threads ([`SegmentThreads`]): a segment of a
/// program that created 10^5 threads pays for the threads it runs, not for all of them.
pub struct ClosureState<'r> {
    run: &'r Run,
    prefixes: Prefixes<'r>,
    receive_cursor: Vec<usize>,
    acquisition_cursor: Vec<usize>,
    /// Find the locks the lock rule must look at by walking the acquisitions that enter the
    /// closure (else: check every contended lock each round).
    walk: bool,
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    /// Work done, and the most allowed.
    pub steps: u64,
    max_steps: u64,
}

/// Per slot of the segment's threads, the length of the prefix in the closure and the
/// position of the pattern event it must stay below. A thread without a slot has no event in
/// the segment: its prefix is everything before the segment, and stays so.
struct Prefixes<'r> {
    run: &'r Run,
    threads: &'r SegmentThreads,
    frontier: Vec<u32>,
    limit: Vec<u32>,
}

impl Prefixes<'_> {
    /// The length of thread `t`'s prefix.
    #[inline]
    fn get(&self, t: u32) -> u32 {
        match self.threads.slot(t) {
            Some(i) => self.frontier[i],
            None => self.run.start_of(t),
        }
    }

    /// Raises the frontier of `u` to `to`; fails when that swallows a pattern event (the
    /// frontier is still raised: it says how far the closure goes). Returns whether the
    /// frontier moved.
    #[inline]
    fn raise(&mut self, u: u32, to: u32, why: Reach) -> Result<bool, NotPredicted> {
        // A thread without a slot has no event in the segment, so nothing in it (a clock, a
        // release) lies beyond its start.
        let Some(i) = self.threads.slot(u) else {
            return Ok(false);
        };
        if to <= self.frontier[i] {
            return Ok(false);
        }
        self.frontier[i] = to;
        if to > self.limit[i] {
            return Err(NotPredicted::Reached { thread: u, by: why });
        }
        Ok(true)
    }
}

impl<'r> ClosureState<'r> {
    pub fn new(run: &'r Run, max_steps: u64) -> Self {
        let threads = run.segment_threads();
        let n = threads.len();
        ClosureState {
            run,
            prefixes: Prefixes {
                run,
                threads,
                // A segment's closures start with the trace before it (`Run::start`): that
                // prefix is an execution as it ran, and only the segment's events are
                // reordered.
                frontier: (0..n).map(|i| run.start_of(threads.thread(i))).collect(),
                limit: vec![u32::MAX; n],
            },
            receive_cursor: vec![0; n],
            acquisition_cursor: vec![0; n],
            walk: true,
            dirty: Vec::new(),
            is_dirty: vec![false; run.locks.len()],
            steps: 0,
            max_steps,
        }
    }

    /// The length of thread `t`'s prefix in the closure. After a failed [`close`], the
    /// frontier of the thread whose pattern event was reached is where the closure wanted to
    /// go.
    ///
    /// [`close`]: ClosureState::close
    pub fn frontier_of(&self, t: u32) -> u32 {
        self.prefixes.get(t)
    }

    /// The closure reached, with a prefix length for every thread of the run.
    pub fn into_closure(self) -> Closure {
        let p = &self.prefixes;
        Closure {
            frontier: (0..self.run.threads.len() as u32)
                .map(|t| p.get(t))
                .collect(),
        }
    }

    /// Walking every acquisition that enters the closure costs the size of the closure;
    /// checking every contended lock each round costs the (lock, thread) pairs per round.
    /// Take the cheaper one for a closure computed once: early patterns have small closures,
    /// long traces with few locks have many acquisitions. (A resumed closure walks: over all
    /// its resumptions that is linear.)
    pub fn choose_strategy(&mut self) {
        let run = self.run;
        let p = &self.prefixes;
        let in_prefix: usize = (0..p.frontier.len())
            .map(|i| {
                run.thread_acquisitions(p.threads.thread(i) as usize)
                    .partition_point(|&a| run.acquisitions[a as usize].acquired < p.frontier[i])
            })
            .sum();
        let per_round: usize = run
            .contended_locks
            .iter()
            .map(|&l| run.lock_threads[l as usize].len())
            .sum();
        self.walk = in_prefix < per_round.saturating_mul(4);
    }

    /// Makes event `b` a pattern event where its thread blocks: the events before it are in
    /// the closure, it is not, and what it received (a condition wait's wake-up, whose mutex
    /// re-acquisition blocks) is in. It replaces the thread's previous pattern event, which
    /// must be earlier.
    pub fn block_at(&mut self, b: PatternEvent) -> Result<(), NotPredicted> {
        self.exclude(b)?;
        let t = b.thread as usize;
        // A pattern event that is itself a receive (the mutex re-taken when a condition wait
        // returns) has had its wake-up: what it received is in the closure, only its lock
        // blocks.
        if let Some(clock) =
            self.run
                .hb
                .receive_before(t, b.pos, &mut crate::hb::DecodedClock::default())
        {
            for (u, v) in self.run.hb.known(clock) {
                if u != t {
                    self.prefixes.raise(u as u32, v, Reach::HappensBefore)?;
                }
            }
        }
        Ok(())
    }

    /// Makes event `e` a pattern event of which only the strict predecessors are in the
    /// closure (a race's access: its own reads-from edge is not a reason to run its writer
    /// first). It replaces the thread's previous pattern event, which must be earlier.
    pub fn exclude(&mut self, e: PatternEvent) -> Result<(), NotPredicted> {
        // A thread without a slot has no event in the segment: `e` is before it (or is no
        // event of the run at all).
        let slot = self.prefixes.threads.slot(e.thread);
        let Some(i) = slot.filter(|_| self.run.start_of(e.thread) <= e.pos) else {
            return Err(NotPredicted::Reached {
                thread: e.thread,
                by: Reach::BeforeSegment,
            });
        };
        if self.prefixes.frontier[i] > e.pos {
            return Err(NotPredicted::Reached {
                thread: e.thread,
                by: Reach::HappensBefore,
            });
        }
        self.prefixes.limit[i] = e.pos;
        self.prefixes.frontier[i] = e.pos;
        Ok(())
    }

    /// Runs the rules to their fixpoint; fails as soon as a pattern event would enter.
    pub fn close(&mut self) -> Result<(), NotPredicted> {
        let run = self.run;
        let threads = self.prefixes.threads;
        let n = threads.len();
        let mut clock_buf = crate::hb::DecodedClock::default();
        loop {
            if self.steps > self.max_steps {
                return Err(NotPredicted::OutOfBudget);
            }
            // Thread order and happens-before: walk every thread's receives up to its frontier
            // until nothing moves. A receive's cursor moves only once all of it is applied, so
            // that a resumed closure applies the rest.
            let mut moved = true;
            while moved {
                moved = false;
                for i in 0..n {
                    let t = threads.thread(i) as usize;
                    while let Some((pos, clock)) =
                        run.hb.receive(t, self.receive_cursor[i], &mut clock_buf)
                    {
                        if pos >= self.prefixes.frontier[i] {
                            break;
                        }
                        self.steps += 1;
                        for (u, v) in run.hb.known(clock) {
                            if u != t {
                                moved |= self.prefixes.raise(u as u32, v, Reach::HappensBefore)?;
                            }
                        }
                        self.receive_cursor[i] += 1;
                    }
                }
            }
            // The lock rule.
            let mut raised = false;
            if self.walk {
                for i in 0..n {
                    let acquisitions = run.thread_acquisitions(threads.thread(i) as usize);
                    while let Some(&a) = acquisitions.get(self.acquisition_cursor[i]) {
                        let acq = &run.acquisitions[a as usize];
                        if acq.acquired >= self.prefixes.frontier[i] {
                            break;
                        }
                        self.steps += 1;
                        self.acquisition_cursor[i] += 1;
                        if !self.is_dirty[acq.lock as usize] {
                            self.is_dirty[acq.lock as usize] = true;
                            self.dirty.push(acq.lock);
                        }
                    }
                }
                while let Some(&lock) = self.dirty.last() {
                    self.steps += run.lock_threads[lock as usize].len() as u64;
                    // Stays dirty if the rule fails: a resumed closure checks it again.
                    raised |= lock_rule(run, lock, &mut self.prefixes)?;
                    self.dirty.pop();
                    self.is_dirty[lock as usize] = false;
                }
            } else {
                for &lock in &run.contended_locks {
                    self.steps += run.lock_threads[lock as usize].len() as u64;
                    raised |= lock_rule(run, lock, &mut self.prefixes)?;
                }
            }
            if !raised {
                return Ok(());
            }
        }
    }
}

/// The lock rule on one lock. Per thread, only its last acquisition inside the frontier can be
/// open (the earlier ones are released before it, in thread order), and for rwlocks its last
/// writing one matters too (a read of another thread before it conflicts with it). Each
/// conflicting pair (one writer at least) whose earlier acquisition is another thread's puts
/// that acquisition's release in the closure. Returns whether the frontier moved.
fn lock_rule(run: &Run, lock: u32, prefixes: &mut Prefixes) -> Result<bool, NotPredicted> {
    let threads = &run.lock_threads[lock as usize];
    let mut last: Vec<(u32, u32, Option<u32>)> = Vec::with_capacity(threads.len());
    for &t in threads {
        let list = run.pair_acquisitions_of(t, lock);
        let f = prefixes.get(t);
        let inside = list.partition_point(|&a| run.acquisitions[a as usize].acquired < f);
        if inside == 0 {
            continue;
        }
        let latest = list[inside - 1];
        let latest_write = list[..inside]
            .iter()
            .rev()
            .find(|&&a| run.acquisitions[a as usize].mode == Mode::Write)
            .copied();
        last.push((t, latest, latest_write));
    }
    let mut raised = false;
    if run.locks[lock as usize].monitor {
        raised |= monitor_rule(run, lock, &last, prefixes)?;
    }
    if last.len() < 2 {
        return Ok(raised);
    }
    // A section must be completed first when another thread's latest section inside the
    // frontier comes later in the trace and conflicts with it: the latest writing section of
    // another thread after it, or (for a writing section) any later one. The two latest of
    // each kind over all threads answer that for every thread at once, so a lock that
    // thousands of threads took costs one pass, not a pass per pair.
    let seq = |a: u32| run.acquisitions[a as usize].seq;
    let latest_write = top_two(last.iter().filter_map(|&(t, _, w)| w.map(|w| (seq(w), t))));
    let latest_any = top_two(last.iter().map(|&(t, a, _)| (seq(a), t)));
    let after = |top: &[Option<(u64, u32)>; 2], u: u32, s: u64| {
        top.iter().flatten().any(|&(other, t)| t != u && other > s)
    };
    for &(u, a_u, _) in &last {
        let a_u = &run.acquisitions[a_u as usize];
        let later_conflicting = after(&latest_write, u, a_u.seq)
            || (a_u.mode == Mode::Write && after(&latest_any, u, a_u.seq));
        if later_conflicting {
            raised |= include_release(a_u, u, lock, prefixes)?;
        }
    }
    Ok(raised)
}

/// The two greatest (sequence, thread) pairs of distinct threads: what "the latest of another
/// thread than u" needs for any u.
fn top_two(items: impl Iterator<Item = (u64, u32)>) -> [Option<(u64, u32)>; 2] {
    let mut top: [Option<(u64, u32)>; 2] = [None, None];
    for item in items {
        match top {
            [None, _] => top[0] = Some(item),
            [Some(first), _] if item.0 > first.0 => {
                if first.1 != item.1 {
                    top[1] = Some(first);
                }
                top[0] = Some(item);
            }
            [Some(first), second] if first.1 != item.1 && second.is_none_or(|s| item.0 > s.0) => {
                top[1] = Some(item);
            }
            _ => {}
        }
    }
    top
}

/// Puts the release of acquisition `acq` (thread `u`, lock `lock`) in the closure; a critical
/// section never released cannot be completed first.
fn include_release(
    acq: &Acquisition,
    u: u32,
    lock: u32,
    prefixes: &mut Prefixes,
) -> Result<bool, NotPredicted> {
    match acq.release {
        Some(rel) => prefixes.raise(u, rel + 1, Reach::LockOrder { lock }),
        None => Err(NotPredicted::Reached {
            thread: u,
            by: Reach::NeverReleased { lock },
        }),
    }
}

/// The monitor rule on one lock: for each thread's latest acquisition inside the frontier,
/// every other thread's last acquisition before it in the trace has its release in the closure
/// (the earlier ones are before that one in their thread). Returns whether the frontier moved.
fn monitor_rule(
    run: &Run,
    lock: u32,
    last: &[(u32, u32, Option<u32>)],
    prefixes: &mut Prefixes,
) -> Result<bool, NotPredicted> {
    let mut raised = false;
    for &(t, a_t, _) in last {
        let seq_t = run.acquisitions[a_t as usize].seq;
        for &u in &run.lock_threads[lock as usize] {
            if u == t {
                continue;
            }
            let list = run.pair_acquisitions_of(u, lock);
            let before = list.partition_point(|&a| run.acquisitions[a as usize].seq < seq_t);
            let Some(&a_u) = before.checked_sub(1).and_then(|i| list.get(i)) else {
                continue;
            };
            raised |= include_release(&run.acquisitions[a_u as usize], u, lock, prefixes)?;
        }
    }
    Ok(raised)
}

/// The acquisitions a thread holds at the closure's frontier.
pub fn open_at_frontier(run: &Run, closure: &Closure, thread: u32) -> Vec<u32> {
    let f = closure.frontier[thread as usize];
    run.thread_acquisitions(thread as usize)
        .iter()
        .copied()
        .filter(|&a| {
            let acq = &run.acquisitions[a as usize];
            acq.acquired < f && acq.release.is_none_or(|r| r >= f)
        })
        .collect()
}

/// Computes the sync-preserving closure of the strict predecessors of `events` (what a race
/// check needs: a read's own reads-from edge must not pull its writer in). `Ok`: the closure
/// contains none of them, so a reordering of the trace runs S and then has every event next.
/// It stops with `OutOfBudget` once a round of the rules ends past `max_steps` steps, and says
/// how many it took: those of the rules, and its start, one per thread of the segment and one
/// per 64 locks (a closure's state is made anew for each check, as large as those).
pub fn closure_before_within(
    run: &Run,
    events: &[PatternEvent],
    max_steps: u64,
) -> (Result<Closure, NotPredicted>, u64) {
    let mut state = ClosureState::new(run, max_steps);
    let start = 1 + state.prefixes.frontier.len() as u64 + run.locks.len() as u64 / 64;
    state.steps = start;
    let closed = close_before(&mut state, events);
    let steps = state.steps;
    (closed.map(|()| state.into_closure()), steps)
}

fn close_before(state: &mut ClosureState, events: &[PatternEvent]) -> Result<(), NotPredicted> {
    for (i, e) in events.iter().enumerate() {
        if events[..i].iter().any(|o| o.thread == e.thread) {
            return Err(NotPredicted::SameThread);
        }
        state.exclude(*e)?;
    }
    state.choose_strategy();
    state.close()
}

impl Closure {
    /// Whether the closure contains event `pos` of `thread`.
    #[cfg(test)]
    pub fn contains(&self, thread: u32, pos: u32) -> bool {
        self.frontier.get(thread as usize).is_some_and(|&f| pos < f)
    }
}

/// Counts what an analysis spent on closures, to say in the report where a bound cut the work.
#[derive(Default)]
pub(crate) struct Budget {
    /// Candidate patterns checked, and the most allowed.
    pub checked: u64,
    pub limit: u64,
    pub exhausted: bool,
    /// Steps left to the complete searches (events entering resumable closures).
    pub steps_left: u64,
}

impl Budget {
    pub fn new(candidates: u64, steps: u64) -> Self {
        Budget {
            limit: candidates,
            steps_left: steps,
            ..Budget::default()
        }
    }

    /// Takes one candidate check from the budget; false when none is left.
    pub fn take(&mut self) -> bool {
        if self.checked >= self.limit {
            self.exhausted = true;
            return false;
        }
        self.checked += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::build_run;
    use foresight_trace::builder::TraceBuilder;
    use foresight_trace::Trace;

    fn run_of(b: TraceBuilder) -> Run {
        let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
        build_run(&trace, &mut |_| {})
    }

    fn at(thread: u32, pos: u32) -> PatternEvent {
        PatternEvent { thread, pos }
    }

    fn closure_before(run: &Run, events: &[PatternEvent]) -> Result<Closure, NotPredicted> {
        closure_before_within(run, events, u64::MAX).0
    }

    #[test]
    fn a_reads_from_edge_into_an_excluded_read_does_not_order_its_writer_first() {
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let t1 = b.spawn(main, s, "t1");
        let t2 = b.spawn(main, s, "t2");
        b.write(t1, 0x10, 4, s); // t1: 1
        b.read(t2, 0x10, 4, s); // t2: 1, reads from t1's write
        let run = run_of(b);
        let pattern = [at(1, 1), at(2, 1)];
        let closure = closure_before(&run, &pattern).expect("the two accesses can be adjacent");
        assert!(closure.contains(1, 0) && !closure.contains(1, 1));
        assert!(closure.contains(2, 0) && !closure.contains(2, 1));
        // As a blocking pattern, the read's own receive (the write) is in the closure.
        assert!(matches!(
            sync_preserving_closure(&run, &pattern),
            Err(NotPredicted::Reached { thread: 1, .. })
        ));
    }

    #[test]
    fn the_lock_rule_keeps_two_critical_sections_on_one_lock_in_trace_order() {
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let t1 = b.spawn(main, s, "t1");
        let t2 = b.spawn(main, s, "t2");
        let m = b.mutex("m");
        let x = b.mutex("x");
        b.lock(t2, m, s); // t2: 1, 2
        b.write(t2, 0x10, 4, s); // 3
        b.unlock(t2, m, s); // 4
        b.lock(t1, m, s); // t1: 1, 2
        b.write(t1, 0x10, 4, s); // 3
        b.unlock(t1, m, s); // 4
        b.lock(t2, x, s); // t2: 5, 6 (x is t2's alone)
        b.write(t2, 0x20, 4, s); // 7
        let run = run_of(b);
        // Both writes under m: t2's section came first, so it must end before t1's begins.
        assert!(matches!(
            closure_before(&run, &[at(1, 3), at(2, 3)]),
            Err(NotPredicted::Reached {
                thread: 2,
                by: Reach::LockOrder { .. }
            })
        ));
        // t2's write under x, after its section on m: t1 can be inside m at the same time.
        let closure = closure_before(&run, &[at(1, 3), at(2, 7)]).expect("concurrent");
        assert!(closure.contains(2, 6) && !closure.contains(2, 7));
        assert_eq!(open_at_frontier(&run, &closure, 1).len(), 1, "t1 holds m");
        assert_eq!(open_at_frontier(&run, &closure, 2).len(), 1, "t2 holds x");
    }

    #[test]
    fn a_race_check_stops_at_its_steps_and_says_how_many_it_took() {
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let t1 = b.spawn(main, s, "t1");
        let t2 = b.spawn(main, s, "t2");
        let m = b.mutex("m");
        // Sections on m taking turns, each reading the other's last write: the closure before
        // the last writes walks each reads-from edge.
        for _ in 0..50 {
            for t in [t1, t2] {
                b.lock(t, m, s);
                b.read(t, 0x10, 4, s);
                b.write(t, 0x10, 4, s);
                b.unlock(t, m, s);
            }
        }
        b.write(t1, 0x20, 4, s); // t1: 251
        b.write(t2, 0x20, 4, s); // t2: 251
        let run = run_of(b);
        let pattern = [at(1, 251), at(2, 251)];
        let (whole, steps) = closure_before_within(&run, &pattern, u64::MAX);
        assert!(whole.is_ok(), "{whole:?}");
        assert!(steps > 100, "each hand-off is a step: {steps}");
        // The steps are counted between rounds of the rules: fewer than its start stops it
        // before the first.
        let (cut, cut_steps) = closure_before_within(&run, &pattern, 1);
        assert!(matches!(cut, Err(NotPredicted::OutOfBudget)), "{cut:?}");
        assert!(cut_steps < steps, "{cut_steps} of {steps}");
        let (again, _) = closure_before_within(&run, &pattern, steps);
        assert_eq!(
            again.ok(),
            whole.ok(),
            "the steps it said it took are enough"
        );
    }
}
