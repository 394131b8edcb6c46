//! Command-line interface: argument parsing and one module per subcommand.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `eprintln!` for every message of the command line: what it says may hold names from a
/// trace, a pack or the file system, whose control characters are shown escaped
/// (`foresight_analyzer::escape`).
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("{}", ::foresight_analyzer::escape::controls_keep_lines(&format!($($arg)*)))
    };
}

mod analyze;
mod cache;
mod check;
mod config;
mod coverage;
mod demo;
mod dot;
mod dump;
mod graph;
mod interop;
mod keeper;
mod output;
mod pack;
/// Public for its fuzz target (`trace-format/fuzz`): a pack is untrusted input.
pub mod pack_file;
mod record;
mod run_files;
mod runtime;
mod safe_fs;
mod stats;

pub use record::note_inherited_signals;

/// Exit code for bad input or usage.
pub const EXIT_BAD_INPUT: u8 = 2;

#[derive(Parser)]
#[command(
    name = "foresight",
    version,
    about = "Record a multithreaded program once; predict the deadlocks and races another schedule would hit.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Report the deadlocks and data races of traces, predicted and observed.
    ///
    /// Deadlocks and data races that happened in the recorded runs, those another schedule
    /// would hit (with a witness schedule), inconsistent lock orders, waits that hold a lock
    /// the awaited thread needs, and rank violations. Exits 0 whatever it finds (`check` is
    /// the gate).
    Analyze(analyze::Args),
    /// Compile a bundled C example, record it, and print the deadlock and race it predicts.
    Demo(demo::Args),
    /// Print every event of a trace, one line each, in causal order.
    Dump(dump::Args),
    /// Summarise a trace: events by kind, threads, locks, sites, size, whether it ended cleanly.
    Stats(stats::Args),
    /// Run a command under the recorder and write its trace (symbolised when it ends).
    Record(record::Args),
    /// Put the traces of a run into one file for a bug report.
    ///
    /// The traces are symbolised, compressed, with a manifest and checksums; `analyze`,
    /// `check`, `stats` and `graph` read the pack directly.
    Pack(pack::Args),
    /// CI gate: exit 1 when a finding (deadlock, race, lock order, rank) is not in the baseline.
    ///
    /// Analyses the traces as `analyze` does (deadlocks, data races, lock orders, rank
    /// violations) and compares each finding with the committed baseline; exit 0 when every
    /// finding is in it, 2 for bad input.
    Check(check::Args),
    /// List the locking call sites of a program's machine code and which no trace executed.
    Coverage(coverage::Args),
    /// Draw the class-level lock-order graph (DOT, or SVG through graphviz).
    Graph(graph::Args),
    /// Compiler and linker flags for a program whose memory accesses are recorded too.
    Config(config::Args),
    /// Convert a text trace (RAPID's STD) into a foresight trace.
    Import(interop::ImportArgs),
    /// Convert a trace into a text trace (RAPID's STD), saying what the text cannot express.
    Export(interop::ExportArgs),
    /// Write a synthetic trace with planted races and deadlocks, and their ground truth.
    Synth(interop::SynthArgs),
}

pub fn main() -> ExitCode {
    keep_freed_memory();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Analyze(args) => analyze::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Dump(args) => dump::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Record(args) => record::run(args),
        Command::Pack(args) => pack::run(args),
        Command::Check(args) => check::run(args),
        Command::Coverage(args) => coverage::run(args),
        Command::Graph(args) => graph::run(args),
        Command::Config(args) => config::run(args),
        Command::Import(args) => interop::import(args),
        Command::Export(args) => interop::export(args),
        Command::Synth(args) => interop::synth(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            say!("foresight: error: {e:#}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// Asks the C allocator to keep what the analysis frees for its next allocations, rather than
/// hand it back to the kernel. A trace read in segments builds and drops the same tables once
/// per segment (4·2^20 events); with the allocator's defaults each segment's tables (those
/// under 32 MiB: the largest has its own reuse, `model/spare.rs`) were returned when freed and
/// faulted in again page by page in the next segment. On the 10^8-event lock trace that was
/// 144,000 minor page faults and 0.58 s of system time against 5.1 s of user time; with the
/// memory kept, 28,000 and 0.18 s, the peak RSS 118 MB instead of 110, the output the same
/// (`/usr/bin/time -f "%U %S %M %R" foresight analyze FILE`). The peak is what the analysis
/// needs at once either way: kept memory is reused, not added to. Only the analyzer's own
/// process is tuned; a program it records starts with the allocator's defaults.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // The largest mmap threshold glibc accepts (DEFAULT_MMAP_THRESHOLD_MAX on 64 bits).
        const MMAP_THRESHOLD: libc::c_int = 32 << 20;
        // SAFETY: `mallopt` only sets allocator parameters; it is called before this process
        // starts a thread, and a refused value leaves the default in place (its result is
        // ignored: this is tuning, and nothing depends on it).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
        }
    }
}
