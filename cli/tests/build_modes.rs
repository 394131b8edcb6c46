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

/// The ```sh blocks of README.md's "Recording memory accesses" section, in order.
fn readme_build_snippets() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("read README.md");
    let section = readme
        .split("\n## Recording memory accesses")
        .nth(1)
        .expect("README.md has a section on recording memory accesses");
    let section = section.split("\n## ").next().unwrap();
    section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_string())
        .collect()
}

fn have_cmake() -> bool {
    let ok = Command::new("cmake")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let why = "cmake is not installed (Debian: apt-get install cmake)";
        if harness::tools_required() {
            panic!("{why}");
        }
        eprintln!("SKIPPED: {why}");
    }
    ok
}

/// `sh -c script` in `dir` as a user runs it: `foresight` on the PATH, its files under `home`
/// (XDG cache and data), none of the test's own foresight settings.
fn shell(dir: &Path, home: &Path, script: &str) -> std::process::Output {
    let bin = harness::foresight().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let mut c = Command::new("sh");
    c.arg("-ec").arg(script).current_dir(dir);
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"FORESIGHT_") {
            c.env_remove(&name);
        }
    }
    c.env_remove("LD_PRELOAD")
        .env_remove("CC")
        .env("PATH", path)
        .env("FORESIGHT_RUNTIME", harness::runtime())
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_DATA_HOME", home.join("data"))
        .output()
        .expect("run sh")
}

fn ok(o: &std::process::Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_readme_makefile_lines_build_c_and_cxx_as_written() {
    if !harness::compiler_available(Compiler::Gcc) {
        return;
    }
    let snippets = readme_build_snippets();
    let make = snippets
        .iter()
        .find(|s| s.contains("prog.c ") && s.contains("prog.cc"))
        .expect("README's cc/c++ lines");
    let dir = work("readme-make");
    std::fs::copy(fixture("accesses.c"), dir.join("prog.c")).unwrap();
    std::fs::copy(fixture("threads.cc"), dir.join("prog.cc")).unwrap();
    // The C line, then the C++ line (which builds `prog` again), each recorded.
    let lines: Vec<&str> = make.lines().collect();
    let record: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("foresight "))
        .collect();
    for build in lines
        .iter()
        .filter(|l| l.starts_with("cc ") || l.starts_with("c++ "))
    {
        let script = format!("{build}\n{}\n", record.join("\n"));
        let out = ok(&shell(&dir, &dir, &script), &script);
        let source = if build.contains("prog.cc") {
            "prog.cc"
        } else {
            "prog.c"
        };
        assert!(
            out.lines()
                .any(|l| l.contains(source) && (l.contains("read") || l.contains("write"))),
            "{build}: accesses at {source}'s lines:\n{out}"
        );
    }
}

/// A C-only and a C++ CMake project built with README's commands as written: debug lines, the
/// stub linked, no flags for a language the project does not have; then the build links again
/// after the cache is cleared, after an upgrade replaced the stub, and, once `foresight config`
/// ran again, after the stub's directory was removed.
#[test]
fn the_readme_cmake_commands_build_and_keep_linking() {
    if !harness::compiler_available(Compiler::Gcc) || !have_cmake() {
        return;
    }
    let snippets = readme_build_snippets();
    let cmake_c = snippets
        .iter()
        .find(|s| s.contains("CMAKE_C_FLAGS"))
        .expect("README's CMake commands for C");
    let cmake_cxx = snippets
        .iter()
        .find(|s| s.contains("CMAKE_CXX_FLAGS"))
        .expect("README's CMake commands for C++");
    assert!(
        !cmake_c.contains("CMAKE_CXX_FLAGS"),
        "a C project sets no C++ flags: {cmake_c}"
    );
    for (lang, snippet, source, file) in [
        ("C", cmake_c, "accesses.c", "prog.c"),
        ("CXX", cmake_cxx, "threads.cc", "prog.cc"),
    ] {
        let dir = work(&format!("readme-cmake-{lang}"));
        std::fs::copy(fixture(source), dir.join(file)).unwrap();
        std::fs::write(
            dir.join("CMakeLists.txt"),
            format!(
                "cmake_minimum_required(VERSION 3.13)\nproject(readme {lang})\n\
                 set(THREADS_PREFER_PTHREAD_FLAG ON)\nfind_package(Threads REQUIRED)\n\
                 add_executable(prog {file})\ntarget_link_libraries(prog PRIVATE Threads::Threads)\n"
            ),
        )
        .unwrap();
        ok(&shell(&dir, &dir, snippet), snippet);
        let cache = std::fs::read_to_string(dir.join("build/CMakeCache.txt")).unwrap();
        let flags_of = |var: &str| {
            cache
                .lines()
                .find(|l| l.starts_with(&format!("{var}:")))
                .map(|l| l.split_once('=').unwrap().1.to_string())
                .unwrap_or_default()
        };
        let (ours, other) = if lang == "C" {
            ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS")
        } else {
            ("CMAKE_CXX_FLAGS", "CMAKE_C_FLAGS")
        };
        assert!(
            flags_of(ours).contains("-g") && flags_of(ours).contains("-fsanitize=thread"),
            "{lang}: {}",
            flags_of(ours)
        );
        assert!(
            !flags_of(other).contains("sanitize"),
            "{lang}: {other} is left alone: {}",
            flags_of(other)
        );
        let libs = flags_of("CMAKE_EXE_LINKER_FLAGS");
        let stub = libs
            .split_whitespace()
            .find(|w| w.ends_with("/libtsan.a"))
            .map(PathBuf::from)
            .expect("the stub in the linker flags");
        assert!(
            stub.starts_with(dir.join("data")),
            "{lang}: the stub is in the data directory, not the cache: {}",
            stub.display()
        );
        let exe = dir.join("build/prog");
        assert_standalone(&exe);
        let dump = ok(
            &shell(
                &dir,
                &dir,
                "foresight record -o t.trace -- build/prog >/dev/null\nforesight dump t.trace",
            ),
            "record",
        );
        assert!(
            dump.lines()
                .any(|l| l.contains(&format!("{file}:")) && l.contains("write")),
            "{lang}: writes at {file}'s lines"
        );

        let relink = |what: &str| {
            let _ = std::fs::remove_file(&exe);
            let o = shell(&dir, &dir, "cmake --build build");
            ok(&o, &format!("{lang}: the build links {what}"));
            assert!(exe.is_file());
        };
        // The cache cleared (whatever foresight put there).
        let _ = std::fs::remove_dir_all(dir.join("cache"));
        relink("after the cache was cleared");
        // Another foresight's stub in place (an upgrade): `config` replaces it where it is,
        // and prints the same flags.
        let stamp = stub.parent().unwrap().join("stub.key");
        let key = std::fs::read_to_string(&stamp).unwrap();
        std::fs::write(&stamp, "0000000000000000\n").unwrap();
        let config = if lang == "C" {
            "foresight config --libs"
        } else {
            "foresight config --cc c++ --libs"
        };
        let printed = ok(&shell(&dir, &dir, config), config);
        assert_eq!(printed.trim(), libs.trim(), "{lang}: the same flags");
        assert_eq!(std::fs::read_to_string(&stamp).unwrap(), key, "{lang}");
        relink("after an upgrade");
        // The stub's directory removed: the link names its path; `config` builds it there.
        std::fs::remove_dir_all(stub.parent().unwrap()).unwrap();
        std::fs::remove_file(&exe).unwrap();
        let o = shell(&dir, &dir, "cmake --build build");
        assert!(!o.status.success(), "{lang}: no stub, no link");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(said.contains("foresight/tsan-stub-"), "{lang}: {said}");
        ok(&shell(&dir, &dir, config), config);
        relink("after `foresight config` built the stub again");
    }
}
