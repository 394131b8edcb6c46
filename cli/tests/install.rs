//! One file to install: the `foresight` binary carries the runtime and puts it in place, in a
//! private cache, at first use. What `cargo install` gives records on its own, a copy of the
//! binary alone in an empty directory too; a cache that cannot hold the runtime (read-only,
//! `noexec`), a program LD_PRELOAD cannot reach (static) and one built with a sanitizer whose
//! runtime cannot share the process (ThreadSanitizer, AddressSanitizer) are refused with the
//! way out.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_fixtures::harness::{self, Tmpfs};
use foresight_trace::Trace;

/// Two threads, two locks in opposite orders.
const THREADED: &str = include_str!("inversion.c");

/// `<target>/<profile>` of this test binary.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let mut dir = exe.parent().unwrap().to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    dir
}

fn threaded_program(dir: &Path, extra: &[&str]) -> PathBuf {
    let src = dir.join("threaded.c");
    std::fs::write(&src, THREADED).unwrap();
    let exe = dir.join(if extra.is_empty() {
        "threaded"
    } else {
        "threaded-static"
    });
    let out = Command::new("cc")
        .args(["-g", "-O0", "-pthread"])
        .args(extra)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `bin` with a clean environment as far as foresight cares: no runtime, no cache chosen.
fn foresight(bin: &Path, dir: &Path) -> Command {
    let mut c = Command::new(bin);
    c.current_dir(dir);
    for v in [
        "FORESIGHT_RUNTIME",
        "FORESIGHT_CACHE_DIR",
        "FORESIGHT_OUTPUT",
        "LD_PRELOAD",
        "XDG_CACHE_HOME",
    ] {
        c.env_remove(v);
    }
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The one `runtime-<hash>/libforesight_rt.so` under `cache`.
fn cached_runtime(cache: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap_or_else(|e| panic!("{}: {e}", cache.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("runtime-")
        })
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].join("libforesight_rt.so")
}

fn assert_recorded(dir: &Path, o: &Output, trace: &str) {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done\n");
    let t = Trace::open(dir.join(trace)).unwrap();
    assert!(t.ended_cleanly());
    assert_eq!(t.tables.threads.len(), 2, "both threads recorded");
}

#[test]
fn cargo_install_gives_a_foresight_that_records_on_its_own() {
    let dir = harness::fresh_dir("install");
    let root = dir.join("root");
    let target = profile_dir().parent().unwrap().to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // The test's own build, installed (no rebuild: the same profile and target directory);
    // `scripts/install-check.sh` does the release install a user does.
    let mut install = Command::new(cargo);
    install
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .args([
            "install",
            "--locked",
            "--offline",
            "--path",
            "cli",
            "--root",
        ])
        .arg(&root)
        .arg("--target-dir")
        .arg(&target);
    if profile_dir().file_name().is_some_and(|n| n != "release") {
        install.arg("--debug");
    }
    let out = install.output().unwrap();
    assert!(out.status.success(), "cargo install: {}", stderr(&out));
    let bin = root.join("bin/foresight");
    let lib: Vec<_> = std::fs::read_dir(root.join("bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(lib, vec![std::ffi::OsString::from("foresight")], "one file");

    let prog = threaded_program(&dir, &[]);
    let cache = dir.join("xdg");
    let o = foresight(&bin, &dir)
        .env("XDG_CACHE_HOME", &cache)
        .args(["record", "-o", "t.trace", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    assert_recorded(&dir, &o, "t.trace");
    let rt = cached_runtime(&cache.join("foresight"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(rt.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "the cache is private");

    // A damaged cached copy is replaced, not loaded.
    std::fs::write(&rt, b"not the runtime").unwrap();
    let o = foresight(&bin, &dir)
        .env("XDG_CACHE_HOME", &cache)
        .args(["record", "-o", "t2.trace", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    assert_recorded(&dir, &o, "t2.trace");
    assert!(std::fs::read(&rt).unwrap().starts_with(b"\x7fELF"));
}

#[test]
fn a_copy_of_the_binary_alone_records_with_the_cache_in_home() {
    let dir = harness::fresh_dir("copy");
    let alone = dir.join("bin");
    std::fs::create_dir_all(&alone).unwrap();
    let bin = alone.join("foresight");
    std::fs::copy(env!("CARGO_BIN_EXE_foresight"), &bin).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let prog = threaded_program(&dir, &[]);
    let o = foresight(&bin, &dir)
        .env("HOME", &home)
        .args(["record", "-o", "t.trace", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    assert_recorded(&dir, &o, "t.trace");
    cached_runtime(&home.join(".cache/foresight"));

    // FORESIGHT_CACHE_DIR comes first.
    let chosen = dir.join("chosen");
    let o = foresight(&bin, &dir)
        .env("HOME", &home)
        .env("FORESIGHT_CACHE_DIR", &chosen)
        .args(["record", "-o", "t2.trace", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    assert_recorded(&dir, &o, "t2.trace");
    cached_runtime(&chosen);
}

/// The cached runtime is compared with the embedded one once, then stamped; a copy changed
/// after its stamp is compared again, found different and replaced (never loaded).
#[test]
fn a_stamped_runtime_changed_afterwards_is_replaced() {
    let dir = harness::fresh_dir("stamp");
    let cache = dir.join("cache");
    let prog = threaded_program(&dir, &[]);
    let bin = Path::new(env!("CARGO_BIN_EXE_foresight"));
    let record = |trace: &str| {
        let o = foresight(bin, &dir)
            .env("FORESIGHT_CACHE_DIR", &cache)
            .args(["record", "-o", trace, "--"])
            .arg(&prog)
            .output()
            .unwrap();
        assert_recorded(&dir, &o, trace);
        o
    };
    record("t1.trace");
    let rt = cached_runtime(&cache);
    let stamp = rt.with_file_name("libforesight_rt.so.checked");
    assert!(
        !stamp.exists(),
        "a copy written a moment ago is not stamped yet"
    );
    // Once its change time is settled, the next run compares it and stamps it.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    record("t2.trace");
    assert!(stamp.exists(), "the compared copy is stamped");
    let good = std::fs::read(&rt).unwrap();
    // The same length, other bytes: its change time moved, so the stamp no longer vouches
    // for it.
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    std::fs::write(&rt, &bad).unwrap();
    record("t3.trace");
    assert!(
        std::fs::read(&rt).unwrap() == good,
        "the changed copy was replaced by the embedded runtime"
    );
}

#[test]
fn a_noexec_cache_is_refused_with_the_way_out() {
    let Some(fs) = Tmpfs::mount_with_flags("noexec-cache", "16m", libc::MS_NOEXEC) else {
        return;
    };
    let dir = harness::fresh_dir("noexec");
    let prog = threaded_program(&dir, &[]);
    let o = foresight(Path::new(env!("CARGO_BIN_EXE_foresight")), &dir)
        .env("FORESIGHT_CACHE_DIR", fs.path().join("cache"))
        .args(["record", "-o", "t.trace", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(o.stdout.is_empty(), "the program did not run");
    assert!(
        e.contains("is on a file system mounted noexec")
            && e.contains("FORESIGHT_CACHE_DIR")
            && e.contains("FORESIGHT_RUNTIME"),
        "{e}"
    );
    assert!(!dir.join("t.trace").exists());
}

#[test]
fn a_read_only_cache_is_refused_with_the_way_out() {
    let Some(fs) = Tmpfs::mount("ro-cache", "64k", true) else {
        return;
    };
    let dir = harness::fresh_dir("rocache");
    let prog = threaded_program(&dir, &[]);
    let o = foresight(Path::new(env!("CARGO_BIN_EXE_foresight")), &dir)
        .env("FORESIGHT_CACHE_DIR", fs.path().join("foresight"))
        .args(["record", "-o", "t.trace", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(o.stdout.is_empty(), "the program did not run");
    assert!(
        e.contains("cannot create the cache directory")
            && e.contains("FORESIGHT_CACHE_DIR")
            && e.contains("FORESIGHT_RUNTIME"),
        "{e}"
    );
    // The way out works: another cache directory.
    let o = foresight(Path::new(env!("CARGO_BIN_EXE_foresight")), &dir)
        .env("FORESIGHT_CACHE_DIR", dir.join("cache"))
        .args(["record", "-o", "t.trace", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    assert_recorded(&dir, &o, "t.trace");
}

#[test]
fn a_static_program_is_refused_before_it_runs() {
    let dir = harness::fresh_dir("static");
    let src = dir.join("probe.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let probe = Command::new("cc")
        .args(["-static", "-o"])
        .arg(dir.join("probe"))
        .arg(&src)
        .output()
        .unwrap();
    if !probe.status.success() {
        let why = "cc -static does not link here (no static C library)";
        assert!(!harness::tools_required(), "{why}");
        eprintln!("SKIPPED: {why}");
        return;
    }
    let prog = threaded_program(&dir, &["-static"]);
    let o = foresight(Path::new(env!("CARGO_BIN_EXE_foresight")), &dir)
        .env("FORESIGHT_CACHE_DIR", dir.join("cache"))
        .args(["record", "-o", "t.trace", "--"])
        .arg(&prog)
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(o.stdout.is_empty(), "the program did not run");
    assert!(e.contains("statically linked"), "{e}");
}

/// `threaded.c` built with `flags`, or `None` (said, or a failure in CI) when this compiler
/// lacks the sanitizer's runtime.
fn sanitized_program(dir: &Path, name: &str, flags: &[&str]) -> Option<PathBuf> {
    let src = dir.join("threaded.c");
    std::fs::write(&src, THREADED).unwrap();
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-g", "-O1", "-pthread"])
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("run cc");
    if !out.status.success() {
        let why = format!(
            "cc {} does not link here (Debian: apt-get install gcc, which brings libtsan and \
             libasan): {}",
            flags.join(" "),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
        assert!(!harness::tools_required(), "{why}");
        eprintln!("SKIPPED: {why}");
        return None;
    }
    Some(exe)
}

#[test]
fn a_sanitizer_built_program_is_refused_before_it_runs_with_the_way_out() {
    let dir = harness::fresh_dir("sanitized");
    let cases: [(&str, &[&str], &str, &str); 4] = [
        (
            "tsan",
            &["-fsanitize=thread"],
            "ThreadSanitizer",
            "loads libtsan",
        ),
        (
            "tsan-static",
            &["-fsanitize=thread", "-static-libtsan"],
            "ThreadSanitizer",
            "__tsan_init",
        ),
        (
            "asan",
            &["-fsanitize=address"],
            "AddressSanitizer",
            "loads libasan",
        ),
        (
            "asan-static",
            &["-fsanitize=address", "-static-libasan"],
            "AddressSanitizer",
            "__asan_init",
        ),
    ];
    for (name, flags, sanitizer, evidence) in cases {
        let Some(prog) = sanitized_program(&dir, name, flags) else {
            continue;
        };
        let trace = format!("{name}.trace");
        let o = foresight(Path::new(env!("CARGO_BIN_EXE_foresight")), &dir)
            .env("FORESIGHT_CACHE_DIR", dir.join("cache"))
            .args(["record", "-o", &trace, "--"])
            .arg(&prog)
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {e}");
        assert!(o.stdout.is_empty(), "{name}: the program did not run");
        assert!(!dir.join(&trace).exists(), "{name}: no trace");
        assert!(
            e.contains(&format!("is built with {sanitizer} ({}", flags[0]))
                && e.contains(evidence)
                && e.contains("foresight config --cflags")
                && e.contains("foresight config --libs"),
            "{name}: {e}"
        );
        assert!(
            !e.contains("statically linked") && !e.contains("set-user-ID"),
            "{name}: {e}"
        );
        assert_eq!(e.lines().count(), 1, "{name}: one message: {e}");
    }
    // Sanitizers that leave threads and locks alone are recorded as they are.
    for (name, flag) in [
        ("ubsan", "-fsanitize=undefined"),
        ("lsan", "-fsanitize=leak"),
    ] {
        let Some(prog) = sanitized_program(&dir, name, &[flag]) else {
            continue;
        };
        let trace = format!("{name}.trace");
        let o = foresight(Path::new(env!("CARGO_BIN_EXE_foresight")), &dir)
            .env("FORESIGHT_CACHE_DIR", dir.join("cache"))
            .args(["record", "-o", &trace, "--"])
            .arg(&prog)
            .output()
            .unwrap();
        assert_recorded(&dir, &o, &trace);
    }
}

#[test]
fn config_flags_do_not_name_the_runtime_or_its_cache() {
    let dir = harness::fresh_dir("configflags");
    let o = foresight(Path::new(env!("CARGO_BIN_EXE_foresight")), &dir)
        .env("FORESIGHT_CACHE_DIR", dir.join("cache"))
        .args(["config", "--cflags", "--libs"])
        .output()
        .unwrap();
    if o.status.code() != Some(0) {
        // No C compiler: the instrumented tests say so.
        assert!(!harness::tools_required(), "{}", stderr(&o));
        return;
    }
    let flags = String::from_utf8_lossy(&o.stdout);
    assert!(
        !flags.contains("libforesight_rt")
            && !flags.contains("runtime-")
            && !flags.contains("rpath"),
        "an instrumented program links the stub only: {flags}"
    );
}
