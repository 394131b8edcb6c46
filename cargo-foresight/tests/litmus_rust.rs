//! `cargo foresight test` as a user runs it, on the Rust fixtures (`fixtures/rust`): every test
//! recorded in a trace of its own, `foresight check` over all of them, and the findings of the
//! traces compared line by line with the annotations of `tests/litmus.rs` and `tests/bank.rs`
//! (`// DEADLOCK` lines named by a predicted deadlock, `// NODEADLOCK` lines by none,
//! `// POTENTIAL` lines by a potential finding and by no predicted one, `// RACE!` lines by a
//! race, `// NORACE` lines by none).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_fixtures::harness;
use foresight_fixtures::litmus::{Litmus, Verdict};

fn fixtures_rust() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/rust")
}

/// `cargo foresight test ARGS` with this build's `foresight` and runtime.
fn cargo_foresight(args: &[&str], traces: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cargo-foresight"));
    cmd.current_dir(fixtures_rust())
        .args(["foresight", "test", "--traces"])
        .arg(traces)
        .arg("--foresight")
        .arg(harness::foresight())
        .arg("--hang-timeout")
        .arg("60")
        .args(args)
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .env_remove("LD_PRELOAD");
    cmd.output().expect("run cargo-foresight")
}

fn traces_in(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read the traces dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            out.extend(traces_in(&path));
        } else if path.extension().is_some_and(|e| e == "trace") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The lines of `file` that the report's findings name: deadlock findings of `verdict`, or
/// (`verdict` "race") races.
/// The JSON report of `foresight analyze` over `traces`, which must succeed.
fn analyze_json(traces: &[PathBuf]) -> serde_json::Value {
    let report = Command::new(harness::foresight())
        .args(["analyze", "--format", "json"])
        .args(traces)
        .output()
        .expect("run foresight analyze");
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    serde_json::from_slice(&report.stdout).expect("JSON")
}

fn lines(report: &serde_json::Value, file: &str, verdict: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for f in report["findings"].as_array().expect("findings") {
        let race = f["kind"] == "race";
        if race != (verdict == "race") || (!race && f["verdict"] != verdict) {
            continue;
        }
        for loc in f["locations"].as_array().into_iter().flatten() {
            let named = loc["file"].as_str().unwrap_or_default();
            if Path::new(named).file_name().and_then(|n| n.to_str()) == Some(file) {
                if let Some(l) = loc["line"].as_u64() {
                    out.insert(l as u32);
                }
            }
        }
    }
    out
}

#[test]
fn litmus_programs_and_the_bank_line_by_line() {
    let traces = tempfile::tempdir().expect("temp dir");
    let out = cargo_foresight(&["--test", "litmus", "--test", "bank"], traces.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Every test passes; check finds what it must: exit 1 (findings not in any baseline).
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains(", 0 failed"), "{stdout}\n{stderr}");
    let all = traces_in(traces.path());
    // One trace per test: 14 litmus programs and the bank's 2 tests.
    assert_eq!(all.len(), 16, "{all:?}\n{stdout}\n{stderr}");

    let report = analyze_json(&all);
    let text = serde_json::to_string_pretty(&report["findings"]).unwrap();

    for name in ["litmus.rs", "bank.rs"] {
        let litmus = Litmus::read(&fixtures_rust().join("tests").join(name)).expect("read");
        let predicted = lines(&report, name, "predicted");
        let potential = lines(&report, name, "potential");
        let deadlock = litmus.compare(Verdict::Deadlock, Verdict::NoDeadlock, &predicted);
        assert!(deadlock.is_empty(), "{name}: {deadlock:?}\n{text}");
        let races = lines(&report, name, "race");
        let race = litmus.compare(Verdict::Race, Verdict::NoRace, &races);
        assert!(race.is_empty(), "{name}: races {race:?}\n{text}");
        let potential_missed: Vec<_> = litmus
            .lines(Verdict::Potential)
            .difference(&potential)
            .copied()
            .collect();
        assert!(
            potential_missed.is_empty(),
            "{name}: potential lines missed {potential_missed:?}\n{text}"
        );
        let wrongly_predicted: Vec<_> = litmus
            .lines(Verdict::Potential)
            .intersection(&predicted)
            .copied()
            .collect();
        assert!(
            wrongly_predicted.is_empty(),
            "{name}: predicted {wrongly_predicted:?}\n{text}"
        );
        assert!(
            !litmus.lines(Verdict::Deadlock).is_empty()
                || !litmus.lines(Verdict::Potential).is_empty(),
            "{name} has annotations"
        );
    }
}

#[test]
fn parking_lot_programs_line_by_line() {
    // `fixtures/rust` enables foresight-sync's `parking_lot` feature: its programs use
    // `foresight_sync::parking_lot` as a `parking_lot` user would.
    let traces = tempfile::tempdir().expect("temp dir");
    let out = cargo_foresight(&["--test", "parking_lot"], traces.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains(", 0 failed"), "{stdout}\n{stderr}");
    let all = traces_in(traces.path());
    assert_eq!(all.len(), 9, "{all:?}\n{stdout}\n{stderr}");
    let report = analyze_json(&all);
    let text = serde_json::to_string_pretty(&report["findings"]).unwrap();
    let litmus = Litmus::read(&fixtures_rust().join("tests/parking_lot.rs")).expect("read");
    for (yes, no, verdict) in [
        (Verdict::Deadlock, Verdict::NoDeadlock, "predicted"),
        (Verdict::Race, Verdict::NoRace, "race"),
    ] {
        assert!(
            !litmus.lines(yes).is_empty() && !litmus.lines(no).is_empty(),
            "parking_lot.rs has {verdict} annotations both ways"
        );
        let found = lines(&report, "parking_lot.rs", verdict);
        let wrong = litmus.compare(yes, no, &found);
        assert!(wrong.is_empty(), "{verdict}: {wrong:?}\n{text}");
    }
}

#[test]
fn a_failing_test_gives_its_own_exit_status() {
    let traces = tempfile::tempdir().expect("temp dir");
    let out = cargo_foresight(&["--test", "failing", "--", "--ignored"], traces.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // libtest exits 101 when a test fails.
    assert_eq!(out.status.code(), Some(101), "{stdout}\n{stderr}");
    assert!(stdout.contains("test fails ... FAILED"), "{stdout}");
    // The test's own report (libtest prints a failure's output on stdout) is shown.
    assert!(
        stdout.contains("fails on purpose") || stderr.contains("fails on purpose"),
        "{stdout}\n{stderr}"
    );
    // The traces are checked all the same.
    assert!(
        stderr.contains("foresight check") || stdout.contains("foresight check"),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn a_directory_it_did_not_make_is_not_emptied() {
    let traces = tempfile::tempdir().expect("temp dir");
    std::fs::write(traces.path().join("mine.txt"), "keep").unwrap();
    let out = cargo_foresight(&["--test", "bank"], traces.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not made by cargo foresight"));
    assert!(traces.path().join("mine.txt").is_file());
}

#[test]
fn the_crate_behaves_as_std_when_recorded() {
    // foresight-sync's own API tests (poisoning, try_lock, timeouts, once, scopes), each
    // recorded: every test passes as it does plainly, and the traces have no finding.
    let traces = tempfile::tempdir().expect("temp dir");
    let out = cargo_foresight(&["-p", "foresight-sync", "--test", "api"], traces.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains(", 0 failed"), "{stdout}\n{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("0 findings over 9 traces"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(traces_in(traces.path()).len(), 9);
}

#[test]
fn the_parking_lot_types_behave_as_parking_lot_when_recorded() {
    // foresight-sync's `parking_lot` API tests, each recorded, with the feature turned on the
    // way a user's `cargo test --features` does: they pass as they do plainly, with no finding.
    let traces = tempfile::tempdir().expect("temp dir");
    let out = cargo_foresight(
        &[
            "-p",
            "foresight-sync",
            "--features",
            "parking_lot",
            "--test",
            "parking_lot",
        ],
        traces.path(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains(", 0 failed"), "{stdout}\n{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("0 findings over 5 traces"),
        "{stdout}\n{stderr}"
    );
}

#[test]
fn annotations_name_classes_and_check_ranks() {
    let traces = tempfile::tempdir().expect("temp dir");
    let out = cargo_foresight(&["--test", "annotations"], traces.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The test passes; the rank violation is a finding: check exits 1.
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let source = std::fs::read_to_string(fixtures_rust().join("tests/annotations.rs")).unwrap();
    let rank_line = source
        .lines()
        .position(|l| l.ends_with("// RANK"))
        .expect("the marked line") as u64
        + 1;
    let report = analyze_json(&traces_in(traces.path()));
    let text = serde_json::to_string_pretty(&report["findings"]).unwrap();
    let violation = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "rank-violation")
        .unwrap_or_else(|| panic!("no rank violation:\n{text}"));
    assert!(
        violation["locations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["line"] == rank_line
                && l["file"].as_str().unwrap_or("").ends_with("annotations.rs")),
        "line {rank_line} not named:\n{text}"
    );
    assert!(
        text.contains("ledger") && text.contains("journal"),
        "{text}"
    );
}

/// The `thread-create` events of `trace`, as `foresight dump` shows them: each one's site.
fn creation_sites(trace: &Path) -> Vec<String> {
    let out = Command::new(harness::foresight())
        .arg("dump")
        .arg(trace)
        .output()
        .expect("run foresight dump");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" thread-create "))
        .map(|l| l.split_whitespace().last().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn threads_are_created_at_the_line_that_spawned_them() {
    let traces = tempfile::tempdir().expect("temp dir");
    let out = cargo_foresight(&["--test", "spawn_sites"], traces.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let all = traces_in(traces.path());
    let trace = |test: &str| {
        all.iter()
            .find(|p| p.file_stem().is_some_and(|s| s == test))
            .unwrap_or_else(|| panic!("no trace of {test} in {all:?}"))
    };
    let source = std::fs::read_to_string(fixtures_rust().join("tests/spawn_sites.rs")).unwrap();
    let spawned: BTreeSet<String> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.ends_with("// SPAWNED"))
        .map(|(i, _)| format!("spawn_sites.rs:{}", i + 1))
        .collect();
    assert_eq!(spawned.len(), 4);

    // Every way of spawning names its line; the test harness's own thread is not ours.
    let sites = creation_sites(trace("every_way_of_spawning"));
    let named: BTreeSet<String> = sites
        .iter()
        .map(|s| s.rsplit_once('/').map_or(s.as_str(), |(_, f)| f))
        .filter(|s| s.starts_with("spawn_sites.rs:"))
        .map(|s| s.split(':').take(2).collect::<Vec<_>>().join(":"))
        .collect();
    assert_eq!(named, spawned, "thread-create sites: {sites:?}");

    // A spawn refused before a thread was created leaves its line to no later creation.
    let sites = creation_sites(trace("a_spawn_that_fails_names_nothing_after_it"));
    assert!(!sites.is_empty(), "no thread-create event");
    assert!(
        sites.iter().all(|s| !s.contains("spawn_sites.rs")),
        "thread-create sites: {sites:?}"
    );
}
