//! What every subcommand shares: loading a trace with a clear error, reporting its problems,
//! and writing to a pipe that may close early.

use std::path::Path;

use foresight_trace::{Problem, Trace, TraceStream};

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

/// Opens a trace for one streaming pass (`TraceStream`: memory bounded by the threads, not by
/// the trace's length); an unreadable file is an error (exit code 2) that names it. The pass
/// checks the ordering invariant when asked to (`MergedStream::with_ordering_check`).
pub fn open_stream(path: &Path) -> anyhow::Result<TraceStream> {
    // The error names the file and the byte offset already.
    Ok(TraceStream::open(path)?)
}

/// Tells on stderr what was wrong with a trace that still read.
pub fn report_problems(trace: &Trace) {
    warn_problems(&trace.path, &trace.problems);
}

/// Tells on stderr what was wrong with the trace at `path`, the first few problems and a count.
pub fn warn_problems(path: &Path, problems: &[Problem]) {
    const SHOWN: usize = 10;
    for p in problems.iter().take(SHOWN) {
        eprintln!("foresight: warning: {}: {p}", path.display());
    }
    if problems.len() > SHOWN {
        eprintln!(
            "foresight: warning: {}: {} more problems (see `foresight stats`)",
            path.display(),
            problems.len() - SHOWN
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
