//! What `foresight` creates, follows, trusts and prints when another user got there first: a
//! link planted where foresight writes, a stop file anyone could create, another user's trace
//! beside a run, a FIFO or a shared directory in the cache, a trace whose names hold terminal
//! escape sequences. Each test runs the `foresight` binary as a user does, in a directory it
//! makes world-writable and sticky, as `/tmp` is (mode 01777).
//!
//! Links are planted by the test's own user, so the tests do not depend on
//! `fs.protected_symlinks` (which would stop root from following another user's link in a
//! sticky directory and hide the bug). The files of "another user" are made by `chown` when the
//! tests run as root (CI does); otherwise those checks say SKIPPED.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use foresight_fixtures::harness::{self, compile_hostile, compile_source, fresh_dir};
use foresight_trace::tables::StopCause;
use foresight_trace::Trace;

/// A user id no test runs as: `nobody`.
const OTHER_UID: u32 = 65534;

fn foresight(dir: &Path) -> Command {
    harness::foresight_in(Path::new(env!("CARGO_BIN_EXE_foresight")), dir)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A fresh directory as `/tmp` is: anyone may create files in it, only their owner remove them.
fn sticky_dir(tag: &str) -> PathBuf {
    let d = fresh_dir(tag);
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

/// A file the attacker wants overwritten, and its content.
fn victim(dir: &Path) -> PathBuf {
    let v = dir.join("victim");
    std::fs::write(&v, b"precious").unwrap();
    v
}

fn assert_untouched(victim: &Path) {
    assert_eq!(
        std::fs::read(victim).unwrap(),
        b"precious",
        "{} was written through a planted link",
        victim.display()
    );
}

fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
}

/// A small trace with a lock-order inversion between two threads.
fn inversion_trace(thread_name: &str, lock_names: [&str; 2], file: &str) -> Vec<u8> {
    use foresight_trace::builder::TraceBuilder;
    let mut b = TraceBuilder::new("hardening");
    let main = b.main_thread();
    let s = b.site("main", file, 1);
    let one = b.spawn(main, s, thread_name);
    let two = b.spawn(main, s, "two");
    let a = b.mutex(lock_names[0]);
    let c = b.mutex(lock_names[1]);
    for (t, first, second, line) in [(one, a, c, 10), (two, c, a, 20)] {
        let (s1, s2, s3) = (
            b.site("worker", file, line),
            b.site("worker", file, line + 1),
            b.site("worker", file, line + 2),
        );
        b.lock(t, first, s1);
        b.lock(t, second, s2);
        b.unlock(t, second, s3);
        b.unlock(t, first, s3);
    }
    let s = b.site("main", file, 30);
    b.join(main, one, s);
    b.join(main, two, s);
    b.finish()
}

/// Runs `foresight ARGS` through `sh -c 'read; exec …'`: the pid is known before foresight
/// starts (exec keeps it), so that a test can plant the names foresight would derive from it.
fn spawn_with_known_pid(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> std::process::Child {
    let bin = env!("CARGO_BIN_EXE_foresight");
    let mut c = Command::new("sh");
    c.current_dir(dir)
        .arg("-c")
        .arg("read go; exec \"$@\"")
        .arg("sh")
        .arg(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"FORESIGHT_") {
            c.env_remove(&name);
        }
    }
    c.env("FORESIGHT_RUNTIME", harness::runtime());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

fn go(mut child: std::process::Child) -> Output {
    child.stdin.take().unwrap().write_all(b"\n").unwrap();
    child.wait_with_output().unwrap()
}

// ---- item: `--dump-on` snapshots ----

#[test]
fn dump_on_snapshots_never_follow_a_planted_link() {
    use std::io::{BufRead, BufReader, Read};
    let exe = compile_source(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/flight/dump_on_deadlock.c"),
    );
    let dir = sticky_dir("hard-snapshot");
    let victim = victim(&dir);
    // Where the first snapshot would be written, and a finished snapshot's name, both links to
    // the victim.
    std::os::unix::fs::symlink(&victim, dir.join("t.trace.snapshot-1.partial")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("t.trace.snapshot-7")).unwrap();
    let mut child = foresight(&dir)
        .args(["record", "-o", "t.trace", "--keep-last", "256K"])
        .args(["--dump-on", "USR2", "--"])
        .arg(&exe)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let pid: i32 = line
        .strip_prefix("stuck ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR2) }, 0);
    let snapshot = dir.join("t.trace.snapshot-2");
    for _ in 0..3000 {
        if snapshot.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    child.wait().unwrap();
    assert_untouched(&victim);
    assert!(is_link(&dir.join("t.trace.snapshot-1.partial")));
    assert!(is_link(&dir.join("t.trace.snapshot-7")));
    // The snapshot went to the next free name, a new file.
    let meta = std::fs::symlink_metadata(&snapshot).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert!(meta.is_file(), "{err}");
    assert!(Trace::open(&snapshot).unwrap().tables.is_window());
    assert!(
        err.contains("snapshot written to t.trace.snapshot-2"),
        "{err}"
    );
    // The planted finished snapshot is neither symbolised nor read, and the user is told.
    assert!(
        err.contains(
            "t.trace.snapshot-7: not a snapshot of this run, left alone: it is a symbolic link"
        ),
        "{err}"
    );
}

// ---- item: the temporary trace of an STD import ----

#[test]
fn reading_std_text_never_writes_through_a_planted_temporary_name() {
    let dir = sticky_dir("hard-std");
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = victim(&dir);
    std::fs::write(
        dir.join("x.std"),
        "T0|acq(L1)|10\nT0|acq(L2)|11\nT0|rel(L2)|12\nT0|rel(L1)|13\n\
         T1|acq(L2)|20\nT1|acq(L1)|21\nT1|rel(L1)|22\nT1|rel(L2)|23\n",
    )
    .unwrap();
    let child = spawn_with_known_pid(&dir, &["stats", "x.std"], &[("TMPDIR", &tmp)]);
    // The names an earlier foresight derived from its pid.
    for n in 0..4 {
        std::os::unix::fs::symlink(
            &victim,
            tmp.join(format!("foresight-import-{}-{n}.trace", child.id())),
        )
        .unwrap();
    }
    let o = go(child);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_untouched(&victim);
    let stdout = String::from_utf8_lossy(&o.stdout);
    // The file is named as the user named it, not by the temporary trace it was read through.
    assert!(stdout.contains("trace      x.std\n"), "{stdout}");
    assert!(!stdout.contains("foresight-import"), "{stdout}");
    // Nothing is left behind but the planted links.
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !is_link(p))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

// ---- item: `foresight demo`'s directory ----

fn demo(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = foresight(dir);
    c.env("FORESIGHT_CACHE_DIR", harness::config_cache_dir())
        .arg("demo")
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn cc_available() -> bool {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let ok = Command::new(&cc).arg("--version").output().is_ok();
    if !ok {
        assert!(!harness::tools_required(), "no C compiler `{cc}`");
        eprintln!("SKIPPED: no C compiler `{cc}`");
    }
    ok
}

#[test]
fn demo_never_uses_a_planted_directory_and_never_writes_through_a_link() {
    if !cc_available() {
        return;
    }
    let dir = sticky_dir("hard-demo");
    let victim = victim(&dir);
    // The directory an earlier foresight would have used: there before it, open to all, with
    // a link where the example's source goes.
    let child = spawn_with_known_pid(
        &dir,
        &["demo", "--format", "json"],
        &[
            ("TMPDIR", &dir),
            ("FORESIGHT_CACHE_DIR", &harness::config_cache_dir()),
        ],
    );
    let planted = dir.join(format!("foresight-demo-{}", child.id()));
    std::fs::create_dir(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::symlink(&victim, planted.join("bank.c")).unwrap();
    let o = go(child);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_untouched(&victim);
    let names: Vec<_> = std::fs::read_dir(&planted)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["bank.c"], "the planted directory is left alone");
    // Its own directory was private, and is gone.
    let others: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("foresight-demo-") && dir.join(n) != planted)
        .collect();
    assert!(others.is_empty(), "{others:?}");

    // --keep: the private directory stays, mode 0700.
    let o = demo(&dir, &["--keep", "--format", "json"], &[("TMPDIR", &dir)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let kept = err
        .lines()
        .find_map(|l| l.strip_prefix("foresight demo: files are in "))
        .unwrap_or_else(|| panic!("{err}"));
    let meta = std::fs::symlink_metadata(kept).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.mode() & 0o7777, 0o700, "{kept}");
    assert_eq!(meta.uid(), std::fs::metadata(&dir).unwrap().uid());

    // --dir: the user's choice, but a link in it is not written through.
    let chosen = dir.join("chosen");
    std::fs::create_dir(&chosen).unwrap();
    std::os::unix::fs::symlink(&victim, chosen.join("bank")).unwrap();
    let o = demo(&dir, &["--dir", "chosen"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("chosen/bank exists and it is a symbolic link"),
        "{}",
        stderr(&o)
    );
    assert_untouched(&victim);
}

// ---- item: the `--hang-timeout` stop file ----

#[test]
fn the_hang_stop_file_is_private_and_a_planted_one_neither_stops_the_run_nor_is_followed() {
    let dir = sticky_dir("hard-stop");
    let victim = victim(&dir);
    // Where an earlier foresight put the stop file: a link to the victim.
    let old_stop = dir.join(".t.trace.foresight-stop");
    std::os::unix::fs::symlink(&victim, &old_stop).unwrap();
    let exe = compile_hostile("self_deadlock");
    let o = foresight(&dir)
        .env("TMPDIR", &dir)
        .args(["record", "-o", "t.trace", "--hang-timeout", "1", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(err.contains("stopping"), "{err}");
    let t = Trace::open(dir.join("t.trace")).unwrap();
    assert!(
        matches!(
            t.tables.recording_stopped.map(|s| s.cause),
            Some(StopCause::HangTimeout { .. })
        ),
        "{err}"
    );
    assert_untouched(&victim);
    assert!(is_link(&old_stop), "the planted link is left alone");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("foresight-stop-"))
        .collect();
    assert!(left.is_empty(), "the stop directory is removed: {left:?}");

    // A stop file anyone could create at the old name, while the run goes on, does not stop
    // it.
    std::fs::remove_file(&old_stop).unwrap();
    let exe = compile_hostile("lock_pairs");
    let child = foresight(&dir)
        .env("TMPDIR", &dir)
        .args(["record", "-o", "t.trace", "--hang-timeout", "30", "--"])
        .args(["sh", "-c", "sleep 2; exec \"$0\" 20000"])
        .arg(&exe)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::write(&old_stop, b"").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("stopping"), "{}", stderr(&o));
    let run: Vec<Trace> = std::iter::once(dir.join("t.trace"))
        .chain(
            std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| {
                    p.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .starts_with("t.trace.")
                }),
        )
        .map(|p| Trace::open(p).unwrap())
        .collect();
    for t in &run {
        assert!(t.tables.recording_stopped.is_none(), "{}", stderr(&o));
        assert!(t.trailer.is_some(), "{}", stderr(&o));
    }
    assert!(
        run.iter().any(|t| t.event_count() > 20000),
        "{}",
        stderr(&o)
    );

    // Where it is: a directory of the user's that no one else can write.
    let o = foresight(&dir)
        .env("TMPDIR", &dir)
        .args(["record", "-o", "v.trace", "--hang-timeout", "30", "--"])
        .args([
            "sh",
            "-c",
            "stat -c '%u %a' \"$(dirname \"$FORESIGHT_STOP_FILE\")\"",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    assert_eq!(stdout.trim(), format!("{me} 711"), "{}", stderr(&o));
}

// ---- item: a run's siblings ----

#[test]
fn analyze_merges_only_the_users_own_regular_siblings() {
    let dir = sticky_dir("hard-siblings");
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(
        dir.join("t.trace"),
        inversion_trace("one", ["A", "B"], "t.c"),
    )
    .unwrap();
    let other = elsewhere.join("secret.trace");
    std::fs::write(&other, inversion_trace("one", ["S", "T"], "secret.c")).unwrap();
    std::os::unix::fs::symlink(&other, dir.join("t.trace.123")).unwrap();
    let root = is_root();
    if root {
        std::fs::write(
            dir.join("t.trace.456"),
            inversion_trace("one", ["U", "V"], "theirs.c"),
        )
        .unwrap();
        chown(&dir.join("t.trace.456"), OTHER_UID);
    } else {
        eprintln!("SKIPPED: another user's sibling (needs root to chown)");
    }
    let o = foresight(&dir)
        .args(["analyze", "--format", "json", "t.trace"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["traces"].as_array().unwrap().len(), 1, "{json:#}");
    let err = stderr(&o);
    assert!(
        err.contains("t.trace.123: left out of the run t.trace: it is a symbolic link"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("secret.c"));
    if root {
        assert!(
            err.contains(&format!(
                "t.trace.456: left out of the run t.trace: it belongs to another user (uid \
                 {OTHER_UID})"
            )),
            "{err}"
        );
        // A run that is all another user's (read by root): its siblings are its own.
        chown(&dir.join("t.trace"), OTHER_UID);
        let o = foresight(&dir)
            .args(["analyze", "--format", "json", "t.trace"])
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(json["traces"].as_array().unwrap().len(), 2, "{json:#}");
    }
}

// ---- item: escape sequences from traces and packs ----

#[test]
fn names_from_traces_and_packs_reach_the_terminal_escaped() {
    let dir = sticky_dir("hard-escape");
    // Terminal controls, and bidirectional overrides and isolates, which reorder what a
    // terminal shows after them.
    let hostile = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m\u{202e}gnp.\u{2066}x\u{2069}\u{200b}";
    let hidden = [
        '\u{1b}', '\u{9b}', '\u{7}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{200b}',
    ];
    std::fs::write(
        dir.join("t.trace"),
        inversion_trace(hostile, [hostile, "B"], &format!("{hostile}.c")),
    )
    .unwrap();
    let clean = |what: &str, bytes: &[u8]| {
        let s = String::from_utf8_lossy(bytes);
        assert!(!s.contains(hidden), "{what}: {s:?}");
        s.into_owned()
    };
    for args in [
        &["analyze", "t.trace"][..],
        &["analyze", "--full-stacks", "t.trace"],
        &["stats", "t.trace"],
        &["dump", "t.trace"],
        &["graph", "t.trace"],
        &["check", "t.trace"],
    ] {
        let o = foresight(&dir).args(args).output().unwrap();
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{args:?}: {}",
            stderr(&o)
        );
        let out = clean(&format!("{args:?}"), &o.stdout);
        clean(&format!("{args:?} (stderr)"), &o.stderr);
        if args[0] != "graph" {
            assert!(out.contains("\\u{1b}]0;pwned\\u{7}"), "{args:?}: {out}");
            assert!(out.contains("\\u{202e}gnp.\\u{2066}x"), "{args:?}: {out}");
        }
    }
    // A pack's member names are the file names it was given.
    let named = dir.join(format!("{hostile}.trace"));
    std::fs::copy(dir.join("t.trace"), &named).unwrap();
    let o = foresight(&dir)
        .args(["pack", "--no-symbolize", "-o", "p.pack"])
        .arg(&named)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    clean("pack (stderr)", &o.stderr);
    for cmd in ["stats", "analyze"] {
        let o = foresight(&dir).args([cmd, "p.pack"]).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        clean(cmd, &o.stdout);
        clean(cmd, &o.stderr);
    }
    // And error messages: a file that is not there, named with escapes.
    let o = foresight(&dir)
        .args(["analyze", &format!("{hostile}-missing")])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = clean("a missing file's error", &o.stderr);
    assert!(err.contains("\\u{1b}[2J"), "{err}");
}

// ---- items: the cached runtime (a FIFO, a link, another user's file, a shared directory) ----

/// `foresight record -- true` with the runtime foresight carries, cached in `cache`.
fn record_with_cache(dir: &Path, cache: &Path) -> Output {
    let mut c = foresight(dir);
    c.env_remove("FORESIGHT_RUNTIME")
        .env("FORESIGHT_CACHE_DIR", cache)
        .args(["record", "-o", "c.trace", "--", "true"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    for _ in 0..600 {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    panic!("record hung for 60 s: {}", stderr(&o));
}

fn carries_a_runtime() -> bool {
    // A build without the runtime inside says so when it looks for one.
    let dir = fresh_dir("hard-carries");
    let o = foresight(&dir)
        .env_remove("FORESIGHT_RUNTIME")
        .env("FORESIGHT_CACHE_DIR", dir.join("cache"))
        .args(["record", "-o", "c.trace", "--", "true"])
        .output()
        .unwrap();
    let carries = !stderr(&o).contains("does not carry it");
    if !carries {
        assert!(!harness::tools_required(), "{}", stderr(&o));
        eprintln!("SKIPPED: this foresight was built without the runtime inside");
    }
    carries
}

#[test]
fn a_fifo_link_or_shared_file_at_the_cached_runtime_is_replaced_and_never_loaded() {
    if !carries_a_runtime() {
        return;
    }
    let dir = sticky_dir("hard-cache");
    let cache = dir.join("cache");
    let o = record_with_cache(&dir, &cache);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rt_dir = cache_entry(&cache, "runtime-");
    let rt = rt_dir.join("libforesight_rt.so");
    let good = std::fs::read(&rt).unwrap();
    let victim = victim(&dir);

    let plant_fifo = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    type Plant<'a> = (&'a str, Box<dyn Fn(&Path) + 'a>);
    let plants: Vec<Plant> = vec![
        ("it is not a regular file (a FIFO)", Box::new(plant_fifo)),
        (
            "it is a symbolic link",
            Box::new(|p: &Path| std::os::unix::fs::symlink(&victim, p).unwrap()),
        ),
        (
            "others may write it (mode 0666",
            Box::new(|p: &Path| {
                std::fs::write(p, &good).unwrap();
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).unwrap();
            }),
        ),
    ];
    for (why, plant) in plants {
        std::fs::remove_file(&rt).unwrap();
        plant(&rt);
        let o = record_with_cache(&dir, &cache);
        assert_eq!(o.status.code(), Some(0), "{why}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{why}: {}", stderr(&o));
        let meta = std::fs::symlink_metadata(&rt).unwrap();
        assert!(meta.is_file(), "{why}");
        assert_eq!(meta.mode() & 0o022, 0, "{why}");
        assert_eq!(std::fs::read(&rt).unwrap(), good, "{why}");
        assert_untouched(&victim);
    }
    if is_root() {
        std::fs::write(&rt, &good).unwrap();
        chown(&rt, OTHER_UID);
        let o = record_with_cache(&dir, &cache);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("it belongs to another user (uid {OTHER_UID})")),
            "{}",
            stderr(&o)
        );
        assert_ne!(std::fs::metadata(&rt).unwrap().uid(), OTHER_UID);
    } else {
        eprintln!("SKIPPED: another user's cached runtime (needs root to chown)");
    }

    // A runtime directory others can write is refused, current copy or not.
    std::fs::set_permissions(&rt_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = record_with_cache(&dir, &cache);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is not private") && stderr(&o).contains("FORESIGHT_CACHE_DIR"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("c.trace").exists() || stderr(&o).contains("error"));
}

// ---- item: the cached tsan stub ----

#[test]
fn a_cached_tsan_stub_others_could_have_written_is_refused() {
    if !cc_available() {
        return;
    }
    let dir = sticky_dir("hard-stub");
    let cache = dir.join("cache");
    let config = || {
        foresight(&dir)
            .env("FORESIGHT_CACHE_DIR", &cache)
            .args(["config", "--cflags", "--libs"])
            .output()
            .unwrap()
    };
    let o = config();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let stub = cache_entry(&cache, "tsan-stub-");
    let archive = stub.join("libtsan.a");
    let victim = victim(&dir);

    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = config();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("others may write it"), "{}", stderr(&o));
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o700)).unwrap();

    let good = std::fs::read(&archive).unwrap();
    std::fs::remove_file(&archive).unwrap();
    std::os::unix::fs::symlink(&victim, &archive).unwrap();
    let o = config();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("libtsan.a: it is a symbolic link"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_file(&archive).unwrap();
    std::fs::write(&archive, &good).unwrap();
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = config();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("others may write it"), "{}", stderr(&o));
    // Removed, as the message says: built anew.
    std::fs::remove_dir_all(&stub).unwrap();
    let o = config();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(archive.is_file());
}

// ---- item: a pack's members are bounded by what the pack holds ----

/// A pack of one member, `frame` (a zstd frame) declared as `size` bytes with checksum
/// `sha256`, laid out as `docs/pack-format.md` says.
fn pack_with(frame: &[u8], size: u64, sha256: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let manifest = |offset: u64| {
        serde_json::to_vec(&serde_json::json!({
            "format": 1,
            "producer": "hardening test",
            "created_unix": 0,
            "level": 1,
            "traces": [{
                "name": "bomb.trace",
                "pid": 1,
                "parent_pid": 0,
                "command": ["bomb"],
                "events": null,
                "threads": 1,
                "size": size,
                "sha256": sha256,
                "offset": offset,
                "packed_size": frame.len(),
            }],
        }))
        .unwrap()
    };
    // The offset's digits change the manifest's length: lay out until it is stable.
    let mut offset = 0u64;
    let mut json = manifest(offset);
    while 48 + json.len() as u64 != offset {
        offset = 48 + json.len() as u64;
        json = manifest(offset);
    }
    let mut out = b"FSIGHTPK".to_vec();
    out.extend(1u32.to_le_bytes());
    out.extend((json.len() as u32).to_le_bytes());
    out.extend(Sha256::digest(&json));
    out.extend(&json);
    out.extend(frame);
    out
}

/// Runs `foresight ARGS` in `dir` and returns its output and its peak resident memory (KiB),
/// from `wait4` of that very process.
// Reaped by `wait4`, which std's `Child` does not know of.
#[allow(clippy::zombie_processes)]
fn run_measured(dir: &Path, args: &[&str]) -> (Output, i64) {
    use std::io::Read;
    let mut child = foresight(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain data; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, not reaped yet (std's `Child` is not waited on).
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    use std::os::unix::process::ExitStatusExt;
    let o = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: out,
        stderr: err,
    };
    (o, usage.ru_maxrss)
}

#[test]
fn a_pack_whose_member_expands_without_end_is_refused_in_little_memory() {
    let dir = fresh_dir("hard-bomb");
    // 128 MiB of zeros: a few KB compressed.
    const BOMB: usize = 128 << 20;
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..BOMB >> 20 {
        enc.write_all(&zeros).unwrap();
    }
    let frame = enc.finish().unwrap();
    assert!(frame.len() < 1 << 20, "{}", frame.len());
    for (name, size) in [("big.pack", 1u64 << 39), ("exact.pack", BOMB as u64)] {
        std::fs::write(dir.join(name), pack_with(&frame, size, &"0".repeat(64))).unwrap();
        let (o, rss_kib) = run_measured(&dir, &["stats", name]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(name) && err.contains("bomb.trace"), "{err}");
        if size == BOMB as u64 {
            assert!(err.contains("SHA-256 does not match"), "{err}");
        } else {
            assert!(err.contains("decompresses to 134217728 bytes"), "{err}");
        }
        eprintln!("{name}: peak RSS {rss_kib} KiB");
        // The member is never held in memory: far below its 128 MiB.
        assert!(
            rss_kib < 48 << 10,
            "{name}: peak RSS {rss_kib} KiB for a {}-byte pack",
            frame.len()
        );
    }
}

// ---- messages: why no trace was written ----

/// The entry of the cache directory whose name starts with `prefix` (`runtime-`,
/// `tsan-stub-`: the names carry a hash).
fn cache_entry(cache: &Path, prefix: &str) -> PathBuf {
    std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}* in {}", cache.display()))
}

/// Records `exe 100` into `dir/t.trace` from inside `dir`; the program's own status must come
/// back whatever happened to the trace. Returns what `foresight` said.
fn record_lock_pairs_into(dir: &Path, exe: &Path) -> String {
    let o = foresight(dir)
        .args(["record", "-o"])
        .arg(dir.join("t.trace"))
        .arg("--")
        .arg(exe)
        .arg("100")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    stderr(&o)
}

#[test]
fn a_read_only_or_full_directory_is_named_as_the_reason_no_trace_was_written() {
    use harness::Tmpfs;
    let exe = compile_hostile("lock_pairs");
    let Some(ro) = Tmpfs::mount("hard-ro", "64k", true) else {
        return;
    };
    let err = record_lock_pairs_into(ro.path(), &exe);
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(
        err.contains(&format!(
            "no trace was written to {}: its directory {} is on a read-only file system",
            ro.path().join("t.trace").display(),
            ro.path().display()
        )),
        "{err}"
    );
    assert!(!err.contains("statically linked"), "{err}");

    let Some(full) = Tmpfs::mount("hard-full", "64k", false) else {
        return;
    };
    // Fill it.
    let mut filler = std::fs::File::create(full.path().join("filler")).unwrap();
    while filler.write_all(&[0u8; 4096]).is_ok() {}
    drop(filler);
    let err = record_lock_pairs_into(full.path(), &exe);
    assert!(err.contains("file system is full"), "{err}");
    assert!(!err.contains("statically linked"), "{err}");
    assert!(!err.contains("the process ended before"), "{err}");
}

// ---- files the user names for output ----

#[test]
fn outputs_the_user_names_are_not_written_through_a_link_or_over_anothers_file() {
    let dir = sticky_dir("hard-outputs");
    let victim = victim(&dir);
    std::fs::write(
        dir.join("t.trace"),
        inversion_trace("one", ["A", "B"], "t.c"),
    )
    .unwrap();
    std::fs::write(dir.join("x.std"), "T0|acq(L1)|10\nT0|rel(L1)|11\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("planted")).unwrap();
    let runs: [&[&str]; 5] = [
        &["import", "--from", "std", "x.std", "-o", "planted"],
        &["export", "--to", "std", "t.trace", "-o", "planted"],
        &["synth", "--events", "1000", "--output", "planted"],
        &[
            "synth", "--events", "1000", "--output", "s.trace", "--truth", "planted",
        ],
        &[
            "check",
            "--update-baseline",
            "--baseline",
            "planted",
            "t.trace",
        ],
    ];
    for args in runs {
        let o = foresight(&dir).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("planted is a symbolic link"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_untouched(&victim);
        assert!(is_link(&dir.join("planted")), "{args:?}");
    }
    // A file the user named that exists is rewritten when it is the user's own…
    std::fs::write(dir.join("mine.trace"), b"old").unwrap();
    let o = foresight(&dir)
        .args(["import", "--from", "std", "x.std", "-o", "mine.trace"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(Trace::open(dir.join("mine.trace")).is_ok());
    // …and not when another user put it there.
    if is_root() {
        std::fs::write(dir.join("theirs.trace"), b"theirs").unwrap();
        chown(&dir.join("theirs.trace"), OTHER_UID);
        let o = foresight(&dir)
            .args(["import", "--from", "std", "x.std", "-o", "theirs.trace"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!(
                "theirs.trace exists and belongs to another user (uid {OTHER_UID})"
            )),
            "{}",
            stderr(&o)
        );
        assert_eq!(std::fs::read(dir.join("theirs.trace")).unwrap(), b"theirs");
    } else {
        eprintln!("SKIPPED: another user's output file (needs root to chown)");
    }
}

#[test]
fn a_cache_directory_that_is_another_users_link_is_refused() {
    if !is_root() {
        eprintln!("SKIPPED: another user's link (needs root to lchown)");
        return;
    }
    if !carries_a_runtime() {
        return;
    }
    let dir = sticky_dir("hard-cache-link");
    // A private directory of the user's, and another user's link to it where the cache goes.
    let target = dir.join("private");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.join("cache");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    chown(&link, OTHER_UID);
    let o = record_with_cache(&dir, &link);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "is a symbolic link that another user owns (uid {OTHER_UID})"
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    // The user's own link (a cache on another disk) is followed.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = record_with_cache(&dir, &link);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_dir(&target).unwrap().count() > 0);
}
