//! Names of static locks: a C program's file-local, function-local and aggregate-member locks,
//! symbolised from DWARF and, compiled without it, from the symbol table alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use foresight_symbols::{symbolize_in_place, SymbolizeOptions};
use foresight_trace::tables::{
    ClassKey, EndReason, Frame, Header, ModuleInfo, ObjectInfo, ObjectKind, Ordering, StringEntry,
    TableRecord, Trailer,
};
use foresight_trace::{Trace, TraceWriter};
use object::{Object, ObjectSymbol};

const SOURCE: &str = include_str!("statics.c");

fn line_of(marker: &str) -> u32 {
    SOURCE
        .lines()
        .position(|l| l.contains(marker))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("{marker} is in statics.c"))
}

/// Compiles and runs `statics.c` with `flags`; the executable, its build-id, the load bias and
/// the lock addresses it printed. `None` (with the reason printed) without a C compiler.
fn compile(tag: &str, flags: &[&str]) -> Option<(PathBuf, Vec<u8>, u64, Vec<u64>)> {
    let dir = std::env::temp_dir().join(format!("foresight-statics-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("statics.c");
    std::fs::write(&src, SOURCE).unwrap();
    let exe = dir.join("statics");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = match Command::new(&cc)
        .args(flags)
        .args(["-O0", "-Wl,--build-id", "-pthread", "-o"])
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
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let addrs: Vec<u64> = String::from_utf8(run.stdout)
        .unwrap()
        .split_whitespace()
        .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap())
        .collect();
    assert_eq!(addrs.len(), 7);
    let data = std::fs::read(&exe).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let build_id = obj.build_id().unwrap().expect("a build-id").to_vec();
    let main = obj
        .symbols()
        .find(|s| s.name() == Ok("main"))
        .expect("main is in the symbol table")
        .address();
    let bias = addrs[0] - main;
    Some((exe, build_id, bias, addrs[1..].to_vec()))
}

/// A trace whose objects are static mutexes at `locks` (run-time addresses), symbolised.
fn symbolised(exe: &Path, build_id: &[u8], bias: u64, locks: &[u64]) -> Trace {
    let header = Header {
        producer: "statics test".into(),
        pid: 1,
        parent_pid: 0,
        command: vec![exe.display().to_string()],
        start_unix_ns: 0,
        ordering: Ordering::GlobalSequence,
        pointer_width: 8,
        stack_depth: 1,
    };
    let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
    w.table(&TableRecord::String(StringEntry {
        id: 0,
        text: exe.display().to_string(),
    }))
    .unwrap();
    w.table(&TableRecord::Module(ModuleInfo {
        id: 0,
        path: 0,
        build_id: build_id.to_vec(),
        base: bias,
        size: 0x10_0000,
    }))
    .unwrap();
    for (id, &address) in locks.iter().enumerate() {
        w.table(&TableRecord::Object(ObjectInfo {
            id: id as u32,
            kind: ObjectKind::Mutex,
            address,
            generation: 0,
            class: ClassKey::Static(Frame {
                module: 0,
                offset: address - bias,
            }),
        }))
        .unwrap();
    }
    let bytes = w
        .finish(Trailer {
            end_unix_ns: 0,
            reason: EndReason::Exit { status: 0 },
            event_chunks: 0,
            events: 0,
            events_lost: 0,
        })
        .unwrap();
    let path = exe.with_extension("trace");
    std::fs::write(&path, bytes).unwrap();
    let opts = SymbolizeOptions {
        sync: false,
        debug_dirs: Vec::new(),
        ..Default::default()
    };
    let s = symbolize_in_place(&path, &opts).unwrap();
    assert_eq!(s.symbolised, locks.len(), "{:?}", s.warnings());
    Trace::open(&path).unwrap()
}

fn names(t: &Trace, n: usize) -> Vec<String> {
    (0..n as u32).map(|i| t.tables.describe_object(i)).collect()
}

#[test]
fn static_locks_are_named_by_their_variables_and_members() {
    for pie in [&["-fPIE", "-pie"][..], &["-fno-PIE", "-no-pie"]] {
        let flags: Vec<&str> = [&["-g"][..], pie].concat();
        let Some((exe, id, bias, locks)) = compile(&format!("dwarf{}", pie[0]), &flags) else {
            return;
        };
        let t = symbolised(&exe, &id, bias, &locks);
        assert_eq!(
            names(&t, locks.len()),
            [
                "a",
                "b",
                "accounts[1].lock",
                "grid[1][2]",
                "first::m",
                "second::m"
            ],
            "{flags:?}"
        );
        // The declaration comes with the name.
        let ClassKey::Static(f) = t.tables.objects[&0].class else {
            unreachable!()
        };
        assert_eq!(
            t.tables.describe_frame(&f),
            format!("a (statics.c:{})", line_of("LINE_A"))
        );
        let ClassKey::Static(f) = t.tables.objects[&2].class else {
            unreachable!()
        };
        assert_eq!(
            t.tables.describe_frame(&f),
            format!("accounts[1].lock (statics.c:{})", line_of("LINE_ACCOUNTS"))
        );
        let ClassKey::Static(f) = t.tables.objects[&4].class else {
            unreachable!()
        };
        assert_eq!(
            t.tables.describe_frame(&f),
            format!("first::m (statics.c:{})", line_of("LINE_FIRST_M"))
        );
    }
}

#[test]
fn without_dwarf_the_symbol_table_names_them_and_never_as_type_codes() {
    let Some((exe, id, bias, locks)) = compile("nodwarf", &["-g0"]) else {
        return;
    };
    let t = symbolised(&exe, &id, bias, &locks);
    let got = names(&t, locks.len());
    // `struct account` is 8 bytes of balance and a 40-byte mutex (x86-64 and AArch64 glibc).
    assert_eq!(got[..4], ["a", "b", "accounts+0x38", "grid+0xc8"]);
    // Function-local statics: the compiler's local symbols (`m.0`, `m.1` with GCC, `first.m`
    // with clang), whichever it chose, but not a demangled type name.
    for n in &got[4..] {
        assert!(n.contains('m') && n != "m", "{got:?}");
    }
}
