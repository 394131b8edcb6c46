//! Instance-level deadlock prediction: the sync-preserving closure of Tunç, Mathur,
//! Pavlogiannis and Viswanathan ("Sound Dynamic Deadlock Prediction in Linear Time", PLDI 2023).
//!
//! A *pattern* is a set of events of distinct threads where each thread would block (a lock
//! request, or a join/barrier/condition/semaphore wait). The closure S of the pattern is the
//! smallest set of events that
//! 1. contains every event before a pattern event in its thread,
//! 2. is closed under thread order and under the happens-before edges of `hb.rs` (create,
//!    join, barriers, once, semaphores, conditions, annotations, release/acquire atomics —
//!    never lock release → acquire),
//! 3. is closed under the lock rule: for two critical sections on one lock that conflict (at
//!    least one writer) whose acquires are both in S, the release of the one earlier in the
//!    trace is in S (critical sections keep their trace order: that is what makes the
//!    reordering *sync-preserving*, and it is what keeps a prediction sound).
//!
//! 4. is closed under the monitor rule: an acquisition of a *monitor* lock (the mutex of a
//!    condition wait, or the lock held at a signal — `model/locks.rs`) in S brings in every other
//!    thread's critical section on it that came earlier in the trace. The paper's reordering
//!    keeps every read's writer; a lock-only trace records no reads, and the state a monitor
//!    protects (a "done" flag checked before a join, a count checked before a wait) is exactly
//!    what decides what the thread does next. Without this rule, "wait until the child marked
//!    itself done under the lock, then join it while holding the lock" would be predicted.
//!
//! The pattern is a predicted deadlock when S contains none of the pattern events: then S,
//! in trace order, is a feasible reordering of the trace after which every pattern thread is at
//! its blocking event while its locks are held (an acquire before the pattern event whose
//! release is after it is, by 3, the only open critical section on that lock in S).
//!
//! S is represented by a frontier: per thread, the length of the prefix it contains. Every rule
//! only ever raises the frontier, so the computation is a monotone fixpoint: each receive
//! (stored clock) and each acquisition is visited at most once, and each visit of a newly
//! entered acquisition marks its lock for one check of the lock rule. One closure costs
//! O(R·T + A + D·T_l²) for R receives and A acquisitions inside S, D lock checks and T_l
//! threads per lock: linear in the part of the trace before the pattern.
//!
//! Two ways to use it:
//! - [`sync_preserving_closure`] / [`check_lock_cycle`]: one concrete pattern, one closure
//!   (waits, and the sampled candidates of `analysis.rs`);
//! - [`search_abstract_pattern`]: the paper's search over all concrete patterns of one abstract
//!   pattern (a thread per edge of a lock cycle). Closures grow with later pattern events, so
//!   when the closure reaches a component's event, every choice with that event or an earlier
//!   one is refuted: the component moves to its next occurrence after the closure and the same
//!   closure is resumed. Linear in the trace per abstract pattern, and complete for
//!   sync-preserving deadlocks of that pattern. The number of abstract patterns is bounded by
//!   budgets (`analysis.rs`), and the report says when they ran out.
//!
//! What the closure does not know, and so cannot make unsound: only recorded events exist (a
//! lock-only trace has no data dependencies); reads-from of plain memory is taken from the
//! merged order, exact for accesses ordered by synchronisation but not for racy ones.

use crate::model::{Mode, Run};

/// The pattern event of one thread: it must stay outside the closure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocked {
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
    /// A lock needed in the reordering is never released in the trace.
    NeverReleased { lock: u32 },
}

/// The closure, as a per-thread prefix length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closure {
    pub frontier: Vec<u32>,
}

/// Computes the sync-preserving closure of the events before `pattern`.
pub fn sync_preserving_closure(run: &Run, pattern: &[Blocked]) -> Result<Closure, NotPredicted> {
    let mut state = ClosureState::new(run, u64::MAX);
    for (i, b) in pattern.iter().enumerate() {
        if pattern[..i].iter().any(|o| o.thread == b.thread) {
            return Err(NotPredicted::SameThread);
        }
        state.block_at(*b)?;
    }
    state.choose_strategy();
    state.close()?;
    Ok(Closure {
        frontier: state.frontier,
    })
}

/// A closure being computed; it can be resumed after a pattern event moved later (see
/// [`search_abstract_pattern`]), since every rule only ever adds events.
pub struct ClosureState<'r> {
    run: &'r Run,
    /// Per thread, the length of the prefix in the closure. After a failed [`close`], the
    /// frontier of the thread whose pattern event was reached is where the closure wanted to go.
    ///
    /// [`close`]: ClosureState::close
    pub frontier: Vec<u32>,
    limit: Vec<u32>,
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

impl<'r> ClosureState<'r> {
    pub fn new(run: &'r Run, max_steps: u64) -> Self {
        let n = run.threads.len();
        ClosureState {
            run,
            frontier: vec![0; n],
            limit: vec![u32::MAX; n],
            receive_cursor: vec![0; n],
            acquisition_cursor: vec![0; n],
            walk: true,
            dirty: Vec::new(),
            is_dirty: vec![false; run.locks.len()],
            steps: 0,
            max_steps,
        }
    }

    /// Walking every acquisition that enters the closure costs the size of the closure;
    /// checking every contended lock each round costs the (lock, thread) pairs per round.
    /// Take the cheaper one for a closure computed once: early patterns have small closures,
    /// long traces with few locks have many acquisitions. (A resumed closure walks: over all
    /// its resumptions that is linear.)
    pub fn choose_strategy(&mut self) {
        let run = self.run;
        let in_prefix: usize = (0..run.threads.len())
            .map(|t| {
                run.thread_acquisitions[t]
                    .partition_point(|&a| run.acquisitions[a as usize].acquired < self.frontier[t])
            })
            .sum();
        let per_round: usize = run
            .contended_locks
            .iter()
            .map(|&l| run.lock_threads[l as usize].len())
            .sum();
        self.walk = in_prefix < per_round.saturating_mul(4);
    }

    /// Makes event `b` a pattern event: the events before it are in the closure, it is not.
    /// It replaces the thread's previous pattern event, which must be earlier.
    pub fn block_at(&mut self, b: Blocked) -> Result<(), NotPredicted> {
        let t = b.thread as usize;
        if self.frontier[t] > b.pos {
            return Err(NotPredicted::Reached {
                thread: b.thread,
                by: Reach::HappensBefore,
            });
        }
        self.limit[t] = b.pos;
        self.frontier[t] = b.pos;
        // A pattern event that is itself a receive (the mutex re-taken when a condition wait
        // returns) has had its wake-up: what it received is in the closure, only its lock
        // blocks.
        if let Some(clock) = self.run.hb.receive_before(t, b.pos) {
            for (u, &v) in clock.entries().iter().enumerate() {
                if u != t {
                    raise(&mut self.frontier, &self.limit, u, v, Reach::HappensBefore)?;
                }
            }
        }
        Ok(())
    }

    /// Runs the rules to their fixpoint; fails as soon as a pattern event would enter.
    pub fn close(&mut self) -> Result<(), NotPredicted> {
        let run = self.run;
        let n = run.threads.len();
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
                for t in 0..n {
                    let receives = run.hb.receives(t);
                    while let Some((pos, clock)) = receives.get(self.receive_cursor[t]) {
                        if *pos >= self.frontier[t] {
                            break;
                        }
                        self.steps += 1;
                        for (u, &v) in clock.entries().iter().enumerate() {
                            if u != t {
                                moved |= raise(
                                    &mut self.frontier,
                                    &self.limit,
                                    u,
                                    v,
                                    Reach::HappensBefore,
                                )?;
                            }
                        }
                        self.receive_cursor[t] += 1;
                    }
                }
            }
            // The lock rule.
            let mut raised = false;
            if self.walk {
                for t in 0..n {
                    let acquisitions = &run.thread_acquisitions[t];
                    while let Some(&a) = acquisitions.get(self.acquisition_cursor[t]) {
                        let acq = &run.acquisitions[a as usize];
                        if acq.acquired >= self.frontier[t] {
                            break;
                        }
                        self.steps += 1;
                        self.acquisition_cursor[t] += 1;
                        if !self.is_dirty[acq.lock as usize] {
                            self.is_dirty[acq.lock as usize] = true;
                            self.dirty.push(acq.lock);
                        }
                    }
                }
                while let Some(&lock) = self.dirty.last() {
                    self.steps += run.lock_threads[lock as usize].len() as u64;
                    // Stays dirty if the rule fails: a resumed closure checks it again.
                    raised |= lock_rule(run, lock, &mut self.frontier, &self.limit)?;
                    self.dirty.pop();
                    self.is_dirty[lock as usize] = false;
                }
            } else {
                for &lock in &run.contended_locks {
                    self.steps += run.lock_threads[lock as usize].len() as u64;
                    raised |= lock_rule(run, lock, &mut self.frontier, &self.limit)?;
                }
            }
            if !raised {
                return Ok(());
            }
        }
    }
}

/// Searches one *abstract pattern* for a sync-preserving deadlock, as the PLDI 2023 algorithm
/// does: component i lists the occurrences, in program order of one thread, of "hold x_i,
/// request x_{i+1}" as (hold, request) acquisition pairs. Start with the first occurrence of
/// each; whenever the closure reaches the pattern event of a component, no later choice of the
/// other components can avoid it (closures only grow with later events), so that component
/// moves to its first occurrence after the closure, and the same closure is resumed. Each
/// occurrence is passed once and each event enters the closure once: linear in the trace for
/// one abstract pattern. Returns the first deadlocking choice.
pub fn search_abstract_pattern(
    run: &Run,
    components: &[&[(u32, u32)]],
    max_steps: u64,
) -> Result<(LockCycleCandidate, Closure, u64), NotPredicted> {
    let k = components.len();
    let request = |&(_, r): &(u32, u32)| run.acquisitions[r as usize].request;
    let threads: Vec<u32> = components
        .iter()
        .map(|c| run.acquisitions[c[0].1 as usize].thread)
        .collect();
    let component_of = |t: u32| threads.iter().position(|&u| u == t);
    let mut index = vec![0usize; k];
    let mut state = ClosureState::new(run, max_steps);
    let mut pending: Vec<usize> = (0..k).rev().collect();
    let mut last_reason = Reach::HappensBefore;
    loop {
        while let Some(i) = pending.pop() {
            let t = threads[i] as usize;
            let f = state.frontier[t];
            index[i] += components[i][index[i]..].partition_point(|o| request(o) < f);
            let Some(occurrence) = components[i].get(index[i]) else {
                return Err(NotPredicted::Reached {
                    thread: threads[i],
                    by: last_reason,
                });
            };
            let b = Blocked {
                thread: threads[i],
                pos: request(occurrence),
            };
            match state.block_at(b) {
                Ok(()) => {}
                Err(e) => resume_or_fail(e, &component_of, &mut pending, &mut last_reason)?,
            }
        }
        match state.close() {
            Ok(()) => {
                let candidate = LockCycleCandidate {
                    holds: (0..k).map(|i| components[i][index[i]].0).collect(),
                    requests: (0..k).map(|i| components[i][index[i]].1).collect(),
                };
                let steps = state.steps;
                return Ok((
                    candidate,
                    Closure {
                        frontier: state.frontier,
                    },
                    steps,
                ));
            }
            Err(e) => resume_or_fail(e, &component_of, &mut pending, &mut last_reason)?,
        }
    }
}

/// After a failed closure of an abstract pattern: the component whose event was reached moves
/// on; a lock never released, a budget run out, or a thread outside the pattern end the search
/// (the closure only grows, so they would fail every later choice too).
fn resume_or_fail(
    e: NotPredicted,
    component_of: &dyn Fn(u32) -> Option<usize>,
    pending: &mut Vec<usize>,
    last_reason: &mut Reach,
) -> Result<(), NotPredicted> {
    match e {
        NotPredicted::Reached { thread, by } if !matches!(by, Reach::NeverReleased { .. }) => {
            match component_of(thread) {
                Some(j) => {
                    *last_reason = by;
                    pending.push(j);
                    Ok(())
                }
                None => Err(NotPredicted::Reached { thread, by }),
            }
        }
        e => Err(e),
    }
}

/// The lock rule on one lock. Per thread, only its last acquisition inside the frontier can be
/// open (the earlier ones are released before it, in thread order), and for rwlocks its last
/// writing one matters too (a read of another thread before it conflicts with it). Each
/// conflicting pair (one writer at least) whose earlier acquisition is another thread's puts
/// that acquisition's release in the closure. Returns whether the frontier moved.
fn lock_rule(
    run: &Run,
    lock: u32,
    frontier: &mut [u32],
    limit: &[u32],
) -> Result<bool, NotPredicted> {
    let threads = &run.lock_threads[lock as usize];
    let mut last: Vec<(u32, u32, Option<u32>)> = Vec::with_capacity(threads.len());
    for &t in threads {
        let list = &run.by_thread_lock[&(t, lock)];
        let inside =
            list.partition_point(|&a| run.acquisitions[a as usize].acquired < frontier[t as usize]);
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
        raised |= monitor_rule(run, lock, &last, frontier, limit)?;
    }
    if last.len() < 2 {
        return Ok(raised);
    }
    for &(u, a_u, _) in &last {
        let a_u = &run.acquisitions[a_u as usize];
        for &(t, a_t, w_t) in &last {
            if t == u {
                continue;
            }
            let later_conflicting = w_t.is_some_and(|w| run.acquisitions[w as usize].seq > a_u.seq)
                || (a_u.mode == Mode::Write && run.acquisitions[a_t as usize].seq > a_u.seq);
            if !later_conflicting {
                continue;
            }
            raised |= include_release(a_u, u, lock, frontier, limit)?;
        }
    }
    Ok(raised)
}

/// Puts the release of acquisition `acq` (thread `u`, lock `lock`) in the closure; a critical
/// section never released cannot be completed first.
fn include_release(
    acq: &crate::model::Acquisition,
    u: u32,
    lock: u32,
    frontier: &mut [u32],
    limit: &[u32],
) -> Result<bool, NotPredicted> {
    match acq.release {
        Some(rel) => raise(
            frontier,
            limit,
            u as usize,
            rel + 1,
            Reach::LockOrder { lock },
        ),
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
    frontier: &mut [u32],
    limit: &[u32],
) -> Result<bool, NotPredicted> {
    let mut raised = false;
    for &(t, a_t, _) in last {
        let seq_t = run.acquisitions[a_t as usize].seq;
        for &u in &run.lock_threads[lock as usize] {
            if u == t {
                continue;
            }
            let list = &run.by_thread_lock[&(u, lock)];
            let before = list.partition_point(|&a| run.acquisitions[a as usize].seq < seq_t);
            let Some(&a_u) = before.checked_sub(1).and_then(|i| list.get(i)) else {
                continue;
            };
            raised |= include_release(&run.acquisitions[a_u as usize], u, lock, frontier, limit)?;
        }
    }
    Ok(raised)
}

/// Raises the frontier of `u` to `to`; fails when that swallows a pattern event (the frontier
/// is still raised: it says how far the closure goes). Returns whether the frontier moved.
fn raise(
    frontier: &mut [u32],
    limit: &[u32],
    u: usize,
    to: u32,
    why: Reach,
) -> Result<bool, NotPredicted> {
    if to <= frontier[u] {
        return Ok(false);
    }
    frontier[u] = to;
    if to > limit[u] {
        return Err(NotPredicted::Reached {
            thread: u as u32,
            by: why,
        });
    }
    Ok(true)
}

/// A candidate lock cycle of one trace: acquisition `requests[i]` of lock x_{i+1}, requested
/// while `holds[i]` (of lock x_i) was held, one per thread.
#[derive(Clone, Debug)]
pub struct LockCycleCandidate {
    pub holds: Vec<u32>,
    pub requests: Vec<u32>,
}

/// Why a candidate is not a predicted deadlock, in the words of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    SameThread,
    /// Every thread of the cycle holds this lock: it serialises them.
    GateLock {
        lock: u32,
    },
    /// A request and the holding it meets are both reads.
    ReadRead {
        lock: u32,
    },
    Closure(NotPredicted),
    /// After the closure, something else can still end the wait: another thread's signal or
    /// post, or a semaphore token.
    StillWakeable,
    /// The wait timed out in the trace: it is a timed wait, which ends by itself.
    TimedWait,
}

/// Checks one candidate: distinct threads, no gate lock, modes that block, then the closure.
pub fn check_lock_cycle(run: &Run, c: &LockCycleCandidate) -> Result<Closure, Rejection> {
    let k = c.requests.len();
    let acq = |i: u32| &run.acquisitions[i as usize];
    for i in 0..k {
        for j in i + 1..k {
            if acq(c.requests[i]).thread == acq(c.requests[j]).thread {
                return Err(Rejection::SameThread);
            }
        }
    }
    for i in 0..k {
        for j in i + 1..k {
            for &hi in run.held(acq(c.requests[i])) {
                let li = acq(hi).lock;
                if run
                    .held(acq(c.requests[j]))
                    .iter()
                    .any(|&hj| acq(hj).lock == li)
                {
                    return Err(Rejection::GateLock { lock: li });
                }
            }
        }
    }
    for i in 0..k {
        let request = acq(c.requests[i]);
        let holder = acq(c.holds[(i + 1) % k]);
        if !request.mode.conflicts(holder.mode) {
            return Err(Rejection::ReadRead { lock: request.lock });
        }
    }
    // Cheap first: a request that happens before another (create/join, barrier, …) puts it in
    // the closure of the other. The closure would find it too, at the cost of a walk.
    for i in 0..k {
        for j in 0..k {
            let (a, b) = (acq(c.requests[i]), acq(c.requests[j]));
            if i != j
                && run
                    .hb
                    .happens_before(a.thread as usize, a.request, b.thread as usize, b.request)
            {
                return Err(Rejection::Closure(NotPredicted::Reached {
                    thread: a.thread,
                    by: Reach::HappensBefore,
                }));
            }
        }
    }
    let pattern: Vec<Blocked> = c
        .requests
        .iter()
        .map(|&r| Blocked {
            thread: acq(r).thread,
            pos: acq(r).request,
        })
        .collect();
    sync_preserving_closure(run, &pattern).map_err(Rejection::Closure)
}

/// The locks each thread holds at the closure's frontier, with the acquisitions.
pub fn open_at_frontier(run: &Run, closure: &Closure, thread: u32) -> Vec<u32> {
    let f = closure.frontier[thread as usize];
    run.thread_acquisitions[thread as usize]
        .iter()
        .copied()
        .filter(|&a| {
            let acq = &run.acquisitions[a as usize];
            acq.acquired < f && acq.release.is_none_or(|r| r >= f)
        })
        .collect()
}
