//! How a pass describes the run data of a finding: sites, held locks, the locations every
//! finding lists, lock-order edges, and the witness reordering of a closure. Shared by every
//! pass that makes findings, so that they all say the same things the same way.

use crate::closure::{open_at_frontier, Closure, PatternEvent};
use crate::lock_graph::LockOrderGraph;
use crate::model::{Acquisition, Run};
use crate::report::{
    EdgeReport, FindingLocation, HeldLock, LockId, LockMode, LockRef, Role, SiteReport, ThreadId,
    ThreadRef, Witness, WitnessOthers, WitnessThread, LISTED_WHOLE_THREADS,
};
use crate::stream::Mode;

/// The walk's lock mode as the reports name it.
pub(crate) fn lock_mode(m: Mode) -> LockMode {
    match m {
        Mode::Write => LockMode::Write,
        Mode::Read => LockMode::Read,
    }
}

/// The run's lock `l` (its index in the run) as findings refer to it.
pub(crate) fn lock(run: &Run, l: u32) -> LockRef {
    let lock = &run.locks[l as usize];
    LockRef {
        id: LockId(lock.object),
        name: lock.name.clone(),
    }
}

/// The run's thread `t` (its index in the run) as findings refer to it: the boundary where
/// the model's index becomes the trace's id.
pub(crate) fn thread(run: &Run, t: u32) -> ThreadRef {
    ThreadRef {
        id: ThreadId(run.threads.id(t as usize)),
        name: Some(run.thread_name(t).into_owned()),
    }
}

pub(crate) fn site(run: &Run, s: foresight_trace::SiteId) -> SiteReport {
    run.location(s).into()
}

pub(crate) fn held_lock(run: &Run, a: &Acquisition) -> HeldLock {
    HeldLock {
        lock: lock(run, a.lock),
        class: run.acquisition_class(a),
        mode: lock_mode(a.mode),
        site: site(run, a.site),
    }
}

pub(crate) fn location(
    run: &Run,
    s: foresight_trace::SiteId,
    thread: u32,
    role: Role,
) -> FindingLocation {
    let l = run.location(s);
    FindingLocation {
        file: l.file,
        line: (l.line > 0).then_some(l.line),
        function: l.function,
        thread: self::thread(run, thread),
        role,
        trace: run.source.clone(),
        called_from: l.caller.map(Into::into),
    }
}

pub(crate) fn edge_report(
    run: &Run,
    graph: &LockOrderGraph,
    hold: u32,
    request: u32,
) -> EdgeReport {
    let h = &run.acquisitions[hold as usize];
    let r = &run.acquisitions[request as usize];
    let class = |a: &Acquisition| {
        graph
            .acquisition_class(run, a)
            .expect("classes added with the run")
    };
    let (from, to) = (class(h), class(r));
    EdgeReport {
        from_class: graph.classes[from].clone(),
        to_class: graph.classes[to].clone(),
        trace: run.source.clone(),
        thread: thread(run, r.thread),
        held: held_lock(run, h),
        lock: lock(run, r.lock),
        mode: lock_mode(r.mode),
        site: site(run, r.site),
        held_set: run
            .held(r)
            .iter()
            .map(|&a| held_lock(run, &run.acquisitions[a as usize]))
            .collect(),
        held_position: h.acquired,
        request_position: r.request,
        edge_count: graph.edge(from, to).map_or(0, |e| e.count),
        earlier: false,
    }
}

/// An edge the flight recorder saw before its window (`Run::earlier[index]`), described as
/// far as its summary goes: both locks, both sites, one thread.
pub(crate) fn earlier_edge_report(run: &Run, graph: &LockOrderGraph, index: u32) -> EdgeReport {
    let e = &run.earlier[index as usize];
    let (h, r) = (&run.locks[e.held as usize], &run.locks[e.lock as usize]);
    let held = HeldLock {
        lock: lock(run, e.held),
        class: h.class.clone(),
        mode: lock_mode(Mode::Write),
        site: site(run, e.held_site),
    };
    let from = graph.class_index(&h.class);
    let to = graph.class_index(&r.class);
    EdgeReport {
        from_class: h.class.clone(),
        to_class: r.class.clone(),
        trace: run.source.clone(),
        thread: earlier_thread(run, e.thread),
        held: held.clone(),
        lock: lock(run, e.lock),
        mode: lock_mode(Mode::Write),
        site: site(run, e.site),
        held_set: vec![held],
        held_position: 0,
        request_position: 0,
        edge_count: from
            .zip(to)
            .and_then(|(f, t)| graph.edge(f, t))
            .map_or(e.count, |e| e.count),
        earlier: true,
    }
}

/// A thread by its trace id, which may have no events in the window.
fn earlier_thread(run: &Run, id: foresight_trace::event::ThreadId) -> ThreadRef {
    match run.threads.position(id) {
        Some(t) => thread(run, t as u32),
        None => ThreadRef {
            id: ThreadId(id),
            name: None,
        },
    }
}

/// The locations of an earlier edge: where the held lock was taken, where the other was
/// requested.
pub(crate) fn earlier_edge_locations(run: &Run, index: u32) -> [FindingLocation; 2] {
    let e = &run.earlier[index as usize];
    let loc = |s, role| {
        let l = run.location(s);
        FindingLocation {
            file: l.file,
            line: (l.line > 0).then_some(l.line),
            function: l.function,
            thread: earlier_thread(run, e.thread),
            role,
            trace: run.source.clone(),
            called_from: l.caller.map(Into::into),
        }
    };
    [loc(e.held_site, Role::Holds), loc(e.site, Role::Requests)]
}

/// The witness: each thread's prefix in the closure, the locks it holds there, what each
/// pattern thread does next (`next`: where it blocks, for a deadlock), and the lock operations
/// of the prefix in the order they run.
pub(crate) fn witness(run: &Run, closure: &Closure, next: &[(PatternEvent, String)]) -> Witness {
    const SCHEDULE_LINES: usize = 24;
    let (threads, others) = witness_threads(
        run,
        &closure.frontier,
        |t| {
            next.iter()
                .find(|(b, _)| b.thread == t)
                .map(|(_, what)| what.clone())
        },
        |t, _| {
            open_at_frontier(run, closure, t)
                .iter()
                .map(|&a| held_text(run, a))
                .collect()
        },
    );
    // Lock operations inside the prefix, in trace order: a sync-preserving reordering keeps
    // the trace order of what it contains.
    let mut ops: Vec<(u64, u32)> = Vec::new();
    for (t, &f) in closure.frontier.iter().enumerate() {
        for &a in run.thread_acquisitions(t) {
            if run.acquisitions[a as usize].acquired >= f {
                break;
            }
            ops.push((run.acquisitions[a as usize].seq, a));
        }
    }
    ops.sort_unstable();
    let truncated = ops.len() > SCHEDULE_LINES;
    // Only the lines shown are formatted (a closure can hold millions of sections).
    let mut schedule: Vec<String> = ops[ops.len().saturating_sub(SCHEDULE_LINES)..]
        .iter()
        .map(|&(_, a)| {
            let acq = &run.acquisitions[a as usize];
            let f = closure.frontier[acq.thread as usize];
            schedule_step(run, a, acq.release.is_some_and(|r| r < f))
        })
        .collect();
    for (b, what) in next {
        schedule.push(format!("{}: {what}", run.thread_label(b.thread)));
    }
    Witness {
        trace: run.source.clone(),
        threads,
        others,
        schedule,
        schedule_truncated: truncated,
    }
}

/// A lock a witness thread holds at the end of its prefix: `m (acquired at f (a.c:3))`.
pub(crate) fn held_text(run: &Run, acquisition: u32) -> String {
    let a = &run.acquisitions[acquisition as usize];
    format!(
        "{} (acquired at {})",
        run.locks[a.lock as usize].name,
        run.location(a.site).text
    )
}

/// The threads of a witness whose prefixes are `frontier`: each thread that runs part of its
/// life, holds a lock at the end (`holds`) or makes the pattern's next step (`blocks`); and
/// the threads that run their whole recorded life holding nothing, listed too when there are
/// [`LISTED_WHOLE_THREADS`] or fewer, else counted in one entry. A program that made a thread
/// per request has 10^5 of those in a closure, each run as recorded: a list of them would be
/// most of the report and of its memory, and tell a reader nothing their count and ids do not.
pub(crate) fn witness_threads(
    run: &Run,
    frontier: &[u32],
    blocks: impl Fn(u32) -> Option<String>,
    holds: impl Fn(u32, u32) -> Vec<String>,
) -> (Vec<WitnessThread>, Option<WitnessOthers>) {
    // The threads listed whatever happens (with their dense index), and the dense indices of
    // those that run whole: an entry is made for the latter only if they are listed.
    let mut listed: Vec<(u32, WitnessThread)> = Vec::new();
    let mut whole: Vec<u32> = Vec::new();
    for (t, &f) in frontier.iter().enumerate() {
        let t = t as u32;
        let blocks = blocks(t);
        if f == 0 && blocks.is_none() {
            continue;
        }
        let holds = holds(t, f);
        if blocks.is_none() && holds.is_empty() && run.whole_life(t) == Some(f) {
            whole.push(t);
            continue;
        }
        listed.push((
            t,
            WitnessThread {
                thread: thread(run, t),
                prefix_events: f,
                holds,
                blocks,
            },
        ));
    }
    if whole.len() > LISTED_WHOLE_THREADS {
        let events = whole.iter().map(|&t| u64::from(frontier[t as usize])).sum();
        let ids = whole.iter().map(|&t| run.threads.id(t as usize)).collect();
        let threads = listed.into_iter().map(|(_, w)| w).collect();
        return (threads, Some(WitnessOthers::of(ids, events)));
    }
    listed.extend(whole.into_iter().map(|t| {
        (
            t,
            WitnessThread {
                thread: thread(run, t),
                prefix_events: frontier[t as usize],
                holds: Vec::new(),
                blocks: None,
            },
        )
    }));
    listed.sort_unstable_by_key(|&(t, _)| t);
    (listed.into_iter().map(|(_, w)| w).collect(), None)
}

/// A cycle's names in order, back to the first: `A → B → A`.
pub(crate) fn cycle_text(names: &[String]) -> String {
    let mut s = names.join(" → ");
    if let Some(first) = names.first() {
        s.push_str(" → ");
        s.push_str(first);
    }
    s
}

/// One critical section of a witness schedule: who takes which lock where, and whether it
/// is released within the schedule (`… unlocks`) or still held when the schedule ends.
pub(crate) fn schedule_step(run: &Run, acquisition: u32, released: bool) -> String {
    let acq = &run.acquisitions[acquisition as usize];
    format!(
        "{}: {} {} at {}{}",
        run.thread_label(acq.thread),
        if acq.mode == Mode::Read {
            "read-locks"
        } else {
            "locks"
        },
        run.locks[acq.lock as usize].name,
        run.location(acq.site).text,
        if released {
            " … unlocks"
        } else {
            " (keeps it)"
        }
    )
}
