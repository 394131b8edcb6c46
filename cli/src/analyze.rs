//! `foresight analyze`: predicted and potential deadlocks over one or more traces.

use anyhow::Context;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

use foresight_trace::event::EventKind;
use foresight_trace::Problem;
use foresight_trace::{ThreadId, TraceStream};

use foresight_analyzer::analysis::analyze;
use foresight_analyzer::analysis::SegmentFold;
use foresight_analyzer::merge::{Merger, TraceAnalysis};
use foresight_analyzer::model::{
    ModelPass, MonitorScan, Run, SegmentBounds, ThreadModel, DEFAULT_SEGMENT_EVENTS,
    DEFAULT_SEGMENT_THREADS,
};
use foresight_analyzer::options::{Options, ALL_CYCLES_LISTED};
use foresight_analyzer::races::{DataAccess, DataNames, PageOrderPass, Variable};
use foresight_analyzer::report::{self, Report};
use foresight_analyzer::sites::Wrappers;
use foresight_analyzer::stream::{Runs, Stream};
use foresight_analyzer::suppressions::Suppressions;

use super::output::{ignore_broken_pipe, warn_problems};
use super::run_files::{expand, Input};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    /// SARIF 2.1.0, for code-scanning services.
    Sarif,
}

#[derive(clap::Args)]
pub struct Args {
    /// The trace files (a run's root trace brings its children's, a pack its members); their
    /// lock-order graphs are merged (lock classes match by name), races are per process.
    #[arg(required_unless_present = "explain")]
    traces: Vec<PathBuf>,
    /// Say why a rule reports what it does, with an example, and exit: a rule
    /// (`sync-reversal`) or a kind of finding (`wait-deadlock`, `race`: each of its rules).
    #[arg(long, value_name = "RULE", conflicts_with = "traces")]
    explain: Option<String>,
    /// The report's form: `text` for people, `json` for scripts (docs/report-schema.md),
    /// `sarif` (SARIF 2.1.0) for code-scanning services (docs/ci.md).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    source_root: SourceRootArg,
    /// Text: show every frame of a site and every call inlined in it, the standard library's
    /// and the wrappers' included (JSON always has them, as `full_stack`).
    #[arg(long)]
    full_stacks: bool,
    /// Run one analysis alone.
    ///
    /// `hb-races`: the happens-before races of STD text files, read straight from the text in
    /// one pass (the analysis RAPID's HBEpoch runs, and its counts).
    #[arg(long, value_enum, value_name = "ANALYSIS")]
    only: Option<Only>,
    #[command(flatten)]
    analysis: AnalysisArgs,
}

/// `--source-root`: where SARIF's relative file URIs start.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SourceRootArg {
    /// SARIF: the directory file URIs are relative to (`uriBaseId` %SRCROOT%, the directory in
    /// `originalUriBaseIds`), as code scanning maps them onto the repository; a file outside it
    /// gets an absolute file:// URI.
    ///
    /// Default: the git work tree that holds the working directory, if any.
    #[arg(long, value_name = "DIR")]
    source_root: Option<PathBuf>,
}

impl SourceRootArg {
    /// The source root, absolute: the one given (which must be a directory), else the
    /// enclosing git work tree of the working directory, else none.
    pub fn resolve(&self) -> anyhow::Result<Option<PathBuf>> {
        if let Some(dir) = &self.source_root {
            let meta = std::fs::metadata(dir)
                .with_context(|| format!("--source-root {}", dir.display()))?;
            if !meta.is_dir() {
                anyhow::bail!("--source-root {}: not a directory", dir.display());
            }
            let abs = dir
                .canonicalize()
                .with_context(|| format!("--source-root {}", dir.display()))?;
            return Ok(Some(abs));
        }
        let Ok(cwd) = std::env::current_dir() else {
            return Ok(None);
        };
        // A work tree has `.git` at its top: a directory, or a file (a linked work tree, a
        // submodule).
        Ok(cwd
            .ancestors()
            .find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok())
            .map(Path::to_path_buf))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    HbRaces,
}

/// How sites are named: the options every command that names sites shares.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SiteArgs {
    /// A function of the project's own that wraps locking (glob: `*`, `?`; a C++ name with or
    /// without its parameters): reports name its callers instead.
    ///
    /// Repeatable; the suppressions file's `wrappers = [...]` adds more. The standard library's
    /// lock types, guards and threads are always skipped.
    #[arg(long = "wrapper", value_name = "GLOB")]
    pub wrappers: Vec<String>,
}

impl SiteArgs {
    /// The command line's wrappers with the configuration file's.
    pub fn wrappers(&self, config: Option<&Suppressions>) -> Wrappers {
        let mut w = Wrappers::new(self.wrappers.iter().cloned());
        if let Some(c) = config {
            w.extend(&c.wrappers);
        }
        w
    }
}

/// The options `analyze` and `check` share.
#[derive(clap::Args)]
pub struct AnalysisArgs {
    /// Longest lock cycle searched for (locks, and so threads); by default any length, within
    /// --cycle-budget. A component with longer cycles still lists one of its shortest.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    max_cycle_length: Option<u16>,
    /// Search steps allowed to the cycle enumeration of each graph (dense graphs are cut).
    #[arg(long, default_value_t = Options::default().cycle_budget, value_name = "STEPS")]
    cycle_budget: u64,
    /// Instance-level candidates checked with the sync-preserving closure, in all.
    #[arg(long, default_value_t = Options::default().candidate_budget, value_name = "N")]
    candidate_budget: u64,
    /// Race candidates (pairs of accesses ordered only through lock hand-offs, holding no
    /// common lock) checked with the sync-preserving closure, in all; the sync-reversal search
    /// checks as many.
    ///
    /// The checks may also take 1,024 steps of closure per candidate allowed, on average: most
    /// take a few, and the bound is for traces whose closures are long.
    #[arg(long, default_value_t = Options::default().race_candidate_budget, value_name = "N")]
    race_candidate_budget: u64,
    /// List every lock cycle, up to 1000 of each verdict per component: by default each
    /// strongly connected component of the lock-order graph lists a few of each verdict
    /// (shortest first) and counts the rest, and prediction in it stops once that many
    /// deadlocks are predicted.
    #[arg(long)]
    all: bool,
    /// Reviewed findings to leave out (TOML, see docs/ci.md); default
    /// `foresight-suppressions.toml` in the working directory, when it exists.
    #[arg(long, value_name = "FILE")]
    suppressions: Option<PathBuf>,
    /// Read only the traces named: by default a run's trace `PATH` brings the rest of its run
    /// with it (`PATH.<pid>[.<n>]`, the processes it forked and the programs it executed).
    #[arg(long)]
    root_only: bool,
    /// Analyse each trace in segments of N events, one segment's model in memory at a time (0:
    /// each trace whole, in memory that grows with it).
    ///
    /// Predictions reorder events within one segment; a lock cycle whose edges are in different
    /// segments is potential.
    #[arg(long, default_value_t = DEFAULT_SEGMENT_EVENTS, value_name = "N")]
    segment_events: u64,
    /// Cut a segment early, before the first event of a thread, once N threads started in it
    /// (0: cut by events only).
    ///
    /// A program that starts a thread per request keeps what each request did until its
    /// segment is analysed; this bounds that memory by threads, where `--segment-events` bounds
    /// it by events.
    #[arg(long, default_value_t = DEFAULT_SEGMENT_THREADS, value_name = "N")]
    segment_threads: u64,
    /// Memory for the race analysis of each trace, MiB: its shadow of the memory the program
    /// touched and its heap blocks.
    ///
    /// When it is full, memory not tracked yet takes the place of memory tracked (whose
    /// earlier accesses are forgotten), and accesses wider than 64 bytes to memory not tracked
    /// yet are not checked for races; the report's warnings name how many and their lines.
    #[arg(long, default_value_t = foresight_analyzer::races::DEFAULT_MEMORY_MIB, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(1..=1 << 24))]
    race_memory: u64,
    #[command(flatten)]
    sites: SiteArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(name) = &args.explain {
        return explain(name);
    }
    if let Some(Only::HbRaces) = args.only {
        return hb_races(&args);
    }
    let report = analyze_traces(&args.traces, &args.analysis)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match args.format {
        Format::Text => report::text::write_with(
            &mut out,
            &report,
            report::text::Style {
                full_stacks: args.full_stacks,
            },
        ),
        Format::Json => report::json::write(&mut out, &report),
        Format::Sarif => report::sarif::write(
            &mut out,
            &report,
            None,
            args.source_root.resolve()?.as_deref(),
        ),
    };
    ignore_broken_pipe(written.and_then(|_| out.flush()))?;
    // Findings are not an error: exit 0 whatever was found (`check` is for failing builds).
    Ok(ExitCode::SUCCESS)
}

/// `--explain RULE`: the rule's long reason; an unknown name is bad input, answered with the
/// names known.
fn explain(name: &str) -> anyhow::Result<ExitCode> {
    use foresight_analyzer::report::explain;
    let Some(rules) = explain::rules_named(name) else {
        anyhow::bail!(
            "--explain {name}: no such rule or kind of finding; known: {}",
            explain::known_names().join(", ")
        );
    };
    let mut out = std::io::stdout().lock();
    ignore_broken_pipe(out.write_all(explain::explain(&rules).as_bytes()))?;
    Ok(ExitCode::SUCCESS)
}

/// `--only hb-races`: each STD file on its own.
fn hb_races(args: &Args) -> anyhow::Result<ExitCode> {
    let mut results = Vec::new();
    for path in &args.traces {
        if !foresight_stdtrace::is_std_file(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        {
            anyhow::bail!(
                "{}: --only hb-races reads STD text; for a foresight trace, run `analyze` \
                 without it (its races of rule happens-before are the same analysis)",
                path.display()
            );
        }
        match foresight_stdtrace::hb::hb_races_file(path) {
            Ok(r) => results.push((path, r)),
            Err(foresight_stdtrace::Failure::Input(e)) => {
                anyhow::bail!("{}: not a valid STD trace: {e}", path.display())
            }
            Err(foresight_stdtrace::Failure::Io(e)) => anyhow::bail!("{}: {e}", path.display()),
        }
    }
    let mut out = foresight_analyzer::escape::Escaping::new(std::io::BufWriter::new(
        std::io::stdout().lock(),
    ));
    let written = (|| -> std::io::Result<()> {
        match args.format {
            Format::Json => {
                let traces: Vec<serde_json::Value> = results
                    .iter()
                    .map(|(p, r)| {
                        let mut v = serde_json::to_value(r).expect("serialisable");
                        v["path"] = p.display().to_string().into();
                        v
                    })
                    .collect();
                serde_json::to_writer_pretty(
                    &mut out,
                    &serde_json::json!({ "analysis": "hb-races", "traces": traces }),
                )?;
                writeln!(out)
            }
            _ => {
                for (p, r) in &results {
                    writeln!(
                        out,
                        "trace {}: {} events, {} threads, {} locks, {} variables",
                        p.display(),
                        r.events,
                        r.threads,
                        r.locks,
                        r.variables
                    )?;
                    writeln!(
                        out,
                        "happens-before races: {} location pairs; {} racy events at {} locations",
                        r.races.len(),
                        r.racy_events,
                        r.racy_locations
                    )?;
                    for (i, race) in r.races.iter().enumerate() {
                        let (a, b) = race.kind.split_once('-').unwrap_or((race.kind, ""));
                        writeln!(
                            out,
                            "[{}] data race on `{}`: {a} at {} (line {}) and {b} at {} (line {}), \
                             seen {} times (rule happens-before)",
                            i + 1,
                            race.variable,
                            race.first.0,
                            race.first.1,
                            race.second.0,
                            race.second.1,
                            race.count
                        )?;
                    }
                }
                Ok(())
            }
        }
    })();
    ignore_broken_pipe(written.and_then(|_| out.flush()))?;
    Ok(ExitCode::SUCCESS)
}

/// Loads the traces, analyses them together and applies the suppressions (telling on stderr
/// what each entry silenced).
pub fn analyze_traces(traces: &[PathBuf], args: &AnalysisArgs) -> anyhow::Result<Report> {
    // A broken suppressions file is bad input: say so before the (long) analysis.
    let suppressions = Suppressions::discover(args.suppressions.as_deref())?;
    let wrappers = args.sites.wrappers(suppressions.as_ref());
    let traces = &expand(traces, args.root_only)?;
    let tty = std::io::stderr().is_terminal();
    let race_memory = args.race_memory << 20;
    let opts = Options {
        max_cycle_length: args.max_cycle_length.map(usize::from),
        cycle_budget: args.cycle_budget,
        candidate_budget: args.candidate_budget,
        race_candidate_budget: args.race_candidate_budget,
        cycles_listed: if args.all {
            ALL_CYCLES_LISTED
        } else {
            Options::default().cycles_listed
        },
        ..Options::default()
    };
    let segment_events = args.segment_events;
    let bounds = SegmentBounds {
        events: segment_events,
        threads: args.segment_threads,
    };
    let mut report = if traces.len() > 1 {
        analyze_many(traces, &wrappers, &opts, bounds, race_memory, tty)?
    } else {
        let mut fold = SegmentFold::folding(&opts, segment_events);
        let mut on_segment = |run: Run| fold.segment(run);
        let mut runs = Vec::new();
        let mut warnings = Vec::new();
        for input in traces {
            let (run, problems) =
                load_run(input, &wrappers, tty, bounds, race_memory, &mut on_segment)?;
            runs.push(run);
            warnings.push(problems);
        }
        let spinner = tty.then(|| {
            let s = ProgressBar::new_spinner();
            s.set_message("predicting deadlocks");
            s.enable_steady_tick(std::time::Duration::from_millis(120));
            s
        });
        let report = match (runs.pop(), warnings.pop()) {
            (Some(run), Some(w)) if runs.is_empty() => fold.finish(run, w),
            // No trace (an empty run directory): an empty report.
            _ => analyze(&[], &[], &opts),
        };
        if let Some(s) = spinner {
            s.finish_and_clear();
        }
        report
    };
    if args.all && report.summary.unlisted_predicted + report.summary.unlisted_potential > 0 {
        report.summary.listing_cap = Some(ALL_CYCLES_LISTED);
    }
    if let Some(s) = &suppressions {
        let applied = s.apply(&mut report);
        for (e, &n) in s.entries.iter().zip(&applied.matched) {
            let at = format!("{}:{}", s.path.display(), e.line);
            if n == 0 {
                say!(
                    "foresight: warning: {at}: the suppression silenced nothing (remove it if \
                     the finding is fixed): {}",
                    e.reason
                );
            } else {
                say!(
                    "foresight: {at}: the suppression silenced {n} finding{}: {}",
                    if n == 1 { "" } else { "s" },
                    e.reason
                );
            }
        }
    }
    Ok(report)
}

/// Several traces: each read and analysed alone, in parallel (rayon, one trace per worker, its
/// model dropped once analysed), then merged (`merge.rs`): memory is the workers' models and
/// the per-trace reports, not every model at once. The progress bar counts traces.
fn analyze_many(
    traces: &[Input],
    wrappers: &Wrappers,
    opts: &Options,
    bounds: SegmentBounds,
    race_memory: u64,
    tty: bool,
) -> anyhow::Result<Report> {
    let segment_events = bounds.events;
    use rayon::prelude::*;
    let bar = tty.then(|| {
        let b = ProgressBar::new(traces.len() as u64).with_style(
            ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} traces ({eta})")
                .expect("valid template")
                .progress_chars("=> "),
        );
        b.set_message("analysing");
        b
    });
    // Traces go in batches of a few per worker, each batch merged in trace order as soon as
    // it is done: only a batch of per-trace reports is held besides the merge.
    let batch = 4 * rayon::current_num_threads().max(1);
    let mut merger = Merger::new(opts);
    merger.set_segment_events(segment_events);
    for chunk in traces.chunks(batch) {
        let parts: Vec<anyhow::Result<Vec<TraceAnalysis>>> = chunk
            .par_iter()
            .map(|input| {
                let mut fold = SegmentFold::new(opts, segment_events);
                let (run, warnings) =
                    load_run(input, wrappers, false, bounds, race_memory, &mut |r| {
                        fold.segment(r)
                    })?;
                let parts = fold.into_parts(run, warnings);
                if let Some(b) = &bar {
                    b.inc(1);
                }
                Ok(parts)
            })
            .collect();
        for parts in parts {
            merger.add_trace(parts?);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(merger.finish())
}

/// Reads one trace into its model, in segments cut at `bounds` (events 0: whole): every segment
/// but the last goes to `on_segment` as it is cut; the last is returned.
pub fn load_run(
    input: &Input,
    wrappers: &Wrappers,
    tty: bool,
    bounds: SegmentBounds,
    race_memory: u64,
    on_segment: &mut dyn FnMut(Run),
) -> anyhow::Result<(Run, Vec<String>)> {
    // The analysis reads no access counts: kept, they would be 10^5 entries for a process
    // that created 10^5 threads, held while the trace is opened.
    // A trace that was not symbolised is symbolised in memory, and the static data of its
    // findings named after the walk, which decodes its events once.
    let (mut stream, static_data) = input.open_for_analysis(foresight_trace::StreamOptions {
        access_counts: false,
    })?;
    // Nor the threads' kernel ids and parents (`stats` shows them).
    stream.forget_thread_details();
    let stream = Arc::new(stream);
    let names = static_data.map(|data| BinaryDataNames {
        tables: stream.tables(),
        data: std::sync::Mutex::new(data),
    });
    let run = stream_run(
        &stream,
        &input.name,
        wrappers,
        tty,
        bounds,
        RaceSetup {
            memory: race_memory,
            names: names.as_ref().map(|n| n as &dyn DataNames),
        },
        on_segment,
    );
    if let Some(names) = names {
        let mut data = names.data.into_inner().unwrap_or_else(|p| p.into_inner());
        for w in data.take_warnings() {
            say!("foresight: warning: {}: {w}", input.name);
        }
    }
    let problems: Vec<String> = run.1.iter().map(|p| p.to_string()).collect();
    warn_problems(Path::new(&input.name), &run.1);
    Ok((run.0, problems))
}

/// What the walk needs to know of the whole trace before it starts, from a first read of
/// every thread's events, each thread's in its own order:
/// - with `races`, the pages each touched by one thread alone, and each page's writers and
///   where threads join each other (decisions 0031, 0032): the race pass leaves out, or
///   checks without keeping, the accesses they show no later access can meet. Threads are
///   numbered as the walk numbers them, in the order the stream lists them;
/// - with `monitors`, the monitor locks, for a walk that will be cut (`MonitorScan`).
///
/// The threads are read side by side by as many rayon jobs as the pool has workers, each
/// noting into tables of its own; a job's page table holds its share of the pages one table
/// may (so one table's worth in memory, not one a thread). The tables are merged at the end.
/// On two cores that halves the read, which took a third of SQLite's analysis.
fn first_read(
    stream: &TraceStream,
    races: bool,
    monitors: bool,
) -> (foresight_analyzer::races::PrivatePages, MonitorScan) {
    use foresight_analyzer::races::PrivatePages;
    use rayon::prelude::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    if !races && !monitors {
        return Default::default();
    }
    let ids: Vec<ThreadId> = stream.threads().collect();
    let index_of: std::collections::HashMap<_, usize> =
        ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let next = AtomicUsize::new(0);
    let workers = rayon::current_num_threads().clamp(1, ids.len().max(1));
    // Each job takes the next thread not yet taken: a few long threads and many short ones
    // end up spread evenly enough.
    let read = || {
        let mut private = PrivatePages::share_of(workers);
        let mut scan = MonitorScan::default();
        while let Some(&id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) {
            let index = index_of[&id];
            let mut note = |pos: usize, kind: &EventKind| {
                let pos = u32::try_from(pos).unwrap_or(u32::MAX);
                private.note_event(index, pos, kind, |c| index_of.get(&c).copied());
            };
            let events = stream.thread_events(id).enumerate();
            if !monitors {
                for (pos, e) in events {
                    note(pos, &e.kind);
                }
            } else {
                scan.scan_thread(events.map(|(pos, e)| {
                    if races {
                        note(pos, &e.kind);
                    }
                    e.kind
                }));
            }
        }
        (private, scan)
    };
    // As rayon jobs, not threads of their own: while the pool's other workers analyse other
    // traces (`analyze_many`), this one reads every thread itself, and the other jobs find
    // none left.
    let tables: Vec<_> = (0..workers).into_par_iter().map(|_| read()).collect();
    let mut tables = tables.into_iter();
    let (mut private, mut scan) = tables.next().unwrap_or_default();
    for (other, other_scan) in tables {
        private.merge(other);
        scan.merge(other_scan);
    }
    private.finish();
    (private, scan)
}

/// The page-order pass runs when at least one event in this many is a thread's visit to a
/// page that threads share (`PrivatePages::shared_visits`): zstd's traces have one in
/// two, SQLite's one in 76 (docs/perf/analysis-speed-and-memory.md).
const PAGE_ORDER_FROM: u64 = 16;

/// One streaming pass over a trace: the model and the race pass, reading one chunk per thread
/// at a time. A trace with barriers is first scanned per thread for the generation each
/// arrival belongs to (`stream.rs`).
fn stream_run(
    stream: &Arc<TraceStream>,
    name: &str,
    wrappers: &Wrappers,
    tty: bool,
    bounds: SegmentBounds,
    races: RaceSetup<'_>,
    on_segment: &mut dyn FnMut(Run),
) -> (Run, Vec<Problem>) {
    let race_memory = races.memory;
    let tables = stream.tables();
    let stream_walk = Stream::of_stream(stream);
    let threads = ThreadModel::of_ids(stream.threads());
    // The trailer says how many events to expect when the recording ended cleanly.
    let expected = stream.trailer().map(|t| t.events);
    let (mut private, monitors) = first_read(
        stream,
        race_memory != 0,
        foresight_analyzer::analysis::will_be_cut(
            tables,
            expected,
            stream.threads().count(),
            bounds,
        ),
    );
    // A second read, in the merged order with the race pass's two orders: the pages on which
    // every two accesses of different threads are ordered (decision 0033), whose accesses the
    // race pass then leaves out. It costs about what the first read does, and saves only on
    // pages that threads share: not read for a trace with few accesses to them (SQLite's).
    let events = expected.unwrap_or_else(|| stream.declared_events());
    if race_memory != 0 && private.shared_visits().saturating_mul(PAGE_ORDER_FROM) >= events {
        let orders = PageOrderPass::run(
            stream.threads().count(),
            Some(&private),
            &stream_walk,
            Runs(&mut stream.merged_event_counts()),
        );
        private.note_orders(&orders);
    }
    let model = ModelPass::new(tables, name.to_string(), threads, 0)
        .with_monitors(monitors)
        .with_wrappers(
            wrappers
                .clone()
                .for_recorded_depth(stream.header().stack_depth),
        )
        .with_end_reason(stream.trailer().map(|t| t.reason))
        .with_process(stream.header());
    // No race budget is `graph`'s: the lock-order graph needs neither races nor reads-from.
    // Otherwise the sync-reversal rule's marks of where threads read and write are read from
    // the file again for the few segments that need them, not kept for every event.
    let model = match races.names {
        Some(names) => model.with_data_names(names),
        None => model,
    };
    let model = if race_memory != 0 {
        model.with_private_pages(&private)
    } else {
        model
    };
    let model = if race_memory == 0 {
        model.lock_order_only()
    } else {
        model
            .with_race_memory(race_memory)
            .with_marks_from(stream.clone())
    };
    let bar = tty.then(|| {
        let b = match expected {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} events ({eta})")
                    .expect("valid template")
                    .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{msg} {spinner} {pos} events")
                    .expect("valid template"),
            ),
        };
        b.set_message(format!("reading {name}"));
        b
    });
    // Only each thread's event count is read back from the summaries (below).
    let mut merged = stream.merged_event_counts().with_ordering_check();
    let mut progress = |done| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    };
    // One thread (decision 0006: a second one cost more than it hid on a two-core machine
    // that other work shares). The race pass joins the walk at the trace's first memory
    // access, fed what came before it from a second read of the file: a trace without
    // accesses never pays for it. The replay needs the events only, not each thread's bytes
    // and times (40 bytes a thread ever created, held while the walk's own merge is too).
    let replay = || -> Box<dyn Iterator<Item = (ThreadId, usize, EventKind)> + '_> {
        Box::new(
            stream
                .merged_event_counts()
                .map(|e| (e.thread, e.index, e.event.kind)),
        )
    };
    let run = foresight_analyzer::model::walk(
        &stream_walk,
        model,
        Runs(&mut merged),
        &mut progress,
        bounds,
        on_segment,
        Some(&replay),
    );
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    (run, merged.problems())
}

/// The race pass of a walk: its memory budget (0: none, `graph`'s), and what names the
/// static data of what it finds when the trace's own records do not (a trace that was not
/// symbolised).
struct RaceSetup<'n> {
    memory: u64,
    names: Option<&'n dyn DataNames>,
}

/// Names the static data of a trace that was not symbolised from the binaries it names
/// (`foresight_symbols::StaticData`), as its symbolised copy would name them, for the few
/// accesses the findings hold.
struct BinaryDataNames<'t> {
    tables: &'t foresight_trace::tables::Tables,
    data: std::sync::Mutex<foresight_symbols::StaticData>,
}

impl DataNames for BinaryDataNames<'_> {
    fn names(&self, accesses: &[DataAccess]) -> Vec<Option<Variable>> {
        let asked: Vec<foresight_symbols::DataAccess> = accesses
            .iter()
            .map(|a| foresight_symbols::DataAccess {
                addr: a.addr,
                len: a.len,
                freed: a.freed,
            })
            .collect();
        let mut data = self.data.lock().unwrap_or_else(|p| p.into_inner());
        data.names(self.tables, &asked)
            .into_iter()
            .map(|n| {
                n.map(|n| Variable {
                    name: n.name,
                    file: n.file,
                    line: n.line,
                })
            })
            .collect()
    }
}
