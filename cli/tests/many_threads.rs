//! A thread per request: `fixtures/threads/thread_per_request.c` creates 20,000 threads over
//! its life with at most 8 alive, built with `foresight config` (gcc at `-O1`), recorded with
//! `foresight record` and analysed with `foresight analyze --format json`. The clocks reuse
//! the slots of joined threads (`analyzer/src/vector_clock.rs`), so the whole trace is
//! analysed, in two segments (a segment is cut once 16,384 threads started in it): the race of
//! the last two requests and the lock inversion of two late ones are found, line by line as the
//! program's annotations say, and nothing else. The 10^5-thread
//! run, with its memory and time, is `analyzer/bench/many_threads.sh`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use foresight_fixtures::harness::{self, Compiler};
use foresight_fixtures::litmus::{Litmus, Verdict};

const REQUESTS: &str = "20000";

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/threads/thread_per_request.c")
}

/// The lines of the program that findings of `kind` with a predicted verdict name.
fn predicted_lines(report: &serde_json::Value, kind: &str, litmus: &Litmus) -> BTreeSet<u32> {
    let mut lines = BTreeSet::new();
    for finding in report["findings"].as_array().expect("findings is an array") {
        if finding["kind"] != kind || finding["verdict"] != "predicted" {
            continue;
        }
        for loc in finding["locations"].as_array().expect("locations") {
            let file = loc["file"].as_str().unwrap_or_default();
            if Path::new(file).file_name().and_then(|f| f.to_str()) == Some(litmus.file_name()) {
                if let Some(line) = loc["line"].as_u64() {
                    lines.insert(line as u32);
                }
            }
        }
    }
    lines
}

#[test]
fn a_thread_per_request_is_analysed_whole_and_its_late_race_and_deadlock_found() {
    if !harness::compiler_available(Compiler::Gcc) {
        return;
    }
    let source = source();
    let litmus = Litmus::read(&source).expect("read the fixture");
    let program = harness::compile_instrumented_with(&source, Compiler::Gcc, &["-O1"]);
    let dir = harness::fresh_dir("many-threads");
    let trace = dir.join("run.trace");
    let recorded = harness::record_with_cli(&program, &[REQUESTS], &trace, &[]);
    assert!(
        recorded.status.success(),
        "the program failed under the recorder: {}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&recorded.stdout),
        format!(
            "{REQUESTS} requests, {} total\nlast recorded\n",
            (0..REQUESTS.parse::<u64>().unwrap()).sum::<u64>()
        )
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(["analyze", "--format", "json"])
        .arg(&trace)
        .output()
        .expect("run foresight analyze");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "foresight analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let summary = &report["traces"][0];
    assert_eq!(
        summary["threads"].as_u64(),
        Some(REQUESTS.parse::<u64>().unwrap() + 1),
        "every thread is in the trace"
    );
    assert_eq!(
        report["summary"]["segments"].as_u64(),
        Some(2),
        "cut once 16,384 threads started"
    );
    let warnings = summary["warnings"].to_string();
    assert!(
        !warnings.contains("outgrew"),
        "the clocks kept within their budget: {warnings}"
    );

    let races = predicted_lines(&report, "race", &litmus);
    let deadlocks = predicted_lines(&report, "deadlock", &litmus);
    let race = litmus.compare(Verdict::Race, Verdict::NoRace, &races);
    let deadlock = litmus.compare(Verdict::Deadlock, Verdict::NoDeadlock, &deadlocks);
    let annotated_races = litmus.lines(Verdict::Race);
    let annotated_deadlocks = litmus.lines(Verdict::Deadlock);
    let stray_races: Vec<u32> = races.difference(&annotated_races).copied().collect();
    let stray_deadlocks: Vec<u32> = deadlocks
        .difference(&annotated_deadlocks)
        .copied()
        .collect();
    assert!(
        race.is_empty()
            && deadlock.is_empty()
            && stray_races.is_empty()
            && stray_deadlocks.is_empty(),
        "RACE! lines missed: {:?}, NORACE lines reported: {:?}, other lines in races: \
         {stray_races:?}; DEADLOCK lines missed: {:?}, other lines in deadlocks: \
         {stray_deadlocks:?}\n{text}",
        race.missed,
        race.false_alarms,
        deadlock.missed
    );

    // The race is between the last two requests' threads, named as the trace names them.
    let race = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "race")
        .expect("a race finding");
    let threads: Vec<&str> = race["race"]["accesses"]
        .as_array()
        .expect("the race's accesses")
        .iter()
        .map(|a| a["thread"].as_str().unwrap_or_default())
        .collect();
    let n: u64 = REQUESTS.parse().unwrap();
    // Thread 0 is main; request i runs in thread i + 1.
    let expected: Vec<String> = [n - 1, n]
        .iter()
        .map(|id| format!("thread {id} \"thread-{id}\""))
        .collect();
    assert_eq!(threads, expected, "the last two requests' threads");
}
