//! `foresight record` with the real runtime, when things go wrong: a hang stopped by
//! `--hang-timeout`, a crash, Ctrl-C at a terminal and SIGINT to `record` alone, `record`
//! killed, a full disk and a file size limit. The program comes first: its output and exit
//! status are what they would be without foresight, then the trace says what happened.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use foresight_fixtures::harness::{
    self, compile_hostile, fresh_dir, runtime, tools_required, wait_until_stuck, Tmpfs,
};
use foresight_trace::event::EventKind;
use foresight_trace::tables::{EndReason, StopCause, ThreadEndState};
use foresight_trace::Trace;

fn foresight(dir: &Path) -> Command {
    harness::foresight_in(Path::new(env!("CARGO_BIN_EXE_foresight")), dir)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn record(dir: &Path, args: &[&str], program: &Path, program_args: &[&str]) -> Output {
    foresight(dir)
        .arg("record")
        .args(args)
        .arg("--")
        .arg(program)
        .args(program_args)
        .output()
        .unwrap()
}

fn last(t: &Trace, thread: u32) -> EventKind {
    t.thread(thread).unwrap().events.last().unwrap().kind
}

#[test]
fn a_hang_is_stopped_after_the_timeout_and_its_trace_says_where_each_thread_waits() {
    let exe = compile_hostile("abba_deadlock");
    let dir = fresh_dir("hang");
    let start = Instant::now();
    let o = record(&dir, &["-o", "t.trace", "--hang-timeout", "1"], &exe, &[]);
    assert_eq!(o.status.code(), Some(128 + 9), "killed: {}", stderr(&o));
    assert!(start.elapsed() < Duration::from_secs(30));
    let err = stderr(&o);
    assert!(
        err.contains("no process of the run recorded an event for 1 s"),
        "{err}"
    );
    assert!(err.contains("T1: blocked in lock-request"), "{err}");
    assert!(err.contains("T2: blocked in lock-request"), "{err}");
    assert!(err.contains("T0: blocked in join-request"), "{err}");
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(
        t.trailer.as_ref().unwrap().reason,
        EndReason::Signal { signal: 9 }
    );
    assert_eq!(
        t.tables.recording_stopped.map(|s| s.cause),
        Some(StopCause::HangTimeout { ms: 1000 })
    );
    for thread in 0..3 {
        assert_eq!(t.tables.thread_ends[&thread], ThreadEndState::Blocked);
    }
    assert!(matches!(last(&t, 1), EventKind::LockRequest { .. }));
    assert!(
        !dir.join(".t.trace.foresight-stop").exists(),
        "the stop file is removed"
    );
}

#[test]
fn a_program_that_ends_before_the_timeout_is_not_stopped() {
    let exe = compile_hostile("lock_pairs");
    let dir = fresh_dir("no-hang");
    let o = record(
        &dir,
        &["-o", "t.trace", "--hang-timeout", "5"],
        &exe,
        &["1000"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "2000 pairs\n");
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(t.tables.recording_stopped.is_none());
    assert_eq!(
        t.trailer.as_ref().unwrap().reason,
        EndReason::Exit { status: 0 }
    );
}

#[test]
fn a_crash_exits_128_plus_the_signal_with_the_crashing_thread_s_events() {
    let exe = compile_hostile("crash");
    let dir = fresh_dir("crash");
    let o = record(&dir, &["-o", "t.trace"], &exe, &["segv"]);
    assert_eq!(o.status.code(), Some(128 + 11), "{}", stderr(&o));
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(
        t.trailer.as_ref().unwrap().reason,
        EndReason::Signal { signal: 11 }
    );
    assert!(matches!(last(&t, 1), EventKind::LockAcquired { .. }));
    let sites: Vec<String> = t
        .thread(1)
        .unwrap()
        .events
        .iter()
        .filter_map(|e| e.kind.site())
        .map(|s| t.tables.describe_site(s))
        .collect();
    assert!(
        sites.iter().any(|s| s.starts_with("worker (crash.c:")),
        "symbolised: {sites:?}"
    );
}

/// Starts `foresight record -- sigint_count` in a process group of its own, waits until the
/// program is ready, runs `signal(record's pid)`, lets the program stop, and returns
/// `record`'s output.
fn sigint_count(dir: &Path, signal: impl FnOnce(u32)) -> Output {
    use std::os::unix::process::CommandExt;
    let exe = compile_hostile("sigint_count");
    let child = foresight(dir)
        .args(["record", "-o", "t.trace", "--"])
        .arg(&exe)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("ready").exists() {
        assert!(Instant::now() < deadline, "the program never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(child.id());
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(dir.join("stop"), b"").unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn sigint_sent_to_record_alone_reaches_the_program_once() {
    let dir = fresh_dir("sigint-alone");
    let o = sigint_count(&dir, |pid| {
        assert!(Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap()
            .success())
    });
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1 SIGINT\n");
}

#[test]
fn ctrl_c_at_a_terminal_reaches_the_program_once() {
    // `script` gives the command a terminal of its own; a Ctrl-C typed into it reaches the
    // terminal's foreground process group (record and the program), from the kernel.
    if Command::new("script").arg("--version").output().is_err() {
        let why = "`script` (util-linux) is not installed";
        assert!(!tools_required(), "{why}");
        eprintln!("SKIPPED: {why}");
        return;
    }
    let dir = fresh_dir("ctrl-c");
    let exe = compile_hostile("sigint_count");
    let inner = format!(
        "{} record -o t.trace -- {}",
        env!("CARGO_BIN_EXE_foresight"),
        exe.display()
    );
    let mut child = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .current_dir(&dir)
        .env("FORESIGHT_RUNTIME", runtime())
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.join("ready").exists() {
        assert!(Instant::now() < deadline, "the program never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        stdin.write_all(b"\x03").unwrap();
        stdin.flush().unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(dir.join("stop"), b"").unwrap();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("1 SIGINT"), "{out}");
}

#[test]
fn the_program_dies_with_record() {
    use std::os::unix::process::CommandExt;
    let exe = compile_hostile("self_deadlock");
    let dir = fresh_dir("orphan");
    let mut child = foresight(&dir)
        .args(["record", "-o", "t.trace", "--"])
        .arg(&exe)
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let program = wait_for_child_of(child.id());
    wait_until_stuck(program);
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(program) {
        assert!(
            Instant::now() < deadline,
            "the program outlived foresight record"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its runtime wrote the request it hangs in before record died (idle threads' buffers are
    // written within two of the flusher's periods; this one wrote it before blocking).
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(matches!(last(&t, 0), EventKind::LockRequest { .. }));
}

/// The pid of the first child of `parent`.
fn wait_for_child_of(parent: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            return pid.parse().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "foresight record started nothing"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` runs (a zombie, killed and not yet reaped by whoever adopted it, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !matches!(
            stat.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next()),
            Some("Z") | Some("X") | None
        )
    })
}

#[test]
fn a_full_disk_ends_the_recording_not_the_program() {
    let Some(fs) = Tmpfs::mount("record-full", "256k", false) else {
        return;
    };
    let exe = compile_hostile("lock_pairs");
    let trace: PathBuf = fs.path().join("t.trace");
    // Uncompressed: the trace must outgrow the 256 KiB disk, and compressed, this run's lock
    // pairs take a few KiB.
    let o = foresight(fs.path())
        .args(["record", "--compress", "never", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "the program's: {}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "400000 pairs\n");
    let err = stderr(&o);
    assert!(
        err.contains("recording stopped early, the program ran on: writing the trace failed"),
        "{err}"
    );
    let t = Trace::open(&trace).unwrap();
    assert!(t.trailer.is_some());
    assert_eq!(
        t.tables.recording_stopped.map(|s| s.cause),
        Some(StopCause::WriteFailed { errno: 28 })
    );
}

#[test]
fn a_file_size_limit_ends_the_recording_not_the_program() {
    let exe = compile_hostile("lock_pairs");
    let dir = fresh_dir("record-fsize");
    let mut cmd = foresight(&dir);
    // Uncompressed: the trace must outgrow the 256 KiB limit, and compressed, this run's lock
    // pairs take a few KiB.
    cmd.args(["record", "--compress", "never", "-o", "t.trace", "--"])
        .arg(&exe);
    foresight_fixtures::harness::limit_file_size(&mut cmd, 256 << 10);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "the program's: {}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "400000 pairs\n");
    assert!(stderr(&o).contains("file size limit"), "{}", stderr(&o));
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(t.trailer.is_some());
    assert_eq!(
        t.tables.recording_stopped.map(|s| s.cause),
        Some(StopCause::FileSizeLimit { limit: 256 << 10 })
    );
}
