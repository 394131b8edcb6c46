//! A program built with `foresight config` and run without `foresight record`: the stub turns
//! the calls of plain accesses it is reached from into no-ops (x86-64), while the program,
//! run in threads and across a fork and exec, still computes what it should
//! (`fixtures/instrumented/uncalled.c` counts the calls left in its own machine code). Under
//! `foresight record` nothing is patched and every access reaches the runtime, in the child
//! too; `FORESIGHT_NO_PATCH=1` keeps every call, and so does a system that refuses writable
//! code (seccomp, as a W^X policy). A missing compiler fails in CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_fixtures::harness::{self, Compiler};
use foresight_trace::event::EventKind;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/instrumented/uncalled.c")
}

/// The program's two lines, for the process itself or (`prefix` "child") its child: the total
/// its threads computed, and the calls to the stub in `bump` before and after they ran.
fn lines(out: &Output, prefix: &str) -> (String, u32, u32) {
    let text = String::from_utf8_lossy(&out.stdout);
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{prefix}total ")))
        .unwrap_or_else(|| panic!("no {prefix}total line: {text}"))
        .to_string();
    let calls = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{prefix}calls to the stub before ")))
        .unwrap_or_else(|| panic!("no {prefix}calls line: {text}"));
    let (before, after) = calls.split_once(" after ").expect("before N after M");
    (
        total,
        before.parse().expect("a count"),
        after.parse().expect("a count"),
    )
}

fn unrecorded(exe: &Path, no_patch: Option<&str>) -> Output {
    unrecorded_with(exe, &[], no_patch)
}

fn unrecorded_with(exe: &Path, args: &[&str], no_patch: Option<&str>) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    cmd.env_remove("LD_PRELOAD")
        .env_remove("FORESIGHT_NO_PATCH");
    if let Some(v) = no_patch {
        cmd.env("FORESIGHT_NO_PATCH", v);
    }
    let out = cmd.output().expect("run the program");
    assert!(
        out.status.success(),
        "{}: {}{}",
        exe.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("child exit 0\n"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn builds(c: Compiler) -> Vec<(String, PathBuf)> {
    [
        ("default", &[][..]),
        ("no-pie -O2", &["-no-pie", "-fno-PIE", "-O2"][..]),
    ]
    .iter()
    .map(|(name, extra)| {
        (
            format!("{} {name}", c.name()),
            harness::compile_instrumented_with(&fixture(), c, extra),
        )
    })
    .collect()
}

#[test]
fn without_the_runtime_the_calls_are_patched_out_and_results_stay_right() {
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        for (what, exe) in builds(c) {
            for run in 0..3 {
                let out = unrecorded(&exe, None);
                for who in ["", "child"] {
                    let (total, before, after) = lines(&out, who);
                    assert_eq!(total, "600000", "{what} {who} run {run}");
                    assert!(before >= 1, "{what} {who}: bump calls the stub");
                    if cfg!(target_arch = "x86_64") {
                        assert_eq!(after, 0, "{what} {who} run {run}: calls left in bump");
                    } else {
                        assert_eq!(after, before, "{what} {who}: patched off x86-64");
                    }
                }
            }
            // Turned off, every call stays; "0" is not off.
            let out = unrecorded(&exe, Some("1"));
            for who in ["", "child"] {
                let (total, before, after) = lines(&out, who);
                assert_eq!(total, "600000", "{what} {who}");
                assert_eq!(after, before, "{what} {who}: FORESIGHT_NO_PATCH=1");
            }
            if cfg!(target_arch = "x86_64") {
                let (_, _, after) = lines(&unrecorded(&exe, Some("0")), "");
                assert_eq!(after, 0, "{what}: FORESIGHT_NO_PATCH=0");
            }
        }
    }
}

#[test]
fn where_code_cannot_be_made_writable_the_calls_stay_and_results_stay_right() {
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        for (what, exe) in builds(c) {
            // seccomp refuses mprotect(PROT_WRITE | PROT_EXEC), to the program and its child.
            let out = unrecorded_with(&exe, &["refuse"], None);
            for who in ["", "child"] {
                let (total, before, after) = lines(&out, who);
                assert_eq!(total, "600000", "{what} {who}");
                assert!(before >= 1, "{what} {who}");
                assert_eq!(after, before, "{what} {who}: patched under W^X");
            }
        }
    }
}

#[test]
fn recorded_nothing_is_patched_and_every_access_reaches_the_runtime_in_the_child_too() {
    let source = std::fs::read_to_string(fixture()).expect("read the fixture");
    let bump_line = source
        .lines()
        .position(|l| l.contains("@bump"))
        .expect("the @bump line") as u32
        + 1;
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        for (what, exe) in builds(c) {
            let dir = harness::fresh_dir(&format!("unrecorded-{}", c.name()));
            let out = harness::record_with_cli(&exe, &[], &dir.join("trace"), &[]);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{what}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains("child exit 0\n"), "{what}: {text}");
            for who in ["", "child"] {
                let (total, before, after) = lines(&out, who);
                assert_eq!(total, "600000", "{what} {who}");
                assert!(before >= 1, "{what} {who}");
                assert_eq!(after, before, "{what} {who}: patched while recorded");
            }
            let traces = harness::traces_in(&dir);
            assert_eq!(
                traces.len(),
                2,
                "{what}: the program and its child: {traces:?}"
            );
            for path in &traces {
                let trace = harness::open_checked(path);
                // Each worker thread (1 to 4) executed 100,000 increments, each of which
                // reached the runtime (gcc: a read and a write; clang: one call for both).
                for thread in 1..=4 {
                    let counts = trace
                        .tables
                        .access_counts
                        .get(thread)
                        .unwrap_or_else(|| panic!("{what} {}: T{thread}", path.display()));
                    assert!(
                        counts.executed >= 100_000,
                        "{what} {}: T{thread} {counts:?}",
                        path.display()
                    );
                }
                let writes_in_bump = trace
                    .threads
                    .iter()
                    .flat_map(|t| &t.events)
                    .filter(|e| match e.kind {
                        EventKind::Write { site, .. } => trace
                            .tables
                            .site_location(site)
                            .is_some_and(|loc| loc.line == bump_line),
                        _ => false,
                    })
                    .count();
                assert!(
                    writes_in_bump >= 4,
                    "{what} {}: writes in bump {writes_in_bump}",
                    path.display()
                );
            }
        }
    }
}
