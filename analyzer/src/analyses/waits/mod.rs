//! Deadlocks beyond lock cycles (seed 001, "beyond plain mutexes"): a thread that holds a lock
//! while it waits for another thread — joins it, waits at a barrier for it, waits on a
//! condition or a semaphore it would signal — while that thread needs the lock first. And the
//! read-recursive rwlock acquisition against a queued writer.
//!
//! A blocking read of a pipe, socketpair or eventfd made in the process is a semaphore wait
//! whose posts are the channel's writes and whose count is bytes (an eventfd's units): the
//! writer that must take the held lock before it writes holds the reader hostage.
//!
//! Each wait is checked like a lock cycle of two threads: the pattern is the wait of the holder
//! and the other thread's request of the held lock, and it is predicted when the sync-preserving
//! closure (`closure.rs`) contains neither. For condition variables and semaphores the closure
//! is not enough on its own: the wait must still block after the closure, so
//! - every signal (post) of the object outside the closure must come from the blocked other
//!   thread, after its blocked request (else a third thread may still wake the holder), and
//! - for a semaphore, the count after the closure (initial value + posts − successful waits in
//!   it) must be zero; for a hand-off channel, the bytes left in it (what it held at the start
//!   + writes − reads in the closure) must be zero.
//!
//! Candidates that fail are reported as potential, with the reason.
//!
//! Read recursion (`rwlock-deadlock`, always potential): a thread read-locks an rwlock it
//! already holds for read while another thread write-locks it. With a writer-preferring rwlock
//! a writer queued between the two reads blocks the second read, and waits for the first:
//! deadlock. glibc's default rwlocks prefer readers (the second read succeeds), and the trace
//! does not say which kind the program uses, so this is never reported as predicted.

use foldhash::{HashSet, HashSetExt};

use foresight_trace::SiteId;

use crate::closure::{sync_preserving_closure, Budget, Closure, PatternEvent};
use crate::deadlock::{rejection_text, Rejection};
use crate::describe::{held_lock, location, lock as describe_lock, site, thread, witness};
use crate::model::{AcquireHow, Run, SyncPoint, Wait, WaitKind};
use crate::report::{
    Detail, Finding, Kind, Message, Role, Rule, Verdict, WaitCall, WaitFor, WaitReport,
};
use crate::stream::Mode;

/// Requests of the held lock tried per (wait, other thread).
const TRIES_PER_THREAD: usize = 4;

/// One way a wait can hold a lock hostage: `other` thread's request `request` of the lock of
/// held acquisition `held`, before the other thread's `then` (its exit, arrival, signal, post).
struct WaitCandidate {
    held: u32,
    request: u32,
    then: Option<SyncPoint>,
}

pub(crate) fn wait_findings(run: &Run, ri: usize, budget: &mut Budget) -> Vec<Finding> {
    let _ = ri;
    let mut out = Vec::new();
    let mut seen: HashSet<(SiteId, SiteId, SiteId)> = HashSet::new();
    for wait in &run.waits {
        let candidates = candidates(run, wait);
        if candidates.is_empty() {
            continue;
        }
        let mut best: Option<(&WaitCandidate, Rejection)> = None;
        let mut found: Option<(&WaitCandidate, Closure)> = None;
        for c in &candidates {
            if !budget.take() {
                break;
            }
            match check(run, wait, c) {
                Ok(closure) => {
                    found = Some((c, closure));
                    break;
                }
                Err(r) => {
                    if best.is_none() {
                        best = Some((c, r));
                    }
                }
            }
        }
        let (c, verdict, closure, why) = match (found, best) {
            (Some((c, _)), _) if wait.timed_out => {
                (c, Verdict::Potential, None, Some(Rejection::TimedWait))
            }
            (Some((c, closure)), _) => (c, Verdict::Predicted, Some(closure), None),
            (None, Some((c, r))) => (c, Verdict::Potential, None, Some(r)),
            (None, None) => continue,
        };
        let key = (
            wait.site,
            run.acquisitions[c.held as usize].site,
            run.acquisitions[c.request as usize].site,
        );
        if !seen.insert(key) {
            continue;
        }
        out.push(finding(
            run,
            wait,
            c,
            verdict,
            closure.as_ref(),
            why.as_ref(),
        ));
    }
    out
}

/// The other threads' requests of each held lock that could keep the wait from ending.
fn candidates(run: &Run, wait: &Wait) -> Vec<WaitCandidate> {
    let mut out = Vec::new();
    let held = run.held_range(&wait.held);
    // (other thread, position before which its request must be, what it does then).
    let mut others: Vec<(u32, u32, Option<SyncPoint>)> = Vec::new();
    match &wait.kind {
        WaitKind::Join { child } => {
            others.push((*child, u32::MAX, None));
        }
        WaitKind::Barrier {
            barrier,
            generation: Some(g),
        } => {
            for a in run.arrivals.get(&(*barrier, *g)).into_iter().flatten() {
                if a.thread != wait.thread {
                    others.push((a.thread, a.pos, Some(*a)));
                }
            }
        }
        WaitKind::Barrier {
            generation: None, ..
        } => {}
        WaitKind::Condition { cond: obj, .. } | WaitKind::Semaphore { sem: obj } => {
            let senders = match &wait.kind {
                WaitKind::Condition { .. } => run.signals.get(obj),
                _ => run.posts.get(obj),
            };
            // Every other thread that signals (posts) may be the one this wait needs; its
            // last signal bounds the requests that come before it. The closure and the
            // wake-up checks decide.
            let mut last_of: Vec<(u32, SyncPoint)> = Vec::new();
            for p in senders.into_iter().flatten() {
                if p.thread == wait.thread {
                    continue;
                }
                match last_of.iter_mut().find(|(t, _)| *t == p.thread) {
                    Some(slot) => slot.1 = *p,
                    None => last_of.push((p.thread, *p)),
                }
            }
            others.extend(last_of.into_iter().map(|(t, p)| (t, p.pos, Some(p))));
        }
        WaitKind::Handoff { channel, .. } => {
            // As for posts: every other thread that writes the channel, bounded by its last
            // write.
            let mut last_of: Vec<(u32, SyncPoint)> = Vec::new();
            for (p, _) in run.handoffs.writes.get(channel).into_iter().flatten() {
                if p.thread == wait.thread {
                    continue;
                }
                match last_of.iter_mut().find(|(t, _)| *t == p.thread) {
                    Some(slot) => slot.1 = *p,
                    None => last_of.push((p.thread, *p)),
                }
            }
            others.extend(last_of.into_iter().map(|(t, p)| (t, p.pos, Some(p))));
        }
    }
    for &h in held {
        let ha = &run.acquisitions[h as usize];
        for &(other, before, then) in &others {
            let Some(list) = run.pair_acquisitions(other, ha.lock) else {
                continue;
            };
            let eligible: Vec<u32> = list
                .iter()
                .copied()
                .filter(|&a| {
                    let a = &run.acquisitions[a as usize];
                    a.how != AcquireHow::Try && a.request < before && a.mode.conflicts(ha.mode)
                })
                .collect();
            // The last requests before the other thread's step are the likeliest to be
            // concurrent with the wait.
            for &a in eligible.iter().rev().take(TRIES_PER_THREAD) {
                out.push(WaitCandidate {
                    held: h,
                    request: a,
                    then,
                });
            }
        }
    }
    out
}

fn check(run: &Run, wait: &Wait, c: &WaitCandidate) -> Result<Closure, Rejection> {
    let r = &run.acquisitions[c.request as usize];
    let pattern = [
        PatternEvent {
            thread: wait.thread,
            pos: wait.pos,
        },
        PatternEvent {
            thread: r.thread,
            pos: r.request,
        },
    ];
    let closure = sync_preserving_closure(run, &pattern).map_err(Rejection::Closure)?;
    let outside = |p: &SyncPoint| p.pos >= closure.frontier[p.thread as usize];
    let third_party = |points: Option<&Vec<SyncPoint>>| {
        points
            .into_iter()
            .flatten()
            .any(|p| outside(p) && p.thread != wait.thread && p.thread != r.thread)
    };
    let still_wakeable = match &wait.kind {
        // A segment with more after it does not know the signals and posts to come: a third
        // thread may still end the wait there.
        WaitKind::Condition { .. } | WaitKind::Semaphore { .. } | WaitKind::Handoff { .. }
            if run.segments_follow =>
        {
            true
        }
        WaitKind::Handoff { channel, .. } => {
            let inside = |v: Option<&Vec<(SyncPoint, u64)>>| {
                v.into_iter()
                    .flatten()
                    .filter(|(p, _)| !outside(p))
                    .map(|&(_, amount)| i128::from(amount))
                    .sum::<i128>()
            };
            let h = &run.handoffs;
            let left = i128::from(*h.initial.get(channel).unwrap_or(&0))
                + inside(h.writes.get(channel))
                - inside(h.reads.get(channel));
            let writers = h.writes.get(channel).into_iter().flatten();
            left > 0
                || writers
                    .map(|(p, _)| p)
                    .any(|p| outside(p) && p.thread != wait.thread && p.thread != r.thread)
        }
        WaitKind::Condition { cond, .. } => third_party(run.signals.get(cond)),
        WaitKind::Semaphore { sem } => {
            let inside = |v: Option<&Vec<SyncPoint>>| {
                v.into_iter().flatten().filter(|p| !outside(p)).count() as i64
            };
            let count = *run.sem_initial.get(sem).unwrap_or(&0) as i64 + inside(run.posts.get(sem))
                - inside(run.sem_takes.get(sem));
            count > 0 || third_party(run.posts.get(sem))
        }
        _ => false,
    };
    if still_wakeable {
        return Err(Rejection::StillWakeable);
    }
    Ok(closure)
}

fn finding(
    run: &Run,
    wait: &Wait,
    c: &WaitCandidate,
    verdict: Verdict,
    closure: Option<&Closure>,
    why: Option<&Rejection>,
) -> Finding {
    let h = &run.acquisitions[c.held as usize];
    let r = &run.acquisitions[c.request as usize];
    let lock = describe_lock(run, h.lock);
    let holder = thread(run, wait.thread);
    let other = thread(run, r.thread);
    let (kind, rule, wait_name, object, waits_role, then_role, waits_for) = match &wait.kind {
        WaitKind::Join { .. } => (
            Kind::JoinDeadlock,
            Rule::JoinWhileHolding,
            WaitCall::Join,
            other.to_string(),
            Role::Joins,
            Role::Exits,
            WaitFor::Join,
        ),
        WaitKind::Barrier { barrier, .. } => {
            let name = object_name(run, *barrier);
            (
                Kind::BarrierDeadlock,
                Rule::BarrierWhileHolding,
                WaitCall::Barrier,
                name.clone(),
                Role::Waits,
                Role::Arrives,
                WaitFor::Barrier(name),
            )
        }
        WaitKind::Condition { cond, .. } => {
            let name = object_name(run, *cond);
            (
                Kind::WaitDeadlock,
                Rule::CondWaitWhileHolding,
                WaitCall::Condition,
                name.clone(),
                Role::Waits,
                Role::Signals,
                WaitFor::Condition(name),
            )
        }
        WaitKind::Semaphore { sem } => {
            let name = object_name(run, *sem);
            (
                Kind::WaitDeadlock,
                Rule::SemWaitWhileHolding,
                WaitCall::Semaphore,
                name.clone(),
                Role::Waits,
                Role::Posts,
                WaitFor::Semaphore(name),
            )
        }
        WaitKind::Handoff { channel, kind, fd } => {
            let name = format!("{} #{channel} (fd {fd})", kind.name());
            (
                Kind::WaitDeadlock,
                Rule::HandoffReadWhileHolding,
                WaitCall::Handoff,
                name.clone(),
                Role::Waits,
                Role::Writes,
                WaitFor::Handoff(name),
            )
        }
    };
    let message = Message::WaitWhileHolding {
        kind,
        predicted: verdict == Verdict::Predicted,
        holder: holder.clone(),
        lock: lock.clone(),
        wait: waits_for.clone(),
        other: other.clone(),
    };
    let reason = match why {
        None => format!(
            "the wait and {other}'s request of {lock} are outside the sync-preserving closure \
             of the events before them, and nothing else can end the wait: in that reordering \
             {holder} holds {lock} and waits for {other}, which blocks on {lock}"
        ),
        Some(r) => format!("not predicted: {}", rejection_text(Some(run), r)),
    };
    let mut locations = vec![
        location(run, h.site, wait.thread, Role::Holds),
        location(run, wait.site, wait.thread, waits_role),
        location(run, r.site, r.thread, Role::Requests),
    ];
    if let Some(t) = &c.then {
        locations.push(location(run, t.site, t.thread, then_role));
    }
    let witness = closure.map(|cl| {
        witness(
            run,
            cl,
            &[
                (
                    PatternEvent {
                        thread: wait.thread,
                        pos: wait.pos,
                    },
                    format!(
                        "{} at {} while holding {lock} — blocks",
                        waits_for.text(&other),
                        run.location(wait.site).text
                    ),
                ),
                (
                    PatternEvent {
                        thread: r.thread,
                        pos: r.request,
                    },
                    format!("requests {lock} at {} — blocks", run.location(r.site).text),
                ),
            ],
        )
    });
    Finding {
        id: 0,
        kind,
        verdict,
        rule,
        message,
        reason,
        traces: vec![run.source.clone()],
        witness,
        occurrences: 1,
        locations,
        detail: Detail::WaitDeadlock {
            lock_class: run.locks[h.lock as usize].class.clone(),
            wait: WaitReport {
                wait: wait_name,
                trace: run.source.clone(),
                thread: holder,
                object,
                site: site(run, wait.site),
                position: wait.pos,
                held: run
                    .held_range(&wait.held)
                    .iter()
                    .map(|&a| held_lock(run, &run.acquisitions[a as usize]))
                    .collect(),
                other_thread: other,
                other_lock: lock,
                other_site: site(run, r.site),
                other_position: r.request,
                other_then: c.then.map(|t| site(run, t.site)),
            },
        },
    }
}

fn object_name(run: &Run, object: foresight_trace::ObjectId) -> String {
    run.object_names
        .get(&object)
        .cloned()
        .unwrap_or_else(|| format!("object#{object}"))
}

/// Read-recursive rwlock acquisitions that a queued writer could block (always potential).
/// Write requests tried per read recursion.
const WRITERS_PER_RECURSION: usize = 8;

pub(crate) fn rwlock_findings(run: &Run, budget: &mut Budget) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut seen: HashSet<(u32, SiteId, SiteId)> = HashSet::new();
    for rr in &run.read_recursions {
        let outer_seq = run.acquisitions[rr.outer as usize].seq;
        // Writers of other threads, nearest to the outer read first: the writer must be able
        // to request between the two reads, i.e. both requests outside one closure.
        let mut writers: Vec<u32> = run.lock_threads[rr.lock as usize]
            .iter()
            .filter(|&&t| t != rr.thread)
            .flat_map(|&t| run.pair_acquisitions_of(t, rr.lock).iter().copied())
            .filter(|&a| {
                let a = &run.acquisitions[a as usize];
                a.mode == Mode::Write && a.how != AcquireHow::Try
            })
            .collect();
        writers.sort_by_key(|&a| run.acquisitions[a as usize].seq.abs_diff(outer_seq));
        let mut found = None;
        for &w in writers.iter().take(WRITERS_PER_RECURSION) {
            if !budget.take() {
                break;
            }
            let wa = &run.acquisitions[w as usize];
            let pattern = [
                PatternEvent {
                    thread: rr.thread,
                    pos: rr.pos,
                },
                PatternEvent {
                    thread: wa.thread,
                    pos: wa.request,
                },
            ];
            if let Ok(closure) = sync_preserving_closure(run, &pattern) {
                found = Some((w, closure));
                break;
            }
        }
        let Some((w, closure)) = found else { continue };
        let outer = &run.acquisitions[rr.outer as usize];
        if !seen.insert((rr.lock, outer.site, rr.site)) {
            continue;
        }
        let w = &run.acquisitions[w as usize];
        let lock = describe_lock(run, rr.lock);
        let holder = thread(run, rr.thread);
        let other = thread(run, w.thread);
        out.push(Finding {
            id: 0,
            kind: Kind::RwlockDeadlock,
            verdict: Verdict::Potential,
            rule: Rule::RwlockReadRecursion,
            message: Message::ReadRecursion {
                holder: holder.clone(),
                lock: lock.clone(),
                other: other.clone(),
            },
            reason: format!(
                "{other}'s write request can come between the two reads (both are outside one \
                 sync-preserving closure, see the witness); a writer-preferring rwlock then \
                 blocks the second read behind the writer, which waits for the first read: \
                 deadlock. glibc's default rwlock prefers readers (the second read succeeds), \
                 so this is reported as potential"
            ),
            traces: vec![run.source.clone()],
            witness: Some(witness(
                run,
                &closure,
                &[
                    (
                        PatternEvent {
                            thread: rr.thread,
                            pos: rr.pos,
                        },
                        format!(
                            "read-locks {lock} again at {} — blocks behind the queued writer \
                             (writer-preferring rwlocks only)",
                            run.location(rr.site).text
                        ),
                    ),
                    (
                        PatternEvent {
                            thread: w.thread,
                            pos: w.request,
                        },
                        format!(
                            "write-locks {lock} at {} — queues behind the first read",
                            run.location(w.site).text
                        ),
                    ),
                ],
            )),
            occurrences: 1,
            locations: vec![
                location(run, outer.site, rr.thread, Role::ReadLocks),
                location(run, rr.site, rr.thread, Role::ReadLocksAgain),
                location(run, w.site, w.thread, Role::WriteLocks),
            ],
            detail: Detail::ReadRecursion {
                lock_class: run.locks[rr.lock as usize].class.clone(),
                wait: WaitReport {
                    wait: WaitCall::RwlockRead,
                    trace: run.source.clone(),
                    thread: holder,
                    object: lock.to_string(),
                    site: site(run, rr.site),
                    position: rr.pos,
                    held: vec![held_lock(run, outer)],
                    other_thread: other,
                    other_lock: lock.clone(),
                    other_site: site(run, w.site),
                    other_position: w.request,
                    other_then: None,
                },
            },
        });
    }
    out
}

/// Waits and rwlocks as an analysis of the registry (`analyses/mod.rs`): only from runs with
/// every happens-before edge, as a prediction needs.
pub struct Waits;

impl super::Analysis for Waits {
    fn name(&self) -> &'static str {
        "waits"
    }

    fn analyze(
        &self,
        part: &super::Part,
        budgets: &mut super::Budgets,
        _summary: &mut crate::report::Summary,
        out: &mut super::Output,
    ) {
        for (ri, run) in part.runs.iter().enumerate() {
            if !run.hb.complete {
                continue;
            }
            out.findings
                .extend(wait_findings(run, ri, &mut budgets.deadlock));
            out.findings
                .extend(rwlock_findings(run, &mut budgets.deadlock));
        }
    }
}
