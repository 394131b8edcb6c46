//! Lock cycles, the deadlock analysis proper: instance-level cycles of each run become
//! candidate patterns — first sampled (pivot on the rarest edge, the nearest occurrences of the
//! other edges, bounded per cycle and overall), then, if none deadlocks, the complete
//! abstract-pattern search within a step budget (`deadlock.rs`) — and a deadlocking one is a
//! predicted finding with its witness; class-level cycles not covered by a predicted finding
//! are potential findings, with the most informative rejection as the reason (one thread, gate
//! lock, happens-before, lock order, different traces, same-class nesting).

use std::collections::{BTreeSet, HashMap};

use crate::analysis::Options;
use crate::closure::{Budget, Closure, NotPredicted, PatternEvent};
use crate::cycles::elementary_cycles;
use crate::deadlock::{
    check_lock_cycle, rejection_text, search_abstract_pattern, LockCycleCandidate, Rejection,
};
use crate::describe::{cycle_text, edge_report, location, witness};
use crate::lock_graph::{modes_can_block, InstanceGraph, LockOrderGraph};
use crate::model::{Mode, Run};
use crate::report::{Detail, EdgeReport, Finding, Kind, Summary, Verdict};

/// The lock-cycle findings of all runs: predicted deadlocks (instance level, one trace each),
/// then potential ones (class-level cycles no predicted deadlock covers).
pub(crate) fn lock_cycle_findings(
    runs: &[Run],
    graph: &LockOrderGraph,
    opts: &Options,
    budget: &mut Budget,
    summary: &mut Summary,
) -> Vec<Finding> {
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
            let sampled = predict_cycle(run, &lists, opts.candidates_per_cycle, budget);
            let outcome = match sampled {
                Ok(found) => Ok(found),
                Err(best) => match search_cycle(run, &lists, opts.candidates_per_cycle, budget) {
                    Some(found) => Ok(found),
                    None => Err(best),
                },
            };
            match outcome {
                Ok((candidate, closure)) => {
                    let key = predicted_key(run, ri, &candidate);
                    if let Some(&i) = predicted_keys.get(&key) {
                        predicted[i].1.occurrences += 1;
                        continue;
                    }
                    let f = predicted_finding(run, ri, graph, &candidate, &closure);
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
            graph,
            cycle,
            &rejections,
            &edge_set,
        ));
    }

    let mut findings: Vec<Finding> = predicted.into_iter().map(|(_, f)| f).collect();
    findings.extend(potential);
    findings
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
        kind: Kind::Deadlock,
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
        witness: Some(witness(run, closure, &blocked)),
        occurrences: 1,
        locations,
        detail: Detail::LockCycle { cycle, edges },
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
        kind: Kind::PotentialDeadlock,
        verdict: Verdict::Potential,
        rule: if self_loop {
            "same-class-nesting"
        } else {
            "lock-order"
        },
        message,
        reason,
        traces: traces.into_iter().collect(),
        witness: None,
        occurrences: class_edges.iter().map(|e| e.count).min().unwrap_or(0),
        locations,
        detail: Detail::LockCycle {
            cycle: names,
            edges,
        },
    }
}
