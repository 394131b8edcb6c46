//! What every subcommand shares: loading a trace with a clear error, reporting its problems,
//! and writing to a pipe that may close early.

use std::path::Path;

use foresight_trace::Trace;

/// Opens and decodes a trace and checks its ordering invariant; an unreadable file is an error
/// (exit code 2), a trace that breaks the invariant reads with the breaks among its problems.
pub fn load(path: &Path) -> anyhow::Result<Trace> {
    // The error names the file and the byte offset already.
    let mut trace = Trace::open(path)?;
    let broken = foresight_trace::ordering::check(&trace);
    if !broken.is_empty() {
        trace.problems.extend(broken);
        trace.problems.sort_by_key(|p| p.offset);
    }
    Ok(trace)
}

/// Tells on stderr what was wrong with a trace that still read.
pub fn report_problems(trace: &Trace) {
    const SHOWN: usize = 10;
    for p in trace.problems.iter().take(SHOWN) {
        eprintln!("foresight: warning: {}: {p}", trace.path.display());
    }
    if trace.problems.len() > SHOWN {
        eprintln!(
            "foresight: warning: {}: {} more problems (see `foresight stats`)",
            trace.path.display(),
            trace.problems.len() - SHOWN
        );
    }
}

/// A reader of our output that went away (`foresight dump … | head`) is not an error.
pub fn ignore_broken_pipe(r: std::io::Result<()>) -> anyhow::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
