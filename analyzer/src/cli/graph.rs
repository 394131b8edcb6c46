//! `foresight graph`: the class-level lock-order graph of the traces, as DOT or (through
//! graphviz's `dot`) SVG.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context};

use crate::lock_graph::LockOrderGraph;
use crate::report::dot::write_dot;

use super::analyze::{load_runs, SiteArgs};
use super::output::ignore_broken_pipe;
use crate::suppressions::Suppressions;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Dot,
    Svg,
}

#[derive(clap::Args)]
pub struct Args {
    /// The trace files; their graphs are merged (lock classes match by name).
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Dot)]
    format: Format,
    /// Only the lock classes on some cycle (strongly connected components).
    #[arg(long)]
    scc_only: bool,
    #[command(flatten)]
    sites: SiteArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Lock classes are named at the user's frame: the wrappers of the configuration file too.
    let config = Suppressions::discover(None)?;
    let inputs = super::run_files::expand(&args.traces, false)?;
    let (runs, _) = load_runs(&inputs, &args.sites.wrappers(config.as_ref()))?;
    let mut graph = LockOrderGraph::default();
    for (i, run) in runs.iter().enumerate() {
        graph.add_run(i, run);
    }
    let dot = write_dot(&graph, &runs, args.scc_only);
    let bytes = match args.format {
        Format::Dot => dot.into_bytes(),
        Format::Svg => to_svg(&dot)?,
    };
    let mut out = std::io::stdout().lock();
    ignore_broken_pipe(out.write_all(&bytes).and_then(|_| out.flush()))?;
    Ok(ExitCode::SUCCESS)
}

/// Pipes the DOT text through `dot -Tsvg`.
fn to_svg(dot: &str) -> anyhow::Result<Vec<u8>> {
    let child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("graphviz's `dot` is not installed; use --format dot, or install graphviz")
        }
        Err(e) => return Err(e).context("cannot run graphviz's `dot`"),
    };
    // Written from another thread: `dot` may fill its stdout pipe before reading all of stdin.
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = dot.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().context("waiting for `dot`")?;
    let _ = writer.join();
    if !output.status.success() {
        bail!(
            "`dot -Tsvg` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output.stdout)
}
