//! Names of accessed static data (FORMAT.md §7.9–§7.11): a C program (`data.c`) and its shared
//! library (`data_lib.c`) compiled with `cc -O0`, a trace whose reads, writes and atomics touch
//! their variables at the addresses the program printed, and the names `Tables::data_symbol`
//! gives after `symbolize_in_place`: globals, file and function statics, nested members,
//! arrays of structs, a library's variable; from the symbol table without DWARF; and a module
//! that is missing.
//!
//! A C compiler that is missing fails these tests in CI (`CI`, `FORESIGHT_REQUIRE_RUNTIME`)
//! and skips them, saying so, elsewhere.

use std::path::{Path, PathBuf};
use std::process::Command;

use foresight_symbols::{
    symbol_records, symbolize_in_place, DataAccess, DataName, SkipReason, StaticData,
    SymbolizeOptions, SymbolizeSummary,
};
use foresight_trace::event::{AtomicOp, Event, EventKind, MemoryOrder};
use foresight_trace::tables::{
    EndReason, Frame, Header, ModuleInfo, Ordering, SiteInfo, StringEntry, TableRecord, ThreadInfo,
    Trailer,
};
use foresight_trace::{Trace, TraceWriter};
use object::{Object, ObjectSegment, ObjectSymbol};

const SOURCE: &str = include_str!("data.c");
const LIB_SOURCE: &str = include_str!("data_lib.c");

fn line_of(source: &str, marker: &str) -> u32 {
    source
        .lines()
        .position(|l| l.contains(marker))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("{marker} is in the source"))
}

fn tools_required() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
        || std::env::var_os("FORESIGHT_REQUIRE_RUNTIME").is_some()
}

/// A built module: its path, build-id, size of its image and load bias in the run.
struct Module {
    path: PathBuf,
    build_id: Vec<u8>,
    size: u64,
    bias: u64,
}

/// The program built and run: its two modules and the addresses it printed.
struct Built {
    dir: PathBuf,
    exe: Module,
    lib: Module,
    /// counters[3], total, cfg.limits.max, table[2].name[5], grid[1][2], hits, table,
    /// lib_slots[1].values[2], a heap block.
    addrs: Vec<u64>,
}

fn cc(args: &[&str], dir: &Path) -> Option<()> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = match Command::new(&cc).args(args).current_dir(dir).output() {
        Ok(o) => o,
        Err(e) => {
            let why = format!("cannot run the C compiler `{cc}`: {e}");
            if tools_required() {
                panic!("{why}");
            }
            eprintln!("SKIPPED: {why}");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(())
}

/// `(build-id, image size, vaddr of symbol)` of an ELF file.
fn inspect(path: &Path, symbol: &str) -> (Vec<u8>, u64, u64) {
    let data = std::fs::read(path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let build_id = obj.build_id().unwrap().expect("a build-id").to_vec();
    let size = obj
        .segments()
        .map(|s| s.address() + s.size())
        .max()
        .unwrap();
    let at = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .find(|s| s.name() == Ok(symbol))
        .unwrap_or_else(|| panic!("{symbol} in {}", path.display()))
        .address();
    (build_id, size, at)
}

/// Builds `data.c` (with `flags`) against `libdata.so` (with `lib_flags`) and runs it.
fn build(tag: &str, flags: &[&str], lib_flags: &[&str]) -> Option<Built> {
    let dir = std::env::temp_dir().join(format!("foresight-data-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("data.c"), SOURCE).unwrap();
    std::fs::write(dir.join("data_lib.c"), LIB_SOURCE).unwrap();
    let common = ["-O0", "-Wl,--build-id"];
    let lib_args: Vec<&str> = [&common[..], lib_flags, &["-fPIC", "-shared"]]
        .concat()
        .into_iter()
        .chain(["-o", "libdata.so", "data_lib.c"])
        .collect();
    cc(&lib_args, &dir)?;
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let exe_args: Vec<&str> = [&common[..], flags]
        .concat()
        .into_iter()
        .chain(["-o", "data", "data.c", "-L.", "-ldata", &rpath])
        .collect();
    cc(&exe_args, &dir)?;
    let run = Command::new(dir.join("data")).output().unwrap();
    assert!(run.status.success(), "{run:?}");
    let printed: Vec<u64> = String::from_utf8(run.stdout)
        .unwrap()
        .split_whitespace()
        .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap())
        .collect();
    assert_eq!(printed.len(), 11, "{printed:?}");
    let (exe_id, exe_size, main_at) = inspect(&dir.join("data"), "main");
    let (lib_id, lib_size, entry_at) = inspect(&dir.join("libdata.so"), "lib_here");
    Some(Built {
        exe: Module {
            path: dir.join("data"),
            build_id: exe_id,
            size: exe_size,
            bias: printed[0] - main_at,
        },
        lib: Module {
            path: dir.join("libdata.so"),
            build_id: lib_id,
            size: lib_size,
            bias: printed[1] - entry_at,
        },
        addrs: printed[2..].to_vec(),
        dir,
    })
}

/// One thread that touches each printed address, as a recorder would record it; the exe's
/// path is `exe_path` (to point the trace at a missing file).
fn trace_of(b: &Built, exe_path: &Path) -> Vec<u8> {
    let header = Header {
        producer: "data test".into(),
        pid: 1,
        parent_pid: 0,
        command: vec![exe_path.display().to_string()],
        start_unix_ns: 0,
        ordering: Ordering::Logical,
        pointer_width: 8,
        stack_depth: 1,
    };
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    // The recorder's module record: the load bias, and the image up to its end from there
    // (for a non-PIE executable the bias is 0).
    let module = |id, path, m: &Module| {
        TableRecord::Module(ModuleInfo {
            id,
            path,
            build_id: m.build_id.clone(),
            base: m.bias,
            size: m.size,
        })
    };
    for r in [
        TableRecord::String(StringEntry {
            id: 0,
            text: exe_path.display().to_string(),
        }),
        TableRecord::String(StringEntry {
            id: 1,
            text: b.lib.path.display().to_string(),
        }),
        module(0, 0, &b.exe),
        module(1, 1, &b.lib),
        TableRecord::Thread(ThreadInfo {
            id: 0,
            os_tid: 1,
            parent: None,
            name: None,
        }),
        TableRecord::Site(SiteInfo {
            id: 0,
            frames: vec![Frame {
                module: 0,
                offset: 0x10,
            }],
            first_caller: None,
        }),
    ] {
        w.table(&r).unwrap();
    }
    let a = &b.addrs;
    let site = 0;
    let kinds = [
        EventKind::Write {
            addr: a[0],
            size: 4,
            site,
        },
        EventKind::Read {
            addr: a[1],
            size: 8,
            site,
        },
        EventKind::Write {
            addr: a[2],
            size: 4,
            site,
        },
        EventKind::Write {
            addr: a[3],
            size: 1,
            site,
        },
        EventKind::Read {
            addr: a[4],
            size: 4,
            site,
        },
        EventKind::Atomic {
            op: AtomicOp::Rmw,
            addr: a[5],
            size: 4,
            order: MemoryOrder::SeqCst,
            site,
        },
        // memset(table, 0, sizeof table)
        EventKind::Write {
            addr: a[6],
            size: 48,
            site,
        },
        EventKind::Write {
            addr: a[7],
            size: 4,
            site,
        },
        EventKind::Read {
            addr: a[8],
            size: 8,
            site,
        },
    ];
    let mut events = vec![Event {
        key: 1,
        kind: EventKind::ThreadStart,
    }];
    events.extend(kinds.into_iter().map(|kind| Event { key: 1, kind }));
    events.push(Event {
        key: 2,
        kind: EventKind::ThreadExit,
    });
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

fn opts() -> SymbolizeOptions {
    SymbolizeOptions {
        sync: false,
        debug_dirs: Vec::new(),
        ..Default::default()
    }
}

fn symbolised(b: &Built, name: &str, exe_path: &Path) -> (SymbolizeSummary, Trace, PathBuf) {
    let path = b.dir.join(name);
    std::fs::write(&path, trace_of(b, exe_path)).unwrap();
    let s = symbolize_in_place(&path, &opts()).unwrap();
    let t = Trace::open(&path).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    (s, t, path)
}

/// `(name, file name, line)` of each access of `trace_of`, `None` where nothing names it.
fn named(t: &Trace, b: &Built) -> Vec<Option<(String, String, u32)>> {
    let sizes = [4, 8, 4, 1, 4, 4, 48, 4, 8];
    b.addrs
        .iter()
        .zip(sizes)
        .map(|(&a, n)| {
            let s = t.tables.data_symbol(a, n)?;
            let file = s
                .file
                .map(|f| {
                    Path::new(f)
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned()
                })
                .unwrap_or_default();
            Some((s.name, file, s.line))
        })
        .collect()
}

#[test]
fn accessed_statics_are_named_from_dwarf_down_to_the_element() {
    for (tag, pie) in [
        ("pie", &["-fPIE", "-pie"]),
        ("exec", &["-fno-PIE", "-no-pie"]),
    ] {
        let flags: Vec<&str> = [&["-g"][..], pie].concat();
        let Some(b) = build(tag, &flags, &["-g"]) else {
            return;
        };
        let (s, t, path) = symbolised(&b, "t.trace", &b.exe.path);
        assert!(s.warnings().is_empty(), "{tag}: {:?}", s.warnings());
        assert_eq!(s.data_accesses, 9);
        assert_eq!(s.data_unnamed_granules, 0, "{tag}");
        let c = |m| line_of(SOURCE, m);
        let at = |name: &str, file: &str, line| Some((name.to_string(), file.to_string(), line));
        assert_eq!(
            named(&t, &b),
            [
                at("counters[3]", "data.c", c("LINE_COUNTERS")),
                at("total", "data.c", c("LINE_TOTAL")),
                at("cfg.limits.max", "data.c", c("LINE_CFG")),
                at("table[2].name[5]", "data.c", c("LINE_TABLE")),
                at("grid[1][2]", "data.c", c("int grid[2][3]")),
                at("hits_slot::hits", "data.c", c("LINE_HITS")),
                at("table", "data.c", c("LINE_TABLE")),
                at(
                    "lib_slots[1].values[2]",
                    "data_lib.c",
                    line_of(LIB_SOURCE, "LINE_LIB_SLOTS")
                ),
                None,
            ],
            "{tag}"
        );
        // A variable a granule shares with one of these may be described too, never fewer.
        let names: Vec<&str> = t
            .tables
            .data_variables
            .values()
            .filter_map(|v| t.tables.string(v.name))
            .collect();
        for n in [
            "counters",
            "total",
            "cfg",
            "table",
            "grid",
            "hits_slot::hits",
            "lib_slots",
        ] {
            assert!(names.contains(&n), "{tag}: {n} in {names:?}");
        }
        assert_eq!(s.data_variables, names.len());
        assert!(s.data_types >= 4, "{tag}: {} types", s.data_types);
        let s2 = symbolize_in_place(&path, &opts()).unwrap();
        assert_eq!(
            (s2.bytes_appended, s2.data_variables, s2.data_already),
            (0, 0, names.len()),
            "{tag}: a second pass appends nothing"
        );
    }
}

#[test]
fn without_dwarf_the_symbol_table_names_them_with_offsets() {
    let Some(b) = build("nodwarf", &["-g0"], &["-g0"]) else {
        return;
    };
    let (s, t, _) = symbolised(&b, "t.trace", &b.exe.path);
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    let got: Vec<Option<String>> = named(&t, &b)
        .into_iter()
        .map(|n| {
            n.map(|(name, file, line)| {
                assert_eq!((file.as_str(), line), ("", 0), "{name}: no declaration");
                name
            })
        })
        .collect();
    // struct config: a char, then struct limits at 4; struct entry: 12 bytes, name at 4;
    // struct slot: 24 bytes, values at 8.
    let fixed = [
        "counters+0xc",
        "total",
        "cfg+0x8",
        "table+0x21",
        "grid+0x14",
    ];
    for (g, want) in got.iter().zip(fixed) {
        assert_eq!(g.as_deref(), Some(want), "{got:?}");
    }
    // The compiler's own symbol for a function's static (`hits.0` from gcc, `hits_slot.hits`
    // from clang), not a demangled type name.
    let hits = got[5].as_deref().unwrap();
    assert!(hits.contains("hits") && hits != "hits", "{got:?}");
    assert_eq!(got[6].as_deref(), Some("table"));
    assert_eq!(got[7].as_deref(), Some("lib_slots+0x28"));
    assert_eq!(got[8], None);
    assert_eq!(s.data_types, 0);
}

#[test]
fn a_missing_module_costs_its_names_and_a_warning() {
    let Some(b) = build("missing", &["-g"], &["-g"]) else {
        return;
    };
    let gone = b.dir.join("no-such-program");
    let (s, t, _) = symbolised(&b, "t.trace", &gone);
    assert_eq!(s.modules_skipped.len(), 1, "{:?}", s.warnings());
    assert!(matches!(
        s.modules_skipped[0].reason,
        SkipReason::Unreadable(_)
    ));
    let w = s.warnings().join("\n");
    assert!(
        w.contains(&gone.display().to_string()) && w.contains("of its static data unnamed"),
        "{w}"
    );
    let got = named(&t, &b);
    assert!(got[..7].iter().all(Option::is_none), "{got:?}");
    assert_eq!(
        got[7].as_ref().map(|n| n.0.as_str()),
        Some("lib_slots[1].values[2]"),
        "the library was read"
    );
}

#[test]
fn a_hostile_trace_costs_bounded_work_and_says_what_it_left_out() {
    // A module that claims half the address space, and accesses of 4 GiB each: the pass keeps
    // its cap of pages, notes the rest, and the missing module costs a warning.
    let dir = std::env::temp_dir().join(format!("foresight-data-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header = Header {
        producer: "data test".into(),
        pid: 1,
        parent_pid: 0,
        command: vec![],
        start_unix_ns: 0,
        ordering: Ordering::Logical,
        pointer_width: 8,
        stack_depth: 1,
    };
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    for r in [
        TableRecord::String(StringEntry {
            id: 0,
            text: dir.join("no-such-module").display().to_string(),
        }),
        TableRecord::Module(ModuleInfo {
            id: 0,
            path: 0,
            build_id: vec![],
            base: 0x1000,
            size: u64::MAX / 2,
        }),
        TableRecord::Thread(ThreadInfo {
            id: 0,
            os_tid: 1,
            parent: None,
            name: None,
        }),
    ] {
        w.table(&r).unwrap();
    }
    let events: Vec<Event> = (0..2000u64)
        .map(|i| Event {
            key: 1,
            kind: EventKind::Write {
                addr: 0x1000 + (i << 33),
                size: u32::MAX,
                site: 0,
            },
        })
        .collect();
    w.thread_events(0, &events, 1 << 16).unwrap();
    let path = dir.join("hostile.trace");
    std::fs::write(&path, w.abandon().unwrap()).unwrap();
    let s = symbolize_in_place(&path, &opts()).unwrap();
    assert_eq!(s.data_accesses, 2000);
    assert_eq!(
        s.data_granules,
        (1 << 18) * 512,
        "the cap of pages, all full"
    );
    let w = s.warnings().join("\n");
    assert!(w.contains("pages of static data"), "{w}");
    assert!(w.contains("no-such-module"), "{w}");
    assert_eq!(s.bytes_appended, 0);
}

/// What `analyze` does with a trace that was not symbolised: the frames' records added to its
/// tables in memory (`symbol_records`), and the static data of the accesses a report names
/// read afterwards (`StaticData`), without the data pass. Every access gets the name the
/// symbolised trace gives it, with and without DWARF, and the data pass never runs.
#[test]
fn names_without_the_data_pass_are_the_symbolised_trace_s() {
    for (tag, flags) in [("lazy", &["-g"]), ("lazy-nodwarf", &["-g0"])] {
        let Some(b) = build(tag, flags, flags) else {
            return;
        };
        let (_, symbolised, _) = symbolised(&b, "full.trace", &b.exe.path);
        let path = b.dir.join("raw.trace");
        std::fs::write(&path, trace_of(&b, &b.exe.path)).unwrap();
        let mut raw = Trace::open(&path).unwrap();
        let (records, summary) = symbol_records(&path, &raw.tables, &opts()).unwrap();
        assert!(summary.warnings().is_empty(), "{:?}", summary.warnings());
        assert!(raw.tables.add_records(&records).is_empty());
        assert_eq!(raw.tables.symbols, symbolised.tables.symbols, "{tag}");
        assert!(raw.tables.data_variables.is_empty(), "{tag}: no data pass");

        let sizes = [4, 8, 4, 1, 4, 4, 48, 4, 8];
        let accesses: Vec<DataAccess> = b
            .addrs
            .iter()
            .zip(sizes)
            .map(|(&addr, len)| DataAccess {
                addr,
                len,
                freed: false,
            })
            .collect();
        let mut data = StaticData::new(&path, opts());
        // Asked in two rounds, as a walk cut into segments asks, and once more.
        let mut got = data.names(&raw.tables, &accesses[..4]);
        got.extend(data.names(&raw.tables, &accesses[4..]));
        assert_eq!(data.names(&raw.tables, &accesses), got, "{tag}");
        let want: Vec<Option<DataName>> = accesses
            .iter()
            .map(|a| {
                symbolised
                    .tables
                    .data_symbol(a.addr, a.len)
                    .map(|s| DataName {
                        name: s.name,
                        file: s.file.map(str::to_string),
                        line: s.line,
                    })
            })
            .collect();
        assert!(want[..8].iter().all(Option::is_some), "{tag}: {want:?}");
        assert_eq!(got, want, "{tag}");
        assert_eq!(data.data_passes(), 0, "{tag}: the data pass ran");
        assert!(data.take_warnings().is_empty(), "{tag}");
    }
}
