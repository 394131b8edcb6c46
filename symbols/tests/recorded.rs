//! End to end: a program built with `foresight config` (`fixtures/instrumented/variables.c`),
//! with gcc and clang, recorded with `foresight record` (which symbolises the trace), and the
//! static data its accesses touched named in the trace: `counters[3]`, `cfg.limits.max`,
//! `bump::calls`, with their declarations. A compiler that is missing is a failure in CI and a
//! skip (said so) elsewhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use foresight_fixtures::harness::{self, Compiler};
use foresight_trace::{EventKind, Trace};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/instrumented/variables.c")
}

/// The lines marked `@name`, by name.
fn marks(source: &Path) -> BTreeMap<String, u32> {
    let text = std::fs::read_to_string(source).expect("read the fixture");
    let mut m = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(at) = line.find("/* @") {
            let name: String = line[at + 4..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            m.insert(name, i as u32 + 1);
        }
    }
    m
}

/// Whether a site's first frame is at `line` of the fixture.
fn site_at(trace: &Trace, site: u32, line: u32) -> bool {
    let t = &trace.tables;
    let Some(frame) = t.sites.get(&site).and_then(|s| s.frames.first()) else {
        return false;
    };
    t.symbols.get(frame).is_some_and(|s| {
        s.locations.iter().any(|l| {
            l.line == line
                && l.file
                    .and_then(|f| t.string(f))
                    .is_some_and(|f| f.ends_with("variables.c"))
        })
    })
}

/// The names `data_symbol` gives the reads, writes and atomics at `line`, with the
/// declaration's line.
fn names_at(trace: &Trace, line: u32) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for t in &trace.threads {
        for e in &t.events {
            let (addr, size, site) = match e.kind {
                EventKind::Read { addr, size, site }
                | EventKind::Write { addr, size, site }
                | EventKind::Atomic {
                    addr, size, site, ..
                } => (addr, size, site),
                _ => continue,
            };
            if site_at(trace, site, line) {
                let s = trace.tables.data_symbol(addr, size as u64);
                out.push(s.map_or(("(none)".into(), 0), |s| {
                    assert!(
                        s.file.is_some_and(|f| f.ends_with("variables.c")),
                        "{}: {:?}",
                        s.name,
                        s.file
                    );
                    (s.name, s.line)
                }));
            }
        }
    }
    out
}

#[test]
fn a_recorded_trace_names_the_static_data_its_accesses_touched() {
    let m = marks(&fixture());
    for c in Compiler::ALL {
        if !harness::compiler_available(c) {
            continue;
        }
        let exe = harness::compile_instrumented(&fixture(), c);
        let dir = harness::fresh_dir(&format!("variables-{}", c.name()));
        let trace = dir.join("run.trace");
        let out = harness::record_with_cli(&exe, &[], &trace, &[]);
        assert!(
            out.status.success(),
            "{}: {}",
            c.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        let t = harness::open_checked(&trace);
        for (line, name, decl) in [
            ("counters-3", "counters[3]", "decl-counters"),
            ("counters-5", "counters[5]", "decl-counters"),
            ("cfg-max", "cfg.limits.max", "decl-cfg"),
            ("calls", "bump::calls", "decl-calls"),
        ] {
            let got = names_at(&t, m[line]);
            assert!(!got.is_empty(), "{}: no access at @{line}", c.name());
            for (n, l) in &got {
                assert_eq!(
                    (n.as_str(), *l),
                    (name, m[decl]),
                    "{}: @{line}: {got:?}",
                    c.name()
                );
            }
        }
    }
}
