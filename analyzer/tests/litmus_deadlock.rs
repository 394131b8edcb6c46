//! The deadlock litmus suite: every program in `fixtures/deadlock/` is compiled with the system
//! C compiler, recorded with `foresight record`, analysed with `foresight analyze --format
//! json`, and the findings are compared, line by line, with the program's annotations:
//! `// DEADLOCK` lines must be named by a predicted deadlock, `// NODEADLOCK` lines by none,
//! `// POTENTIAL` lines by a potential (class-level) finding and by no predicted one.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use foresight_fixtures::harness;
use foresight_fixtures::litmus::{Litmus, Verdict};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/deadlock")
}

/// The lines of one program that the findings of a report name, by verdict.
struct Reported {
    predicted: BTreeSet<u32>,
    potential: BTreeSet<u32>,
    report: String,
}

/// Records every run of `name`, analyses the traces together, and returns the lines of the
/// program that the findings name.
fn reported_lines(name: &str) -> (Litmus, Reported) {
    let source = fixtures_dir().join(format!("{name}.c"));
    let litmus = Litmus::read(&source).expect("read the fixture");
    let program = harness::compile_source(&source);
    let dir = harness::work_dir().join(format!("litmus-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut traces = Vec::new();
    for (i, args) in litmus.runs.iter().enumerate() {
        let trace = dir.join(format!("run{i}.trace"));
        record_without_hanging(name, &program, args, &trace);
        traces.push(trace);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(["analyze", "--format", "json"])
        .args(&traces)
        .output()
        .expect("run foresight analyze");
    assert!(
        out.status.success(),
        "{name}: foresight analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("the JSON report parses");
    let mut predicted = BTreeSet::new();
    let mut potential = BTreeSet::new();
    for finding in report["findings"].as_array().expect("findings is an array") {
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
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        litmus,
        Reported {
            predicted,
            potential,
            report,
        },
    )
}

/// Records one run. The programs order their threads by timing alone (any synchronisation
/// would also rule the deadlock out), so on a very loaded machine a run can take the deadlock
/// for real: after a generous bound it is killed and recorded again, once.
fn record_without_hanging(name: &str, program: &Path, args: &[String], trace: &Path) {
    const BOUND: Duration = Duration::from_secs(30);
    for attempt in 1..=2 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_foresight"))
            .env("FORESIGHT_RUNTIME", harness::runtime())
            .arg("record")
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
    assert!(
        !litmus.annotations.is_empty(),
        "{name}.c carries no annotations: nothing would be checked"
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
        "{name}.c: DEADLOCK lines not predicted: {:?}; NODEADLOCK lines predicted: {:?}; \
         POTENTIAL lines not reported as potential: {potential_missed:?}; POTENTIAL lines \
         predicted: {potential_predicted:?}\nreport:\n{}",
        predicted.missed,
        predicted.false_alarms,
        found.report
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
            let on_disk: BTreeSet<String> = std::fs::read_dir(fixtures_dir())
                .unwrap()
                .filter_map(|e| {
                    let p = e.unwrap().path();
                    if p.extension()? != "c" {
                        return None;
                    }
                    Some(p.file_stem()?.to_str()?.to_string())
                })
                .collect();
            for f in &on_disk {
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
    cross_run,
    join_holding_lock,
    join_after_unlock,
    join_after_done_flag,
    barrier_holding_lock,
    barrier_orders_phases,
    cond_wait_holding_lock,
    sem_wait_holding_lock,
    rwlock_readers,
    rwlock_writer,
    trylock_backoff,
    transfer_ordered,
    transfer_unordered,
    semaphore_orders,
    once_orders,
);
