//! Measures race detection on annotated C programs — foresight, ThreadSanitizer and Helgrind on
//! the same programs — and prints one table. The programs carry their ground truth on their
//! lines as the Goblint regression suite does (`// RACE!` or `// RACE`: a race is expected at
//! the line; `// NORACE`: none), so this runs on `fixtures/race/` as well as on a checkout of
//! Goblint's `tests/regression` directories (04-mutex, 10-synch, 53-races-mhp, 86-barrier,
//! 87-once, …), which the repository does not carry.
//!
//! ```sh
//! cargo build --release --workspace
//! cargo run --release -p foresight-analyzer --example race_suite -- DIR_OR_FILE…
//! ```
//!
//! Each program is compiled three ways with gcc (`-g -O0`, plus a `goblint.h` whose checks do
//! nothing and a `__VERIFIER_nondet_int` that returns 0): with `foresight config`'s flags, and
//! recorded and analysed; with `-fsanitize=thread` and run; plain, under `valgrind
//! --tool=helgrind`. Each run is bounded (10 s; some of the programs hang by design). A tool
//! *finds* a `RACE` line when one of its race reports names the line, and *raises a false
//! alarm* when a report names a `NORACE` line. Lines that no run executed (per foresight's
//! trace) are left out of the counts of every tool: a dynamic tool cannot see them.
//! Programs that do not build or have no race annotation are counted apart, and so are those
//! that call `__goblint_assume_join`: their annotations hold under an assumption (this thread
//! has ended here) that their execution does not make, since nothing joins the thread; and
//! those run with Goblint's `--disable ana.race.volatile` or `--disable ana.race.free`, whose
//! `NORACE` lines are races on `volatile` memory or with a `free` that the option hides (C11
//! calls them data races all the same, and ThreadSanitizer reports them).
//!
//! Each tool runs each program `RACE_SUITE_RUNS` times (default 3) and what any run reports
//! counts: many of these programs do not join their threads, so a thread may not run at all
//! before the program exits, more or less often under each tool.
//!
//! Each program's line (on standard error) names the `RACE` lines a tool missed and the
//! `NORACE` lines it reported.
//!
//! Environment: `FORESIGHT` (default: `foresight` next to this example's directory), `CC`
//! (default `gcc`), `RACE_SUITE_TIMEOUT` (seconds, default 10), `RACE_SUITE_RUNS`,
//! `RACE_SUITE_TOOLS` (the tools to run, comma-separated: `foresight`, `tsan`, `helgrind`;
//! default all three), `RACE_SUITE_KEEP` (keep the work directory).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use foresight_fixtures::litmus::{Litmus, Verdict};

const SHIM_H: &str = "\
#ifndef GOBLINT_H
#define GOBLINT_H
#define __goblint_check(x) ((void)0)
#define __goblint_assert(x) ((void)0)
#define __goblint_assume(x) ((void)0)
#define __goblint_assume_join(x) ((void)0)
#define __goblint_split_begin(x) ((void)0)
#define __goblint_split_end(x) ((void)0)
#endif
";

const SHIM_C: &str = "int __VERIFIER_nondet_int(void) { return 0; }\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Tool {
    Foresight,
    ThreadSanitizer,
    Helgrind,
}

impl Tool {
    const ALL: [Tool; 3] = [Tool::Foresight, Tool::ThreadSanitizer, Tool::Helgrind];
    fn short_name(self) -> &'static str {
        match self {
            Tool::Foresight => "foresight",
            Tool::ThreadSanitizer => "tsan",
            Tool::Helgrind => "helgrind",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Tool::Foresight => "foresight",
            Tool::ThreadSanitizer => "ThreadSanitizer",
            Tool::Helgrind => "Helgrind",
        }
    }
}

/// What one tool said of one program.
#[derive(Default, Clone, Debug)]
struct Outcome {
    found: usize,
    missed: usize,
    false_alarms: usize,
    /// The program ran to completion (or to the bound) and the tool's output was read.
    ran: bool,
}

#[derive(Default, Clone, Debug)]
struct Totals {
    programs: usize,
    race_lines: usize,
    norace_lines: usize,
    per_tool: BTreeMap<Tool, Outcome>,
    /// Programs every one of whose lines each tool got right.
    all_right: BTreeMap<Tool, usize>,
}

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.is_empty() {
        eprintln!("usage: race_suite DIR_OR_FILE…  (C programs annotated // RACE! / // NORACE)");
        std::process::exit(2);
    }
    let foresight = std::env::var_os("FORESIGHT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().expect("this example's path");
            exe.parent()
                .and_then(Path::parent)
                .expect("the target directory")
                .join("foresight")
        });
    if !foresight.exists() {
        eprintln!(
            "race_suite: {} not found: run `cargo build --release --workspace` (or set FORESIGHT)",
            foresight.display()
        );
        std::process::exit(2);
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".to_string());
    let tools: Vec<Tool> = match std::env::var("RACE_SUITE_TOOLS") {
        Ok(names) => {
            let names: Vec<&str> = names.split(',').map(str::trim).collect();
            for n in &names {
                if !Tool::ALL.iter().any(|t| t.short_name() == *n) {
                    eprintln!("race_suite: RACE_SUITE_TOOLS: unknown tool {n:?} (foresight, tsan, helgrind)");
                    std::process::exit(2);
                }
            }
            Tool::ALL
                .into_iter()
                .filter(|t| names.contains(&t.short_name()))
                .collect()
        }
        Err(_) => Tool::ALL.to_vec(),
    };
    let runs: usize = std::env::var("RACE_SUITE_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let bound = Duration::from_secs(
        std::env::var("RACE_SUITE_TIMEOUT")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10),
    );
    let work = std::env::temp_dir().join(format!("race-suite-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("create the work directory");
    std::fs::write(work.join("goblint.h"), SHIM_H).expect("write the shim header");
    std::fs::write(work.join("shim.c"), SHIM_C).expect("write the shim");
    let config = |what: &str| -> Vec<String> {
        let out = Command::new(&foresight)
            .args(["config", "--cc", &cc, what])
            .output()
            .expect("run foresight config");
        assert!(out.status.success(), "foresight config {what} failed");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let (cflags, libs) = (config("--cflags"), config("--libs"));

    let mut groups: BTreeMap<String, Totals> = BTreeMap::new();
    let mut unbuilt: BTreeMap<String, usize> = BTreeMap::new();
    let mut unannotated: BTreeMap<String, usize> = BTreeMap::new();
    let mut assuming: BTreeMap<String, usize> = BTreeMap::new();
    let mut volatile_ignored: BTreeMap<String, usize> = BTreeMap::new();
    for source in sources(&args) {
        let group = source
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let litmus = match Litmus::read(&source) {
            Ok(l) => l,
            Err(_) => continue,
        };
        if litmus.lines(Verdict::Race).is_empty() && litmus.lines(Verdict::NoRace).is_empty() {
            *unannotated.entry(group).or_default() += 1;
            continue;
        }
        let text = std::fs::read_to_string(&source).unwrap_or_default();
        if text.contains("__goblint_assume_join(") {
            *assuming.entry(group).or_default() += 1;
            continue;
        }
        if text.contains("--disable ana.race.volatile") || text.contains("--disable ana.race.free")
        {
            *volatile_ignored.entry(group).or_default() += 1;
            continue;
        }
        let stem = source.file_stem().unwrap().to_string_lossy().into_owned();
        let dir = work.join(format!("{group}-{stem}"));
        std::fs::create_dir_all(&dir).unwrap();
        let build = |out: &str, extra: &[String], libs: &[String]| -> Option<PathBuf> {
            let exe = dir.join(out);
            let ok = Command::new(&cc)
                .args(["-g", "-O0", "-pthread", "-w", "-I"])
                .arg(&work)
                .args(extra)
                .arg(&source)
                .arg(work.join("shim.c"))
                .arg("-o")
                .arg(&exe)
                .args(libs)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(exe)
        };
        let tsan_flags = ["-fsanitize=thread".to_string()];
        let (Some(instrumented), Some(tsan), Some(plain)) = (
            build("foresight", &cflags, &libs),
            build("tsan", &tsan_flags, &[]),
            build("plain", &[], &[]),
        ) else {
            *unbuilt.entry(group).or_default() += 1;
            continue;
        };

        // Each tool gets the same number of runs, and what any of them reports counts: a
        // program that does not join its threads may exit before one runs.
        let mut reported: BTreeMap<Tool, Option<BTreeSet<u32>>> = BTreeMap::new();
        let mut executed: Option<BTreeSet<u32>> = None;
        let union = |acc: &mut Option<BTreeSet<u32>>, more: Option<BTreeSet<u32>>| {
            if let Some(m) = more {
                acc.get_or_insert_with(BTreeSet::new).extend(m);
            }
        };
        for run in 0..runs {
            let trace = dir.join(format!("run{run}.trace"));
            let mut record = Command::new(&foresight);
            record
                .arg("record")
                .arg("-o")
                .arg(&trace)
                .arg("--")
                .arg(&instrumented);
            let ran = run_bounded(record, bound).and_then(|_| {
                let dump = Command::new(&foresight)
                    .arg("dump")
                    .arg(&trace)
                    .output()
                    .ok()?;
                Some(lines_named(
                    &String::from_utf8_lossy(&dump.stdout),
                    litmus.file_name(),
                ))
            });
            // The trace says which lines ran even when foresight's findings are not asked for.
            let found = ran
                .as_ref()
                .filter(|_| tools.contains(&Tool::Foresight))
                .and_then(|_| foresight_lines(&foresight, &trace, litmus.file_name()));
            union(&mut executed, ran);
            union(reported.entry(Tool::Foresight).or_default(), found);
            if tools.contains(&Tool::ThreadSanitizer) {
                let mut t = Command::new(&tsan);
                t.env(
                    "TSAN_OPTIONS",
                    "halt_on_error=0 exitcode=0 report_signal_unsafe=0 history_size=7",
                );
                let found = run_bounded(t, bound)
                    .map(|o| report_lines(&String::from_utf8_lossy(&o.stderr), litmus.file_name()));
                union(reported.entry(Tool::ThreadSanitizer).or_default(), found);
            }
            if tools.contains(&Tool::Helgrind) {
                let mut h = Command::new("valgrind");
                h.args(["--tool=helgrind", "--error-limit=no"]).arg(&plain);
                let found = run_bounded(h, bound * 6)
                    .map(|o| report_lines(&String::from_utf8_lossy(&o.stderr), litmus.file_name()));
                union(reported.entry(Tool::Helgrind).or_default(), found);
            }
        }

        // Only lines some run executed count: what no run reaches, no dynamic tool can see.
        let executed = executed.unwrap_or_default();
        let races: BTreeSet<u32> = litmus
            .lines(Verdict::Race)
            .intersection(&executed)
            .copied()
            .collect();
        let quiet: BTreeSet<u32> = litmus
            .lines(Verdict::NoRace)
            .intersection(&executed)
            .copied()
            .collect();
        let totals = groups.entry(group).or_default();
        totals.programs += 1;
        totals.race_lines += races.len();
        totals.norace_lines += quiet.len();
        let mut line = format!("{stem:48}");
        for &tool in &tools {
            let o = totals.per_tool.entry(tool).or_default();
            match reported.get(&tool).and_then(Option::as_ref) {
                Some(lines) => {
                    let found = races.intersection(lines).count();
                    let missed_lines: Vec<u32> = races.difference(lines).copied().collect();
                    let alarm_lines: Vec<u32> = quiet.intersection(lines).copied().collect();
                    let (missed, alarms) = (missed_lines.len(), alarm_lines.len());
                    o.found += found;
                    o.missed += missed;
                    o.false_alarms += alarms;
                    o.ran = true;
                    if missed == 0 && alarms == 0 {
                        *totals.all_right.entry(tool).or_default() += 1;
                    }
                    line.push_str(&format!(
                        " {}: {found}/{} found{}, {alarms} false{}",
                        tool.name(),
                        races.len(),
                        listed(" missing", &missed_lines),
                        listed(" at", &alarm_lines),
                    ));
                }
                None => line.push_str(&format!(" {}: did not run", tool.name())),
            }
        }
        eprintln!("{line}");
    }

    println!(
        "\n| suite | programs | RACE lines | NORACE lines | tool | RACE lines found | \
         false alarms (NORACE lines) | programs all right |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut all = Totals::default();
    for (group, t) in &groups {
        for &tool in &tools {
            let o = t.per_tool.get(&tool).cloned().unwrap_or_default();
            println!(
                "| {group} | {} | {} | {} | {} | {} | {} | {} |",
                t.programs,
                t.race_lines,
                t.norace_lines,
                tool.name(),
                o.found,
                o.false_alarms,
                t.all_right.get(&tool).copied().unwrap_or(0)
            );
            let a = all.per_tool.entry(tool).or_default();
            a.found += o.found;
            a.missed += o.missed;
            a.false_alarms += o.false_alarms;
            *all.all_right.entry(tool).or_default() += t.all_right.get(&tool).copied().unwrap_or(0);
        }
        all.programs += t.programs;
        all.race_lines += t.race_lines;
        all.norace_lines += t.norace_lines;
    }
    for &tool in &tools {
        let o = all.per_tool.get(&tool).cloned().unwrap_or_default();
        println!(
            "| all | {} | {} | {} | {} | {} | {} | {} |",
            all.programs,
            all.race_lines,
            all.norace_lines,
            tool.name(),
            o.found,
            o.false_alarms,
            all.all_right.get(&tool).copied().unwrap_or(0)
        );
    }
    let skipped = |m: &BTreeMap<String, usize>| -> String {
        m.iter()
            .map(|(g, n)| format!("{g}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "\nnot built (kernel headers, no main, …): {}",
        skipped(&unbuilt)
    );
    println!("no race annotation: {}", skipped(&unannotated));
    println!(
        "annotations that assume a join the program does not make: {}",
        skipped(&assuming)
    );
    println!(
        "annotations that ignore races on volatile memory or with a free: {}",
        skipped(&volatile_ignored)
    );
    if std::env::var_os("RACE_SUITE_KEEP").is_some() {
        eprintln!("race_suite: work files are in {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
}

/// ` (line 12, 40)` after `what`, or nothing for no lines.
fn listed(what: &str, lines: &[u32]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = lines.iter().map(u32::to_string).collect();
    format!(" ({what} {})", lines.join(", ")).replacen("( ", "(", 1)
}

/// The C files given, and those in the directories given, in order.
fn sources(args: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for a in args {
        if a.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(a)
                .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
                .unwrap_or_default();
            files.retain(|p| p.extension().is_some_and(|e| e == "c"));
            files.sort();
            out.extend(files);
        } else {
            out.push(a.clone());
        }
    }
    out
}

/// Runs `cmd` with its output captured; kills it after `bound`. `None` if it could not start.
fn run_bounded(mut cmd: Command, bound: Duration) -> Option<Output> {
    // A process group of its own, so that the bound kills what it started too (a recorded
    // program outlives a killed `foresight record`, and would hold the pipes open).
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .ok()?;
    let start = Instant::now();
    // Drain the pipes on threads so that a chatty program never blocks on a full pipe.
    let mut out = child.stdout.take()?;
    let mut err = child.stderr.take()?;
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out, &mut v);
        v
    });
    let e = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut v);
        v
    });
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break s;
        }
        if start.elapsed() > bound {
            // SAFETY: kill(2) with a negated pid signals the process group the child leads;
            // it touches no memory of ours.
            unsafe {
                libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
            }
            break child.wait().ok()?;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Some(Output {
        status,
        stdout: o.join().unwrap_or_default(),
        stderr: e.join().unwrap_or_default(),
    })
}

/// Lines of `file` that `foresight analyze` names in race findings.
fn foresight_lines(foresight: &Path, trace: &Path, file: &str) -> Option<BTreeSet<u32>> {
    let out = Command::new(foresight)
        .args(["analyze", "--format", "json"])
        .arg(trace)
        .output()
        .ok()?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let mut lines = BTreeSet::new();
    for f in report["findings"].as_array()? {
        if f["kind"] != "race" {
            continue;
        }
        for l in f["locations"].as_array()? {
            let named = l["file"].as_str().unwrap_or_default();
            if Path::new(named).file_name().and_then(|n| n.to_str()) == Some(file) {
                if let Some(n) = l["line"].as_u64() {
                    lines.insert(n as u32);
                }
            }
        }
    }
    Some(lines)
}

/// Lines of `file` named anywhere in a text as `file:N` (a dump's sites).
fn lines_named(text: &str, file: &str) -> BTreeSet<u32> {
    let needle = format!("{file}:");
    let mut lines = BTreeSet::new();
    for l in text.lines() {
        let mut rest = l;
        while let Some(i) = rest.find(&needle) {
            rest = &rest[i + needle.len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(n) = digits.parse() {
                lines.insert(n);
            }
        }
    }
    lines
}

/// Lines of `file` that race reports of ThreadSanitizer or Helgrind name: for each access of
/// a report, the first frame in `file`.
fn report_lines(stderr: &str, file: &str) -> BTreeSet<u32> {
    let mut lines = BTreeSet::new();
    let mut in_race = false;
    let mut want_frame = false;
    for l in stderr.lines() {
        let t = l
            .trim_start_matches(|c: char| c == '=' || c.is_ascii_digit())
            .trim();
        // ThreadSanitizer: "WARNING: ThreadSanitizer: data race"; an access: "Write of size 4
        // at … by thread T1:" / "Previous read of size 4 …"; frames "#0 f file.c:12:5 (…)".
        // Helgrind: "Possible data race during write of size 4 at …", "This conflicts with a
        // previous read …"; frames "at 0x…: f (file.c:12)" / "by 0x…: …".
        if t.starts_with("WARNING: ThreadSanitizer: data race")
            || t.starts_with("Possible data race")
        {
            in_race = true;
            want_frame = true;
            continue;
        }
        if t.starts_with("WARNING: ThreadSanitizer:") || t.starts_with("SUMMARY:") {
            in_race = false;
            continue;
        }
        if !in_race {
            continue;
        }
        let access = [
            "Write of size",
            "Read of size",
            "Previous write",
            "Previous read",
            "Atomic",
        ]
        .iter()
        .any(|p| t.starts_with(p))
            || t.starts_with("This conflicts with a previous");
        if access {
            want_frame = true;
            continue;
        }
        if want_frame && (t.starts_with('#') || t.starts_with("at 0x") || t.starts_with("by 0x")) {
            if let Some(n) = first_line_of(t, file) {
                lines.insert(n);
                want_frame = false;
            }
        }
        if t.starts_with("Address 0x") || t.starts_with("Location is") {
            want_frame = false;
        }
    }
    lines
}

fn first_line_of(frame: &str, file: &str) -> Option<u32> {
    let needle = format!("{file}:");
    let i = frame.find(&needle)?;
    let digits: String = frame[i + needle.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}
