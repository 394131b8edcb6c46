//! `foresight import`, `foresight export` and `foresight synth`: RAPID's STD text format in
//! and out, and synthetic traces with planted findings.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use foresight_trace::region::RegionMarkers;

use foresight_stdtrace::synth::{self, SynthSpec, TextSink};
use foresight_stdtrace::{self as stdtrace, ExportOptions, Failure, Importer};

use super::output::{open_stream, warn_problems};
use super::EXIT_BAD_INPUT;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TextFormat {
    /// RAPID's STD: `THREAD|OP(TARGET)|LOCATION`, one event a line.
    Std,
}

#[derive(clap::Args)]
pub struct ImportArgs {
    /// The format of the input.
    #[arg(long = "from", value_enum, default_value_t = TextFormat::Std)]
    from: TextFormat,
    /// The text file to read.
    input: PathBuf,
    /// The trace file to write.
    #[arg(short, long, value_name = "TRACE")]
    output: PathBuf,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// The format to write.
    #[arg(long = "to", value_enum, default_value_t = TextFormat::Std)]
    to: TextFormat,
    /// The trace file to read.
    trace: PathBuf,
    /// The text file to write (`-`: standard output).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Write lock requests as `req` lines (deadlock tools read them; RAPID does not).
    #[arg(long)]
    requests: bool,
    /// Write locations as numbers (the site's id), as RAPID's reader needs.
    #[arg(long)]
    numeric_locations: bool,
}

pub fn import(args: ImportArgs) -> anyhow::Result<ExitCode> {
    let TextFormat::Std = args.from;
    let out = super::safe_fs::create_output(&args.output)?;
    match stdtrace::import_to_file(&args.input, &out) {
        Ok(s) => {
            let ops: Vec<String> = s
                .by_op
                .iter()
                .map(|(op, n)| format!("{} {n}", op.keyword()))
                .collect();
            say!(
                "foresight: imported {} lines ({}): {} threads, {} locks, {} variables, {} \
                 locations; {} events written to {}",
                s.lines,
                ops.join(", "),
                s.threads,
                s.locks,
                s.variables,
                s.locations,
                s.events,
                args.output.display()
            );
            if s.acquire_sites_merged > 0 {
                say!(
                    "foresight: {} `acq` lines had another location than their `req`: the \
                     acquisition keeps the request's",
                    s.acquire_sites_merged
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            // What was written of it, not a device or a FIFO the user named.
            drop(out);
            if std::fs::symlink_metadata(&args.output).is_ok_and(|m| m.is_file()) {
                let _ = std::fs::remove_file(&args.output);
            }
            match e {
                Failure::Input(e) => {
                    say!("foresight: error: {}: {e}", args.input.display());
                    Ok(ExitCode::from(EXIT_BAD_INPUT))
                }
                Failure::Io(e) => anyhow::bail!("{}: {e}", args.input.display()),
            }
        }
    }
}

pub fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let TextFormat::Std = args.to;
    let stream = open_stream(&args.trace)?;
    // An STD input has no markers file of its own to read: its stream is the import's.
    let mut markers = if stdtrace::is_std_file(&args.trace).unwrap_or(false) {
        None
    } else {
        Some(RegionMarkers::open(&args.trace)?)
    };
    let opts = ExportOptions {
        requests: args.requests,
        numeric_locations: args.numeric_locations,
    };
    let summary = if args.output.as_os_str() == "-" {
        stdtrace::export(&stream, markers.as_mut(), std::io::stdout().lock(), opts)
    } else {
        let file = super::safe_fs::create_output(&args.output)?;
        stdtrace::export(&stream, markers.as_mut(), file, opts)
    };
    let summary = match summary {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        other => other?,
    };
    for p in summary.problems.iter().take(10) {
        say!("foresight: warning: {}: {p}", args.trace.display());
    }
    let _ = warn_problems;
    say!("foresight: wrote {} lines", summary.lines);
    let left = summary.left_out_total();
    if left > 0 {
        let kinds: Vec<String> = summary
            .left_out
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        say!(
            "foresight: {left} events STD cannot express were left out: {}",
            kinds.join(", ")
        );
    }
    if summary.renamed > 0 {
        say!(
            "foresight: {} threads, locks or variables had no unique name STD can carry and \
             were named by id",
            summary.renamed
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(clap::Args)]
pub struct SynthArgs {
    /// Worker threads (a main thread forks and joins them).
    #[arg(long, default_value_t = 4)]
    threads: u32,
    /// Locks of the background critical sections.
    #[arg(long, default_value_t = 16)]
    locks: u32,
    /// Deepest nesting of background critical sections.
    #[arg(long, default_value_t = 2)]
    depth: u32,
    /// Shared variables of the background, each protected by one lock.
    #[arg(long, default_value_t = 64)]
    variables: u32,
    /// Events (lines), about; `1e9` and `10^9` are read too.
    #[arg(long, default_value = "1000000", value_parser = parse_count)]
    events: u64,
    /// Planted happens-before races.
    #[arg(long, default_value_t = 1)]
    races: u32,
    /// Planted races that only a predictive (sync-preserving) analysis finds.
    #[arg(long, default_value_t = 1)]
    predictable_races: u32,
    /// Planted two-lock deadlocks.
    #[arg(long, default_value_t = 1)]
    deadlocks: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write STD text instead of a foresight trace.
    #[arg(long = "to", value_enum)]
    to: Option<TextFormat>,
    /// The file to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Where to write the ground truth (JSON: each planted finding's kind, threads, lines).
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
}

fn parse_count(s: &str) -> Result<u64, String> {
    let bad = || format!("`{s}` is not a count (examples: 1000000, 1e9, 10^9)");
    if let Some((m, e)) = s.split_once(['e', 'E']) {
        let m: u64 = m.parse().map_err(|_| bad())?;
        let e: u32 = e.parse().map_err(|_| bad())?;
        return 10u64
            .checked_pow(e)
            .and_then(|p| p.checked_mul(m))
            .ok_or_else(bad);
    }
    if let Some(e) = s.strip_prefix("10^") {
        let e: u32 = e.parse().map_err(|_| bad())?;
        return 10u64.checked_pow(e).ok_or_else(bad);
    }
    s.replace('_', "").parse().map_err(|_| bad())
}

pub fn synth(args: SynthArgs) -> anyhow::Result<ExitCode> {
    let spec = SynthSpec {
        threads: args.threads,
        locks: args.locks,
        depth: args.depth,
        variables: args.variables,
        events: args.events,
        races: args.races,
        predictable_races: args.predictable_races,
        deadlocks: args.deadlocks,
        seed: args.seed,
    };
    if let Err(m) = synth::check(&spec) {
        say!("foresight: error: {m}");
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    let file = super::safe_fs::create_output(&args.output)?;
    let out = BufWriter::with_capacity(1 << 20, file);
    let failed = |e: Failure| anyhow::anyhow!("{}: {e}", args.output.display());
    let truth = match args.to {
        Some(TextFormat::Std) => {
            let mut sink = TextSink::new(out);
            let truth = synth::generate(&spec, &mut sink).map_err(failed)?;
            sink.into_inner().flush()?;
            truth
        }
        None => {
            let mut importer =
                Importer::new(out, &format!("foresight synth --seed {}", spec.seed))?;
            let truth = synth::generate(&spec, &mut importer).map_err(failed)?;
            let (mut out, _) = importer.finish()?;
            out.flush()?;
            truth
        }
    };
    if let Some(path) = &args.truth {
        let mut w = BufWriter::new(super::safe_fs::create_output(path)?);
        serde_json::to_writer_pretty(&mut w, &truth)?;
        writeln!(w)?;
        w.flush()?;
    }
    say!(
        "foresight: wrote {} events of {} threads to {} ({} planted findings)",
        truth.lines,
        truth.threads,
        args.output.display(),
        truth.planted.len()
    );
    Ok(ExitCode::SUCCESS)
}
