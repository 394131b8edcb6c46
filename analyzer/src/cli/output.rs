//! What every subcommand shares: opening a trace with a clear error, reporting its problems,
//! and writing to a pipe that may close early.

use std::path::Path;

use foresight_trace::{Problem, TraceStream};

/// Opens a trace for one streaming pass (`TraceStream`: memory bounded by the threads, not by
/// the trace's length); an unreadable file is an error (exit code 2) that names it. The pass
/// checks the ordering invariant when asked to (`MergedStream::with_ordering_check`).
pub fn open_stream(path: &Path) -> anyhow::Result<TraceStream> {
    // The error names the file and the byte offset already.
    Ok(TraceStream::open(path)?)
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
