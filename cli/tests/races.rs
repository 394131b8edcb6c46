//! Data-race detection and prediction, behaviour by behaviour, on traces written with the
//! builder: what orders two accesses, what does not, and what the findings say.

use std::collections::BTreeSet;

use foresight_analyzer::analysis::analyze;
use foresight_analyzer::model::build_run;
use foresight_analyzer::options::Options;
use foresight_analyzer::report::{AccessKind, Finding, Kind, Report, Verdict};
use foresight_trace::builder::TraceBuilder;
use foresight_trace::event::{AtomicOp, EventKind, LockMode, MemoryOrder, ObjectId, ThreadId};
use foresight_trace::tables::ObjectKind;
use foresight_trace::Trace;

const X: u64 = 0x1000;

/// A builder whose sites are lines of `t.c`.
struct T {
    b: TraceBuilder,
    main: ThreadId,
}

impl T {
    fn new() -> Self {
        let mut b = TraceBuilder::new("test");
        let main = b.main_thread();
        T { b, main }
    }
    fn spawn(&mut self, name: &str) -> ThreadId {
        let s = self.b.site("main", "t.c", 1);
        self.b.spawn(self.main, s, name)
    }
    fn join(&mut self, child: ThreadId) {
        let s = self.b.site("main", "t.c", 2);
        self.b.join(self.main, child, s);
    }
    fn write(&mut self, t: ThreadId, addr: u64, size: u32, line: u32) {
        let s = self.b.site("f", "t.c", line);
        self.b.write(t, addr, size, s);
    }
    fn read(&mut self, t: ThreadId, addr: u64, size: u32, line: u32) {
        let s = self.b.site("f", "t.c", line);
        self.b.read(t, addr, size, s);
    }
    fn lock(&mut self, t: ThreadId, l: ObjectId) {
        let s = self.b.site("f", "t.c", 90);
        self.b.lock(t, l, s);
    }
    fn read_lock(&mut self, t: ThreadId, l: ObjectId) {
        let s = self.b.site("f", "t.c", 91);
        self.b.lock_mode(t, l, LockMode::Shared, s);
    }
    fn unlock(&mut self, t: ThreadId, l: ObjectId) {
        let s = self.b.site("f", "t.c", 99);
        self.b.unlock(t, l, s);
    }
    fn atomic(&mut self, t: ThreadId, op: AtomicOp, order: MemoryOrder, line: u32) {
        let site = self.b.site("f", "t.c", line);
        self.b.event(
            t,
            EventKind::Atomic {
                op,
                addr: 0x2000,
                size: 4,
                order,
                site,
            },
        );
    }
    fn fence(&mut self, t: ThreadId, order: MemoryOrder) {
        let site = self.b.site("f", "t.c", 80);
        self.b.event(t, EventKind::Fence { order, site });
    }
    fn ev(&mut self, t: ThreadId, kind: EventKind) {
        self.b.event(t, kind);
    }
}

fn report_with(t: T, opts: &Options) -> Report {
    let trace = Trace::from_bytes("t.trace", t.b.finish()).expect("trace reads");
    let run = build_run(&trace, &mut |_| {});
    analyze(&[run], &[], opts)
}

fn report(t: T) -> Report {
    report_with(t, &Options::default())
}

fn races(r: &Report) -> Vec<&Finding> {
    r.findings.iter().filter(|f| f.kind == Kind::Race).collect()
}

/// The lines each race finding names, as sorted pairs, with its rule.
fn race_lines(r: &Report) -> BTreeSet<(u32, u32, &'static str)> {
    races(r)
        .iter()
        .map(|f| {
            let mut l: Vec<u32> = f.locations.iter().filter_map(|l| l.line).collect();
            l.sort_unstable();
            (l[0], l[1], f.rule.into())
        })
        .collect()
}

#[test]
fn unordered_writes_race_by_happens_before() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    t.write(a, X, 4, 10);
    t.write(b, X, 4, 20);
    let r = report(t);
    assert_eq!(race_lines(&r), [(10, 20, "happens-before")].into());
    let f = races(&r)[0];
    assert_eq!(f.verdict, Verdict::Predicted);
    assert!(f.witness.is_none(), "the run itself has the race");
    let race = f.race().expect("race details");
    assert_eq!(race.accesses[0].kind, AccessKind::Write);
    assert_eq!(race.accesses[0].size, 4);
    assert!(race.accesses[1].locks_held.is_empty());
}

#[test]
fn races_are_listed_by_where_they_are_in_the_code_not_by_their_wording() {
    // The race on the higher address is at the lower lines: its message ("data race on
    // 0x3000: …") sorts after the other's, its sites before.
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    t.write(a, 0x3000, 4, 10);
    t.write(b, 0x3000, 4, 11);
    t.write(a, X, 4, 30);
    t.write(b, X, 4, 31);
    let r = report(t);
    let firsts: Vec<Option<u32>> = races(&r)
        .iter()
        .map(|f| f.locations.iter().filter_map(|l| l.line).min())
        .collect();
    assert_eq!(firsts, [Some(10), Some(30)]);
    let messages: Vec<String> = races(&r).iter().map(|f| f.message.to_string()).collect();
    assert!(messages[0].contains("0x3000"), "{messages:?}");
    assert!(
        r.findings
            .windows(2)
            .all(|w| w[0].report_order() <= w[1].report_order()),
        "the findings are in report order"
    );
}

#[test]
fn reads_do_not_race_with_reads() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    t.read(a, X, 4, 10);
    t.read(b, X, 4, 20);
    assert!(races(&report(t)).is_empty());
}

#[test]
fn neighbouring_bytes_do_not_race_but_overlapping_ones_do() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    t.write(a, X, 1, 10);
    t.write(b, X + 1, 1, 20);
    t.write(b, X + 2, 4, 30); // overlaps nothing of a's
    t.read(b, X, 2, 40); // overlaps a's byte
    assert_eq!(race_lines(&report(t)), [(10, 40, "happens-before")].into());
}

#[test]
fn creation_and_join_order_the_parent_and_the_child() {
    let mut t = T::new();
    let main = t.main;
    t.write(main, X, 4, 10);
    let a = t.spawn("a");
    t.write(a, X, 4, 20);
    t.join(a);
    t.read(main, X, 4, 30);
    assert!(races(&report(t)).is_empty());
}

#[test]
fn a_common_lock_orders_what_it_guards_and_a_reversal_exposes_what_follows_it() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let (m, n) = (t.b.mutex("m"), t.b.mutex("n"));
    t.lock(a, m);
    t.write(a, X, 4, 10);
    t.unlock(a, m);
    t.lock(b, m);
    t.write(b, X, 4, 20);
    t.unlock(b, m);
    t.lock(b, n);
    t.write(b, X, 4, 30);
    t.unlock(b, n);
    // Lines 10 and 20 hold m both: never a race. Line 30 holds only n, and b reaches it
    // after its own m section, which follows a's in the run (the two write x), so no
    // sync-preserving reordering runs 10 and 30 together. Running b's m section first does:
    // nothing reads x, so every read keeps its writer, and then a holds m writing x while b
    // holds n writing it.
    assert_eq!(race_lines(&report(t)), [(10, 30, "sync-reversal")].into());
}

#[test]
fn what_only_a_lock_hand_off_orders_is_predicted_with_a_witness() {
    // a: x = 1; lock m; unlock m.   b: lock m; unlock m; x = 2.
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let m = t.b.mutex("m");
    t.write(a, X, 4, 10);
    t.lock(a, m);
    t.write(a, 0x3000, 4, 11);
    t.unlock(a, m);
    t.lock(b, m);
    t.write(b, 0x3008, 4, 21);
    t.unlock(b, m);
    t.write(b, X, 4, 20);
    let r = report(t);
    assert_eq!(race_lines(&r), [(10, 20, "sync-preserving")].into());
    let w = races(&r)[0].witness.as_ref().expect("a witness reordering");
    let text = w.schedule.join("\n");
    assert!(
        text.find("locks m").expect("b's section") < text.find("t.c:10").expect("a's write"),
        "b's critical section runs first:\n{text}"
    );
    assert_eq!(r.summary.race_candidates, 1);
}

#[test]
fn a_read_that_saw_the_other_section_keeps_the_order() {
    // a: x = 1; lock m; flag = 1; unlock m.   b: lock m; read flag; unlock m; x = 2.
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let m = t.b.mutex("m");
    t.write(a, X, 4, 10);
    t.lock(a, m);
    t.write(a, 0x3000, 4, 11);
    t.unlock(a, m);
    t.lock(b, m);
    t.read(b, 0x3000, 4, 21);
    t.unlock(b, m);
    t.write(b, X, 4, 20);
    assert!(races(&report(t)).is_empty());
}

#[test]
fn the_race_budget_bounds_prediction_and_says_so() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let m = t.b.mutex("m");
    t.write(a, X, 4, 10);
    t.lock(a, m);
    t.unlock(a, m);
    t.lock(b, m);
    t.unlock(b, m);
    t.write(b, X, 4, 20);
    let opts = Options {
        race_candidate_budget: 0,
        ..Options::default()
    };
    let r = report_with(t, &opts);
    assert!(races(&r).is_empty());
    assert!(r.summary.race_budget_exhausted);
}

#[test]
fn rwlock_readers_are_not_ordered_with_each_other() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let rw = t.b.object(ObjectKind::RwLock, "rw");
    t.read_lock(a, rw);
    t.write(a, X, 4, 10);
    t.unlock(a, rw);
    t.read_lock(b, rw);
    t.write(b, X, 4, 20);
    t.unlock(b, rw);
    assert_eq!(race_lines(&report(t)), [(10, 20, "happens-before")].into());
}

#[test]
fn atomics_never_race_with_atomics_but_do_with_plain_accesses() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    t.atomic(a, AtomicOp::Rmw, MemoryOrder::Relaxed, 10);
    t.atomic(b, AtomicOp::Rmw, MemoryOrder::Relaxed, 20);
    let s = t.b.site("f", "t.c", 30);
    t.b.write(b, 0x2000, 4, s);
    let lines = race_lines(&report(t));
    assert_eq!(lines, [(10, 30, "happens-before")].into());
}

fn message_passing(store: MemoryOrder, load: MemoryOrder, fences: bool) -> Report {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    t.write(a, X, 4, 10);
    if fences {
        t.fence(a, MemoryOrder::Release);
    }
    t.atomic(a, AtomicOp::Store, store, 11);
    t.atomic(b, AtomicOp::Load, load, 21);
    if fences {
        t.fence(b, MemoryOrder::Acquire);
    }
    t.read(b, X, 4, 20);
    report(t)
}

#[test]
fn release_acquire_orders_and_relaxed_does_not() {
    use MemoryOrder::*;
    assert!(races(&message_passing(Release, Acquire, false)).is_empty());
    assert!(races(&message_passing(SeqCst, SeqCst, false)).is_empty());
    assert_eq!(
        race_lines(&message_passing(Relaxed, Relaxed, false)),
        [(10, 20, "happens-before")].into()
    );
    assert_eq!(
        race_lines(&message_passing(Release, Relaxed, false)),
        [(10, 20, "happens-before")].into()
    );
}

#[test]
fn fences_make_relaxed_atomics_synchronise() {
    use MemoryOrder::*;
    assert!(races(&message_passing(Relaxed, Relaxed, true)).is_empty());
}

#[test]
fn memory_freed_and_allocated_again_is_a_new_object() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let s = t.b.site("f", "t.c", 5);
    t.ev(
        a,
        EventKind::Alloc {
            addr: X,
            size: 64,
            site: s,
        },
    );
    t.write(a, X + 8, 4, 10);
    t.ev(a, EventKind::Free { addr: X, site: s });
    t.ev(
        b,
        EventKind::Alloc {
            addr: X,
            size: 64,
            site: s,
        },
    );
    t.write(b, X + 8, 4, 20);
    assert!(races(&report(t)).is_empty());
}

#[test]
fn a_heap_race_names_its_block() {
    let mut t = T::new();
    let main = t.main;
    let s = t.b.site("main", "t.c", 5);
    t.ev(
        main,
        EventKind::Alloc {
            addr: X,
            size: 64,
            site: s,
        },
    );
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    t.write(a, X + 12, 4, 10);
    t.write(b, X + 12, 4, 20);
    let r = report(t);
    let race = races(&r)[0].race().expect("details");
    let block = race.block.as_ref().expect("the heap block");
    assert_eq!((block.size, block.offset), (64, 12));
    assert!(races(&r)[0]
        .message
        .to_string()
        .contains("offset 12 of a 64-byte heap block"));
}

#[test]
fn a_static_variable_is_named_down_to_its_element() {
    let mut t = T::new();
    let counters = t.b.array_variable("counters", "t.c", 3, 4, 8);
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    t.write(a, counters + 12, 4, 10);
    t.write(b, counters + 12, 4, 20);
    let r = report(t);
    let v = races(&r)[0]
        .race()
        .unwrap()
        .variable
        .as_ref()
        .expect("named");
    assert_eq!(v.name, "counters[3]");
    assert_eq!(v.line, Some(3));
}

#[test]
fn barrier_generations_order_arrivals_before_departures() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let bar = t.b.object(ObjectKind::Barrier, "bar");
    let s = t.b.site("f", "t.c", 50);
    let arrive = EventKind::BarrierWaitBegin {
        barrier: bar,
        site: s,
        generation: None,
    };
    let depart = |serial| EventKind::BarrierWaitEnd {
        barrier: bar,
        generation: 0,
        serial,
    };
    t.write(a, X, 4, 10); // before the barrier: ordered with b's read after it
    t.write(a, X + 8, 4, 11); // and this races with b's write before it
    t.write(b, X + 8, 4, 21);
    t.ev(a, arrive);
    t.ev(b, arrive);
    t.ev(a, depart(true));
    t.ev(b, depart(false));
    t.read(b, X, 4, 20);
    assert_eq!(race_lines(&report(t)), [(11, 21, "happens-before")].into());
}

#[test]
fn an_arrival_that_never_departs_is_in_the_generation_the_recorder_gave_it() {
    // The process ended while `a` was still inside the wait: its arrival says its generation.
    let build = |generation: Option<u64>| {
        let mut t = T::new();
        let (a, b) = (t.spawn("a"), t.spawn("b"));
        let bar = t.b.object(ObjectKind::Barrier, "bar");
        let s = t.b.site("f", "t.c", 50);
        let arrive = EventKind::BarrierWaitBegin {
            barrier: bar,
            site: s,
            generation,
        };
        t.write(a, X, 4, 10);
        t.ev(a, arrive);
        t.ev(
            b,
            EventKind::BarrierWaitBegin {
                barrier: bar,
                site: s,
                generation: Some(0),
            },
        );
        t.ev(
            b,
            EventKind::BarrierWaitEnd {
                barrier: bar,
                generation: 0,
                serial: true,
            },
        );
        t.write(b, X, 4, 20);
        report(t)
    };
    assert!(races(&build(Some(0))).is_empty());
    // An older trace cannot tell: the arrival orders nothing, and the pair is reported.
    assert_eq!(
        race_lines(&build(None)),
        [(10, 20, "happens-before")].into()
    );
}

#[test]
fn a_thread_whose_creation_was_lost_is_left_out_with_a_warning() {
    // Without its creation, nothing of the creator's would be ordered before the thread: the
    // creator's initialisation of `X` would look like a race with every access of the child.
    let mut t = T::new();
    t.write(t.main, X, 4, 10);
    let child = t.b.spawn_unrecorded(t.main, "late");
    t.read(child, X, 4, 20);
    let r = report(t);
    assert!(races(&r).is_empty());
    let warnings = &r.traces[0].warnings;
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("1 memory accesses of threads whose creation is not in the trace")),
        "{warnings:?}"
    );
}

#[test]
fn once_orders_the_initialiser_before_every_call_that_skipped_it() {
    let mut t = T::new();
    let (a, b, c) = (t.spawn("a"), t.spawn("b"), t.spawn("c"));
    let once = t.b.object(ObjectKind::Once, "once");
    let s = t.b.site("f", "t.c", 60);
    t.ev(a, EventKind::OnceBegin { once, site: s });
    t.ev(a, EventKind::OnceRun { once });
    t.write(a, X, 4, 10);
    t.ev(a, EventKind::OnceEnd { once });
    t.ev(b, EventKind::OnceBegin { once, site: s });
    t.ev(b, EventKind::OnceSkip { once });
    t.read(b, X, 4, 20); // ordered: b called pthread_once
    t.read(c, X, 4, 30); // c never called it
    assert_eq!(race_lines(&report(t)), [(10, 30, "happens-before")].into());
}

#[test]
fn a_thread_created_and_joined_inside_a_critical_section_is_inside_it() {
    // creation lockset: main holds m across helper's whole life; locker takes m.
    let mut t = T::new();
    let main = t.main;
    let m = t.b.mutex("m");
    let locker = t.spawn("locker");
    t.lock(locker, m);
    t.write(locker, X, 4, 10);
    t.unlock(locker, m);
    t.lock(main, m);
    let helper = t.spawn("helper");
    t.write(helper, X, 4, 20);
    t.join(helper);
    t.unlock(main, m);
    assert!(races(&report(t)).is_empty());
}

#[test]
fn json_carries_the_race_and_its_accesses() {
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    t.write(a, X, 8, 10);
    t.read(b, X, 8, 20);
    let r = report(t);
    let mut out = Vec::new();
    foresight_analyzer::report::json::write(&mut out, &r).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let f = &v["findings"][0];
    assert_eq!(f["kind"], "race");
    assert_eq!(f["rule"], "happens-before");
    assert_eq!(f["race"]["accesses"][0]["kind"], "write");
    assert_eq!(f["race"]["accesses"][1]["kind"], "read");
    assert_eq!(f["locations"].as_array().unwrap().len(), 2);
    assert!(f["cycle"].as_array().unwrap().is_empty());
    assert_eq!(v["summary"]["races"], 1);
}

/// Runs the `foresight` binary in `dir`.
fn foresight(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run foresight")
}

#[test]
fn check_gates_races_as_it_gates_deadlocks() {
    let dir = std::env::temp_dir().join(format!("foresight-races-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let racy = |line: u32| {
        let mut t = T::new();
        let (a, b) = (t.spawn("a"), t.spawn("b"));
        t.write(a, X, 4, 10);
        t.write(b, X, 4, line);
        t.b.finish()
    };
    std::fs::write(dir.join("one.trace"), racy(20)).unwrap();
    let o = foresight(&dir, &["check", "one.trace"]);
    assert_eq!(o.status.code(), Some(1), "a new race fails the gate");
    let out = String::from_utf8_lossy(&o.stdout);
    // No symbol names the memory of a builder trace: `memory`, never its address.
    assert!(
        out.contains("race | memory | writes f@t.c:10, writes f@t.c:20"),
        "{out}"
    );
    // A baseline line written before races named their memory still accepts the race.
    std::fs::write(
        dir.join("older.txt"),
        "race |  | writes f@t.c:10, writes f@t.c:20\n",
    )
    .unwrap();
    assert_eq!(
        foresight(&dir, &["check", "--baseline", "older.txt", "one.trace"])
            .status
            .code(),
        Some(0)
    );
    let o = foresight(&dir, &["check", "--update-baseline", "one.trace"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        foresight(&dir, &["check", "one.trace"]).status.code(),
        Some(0)
    );
    // The same race at another line is a new finding.
    std::fs::write(dir.join("two.trace"), racy(30)).unwrap();
    assert_eq!(
        foresight(&dir, &["check", "two.trace"]).status.code(),
        Some(1)
    );
    let o = foresight(&dir, &["check", "--format", "sarif", "two.trace"]);
    let sarif: serde_json::Value = serde_json::from_slice(&o.stdout).expect("SARIF is JSON");
    assert_eq!(sarif["runs"][0]["results"][0]["ruleId"], "race");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_reversal_race_carries_its_rule_and_schedule_in_every_format() {
    let dir = std::env::temp_dir().join(format!("foresight-races-rev-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // a writes x inside m; b later takes m for a moment, then reads x outside it.
    let mut t = T::new();
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let m = t.b.mutex("m");
    t.lock(a, m);
    t.write(a, X, 4, 10);
    t.unlock(a, m);
    t.lock(b, m);
    t.unlock(b, m);
    t.read(b, X, 4, 20);
    std::fs::write(dir.join("rev.trace"), t.b.finish()).unwrap();
    let json = foresight(&dir, &["analyze", "--format", "json", "rev.trace"]);
    assert!(json.status.success());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let f = &v["findings"][0];
    assert_eq!(
        (&f["kind"], &f["rule"]),
        (&"race".into(), &"sync-reversal".into())
    );
    let schedule: Vec<&str> = f["witness"]["schedule"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        schedule[0].starts_with("thread 2 \"b\": locks m"),
        "{schedule:?}"
    );
    assert!(
        schedule[0].contains("moved ahead of thread 1 \"a\""),
        "{schedule:?}"
    );
    assert!(
        schedule[1].starts_with("thread 1 \"a\": locks m"),
        "{schedule:?}"
    );
    assert!(schedule[2].contains("writes") && schedule[3].contains("reads"));
    assert_eq!(v["summary"]["reversal_candidates"], 1);
    let sarif = foresight(&dir, &["analyze", "--format", "sarif", "rev.trace"]);
    let s: serde_json::Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let flow = &s["runs"][0]["results"][0]["codeFlows"][0];
    assert_eq!(flow["properties"]["schedule"].as_array().unwrap().len(), 4);
    assert!(flow["message"]["text"]
        .as_str()
        .unwrap()
        .contains("moved ahead"));
    let text = foresight(&dir, &["analyze", "rev.trace"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("rule sync-reversal") && text.contains("moved ahead"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The races of `foresight analyze --format json` (rule and the two lines of each).
fn cli_race_lines(dir: &std::path::Path, args: &[&str]) -> BTreeSet<(u32, u32, String)> {
    let o = foresight(dir, &[&["analyze", "--format", "json"], args].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "race")
        .map(|f| {
            let mut l: Vec<u32> = f["locations"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|l| l["line"].as_u64())
                .map(|l| l as u32)
                .collect();
            l.sort_unstable();
            (l[0], l[1], f["rule"].as_str().unwrap().to_string())
        })
        .collect()
}

#[test]
fn a_reversal_read_from_a_file_is_refused_where_a_moved_outcome_depended_on_timing() {
    // `analyze` of a file reads where threads read, write and failed to take a lock again
    // when the reversal asks (the walk keeps no marks); what it decides must be what the
    // walk's own marks decide, whole and in segments.
    let dir = std::env::temp_dir().join(format!("foresight-races-marks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // a writes x inside m; b takes m for a moment, (maybe) fails to take n, then reads x.
    // Running b's section first moves b's failed trylock ahead of a's section: its outcome
    // depended on when it ran, so that reordering is refused.
    let trace = |fails: bool| {
        let mut t = T::new();
        let (a, b) = (t.spawn("a"), t.spawn("b"));
        let (m, n) = (t.b.mutex("m"), t.b.mutex("n"));
        t.write(a, 0x3000, 4, 9);
        t.lock(a, m);
        t.write(a, X, 4, 10);
        t.unlock(a, m);
        t.lock(b, m);
        t.unlock(b, m);
        if fails {
            let site = t.b.site("f", "t.c", 19);
            t.ev(
                b,
                EventKind::LockTry {
                    lock: n,
                    mode: LockMode::Exclusive,
                    site,
                    acquired: false,
                },
            );
        }
        t.read(b, 0x3008, 4, 19);
        t.read(b, X, 4, 20);
        t.b.finish()
    };
    for (fails, name) in [(false, "moves.trace"), (true, "refused.trace")] {
        let bytes = trace(fails);
        std::fs::write(dir.join(name), &bytes).unwrap();
        let in_memory = Trace::from_bytes(name, bytes).expect("trace reads");
        for segment_events in ["0", "4", "7"] {
            let cli = cli_race_lines(&dir, &["--segment-events", segment_events, name]);
            let walked = foresight_analyzer::analysis::analyze_in_segments(
                &in_memory,
                &foresight_analyzer::sites::Wrappers::default(),
                &Options::default(),
                segment_events.parse().unwrap(),
            );
            let walked: BTreeSet<(u32, u32, String)> = race_lines(&walked)
                .into_iter()
                .map(|(a, b, rule)| (a, b, rule.to_string()))
                .collect();
            assert_eq!(cli, walked, "{name}, segments of {segment_events}");
        }
        let whole = cli_race_lines(&dir, &[name]);
        let expected: BTreeSet<(u32, u32, String)> = if fails {
            BTreeSet::new()
        } else {
            [(10, 20, "sync-reversal".to_string())].into()
        };
        assert_eq!(whole, expected, "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace read from its file as `foresight analyze` reads it, the race pass in the walk from
/// the first event (`replay: None`) or joining it at the first memory access, fed the events
/// before it again from a second read of the file (at most `replay_limit` of them). Returns
/// the run of each segment (`segment_events`, 0: one), the last one last.
fn streamed(
    bytes: Vec<u8>,
    segment_events: u64,
    replay: Option<usize>,
) -> Vec<foresight_analyzer::model::Run> {
    use foresight_analyzer::model::{walk, ModelPass};
    use foresight_analyzer::stream::{Runs, Stream};
    use foresight_trace::TraceStream;
    let stream = TraceStream::from_bytes("t.trace", bytes).expect("trace streams");
    let stream_walk = Stream::of_stream(&stream);
    let model = ModelPass::of_stream(&stream, "t.trace");
    let mut merged = stream.merged();
    let stream = &stream;
    let limit = replay.unwrap_or(0);
    let again = move || -> Box<dyn Iterator<Item = (ThreadId, usize, EventKind)> + '_> {
        Box::new(
            stream
                .merged()
                .map(|e| (e.thread, e.index, e.event.kind))
                .take(limit),
        )
    };
    let mut runs = Vec::new();
    let last = walk(
        &stream_walk,
        model,
        Runs(&mut merged),
        &mut |_| {},
        foresight_analyzer::model::SegmentBounds::of_events(segment_events),
        &mut |r| runs.push(r),
        replay.map(|_| &again as _),
    );
    runs.push(last);
    runs
}

/// What the race pass handed on for each segment, comparable across walks.
fn race_outputs(runs: &[foresight_analyzer::model::Run]) -> Vec<String> {
    runs.iter()
        .map(|r| {
            let o = &r.races;
            format!(
                "{:?} {:?} accesses {} orphans {} evicted {} complete {}",
                o.races, o.candidates, o.accesses, o.orphan_accesses, o.evicted.total, o.complete
            )
        })
        .collect()
}

/// Threads created, a heap block allocated and a lock taken long before the first memory
/// access, then a happens-before race in the block and a race only a lock hand-off orders.
fn late_accesses(accesses: bool) -> Vec<u8> {
    let mut t = T::new();
    let main = t.main;
    let s = t.b.site("main", "t.c", 5);
    t.ev(
        main,
        EventKind::Alloc {
            addr: X,
            size: 64,
            site: s,
        },
    );
    let (a, b) = (t.spawn("a"), t.spawn("b"));
    let (m, own) = (t.b.mutex("m"), t.b.mutex("own"));
    for _ in 0..50 {
        for th in [main, a, b] {
            t.lock(th, own);
            t.unlock(th, own);
        }
    }
    t.lock(a, m);
    if accesses {
        t.write(a, X + 12, 4, 10); // under m, which a took before any access
        t.write(a, 0x3000, 4, 11);
    }
    t.unlock(a, m);
    t.lock(b, m);
    if accesses {
        t.write(b, 0x3008, 4, 21);
    }
    t.unlock(b, m);
    if accesses {
        t.write(b, 0x3000, 4, 20);
        t.write(b, X + 12, 4, 22);
        t.write(main, X + 12, 4, 30);
    }
    t.b.finish()
}

#[test]
fn a_race_pass_that_joins_at_the_first_access_finds_what_one_there_from_the_start_finds() {
    let bytes = late_accesses(true);
    for segment_events in [0, 7, 40, 1000] {
        let live = streamed(bytes.clone(), segment_events, None);
        let joined = streamed(bytes.clone(), segment_events, Some(usize::MAX));
        assert_eq!(
            race_outputs(&joined),
            race_outputs(&live),
            "segments of {segment_events}"
        );
        let report = |runs: &[foresight_analyzer::model::Run]| {
            let last = runs.last().expect("a run");
            serde_json::to_string(&analyze(
                std::slice::from_ref(last),
                &[],
                &Options::default(),
            ))
            .expect("report serialises")
        };
        assert_eq!(report(&joined), report(&live));
    }
    // What it finds needs what came before the first access: the threads' creation (else
    // their accesses are left out) and the heap block (named).
    let runs = streamed(bytes, 0, Some(usize::MAX));
    let r = analyze(&runs, &[], &Options::default());
    assert_eq!(r.traces[0].warnings, Vec::<String>::new());
    // And those only a reordering shows: b's section on m run before a's, a's writes under
    // m meet b's after its section (nothing is read, so no read changes its writer).
    assert_eq!(
        race_lines(&r),
        [
            (10, 22, "sync-reversal"),
            (10, 30, "happens-before"),
            (11, 20, "sync-reversal"),
            (22, 30, "happens-before")
        ]
        .into()
    );
    let block = races(&r)
        .iter()
        .find_map(|f| f.race().and_then(|d| d.block.clone()))
        .expect("a race in the heap block");
    assert_eq!((block.size, block.offset), (64, 12));
}

#[test]
fn a_trace_without_accesses_hands_on_what_a_race_pass_would() {
    let bytes = late_accesses(false);
    for segment_events in [0, 7] {
        assert_eq!(
            race_outputs(&streamed(bytes.clone(), segment_events, Some(usize::MAX))),
            race_outputs(&streamed(bytes.clone(), segment_events, None)),
        );
    }
}

#[test]
fn a_replay_that_reads_less_than_the_walk_concludes_no_race() {
    let bytes = late_accesses(true);
    let runs = streamed(bytes.clone(), 0, Some(20));
    let out = &runs.last().expect("a run").races;
    assert!(!out.complete);
    assert!(out.races.is_empty() && out.candidates.is_empty());
    // The whole replay finds them.
    let out = &streamed(bytes, 0, Some(usize::MAX))
        .pop()
        .expect("a run")
        .races;
    assert!(out.complete && !out.races.is_empty());
}

/// A trace whose main thread allocates a 64-byte block at line 5 and spawns `a`, which writes
/// 4 bytes at offset 12 of it at line 10.
fn block_written_by_a_thread() -> (T, ThreadId) {
    let mut t = T::new();
    let main = t.main;
    let s = t.b.site("main", "t.c", 5);
    t.ev(
        main,
        EventKind::Alloc {
            addr: X,
            size: 64,
            site: s,
        },
    );
    let a = t.spawn("a");
    t.write(a, X + 12, 4, 10);
    (t, a)
}

fn free(t: &mut T, thread: ThreadId, line: u32) {
    let s = t.b.site("main", "t.c", line);
    t.ev(thread, EventKind::Free { addr: X, site: s });
}

#[test]
fn a_free_races_with_an_unordered_access_to_its_block() {
    let (mut t, a) = block_written_by_a_thread();
    let main = t.main;
    free(&mut t, main, 30);
    t.join(a);
    let r = report(t);
    assert_eq!(race_lines(&r), BTreeSet::from([(10, 30, "happens-before")]));
    let finding = races(&r)[0];
    let race = finding.race().expect("details");
    let kinds: Vec<AccessKind> = race.accesses.iter().map(|a| a.kind).collect();
    assert_eq!(kinds, [AccessKind::Write, AccessKind::Free]);
    assert_eq!(race.accesses[1].size, 64, "the free writes the whole block");
    let block = race.block.as_ref().expect("the heap block");
    assert_eq!(block.allocated_at.line, Some(5));
    let roles: Vec<&str> = finding.locations.iter().map(|l| l.role.name()).collect();
    assert_eq!(roles, ["writes", "frees"]);
    let message = finding.message.to_string();
    assert!(
        message.contains("heap block allocated at main (t.c:5)") && message.contains("free by"),
        "{message}"
    );
}

#[test]
fn a_free_after_a_join_races_with_nothing() {
    let (mut t, a) = block_written_by_a_thread();
    let main = t.main;
    t.join(a);
    free(&mut t, main, 30);
    assert!(races(&report(t)).is_empty());
}

#[test]
fn a_free_ordered_only_by_a_lock_hand_off_is_predicted() {
    let (mut t, a) = block_written_by_a_thread();
    let main = t.main;
    let l = t.b.object(ObjectKind::Mutex, "m");
    t.lock(a, l);
    t.unlock(a, l);
    t.lock(main, l);
    t.unlock(main, l);
    free(&mut t, main, 30);
    t.join(a);
    assert_eq!(
        race_lines(&report(t)),
        BTreeSet::from([(10, 30, "sync-preserving")])
    );
}

#[test]
fn a_free_of_a_block_handed_over_under_a_lock_races_with_nothing() {
    let (mut t, a) = block_written_by_a_thread();
    let main = t.main;
    let l = t.b.object(ObjectKind::Mutex, "m");
    // `a` publishes the block under the lock; main reads what `a` wrote, then frees.
    t.lock(a, l);
    t.write(a, 0x3000, 8, 11);
    t.unlock(a, l);
    t.lock(main, l);
    t.read(main, 0x3000, 8, 12);
    t.unlock(main, l);
    free(&mut t, main, 30);
    t.join(a);
    assert!(races(&report(t)).is_empty());
}

#[test]
fn threads_64_apart_race_with_each_other() {
    let mut t = T::new();
    let threads: Vec<ThreadId> = (0..65).map(|i| t.spawn(&format!("w{i}"))).collect();
    t.write(threads[0], X, 4, 10);
    t.write(threads[64], X, 4, 20);
    assert_eq!(
        race_lines(&report(t)),
        BTreeSet::from([(10, 20, "happens-before")])
    );
}
