//! `foresight analyze`: predicted and potential deadlocks over one or more traces.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};

use crate::analysis::{analyze, Options};
use crate::model::build_run;
use crate::report;

use super::output::{ignore_broken_pipe, load, report_problems};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(clap::Args)]
pub struct Args {
    /// The trace files; their lock-order graphs are merged (lock classes match by name).
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Longest lock cycle searched for (locks, and so threads).
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    max_cycle_length: u16,
    /// Search steps allowed to the cycle enumeration of each graph (dense graphs are cut).
    #[arg(long, default_value_t = Options::default().cycle_budget, value_name = "STEPS")]
    cycle_budget: u64,
    /// Instance-level candidates checked with the sync-preserving closure, in all.
    #[arg(long, default_value_t = Options::default().candidate_budget, value_name = "N")]
    candidate_budget: u64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let tty = std::io::stderr().is_terminal();
    let mut runs = Vec::new();
    let mut warnings = Vec::new();
    for path in &args.traces {
        let trace = load(path)?;
        report_problems(&trace);
        warnings.push(
            trace
                .problems
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>(),
        );
        let bar = if tty {
            let b = ProgressBar::new(trace.event_count());
            b.set_style(
                ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} events ({eta})")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.set_message(format!("reading {}", path.display()));
            Some(b)
        } else {
            None
        };
        let run = build_run(&trace, &mut |done| {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        });
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        runs.push(run);
    }
    let spinner = tty.then(|| {
        let s = ProgressBar::new_spinner();
        s.set_message("predicting deadlocks");
        s.enable_steady_tick(std::time::Duration::from_millis(120));
        s
    });
    let opts = Options {
        max_cycle_length: args.max_cycle_length as usize,
        cycle_budget: args.cycle_budget,
        candidate_budget: args.candidate_budget,
        ..Options::default()
    };
    let report = analyze(&runs, &warnings, &opts);
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match args.format {
        Format::Text => report::text::write(&mut out, &report),
        Format::Json => report::json::write(&mut out, &report),
    };
    ignore_broken_pipe(written.and_then(|_| out.flush()))?;
    // Findings are not an error: exit 0 whatever was found (`check` is for failing builds).
    Ok(ExitCode::SUCCESS)
}
