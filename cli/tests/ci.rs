//! Lock discipline in CI: ranks, subclasses, suppressions, the `check` baseline, SARIF and the
//! `graph` command, on traces written with the builder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_analyzer::analysis::analyze;
use foresight_analyzer::model::build_run;
use foresight_analyzer::options::Options;
use foresight_analyzer::report::{Kind, Report, Rule, Verdict};
use foresight_trace::builder::TraceBuilder;
use foresight_trace::event::{EventKind, ObjectId, SiteId, ThreadId};
use foresight_trace::tables::{ClassKey, ObjectKind};
use foresight_trace::Trace;

struct T {
    b: TraceBuilder,
    main: ThreadId,
}

impl T {
    fn new(name: &str) -> Self {
        let mut b = TraceBuilder::new(name);
        let main = b.main_thread();
        T { b, main }
    }
    fn at(&mut self, function: &str, line: u32) -> SiteId {
        self.b.site(function, "src/bank.c", line)
    }
    fn spawn(&mut self, name: &str) -> ThreadId {
        let s = self.at("main", 1);
        self.b.spawn(self.main, s, name)
    }
    fn lock(&mut self, t: ThreadId, l: ObjectId, function: &str, line: u32) {
        let s = self.at(function, line);
        self.b.lock(t, l, s);
    }
    fn unlock(&mut self, t: ThreadId, l: ObjectId) {
        let s = self.at("unlock", 99);
        self.b.unlock(t, l, s);
    }
    fn nest(&mut self, t: ThreadId, first: ObjectId, second: ObjectId, function: &str, line: u32) {
        self.lock(t, first, function, line);
        self.lock(t, second, function, line + 1);
        self.unlock(t, second);
        self.unlock(t, first);
    }
    fn join(&mut self, child: ThreadId) {
        let s = self.at("main", 2);
        self.b.join(self.main, child, s);
    }
    fn rank(&mut self, l: ObjectId, rank: u32) {
        let main = self.main;
        self.b.event(main, EventKind::LockRank { lock: l, rank });
    }
    fn subclass(&mut self, t: ThreadId, l: ObjectId, subclass: u32) {
        self.b
            .event(t, EventKind::LockSubclass { lock: l, subclass });
    }
    fn class_name(&mut self, l: ObjectId, name: &str) {
        let name = self.b.string(name);
        let main = self.main;
        self.b
            .event(main, EventKind::LockClassName { lock: l, name });
    }
}

fn report(traces: Vec<Vec<u8>>) -> Report {
    let runs: Vec<_> = traces
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| {
            let trace = Trace::from_bytes(format!("t{i}.trace"), bytes).expect("trace reads");
            build_run(&trace, &mut |_| {})
        })
        .collect();
    analyze(&runs, &[], &Options::default())
}

fn show(r: &Report) -> String {
    let mut out = Vec::new();
    foresight_analyzer::report::text::write(&mut out, r).unwrap();
    String::from_utf8(out).unwrap()
}

/// Two tellers take A and B in opposite orders, one after the other (potential only), or
/// concurrently (predicted).
fn inversion(name: &str) -> Vec<u8> {
    let mut t = T::new(name);
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.nest(t1, a, b, "deposit", 10);
    t.nest(t2, b, a, "withdraw", 20);
    t.join(t1);
    t.join(t2);
    t.b.finish()
}

/// A and B always in one order: no finding.
fn ordered(name: &str) -> Vec<u8> {
    let mut t = T::new(name);
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    t.nest(t1, a, b, "deposit", 10);
    t.join(t1);
    t.b.finish()
}

/// Test 1 takes A then B, test 2 B then A: only the cumulative graph has the cycle.
fn half_inversion(name: &str, reversed: bool) -> Vec<u8> {
    let mut t = T::new(name);
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    if reversed {
        t.nest(t1, b, a, "withdraw", 20);
    } else {
        t.nest(t1, a, b, "deposit", 10);
    }
    t.join(t1);
    t.b.finish()
}

// --- ranks ----------------------------------------------------------------------------------

#[test]
fn acquiring_a_rank_at_or_below_the_highest_held_is_a_violation() {
    let mut t = T::new("ranks");
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let c = t.b.mutex("C");
    let free = t.b.mutex("unranked");
    t.rank(a, 1);
    t.rank(b, 2);
    t.rank(c, 2);
    let t1 = t.spawn("one");
    // In order, with an unranked lock in between: silent.
    t.lock(t1, a, "good", 10);
    t.lock(t1, free, "good", 11);
    t.lock(t1, b, "good", 12);
    t.unlock(t1, b);
    t.unlock(t1, free);
    t.unlock(t1, a);
    // B (2) held, then A (1): a violation; then C (2), equal rank: a violation too.
    t.lock(t1, b, "bad", 20);
    t.lock(t1, a, "bad", 21);
    t.unlock(t1, a);
    t.lock(t1, c, "bad", 22);
    t.unlock(t1, c);
    t.unlock(t1, b);
    t.join(t1);
    let r = report(vec![t.b.finish()]);
    let v: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == Kind::RankViolation)
        .collect();
    assert_eq!(v.len(), 2, "{}", show(&r));
    assert!(v.iter().all(|f| f.verdict == Verdict::Violation));
    assert_eq!(r.summary.rank_violations, 2);
    let lines: Vec<Option<u32>> = v[0].locations.iter().map(|l| l.line).collect();
    assert!(
        lines == [Some(20), Some(21)] || lines == [Some(20), Some(22)],
        "{lines:?}"
    );
    assert!(show(&r).contains("RANK VIOLATIONS (2)"), "{}", show(&r));
}

#[test]
fn the_highest_rank_is_kept_across_out_of_order_releases() {
    let mut t = T::new("ranks");
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let c = t.b.mutex("C");
    t.rank(a, 1);
    t.rank(b, 5);
    t.rank(c, 3);
    let t1 = t.spawn("one");
    t.lock(t1, a, "f", 10);
    t.lock(t1, b, "f", 11);
    // B released first: A (1) is the highest held, so C (3) is in order.
    t.unlock(t1, b);
    t.lock(t1, c, "f", 12);
    t.unlock(t1, c);
    t.unlock(t1, a);
    // A trylock never waits: not held to the order.
    t.lock(t1, b, "f", 20);
    let s = t.at("f", 21);
    t.b.event(
        t1,
        EventKind::LockTry {
            lock: a,
            mode: foresight_trace::event::LockMode::Exclusive,
            site: s,
            acquired: true,
        },
    );
    t.unlock(t1, a);
    t.unlock(t1, b);
    t.join(t1);
    let r = report(vec![t.b.finish()]);
    assert_eq!(r.summary.rank_violations, 0, "{}", show(&r));
}

// --- subclasses -----------------------------------------------------------------------------

/// Two transfers lock both accounts lower id first; `annotated` declares the nesting with
/// subclasses 0 and 1.
fn transfer(annotated: bool) -> Vec<u8> {
    let mut t = T::new("transfer");
    let init = t.at("account_init", 3);
    let acct0 =
        t.b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(init));
    let acct1 =
        t.b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(init));
    t.class_name(acct0, "account");
    t.class_name(acct1, "account");
    let t1 = t.spawn("pay");
    let t2 = t.spawn("refund");
    for (th, line) in [(t1, 10), (t2, 10)] {
        if annotated {
            t.subclass(th, acct0, 0);
        }
        t.lock(th, acct0, "transfer", line);
        if annotated {
            t.subclass(th, acct1, 1);
        }
        t.lock(th, acct1, "transfer", line + 1);
        t.unlock(th, acct1);
        t.unlock(th, acct0);
    }
    t.join(t1);
    t.join(t2);
    t.b.finish()
}

#[test]
fn a_subclass_separates_the_class_of_nested_instances() {
    let plain = report(vec![transfer(false)]);
    assert_eq!(plain.summary.potential, 1, "{}", show(&plain));
    assert_eq!(plain.findings[0].rule, Rule::SameClassNesting);
    assert_eq!(plain.findings[0].cycle(), vec!["account"]);
    let annotated = report(vec![transfer(true)]);
    assert!(annotated.findings.is_empty(), "{}", show(&annotated));
    assert_eq!(annotated.summary.lock_classes, 2, "account and account/1");
}

#[test]
fn a_subclass_is_per_acquisition_so_an_account_can_be_first_in_one_transfer_and_second_in_another()
{
    let mut t = T::new("transfers");
    let init = t.at("account_init", 3);
    let accounts: Vec<ObjectId> = (0..3)
        .map(|_| {
            t.b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(init))
        })
        .collect();
    for &a in &accounts {
        t.class_name(a, "account");
    }
    // Account 1 is the second lock of transfer(0, 1) and the first of transfer(1, 2).
    for (name, first, second) in [("a", 0, 1), ("b", 1, 2), ("c", 0, 2)] {
        let th = t.spawn(name);
        t.subclass(th, accounts[first], 0);
        t.lock(th, accounts[first], "transfer", 10);
        t.subclass(th, accounts[second], 1);
        t.lock(th, accounts[second], "transfer", 11);
        t.unlock(th, accounts[second]);
        t.unlock(th, accounts[first]);
    }
    let r = report(vec![t.b.finish()]);
    assert!(r.findings.is_empty(), "{}", show(&r));
}

#[test]
fn a_subclass_annotation_does_not_hide_a_real_inversion_of_instances() {
    let mut t = T::new("wrong");
    let init = t.at("account_init", 3);
    let a =
        t.b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(init));
    let b =
        t.b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(init));
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    // Both declare "first 0, second 1", but take the instances in opposite orders.
    for (th, first, second) in [(t1, a, b), (t2, b, a)] {
        t.subclass(th, first, 0);
        t.lock(th, first, "transfer", 10);
        t.subclass(th, second, 1);
        t.lock(th, second, "transfer", 11);
        t.unlock(th, second);
        t.unlock(th, first);
    }
    let r = report(vec![t.b.finish()]);
    assert_eq!(r.summary.predicted, 1, "{}", show(&r));
    assert_eq!(r.summary.potential, 0, "{}", show(&r));
}

// --- the command line -----------------------------------------------------------------------

fn foresight(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_foresight"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run foresight")
}

fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("foresight-ci-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn check_fails_on_a_finding_missing_from_the_baseline_and_passes_once_it_is_accepted() {
    let dir = fresh_dir("check");
    std::fs::create_dir_all(dir.join("traces")).unwrap();
    std::fs::write(dir.join("traces/test-1.trace"), ordered("test-1")).unwrap();
    let o = foresight(&dir, &["check", "--update-baseline", "traces/test-1.trace"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = foresight(&dir, &["check", "traces/test-1.trace"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));

    // A second test takes the locks the other way round: a cycle of the cumulative graph.
    std::fs::write(
        dir.join("traces/test-2.trace"),
        half_inversion("test-2", true),
    )
    .unwrap();
    let o = foresight(
        &dir,
        &["check", "traces/test-1.trace", "traces/test-2.trace"],
    );
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("1 new"), "{out}");
    assert!(
        out.contains("lock-cycle | A -> B | "),
        "the new baseline line is printed: {out}"
    );

    // Accepted: the baseline is sorted stable text with no paths of this machine.
    let o = foresight(
        &dir,
        &[
            "check",
            "--update-baseline",
            "traces/test-1.trace",
            "traces/test-2.trace",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(dir.join("foresight-baseline.txt")).unwrap();
    assert!(text.starts_with("# foresight baseline"), "{text}");
    assert!(text.contains("--update-baseline"), "{text}");
    let keys: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        keys,
        vec![
            "lock-cycle | A -> B | holds deposit@bank.c:10, holds withdraw@bank.c:20, \
             requests deposit@bank.c:11, requests withdraw@bank.c:21"
        ]
    );
    assert!(!text.contains("traces/"), "no trace paths: {text}");
    let o = foresight(
        &dir,
        &["check", "traces/test-2.trace", "traces/test-1.trace"],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "trace order does not matter: {}{}",
        stdout(&o),
        stderr(&o)
    );
    // The same cycle predicted in another run (other timing) is the same baseline line.
    std::fs::write(dir.join("traces/test-3.trace"), inversion("test-3")).unwrap();
    let o = foresight(&dir, &["check", "traces/test-3.trace"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}

#[test]
fn the_same_finding_in_many_traces_is_one_finding_listing_them() {
    let dir = fresh_dir("many");
    std::fs::create_dir_all(dir.join("traces")).unwrap();
    let mut args = vec!["analyze".to_string(), "--format".into(), "json".into()];
    for i in 0..200 {
        let name = format!("traces/run-{i:03}.trace");
        std::fs::write(dir.join(&name), inversion(&format!("run-{i}"))).unwrap();
        args.push(name);
    }
    // One test takes A then B alone, another B then A: their cycle needs both traces.
    std::fs::write(dir.join("traces/half-1.trace"), half_inversion("h1", false)).unwrap();
    std::fs::write(dir.join("traces/half-2.trace"), half_inversion("h2", true)).unwrap();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = foresight(&dir, &refs);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{:#}", v["findings"]);
    assert_eq!(findings[0]["verdict"], "predicted");
    assert_eq!(findings[0]["traces"].as_array().unwrap().len(), 200);
    assert_eq!(findings[0]["occurrences"], 200);
    assert_eq!(v["traces"].as_array().unwrap().len(), 200);
    assert_eq!(v["summary"]["lock_order_edges"], 2);

    // `check` says it once, and a baseline made from one run accepts the 200.
    let mut check: Vec<&str> = vec!["check"];
    check.extend(&refs[3..]);
    let o = foresight(&dir, &check);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("1 findings over 200 traces"), "{out}");
    assert_eq!(out.matches("  lock-cycle | A -> B").count(), 1, "{out}");
    assert!(out.contains("in 200 traces: "), "{out}");
    let o = foresight(&dir, &["check", "--update-baseline", refs[3]]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = foresight(&dir, &check);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));

    // Across traces: a cycle no trace has whole is still found, and listed once.
    let o = foresight(
        &dir,
        &[
            "analyze",
            "--format",
            "json",
            "traces/half-1.trace",
            "traces/run-000.trace",
            "traces/half-2.trace",
            "traces/run-001.trace",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let findings = v["findings"].as_array().unwrap();
    // The predicted inversion covers the class cycle A ⇄ B: one finding, as in one analysis.
    assert_eq!(findings.len(), 1, "{:#}", v["findings"]);
    assert_eq!(findings[0]["verdict"], "predicted");
    let o = foresight(
        &dir,
        &[
            "analyze",
            "--format",
            "json",
            "traces/half-1.trace",
            "traces/half-2.trace",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{:#}", v["findings"]);
    assert_eq!(findings[0]["verdict"], "potential");
    assert_eq!(findings[0]["traces"].as_array().unwrap().len(), 2);
    assert!(findings[0]["reason"]
        .as_str()
        .unwrap()
        .contains("different traces"));
}

#[test]
fn a_baseline_file_as_users_have_it_is_read_as_keys_and_a_line_that_is_no_key_is_bad_input() {
    let dir = fresh_dir("check-keys");
    std::fs::write(dir.join("inv.trace"), inversion("inv")).unwrap();
    // The file a user committed: the header, a reviewer's comment, a blank line, the key.
    let accepted = "# foresight baseline: accepted lock-discipline findings, one per line:\n\
                    # reviewed in #12\n\n\
                    lock-cycle | A -> B | holds deposit@bank.c:10, holds withdraw@bank.c:20, \
                    requests deposit@bank.c:11, requests withdraw@bank.c:21\n";
    std::fs::write(dir.join("base.txt"), accepted).unwrap();
    let o = foresight(&dir, &["check", "--baseline", "base.txt", "inv.trace"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    // Regenerating it changes none of its lines (the comment goes, as the header says).
    let o = foresight(
        &dir,
        &[
            "check",
            "--update-baseline",
            "--baseline",
            "base.txt",
            "inv.trace",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(dir.join("base.txt")).unwrap();
    assert_eq!(
        text.lines().last(),
        accepted.lines().last(),
        "the key's line is the line users have: {text}"
    );
    // A misspelt line would accept nothing: it is bad input, named by file and line.
    std::fs::write(
        dir.join("bad.txt"),
        format!("{accepted}lock-cycle: A -> B\n"),
    )
    .unwrap();
    let o = foresight(&dir, &["check", "--baseline", "bad.txt", "inv.trace"]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("bad.txt:5: "), "{}", stderr(&o));
    std::fs::write(
        dir.join("bad.txt"),
        "deadlock | A -> B | holds deposit@bank.c:10\n",
    )
    .unwrap();
    let o = foresight(&dir, &["check", "--baseline", "bad.txt", "inv.trace"]);
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("bad.txt:1: `deadlock`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn check_with_a_missing_baseline_or_trace_is_bad_input() {
    let dir = fresh_dir("check-bad");
    std::fs::write(dir.join("t.trace"), ordered("t")).unwrap();
    let o = foresight(&dir, &["check", "--baseline", "nope.txt", "t.trace"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope.txt"), "{}", stderr(&o));
    let o = foresight(&dir, &["check", "missing.trace"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing.trace"), "{}", stderr(&o));
    // No baseline at all: every finding is new.
    std::fs::write(dir.join("inv.trace"), inversion("inv")).unwrap();
    let o = foresight(&dir, &["check", "inv.trace"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn suppressions_silence_findings_count_them_and_require_a_reason() {
    let dir = fresh_dir("suppress");
    std::fs::write(dir.join("inv.trace"), inversion("inv")).unwrap();
    std::fs::write(
        dir.join("foresight-suppressions.toml"),
        "# reviewed\n\
         [[suppress]]\n\
         site = \"src/bank.c:21\"\n\
         reason = \"withdraw is only called at shutdown\"\n\
         \n\
         [[suppress]]\n\
         function = \"never_called\"\n\
         reason = \"stale\"\n",
    )
    .unwrap();
    let o = foresight(&dir, &["analyze", "--format", "json", "inv.trace"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["findings"].as_array().unwrap().len(), 0, "{v}");
    assert_eq!(v["summary"]["suppressed"], 1);
    let err = stderr(&o);
    assert!(
        err.contains("foresight-suppressions.toml:2: the suppression silenced 1 finding"),
        "{err}"
    );
    assert!(
        err.contains("foresight-suppressions.toml:6: the suppression silenced nothing"),
        "{err}"
    );
    let o = foresight(&dir, &["check", "inv.trace"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "suppressed findings pass the gate"
    );

    std::fs::write(
        dir.join("bad.toml"),
        "[[suppress]]\nclass = \"A\"\nreason = \"ok\"\n\n[[suppress]]\nclass = \"B\"\n",
    )
    .unwrap();
    let o = foresight(
        &dir,
        &["analyze", "--suppressions", "bad.toml", "inv.trace"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad.toml:5:"), "{}", stderr(&o));
    assert!(stderr(&o).contains("reason"), "{}", stderr(&o));
    std::fs::write(dir.join("typo.toml"), "[[suppress]]\nclas = \"A\"\n").unwrap();
    let o = foresight(
        &dir,
        &["analyze", "--suppressions", "typo.toml", "inv.trace"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("typo.toml:2:"), "{}", stderr(&o));
}

fn sarif_validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sarif-schema-2.1.0.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).expect("the SARIF schema compiles")
}

fn assert_valid_sarif(v: &serde_json::Value) {
    let validator = sarif_validator();
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{v:#}");
}

#[test]
fn sarif_output_is_valid_sarif_2_1_0_with_rules_locations_and_thread_flows() {
    let dir = fresh_dir("sarif");
    std::fs::write(dir.join("inv.trace"), inversion("inv")).unwrap();
    let mut t = T::new("ranks");
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    t.rank(a, 1);
    t.rank(b, 2);
    let t1 = t.spawn("one");
    t.nest(t1, b, a, "bad", 30);
    t.join(t1);
    std::fs::write(dir.join("ranks.trace"), t.b.finish()).unwrap();
    let o = foresight(
        &dir,
        &["analyze", "--format", "sarif", "inv.trace", "ranks.trace"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_valid_sarif(&v);
    assert_eq!(v["version"], "2.1.0");
    let run = &v["runs"][0];
    let rules: Vec<&str> = run["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(rules.contains(&"deadlock") && rules.contains(&"rank-violation"));
    let results = run["results"].as_array().unwrap();
    let deadlock = results
        .iter()
        .find(|r| r["ruleId"] == "deadlock")
        .expect("the inversion is predicted");
    assert_eq!(
        rules[deadlock["ruleIndex"].as_u64().unwrap() as usize],
        "deadlock"
    );
    let primary = &deadlock["locations"][0]["physicalLocation"];
    assert_eq!(primary["artifactLocation"]["uri"], "src/bank.c");
    assert_eq!(deadlock["relatedLocations"].as_array().unwrap().len(), 4);
    let flows = deadlock["codeFlows"][0]["threadFlows"].as_array().unwrap();
    // One threadFlow per thread of the witness: main (which created the tellers) and both.
    assert_eq!(flows.len(), 3, "one threadFlow per thread: {deadlock:#}");
    assert!(flows.iter().any(|f| f["locations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["kinds"][0] == "block")));
    assert!(results.iter().any(|r| r["ruleId"] == "rank-violation"));

    // `check` marks what is new against the baseline.
    let o = foresight(&dir, &["check", "--format", "sarif", "inv.trace"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_valid_sarif(&v);
    assert_eq!(v["runs"][0]["results"][0]["baselineState"], "new");
}

#[test]
fn graph_draws_the_class_graph_with_cycle_edges_highlighted() {
    let dir = fresh_dir("graph");
    let mut t = T::new("graph");
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let c = t.b.mutex("C");
    let t1 = t.spawn("one");
    t.nest(t1, a, b, "deposit", 10);
    t.nest(t1, b, a, "withdraw", 20);
    t.nest(t1, a, c, "audit", 30);
    t.join(t1);
    std::fs::write(dir.join("g.trace"), t.b.finish()).unwrap();
    let o = foresight(&dir, &["graph", "g.trace"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dot = stdout(&o);
    assert!(dot.starts_with("digraph lock_order {"), "{dot}");
    let edge = |from: &str, to: &str| {
        dot.lines()
            .find(|l| l.contains(&format!("{from} -> {to} ")))
            .unwrap_or_else(|| panic!("edge {from} -> {to} in {dot}"))
            .to_string()
    };
    // Nodes are numbered by sorted name: A = n0, B = n1, C = n2.
    assert!(edge("n0", "n1").contains("color=red"), "{dot}");
    assert!(
        edge("n0", "n1").contains("1× first: deposit (bank.c:11)"),
        "{dot}"
    );
    assert!(edge("n1", "n0").contains("style=bold"), "{dot}");
    assert!(!edge("n0", "n2").contains("red"), "{dot}");
    // Read in segments down to one event each, the graph is the same.
    for n in ["0", "1", "3"] {
        let o = foresight(&dir, &["graph", "--segment-events", n, "g.trace"]);
        assert_eq!(stdout(&o), dot, "--segment-events {n}");
    }
    let o = foresight(&dir, &["graph", "--scc-only", "g.trace"]);
    let scc = stdout(&o);
    assert!(!scc.contains("label=\"C\""), "{scc}");
    assert!(scc.contains("label=\"A\""), "{scc}");

    let o = foresight(&dir, &["graph", "--format", "svg", "g.trace"]);
    let has_dot = Command::new("dot").arg("-V").output().is_ok();
    assert!(
        has_dot || std::env::var_os("CI").is_none_or(|v| v.is_empty()),
        "graphviz's `dot` is not installed: CI installs it (.ci/run)"
    );
    if has_dot {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stdout(&o).contains("<svg"), "{}", stdout(&o));
    } else {
        println!("graphviz's `dot` is not installed: SVG output checked for its error only");
        assert_eq!(o.status.code(), Some(2));
        assert!(
            stderr(&o).contains("graphviz's `dot` is not installed"),
            "{}",
            stderr(&o)
        );
    }
}
