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

use crate::closure::Budget;
use crate::lock_graph::LockOrderGraph;
use crate::model::Run;
use crate::options::Options;
use crate::report::{Report, Summary, TraceSummary, REPORT_SCHEMA, REPORT_VERSION};

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
    let mut budget = Budget::new(opts.candidate_budget, opts.closure_steps);
    let mut summary = Summary {
        lock_classes: graph.classes.len(),
        lock_order_edges: graph.edges.len(),
        max_cycle_length: opts.max_cycle_length,
        ..Summary::default()
    };

    let (mut findings, components) =
        crate::lock_cycles::lock_cycle_findings(runs, &graph, opts, &mut budget, &mut summary);
    for c in &components {
        summary.unlisted_predicted += c.predicted - c.listed_predicted as u64;
        summary.unlisted_potential += c.potential - c.listed_potential as u64;
    }
    for (ri, run) in runs.iter().enumerate() {
        if !run.hb.complete {
            continue;
        }
        findings.extend(crate::waits::wait_findings(run, ri, &mut budget));
        findings.extend(crate::waits::rwlock_findings(run, &mut budget));
    }
    for run in runs {
        findings.extend(crate::observed::observed_findings(run));
    }
    crate::observed::drop_superseded(&mut findings);
    let mut race_budget = Budget::new(opts.race_candidate_budget, 0);
    for run in runs {
        let (races, stats) = crate::race_findings::race_findings(run, &run.races, &mut race_budget);
        summary.race_candidates += stats.candidate_pairs;
        summary.race_pairs_capped += stats.capped;
        findings.extend(races);
    }
    summary.race_candidates_checked = race_budget.checked;
    summary.race_budget_exhausted = race_budget.exhausted;
    // Deadlocks before races, each by verdict, shortest cycle first.
    findings.sort_by(|a, b| {
        let key = |f: &crate::report::Finding| {
            (
                f.verdict,
                f.kind == crate::report::Kind::Race,
                f.cycle().len(),
                f.kind.as_str(),
                f.message.clone(),
            )
        };
        key(a).cmp(&key(b))
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
                    w.extend(crate::race_findings::cut_warnings(r));
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
