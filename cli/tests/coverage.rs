//! `foresight coverage`, as a user runs it: the locking call sites of the recorded program's
//! machine code, with their lines, and which no trace executed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_fixtures::harness;

/// Whether `cc` is installed: false (after saying SKIPPED) on a developer machine, a failure in CI.
fn cc_available() -> bool {
    let ok = Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(!harness::tools_required(), "cc is not installed");
        eprintln!("SKIPPED: cc is not installed");
    }
    ok
}

fn coverage(args: &[&std::ffi::OsStr]) -> Output {
    harness::foresight_in(harness::foresight(), &harness::work_dir())
        .arg("coverage")
        .args(args)
        .output()
        .expect("run foresight coverage")
}

/// The lines of `src` whose comment carries `marker`, as the fixture annotates them.
fn marked_lines(src: &Path, marker: &str) -> Vec<u64> {
    std::fs::read_to_string(src)
        .expect("read fixture")
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(&format!("/* {marker} */")))
        .map(|(i, _)| i as u64 + 1)
        .collect()
}

fn lines_of(list: &serde_json::Value, file: &str) -> Vec<u64> {
    let mut lines: Vec<u64> = list
        .as_array()
        .expect("a list")
        .iter()
        .filter(|s| s["file"].as_str().is_some_and(|f| f.ends_with(file)))
        .map(|s| s["line"].as_u64().expect("a line"))
        .collect();
    lines.sort_unstable();
    lines
}

fn recorded_fixture() -> Option<(PathBuf, PathBuf, PathBuf)> {
    if !cc_available() {
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/coverage_error_path.c");
    let exe = harness::compile_source(&src);
    let dir = harness::fresh_dir("coverage");
    let out = harness::run_recorded(&exe, &[], &dir, &[]);
    assert!(out.status.success(), "{out:?}");
    Some((src, exe, dir.join("trace")))
}

#[test]
fn the_untaken_error_path_is_listed_with_its_line() {
    let Some((src, exe, trace)) = recorded_fixture() else {
        return;
    };
    let out = coverage(&["--format".as_ref(), "json".as_ref(), trace.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["modules"][0], exe.display().to_string());
    let never = lines_of(&report["never_executed"], "coverage_error_path.c");
    let executed = lines_of(&report["executed"], "coverage_error_path.c");
    assert_eq!(never, marked_lines(&src, "NEVER"), "{report:#}");
    assert_eq!(executed, marked_lines(&src, "EXECUTED"), "{report:#}");
    let untaken = &report["never_executed"][0];
    assert_eq!(untaken["function"], "report_failure");
    assert_eq!(untaken["call"], "pthread_mutex_lock");
    assert_eq!(report["sites"], 5);

    // The text names the untaken site by function and line, with the share executed.
    let out = coverage(&[trace.as_os_str()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = marked_lines(&src, "NEVER")[0];
    assert!(
        text.starts_with(&format!(
            "5 locking sites, 4 executed (80%); never executed: `report_failure (coverage_error_path.c:{line})`"
        )),
        "{text}"
    );

    // --binary scans the file named instead of the trace's modules, with the same verdicts.
    let out = coverage(&["--binary".as_ref(), exe.as_os_str(), trace.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("5 locking sites, 4 executed"));
}

#[test]
fn the_demo_executes_every_locking_site() {
    if !cc_available() {
        return;
    }
    let dir = harness::fresh_dir("coverage-demo");
    let out = harness::foresight_in(harness::foresight(), &dir)
        .args(["demo", "--dir"])
        .arg(&dir)
        .output()
        .expect("run foresight demo");
    assert!(out.status.success(), "{out:?}");
    let trace = dir.join("bank.trace");
    let out = coverage(&["--format".as_ref(), "json".as_ref(), trace.as_os_str()]);
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // bank.c: the two locks of a transfer, the audit's two, and main's join.
    assert_eq!(
        lines_of(&report["executed"], "bank.c"),
        vec![25, 26, 35, 38, 68],
        "{report:#}"
    );
    assert_eq!(report["never_executed"], serde_json::json!([]));
    let out = coverage(&[trace.as_os_str()]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "5 locking sites, 5 executed (100%)\n"
    );
}

#[test]
fn a_missing_trace_or_binary_is_a_clear_error() {
    let missing = harness::work_dir().join("no-such.trace");
    let out = coverage(&[missing.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such.trace"), "{err}");

    let Some((_, _, trace)) = recorded_fixture() else {
        return;
    };
    let out = coverage(&[
        "--binary".as_ref(),
        "/nonexistent/prog".as_ref(),
        trace.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("binary /nonexistent/prog: no such file"),
        "{err}"
    );
    assert!(!err.contains("panicked"));

    // A file that is not an object file is named as such.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/coverage_error_path.c");
    let out = coverage(&["--binary".as_ref(), src.as_os_str(), trace.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("coverage_error_path.c: not an object file"),
        "{err}"
    );
}

/// Calls through the GOT (`-fno-plt`) and a fixed-address executable (`-no-pie`, optimised)
/// give the same verdicts as the default build.
#[test]
fn got_calls_and_fixed_address_executables_are_scanned() {
    if !cc_available() {
        return;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/coverage_error_path.c");
    for (tag, flags) in [
        ("noplt", &["-O0", "-fno-plt"][..]),
        ("nopie", &["-O2", "-no-pie"][..]),
    ] {
        let dir = harness::fresh_dir(&format!("coverage-{tag}"));
        let exe = dir.join(format!("coverage-{tag}"));
        let out = Command::new("cc")
            .args(["-g", "-pthread"])
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("run cc");
        assert!(out.status.success(), "{out:?}");
        let out = harness::run_recorded(&exe, &[], &dir, &[]);
        assert!(out.status.success(), "{out:?}");
        let trace = dir.join("trace");
        let out = coverage(&["--format".as_ref(), "json".as_ref(), trace.as_os_str()]);
        assert!(out.status.success(), "{out:?}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(
            lines_of(&report["never_executed"], "coverage_error_path.c"),
            marked_lines(&src, "NEVER"),
            "{tag}: {report:#}"
        );
        // An optimised build may duplicate a call (a loop's condition wait): every line is
        // still one the run executed.
        let mut executed = lines_of(&report["executed"], "coverage_error_path.c");
        executed.dedup();
        assert_eq!(
            executed,
            marked_lines(&src, "EXECUTED"),
            "{tag}: {report:#}"
        );
    }
}
