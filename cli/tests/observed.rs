//! Observed deadlocks and stalls, behaviour by behaviour, on traces written with the builder:
//! threads left blocked when the trace ended (their end states, FORMAT.md §7.12) are reported
//! with verdict `observed`, and what they were reported as before (a prediction) is not said
//! again.

mod common;

use common::T;
use foresight_analyzer::analysis::analyze;
use foresight_analyzer::model::build_run;
use foresight_analyzer::options::Options;
use foresight_analyzer::report::{BlockingCall, Finding, Kind, Report, Rule, ThreadState, Verdict};
use foresight_trace::event::{EventKind, LockMode, ObjectId, ThreadId};
use foresight_trace::tables::{EndReason, ObjectKind, RecordingStopped, StopCause, ThreadEndState};
use foresight_trace::Trace;

const BLOCKED: ThreadEndState = ThreadEndState::Blocked;
const SIGTERM: EndReason = EndReason::Signal { signal: 15 };

impl T {
    fn request(&mut self, t: ThreadId, lock: ObjectId, mode: LockMode, line: u32) {
        let site = self.at(line);
        self.b.event(t, EventKind::LockRequest { lock, mode, site });
    }
    fn join_request(&mut self, t: ThreadId, child: ThreadId, line: u32) {
        let site = self.at(line);
        self.b.event(t, EventKind::JoinRequest { child, site });
    }
    fn ended(
        self,
        reason: EndReason,
        ends: &[(ThreadId, ThreadEndState)],
        stopped: Option<StopCause>,
    ) -> Report {
        let bytes = self.b.finish_ended(
            reason,
            ends,
            stopped.map(|cause| RecordingStopped { unix_ns: 1, cause }),
        );
        report_of(bytes)
    }
}

fn report_of(bytes: Vec<u8>) -> Report {
    let trace = Trace::from_bytes("t.trace", bytes).expect("trace reads");
    assert!(
        trace
            .problems
            .iter()
            .all(|p| matches!(p.kind, foresight_trace::ProblemKind::NoTrailer)),
        "{:?}",
        trace.problems
    );
    let run = build_run(&trace, &mut |_| {});
    analyze(&[run], &[], &Options::default())
}

fn observed(r: &Report) -> Vec<&Finding> {
    r.findings
        .iter()
        .filter(|f| f.verdict == Verdict::Observed)
        .collect()
}

fn show(r: &Report) -> String {
    let mut out = Vec::new();
    foresight_analyzer::report::text::write(&mut out, r).unwrap();
    String::from_utf8(out).unwrap()
}

fn lines(f: &Finding, role: &str) -> Vec<u32> {
    let mut l: Vec<u32> = f
        .locations
        .iter()
        .filter(|l| l.role.name() == role)
        .filter_map(|l| l.line)
        .collect();
    l.sort_unstable();
    l
}

/// Two threads each holding one lock and requesting the other; main in a join of the first.
fn abba() -> (T, ThreadId, ThreadId) {
    let mut t = T::new();
    let (a, b) = (t.b.mutex("a"), t.b.mutex("b"));
    let t1 = t.spawn("ab");
    let t2 = t.spawn("ba");
    t.lock(t1, a, 10);
    t.lock(t2, b, 20);
    t.request(t1, b, LockMode::Exclusive, 11);
    t.request(t2, a, LockMode::Exclusive, 21);
    let main = t.main;
    t.join_request(main, t1, 30);
    (t, t1, t2)
}

#[test]
fn a_lock_cycle_of_blocked_threads_is_an_observed_deadlock_and_not_a_prediction() {
    let (t, t1, t2) = abba();
    let main = t.main;
    let r = t.ended(
        SIGTERM,
        &[(main, BLOCKED), (t1, BLOCKED), (t2, BLOCKED)],
        None,
    );
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    let f = o[0];
    assert_eq!(
        (f.kind, f.rule),
        (Kind::ObservedDeadlock, Rule::BlockedLockCycle)
    );
    assert_eq!(lines(f, "holds"), [10, 20]);
    assert_eq!(lines(f, "requests"), [11, 21]);
    assert_eq!(lines(f, "joins"), [30], "main waits for the cycle");
    assert_eq!(f.cycle().len(), 2, "the requested lock classes");
    let d = f.observed().unwrap();
    assert_eq!(d.cycle.len(), 2);
    assert_eq!(d.threads[2].waits, Some(BlockingCall::Join));
    assert!(f.reason.contains("SIGTERM"), "{}", f.reason);
    assert!(
        r.findings.iter().all(|f| f.kind != Kind::Deadlock),
        "the predicted cycle is the observed one: not reported again\n{}",
        show(&r)
    );
    let text = show(&r);
    assert!(
        text.contains("== OBSERVED deadlocks and stalls (1)"),
        "{text}"
    );
    assert!(text.contains("1 observed, 0 predicted"), "{text}");
}

#[test]
fn without_end_states_the_same_trace_is_a_prediction() {
    // A trace cut short (no trailer) or of an older recorder says nothing of blocked threads.
    let (t, _, _) = abba();
    let r = report_of(t.b.finish_without_trailer());
    assert!(observed(&r).is_empty(), "{}", show(&r));
    assert!(
        r.findings
            .iter()
            .any(|f| f.kind == Kind::Deadlock && f.verdict == Verdict::Predicted),
        "{}",
        show(&r)
    );
}

#[test]
fn a_thread_requesting_a_default_mutex_it_holds_is_a_self_deadlock() {
    let mut t = T::new();
    let m = t.b.mutex("m");
    let main = t.main;
    t.lock(main, m, 5);
    t.request(main, m, LockMode::Exclusive, 6);
    let r = t.ended(
        SIGTERM,
        &[(main, BLOCKED)],
        Some(StopCause::HangTimeout { ms: 1000 }),
    );
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    assert_eq!(o[0].rule, Rule::BlockedSelfLock);
    assert_eq!(lines(o[0], "holds"), [5]);
    assert_eq!(lines(o[0], "requests"), [6]);
    assert!(
        o[0].message.to_string().contains("which it holds"),
        "{}",
        o[0].message
    );
    assert!(o[0].reason.contains("--hang-timeout"), "{}", o[0].reason);
}

#[test]
fn a_recursive_mutex_its_holder_requests_again_is_no_self_deadlock() {
    let mut t = T::new();
    let m = t.b.object(ObjectKind::RecursiveMutex, "m");
    let main = t.main;
    t.lock(main, m, 5);
    t.request(main, m, LockMode::Exclusive, 6);
    let r = t.ended(SIGTERM, &[(main, BLOCKED)], None);
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    assert_eq!(o[0].kind, Kind::ObservedStall, "blocked, but not on itself");
}

#[test]
fn a_write_request_of_an_rwlock_the_thread_read_holds_is_a_self_deadlock() {
    let mut t = T::new();
    let rw = t.b.object(ObjectKind::RwLock, "rw");
    let main = t.main;
    t.read_lock(main, rw, 5);
    t.request(main, rw, LockMode::Exclusive, 6);
    let r = t.ended(SIGTERM, &[(main, BLOCKED)], None);
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    assert_eq!(o[0].rule, Rule::BlockedSelfLock);
}

#[test]
fn a_read_request_behind_a_queued_writer_that_waits_for_the_reader_is_a_cycle() {
    // T1 read-holds rw and reads it again; T2's write request is queued between the two.
    let mut t = T::new();
    let rw = t.b.object(ObjectKind::RwLock, "rw");
    let t1 = t.spawn("reader");
    let t2 = t.spawn("writer");
    t.read_lock(t1, rw, 10);
    t.request(t2, rw, LockMode::Exclusive, 20);
    t.request(t1, rw, LockMode::Shared, 11);
    let main = t.main;
    let r = t.ended(
        SIGTERM,
        &[
            (t1, BLOCKED),
            (t2, BLOCKED),
            (main, ThreadEndState::Running),
        ],
        None,
    );
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    assert_eq!(
        (o[0].kind, o[0].rule),
        (Kind::ObservedDeadlock, Rule::BlockedLockCycle)
    );
    assert_eq!(lines(o[0], "requests"), [11, 20]);
}

#[test]
fn joining_a_thread_blocked_on_a_lock_the_joiner_holds_is_a_wait_cycle() {
    let mut t = T::new();
    let m = t.b.mutex("m");
    let main = t.main;
    t.lock(main, m, 5);
    let w = t.spawn("worker");
    t.request(w, m, LockMode::Exclusive, 12);
    t.join_request(main, w, 7);
    let r = t.ended(SIGTERM, &[(main, BLOCKED), (w, BLOCKED)], None);
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    assert_eq!(
        (o[0].kind, o[0].rule),
        (Kind::ObservedDeadlock, Rule::BlockedWaitCycle)
    );
    assert_eq!(lines(o[0], "holds"), [5]);
    assert_eq!(lines(o[0], "joins"), [7]);
    assert_eq!(lines(o[0], "requests"), [12]);
    assert!(
        !r.findings.iter().any(|f| f.kind == Kind::JoinDeadlock),
        "the join-while-holding finding is the observed one\n{}",
        show(&r)
    );
}

#[test]
fn a_once_routine_blocked_on_a_lock_held_by_a_thread_waiting_for_the_once_is_a_cycle() {
    let mut t = T::new();
    let m = t.b.mutex("m");
    let once = t.b.object(ObjectKind::Once, "once");
    let t1 = t.spawn("init");
    let t2 = t.spawn("user");
    let s = t.at(10);
    t.b.event(t1, EventKind::OnceBegin { once, site: s });
    t.b.event(t1, EventKind::OnceRun { once });
    t.lock(t2, m, 20);
    let s = t.at(21);
    t.b.event(t2, EventKind::OnceBegin { once, site: s });
    t.request(t1, m, LockMode::Exclusive, 11);
    let main = t.main;
    let r = t.ended(
        SIGTERM,
        &[
            (t1, BLOCKED),
            (t2, BLOCKED),
            (main, ThreadEndState::Running),
        ],
        None,
    );
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    assert_eq!(o[0].rule, Rule::BlockedWaitCycle);
    assert_eq!(lines(o[0], "waits"), [21]);
}

/// A worker waits on a condition nobody signals; main joins it.
fn join_stall() -> (T, ThreadId) {
    let mut t = T::new();
    let (m, c) = (t.b.mutex("m"), t.b.object(ObjectKind::Condition, "c"));
    let w = t.spawn("worker");
    t.lock(w, m, 10);
    let site = t.at(11);
    t.b.event(
        w,
        EventKind::CondWaitBegin {
            cond: c,
            mutex: m,
            site,
        },
    );
    let main = t.main;
    t.join_request(main, w, 30);
    (t, w)
}

#[test]
fn threads_blocked_without_a_cycle_when_the_run_is_stopped_are_an_observed_stall() {
    let (t, w) = join_stall();
    let main = t.main;
    let r = t.ended(SIGTERM, &[(main, BLOCKED), (w, BLOCKED)], None);
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    assert_eq!(
        (o[0].kind, o[0].rule),
        (Kind::ObservedStall, Rule::BlockedWait)
    );
    assert_eq!(lines(o[0], "joins"), [30]);
    assert_eq!(lines(o[0], "waits"), [11]);
    assert!(
        o[0].observed().unwrap().threads[1].held.is_empty(),
        "the condition's mutex is not held while waiting"
    );
}

#[test]
fn threads_idle_in_a_wait_when_the_program_exits_are_no_stall() {
    let (t, w) = join_stall();
    let main = t.main;
    let r = t.ended(
        EndReason::Exit { status: 0 },
        &[(main, BLOCKED), (w, BLOCKED)],
        None,
    );
    assert!(observed(&r).is_empty(), "{}", show(&r));
}

#[test]
fn a_deadlock_is_reported_even_when_another_thread_exits_the_process() {
    let (t, t1, t2) = abba();
    let main = t.main;
    let r = t.ended(
        EndReason::Exit { status: 0 },
        &[(main, BLOCKED), (t1, BLOCKED), (t2, BLOCKED)],
        None,
    );
    assert_eq!(observed(&r).len(), 1, "{}", show(&r));
}

#[test]
fn a_thread_in_a_timed_wait_closes_no_cycle_and_is_listed_as_the_holder() {
    let (t, t1, t2) = abba();
    let main = t.main;
    let r = t.ended(
        SIGTERM,
        &[
            (main, BLOCKED),
            (t1, BLOCKED),
            (t2, ThreadEndState::BlockedWithTimeout),
        ],
        None,
    );
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    assert_eq!(o[0].kind, Kind::ObservedStall);
    let states: Vec<ThreadState> = o[0]
        .observed()
        .unwrap()
        .threads
        .iter()
        .map(|t| t.state)
        .collect();
    assert!(
        states.contains(&ThreadState::BlockedWithTimeout),
        "{states:?}"
    );
}

#[test]
fn a_lock_held_by_a_thread_that_exited_stalls_its_requester() {
    let mut t = T::new();
    let m = t.b.mutex("m");
    let gone = t.spawn("gone");
    t.lock(gone, m, 10);
    t.b.exit(gone);
    let main = t.main;
    t.request(main, m, LockMode::Exclusive, 20);
    let r = t.ended(SIGTERM, &[(main, BLOCKED)], None);
    let o = observed(&r);
    assert_eq!(o.len(), 1, "{}", show(&r));
    assert_eq!(o[0].kind, Kind::ObservedStall);
    assert_eq!(lines(o[0], "holds"), [10]);
    assert_eq!(
        o[0].observed().unwrap().threads[1].state,
        ThreadState::Exited
    );
}

#[test]
fn two_independent_deadlocks_are_two_findings() {
    let mut t = T::new();
    let (a, b, c) = (t.b.mutex("a"), t.b.mutex("b"), t.b.mutex("c"));
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    let t3 = t.spawn("three");
    t.lock(t1, a, 10);
    t.lock(t2, b, 20);
    t.request(t1, b, LockMode::Exclusive, 11);
    t.request(t2, a, LockMode::Exclusive, 21);
    t.lock(t3, c, 30);
    t.request(t3, c, LockMode::Exclusive, 31);
    let main = t.main;
    let r = t.ended(
        SIGTERM,
        &[
            (main, ThreadEndState::Running),
            (t1, BLOCKED),
            (t2, BLOCKED),
            (t3, BLOCKED),
        ],
        None,
    );
    let rules: Vec<Rule> = observed(&r).iter().map(|f| f.rule).collect();
    assert_eq!(rules.len(), 2, "{}", show(&r));
    assert!(rules.contains(&Rule::BlockedSelfLock) && rules.contains(&Rule::BlockedLockCycle));
}

#[test]
fn many_threads_blocked_behind_a_read_held_lock_cost_bounded_work() {
    // 2,000 readers hold the lock, 2,000 writers wait for it: each writer lists at most a few
    // dozen of the threads it waits for.
    let mut t = T::new();
    let rw = t.b.object(ObjectKind::RwLock, "rw");
    let mut ends = Vec::new();
    for i in 0..2000 {
        let r = t.spawn("r");
        t.read_lock(r, rw, 10);
        ends.push((r, ThreadEndState::Running));
        let _ = i;
    }
    for _ in 0..2000 {
        let w = t.spawn("w");
        t.request(w, rw, LockMode::Exclusive, 20);
        ends.push((w, BLOCKED));
    }
    let r = t.ended(SIGTERM, &ends, None);
    let o = observed(&r);
    assert_eq!(o.len(), 1);
    let d = o[0].observed().unwrap();
    assert!(d.threads.iter().all(|t| t.waits_for.len() <= 64));
}

#[test]
fn observed_findings_render_in_json_and_sarif_and_fail_check() {
    let (t, t1, t2) = abba();
    let main = t.main;
    let bytes = t.b.finish_ended(
        SIGTERM,
        &[(main, BLOCKED), (t1, BLOCKED), (t2, BLOCKED)],
        None,
    );
    let dir = std::env::temp_dir().join(format!("foresight-observed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.trace");
    std::fs::write(&path, bytes).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
            .current_dir(&dir)
            .args(args)
            .arg(&path)
            .output()
            .unwrap()
    };
    let json = run(&["analyze", "--format", "json"]);
    assert!(json.status.success());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["summary"]["observed"], 1);
    let f = &v["findings"][0];
    assert_eq!(f["verdict"], "observed");
    assert_eq!(f["kind"], "observed-deadlock");
    assert_eq!(f["observed"]["threads"][0]["state"], "blocked");
    assert_eq!(f["observed"]["threads"][0]["waits"], "lock");
    assert!(f["observed"]["threads"][0]["held"][0]["lock"].is_string());

    let sarif = run(&["analyze", "--format", "sarif"]);
    let v: serde_json::Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let result = &v["runs"][0]["results"][0];
    assert_eq!(result["ruleId"], "observed-deadlock");
    assert_eq!(result["level"], "error");
    assert_eq!(result["properties"]["verdict"], "observed");
    let rules = v["runs"][0]["tool"]["driver"]["rules"].as_array().unwrap();
    assert!(rules.iter().any(|r| r["id"] == "observed-stall"));

    let check = run(&["check", "--baseline", "none.txt", "--update-baseline"]);
    assert!(check.status.success());
    let check = run(&["check", "--baseline", "none.txt"]);
    assert_eq!(
        check.status.code(),
        Some(0),
        "accepted once in the baseline"
    );
    std::fs::write(dir.join("empty.txt"), "").unwrap();
    let check = run(&["check", "--baseline", "empty.txt"]);
    assert_eq!(
        check.status.code(),
        Some(1),
        "a new observed deadlock fails check: {}",
        String::from_utf8_lossy(&check.stdout)
    );
    assert!(String::from_utf8_lossy(&check.stdout).contains("observed-deadlock |"));
    let _ = std::fs::remove_dir_all(&dir);
}
