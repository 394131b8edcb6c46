//! A fixture program compiled with the system C compiler, recorded with `foresight record` and
//! analysed with `foresight analyze`, shared by the litmus suites that read one kind of finding
//! out of the JSON report (`litmus_hazards.rs`, `litmus_signals.rs`).

// Each test binary uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use foresight_fixtures::harness;
use foresight_fixtures::litmus::Litmus;

/// Compiles and records `dir/name.c` into a work directory of its own, `work` (tests run in
/// parallel), returning the litmus and the trace.
pub fn record(dir: &Path, name: &str, work: &str) -> (Litmus, PathBuf) {
    let source = dir.join(format!("{name}.c"));
    let litmus = Litmus::read(&source).expect("read the fixture");
    let program = harness::compile_source(&source);
    let dir = harness::work_dir().join(work);
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("run.trace");
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&program)
        .output()
        .expect("run foresight record");
    assert!(
        out.status.success(),
        "{name}: foresight record failed (or the program's own check did): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (litmus, trace)
}

/// `foresight analyze [extra] trace`.
pub fn analyze(trace: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_foresight"))
        .arg("analyze")
        .args(extra)
        .arg(trace)
        .output()
        .expect("run foresight analyze")
}

/// The JSON report of `foresight analyze --format json [extra] trace`, which must succeed.
pub fn json(trace: &Path, extra: &[&str]) -> serde_json::Value {
    let out = analyze(trace, &[&["--format", "json"], extra].concat());
    assert!(
        out.status.success(),
        "foresight analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the JSON report parses")
}
