//! Lock cycles, the deadlock analysis proper: instance-level cycles of each run become
//! candidate patterns — first sampled (pivot on the rarest edge, the nearest occurrences of the
//! other edges, bounded per cycle and overall), then, if none deadlocks, the complete
//! abstract-pattern search within a step budget (`deadlock.rs`) — and a deadlocking one is a
//! predicted finding with its witness; class-level cycles not covered by a predicted finding
//! are potential findings, with the most informative rejection as the reason (one thread, gate
//! lock, happens-before, lock order, different traces, same-class nesting).

use foldhash::{HashMap, HashMapExt};
use std::collections::{BTreeSet, BinaryHeap};

use crate::closure::{Budget, Closure, NotPredicted, PatternEvent};
use crate::cycles::{for_each_cycle, shortest_cycle, strongly_connected_components, Flow};
use crate::deadlock::{
    check_lock_cycle, rejection_text, search_abstract_pattern, LockCycleCandidate, Rejection,
};
use crate::describe::{
    earlier_edge_locations, earlier_edge_report, edge_report, location, witness,
};
use crate::lock_graph::{modes_can_block, ClassEdge, InstanceGraph, LockOrderGraph};
use crate::model::Run;
use crate::options::Options;
use crate::report::{
    ComponentSummary, Detail, EdgeReport, Finding, Inversion, Kind, LockRef, Message, Role, Rule,
    Summary, Verdict,
};
use crate::stream::Mode;

/// Rejections kept for the reasons of potential findings, at most (a dense graph has more
/// cycles than are worth a reason each; the shortest are enumerated, and kept, first).
const REJECTIONS_KEPT: usize = 1 << 16;

/// The class edges of a cycle, sorted: the key of a cycle's rejection.
type EdgeKey = Vec<(u32, u32)>;

/// The lock-cycle findings of all runs: predicted deadlocks (instance level, one trace each),
/// then potential ones (class-level cycles no predicted deadlock covers), at most
/// `opts.cycles_listed` of each verdict per strongly connected component of the class graph
/// (shortest first, then the most seen), and a summary of each component that has cycles.
/// Memory is bounded by the graphs and the listing, not by the number of cycles: cycles are
/// visited one at a time (`cycles::for_each_cycle`).
pub(crate) fn lock_cycle_findings(
    runs: &[Run],
    graph: &LockOrderGraph,
    opts: &Options,
    budget: &mut Budget,
    summary: &mut Summary,
) -> (Vec<Finding>, Vec<ComponentSummary>) {
    let adjacency = graph.adjacency();
    let class_scc = strongly_connected_components(&adjacency);
    let components = class_scc.iter().map(|&c| c + 1).max().unwrap_or(0);
    let mut tally: Vec<Tally> = (0..components).map(|_| Tally::default()).collect();
    let limit = opts.cycles_listed;

    // Instance level, one trace at a time.
    let mut predicted: Vec<(BTreeSet<(usize, usize)>, Finding)> = Vec::new();
    let mut predicted_keys: HashMap<String, usize> = HashMap::new();
    let mut rejections: HashMap<EdgeKey, Rejection> = HashMap::new();
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
        let instance_scc = strongly_connected_components(&instances.adjacency);
        let mut predicted_in: HashMap<usize, usize> = HashMap::new();
        let search = for_each_cycle(
            &instances.adjacency,
            &instance_scc,
            opts.max_cycle_length,
            opts.cycle_budget,
            |component, cycle| {
                let class_component = class_scc[classes[cycle[0]]];
                if predicted_in.get(&component).copied().unwrap_or(0) >= limit {
                    // Enough deadlocks predicted here to list: the rest is counted at class
                    // level, unchecked (`--all` checks every cycle).
                    tally[class_component].prediction_cut = true;
                    return Flow::SkipComponent;
                }
                if budget.checked >= budget.limit {
                    budget.exhausted = true;
                    return Flow::Stop;
                }
                let k = cycle.len();
                let lists: Vec<&Vec<(u32, u32)>> = (0..k)
                    .map(|i| &instances.edges[&(cycle[i] as u32, cycle[(i + 1) % k] as u32)])
                    .collect();
                let sampled = predict_cycle(run, &lists, opts.candidates_per_cycle, budget);
                let outcome = match sampled {
                    Ok(found) => Ok(found),
                    Err(best) => {
                        match search_cycle(run, &lists, opts.candidates_per_cycle, budget) {
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
                            return Flow::Continue;
                        }
                        *predicted_in.entry(component).or_default() += 1;
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
                        let mut key: EdgeKey = (0..k)
                            .map(|i| (classes[cycle[i]] as u32, classes[cycle[(i + 1) % k]] as u32))
                            .collect();
                        key.sort_unstable();
                        key.dedup();
                        if let Some(slot) = rejections.get_mut(&key) {
                            if rank(&r) > rank(slot) {
                                *slot = r;
                            }
                        } else if rejections.len() < REJECTIONS_KEPT {
                            rejections.insert(key, r);
                        } else {
                            tally[class_component].prediction_cut = true;
                        }
                    }
                    Err(None) => {}
                }
                Flow::Continue
            },
        );
        summary.cycle_search_truncated |= search.truncated;
        summary.cycle_length_cut |= search.length_cut;
    }

    // Predicted findings, listed up to the limit in each component of the class graph.
    let mut findings = Vec::new();
    let mut covering: Vec<BTreeSet<(usize, usize)>> = Vec::new();
    for (covered, f) in predicted {
        let c = covered
            .first()
            .map_or(0, |&(from, _)| class_scc[from])
            .min(components.saturating_sub(1));
        if let Some(t) = tally.get_mut(c) {
            t.predicted += 1;
            if t.listed_predicted >= limit {
                covering.push(covered);
                continue;
            }
            t.listed_predicted += 1;
        }
        covering.push(covered);
        findings.push(f);
    }

    // Class level: every cycle not covered by a predicted deadlock is potential; each
    // component keeps the shortest, most seen ones to list and counts the others.
    let mut order = 0u64;
    // Reused for every cycle: a dense graph has hundreds of thousands.
    let mut edges: Vec<&ClassEdge> = Vec::new();
    let mut modes: Vec<u8> = Vec::new();
    // `cut`: a shortest cycle of a component whose enumeration was cut before any of its
    // cycles was visited, so that the cut never hides a component.
    let mut visit = |component: usize, cycle: &[usize], cut: bool| {
        let k = cycle.len();
        graph.cycle_edges(cycle, &mut edges);
        modes.clear();
        modes.extend(edges.iter().map(|e| e.modes));
        if !modes_can_block(&modes) {
            // Read-read at some lock: with reader-preferring rwlocks this order never
            // blocks.
            return Flow::Continue;
        }
        if cut && tally[component].by_length.iter().any(|&n| n > 0) {
            return Flow::Continue;
        }
        summary.class_cycles += 1;
        let t = &mut tally[component];
        if t.by_length.len() < k {
            t.by_length.resize(k, 0);
        }
        t.by_length[k - 1] += 1;
        if covering
            .iter()
            .any(|s| edges.iter().all(|e| s.contains(&(e.from, e.to))))
        {
            return Flow::Continue;
        }
        t.potential += 1;
        let seen = edges.iter().map(|e| e.count).min().unwrap_or(0);
        order += 1;
        let entry = Listed {
            key: (k, std::cmp::Reverse(seen), order),
            cycle: cycle.to_vec(),
        };
        if t.listed.len() < limit {
            t.listed.push(entry);
        } else if t.listed.peek().is_some_and(|worst| entry.key < worst.key) {
            t.listed.pop();
            t.listed.push(entry);
        }
        Flow::Continue
    };
    let search = for_each_cycle(
        &adjacency,
        &class_scc,
        opts.max_cycle_length,
        opts.cycle_budget,
        |component, cycle| visit(component, cycle, false),
    );
    for &c in &search.cut_components {
        if let Some(cycle) = shortest_cycle(&adjacency, &class_scc, c, opts.cycle_budget) {
            visit(c, &cycle, true);
        }
    }
    for &c in &search.cut_components {
        tally[c].search_cut = true;
    }
    summary.cycle_search_truncated |= search.truncated;
    summary.cycle_length_cut |= search.length_cut;

    let mut summaries = Vec::new();
    for (c, t) in tally.into_iter().enumerate() {
        if t.by_length.iter().sum::<u64>() == 0 && t.predicted == 0 && !t.search_cut {
            continue;
        }
        let mut listed = t.listed.into_vec();
        listed.sort_by_key(|l| l.key);
        for l in &listed {
            findings.push(potential_finding(
                runs,
                graph,
                &l.cycle,
                &rejections,
                t.prediction_cut,
            ));
        }
        summaries.push(component_summary(
            graph,
            &class_scc,
            c,
            ComponentCounts {
                by_length: t.by_length,
                predicted: t.predicted,
                potential: t.potential,
                listed_predicted: t.listed_predicted,
                listed_potential: listed.len(),
                prediction_cut: t.prediction_cut,
                search_cut: t.search_cut,
            },
        ));
    }
    for (i, s) in summaries.iter_mut().enumerate() {
        s.id = i + 1;
    }
    (findings, summaries)
}

/// What a component of the class graph counts while its cycles are visited.
#[derive(Default)]
struct Tally {
    by_length: Vec<u64>,
    predicted: u64,
    potential: u64,
    listed_predicted: usize,
    /// The potential cycles to list: a max-heap on the key, so the worst is dropped first.
    listed: BinaryHeap<Listed>,
    prediction_cut: bool,
    search_cut: bool,
}

/// A potential cycle to list, ordered by (length, most seen first, enumeration order).
struct Listed {
    key: (usize, std::cmp::Reverse<u64>, u64),
    cycle: Vec<usize>,
}

impl PartialEq for Listed {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Listed {}
impl PartialOrd for Listed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Listed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

pub(crate) struct ComponentCounts {
    pub by_length: Vec<u64>,
    pub predicted: u64,
    pub potential: u64,
    pub listed_predicted: usize,
    pub listed_potential: usize,
    pub prediction_cut: bool,
    pub search_cut: bool,
}

/// Classes named in a component's summary, at most; inversions listed, at most.
const SUMMARY_CLASSES: usize = 32;
const SUMMARY_INVERSIONS: usize = 5;

/// A component of the class graph, summarised: its classes and edges, its cycles by length,
/// and the inversions seen most (pairs of classes taken in both orders).
pub(crate) fn component_summary(
    graph: &LockOrderGraph,
    scc: &[usize],
    c: usize,
    counts: ComponentCounts,
) -> ComponentSummary {
    let members: Vec<usize> = (0..graph.classes.len()).filter(|&v| scc[v] == c).collect();
    let inner: Vec<&ClassEdge> = graph
        .edges
        .iter()
        .filter(|e| scc[e.from] == c && scc[e.to] == c)
        .collect();
    let mut inversions: Vec<(u64, u64, usize, usize, u64, u64)> = inner
        .iter()
        .filter(|e| e.from < e.to)
        .filter_map(|e| {
            let back = graph.edge(e.to, e.from)?;
            Some((
                e.count.min(back.count),
                e.count + back.count,
                e.from,
                e.to,
                e.count,
                back.count,
            ))
        })
        .collect();
    inversions.sort_by(|a, b| (b.0, b.1, a.2, a.3).cmp(&(a.0, a.1, b.2, b.3)));
    let inversion_count = inversions.len();
    ComponentSummary {
        id: 0,
        classes: members.len(),
        class_names: members
            .iter()
            .take(SUMMARY_CLASSES)
            .map(|&v| graph.classes[v].clone())
            .collect(),
        edges: inner.len(),
        cycles: counts.by_length.iter().sum(),
        cycles_by_length: counts.by_length,
        predicted: counts.predicted,
        potential: counts.potential,
        listed_predicted: counts.listed_predicted,
        listed_potential: counts.listed_potential,
        prediction_cut: counts.prediction_cut,
        search_cut: counts.search_cut,
        inversions: inversion_count,
        top_inversions: inversions
            .into_iter()
            .take(SUMMARY_INVERSIONS)
            .map(|(_, _, a, b, ab, ba)| Inversion {
                classes: [graph.classes[a].clone(), graph.classes[b].clone()],
                counts: [ab, ba],
            })
            .collect(),
    }
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
        locations.push(location(run, h.site, h.thread, Role::Holds));
        locations.push(location(run, r.site, r.thread, Role::Requests));
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
    let locks: Vec<LockRef> = c
        .holds
        .iter()
        .map(|&h| crate::describe::lock(run, run.acquisitions[h as usize].lock))
        .collect();
    Finding {
        id: 0,
        kind: Kind::Deadlock,
        verdict: Verdict::Predicted,
        rule: Rule::LockCycle,
        message: Message::Deadlock { locks },
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
    rejections: &HashMap<EdgeKey, Rejection>,
    prediction_cut: bool,
) -> Finding {
    let k = cycle.len();
    let mut edges = Vec::new();
    let mut locations = Vec::new();
    let mut traces: BTreeSet<String> = BTreeSet::new();
    let mut runs_with_all = Vec::new();
    let class_edges: Vec<_> = (0..k)
        .map(|i| graph.edge(cycle[i], cycle[(i + 1) % k]).expect("edge"))
        .collect();
    let mut edge_key: EdgeKey = class_edges
        .iter()
        .map(|e| (e.from as u32, e.to as u32))
        .collect();
    edge_key.sort_unstable();
    edge_key.dedup();
    for (ri, _) in runs.iter().enumerate() {
        if class_edges.iter().all(|e| e.runs.contains(&ri)) {
            runs_with_all.push(ri);
        }
    }
    let mut earlier_only = None;
    for e in &class_edges {
        if let Some(w) = e.witnesses.first() {
            let run = &runs[w.run];
            edges.push(edge_report(run, graph, w.held, w.acquisition));
            let (h, r) = (
                &run.acquisitions[w.held as usize],
                &run.acquisitions[w.acquisition as usize],
            );
            locations.push(location(run, h.site, h.thread, Role::Holds));
            locations.push(location(run, r.site, r.thread, Role::Requests));
        } else if let Some(&(ri, i)) = e.earlier.first() {
            let run = &runs[ri];
            edges.push(earlier_edge_report(run, graph, i));
            locations.extend(earlier_edge_locations(run, i));
            earlier_only.get_or_insert((e.from, e.to));
        }
        for &ri in &e.runs {
            traces.insert(runs[ri].source.clone());
        }
    }
    let names: Vec<String> = cycle.iter().map(|&c| graph.classes[c].clone()).collect();
    let self_loop = k == 1;
    let reason = if let Some((from, to)) = earlier_only {
        format!(
            "not predicted: the edge {} → {} was seen before the flight recorder's window \
             (the trace keeps only a summary of it), so no reordering of the recorded events \
             can be checked; the code still takes these locks in an inconsistent order",
            graph.classes[from], graph.classes[to]
        )
    } else if runs_with_all.iter().any(|&i| !runs[i].hb.complete) {
        "not predicted: the trace is too large for the vector clocks' memory budget, so only \
         the class-level order was checked"
            .to_string()
    } else if let Some(r) = rejections.get(&edge_key) {
        let run = runs_with_all.first().map(|&i| &runs[i]);
        format!("not predicted: {}", rejection_text(run, r))
    } else if runs_with_all.is_empty() {
        "not predicted: the edges of the cycle come from different traces, so no single \
         execution can be reordered into it; the code still takes these locks in an \
         inconsistent order"
            .to_string()
    } else if prediction_cut {
        "not checked at instance level: its strongly connected component of the lock-order \
         graph has more cycles than are listed, and prediction there stopped once enough \
         deadlocks were predicted to list (--all checks and lists every cycle)"
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
        Message::NestedClass {
            class: names[0].clone(),
        }
    } else {
        Message::InconsistentOrder {
            classes: names.clone(),
        }
    };
    Finding {
        id: 0,
        kind: Kind::PotentialDeadlock,
        verdict: Verdict::Potential,
        rule: if self_loop {
            Rule::SameClassNesting
        } else {
            Rule::LockOrder
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

/// Lock cycles as an analysis of the registry (`analyses/mod.rs`).
pub struct LockCycles;

impl super::Analysis for LockCycles {
    fn name(&self) -> &'static str {
        "lock cycles"
    }

    fn analyze(
        &self,
        part: &super::Part,
        budgets: &mut super::Budgets,
        summary: &mut Summary,
        out: &mut super::Output,
    ) {
        let (findings, components) = lock_cycle_findings(
            part.runs,
            part.graph,
            part.opts,
            &mut budgets.deadlock,
            summary,
        );
        for c in &components {
            summary.unlisted_predicted += c.predicted - c.listed_predicted as u64;
            summary.unlisted_potential += c.potential - c.listed_potential as u64;
        }
        out.findings.extend(findings);
        out.components.extend(components);
    }
}
