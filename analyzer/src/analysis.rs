//! `foresight analyze` as a library: traces in, findings out. Ties the lock-order graph, the
//! cycle search, the instance-level prediction and the wait analyses together and turns their
//! results into report findings.
//!
//! Verdicts:
//! - **predicted**: an instance-level pattern of one trace whose sync-preserving closure
//!   (`closure.rs`) avoids every pattern event; the report carries the witness reordering;
//! - **potential**: a class-level cycle of the lock-order graph (possibly made of edges from
//!   different traces, or of same-class locks) with no predicted instance: an inconsistent lock
//!   order in the code, a design defect independent of timing (seed 001). The reason says why
//!   it was not predicted.

use std::collections::{BTreeSet, HashMap};

use crate::closure::{open_at_frontier, Budget, Closure, NotPredicted, PatternEvent, Reach};
use crate::cycles::elementary_cycles;
use crate::deadlock::{check_lock_cycle, search_abstract_pattern, LockCycleCandidate, Rejection};
use crate::lock_graph::{modes_can_block, InstanceGraph, LockOrderGraph};
use crate::model::{Acquisition, Mode, Run};
use crate::report::{
    EdgeReport, Finding, FindingLocation, HeldLock, Report, SiteReport, Summary, TraceSummary,
    Verdict, Witness, WitnessThread, REPORT_SCHEMA, REPORT_VERSION,
};

#[derive(Clone, Debug)]
pub struct Options {
    /// Longest cycle enumerated (in locks, which is also in threads).
    pub max_cycle_length: usize,
    /// Search steps for the cycle enumeration, per graph.
    pub cycle_budget: u64,
    /// Instance-level patterns checked with the closure, over the whole analysis.
    pub candidate_budget: u64,
    /// Patterns tried per instance-level cycle.
    pub candidates_per_cycle: u64,
    /// Work (events entering closures) allowed to the complete search of abstract patterns,
    /// over the whole analysis.
    pub closure_steps: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_cycle_length: 4,
            cycle_budget: 2_000_000,
            candidate_budget: 50_000,
            candidates_per_cycle: 64,
            closure_steps: 400_000_000,
        }
    }
}

/// Analyses the runs (one per trace) together. `warnings[i]` are the reader's problems of run i.
pub fn analyze(runs: &[Run], warnings: &[Vec<String>], opts: &Options) -> Report {
    let mut graph = LockOrderGraph::default();
    for (i, run) in runs.iter().enumerate() {
        graph.add_run(i, run);
    }
    let mut budget = Budget::new(opts.candidate_budget, opts.closure_steps);
    let mut summary = Summary {
        lock_classes: graph.classes.len(),
        lock_order_edges: graph.edges.len(),
        max_cycle_length: opts.max_cycle_length,
        ..Summary::default()
    };

    // Instance level, one trace at a time.
    let mut predicted: Vec<(BTreeSet<(usize, usize)>, Finding)> = Vec::new();
    let mut predicted_keys: HashMap<String, usize> = HashMap::new();
    let mut rejections: HashMap<BTreeSet<(usize, usize)>, Rejection> = HashMap::new();
    for (ri, run) in runs.iter().enumerate() {
        if !run.hb.complete {
            // Without every happens-before edge a prediction could be wrong: class level only.
            continue;
        }
        let classes: Vec<usize> = run
            .locks
            .iter()
            .map(|l| {
                graph
                    .class_index(&l.class)
                    .expect("class added with the run")
            })
            .collect();
        let instances = InstanceGraph::build(run);
        let cycles = elementary_cycles(
            &instances.adjacency,
            opts.max_cycle_length,
            opts.cycle_budget,
        );
        summary.cycle_search_truncated |= cycles.truncated;
        for cycle in &cycles.cycles {
            let k = cycle.len();
            let lists: Vec<&Vec<(u32, u32)>> = (0..k)
                .map(|i| &instances.edges[&(cycle[i] as u32, cycle[(i + 1) % k] as u32)])
                .collect();
            let class_edges: BTreeSet<(usize, usize)> = (0..k)
                .map(|i| (classes[cycle[i]], classes[cycle[(i + 1) % k]]))
                .collect();
            let sampled = predict_cycle(run, &lists, opts.candidates_per_cycle, &mut budget);
            let outcome = match sampled {
                Ok(found) => Ok(found),
                Err(best) => {
                    match search_cycle(run, &lists, opts.candidates_per_cycle, &mut budget) {
                        Some(found) => Ok(found),
                        None => Err(best),
                    }
                }
            };
            match outcome {
                Ok((candidate, closure)) => {
                    let key = predicted_key(run, ri, &candidate);
                    if let Some(&i) = predicted_keys.get(&key) {
                        predicted[i].1.occurrences += 1;
                        continue;
                    }
                    let f = predicted_finding(run, ri, &graph, &candidate, &closure);
                    predicted_keys.insert(key, predicted.len());
                    // The class edges of the acquisitions themselves (subclasses are per
                    // acquisition), which the class-level cycles it explains consist of.
                    let class = |a: u32| {
                        graph
                            .acquisition_class(run, &run.acquisitions[a as usize])
                            .expect("classes added with the run")
                    };
                    let covered: BTreeSet<(usize, usize)> = candidate
                        .holds
                        .iter()
                        .zip(&candidate.requests)
                        .map(|(&h, &r)| (class(h), class(r)))
                        .collect();
                    predicted.push((covered, f));
                }
                Err(Some(r)) => {
                    let slot = rejections.entry(class_edges).or_insert_with(|| r.clone());
                    if rank(&r) > rank(slot) {
                        *slot = r;
                    }
                }
                Err(None) => {}
            }
        }
    }

    // Class level: every cycle not covered by a predicted deadlock is potential.
    let adjacency = graph.adjacency();
    let class_cycles = elementary_cycles(&adjacency, opts.max_cycle_length, opts.cycle_budget);
    summary.cycle_search_truncated |= class_cycles.truncated;
    let mut potential = Vec::new();
    for cycle in &class_cycles.cycles {
        let k = cycle.len();
        let edges: Vec<_> = (0..k)
            .map(|i| {
                graph
                    .edge(cycle[i], cycle[(i + 1) % k])
                    .expect("cycle edges exist")
            })
            .collect();
        let modes: Vec<u8> = edges.iter().map(|e| e.modes).collect();
        if !modes_can_block(&modes) {
            // Read-read at some lock: with reader-preferring rwlocks this order never blocks.
            continue;
        }
        summary.class_cycles += 1;
        let edge_set: BTreeSet<(usize, usize)> = edges.iter().map(|e| (e.from, e.to)).collect();
        if predicted.iter().any(|(s, _)| edge_set.is_subset(s)) {
            continue;
        }
        potential.push(potential_finding(
            runs,
            &graph,
            cycle,
            &rejections,
            &edge_set,
        ));
    }

    let mut findings: Vec<Finding> = predicted.into_iter().map(|(_, f)| f).collect();
    findings.extend(potential);
    for (ri, run) in runs.iter().enumerate() {
        if !run.hb.complete {
            continue;
        }
        findings.extend(crate::waits::wait_findings(run, ri, &mut budget));
        findings.extend(crate::waits::rwlock_findings(run, &mut budget));
    }
    findings.sort_by(|a, b| {
        (a.verdict, a.cycle.len(), &a.kind, &a.message).cmp(&(
            b.verdict,
            b.cycle.len(),
            &b.kind,
            &b.message,
        ))
    });
    // Rank violations last: a broken declared rule, not a deadlock found.
    findings.extend(crate::ranks::rank_findings(runs, &graph));
    summary.candidates_checked = budget.checked;
    summary.candidate_budget_exhausted = budget.exhausted;
    let mut report = Report {
        schema: REPORT_SCHEMA,
        version: REPORT_VERSION,
        traces: runs
            .iter()
            .enumerate()
            .map(|(i, r)| TraceSummary {
                path: r.source.clone(),
                events: r.events,
                threads: r.threads.len(),
                locks: r.locks.len(),
                critical_sections: r.acquisitions.len(),
                warnings: {
                    let mut w = warnings.get(i).cloned().unwrap_or_default();
                    if !r.hb.complete {
                        w.push(format!(
                            "{} threads: the vector clocks outgrew their memory budget, so no \
                             deadlock is predicted from this trace (lock order only)",
                            r.threads.len()
                        ));
                    }
                    w
                },
            })
            .collect(),
        summary,
        findings,
    };
    report.recount();
    report
}

/// How informative a rejection is: the one closest to a deadlock explains the cycle best.
fn rank(r: &Rejection) -> u8 {
    match r {
        Rejection::SameThread => 0,
        Rejection::ReadRead { .. } => 1,
        Rejection::GateLock { .. } => 2,
        Rejection::Closure(NotPredicted::SameThread | NotPredicted::OutOfBudget) => 0,
        Rejection::Closure(_) | Rejection::StillWakeable | Rejection::TimedWait => 3,
    }
}

/// Occurrences of the other edges tried around one occurrence of the pivot edge.
const NEIGHBOURS: usize = 6;

/// Tries the candidate patterns of one instance-level cycle (`lists[i]`: the (hold, request)
/// pairs of edge i, in trace order). Returns the first predicted one, or the best rejection
/// (None if no candidate could be formed).
///
/// The rarest edge is the pivot: each of its occurrences is combined with the occurrences of
/// the other edges nearest to it in the trace (a few on each side, of other threads), since
/// far-apart acquisitions are usually ordered by something (a barrier, a join). Both the
/// candidates per cycle and the candidates overall are bounded.
fn predict_cycle(
    run: &Run,
    lists: &[&Vec<(u32, u32)>],
    per_cycle: u64,
    budget: &mut Budget,
) -> Result<(LockCycleCandidate, Closure), Option<Rejection>> {
    struct Search<'a> {
        run: &'a Run,
        choices: Vec<Vec<(u32, u32)>>,
        holds: Vec<u32>,
        requests: Vec<u32>,
        tried: u64,
        per_cycle: u64,
        best: Option<Rejection>,
        found: Option<(LockCycleCandidate, Closure)>,
        stop: bool,
    }
    fn go(s: &mut Search, budget: &mut Budget) {
        let i = s.requests.len();
        if i == s.choices.len() {
            if s.tried >= s.per_cycle || !budget.take() {
                s.stop = true;
                return;
            }
            s.tried += 1;
            let c = LockCycleCandidate {
                holds: s.holds.clone(),
                requests: s.requests.clone(),
            };
            match check_lock_cycle(s.run, &c) {
                Ok(closure) => {
                    s.found = Some((c, closure));
                    s.stop = true;
                }
                Err(r) => {
                    if s.best.as_ref().is_none_or(|b| rank(&r) > rank(b)) {
                        s.best = Some(r);
                    }
                }
            }
            return;
        }
        for j in 0..s.choices[i].len() {
            let (h, r) = s.choices[i][j];
            let t = s.run.acquisitions[r as usize].thread;
            if s.requests
                .iter()
                .any(|&q| s.run.acquisitions[q as usize].thread == t)
            {
                if s.best.is_none() {
                    s.best = Some(Rejection::SameThread);
                }
                continue;
            }
            s.holds.push(h);
            s.requests.push(r);
            go(s, budget);
            s.holds.pop();
            s.requests.pop();
            if s.stop {
                return;
            }
        }
    }
    let k = lists.len();
    let pivot = (0..k)
        .min_by_key(|&i| lists[i].len())
        .expect("a cycle has edges");
    let mut s = Search {
        run,
        choices: Vec::new(),
        holds: Vec::new(),
        requests: Vec::new(),
        tried: 0,
        per_cycle,
        best: None,
        found: None,
        stop: false,
    };
    for &(ph, pr) in lists[pivot].iter() {
        let pivot_thread = run.acquisitions[pr as usize].thread;
        // Rotate so that the pivot comes first: the search fixes it, then the others.
        s.choices = (0..k)
            .map(|d| {
                let i = (pivot + d) % k;
                if i == pivot {
                    vec![(ph, pr)]
                } else {
                    nearest(run, lists[i], pr, pivot_thread)
                }
            })
            .collect();
        if s.choices.iter().any(Vec::is_empty) {
            // Every occurrence of some edge is in the pivot's thread.
            if s.best.is_none() {
                s.best = Some(Rejection::SameThread);
            }
            continue;
        }
        go(&mut s, budget);
        if s.stop {
            break;
        }
    }
    match s.found {
        Some((mut c, closure)) => {
            // Back to cycle order.
            c.holds.rotate_right(pivot);
            c.requests.rotate_right(pivot);
            Ok((c, closure))
        }
        None => Err(s.best),
    }
}

/// The occurrences of an edge nearest in the trace to acquisition `around`, not of `thread`.
fn nearest(run: &Run, list: &[(u32, u32)], around: u32, thread: u32) -> Vec<(u32, u32)> {
    let at = list.partition_point(|&(_, r)| r < around);
    let other = |&&(_, r): &&(u32, u32)| run.acquisitions[r as usize].thread != thread;
    let mut out: Vec<(u32, u32)> = list[..at]
        .iter()
        .rev()
        .filter(other)
        .take(NEIGHBOURS / 2)
        .copied()
        .collect();
    out.extend(
        list[at..]
            .iter()
            .filter(other)
            .take(NEIGHBOURS / 2)
            .copied(),
    );
    out
}

/// The occurrences of one edge by one thread with one (hold, request) mode pair.
type Group = ((u32, Mode, Mode), Vec<(u32, u32)>);

/// The complete search, after sampling found nothing: every abstract pattern of the cycle
/// (one thread and one pair of modes per edge, distinct threads, modes that block) searched
/// with [`search_abstract_pattern`], within the step budget.
fn search_cycle(
    run: &Run,
    lists: &[&Vec<(u32, u32)>],
    per_cycle: u64,
    budget: &mut Budget,
) -> Option<(LockCycleCandidate, Closure)> {
    let k = lists.len();
    // Per edge: its occurrences grouped by (thread, hold mode, request mode), in trace order.
    let groups: Vec<Vec<Group>> = lists
        .iter()
        .map(|list| {
            let mut g: Vec<Group> = Vec::new();
            for &(h, r) in list.iter() {
                let (ha, ra) = (&run.acquisitions[h as usize], &run.acquisitions[r as usize]);
                let key = (ra.thread, ha.mode, ra.mode);
                match g.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, v)) => v.push((h, r)),
                    None => g.push((key, vec![(h, r)])),
                }
            }
            g
        })
        .collect();
    let mut chosen: Vec<usize> = Vec::with_capacity(k);
    let mut tried = 0u64;
    fn go(
        run: &Run,
        groups: &[Vec<Group>],
        chosen: &mut Vec<usize>,
        tried: &mut u64,
        per_cycle: u64,
        budget: &mut Budget,
    ) -> Option<(LockCycleCandidate, Closure)> {
        let k = groups.len();
        let i = chosen.len();
        if i == k {
            // Request of edge j meets the holding of edge j+1.
            let blocks = (0..k).all(|j| {
                let (_, _, request) = groups[j][chosen[j]].0;
                let (_, hold, _) = groups[(j + 1) % k][chosen[(j + 1) % k]].0;
                request.conflicts(hold)
            });
            if !blocks || *tried >= per_cycle || budget.steps_left == 0 || !budget.take() {
                return None;
            }
            *tried += 1;
            let components: Vec<&[(u32, u32)]> =
                (0..k).map(|j| groups[j][chosen[j]].1.as_slice()).collect();
            return match search_abstract_pattern(run, &components, budget.steps_left) {
                Ok((c, closure, steps)) => {
                    budget.steps_left = budget.steps_left.saturating_sub(steps);
                    Some((c, closure))
                }
                Err(NotPredicted::OutOfBudget) => {
                    budget.steps_left = 0;
                    budget.exhausted = true;
                    None
                }
                Err(_) => None,
            };
        }
        for g in 0..groups[i].len() {
            let t = groups[i][g].0 .0;
            if chosen
                .iter()
                .enumerate()
                .any(|(j, &c)| groups[j][c].0 .0 == t)
            {
                continue;
            }
            chosen.push(g);
            let found = go(run, groups, chosen, tried, per_cycle, budget);
            chosen.pop();
            if found.is_some() {
                return found;
            }
        }
        None
    }
    go(run, &groups, &mut chosen, &mut tried, per_cycle, budget)
}

/// Predicted deadlocks at the same sites in the same trace are one finding.
fn predicted_key(run: &Run, ri: usize, c: &LockCycleCandidate) -> String {
    let mut parts: Vec<(u32, u32, u32)> = c
        .holds
        .iter()
        .zip(&c.requests)
        .map(|(&h, &r)| {
            let (h, r) = (&run.acquisitions[h as usize], &run.acquisitions[r as usize]);
            (h.site, r.site, r.lock)
        })
        .collect();
    parts.sort_unstable();
    format!("{ri}:{parts:?}")
}

pub(crate) fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Write => "write",
        Mode::Read => "read",
    }
}

pub(crate) fn site(run: &Run, s: foresight_trace::SiteId) -> SiteReport {
    run.location(s).into()
}

pub(crate) fn held_lock(run: &Run, a: &Acquisition) -> HeldLock {
    let lock = &run.locks[a.lock as usize];
    HeldLock {
        lock: lock.name.clone(),
        class: run.acquisition_class(a),
        mode: mode_name(a.mode),
        site: site(run, a.site),
    }
}

pub(crate) fn location(
    run: &Run,
    s: foresight_trace::SiteId,
    thread: u32,
    role: &'static str,
) -> FindingLocation {
    let l = run.location(s);
    FindingLocation {
        file: l.file,
        line: (l.line > 0).then_some(l.line),
        function: l.function,
        thread: run.thread_label(thread),
        role,
        trace: run.source.clone(),
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
        thread: run.thread_label(r.thread),
        held: held_lock(run, h),
        lock: run.locks[r.lock as usize].name.clone(),
        mode: mode_name(r.mode),
        site: site(run, r.site),
        held_set: run
            .held(r)
            .iter()
            .map(|&a| held_lock(run, &run.acquisitions[a as usize]))
            .collect(),
        held_position: h.acquired,
        request_position: r.request,
        edge_count: graph.edge(from, to).map_or(0, |e| e.count),
    }
}

/// The witness: each thread's prefix in the closure, the locks it holds there, where the
/// pattern threads block, and the lock operations of the prefix in the order they run.
pub(crate) fn witness(run: &Run, closure: &Closure, blocked: &[(PatternEvent, String)]) -> Witness {
    const SCHEDULE_LINES: usize = 24;
    let mut threads = Vec::new();
    for (t, &f) in closure.frontier.iter().enumerate() {
        let blocks = blocked
            .iter()
            .find(|(b, _)| b.thread as usize == t)
            .map(|(_, what)| what.clone());
        if f == 0 && blocks.is_none() {
            continue;
        }
        let holds = open_at_frontier(run, closure, t as u32)
            .iter()
            .map(|&a| {
                let a = &run.acquisitions[a as usize];
                format!(
                    "{} (acquired at {})",
                    run.locks[a.lock as usize].name,
                    run.location(a.site).text
                )
            })
            .collect();
        threads.push(WitnessThread {
            thread: run.thread_label(t as u32),
            prefix_events: f,
            holds,
            blocks,
        });
    }
    // Lock operations inside the prefix, in trace order: a sync-preserving reordering keeps
    // the trace order of what it contains.
    let mut ops: Vec<(u64, u32)> = Vec::new();
    for (t, &f) in closure.frontier.iter().enumerate() {
        for &a in &run.thread_acquisitions[t] {
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
            let released = acq.release.is_some_and(|r| r < f);
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
        })
        .collect();
    for (b, what) in blocked {
        schedule.push(format!("{}: {what}", run.thread_label(b.thread)));
    }
    Witness {
        trace: run.source.clone(),
        threads,
        schedule,
        schedule_truncated: truncated,
    }
}

fn predicted_finding(
    run: &Run,
    ri: usize,
    graph: &LockOrderGraph,
    c: &LockCycleCandidate,
    closure: &Closure,
) -> Finding {
    let _ = ri;
    let k = c.requests.len();
    let edges: Vec<EdgeReport> = (0..k)
        .map(|i| edge_report(run, graph, c.holds[i], c.requests[i]))
        .collect();
    let cycle: Vec<String> = edges.iter().map(|e| e.from_class.clone()).collect();
    let mut locations = Vec::new();
    for (&h, &r) in c.holds.iter().zip(&c.requests) {
        let (h, r) = (&run.acquisitions[h as usize], &run.acquisitions[r as usize]);
        locations.push(location(run, h.site, h.thread, "holds"));
        locations.push(location(run, r.site, r.thread, "requests"));
    }
    let blocked: Vec<(PatternEvent, String)> = c
        .requests
        .iter()
        .zip(&c.holds)
        .map(|(&r, &h)| {
            let (r, h) = (&run.acquisitions[r as usize], &run.acquisitions[h as usize]);
            (
                PatternEvent {
                    thread: r.thread,
                    pos: r.request,
                },
                format!(
                    "requests {} at {} while holding {} — blocks",
                    run.locks[r.lock as usize].name,
                    run.location(r.site).text,
                    run.locks[h.lock as usize].name
                ),
            )
        })
        .collect();
    let locks: Vec<String> = c
        .holds
        .iter()
        .map(|&h| {
            run.locks[run.acquisitions[h as usize].lock as usize]
                .name
                .clone()
        })
        .collect();
    Finding {
        id: 0,
        kind: "deadlock",
        verdict: Verdict::Predicted,
        rule: "lock-cycle",
        message: format!(
            "deadlock: {k} threads take {} in a cycle; a reordering of this run deadlocks",
            cycle_text(&locks)
        ),
        reason: format!(
            "the {k} requests are in distinct threads, hold no common lock, and the \
             sync-preserving closure of the events before them (thread order, create/join, \
             barriers, once, semaphores, conditions; critical sections kept in trace order) \
             contains none of them: running that closure first leaves every thread blocked"
        ),
        traces: vec![run.source.clone()],
        cycle,
        edges,
        wait: None,
        witness: Some(witness(run, closure, &blocked)),
        occurrences: 1,
        locations,
    }
}

pub(crate) fn cycle_text(names: &[String]) -> String {
    let mut s = names.join(" → ");
    if let Some(first) = names.first() {
        s.push_str(" → ");
        s.push_str(first);
    }
    s
}

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
                "{} is never released in the trace, so the reordering cannot pass it",
                lock(*l)
            ),
        },
    }
}

fn potential_finding(
    runs: &[Run],
    graph: &LockOrderGraph,
    cycle: &[usize],
    rejections: &HashMap<BTreeSet<(usize, usize)>, Rejection>,
    edge_set: &BTreeSet<(usize, usize)>,
) -> Finding {
    let k = cycle.len();
    let mut edges = Vec::new();
    let mut locations = Vec::new();
    let mut traces: BTreeSet<String> = BTreeSet::new();
    let mut runs_with_all = Vec::new();
    let class_edges: Vec<_> = (0..k)
        .map(|i| graph.edge(cycle[i], cycle[(i + 1) % k]).expect("edge"))
        .collect();
    for (ri, _) in runs.iter().enumerate() {
        if class_edges.iter().all(|e| e.runs.contains(&ri)) {
            runs_with_all.push(ri);
        }
    }
    for e in &class_edges {
        let w = e.witnesses[0];
        let run = &runs[w.run];
        edges.push(edge_report(run, graph, w.held, w.acquisition));
        let (h, r) = (
            &run.acquisitions[w.held as usize],
            &run.acquisitions[w.acquisition as usize],
        );
        locations.push(location(run, h.site, h.thread, "holds"));
        locations.push(location(run, r.site, r.thread, "requests"));
        for &ri in &e.runs {
            traces.insert(runs[ri].source.clone());
        }
    }
    let names: Vec<String> = cycle.iter().map(|&c| graph.classes[c].clone()).collect();
    let self_loop = k == 1;
    let reason = if runs_with_all.iter().any(|&i| !runs[i].hb.complete) {
        "not predicted: the trace is too large for the vector clocks' memory budget, so only \
         the class-level order was checked"
            .to_string()
    } else if let Some(r) = rejections.get(edge_set) {
        let run = runs_with_all.first().map(|&i| &runs[i]);
        format!("not predicted: {}", rejection_text(run, r))
    } else if runs_with_all.is_empty() {
        "not predicted: the edges of the cycle come from different traces, so no single \
         execution can be reordered into it; the code still takes these locks in an \
         inconsistent order"
            .to_string()
    } else if self_loop {
        "not predicted: locks of one class are nested (for example two instances locked in a \
         fixed order, such as lower id first); at class level that is a self-edge, and no \
         instance-level cycle was seen. If the order is intended, declare it with a subclass \
         or a rank annotation"
            .to_string()
    } else {
        "not predicted: no instance-level cycle closes on the same lock objects in one trace \
         (the edges were made by different instances of the classes)"
            .to_string()
    };
    let message = if self_loop {
        format!(
            "potential deadlock: locks of class {} are nested inside each other",
            names[0]
        )
    } else {
        format!(
            "potential deadlock: inconsistent lock order {} ({} classes)",
            cycle_text(&names),
            k
        )
    };
    Finding {
        id: 0,
        kind: "potential-deadlock",
        verdict: Verdict::Potential,
        rule: if self_loop {
            "same-class-nesting"
        } else {
            "lock-order"
        },
        message,
        reason,
        traces: traces.into_iter().collect(),
        cycle: names,
        edges,
        wait: None,
        witness: None,
        occurrences: class_edges.iter().map(|e| e.count).min().unwrap_or(0),
        locations,
    }
}
