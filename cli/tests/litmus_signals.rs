//! Signal handlers' locks (`signal-unsafe-lock`): the programs `fixtures/hazards/signal_*.c`
//! are compiled with the system C compiler, recorded with `foresight record`, analysed with
//! `foresight analyze --format json`, and the findings compared line by line with the
//! programs' annotations: a `// SIGNALUNSAFE` line must be named by a `signal-unsafe-lock`
//! finding, a `// NOSIGNALUNSAFE` line by none. Then the text and SARIF reports,
//! `--explain`, `check` against a baseline and a suppression by class.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use foresight_fixtures::litmus::{Litmus, Verdict};
use recorded::{analyze, json};

mod recorded;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/hazards")
}

/// Compiles and records `name` (into a directory of the test's own, `tag`: tests run in
/// parallel), returning the litmus and the trace.
fn record(name: &str, tag: &str) -> (Litmus, PathBuf) {
    recorded::record(&fixtures_dir(), name, &format!("signals-{name}-{tag}"))
}

fn findings(report: &serde_json::Value) -> Vec<&serde_json::Value> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["kind"] == "signal-unsafe-lock")
        .collect()
}

/// The lines of `file` that `signal-unsafe-lock` findings name, with any role.
fn lines_named(report: &serde_json::Value, file: &str) -> BTreeSet<u32> {
    let mut lines = BTreeSet::new();
    for f in findings(report) {
        for l in f["locations"].as_array().expect("locations") {
            let named = l["file"]
                .as_str()
                .and_then(|p| Path::new(p).file_name()?.to_str().map(str::to_string));
            if named.as_deref() == Some(file) {
                lines.insert(l["line"].as_u64().expect("a line") as u32);
            }
        }
    }
    lines
}

#[test]
fn handler_locks_are_named_line_by_line() {
    for name in ["signal_unsafe_lock", "signal_flag_only"] {
        let (litmus, trace) = record(name, "lines");
        let report = json(&trace, &[]);
        let named = lines_named(&report, litmus.file_name());
        let m = litmus.compare(Verdict::SignalUnsafe, Verdict::NoSignalUnsafe, &named);
        assert!(
            m.is_empty(),
            "{name}: missed {:?}, false alarms {:?}\n{report:#}",
            m.missed,
            m.false_alarms
        );
        if litmus.no_findings {
            assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
        }
        // The signal events are extension events: the trailer's count leaves them out.
        assert_eq!(
            report["traces"][0]["warnings"],
            serde_json::json!([]),
            "{report:#}"
        );
    }
}

#[test]
fn the_interrupted_holder_is_reported_with_both_sites_and_the_signal() {
    let (litmus, trace) = record("signal_unsafe_lock", "holder");
    let report = json(&trace, &[]);
    let all = findings(&report);
    assert!(all.iter().all(|f| f["verdict"] == "hazard"), "{report:#}");
    let holders: Vec<_> = all
        .iter()
        .filter(|f| f["rule"] == "handler-interrupts-holder")
        .collect();
    assert_eq!(holders.len(), 1, "{report:#}");
    let f = holders[0];
    let s = &f["signal"];
    assert_eq!(s["signal"], 10, "{f:#}");
    assert_eq!(s["signal_name"], "SIGUSR1", "{f:#}");
    assert_eq!(s["function"], "pthread_mutex_lock", "{f:#}");
    assert_eq!(s["lock"], "stats_lock", "{f:#}");
    assert_eq!(f["cycle"], serde_json::json!(["stats_lock"]), "{f:#}");
    let roles: Vec<(&str, u64)> = f["locations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["role"].as_str().unwrap(), l["line"].as_u64().unwrap()))
        .collect();
    let signal_lines = litmus.lines(Verdict::SignalUnsafe);
    assert_eq!(roles.len(), 2, "{f:#}");
    assert_eq!(roles[0].0, "locks-in-handler");
    assert_eq!(roles[1].0, "holds");
    assert!(roles
        .iter()
        .all(|(_, line)| signal_lines.contains(&(*line as u32))));
    assert_eq!(
        s["handler"]["site"]["function"], "on_usr1",
        "the handler's site: {f:#}"
    );
    assert_eq!(s["holder"]["site"]["function"], "main", "{f:#}");
    // One lock-in-handler finding per handler site.
    let in_handler: BTreeSet<&str> = all
        .iter()
        .filter(|f| f["rule"] == "lock-in-handler")
        .map(|f| f["signal"]["handler"]["site"]["function"].as_str().unwrap())
        .collect();
    assert_eq!(in_handler, ["on_usr1", "on_usr2"].into(), "{report:#}");
    assert_eq!(report["summary"]["hazards"], 3, "{report:#}");
}

#[test]
fn text_sarif_explain_and_check_name_the_hazard() {
    let (_, trace) = record("signal_unsafe_lock", "renderers");
    let text = analyze(&trace, &[]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("== HAZARDS (3): locks taken in signal handlers =="),
        "{text}"
    );
    assert!(
        text.contains("the SIGUSR1 handler takes stats_lock")
            && text.contains("holds it with SIGUSR1 unblocked at main"),
        "{text}"
    );
    let sarif = analyze(&trace, &["--format", "sarif"]);
    assert!(sarif.status.success());
    let sarif: serde_json::Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let rules = sarif["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    assert!(
        rules.iter().any(|r| r["id"] == "signal-unsafe-lock"),
        "{sarif:#}"
    );
    let results: Vec<_> = sarif["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ruleId"] == "signal-unsafe-lock")
        .collect();
    assert_eq!(results.len(), 3, "{sarif:#}");
    assert!(results.iter().all(|r| r["level"] == "warning"), "{sarif:#}");
    for rule in [
        "signal-unsafe-lock",
        "handler-interrupts-holder",
        "lock-in-handler",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
            .args(["analyze", "--explain", rule])
            .output()
            .expect("run foresight analyze --explain");
        assert!(out.status.success(), "--explain {rule}");
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("handler"), "{rule}: {said}");
    }
    // `check` fails on the new hazards, and passes once they are in the baseline.
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
    assert_eq!(check(false).status.code(), Some(0));
}

#[test]
fn a_suppression_accepts_the_handler_locks_of_one_class() {
    let (_, trace) = record("signal_unsafe_lock", "suppressions");
    let file = trace.parent().unwrap().join("suppressions.toml");
    std::fs::write(
        &file,
        "[[suppress]]\nclass = \"stats_lock\"\nkind = \"signal-unsafe-lock\"\n\
         reason = \"SIGUSR1 is only sent while the program is idle\"\n",
    )
    .unwrap();
    let report = json(&trace, &["--suppressions", file.to_str().unwrap()]);
    let left: Vec<&str> = findings(&report)
        .iter()
        .map(|f| f["signal"]["lock"].as_str().unwrap())
        .collect();
    assert_eq!(left, ["cache_lock"], "{report:#}");
    assert_eq!(report["summary"]["suppressed"], 2, "{report:#}");
}
