//! RAPID's STD text format (one event per line, `THREAD|OP(TARGET)|LOCATION`), the format the
//! research tools for race and deadlock prediction read: [`parse`] reads a line, [`import`]
//! converts STD to a foresight trace in one streaming pass, [`export`](mod@export) the other way,
//! saying what STD cannot express; [`synth`] writes synthetic traces with planted races and
//! deadlocks in either format. [`hb`] is the reference happens-before engine: RAPID's `HBEpoch`
//! straight on the text, to compare foresight with RAPID on the same file and to cross-check the
//! analysis's own race pass; `foresight analyze` never uses it.
//!
//! One `unsafe` block, the SSE2 line scan of [`parse`], says why it is sound; nothing else
//! may have one.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod export;
pub mod hb;
pub mod import;
mod names;
pub mod parse;
pub mod synth;

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

pub use export::{export, ExportOptions, ExportSummary};
pub use import::{import_from, Failure, ImportError, ImportSummary, Importer};

/// Imports the STD file at `input` into a trace written to `out`.
pub fn import_file<W: Write>(input: &Path, out: W) -> Result<(W, ImportSummary), Failure> {
    let file = File::open(input)?;
    let mut importer = Importer::new(out, &input.display().to_string())?;
    import_from(file, &mut importer)?;
    Ok(importer.finish()?)
}

/// Imports the STD file at `input` into the trace file `output`.
pub fn import_to_path(input: &Path, output: &Path) -> Result<ImportSummary, Failure> {
    let out = BufWriter::with_capacity(1 << 20, File::create(output)?);
    let (out, summary) = import_file(input, out)?;
    out.into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()
        .ok();
    Ok(summary)
}

/// Imports the STD file at `input` into `output`, a file open for writing (the temporary
/// trace `foresight` reads STD through: created private, never by its name).
pub fn import_to_file(input: &Path, output: &File) -> Result<ImportSummary, Failure> {
    let out = BufWriter::with_capacity(1 << 20, output);
    let (out, summary) = import_file(input, out)?;
    out.into_inner().map_err(|e| e.into_error())?;
    Ok(summary)
}

/// Whether the file at `path` is STD text rather than a foresight trace (by its first bytes).
/// Only a regular file is looked at: a FIFO would block the read, and whatever else the path
/// is, the trace reader says so.
pub fn is_std_file(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Ok(false);
    }
    let mut head = Vec::with_capacity(4096);
    file.take(4096).read_to_end(&mut head)?;
    if head.starts_with(&foresight_trace::frame::FILE_MAGIC) {
        return Ok(false);
    }
    Ok(parse::looks_like_std(&head))
}
