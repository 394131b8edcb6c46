//! Observed deadlocks and stalls: every program in `fixtures/observed/` really hangs. It is
//! recorded with `foresight record --hang-timeout 1` (and one with SIGTERM sent to `record`
//! once the program is stuck), analysed with `foresight analyze --format json`, and the
//! findings of verdict `observed` are compared, line by line, with the program's annotations:
//! `// DEADLOCK` lines must be named by an observed finding, `// NODEADLOCK` lines by none. No
//! predicted or potential finding may name a `// DEADLOCK` line: what happened is reported as
//! having happened. A line `// foresight-observed: KIND RULE` gives the kind and rule every
//! observed finding of the program must have.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use foresight_fixtures::harness::{self, wait_until_stuck};
use foresight_fixtures::litmus::{Litmus, Verdict};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/observed")
}

/// `(kind, rule)` from the program's `// foresight-observed:` line.
fn expected_kind(source: &Path) -> (String, String) {
    let text = std::fs::read_to_string(source).unwrap();
    let spec = text
        .lines()
        .find_map(|l| l.split_once("// foresight-observed:").map(|(_, s)| s))
        .unwrap_or_else(|| panic!("{} has no `// foresight-observed:` line", source.display()));
    let mut words = spec.split_whitespace();
    (
        words.next().expect("a kind").to_string(),
        words.next().expect("a rule").to_string(),
    )
}

fn record(program: &Path, trace: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .args(["record", "--hang-timeout", "1", "-o"])
        .arg(trace)
        .arg("--")
        .arg(program)
        .output()
        .expect("run foresight record")
}

/// `foresight record` of `program`, stopped by SIGTERM to `record` once the program is stuck.
fn record_until_stuck_then_term(program: &Path, trace: &Path) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .args(["record", "-o"])
        .arg(trace)
        .arg("--")
        .arg(program)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run foresight record");
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let program_pid = loop {
        let text = std::fs::read_to_string(&children).unwrap_or_default();
        if let Some(pid) = text.split_whitespace().next() {
            break pid.parse::<u32>().unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the program never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    wait_until_stuck(program_pid);
    let killed = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(killed.success());
    child.wait_with_output().expect("wait for foresight record")
}

struct Reported {
    observed: BTreeSet<u32>,
    other: BTreeSet<u32>,
    kinds: BTreeSet<(String, String)>,
    findings: Vec<serde_json::Value>,
    report: String,
}

fn analyse(litmus: &Litmus, trace: &Path) -> Reported {
    let stdout = common::analyze_ok(&["--format", "json"], trace);
    let report: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    let mut found = Reported {
        observed: BTreeSet::new(),
        other: BTreeSet::new(),
        kinds: BTreeSet::new(),
        findings: Vec::new(),
        report: String::from_utf8_lossy(&stdout).into_owned(),
    };
    for f in report["findings"].as_array().expect("findings") {
        let observed = f["verdict"] == "observed";
        if observed {
            found.kinds.insert((
                f["kind"].as_str().unwrap().to_string(),
                f["rule"].as_str().unwrap().to_string(),
            ));
            found.findings.push(f.clone());
        }
        for loc in f["locations"].as_array().expect("locations") {
            let file = loc["file"].as_str().unwrap_or_default();
            if Path::new(file).file_name().and_then(|f| f.to_str()) != Some(litmus.file_name()) {
                continue;
            }
            if let Some(line) = loc["line"].as_u64() {
                if observed {
                    found.observed.insert(line as u32);
                } else {
                    found.other.insert(line as u32);
                }
            }
        }
    }
    found
}

fn compare(name: &str, litmus: &Litmus, expected: &(String, String), found: &Reported) {
    let cmp = litmus.compare(Verdict::Deadlock, Verdict::NoDeadlock, &found.observed);
    let predicted_too: Vec<u32> = litmus
        .lines(Verdict::Deadlock)
        .intersection(&found.other)
        .copied()
        .collect();
    assert!(
        cmp.is_empty() && predicted_too.is_empty(),
        "{name}: DEADLOCK lines not observed: {:?}; NODEADLOCK lines observed: {:?}; DEADLOCK \
         lines also reported as predicted or potential: {predicted_too:?}\nreport:\n{}",
        cmp.missed,
        cmp.false_alarms,
        found.report
    );
    assert_eq!(
        found.kinds,
        [expected.clone()].into(),
        "{name}: kinds and rules of the observed findings\n{}",
        found.report
    );
    assert_eq!(
        found.findings.len(),
        1,
        "{name}: one finding\n{}",
        found.report
    );
}

fn check(name: &str) -> Reported {
    let source = fixtures_dir().join(format!("{name}.c"));
    let litmus = Litmus::read(&source).expect("read the fixture");
    assert!(!litmus.annotations.is_empty(), "{name}: no annotations");
    let expected = expected_kind(&source);
    let program = harness::compile_source(&source);
    let dir = harness::fresh_dir(&format!("observed-{name}"));
    let trace = dir.join("run.trace");
    let out = record(&program, &trace);
    assert_eq!(
        out.status.code(),
        Some(128 + 9),
        "{name}: stopped by the hang timeout: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let found = analyse(&litmus, &trace);
    compare(name, &litmus, &expected, &found);
    let reason = found.findings[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("--hang-timeout"),
        "{name}: the reason says how the run ended: {reason}"
    );
    found
}

#[test]
fn lock_cycle() {
    let found = check("lock_cycle");
    let o = &found.findings[0]["observed"];
    assert_eq!(o["cycle"].as_array().unwrap().len(), 2, "{}", found.report);
    assert_eq!(
        o["threads"].as_array().unwrap().len(),
        3,
        "the two of the cycle, then main in its join: {}",
        found.report
    );
    assert_eq!(o["threads"][2]["waits"], "join", "{}", found.report);
}

#[test]
fn self_deadlock() {
    check("self_deadlock");
}

#[test]
fn join_holding() {
    check("join_holding");
}

#[test]
fn join_stall() {
    let found = check("join_stall");
    let threads = found.findings[0]["observed"]["threads"].as_array().unwrap();
    let waits: BTreeSet<&str> = threads.iter().filter_map(|t| t["waits"].as_str()).collect();
    assert_eq!(
        waits,
        ["join", "condition", "lock"].into(),
        "{}",
        found.report
    );
}

#[test]
fn rwlock_upgrade() {
    check("rwlock_upgrade");
}

/// The same deadlock stopped by SIGTERM sent to `foresight record`: passed on to the program,
/// whose trace is completed; the report is the same, and says which signal ended the run.
#[test]
fn lock_cycle_stopped_by_a_signal_to_record() {
    let source = fixtures_dir().join("lock_cycle.c");
    let litmus = Litmus::read(&source).unwrap();
    let program = harness::compile_source(&source);
    let dir = harness::fresh_dir("observed-lock_cycle-term");
    let trace = dir.join("run.trace");
    let out = record_until_stuck_then_term(&program, &trace);
    assert_eq!(
        out.status.code(),
        Some(128 + 15),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let found = analyse(&litmus, &trace);
    compare(
        "lock_cycle (SIGTERM)",
        &litmus,
        &expected_kind(&source),
        &found,
    );
    let reason = found.findings[0]["reason"].as_str().unwrap();
    assert!(reason.contains("SIGTERM"), "{reason}");
}

/// A new fixture without a test here would silently check nothing.
#[test]
fn every_fixture_has_a_test() {
    let listed: BTreeSet<&str> = [
        "lock_cycle",
        "self_deadlock",
        "join_holding",
        "join_stall",
        "rwlock_upgrade",
    ]
    .into();
    for e in std::fs::read_dir(fixtures_dir()).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
        assert!(
            listed.contains(stem.as_str()),
            "fixtures/observed/{stem} has no test"
        );
    }
}
