//! What really hung: the threads a trace says were blocked when it ended (their end states,
//! FORMAT.md §7.12, and the blocking call each was inside, `model/pending.rs`), as findings of
//! verdict `observed` — not a prediction, what the run did.
//!
//! A wait-for graph over threads: a thread blocked in a lock request waits for each thread
//! holding that lock in a conflicting mode (itself, for a non-recursive lock it holds: a
//! self-deadlock), or, for a read request that no holder blocks, for the threads queued to
//! write-lock it; a thread blocked in a join waits for the joined thread; one blocked in a
//! `pthread_once` waits for the thread running the routine. Condition, barrier and semaphore
//! waits wait for no thread the trace can name. Each weakly connected part of the graph that
//! holds a blocked thread is one finding:
//! - `observed-deadlock` when blocked threads wait for each other in a cycle (rules
//!   `blocked-self-lock`, `blocked-lock-cycle`, `blocked-wait-cycle` when a join or once is
//!   in it): none of them could ever have returned;
//! - `observed-stall` otherwise: threads blocked in joins, barriers, conditions or semaphores,
//!   and those waiting for them or for a thread that was running or had exited holding the
//!   lock. Reported only when the run was stopped as stuck (the hang timeout, `record`
//!   killed, recording stopped, a signal other than the SIGINT, SIGTERM or SIGHUP a user stops
//!   a program with): threads idle in a wait when a program exits, or is stopped by its user
//!   (Ctrl-C of a healthy server), are its normal end.
//!
//! Only threads in the `Blocked` state take part: one in a call with a timeout would have
//! returned by itself; it is listed when a blocked thread waits for it. A thread whose end
//! state is not known (a trace cut short, or older than format 1.4) is never blocked here.
//!
//! Cost: linear in the threads, the locks held at the end and the edges, with at most
//! [`MAX_WAITS_FOR`] edges per thread (a lock read-held by thousands of threads).

use foldhash::{HashMap, HashMapExt, HashSet};
use std::collections::BTreeSet;

use foresight_trace::event::ObjectId;

use foresight_trace::tables::{EndReason, ObjectKind, StopCause, ThreadEndState};

use crate::describe::{held_lock, location, lock_mode, site, thread};
use crate::model::{Blocking, PendingCall, Run};
use crate::report::{
    signal_name, BlockedThread, BlockingCall, Detail, Finding, FindingLocation, Kind, Message,
    ObservedReport, Role, Rule, ThreadRef, ThreadState, Verdict,
};
use crate::stream::Mode;

/// Threads a blocked thread is said to wait for, at most.
const MAX_WAITS_FOR: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// Holds the requested lock: its acquisition.
    Holds(u32),
    /// Queued to write-lock the read-requested lock.
    Queued,
    Join,
    Once,
}

struct Graph<'r> {
    run: &'r Run,
    /// Per thread: (thread it waits for, why).
    out: Vec<Vec<(u32, Via)>>,
    /// Per thread: the locks it held at the end (acquisition indices, outermost first).
    held: Vec<Vec<u32>>,
    /// Lock object → dense lock index.
    lock_index: HashMap<ObjectId, u32>,
}

impl<'r> Graph<'r> {
    fn blocked(&self, t: u32) -> Option<&'r PendingCall> {
        let end = &self.run.end;
        match end.states.get(t as usize).copied().flatten() {
            Some(ThreadEndState::Blocked) => end.pending_of(t),
            _ => None,
        }
    }
}

/// The observed deadlocks and stalls of one run.
pub fn observed_findings(run: &Run) -> Vec<Finding> {
    let n = run.threads.len();
    if !run.end.states.contains(&Some(ThreadEndState::Blocked)) {
        return Vec::new();
    }
    let lock_index: HashMap<_, u32> = run
        .locks
        .iter()
        .enumerate()
        .map(|(i, l)| (l.object, i as u32))
        .collect();
    let mut held = vec![Vec::new(); n];
    let mut holders: HashMap<u32, Vec<u32>> = HashMap::new();
    for (i, a) in run.acquisitions.iter().enumerate() {
        if a.release.is_none() && a.acquired != u32::MAX {
            held[a.thread as usize].push(i as u32);
            holders.entry(a.lock).or_default().push(i as u32);
        }
    }
    let mut g = Graph {
        run,
        out: vec![Vec::new(); n],
        held,
        lock_index,
    };
    // The threads blocked in a write request, per lock.
    let mut writers: HashMap<_, Vec<u32>> = HashMap::new();
    for t in 0..n as u32 {
        if let Some(Blocking::Lock {
            lock,
            mode: Mode::Write,
        }) = g.blocked(t).map(|c| c.what)
        {
            writers.entry(lock).or_default().push(t);
        }
    }
    for t in 0..n as u32 {
        let Some(call) = g.blocked(t) else { continue };
        let mut edges = Vec::new();
        match call.what {
            Blocking::Lock { lock, mode } => {
                let Some(&l) = g.lock_index.get(&lock) else {
                    continue;
                };
                let recursive = run.locks[l as usize].kind == ObjectKind::RecursiveMutex;
                for &a in holders.get(&l).into_iter().flatten() {
                    if edges.len() == MAX_WAITS_FOR {
                        break;
                    }
                    let h = &run.acquisitions[a as usize];
                    // A recursive mutex its own holder locks again does not block.
                    if h.mode.conflicts(mode) && !(h.thread == t && recursive) {
                        edges.push((h.thread, Via::Holds(a)));
                    }
                }
                if edges.is_empty() && mode == Mode::Read {
                    // Readers held off by a queued writer (a writer-preferring rwlock).
                    for &w in writers.get(&lock).into_iter().flatten() {
                        if w != t && edges.len() < MAX_WAITS_FOR {
                            edges.push((w, Via::Queued));
                        }
                    }
                }
            }
            Blocking::Join { child: Some(c) } if (c as usize) < n => edges.push((c, Via::Join)),
            Blocking::Once { once } => {
                if let Some(&r) = run.end.once_runners.get(&once) {
                    if r != t {
                        edges.push((r, Via::Once));
                    }
                }
            }
            _ => {}
        }
        g.out[t as usize] = edges;
    }

    let components = components(&g);
    let stopped = run_was_stopped(run);
    let user_stop = run.end.stopped.is_none()
        && matches!(run.end.reason, Some(EndReason::Signal { signal }) if is_user_stop(signal));
    let mut findings = Vec::new();
    for members in components {
        if !members.iter().any(|&t| g.blocked(t).is_some()) {
            continue;
        }
        let cycle = find_cycle(&g, &members);
        if cycle.is_none() && !stopped && !(user_stop && stuck_on_a_lock(&g, &members)) {
            continue;
        }
        findings.push(finding(&g, &members, cycle));
    }
    findings
}

/// Whether the process was stopped as stuck (the hang timeout, `record` killed, recording
/// stopped, a signal such as SIGABRT or SIGSEGV), rather than ending by itself. A stop the
/// user asks for (SIGINT from Ctrl-C, SIGTERM, SIGHUP: how a healthy server is ended) is the
/// program's normal end: threads idle in their waits then are no stall (a cycle of blocked
/// threads is still a deadlock).
fn run_was_stopped(run: &Run) -> bool {
    // A snapshot the user asked for is a look at a stopped run too.
    run.end.stopped.is_some()
        || run.end.snapshot.is_some()
        || matches!(
            run.end.reason,
            Some(EndReason::Signal { signal }) if !is_user_stop(signal)
        )
}

/// Whether a thread of the part waits for a lock whose holder will never release it: a holder
/// that exited or is blocked itself. That is a hang whatever stopped the run; a holder still
/// running may have been about to release it.
fn stuck_on_a_lock(g: &Graph, members: &[u32]) -> bool {
    let end = &g.run.end;
    members.iter().any(|&t| {
        g.out[t as usize].iter().any(|&(u, via)| {
            matches!(via, Via::Holds(_))
                && (g.blocked(u).is_some() || end.exited.get(u as usize).copied().unwrap_or(false))
        })
    })
}

/// SIGHUP, SIGINT, SIGTERM: the signals a user (or a service manager) stops a program with.
fn is_user_stop(signal: i32) -> bool {
    matches!(signal, 1 | 2 | 15)
}

/// The weakly connected parts of the graph that have an edge or a blocked thread, each sorted.
fn components(g: &Graph) -> Vec<Vec<u32>> {
    let n = g.out.len();
    let mut parent: Vec<u32> = (0..n as u32).collect();
    fn root(p: &mut [u32], mut x: u32) -> u32 {
        while p[x as usize] != x {
            p[x as usize] = p[p[x as usize] as usize];
            x = p[x as usize];
        }
        x
    }
    let mut involved = vec![false; n];
    for t in 0..n as u32 {
        if g.blocked(t).is_some() {
            involved[t as usize] = true;
        }
        for &(u, _) in &g.out[t as usize] {
            involved[u as usize] = true;
            let (a, b) = (root(&mut parent, t), root(&mut parent, u));
            if a != b {
                parent[a.max(b) as usize] = a.min(b);
            }
        }
    }
    let mut parts: Vec<Vec<u32>> = Vec::new();
    let mut index: HashMap<u32, usize> = HashMap::new();
    for t in 0..n as u32 {
        if !involved[t as usize] {
            continue;
        }
        let r = root(&mut parent, t);
        let i = *index.entry(r).or_insert_with(|| {
            parts.push(Vec::new());
            parts.len() - 1
        });
        parts[i].push(t);
    }
    parts
}

/// A cycle of blocked threads in `members`, in wait-for order: a self-wait if there is one,
/// else the first cycle a depth-first search meets.
fn find_cycle(g: &Graph, members: &[u32]) -> Option<Vec<u32>> {
    let edges = |t: u32| {
        let blocked = g.blocked(t).is_some();
        g.out[t as usize]
            .iter()
            .map(|&(u, _)| u)
            .filter(move |&u| blocked && g.blocked(u).is_some())
    };
    if let Some(&t) = members.iter().find(|&&t| edges(t).any(|u| u == t)) {
        return Some(vec![t]);
    }
    // 0: unseen, 1: on the search path, 2: done.
    let mut colour: HashMap<u32, u8> = HashMap::new();
    for &start in members {
        if colour.contains_key(&start) {
            continue;
        }
        let mut path: Vec<u32> = vec![start];
        let mut iters = vec![edges(start)];
        colour.insert(start, 1);
        while let Some(it) = iters.last_mut() {
            match it.next() {
                Some(u) => match colour.get(&u).copied().unwrap_or(0) {
                    0 => {
                        colour.insert(u, 1);
                        path.push(u);
                        iters.push(edges(u));
                    }
                    1 => {
                        let from = path.iter().position(|&p| p == u).expect("on the path");
                        return Some(path[from..].to_vec());
                    }
                    _ => {}
                },
                None => {
                    iters.pop();
                    if let Some(t) = path.pop() {
                        colour.insert(t, 2);
                    }
                }
            }
        }
    }
    None
}

fn finding(g: &Graph, members: &[u32], cycle: Option<Vec<u32>>) -> Finding {
    let run = g.run;
    // The cycle first, then the other blocked threads, then the holders that were not blocked.
    let cycle_threads = cycle.clone().unwrap_or_default();
    let in_cycle: HashSet<u32> = cycle_threads.iter().copied().collect();
    let mut order: Vec<u32> = cycle_threads.clone();
    order.extend(
        members
            .iter()
            .filter(|t| !in_cycle.contains(t) && g.blocked(**t).is_some()),
    );
    order.extend(members.iter().filter(|t| g.blocked(**t).is_none()));

    // The acquisitions some member waits for: those are the holdings the finding is about.
    let waited: BTreeSet<u32> = members
        .iter()
        .flat_map(|&t| g.out[t as usize].iter())
        .filter_map(|&(_, via)| match via {
            Via::Holds(a) => Some(a),
            _ => None,
        })
        .collect();

    let mut threads = Vec::new();
    let mut locations: Vec<FindingLocation> = Vec::new();
    for &t in &order {
        let state = match run.end.states.get(t as usize).copied().flatten() {
            Some(ThreadEndState::Blocked) => ThreadState::Blocked,
            Some(ThreadEndState::BlockedWithTimeout) => ThreadState::BlockedWithTimeout,
            Some(ThreadEndState::Running) => ThreadState::Running,
            None if run.end.exited.get(t as usize) == Some(&true) => ThreadState::Exited,
            None => ThreadState::Running,
        };
        for &a in &g.held[t as usize] {
            if waited.contains(&a) {
                let acq = &run.acquisitions[a as usize];
                locations.push(location(run, acq.site, t, Role::Holds));
            }
        }
        let call = g.blocked(t);
        if let Some(c) = call {
            locations.push(location(run, c.site, t, role(c.what)));
        }
        threads.push(BlockedThread {
            thread: thread(run, t),
            state,
            waits: call.map(|c| waits_name(c.what)),
            object: call.map(|c| object_name(g, c.what)),
            site: call.map(|c| site(run, c.site)),
            position: call.map(|c| c.pos),
            held: g.held[t as usize]
                .iter()
                .map(|&a| held_lock(run, &run.acquisitions[a as usize]))
                .collect(),
            waits_for: g.out[t as usize]
                .iter()
                .map(|&(u, _)| u)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .map(|u| thread(run, u))
                .collect(),
        });
    }

    let ended = ended_text(run);
    let labels = |ts: &[u32]| -> Vec<String> { ts.iter().map(|&t| run.thread_label(t)).collect() };
    let (kind, rule, message, reason, lock_classes) = match &cycle {
        Some(c) => {
            let requested: Vec<String> = c
                .iter()
                .filter_map(|&t| match g.blocked(t)?.what {
                    Blocking::Lock { lock, .. } => {
                        let l = g.lock_index.get(&lock)?;
                        Some(run.locks[*l as usize].class.clone())
                    }
                    _ => None,
                })
                .collect();
            let all_locks = requested.len() == c.len();
            let (rule, message) = if c.len() == 1 {
                let t = c[0];
                let lock = object_name(g, g.blocked(t).expect("in a cycle").what);
                (
                    Rule::BlockedSelfLock,
                    Message::ObservedSelfDeadlock {
                        thread: thread(run, t),
                        lock,
                    },
                )
            } else {
                (
                    if all_locks {
                        Rule::BlockedLockCycle
                    } else {
                        Rule::BlockedWaitCycle
                    },
                    Message::ObservedDeadlock {
                        threads: c.iter().map(|&t| thread(run, t)).collect(),
                    },
                )
            };
            let reason = if c.len() == 1 {
                format!(
                    "{ended}; {} was blocked requesting a lock it held itself, which only it \
                     could release: this deadlock happened in the recorded run",
                    run.thread_label(c[0])
                )
            } else {
                format!(
                    "{ended}; each thread of the cycle was blocked in the call shown, waiting \
                     for the next ({}), so none of them could return: this deadlock happened \
                     in the recorded run",
                    crate::describe::cycle_text(&labels(c))
                )
            };
            (Kind::ObservedDeadlock, rule, message, reason, requested)
        }
        None => {
            let blocked: Vec<u32> = order
                .iter()
                .copied()
                .filter(|&t| g.blocked(t).is_some())
                .collect();
            let message = Message::ObservedStall {
                threads: blocked.iter().map(|&t| thread(run, t)).collect(),
                // Distinct, by name.
                calls: blocked
                    .iter()
                    .map(|&t| waits_name(g.blocked(t).expect("blocked").what))
                    .map(|c| (c.name(), c))
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into_values()
                    .collect(),
            };
            let reason = format!(
                "{ended}; these threads were blocked in the calls shown, in no cycle: each \
                 waits for a wake-up (signal, post, arrival) the trace does not show coming, \
                 for a thread that was not blocked, or for one of the others"
            );
            (
                Kind::ObservedStall,
                Rule::BlockedWait,
                message,
                reason,
                Vec::new(),
            )
        }
    };
    Finding {
        id: 0,
        kind,
        verdict: Verdict::Observed,
        rule,
        message,
        reason,
        traces: vec![run.source.clone()],
        witness: None,
        occurrences: 1,
        locations,
        detail: Detail::Observed(Box::new(ObservedReport {
            trace: run.source.clone(),
            ended,
            cycle: cycle_threads.iter().map(|&t| thread(run, t)).collect(),
            lock_classes,
            threads,
        })),
    }
}

/// The call's role in a finding's locations.
fn role(w: Blocking) -> Role {
    match w {
        Blocking::Lock { .. } => Role::Requests,
        Blocking::Join { .. } => Role::Joins,
        Blocking::Barrier { .. } => Role::Arrives,
        Blocking::Condition { .. } | Blocking::Semaphore { .. } | Blocking::Once { .. } => {
            Role::Waits
        }
    }
}

fn waits_name(w: Blocking) -> BlockingCall {
    match w {
        Blocking::Lock {
            mode: Mode::Read, ..
        } => BlockingCall::ReadLock,
        Blocking::Lock { .. } => BlockingCall::Lock,
        Blocking::Join { .. } => BlockingCall::Join,
        Blocking::Condition { .. } => BlockingCall::Condition,
        Blocking::Barrier { .. } => BlockingCall::Barrier,
        Blocking::Semaphore { .. } => BlockingCall::Semaphore,
        Blocking::Once { .. } => BlockingCall::Once,
    }
}

fn object_name(g: &Graph, w: Blocking) -> String {
    let run = g.run;
    let object = |o| {
        g.lock_index
            .get(&o)
            .map(|&l| run.locks[l as usize].name.clone())
            .or_else(|| run.object_names.get(&o).cloned())
            .unwrap_or_else(|| format!("object#{o}"))
    };
    match w {
        Blocking::Lock { lock, mode } => {
            let name = object(lock);
            match mode {
                Mode::Read => format!("{name} ({})", lock_mode(mode)),
                Mode::Write => name,
            }
        }
        Blocking::Join { child: Some(c) } if (c as usize) < run.threads.len() => {
            run.thread_label(c)
        }
        Blocking::Join { .. } => "a thread the trace does not know".to_string(),
        Blocking::Condition { cond, .. } => object(cond),
        Blocking::Barrier { barrier } => object(barrier),
        Blocking::Semaphore { sem } => object(sem),
        Blocking::Once { once } => object(once),
    }
}

/// How the trace ended, for the reason.
fn ended_text(run: &Run) -> String {
    if let Some(sig) = run.end.snapshot {
        return format!(
            "a snapshot was taken on {} while the process ran (`foresight record --dump-on`)",
            signal_name(sig as i32)
        );
    }
    if let Some(s) = run.end.stopped {
        return match s.cause {
            StopCause::HangTimeout { ms: 0 } => "`foresight record` was killed while the run \
                 went on, and the run was stopped with it"
                .to_string(),
            StopCause::HangTimeout { ms } => format!(
                "no thread recorded an event for {} and `foresight record --hang-timeout` \
                 stopped the run",
                duration(ms)
            ),
            StopCause::WriteFailed { errno } if errno == libc::EBADF || errno == libc::EMFILE => {
                format!(
                    "recording stopped early (the program took the trace's descriptor: {}): \
                     the threads' states are those at that moment",
                    descriptor_taken(errno)
                )
            }
            StopCause::WriteFailed { errno } => format!(
                "recording stopped early (a write to the trace failed, errno {errno}): the \
                 threads' states are those at that moment"
            ),
            StopCause::FileSizeLimit { limit } => format!(
                "recording stopped early (the file size limit, {limit} bytes): the threads' \
                 states are those at that moment"
            ),
        };
    }
    match run.end.reason {
        Some(EndReason::Signal { signal }) => {
            format!("the process was ended by {}", signal_name(signal))
        }
        Some(EndReason::Exit { status }) | Some(EndReason::ImmediateExit { status }) => {
            format!("the process exited with status {status} while threads were blocked")
        }
        Some(EndReason::Synthetic) | None => "the trace ended".to_string(),
    }
}

fn duration(ms: u64) -> String {
    if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// Drops the predicted and potential findings that an observed deadlock of the same trace
/// already reports: a lock cycle whose every request, or a wait whose wait and other
/// request, were the blocked calls of the observed one. What happened is said once, as
/// having happened.
pub fn drop_superseded(findings: &mut Vec<Finding>) {
    let mut blocked: BTreeSet<(String, ThreadRef, u32)> = BTreeSet::new();
    for f in findings.iter() {
        if let (Kind::ObservedDeadlock, Some(o)) = (f.kind, f.observed()) {
            for t in &o.threads {
                if let (Some(p), ThreadState::Blocked) = (t.position, t.state) {
                    blocked.insert((o.trace.clone(), t.thread.clone(), p));
                }
            }
        }
    }
    if blocked.is_empty() {
        return;
    }
    let is_blocked = |trace: &str, thread: &ThreadRef, pos: u32| {
        blocked.contains(&(trace.to_string(), thread.clone(), pos))
    };
    findings.retain(|f| {
        if f.verdict == Verdict::Observed {
            return true;
        }
        match &f.detail {
            Detail::LockCycle { edges, .. } => {
                edges.is_empty()
                    || edges
                        .iter()
                        .any(|e| !is_blocked(&e.trace, &e.thread, e.request_position))
            }
            Detail::WaitDeadlock { wait, .. } => {
                !(is_blocked(&wait.trace, &wait.thread, wait.position)
                    && is_blocked(&wait.trace, &wait.other_thread, wait.other_position))
            }
            _ => true,
        }
    });
}

/// How the program took the trace's descriptor, from a `WriteFailed` errno of `EBADF` or
/// `EMFILE` (FORMAT.md §7.13).
pub fn descriptor_taken(errno: i32) -> &'static str {
    if errno == libc::EMFILE {
        "it closed or replaced it when no other descriptor was free to move the trace to"
    } else {
        "closed or replaced by a raw system call, and the file could not be opened again"
    }
}

/// Observed hangs as an analysis of the registry (`analyses/mod.rs`).
pub struct Observed;

impl super::Analysis for Observed {
    fn name(&self) -> &'static str {
        "observed hangs"
    }

    fn analyze(
        &self,
        part: &super::Part,
        _budgets: &mut super::Budgets,
        _summary: &mut crate::report::Summary,
        out: &mut super::Output,
    ) {
        for run in part.runs {
            out.findings.extend(observed_findings(run));
        }
    }

    fn settle(&self, findings: &mut Vec<Finding>) {
        drop_superseded(findings);
    }
}
