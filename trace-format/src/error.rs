//! What can go wrong reading a trace. A trace is untrusted input: every problem names the byte
//! offset where it was found.

use std::path::PathBuf;

use crate::codec::DecodeProblem;
use crate::event::ThreadId;

/// A trace that cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file cannot be opened or read.
    #[error("cannot read {path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        error: std::io::Error,
    },
    /// The path is not a regular file (a directory, a FIFO, a device).
    #[error("{path}: not a regular file ({what}); a trace is read from a regular file")]
    NotARegularFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
    },
    /// The file does not start with the trace magic.
    #[error(
        "{path}: byte 0: not a foresight trace (the file does not start with the trace magic)"
    )]
    NotATrace {
        /// The file.
        path: PathBuf,
    },
    /// A format version this reader does not read.
    #[error("{path}: byte 8: {}", version_advice(*major, *minor))]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The file's major version.
        major: u16,
        /// The file's minor version.
        minor: u16,
    },
    /// A 2.x file that needs features this reader does not know.
    #[error(
        "{path}: byte {}: trace format version {major}.{minor} requires features this reader \
         does not know ({}); upgrade foresight to read it",
        crate::frame::FILE_PREFIX_LEN,
        crate::frame::feature_names(*unknown)
    )]
    UnsupportedFeatures {
        /// The file.
        path: PathBuf,
        /// The file's major version.
        major: u16,
        /// The file's minor version.
        minor: u16,
        /// The feature bits this reader does not know.
        unknown: u64,
    },
    /// The file header cannot be decoded.
    #[error("{path}: byte {offset}: the file header is damaged: {why}")]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// Byte offset of the damage.
        offset: u64,
        /// What is wrong.
        why: String,
    },
}

/// Something wrong inside a trace that still reads: the reader keeps every chunk it can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Byte offset in the file.
    pub offset: u64,
    /// What is wrong.
    pub kind: ProblemKind,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
/// What can be wrong inside a trace that still reads; each says what the reader did about it.
pub enum ProblemKind {
    /// The file ends inside its last chunk.
    #[error("the trace was cut short: the last chunk is incomplete ({missing} bytes missing)")]
    CutShortInChunk {
        /// Bytes the chunk lacks.
        missing: u64,
    },
    /// The file shrank while it was read.
    #[error(
        "the trace was cut short while it was being read: the file now ends inside this chunk \
         ({missing} bytes missing)"
    )]
    ShrankWhileReading {
        /// Bytes the chunk lacks.
        missing: u64,
    },
    /// Reading the file failed here.
    #[error("cannot read {len} bytes here: {why}")]
    ReadError {
        /// Bytes that could not be read.
        len: u64,
        /// What the system said.
        why: String,
    },
    /// No trailer: the recording did not end cleanly.
    #[error("the trace was cut short: it has no trailer (the recording did not end cleanly)")]
    NoTrailer,
    /// A chunk's payload does not match its checksum.
    #[error("chunk checksum mismatch: the chunk is damaged and was skipped")]
    BadChunkChecksum,
    /// Bytes that are not a chunk, skipped to the next chunk magic.
    #[error("{skipped} bytes that are not a chunk were skipped")]
    Garbage {
        /// Bytes skipped.
        skipped: u64,
    },
    /// A chunk larger than the format allows.
    #[error("chunk too large ({len} bytes): skipped")]
    ChunkTooLarge {
        /// Its declared payload length.
        len: u32,
    },
    /// An event that cannot be decoded; the chunk's later events are lost.
    #[error("event chunk: {what} (event {index} of the chunk); the rest of the chunk was skipped")]
    BadEvent {
        /// Its index in the chunk.
        index: u32,
        /// What is wrong with it.
        what: DecodeProblem,
    },
    /// An event chunk whose prefix is damaged or short.
    #[error("event chunk: the prefix is damaged or too short")]
    BadEventsPrefix,
    /// An event chunk whose event count differs from its prefix's.
    #[error("event chunk holds {found} events but its prefix says {declared}")]
    EventCountMismatch {
        /// The count in the prefix.
        declared: u32,
        /// Events decoded.
        found: u32,
    },
    /// A chunk seen twice.
    #[error("thread {thread}: chunk {sequence} appears twice; the second copy was skipped")]
    DuplicateChunk {
        /// Its thread.
        thread: ThreadId,
        /// Its sequence number.
        sequence: u32,
    },
    /// A gap in a thread's chunk sequence: chunks were lost.
    #[error("thread {thread}: chunks {from}..{to} are missing")]
    MissingChunks {
        /// The thread.
        thread: ThreadId,
        /// The first sequence number missing.
        from: u32,
        /// The first sequence number present after the gap.
        to: u32,
    },
    /// A thread's keys decrease from one chunk to the next.
    #[error("thread {thread}: keys go backwards between chunks ({previous} then {next})")]
    KeysBackwards {
        /// The thread.
        thread: ThreadId,
        /// The last key of the earlier chunk.
        previous: u64,
        /// The first key of the later chunk.
        next: u64,
    },
    /// A table record that cannot be decoded.
    #[error("table record (tag {tag}): {why}")]
    BadTableRecord {
        /// The record's tag.
        tag: u8,
        /// What is wrong.
        why: String,
    },
    /// An id defined twice in the tables.
    #[error("table: {what} {id} is defined twice; the first definition is kept")]
    DuplicateRecord {
        /// What the id names (`thread`, `object`, …).
        what: &'static str,
        /// The id.
        id: u64,
    },
    /// The trailer cannot be decoded.
    #[error("the trailer is damaged: {why}")]
    BadTrailer {
        /// What is wrong.
        why: String,
    },
    /// A chunk after the trailer.
    #[error("a chunk follows the trailer")]
    DataAfterTrailer,
    /// The trailer's event count differs from the events found.
    #[error("the trailer counts {declared} events but the file holds {found}")]
    TrailerCountMismatch {
        /// The trailer's count.
        declared: u64,
        /// Events found.
        found: u64,
    },
    /// A compressed chunk that cannot be decompressed.
    #[error("compressed event chunk: {0}; the chunk was skipped")]
    BadCompressedChunk(crate::compress::CompressProblem),
    /// A chunk kind this version does not know.
    #[error("unknown chunk kind {kind}: skipped")]
    UnknownChunkKind {
        /// The kind byte.
        kind: u8,
    },
    /// An event names a thread, object, site or string the tables do not define.
    #[error("{0}")]
    Reference(String),
    /// Events that break the ordering invariant (FORMAT.md, "The ordering invariant").
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
