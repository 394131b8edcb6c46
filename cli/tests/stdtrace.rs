//! RAPID's STD text format: import, export, round trips, errors that name the line, `analyze`
//! and `--only hb-races` on STD files, and `synth`'s planted findings found where planted.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use foresight_trace::builder::TraceBuilder;
use foresight_trace::tables::ObjectKind;
use foresight_trace::EventKind;

fn foresight(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run foresight")
}

fn ok(args: &[&str]) -> Output {
    let out = foresight(args);
    assert!(
        out.status.success(),
        "foresight {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("foresight-std-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `foresight analyze --only hb-races --format json FILE`, parsed.
fn hb_races_json(file: &Path) -> serde_json::Value {
    let out = ok(&["analyze", "--only", "hb-races", "--format", "json", s(file)]);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every operation STD has, names of every form, a re-entrant lock, nested and unmatched
/// regions, a request that waits while another thread runs, a thread blocked at the end on
/// a request, a thread never joined, and a blank line.
const EVERY_OP: &str = "\
main|fork(T1)|Main.java:10
main|fork(worker-2)|Main.main(Main.java:11)
T1|begin|Atomic.java:5
T1|acq(lock.a)|Account.java:67
T1|acq(lock.a)|Account.java:68
worker-2|r(x)|7
T1|w(x)|bank.Account.deposit(Account.java:70)
T1|rel(lock.a)|Account.java:71
worker-2|req(lock.a)|8
T1|w(arr[3])|9
T1|rel(lock.a)|Account.java:72
worker-2|acq(lock.a)|8
T1|end|Atomic.java:6
worker-2|begin|20
worker-2|begin|21
worker-2|rel(lock.a)|22
worker-2|end|23

main|join(T1)|Main.java:30
main|r(arr[3])|Main.java:31
worker-2|acq(m)|40
main|req(m)|41
";

#[test]
fn import_then_export_gives_the_same_text() {
    let d = Dir::new("roundtrip");
    let std_in = d.path("in.std");
    std::fs::write(&std_in, EVERY_OP).unwrap();
    let trace = d.path("t.trace");
    let out = ok(&["import", "--from", "std", s(&std_in), "-o", s(&trace)]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("imported 22 lines"), "{said}");
    let back = d.path("back.std");
    let out = ok(&[
        "export",
        "--to",
        "std",
        "--requests",
        s(&trace),
        "-o",
        s(&back),
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains("left out"), "{said}");
    let want: String = EVERY_OP
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(std::fs::read_to_string(&back).unwrap(), want);

    // Without --requests: RAPID's dialect, whose readers know no `req`; the request never
    // granted is counted as left out.
    let out = ok(&["export", s(&trace), "-o", s(&back)]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("lock-request (never granted) 1"), "{said}");
    let text = std::fs::read_to_string(&back).unwrap();
    assert!(!text.contains("|req("), "{text}");
    assert_eq!(text.lines().count(), want.lines().count() - 2);

    // The trace itself reads clean, and its threads and locks carry the STD names.
    let out = ok(&["stats", s(&trace)]);
    let stats = String::from_utf8_lossy(&out.stdout);
    assert!(stats.contains("lock.a"), "{stats}");
    assert!(!stats.to_lowercase().contains("problem"), "{stats}");
}

#[test]
fn synth_text_and_trace_are_the_same_events_and_survive_a_round_trip() {
    let d = Dir::new("synth");
    let (text, trace) = (d.path("s.std"), d.path("s.trace"));
    let common = [
        "synth",
        "--events",
        "20000",
        "--threads",
        "3",
        "--depth",
        "3",
        "--seed",
        "7",
    ];
    ok(&[&common[..], &["--to", "std", "-o", s(&text)]].concat());
    ok(&[&common[..], &["-o", s(&trace)]].concat());
    let (a, b) = (d.path("a.std"), d.path("b.std"));
    ok(&["export", s(&trace), "-o", s(&a)]);
    let imported = d.path("i.trace");
    ok(&["import", s(&text), "-o", s(&imported)]);
    ok(&["export", s(&imported), "-o", s(&b)]);
    let original = std::fs::read_to_string(&text).unwrap();
    assert_eq!(std::fs::read_to_string(&a).unwrap(), original);
    assert_eq!(std::fs::read_to_string(&b).unwrap(), original);
    // Locations are numbers (RAPID's reader needs them so), and nesting goes three deep.
    for line in original.lines() {
        let loc = line.rsplit('|').next().unwrap();
        assert!(loc.bytes().all(|b| b.is_ascii_digit()), "{line}");
    }
}

#[test]
fn malformed_text_is_an_error_naming_the_line() {
    let d = Dir::new("errors");
    let cases: &[(&str, &str)] = &[
        (
            "T1|acq(l)|1\nT1|lock(l)|2\n",
            "line 2, column 4: unknown operation `lock`",
        ),
        (
            "T1|acq(l)|1\n\nT1 acq(l) 1\n",
            "line 3, column 12: no `|` after the thread",
        ),
        (
            "T1|acq(l)|1\nT1|w(x)|2|3\n",
            "line 2, column 10: a fourth field",
        ),
        (
            "T1|acq(l)|1\nT2|acq(l)|2\n",
            "line 2: T2 acquires l, which T1 holds (since line 1)",
        ),
        (
            "T1|rel(l)|1\n",
            "line 1: T1 releases l, which it does not hold",
        ),
        (
            "T1|fork(T2)|1\nT1|fork(T2)|2\n",
            "line 2: T2 is forked a second time",
        ),
        (
            "T1|join(T2)|1\nT2|w(x)|2\n",
            "line 2: T2 runs after it was joined (line 1)",
        ),
        ("T1|req(l)|1\nT1|w(x)|2\n", "line 2: T1 is waiting for l"),
        ("T1|w(x\u{0})|1\nT1|w(\u{ff}x)|2\n", ""),
    ];
    for (i, &(text, want)) in cases.iter().enumerate() {
        let input = d.path(&format!("bad{i}.std"));
        let mut bytes = text.as_bytes().to_vec();
        if want.is_empty() {
            // Not UTF-8: a name with the byte 0xFF.
            bytes = b"T1|w(x)|1\nT1|w(\xffx)|2\n".to_vec();
        }
        std::fs::write(&input, &bytes).unwrap();
        let trace = d.path(&format!("bad{i}.trace"));
        let out = foresight(&["import", s(&input), "-o", s(&trace)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {err}");
        let want = if want.is_empty() {
            "line 2: the variable name is not UTF-8"
        } else {
            want
        };
        assert!(err.contains(want), "{text:?}: want {want:?}, got {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!trace.exists(), "a failed import leaves no trace behind");
        // `analyze` of the same file says the same.
        let out = foresight(&["analyze", s(&input)]);
        let err2 = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err2}");
        assert!(err2.contains(want), "{err2}");
    }
}

/// The ground truth `synth --truth` writes.
fn truth(path: &Path) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v["planted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["kind"].as_str().unwrap().to_string(),
                p["target"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn analyze_finds_what_synth_planted_and_nothing_else() {
    let d = Dir::new("planted");
    let (text, t) = (d.path("p.std"), d.path("p.json"));
    ok(&[
        "synth",
        "--events",
        "300000",
        "--threads",
        "6",
        "--locks",
        "12",
        "--depth",
        "3",
        "--variables",
        "40",
        "--races",
        "3",
        "--predictable-races",
        "2",
        "--deadlocks",
        "2",
        "--seed",
        "11",
        "--to",
        "std",
        "-o",
        s(&text),
        "--truth",
        s(&t),
    ]);
    let mut want: Vec<(String, String)> = truth(&t);
    want.sort();
    assert_eq!(want.len(), 7);

    let out = ok(&["analyze", "--format", "json", s(&text)]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut got: Vec<(String, String)> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(
            |f| match (f["kind"].as_str().unwrap(), f["rule"].as_str().unwrap()) {
                ("race", rule) => {
                    let kind = if rule == "happens-before" {
                        "race"
                    } else {
                        "predictable-race"
                    };
                    let var = f["race"]["variable"]["name"].as_str().unwrap().to_string();
                    (kind.to_string(), var)
                }
                ("deadlock", _) => {
                    let mut locks: Vec<String> = f["cycle"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| {
                            c.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| c["name"].as_str().unwrap().to_string())
                        })
                        .collect();
                    locks.sort();
                    locks.dedup();
                    ("deadlock".to_string(), locks.join(" "))
                }
                (kind, rule) => (kind.to_string(), rule.to_string()),
            },
        )
        .collect();
    got.sort();
    assert_eq!(got, want);

    // The happens-before pass on the text finds the happens-before ones, at the planted lines.
    let r = hb_races_json(&text);
    let races = r["traces"][0]["races"].as_array().unwrap();
    let mut vars: Vec<&str> = races
        .iter()
        .map(|x| x["variable"].as_str().unwrap())
        .collect();
    vars.sort();
    let hb: Vec<&str> = want
        .iter()
        .filter(|(k, _)| k == "race")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(vars, hb);
    assert_eq!(r["traces"][0]["racy_events"], 3);
}

#[test]
fn hb_races_on_text_agree_with_analyze_on_a_racy_trace() {
    // Unprotected accesses everywhere: many races of every kind, read-shared states included;
    // with three threads, and with more than fit in the narrowest vector clocks (eight
    // entries), forked after others have run.
    let d = Dir::new("racy");
    let many: Vec<String> = (0..11).map(|k| format!("T{k}")).collect();
    let few = vec!["A".to_string(), "B".into(), "C".into()];
    for (case, threads) in [few, many].into_iter().enumerate() {
        let text = d.path(&format!("r{case}.std"));
        let mut lines: Vec<String> = threads[..3]
            .iter()
            .map(|t| format!("main|fork({t})|1"))
            .collect();
        let mut x = 12345u64;
        let mut forked = 3;
        for i in 0..3000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if forked < threads.len() && i % 200 == 199 {
                lines.push(format!("main|fork({})|1", threads[forked]));
                forked += 1;
            }
            let t = &threads[(x >> 56) as usize % forked];
            let var = (x >> 40) % 5;
            let op = if (x >> 33) % 3 == 0 { "w" } else { "r" };
            if (x >> 20) % 7 == 0 {
                lines.push(format!("{t}|acq(m)|{}", 100));
                lines.push(format!("{t}|{op}(v{var})|{}", 200 + var));
                lines.push(format!("{t}|rel(m)|{}", 101));
            } else {
                lines.push(format!("{t}|{op}(v{var})|{}", 300 + 10 * var + (i % 3)));
            }
        }
        for t in &threads[..forked] {
            lines.push(format!("main|join({t})|2"));
        }
        std::fs::write(&text, lines.join("\n")).unwrap();
        let r = hb_races_json(&text);
        assert_eq!(r["traces"][0]["threads"], forked + 1, "case {case}");
        let mut text_vars: Vec<String> = r["traces"][0]["races"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["variable"].as_str().unwrap().to_string())
            .collect();
        text_vars.sort();
        text_vars.dedup();
        assert!(text_vars.len() >= 4, "case {case}: {text_vars:?}");
        let out = ok(&["analyze", "--format", "json", s(&text)]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut vars: Vec<String> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "race" && f["rule"] == "happens-before")
            .map(|f| f["race"]["variable"]["name"].as_str().unwrap().to_string())
            .collect();
        vars.sort();
        vars.dedup();
        assert_eq!(vars, text_vars, "case {case}");
    }
}

#[test]
fn hb_races_count_racy_events_as_rapid_does_and_keep_racy_reads() {
    // (trace, racy events, location pairs). The first: a read survives a later write, and a
    // second write in the same epoch is checked against it again (RAPID's HBEpoch counts 2).
    // The second: B's read races with A's write; C's write is ordered after A's (lock m) but
    // not after B's read. HBEpoch drops a read that races and counts 1; the race of B's read
    // with C's write is real, and counted.
    let cases = [
        (
            "main|fork(A)|9\nmain|fork(B)|9\nB|r(x)|1\nA|w(x)|2\nA|w(x)|3\n",
            2,
            2,
        ),
        (
            "main|fork(A)|9\nmain|fork(B)|9\nmain|fork(C)|9\nA|w(x)|1\nB|r(x)|2\n\
             A|acq(m)|3\nA|rel(m)|3\nC|acq(m)|4\nC|rel(m)|4\nC|w(x)|5\n",
            2,
            2,
        ),
    ];
    let d = Dir::new("rapid-counts");
    for (i, (text, events, pairs)) in cases.into_iter().enumerate() {
        let path = d.path(&format!("t{i}.std"));
        std::fs::write(&path, text).unwrap();
        let r = hb_races_json(&path);
        assert_eq!(r["traces"][0]["racy_events"], events, "case {i}");
        assert_eq!(
            r["traces"][0]["races"].as_array().unwrap().len(),
            pairs,
            "case {i}"
        );
    }
}

#[test]
fn hb_races_keep_what_clocks_hold_when_threads_outgrow_them() {
    // Seven threads write `x` in turn under lock `m` (all ordered); then two more are forked,
    // more threads than the narrowest clocks hold (eight entries), and write `x` under `m`
    // too, then `y` without it: the only race. Clocks widened without what they held would
    // make the later writes of `x` race with the earlier ones.
    let mut lines: Vec<String> = Vec::new();
    for k in 0..7 {
        lines.push(format!("main|fork(T{k})|1"));
        lines.push(format!("T{k}|acq(m)|2"));
        lines.push(format!("T{k}|w(x)|3"));
        lines.push(format!("T{k}|rel(m)|4"));
    }
    for k in 7..9 {
        lines.push(format!("main|fork(T{k})|1"));
        lines.push(format!("T{k}|acq(m)|2"));
        lines.push(format!("T{k}|w(x)|3"));
        lines.push(format!("T{k}|rel(m)|4"));
        lines.push(format!("T{k}|w(y)|{}", 10 + k));
    }
    let d = Dir::new("wide-clocks");
    let path = d.path("w.std");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let r = hb_races_json(&path);
    let t = &r["traces"][0];
    assert_eq!(t["threads"], 10);
    assert_eq!(t["racy_events"], 1, "{t}");
    let races = t["races"].as_array().unwrap();
    assert_eq!(races.len(), 1, "{t}");
    assert_eq!(races[0]["variable"], "y");
}

#[test]
fn export_counts_what_std_cannot_express() {
    let mut b = TraceBuilder::new("export");
    let main = b.main_thread();
    let site = b.site("main", "x.c", 3);
    let child = b.spawn(main, site, "child");
    let m = b.mutex("m");
    let rw = b.object(ObjectKind::RwLock, "rw");
    let bar = b.object(ObjectKind::Barrier, "bar");
    b.lock(main, m, site);
    b.event(
        main,
        EventKind::CondWaitBegin {
            cond: bar,
            mutex: m,
            site,
        },
    );
    b.event(
        main,
        EventKind::CondWaitEnd {
            cond: bar,
            mutex: m,
            outcome: foresight_trace::event::WaitOutcome::Woken,
        },
    );
    b.unlock(main, m, site);
    b.lock_mode(child, rw, foresight_trace::LockMode::Shared, site);
    b.unlock(child, rw, site);
    b.event(
        child,
        EventKind::BarrierWaitBegin {
            barrier: bar,
            site,
            generation: None,
        },
    );
    b.write(child, 0x9000, 4, site);
    b.exit(child);
    b.join(main, child, site);
    let d = Dir::new("export");
    let trace = d.path("b.trace");
    std::fs::write(&trace, b.finish()).unwrap();
    let text = d.path("b.std");
    let out = ok(&["export", s(&trace), "-o", s(&text)]);
    let said = String::from_utf8_lossy(&out.stderr);
    for want in [
        "barrier-arrive 1",
        "cond-wait (the hand-off) 1",
        "lock-acquired (shared) 1",
        "lock-release (shared) 1",
    ] {
        assert!(said.contains(want), "{want}: {said}");
    }
    let got = std::fs::read_to_string(&text).unwrap();
    assert!(got.contains("|fork(child)|"), "{got}");
    assert!(got.contains("|acq(m)|"), "{got}");
    assert!(got.contains("child|w("), "{got}");
    assert!(got.contains("|join(child)|"), "{got}");
    // The exported text imports again.
    ok(&["import", s(&text), "-o", s(&d.path("again.trace"))]);
    // As numbers for RAPID.
    ok(&["export", "--numeric-locations", s(&trace), "-o", s(&text)]);
    for line in std::fs::read_to_string(&text).unwrap().lines() {
        let loc = line.rsplit('|').next().unwrap();
        assert!(
            !loc.is_empty() && loc.bytes().all(|b| b.is_ascii_digit()),
            "{line}"
        );
    }
}

/// Pairs of threads run one after another (forked, then joined), each writing `x` at line 1
/// and line 2 on either side of a hand-off of `m`. In a `blocked` pair the second thread
/// reads, inside its section, what the first wrote inside its own after line 1: every
/// reordering keeps that writer first, so line 1's write too, and the instance is not a race.
/// In the other pairs nothing the second thread does needs the first: a sync-preserving race.
fn handoff_pairs(kinds: &[bool]) -> String {
    let mut text = String::new();
    for (i, &blocked) in kinds.iter().enumerate() {
        let (a, b) = (format!("A{i}"), format!("B{i}"));
        text += &format!("main|fork({a})|9\nmain|fork({b})|9\n{a}|w(x)|1\n{a}|acq(m)|3\n");
        if blocked {
            text += &format!("{a}|w(y)|4\n");
        }
        text += &format!("{a}|rel(m)|3\n{b}|acq(m)|5\n");
        if blocked {
            text += &format!("{b}|r(y)|6\n");
        }
        text += &format!("{b}|rel(m)|5\n{b}|w(x)|2\nmain|join({a})|9\nmain|join({b})|9\n");
    }
    text
}

#[test]
fn a_race_only_a_late_instance_shows_is_predicted_and_an_unchecked_one_is_said() {
    let d = Dir::new("late-instance");
    // (pairs, races predicted, pairs of lines left with instances unchecked)
    let late: Vec<bool> = (0..20).map(|_| true).chain([false]).collect();
    let middle: Vec<bool> = (0..10)
        .map(|_| true)
        .chain([false])
        .chain((0..20).map(|_| true))
        .collect();
    let all_blocked: Vec<bool> = (0..30).map(|_| true).collect();
    for (name, kinds, races, capped) in [
        ("late", late, 1, 0),
        ("middle", middle, 0, 1),
        ("blocked", all_blocked, 0, 1),
    ] {
        let path = d.path(&format!("{name}.std"));
        std::fs::write(&path, handoff_pairs(&kinds)).unwrap();
        let out = ok(&["analyze", "--format", "json", s(&path)]);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let found: Vec<&serde_json::Value> = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "race")
            .collect();
        assert_eq!(found.len(), races, "{name}: {found:?}");
        for f in &found {
            assert_eq!(f["verdict"], "predicted", "{name}");
            assert_eq!(f["rule"], "sync-preserving", "{name}");
        }
        assert_eq!(r["summary"]["race_pairs_capped"], capped, "{name}");
        let text = ok(&["analyze", s(&path)]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert_eq!(
            text.contains("more candidate instances than the predictor checks"),
            capped > 0,
            "{name}: {text}"
        );
    }
}

/// A lock inversion at sites that have a file and line but no function (as a Rust
/// `#[track_caller]` location is): the baseline names each by `file:line` alone, and a
/// baseline written before, with `?@file:line`, still accepts it.
#[test]
fn a_baseline_names_a_site_without_a_function_by_its_file_and_line() {
    let d = Dir::new("baseline-no-function");
    let trace = d.path("bank.std");
    std::fs::write(
        &trace,
        "main|fork(T1)|bank.rs:10\n\
         main|acq(accounts)|bank.rs:31\nmain|acq(ledger)|bank.rs:32\n\
         main|rel(ledger)|bank.rs:33\nmain|rel(accounts)|bank.rs:34\n\
         T1|acq(ledger)|bank.rs:39\nT1|acq(accounts)|bank.rs:40\n\
         T1|rel(accounts)|bank.rs:41\nT1|rel(ledger)|bank.rs:42\n\
         main|join(T1)|bank.rs:50\n",
    )
    .unwrap();
    let baseline = d.path("baseline.txt");
    ok(&[
        "check",
        "--update-baseline",
        "--baseline",
        s(&baseline),
        s(&trace),
    ]);
    let written = std::fs::read_to_string(&baseline).unwrap();
    let line = written
        .lines()
        .find(|l| l.starts_with("lock-cycle"))
        .unwrap_or_else(|| panic!("no lock-cycle line:\n{written}"));
    assert!(
        line.ends_with(
            "| holds bank.rs:31, holds bank.rs:39, requests bank.rs:32, requests bank.rs:40"
        ),
        "{line}"
    );
    ok(&["check", "--baseline", s(&baseline), s(&trace)]);

    // The line as baselines wrote it before: the same key.
    let old = d.path("old.txt");
    std::fs::write(&old, written.replace(" bank.rs:", " ?@bank.rs:")).unwrap();
    assert!(std::fs::read_to_string(&old)
        .unwrap()
        .contains("holds ?@bank.rs:31"));
    ok(&["check", "--baseline", s(&old), s(&trace)]);

    // And a baseline of other lines does not accept it: the check above could fail.
    let other = d.path("other.txt");
    std::fs::write(&other, written.replace("bank.rs:40", "bank.rs:41")).unwrap();
    let out = foresight(&["check", "--baseline", s(&other), s(&trace)]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
