//! Command-line interface: argument parsing and one module per subcommand.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod analyze;
mod cache;
mod check;
mod config;
mod demo;
mod dump;
mod graph;
mod interop;
mod output;
mod pack;
mod record;
mod run_files;
mod runtime;
mod stats;

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
    /// Predict deadlocks: lock-order cycles, and waits that hold a lock another thread needs.
    Analyze(analyze::Args),
    /// Compile a bundled C example, record it, and print the deadlock it predicts.
    Demo(demo::Args),
    /// Print every event of a trace, one line each, in causal order.
    Dump(dump::Args),
    /// Summarise a trace: events by kind, threads, locks, sites, size, whether it ended cleanly.
    Stats(stats::Args),
    /// Run a command under the recorder and write its trace (symbolised when it ends).
    Record(record::Args),
    /// Put the traces of a run into one file for a bug report: symbolised, compressed, with a
    /// manifest and checksums; `analyze`, `check`, `stats` and `graph` read it directly.
    Pack(pack::Args),
    /// CI gate: exit 1 when a lock-order finding is not in the baseline file.
    Check(check::Args),
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
        Command::Graph(args) => graph::run(args),
        Command::Config(args) => config::run(args),
        Command::Import(args) => interop::import(args),
        Command::Export(args) => interop::export(args),
        Command::Synth(args) => interop::synth(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("foresight: error: {e:#}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}
