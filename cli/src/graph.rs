//! `foresight graph`: the class-level lock-order graph of the traces, as DOT or (through
//! graphviz's `dot`) SVG.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context};

use foresight_analyzer::lock_graph::LockOrderGraph;
use foresight_analyzer::model::{Run, SegmentBounds, DEFAULT_SEGMENT_EVENTS};

use super::analyze::{load_run, SiteArgs};
use super::dot::write_dot;
use super::output::ignore_broken_pipe;
use foresight_analyzer::suppressions::Suppressions;

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
    /// `dot`: graphviz's language, to draw or read; `svg`: drawn by graphviz's `dot`.
    #[arg(long, value_enum, default_value_t = Format::Dot)]
    format: Format,
    /// Only the lock classes on some cycle (strongly connected components).
    #[arg(long)]
    scc_only: bool,
    /// Read each trace in segments of N events, one segment's model in memory at a time
    /// (0: each trace whole). The graph is the same either way.
    #[arg(long, default_value_t = DEFAULT_SEGMENT_EVENTS, value_name = "N")]
    segment_events: u64,
    #[command(flatten)]
    sites: SiteArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Lock classes are named at the user's frame: the wrappers of the configuration file too.
    let config = Suppressions::discover(None)?;
    let inputs = super::run_files::expand(&args.traces, false)?;
    let wrappers = args.sites.wrappers(config.as_ref());
    let tty = std::io::stderr().is_terminal();
    // Each trace, or segment of one, is folded into the graph and dropped: only the graph and
    // the site text of each edge's first witness are kept.
    let mut graph = LockOrderGraph::default();
    let mut first_sites = HashMap::new();
    let mut part = 0;
    let mut add = |run: Run| {
        graph.add_run(part, &run);
        for e in &graph.edges {
            if let Some(w) = e.witnesses.first().filter(|w| w.run == part) {
                first_sites.entry((e.from, e.to)).or_insert_with(|| {
                    run.location(run.acquisitions[w.acquisition as usize].site)
                        .text
                });
            }
        }
        part += 1;
    };
    for input in &inputs {
        // The graph reports no race: a race budget of 0 leaves the race analysis out.
        let (last, _) = load_run(
            input,
            &wrappers,
            tty,
            SegmentBounds::of_events(args.segment_events),
            0,
            &mut add,
        )?;
        add(last);
    }
    let dot = write_dot(&graph, &first_sites, args.scc_only);
    let bytes = match args.format {
        Format::Dot => dot.into_bytes(),
        Format::Svg => to_svg(&dot)?,
    };
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        // Lock and site names come from traces: their control characters are shown escaped.
        Format::Dot => foresight_analyzer::escape::Escaping::new(&mut out).write_all(&bytes),
        Format::Svg => out.write_all(&bytes),
    };
    ignore_broken_pipe(written.and_then(|_| out.flush()))?;
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
