//! The foresight trace: the event model and the on-disk format (`FORMAT.md`).
//!
//! - [`event`]: what happened (the wire event model).
//! - [`tables`]: header, side tables (threads, objects, sites, modules, symbols, strings), trailer.
//! - [`writer`]: per-thread chunk encoding for the recorder; a whole-file writer for tools.
//! - [`data`]: names a data address by the static variable and element it is in.
//! - [`reader`]: parallel decoding into per-thread streams and a merged stream, in memory.
//! - [`stream`]: the merged stream read from the file with positioned reads, in memory bounded
//!   by the number of threads, not by the trace's length.
//! - [`region`]: region markers (STD's `begin`/`end`), extension events the readers skip.
//! - [`memory`]: advice to the kernel about the analysis's large tables (huge pages).
//! - [`runtime_library`]: the C and C++ runtime libraries, known by file name.
//! - [`name_glob`]: the `--wrapper` glob, matched against function names by the recorder and
//!   the analyzer alike.
//! - [`builder`]: a small API to write traces in tests without the recorder.

#![warn(missing_docs)]

pub mod builder;
pub mod codec;
pub mod compress;
pub mod data;
pub mod error;
pub mod event;
pub mod frame;
pub mod memory;
pub mod name_glob;
pub mod ordering;
pub mod reader;
pub mod region;
pub mod runtime_library;
mod scan;
mod source;
pub mod stream;
pub mod tables;
pub mod varint;
pub mod writer;
mod zstd_cctx;

pub use compress::CompressMode;
pub use data::DataSymbol;
pub use error::{Problem, ProblemKind, TraceError};
pub use event::{Event, EventKind, LockMode, ObjectId, SiteId, StringId, ThreadId};
pub use reader::{Trace, TraceFile};
pub use stream::{EventRun, StreamEvent, StreamOptions, TraceStream};
pub use tables::{Header, TableRecord, Trailer};
pub use writer::{ChunkWriter, PackedFields, TableWriter, TraceWriter};
