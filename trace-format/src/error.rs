//! What can go wrong reading a trace. A trace is untrusted input: every problem names the byte
//! offset where it was found.

use std::path::PathBuf;

use crate::codec::DecodeProblem;
use crate::event::ThreadId;

/// A trace that cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: not a regular file ({what}); a trace is read from a regular file")]
    NotARegularFile { path: PathBuf, what: &'static str },
    #[error(
        "{path}: byte 0: not a foresight trace (the file does not start with the trace magic)"
    )]
    NotATrace { path: PathBuf },
    #[error("{path}: byte 8: {}", version_advice(*major, *minor))]
    UnsupportedVersion {
        path: PathBuf,
        major: u16,
        minor: u16,
    },
    #[error(
        "{path}: byte {}: trace format version {major}.{minor} requires features this reader \
         does not know ({}); upgrade foresight to read it",
        crate::frame::FILE_PREFIX_LEN,
        crate::frame::feature_names(*unknown)
    )]
    UnsupportedFeatures {
        path: PathBuf,
        major: u16,
        minor: u16,
        unknown: u64,
    },
    #[error("{path}: byte {offset}: the file header is damaged: {why}")]
    BadHeader {
        path: PathBuf,
        offset: u64,
        why: String,
    },
}

/// Something wrong inside a trace that still reads: the reader keeps every chunk it can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Byte offset in the file.
    pub offset: u64,
    pub kind: ProblemKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProblemKind {
    #[error("the trace was cut short: the last chunk is incomplete ({missing} bytes missing)")]
    CutShortInChunk { missing: u64 },
    #[error(
        "the trace was cut short while it was being read: the file now ends inside this chunk \
         ({missing} bytes missing)"
    )]
    ShrankWhileReading { missing: u64 },
    #[error("cannot read {len} bytes here: {why}")]
    ReadError { len: u64, why: String },
    #[error("the trace was cut short: it has no trailer (the recording did not end cleanly)")]
    NoTrailer,
    #[error("chunk checksum mismatch: the chunk is damaged and was skipped")]
    BadChunkChecksum,
    #[error("{skipped} bytes that are not a chunk were skipped")]
    Garbage { skipped: u64 },
    #[error("chunk too large ({len} bytes): skipped")]
    ChunkTooLarge { len: u32 },
    #[error("event chunk: {what} (event {index} of the chunk); the rest of the chunk was skipped")]
    BadEvent { index: u32, what: DecodeProblem },
    #[error("event chunk: the prefix is damaged or too short")]
    BadEventsPrefix,
    #[error("event chunk holds {found} events but its prefix says {declared}")]
    EventCountMismatch { declared: u32, found: u32 },
    #[error("thread {thread}: chunk {sequence} appears twice; the second copy was skipped")]
    DuplicateChunk { thread: ThreadId, sequence: u32 },
    #[error("thread {thread}: chunks {from}..{to} are missing")]
    MissingChunks {
        thread: ThreadId,
        from: u32,
        to: u32,
    },
    #[error("thread {thread}: keys go backwards between chunks ({previous} then {next})")]
    KeysBackwards {
        thread: ThreadId,
        previous: u64,
        next: u64,
    },
    #[error("table record (tag {tag}): {why}")]
    BadTableRecord { tag: u8, why: String },
    #[error("table: {what} {id} is defined twice; the first definition is kept")]
    DuplicateRecord { what: &'static str, id: u64 },
    #[error("the trailer is damaged: {why}")]
    BadTrailer { why: String },
    #[error("a chunk follows the trailer")]
    DataAfterTrailer,
    #[error("the trailer counts {declared} events but the file holds {found}")]
    TrailerCountMismatch { declared: u64, found: u64 },
    #[error("compressed event chunk: {0}; the chunk was skipped")]
    BadCompressedChunk(crate::compress::CompressProblem),
    #[error("unknown chunk kind {kind}: skipped")]
    UnknownChunkKind { kind: u8 },
    #[error("{0}")]
    Reference(String),
    #[error("ordering invariant broken: {0}")]
    Ordering(String),
}

/// What to tell the user about a major version this reader does not read.
fn version_advice(major: u16, minor: u16) -> String {
    let ours = crate::frame::VERSION_MAJOR_FEATURES;
    if major > ours {
        format!(
            "trace format version {major}.{minor} is newer than this reader (1.x and {ours}.x); \
             upgrade foresight to read it"
        )
    } else {
        format!(
            "trace format version {major}.{minor} is older than this reader (1.x and {ours}.x) and \
             no longer supported; read it with the foresight release that wrote it"
        )
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "byte {}: {}", self.offset, self.kind)
    }
}

impl Problem {
    /// True for problems after which the file holds fewer events than its writer wrote: the
    /// trailer's count is then not expected to match.
    pub(crate) fn loses_events(&self) -> bool {
        self.is_damage() || matches!(self.kind, ProblemKind::ShrankWhileReading { .. })
    }

    /// True for problems that mean bytes of the file are damaged or lost, as opposed to a trace
    /// that was cut short, or whose content is inconsistent (dangling references, a broken
    /// ordering invariant).
    pub fn is_damage(&self) -> bool {
        !matches!(
            self.kind,
            ProblemKind::NoTrailer
                | ProblemKind::CutShortInChunk { .. }
                | ProblemKind::ShrankWhileReading { .. }
                | ProblemKind::UnknownChunkKind { .. }
                | ProblemKind::Reference(_)
                | ProblemKind::Ordering(_)
        )
    }
}
