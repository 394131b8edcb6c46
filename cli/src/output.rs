//! What every subcommand shares: opening a trace with a clear error, reporting its problems,
//! and writing to a pipe that may close early.

use std::path::Path;

use foresight_trace::{Problem, StreamOptions, TraceStream};

/// Opens a trace file for one streaming pass (`TraceStream`: memory bounded by the threads, not by
/// the trace's length); an unreadable file is an error (exit code 2) that names it. The pass
/// checks the ordering invariant when asked to (`MergedStream::with_ordering_check`).
///
/// A file of RAPID STD text is imported first, into a new private file of the temporary
/// directory (`tempfile`: a name no one else chose, created with `O_EXCL`, mode 0600), removed
/// as soon as the stream has it open (it reads through its descriptor), so that every command
/// that reads a trace reads STD too. Commands open traces through `run_files` (`expand`,
/// `single`, then `Input::open_stream`), the one caller of this. The stream keeps of the tables
/// what `options` asks for.
pub fn open_file(path: &Path, options: StreamOptions) -> anyhow::Result<TraceStream> {
    if foresight_stdtrace::is_std_file(path).unwrap_or(false) {
        return open_std(path, options);
    }
    // The error names the file and the byte offset already.
    let stream = TraceStream::open_with(path, options)?;
    if !needs_symbols(&stream) {
        return Ok(stream);
    }
    // Let go before the copy is symbolised and opened, so that the two streams' tables and
    // chunk indices (tens of MB for a process that created 10^5 threads) are not held at
    // once; the trace is opened again if the copy cannot be made.
    drop(stream);
    match symbolised_copy(path, options) {
        Some(symbolised) => Ok(symbolised),
        None => Ok(TraceStream::open_with(path, options)?),
    }
}

/// [`open_file`] for an analysis, which reads each event once: a complete trace that was not
/// symbolised ([`needs_symbols`]) gets the symbols of its frames in memory (`symbol_records`: its tables
/// and the modules' symbols, no event, no copy of the file), and what names its static data
/// afterwards, for the accesses the findings hold (`foresight_symbols::StaticData`), as the
/// symbolised copy of [`open_file`] would have named them.
pub fn open_for_analysis(
    path: &Path,
    options: StreamOptions,
) -> anyhow::Result<(TraceStream, Option<foresight_symbols::StaticData>)> {
    if foresight_stdtrace::is_std_file(path).unwrap_or(false) {
        return Ok((open_std(path, options)?, None));
    }
    let mut stream = TraceStream::open_with(path, options)?;
    if !needs_symbols(&stream) {
        return Ok((stream, None));
    }
    // A trace cut short or damaged is read through the symbolised copy, as every command reads
    // it: appending to it drops an incomplete last chunk and moves the end that the
    // problems of a missing trailer name, which the report shows.
    if stream.trailer().is_none() || !stream.scan_problems().is_empty() {
        drop(stream);
        return Ok((open_file(path, options)?, None));
    }
    let opts = symbolize_options();
    let Ok((records, summary)) = foresight_symbols::symbol_records(path, stream.tables(), &opts)
    else {
        return Ok((stream, None));
    };
    stream.add_table_records(&records);
    say_symbolised(path, &summary.warnings());
    Ok((stream, Some(foresight_symbols::StaticData::new(path, opts))))
}

/// How a trace that was not symbolised is symbolised for reading: as `record` does, but for
/// the `fsync` (a private copy, or nothing written).
fn symbolize_options() -> foresight_symbols::SymbolizeOptions {
    foresight_symbols::SymbolizeOptions {
        sync: false,
        ..Default::default()
    }
}

/// Says on stderr that the trace at `path` was symbolised for reading, and `warnings`.
fn say_symbolised(path: &Path, warnings: &[String]) {
    say!(
        "foresight: {}: not symbolised when it was recorded (`foresight record` was killed, or \
         --no-symbolize); its lines were read from the binaries it names, which are still there",
        path.display()
    );
    for w in warnings {
        say!("foresight: warning: {}: {w}", path.display());
    }
}

/// A trace whose call sites were not symbolised when it was recorded (`foresight record` was
/// killed before it could, or ran with `--no-symbolize`) while binaries it names are still
/// where they were: [`symbolised_copy`] can name their lines.
fn needs_symbols(stream: &TraceStream) -> bool {
    let tables = stream.tables();
    // A trace symbolised once has symbols of functions or variables (the C library's frames
    // may have none); one never symbolised has none at all, but for the source locations a
    // Rust program names itself (`foresight-sync`), which the recorder writes without a
    // function.
    if tables
        .symbols
        .values()
        .any(|s| s.locations.iter().any(|l| l.function.is_some()))
    {
        return false;
    }
    let present = |module: u32| {
        tables
            .modules
            .get(&module)
            .and_then(|m| tables.string(m.path))
            .is_some_and(|p| {
                !foresight_trace::runtime_library::is_runtime_library(p) && Path::new(p).is_file()
            })
    };
    tables
        .sites
        .values()
        .flat_map(|s| &s.frames)
        .any(|f| present(f.module))
}

/// The trace at `path` ([`needs_symbols`]) symbolised on a private copy (`tempfile`, removed
/// once the stream has it open), so that findings name their lines; the trace itself is not
/// written to. Said on stderr. `None`: it could not be done (the sites stay `module+offset`).
fn symbolised_copy(path: &Path, keep: StreamOptions) -> Option<TraceStream> {
    let mut temp = tempfile::Builder::new()
        .prefix("foresight-symbols-")
        .suffix(".trace")
        .tempfile()
        .ok()?;
    let mut original = std::fs::File::open(path).ok()?;
    std::io::copy(&mut original, temp.as_file_mut()).ok()?;
    let summary = foresight_symbols::symbolize_in_place(temp.path(), &symbolize_options()).ok()?;
    let file = std::fs::File::open(temp.path()).ok()?;
    drop(temp);
    let symbolised = TraceStream::from_file_with(path, file, keep).ok()?;
    say_symbolised(path, &summary.warnings());
    Some(symbolised)
}

fn open_std(path: &Path, options: StreamOptions) -> anyhow::Result<TraceStream> {
    let temp = tempfile::Builder::new()
        .prefix("foresight-import-")
        .suffix(".trace")
        .tempfile()
        .map_err(|e| {
            anyhow::anyhow!(
                "{}: cannot create a temporary file in {} to import the STD text into: {e} \
                 (set TMPDIR to a directory of your own)",
                path.display(),
                std::env::temp_dir().display()
            )
        })?;
    let imported = foresight_stdtrace::import_to_file(path, temp.as_file());
    let opened = imported.map(|_| TraceStream::open_with(temp.path(), options));
    drop(temp);
    match opened {
        Ok(stream) => Ok(stream?),
        Err(foresight_stdtrace::Failure::Input(e)) => {
            anyhow::bail!("{}: not a valid STD trace: {e}", path.display())
        }
        Err(foresight_stdtrace::Failure::Io(e)) => {
            anyhow::bail!("{}: importing STD text: {e}", path.display())
        }
    }
}

/// Tells on stderr what was wrong with the trace at `path`, the first few problems and a count.
pub fn warn_problems(path: &Path, problems: &[Problem]) {
    const SHOWN: usize = 10;
    for p in problems.iter().take(SHOWN) {
        say!("foresight: warning: {}: {p}", path.display());
    }
    if problems.len() > SHOWN {
        say!(
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
