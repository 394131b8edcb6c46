//! Reading traces: locate every chunk, check it, decode event chunks in parallel, and offer the
//! events per thread and as one causally ordered stream.
//!
//! Nothing here trusts the file: lengths are checked against the bytes actually present before
//! anything is sliced or allocated, and every problem is reported with its byte offset instead of
//! stopping the read. A file whose writer died reads up to its last complete chunk.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::de::DeserializeOwned;

use crate::codec::{Decoder, EXTENSION_TAGS, KEY_FLAG};
use crate::error::{Problem, ProblemKind, TraceError};
use crate::event::{Event, ObjectId, SiteId, StringId, ThreadId};
use crate::frame::{
    read_chunk_header, ChunkHeaderProblem, ChunkKind, EventsPrefix, CHUNK_HEADER_LEN, CHUNK_MAGIC,
    EVENTS_PREFIX_LEN, FILE_MAGIC, FILE_PREFIX_LEN, MAX_HEADER_LEN, VERSION_MAJOR,
};
use crate::tables::{
    Frame, FrameSymbol, Header, ModuleInfo, ObjectInfo, SiteInfo, SourceLocation, StringEntry,
    ThreadInfo, Trailer,
};
use crate::varint;

enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// Where one chunk is in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    /// Offset of the chunk header.
    pub offset: u64,
    pub kind: ChunkKind,
    /// Offset and length of the payload.
    pub payload_offset: u64,
    pub payload_len: u32,
    pub payload_crc: u32,
}

/// The side tables of a trace.
#[derive(Clone, Debug, Default)]
pub struct Tables {
    pub strings: HashMap<StringId, String>,
    pub threads: BTreeMap<ThreadId, ThreadInfo>,
    pub objects: HashMap<ObjectId, ObjectInfo>,
    pub sites: HashMap<SiteId, SiteInfo>,
    pub modules: BTreeMap<u32, ModuleInfo>,
    pub symbols: HashMap<Frame, FrameSymbol>,
}

impl Tables {
    pub fn string(&self, id: StringId) -> Option<&str> {
        self.strings.get(&id).map(String::as_str)
    }

    /// The innermost source location of a site's first frame, when it was symbolised.
    pub fn site_location(&self, site: SiteId) -> Option<&SourceLocation> {
        let frame = self.sites.get(&site)?.frames.first()?;
        self.symbols.get(frame)?.locations.first()
    }

    /// `function (file:line)` when symbolised, else `module+0xoffset`, else `site#N`.
    pub fn describe_site(&self, site: SiteId) -> String {
        let Some(info) = self.sites.get(&site) else {
            return format!("site#{site}");
        };
        let Some(frame) = info.frames.first() else {
            return format!("site#{site}");
        };
        self.describe_frame(frame)
    }

    pub fn describe_frame(&self, frame: &Frame) -> String {
        if let Some(loc) = self.symbols.get(frame).and_then(|s| s.locations.first()) {
            let func = loc.function.and_then(|f| self.string(f)).unwrap_or("??");
            return match loc.file.and_then(|f| self.string(f)) {
                Some(file) if loc.line > 0 => format!("{func} ({}:{})", short_path(file), loc.line),
                Some(file) => format!("{func} ({})", short_path(file)),
                None => func.to_string(),
            };
        }
        let module = self
            .modules
            .get(&frame.module)
            .and_then(|m| self.string(m.path))
            .map(short_path)
            .unwrap_or("?");
        format!("{module}+{:#x}", frame.offset)
    }

    /// A name for an object: its static variable, else its kind and id.
    pub fn describe_object(&self, id: ObjectId) -> String {
        let Some(info) = self.objects.get(&id) else {
            return format!("object#{id}");
        };
        if let crate::tables::ClassKey::Static(frame) = &info.class {
            if let Some(name) = self
                .symbols
                .get(frame)
                .and_then(|s| s.locations.first())
                .and_then(|l| l.function)
                .and_then(|f| self.string(f))
            {
                return name.to_string();
            }
        }
        format!("{}#{id}", info.kind.name())
    }

    pub fn thread_name(&self, id: ThreadId) -> Option<&str> {
        self.threads.get(&id)?.name.and_then(|n| self.string(n))
    }
}

fn short_path(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// Where the events of one thread came from in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Offset of the chunk header in the file.
    pub offset: u64,
    /// Index of the chunk's first event in the thread's event list.
    pub first_event: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The events of one thread, in program order.
#[derive(Clone, Debug, Default)]
pub struct ThreadEvents {
    pub thread: ThreadId,
    pub events: Vec<Event>,
    pub chunks: Vec<ChunkSpan>,
    /// Encoded bytes of this thread's events (payloads of its chunks).
    pub encoded_bytes: u64,
}

impl ThreadEvents {
    /// Byte offset of the chunk that holds event `index`, for error messages.
    pub fn offset_of(&self, index: usize) -> u64 {
        let i = self
            .chunks
            .partition_point(|c| c.first_event as usize <= index);
        self.chunks.get(i.saturating_sub(1)).map_or(0, |c| c.offset)
    }
}

/// A trace file whose chunks are located and whose tables are read, with the event chunks not
/// yet decoded: for random access to one thread.
pub struct TraceFile {
    path: PathBuf,
    bytes: Bytes,
    version: (u16, u16),
    header: Header,
    header_len: u64,
    chunks: Vec<ChunkRef>,
    tables: Tables,
    trailer: Option<Trailer>,
    problems: Vec<Problem>,
}

/// A decoded trace.
pub struct Trace {
    pub path: PathBuf,
    pub version: (u16, u16),
    pub header: Header,
    pub tables: Tables,
    pub trailer: Option<Trailer>,
    /// Sorted by thread id.
    pub threads: Vec<ThreadEvents>,
    pub problems: Vec<Problem>,
    pub file_len: u64,
    pub chunk_count: usize,
    pub table_chunk_count: usize,
    /// Bytes of the file header (magic, version, header record).
    pub header_len: u64,
}

struct DecodedChunk {
    offset: u64,
    prefix: EventsPrefix,
    events: Vec<Event>,
    encoded_bytes: u64,
    problems: Vec<Problem>,
}

impl TraceFile {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|error| TraceError::Io {
            path: path.clone(),
            error,
        })?;
        let len = file
            .metadata()
            .map_err(|error| TraceError::Io {
                path: path.clone(),
                error,
            })?
            .len();
        let bytes = if len == 0 {
            Bytes::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only. A trace is written by appending; if another process
            // truncates the file while it is mapped, reads past the new end fault (SIGBUS) —
            // the same hazard every mmap-based reader accepts. Traces are analysed after the
            // recording ended, and `Trace::from_bytes` exists for callers that cannot accept it.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|error| TraceError::Io {
                path: path.clone(),
                error,
            })?;
            Bytes::Mapped(map)
        };
        Self::parse(path, bytes)
    }

    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, TraceError> {
        Self::parse(name.into(), Bytes::Owned(bytes))
    }

    fn parse(path: PathBuf, bytes: Bytes) -> Result<Self, TraceError> {
        let b: &[u8] = &bytes;
        if b.len() < FILE_MAGIC.len() || b[..FILE_MAGIC.len()] != FILE_MAGIC {
            return Err(TraceError::NotATrace { path });
        }
        let bad = |offset: u64, why: &str| TraceError::BadHeader {
            path: path.clone(),
            offset,
            why: why.to_string(),
        };
        if b.len() < FILE_PREFIX_LEN {
            return Err(bad(b.len() as u64, "the file ends inside the header"));
        }
        let major = u16::from_le_bytes([b[8], b[9]]);
        let minor = u16::from_le_bytes([b[10], b[11]]);
        if major != VERSION_MAJOR {
            return Err(TraceError::UnsupportedVersion { path, major, minor });
        }
        let hlen = u32::from_le_bytes(b[12..16].try_into().unwrap());
        let hcrc = u32::from_le_bytes(b[16..20].try_into().unwrap());
        if hlen > MAX_HEADER_LEN {
            return Err(bad(
                12,
                &format!("header length {hlen} is larger than allowed"),
            ));
        }
        let hend = FILE_PREFIX_LEN + hlen as usize;
        if b.len() < hend {
            return Err(bad(b.len() as u64, "the file ends inside the header"));
        }
        let body = &b[FILE_PREFIX_LEN..hend];
        if crc32fast::hash(body) != hcrc {
            return Err(bad(16, "header checksum mismatch"));
        }
        // A later minor version may append fields: ignore what follows the fields we know.
        let header: Header = postcard::take_from_bytes(body)
            .map(|(h, _rest)| h)
            .map_err(|e| {
                bad(
                    FILE_PREFIX_LEN as u64,
                    &format!("cannot decode the header: {e}"),
                )
            })?;

        let mut problems = Vec::new();
        let chunks = scan_chunks(b, hend, &mut problems);
        let mut file = TraceFile {
            path,
            version: (major, minor),
            header,
            header_len: hend as u64,
            chunks,
            tables: Tables::default(),
            trailer: None,
            problems,
            bytes,
        };
        file.read_tables_and_trailer();
        Ok(file)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    pub fn chunks(&self) -> &[ChunkRef] {
        &self.chunks
    }

    pub fn trailer(&self) -> Option<&Trailer> {
        self.trailer.as_ref()
    }

    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    fn payload(&self, c: &ChunkRef) -> &[u8] {
        &self.bytes[c.payload_offset as usize..c.payload_offset as usize + c.payload_len as usize]
    }

    fn read_tables_and_trailer(&mut self) {
        let mut problems = Vec::new();
        let mut tables = Tables::default();
        let mut trailer = None;
        let mut trailer_at: Option<u64> = None;
        for c in &self.chunks {
            if let Some(t) = trailer_at {
                if t < c.offset {
                    problems.push(Problem {
                        offset: c.offset,
                        kind: ProblemKind::DataAfterTrailer,
                    });
                    trailer_at = None; // report once
                }
            }
            match c.kind {
                ChunkKind::Table | ChunkKind::Trailer => {
                    let payload = self.payload(c);
                    if crc32fast::hash(payload) != c.payload_crc {
                        problems.push(Problem {
                            offset: c.offset,
                            kind: ProblemKind::BadChunkChecksum,
                        });
                        continue;
                    }
                    if c.kind == ChunkKind::Table {
                        read_table_records(payload, c.payload_offset, &mut tables, &mut problems);
                    } else {
                        match postcard::take_from_bytes::<Trailer>(payload) {
                            Ok((t, _)) => {
                                trailer = Some(t);
                                trailer_at = Some(c.offset);
                            }
                            Err(e) => problems.push(Problem {
                                offset: c.offset,
                                kind: ProblemKind::BadTrailer { why: e.to_string() },
                            }),
                        }
                    }
                }
                ChunkKind::Events => {}
                ChunkKind::Unknown(kind) => {
                    problems.push(Problem {
                        offset: c.offset,
                        kind: ProblemKind::UnknownChunkKind { kind },
                    });
                }
            }
        }
        if trailer.is_none() {
            problems.push(Problem {
                offset: self.bytes.len() as u64,
                kind: ProblemKind::NoTrailer,
            });
        }
        self.tables = tables;
        self.trailer = trailer;
        self.problems.extend(problems);
    }

    fn decode_chunk(&self, c: &ChunkRef) -> DecodedChunk {
        let payload = self.payload(c);
        let mut out = DecodedChunk {
            offset: c.offset,
            prefix: EventsPrefix {
                thread: 0,
                sequence: 0,
                base_key: 0,
                event_count: 0,
                start_ns: 0,
                end_ns: 0,
            },
            events: Vec::new(),
            encoded_bytes: 0,
            problems: Vec::new(),
        };
        if crc32fast::hash(payload) != c.payload_crc {
            out.problems.push(Problem {
                offset: c.offset,
                kind: ProblemKind::BadChunkChecksum,
            });
            return out;
        }
        let Some(prefix) = EventsPrefix::read_from(payload) else {
            out.problems.push(Problem {
                offset: c.offset,
                kind: ProblemKind::BadEventsPrefix,
            });
            return out;
        };
        out.prefix = prefix;
        let body = &payload[EVENTS_PREFIX_LEN..];
        out.encoded_bytes = body.len() as u64;
        // Every event takes at least one byte: the declared count cannot make us allocate more
        // than the chunk's size warrants.
        out.events
            .reserve((prefix.event_count as usize).min(body.len()));
        let mut dec = Decoder::new(body, prefix.base_key);
        let body_offset = c.payload_offset + EVENTS_PREFIX_LEN as u64;
        loop {
            match dec.skip_extension() {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    out.problems.push(Problem {
                        offset: body_offset + e.offset as u64,
                        kind: ProblemKind::BadEvent {
                            index: out.events.len() as u32,
                            what: e.what,
                        },
                    });
                    return out;
                }
            }
            match dec.next_event() {
                Ok(Some(ev)) => out.events.push(ev),
                Ok(None) => break,
                Err(e) => {
                    out.problems.push(Problem {
                        offset: body_offset + e.offset as u64,
                        kind: ProblemKind::BadEvent {
                            index: out.events.len() as u32,
                            what: e.what,
                        },
                    });
                    return out;
                }
            }
        }
        if out.events.len() as u64 != prefix.event_count as u64 {
            out.problems.push(Problem {
                offset: c.offset,
                kind: ProblemKind::EventCountMismatch {
                    declared: prefix.event_count,
                    found: out.events.len() as u32,
                },
            });
        }
        out
    }

    /// Decodes the events of one thread only.
    pub fn thread_events(&self, thread: ThreadId) -> (ThreadEvents, Vec<Problem>) {
        let decoded: Vec<DecodedChunk> = self
            .chunks
            .iter()
            .filter(|c| c.kind == ChunkKind::Events)
            .filter(|c| {
                let p = self.payload(c);
                p.len() >= 4 && u32::from_le_bytes(p[0..4].try_into().unwrap()) == thread
            })
            .map(|c| self.decode_chunk(c))
            .collect();
        let mut problems = Vec::new();
        let mut threads = assemble(decoded, &mut problems);
        let t = threads.pop().unwrap_or(ThreadEvents {
            thread,
            ..Default::default()
        });
        (t, problems)
    }

    /// Decodes every event chunk, in parallel.
    pub fn decode(self) -> Trace {
        let decoded: Vec<DecodedChunk> = self
            .chunks
            .par_iter()
            .filter(|c| c.kind == ChunkKind::Events)
            .map(|c| self.decode_chunk(c))
            .collect();
        let mut problems = self.problems.clone();
        let threads = assemble(decoded, &mut problems);
        let found: u64 = threads.iter().map(|t| t.events.len() as u64).sum();
        if let Some(t) = &self.trailer {
            if t.events != found && !problems.iter().any(Problem::is_damage) {
                problems.push(Problem {
                    offset: self.bytes.len() as u64,
                    kind: ProblemKind::TrailerCountMismatch {
                        declared: t.events,
                        found,
                    },
                });
            }
        }
        check_references(&self.tables, &threads, &mut problems);
        problems.sort_by_key(|p| p.offset);
        Trace {
            path: self.path,
            version: self.version,
            header: self.header,
            tables: self.tables,
            trailer: self.trailer,
            threads,
            problems,
            file_len: self.bytes.len() as u64,
            chunk_count: self.chunks.len(),
            table_chunk_count: self
                .chunks
                .iter()
                .filter(|c| c.kind == ChunkKind::Table)
                .count(),
            header_len: self.header_len,
        }
    }
}

/// Finds every chunk after the file header. A damaged chunk header costs only that chunk: the
/// scan searches for the next chunk magic whose header checksum holds.
fn scan_chunks(b: &[u8], start: usize, problems: &mut Vec<Problem>) -> Vec<ChunkRef> {
    let mut chunks = Vec::new();
    let mut pos = start;
    while pos < b.len() {
        let rest = &b[pos..];
        match read_chunk_header(rest) {
            Ok(h) => {
                let end = pos as u64 + CHUNK_HEADER_LEN as u64 + h.payload_len as u64;
                if end > b.len() as u64 {
                    problems.push(Problem {
                        offset: pos as u64,
                        kind: ProblemKind::CutShortInChunk {
                            missing: end - b.len() as u64,
                        },
                    });
                    break;
                }
                chunks.push(ChunkRef {
                    offset: pos as u64,
                    kind: h.kind,
                    payload_offset: (pos + CHUNK_HEADER_LEN) as u64,
                    payload_len: h.payload_len,
                    payload_crc: h.payload_crc,
                });
                pos = end as usize;
            }
            Err(why) => {
                if rest.len() < CHUNK_HEADER_LEN
                    && CHUNK_MAGIC.starts_with(&rest[..rest.len().min(4)])
                {
                    // The writer died while writing this chunk's header.
                    problems.push(Problem {
                        offset: pos as u64,
                        kind: ProblemKind::CutShortInChunk {
                            missing: (CHUNK_HEADER_LEN - rest.len()) as u64,
                        },
                    });
                    break;
                }
                if let ChunkHeaderProblem::TooLarge(len) = why {
                    problems.push(Problem {
                        offset: pos as u64,
                        kind: ProblemKind::ChunkTooLarge { len },
                    });
                }
                let next = find_next_chunk(b, pos + 1);
                let skipped = (next.unwrap_or(b.len()) - pos) as u64;
                problems.push(Problem {
                    offset: pos as u64,
                    kind: ProblemKind::Garbage { skipped },
                });
                match next {
                    Some(n) => pos = n,
                    None => break,
                }
            }
        }
    }
    chunks
}

fn find_next_chunk(b: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 4 <= b.len() {
        let window = &b[i..];
        let found = window.windows(4).position(|w| w == CHUNK_MAGIC)?;
        let at = i + found;
        if read_chunk_header(&b[at..]).is_ok() {
            return Some(at);
        }
        i = at + 1;
    }
    None
}

/// Keeps the first definition of an id; a second one is reported.
macro_rules! insert_first {
    ($map:expr, $id:expr, $value:expr, $on_duplicate:expr) => {{
        let id = $id;
        if let Some(slot) = $map.get(&id).is_none().then_some(()) {
            let () = slot;
            $map.insert(id, $value);
        } else {
            $on_duplicate;
        }
    }};
}

fn read_table_records(payload: &[u8], base: u64, tables: &mut Tables, problems: &mut Vec<Problem>) {
    let mut pos = 0usize;
    while pos < payload.len() {
        let at = base + pos as u64;
        let tag = payload[pos];
        pos += 1;
        let len = match varint::get(payload, &mut pos) {
            Ok(l) => l,
            Err(_) => {
                problems.push(Problem {
                    offset: at,
                    kind: ProblemKind::BadTableRecord {
                        tag,
                        why: "bad record length".into(),
                    },
                });
                return;
            }
        };
        if len > (payload.len() - pos) as u64 {
            problems.push(Problem {
                offset: at,
                kind: ProblemKind::BadTableRecord {
                    tag,
                    why: format!("record length {len} runs past the chunk"),
                },
            });
            return;
        }
        let body = &payload[pos..pos + len as usize];
        pos += len as usize;
        let mut dup = |what: &'static str, id: u64| {
            problems.push(Problem {
                offset: at,
                kind: ProblemKind::DuplicateRecord { what, id },
            })
        };
        let result = match tag {
            1 => decode_record::<StringEntry>(body)
                .map(|r| insert_first!(tables.strings, r.id, r.text, dup("string", r.id as u64))),
            2 => decode_record::<ThreadInfo>(body)
                .map(|r| insert_first!(tables.threads, r.id, r, dup("thread", r.id as u64))),
            3 => decode_record::<ObjectInfo>(body)
                .map(|r| insert_first!(tables.objects, r.id, r, dup("object", r.id as u64))),
            4 => decode_record::<SiteInfo>(body)
                .map(|r| insert_first!(tables.sites, r.id, r, dup("site", r.id as u64))),
            5 => decode_record::<ModuleInfo>(body)
                .map(|r| insert_first!(tables.modules, r.id, r, dup("module", r.id as u64))),
            6 => decode_record::<FrameSymbol>(body).map(|r| {
                // A later symbolisation pass may refine an earlier one: the last one wins.
                tables.symbols.insert(r.frame, r);
            }),
            // Unknown tags come from a newer minor version: skip them.
            _ => Ok(()),
        };
        if let Err(why) = result {
            problems.push(Problem {
                offset: at,
                kind: ProblemKind::BadTableRecord { tag, why },
            });
        }
    }
}

fn decode_record<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    postcard::take_from_bytes::<T>(body)
        .map(|(v, _rest)| v)
        .map_err(|e| e.to_string())
}

/// Orders decoded chunks per thread, reporting duplicates and gaps, and concatenates them.
fn assemble(mut decoded: Vec<DecodedChunk>, problems: &mut Vec<Problem>) -> Vec<ThreadEvents> {
    for d in &mut decoded {
        problems.append(&mut d.problems);
    }
    decoded.retain(|d| d.prefix.event_count > 0 || !d.events.is_empty());
    decoded.sort_by_key(|d| (d.prefix.thread, d.prefix.sequence, d.offset));
    let mut threads: Vec<ThreadEvents> = Vec::new();
    let mut expected_seq = 0u32;
    let mut last_key = 0u64;
    for d in decoded {
        let new_thread = threads.last().is_none_or(|t| t.thread != d.prefix.thread);
        if new_thread {
            threads.push(ThreadEvents {
                thread: d.prefix.thread,
                events: Vec::new(),
                chunks: Vec::new(),
                encoded_bytes: 0,
            });
            expected_seq = 0;
            last_key = 0;
        }
        let t = threads.last_mut().expect("pushed above");
        let seq = d.prefix.sequence;
        if !new_thread && seq < expected_seq {
            problems.push(Problem {
                offset: d.offset,
                kind: ProblemKind::DuplicateChunk {
                    thread: t.thread,
                    sequence: seq,
                },
            });
            continue;
        }
        if seq > expected_seq {
            problems.push(Problem {
                offset: d.offset,
                kind: ProblemKind::MissingChunks {
                    thread: t.thread,
                    from: expected_seq,
                    to: seq,
                },
            });
        } else if d.prefix.base_key < last_key {
            problems.push(Problem {
                offset: d.offset,
                kind: ProblemKind::KeysBackwards {
                    thread: t.thread,
                    previous: last_key,
                    next: d.prefix.base_key,
                },
            });
        }
        expected_seq = seq.saturating_add(1);
        if let Some(last) = d.events.last() {
            last_key = last.key;
        }
        t.chunks.push(ChunkSpan {
            offset: d.offset,
            first_event: t.events.len() as u32,
            start_ns: d.prefix.start_ns,
            end_ns: d.prefix.end_ns,
        });
        t.encoded_bytes += d.encoded_bytes;
        if t.events.is_empty() {
            t.events = d.events;
        } else {
            t.events.extend_from_slice(&d.events);
        }
    }
    threads
}

/// Reports events that name a thread, object or site the tables do not define.
fn check_references(tables: &Tables, threads: &[ThreadEvents], problems: &mut Vec<Problem>) {
    const MAX_REPORTS: usize = 20;
    let mut reported = 0usize;
    for t in threads {
        if !tables.threads.contains_key(&t.thread) && reported < MAX_REPORTS {
            reported += 1;
            problems.push(Problem {
                offset: t.chunks.first().map_or(0, |c| c.offset),
                kind: ProblemKind::Reference(format!(
                    "thread {} has events but no entry in the thread table",
                    t.thread
                )),
            });
        }
        for (i, ev) in t.events.iter().enumerate() {
            if reported >= MAX_REPORTS {
                return;
            }
            let is_memory = matches!(
                ev.kind.category(),
                crate::event::Category::Memory
                    | crate::event::Category::Atomic
                    | crate::event::Category::Allocation
            );
            let dangling_object = ev.kind.object().filter(|o| !tables.objects.contains_key(o));
            // Memory sites are plain code addresses; only synchronisation sites are interned.
            let dangling_site = ev
                .kind
                .site()
                .filter(|s| !is_memory && !tables.sites.contains_key(s));
            let missing = dangling_object
                .map(|o| format!("object {o}"))
                .or_else(|| dangling_site.map(|s| format!("site {s}")));
            if let Some(what) = missing {
                reported += 1;
                problems.push(Problem {
                    offset: t.offset_of(i),
                    kind: ProblemKind::Reference(format!(
                        "thread {} event {} ({}) names {what}, which the tables do not define",
                        t.thread,
                        i,
                        ev.kind.name()
                    )),
                });
            }
        }
    }
}

impl Trace {
    /// Opens and decodes a trace file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        Ok(TraceFile::open(path)?.decode())
    }

    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, TraceError> {
        Ok(TraceFile::from_bytes(name, bytes)?.decode())
    }

    /// True when the trace has its trailer and no chunk was lost.
    pub fn ended_cleanly(&self) -> bool {
        self.trailer.is_some() && self.problems.iter().all(|p| !p.is_damage())
    }

    pub fn event_count(&self) -> u64 {
        self.threads.iter().map(|t| t.events.len() as u64).sum()
    }

    pub fn thread(&self, id: ThreadId) -> Option<&ThreadEvents> {
        self.threads
            .binary_search_by_key(&id, |t| t.thread)
            .ok()
            .map(|i| &self.threads[i])
    }

    /// All events in one order consistent with causality: by key, then thread, then position.
    pub fn merged(&self) -> Merged<'_> {
        let mut heap = BinaryHeap::with_capacity(self.threads.len());
        for (ti, t) in self.threads.iter().enumerate() {
            if let Some(ev) = t.events.first() {
                heap.push(Reverse((ev.key, t.thread, ti, 0usize)));
            }
        }
        Merged { trace: self, heap }
    }
}

/// One event of the merged stream.
#[derive(Clone, Copy, Debug)]
pub struct MergedEvent<'a> {
    pub thread: ThreadId,
    /// Position in the thread's event list.
    pub index: usize,
    pub event: &'a Event,
}

pub struct Merged<'a> {
    trace: &'a Trace,
    heap: BinaryHeap<Reverse<(u64, ThreadId, usize, usize)>>,
}

impl<'a> Iterator for Merged<'a> {
    type Item = MergedEvent<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        let Reverse((_, thread, ti, idx)) = self.heap.pop()?;
        let events = &self.trace.threads[ti].events;
        let event = &events[idx];
        if let Some(next) = events.get(idx + 1) {
            self.heap.push(Reverse((next.key, thread, ti, idx + 1)));
        }
        Some(MergedEvent {
            thread,
            index: idx,
            event,
        })
    }
}

/// Whether `raw` (a tag byte) starts an extension event; exposed for tools that scan bytes.
pub fn is_extension_tag(raw: u8) -> bool {
    EXTENSION_TAGS.contains(&(raw & !KEY_FLAG))
}
