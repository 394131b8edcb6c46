//! A trace analysed in segments (`--segment-events`): what a segment predicts, what a cut
//! must not make it predict, and what it can only call potential. Builder traces, whose
//! merged order is the order of the builder's calls, so each test knows where its cuts fall.

mod common;

use common::T;
use foresight_analyzer::analysis::analyze;
use foresight_analyzer::analysis::{analyze_in_bounds, analyze_in_segments};
use foresight_analyzer::model::{build_run, SegmentBounds, DEFAULT_SEGMENT_EVENTS};
use foresight_analyzer::options::Options;
use foresight_analyzer::report::{Finding, Report, Rule, Verdict};
use foresight_analyzer::sites::Wrappers;
use foresight_trace::event::{EventKind, ObjectId, ThreadId};
use foresight_trace::Trace;

impl T {
    /// `t` takes `first` then `second` and releases both.
    /// `n` critical sections of `t` on a lock of its own: events that order nothing.
    fn filler(&mut self, t: ThreadId, own: ObjectId, n: usize) {
        for _ in 0..n {
            self.lock(t, own, 50);
            self.unlock(t, own);
        }
    }
    fn trace(self) -> Trace {
        Trace::from_bytes("t.trace", self.b.finish()).expect("trace reads")
    }
}

/// The merged index of the first event of `thread` that `pick` matches: where a cut can be
/// put. (The builder's call order is not the merged order: a request, a read or a write takes
/// its thread's previous ordering key, so it sorts right after that thread's previous event.)
fn at(trace: &Trace, thread: ThreadId, pick: impl Fn(&EventKind) -> bool) -> u64 {
    trace
        .merged()
        .position(|m| m.thread == thread && pick(&m.event.kind))
        .expect("the event is in the trace") as u64
}

fn acquired(lock: ObjectId) -> impl Fn(&EventKind) -> bool {
    move |k| matches!(k, EventKind::LockAcquired { lock: l, .. } if *l == lock)
}

fn requested(lock: ObjectId) -> impl Fn(&EventKind) -> bool {
    move |k| matches!(k, EventKind::LockRequest { lock: l, .. } if *l == lock)
}

fn released(lock: ObjectId) -> impl Fn(&EventKind) -> bool {
    move |k| matches!(k, EventKind::LockRelease { lock: l, .. } if *l == lock)
}

fn written(k: &EventKind) -> bool {
    matches!(k, EventKind::Write { addr, .. } if *addr == X)
}

fn whole(trace: &Trace) -> Report {
    analyze(&[build_run(trace, &mut |_| {})], &[], &Options::default())
}

fn segmented(trace: &Trace, n: u64) -> Report {
    analyze_in_segments(trace, &Wrappers::default(), &Options::default(), n)
}

fn deadlocks(r: &Report, verdict: Verdict) -> Vec<Finding> {
    r.findings
        .iter()
        .filter(|f| f.verdict == verdict && f.cycle().len() >= 2)
        .cloned()
        .collect()
}

fn show(r: &Report) -> String {
    let mut v = Vec::new();
    foresight_analyzer::report::text::write(&mut v, r).unwrap();
    String::from_utf8(v).unwrap()
}

fn json(r: &Report) -> String {
    let mut v = Vec::new();
    foresight_analyzer::report::json::write(&mut v, r).unwrap();
    String::from_utf8(v).unwrap()
}

/// Threads spawned, a filler of `pad` sections, an inversion between two threads, another
/// filler; returns the trace and the merged index of the inversion's first acquisition and
/// of its last event.
fn inversion_after(pad: usize) -> (Trace, u64, u64) {
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let own = t.b.mutex("own");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.filler(t.main, own, pad);
    t.nest(t1, a, b, 10);
    t.nest(t2, b, a, 20);
    t.filler(t.main, own, pad);
    let trace = t.trace();
    let first = at(&trace, t1, acquired(a));
    let last = at(&trace, t2, released(a));
    // The pattern's requests (one's of B, two's of A) come after the first acquisition.
    assert!(at(&trace, t1, requested(b)) > first && at(&trace, t2, requested(a)) > first);
    (trace, first, last)
}

#[test]
fn an_inversion_inside_one_segment_is_predicted() {
    let (trace, first, last) = inversion_after(40);
    assert!(whole(&trace).summary.segments <= 1);
    assert_eq!(deadlocks(&whole(&trace), Verdict::Predicted).len(), 1);
    // The second segment starts at the inversion's first event and holds all of it.
    let n = first;
    assert!(last < 2 * n, "the inversion fits in segment 1");
    let r = segmented(&trace, n);
    assert!(r.summary.segments >= 3, "{}", show(&r));
    let d = deadlocks(&r, Verdict::Predicted);
    assert_eq!(d.len(), 1, "{}", show(&r));
    assert!(d[0].witness.is_some());
    // Segments of one trace are one trace: one summary line, its counts added up.
    assert_eq!(r.traces.len(), 1);
    assert_eq!(r.traces[0].events, whole(&trace).traces[0].events);
    assert_eq!(
        r.traces[0].critical_sections,
        whole(&trace).traces[0].critical_sections
    );
    assert!(
        r.traces[0].warnings.is_empty(),
        "{:?}",
        r.traces[0].warnings
    );
    assert!(
        show(&r).contains("segments of"),
        "the report says predictions stay within a segment: {}",
        show(&r)
    );
}

#[test]
fn a_section_open_across_the_cut_still_orders_the_segment() {
    // One takes G, then (after the cut) nests A then B and only then releases G; two takes G
    // afterwards and then nests B then A, holding nothing else. Two can reach its request of
    // A only after one released G, which is after one's whole A→B: no deadlock. A segment
    // that forgot one's open section on G would reorder two's G section before it and
    // predict one.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let g = t.b.mutex("G");
    let own = t.b.mutex("own");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.lock(t1, g, 5);
    t.filler(t.main, own, 10);
    t.nest(t1, a, b, 10);
    t.unlock(t1, g);
    t.lock(t2, g, 30);
    t.unlock(t2, g);
    t.nest(t2, b, a, 20);
    t.filler(t.main, own, 10);
    let trace = t.trace();
    let cut = at(&trace, t1, acquired(a));
    assert!(
        at(&trace, t1, acquired(g)) < cut,
        "one holds G across the cut"
    );
    assert!(
        at(&trace, t2, released(a)) < 2 * cut,
        "the pattern fits in segment 1"
    );
    let w = whole(&trace);
    assert!(deadlocks(&w, Verdict::Predicted).is_empty(), "{}", show(&w));
    let r = segmented(&trace, cut);
    assert!(r.summary.segments >= 2, "{}", show(&r));
    assert!(
        deadlocks(&r, Verdict::Predicted).is_empty(),
        "the open section on G was dropped at the cut: {}",
        show(&r)
    );
    // The inversion is still there at class level, and G's release in segment 1 found its
    // acquisition (no warning, the critical sections counted once).
    assert_eq!(deadlocks(&r, Verdict::Potential).len(), 1, "{}", show(&r));
    assert!(
        r.traces[0].warnings.is_empty(),
        "{:?}",
        r.traces[0].warnings
    );
    assert_eq!(r.traces[0].critical_sections, w.traces[0].critical_sections);
}

#[test]
fn a_section_open_across_the_cut_keeps_its_lock_held_for_a_gate() {
    // Both threads hold G around their nesting: a gate lock. One took G before the cut.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let g = t.b.mutex("G");
    let own = t.b.mutex("own");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.lock(t1, g, 5);
    t.filler(t.main, own, 10);
    t.nest(t1, a, b, 10);
    t.unlock(t1, g);
    t.lock(t2, g, 30);
    t.nest(t2, b, a, 20);
    t.unlock(t2, g);
    t.filler(t.main, own, 10);
    let trace = t.trace();
    let cut = at(&trace, t1, acquired(a));
    assert!(
        at(&trace, t1, acquired(g)) < cut,
        "one holds G across the cut"
    );
    assert!(at(&trace, t2, released(g)) < 2 * cut);
    let r = segmented(&trace, cut);
    assert!(r.summary.segments >= 2);
    assert!(deadlocks(&r, Verdict::Predicted).is_empty(), "{}", show(&r));
    let p = deadlocks(&r, Verdict::Potential);
    assert_eq!(p.len(), 1, "{}", show(&r));
    assert!(p[0].reason.contains("gate lock"), "{}", p[0].reason);
}

#[test]
fn an_inversion_split_across_two_segments_is_potential() {
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let own = t.b.mutex("own");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.nest(t1, a, b, 10);
    t.filler(t.main, own, 20);
    t.nest(t2, b, a, 20);
    t.filler(t.main, own, 20);
    let trace = t.trace();
    let cut = at(&trace, t2, acquired(b));
    assert!(
        at(&trace, t1, released(a)) < cut,
        "one's nesting before the cut"
    );
    let w = whole(&trace);
    assert_eq!(
        deadlocks(&w, Verdict::Predicted).len(),
        1,
        "whole, it is predicted: {}",
        show(&w)
    );
    let r = segmented(&trace, cut);
    assert!(
        deadlocks(&r, Verdict::Predicted).is_empty(),
        "a prediction across the cut: {}",
        show(&r)
    );
    let p = deadlocks(&r, Verdict::Potential);
    assert_eq!(p.len(), 1, "{}", show(&r));
    assert!(p[0].reason.contains("segments"), "{}", p[0].reason);
    assert_eq!(p[0].traces, vec!["t.trace".to_string()]);
    assert_eq!(r.traces.len(), 1);
}

#[test]
fn segments_larger_than_the_trace_give_the_whole_trace_report() {
    for pad in [0, 5, 40] {
        let (trace, ..) = inversion_after(pad);
        let events = whole(&trace).traces[0].events;
        for n in [0, events, events + 1, 1 << 30] {
            assert_eq!(
                json(&segmented(&trace, n)),
                json(&whole(&trace)),
                "pad {pad}, segments of {n}"
            );
        }
    }
}

#[test]
fn a_cut_at_every_event_predicts_nothing_and_misses_no_class_cycle() {
    // The extreme: one event a segment. Nothing can be reordered, so nothing is predicted;
    // the class-level cycle is still found, across segments.
    let (trace, ..) = inversion_after(3);
    let r = segmented(&trace, 1);
    assert!(deadlocks(&r, Verdict::Predicted).is_empty(), "{}", show(&r));
    assert_eq!(deadlocks(&r, Verdict::Potential).len(), 1, "{}", show(&r));
    assert_eq!(r.traces[0].events, whole(&trace).traces[0].events);
    assert_eq!(
        r.traces[0].critical_sections,
        whole(&trace).traces[0].critical_sections
    );
    // The lock-order graph is the same size whatever the cut: the filler's lock, on no edge,
    // is one of its classes too.
    let w = whole(&trace);
    assert_eq!(
        (r.summary.lock_classes, r.summary.lock_order_edges),
        (w.summary.lock_classes, w.summary.lock_order_edges),
        "{}",
        show(&r)
    );
}

fn races(r: &Report) -> Vec<Finding> {
    r.findings
        .iter()
        .filter(|f| f.kind == foresight_analyzer::report::Kind::Race)
        .cloned()
        .collect()
}

const X: u64 = 0x1000;

/// `a`: x = 1 inside or outside a section on m; `b`: a section on m, then x = 2 — only the
/// lock hand-off orders the writes. With `a_holds_across`, `a` took m before the cut and
/// writes x inside that section.
fn hand_off(a_holds_across: bool) -> (Trace, u64, ThreadId, ThreadId) {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let m = t.b.mutex("m");
    let own = t.b.mutex("own");
    let line_site = |t: &mut T, line| t.b.site("f", "t.c", line);
    if a_holds_across {
        t.lock(a, m, 5);
    }
    t.filler(t.main, own, 10);
    // An access takes its thread's last ordering key: a's section on a lock of its own puts
    // the write after main's filler in the merged order.
    let own_a = t.b.mutex("own_a");
    t.filler(a, own_a, 1);
    let s = line_site(&mut t, 10);
    t.b.write(a, X, 4, s);
    if !a_holds_across {
        t.lock(a, m, 5);
    }
    t.unlock(a, m);
    t.lock(b, m, 6);
    t.unlock(b, m);
    let s = line_site(&mut t, 20);
    t.b.write(b, X, 4, s);
    t.filler(t.main, own, 10);
    let trace = t.trace();
    let cut = at(&trace, a, acquired(own_a));
    if a_holds_across {
        assert!(at(&trace, a, acquired(m)) < cut, "a holds m across the cut");
    }
    assert!(at(&trace, b, written) < 2 * cut);
    (trace, cut, a, b)
}

#[test]
fn a_race_inside_one_segment_is_predicted() {
    let (trace, cut, ..) = hand_off(false);
    let w = whole(&trace);
    assert_eq!(races(&w).len(), 1, "{}", show(&w));
    let r = segmented(&trace, cut);
    assert!(r.summary.segments >= 2);
    let found = races(&r);
    assert_eq!(found.len(), 1, "{}", show(&r));
    assert_eq!(found[0].rule, Rule::SyncPreserving);
}

#[test]
fn a_section_open_across_the_cut_orders_a_race_candidate() {
    // a's write is inside its section on m, taken before the cut: keeping the sections'
    // order, b's section, and so b's write, can only come after a's release. Whole, only a
    // reversal of the two sections exposes the race (b's empty section first); a segment
    // never reorders what came before it, and one that forgot a's open section would predict
    // it by keeping the order.
    let (trace, cut, ..) = hand_off(true);
    let w = whole(&trace);
    let rules: Vec<Rule> = races(&w).iter().map(|f| f.rule).collect();
    assert_eq!(rules, [Rule::SyncReversal], "{}", show(&w));
    let r = segmented(&trace, cut);
    assert!(r.summary.segments >= 2);
    assert!(races(&r).is_empty(), "{}", show(&r));
}

#[test]
fn a_race_whose_first_access_is_before_the_cut_is_not_predicted() {
    let (trace, _, a, b) = hand_off(false);
    // The first segment ends with a's write, b's write is in the second: the pair straddles
    // the cut and no reordering of the second segment alone can run the write next to b's.
    let n = at(&trace, a, written) + 1;
    assert!(at(&trace, b, written) >= n && at(&trace, b, written) < 2 * n);
    let w = whole(&trace);
    assert_eq!(races(&w).len(), 1, "{}", show(&w));
    let r = segmented(&trace, n);
    assert!(r.summary.segments >= 2);
    assert!(races(&r).is_empty(), "{}", show(&r));
}

/// The child takes L, then marks itself done under m; main waits until it sees that under m
/// and then joins it holding L. Whole, m is a monitor (main signals a condition holding it,
/// at the end): main's section on m comes after the child's, so the join cannot come before
/// the child's request of L. `between` adds events between the join and the signal (where a
/// segment is cut); the trace and main's thread are returned.
fn monitor_known_only_after_the_join(
    between: impl FnOnce(&mut T, ThreadId, ObjectId),
) -> (Trace, ThreadId, ObjectId) {
    let (bytes, main, own) = monitor_trace_bytes(between);
    let trace = Trace::from_bytes("t.trace", bytes).expect("trace reads");
    (trace, main, own)
}

/// The trace of [`monitor_known_only_after_the_join`], as a file holds it.
fn monitor_trace_bytes(
    between: impl FnOnce(&mut T, ThreadId, ObjectId),
) -> (Vec<u8>, ThreadId, ObjectId) {
    let mut t = T::new();
    let l = t.b.mutex("L");
    let m = t.b.mutex("m");
    let own = t.b.mutex("own");
    let c =
        t.b.object(foresight_trace::tables::ObjectKind::Condition, "c");
    let child = t.spawn("child");
    let main = t.main;
    t.lock(child, l, 10);
    t.unlock(child, l);
    t.lock(child, m, 11);
    t.unlock(child, m);
    t.b.exit(child);
    t.lock(main, m, 20);
    t.unlock(main, m);
    t.lock(main, l, 21);
    let s = t.at(22);
    t.b.join(main, child, s);
    t.unlock(main, l);
    between(&mut t, main, own);
    t.lock(main, m, 30);
    let s = t.at(31);
    t.b.event(main, EventKind::CondSignal { cond: c, site: s });
    t.unlock(main, m);
    (t.b.finish(), main, own)
}

/// Join-while-holding findings predicted (not merely potential).
fn predicted_joins(r: &Report) -> usize {
    r.findings
        .iter()
        .filter(|f| f.rule == Rule::JoinWhileHolding && f.verdict == Verdict::Predicted)
        .count()
}

#[test]
fn a_lock_that_becomes_a_monitor_later_is_one_in_earlier_segments() {
    // The segment of the join is cut before the signal: it must know m is a monitor all the
    // same, or it would predict a join deadlock.
    let (trace, main, own) =
        monitor_known_only_after_the_join(|t, main, own| t.filler(main, own, 10));
    let w = whole(&trace);
    assert_eq!(predicted_joins(&w), 0, "{}", show(&w));
    assert!(
        w.findings.iter().any(|f| f.rule == Rule::JoinWhileHolding),
        "the join is a (potential) finding: {}",
        show(&w)
    );
    let cut = at(&trace, main, acquired(own));
    assert!(at(&trace, main, |k| matches!(k, EventKind::CondSignal { .. })) >= cut);
    let r = segmented(&trace, cut);
    assert!(r.summary.segments >= 2, "{}", show(&r));
    assert_eq!(predicted_joins(&r), 0, "{}", show(&r));
}

#[test]
fn analyze_cut_in_segments_learns_the_later_monitors_first() {
    // As above, through `foresight analyze --segment-events`: the command's first read of
    // the threads, before the walk, finds m a monitor.
    let (bytes, main, own) = monitor_trace_bytes(|t, main, own| t.filler(main, own, 10));
    let trace = Trace::from_bytes("t.trace", bytes.clone()).expect("trace reads");
    let cut = at(&trace, main, acquired(own)).to_string();
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("monitor.trace");
    std::fs::write(&path, bytes).expect("trace written");
    let report: serde_json::Value = serde_json::from_slice(&common::analyze_ok(
        &["--format", "json", "--segment-events", &cut],
        &path,
    ))
    .expect("JSON report");
    assert!(
        report["summary"]["segments"].as_u64() >= Some(2),
        "{report}"
    );
    let joins = |verdict: &str| {
        report["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter(|f| f["rule"] == "join-while-holding" && f["verdict"] == verdict)
            .count()
    };
    assert_eq!(joins("predicted"), 0, "{report}");
    assert_eq!(
        joins("potential"),
        1,
        "the join is a potential finding: {report}"
    );
}

#[test]
fn a_segment_cut_by_the_threads_started_in_it_knows_the_later_monitors() {
    // As above, but the trace is short: the cut comes from the threads started in the segment
    // (`--segment-threads`), before a third thread's first event, between the join and the
    // signal that makes m a monitor. The walk must scan for monitors all the same.
    let (trace, _, _) = monitor_known_only_after_the_join(|t, _, own| {
        let late = t.spawn("late");
        t.filler(late, own, 2);
    });
    let bounds = |threads| SegmentBounds {
        events: DEFAULT_SEGMENT_EVENTS,
        threads,
    };
    let analysed = |threads| {
        analyze_in_bounds(
            &trace,
            &Wrappers::default(),
            &Options::default(),
            bounds(threads),
        )
    };
    // Main and the child start in the first segment; the late thread's start is cut off.
    let r = analysed(2);
    assert_eq!(r.summary.segments, 2, "{}", show(&r));
    assert_eq!(predicted_joins(&r), 0, "{}", show(&r));
    assert!(
        r.findings.iter().any(|f| f.rule == Rule::JoinWhileHolding),
        "the join is a (potential) finding: {}",
        show(&r)
    );
    // With room for the three threads, or no bound on threads, the trace is whole.
    for threads in [3, 0] {
        let r = analysed(threads);
        assert_eq!(
            json(&r),
            json(&whole(&trace)),
            "{threads} threads a segment"
        );
    }
}

#[test]
fn a_condition_wait_a_later_segment_could_still_end_is_not_predicted() {
    // The waiter holds L while it waits on c; the signaller takes L before it signals. Whole,
    // a third thread signals c later as well, so the wait can still end: not predicted. The
    // segment of the wait is cut before that signal, and must not take it as the only one.
    let mut t = T::new();
    let l = t.b.mutex("L");
    let m = t.b.mutex("M");
    let own = t.b.mutex("own");
    let c =
        t.b.object(foresight_trace::tables::ObjectKind::Condition, "ready");
    let t1 = t.spawn("waiter");
    let t2 = t.spawn("signaller");
    let t3 = t.spawn("late");
    t.lock(t2, l, 10);
    t.unlock(t2, l);
    t.lock(t1, l, 20);
    t.lock(t1, m, 21);
    let site = t.at(22);
    t.b.event(
        t1,
        EventKind::CondWaitBegin {
            cond: c,
            mutex: m,
            site,
        },
    );
    t.lock(t2, m, 11);
    let site = t.at(12);
    t.b.event(t2, EventKind::CondSignal { cond: c, site });
    t.unlock(t2, m);
    t.b.event(
        t1,
        EventKind::CondWaitEnd {
            cond: c,
            mutex: m,
            outcome: foresight_trace::event::WaitOutcome::Woken,
        },
    );
    t.unlock(t1, m);
    t.unlock(t1, l);
    t.filler(t.main, own, 10);
    t.lock(t3, m, 30);
    let site = t.at(31);
    t.b.event(t3, EventKind::CondSignal { cond: c, site });
    t.unlock(t3, m);
    let main = t.main;
    let trace = t.trace();
    let waits = |r: &Report| {
        r.findings
            .iter()
            .filter(|f| f.rule == Rule::CondWaitWhileHolding)
            .map(|f| f.verdict)
            .collect::<Vec<_>>()
    };
    let w = whole(&trace);
    assert_eq!(waits(&w), [Verdict::Potential], "{}", show(&w));
    let cut = at(&trace, main, acquired(own));
    assert!(at(&trace, t1, released(l)) < cut);
    let r = segmented(&trace, cut);
    assert!(r.summary.segments >= 2);
    assert_eq!(waits(&r), [Verdict::Potential], "{}", show(&r));
}

#[test]
fn the_cli_reads_a_trace_in_segments() {
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let own = t.b.mutex("own");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.nest(t1, a, b, 10);
    t.filler(t.main, own, 20);
    t.nest(t2, b, a, 20);
    t.filler(t.main, own, 20);
    let bytes = t.b.finish();
    let trace = Trace::from_bytes("t.trace", bytes.clone()).unwrap();
    let cut = at(&trace, t2, acquired(b));
    let dir = std::env::temp_dir().join(format!("foresight-segments-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("split.trace");
    std::fs::write(&path, &bytes).unwrap();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
            .args(args)
            .arg(&path)
            .output()
            .expect("run foresight");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let n = cut.to_string();
    let json: serde_json::Value = serde_json::from_str(&run(&[
        "analyze",
        "--format",
        "json",
        "--segment-events",
        &n,
    ]))
    .unwrap();
    assert!(json["summary"]["segments"].as_u64().unwrap() >= 2, "{json}");
    assert_eq!(json["summary"]["segment_events"], cut);
    assert_eq!(json["summary"]["predicted"], 0, "{json}");
    assert_eq!(json["summary"]["potential"], 1, "{json}");
    assert_eq!(json["traces"].as_array().unwrap().len(), 1);
    assert_eq!(json["traces"][0]["events"], trace.event_count());
    let text = run(&["analyze", "--segment-events", &n]);
    assert!(text.contains("segments of"), "{text}");
    let whole: serde_json::Value = serde_json::from_str(&run(&[
        "analyze",
        "--format",
        "json",
        "--segment-events",
        "0",
    ]))
    .unwrap();
    assert_eq!(whole["summary"]["predicted"], 1, "{whole}");
    assert_eq!(whole["summary"]["segments"], 0);
    // The default segment is far longer than this trace: the whole trace's report.
    assert_eq!(
        run(&["analyze", "--format", "json"]),
        run(&["analyze", "--format", "json", "--segment-events", "0"])
    );
    // Two traces, each cut: two summary lines, each with its own events; the one cycle is
    // potential and names both.
    let other = dir.join("again.trace");
    std::fs::write(&other, &bytes).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args([
            "analyze",
            "--format",
            "json",
            "--root-only",
            "--segment-events",
            &n,
        ])
        .arg(&path)
        .arg(&other)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let both: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(both["traces"].as_array().unwrap().len(), 2, "{both}");
    assert_eq!(both["traces"][1]["events"], trace.event_count());
    assert_eq!(both["summary"]["predicted"], 0, "{both}");
    assert_eq!(both["summary"]["potential"], 1, "{both}");
    assert_eq!(
        both["findings"][0]["traces"].as_array().unwrap().len(),
        2,
        "{both}"
    );
    // Each trace holds the whole cycle, cut: the reason is the cut, not the traces.
    let reason = both["findings"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("segments"), "{reason}");
    assert!(!reason.contains("different traces"), "{reason}");
    // `check` takes the option too: the cycle is a finding either way.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(["check", "--segment-events", &n])
        .arg(&path)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_deadlock_the_run_ended_in_is_observed_after_many_cuts() {
    use foresight_trace::event::LockMode;
    use foresight_trace::tables::{EndReason, ThreadEndState};
    // Two threads take a lock each and request the other's early on; a third thread goes on
    // locking for many segments; the run is ended by a signal with both blocked. The locks
    // held and the requests cross every cut.
    let mut t = T::new();
    let (a, b) = (t.b.mutex("a"), t.b.mutex("b"));
    let own = t.b.mutex("own");
    let t1 = t.spawn("ab");
    let t2 = t.spawn("ba");
    let busy = t.spawn("busy");
    t.lock(t1, a, 10);
    t.lock(t2, b, 20);
    let s = t.at(11);
    t.b.event(
        t1,
        EventKind::LockRequest {
            lock: b,
            mode: LockMode::Exclusive,
            site: s,
        },
    );
    let s = t.at(21);
    t.b.event(
        t2,
        EventKind::LockRequest {
            lock: a,
            mode: LockMode::Exclusive,
            site: s,
        },
    );
    t.filler(busy, own, 40);
    let main = t.main;
    let blocked = ThreadEndState::Blocked;
    let bytes = t.b.finish_ended(
        EndReason::Signal { signal: 15 },
        &[
            (main, ThreadEndState::Running),
            (t1, blocked),
            (t2, blocked),
        ],
        None,
    );
    let trace = Trace::from_bytes("t.trace", bytes).unwrap();
    let observed = |r: &Report| {
        r.findings
            .iter()
            .filter(|f| f.verdict == Verdict::Observed)
            .map(|f| {
                let mut lines: Vec<(String, u32)> = f
                    .locations
                    .iter()
                    .map(|l| (l.role.to_string(), l.line.unwrap_or(0)))
                    .collect();
                lines.sort();
                (f.rule, lines)
            })
            .collect::<Vec<_>>()
    };
    let w = whole(&trace);
    assert_eq!(observed(&w).len(), 1, "{}", show(&w));
    for n in [5, 13, 30] {
        let r = segmented(&trace, n);
        assert!(r.summary.segments >= 3, "{}", show(&r));
        assert_eq!(observed(&r), observed(&w), "segments of {n}: {}", show(&r));
        assert!(deadlocks(&r, Verdict::Predicted).is_empty(), "{}", show(&r));
        assert_eq!(r.traces[0].critical_sections, w.traces[0].critical_sections);
    }
}

/// A race on one variable between the same two lines, shown as a read and a write in one
/// segment and as two writes in another, is one finding of the trace read in segments, as it
/// is of the trace read whole: the instances are counted and the first one is shown, so that
/// where the cuts fall changes no finding and no baseline key.
#[test]
fn a_race_whose_segments_show_other_access_kinds_is_one_finding() {
    const X: u64 = 0x1000;
    let mut t = T::new();
    let own = t.b.mutex("own");
    let reader = t.spawn("reader");
    let writer = t.spawn("writer");
    let (s10, s20) = (t.at(10), t.at(20));
    t.b.read(reader, X, 4, s10);
    t.b.write(writer, X, 4, s20);
    t.join(reader);
    t.join(writer);
    t.filler(t.main, own, 30);
    let again = t.spawn("again");
    let other = t.spawn("other");
    t.b.write(again, X, 4, s10);
    t.b.write(other, X, 4, s20);
    t.join(again);
    t.join(other);
    let bytes = t.b.finish();
    let trace = Trace::from_bytes("t.trace", bytes.clone()).unwrap();
    let cut = at(&trace, t.main, acquired(own)) + 1;
    let dir = std::env::temp_dir().join(format!("foresight-race-fold-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("race.trace");
    std::fs::write(&path, &bytes).unwrap();
    let json = |segment: &str| -> serde_json::Value {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
            .args(["analyze", "--format", "json", "--segment-events", segment])
            .arg(&path)
            .output()
            .expect("run foresight");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let races = |r: &serde_json::Value| -> Vec<serde_json::Value> {
        r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "race")
            .cloned()
            .collect()
    };
    let roles = |f: &serde_json::Value| -> Vec<String> {
        f["locations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| format!("{} {}", l["role"].as_str().unwrap(), l["line"]))
            .collect()
    };
    let whole = json("0");
    let cut_json = json(&cut.to_string());
    assert!(
        cut_json["summary"]["segments"].as_u64().unwrap() >= 2,
        "{cut_json}"
    );
    for r in [&whole, &cut_json] {
        let found = races(r);
        assert_eq!(found.len(), 1, "{r:#}");
        assert_eq!(found[0]["occurrences"], 2, "{r:#}");
        assert_eq!(roles(&found[0]), ["reads 10", "writes 20"], "{r:#}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
