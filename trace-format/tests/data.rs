//! Version 1.2's data records (FORMAT.md §7.9–§7.11): static variables and their layouts, the
//! names an address gets from them, hostile layouts, and readers that predate them.

use foresight_trace::builder::TraceBuilder;
use foresight_trace::data::{element_path, PathStop};
use foresight_trace::tables::{
    DataMember, DataType, DataVariable, EndReason, Header, ModuleInfo, Ordering, StringEntry,
    TableRecord, Trailer, TypeShape,
};
use foresight_trace::{ProblemKind, Trace, TraceWriter};

fn member(b: &mut TraceBuilder, name: &str, offset: u64, size: u64, ty: Option<u32>) -> DataMember {
    DataMember {
        name: Some(b.string(name)),
        offset,
        size,
        ty,
    }
}

/// Names of accesses (offset into the variable, length) of the variable at `base`.
fn names(t: &Trace, base: u64, accesses: &[(u64, u64)]) -> Vec<String> {
    accesses
        .iter()
        .map(|&(o, n)| {
            t.tables
                .data_symbol(base + o, n)
                .map_or("(none)".to_string(), |s| s.name)
        })
        .collect()
}

#[test]
fn an_address_is_named_down_to_the_element_it_touches() {
    let mut b = TraceBuilder::new("data");
    // int counters[8];
    let counters = b.array_variable("counters", "race.c", 3, 4, 8);
    // struct account { long balance; int hist[4]; } acct[3];
    let hist = b.data_type(TypeShape::Array {
        element: None,
        element_size: 4,
        count: Some(4),
    });
    let balance = member(&mut b, "balance", 0, 8, None);
    let hist_m = member(&mut b, "hist", 8, 16, Some(hist));
    let account = b.data_type(TypeShape::Record {
        members: vec![balance, hist_m],
    });
    let accounts = b.data_type(TypeShape::Array {
        element: Some(account),
        element_size: 24,
        count: Some(3),
    });
    let acct = b.variable("acct", "race.c", 7, 72, Some(accounts));
    // struct { struct { int min, max; } limits; char name[6]; } cfg; and char grid[2][3];
    let min = member(&mut b, "min", 0, 4, None);
    let max = member(&mut b, "max", 4, 4, None);
    let limits_t = b.data_type(TypeShape::Record {
        members: vec![min, max],
    });
    let name_t = b.data_type(TypeShape::Array {
        element: None,
        element_size: 1,
        count: Some(6),
    });
    let limits = member(&mut b, "limits", 0, 8, Some(limits_t));
    let name = member(&mut b, "name", 8, 6, Some(name_t));
    let cfg_t = b.data_type(TypeShape::Record {
        members: vec![limits, name],
    });
    let cfg = b.variable("cfg", "cfg.c", 12, 16, Some(cfg_t));
    let row = b.data_type(TypeShape::Array {
        element: None,
        element_size: 1,
        count: Some(3),
    });
    let rows = b.data_type(TypeShape::Array {
        element: Some(row),
        element_size: 3,
        count: Some(2),
    });
    let grid = b.variable("grid", "grid.c", 1, 6, Some(rows));
    // A scalar, and a variable the symbol table named (no type).
    let total = b.variable("total", "race.c", 2, 8, None);
    let buf = b.variable("buf", "race.c", 0, 64, None);
    let t = Trace::from_bytes("data", b.finish()).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);

    assert_eq!(
        names(
            &t,
            counters,
            &[(0, 4), (12, 4), (13, 1), (8, 8), (0, 32), (28, 64)]
        ),
        [
            "counters[0]",
            "counters[3]",
            "counters[3]+0x1",
            // Two elements: the array holds the access, no element does.
            "counters+0x8",
            "counters",
            // Past the end: cut to the variable, which holds it.
            "counters[7]",
        ]
    );
    assert_eq!(
        names(
            &t,
            acct,
            &[(40, 4), (41, 1), (32, 16), (24, 8), (48, 24), (30, 4)]
        ),
        [
            "acct[1].hist[2]",
            "acct[1].hist[2]+0x1",
            "acct[1].hist",
            "acct[1].balance",
            "acct[2]",
            // Across balance and hist: the element holds it.
            "acct[1]+0x6",
        ]
    );
    assert_eq!(
        names(&t, cfg, &[(4, 4), (13, 1), (0, 8), (14, 1)]),
        ["cfg.limits.max", "cfg.name[5]", "cfg.limits", "cfg+0xe"]
    );
    assert_eq!(
        names(&t, grid, &[(5, 1), (3, 3)]),
        ["grid[1][2]", "grid[1]"]
    );
    assert_eq!(names(&t, total, &[(0, 8), (4, 4)]), ["total", "total+0x4"]);
    assert_eq!(names(&t, buf, &[(0x10, 8)]), ["buf+0x10"]);

    let s = t.tables.data_symbol(acct + 40, 4).unwrap();
    assert_eq!((s.file, s.line), (Some("race.c"), 7));
    assert_eq!((s.element_addr, s.element_size), (acct + 40, 4));
    assert_eq!(s.variable.size, 72);
    let s = t.tables.data_symbol(acct + 41, 1).unwrap();
    assert_eq!((s.element_addr, s.element_size), (acct + 40, 4));

    // Outside every variable: padding between them, the module's code, the heap.
    assert!(t.tables.data_symbol(total + 8, 4).is_none());
    assert!(t.tables.data_symbol(0x40_1000, 4).is_none());
    assert!(t.tables.data_symbol(0x7f00_0000_0000, 4).is_none());
}

#[test]
fn unions_anonymous_members_bit_fields_and_unknown_counts() {
    let mut b = TraceBuilder::new("shapes");
    // union { int i; char c[4]; } u;
    let c = b.data_type(TypeShape::Array {
        element: None,
        element_size: 1,
        count: Some(4),
    });
    let i = member(&mut b, "i", 0, 4, None);
    let cm = member(&mut b, "c", 0, 4, Some(c));
    let u_t = b.data_type(TypeShape::Record {
        members: vec![i, cm],
    });
    let u = b.variable("u", "u.c", 1, 4, Some(u_t));
    // struct { int tag; union { long l; double d; }; unsigned a : 3, b : 9; } s;
    let l = member(&mut b, "l", 0, 8, None);
    let d = member(&mut b, "d", 0, 8, None);
    let inner = b.data_type(TypeShape::Record {
        members: vec![l, d],
    });
    let tag = member(&mut b, "tag", 0, 4, None);
    let anon = DataMember {
        name: None,
        offset: 8,
        size: 8,
        ty: Some(inner),
    };
    let bits_a = member(&mut b, "a", 16, 1, None);
    let bits_b = member(&mut b, "b", 16, 2, None);
    let s_t = b.data_type(TypeShape::Record {
        members: vec![tag, anon, bits_a, bits_b],
    });
    let s = b.variable("s", "u.c", 2, 24, Some(s_t));
    // extern int x[]; defined elsewhere with 5 elements.
    let x_t = b.data_type(TypeShape::Array {
        element: None,
        element_size: 4,
        count: None,
    });
    let x = b.variable("x", "x.c", 3, 20, Some(x_t));
    let t = Trace::from_bytes("shapes", b.finish()).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    // A union's first member that holds the access names it.
    assert_eq!(names(&t, u, &[(0, 4), (2, 1)]), ["u.i", "u.i+0x2"]);
    assert_eq!(
        names(&t, s, &[(8, 8), (16, 1), (17, 1), (16, 2)]),
        ["s.l", "s.a", "s.b+0x1", "s.b"]
    );
    assert_eq!(names(&t, x, &[(16, 4), (20, 4)]), ["x[4]", "(none)"]);
}

#[test]
fn a_static_lock_is_named_by_the_outermost_element_at_its_address() {
    let mut b = TraceBuilder::new("locks");
    // struct { long n; pthread_mutex_t lock; } accounts[3]; the mutex a union of its own.
    let kind = member(&mut b, "__kind", 16, 4, None);
    let data = b.data_type(TypeShape::Record {
        members: vec![kind],
    });
    let inside = member(&mut b, "__data", 0, 40, Some(data));
    let mutex = b.data_type(TypeShape::Record {
        members: vec![inside],
    });
    let n = member(&mut b, "n", 0, 8, None);
    let lock = member(&mut b, "lock", 8, 40, Some(mutex));
    let account = b.data_type(TypeShape::Record {
        members: vec![n, lock],
    });
    let accounts = b.data_type(TypeShape::Array {
        element: Some(account),
        element_size: 48,
        count: Some(3),
    });
    let base = b.variable("accounts", "bank.c", 5, 144, Some(accounts));
    let t = Trace::from_bytes("locks", b.finish()).unwrap();
    let (v, offset) = t.tables.data_variable(base + 56).unwrap();
    assert_eq!(offset, 56);
    let at_start = element_path(&t.tables, v.ty, v.size, 56, 40, PathStop::AtStart);
    assert_eq!(at_start.name("accounts"), "accounts[1].lock");
    assert_eq!((at_start.start, at_start.size), (48 + 8, 40));
    // The object at the array's own address is its first element, not the array.
    let first = element_path(&t.tables, v.ty, v.size, 0, 1, PathStop::AtStart);
    assert_eq!(first.name("accounts"), "accounts[0]");
    assert_eq!((first.start, first.size), (0, 48));
    // What an access of the mutex's kind field touches, by contrast.
    assert_eq!(
        t.tables.data_symbol(base + 56 + 16, 4).unwrap().name,
        "accounts[1].lock.__data.__kind"
    );
}

fn header() -> Header {
    Header {
        producer: "data".into(),
        pid: 1,
        parent_pid: 0,
        command: vec![],
        start_unix_ns: 0,
        ordering: Ordering::Logical,
        pointer_width: 8,
        stack_depth: 1,
    }
}

fn trailer() -> Trailer {
    Trailer {
        end_unix_ns: 0,
        reason: EndReason::Synthetic,
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    }
}

fn file(records: &[TableRecord]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    for r in records {
        w.table(r).unwrap();
    }
    w.finish(trailer()).unwrap()
}

fn string(id: u32, text: &str) -> TableRecord {
    TableRecord::String(StringEntry {
        id,
        text: text.into(),
    })
}

fn module(id: u32, base: u64, size: u64) -> TableRecord {
    TableRecord::Module(ModuleInfo {
        id,
        path: 0,
        build_id: vec![],
        base,
        size,
    })
}

fn variable(module: u32, offset: u64, size: u64, name: u32, ty: Option<u32>) -> TableRecord {
    TableRecord::DataVariable(DataVariable {
        module,
        offset,
        size,
        name,
        file: None,
        line: 0,
        ty,
    })
}

#[test]
fn the_smallest_module_that_holds_an_address_is_its_module() {
    // A non-PIE executable is recorded with base 0 and a size up to the end of its image: a
    // library's range may sit inside no other module, or (a hostile or odd trace) inside it.
    let t = Trace::from_bytes(
        "modules",
        file(&[
            string(0, "m"),
            string(1, "in_exe"),
            string(2, "in_lib"),
            module(0, 0, 0x50_0000),
            module(1, 0x40_0000, 0x1000),
            variable(0, 0x40_0010, 8, 1, None),
            variable(1, 0x10, 8, 2, None),
            variable(0, 0x1000, 8, 1, None),
        ]),
    )
    .unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(t.tables.module_of(0x40_0010).unwrap().id, 1);
    assert_eq!(t.tables.data_symbol(0x40_0010, 4).unwrap().name, "in_lib");
    assert_eq!(t.tables.data_symbol(0x1004, 4).unwrap().name, "in_exe+0x4");
    assert!(t.tables.module_of(0x50_0000).is_none());
}

#[test]
fn hostile_layouts_end_and_name_what_they_can() {
    let cyclic = DataType {
        id: 0,
        shape: TypeShape::Array {
            element: Some(0),
            element_size: 8,
            count: None,
        },
    };
    let zero_stride = DataType {
        id: 1,
        shape: TypeShape::Array {
            element: Some(0),
            element_size: 0,
            count: Some(3),
        },
    };
    // A member larger than its record, and one naming a type no record defines.
    let oversized = DataType {
        id: 2,
        shape: TypeShape::Record {
            members: vec![
                DataMember {
                    name: Some(1),
                    offset: 0,
                    size: u64::MAX,
                    ty: None,
                },
                DataMember {
                    name: Some(1),
                    offset: 0,
                    size: 4,
                    ty: Some(77),
                },
            ],
        },
    };
    let t = Trace::from_bytes(
        "hostile",
        file(&[
            string(0, "v"),
            string(1, "m"),
            module(0, 0x1000, 0x10_0000),
            TableRecord::DataType(cyclic),
            TableRecord::DataType(zero_stride),
            TableRecord::DataType(oversized),
            // A second definition of type 2 is reported and ignored.
            TableRecord::DataType(DataType {
                id: 2,
                shape: TypeShape::Record { members: vec![] },
            }),
            variable(0, 0x100, 1 << 40, 0, Some(0)),
            variable(0, 0x10, 24, 0, Some(1)),
            variable(0, 0x40, 8, 0, Some(2)),
            // Overflowing ranges and a variable of no size.
            variable(0, u64::MAX - 4, 100, 0, None),
            variable(0, 0x50, 0, 0, None),
        ]),
    )
    .unwrap();
    assert!(
        t.problems.iter().any(|p| matches!(
            p.kind,
            ProblemKind::DuplicateRecord {
                what: "data type",
                id: 2
            }
        )),
        "{:?}",
        t.problems
    );
    // The cyclic array walks its bounded number of steps.
    let s = t.tables.data_symbol(0x1000 + 0x100, 1).unwrap();
    assert_eq!(s.name, format!("v{}", "[0]".repeat(64)));
    assert_eq!(
        t.tables.data_symbol(0x1000 + 0x10 + 9, 1).unwrap().name,
        "v+0x9"
    );
    assert_eq!(t.tables.data_symbol(0x1040 + 1, 1).unwrap().name, "v.m+0x1");
    assert!(t.tables.data_symbol(0x1050, 1).is_none());
    assert!(t.tables.data_symbol(u64::MAX, 8).is_none());
}

#[test]
fn a_reader_before_version_1_2_skips_the_data_records() {
    let records = [
        string(0, "counters"),
        module(0, 0x1000, 0x1000),
        TableRecord::DataType(DataType {
            id: 0,
            shape: TypeShape::Array {
                element: None,
                element_size: 4,
                count: Some(8),
            },
        }),
        variable(0, 0x10, 32, 0, Some(0)),
    ];
    let bytes = file(&records);
    let t = Trace::from_bytes("new", bytes.clone()).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(t.tables.data_symbol(0x101c, 4).unwrap().name, "counters[3]");

    // A 1.0 or 1.1 reader has no case for tags 8 and 9: it skips them by their length, as
    // this reader skips a tag no version defines. Give the records such tags and read again.
    let bytes = retag(bytes, &[(8, 240), (9, 241)]);
    let old = Trace::from_bytes("as-1.1", bytes).unwrap();
    assert!(old.problems.is_empty(), "{:?}", old.problems);
    assert!(old.tables.data_variables.is_empty() && old.tables.data_types.is_empty());
    assert_eq!(old.tables.strings, t.tables.strings);
    assert_eq!(old.tables.modules, t.tables.modules);
    assert!(old.tables.data_symbol(0x101c, 4).is_none());
}

/// The same file with the table records of tag `from` given tag `to`, walking the records by
/// their framing (§7.1), and the chunk checksums recomputed.
fn retag(mut bytes: Vec<u8>, map: &[(u8, u8)]) -> Vec<u8> {
    let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut pos = 20 + header_len;
    let mut seen = 0;
    while pos + 20 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let payload = pos + 20..pos + 20 + len;
        if bytes[pos + 4] == 2 {
            let mut r = payload.start;
            while r < payload.end {
                let tag = &mut bytes[r];
                if let Some(&(_, to)) = map.iter().find(|(from, _)| from == tag) {
                    *tag = to;
                    seen += 1;
                }
                let mut at = r + 1;
                let n = foresight_trace::varint::get(&bytes, &mut at).unwrap();
                r = at + n as usize;
            }
        }
        let crc = crc32fast::hash(&bytes[payload.clone()]);
        bytes[pos + 12..pos + 16].copy_from_slice(&crc.to_le_bytes());
        let head = crc32fast::hash(&bytes[pos..pos + 16]);
        bytes[pos + 16..pos + 20].copy_from_slice(&head.to_le_bytes());
        pos = payload.end;
    }
    assert!(seen > 0, "no record had a tag to change");
    bytes
}
