//! `foresight record`: the runtime contract (environment, output files), exit statuses and
//! symbolisation, as a user sees them.
//!
//! Most tests use a stand-in runtime (`fake_rt.c`, compiled here) that keeps the real
//! runtime's file contract and writes a prepared trace, so they do not depend on the state of
//! `recorder/`. The tests of the real runtime find `libforesight_rt.so` next to the `foresight`
//! binary; they say why they are skipped when it is missing or not functional yet (set
//! `FORESIGHT_REQUIRE_RUNTIME=1` to make that a failure).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::OnceLock;

use foresight_fixtures::harness::{set_signal_dispositions, TERMINATION_SIGNALS};
use foresight_trace::event::{Event, EventKind, LockMode};
use foresight_trace::tables::{
    ClassKey, EndReason, Frame, Header, ModuleInfo, ObjectInfo, ObjectKind, Ordering, SiteInfo,
    StringEntry, TableRecord, ThreadInfo, Trailer,
};
use foresight_trace::{Trace, TraceWriter};
use object::{Object, ObjectSymbol};

/// `foresight` with none of the runtime's variables inherited from the test's environment.
fn foresight(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_foresight"));
    c.current_dir(dir);
    for v in [
        "FORESIGHT_RUNTIME",
        "FORESIGHT_OUTPUT",
        "FORESIGHT_STACK_DEPTH",
        "FORESIGHT_NO_FOLLOW",
        "LD_PRELOAD",
        "FAKE_RT_TRACE",
        "FAKE_RT_LOG",
    ] {
        c.env_remove(v);
    }
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "foresight-record-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, AtomicOrdering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the C compiler; `None`, with the reason printed, when there is none.
fn cc(args: &[&str], out: &Path) -> Option<()> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).args(args).arg("-o").arg(out).output() {
        Ok(o) if o.status.success() => Some(()),
        Ok(o) => panic!("{cc} failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            let why = format!("cannot run the C compiler `{cc}`: {e}");
            assert!(!tools_required(), "{why}");
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

/// Whether the tools a test needs must be there: in CI (`CI`, or `FORESIGHT_REQUIRE_RUNTIME`)
/// a missing one fails the test; on a developer machine the test says why it is skipped.
fn tools_required() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
        || std::env::var_os("FORESIGHT_REQUIRE_RUNTIME").is_some()
}

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests")
}

/// The stand-in runtime, compiled once.
fn fake_runtime() -> Option<&'static Path> {
    static RT: OnceLock<Option<PathBuf>> = OnceLock::new();
    RT.get_or_init(|| {
        let dir = temp_dir("fake-rt");
        let so = dir.join("libfake_rt.so");
        let src = tests_dir().join("fake_rt.c");
        cc(&["-shared", "-fPIC", "-O1", src.to_str().unwrap()], &so)?;
        Some(so)
    })
    .as_deref()
}

/// `prog.c`, compiled once with debug information and a build-id.
fn prog() -> Option<&'static Path> {
    static PROG: OnceLock<Option<PathBuf>> = OnceLock::new();
    PROG.get_or_init(|| {
        let dir = temp_dir("prog");
        let exe = dir.join("prog");
        let src = tests_dir().join("prog.c");
        cc(
            &[
                "-g",
                "-O0",
                "-pthread",
                "-Wl,--build-id",
                src.to_str().unwrap(),
            ],
            &exe,
        )?;
        Some(exe)
    })
    .as_deref()
}

/// A trace as a runtime would write it for `prog`: one site inside `worker`, the static lock
/// `big_lock`. `pid` is the recorded process (it must not be a live process, or `record`
/// takes the trace for one still being written).
fn trace_for_prog(exe: &Path) -> Vec<u8> {
    let data = std::fs::read(exe).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let addr_of = |name: &str| {
        obj.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} is in prog's symbol table"))
            .address()
    };
    let header = Header {
        producer: "fake runtime".into(),
        pid: 0x7fff_0000,
        parent_pid: 1,
        command: vec!["prog".into()],
        start_unix_ns: 1,
        ordering: Ordering::GlobalSequence,
        pointer_width: 8,
        stack_depth: 1,
    };
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    let frame = |offset| Frame { module: 0, offset };
    for r in [
        TableRecord::String(StringEntry {
            id: 0,
            text: exe.display().to_string(),
        }),
        // A PIE executable: offsets from the load bias are the file's addresses.
        TableRecord::Module(ModuleInfo {
            id: 0,
            path: 0,
            build_id: obj.build_id().unwrap().unwrap().to_vec(),
            base: 0x5555_5555_4000,
            size: 0x10_000,
        }),
        TableRecord::Thread(ThreadInfo {
            id: 0,
            os_tid: 1,
            parent: None,
            name: None,
        }),
        TableRecord::Site(SiteInfo {
            id: 0,
            frames: vec![frame(addr_of("worker") + 5)],
            first_caller: None,
        }),
        TableRecord::Object(ObjectInfo {
            id: 0,
            kind: ObjectKind::Mutex,
            address: 0x5555_5555_8000,
            generation: 0,
            class: ClassKey::Static(frame(addr_of("big_lock"))),
        }),
    ] {
        w.table(&r).unwrap();
    }
    let events = [
        Event {
            key: 1,
            kind: EventKind::ThreadStart,
        },
        Event {
            key: 1,
            kind: EventKind::LockRequest {
                lock: 0,
                mode: LockMode::Exclusive,
                site: 0,
            },
        },
        Event {
            key: 2,
            kind: EventKind::LockAcquired {
                lock: 0,
                mode: LockMode::Exclusive,
            },
        },
        Event {
            key: 3,
            kind: EventKind::LockRelease { lock: 0, site: 0 },
        },
        Event {
            key: 4,
            kind: EventKind::ThreadExit,
        },
    ];
    w.thread_events(0, &events, 4096).unwrap();
    w.finish(Trailer {
        end_unix_ns: 2,
        reason: EndReason::Exit { status: 0 },
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    })
    .unwrap()
}

/// A run directory with the stand-in runtime set up to write `trace` (a minimal one when
/// `None` and `prog` is not available).
struct Fake {
    dir: PathBuf,
    rt: &'static Path,
    trace_src: PathBuf,
}

impl Fake {
    fn new(tag: &str) -> Option<Self> {
        let rt = fake_runtime()?;
        let dir = temp_dir(tag);
        let trace_src = dir.join("prepared.bin");
        let bytes = match prog() {
            Some(exe) => trace_for_prog(exe),
            None => return None,
        };
        std::fs::write(&trace_src, bytes).unwrap();
        Some(Self { dir, rt, trace_src })
    }

    fn record(&self, args: &[&str]) -> Output {
        foresight(&self.dir)
            .env("FORESIGHT_RUNTIME", self.rt)
            .env("FAKE_RT_TRACE", &self.trace_src)
            .arg("record")
            .args(args)
            .output()
            .unwrap()
    }
}

#[test]
fn a_missing_runtime_is_a_usage_error_that_says_where_it_looked() {
    let dir = temp_dir("no-rt");
    let o = foresight(&dir)
        .env("FORESIGHT_RUNTIME", "/nonexistent/libforesight_rt.so")
        .args(["record", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("/nonexistent/libforesight_rt.so"),
        "{}",
        stderr(&o)
    );
    assert!(
        !dir.join("foresight-true.trace").exists(),
        "nothing was run"
    );
}

#[test]
fn record_needs_a_command_and_a_sane_stack_depth() {
    let dir = temp_dir("usage");
    let o = foresight(&dir).arg("record").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    for bad in ["0", "33", "x"] {
        let o = foresight(&dir)
            .args(["record", "--stack-depth", bad, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "--stack-depth {bad}");
    }
}

#[test]
fn a_command_that_cannot_be_started_is_named_with_exit_status_2() {
    let Some(f) = Fake::new("no-cmd") else { return };
    let o = f.record(&["--", "/nonexistent/command", "arg"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot run /nonexistent/command"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_exit_status_of_the_command_is_passed_through() {
    let Some(f) = Fake::new("status") else { return };
    let o = f.record(&["-o", "t.trace", "--", "sh", "-c", "exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("foresight: trace written to t.trace (")
            && err.contains("5 events, 1 thread)"),
        "{err}"
    );
    let o = f.record(&["-o", "t.trace", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.code(), Some(128 + 15), "{}", stderr(&o));
    let o = f.record(&["-o", "t.trace", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn the_runtime_gets_its_environment() {
    let Some(f) = Fake::new("env") else { return };
    let log = f.dir.join("env.log");
    let o = foresight(&f.dir)
        .env("FORESIGHT_RUNTIME", f.rt)
        .env("FAKE_RT_LOG", &log)
        .env("LD_PRELOAD", "/nonexistent/libother.so")
        .env("FORESIGHT_NO_FOLLOW", "1")
        .args([
            "record",
            "-o",
            "x.trace",
            "--stack-depth",
            "7",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    // No FAKE_RT_TRACE: the stand-in writes nothing, and record says so, with the command's
    // status.
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: no trace was written to x.trace"),
        "{}",
        stderr(&o)
    );
    let seen = std::fs::read_to_string(&log).unwrap();
    let rt = f.rt.canonicalize().unwrap();
    let out = f.dir.join("x.trace");
    for line in [
        format!("OUTPUT={}", out.display()),
        "DEPTH=7".to_string(),
        // Not asked for: an inherited value is dropped.
        "NOFOLLOW=".to_string(),
        format!("PRELOAD={}:/nonexistent/libother.so", rt.display()),
    ] {
        assert!(seen.lines().any(|l| l == line), "{line} in\n{seen}");
    }

    let _ = std::fs::remove_file(&log);
    let o = foresight(&f.dir)
        .env("FORESIGHT_RUNTIME", f.rt)
        .env("FAKE_RT_LOG", &log)
        .args(["record", "--no-follow", "--", "sh", "-c", "exit 4"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(4),
        "no trace, but the command failed: its status"
    );
    let seen = std::fs::read_to_string(&log).unwrap();
    assert!(seen.lines().any(|l| l == "NOFOLLOW=1"), "{seen}");
    assert!(seen.lines().any(|l| l == "DEPTH=1"), "{seen}");
    assert!(
        seen.contains(&format!(
            "OUTPUT={}",
            f.dir.join("foresight-sh.trace").display()
        )),
        "the default output: {seen}"
    );
}

#[test]
fn the_default_output_is_named_after_the_command() {
    let Some(f) = Fake::new("default") else {
        return;
    };
    let o = f.record(&["--", "/bin/true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(f.dir.join("foresight-true.trace").is_file());
    assert!(
        stderr(&o).contains("trace written to foresight-true.trace"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn children_write_siblings_and_a_previous_run_is_cleared() {
    let Some(f) = Fake::new("siblings") else {
        return;
    };
    let prepared = std::fs::read(&f.trace_src).unwrap();
    // A previous run: its traces go; a file that is no trace stays, and is not reported.
    std::fs::write(f.dir.join("t.trace"), &prepared).unwrap();
    std::fs::write(f.dir.join("t.trace.1"), &prepared).unwrap();
    std::fs::write(f.dir.join("t.trace.1.2"), b"").unwrap();
    std::fs::write(f.dir.join("t.trace.77"), b"my notes").unwrap();
    let o = f.record(&[
        "-o",
        "t.trace",
        "--",
        "sh",
        "-c",
        "/bin/true; /bin/true; exit 0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!f.dir.join("t.trace.1").exists() && !f.dir.join("t.trace.1.2").exists());
    assert_eq!(
        std::fs::read(f.dir.join("t.trace.77")).unwrap(),
        b"my notes"
    );
    // A child's pid may begin with 77 (t.trace.7769): the note's own name is what must not appear.
    assert!(
        !err.split(|c: char| c.is_whitespace() || c == '`')
            .any(|word| word == "t.trace.77"),
        "{err}"
    );
    // sh and two /bin/true (forked children that exec: each image finds the file taken).
    let written: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("foresight: trace written to "))
        .collect();
    assert!(written.len() >= 3, "{err}");
    assert!(
        written[0].starts_with("foresight: trace written to t.trace ("),
        "the root first: {err}"
    );
    for l in &written[1..] {
        let name = l["foresight: trace written to ".len()..]
            .split(' ')
            .next()
            .unwrap();
        let suffix = name.strip_prefix("t.trace.").unwrap();
        assert!(
            suffix.split('.').all(|p| p.parse::<u32>().is_ok()),
            "{name}"
        );
        assert!(f.dir.join(name).is_file());
    }
}

#[test]
fn a_file_that_is_not_a_trace_is_not_overwritten() {
    let Some(f) = Fake::new("no-clobber") else {
        return;
    };
    std::fs::write(f.dir.join("notes.txt"), b"precious").unwrap();
    let o = f.record(&["-o", "notes.txt", "--", "sh", "-c", "touch ran"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("not a foresight trace"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(f.dir.join("notes.txt")).unwrap(), b"precious");
    assert!(!f.dir.join("ran").exists(), "the command did not run");
}

#[test]
fn a_symlink_at_the_output_path_is_refused_and_its_target_left_alone() {
    let Some(f) = Fake::new("symlink") else {
        return;
    };
    std::fs::write(f.dir.join("precious.txt"), b"precious").unwrap();
    // One to an existing file, one dangling (following it would create the file it names).
    std::os::unix::fs::symlink("precious.txt", f.dir.join("to-file.trace")).unwrap();
    std::os::unix::fs::symlink("created.txt", f.dir.join("dangling.trace")).unwrap();
    for link in ["to-file.trace", "dangling.trace"] {
        let o = f.record(&["-o", link, "--", "sh", "-c", "touch ran"]);
        assert_eq!(o.status.code(), Some(2), "{link}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("not a regular file"),
            "{link}: {}",
            stderr(&o)
        );
        assert!(
            !f.dir.join("ran").exists(),
            "{link}: the command did not run"
        );
    }
    assert_eq!(
        std::fs::read(f.dir.join("precious.txt")).unwrap(),
        b"precious"
    );
    assert!(!f.dir.join("created.txt").exists());
    assert!(std::fs::symlink_metadata(f.dir.join("dangling.trace"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn traces_are_symbolised_and_stats_and_dump_show_it() {
    let Some(f) = Fake::new("symbols") else {
        return;
    };
    let o = f.record(&["-o", "t.trace", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let path = f.dir.join("t.trace");
    let trace = Trace::open(&path).unwrap();
    let site = trace.tables.describe_site(0);
    assert!(site.starts_with("worker (prog.c:"), "{site}");
    assert_eq!(trace.tables.describe_object(0), "big_lock");
    assert!(trace.ended_cleanly(), "{:?}", trace.problems);

    let stats = foresight(&f.dir)
        .args(["stats", "t.trace"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&stats.stdout);
    assert!(
        out.contains("worker (prog.c:") && out.contains("big_lock"),
        "{out}"
    );
    assert!(out.contains("1 symbolised"), "{out}");
    let dump = foresight(&f.dir)
        .args(["dump", "t.trace"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&dump.stdout);
    assert!(
        out.contains("worker (prog.c:") && out.contains("big_lock"),
        "{out}"
    );

    let o = f.record(&["-o", "raw.trace", "--no-symbolize", "--", "true"]);
    assert!(o.status.success());
    let raw = Trace::open(f.dir.join("raw.trace")).unwrap();
    assert!(raw.tables.symbols.is_empty());
}

/// Starts `foresight record` in a process group of its own (as a shell starts a job), waits
/// until the command is ready, sends `signal` with `kill ARGS`, and returns the exit status.
fn record_and_signal(f: &Fake, script: &str, kill_args: impl Fn(u32) -> Vec<String>) -> Output {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    let mut cmd = foresight(&f.dir);
    cmd.env("FORESIGHT_RUNTIME", f.rt)
        .env("FAKE_RT_TRACE", &f.trace_src)
        .args(["record", "-o", "t.trace", "--", "sh", "-c", script])
        .process_group(0)
        .stderr(std::process::Stdio::piped());
    set_signal_dispositions(&mut cmd, &TERMINATION_SIGNALS, libc::SIG_DFL);
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f.dir.join("ready").exists() {
        assert!(Instant::now() < deadline, "the command never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = Command::new("kill")
        .args(kill_args(child.id()))
        .status()
        .unwrap();
    assert!(status.success());
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            // Which processes of the run were left, and in what state, before they go: what
            // a rare hang here needs to be understood.
            let group = child.id().to_string();
            let left: String = Command::new("ps")
                .args(["-e", "-o", "pid,ppid,pgid,stat,wchan:24,args"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
                .lines()
                .filter(|l| l.split_whitespace().nth(2) == Some(group.as_str()))
                .map(|l| format!("{l}\n"))
                .collect();
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let out = child.wait_with_output().unwrap();
            panic!(
                "foresight record did not end\nprocesses left:\n{left}\nrecord's stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn ctrl_c_reaches_the_command_and_record_waits_for_it() {
    let Some(f) = Fake::new("sigint") else { return };
    // SIGINT to the whole process group, as the terminal sends it on Ctrl-C.
    let o = record_and_signal(
        &f,
        "trap 'exit 7' INT; touch ready; while :; do sleep 0.05; done",
        |pid| vec!["-INT".into(), "--".into(), format!("-{pid}")],
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("trace written to t.trace"),
        "{}",
        stderr(&o)
    );
}

/// The signals the command of `foresight record` starts with ignored (its `SigIgn` in
/// `/proc`), `foresight` started with `ignored` ignored and the other termination signals at
/// their defaults.
fn command_ignores(f: &Fake, ignored: &[i32]) -> u64 {
    let mut cmd = foresight(&f.dir);
    cmd.env("FORESIGHT_RUNTIME", f.rt)
        .env("FAKE_RT_TRACE", &f.trace_src)
        .args(["record", "-o", "t.trace", "--", "cat", "/proc/self/status"]);
    set_signal_dispositions(&mut cmd, &TERMINATION_SIGNALS, libc::SIG_DFL);
    set_signal_dispositions(&mut cmd, ignored, libc::SIG_IGN);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let status = String::from_utf8_lossy(&o.stdout);
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .unwrap_or_else(|| panic!("no SigIgn line in {status}"));
    u64::from_str_radix(mask.trim(), 16).unwrap()
}

#[test]
fn only_the_signals_ignored_when_record_starts_are_ignored_in_the_command() {
    let Some(f) = Fake::new("ignored") else {
        return;
    };
    let bit = |sig: i32| 1u64 << (sig - 1);
    // As `nohup foresight record -- CMD` (all five ignored at once: `fixtures/tests/
    // hostile_programs.rs`), one by one: the command must not die of a hangup either…
    let ignores = command_ignores(&f, &[libc::SIGHUP]);
    assert_ne!(ignores & bit(libc::SIGHUP), 0, "SigIgn {ignores:x}");
    // `record`'s own handlers of the others are not passed on as ignored (Ctrl-C must still
    // reach the command).
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGQUIT] {
        assert_eq!(ignores & bit(sig), 0, "signal {sig}: SigIgn {ignores:x}");
    }
    // Nor `foresight`'s own SIGPIPE, which the Rust runtime ignores.
    let ignores = command_ignores(&f, &[]);
    for sig in TERMINATION_SIGNALS.into_iter().chain([libc::SIGPIPE]) {
        assert_eq!(ignores & bit(sig), 0, "signal {sig}: SigIgn {ignores:x}");
    }
}

#[test]
fn sigterm_to_record_is_forwarded_to_the_command() {
    let Some(f) = Fake::new("sigterm") else {
        return;
    };
    // SIGTERM to foresight alone, as a supervisor sends it.
    let o = record_and_signal(
        &f,
        "trap 'exit 9' TERM; touch ready; while :; do sleep 0.05; done",
        |pid| vec!["-TERM".into(), pid.to_string()],
    );
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("trace written to t.trace"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_trace_cut_short_is_symbolised_and_reported_as_cut_short() {
    let Some(f) = Fake::new("cut") else { return };
    let full = std::fs::read(&f.trace_src).unwrap();
    let trailer_at = foresight_trace::TraceFile::from_bytes("x", full.clone())
        .unwrap()
        .chunks()
        .last()
        .unwrap()
        .offset as usize;
    std::fs::write(&f.trace_src, &full[..trailer_at]).unwrap();
    let o = f.record(&["-o", "t.trace", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("5 events, 1 thread, cut short)"),
        "{}",
        stderr(&o)
    );
    let trace = Trace::open(f.dir.join("t.trace")).unwrap();
    assert!(trace.trailer.is_none(), "no trailer is invented");
    assert_eq!(trace.tables.describe_object(0), "big_lock");
}

// ---- the real runtime ----

/// `libforesight_rt.so` next to the `foresight` binary, if it is there and interposes
/// `pthread_mutex_lock` (the skeleton of an unfinished runtime does not).
fn real_runtime() -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_BIN_EXE_foresight"));
    let so = bin.parent().unwrap().join("libforesight_rt.so");
    let skip = |why: String| {
        if tools_required() {
            panic!("{why}");
        }
        eprintln!("SKIPPED: {why} (set FORESIGHT_REQUIRE_RUNTIME=1 to fail instead)");
        None
    };
    let Ok(data) = std::fs::read(&so) else {
        return skip(format!(
            "{} does not exist: build it with `cargo build -p foresight-recorder`",
            so.display()
        ));
    };
    let obj = object::File::parse(&*data).ok()?;
    let interposes = obj
        .dynamic_symbols()
        .any(|s| s.is_definition() && s.name() == Ok("pthread_mutex_lock"));
    if !interposes {
        return skip(format!(
            "{} does not define pthread_mutex_lock yet: the runtime is not functional",
            so.display()
        ));
    }
    Some(so)
}

#[test]
fn the_real_runtime_records_true_and_a_threaded_program() {
    let Some(rt) = real_runtime() else { return };
    let dir = temp_dir("real");
    let record = |args: &[&str]| {
        foresight(&dir)
            .env("FORESIGHT_RUNTIME", &rt)
            .arg("record")
            .args(args)
            .output()
            .unwrap()
    };
    let o = record(&["-o", "true.trace", "--", "/bin/true"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("trace written to true.trace"),
        "{}",
        stderr(&o)
    );
    Trace::open(dir.join("true.trace")).unwrap();

    let o = record(&["-o", "exit.trace", "--", "sh", "-c", "exit 3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));

    let Some(exe) = prog() else { return };
    let o = record(&["-o", "prog.trace", "--", exe.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "200");
    let trace = Trace::open(dir.join("prog.trace")).unwrap();
    assert!(trace.trailer.is_some(), "{:?}", trace.problems);
    assert!(trace.threads.len() >= 3, "main and two workers");
    let t = &trace.tables;
    let sites: Vec<String> = t.sites.keys().map(|s| t.describe_site(*s)).collect();
    assert!(
        sites.iter().any(|s| s.starts_with("worker (prog.c:")),
        "a site in worker: {sites:?}"
    );
    assert!(
        t.objects
            .keys()
            .any(|o| t.describe_object(*o) == "big_lock"),
        "the static lock is named"
    );
}

// ---- real package binaries ----

/// The path of `program` on `PATH`, or `None` with the line that says how to get it.
fn installed(program: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            !tools_required(),
            "{package} is not installed: CI installs it (.ci/run)"
        );
        eprintln!(
            "SKIPPED: {package} not installed (run scripts/real-program.sh {program}, which \
             installs it, or apt-get install {package})"
        );
    }
    found
}

/// Records `cmd` with the real runtime; the trace, read back, and `foresight stats` of it.
fn record_real(rt: &Path, tag: &str, cmd: &[&str]) -> (Trace, String) {
    let dir = temp_dir(tag);
    let o = foresight(&dir)
        .env("FORESIGHT_RUNTIME", rt)
        .args(["record", "-o", "run.trace", "--"])
        .args(cmd)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{cmd:?}: {}", stderr(&o));
    let trace = Trace::open(dir.join("run.trace")).unwrap();
    assert!(trace.trailer.is_some(), "{:?}", trace.problems);
    let stats = foresight(&dir)
        .args(["stats", "run.trace"])
        .output()
        .unwrap();
    assert_eq!(stats.status.code(), Some(0), "{}", stderr(&stats));
    (trace, String::from_utf8_lossy(&stats.stdout).into_owned())
}

/// The count `stats` prints on its `threads` or `locks` line.
fn stats_count(stats: &str, heading: &str) -> usize {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(heading))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `{heading}` line in:\n{stats}"))
}

/// Sites that name their function: a symbolised site is `function` or `function (file:line)`;
/// an unsymbolised one is `module+0xoffset`.
fn named_sites(trace: &Trace) -> Vec<String> {
    let t = &trace.tables;
    t.sites
        .keys()
        .map(|s| t.describe_site(*s))
        .filter(|d| !d.split(' ').next().unwrap_or("").contains("+0x"))
        .collect()
}

#[test]
fn a_packaged_sysbench_is_recorded_with_its_threads_locks_and_named_sites() {
    let Some(rt) = real_runtime() else { return };
    let Some(sysbench) = installed("sysbench", "sysbench") else {
        return;
    };
    let sysbench = sysbench.to_str().unwrap();
    let (trace, stats) = record_real(
        &rt,
        "sysbench",
        // Few events and yields: the test binaries are unoptimised, and a few thousand lock
        // operations show everything a million would.
        &[
            sysbench,
            "threads",
            "--threads=2",
            "--events=100",
            "--thread-yields=20",
            "--time=0",
            "run",
        ],
    );
    // Main and two workers.
    assert!(stats_count(&stats, "threads ") >= 3, "{stats}");
    assert!(stats_count(&stats, "locks ") >= 1, "{stats}");
    // Debian's sysbench is stripped, but it exports its functions (for LuaJIT's FFI): the
    // dynamic symbol table names the functions that contain its thread-management sites.
    let named = named_sites(&trace);
    assert!(
        named.iter().any(|s| s.starts_with("sb_thread_")),
        "{named:?}\n{stats}"
    );
    assert!(stats.contains("sb_thread_"), "{stats}");
}

#[test]
fn a_packaged_pigz_is_recorded_with_its_threads_and_locks() {
    let Some(rt) = real_runtime() else { return };
    let Some(pigz) = installed("pigz", "pigz") else {
        return;
    };
    let dir = temp_dir("pigz-input");
    let input = dir.join("input");
    // Compressible text, several of pigz's 128 KiB blocks, so both worker threads get some.
    let text: String = (0..200_000)
        .map(|i| format!("{i} {} lorem ipsum\n", i * 7919 % 104729))
        .collect();
    std::fs::write(&input, text).unwrap();
    let (trace, stats) = record_real(
        &rt,
        "pigz",
        &[
            pigz.to_str().unwrap(),
            "-p",
            "2",
            "-k",
            "-f",
            input.to_str().unwrap(),
        ],
    );
    assert!(stats_count(&stats, "threads ") >= 2, "{stats}");
    assert!(stats_count(&stats, "locks ") >= 1, "{stats}");
    // Debian's pigz is stripped and exports no functions: its sites are named only when its
    // debug symbols (pigz-dbgsym, from the debian-debug archive) are installed.
    let data = std::fs::read(&pigz).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let debug_file = obj.build_id().ok().flatten().map(|id| {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        ))
    });
    let has_symbols = obj.section_by_name(".symtab").is_some()
        || debug_file.as_ref().is_some_and(|p| p.is_file());
    if has_symbols {
        assert!(!named_sites(&trace).is_empty(), "{stats}");
    } else {
        eprintln!("pigz has no symbols here (install pigz-dbgsym for function names)");
    }
}

#[test]
fn a_file_that_is_not_the_runtime_is_refused_before_anything_runs() {
    let dir = temp_dir("not-rt");
    let Some(exe) = prog() else { return };
    // A shared library, but not the runtime: the program would run unrecorded.
    let other = dir.join("libother.so");
    let src = dir.join("other.c");
    std::fs::write(&src, "int other(void) { return 1; }\n").unwrap();
    if cc(&["-shared", "-fPIC", src.to_str().unwrap()], &other).is_none() {
        return;
    }
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not a library\n").unwrap();
    for (runtime, why) in [
        (text.as_path(), "it is not a shared library"),
        (exe, "it is not the foresight runtime"),
        (other.as_path(), "it is not the foresight runtime"),
    ] {
        let o = foresight(&dir)
            .env("FORESIGHT_RUNTIME", runtime)
            .args(["record", "--", "sh", "-c", "touch ran"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(why), "{}", stderr(&o));
        assert!(!dir.join("ran").exists(), "nothing was run");
    }
}
