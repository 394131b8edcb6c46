//! The ThreadSanitizer ABI that foresight's stub must provide is whatever gcc and clang emit:
//! `fixtures/instrumented/abi.c` and `abi.cc` use every construct that makes them call it,
//! compiled here with each compiler and each of its variants (volatile accesses told apart,
//! 16-byte atomics, compound accesses, optimisation levels). Every `__tsan_*` symbol the
//! objects need must be defined by the stub archive that `foresight config` links, and the
//! programs must run and record. A compiler that is missing fails in CI.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use foresight_fixtures::harness::{self, Compiler, Lang};
use foresight_trace::event::EventKind;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/instrumented")
        .join(name)
}

/// The variants of each compiler that change which entry points it calls.
fn variants(c: Compiler) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut v = vec![
        ("abi.c", vec!["-O1"]),
        ("abi.c", vec!["-O0"]),
        ("abi.c", vec!["-O2"]),
        ("abi.cc", vec!["-O1"]),
        ("abi.cc", vec!["-O0"]),
    ];
    match c {
        Compiler::Gcc => {
            v.push((
                "abi.c",
                vec!["-O1", "--param", "tsan-distinguish-volatile=1"],
            ));
            v.push((
                "abi.cc",
                vec!["-O1", "--param", "tsan-distinguish-volatile=1"],
            ));
        }
        Compiler::Clang => {
            v.push(("abi.c", vec!["-O1", "-mllvm", "-tsan-distinguish-volatile"]));
            v.push((
                "abi.cc",
                vec!["-O1", "-mllvm", "-tsan-distinguish-volatile"],
            ));
            v.push(("abi.c", vec!["-O1", "-mcx16"]));
            v.push((
                "abi.c",
                vec!["-O1", "-mllvm", "-tsan-compound-read-before-write"],
            ));
            v.push((
                "abi.c",
                vec![
                    "-O1",
                    "-mcx16",
                    "-mllvm",
                    "-tsan-distinguish-volatile",
                    "-mllvm",
                    "-tsan-compound-read-before-write",
                ],
            ));
        }
    }
    v
}

/// Symbols of `file` listed by `nm` with `args` (names only).
fn nm(file: &Path, args: &[&str]) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(args)
        .arg(file)
        .output()
        .expect("run nm (binutils)");
    assert!(
        out.status.success(),
        "nm {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| !s.ends_with(':') && !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The stub archive `foresight config --libs` links for `c`.
fn stub_archive(c: Compiler) -> PathBuf {
    let libs = harness::config_flags(c, Lang::C, "--libs");
    let archive = libs
        .iter()
        .find(|w| w.ends_with("libtsan.a"))
        .unwrap_or_else(|| panic!("no archive in {libs:?}"));
    PathBuf::from(archive)
}

#[test]
fn the_stub_defines_every_entry_point_the_compilers_emit() {
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let defined = nm(&stub_archive(c), &["--defined-only"]);
        let mut emitted = BTreeSet::new();
        for (i, (source, extra)) in variants(c).into_iter().enumerate() {
            let lang = Lang::of(Path::new(source));
            let object =
                harness::work_dir().join(format!("abi-{}-{i}-{}.o", c.name(), std::process::id()));
            let out = Command::new(c.driver(lang))
                .args(["-g", "-c", "-pthread", "-w"])
                .args(&extra)
                // With --callers: the function entries and exits are part of the ABI too.
                .args(harness::config_flags(c, lang, "--callers --cflags"))
                .arg(fixture(source))
                .arg("-o")
                .arg(&object)
                .output()
                .expect("run the compiler");
            assert!(
                out.status.success(),
                "{} {source} {extra:?}: {}",
                c.driver(lang),
                String::from_utf8_lossy(&out.stderr)
            );
            let needed: BTreeSet<String> = nm(&object, &["--undefined-only"])
                .into_iter()
                .filter(|s| s.starts_with("__tsan_"))
                .collect();
            let missing: Vec<&String> = needed.difference(&defined).collect();
            assert!(
                missing.is_empty(),
                "{} {source} {extra:?} needs {missing:?}, which the stub does not define",
                c.driver(lang)
            );
            emitted.extend(needed);
        }
        // The fixtures do make the compilers emit the whole ABI (a fixture that stopped doing
        // so would make this test pass for nothing).
        let own: &[&str] = match c {
            // gcc instruments builtin copies as ranges; clang calls memcpy (intercepted).
            Compiler::Gcc => &[
                "__tsan_read_range",
                "__tsan_write_range",
                "__tsan_atomic32_compare_exchange_strong",
                "__tsan_atomic128_compare_exchange_strong",
            ],
            Compiler::Clang => &[
                "__tsan_unaligned_write4",
                "__tsan_atomic8_compare_exchange_val",
                "__tsan_atomic128_compare_exchange_val",
                "__tsan_vptr_read",
                "__tsan_read_write4",
            ],
        };
        for must in own.iter().copied().chain([
            "__tsan_init",
            "__tsan_func_entry",
            "__tsan_func_exit",
            "__tsan_read1",
            "__tsan_read16",
            "__tsan_write8",
            "__tsan_volatile_read4",
            "__tsan_volatile_write16",
            "__tsan_atomic8_load",
            "__tsan_atomic64_fetch_nand",
            "__tsan_atomic_thread_fence",
            "__tsan_vptr_update",
        ]) {
            assert!(
                emitted.contains(must),
                "{}: nothing emitted {must}",
                c.name()
            );
        }
        eprintln!(
            "{}: {} distinct entry points emitted, all defined",
            c.name(),
            emitted.len()
        );
    }
}

/// What the stub may refer to, all weakly: the runtime table, and the C library's functions its
/// patching of calls uses when they are there.
const WEAK_REFERENCES: [&str; 3] = ["__foresight_tsan_runtime_v1", "getenv", "dl_iterate_phdr"];

#[test]
fn the_stub_needs_nothing_but_weak_references() {
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let undefined = nm(&stub_archive(c), &["--undefined-only"]);
        let unexpected: Vec<&String> = undefined
            .iter()
            .filter(|s| !WEAK_REFERENCES.contains(&s.as_str()) && *s != "_GLOBAL_OFFSET_TABLE_")
            .collect();
        assert!(
            unexpected.is_empty(),
            "{}: the stub needs {unexpected:?}: an instrumented program would depend on them",
            c.name()
        );
        // Weak references: absent, they are null, not a link error.
        let out = Command::new("nm")
            .arg(stub_archive(c))
            .output()
            .expect("run nm");
        let text = String::from_utf8_lossy(&out.stdout);
        for name in undefined.iter().filter(|s| *s != "_GLOBAL_OFFSET_TABLE_") {
            assert!(
                text.lines().any(|l| l.ends_with(&format!(" w {name}"))),
                "{}: {name} is not weak: {text}",
                c.name()
            );
        }
        assert!(
            text.lines()
                .any(|l| l.ends_with(" w __foresight_tsan_runtime_v1")),
            "{text}"
        );
    }
}

/// ThreadSanitizer's own header for programs (gcc ships it): everything it declares, the stub
/// defines, except the callbacks a program may define for ThreadSanitizer to call.
#[test]
fn the_stub_defines_the_user_interface_of_tsan_interface_h() {
    if !harness::compiler_available(Compiler::Gcc) {
        return;
    }
    let out = Command::new("gcc")
        .arg("-print-file-name=include/sanitizer/tsan_interface.h")
        .output()
        .expect("run gcc");
    let header = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let Ok(text) = std::fs::read_to_string(&header) else {
        panic!("gcc installs {}; it is missing", header.display());
    };
    let defined = nm(&stub_archive(Compiler::Gcc), &["--defined-only"]);
    let declared: BTreeSet<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("__tsan_") && !w.starts_with("__tsan_on_"))
        .filter(|w| w.chars().any(|c| c.is_ascii_lowercase()))
        .map(str::to_string)
        .filter(|w| {
            // Declarations only (`__tsan_mutex_linker_init` and friends are flag constants).
            text.contains(&format!("{w}("))
        })
        .collect();
    assert!(declared.len() >= 20, "{declared:?}");
    let missing: Vec<&String> = declared.difference(&defined).collect();
    assert!(missing.is_empty(), "{missing:?}");
}

#[test]
fn abi_programs_run_and_record_with_both_compilers() {
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        for (source, extra) in [
            ("abi.c", vec!["-latomic"]),
            ("abi.cc", vec![]),
            ("abi.c", vec!["-O0", "-latomic"]),
        ] {
            let exe = harness::compile_instrumented_with(&fixture(source), c, &extra);
            let plain = harness::run_plain(&exe, &[]);
            assert!(plain.status.success(), "{source} ({}) runs", c.name());
            let dir = harness::fresh_dir(&format!("abi-{}", c.name()));
            let trace = dir.join("run.trace");
            let recorded = harness::record_with_cli(&exe, &[], &trace, &[]);
            assert_eq!(plain.stdout, recorded.stdout, "{source} ({})", c.name());
            assert_eq!(plain.status.code(), recorded.status.code());
            let t = harness::open_checked(&trace);
            let has = |f: &dyn Fn(&EventKind) -> bool| {
                t.threads.iter().flat_map(|t| &t.events).any(|e| f(&e.kind))
            };
            assert!(has(&|k| matches!(k, EventKind::Read { .. })), "{source}");
            assert!(has(&|k| matches!(k, EventKind::Write { .. })), "{source}");
            assert!(has(&|k| matches!(k, EventKind::Atomic { .. })), "{source}");
            if source == "abi.c" {
                // A range (memcpy of a run-time length, or the struct copy).
                assert!(
                    has(
                        &|k| matches!(k, EventKind::Read { size, .. } | EventKind::Write { size, .. } if *size > 16)
                    ),
                    "{source} ({}): a range access",
                    c.name()
                );
                assert!(has(&|k| matches!(k, EventKind::Fence { .. })), "{source}");
            }
            if source == "abi.c" && c == Compiler::Gcc {
                assert!(
                    has(&|k| matches!(k, EventKind::Atomic { size: 16, .. })),
                    "16-byte atomics"
                );
            }
        }
    }
}
