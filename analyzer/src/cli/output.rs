//! What every subcommand shares: opening a trace with a clear error, reporting its problems,
//! and writing to a pipe that may close early.

use std::path::Path;

use foresight_trace::{Problem, TraceStream};

/// Opens a trace for one streaming pass (`TraceStream`: memory bounded by the threads, not by
/// the trace's length); an unreadable file is an error (exit code 2) that names it. The pass
/// checks the ordering invariant when asked to (`MergedStream::with_ordering_check`).
///
/// A file of RAPID STD text is imported first, into a file of the temporary directory that is
/// unlinked as soon as it is open (the stream reads it through its descriptor), so that every
/// command that reads a trace reads STD too.
pub fn open_stream(path: &Path) -> anyhow::Result<TraceStream> {
    if crate::stdtrace::is_std_file(path).unwrap_or(false) {
        return open_std(path);
    }
    // The error names the file and the byte offset already.
    Ok(TraceStream::open(path)?)
}

fn open_std(path: &Path) -> anyhow::Result<TraceStream> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp =
        std::env::temp_dir().join(format!("foresight-import-{}-{n}.trace", std::process::id()));
    let imported = crate::stdtrace::import_to_path(path, &temp);
    let opened = imported.map(|_| TraceStream::open(&temp));
    let _ = std::fs::remove_file(&temp);
    match opened {
        Ok(stream) => Ok(stream?),
        Err(crate::stdtrace::Failure::Input(e)) => {
            anyhow::bail!("{}: not a valid STD trace: {e}", path.display())
        }
        Err(crate::stdtrace::Failure::Io(e)) => {
            anyhow::bail!("{}: importing STD text: {e}", path.display())
        }
    }
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
