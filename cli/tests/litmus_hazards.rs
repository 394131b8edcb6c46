//! The hazards litmus suite: every program in `fixtures/hazards/` is compiled with the system C
//! compiler, recorded with `foresight record`, analysed with `foresight analyze --format json`,
//! and the `blocking-under-lock` findings are compared, line by line, with the program's
//! annotations: a `// BLOCKING` line must be named as the blocking call of a finding, a
//! `// NOBLOCKING` line by none. Then the text and SARIF reports, and a suppression by class
//! and call.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use foresight_fixtures::harness;
use foresight_fixtures::litmus::{Litmus, Verdict};
use recorded::{analyze, json};

mod recorded;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/hazards")
}

/// Compiles and records `name` (into a directory of the test's own, `tag`: tests run in
/// parallel), returning the litmus and the trace.
fn record(name: &str, tag: &str) -> (Litmus, PathBuf) {
    recorded::record(&fixtures_dir(), name, &format!("hazards-{name}-{tag}"))
}

/// The lines of `file` that the findings of `kind` name with `role`.
fn lines_named(report: &serde_json::Value, kind: &str, role: &str, file: &str) -> BTreeSet<u32> {
    let mut lines = BTreeSet::new();
    for f in report["findings"].as_array().expect("findings") {
        if f["kind"] != kind {
            continue;
        }
        for l in f["locations"].as_array().expect("locations") {
            let named = l["file"]
                .as_str()
                .and_then(|p| Path::new(p).file_name()?.to_str().map(str::to_string));
            if l["role"] == role && named.as_deref() == Some(file) {
                lines.insert(l["line"].as_u64().expect("a line") as u32);
            }
        }
    }
    lines
}

#[test]
fn blocking_calls_under_a_lock_are_named_line_by_line() {
    let (litmus, trace) = record("blocking_under_lock", "lines");
    let report = json(&trace, &[]);
    let named = lines_named(&report, "blocking-under-lock", "blocks", litmus.file_name());
    let m = litmus.compare(Verdict::Blocking, Verdict::NoBlocking, &named);
    assert!(
        m.is_empty(),
        "missed {:?}, false alarms {:?}\n{report:#}",
        m.missed,
        m.false_alarms
    );
    // The blocking calls are extension events: the trailer's count leaves them out.
    assert_eq!(
        report["traces"][0]["warnings"],
        serde_json::json!([]),
        "{report:#}"
    );
    assert_eq!(
        report["summary"]["hazards"].as_u64(),
        Some(litmus.lines(Verdict::Blocking).len() as u64),
        "{report:#}"
    );
    for f in report["findings"].as_array().unwrap() {
        if f["kind"] != "blocking-under-lock" {
            continue;
        }
        assert_eq!(f["verdict"], "hazard");
        assert_eq!(f["rule"], "blocking-while-holding");
        let b = &f["blocking"];
        assert!(!b["held"].as_array().unwrap().is_empty(), "{f:#}");
        assert!(
            b["longest_ns"].as_u64().is_some(),
            "every call returned: {f:#}"
        );
        // The held lock's acquisition is a location too.
        assert!(
            f["locations"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["role"] == "holds"),
            "{f:#}"
        );
        if b["call"] == "sleep" {
            assert_eq!(f["cycle"], serde_json::json!(["log_lock"]), "{f:#}");
            assert!(b["longest_ns"].as_u64().unwrap() >= 5_000_000, "{f:#}");
            assert_eq!(b["timeout_ns"], 5_000_000, "{f:#}");
        }
    }
    let calls: BTreeSet<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["blocking"]["call"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        calls,
        ["poll", "read", "sleep"].map(String::from).into(),
        "{report:#}"
    );
}

#[test]
fn text_and_sarif_name_the_hazard() {
    let (_, trace) = record("blocking_under_lock", "renderers");
    let text = analyze(&trace, &[]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("== HAZARDS (3): locks held across blocking calls =="),
        "{text}"
    );
    assert!(
        text.contains("blocking call under a lock:") && text.contains("calls read while holding"),
        "{text}"
    );
    assert!(text.contains("3 hazards"), "{text}");
    let sarif = analyze(&trace, &["--format", "sarif"]);
    assert!(sarif.status.success());
    let sarif: serde_json::Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    let hazards: Vec<_> = results
        .iter()
        .filter(|r| r["ruleId"] == "blocking-under-lock")
        .collect();
    assert_eq!(hazards.len(), 3, "{sarif:#}");
    assert!(hazards.iter().all(|r| r["level"] == "warning"), "{sarif:#}");
    // `check` fails on a new hazard, and passes once it is in the baseline.
    let baseline = trace.parent().unwrap().join("baseline.txt");
    let check = |update: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_foresight"));
        c.arg("check").arg("--baseline").arg(&baseline);
        if update {
            c.arg("--update-baseline");
        }
        c.arg(&trace).output().expect("run foresight check")
    };
    std::fs::write(&baseline, "").unwrap();
    assert_eq!(check(false).status.code(), Some(1));
    assert_eq!(check(true).status.code(), Some(0));
    let listed = std::fs::read_to_string(&baseline).unwrap();
    assert_eq!(
        listed
            .lines()
            .filter(|l| l.starts_with("blocking-under-lock"))
            .count(),
        3,
        "{listed}"
    );
    assert_eq!(check(false).status.code(), Some(0));
}

#[test]
fn a_suppression_accepts_one_call_of_one_class() {
    let (_, trace) = record("blocking_under_lock", "suppressions");
    let dir = trace.parent().unwrap();
    let file = dir.join("suppressions.toml");
    std::fs::write(
        &file,
        "[[suppress]]\nclass = \"log_lock\"\ncall = \"sleep\"\n\
         reason = \"the log is flushed at a fixed pace\"\n",
    )
    .unwrap();
    let report = json(&trace, &["--suppressions", file.to_str().unwrap()]);
    let calls: BTreeSet<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["blocking"]["call"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        calls,
        ["poll", "read"].map(String::from).into(),
        "{report:#}"
    );
    assert_eq!(report["summary"]["suppressed"], 1, "{report:#}");
    // A call of another class is not accepted by it.
    std::fs::write(
        &file,
        "[[suppress]]\nclass = \"log_lock\"\ncall = \"read\"\nreason = \"r\"\n",
    )
    .unwrap();
    let report = json(&trace, &["--suppressions", file.to_str().unwrap()]);
    assert_eq!(report["summary"]["suppressed"], 0, "{report:#}");
    // An unknown call is an error naming the line.
    std::fs::write(
        &file,
        "[[suppress]]\nclass = \"log_lock\"\ncall = \"nap\"\nreason = \"r\"\n",
    )
    .unwrap();
    let out = analyze(&trace, &["--suppressions", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("suppressions.toml:"), "{err}");
}

#[test]
fn a_call_that_never_returned_is_reported_without_a_duration() {
    let name = "read_forever_under_lock";
    let source = fixtures_dir().join(format!("{name}.c"));
    let litmus = Litmus::read(&source).expect("read the fixture");
    let program = harness::compile_source(&source);
    let dir = harness::work_dir().join(format!("hazards-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("run.trace");
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .args(["record", "--hang-timeout", "1", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&program)
        .output()
        .expect("run foresight record");
    assert_eq!(
        out.status.code(),
        Some(128 + 9),
        "stopped by the hang timeout: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&trace, &[]);
    let named = lines_named(&report, "blocking-under-lock", "blocks", litmus.file_name());
    let m = litmus.compare(Verdict::Blocking, Verdict::NoBlocking, &named);
    assert!(m.is_empty(), "{m:?}\n{report:#}");
    let f = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "blocking-under-lock")
        .expect("a blocking-under-lock finding");
    assert_eq!(f["blocking"]["call"], "read", "{f:#}");
    assert_eq!(
        f["blocking"]["longest_ns"],
        serde_json::Value::Null,
        "{f:#}"
    );
    assert_eq!(f["cycle"], serde_json::json!(["conn_lock"]), "{f:#}");
    let text = analyze(&trace, &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("(it had not returned when the trace ended)"),
        "{text}"
    );
}

#[test]
fn dump_names_the_blocking_calls() {
    let (_, trace) = record("blocking_under_lock", "dump");
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .arg("dump")
        .arg(&trace)
        .output()
        .expect("run foresight dump");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // Each line's words after the event's position: kind, then the call.
    let calls = |kind: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace().skip_while(|w| *w != kind);
                words.next()?;
                words.next().map(str::to_string)
            })
            .collect()
    };
    let begun = calls("blocking-begin");
    for call in ["read", "sleep", "poll"] {
        assert!(
            begun.iter().any(|c| c == call),
            "no blocking-begin of {call}:\n{text}"
        );
    }
    assert_eq!(begun.len(), calls("blocking-end").len(), "{text}");
    // poll's 50 ms wait is its limit; usleep(5000) took at least its 5 ms.
    assert!(text.contains("poll timeout=50.0ms"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("blocking-end") && l.contains("sleep took=") && l.contains("ms")),
        "{text}"
    );
}
