//! `foresight analyze` as a library: traces in, findings out. Runs the analyses over the
//! converted runs — the lock-order graph, lock cycles (`lock_cycles.rs`), waits and rwlocks
//! (`waits.rs`), ranks (`ranks.rs`), each of which makes its own findings — and assembles the
//! report: the order of the findings, the summary, what each trace held.
//!
//! Verdicts:
//! - **predicted**: an instance-level pattern of one trace whose sync-preserving closure
//!   (`closure.rs`) avoids every pattern event; the report carries the witness reordering;
//! - **potential**: a class-level cycle of the lock-order graph (possibly made of edges from
//!   different traces, or of same-class locks) with no predicted instance: an inconsistent lock
//!   order in the code, a design defect independent of timing (seed 001). The reason says why
//!   it was not predicted.

use crate::closure::Budget;
use crate::lock_graph::LockOrderGraph;
use crate::model::Run;
use crate::report::{Report, Summary, TraceSummary, REPORT_SCHEMA, REPORT_VERSION};

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

    let mut findings =
        crate::lock_cycles::lock_cycle_findings(runs, &graph, opts, &mut budget, &mut summary);
    for (ri, run) in runs.iter().enumerate() {
        if !run.hb.complete {
            continue;
        }
        findings.extend(crate::waits::wait_findings(run, ri, &mut budget));
        findings.extend(crate::waits::rwlock_findings(run, &mut budget));
    }
    findings.sort_by(|a, b| {
        (a.verdict, a.cycle().len(), a.kind.as_str(), &a.message).cmp(&(
            b.verdict,
            b.cycle().len(),
            b.kind.as_str(),
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
        hints: crate::sites::wrapper_hints(runs),
        findings,
    };
    report.recount();
    report
}
