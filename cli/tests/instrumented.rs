//! Programs built with `foresight config` (`fixtures/instrumented/`), with gcc and clang,
//! recorded with `foresight record`: their reads and writes appear with file:line sites,
//! atomics with their operation and memory order, locks (pthread, C++, annotated custom ones)
//! as locks, and the programs behave the same recorded or not. A compiler that is missing is
//! a failure in CI and a skip (said so) elsewhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_fixtures::harness::{self, Compiler};
use foresight_trace::event::{AtomicOp, EventKind, MemoryOrder};
use foresight_trace::Trace;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/instrumented")
        .join(name)
}

/// The lines of `source` marked `@name`, by name.
fn marks(source: &Path) -> BTreeMap<String, u32> {
    let text = std::fs::read_to_string(source).expect("read the fixture");
    let mut m = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(at) = line.find("@") {
            let name: String = line[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !name.is_empty() && (line.contains("/*") || line.contains("//")) {
                m.insert(name, i as u32 + 1);
            }
        }
    }
    m
}

/// Compiles `name` with `c`, runs it plainly and under `foresight record` (with
/// `record_args`), checks that both runs print the same and exit alike, and returns the trace
/// (checked: no problems, a trailer, the ordering invariant).
fn record(name: &str, c: Compiler, record_args: &[&str]) -> (Output, Trace) {
    let exe = harness::compile_instrumented(&fixture(name), c);
    record_exe(&exe, name, c, record_args)
}

fn record_exe(exe: &Path, name: &str, c: Compiler, record_args: &[&str]) -> (Output, Trace) {
    let plain = harness::run_plain(exe, &[]);
    let dir = harness::fresh_dir(&format!("{name}-{}", c.name()));
    let trace = dir.join("run.trace");
    let recorded = harness::record_with_cli(exe, &[], &trace, record_args);
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&recorded.stdout),
        "{name} ({}): stdout differs under the recorder; stderr: {}",
        c.name(),
        String::from_utf8_lossy(&recorded.stderr)
    );
    assert_eq!(
        plain.status.code(),
        recorded.status.code(),
        "{name} ({}): exit status differs under the recorder",
        c.name()
    );
    (recorded, harness::open_checked(&trace))
}

/// Whether a site's first frame is at `file:line`, in its own function or in a function
/// inlined there (a libstdc++ atomic's site is in atomic_base.h, inlined into the user's line).
fn site_at(trace: &Trace, site: u32, file: &str, line: u32) -> bool {
    let Some(frame) = trace.tables.sites.get(&site).and_then(|s| s.frames.first()) else {
        return false;
    };
    let Some(sym) = trace.tables.symbols.get(frame) else {
        return false;
    };
    sym.locations.iter().any(|loc| {
        loc.line == line
            && loc
                .file
                .and_then(|f| trace.tables.string(f))
                .and_then(|f| Path::new(f).file_name()?.to_str())
                == Some(file)
    })
}

/// Every event of the trace whose site is `file:line`.
fn events_at(trace: &Trace, file: &str, line: u32) -> Vec<EventKind> {
    let mut out = Vec::new();
    for t in &trace.threads {
        for e in &t.events {
            if let Some(s) = e.kind.site() {
                if site_at(trace, s, file, line) {
                    out.push(e.kind);
                }
            }
        }
    }
    out
}

fn has_read(evs: &[EventKind]) -> bool {
    evs.iter().any(|e| matches!(e, EventKind::Read { .. }))
}

fn has_write(evs: &[EventKind]) -> bool {
    evs.iter().any(|e| matches!(e, EventKind::Write { .. }))
}

fn has_atomic(evs: &[EventKind], op: AtomicOp, order: MemoryOrder) -> bool {
    evs.iter()
        .any(|e| matches!(e, EventKind::Atomic { op: o, order: m, .. } if *o == op && *m == order))
}

#[test]
fn reads_writes_and_atomics_are_recorded_at_their_lines() {
    let m = marks(&fixture("accesses.c"));
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let (_, trace) = record("accesses.c", c, &[]);
        let at = |mark: &str| events_at(&trace, "accesses.c", m[mark]);
        let who = c.name();
        let update = at("private-update");
        assert!(has_read(&update), "{who}: the table read: {update:?}");
        assert!(has_write(&update), "{who}: the private write: {update:?}");
        let counter = at("counter");
        assert!(
            has_read(&counter) && has_write(&counter),
            "{who}: counter += under the lock: {counter:?}"
        );
        assert!(has_write(&at("table-init")), "{who}: table-init");
        assert!(
            has_atomic(&at("store-release"), AtomicOp::Store, MemoryOrder::Release),
            "{who}: {:?}",
            at("store-release")
        );
        assert!(
            has_atomic(&at("rmw-acq-rel"), AtomicOp::Rmw, MemoryOrder::AcqRel),
            "{who}: {:?}",
            at("rmw-acq-rel")
        );
        assert!(
            has_atomic(&at("load-acquire"), AtomicOp::Load, MemoryOrder::Acquire),
            "{who}: {:?}",
            at("load-acquire")
        );
        assert!(
            has_atomic(&at("load-relaxed"), AtomicOp::Load, MemoryOrder::Relaxed),
            "{who}: {:?}",
            at("load-relaxed")
        );
        // The pthread mutex is there as well, as for any program.
        assert_eq!(harness::count(&trace, "lock-acquired"), 100, "{who}");
        // Two workers, 50 rounds: the counter is written under the lock every round, in a new
        // epoch each time (the lock's acquisition), so none of those writes is a repeat.
        let counter_writes = counter
            .iter()
            .filter(|e| matches!(e, EventKind::Write { .. }))
            .count();
        assert_eq!(counter_writes, 100, "{who}");
    }
}

#[test]
fn repeats_within_an_epoch_are_counted_and_dropped() {
    let source = fixture("repeats.c");
    let m = marks(&source);
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        // -O0: every access of the loop stays an access.
        let exe = harness::compile_instrumented_with(&source, c, &["-O0"]);
        let (_, trace) = record_exe(&exe, "repeats.c", c, &[]);
        let who = c.name();
        let reads = events_at(&trace, "repeats.c", m["read-loop"]);
        let writes = events_at(&trace, "repeats.c", m["write-loop"]);
        // Four rounds (epochs) of four addresses: the first read and the first write of each.
        assert_eq!(
            reads
                .iter()
                .filter(|e| matches!(e, EventKind::Read { .. }))
                .count(),
            16,
            "{who}: {reads:?}"
        );
        assert_eq!(
            writes
                .iter()
                .filter(|e| matches!(e, EventKind::Write { .. }))
                .count(),
            16,
            "{who}: {writes:?}"
        );
        // The worker (thread 1) executed 4 × 1000 of each.
        let worker = trace
            .tables
            .access_counts
            .get(1)
            .expect("the worker's counts");
        assert!(worker.executed >= 8000, "{who}: {worker:?}");
        assert!(worker.recorded < 64, "{who}: {worker:?}");
        let in_trace = trace
            .thread(1)
            .unwrap()
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Read { .. } | EventKind::Write { .. }))
            .count() as u64;
        assert_eq!(
            worker.recorded, in_trace,
            "{who}: the recorded count is what the trace holds"
        );
    }
}

#[test]
fn cpp_threads_record_their_accesses_and_locks() {
    let m = marks(&fixture("threads.cc"));
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let (out, trace) = record("threads.cc", c, &[]);
        let who = c.name();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "total 5050 consumed 100\n"
        );
        let at = |mark: &str| events_at(&trace, "threads.cc", m[mark]);
        assert!(
            has_read(&at("total")) && has_write(&at("total")),
            "{who}: total +="
        );
        assert!(has_write(&at("done-write")), "{who}: done = true");
        assert!(
            has_atomic(&at("consumed"), AtomicOp::Rmw, MemoryOrder::Relaxed),
            "{who}: {:?}",
            at("consumed")
        );
        assert!(
            harness::count(&trace, "lock-acquired") >= 100,
            "{who}: std::mutex"
        );
        assert!(
            harness::count(&trace, "cond-signal") >= 100,
            "{who}: notify_one"
        );
        // Whether the consumer ever waits depends on the schedule: no count for cv.wait.
    }
}

#[test]
fn custom_locks_announced_with_the_tsan_annotations_are_locks() {
    let m = marks(&fixture("custom_lock.c"));
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let (_, trace) = record("custom_lock.c", c, &[]);
        let who = c.name();
        let at = |mark: &str| events_at(&trace, "custom_lock.c", m[mark]);
        assert_eq!(
            at("pre-lock")
                .iter()
                .filter(|e| matches!(e, EventKind::LockRequest { .. }))
                .count(),
            2000,
            "{who}"
        );
        assert_eq!(harness::count(&trace, "lock-acquired"), 2000, "{who}");
        assert_eq!(
            at("pre-unlock")
                .iter()
                .filter(|e| matches!(e, EventKind::LockRelease { .. }))
                .count(),
            2000,
            "{who}"
        );
        assert_eq!(
            harness::count(&trace, "init"),
            1,
            "{who}: __tsan_mutex_create"
        );
        assert_eq!(
            harness::count(&trace, "destroy"),
            1,
            "{who}: __tsan_mutex_destroy"
        );
        // The lock's own atomics, between pre_lock and post_lock, are the lock: not recorded.
        let atomics = harness::count(&trace, "atomic-rmw") + harness::count(&trace, "atomic-load");
        assert_eq!(atomics, 0, "{who}");
        assert!(has_write(&at("shared")), "{who}: shared++ under the lock");
        // The lock protects `shared` in the trace as in the program: a lock-acquired comes
        // before every access to it in its thread, and the ordering check passed.
    }
}

#[test]
fn every_atomic_operation_is_performed_and_recorded_with_its_order() {
    let m = marks(&fixture("atomics.c"));
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let (out, trace) = record("atomics.c", c, &[]);
        let who = c.name();
        // The results of a build without instrumentation (libatomic for the 16-byte ones).
        let plain = harness::work_dir().join(format!("atomics-uninstrumented-{who}"));
        let built = Command::new(c.driver(harness::Lang::C))
            .args(["-O1", "-o"])
            .arg(&plain)
            .arg(fixture("atomics.c"))
            .arg("-latomic")
            .output()
            .expect("run the compiler");
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let expected = harness::run_plain(&plain, &[]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&expected.stdout),
            "{who}: the stub computes what the hardware does"
        );
        let mut seen = std::collections::BTreeSet::new();
        for t in &trace.threads {
            for e in &t.events {
                if let EventKind::Atomic {
                    op, size, order, ..
                } = e.kind
                {
                    seen.insert((size, format!("{op:?}"), format!("{order:?}")));
                }
            }
        }
        for size in [1, 2, 4, 8] {
            for (op, order) in [
                ("Store", "Release"),
                ("Load", "Acquire"),
                ("Load", "Relaxed"),
                ("Load", "SeqCst"),
                ("Rmw", "AcqRel"),
                ("Rmw", "Relaxed"),
                ("Rmw", "SeqCst"),
                ("CasSuccess", "SeqCst"),
                ("CasFailure", "Relaxed"),
            ] {
                assert!(
                    seen.contains(&(size, op.to_string(), order.to_string())),
                    "{who}: no {size}-byte {op} {order}: {seen:?}"
                );
            }
        }
        let fences: Vec<MemoryOrder> = trace
            .threads
            .iter()
            .flat_map(|t| &t.events)
            .filter_map(|e| match e.kind {
                EventKind::Fence { order, .. } => Some(order),
                _ => None,
            })
            .collect();
        assert_eq!(
            fences,
            vec![MemoryOrder::Release, MemoryOrder::SeqCst],
            "{who}: the thread fences (a signal fence is not recorded)"
        );
        let fence_lines = [m["fence-release"], m["fence-seq-cst"]];
        for l in fence_lines {
            assert_eq!(
                events_at(&trace, "atomics.c", l).len(),
                1,
                "{who}: line {l}"
            );
        }
    }
}

#[test]
fn dump_shows_accesses_with_file_and_line_and_atomics_with_their_order() {
    let c = if harness::compiler_available(Compiler::Gcc) {
        Compiler::Gcc
    } else {
        return;
    };
    let m = marks(&fixture("accesses.c"));
    let exe = harness::compile_instrumented(&fixture("accesses.c"), c);
    let dir = harness::fresh_dir("dump-accesses");
    let trace = dir.join("run.trace");
    let out = harness::record_with_cli(&exe, &[], &trace, &[]);
    assert!(out.status.success());
    let dump = Command::new(harness::foresight())
        .arg("dump")
        .arg(&trace)
        .output()
        .expect("run foresight dump");
    let text = String::from_utf8_lossy(&dump.stdout);
    let counter = format!("accesses.c:{})", m["counter"]);
    assert!(
        text.lines()
            .any(|l| l.contains(" write ") && l.contains(&counter)),
        "{text}"
    );
    let acq = format!("accesses.c:{})", m["load-acquire"]);
    assert!(
        text.lines()
            .any(|l| l.contains("atomic-load") && l.contains(" acquire ") && l.contains(&acq)),
        "{text}"
    );
    let stats = Command::new(harness::foresight())
        .arg("stats")
        .arg(&trace)
        .output()
        .expect("run foresight stats");
    let text = String::from_utf8_lossy(&stats.stdout);
    assert!(text.contains("accesses "), "{text}");
    assert!(text.contains("executed"), "{text}");
    assert!(text.contains("recorded"), "{text}");
}

#[test]
fn instrumented_binaries_load_no_sanitizer_runtime() {
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        for name in ["accesses.c", "threads.cc"] {
            let exe = harness::compile_instrumented(&fixture(name), c);
            let ldd = Command::new("ldd").arg(&exe).output().expect("run ldd");
            let text = String::from_utf8_lossy(&ldd.stdout);
            assert!(ldd.status.success(), "{text}");
            // Each line names a library first (`libtsan.so.2 => /usr/lib/…`).
            for lib in text.lines().filter_map(|l| l.split_whitespace().next()) {
                assert!(
                    !lib.contains("tsan") && !lib.contains("foresight"),
                    "{name} ({}) loads {lib}: {text}",
                    c.name()
                );
            }
        }
    }
}

/// Whether `evs` holds a read (or write) of exactly `size` bytes.
fn has_range(evs: &[EventKind], write: bool, size: u32) -> bool {
    evs.iter().any(|e| match *e {
        EventKind::Read { size: s, .. } => !write && s == size,
        EventKind::Write { size: s, .. } => write && s == size,
        _ => false,
    })
}

#[test]
fn memory_the_c_library_touches_is_recorded_as_ranges() {
    let m = marks(&fixture("libc_ranges.c"));
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let (out, trace) = record("libc_ranges.c", c, &[]);
        let who = c.name();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "len 64 same 1 got 64 w 10 r 10\n\
             conv 2 num 12 word abcd used 7 line 64 recv 11 12 13 14\n"
        );
        let at = |mark: &str| events_at(&trace, "libc_ranges.c", m[mark]);
        assert!(
            has_range(&at("memset"), true, 64),
            "{who}: {:?}",
            at("memset")
        );
        assert!(
            has_range(&at("memcpy"), false, 65),
            "{who}: {:?}",
            at("memcpy")
        );
        assert!(
            has_range(&at("memcpy"), true, 65),
            "{who}: {:?}",
            at("memcpy")
        );
        assert!(
            has_range(&at("strlen"), false, 65),
            "{who}: {:?}",
            at("strlen")
        );
        assert!(
            has_range(&at("memcmp"), false, 64),
            "{who}: {:?}",
            at("memcmp")
        );
        assert!(
            has_range(&at("fwrite"), false, 64),
            "{who}: {:?}",
            at("fwrite")
        );
        assert!(
            has_range(&at("fread"), true, 64),
            "{who}: {:?}",
            at("fread")
        );
        assert!(
            has_range(&at("write"), false, 10),
            "{who}: {:?}",
            at("write")
        );
        assert!(has_range(&at("read"), true, 10), "{who}: {:?}", at("read"));
        // sscanf: its input read whole; `%d` and `%n` store an int, `%s` the word and its NUL.
        let sscanf = at("sscanf");
        assert!(has_range(&sscanf, false, 8), "{who}: {sscanf:?}");
        assert!(has_range(&sscanf, true, 5), "{who}: {sscanf:?}");
        let ints = sscanf
            .iter()
            .filter(|e| matches!(e, EventKind::Write { size: 4, .. }))
            .count();
        assert!(ints >= 2, "{who}: {sscanf:?}");
        // getline: the line and its NUL, the buffer's pointer and size.
        let getline = at("getline");
        assert!(has_range(&getline, true, 65), "{who}: {getline:?}");
        assert!(has_range(&getline, true, 8), "{who}: {getline:?}");
        assert!(has_range(&at("recv"), true, 11), "{who}: {:?}", at("recv"));
        assert!(
            has_range(&at("recvfrom"), true, 12),
            "{who}: {:?}",
            at("recvfrom")
        );
        // recvmsg and readv: the bytes across the vector's two buffers.
        let recvmsg = at("recvmsg");
        assert!(
            has_range(&recvmsg, true, 5) && has_range(&recvmsg, true, 8),
            "{who}: {recvmsg:?}"
        );
        let readv = at("readv");
        assert!(
            has_range(&readv, true, 5) && has_range(&readv, true, 9),
            "{who}: {readv:?}"
        );
        assert!(
            has_range(&readv, false, 32),
            "{who}: the vector is read: {readv:?}"
        );
    }
}

#[test]
fn an_unmodified_program_records_no_accesses_from_the_c_library() {
    // The primitives are built without -fsanitize=thread: the interceptors only pass through.
    let exe = harness::compile("mutex");
    let dir = harness::fresh_dir("uninstrumented-ranges");
    let plain = harness::run_plain(&exe, &[]);
    let out = harness::run_recorded(&exe, &[], &dir, &[]);
    harness::assert_transparent(&plain, &out);
    for path in harness::traces_in(&dir) {
        let t = harness::open_checked(&path);
        assert_eq!(harness::count(&t, "read") + harness::count(&t, "write"), 0);
        assert!(t.tables.access_counts.is_empty());
    }
}

/// `analyze` of a trace recorded with `--no-symbolize` symbolises its frames in memory and
/// names the static data its findings hold from the binaries afterwards, reading the events
/// once (no data pass, no copy of the trace): every format of the report is the one it gives
/// once the trace is symbolised in place as `record` symbolises it, the variables' names
/// (`counter`, `hasty[1]`, `shared.id`, `x` of a predicted race) included.
#[test]
fn an_unsymbolised_trace_is_reported_as_its_symbolised_self() {
    let c = Compiler::Gcc;
    if !harness::compiler_available(c) {
        return;
    }
    let races = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/race");
    for (name, variable) in [
        ("unprotected_counter.c", "`counter`"),
        // Which element of `hasty` the run's race falls on is the schedule's choice.
        ("barrier_generations.c", "`hasty["),
        ("sscanf_into_shared.c", "`shared.id`"),
        ("reversed_sections.c", "`x`"),
    ] {
        let exe = harness::compile_instrumented(&races.join(name), c);
        let dir = harness::fresh_dir(&format!("unsymbolised-{name}"));
        let trace = dir.join("run.trace");
        let out = harness::record_with_cli(&exe, &[], &trace, &["--no-symbolize"]);
        assert!(trace.is_file(), "{name}: {out:?}");
        let reports = || {
            ["json", "text", "sarif"].map(|format| {
                let out = Command::new(harness::foresight())
                    .args(["analyze", "--format", format])
                    .arg(&trace)
                    .output()
                    .expect("run foresight analyze");
                (
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout).into_owned(),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                )
            })
        };
        let before = reports();
        assert!(
            before[1].2.contains("not symbolised when it was recorded"),
            "{name}: {}",
            before[1].2
        );
        assert!(
            before[1].1.contains(&format!("memory: {variable}")),
            "{name}: {}",
            before[1].1
        );
        let options = foresight_symbols::SymbolizeOptions {
            sync: false,
            ..Default::default()
        };
        foresight_symbols::symbolize_in_place(&trace, &options).expect("symbolise the trace");
        let after = reports();
        for (b, a) in before.iter().zip(&after) {
            assert_eq!((b.0, &b.1), (a.0, &a.1), "{name}");
        }
        assert!(
            !after[1].2.contains("not symbolised"),
            "{name}: {}",
            after[1].2
        );
    }
}
