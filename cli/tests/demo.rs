//! `foresight demo`, as a new user runs it: compile the bundled example, record it, print the
//! predicted deadlock and data race with their witnesses.

use std::process::Command;

use foresight_fixtures::harness;

#[test]
fn demo_prints_a_predicted_deadlock_with_its_witness() {
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .arg("demo")
        .output()
        .expect("run foresight demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stderr:\n{stderr}");
    assert!(
        stdout.contains("PREDICTED deadlocks (1)"),
        "stdout:\n{stdout}"
    );
    assert!(stdout.contains("witness"), "stdout:\n{stdout}");
    assert!(stdout.contains("bank.c:25") && stdout.contains("bank.c:26"));
    // The race on the unprotected statistic, which happens-before alone misses in this run.
    assert!(stdout.contains("DATA RACES (1)"), "stdout:\n{stdout}");
    assert!(
        stdout.contains("`last_teller`") && stdout.contains("bank.c:53"),
        "stdout:\n{stdout}"
    );
    // The correct audit path (audit lock first, one account at a time) is not reported.
    assert!(!stdout.contains("audit (bank.c"), "stdout:\n{stdout}");
    assert!(stderr.contains("foresight demo: recording one run"));
}

#[test]
fn demo_json_is_the_report_schema() {
    let dir = harness::work_dir().join(format!("demo-json-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .args(["demo", "--format", "json", "--dir"])
        .arg(&dir)
        .output()
        .expect("run foresight demo");
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["schema"], "foresight-report");
    let findings = report["findings"].as_array().unwrap();
    assert!(findings
        .iter()
        .any(|f| f["kind"] == "deadlock" && f["verdict"] == "predicted"));
    assert!(findings
        .iter()
        .any(|f| f["kind"] == "race" && f["race"]["variable"]["name"] == "last_teller"));
    assert!(dir.join("bank.trace").exists(), "--dir keeps the trace");
}

#[test]
fn demo_names_a_missing_compiler() {
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("CC", "/nonexistent/cc")
        .arg("demo")
        .output()
        .expect("run foresight demo");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/cc"));
}
