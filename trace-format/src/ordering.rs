//! Checks the ordering invariant (`FORMAT.md`): the merged order of a trace must be one that
//! could have happened. A recorder bug, a clock that is not shared by all cores, or a forged file
//! shows up here as a lock acquired while another thread holds it, a thread that runs before it
//! was created, and so on.

use std::collections::{HashMap, HashSet};

use crate::error::{Problem, ProblemKind};
use crate::event::{EventKind, LockMode, ObjectId, ThreadId};
use crate::reader::Trace;
use crate::tables::ObjectKind;

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

/// Returns one problem per break of the invariant (at most `MAX_LISTED`, then a summary).
pub fn check(trace: &Trace) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut total = 0usize;
    let mut report = |offset: u64, msg: String, out: &mut Vec<Problem>| {
        total += 1;
        if out.len() < MAX_LISTED {
            out.push(Problem {
                offset,
                kind: ProblemKind::Ordering(msg),
            });
        }
    };

    let created: HashSet<ThreadId> = trace
        .threads
        .iter()
        .flat_map(|t| t.events.iter())
        .filter_map(|e| match e.kind {
            EventKind::ThreadCreate { child, .. } => Some(child),
            _ => None,
        })
        .collect();
    let mut remaining: HashMap<ThreadId, usize> = trace
        .threads
        .iter()
        .map(|t| (t.thread, t.events.len()))
        .collect();
    let mut seen_create: HashSet<ThreadId> = HashSet::new();
    let mut started: HashSet<ThreadId> = HashSet::new();
    let mut locks: HashMap<ObjectId, LockState> = HashMap::new();
    let mut barriers: HashMap<ObjectId, BarrierState> = HashMap::new();
    let mut once_ran: HashSet<ObjectId> = HashSet::new();
    let mut once_done: HashSet<ObjectId> = HashSet::new();
    let mut sems: HashMap<ObjectId, i64> = HashMap::new();
    let recursive = |lock: ObjectId| {
        trace
            .tables
            .objects
            .get(&lock)
            .is_some_and(|o| matches!(o.kind, ObjectKind::RecursiveMutex))
    };

    for m in trace.merged() {
        let t = m.thread;
        let at = trace.thread(t).map_or(0, |te| te.offset_of(m.index));
        let name = |o: ObjectId| trace.tables.describe_object(o);
        if started.insert(t) && created.contains(&t) && !seen_create.contains(&t) {
            report(
                at,
                format!("thread {t} runs before the event that creates it"),
                &mut out,
            );
        }
        if let Some(r) = remaining.get_mut(&t) {
            *r = r.saturating_sub(1);
        }
        let mut acquire = |lock: ObjectId, mode: LockMode, out: &mut Vec<Problem>| {
            let st = locks.entry(lock).or_default();
            match mode {
                LockMode::Exclusive => {
                    if let Some((holder, depth)) = st.exclusive.as_mut() {
                        if *holder == t && recursive(lock) {
                            *depth += 1;
                            return;
                        }
                        let msg = format!(
                            "thread {t} acquires {} while thread {holder} holds it",
                            name(lock)
                        );
                        report(at, msg, out);
                        return;
                    }
                    if let Some(other) = st.shared.keys().find(|&&h| h != t) {
                        let msg = format!(
                            "thread {t} acquires {} for writing while thread {other} reads it",
                            name(lock)
                        );
                        report(at, msg, out);
                        return;
                    }
                    st.exclusive = Some((t, 1));
                }
                LockMode::Shared => {
                    if let Some((holder, _)) = st.exclusive {
                        if holder != t {
                            let msg = format!(
                                "thread {t} acquires {} for reading while thread {holder} writes it",
                                name(lock)
                            );
                            report(at, msg, out);
                            return;
                        }
                    }
                    *st.shared.entry(t).or_default() += 1;
                }
            }
        };
        let release_all = |lock: ObjectId, locks: &mut HashMap<ObjectId, LockState>| {
            if let Some(st) = locks.get_mut(&lock) {
                if st.exclusive.is_some_and(|(h, _)| h == t) {
                    st.exclusive = None;
                }
                st.shared.remove(&t);
            }
        };
        match m.event.kind {
            EventKind::ThreadCreate { child, .. } => {
                seen_create.insert(child);
            }
            EventKind::JoinEnd {
                child,
                joined: true,
            } if remaining.get(&child).is_some_and(|&r| r > 0) => {
                report(
                    at,
                    format!("thread {t} joins thread {child} before it finished"),
                    &mut out,
                );
            }
            EventKind::LockAcquired { lock, mode } => acquire(lock, mode, &mut out),
            EventKind::LockTry {
                lock,
                mode,
                acquired: true,
                ..
            } => acquire(lock, mode, &mut out),
            EventKind::LockRelease { lock, .. } => {
                if let Some(st) = locks.get_mut(&lock) {
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
            EventKind::CondWaitBegin { mutex, .. } => release_all(mutex, &mut locks),
            EventKind::CondWaitEnd { mutex, .. } => acquire(mutex, LockMode::Exclusive, &mut out),
            EventKind::ObjectDestroy { object, .. } => {
                locks.remove(&object);
            }
            EventKind::BarrierInit { barrier, count, .. } => {
                barriers.insert(
                    barrier,
                    BarrierState {
                        count: Some(count),
                        ..Default::default()
                    },
                );
            }
            EventKind::BarrierWaitBegin { barrier, .. } => {
                barriers.entry(barrier).or_default().waiting += 1;
            }
            EventKind::BarrierWaitEnd {
                barrier,
                generation,
                ..
            } => {
                let st = barriers.entry(barrier).or_default();
                if st.departing != Some(generation) {
                    if let Some(count) = st.count {
                        if st.waiting < count as u64 {
                            report(
                                at,
                                format!(
                                    "thread {t} leaves {} (generation {generation}) after only {} of {count} arrivals",
                                    name(barrier),
                                    st.waiting
                                ),
                                &mut out,
                            );
                        }
                        st.waiting = st.waiting.saturating_sub(count as u64);
                    }
                    st.departing = Some(generation);
                }
            }
            EventKind::OnceRun { once } => {
                once_ran.insert(once);
            }
            EventKind::OnceEnd { once } => {
                once_done.insert(once);
            }
            EventKind::OnceSkip { once }
                if once_ran.contains(&once) && !once_done.contains(&once) =>
            {
                report(
                    at,
                    format!(
                        "thread {t} skips {} before its initialiser ended",
                        name(once)
                    ),
                    &mut out,
                );
            }
            EventKind::SemInit { sem, value, .. } => {
                sems.insert(sem, value as i64);
            }
            EventKind::SemPost { sem, .. } => {
                if let Some(v) = sems.get_mut(&sem) {
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
                if let Some(v) = sems.get_mut(&sem) {
                    *v -= 1;
                    if *v < 0 {
                        report(
                            at,
                            format!(
                                "thread {t} takes {} before a post made it available",
                                name(sem)
                            ),
                            &mut out,
                        );
                        *v = 0;
                    }
                }
            }
            _ => {}
        }
    }
    if total > out.len() {
        out.push(Problem {
            offset: trace.file_len,
            kind: ProblemKind::Ordering(format!("{} more breaks not listed", total - out.len())),
        });
    }
    out
}
