//! The race analysis and the walk's reads-from table stay within their memory budgets whatever
//! the trace: a small hostile trace of writes to distinct addresses (and accesses spanning
//! gigabytes) is analysed by `analyze`, `check` and `graph` under an address-space limit far
//! below what tracking every granule would take, and the report names what the budgets cut.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use foresight_fixtures::harness::{self, fresh_dir};
use foresight_trace::builder::TraceBuilder;
use foresight_trace::compress::CompressMode;

/// The address space each command runs in: the 4.5 GB that tracking every granule of the trace
/// below would ask for is far beyond it.
const ADDRESS_SPACE: u64 = 1536 << 20;

/// Writes to distinct granules, two threads side by side, then a read of 1 GiB and a write of
/// 4 GiB: compressed, a few kilobytes of trace.
fn hostile_trace() -> Vec<u8> {
    let mut b = TraceBuilder::new("hostile");
    b.compress(CompressMode::Auto);
    let main = b.main_thread();
    let s = b.site("main", "hostile.c", 1);
    let one = b.spawn(main, s, "one");
    let two = b.spawn(main, s, "two");
    let (w1, w2, huge) = (
        b.site("fill", "hostile.c", 7),
        b.site("fill", "hostile.c", 8),
        b.site("scan", "hostile.c", 9),
    );
    for i in 0..300_000u64 {
        b.write(one, 0x1000_0000 + i * 64, 8, w1);
        b.write(two, 0x1000_0000 + i * 64 + 8, 8, w2);
    }
    b.read(two, 0x7000_0000_0000, 1 << 30, huge);
    let whole = b.site("wipe", "hostile.c", 10);
    b.write(one, 0x6000_0000_0000, u32::MAX, whole);
    let s = b.site("main", "hostile.c", 30);
    b.join(main, one, s);
    b.join(main, two, s);
    b.finish()
}

/// `foresight ARGS` in `dir` under [`ADDRESS_SPACE`].
fn limited(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = harness::foresight_in(Path::new(env!("CARGO_BIN_EXE_foresight")), dir);
    cmd.args(args);
    // SAFETY: setrlimit is async-signal-safe; the closure runs in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            let r = libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    run(cmd)
}

fn run(mut cmd: Command) -> Output {
    cmd.output().expect("run foresight")
}

/// The SARIF written is valid SARIF 2.1.0, its notifications included.
fn assert_valid_sarif(v: &serde_json::Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sarif-schema-2.1.0.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the SARIF schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_trace_of_writes_to_distinct_addresses_stays_within_the_race_memory_budget() {
    let dir = fresh_dir("race-memory");
    let trace = hostile_trace();
    assert!(trace.len() < 256 << 10, "{} bytes", trace.len());
    std::fs::write(dir.join("hostile.trace"), &trace).unwrap();

    // A small budget: cut, and the report says what was not checked, where, and how to
    // check it.
    for format in ["text", "json", "sarif"] {
        let o = limited(
            &dir,
            &[
                "analyze",
                "--race-memory",
                "32",
                "--format",
                format,
                "hostile.trace",
            ],
        );
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{format}: {err}");
        assert!(
            out.contains("memory budget (32 MiB) was full")
                && out.contains("were not checked for races")
                && out.contains("hostile.c:7")
                && out.contains("--race-memory"),
            "{format}: {out}"
        );
        if format == "sarif" {
            assert!(out.contains("toolExecutionNotifications"), "{out}");
            assert_valid_sarif(&serde_json::from_str(&out).unwrap());
        }
        if format == "json" {
            // The narrow writes took the place of older ones (decision 0030): named by line,
            // none left unchecked; only the wide read and write were not checked.
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            let warnings: Vec<&str> = v["traces"][0]["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap())
                .collect();
            let gave_way = warnings
                .iter()
                .find(|w| w.contains("gave way to memory not tracked yet"))
                .unwrap_or_else(|| panic!("{warnings:?}"));
            assert!(
                gave_way.contains("hostile.c:7") && gave_way.contains("--race-memory"),
                "{gave_way}"
            );
            let unchecked = warnings
                .iter()
                .find(|w| w.contains("were not checked for races"))
                .unwrap_or_else(|| panic!("{warnings:?}"));
            assert!(
                unchecked.contains("hostile.c:9") && !unchecked.contains("hostile.c:7"),
                "{unchecked}"
            );
        }
    }

    // `check` the same way.
    let o = limited(&dir, &["check", "--race-memory", "32", "hostile.trace"]);
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stdout).contains("memory budget (32 MiB) was full"),
        "{}",
        text(&o.stdout)
    );

    // The default budget has room for the distinct writes: only the 1 GiB read and the 4 GiB
    // write are cut, and the reads-from table says it could not follow the write.
    let o = limited(&dir, &["analyze", "--format", "json", "hostile.trace"]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        out.contains("memory budget (512 MiB) was full") && out.contains("hostile.c:9"),
        "{out}"
    );
    assert!(
        out.contains("reads-from table's memory budget (256 MiB) was full: 1 writes"),
        "{out}"
    );
    assert!(!out.contains("hostile.c:7"), "{out}");

    // `graph` reports no race and runs no race analysis.
    let o = limited(&dir, &["graph", "hostile.trace"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with("digraph"),
        "{}",
        text(&o.stdout)
    );
}

/// Twelve locks, each thread taking every ordered pair of them: 28 KB of STD text whose
/// lock-order graph is complete, with over 10^8 elementary cycles.
fn dense_lock_order_std() -> String {
    let mut text = String::new();
    let threads = ["T0", "T1", "T2", "T3"];
    for t in threads {
        text += &format!("main|fork({t})|1\n");
    }
    for t in threads {
        for a in 0..12 {
            for b in (0..12).filter(|&b| b != a) {
                text += &format!("{t}|acq(L{a})|{a}\n{t}|acq(L{b})|{b}\n");
                text += &format!("{t}|rel(L{b})|{b}\n{t}|rel(L{a})|{a}\n");
            }
        }
    }
    text
}

#[test]
fn analyze_all_on_a_dense_lock_order_graph_stays_within_its_listing_cap() {
    let dir = fresh_dir("dense-all");
    std::fs::write(dir.join("dense.std"), dense_lock_order_std()).unwrap();
    for format in ["text", "json", "sarif"] {
        let o = limited(&dir, &["analyze", "--all", "--format", format, "dense.std"]);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{format}: {err}");
        // A thousand cycles of each verdict in the one component, not millions.
        assert!(out.len() < 8 << 20, "{format}: {} bytes", out.len());
        // JSON says it in `summary.listing_cap`, below; text and SARIF in words.
        assert!(
            format == "json"
                || out
                    .contains("--all lists at most 1000 lock cycles of each verdict per component"),
            "{format}: {}",
            &out[..out.len().min(4000)]
        );
        if format == "json" {
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["summary"]["listing_cap"], 1000);
            let listed = v["findings"].as_array().unwrap().len();
            assert!((1000..=2000).contains(&listed), "{listed} findings");
            assert!(v["summary"]["unlisted_potential"].as_u64().unwrap() > 100_000);
        }
        if format == "sarif" {
            assert_valid_sarif(&serde_json::from_str(&out).unwrap());
        }
    }
    // Without --all the few listed are not a cut of --all's listing.
    let o = limited(&dir, &["analyze", "--format", "json", "dense.std"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["summary"]["listing_cap"].is_null(), "{v}");
}

/// Two threads writing one word, ordered only through a lock's hand-off: a race candidate for
/// the sync-preserving predictor, which a budget of 0 leaves unchecked.
fn candidate_trace() -> Vec<u8> {
    let mut b = TraceBuilder::new("candidate");
    let main = b.main_thread();
    let s = b.site("main", "candidate.c", 1);
    let m = b.mutex("m");
    let (a, c) = (b.spawn(main, s, "a"), b.spawn(main, s, "c"));
    let (wa, wc, l) = (
        b.site("a", "candidate.c", 10),
        b.site("c", "candidate.c", 20),
        b.site("lock", "candidate.c", 5),
    );
    b.write(a, 0x4000, 4, wa);
    b.lock(a, m, l);
    b.unlock(a, m, l);
    b.lock(c, m, l);
    b.unlock(c, m, l);
    b.write(c, 0x4000, 4, wc);
    b.join(main, a, s);
    b.join(main, c, s);
    b.finish()
}

#[test]
fn the_race_candidate_budget_is_the_user_s_to_raise_and_the_report_says_so() {
    let dir = fresh_dir("race-candidate-budget");
    std::fs::write(dir.join("candidate.trace"), candidate_trace()).unwrap();
    let analyze = |extra: &[&str]| {
        let mut args = vec!["analyze", "--format", "json"];
        args.extend_from_slice(extra);
        args.push("candidate.trace");
        let o = limited(&dir, &args);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let checked = analyze(&[]);
    assert_eq!(
        checked["summary"]["race_budget_exhausted"], false,
        "{checked}"
    );
    assert!(checked["summary"]["race_candidates_checked"].as_u64() > Some(0));
    let cut = analyze(&["--race-candidate-budget", "0"]);
    assert_eq!(cut["summary"]["race_budget_exhausted"], true, "{cut}");
    let o = limited(
        &dir,
        &["analyze", "--race-candidate-budget", "0", "candidate.trace"],
    );
    let out = text(&o.stdout);
    assert!(
        out.contains("race candidate budget ran out") && out.contains("--race-candidate-budget"),
        "{out}"
    );
}
