//! The deadlock litmus suite: every program in `fixtures/deadlock/` is compiled with the system
//! C compiler, recorded with `foresight record`, analysed with `foresight analyze --format
//! json`, and the findings are compared, line by line, with the program's annotations:
//! `// DEADLOCK` lines must be named by a predicted deadlock, `// NODEADLOCK` lines by none,
//! `// POTENTIAL` lines by a potential (class-level) finding and by no predicted one.
//!
//! The C++ programs (`*.cc`: the standard library's locks, guards, condition variables,
//! `call_once` and threads) are checked the same way, built by g++ and clang++ at `-O0`
//! (libstdc++'s lock functions are out-of-line copies in the program) and `-O2` (inlined into
//! the program's functions): either way every finding must name the program's own lines,
//! never the library's headers. A program with `// foresight-wrappers:` is recorded and
//! analysed with those `--wrapper`s, and once more without them, when the report must name
//! the wrapper and say that it looks like one.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use foresight_fixtures::harness::{self, Compiler};
use foresight_fixtures::litmus::{Litmus, Verdict};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/deadlock")
}

/// The lines of one program that the findings of a report name, by verdict.
struct Reported {
    predicted: BTreeSet<u32>,
    potential: BTreeSet<u32>,
    /// Every file the findings' locations name.
    files: BTreeSet<String>,
    findings: usize,
    hints: Vec<String>,
    report: String,
}

/// Records every run of `name`, analyses the traces together, and returns the lines of the
/// program that the findings name.
fn reported_lines(name: &str) -> (Litmus, Reported) {
    let source = fixtures_dir().join(format!("{name}.c"));
    let litmus = Litmus::read(&source).expect("read the fixture");
    let program = harness::compile_source(&source);
    let found = analyse(name, &litmus, &program, &litmus.wrappers);
    (litmus, found)
}

/// Records every run of the program (with `--wrapper` for each of `wrappers`), analyses the
/// traces together (with the same wrappers), and returns what the findings name.
fn analyse(tag: &str, litmus: &Litmus, program: &Path, wrappers: &[String]) -> Reported {
    analyse_with(tag, litmus, program, wrappers, wrappers)
}

/// `analyse`, with the wrappers of the recording and of the analysis given apart.
fn analyse_with(
    tag: &str,
    litmus: &Litmus,
    program: &Path,
    recorded: &[String],
    analysed: &[String],
) -> Reported {
    let args = |wrappers: &[String]| -> Vec<String> {
        wrappers
            .iter()
            .flat_map(|w| ["--wrapper".to_string(), w.clone()])
            .collect()
    };
    let (wrapper_args, analysis_args) = (args(recorded), args(analysed));
    let dir = harness::work_dir().join(format!(
        "litmus-{tag}-{}",
        if recorded.is_empty() {
            "plain"
        } else {
            "wrapped"
        }
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut traces = Vec::new();
    for (i, args) in litmus.runs.iter().enumerate() {
        let trace = dir.join(format!("run{i}.trace"));
        record_without_hanging(tag, program, args, &trace, &wrapper_args);
        traces.push(trace);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(["analyze", "--format", "json"])
        .args(&analysis_args)
        .args(&traces)
        .output()
        .expect("run foresight analyze");
    assert!(
        out.status.success(),
        "{tag}: foresight analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the JSON report parses");
    let mut predicted = BTreeSet::new();
    let mut potential = BTreeSet::new();
    let mut files = BTreeSet::new();
    let findings = report["findings"].as_array().expect("findings is an array");
    for finding in findings {
        for loc in finding["locations"].as_array().into_iter().flatten() {
            if let Some(f) = loc["file"].as_str() {
                files.insert(f.to_string());
            }
        }
        let lines = match finding["verdict"].as_str() {
            Some("predicted") => &mut predicted,
            Some("potential") => &mut potential,
            _ => continue,
        };
        for loc in finding["locations"]
            .as_array()
            .expect("locations is an array")
        {
            let file = loc["file"].as_str().unwrap_or_default();
            if Path::new(file).file_name().and_then(|f| f.to_str()) == Some(litmus.file_name()) {
                if let Some(line) = loc["line"].as_u64() {
                    lines.insert(line as u32);
                }
            }
        }
    }
    let hints = report["hints"]
        .as_array()
        .expect("hints is an array")
        .iter()
        .map(|h| h.as_str().unwrap_or_default().to_string())
        .collect();
    Reported {
        predicted,
        potential,
        files,
        findings: findings.len(),
        hints,
        report: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// Records one run. The programs order their threads by timing alone (any synchronisation
/// would also rule the deadlock out), so on a very loaded machine a run can take the deadlock
/// for real: after a generous bound it is killed and recorded again, once.
fn record_without_hanging(
    name: &str,
    program: &Path,
    args: &[String],
    trace: &Path,
    record_args: &[String],
) {
    const BOUND: Duration = Duration::from_secs(30);
    for attempt in 1..=2 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_foresight"))
            .env("FORESIGHT_RUNTIME", harness::runtime())
            .arg("record")
            .args(record_args)
            .arg("-o")
            .arg(trace)
            .arg("--")
            .arg(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run foresight record");
        let start = Instant::now();
        while start.elapsed() < BOUND {
            if let Some(status) = child.try_wait().expect("wait for foresight record") {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                assert!(
                    status.success(),
                    "{name} {args:?}: foresight record failed: {err}"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The program is the recorder's child: kill the whole group.
        let _ = Command::new("pkill")
            .arg("-KILL")
            .arg("-f")
            .arg(program)
            .status();
        let _ = child.kill();
        let _ = child.wait();
        eprintln!("{name}: run {attempt} hung (the schedule took the deadlock); recording again");
    }
    panic!("{name} {args:?}: the program hung twice under the recorder");
}

fn check(name: &str) {
    let (litmus, found) = reported_lines(name);
    compare(name, &litmus, &found);
}

/// The findings against the program's annotations, line by line.
fn compare(name: &str, litmus: &Litmus, found: &Reported) {
    assert!(
        !litmus.annotations.is_empty(),
        "{name} carries no annotations: nothing would be checked"
    );
    assert!(
        !litmus.no_findings || found.findings == 0,
        "{name}: `foresight-findings: none`, but the report has {} findings:\n{}",
        found.findings,
        found.report
    );
    let predicted = litmus.compare(Verdict::Deadlock, Verdict::NoDeadlock, &found.predicted);
    let potential_missed: Vec<u32> = litmus
        .lines(Verdict::Potential)
        .difference(&found.potential)
        .copied()
        .collect();
    let potential_predicted: Vec<u32> = litmus
        .lines(Verdict::Potential)
        .intersection(&found.predicted)
        .copied()
        .collect();
    assert!(
        predicted.is_empty() && potential_missed.is_empty() && potential_predicted.is_empty(),
        "{name}: DEADLOCK lines not predicted: {:?}; NODEADLOCK lines predicted: {:?}; \
         POTENTIAL lines not reported as potential: {potential_missed:?}; POTENTIAL lines \
         predicted: {potential_predicted:?}\nreport:\n{}",
        predicted.missed,
        predicted.false_alarms,
        found.report
    );
}

/// A C++ program built by `compiler` at `-O{opt}`: every finding names the program's lines.
fn check_cxx(name: &str, compiler: Compiler, opt: &str) {
    if !harness::compiler_available(compiler) {
        return;
    }
    let source = fixtures_dir().join(format!("{name}.cc"));
    let litmus = Litmus::read(&source).expect("read the fixture");
    let program = harness::compile_optimised(&source, compiler, opt);
    let tag = format!("{name}-{}-O{opt}", compiler.name());
    let found = analyse(&tag, &litmus, &program, &litmus.wrappers);
    compare(&tag, &litmus, &found);
    let own = source.canonicalize().unwrap();
    let foreign: Vec<&String> = found
        .files
        .iter()
        .filter(|f| Path::new(f) != own && Path::new(f).file_name() != own.file_name())
        .collect();
    assert!(
        foreign.is_empty(),
        "{tag}: findings name other files than the program's: {foreign:?}\n{}",
        found.report
    );
}

macro_rules! litmus_cxx {
    ($($name:ident),* $(,)?) => {
        mod cxx {
            use super::*;
            $(
                mod $name {
                    use super::*;
                    #[test]
                    fn gcc_o0() {
                        check_cxx(stringify!($name), Compiler::Gcc, "0");
                    }
                    #[test]
                    fn gcc_o2() {
                        check_cxx(stringify!($name), Compiler::Gcc, "2");
                    }
                    #[test]
                    fn clang_o0() {
                        check_cxx(stringify!($name), Compiler::Clang, "0");
                    }
                    #[test]
                    fn clang_o2() {
                        check_cxx(stringify!($name), Compiler::Clang, "2");
                    }
                }
            )*

            /// A new C++ fixture without a test here would silently check nothing.
            #[test]
            fn every_fixture_has_a_test() {
                let listed: BTreeSet<&str> = [$(stringify!($name)),*].into();
                for f in fixtures_with(Some("cc")) {
                    assert!(listed.contains(f.as_str()), "fixtures/deadlock/{f}.cc has no test");
                }
            }
        }
    };
}

/// The fixture names with this extension.
fn fixtures_with(ext: Option<&str>) -> BTreeSet<String> {
    std::fs::read_dir(fixtures_dir())
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            if p.extension().and_then(|e| e.to_str()) != ext {
                return None;
            }
            Some(p.file_stem()?.to_str()?.to_string())
        })
        .collect()
}

litmus_cxx!(
    lock_guard,
    unique_lock,
    scoped_lock,
    shared_mutex,
    condition_variable,
    call_once,
    std_thread,
);

/// Without `--wrapper`, the lock wrapper's program is reported at the wrapper's one line, and
/// the analysis says that the function looks like a wrapper, naming it.
#[test]
fn lock_wrapper_without_wrappers_hints_at_one() {
    let source = fixtures_dir().join("lock_wrapper.c");
    let litmus = Litmus::read(&source).expect("read the fixture");
    assert_eq!(litmus.wrappers, ["mtx_*"]);
    let program = harness::compile_source(&source);
    let found = analyse("lock_wrapper", &litmus, &program, &[]);
    assert!(
        found.predicted.len() == 1 && found.hints.len() == 1,
        "the wrapper's line alone, and one hint:\n{}",
        found.report
    );
    assert!(
        found.hints[0].contains("`mtx_enter`") && found.hints[0].contains("--wrapper mtx_enter"),
        "{:?}",
        found.hints
    );
    // Recorded with the wrappers, analysed without: the frames the recorder unwound through
    // are its wrappers, and the callers' lines are reported.
    let recorded_only = analyse_with(
        "lock_wrapper-recorded",
        &litmus,
        &program,
        &litmus.wrappers,
        &[],
    );
    compare(
        "lock_wrapper (recorded with --wrapper only)",
        &litmus,
        &recorded_only,
    );
    let wrapper_line = std::fs::read_to_string(&source)
        .unwrap()
        .lines()
        .position(|l| l.contains("pthread_mutex_lock(&x->m)"))
        .unwrap() as u32
        + 1;
    assert_eq!(found.predicted, [wrapper_line].into(), "{}", found.report);
}

/// Without `--wrapper`, the two roles of `lock_roles.c` are one class, named after the
/// allocator's line, and their nesting is reported as a lock taken inside another of its own
/// class; with it (`lock_roles` above), they are two classes and nothing is reported.
#[test]
fn lock_roles_without_wrappers_are_one_class() {
    let source = fixtures_dir().join("lock_roles.c");
    let litmus = Litmus::read(&source).expect("read the fixture");
    let program = harness::compile_source(&source);
    let found = analyse("lock_roles", &litmus, &program, &[]);
    assert!(
        found.findings == 1 && found.report.contains("same-class-nesting"),
        "{}",
        found.report
    );
    assert!(
        found.hints.iter().any(|h| h.contains("`mtx_enter`")),
        "{:?}",
        found.hints
    );
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
            for f in &fixtures_with(Some("c")) {
                assert!(listed.contains(f.as_str()), "fixtures/deadlock/{f}.c has no test");
            }
        }
    };
}

litmus!(
    inversion,
    sequential_threads,
    gate_lock,
    single_thread,
    three_cycle,
    four_cycle,
    five_cycle,
    cross_run,
    join_holding_lock,
    join_after_unlock,
    join_after_done_flag,
    barrier_holding_lock,
    barrier_orders_phases,
    cond_wait_holding_lock,
    sem_wait_holding_lock,
    pipe_read_holding_lock,
    socketpair_recv_holding_lock,
    eventfd_read_holding_lock,
    pipe_read_other_lock,
    rwlock_readers,
    rwlock_writer,
    trylock_backoff,
    transfer_ordered,
    transfer_unordered,
    semaphore_orders,
    once_orders,
    lock_wrapper,
    lock_roles,
);
