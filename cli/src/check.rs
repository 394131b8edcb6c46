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

use super::analyze::{analyze_traces, AnalysisArgs, SourceRootArg};
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
    /// Given several times, a finding in any of them is accepted (the baselines of several
    /// runs, merged).
    #[arg(long, value_name = "FILE")]
    baseline: Vec<PathBuf>,
    /// Write the baseline from the current findings (after review) and exit 0.
    #[arg(long)]
    update_baseline: bool,
    /// Fail (exit 1) when nothing of the program's synchronisation was visible: no trace
    /// recorded a lock or a memory access (a clean result would mean nothing).
    #[arg(long)]
    fail_if_blind: bool,
    /// The report's form: `text`, the new findings for people; `sarif` (SARIF 2.1.0), every
    /// finding with its `baselineState`, for code-scanning services (docs/ci.md).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[command(flatten)]
    source_root: SourceRootArg,
    #[command(flatten)]
    analysis: AnalysisArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let explicit = !args.baseline.is_empty();
    if args.update_baseline && args.baseline.len() > 1 {
        anyhow::bail!(
            "--update-baseline writes one baseline: give --baseline once (several are for \
             checking against their union)"
        );
    }
    let paths = if explicit {
        args.baseline.clone()
    } else {
        vec![PathBuf::from(DEFAULT_BASELINE)]
    };
    let path = paths[0].clone();
    // Read the baseline before the analysis: a missing or unreadable one is bad input now.
    let accepted: BTreeSet<BaselineKey> = if args.update_baseline {
        BTreeSet::new()
    } else if path.exists() || explicit {
        let mut union = BTreeSet::new();
        for p in &paths {
            union.extend(baseline::read(p)?);
        }
        union
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

    let is_new = |f: &Finding| !baseline::accepts(&accepted, &f.key().baseline());
    let new: Vec<Finding> = report
        .findings
        .iter()
        .filter(|f| is_new(f))
        .cloned()
        .collect();
    let mut current: BTreeSet<BaselineKey> =
        report.findings.iter().map(|f| f.key().baseline()).collect();
    // An older race line (no variable) is matched by the current race at its sites.
    let races = current
        .iter()
        .filter(|k| k.kind == report::BaselineKind::Finding(report::Kind::Race))
        .map(|k| BaselineKey {
            classes: Vec::new(),
            ..k.clone()
        })
        .collect::<Vec<_>>();
    current.extend(races);
    let gone = accepted.difference(&current).count();

    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written = match args.format {
        Format::Sarif => {
            let state = |f: &Finding| if is_new(f) { "new" } else { "unchanged" };
            report::sarif::write(
                &mut out,
                &report,
                Some(&state),
                args.source_root.resolve()?.as_deref(),
            )
        }
        Format::Text => write_text(
            &mut foresight_analyzer::escape::Escaping::new(&mut out),
            &report,
            &new,
            gone,
            &paths,
        ),
    };
    ignore_broken_pipe(written.and_then(|_| out.flush()))?;
    let blind = report.traces.iter().all(report::Coverage::blind);
    if args.fail_if_blind && blind {
        say!(
            "foresight check: nothing of the program's synchronisation was visible (no lock \
             and no memory access in {}): failing as --fail-if-blind asks",
            report::counted(report.traces.len(), "trace", "traces")
        );
        return Ok(ExitCode::from(EXIT_NEW_FINDINGS));
    }
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
    paths: &[PathBuf],
) -> std::io::Result<()> {
    let known = report.findings.len() - new.len();
    writeln!(
        out,
        "foresight check: {} over {}: {known} in the baseline {}, {} new",
        report::counted(report.findings.len(), "finding", "findings"),
        report::counted(report.traces.len(), "trace", "traces"),
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" + "),
        new.len()
    )?;
    // What an analysis left out (a budget that cut, events it could not use): a clean check
    // over it says less than it seems to.
    for t in &report.traces {
        for w in &t.warnings {
            writeln!(out, "warning: {}: {w}", t.path)?;
        }
        for n in &t.coverage.notes {
            writeln!(out, "not seen: {}: {n}", t.path)?;
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
