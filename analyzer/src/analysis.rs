//! `foresight analyze` as a library: traces in, findings out. Runs the analyses over the
//! converted runs — the lock-order graph, lock cycles (`lock_cycles.rs`), waits and rwlocks
//! (`waits.rs`), ranks (`ranks.rs`), each of which makes its own findings — and assembles the
//! report: the order of the findings, the summary, what each trace held.
//!
//! Verdicts:
//! - **observed**: threads the trace says were blocked when it ended, in a cycle or stalled
//!   (`observed.rs`); a predicted or potential finding whose blocking calls were those of an
//!   observed deadlock is not reported again;
//! - **predicted**: an instance-level pattern of one trace whose sync-preserving closure
//!   (`closure.rs`) avoids every pattern event; the report carries the witness reordering;
//! - **potential**: a class-level cycle of the lock-order graph (possibly made of edges from
//!   different traces, or of same-class locks) with no predicted instance: an inconsistent lock
//!   order in the code, a design defect independent of timing (seed 001). The reason says why
//!   it was not predicted.

use crate::analyses::{Budgets, Output, Part, REGISTRY};
use crate::lock_graph::LockOrderGraph;
use crate::model::Run;
use crate::options::Options;
use crate::report::{
    Finding, Kind, Report, Summary, TraceSummary, Verdict, REPORT_SCHEMA, REPORT_VERSION,
};

/// Analyses the runs (one per trace) together. `warnings[i]` are the reader's problems of run i.
pub fn analyze(runs: &[Run], warnings: &[Vec<String>], opts: &Options) -> Report {
    analyze_with_graph(runs, warnings, opts).0
}

/// [`analyze`], also giving the lock-order graph it was made from (the runs' edges, each run
/// by its index), for a caller that needs the graph too: it is built once, not again.
pub fn analyze_with_graph(
    runs: &[Run],
    warnings: &[Vec<String>],
    opts: &Options,
) -> (Report, LockOrderGraph) {
    let mut graph = LockOrderGraph::default();
    for (i, run) in runs.iter().enumerate() {
        graph.add_run(i, run);
    }
    let mut summary = Summary {
        lock_classes: graph.classes.len(),
        lock_order_edges: graph.edges.len(),
        max_cycle_length: opts.max_cycle_length,
        ..Summary::default()
    };
    let part = Part {
        runs,
        graph: &graph,
        opts,
    };
    let mut budgets = Budgets::new(opts);
    let mut out = Output::default();
    for analysis in REGISTRY {
        analysis.analyze(&part, &mut budgets, &mut summary, &mut out);
    }
    for analysis in REGISTRY {
        analysis.settle(&mut out.findings);
    }
    let Output {
        findings,
        components,
    } = out;
    summary.candidates_checked = budgets.deadlock.checked;
    summary.candidate_budget_exhausted = budgets.deadlock.exhausted;
    summary.race_candidates_checked = budgets.race.checked;
    summary.race_budget_exhausted = budgets.race.exhausted;
    let findings = in_report_order(findings);
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
                critical_sections: r.acquisitions.len() - r.carried as usize,
                accesses: r.races.accesses,
                window: r.window.map(|w| crate::report::WindowSummary {
                    keep_last: w.keep_last,
                    events_dropped: w.events_dropped,
                    threads_dropped: w.threads_dropped,
                    earlier_edges: r.earlier.len(),
                    snapshot_signal: w.snapshot_signal,
                }),
                warnings: {
                    let mut w = warnings.get(i).cloned().unwrap_or_default();
                    if !r.hb.complete {
                        w.push(format!(
                            "{} threads: the vector clocks outgrew their memory budget, so no \
                             deadlock is predicted from this trace (lock order only)",
                            r.threads.len()
                        ));
                    }
                    if r.races.accesses > 0 && !r.races.complete {
                        w.push(format!(
                            "{} threads: the race pass's clocks outgrew their memory budget, \
                             so no race is reported from this trace",
                            r.threads.len()
                        ));
                    }
                    if r.races.orphan_accesses > 0 {
                        w.push(format!(
                            "{} memory accesses of threads whose creation is not in the trace \
                             (the process ended while they were being created) were left out \
                             of the race analysis",
                            r.races.orphan_accesses
                        ));
                    }
                    if r.races.evicted > 0 {
                        w.push(format!(
                            "{} shadow entries were dropped from full granules: some pairs of \
                             racing lines may be missing",
                            r.races.evicted
                        ));
                    }
                    w
                },
            })
            .collect(),
        summary,
        components,
        hints: crate::wrapper_hints::wrapper_hints(runs),
        findings,
    };
    report.recount();
    (report, graph)
}

/// The order of a report: deadlocks before races, each by verdict, shortest cycle first; rank
/// violations last, in the order found (a broken declared rule, not a deadlock found).
pub(crate) fn in_report_order(findings: Vec<Finding>) -> Vec<Finding> {
    let (mut ranks, mut rest): (Vec<Finding>, Vec<Finding>) = findings
        .into_iter()
        .partition(|f| f.verdict == Verdict::Violation);
    rest.sort_by(|a, b| {
        let key = |f: &Finding| {
            (
                f.verdict,
                f.kind == Kind::Race,
                f.cycle().len(),
                f.kind.as_str(),
                f.message.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    rest.append(&mut ranks);
    rest
}
