//! Instance-level deadlock prediction with the sync-preserving closure (`closure.rs`; Tunç,
//! Mathur, Pavlogiannis and Viswanathan, "Sound Dynamic Deadlock Prediction in Linear Time",
//! PLDI 2023).
//!
//! A *pattern* is a set of events of distinct threads where each thread would block (a lock
//! request, or a join/barrier/condition/semaphore wait). It is a predicted deadlock when the
//! closure of the events before it contains none of its events: the closure, in trace order, is
//! a feasible reordering after which every pattern thread is at its blocking event while its
//! locks are held.
//!
//! Two ways to use it:
//! - [`check_lock_cycle`] (and `closure::sync_preserving_closure`): one concrete pattern, one
//!   closure (waits, and the sampled candidates of `lock_cycles.rs`);
//! - [`search_abstract_pattern`]: the paper's search over all concrete patterns of one abstract
//!   pattern (a thread per edge of a lock cycle). Closures grow with later pattern events, so
//!   when the closure reaches a component's event, every choice with that event or an earlier
//!   one is refuted: the component moves to its next occurrence after the closure and the same
//!   closure is resumed. Linear in the trace per abstract pattern, and complete for
//!   sync-preserving deadlocks of that pattern. The number of abstract patterns is bounded by
//!   budgets (`lock_cycles.rs`), and the report says when they ran out.

use crate::closure::{
    sync_preserving_closure, Closure, ClosureState, NotPredicted, PatternEvent, Reach,
};
use crate::model::Run;

/// Searches one *abstract pattern* for a sync-preserving deadlock, as the PLDI 2023 algorithm
/// does: component i lists the occurrences, in program order of one thread, of "hold x_i,
/// request x_{i+1}" as (hold, request) acquisition pairs. Start with the first occurrence of
/// each; whenever the closure reaches the pattern event of a component, no later choice of the
/// other components can avoid it (closures only grow with later events), so that component
/// moves to its first occurrence after the closure, and the same closure is resumed. Each
/// occurrence is passed once and each event enters the closure once: linear in the trace for
/// one abstract pattern. Returns the first deadlocking choice.
pub(crate) fn search_abstract_pattern(
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
            let f = state.frontier_of(threads[i]);
            index[i] += components[i][index[i]..].partition_point(|o| request(o) < f);
            let Some(occurrence) = components[i].get(index[i]) else {
                return Err(NotPredicted::Reached {
                    thread: threads[i],
                    by: last_reason,
                });
            };
            let b = PatternEvent {
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
                return Ok((candidate, state.into_closure(), steps));
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

/// A candidate lock cycle of one trace: acquisition `requests[i]` of lock x_{i+1}, requested
/// while `holds[i]` (of lock x_i) was held, one per thread.
#[derive(Clone, Debug)]
pub(crate) struct LockCycleCandidate {
    pub(crate) holds: Vec<u32>,
    pub(crate) requests: Vec<u32>,
}

/// Why a candidate is not a predicted deadlock, in the words of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rejection {
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
pub(crate) fn check_lock_cycle(run: &Run, c: &LockCycleCandidate) -> Result<Closure, Rejection> {
    let k = c.requests.len();
    let acq = |i: u32| &run.acquisitions[i as usize];
    for i in 0..k {
        for j in i + 1..k {
            if acq(c.requests[i]).thread == acq(c.requests[j]).thread {
                return Err(Rejection::SameThread);
            }
        }
    }
    for &r in &c.requests {
        let a = acq(r);
        if a.request < run.start_of(a.thread) {
            return Err(Rejection::Closure(NotPredicted::Reached {
                thread: a.thread,
                by: Reach::BeforeSegment,
            }));
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
    let pattern: Vec<PatternEvent> = c
        .requests
        .iter()
        .map(|&r| PatternEvent {
            thread: acq(r).thread,
            pos: acq(r).request,
        })
        .collect();
    sync_preserving_closure(run, &pattern).map_err(Rejection::Closure)
}

/// Why a candidate was not predicted, in the words of the report (`run` names its locks and
/// threads).
pub(crate) fn rejection_text(run: Option<&Run>, r: &Rejection) -> String {
    let lock = |l: u32| run.map_or(format!("lock #{l}"), |r| r.locks[l as usize].name.clone());
    let thread = |t: u32| run.map_or(format!("thread #{t}"), |r| r.thread_label(t));
    match r {
        Rejection::Closure(NotPredicted::OutOfBudget) => {
            "the search budget ran out before the cycle was decided".to_string()
        }
        Rejection::SameThread | Rejection::Closure(NotPredicted::SameThread) => {
            "every instance of the cycle is in one thread: a thread cannot deadlock with itself \
             this way"
                .to_string()
        }
        Rejection::GateLock { lock: l } => format!(
            "every instance is serialised by a common gate lock, {}, held by all the threads of \
             the cycle",
            lock(*l)
        ),
        Rejection::ReadRead { lock: l } => format!(
            "{} is requested for read against a read holder: read-read never blocks",
            lock(*l)
        ),
        Rejection::TimedWait => "the wait timed out in the trace: a timed wait ends by itself \
             (the threads stall until the timeout, which may still be a bug)"
            .to_string(),
        Rejection::StillWakeable => "another thread can still signal or post it, or the \
             semaphore still has a token, so the wait may end"
            .to_string(),
        Rejection::Closure(NotPredicted::Reached { thread: t, by }) => match by {
            Reach::HappensBefore => format!(
                "the acquisitions cannot be concurrent: {}'s request is ordered before the \
                 others by happens-before (create/join, barrier, once, semaphore, condition or \
                 an annotation)",
                thread(*t)
            ),
            Reach::LockOrder { lock: l } => format!(
                "no sync-preserving reordering reaches it: the critical sections on {} force \
                 {}'s request to happen first",
                lock(*l),
                thread(*t)
            ),
            Reach::NeverReleased { lock: l } => format!(
                "{} is never released in the trace{}, so the reordering cannot pass it",
                lock(*l),
                if run.is_some_and(|r| r.segmented()) {
                    " segment analysed"
                } else {
                    ""
                }
            ),
            Reach::BeforeSegment => format!(
                "{}'s request is in an earlier segment of the trace than the others \
                 (--segment-events): a prediction reorders events within one segment only",
                thread(*t)
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::build_run;
    use foresight_trace::builder::TraceBuilder;
    use foresight_trace::event::{ObjectId, ThreadId};
    use foresight_trace::Trace;

    /// `t` takes `first` then `second` and releases both.
    fn nest(b: &mut TraceBuilder, t: ThreadId, first: ObjectId, second: ObjectId, line: u32) {
        let (s1, s2, s3) = (
            b.site("f", "t.c", line),
            b.site("f", "t.c", line + 1),
            b.site("f", "t.c", 99),
        );
        b.lock(t, first, s1);
        b.lock(t, second, s2);
        b.unlock(t, second, s3);
        b.unlock(t, first, s3);
    }

    #[test]
    fn the_complete_search_moves_past_occurrences_the_closure_reaches() {
        // t1 nests A → B twice, creating t2 in between; t2 nests B → A. The first occurrence
        // happens before t2 exists, the second can meet t2's.
        let mut b = TraceBuilder::new("test");
        let main = b.main_thread();
        let a = b.mutex("A");
        let l = b.mutex("B");
        let s1 = b.site("f", "t.c", 1);
        let t1 = b.spawn(main, s1, "one");
        nest(&mut b, t1, a, l, 10);
        let s15 = b.site("f", "t.c", 15);
        let t2 = b.spawn(t1, s15, "two");
        nest(&mut b, t1, a, l, 10);
        nest(&mut b, t2, l, a, 20);
        let trace = Trace::from_bytes("t.trace", b.finish()).unwrap();
        let run = build_run(&trace, &mut |_| {});
        let pairs = |thread: ThreadId, held: ObjectId| -> Vec<(u32, u32)> {
            let dense = run.threads.position(thread).unwrap() as u32;
            run.acquisitions
                .iter()
                .enumerate()
                .filter(|(_, q)| q.thread == dense && !run.held(q).is_empty())
                .filter(|(_, q)| {
                    let h = &run.acquisitions[run.held(q)[0] as usize];
                    run.locks[h.lock as usize].object == held
                })
                .map(|(i, q)| (run.held(q)[0], i as u32))
                .collect()
        };
        let one = pairs(t1, a);
        let two = pairs(t2, l);
        assert_eq!((one.len(), two.len()), (2, 1));
        let (c, _closure, _) = search_abstract_pattern(&run, &[&one, &two], u64::MAX)
            .expect("the second occurrence deadlocks");
        assert_eq!(c.requests[0], one[1].1);
        // Only the first occurrence: the search fails.
        assert!(search_abstract_pattern(&run, &[&one[..1], &two], u64::MAX).is_err());
    }
}
