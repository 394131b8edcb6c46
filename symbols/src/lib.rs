//! Symbolises a foresight trace in place (`FORMAT.md` §7.7): every code address of the site
//! table and every static lock address (`ClassKey::Static`) gets a `FrameSymbol` record with
//! its function (or variable), file and line, and every static variable that a memory access
//! touched gets a `DataVariable` record with the layout of its type (§7.9–§7.10), read from
//! the modules the trace names, so that the trace can be analysed on a machine that does not
//! have the binaries (`Tables::data_symbol` names an accessed address: `counters[3]`).
//!
//! ```no_run
//! let summary = foresight_symbols::symbolize_in_place(
//!     std::path::Path::new("run.trace"),
//!     &foresight_symbols::SymbolizeOptions::default(),
//! )?;
//! for w in summary.warnings() {
//!     eprintln!("warning: {w}");
//! }
//! # Ok::<(), foresight_symbols::SymbolizeError>(())
//! ```
//!
//! The pass reads the tables of the trace and, in one streaming pass over the events, the
//! static data that accesses touched (`touched.rs`); it resolves frames and data module by
//! module (a module that is missing, unreadable or of another build is skipped with a warning,
//! never an error), and appends the new records at the end of the file: it removes the
//! trailer, appends table chunks and writes the trailer again. Frames that already have a
//! symbol, and variables that already have a record, are left alone, so running it twice
//! appends nothing the second time.
//!
//! A reader that decodes the events anyway (`foresight analyze` of a trace recorded with
//! `--no-symbolize`) need not pay for that pass: [`symbol_records`] gives the frames' records
//! alone, to add to the tables it read, and [`StaticData`] names the static data of the few
//! accesses it reports, as the symbolised trace would name them.

#![warn(missing_docs)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use foresight_trace::frame::ChunkKind;
use foresight_trace::reader::TraceFile;
use foresight_trace::tables::{
    ClassKey, DataMember, DataType, DataVariable, Frame, FrameSymbol, SourceLocation, StringEntry,
    TableRecord, Tables, Trailer, TypeShape, RECORDER_PRODUCER,
};
use foresight_trace::writer::{trailer_chunk, TableWriter};
use foresight_trace::{StringId, TraceError};

mod append;
mod cache;
mod code;
mod module;
mod names;
mod touched;

use module::ModuleData;
pub use names::{DataAccess, DataName, StaticData};

/// One source location, before its strings are interned into the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResolvedLocation {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: u32,
    pub column: u32,
}

/// How to symbolise.
#[derive(Clone, Debug)]
pub struct SymbolizeOptions {
    /// Demangle C++ and Rust names (`_ZN3foo3barEv` → `foo::bar()`).
    pub demangle: bool,
    /// Directories searched for separate debug files by build-id
    /// (`DIR/.build-id/ab/cdef….debug`), used when a module has no DWARF of its own.
    pub debug_dirs: Vec<PathBuf>,
    /// `fsync` the trace after appending.
    pub sync: bool,
    /// Name the static variables that memory accesses touched (`FORMAT.md` §7.9): costs one
    /// streaming pass over the trace's events.
    pub data: bool,
    /// A directory where the frames resolved for each module build are kept, so that the
    /// next symbolisation of a trace of the same build reads no module and no DWARF for them
    /// (`cache.rs`). It must be this build of foresight's own: entries are not revised when
    /// the way frames are named changes. `None`: every module is read.
    pub frame_cache: Option<PathBuf>,
}

impl Default for SymbolizeOptions {
    fn default() -> Self {
        Self {
            demangle: true,
            debug_dirs: vec![PathBuf::from("/usr/lib/debug")],
            sync: true,
            data: true,
            frame_cache: None,
        }
    }
}

/// What a symbolisation pass did.
#[derive(Clone, Debug, Default)]
pub struct SymbolizeSummary {
    /// The trace symbolised.
    pub path: PathBuf,
    /// Distinct frames the trace refers to (site frames and static lock addresses).
    pub frames: usize,
    /// Frames that had a symbol record before this pass; they were left alone.
    pub already_symbolised: usize,
    /// Symbol records this pass appended.
    pub symbolised: usize,
    /// Frames of usable modules for which no symbol was found (no record is written for them,
    /// so a later pass with better debug information can still resolve them).
    pub unresolved: usize,
    /// Modules that were read and matched the trace.
    pub modules_used: usize,
    /// Modules whose frames were not symbolised, and why.
    pub modules_skipped: Vec<SkippedModule>,
    /// Bytes added to the file (new table chunks and the trailer written again); 0 when the
    /// file was not touched.
    pub bytes_appended: u64,
    /// Whether the trace ended with a trailer (it was written again after the new chunks).
    pub had_trailer: bool,
    /// Bytes of an incomplete last chunk (a writer that died mid-chunk) that were removed so
    /// that the appended chunks are readable: (offset, length).
    pub dropped_tail: Option<(u64, u64)>,
    /// Other things worth telling the user.
    pub notes: Vec<String>,
    /// Memory events (reads, writes, atomics) the data pass read.
    pub data_accesses: u64,
    /// 8-byte granules of module images (static data) that they touched.
    pub data_granules: u64,
    /// Of those, granules no variable holds (padding, data without a symbol) in the modules
    /// that were read.
    pub data_unnamed_granules: u64,
    /// Variable records this pass appended.
    pub data_variables: usize,
    /// Touched variables that had a record before this pass; they were left alone.
    pub data_already: usize,
    /// Type layouts this pass appended.
    pub data_types: usize,
    /// Time the pass over the events took.
    pub data_pass_time: Duration,
}

impl SymbolizeSummary {
    /// One line per thing the user should know: skipped modules, dropped bytes, notes.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self.modules_skipped.iter().map(|m| m.to_string()).collect();
        if let Some((offset, len)) = self.dropped_tail {
            out.push(format!(
                "byte {offset}: removed {len} bytes of an incomplete last chunk \
                 (the recording was cut short inside it) before appending symbols"
            ));
        }
        out.extend(self.notes.iter().cloned());
        out
    }
}

/// A module whose frames could not be symbolised.
#[derive(Clone, Debug)]
pub struct SkippedModule {
    /// The module's id in the trace's module table.
    pub module: u32,
    /// Its path as the trace records it, when the trace has one.
    pub path: Option<String>,
    /// How many frames this cost.
    pub frames: usize,
    /// How many 8-byte granules of accessed static data this left unnamed.
    pub data_granules: u64,
    /// Why its frames could not be symbolised.
    pub reason: SkipReason,
}

impl fmt::Display for SkippedModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        match &self.path {
            Some(p) => write!(f, "module {} ({p}): {}", self.module, self.reason)?,
            None => write!(f, "module {}: {}", self.module, self.reason)?,
        }
        let frames = self.frames as u64;
        match (frames, self.data_granules) {
            (n, 0) => write!(f, "; {n} frame{} left unsymbolised", plural(n)),
            (0, g) => write!(
                f,
                "; accesses to {} byte{} of its static data left unnamed",
                g * 8,
                plural(g * 8)
            ),
            (n, g) => write!(
                f,
                "; {n} frame{} left unsymbolised, accesses to {} bytes of its static data \
                 unnamed",
                plural(n),
                g * 8
            ),
        }
    }
}

/// Why a module was skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Frames name a module id the module table does not define.
    NotInTables,
    /// The module record names a string id the string table does not define.
    NoPath,
    /// The file cannot be read (missing, not a regular file, too large, …).
    Unreadable(String),
    /// The file is not an ELF object this crate understands.
    NotElf(String),
    /// The file is another build than the one recorded.
    BuildIdMismatch {
        /// The build id the trace recorded.
        recorded: Vec<u8>,
        /// The build id of the file found at the module's path.
        found: Vec<u8>,
    },
    /// Reading the debug information failed badly (a malformed file).
    Malformed(String),
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotInTables => write!(f, "not defined in the trace's module table"),
            Self::NoPath => write!(f, "its path is missing from the trace's string table"),
            Self::Unreadable(why) => write!(f, "cannot read it: {why}"),
            Self::NotElf(why) => write!(f, "not a readable ELF file: {why}"),
            Self::BuildIdMismatch { recorded, found } => write!(
                f,
                "build-id {} differs from the recorded {} (the file was rebuilt or replaced)",
                hex_or_none(found),
                hex_or_none(recorded)
            ),
            Self::Malformed(why) => write!(f, "malformed: {why}"),
        }
    }
}

fn hex_or_none(b: &[u8]) -> String {
    if b.is_empty() {
        return "(none)".to_string();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A pass that could not complete. The trace file is unchanged unless the error says
/// otherwise.
#[derive(Debug, thiserror::Error)]
pub enum SymbolizeError {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A file operation failed.
    #[error("{path}: {op}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done to it.
        op: &'static str,
        /// The error.
        error: std::io::Error,
    },
    #[error("{path}: byte {offset}: writing the symbols failed: {error}; the file was restored")]
    /// Appending the symbols failed; the file was cut back to its length before.
    WriteFailed {
        /// The trace.
        path: PathBuf,
        /// Where the append started: the file's length before it.
        offset: u64,
        /// The error.
        error: std::io::Error,
    },
    #[error(
        "{path}: byte {offset}: writing the symbols failed: {error}; restoring the file failed \
         too ({restore_error}): the trace may now end in an incomplete chunk (a reader still reads \
         every complete chunk before it)"
    )]
    /// Appending the symbols failed, and so did cutting the file back.
    RestoreFailed {
        /// The trace.
        path: PathBuf,
        /// Where the append started: the file's length before it.
        offset: u64,
        /// The error of the append.
        error: std::io::Error,
        /// The error of cutting the file back.
        restore_error: std::io::Error,
    },
    #[error("{path}: the file changed while it was being symbolised (it was {expected} bytes, now {found}); is a recording still writing it?")]
    /// The file's length changed during the pass (a recording still writing it).
    Changed {
        /// The trace.
        path: PathBuf,
        /// Its length when the pass read it.
        expected: u64,
        /// Its length before the append.
        found: u64,
    },
    #[error(
        "{path}: no free string id is left for the symbol names (the string table uses id {max})"
    )]
    /// Every string id is taken: the symbol names cannot be added.
    StringIdsExhausted {
        /// The trace.
        path: PathBuf,
        /// The largest id the string table uses.
        max: u32,
    },
}

/// How a frame is used, which decides how it is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Use {
    /// A return address (a site frame): look up `offset - 1`, DWARF lines and inlining.
    Code,
    /// The address of a static lock: the symbol table's object that contains it.
    Data,
}

/// What symbolising needs from the trace's tables.
struct Wanted {
    frames: BTreeMap<Frame, Use>,
    already: usize,
    modules: BTreeMap<u32, foresight_trace::tables::ModuleInfo>,
    strings: HashMap<StringId, String>,
    /// Variables that already have a record, by (module, offset).
    variables: BTreeSet<(u32, u64)>,
    /// The first type id no record uses (`None`: all are taken).
    next_type: Option<u32>,
}

/// What the pass needs from the trace, taken before the file is modified (the reader reads
/// chunks on demand, and must not see the file while it is rewritten).
struct Snapshot {
    file_len: u64,
    wanted: Wanted,
    trailer: Option<Trailer>,
    /// Where the new chunks go: the old trailer's offset, or the end of the last complete chunk.
    cut: u64,
}

/// The frames to resolve (those without a symbol record) and what the records written must
/// not clash with.
fn wanted(t: &Tables) -> Wanted {
    let mut frames = BTreeMap::new();
    // Static lock addresses first: a site frame at the same address (unlikely) then wins,
    // since code lookups give more (file and line).
    for o in t.objects.values() {
        if let ClassKey::Static(f) = o.class {
            frames.insert(f, Use::Data);
        }
    }
    for s in t.sites.values() {
        for f in s.frames.iter().chain(&s.first_caller) {
            frames.insert(*f, Use::Code);
        }
    }
    let before = frames.len();
    frames.retain(|f, _| !t.symbols.contains_key(f));
    let already = before - frames.len();
    Wanted {
        frames,
        already,
        modules: t.modules.clone(),
        strings: t.strings.clone(),
        variables: t.data_variables.keys().copied().collect(),
        next_type: match t.data_types.keys().max() {
            None => Some(0),
            Some(m) => m.checked_add(1),
        },
    }
}

fn snapshot(file: &TraceFile, header_end: u64) -> Snapshot {
    let chunks = file.chunks();
    let last_complete_end = chunks
        .iter()
        .map(|c| c.payload_offset + c.payload_len as u64)
        .max()
        .unwrap_or(header_end)
        .max(header_end);
    let cut = match (file.trailer(), chunks.last()) {
        // The normal case: the trailer is the last chunk; the new chunks replace it and it is
        // written again after them.
        (Some(_), Some(c)) if c.kind == ChunkKind::Trailer => c.offset,
        // A trailer that is not last (a damaged file), or none: append after the last complete
        // chunk, dropping an incomplete one whose header would swallow the new bytes.
        _ => last_complete_end,
    };
    Snapshot {
        file_len: 0, // set by the caller from the file's metadata
        wanted: wanted(file.tables()),
        trailer: file.trailer().cloned(),
        cut,
    }
}

/// End of the file prefix and header (where the first chunk starts), from the prefix's header
/// length, which the reader has already checked.
fn file_header_end(path: &Path) -> Result<u64, SymbolizeError> {
    use std::io::Read;
    let io = |op, error| SymbolizeError::Io {
        path: path.to_path_buf(),
        op,
        error,
    };
    let mut prefix = [0u8; foresight_trace::frame::FILE_PREFIX_LEN];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut prefix))
        .map_err(|e| io("cannot read the file prefix", e))?;
    let h = u32::from_le_bytes([prefix[12], prefix[13], prefix[14], prefix[15]]);
    // A 2.x prefix is longer: the required-features word follows (FORMAT.md §3.1).
    let major = u16::from_le_bytes([prefix[8], prefix[9]]);
    Ok(foresight_trace::frame::prefix_len(major) as u64 + h as u64)
}

/// Symbolises the trace at `path` in place. See the crate documentation.
///
/// The trace must not be being written: call this after the recorded process ended.
pub fn symbolize_in_place(
    path: &Path,
    opts: &SymbolizeOptions,
) -> Result<SymbolizeSummary, SymbolizeError> {
    let (mut snap, accesses_possible) = {
        let file = TraceFile::open(path)?;
        // A complete trace of foresight's recorder without an access-counts record holds no
        // memory access (the recorder writes one for every thread that recorded any, at its
        // end): the data pass would read every event to find none. A trace cut short may lack
        // the records, and another writer need not write them.
        let accesses_possible = file.trailer().is_none()
            || !file.header().producer.starts_with(RECORDER_PRODUCER)
            || !file.tables().access_counts.is_empty();
        let mut s = snapshot(&file, file_header_end(path)?);
        s.file_len = std::fs::metadata(path)
            .map_err(|error| SymbolizeError::Io {
                path: path.to_path_buf(),
                op: "cannot read its metadata",
                error,
            })?
            .len();
        (s, accesses_possible)
        // `file` (and its open descriptor) is dropped here, before anything is written.
    };
    // A tail longer than one chunk is not an incomplete chunk but garbage that the reader
    // resynchronises past: leave it, and append after it.
    if snap.cut > snap.file_len || snap.file_len - snap.cut > append::MAX_TAIL {
        snap.cut = snap.file_len;
    }

    let mut summary = SymbolizeSummary {
        path: path.to_path_buf(),
        frames: snap.wanted.frames.len() + snap.wanted.already,
        already_symbolised: snap.wanted.already,
        had_trailer: snap.trailer.is_some(),
        ..Default::default()
    };

    // The static data the accesses touched, by module (the event pass).
    let collected = if opts.data && accesses_possible {
        let started = Instant::now();
        let t = touched::collect(path);
        summary.data_pass_time = started.elapsed();
        // The trace was read once already: a failure now (the file changed) costs only the
        // data's names.
        t.map_err(|e| summary.notes.push(format!("static data not named: {e}")))
            .ok()
    } else {
        None
    };
    let touched = if let Some(t) = collected {
        summary.data_accesses = t.accesses;
        summary.data_granules = t.granules;
        if t.overflowed > 0 {
            summary.notes.push(format!(
                "the accesses touched more than {} pages of static data: {} accesses beyond \
                 them were not used to name variables",
                touched::MAX_PAGES,
                t.overflowed
            ));
        }
        t.by_module
    } else {
        BTreeMap::new()
    };

    let (resolved, data) = resolve_modules(&snap.wanted, &touched, &mut summary, |p, i, f, r| {
        module::resolve(p, i, f, r, opts)
    });
    if resolved.is_empty() && data.is_empty() {
        return Ok(summary);
    }

    let (new, counts) = records(path, &snap.wanted, &resolved, &data)?;
    let new_chunks = table_chunks(&new);
    summary.symbolised = resolved.len();
    summary.data_variables = counts.variables;
    summary.data_types = counts.types;
    if counts.types_exhausted {
        summary.notes.push(
            "no free type id is left: some variables were written without their layout".into(),
        );
    }
    let mut bytes = new_chunks;
    if let Some(t) = &snap.trailer {
        // Same counts: table chunks are not event chunks.
        bytes.extend_from_slice(&trailer_chunk(t));
    }
    let outcome = append::replace_tail(path, snap.file_len, snap.cut, &bytes, opts.sync)?;
    summary.bytes_appended = bytes.len() as u64;
    if snap.trailer.is_none() && outcome.removed > 0 {
        summary.dropped_tail = Some((snap.cut, outcome.removed));
    }
    Ok(summary)
}

/// The frames resolved, with their locations.
type Resolved = BTreeMap<Frame, Vec<ResolvedLocation>>;

/// The touched data of each module (module offsets: sorted, disjoint runs of granules).
pub(crate) type DataByModule = BTreeMap<u32, Vec<(u64, u64)>>;

/// Resolves the frames of `wanted` and the data of `touched` module by module with `resolve`;
/// a module that is not in the tables, has no path, cannot be used or makes a parser panic is
/// skipped (`summary.modules_skipped`) and costs only its frames and data.
fn resolve_modules(
    wanted: &Wanted,
    touched: &DataByModule,
    summary: &mut SymbolizeSummary,
    mut resolve: impl FnMut(
        &Path,
        &foresight_trace::tables::ModuleInfo,
        &[(Frame, Use)],
        &[(u64, u64)],
    ) -> Result<module::ModuleOutcome, SkipReason>,
) -> (Resolved, Vec<(u32, ModuleData)>) {
    // Group the frames by module and resolve them with the module's touched data.
    let mut by_module: BTreeMap<u32, Vec<(Frame, Use)>> = BTreeMap::new();
    for (f, u) in &wanted.frames {
        by_module.entry(f.module).or_default().push((*f, *u));
    }
    for id in touched.keys() {
        by_module.entry(*id).or_default();
    }
    let mut resolved: Resolved = BTreeMap::new();
    let mut data: Vec<(u32, ModuleData)> = Vec::new();
    for (id, frames) in &by_module {
        let runs = touched.get(id).map_or(&[][..], Vec::as_slice);
        let skip = |reason, path: Option<String>| SkippedModule {
            module: *id,
            path,
            frames: frames.len(),
            data_granules: runs.iter().map(|(lo, hi)| (hi - lo) / 8).sum(),
            reason,
        };
        let Some(info) = wanted.modules.get(id) else {
            summary
                .modules_skipped
                .push(skip(SkipReason::NotInTables, None));
            continue;
        };
        let Some(module_path) = wanted.strings.get(&info.path).cloned() else {
            summary.modules_skipped.push(skip(SkipReason::NoPath, None));
            continue;
        };
        // A malformed module must cost only that module, even if a parser panics on it.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            resolve(Path::new(&module_path), info, frames, runs)
        }));
        match outcome {
            Ok(Ok(out)) => {
                summary.modules_used += 1;
                summary.notes.extend(out.notes);
                for (frame, locs) in out.resolved {
                    if locs.is_empty() {
                        summary.unresolved += 1;
                    } else {
                        resolved.insert(frame, locs);
                    }
                }
                let mut d = out.data;
                summary.data_unnamed_granules += d.unnamed_granules;
                let before = d.variables.len();
                d.variables
                    .retain(|v| !wanted.variables.contains(&(*id, v.offset)));
                summary.data_already += before - d.variables.len();
                if !d.variables.is_empty() {
                    data.push((*id, d));
                }
            }
            Ok(Err(reason)) => summary
                .modules_skipped
                .push(skip(reason, Some(module_path))),
            Err(_) => summary.modules_skipped.push(skip(
                SkipReason::Malformed("its debug information could not be parsed".into()),
                Some(module_path),
            )),
        }
    }
    (resolved, data)
}

/// The symbol records [`symbolize_in_place`] would append to the trace whose tables are
/// `tables` (read from the file at `path`), for its frames alone: every site frame and static
/// lock address without a symbol record, with the strings they use, in the order the pass
/// writes them. No event is read and no static variable is named: with these records added to
/// the tables (`TraceStream::add_table_records`), the trace reads as symbolised but for its
/// data records, which [`StaticData`] makes for the accesses a report names.
pub fn symbol_records(
    path: &Path,
    tables: &Tables,
    opts: &SymbolizeOptions,
) -> Result<(Vec<TableRecord>, SymbolizeSummary), SymbolizeError> {
    let wanted = wanted(tables);
    let mut summary = SymbolizeSummary {
        path: path.to_path_buf(),
        frames: wanted.frames.len() + wanted.already,
        already_symbolised: wanted.already,
        ..Default::default()
    };
    let (resolved, data) =
        resolve_modules(&wanted, &BTreeMap::new(), &mut summary, |p, i, f, r| {
            module::resolve(p, i, f, r, opts)
        });
    let (new, _) = records(path, &wanted, &resolved, &data)?;
    summary.symbolised = resolved.len();
    Ok((new, summary))
}

/// `records` as table chunks of about 32 KiB, as `TraceWriter` writes them: far below the
/// payload limit.
fn table_chunks(records: &[TableRecord]) -> Vec<u8> {
    let mut w = TableWriter::new();
    let mut out = Vec::new();
    for r in records {
        w.push(r);
        // A string goes in the chunk of the record that first uses it.
        if !matches!(r, TableRecord::String(_)) && w.pending_bytes() > 32 << 10 {
            w.flush_into(|b| out.extend_from_slice(b));
        }
    }
    w.flush_into(|b| out.extend_from_slice(b));
    out
}

/// What `encode_records` wrote of the data records.
#[derive(Default)]
struct DataCounts {
    variables: usize,
    types: usize,
    types_exhausted: bool,
}

/// The string, symbol and data records for `resolved` and `data`, in the order they are written.
fn records(
    path: &Path,
    snap: &Wanted,
    resolved: &BTreeMap<Frame, Vec<ResolvedLocation>>,
    data: &[(u32, ModuleData)],
) -> Result<(Vec<TableRecord>, DataCounts), SymbolizeError> {
    // Reuse the trace's strings (the smallest id for a text, so the choice is stable).
    let mut ids: HashMap<&str, StringId> = HashMap::new();
    for (id, text) in &snap.strings {
        ids.entry(text.as_str())
            .and_modify(|e| *e = (*e).min(*id))
            .or_insert(*id);
    }
    let max = snap.strings.keys().copied().max();
    let mut next: Option<StringId> = match max {
        None => Some(0),
        Some(m) => m.checked_add(1),
    };
    let mut new_strings: HashMap<String, StringId> = HashMap::new();
    let mut w: Vec<TableRecord> = Vec::new();

    let mut intern = |w: &mut Vec<TableRecord>, text: &str| -> Result<StringId, SymbolizeError> {
        if let Some(&id) = ids.get(text).or_else(|| new_strings.get(text)) {
            return Ok(id);
        }
        let id = next.ok_or_else(|| SymbolizeError::StringIdsExhausted {
            path: path.to_path_buf(),
            max: max.unwrap_or(0),
        })?;
        next = id.checked_add(1);
        // The string goes before the first record that uses it (FORMAT.md §4.3).
        w.push(TableRecord::String(StringEntry {
            id,
            text: text.to_string(),
        }));
        new_strings.insert(text.to_string(), id);
        Ok(id)
    };

    for (frame, locs) in resolved {
        let mut locations = Vec::with_capacity(locs.len());
        for l in locs {
            let function = match &l.function {
                Some(f) => Some(intern(&mut w, f)?),
                None => None,
            };
            let file = match &l.file {
                Some(f) => Some(intern(&mut w, f)?),
                None => None,
            };
            locations.push(SourceLocation {
                function,
                file,
                line: l.line,
                column: l.column,
            });
        }
        w.push(TableRecord::Symbol(FrameSymbol {
            frame: *frame,
            locations,
        }));
    }

    let mut counts = DataCounts::default();
    let mut next_type = snap.next_type;
    for (module, d) in data {
        // The module's layouts that its new variables reach, numbered in the trace's ids.
        let mut global: HashMap<u32, u32> = HashMap::new();
        let mut order: Vec<u32> = Vec::new();
        let mut stack: Vec<u32> = d.variables.iter().filter_map(|v| v.ty).collect();
        while let Some(local) = stack.pop() {
            if global.contains_key(&local) {
                continue;
            }
            let Some(id) = next_type else {
                counts.types_exhausted = true;
                break;
            };
            next_type = id.checked_add(1);
            global.insert(local, id);
            order.push(local);
            match d.types.types.get(local as usize).map(|t| &t.shape) {
                Some(TypeShape::Array { element, .. }) => stack.extend(element),
                Some(TypeShape::Record { members }) => {
                    stack.extend(members.iter().filter_map(|m| m.ty))
                }
                None => {}
            }
        }
        let map_ty = |t: Option<u32>| t.and_then(|t| global.get(&t).copied());
        for local in order {
            let shape = match &d.types.types[local as usize].shape {
                TypeShape::Array {
                    element,
                    element_size,
                    count,
                } => TypeShape::Array {
                    element: map_ty(*element),
                    element_size: *element_size,
                    count: *count,
                },
                TypeShape::Record { members } => {
                    let mut out = Vec::with_capacity(members.len());
                    for m in members {
                        let name = match m.name.and_then(|n| d.types.names.get(n as usize)) {
                            Some(n) => Some(intern(&mut w, n)?),
                            None => None,
                        };
                        out.push(DataMember {
                            name,
                            offset: m.offset,
                            size: m.size,
                            ty: map_ty(m.ty),
                        });
                    }
                    TypeShape::Record { members: out }
                }
            };
            w.push(TableRecord::DataType(DataType {
                id: global[&local],
                shape,
            }));
            counts.types += 1;
        }
        for v in &d.variables {
            let name = intern(&mut w, &v.name)?;
            let file = match &v.file {
                Some(f) => Some(intern(&mut w, f)?),
                None => None,
            };
            w.push(TableRecord::DataVariable(DataVariable {
                module: *module,
                offset: v.offset,
                size: v.size,
                name,
                file,
                line: v.line,
                ty: map_ty(v.ty),
            }));
            counts.variables += 1;
        }
    }
    Ok((w, counts))
}
