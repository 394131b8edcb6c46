//! A thread per request: `fixtures/threads/thread_per_request.c` creates 20,000 threads over
//! its life with at most 8 alive, built with `foresight config` (gcc at `-O1`), recorded with
//! `foresight record` and analysed with `foresight analyze --format json`. The clocks reuse
//! the slots of joined threads (`analyzer/src/vector_clock.rs`), so the whole trace is
//! analysed, in two segments (a segment is cut once 16,384 threads started in it): the race of
//! the last two requests and the lock inversion of two late ones are found, line by line as the
//! program's annotations say, and nothing else. The 10^5-thread run, with its memory and time,
//! is `analyzer/bench/many_threads.sh`. A witness counts the threads it runs whole instead of
//! listing each (builder traces below, and the deadlock's witness of the recorded program).

mod common;

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

    // The race is between the last two requests' threads, named as the trace names them, in
    // the order they wrote in this run (either).
    let race = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "race")
        .expect("a race finding");
    let mut threads: Vec<&str> = race["race"]["accesses"]
        .as_array()
        .expect("the race's accesses")
        .iter()
        .map(|a| a["thread"].as_str().unwrap_or_default())
        .collect();
    threads.sort_unstable();
    let n: u64 = REQUESTS.parse().unwrap();
    // Thread 0 is main; request i runs in thread i + 1.
    let mut expected: Vec<String> = [n - 1, n]
        .iter()
        .map(|id| format!("thread {id} \"thread-{id}\""))
        .collect();
    expected.sort_unstable();
    assert_eq!(threads, expected, "the last two requests' threads");

    // The deadlock's witness runs almost every request whole: it counts them, and lists the
    // threads that hold or block, main, and the few cut inside their lives.
    let deadlock = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "deadlock")
        .expect("a deadlock finding");
    let witness = &deadlock["witness"];
    let listed = witness["threads"].as_array().expect("listed threads");
    let counted = witness["others"]["threads"]
        .as_u64()
        .expect("counted threads");
    assert!(
        counted > n - 100 && listed.len() < 20,
        "{} listed, {counted} counted: {witness:#}",
        listed.len()
    );
    assert!(witness.to_string().len() < 16 << 10, "{witness:#}");
}

/// Requests served one after the other by `served` short threads (each takes the statistics
/// lock once and exits; main joins it), then two threads that take A and B in opposite
/// orders and two that write `last` with only a lock hand-off between them.
fn requests_then_inversion_and_race(served: u32) -> Vec<u8> {
    use foresight_trace::builder::TraceBuilder;
    let mut b = TraceBuilder::new("requests");
    let main = b.main_thread();
    let stats = b.mutex("stats");
    let (a, m) = (b.mutex("A"), b.mutex("B"));
    let hand = b.mutex("hand");
    let create = b.site("main", "server.c", 1);
    let join = b.site("main", "server.c", 2);
    let count = b.site("serve", "server.c", 10);
    let unlock = b.site("serve", "server.c", 11);
    for i in 0..served {
        let t = b.spawn(main, create, &format!("request-{i}"));
        b.lock(t, stats, count);
        b.unlock(t, stats, unlock);
        b.join(main, t, join);
    }
    let one = b.spawn(main, create, "one");
    let two = b.spawn(main, create, "two");
    for (t, first, second, line) in [(one, a, m, 20), (two, m, a, 30)] {
        let s1 = b.site("transfer", "server.c", line);
        let s2 = b.site("transfer", "server.c", line + 1);
        let s3 = b.site("transfer", "server.c", line + 2);
        b.lock(t, first, s1);
        b.lock(t, second, s2);
        b.unlock(t, second, s3);
        b.unlock(t, first, s3);
    }
    let writer = b.spawn(main, create, "writer");
    let reader = b.spawn(main, create, "late");
    let write = b.site("record_last", "server.c", 40);
    let take = b.site("record_last", "server.c", 41);
    let give = b.site("record_last", "server.c", 42);
    const LAST: u64 = 0x7000_0000;
    let count_in = b.site("record_last", "server.c", 43);
    b.write(writer, LAST, 8, write);
    b.lock(writer, hand, take);
    b.write(writer, LAST + 8, 8, count_in);
    b.unlock(writer, hand, give);
    b.lock(reader, hand, take);
    b.write(reader, LAST + 16, 8, count_in);
    b.unlock(reader, hand, give);
    b.write(reader, LAST, 8, write);
    for t in [one, two, writer, reader] {
        b.join(main, t, join);
    }
    b.finish()
}

fn analyze(trace: &Path, args: &[&str]) -> String {
    String::from_utf8(common::analyze_ok(args, trace)).expect("UTF-8 report")
}

/// The witnesses of `report` (JSON), by the kind of their finding.
fn witnesses<'r>(report: &'r serde_json::Value, kind: &str) -> Vec<&'r serde_json::Value> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["kind"] == kind && !f["witness"].is_null())
        .map(|f| &f["witness"])
        .collect()
}

#[test]
fn a_witness_counts_the_threads_that_ran_whole_and_lists_those_that_matter() {
    const SERVED: u32 = 40;
    let dir = harness::fresh_dir("witness-others");
    let trace = dir.join("requests.trace");
    std::fs::write(&trace, requests_then_inversion_and_race(SERVED)).unwrap();
    // Thread 0 is main; request i runs in thread i + 1 and records 5 events (start, request,
    // acquire, release, exit).
    for args in [
        &["--format", "json"][..],
        &["--format", "json", "--segment-events", "64"],
    ] {
        let report: serde_json::Value =
            serde_json::from_str(&analyze(&trace, args)).expect("JSON report");
        let deadlocks = witnesses(&report, "deadlock");
        let races = witnesses(&report, "race");
        assert_eq!(
            (deadlocks.len(), races.len()),
            (1, 1),
            "{args:?}: {report:#}"
        );
        for w in deadlocks.iter().chain(&races) {
            let others = &w["others"];
            assert_eq!(others["threads"], SERVED, "{args:?}: {w:#}");
            assert_eq!(others["events"], 5 * SERVED, "{args:?}: {w:#}");
            assert_eq!(
                others["ids"],
                serde_json::json!([[1, SERVED]]),
                "{args:?}: {w:#}"
            );
            // Listed: main (part of its life) and the pattern's two threads, nothing else.
            let listed: Vec<&str> = w["threads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["thread"].as_str().unwrap())
                .collect();
            assert!(listed.len() <= 3, "{args:?}: {listed:?}");
            assert!(
                listed.iter().any(|t| t.starts_with("thread 0 ")),
                "{listed:?}"
            );
            assert!(
                !listed.iter().any(|t| t.contains("request-")),
                "{args:?}: {listed:?}"
            );
        }
        let blocking = deadlocks[0]["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| !t["blocks"].is_null() && !t["holds"].as_array().unwrap().is_empty())
            .count();
        assert_eq!(blocking, 2, "{args:?}: {:#}", deadlocks[0]);
    }

    let text = analyze(&trace, &[]);
    let line = format!(
        "{SERVED} other threads run their whole recorded lives, holding nothing ({} events in \
         all): threads 1–{SERVED}",
        5 * SERVED
    );
    assert_eq!(text.matches(&line).count(), 2, "{text}");
    // The schedule still names the last of them; the list of threads does not.
    assert!(
        !text
            .lines()
            .any(|l| l.contains("\"request-") && l.contains("runs its first")),
        "{text}"
    );

    let sarif: serde_json::Value =
        serde_json::from_str(&analyze(&trace, &["--format", "sarif"])).expect("SARIF");
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sarif-schema-2.1.0.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the SARIF schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&sarif)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    let flows = |rule: &str| -> Vec<&serde_json::Value> {
        results
            .iter()
            .find(|r| r["ruleId"] == rule)
            .unwrap_or_else(|| panic!("a {rule} result: {sarif:#}"))["codeFlows"][0]["threadFlows"]
            .as_array()
            .unwrap()
            .iter()
            .collect()
    };
    for rule in ["deadlock", "race"] {
        let flows = flows(rule);
        let others: Vec<_> = flows.iter().filter(|f| f["id"] == "others").collect();
        assert_eq!(others.len(), 1, "{flows:#?}");
        assert_eq!(others[0]["properties"]["threads"], SERVED);
        assert_eq!(
            others[0]["properties"]["ids"],
            serde_json::json!([[1, SERVED]])
        );
        assert!(flows.len() <= 4, "{flows:#?}");
    }
}

#[test]
fn a_witness_of_a_few_threads_lists_each() {
    let dir = harness::fresh_dir("witness-few");
    let trace = dir.join("requests.trace");
    std::fs::write(&trace, requests_then_inversion_and_race(3)).unwrap();
    let report: serde_json::Value =
        serde_json::from_str(&analyze(&trace, &["--format", "json"])).expect("JSON report");
    let w = witnesses(&report, "deadlock")[0];
    assert!(w["others"].is_null(), "{w:#}");
    let whole = w["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["thread"].as_str().unwrap().contains("request-"))
        .inspect(|t| assert_eq!(t["prefix_events"], 5, "{t:#}"))
        .count();
    assert_eq!(whole, 3, "{w:#}");
}
