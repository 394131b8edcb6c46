//! The annotation API end to end: `tests/annotated.c` (which includes
//! `recorder/include/foresight.h`) is compiled, run plainly (the annotations are no-ops) and
//! recorded with the real runtime, and the analysis sees the class names, subclasses and ranks.

use std::path::{Path, PathBuf};
use std::process::Command;

use foresight_fixtures::harness;

fn program() -> PathBuf {
    harness::compile_source(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/annotated.c"))
}

/// Records `annotated MODE` and returns the JSON report.
fn analyse(mode: &str) -> serde_json::Value {
    let exe = program();
    let plain = Command::new(&exe)
        .arg(mode)
        .output()
        .expect("run the program");
    assert!(
        plain.status.success(),
        "{mode}: the program fails without the recorder"
    );
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        format!("{mode}: 200\n"),
        "without the recorder the annotations do nothing"
    );
    let dir = harness::fresh_dir(&format!("annotate-{mode}"));
    let trace = dir.join("run.trace");
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .arg(mode)
        .output()
        .expect("run foresight record");
    assert!(
        out.status.success(),
        "{mode}: foresight record failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, plain.stdout, "recording is transparent");
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .current_dir(&dir)
        .args(["analyze", "--format", "json"])
        .arg(&trace)
        .output()
        .expect("run foresight analyze");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

fn kinds(report: &serde_json::Value) -> Vec<(String, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_transfer_nested_without_subclasses_is_a_class_self_cycle() {
    let r = analyse("plain");
    assert_eq!(
        kinds(&r),
        vec![("potential-deadlock".to_string(), "potential".to_string())],
        "{r:#}"
    );
    assert_eq!(r["findings"][0]["rule"], "same-class-nesting");
    assert_eq!(
        r["findings"][0]["cycle"][0], "account",
        "the class name annotation"
    );
}

#[test]
fn a_transfer_annotated_with_subclasses_is_silent() {
    let r = analyse("subclass");
    assert!(kinds(&r).is_empty(), "{r:#}");
    assert_eq!(
        r["summary"]["lock_classes"], 2,
        "account and account/1: {r:#}"
    );
}

#[test]
fn a_lock_taken_against_its_rank_is_reported() {
    let r = analyse("ranks");
    assert_eq!(
        kinds(&r),
        vec![("rank-violation".to_string(), "violation".to_string())],
        "{r:#}"
    );
    let f = &r["findings"][0];
    let lines: Vec<u64> = f["locations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["line"].as_u64().unwrap_or(0))
        .collect();
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/annotated.c"))
            .unwrap();
    let line_of = |needle: &str| {
        src.lines()
            .position(|l| l.contains(needle))
            .map(|i| i as u64 + 1)
            .unwrap()
    };
    assert_eq!(
        lines,
        vec![
            line_of("pthread_mutex_lock(&accounts[0].lock);"),
            line_of("pthread_mutex_lock(&ledger);")
        ],
        "{f:#}"
    );
}
