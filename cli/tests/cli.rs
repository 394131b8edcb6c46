//! What `foresight` does, as a user sees it: commands, output, errors and exit codes.

mod example;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn foresight(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(args)
        .output()
        .expect("run foresight")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn bundled_example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/traces/example.trace")
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("foresight-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn the_bundled_example_trace_is_what_the_builder_writes() {
    let fresh = example::example_trace();
    let path = bundled_example();
    if std::env::var_os("FORESIGHT_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
    }
    let committed = std::fs::read(&path).expect("fixtures/traces/example.trace exists");
    assert!(
        committed == fresh,
        "fixtures/traces/example.trace is stale: regenerate it with \
         `FORESIGHT_BLESS=1 cargo test -p foresight-cli --test cli`"
    );
}

#[test]
fn help_and_version() {
    let o = foresight(&["--help"]);
    assert!(o.status.success());
    for cmd in ["analyze", "demo", "dump", "record", "stats"] {
        assert!(stdout(&o).contains(cmd), "--help lists {cmd}");
    }
    let o = foresight(&["--version"]);
    assert!(o.status.success());
    assert!(stdout(&o).starts_with("foresight "));
}

/// Each command says what it covers (deadlocks and races alike); `-h` is a short summary, one
/// line per option, and `--help` the whole text; every `--format` is described.
#[test]
fn help_describes_each_command_as_it_is_and_h_is_short() {
    let top = stdout(&foresight(&["-h"]));
    let line = |cmd: &str| {
        top.lines()
            .find(|l| l.trim_start().starts_with(&format!("{cmd} ")))
            .unwrap_or_else(|| panic!("{cmd} in:\n{top}"))
            .to_string()
    };
    assert!(
        line("analyze").contains("deadlocks and data races"),
        "{top}"
    );
    assert!(line("check").contains("race"), "{top}");
    for cmd in [
        "analyze", "check", "record", "config", "stats", "dump", "graph", "pack", "demo", "import",
        "export", "synth",
    ] {
        let short = foresight(&[cmd, "-h"]);
        let long = foresight(&[cmd, "--help"]);
        assert!(short.status.success() && long.status.success(), "{cmd}");
        let (short, long) = (stdout(&short), stdout(&long));
        assert!(short.len() <= long.len(), "{cmd}");
        for l in short.lines() {
            assert!(
                l.chars().count() <= 320,
                "{cmd} -h: an option of {} characters: {l}",
                l.chars().count()
            );
        }
        if let Some(at) = long.find("--format <") {
            let described = long[at..].lines().nth(1).unwrap_or("").trim();
            assert!(
                !described.is_empty() && !described.starts_with('['),
                "{cmd} --help: --format is described:\n{long}"
            );
        }
    }
    let (short, long) = (
        stdout(&foresight(&["record", "-h"])),
        stdout(&foresight(&["record", "--help"])),
    );
    assert!(
        short.len() * 2 < long.len() && short.contains("see more with '--help'"),
        "record -h is a summary:\n{short}"
    );
    assert!(long.contains("Exit status:") && !short.contains("Exit status:"));
}

#[test]
fn unknown_subcommands_are_usage_errors() {
    let o = foresight(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn dump_prints_one_line_per_event_in_causal_order() {
    let path = bundled_example();
    let o = foresight(&["dump", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let trace = foresight_trace::Trace::open(&path).unwrap();
    assert_eq!(
        out.lines().count() as u64,
        trace.event_count() + 1,
        "a header line, then events"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].contains("thread-start") && lines[1].contains("T0 main"));
    let pos = |needle: &str| lines.iter().position(|l| l.contains(needle)).unwrap();
    // The creation of teller-1 comes before its first event; the signal before the wake-up.
    assert!(pos("thread-create   ") < pos("T1 teller-1"));
    assert!(pos("cond-signal") < pos("cond-woken"));
    assert!(
        out.contains("account_a"),
        "objects are named by their static variable"
    );
    assert!(out.contains("transfer (bank.c:26)"), "sites are symbolised");
}

#[test]
fn dump_can_show_one_thread() {
    let path = bundled_example();
    let o = foresight(&["dump", "--thread", "2", path.to_str().unwrap()]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.lines().skip(1).all(|l| l.contains("T2 teller-2")));
    assert!(out.lines().count() > 5);
}

#[test]
fn stats_summarise_the_trace() {
    let o = foresight(&["stats", bundled_example().to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("ended      cleanly"), "{out}");
    assert!(out.contains("threads    3"));
    assert!(out.contains("locks      3"));
    assert!(out.contains("bytes/event"));
    assert!(out.contains("lock-request"));
}

#[test]
fn stats_on_a_truncated_trace_say_it_was_cut_short_and_count_complete_chunks() {
    let mut b = foresight_trace::builder::TraceBuilder::new("long");
    b.chunk_bytes(64);
    let main = b.main_thread();
    let m = b.mutex("m");
    let s = b.site("main", "long.c", 3);
    for _ in 0..200 {
        b.lock(main, m, s);
        b.unlock(main, m, s);
    }
    let full = b.finish();
    let whole = foresight_trace::Trace::from_bytes("whole", full.clone()).unwrap();
    let cut = &full[..full.len() * 2 / 3];
    let path = temp_file("cut.trace", cut);
    let o = foresight(&["stats", path.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "a cut trace is still readable: {}",
        stderr(&o)
    );
    let out = stdout(&o);
    assert!(out.contains("CUT SHORT"), "{out}");
    let cut_trace = foresight_trace::Trace::open(&path).unwrap();
    assert!(cut_trace.event_count() > 0 && cut_trace.event_count() < whole.event_count());
    assert!(out.contains(&format!("events     {}", cut_trace.event_count())));
}

#[test]
fn a_file_that_is_not_a_trace_is_named_and_exits_2() {
    let path = temp_file("notes.txt", b"these are my notes, not a trace\n");
    for cmd in ["stats", "dump"] {
        let o = foresight(&[cmd, path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        let err = stderr(&o);
        assert!(
            err.contains("notes.txt") && err.contains("byte 0: not a foresight trace"),
            "{err}"
        );
    }
}

#[test]
fn a_missing_file_is_named_and_exits_2() {
    let o = foresight(&["stats", "/nonexistent/run.trace"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/run.trace"));
}

#[test]
fn a_damaged_chunk_is_reported_with_its_offset_and_the_rest_is_kept() {
    let mut bytes = example::example_trace();
    let trace = foresight_trace::TraceFile::from_bytes("x", bytes.clone()).unwrap();
    let chunk = *trace
        .chunks()
        .iter()
        .find(|c| c.kind == foresight_trace::frame::ChunkKind::Events)
        .unwrap();
    bytes[chunk.payload_offset as usize + 40] ^= 0xff;
    let path = temp_file("damaged.trace", &bytes);
    let o = foresight(&["stats", path.to_str().unwrap()]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(
        out.contains(&format!("byte {}: chunk checksum mismatch", chunk.offset)),
        "{out}"
    );
}

#[test]
fn a_trace_that_breaks_the_ordering_invariant_is_reported() {
    use foresight_trace::builder::TraceBuilder;
    // Thread 2 acquires the lock while thread 1 still holds it: no schedule allows that.
    let mut b = TraceBuilder::new("broken");
    let main = b.main_thread();
    let site = b.site("main", "broken.c", 3);
    let m = b.mutex("m");
    let child = b.spawn(main, site, "child");
    b.lock(main, m, site);
    b.lock(child, m, site);
    b.unlock(child, m, site);
    b.unlock(main, m, site);
    b.exit(child);
    b.join(main, child, site);
    let path = temp_file("broken-order.trace", &b.finish());
    let o = foresight(&["stats", path.to_str().unwrap()]);
    assert!(o.status.success(), "a readable trace is not a usage error");
    assert!(
        stdout(&o).contains("ordering invariant broken"),
        "stdout: {}",
        stdout(&o)
    );
    let o = foresight(&["dump", path.to_str().unwrap()]);
    assert!(stderr(&o).contains("ordering invariant broken"));
}

/// Runs `foresight` and fails the test if it does not end within a minute (a reader that
/// blocks on its input would otherwise hang the test).
fn foresight_bounded(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run foresight");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("wait for foresight").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("foresight {args:?} did not end: it blocked on its input");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
        .wait_with_output()
        .expect("collect foresight's output")
}

#[test]
fn a_fifo_or_a_directory_given_as_a_trace_is_named_and_exits_2() {
    let dir = std::env::temp_dir().join(format!("foresight-cli-{}-fifo", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("run.trace");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call.
    let rc = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
    // Nothing ever writes to the FIFO: a reader that waited for a writer would never end.
    for (path, what) in [(&fifo, "a FIFO"), (&dir, "a directory")] {
        for cmd in ["stats", "dump", "analyze"] {
            let o = foresight_bounded(&[cmd, path.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(2), "{cmd} {what}: {}", stderr(&o));
            let err = stderr(&o);
            assert!(
                err.contains(path.to_str().unwrap())
                    && err.contains("not a regular file")
                    && err.contains(what),
                "{cmd} {what}: {err}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn explain_says_why_each_rule_of_a_report_reports() {
    let o = foresight(&["analyze", bundled_example().to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = stdout(&o);
    // The report names its rules once, at the end, with the command that explains them.
    let (_, rules) = report
        .lines()
        .last()
        .and_then(|l| l.split_once("foresight analyze --explain RULE ("))
        .unwrap_or_else(|| panic!("no --explain line at the end:\n{report}"));
    let rules: Vec<&str> = rules.trim_end_matches(')').split(", ").collect();
    assert!(!rules.is_empty());
    for rule in rules {
        assert!(
            report.contains(&format!("rule {rule})")),
            "{rule}:\n{report}"
        );
        let o = foresight(&["analyze", "--explain", rule]);
        assert!(o.status.success(), "{rule}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains(&format!("(rule {rule})")), "{text}");
        for part in ["How foresight finds it:", "What to do:", "Example:"] {
            assert!(text.contains(part), "{rule}: no {part}\n{text}");
        }
    }
    // A kind of finding explains each of its rules.
    let o = foresight(&["analyze", "--explain", "wait-deadlock"]);
    assert!(o.status.success());
    for rule in [
        "cond-wait-while-holding",
        "sem-wait-while-holding",
        "handoff-read-while-holding",
    ] {
        assert!(
            stdout(&o).contains(&format!("(rule {rule})")),
            "{}",
            stdout(&o)
        );
    }
    // An unknown name is bad input, answered with the names known.
    let o = foresight(&["analyze", "--explain", "deadlocks"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    for known in ["deadlock", "race", "sync-reversal", "blocking-under-lock"] {
        assert!(stderr(&o).contains(known), "{}", stderr(&o));
    }
    // Without --explain, traces are needed.
    assert_eq!(foresight(&["analyze"]).status.code(), Some(2));
}
