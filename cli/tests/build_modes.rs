//! The ways a program gets built with `foresight config`, with gcc and clang: one step (PIE and
//! not), separate compile and link steps (the link with or without the compile flags, the
//! flags before or after the objects), a shared library of the program's own, a CMake project,
//! and `--stack-depth` over the instrumentation's shadow stack. Each binary loads no sanitizer
//! runtime and records its accesses. A missing compiler or CMake fails in CI.

use std::path::{Path, PathBuf};
use std::process::Command;

use foresight_fixtures::harness::{self, Compiler, Lang};
use foresight_trace::event::EventKind;
use foresight_trace::Trace;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/instrumented")
        .join(name)
}

/// The line of `source` marked `@name`.
fn mark(source: &Path, name: &str) -> u32 {
    let text = std::fs::read_to_string(source).expect("read the fixture");
    let tag = format!("@{name} ");
    text.lines()
        .position(|l| l.contains(&tag))
        .unwrap_or_else(|| panic!("no @{name} in {}", source.display())) as u32
        + 1
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn flags(c: Compiler, lang: Lang, what: &str) -> Vec<String> {
    harness::config_flags(c, lang, what)
}

/// `ldd` names no sanitizer and no foresight library.
fn assert_standalone(bin: &Path) {
    let out = Command::new("ldd").arg(bin).output().expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ldd {}: {text}", bin.display());
    // Each line names a library first (`libtsan.so.2 => /usr/lib/…`).
    for lib in text.lines().filter_map(|l| l.split_whitespace().next()) {
        assert!(
            !lib.contains("tsan") && !lib.contains("foresight"),
            "{} loads {lib}: {text}",
            bin.display()
        );
    }
}

/// Records `exe` (plain and recorded output compared) and returns its checked trace.
fn recorded(exe: &Path, tag: &str, record_args: &[&str]) -> Trace {
    let plain = harness::run_plain(exe, &[]);
    assert!(plain.status.success(), "{} runs", exe.display());
    let dir = harness::fresh_dir(tag);
    let trace = dir.join("run.trace");
    let out = harness::record_with_cli(exe, &[], &trace, record_args);
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&out.stdout),
        "{tag}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(plain.status.code(), out.status.code(), "{tag}");
    harness::open_checked(&trace)
}

/// Writes whose site is `file:line`.
fn writes_at(trace: &Trace, file: &str, line: u32) -> usize {
    trace
        .threads
        .iter()
        .flat_map(|t| &t.events)
        .filter(|e| match e.kind {
            EventKind::Write { site, .. } => trace.tables.site_location(site).is_some_and(|loc| {
                loc.line == line
                    && loc
                        .file
                        .and_then(|f| trace.tables.string(f))
                        .is_some_and(|f| f.ends_with(file))
            }),
            _ => false,
        })
        .count()
}

fn work(tag: &str) -> PathBuf {
    harness::fresh_dir(tag)
}

#[test]
fn one_step_builds_with_and_without_pie() {
    let source = fixture("accesses.c");
    let line = mark(&source, "counter");
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        for extra in [&["-pie", "-fPIE"][..], &["-no-pie", "-fno-PIE"]] {
            let exe = harness::compile_instrumented_with(&source, c, extra);
            assert_standalone(&exe);
            let t = recorded(&exe, &format!("pie-{}", c.name()), &[]);
            assert_eq!(
                writes_at(&t, "accesses.c", line),
                100,
                "{} {extra:?}",
                c.name()
            );
        }
    }
}

#[test]
fn separate_compile_and_link_steps() {
    let source = fixture("accesses.c");
    let line = mark(&source, "counter");
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let dir = work(&format!("separate-{}", c.name()));
        let object = dir.join("accesses.o");
        let cc = c.driver(Lang::C);
        run(Command::new(cc)
            .args(["-g", "-O1", "-pthread", "-c"])
            .args(flags(c, Lang::C, "--cflags"))
            .arg(&source)
            .arg("-o")
            .arg(&object));
        // The link step with --libs alone, with the compile flags too, and with the flags
        // before the objects (CMake puts its linker flags there).
        let links: [(&str, Vec<String>, Vec<String>); 3] = [
            ("libs-after", vec![], flags(c, Lang::C, "--libs")),
            (
                "cflags-and-libs",
                flags(c, Lang::C, "--cflags"),
                flags(c, Lang::C, "--libs"),
            ),
            ("libs-before", flags(c, Lang::C, "--libs"), vec![]),
        ];
        for (name, before, after) in links {
            let exe = dir.join(name);
            run(Command::new(cc)
                .arg("-pthread")
                .args(&before)
                .arg(&object)
                .arg("-o")
                .arg(&exe)
                .args(&after));
            assert_standalone(&exe);
            let t = recorded(&exe, &format!("separate-{}-{name}", c.name()), &[]);
            assert_eq!(writes_at(&t, "accesses.c", line), 100, "{cc} {name}");
        }
    }
}

#[test]
fn a_shared_library_of_the_program_records_its_own_accesses() {
    let lib_src = fixture("shlib/counter.c");
    let line = mark(&lib_src, "lib-total");
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let dir = work(&format!("shlib-{}", c.name()));
        let cc = c.driver(Lang::C);
        let lib = dir.join("libcounter.so");
        run(Command::new(cc)
            .args(["-g", "-O1", "-shared", "-fPIC", "-pthread"])
            .args(flags(c, Lang::C, "--cflags"))
            .arg(&lib_src)
            .arg("-o")
            .arg(&lib)
            .args(flags(c, Lang::C, "--libs")));
        let exe = dir.join("main");
        run(Command::new(cc)
            .args(["-g", "-O1", "-pthread"])
            .args(flags(c, Lang::C, "--cflags"))
            .arg(fixture("shlib/main.c"))
            .arg("-o")
            .arg(&exe)
            .arg(format!("-L{}", dir.display()))
            .arg(format!("-Wl,-rpath,{}", dir.display()))
            .arg("-lcounter")
            .args(flags(c, Lang::C, "--libs")));
        assert_standalone(&lib);
        assert_standalone(&exe);
        let t = recorded(&exe, &format!("shlib-run-{}", c.name()), &[]);
        assert_eq!(writes_at(&t, "counter.c", line), 200, "{cc}");
    }
}

#[test]
fn a_cmake_project_with_a_shared_library() {
    let have_cmake = Command::new("cmake")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_cmake {
        let why = "cmake is not installed (Debian: apt-get install cmake)";
        if harness::tools_required() {
            panic!("{why}");
        }
        eprintln!("SKIPPED: {why}");
        return;
    }
    let project = fixture("shlib");
    let line = mark(&project.join("counter.c"), "lib-total");
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let build = work(&format!("cmake-{}", c.name()));
        let cflags = flags(c, Lang::C, "--cflags").join(" ");
        let libs = flags(c, Lang::C, "--libs").join(" ");
        run(Command::new("cmake")
            .arg("-S")
            .arg(&project)
            .arg("-B")
            .arg(&build)
            .arg(format!("-DCMAKE_C_COMPILER={}", c.driver(Lang::C)))
            .arg("-DCMAKE_BUILD_TYPE=RelWithDebInfo")
            .arg(format!("-DCMAKE_C_FLAGS={cflags}"))
            .arg(format!("-DCMAKE_EXE_LINKER_FLAGS={libs}"))
            .arg(format!("-DCMAKE_SHARED_LINKER_FLAGS={libs}")));
        run(Command::new("cmake").arg("--build").arg(&build));
        let exe = build.join("shlib_main");
        assert_standalone(&exe);
        assert_standalone(&build.join("libcounter.so"));
        let t = recorded(&exe, &format!("cmake-run-{}", c.name()), &[]);
        assert_eq!(writes_at(&t, "counter.c", line), 200, "{}", c.name());
    }
}

#[test]
fn stack_depth_gives_access_sites_the_lines_that_called_them() {
    let source = fixture("deep.c");
    let want = [
        mark(&source, "leaf-write"),
        mark(&source, "call-leaf"),
        mark(&source, "call-middle"),
    ];
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        // Built with `config --callers`: the shadow stack gives the write its two callers.
        let exe = harness::compile_instrumented_with_callers(&source, c);
        let t = recorded(&exe, &format!("deep-{}", c.name()), &["--stack-depth", "3"]);
        assert_eq!(
            write_stack(&t, want[0], c),
            want,
            "{}: the write's stack",
            c.name()
        );
        // Built without (the default): the same callers, unwound from the real stack.
        let exe = harness::compile_instrumented(&source, c);
        let t = recorded(
            &exe,
            &format!("unwound-{}", c.name()),
            &["--stack-depth", "3"],
        );
        assert_eq!(
            write_stack(&t, want[0], c),
            want,
            "{}: the write's stack without --callers",
            c.name()
        );
    }
}

/// The lines of the frames of the site of the first write at line `line`.
fn write_stack(t: &Trace, line: u32, c: Compiler) -> Vec<u32> {
    let site = t
        .threads
        .iter()
        .flat_map(|t| &t.events)
        .find_map(|e| match e.kind {
            EventKind::Write { site, .. }
                if t.tables.site_location(site).is_some_and(|l| l.line == line) =>
            {
                Some(site)
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("{}: no write at line {line}", c.name()));
    t.tables.sites[&site]
        .frames
        .iter()
        .map(|f| {
            t.tables
                .symbols
                .get(f)
                .and_then(|s| s.locations.last())
                .map_or(0, |l| l.line)
        })
        .collect()
}
