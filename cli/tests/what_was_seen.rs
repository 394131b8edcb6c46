//! Reports a user can trust, through the CLI: a cycle of five locks is found with the default
//! flags, and a length limit that cuts one still lists it; a program whose synchronisation
//! foresight cannot see (semaphores only, Python's `threading.Lock`, Rust's `std::sync::Mutex`)
//! gets a coverage note in text, JSON and SARIF, and `check --fail-if-blind` fails on it; a
//! healthy server stopped with Ctrl-C is no finding; and a baseline of one run of a program
//! whose race order changes from run to run holds on 20 later runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use foresight_fixtures::harness::{self, tools_required, wait_until_stuck, Compiler};

fn fixture(dir: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../fixtures/{dir}/{name}"))
}

fn foresight(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .args(args)
        .output()
        .expect("run foresight")
}

fn record(program: &[&str], trace: &Path) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .args(["record", "-o"])
        .arg(trace)
        .arg("--")
        .args(program)
        .output()
        .expect("run foresight record");
    assert!(
        out.status.success(),
        "record {program:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(trace: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["analyze", "--format", "json"];
    args.extend(extra);
    args.push(trace.to_str().unwrap());
    let out = foresight(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn text(trace: &Path) -> String {
    let out = foresight(&["analyze", trace.to_str().unwrap()]);
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The coverage notes of every trace of a report, by their JSON name.
fn notes(report: &serde_json::Value) -> Vec<String> {
    report["traces"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["coverage"]["notes"].as_array().unwrap().clone())
        .map(|n| n["note"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_length_limit_that_cuts_a_cycle_still_lists_its_component() {
    let program = harness::compile_source(&fixture("deadlock", "five_cycle.c"));
    let dir = harness::fresh_dir("five-cycle-cut");
    let trace = dir.join("run.trace");
    record(&[program.to_str().unwrap()], &trace);
    let whole = json(&trace, &[]);
    assert_eq!(
        whole["summary"]["max_cycle_length"],
        serde_json::Value::Null
    );
    assert_eq!(whole["summary"]["predicted"], 1, "{whole}");
    let cut = json(&trace, &["--max-cycle-length", "4"]);
    assert_eq!(cut["summary"]["cycle_length_cut"], true);
    assert_eq!(cut["components"][0]["search_cut"], true, "{cut}");
    let findings = cut["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{cut}");
    assert_eq!(findings[0]["verdict"], "potential");
    assert_eq!(findings[0]["cycle"].as_array().unwrap().len(), 5);
}

#[test]
fn a_semaphore_only_program_is_said_to_show_no_lock_and_check_can_fail_on_it() {
    let program = harness::compile_source(&fixture("coverage", "semaphores_only.c"));
    let dir = harness::fresh_dir("semaphores-only");
    let trace = dir.join("run.trace");
    record(&[program.to_str().unwrap()], &trace);
    let report = json(&trace, &[]);
    assert_eq!(
        notes(&report),
        ["semaphores-only", "no-accesses"],
        "{report}"
    );
    let t = text(&trace);
    assert!(t.contains("not seen: 1 semaphore and no lock"), "{t}");
    assert!(t.contains("data races were not checked"), "{t}");
    let sarif = foresight(&["analyze", "--format", "sarif", trace.to_str().unwrap()]);
    let sarif: serde_json::Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let said: Vec<&str> = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
        .as_array()
        .expect("notifications")
        .iter()
        .map(|n| n["message"]["text"].as_str().unwrap())
        .collect();
    assert!(
        said.iter().any(|s| s.contains("not seen: 1 semaphore")),
        "{said:?}"
    );
    let baseline = dir.join("empty-baseline.txt");
    std::fs::write(&baseline, "").unwrap();
    let args = |extra: &[&'static str]| {
        let mut a = vec!["check", "--baseline", baseline.to_str().unwrap()];
        a.extend_from_slice(extra);
        a.push(trace.to_str().unwrap());
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| {
        Command::new(env!("CARGO_BIN_EXE_foresight"))
            .args(a)
            .output()
            .unwrap()
    };
    assert_eq!(run(args(&[])).status.code(), Some(0));
    let blind = run(args(&["--fail-if-blind"]));
    assert_eq!(blind.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&blind.stderr).contains("nothing of the program's"));
}

#[test]
fn a_python_program_is_said_to_lock_where_foresight_cannot_see() {
    let has_python = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_python {
        assert!(!tools_required(), "python3 is not installed");
        eprintln!("SKIPPED: python3 is not installed");
        return;
    }
    let dir = harness::fresh_dir("python-locks");
    let script = dir.join("locks.py");
    std::fs::write(
        &script,
        "import threading\nlock = threading.Lock()\ntotal = 0\n\ndef work():\n    global total\n    \
         for _ in range(100):\n        with lock:\n            total += 1\n\n\
         ts = [threading.Thread(target=work) for _ in range(3)]\n\
         for t in ts: t.start()\nfor t in ts: t.join()\nprint(total)\n",
    )
    .unwrap();
    let trace = dir.join("run.trace");
    record(&["python3", script.to_str().unwrap()], &trace);
    let report = json(&trace, &[]);
    let runtimes: Vec<&serde_json::Value> = report["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["coverage"]["runtime"])
        .collect();
    assert!(runtimes.iter().any(|r| *r == "python"), "{report}");
    assert!(notes(&report).contains(&"runtime".to_string()), "{report}");
    assert!(text(&trace).contains("Python's threading.Lock is a semaphore"));
}

#[test]
fn a_rust_program_is_said_to_lock_where_foresight_cannot_see() {
    let has_rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_rustc {
        assert!(!tools_required(), "rustc is not installed");
        eprintln!("SKIPPED: rustc is not installed");
        return;
    }
    let dir = harness::fresh_dir("rust-locks");
    let source = dir.join("locks.rs");
    std::fs::write(
        &source,
        "use std::sync::{Arc, Mutex};\nfn main() {\n    let m = Arc::new(Mutex::new(0u64));\n    \
         let hs: Vec<_> = (0..3).map(|_| { let m = m.clone(); std::thread::spawn(move || \
         for _ in 0..100 { *m.lock().unwrap() += 1; }) }).collect();\n    \
         for h in hs { h.join().unwrap(); }\n    println!(\"{}\", *m.lock().unwrap());\n}\n",
    )
    .unwrap();
    let program = dir.join("locks");
    let built = Command::new("rustc")
        .args(["-g", "-o"])
        .arg(&program)
        .arg(&source)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let trace = dir.join("run.trace");
    record(&[program.to_str().unwrap()], &trace);
    let report = json(&trace, &[]);
    assert_eq!(
        report["traces"][0]["coverage"]["runtime"], "rust",
        "{report}"
    );
    assert_eq!(
        notes(&report),
        ["runtime", "no-locks", "no-accesses"],
        "{report}"
    );
}

#[test]
fn ctrl_c_of_a_healthy_server_is_no_finding() {
    let program = harness::compile_source(&fixture("coverage", "idle_server.c"));
    for signal in ["INT", "TERM"] {
        let dir = harness::fresh_dir(&format!("idle-server-{signal}"));
        let trace = dir.join("run.trace");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_foresight"));
        cmd.env("FORESIGHT_RUNTIME", harness::runtime())
            .args(["record", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&program)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        harness::set_signal_dispositions(&mut cmd, &harness::TERMINATION_SIGNALS, libc::SIG_DFL);
        let child = cmd.spawn().unwrap();
        let children = format!("/proc/{0}/task/{0}/children", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let pid = loop {
            let text = std::fs::read_to_string(&children).unwrap_or_default();
            if let Some(pid) = text.split_whitespace().next() {
                break pid.parse::<u32>().unwrap();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        wait_until_stuck(pid);
        // As Ctrl-C would: the signal reaches the program (record passes on what another
        // process sends it).
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(sent.success());
        child.wait_with_output().unwrap();
        let report = json(&trace, &[]);
        assert_eq!(
            report["findings"].as_array().unwrap().len(),
            0,
            "SIG{signal}: {report}"
        );
        let check = foresight(&["check", "--baseline", "/dev/null", trace.to_str().unwrap()]);
        assert_eq!(check.status.code(), Some(0), "SIG{signal}");
    }
}

#[test]
fn a_baseline_of_one_run_holds_on_twenty_runs_whatever_the_race_order() {
    if !harness::compiler_available(Compiler::Gcc) {
        return;
    }
    let program =
        harness::compile_instrumented(&fixture("coverage", "race_order.c"), Compiler::Gcc);
    let dir = harness::fresh_dir("race-order-gate");
    let baseline = dir.join("foresight-baseline.txt");
    let first = dir.join("first.trace");
    record(&[program.to_str().unwrap()], &first);
    let update = foresight(&[
        "check",
        "--update-baseline",
        "--baseline",
        baseline.to_str().unwrap(),
        first.to_str().unwrap(),
    ]);
    assert!(update.status.success());
    let accepted = std::fs::read_to_string(&baseline).unwrap();
    let races: Vec<&str> = accepted
        .lines()
        .filter(|l| l.starts_with("race |"))
        .collect();
    assert_eq!(races.len(), 1, "{accepted}");
    assert!(
        races[0].starts_with("race | stock |"),
        "the variable names it: {accepted}"
    );
    for i in 0..20 {
        let trace = dir.join(format!("run{i}.trace"));
        record(&[program.to_str().unwrap()], &trace);
        let check = foresight(&[
            "check",
            "--baseline",
            baseline.to_str().unwrap(),
            trace.to_str().unwrap(),
        ]);
        assert_eq!(
            check.status.code(),
            Some(0),
            "run {i}: {}",
            String::from_utf8_lossy(&check.stdout)
        );
    }
}

/// A program started by the recorded one that the runtime cannot enter (statically linked)
/// is said to be unseen, in text, JSON and SARIF, whether a forked child or the process itself
/// (`sh -c 'exec …'`) executed it; the same program linked dynamically is recorded, and no
/// note is given.
#[test]
fn a_static_program_the_recorded_one_executes_is_said_to_be_unseen() {
    let dir = harness::fresh_dir("static-child");
    let source = dir.join("two_locks.c");
    std::fs::write(
        &source,
        "#include <pthread.h>\nstatic pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER;\n\
         static pthread_mutex_t b = PTHREAD_MUTEX_INITIALIZER;\n\
         static void *other(void *x) { pthread_mutex_lock(&b); pthread_mutex_lock(&a);\n\
         pthread_mutex_unlock(&a); pthread_mutex_unlock(&b); return x; }\n\
         int main(void) { pthread_t t; pthread_create(&t, 0, other, 0); pthread_join(t, 0);\n\
         pthread_mutex_lock(&a); pthread_mutex_lock(&b); pthread_mutex_unlock(&b);\n\
         pthread_mutex_unlock(&a); return 0; }\n",
    )
    .unwrap();
    let build = |out: &Path, extra: &[&str]| {
        Command::new("cc")
            .args(["-g", "-pthread"])
            .args(extra)
            .arg("-o")
            .arg(out)
            .arg(&source)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let dynamic = dir.join("two_locks");
    let fixed = dir.join("two_locks_static");
    assert!(build(&dynamic, &[]), "cc builds the program");
    if !build(&fixed, &["-static"]) {
        assert!(
            !tools_required(),
            "cc -static: no static C library installed"
        );
        eprintln!("SKIPPED: cc -static: no static C library installed");
        return;
    }
    let driver = harness::compile_source(&fixture("coverage", "exec_child.c"));
    let unseen = |report: &serde_json::Value| {
        notes(report)
            .iter()
            .filter(|n| *n == "exec-not-recorded")
            .count()
    };

    let trace = dir.join("static.trace");
    record(&[driver.to_str().unwrap(), fixed.to_str().unwrap()], &trace);
    let report = json(&trace, &[]);
    assert_eq!(unseen(&report), 1, "{report:#}");
    let t = text(&trace);
    assert!(
        t.contains("executed another program at main (exec_child.c:")
            && t.contains("no trace of that program was recorded"),
        "{t}"
    );
    let sarif = foresight(&["analyze", "--format", "sarif", trace.to_str().unwrap()]);
    let sarif: serde_json::Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let said = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"].to_string();
    assert!(
        said.contains("no trace of that program was recorded"),
        "{said}"
    );

    // The dynamic build is recorded: its trace continues the child's, and nothing is unseen.
    let trace = dir.join("dynamic.trace");
    record(
        &[driver.to_str().unwrap(), dynamic.to_str().unwrap()],
        &trace,
    );
    let report = json(&trace, &[]);
    assert_eq!(unseen(&report), 0, "{report:#}");
    assert_eq!(
        report["summary"]["potential"].as_u64().unwrap_or(0)
            + report["summary"]["predicted"].as_u64().unwrap_or(0),
        1,
        "{report:#}"
    );

    // The shell becomes the program itself.
    let trace = dir.join("exec.trace");
    let command = format!("exec {}", fixed.display());
    record(&["sh", "-c", &command], &trace);
    assert_eq!(unseen(&json(&trace, &[])), 1);

    // The shell runs it as a command (dash: vfork, then execve in the child), and a program
    // starts it with posix_spawn (glibc executes it inside, unhooked): the child is still a
    // process that executed a program no trace records. The dynamic build is recorded both
    // ways, and nothing is said.
    let in_dir = |program: &[&str], trace: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
            .env("FORESIGHT_RUNTIME", harness::runtime())
            .current_dir(&dir)
            .args(["record", "-o"])
            .arg(trace)
            .arg("--")
            .args(program)
            .output()
            .expect("run foresight record");
        assert!(
            out.status.success(),
            "record {program:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let spawner = harness::compile_source(&fixture("coverage", "spawn_child.c"));
    for (how, program) in [
        ("vfork", vec!["/bin/sh", "-c", "./two_locks_static"]),
        (
            "spawn",
            vec![spawner.to_str().unwrap(), "./two_locks_static"],
        ),
    ] {
        let trace = dir.join(format!("{how}-static.trace"));
        in_dir(&program, &trace);
        let report = json(&trace, &[]);
        assert_eq!(unseen(&report), 1, "{how}: {report:#}");
        let t = text(&trace);
        assert!(
            t.contains("no trace of that program was recorded"),
            "{how}: {t}"
        );
    }
    for (how, program) in [
        ("vfork", vec!["/bin/sh", "-c", "./two_locks"]),
        ("spawn", vec![spawner.to_str().unwrap(), "./two_locks"]),
    ] {
        let trace = dir.join(format!("{how}-dynamic.trace"));
        in_dir(&program, &trace);
        let report = json(&trace, &[]);
        assert_eq!(unseen(&report), 0, "{how}: {report:#}");
        assert_eq!(
            report["summary"]["potential"].as_u64().unwrap_or(0)
                + report["summary"]["predicted"].as_u64().unwrap_or(0),
            1,
            "{how}: {report:#}"
        );
    }
}
