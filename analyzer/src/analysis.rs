//! The one driver of the analyses, for every trace length: the walk hands out the runs of a
//! trace's parts (the whole trace, or its segments, `--segment-events`); each part is analysed
//! alone ([`analyze_part`]: every analysis of the registry, `analyses/`, over that part's run,
//! within its budgets), and the parts of every trace are merged once (`merge.rs`), whether
//! there is one part or thousands: the same findings, verdicts and counts whatever the number
//! of parts, but for what the cut itself costs (a prediction reorders the events of one part
//! only, ARCHITECTURE.md I9 and I11).
//!
//! Verdicts:
//! - **observed**: threads the trace says were blocked when it ended, in a cycle or stalled
//!   (`analyses/observed`); a predicted or potential finding whose blocking calls were those
//!   of an observed deadlock is not reported again;
//! - **predicted**: an instance-level pattern of one part whose sync-preserving closure
//!   (`closure.rs`) avoids every pattern event; the report carries the witness reordering;
//! - **potential**: a class-level cycle of the lock-order graph (possibly made of edges from
//!   different traces or segments, or of same-class locks) with no predicted instance: an
//!   inconsistent lock order in the code, a design defect independent of timing (seed 001).
//!   The reason says why it was not predicted.

use crate::analyses::{Budgets, Output, Part, REGISTRY};
use crate::lock_graph::LockOrderGraph;
use crate::merge::{in_report_order, Merger, TraceAnalysis};
use crate::model::Run;
use crate::options::Options;
use crate::report::{Report, Summary, TraceSummary, REPORT_SCHEMA, REPORT_VERSION};

/// Analyses the runs of separate traces, each whole (one part each), and merges them: the
/// report `foresight analyze` gives for those traces. `warnings[i]` are the reader's problems
/// of run i.
pub fn analyze(runs: &[Run], warnings: &[Vec<String>], opts: &Options) -> Report {
    let mut merger = Merger::new(opts);
    for (i, run) in runs.iter().enumerate() {
        let w = warnings.get(i).cloned().unwrap_or_default();
        merger.add(analyze_part(run, w, opts));
    }
    merger.finish()
}

/// One part (a trace, or a segment of one) analysed alone: what the merge keeps of it.
pub fn analyze_part(run: &Run, warnings: Vec<String>, opts: &Options) -> TraceAnalysis {
    let (report, graph) = part_report(std::slice::from_ref(run), &[warnings], opts);
    TraceAnalysis::of_part(run, report, &graph)
}

/// The registry's analyses over a part's runs, and the part's report; with the lock-order
/// graph it was made from (the runs' edges, each run by its index), for the merge.
fn part_report(runs: &[Run], warnings: &[Vec<String>], opts: &Options) -> (Report, LockOrderGraph) {
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
    // Hints per trace (its runs are its segments), each hint once: a hint's numbers are its
    // trace's. The part's tally, for the merge, is the traces' added up.
    let mut hints: Vec<String> = Vec::new();
    let mut hint_tally = crate::wrapper_hints::HintTally::default();
    let mut start = 0;
    while start < runs.len() {
        let end = start
            + runs[start..]
                .iter()
                .take_while(|r| r.source == runs[start].source)
                .count();
        let tally = crate::wrapper_hints::HintTally::of_runs(&runs[start..end]);
        for h in tally.hints() {
            if !hints.contains(&h) {
                hints.push(h);
            }
        }
        hint_tally.add(tally);
        start = end;
    }
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
                coverage: crate::report::Coverage {
                    runtime: r.recording.runtime,
                    semaphores: r.recording.semaphores,
                    process: r.end.process,
                    exec_at: r.end.exec.map(|s| {
                        r.sites
                            .get(&s)
                            .map_or_else(|| format!("site {s}"), |l| l.text.clone())
                    }),
                    ..Default::default()
                },
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
                    if r.hb.writes_not_followed > 0 {
                        w.push(format!(
                            "the reads-from table's memory budget ({} MiB) was full: {} writes \
                             to memory first written after that were not followed, so a \
                             predicted deadlock or race may need a read of that memory to read \
                             another write than it did",
                            crate::last_writers::MEMORY_BUDGET >> 20,
                            r.hb.writes_not_followed
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
                    w.extend(crate::analyses::races::cut_warnings(r));
                    w
                },
            })
            .collect(),
        summary,
        components,
        hints,
        hint_tally,
        findings,
    };
    report.recount();
    (report, graph)
}

/// One trace's parts as the walk hands them out (`model::walk`): each segment's
/// run is analysed alone ([`analyze_part`]) and dropped, what the merge needs of it kept
/// (`Merger::add_segment`). A trace that was not cut is the same with one part.
pub struct SegmentFold<'o> {
    opts: &'o Options,
    segment_events: u64,
    parts: Vec<TraceAnalysis>,
    /// For a trace reported alone ([`SegmentFold::finish`]): the segments folded as they come,
    /// so that what is kept is the distinct findings, not a report per segment.
    merger: Option<Merger>,
}

impl<'o> SegmentFold<'o> {
    /// Keeps each segment's analysis, for [`SegmentFold::into_parts`].
    pub fn new(opts: &'o Options, segment_events: u64) -> Self {
        SegmentFold {
            opts,
            segment_events,
            parts: Vec::new(),
            merger: None,
        }
    }

    /// Folds each segment's analysis in as it comes, for [`SegmentFold::finish`].
    pub fn folding(opts: &'o Options, segment_events: u64) -> Self {
        let mut merger = Merger::new(opts);
        merger.set_segment_events(segment_events);
        SegmentFold {
            merger: Some(merger),
            ..Self::new(opts, segment_events)
        }
    }

    /// A segment that is not the last: analysed now, its model dropped.
    pub fn segment(&mut self, run: Run) {
        let part = analyze_part(&run, Vec::new(), self.opts);
        drop(run);
        match &mut self.merger {
            Some(m) if !m.has_parts() => m.add(part),
            Some(m) => m.add_segment(part),
            None => self.parts.push(part),
        }
    }

    /// The trace's parts for a [`Merger`], the last segment (or the whole trace) included.
    pub fn into_parts(mut self, last: Run, warnings: Vec<String>) -> Vec<TraceAnalysis> {
        debug_assert!(self.merger.is_none(), "into_parts of a folding SegmentFold");
        self.parts.push(analyze_part(&last, warnings, self.opts));
        self.parts
    }

    /// The trace's report.
    pub fn finish(self, last: Run, warnings: Vec<String>) -> Report {
        let part = analyze_part(&last, warnings, self.opts);
        drop(last);
        let mut m = match self.merger {
            Some(m) => m,
            None => {
                let mut m = Merger::new(self.opts);
                m.set_segment_events(self.segment_events);
                for (i, p) in self.parts.into_iter().enumerate() {
                    m.add_part(p, i > 0);
                }
                m
            }
        };
        m.add_segment(part);
        m.finish()
    }
}

/// Whether a trace of `events` events (unknown: `None`) and `threads` threads may be cut into
/// segments and has conditions, so that its monitor locks must be known before the walk
/// (`model/monitors.rs`).
pub fn will_be_cut(
    tables: &foresight_trace::tables::Tables,
    events: Option<u64>,
    threads: usize,
    bounds: crate::model::SegmentBounds,
) -> bool {
    bounds.may_cut(events, threads)
        && tables
            .objects
            .values()
            .any(|o| o.kind == foresight_trace::tables::ObjectKind::Condition)
}

/// Analyses a decoded trace in segments of `segment_events` events (0: whole) and the default
/// bound on threads, as `foresight analyze --segment-events` does with a file's stream.
pub fn analyze_in_segments(
    trace: &foresight_trace::Trace,
    wrappers: &crate::sites::Wrappers,
    opts: &Options,
    segment_events: u64,
) -> Report {
    analyze_in_bounds(
        trace,
        wrappers,
        opts,
        crate::model::SegmentBounds::of_events(segment_events),
    )
}

/// Analyses a decoded trace in segments cut at `bounds`, as `foresight analyze
/// --segment-events --segment-threads` does with a file's stream.
pub fn analyze_in_bounds(
    trace: &foresight_trace::Trace,
    wrappers: &crate::sites::Wrappers,
    opts: &Options,
    bounds: crate::model::SegmentBounds,
) -> Report {
    let segment_events = bounds.events;
    use crate::model::{walk, ModelPass, MonitorScan};
    let stream = crate::stream::Stream::of_trace(trace);
    let mut monitors = MonitorScan::default();
    if will_be_cut(
        &trace.tables,
        Some(trace.event_count()),
        trace.threads.len(),
        bounds,
    ) {
        for t in &trace.threads {
            monitors.scan_thread(t.events.iter().map(|e| &e.kind));
        }
    }
    let model = ModelPass::for_trace(trace)
        .with_monitors(monitors)
        .with_wrappers(
            wrappers
                .clone()
                .for_recorded_depth(trace.header.stack_depth),
        )
        .with_end_reason(trace.trailer.as_ref().map(|t| t.reason))
        .with_process(&trace.header);
    let mut fold = SegmentFold::folding(opts, segment_events);
    let last = walk(
        &stream,
        model,
        trace.merged().map(|m| (m.thread, m.index, m.event.kind)),
        &mut |_| {},
        bounds,
        &mut |run| fold.segment(run),
        None,
    );
    fold.finish(last, Vec::new())
}
