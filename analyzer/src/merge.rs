//! The merge of parts: of the segments of one trace, and of many traces (a test suite recorded
//! test by test). Each part is analysed alone (`analysis::analyze_part`, which needs only
//! that part's model, so traces can be analysed in parallel and each model dropped as soon as
//! it is done), and what it leaves ([`TraceAnalysis`]) is merged here, for one part as for
//! many: a finding seen in several traces (same kind, verdict, classes and
//! sites: its baseline key) is one finding that lists them, its occurrences summed; a potential
//! cycle that a predicted deadlock of some trace covers is dropped, as it would be in one
//! analysis; and the class-level cycles that no single trace has whole — their edges come from
//! different traces — are found on the merged lock-order graph, described from the edge
//! witnesses each trace kept. What is held across traces is bounded by the findings listed and
//! the lock-order graph (one witness per class edge), not by the traces' lengths or number.
//!
//! Budgets are per part, and a potential cycle whose edges are all in one trace lists that
//! trace (and every other trace that has it whole).
//!
//! The segments of one long trace (`--segment-events`, `model::walk`) are folded the
//! same way ([`SegmentFold`](crate::SegmentFold), `Merger::add_segment`), each segment a part
//! of its own in the merged graph, but reported as the one trace they are: one summary line
//! whose counts add up, findings that name the trace once, and a cycle whose edges are in
//! different segments potential with a reason that says so. Budgets are per segment.

use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeSet;

use crate::analyses::lock_cycles::{component_summary, ComponentCounts};
use crate::analyses::races;
use crate::cycles::{for_each_cycle, shortest_cycle, strongly_connected_components, Flow};
use crate::describe::{earlier_edge_locations, earlier_edge_report, edge_report, location};
use crate::lock_graph::{modes_can_block, ClassEdge, LockOrderGraph};
use crate::model::Run;
use crate::options::Options;
use crate::report::{
    Detail, EdgeReport, Finding, FindingKey, FindingLocation, Kind, Message, Report, Role, Rule,
    Summary, Verdict, REPORT_SCHEMA, REPORT_VERSION,
};

/// A cycle no single trace has whole, to list: (length, most seen first, its classes).
type CrossCycle = (usize, std::cmp::Reverse<u64>, Vec<usize>);

/// One trace analysed alone, as [`Merger`] needs it.
pub struct TraceAnalysis {
    pub(crate) report: Report,
    edges: Vec<EdgeWitness>,
    /// The trace's lock classes that no edge of `edges` names: nodes of the merged graph too.
    lone_classes: Vec<String>,
}

/// A class edge of one trace, described while the trace's model was at hand.
struct EdgeWitness {
    from: String,
    to: String,
    count: u64,
    modes: u8,
    report: EdgeReport,
    locations: [FindingLocation; 2],
}

impl TraceAnalysis {
    /// What the merge keeps of a part (a trace or a segment) analysed alone: its report and, per
    /// class edge of its graph (`graph`, the run's alone), one described witness, for the cycles
    /// that only several parts together close.
    pub(crate) fn of_part(run: &Run, report: Report, graph: &LockOrderGraph) -> TraceAnalysis {
        let edges = graph
            .edges
            .iter()
            .filter_map(|e| {
                let (report, locations) = match (e.witnesses.first(), e.earlier.first()) {
                    (Some(w), _) => {
                        let (h, r) = (
                            &run.acquisitions[w.held as usize],
                            &run.acquisitions[w.acquisition as usize],
                        );
                        (
                            edge_report(run, graph, w.held, w.acquisition),
                            [
                                location(run, h.site, h.thread, Role::Holds),
                                location(run, r.site, r.thread, Role::Requests),
                            ],
                        )
                    }
                    (None, Some(&(_, i))) => (
                        earlier_edge_report(run, graph, i),
                        earlier_edge_locations(run, i),
                    ),
                    (None, None) => return None,
                };
                Some(EdgeWitness {
                    from: graph.classes[e.from].clone(),
                    to: graph.classes[e.to].clone(),
                    count: e.count,
                    modes: e.modes,
                    report,
                    locations,
                })
            })
            .collect::<Vec<EdgeWitness>>();
        let on_edges: foldhash::HashSet<&str> = edges
            .iter()
            .flat_map(|e| [e.from.as_str(), e.to.as_str()])
            .collect();
        let lone_classes = graph
            .classes
            .iter()
            .filter(|c| !on_edges.contains(c.as_str()))
            .cloned()
            .collect();
        TraceAnalysis {
            report,
            edges,
            lone_classes,
        }
    }
}

/// The class edges of a lock-cycle finding, as (from, to) class names.
fn class_edges(f: &Finding) -> Option<BTreeSet<(&str, &str)>> {
    match &f.detail {
        Detail::LockCycle { edges, .. } => Some(
            edges
                .iter()
                .map(|e| (e.from_class.as_str(), e.to_class.as_str()))
                .collect(),
        ),
        _ => None,
    }
}

/// What the merge folds findings by: a finding's key, except for races, which fold by their
/// memory and unordered pair of lines whatever the access kinds of the instance each part
/// shows (one finding per thing to fix, as within one run: `analyses/races`). The finding
/// keeps the instance the first part showed, as a trace read whole shows the first instance
/// its race pass met, so that cutting a trace into segments changes counts, not the finding.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum MergeKey {
    Finding(FindingKey),
    Race(races::RaceGroup),
}

impl MergeKey {
    fn of(f: &Finding) -> MergeKey {
        match f.detail {
            Detail::Race(_) => MergeKey::Race(races::race_group(f)),
            _ => MergeKey::Finding(f.key()),
        }
    }
}

/// Per-trace analyses folded in one at a time, in the order of the traces: a finding already
/// seen only adds its traces and occurrences, so what is kept is the distinct findings, the
/// merged graph with one witness per edge, and one summary line per trace.
pub struct Merger {
    opts: Options,
    graph: LockOrderGraph,
    witnesses: HashMap<(usize, usize), (EdgeReport, [FindingLocation; 2])>,
    summary: Summary,
    traces: Vec<crate::report::TraceSummary>,
    /// The trace being folded in: what its hints are made of, over its segments.
    trace_tally: crate::wrapper_hints::HintTally,
    /// The hints of the traces folded in before it, each once.
    hints: Vec<String>,
    findings: Vec<Finding>,
    by_key: HashMap<MergeKey, usize>,
    /// Lock classes of the traces that are on no edge of theirs (a class on an edge is a
    /// node of `graph`): counted as nodes of the merged graph, as one analysis counts them.
    lone_classes: foldhash::HashSet<String>,
    /// Predicted deadlocks beyond a trace's listing, per component by its first class.
    unlisted_predicted: Vec<(String, u64, bool)>,
    /// Per part folded in (a trace, or a segment of one): the index of its trace in `traces`.
    /// The merged graph's edges name parts, so that a cycle whose edges are in different
    /// segments of one trace is not taken as whole in one.
    part_trace: Vec<usize>,
    /// Parts of the trace being folded in, while it is cut into segments.
    segments_of_last: usize,
}

impl Merger {
    /// A merge with no part yet, within `opts`' budgets and listing limits.
    pub fn new(opts: &Options) -> Self {
        Merger {
            opts: opts.clone(),
            graph: LockOrderGraph::default(),
            witnesses: HashMap::new(),
            summary: Summary {
                max_cycle_length: opts.max_cycle_length,
                ..Summary::default()
            },
            traces: Vec::new(),
            trace_tally: Default::default(),
            hints: Vec::new(),
            findings: Vec::new(),
            by_key: HashMap::new(),
            lone_classes: foldhash::HashSet::default(),
            unlisted_predicted: Vec::new(),
            part_trace: Vec::new(),
            segments_of_last: 0,
        }
    }

    /// Folds in the next trace's analysis.
    pub(crate) fn add(&mut self, part: TraceAnalysis) {
        self.add_part(part, false);
    }

    /// Folds in the next segment of the trace whose first segment was the last one added
    /// (`model::walk`): its findings fold into that trace's as another trace's
    /// would (same finding: occurrences add), its counts add to that trace's summary line,
    /// and a lock cycle whose edges are in different segments is potential, as one whose
    /// edges are in different traces.
    pub(crate) fn add_segment(&mut self, part: TraceAnalysis) {
        self.add_part(part, true);
    }

    /// Sets how many events a segment has (`--segment-events`), for the summary.
    pub fn set_segment_events(&mut self, n: u64) {
        self.summary.segment_events = n;
    }

    pub(crate) fn add_part(&mut self, part: TraceAnalysis, segment: bool) {
        let ti = self.part_trace.len();
        let continues = segment && !self.traces.is_empty();
        self.part_trace.push(if continues {
            self.traces.len() - 1
        } else {
            self.traces.len()
        });
        if continues {
            if self.segments_of_last == 1 {
                self.summary.segments += 1;
            }
            self.segments_of_last += 1;
            self.summary.segments += 1;
        } else {
            self.segments_of_last = 1;
        }
        self.lone_classes.extend(part.lone_classes);
        for e in part.edges {
            let (from, to) = (self.graph.class_id(&e.from), self.graph.class_id(&e.to));
            self.graph.add_class_edge(from, to, e.count, e.modes, ti);
            self.witnesses
                .entry((from, to))
                .or_insert((e.report, e.locations));
        }
        let r = part.report;
        if continues {
            let last = self.traces.last_mut().expect("a trace to continue");
            for t in r.traces {
                fold_trace_summary(last, t);
            }
        } else {
            self.traces.extend(r.traces);
        }
        // Counted over every segment of a trace, so that a hint's numbers are the trace's.
        if !continues {
            let done = std::mem::take(&mut self.trace_tally);
            add_hints(&mut self.hints, done.hints());
        }
        self.trace_tally.add(r.hint_tally);
        let s = &r.summary;
        let summary = &mut self.summary;
        summary.cycle_search_truncated |= s.cycle_search_truncated;
        summary.cycle_length_cut |= s.cycle_length_cut;
        summary.candidates_checked += s.candidates_checked;
        summary.candidate_budget_exhausted |= s.candidate_budget_exhausted;
        summary.race_candidates += s.race_candidates;
        summary.race_candidates_checked += s.race_candidates_checked;
        summary.race_budget_exhausted |= s.race_budget_exhausted;
        summary.race_pairs_capped += s.race_pairs_capped;
        summary.reversal_candidates += s.reversal_candidates;
        summary.reversal_unchecked += s.reversal_unchecked;
        for c in &r.components {
            if let Some(first) = c.class_names.first() {
                if c.predicted > c.listed_predicted as u64 || c.prediction_cut {
                    self.unlisted_predicted.push((
                        first.clone(),
                        c.predicted - c.listed_predicted as u64,
                        c.prediction_cut,
                    ));
                }
            }
        }
        for f in r.findings {
            let key = MergeKey::of(&f);
            match self.by_key.get(&key) {
                Some(&i) => {
                    let g = &mut self.findings[i];
                    g.occurrences += f.occurrences;
                    fold_blocking(g, &f);
                    for t in f.traces {
                        if !g.traces.contains(&t) {
                            g.traces.push(t);
                        }
                    }
                }
                None => {
                    self.by_key.insert(key, self.findings.len());
                    self.findings.push(f);
                }
            }
        }
    }

    /// The merged report.
    pub fn finish(self) -> Report {
        let Merger {
            opts,
            graph,
            witnesses,
            mut summary,
            traces,
            trace_tally,
            mut hints,
            mut findings,
            lone_classes,
            unlisted_predicted,
            part_trace,
            ..
        } = self;
        let opts = &opts;
        let mut traces = traces;
        crate::report::Coverage::settle_all(&mut traces);
        if summary.segments == 0 {
            // No trace was cut: each was analysed whole.
            summary.segment_events = 0;
        }
        summary.lock_classes = graph.classes.len()
            + lone_classes
                .iter()
                .filter(|c| graph.class_index(c).is_none())
                .count();
        summary.lock_order_edges = graph.edges.len();

        // A potential cycle that a predicted deadlock of some trace explains is not reported, as in
        // one analysis of every trace.
        // Class edges as merged-graph nodes: every class of a finding is in the graph.
        let indexed = |f: &Finding| -> Option<BTreeSet<(usize, usize)>> {
            class_edges(f)?
                .into_iter()
                .map(|(a, b)| Some((graph.class_index(a)?, graph.class_index(b)?)))
                .collect()
        };
        let covering: Vec<BTreeSet<(usize, usize)>> = findings
            .iter()
            .filter(|f| f.verdict == Verdict::Predicted)
            .filter_map(indexed)
            .collect();
        let covered = |edges: &mut dyn Iterator<Item = (usize, usize)>| {
            let edges: Vec<(usize, usize)> = edges.collect();
            covering.iter().any(|c| edges.iter().all(|e| c.contains(e)))
        };
        findings.retain(|f| {
            f.kind != Kind::PotentialDeadlock
                || indexed(f).is_none_or(|e| !covered(&mut e.into_iter()))
        });

        // The merged class graph: every cycle counted by component; those no trace has whole are
        // the cross-trace ones, the shortest kept to list.
        let adjacency = graph.adjacency();
        let scc = strongly_connected_components(&adjacency);
        let components = scc.iter().map(|&c| c + 1).max().unwrap_or(0);
        let mut by_length: Vec<Vec<u64>> = vec![Vec::new(); components];
        let mut potential: Vec<u64> = vec![0; components];
        let mut cross: Vec<Vec<CrossCycle>> = vec![Vec::new(); components];
        let mut edges: Vec<&ClassEdge> = Vec::new();
        // `cut`: as in `lock_cycles`, a shortest cycle of a component the search was cut in.
        let mut visit = |c: usize, cycle: &[usize], cut: bool| {
            let k = cycle.len();
            graph.cycle_edges(cycle, &mut edges);
            let modes: Vec<u8> = edges.iter().map(|e| e.modes).collect();
            if !modes_can_block(&modes) {
                return Flow::Continue;
            }
            if cut && by_length[c].iter().any(|&n| n > 0) {
                return Flow::Continue;
            }
            summary.class_cycles += 1;
            if by_length[c].len() < k {
                by_length[c].resize(k, 0);
            }
            by_length[c][k - 1] += 1;
            if !covering.is_empty() && covered(&mut edges.iter().map(|e| (e.from, e.to))) {
                return Flow::Continue;
            }
            potential[c] += 1;
            let whole_in_one = edges[0]
                .runs
                .iter()
                .any(|t| edges[1..].iter().all(|e| e.runs.contains(t)));
            if !whole_in_one {
                let seen = edges.iter().map(|e| e.count).min().unwrap_or(0);
                let entry = (k, std::cmp::Reverse(seen), cycle.to_vec());
                let list = &mut cross[c];
                if list.len() < opts.cycles_listed {
                    list.push(entry);
                } else if let Some(worst) = list.iter().map(|e| (e.0, e.1)).max() {
                    if (k, std::cmp::Reverse(seen)) < worst {
                        let at = list
                            .iter()
                            .position(|e| (e.0, e.1) == worst)
                            .expect("the worst is there");
                        list[at] = entry;
                    }
                }
            }
            Flow::Continue
        };
        let search = for_each_cycle(
            &adjacency,
            &scc,
            opts.max_cycle_length,
            opts.cycle_budget,
            |c, cycle| visit(c, cycle, false),
        );
        for &c in &search.cut_components {
            if let Some(cycle) = shortest_cycle(&adjacency, &scc, c, opts.cycle_budget) {
                visit(c, &cycle, true);
            }
        }
        let mut search_cut = vec![false; components];
        for &c in &search.cut_components {
            search_cut[c] = true;
        }
        summary.cycle_search_truncated |= search.truncated;
        summary.cycle_length_cut |= search.length_cut;
        for list in &cross {
            for (_, _, cycle) in list {
                findings.push(cross_trace_finding(
                    &graph,
                    &witnesses,
                    &traces,
                    &part_trace,
                    cycle,
                ));
            }
        }

        // Each component lists at most `cycles_listed` cycles of each verdict, shortest and most
        // seen first; every edge report counts its class edge over all traces.
        let component_of = |f: &Finding| {
            f.cycle()
                .first()
                .and_then(|c| graph.class_index(c))
                .map(|v| scc[v])
        };
        let mut order: Vec<usize> = (0..findings.len()).collect();
        order.sort_by_key(|&i| {
            let f = &findings[i];
            (
                f.verdict,
                f.cycle().len(),
                std::cmp::Reverse(f.occurrences),
                i,
            )
        });
        let mut listed: HashMap<(usize, Verdict), usize> = HashMap::new();
        let mut keep = vec![true; findings.len()];
        for &i in &order {
            let f = &findings[i];
            if !matches!(f.detail, Detail::LockCycle { .. }) {
                continue;
            }
            let Some(c) = component_of(f) else { continue };
            let n = listed.entry((c, f.verdict)).or_default();
            if *n >= opts.cycles_listed {
                keep[i] = false;
            } else {
                *n += 1;
            }
        }
        let mut predicted_found: Vec<u64> = vec![0; components];
        for f in &findings {
            if f.verdict == Verdict::Predicted && matches!(f.detail, Detail::LockCycle { .. }) {
                if let Some(c) = component_of(f) {
                    predicted_found[c] += 1;
                }
            }
        }
        let mut cut = vec![false; components];
        for (first, n, was_cut) in unlisted_predicted {
            if let Some(v) = graph.class_index(&first) {
                predicted_found[scc[v]] += n;
                cut[scc[v]] |= was_cut;
            }
        }
        let mut kept = keep.iter();
        findings.retain(|_| *kept.next().expect("one flag per finding"));
        for f in &mut findings {
            let edges: &mut [EdgeReport] = match &mut f.detail {
                Detail::LockCycle { edges, .. } => edges,
                Detail::RankViolation { edge, .. } => std::slice::from_mut(edge),
                _ => continue,
            };
            for e in edges {
                if let (Some(a), Some(b)) = (
                    graph.class_index(&e.from_class),
                    graph.class_index(&e.to_class),
                ) {
                    if let Some(ce) = graph.edge(a, b) {
                        e.edge_count = ce.count;
                    }
                }
            }
        }
        let mut summaries = Vec::new();
        for c in 0..components {
            let total: u64 = by_length[c].iter().sum();
            if total == 0 && predicted_found[c] == 0 && !search_cut[c] {
                continue;
            }
            let count = |v: Verdict| listed.get(&(c, v)).copied().unwrap_or(0);
            let mut s = component_summary(
                &graph,
                &scc,
                c,
                ComponentCounts {
                    by_length: std::mem::take(&mut by_length[c]),
                    predicted: predicted_found[c],
                    potential: potential[c].max(count(Verdict::Potential) as u64),
                    listed_predicted: count(Verdict::Predicted),
                    listed_potential: count(Verdict::Potential),
                    prediction_cut: cut[c],
                    search_cut: search_cut[c],
                },
            );
            s.id = summaries.len() + 1;
            summary.unlisted_predicted += s.predicted - s.listed_predicted as u64;
            summary.unlisted_potential += s.potential - s.listed_potential as u64;
            summaries.push(s);
        }

        // The order of one analysis: deadlocks before races, by verdict, shortest cycle first;
        // rank violations last.
        let rest = in_report_order(findings);
        let mut report = Report {
            schema: REPORT_SCHEMA,
            version: REPORT_VERSION,
            traces,
            summary,
            components: summaries,
            hints: {
                add_hints(&mut hints, trace_tally.hints());
                hints
            },
            hint_tally: Default::default(),
            findings: rest,
        };
        report.recount();
        report
    }
}

/// A class-level cycle whose edges come from different traces: potential, described by each
/// edge's first witness.
fn cross_trace_finding(
    graph: &LockOrderGraph,
    witnesses: &HashMap<(usize, usize), (EdgeReport, [FindingLocation; 2])>,
    traces: &[crate::report::TraceSummary],
    part_trace: &[usize],
    cycle: &[usize],
) -> Finding {
    let k = cycle.len();
    let mut edges = Vec::new();
    let mut locations = Vec::new();
    let mut in_traces: BTreeSet<usize> = BTreeSet::new();
    let mut occurrences = u64::MAX;
    for i in 0..k {
        let (a, b) = (cycle[i], cycle[(i + 1) % k]);
        let (report, locs) = &witnesses[&(a, b)];
        edges.push(report.clone());
        locations.extend(locs.iter().cloned());
        let e = graph.edge(a, b).expect("cycle edges exist");
        in_traces.extend(
            e.runs
                .iter()
                .map(|&p| part_trace.get(p).copied().unwrap_or(p)),
        );
        occurrences = occurrences.min(e.count);
    }
    let names: Vec<String> = cycle.iter().map(|&c| graph.classes[c].clone()).collect();
    // One trace holds every edge, in different segments of it: the cut, not the traces,
    // is what keeps the cycle from being predicted (other traces may hold edges too).
    let in_one_trace = in_traces.iter().any(|&t| {
        (0..k).all(|i| {
            let e = graph
                .edge(cycle[i], cycle[(i + 1) % k])
                .expect("cycle edges exist");
            e.runs
                .iter()
                .any(|&p| part_trace.get(p).copied().unwrap_or(p) == t)
        })
    });
    Finding {
        id: 0,
        kind: Kind::PotentialDeadlock,
        verdict: Verdict::Potential,
        rule: Rule::LockOrder,
        message: Message::InconsistentOrder {
            classes: names.clone(),
        },
        reason: if in_one_trace && !edges.iter().any(|e| e.earlier) {
            "not predicted: the edges of the cycle are in different segments of the trace, \
             analysed one at a time (--segment-events), and a prediction reorders events \
             within one segment only; the code still takes these locks in an inconsistent \
             order"
        } else if edges.iter().any(|e| e.earlier) {
            "not predicted: the edges of the cycle come from different traces, some seen \
             before the flight recorder's window, so no single execution can be reordered \
             into it; the code still takes these locks in an inconsistent order"
        } else {
            "not predicted: the edges of the cycle come from different traces, so no single \
             execution can be reordered into it; the code still takes these locks in an \
             inconsistent order"
        }
        .to_string(),
        traces: in_traces
            .into_iter()
            .filter_map(|t| traces.get(t).map(|s| s.path.clone()))
            .collect(),
        witness: None,
        occurrences,
        locations,
        detail: Detail::LockCycle {
            cycle: names,
            edges,
        },
    }
}

/// Adds a trace's hints to those of the traces before it, each hint once.
fn add_hints(into: &mut Vec<String>, hints: Vec<String>) {
    for h in hints {
        if !into.contains(&h) {
            into.push(h);
        }
    }
}

/// Adds a segment's summary line to its trace's: counts add up, warnings are listed once.
/// The same blocking call under the same locks in another part or trace: its calls add, the
/// longest duration is the longest of both.
fn fold_blocking(into: &mut Finding, other: &Finding) {
    if let (Detail::Blocking(a), Detail::Blocking(b)) = (&mut into.detail, &other.detail) {
        a.calls += b.calls;
        a.longest_ns = a.longest_ns.max(b.longest_ns);
        a.timeout_ns = crate::analyses::hazards::longest_timeout(a.timeout_ns, b.timeout_ns);
        let longest = a.longest_ns;
        if let crate::report::Message::BlockingUnderLock { longest_ns, .. } = &mut into.message {
            *longest_ns = longest;
        }
    }
}

fn fold_trace_summary(into: &mut crate::report::TraceSummary, s: crate::report::TraceSummary) {
    into.events += s.events;
    into.critical_sections += s.critical_sections;
    into.accesses += s.accesses;
    into.threads = into.threads.max(s.threads);
    into.locks = into.locks.max(s.locks);
    for w in s.warnings {
        if !into.warnings.contains(&w) {
            into.warnings.push(w);
        }
    }
    into.coverage.runtime = into.coverage.runtime.or(s.coverage.runtime);
    into.coverage.semaphores = into.coverage.semaphores.max(s.coverage.semaphores);
    into.coverage.process = into.coverage.process.or(s.coverage.process);
    // The trace's last part says how it ended.
    into.coverage.exec_at = s.coverage.exec_at;
    match (&mut into.window, s.window) {
        (Some(a), Some(b)) => a.earlier_edges += b.earlier_edges,
        (None, b) => into.window = b,
        _ => {}
    }
}

impl Merger {
    /// Whether a part was folded in.
    pub(crate) fn has_parts(&self) -> bool {
        !self.part_trace.is_empty()
    }

    /// Folds in a trace given as its parts: the whole trace, or its segments in order.
    pub fn add_trace(&mut self, parts: Vec<TraceAnalysis>) {
        for (i, p) in parts.into_iter().enumerate() {
            self.add_part(p, i > 0);
        }
    }
}

/// The order of a report: deadlocks before races, each by verdict, shortest cycle first; rank
/// violations last, in the order found (a broken declared rule, not a deadlock found).
pub(crate) fn in_report_order(findings: Vec<Finding>) -> Vec<Finding> {
    let (mut ranks, mut rest): (Vec<Finding>, Vec<Finding>) = findings
        .into_iter()
        .partition(|f| f.verdict == Verdict::Violation);
    rest.sort_by_cached_key(Finding::report_order);
    rest.append(&mut ranks);
    rest
}
