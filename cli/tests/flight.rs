//! Bounded recording: a flight recorder's window (FORMAT.md §7.14–§7.15) on builder traces —
//! summary edges from before the window join the lock-order graph as evidence `earlier` and
//! close cycles only as potential — and with the real runtime: `record --keep-last` (an
//! inversion whose first half is before the window, a crash, a hang) and `record --max-size`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_analyzer::analysis::analyze;
use foresight_analyzer::model::build_run;
use foresight_analyzer::options::Options;
use foresight_analyzer::report::{Report, Rule, Verdict};
use foresight_fixtures::harness::{self, compile_hostile, compile_source, fresh_dir};
use foresight_trace::builder::TraceBuilder;
use foresight_trace::tables::{
    EarlierLockOrder, EndReason, RecordingWindow, StopCause, TableRecord, ThreadEndState,
};
use foresight_trace::Trace;

fn report_of(bytes: Vec<u8>) -> Report {
    let trace = Trace::from_bytes("w.trace", bytes).expect("trace reads");
    assert!(trace.problems.is_empty(), "{:?}", trace.problems);
    let run = build_run(&trace, &mut |_| {});
    analyze(&[run], &[], &Options::default())
}

fn show(r: &Report) -> String {
    let mut v = Vec::new();
    foresight_analyzer::report::text::write(&mut v, r).unwrap();
    String::from_utf8(v).unwrap()
}

fn window(thread: u32, dropped: u64) -> TableRecord {
    TableRecord::RecordingWindow(RecordingWindow {
        thread,
        first_sequence: 0,
        events_dropped: dropped,
        dropped_until_ns: 0,
        keep_last: 8 << 20,
        snapshot_signal: 0,
    })
}

/// Thread `one` takes B then A in the window; the summary says a thread took A then B before
/// it (with `summary`), at lines 10 and 11.
fn inversion(summary: bool) -> Vec<u8> {
    let mut b = TraceBuilder::new("flight");
    let main = b.main_thread();
    let a = b.mutex("A");
    let bb = b.mutex("B");
    let s = b.site("f", "t.c", 1);
    let one = b.spawn(main, s, "one");
    let (s20, s21, s99) = (
        b.site("late", "t.c", 20),
        b.site("late", "t.c", 21),
        b.site("late", "t.c", 99),
    );
    b.lock(one, bb, s20);
    b.lock(one, a, s21);
    b.unlock(one, a, s99);
    b.unlock(one, bb, s99);
    let (s10, s11) = (b.site("early", "t.c", 10), b.site("early", "t.c", 11));
    b.table_record(window(main, 5));
    b.table_record(window(one, 0));
    if summary {
        b.table_record(TableRecord::EarlierLockOrder(EarlierLockOrder {
            held: a,
            requested: bb,
            count: 3,
            thread: 7,
            held_site: s10,
            site: s11,
        }));
    }
    b.finish()
}

#[test]
fn an_inversion_whose_first_half_is_before_the_window_is_potential() {
    let r = report_of(inversion(true));
    let text = show(&r);
    assert_eq!(r.summary.predicted, 0, "{text}");
    let p: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Potential && f.rule == Rule::LockOrder)
        .collect();
    assert_eq!(p.len(), 1, "{text}");
    assert!(
        p[0].reason
            .contains("seen before the flight recorder's window"),
        "{}",
        p[0].reason
    );
    let lines: Vec<u32> = p[0].locations.iter().filter_map(|l| l.line).collect();
    for line in [10, 11, 20, 21] {
        assert!(lines.contains(&line), "line {line} in {lines:?}");
    }
    assert!(
        text.contains("seen 3 times before the flight recorder's window"),
        "{text}"
    );
    assert!(text.contains("a flight recorder's window"), "{text}");
    let w = r.traces[0].window.as_ref().expect("the trace is a window");
    assert_eq!(
        (w.events_dropped, w.threads_dropped, w.earlier_edges),
        (5, 1, 1)
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["traces"][0]["window"]["earlier_edges"], 1);
    let edges = json["findings"][0]["edges"].as_array().unwrap();
    assert!(edges.iter().any(|e| e["earlier"] == true), "{edges:?}");
}

#[test]
fn without_the_summary_there_is_no_cycle_and_a_whole_trace_has_no_window() {
    let r = report_of(inversion(false));
    assert!(r.findings.is_empty(), "{}", show(&r));
    assert!(r.traces[0].window.is_some());
    let mut b = TraceBuilder::new("whole");
    let main = b.main_thread();
    let a = b.mutex("A");
    let s = b.site("f", "t.c", 1);
    b.lock(main, a, s);
    b.unlock(main, a, s);
    let r = report_of(b.finish());
    assert!(r.traces[0].window.is_none());
    assert!(!show(&r).contains("flight recorder"));
}

#[test]
fn summary_edges_alone_close_a_cycle_as_potential() {
    let mut b = TraceBuilder::new("flight");
    let main = b.main_thread();
    let a = b.mutex("A");
    let bb = b.mutex("B");
    let s = b.site("f", "t.c", 1);
    b.lock(main, a, s);
    b.unlock(main, a, s);
    b.table_record(window(main, 100));
    for (held, requested) in [(a, bb), (bb, a)] {
        b.table_record(TableRecord::EarlierLockOrder(EarlierLockOrder {
            held,
            requested,
            count: 1,
            thread: 9,
            held_site: s,
            site: s,
        }));
    }
    let r = report_of(b.finish());
    assert_eq!(r.summary.potential, 1, "{}", show(&r));
    assert_eq!(r.summary.predicted, 0);
}

/// A worker waits on a condition nobody signals and main joins it; the trace ends without a
/// trailer, both threads blocked, as a snapshot taken on `signal` (0: a trace cut short).
fn stall_snapshot(signal: u32) -> Vec<u8> {
    use foresight_trace::event::EventKind;
    use foresight_trace::tables::{ObjectKind, ThreadEnd};
    let mut b = TraceBuilder::new("snapshot");
    let main = b.main_thread();
    let (m, c) = (b.mutex("m"), b.object(ObjectKind::Condition, "c"));
    let s = b.site("f", "t.c", 1);
    let w = b.spawn(main, s, "worker");
    let s10 = b.site("work", "t.c", 10);
    b.lock(w, m, s10);
    let site = b.site("work", "t.c", 11);
    b.event(
        w,
        EventKind::CondWaitBegin {
            cond: c,
            mutex: m,
            site,
        },
    );
    let site = b.site("main", "t.c", 30);
    b.event(main, EventKind::JoinRequest { child: w, site });
    for t in [main, w] {
        b.table_record(TableRecord::ThreadEnd(ThreadEnd {
            thread: t,
            state: ThreadEndState::Blocked,
        }));
        b.table_record(TableRecord::RecordingWindow(RecordingWindow {
            thread: t,
            first_sequence: 0,
            events_dropped: 0,
            dropped_until_ns: 0,
            keep_last: 1 << 20,
            snapshot_signal: signal,
        }));
    }
    b.finish_without_trailer()
}

#[test]
fn a_snapshot_reports_threads_stuck_waiting_as_an_observed_stall() {
    let r = report_of(stall_snapshot(12));
    let stalls: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Observed)
        .collect();
    assert_eq!(stalls.len(), 1, "{}", show(&r));
    let text = show(&r);
    assert!(
        text.contains("a snapshot was taken on SIGUSR2 (signal 12) while the process ran"),
        "{text}"
    );
    // The same trace cut short (no snapshot): the end states alone do not make a stall, since
    // nothing says the run was stopped.
    let t = Trace::from_bytes("w.trace", stall_snapshot(0)).expect("trace reads");
    assert!(t
        .problems
        .iter()
        .any(|p| matches!(p.kind, foresight_trace::ProblemKind::NoTrailer)));
    let run = build_run(&t, &mut |_| {});
    let r = analyze(&[run], &[], &Options::default());
    assert!(
        r.findings.iter().all(|f| f.verdict != Verdict::Observed),
        "{}",
        show(&r)
    );
}

// --- recorded ---------------------------------------------------------------------------------

fn foresight(dir: &Path) -> Command {
    harness::foresight_in(Path::new(env!("CARGO_BIN_EXE_foresight")), dir)
}

fn record(dir: &Path, args: &[&str], program: &Path, program_args: &[&str]) -> Output {
    foresight(dir)
        .arg("record")
        .args(args)
        .arg("--")
        .arg(program)
        .args(program_args)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn flight_fixture(name: &str) -> PathBuf {
    compile_source(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/flight")
            .join(format!("{name}.c")),
    )
}

#[test]
fn a_recorded_inversion_split_by_the_window_is_reported_as_potential() {
    let exe = flight_fixture("early_inversion");
    let dir = fresh_dir("flight-inversion");
    let o = record(&dir, &["-o", "t.trace", "--keep-last", "256K"], &exe, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done\n");
    assert!(
        stderr(&o).contains("flight recorder window"),
        "{}",
        stderr(&o)
    );
    let path = dir.join("t.trace");
    let t = Trace::open(&path).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert!(t.tables.is_window());
    assert!(t.tables.window.values().any(|w| w.events_dropped > 0));
    assert!(!t.tables.earlier_lock_order.is_empty());
    let o = foresight(&dir)
        .args(["analyze", "--format", "json", "t.trace"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let findings = json["findings"].as_array().unwrap();
    let potential: Vec<_> = findings
        .iter()
        .filter(|f| f["verdict"] == "potential" && f["kind"] == "potential-deadlock")
        .collect();
    assert_eq!(potential.len(), 1, "{findings:#?}");
    assert!(potential[0]["reason"]
        .as_str()
        .unwrap()
        .contains("seen before the flight recorder's window"));
    let lines: Vec<u64> = potential[0]["locations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["line"].as_u64())
        .collect();
    // a then b early (before the window), b then a late (in it).
    for line in [27, 28, 36, 37] {
        assert!(lines.contains(&line), "line {line} in {lines:?}");
    }
}

#[test]
fn a_thread_blocked_since_before_the_window_keeps_its_last_events() {
    let exe = flight_fixture("stuck_while_busy");
    let dir = fresh_dir("flight-stuck");
    let o = record(&dir, &["-o", "t.trace", "--keep-last", "256K"], &exe, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "busy done\n");
    let err = stderr(&o);
    assert!(err.contains("T1: blocked in lock-request b"), "{err}");
    assert!(err.contains("T2: blocked in lock-request a"), "{err}");
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert!(
        t.tables
            .window
            .get(&3)
            .is_some_and(|w| w.events_dropped > 0),
        "the busy thread's events overflowed the window: {:?}",
        t.tables.window
    );
    let o = foresight(&dir)
        .args(["analyze", "--format", "json", "t.trace"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let findings = json["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f["verdict"] == "observed" && f["kind"] == "observed-deadlock"),
        "{findings:#?}"
    );
}

#[test]
fn a_window_stays_within_its_bound_and_is_written_on_a_crash() {
    let exe = compile_hostile("lock_pairs");
    let dir = fresh_dir("flight-bound");
    let bound = 256u64 << 10;
    let o = record(
        &dir,
        &["-o", "t.trace", "--keep-last", "256K", "--no-symbolize"],
        &exe,
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "400000 pairs\n");
    let len = std::fs::metadata(dir.join("t.trace")).unwrap().len();
    assert!(len <= bound, "{len} > {bound}");
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert!(t.event_count() > 10_000, "the window holds events");

    let exe = compile_hostile("crash");
    let dir = fresh_dir("flight-crash");
    let o = record(
        &dir,
        &["-o", "t.trace", "--keep-last", "1M"],
        &exe,
        &["segv"],
    );
    assert_eq!(o.status.code(), Some(128 + 11), "{}", stderr(&o));
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(
        t.trailer.as_ref().unwrap().reason,
        EndReason::Signal { signal: 11 }
    );
    assert!(t.tables.is_window());
    assert!(t.thread(1).is_some_and(|e| !e.events.is_empty()));
}

#[test]
fn a_hang_in_flight_recorder_mode_is_stopped_and_its_window_written() {
    let exe = compile_hostile("abba_deadlock");
    let dir = fresh_dir("flight-hang");
    let o = record(
        &dir,
        &["-o", "t.trace", "--keep-last", "1M", "--hang-timeout", "1"],
        &exe,
        &[],
    );
    assert_eq!(o.status.code(), Some(128 + 9), "{}", stderr(&o));
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert!(t.tables.is_window());
    assert_eq!(
        t.tables.recording_stopped.map(|s| s.cause),
        Some(StopCause::HangTimeout { ms: 1000 })
    );
    assert_eq!(t.tables.thread_ends.get(&1), Some(&ThreadEndState::Blocked));
}

#[test]
fn max_size_stops_recording_and_the_program_runs_on() {
    let exe = compile_hostile("lock_pairs");
    let dir = fresh_dir("max-size");
    // Uncompressed: compressed, these repetitive lock pairs stay far below the bound.
    let o = record(
        &dir,
        &[
            "-o",
            "t.trace",
            "--max-size",
            "256K",
            "--compress",
            "never",
            "--no-symbolize",
        ],
        &exe,
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "400000 pairs\n");
    assert!(stderr(&o).contains("--max-size"), "{}", stderr(&o));
    let len = std::fs::metadata(dir.join("t.trace")).unwrap().len();
    assert!(len <= 256 << 10, "{len}");
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(t.trailer.is_some());
    assert_eq!(
        t.tables.recording_stopped.map(|s| s.cause),
        Some(StopCause::FileSizeLimit { limit: 256 << 10 })
    );
    assert!(!t.tables.is_window());
}

#[test]
fn sizes_are_checked() {
    let dir = fresh_dir("flight-args");
    for bad in ["12", "8X", "-1", "1K"] {
        let o = foresight(&dir)
            .args(["record", "--keep-last", bad, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
    }
    let o = foresight(&dir)
        .args([
            "record",
            "--keep-last",
            "1M",
            "--max-size",
            "1M",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// Waits for a file the recorded program writes (a snapshot takes its name once complete).
fn wait_for(path: &Path, child: &mut std::process::Child) {
    for _ in 0..6000 {
        if path.exists() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the run ended ({status}) before {} appeared",
                path.display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    panic!("{} did not appear", path.display());
}

#[test]
fn dump_on_writes_snapshots_of_a_running_process() {
    use std::io::{BufRead, BufReader, Read};
    let exe = flight_fixture("dump_on_deadlock");
    let dir = fresh_dir("flight-dump-on");
    let mut child = foresight(&dir)
        .args([
            "record",
            "-o",
            "t.trace",
            "--keep-last",
            "256K",
            "--dump-on",
            "USR2",
            "--",
        ])
        .arg(&exe)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let pid: i32 = line
        .strip_prefix("stuck ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    let kill = |sig| {
        // SAFETY: kill with a pid and a signal number has no memory-safety preconditions.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    };
    // The first to the program, the second to `record`, which passes it on.
    kill(libc::SIGUSR2);
    wait_for(&dir.join("t.trace.snapshot-1"), &mut child);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGUSR2) }, 0);
    wait_for(&dir.join("t.trace.snapshot-2"), &mut child);
    kill(libc::SIGTERM);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    // The dumps changed nothing the program did: its output, its own SIGTERM handler.
    assert_eq!(rest, "bye\n", "{err}");
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(
        err.contains("snapshot written to t.trace.snapshot-1"),
        "{err}"
    );
    assert!(
        err.contains("snapshot written to t.trace.snapshot-2"),
        "{err}"
    );
    assert!(!dir.join("t.trace.snapshot-3").exists());

    for n in 1..=2 {
        let path = dir.join(format!("t.trace.snapshot-{n}"));
        let t = Trace::open(&path).unwrap();
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        assert!(t.trailer.is_none(), "a snapshot has no trailer");
        assert!(t.tables.is_window());
        assert_eq!(t.tables.snapshot_signal(), Some(libc::SIGUSR2 as u32));
        let blocked = t
            .tables
            .thread_ends
            .values()
            .filter(|&&s| s == ThreadEndState::Blocked)
            .count();
        assert_eq!(blocked, 2, "{:?}", t.tables.thread_ends);
        // The busy thread overflowed the window before the first snapshot: what the two
        // blocked threads wait in was kept all the same.
        assert!(
            t.tables.window.values().any(|w| w.events_dropped > 0),
            "{:?}",
            t.tables.window
        );
    }
    // The run's trace is the run's only process: snapshots are not siblings.
    let o = foresight(&dir)
        .args(["analyze", "--format", "json", "t.trace"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["traces"].as_array().unwrap().len(), 1, "{json:#}");
    // A snapshot is analysed by naming it: the deadlock it saw, at the program's lines.
    let o = foresight(&dir)
        .args(["analyze", "--format", "json", "t.trace.snapshot-1"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        json["traces"][0]["window"]["snapshot_signal"],
        libc::SIGUSR2,
        "{json:#}"
    );
    let findings = json["findings"].as_array().unwrap();
    let observed: Vec<_> = findings
        .iter()
        .filter(|f| f["verdict"] == "observed" && f["kind"] == "observed-deadlock")
        .collect();
    assert_eq!(observed.len(), 1, "{findings:#?}");
    let lines: Vec<u64> = observed[0]["locations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["line"].as_u64())
        .collect();
    // The two second requests, where the threads wait.
    for line in [29, 38] {
        assert!(lines.contains(&line), "line {line} in {lines:?}");
    }
    let o = foresight(&dir)
        .args(["stats", "t.trace.snapshot-2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("snapshot taken on SIGUSR2"), "{text}");
    assert!(!text.contains("CUT SHORT"), "{text}");
}

#[test]
fn dump_on_is_checked() {
    let dir = fresh_dir("flight-dump-on-args");
    for args in [
        &["--dump-on", "USR2"][..],
        &["--keep-last", "1M", "--dump-on", "KILL"],
        &["--keep-last", "1M", "--dump-on", "9"],
        &["--keep-last", "1M", "--dump-on", "SIGSEGV"],
        &["--keep-last", "1M", "--dump-on", "STOP"],
        &["--keep-last", "1M", "--dump-on", "NOPE"],
    ] {
        let o = foresight(&dir)
            .arg("record")
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}
