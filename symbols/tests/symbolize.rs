//! Symbolisation of real binaries: a C program compiled with `cc -g -O0`, a trace that points at
//! its call sites and its static lock, and the trace read back after `symbolize_in_place`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use foresight_symbols::{symbolize_in_place, SkipReason, SymbolizeOptions};
use foresight_trace::event::{Event, EventKind, LockMode};
use foresight_trace::tables::{
    ClassKey, EndReason, Frame, Header, ModuleInfo, ObjectInfo, ObjectKind, Ordering, SiteInfo,
    StringEntry, TableRecord, ThreadInfo, Trailer,
};
use foresight_trace::{Trace, TraceWriter};
use object::{Object, ObjectSegment, ObjectSymbol};

const SOURCE: &str = include_str!("prog.c");

/// A compiled copy of `prog.c` and what the tests need to know about it.
struct Prog {
    dir: PathBuf,
    exe: PathBuf,
    build_id: Vec<u8>,
    /// Load bias of the run (0 for a non-PIE executable).
    bias: u64,
    /// Lowest `PT_LOAD` address of the file.
    first_load: u64,
    /// Run-time addresses printed by the program.
    ret_worker: u64,
    ret_helper: u64,
    big_lock: u64,
    lock_b: u64,
}

fn line_of(marker: &str) -> u32 {
    SOURCE
        .lines()
        .position(|l| l.contains(marker))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("{marker} is in prog.c"))
}

fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "foresight-symbols-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, AtomicOrdering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles and runs `prog.c`; `None` (with the reason printed) when there is no C compiler.
fn compile(tag: &str, extra: &[&str]) -> Option<Prog> {
    let dir = temp_dir(tag);
    let src = dir.join("prog.c");
    std::fs::write(&src, SOURCE).unwrap();
    let exe = dir.join("prog");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = match Command::new(&cc)
        .args(["-g", "-O0", "-Wl,--build-id", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none_or(|v| v.is_empty()),
                "cannot run the C compiler `{cc}`: {e}"
            );
            eprintln!("SKIPPED: cannot run the C compiler `{cc}`: {e}");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let printed = String::from_utf8(run.stdout).unwrap();
    let addrs: Vec<u64> = printed
        .split_whitespace()
        .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap())
        .collect();
    assert_eq!(addrs.len(), 5, "prog printed {printed:?}");

    let data = std::fs::read(&exe).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let build_id = obj
        .build_id()
        .unwrap()
        .expect("linked with a build-id")
        .to_vec();
    let main_vaddr = obj
        .symbols()
        .find(|s| s.name() == Ok("main"))
        .expect("main is in the symbol table")
        .address();
    let first_load = obj.segments().map(|s| s.address()).min().unwrap();
    Some(Prog {
        exe: exe.clone(),
        dir,
        build_id,
        bias: addrs[0] - main_vaddr,
        first_load,
        ret_worker: addrs[1],
        ret_helper: addrs[2],
        big_lock: addrs[3],
        lock_b: addrs[4],
    })
}

/// A small trace of one thread that takes `big_lock` and `two_locks.b` at the program's sites.
fn trace_for(module_path: &Path, build_id: &[u8], base: u64, p: &Prog) -> Vec<u8> {
    let off = |rt: u64| rt - base;
    let header = Header {
        producer: "symbols test".into(),
        pid: 1,
        parent_pid: 0,
        command: vec![module_path.display().to_string()],
        start_unix_ns: 0,
        ordering: Ordering::GlobalSequence,
        pointer_width: 8,
        stack_depth: 2,
    };
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    let f = |o| Frame {
        module: 0,
        offset: o,
    };
    let records = [
        TableRecord::String(StringEntry {
            id: 0,
            text: module_path.display().to_string(),
        }),
        TableRecord::String(StringEntry {
            id: 1,
            text: "main".into(),
        }),
        TableRecord::Module(ModuleInfo {
            id: 0,
            path: 0,
            build_id: build_id.to_vec(),
            base,
            size: 0x10_0000,
        }),
        TableRecord::Thread(ThreadInfo {
            id: 0,
            os_tid: 100,
            parent: None,
            name: Some(1),
        }),
        TableRecord::Site(SiteInfo {
            id: 0,
            frames: vec![f(off(p.ret_worker))],
            first_caller: None,
        }),
        TableRecord::Site(SiteInfo {
            id: 1,
            frames: vec![f(off(p.ret_helper)), f(off(p.ret_worker))],
            first_caller: None,
        }),
        TableRecord::Object(ObjectInfo {
            id: 0,
            kind: ObjectKind::Mutex,
            address: p.big_lock,
            generation: 0,
            class: ClassKey::Static(f(off(p.big_lock))),
        }),
        TableRecord::Object(ObjectInfo {
            id: 1,
            kind: ObjectKind::Mutex,
            address: p.lock_b,
            generation: 0,
            class: ClassKey::Static(f(off(p.lock_b))),
        }),
    ];
    for r in &records {
        w.table(r).unwrap();
    }
    let ev = |key, kind| Event { key, kind };
    let events = [
        ev(1, EventKind::ThreadStart),
        ev(
            1,
            EventKind::LockRequest {
                lock: 0,
                mode: LockMode::Exclusive,
                site: 0,
            },
        ),
        ev(
            2,
            EventKind::LockAcquired {
                lock: 0,
                mode: LockMode::Exclusive,
            },
        ),
        ev(3, EventKind::LockRelease { lock: 0, site: 1 }),
        ev(4, EventKind::ThreadExit),
    ];
    w.thread_events(0, &events, 1 << 16).unwrap();
    w.finish(Trailer {
        end_unix_ns: 0,
        reason: EndReason::Exit { status: 0 },
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    })
    .unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn opts() -> SymbolizeOptions {
    SymbolizeOptions {
        sync: false,
        ..Default::default()
    }
}

/// The checks every symbolised trace of `prog` passes.
fn assert_symbolised(trace: &Trace) {
    let t = &trace.tables;
    let site0 = t.describe_site(0);
    assert_eq!(
        site0,
        format!("worker (prog.c:{})", line_of("LINE_WORKER")),
        "site 0"
    );
    // The inlined call: innermost first, then the caller at the call of the inlined function.
    let frame = t.sites[&1].frames[0];
    let sym = &t.symbols[&frame];
    let names: Vec<(&str, &str, u32)> = sym
        .locations
        .iter()
        .map(|l| {
            (
                l.function.and_then(|f| t.string(f)).unwrap_or("?"),
                l.file.and_then(|f| t.string(f)).unwrap_or("?"),
                l.line,
            )
        })
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(names[0].0, "helper");
    assert!(names[0].1.ends_with("prog.c"), "{names:?}");
    assert_eq!(names[0].2, line_of("LINE_HELPER"));
    assert_eq!(names[1].0, "worker");
    assert_eq!(names[1].2, line_of("LINE_CALL_HELPER"));
    assert_eq!(
        t.describe_site(1),
        format!("helper (prog.c:{})", line_of("LINE_HELPER"))
    );
    // The caller frame of site 1 is the same address as site 0's frame: one record serves both.
    assert_eq!(t.describe_frame(&t.sites[&1].frames[1]), site0);
    assert_eq!(t.describe_object(0), "big_lock");
    // A lock that is a member of a static struct is named by its member path (DWARF types).
    assert_eq!(t.describe_object(1), "two_locks.b");
    // Static locks carry their declaration when the DWARF has it.
    let ClassKey::Static(lock) = t.objects[&0].class else {
        panic!("a static class key")
    };
    assert_eq!(
        t.describe_frame(&lock),
        format!("big_lock (prog.c:{})", line_of("pthread_mutex_t big_lock"))
    );
    assert!(trace.ended_cleanly(), "{:?}", trace.problems);
    assert!(trace.problems.is_empty(), "{:?}", trace.problems);
    assert_eq!(trace.event_count(), 5);
}

#[test]
fn a_pie_executable_is_symbolised_with_files_lines_inlining_and_static_locks() {
    let Some(p) = compile("pie", &["-fPIE", "-pie"]) else {
        return;
    };
    let path = write(
        &p.dir,
        "t.trace",
        &trace_for(&p.exe, &p.build_id, p.bias, &p),
    );
    let s = symbolize_in_place(&path, &opts()).unwrap();
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    assert_eq!(
        s.frames, 4,
        "two code frames (one shared) and two static locks"
    );
    assert_eq!(s.symbolised, 4);
    assert_eq!(s.unresolved, 0);
    assert!(s.had_trailer);
    let trace = Trace::open(&path).unwrap();
    assert_symbolised(&trace);
    assert_eq!(trace.trailer.unwrap().reason, EndReason::Exit { status: 0 });
}

#[test]
fn a_non_pie_executable_is_symbolised_whatever_base_the_recorder_stored() {
    let Some(p) = compile("exec", &["-fno-PIE", "-no-pie"]) else {
        return;
    };
    assert_eq!(p.bias, 0, "a non-PIE executable is not relocated");
    assert!(p.first_load > 0);
    // The load bias (what `dl_iterate_phdr` reports: 0), or the start of the first mapping.
    for base in [0, p.first_load] {
        let path = write(
            &p.dir,
            &format!("t{base}.trace"),
            &trace_for(&p.exe, &p.build_id, base, &p),
        );
        let s = symbolize_in_place(&path, &opts()).unwrap();
        assert_eq!(s.symbolised, 4, "base {base:#x}: {:?}", s.warnings());
        assert_symbolised(&Trace::open(&path).unwrap());
    }
}

#[test]
fn running_twice_adds_nothing() {
    let Some(p) = compile("twice", &[]) else {
        return;
    };
    let path = write(
        &p.dir,
        "t.trace",
        &trace_for(&p.exe, &p.build_id, p.bias, &p),
    );
    let first = symbolize_in_place(&path, &opts()).unwrap();
    assert!(first.bytes_appended > 0);
    let after_first = std::fs::read(&path).unwrap();
    let second = symbolize_in_place(&path, &opts()).unwrap();
    assert_eq!(second.symbolised, 0);
    assert_eq!(second.already_symbolised, 4);
    assert_eq!(second.bytes_appended, 0);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        after_first,
        "the file is untouched"
    );
}

#[test]
fn a_second_trace_of_the_same_build_is_symbolised_from_the_frame_cache() {
    let Some(p) = compile("cache", &[]) else {
        return;
    };
    let bytes = trace_for(&p.exe, &p.build_id, p.bias, &p);
    let cache = p.dir.join("frames");
    std::fs::create_dir_all(&cache).unwrap();
    let cached = SymbolizeOptions {
        frame_cache: Some(cache.clone()),
        ..opts()
    };
    let plain = write(&p.dir, "plain.trace", &bytes);
    symbolize_in_place(&plain, &opts()).unwrap();
    let expected = std::fs::read(&plain).unwrap();

    let first = write(&p.dir, "first.trace", &bytes);
    assert_eq!(symbolize_in_place(&first, &cached).unwrap().symbolised, 4);
    assert_eq!(std::fs::read(&first).unwrap(), expected);
    let files: Vec<_> = std::fs::read_dir(&cache).unwrap().collect();
    assert_eq!(files.len(), 1, "one file for the build");

    // The module is gone: only the cache can name the frames.
    let moved = p.dir.join("moved-away");
    std::fs::rename(&p.exe, &moved).unwrap();
    let second = write(&p.dir, "second.trace", &bytes);
    let s = symbolize_in_place(&second, &cached).unwrap();
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    assert_eq!(s.symbolised, 4);
    assert_eq!(
        std::fs::read(&second).unwrap(),
        expected,
        "the same records"
    );
    assert_symbolised(&Trace::open(&second).unwrap());

    // A damaged cache is ignored (and replaced): the module is read again.
    let file = files[0].as_ref().unwrap().path();
    std::fs::write(&file, b"foresight resolved frames 1\n\x01garbage").unwrap();
    std::fs::rename(&moved, &p.exe).unwrap();
    let third = write(&p.dir, "third.trace", &bytes);
    assert_eq!(symbolize_in_place(&third, &cached).unwrap().symbolised, 4);
    assert_eq!(std::fs::read(&third).unwrap(), expected);
    std::fs::rename(&p.exe, &moved).unwrap();
    let fourth = write(&p.dir, "fourth.trace", &bytes);
    assert_eq!(symbolize_in_place(&fourth, &cached).unwrap().symbolised, 4);
    assert_eq!(std::fs::read(&fourth).unwrap(), expected);
}

#[test]
fn damaged_debug_information_never_panics_nor_hangs() {
    use object::ObjectSection;
    let Some(p) = compile("damaged-dwarf", &[]) else {
        return;
    };
    let original = std::fs::read(&p.exe).unwrap();
    let spans: Vec<(usize, usize)> = {
        let obj = object::File::parse(&*original).unwrap();
        [
            ".debug_info",
            ".debug_line",
            ".debug_abbrev",
            ".debug_rnglists",
            ".debug_aranges",
        ]
        .iter()
        .filter_map(|n| obj.section_by_name(n)?.file_range())
        .map(|(o, n)| (o as usize, n as usize))
        .filter(|&(_, n)| n > 0)
        .collect()
    };
    assert!(spans.len() >= 3, "the program has DWARF");
    let damaged = p.dir.join("damaged");
    // A fixed generator: the same damage on every run.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..60 {
        let mut bytes = original.clone();
        for _ in 0..1 + round % 8 {
            let (at, len) = spans[next() as usize % spans.len()];
            bytes[at + next() as usize % len] = next() as u8;
        }
        std::fs::write(&damaged, &bytes).unwrap();
        let path = write(
            &p.dir,
            "damaged.trace",
            &trace_for(&damaged, &p.build_id, p.bias, &p),
        );
        let s = symbolize_in_place(&path, &opts()).unwrap();
        assert!(
            !s.modules_skipped
                .iter()
                .any(|m| matches!(m.reason, SkipReason::Malformed(_))),
            "round {round}: {:?}",
            s.warnings()
        );
        Trace::open(&path).unwrap();
    }
}

#[test]
fn a_module_of_another_build_is_skipped_with_a_warning() {
    let Some(p) = compile("mismatch", &[]) else {
        return;
    };
    let mut wrong = p.build_id.clone();
    wrong[0] ^= 0xff;
    let bytes = trace_for(&p.exe, &wrong, p.bias, &p);
    let path = write(&p.dir, "t.trace", &bytes);
    let s = symbolize_in_place(&path, &opts()).unwrap();
    assert_eq!(s.symbolised, 0);
    assert_eq!(s.modules_skipped.len(), 1);
    assert!(matches!(
        s.modules_skipped[0].reason,
        SkipReason::BuildIdMismatch { .. }
    ));
    let w = s.warnings().join("\n");
    assert!(w.contains("build-id") && w.contains("4 frames"), "{w}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing was written");
}

#[test]
fn a_missing_or_unreadable_module_is_skipped_with_a_warning() {
    let Some(p) = compile("missing", &[]) else {
        return;
    };
    for (name, module) in [
        ("gone", p.dir.join("no-such-binary")),
        ("dir", p.dir.clone()),
        ("dev", PathBuf::from("/dev/zero")),
        ("source", p.dir.join("prog.c")),
    ] {
        let bytes = trace_for(&module, &p.build_id, p.bias, &p);
        let path = write(&p.dir, &format!("{name}.trace"), &bytes);
        let s = symbolize_in_place(&path, &opts()).unwrap();
        assert_eq!(s.symbolised, 0, "{name}");
        assert_eq!(s.modules_skipped.len(), 1, "{name}");
        let w = s.warnings().join("\n");
        assert!(w.contains(&module.display().to_string()), "{name}: {w}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{name}: nothing written"
        );
    }
}

#[test]
fn a_trace_cut_short_gets_its_symbols_and_no_invented_trailer() {
    let Some(p) = compile("cut", &[]) else {
        return;
    };
    let full = trace_for(&p.exe, &p.build_id, p.bias, &p);
    let reader = foresight_trace::TraceFile::from_bytes("x", full.clone()).unwrap();
    let trailer_at = reader.chunks().last().unwrap().offset as usize;
    let events_chunk = *reader
        .chunks()
        .iter()
        .find(|c| c.kind == foresight_trace::frame::ChunkKind::Events)
        .unwrap();
    drop(reader);

    // No trailer at all: the writer died between chunks.
    let path = write(&p.dir, "no-trailer.trace", &full[..trailer_at]);
    let s = symbolize_in_place(&path, &opts()).unwrap();
    assert!(!s.had_trailer);
    assert_eq!(s.symbolised, 4);
    assert_eq!(s.dropped_tail, None);
    let trace = Trace::open(&path).unwrap();
    assert!(trace.trailer.is_none(), "no trailer is invented");
    assert_eq!(trace.tables.describe_object(0), "big_lock");
    assert_eq!(trace.event_count(), 5);
    assert!(
        trace.problems.iter().all(|p| !p.is_damage()),
        "{:?}",
        trace.problems
    );

    // Cut inside a chunk: a table chunk after the events, then half of a copy of the events
    // chunk, as a writer that died mid-write leaves it. The incomplete chunk would swallow
    // appended bytes, so it is dropped (and reported).
    let mut cut = full[..trailer_at].to_vec();
    let start = events_chunk.offset as usize;
    let end = (events_chunk.payload_offset + events_chunk.payload_len as u64) as usize;
    cut.extend_from_slice(&full[start..start + (end - start) / 2]);
    let path = write(&p.dir, "cut-inside.trace", &cut);
    let s = symbolize_in_place(&path, &opts()).unwrap();
    assert_eq!(s.symbolised, 4);
    assert_eq!(
        s.dropped_tail,
        Some((trailer_at as u64, ((end - start) / 2) as u64))
    );
    let trace = Trace::open(&path).unwrap();
    assert_eq!(trace.tables.describe_object(0), "big_lock");
    assert!(trace.trailer.is_none());
    assert!(
        trace.problems.iter().all(|p| !p.is_damage()),
        "{:?}",
        trace.problems
    );
}

#[test]
fn damaged_and_truncated_traces_never_panic() {
    let Some(p) = compile("hostile", &[]) else {
        return;
    };
    let full = trace_for(&p.exe, &p.build_id, p.bias, &p);
    let dir = temp_dir("hostile-cases");
    let mut cases: Vec<Vec<u8>> = (0..full.len())
        .step_by(7)
        .map(|n| full[..n].to_vec())
        .collect();
    for i in (0..full.len()).step_by(11) {
        let mut b = full.clone();
        b[i] ^= 0x5a;
        cases.push(b);
    }
    for (i, bytes) in cases.iter().enumerate() {
        let path = write(&dir, &format!("{i}.trace"), bytes);
        // Errors are fine (a file that is not a trace); panics and unreadable results are not.
        if symbolize_in_place(&path, &opts()).is_ok() {
            let before = Trace::from_bytes("before", bytes.clone()).unwrap();
            let after = Trace::open(&path).unwrap();
            assert_eq!(after.event_count(), before.event_count(), "case {i}");
            assert_eq!(
                after.trailer.is_some(),
                before.trailer.is_some(),
                "case {i}"
            );
        }
    }
}

#[test]
fn a_shared_library_without_debug_information_is_named_from_its_symbol_table() {
    // The C library this test runs with (a shared object, usually stripped of DWARF).
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let Some(libc_path) = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        .map(PathBuf::from)
    else {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v.is_empty()),
            "no shared C library in /proc/self/maps"
        );
        eprintln!("SKIPPED: no shared C library in /proc/self/maps");
        return;
    };
    let data = std::fs::read(&libc_path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let build_id = obj.build_id().unwrap().unwrap_or(&[]).to_vec();
    let lock = obj
        .dynamic_symbols()
        .find(|s| s.name() == Ok("pthread_mutex_lock") && s.size() > 8)
        .expect("libc defines pthread_mutex_lock")
        .address();
    let header = Header {
        producer: "symbols test".into(),
        pid: 1,
        parent_pid: 0,
        command: vec!["x".into()],
        start_unix_ns: 0,
        ordering: Ordering::GlobalSequence,
        pointer_width: 8,
        stack_depth: 1,
    };
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    for r in [
        TableRecord::String(StringEntry {
            id: 7,
            text: libc_path.display().to_string(),
        }),
        TableRecord::Module(ModuleInfo {
            id: 3,
            path: 7,
            build_id,
            base: 0x7f00_0000_0000,
            size: 0x20_0000,
        }),
        TableRecord::Site(SiteInfo {
            id: 0,
            frames: vec![Frame {
                module: 3,
                offset: lock + 5,
            }],
            first_caller: None,
        }),
        // A frame of a module the table does not define.
        TableRecord::Site(SiteInfo {
            id: 1,
            frames: vec![Frame {
                module: 9,
                offset: 0x1234,
            }],
            first_caller: None,
        }),
    ] {
        w.table(&r).unwrap();
    }
    let dir = temp_dir("libc");
    let bytes = w.abandon().unwrap();
    let path = write(&dir, "libc.trace", &bytes);
    // No separate debug files: the dynamic symbol table names the function.
    let no_debug_files = SymbolizeOptions {
        debug_dirs: Vec::new(),
        ..opts()
    };
    let s = symbolize_in_place(&path, &no_debug_files).unwrap();
    assert_eq!(s.symbolised, 1, "{:?}", s.warnings());
    assert_eq!(s.modules_skipped.len(), 1);
    assert_eq!(s.modules_skipped[0].reason, SkipReason::NotInTables);
    let trace = Trace::open(&path).unwrap();
    let site = trace.tables.describe_site(0);
    let has_own_dwarf = obj.section_by_name(".debug_info").is_some();
    if !has_own_dwarf {
        assert_eq!(site, "pthread_mutex_lock");
    }
    assert_eq!(trace.tables.describe_site(1), "?+0x1234");
    // New strings do not reuse taken ids.
    assert_eq!(trace.tables.string(7), Some(libc_path.to_str().unwrap()));

    // With the system's debug directory: a separate (often compressed) debug file, when the
    // distribution's debug package is installed, gives the file and line.
    let path = write(&dir, "libc-debug.trace", &bytes);
    symbolize_in_place(&path, &opts()).unwrap();
    let site = Trace::open(&path).unwrap().tables.describe_site(0);
    assert!(site.contains("pthread_mutex_lock"), "{site}");
    eprintln!("with /usr/lib/debug: {site}");
}
