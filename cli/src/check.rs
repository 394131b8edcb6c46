//! `foresight check`: the CI gate. Analyses the traces of a test suite as `analyze` does (one
//! cumulative lock-order graph, races per process) and compares every finding with a committed
//! baseline (`baseline.rs`): exit 1 when a finding is not in it, 0 otherwise (2 for bad input).
//! `--update-baseline` writes the baseline from the findings and exits 0.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use foresight_analyzer::baseline::{self, DEFAULT_BASELINE};
use foresight_analyzer::report::{self, BaselineKey, Finding, Report};

use super::analyze::{analyze_traces, AnalysisArgs};
use super::output::ignore_broken_pipe;

/// Exit code when a finding is not in the baseline.
pub const EXIT_NEW_FINDINGS: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The new findings, in the text report's form.
    Text,
    /// Every finding, each with its `baselineState` (`new` or `unchanged`).
    Sarif,
}

#[derive(clap::Args)]
pub struct Args {
    /// The trace files (for example one per test process), analysed together as `analyze` does.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// The accepted findings; default `foresight-baseline.txt` in the working directory.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Write the baseline from the current findings (after review) and exit 0.
    #[arg(long)]
    update_baseline: bool,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    analysis: AnalysisArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let explicit = args.baseline.is_some();
    let path = args
        .baseline
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BASELINE));
    // Read the baseline before the analysis: a missing or unreadable one is bad input now.
    let accepted: BTreeSet<BaselineKey> = if args.update_baseline {
        BTreeSet::new()
    } else if path.exists() || explicit {
        baseline::read(&path)?
    } else {
        say!(
            "foresight: no baseline ({DEFAULT_BASELINE} not found): every finding is new; \
             create it with `foresight check --update-baseline TRACE…`"
        );
        BTreeSet::new()
    };
    let report = analyze_traces(&args.traces, &args.analysis)?;

    if args.update_baseline {
        let text = baseline::render(&report.findings);
        super::safe_fs::create_output(&path).and_then(|mut f| {
            std::io::Write::write_all(&mut f, text.as_bytes())
                .with_context(|| format!("cannot write the baseline {}", path.display()))
        })?;
        say!(
            "foresight: wrote {} ({} findings)",
            path.display(),
            report.findings.len()
        );
        return Ok(ExitCode::SUCCESS);
    }

    let is_new = |f: &Finding| !accepted.contains(&f.key().baseline());
    let new: Vec<Finding> = report
        .findings
        .iter()
        .filter(|f| is_new(f))
        .cloned()
        .collect();
    let current: BTreeSet<BaselineKey> =
        report.findings.iter().map(|f| f.key().baseline()).collect();
    let gone = accepted.difference(&current).count();

    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match args.format {
        Format::Sarif => {
            let state = |f: &Finding| if is_new(f) { "new" } else { "unchanged" };
            report::sarif::write(&mut out, &report, Some(&state))
        }
        Format::Text => write_text(
            &mut foresight_analyzer::escape::Escaping::new(&mut out),
            &report,
            &new,
            gone,
            &path,
        ),
    };
    ignore_broken_pipe(written.and_then(|_| out.flush()))?;
    Ok(if new.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_NEW_FINDINGS)
    })
}

fn write_text(
    out: &mut impl Write,
    report: &Report,
    new: &[Finding],
    gone: usize,
    path: &std::path::Path,
) -> std::io::Result<()> {
    let known = report.findings.len() - new.len();
    writeln!(
        out,
        "foresight check: {} findings over {} traces: {known} in the baseline {}, {} new",
        report.findings.len(),
        report.traces.len(),
        path.display(),
        new.len()
    )?;
    // What an analysis left out (a budget that cut, events it could not use): a clean check
    // over it says less than it seems to.
    for t in &report.traces {
        for w in &t.warnings {
            writeln!(out, "warning: {}: {w}", t.path)?;
        }
    }
    if gone > 0 {
        writeln!(
            out,
            "note: {gone} baseline entries were not found (fixed, or not exercised by these \
             traces); `--update-baseline` drops them"
        )?;
    }
    if new.is_empty() {
        return Ok(());
    }
    writeln!(out, "\nnew findings (baseline lines):")?;
    for f in new {
        writeln!(out, "  {}", f.key().baseline())?;
    }
    writeln!(out)?;
    let mut only_new = report.clone();
    only_new.findings = new.to_vec();
    only_new.recount();
    report::text::write(out, &only_new)
}
