//! The race litmus suite: every program in `fixtures/race/` is compiled with `foresight config`
//! (gcc at `-O0`, clang at `-O1`), recorded with `foresight record`, analysed with `foresight
//! analyze --format json`, and the race findings are compared, line by line, with the
//! program's annotations: every `// RACE!` line must be named by a race finding, and no other
//! line of the program may be — neither a `// NORACE` line nor a line without an annotation.
//! A program whose annotations are all `NORACE` so asserts that nothing is reported at all.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use foresight_fixtures::harness::{self, Compiler};
use foresight_fixtures::litmus::{Litmus, Verdict};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/race")
}

/// The lines of `litmus`'s file that race findings name, and the whole report.
fn reported_lines(litmus: &Litmus, trace: &Path) -> (BTreeSet<u32>, String) {
    let stdout = common::analyze_ok(&["--format", "json"], trace);
    let report: serde_json::Value =
        serde_json::from_slice(&stdout).expect("the JSON report parses");
    let mut lines = BTreeSet::new();
    for finding in report["findings"].as_array().expect("findings is an array") {
        if finding["kind"] != "race" {
            continue;
        }
        assert_eq!(finding["verdict"], "predicted", "races are predicted");
        for loc in finding["locations"].as_array().expect("locations") {
            let file = loc["file"].as_str().unwrap_or_default();
            if Path::new(file).file_name().and_then(|f| f.to_str()) == Some(litmus.file_name()) {
                if let Some(line) = loc["line"].as_u64() {
                    lines.insert(line as u32);
                }
            }
        }
    }
    (lines, String::from_utf8_lossy(&stdout).into_owned())
}

fn check_with(name: &str, compiler: Compiler, opt: &str) {
    let source = ["c", "cc"]
        .iter()
        .map(|ext| fixtures_dir().join(format!("{name}.{ext}")))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("fixtures/race/{name}.c or .cc"));
    let litmus = Litmus::read(&source).expect("read the fixture");
    assert!(
        !litmus.annotations.is_empty(),
        "{name} carries no annotations: nothing would be checked"
    );
    let program = harness::compile_instrumented_with(&source, compiler, &[opt]);
    let dir = harness::fresh_dir(&format!("race-{name}-{}{opt}", compiler.name()));
    let trace = dir.join("run.trace");
    let plain = harness::run_plain(&program, &[]);
    let recorded = harness::record_with_cli(&program, &[], &trace, &[]);
    assert!(
        recorded.status.success() && plain.status.success(),
        "{name}: the program failed: {}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    assert_eq!(
        plain.stdout, recorded.stdout,
        "{name}: the output differs under the recorder"
    );
    let (reported, report) = reported_lines(&litmus, &trace);
    let races = litmus.lines(Verdict::Race);
    let quiet = litmus.lines(Verdict::NoRace);
    let missed: Vec<u32> = races.difference(&reported).copied().collect();
    let false_alarms: Vec<u32> = reported.intersection(&quiet).copied().collect();
    let unannotated: Vec<u32> = reported
        .iter()
        .filter(|l| !races.contains(l) && !quiet.contains(l))
        .copied()
        .collect();
    assert!(
        missed.is_empty() && false_alarms.is_empty() && unannotated.is_empty(),
        "{name} ({} {opt}): RACE! lines not reported: {missed:?}; NORACE lines reported: \
         {false_alarms:?}; unannotated lines reported: {unannotated:?}\nreport:\n{report}",
        compiler.name()
    );
}

fn check(name: &str) {
    for (compiler, opt) in [(Compiler::Gcc, "-O0"), (Compiler::Clang, "-O1")] {
        if harness::compiler_available(compiler) {
            check_with(name, compiler, opt);
        }
    }
}

macro_rules! litmus {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )*

        /// A new fixture without a test here would silently check nothing.
        #[test]
        fn every_fixture_has_a_test() {
            let listed: BTreeSet<&str> = [$(stringify!($name)),*].into();
            for e in std::fs::read_dir(fixtures_dir()).unwrap() {
                let p = e.unwrap().path();
                let stem = p.file_stem().and_then(|s| s.to_str()).unwrap().to_string();
                assert!(listed.contains(stem.as_str()), "{} has no test", p.display());
            }
        }
    };
}

litmus!(
    unprotected_counter,
    locked_counter,
    fork_join,
    different_locks,
    reorderable_sections,
    section_publishes_flag,
    barrier_phases,
    barrier_generations,
    barrier_count,
    once_init,
    once_bypassed,
    once_two_controls,
    creation_lockset,
    creation_lockset_leak,
    descendant_lockset,
    descendant_lockset_unlocked,
    atomic_publish,
    atomic_relaxed_publish,
    atomic_fences,
    mixed_atomic_plain,
    condition_handoff,
    semaphore_handoff,
    pipe_handoff,
    heap_reuse,
    free_races_write,
    free_after_join,
    free_after_handoff,
    realloc_races_read,
    use_after_free,
    rwlock_readers,
    escaped_local,
    cpp_threads,
    cpp_condition,
    reversed_sections,
    reversal_changes_read,
    reversal_reads_writer,
    reversal_locked_both,
    reversal_other_memory,
    sscanf_into_shared,
    sscanf_locked,
    getline_into_shared,
    socket_reads_into_shared,
);

/// The SARIF code flow of a predicted race words a reordering that runs both accesses, each
/// thread's last step being its access: not a deadlock's block.
#[test]
fn the_sarif_witness_of_a_race_runs_both_accesses() {
    if !harness::compiler_available(Compiler::Gcc) {
        return;
    }
    let source = fixtures_dir().join("reorderable_sections.c");
    let program = harness::compile_instrumented_with(&source, Compiler::Gcc, &["-O0"]);
    let dir = harness::fresh_dir("race-sarif-witness");
    let trace = dir.join("run.trace");
    let recorded = harness::record_with_cli(&program, &[], &trace, &[]);
    assert!(recorded.status.success());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(["analyze", "--format", "sarif"])
        .arg(&trace)
        .output()
        .expect("run foresight analyze");
    assert!(out.status.success());
    let sarif: serde_json::Value = serde_json::from_slice(&out.stdout).expect("SARIF parses");
    let results = sarif["runs"][0]["results"].as_array().expect("results");
    let race = results
        .iter()
        .find(|r| r["properties"]["rule"] == "sync-preserving")
        .unwrap_or_else(|| panic!("a sync-preserving race: {results:#?}"));
    let flow = &race["codeFlows"][0];
    let message = flow["message"]["text"]
        .as_str()
        .expect("the flow's message");
    assert!(
        message.contains("runs both accesses back to back") && !message.contains("deadlock"),
        "{message}"
    );
    let last_steps: Vec<(&str, &str)> = flow["threadFlows"]
        .as_array()
        .expect("thread flows")
        .iter()
        .filter_map(|t| t["locations"].as_array()?.last())
        .map(|s| {
            (
                s["kinds"][0].as_str().unwrap_or_default(),
                s["location"]["message"]["text"]
                    .as_str()
                    .unwrap_or_default(),
            )
        })
        .filter(|(kind, _)| *kind != "run")
        .collect();
    assert_eq!(
        last_steps.len(),
        2,
        "two threads make the racing accesses: {flow:#}"
    );
    for (kind, text) in last_steps {
        assert_eq!(kind, "access", "{text}");
        assert!(text.contains("writes x"), "{text}");
    }
}
