//! The first look at a trace: check the file prefix and header, locate every chunk by reading
//! chunk headers only (payloads are skipped), and read the table chunks and the trailer as it
//! meets them.
//! `TraceFile` and `TraceStream` both start here; what they do with event chunks differs.
//!
//! Reads go through [`Source`]: positioned reads of a file (only headers, table payloads and,
//! when resynchronising after damage, the damaged region), or slices of bytes in memory. The
//! scan never reads past the length the file had when it was opened, and a file that turns out
//! shorter than that (it shrank meanwhile) is treated as ending where the reads ended.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::{Problem, ProblemKind, TraceError};
use crate::frame::{
    read_chunk_header, ChunkHeaderProblem, ChunkKind, ChunkRef, EventsPrefix, CHUNK_HEADER_LEN,
    CHUNK_MAGIC, EVENTS_PREFIX_LEN, FILE_MAGIC, FILE_PREFIX_LEN, KNOWN_FEATURES, MAX_HEADER_LEN,
    VERSION_MAJOR, VERSION_MAJOR_FEATURES,
};
use crate::source::{ReadFailure, Source};
use crate::tables::{
    AccessCounts, DataType, DataVariable, EarlierLockOrder, Frame, FrameSymbol, Header, ModuleInfo,
    ObjectInfo, RecordingStopped, RecordingWindow, SiteInfo, StringEntry, Tables, ThreadEnd,
    ThreadInfo, Trailer,
};
use crate::varint;

/// Where an event chunk is: what the scan finds and the stream's chunk index keeps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChunkLoc {
    /// The chunk header's offset in 56 bits (a file of 64 PiB at most), how the payload is
    /// stored (FORMAT.md §5.3) in the high 8 of `offset_high_codec`: [`ChunkLoc::offset`],
    /// [`ChunkLoc::codec`]. Two words, not a `u64`, so that the entry is 12 bytes.
    offset_low: u32,
    offset_high_codec: u32,
    pub(crate) payload_len: u32,
}

const OFFSET_HIGH_BITS: u32 = 24;

impl ChunkLoc {
    pub(crate) fn new(offset: u64, codec: u8, payload_len: u32) -> Self {
        ChunkLoc {
            offset_low: offset as u32,
            offset_high_codec: ((offset >> 32) as u32 & ((1 << OFFSET_HIGH_BITS) - 1))
                | (u32::from(codec) << OFFSET_HIGH_BITS),
            payload_len,
        }
    }

    pub(crate) fn offset(&self) -> u64 {
        (u64::from(self.offset_high_codec & ((1 << OFFSET_HIGH_BITS) - 1)) << 32)
            | u64::from(self.offset_low)
    }

    pub(crate) fn codec(&self) -> u8 {
        (self.offset_high_codec >> OFFSET_HIGH_BITS) as u8
    }

    pub(crate) fn payload_offset(&self) -> u64 {
        self.offset() + crate::frame::CHUNK_HEADER_LEN as u64
    }

    pub(crate) fn end(&self) -> u64 {
        self.payload_offset() + u64::from(self.payload_len)
    }
}

/// What the first look found.
pub(crate) struct Scanned {
    pub version: (u16, u16),
    pub header: Header,
    /// Bytes of the file prefix and header: where the first chunk starts.
    pub header_len: u64,
    /// Every chunk with a good header, in file order; with [`Want::Located`], only the events
    /// chunks too short to have a prefix.
    pub chunks: Vec<ChunkRef>,
    /// Chunks with a good header, of every kind, and of them the table chunks.
    pub chunk_count: usize,
    pub table_chunk_count: usize,
    /// For each chunk of `chunks`, what its events prefix says of it (not yet checked against
    /// the payload checksum), when asked for and the chunk is an events chunk long enough to
    /// have a prefix; empty when not asked for.
    pub prefixes: Vec<Option<ChunkOwner>>,
    /// The events chunks with a prefix, when [`Want::Located`] asked for them apart: they are
    /// then neither in `chunks` nor in `prefixes`.
    pub located: LocatedEvents,
    pub tables: Tables,
    pub trailer: Option<Trailer>,
    pub problems: Vec<Problem>,
    /// Where the bytes end, as far as the scan could read.
    pub file_len: u64,
}

/// What the readers that locate each thread's chunks take from an events chunk's prefix: 16
/// bytes a chunk rather than the whole prefix's 56, since a process that created 10^5 threads
/// left 10^5 chunks or more.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChunkOwner {
    pub thread: u32,
    pub sequence: u32,
    pub event_count: u32,
}

/// What the scan keeps of the chunks it locates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// Every chunk.
    Chunks,
    /// Every chunk, and what each events chunk's prefix says.
    Prefixes,
    /// The events chunks with a prefix apart, in [`LocatedEvents`] (20 bytes a chunk, not a
    /// chunk's 32 and a prefix's 16: a process that created 10^5 threads left 10^5 of them
    /// and as many table chunks), the events chunks too short for a prefix as `Chunks` does,
    /// and no other chunk: the tables and the trailer are read as the scan meets them, and a
    /// list of 10^5 table chunks would be 4 MB only to be read once.
    Located,
}

/// The events chunks with a prefix, in file order: (thread, sequence, where), as the prefix
/// says (not yet checked against the payload checksum), and the events they declare in all.
#[derive(Debug, Default)]
pub(crate) struct LocatedEvents {
    pub chunks: Vec<(u32, u32, ChunkLoc)>,
    pub declared: u64,
}

/// What [`locate_chunks`] found, as [`Want`] asks.
struct Found {
    chunks: Vec<ChunkRef>,
    prefixes: Vec<Option<ChunkOwner>>,
    located: LocatedEvents,
    chunk_count: usize,
    table_chunk_count: usize,
    tables: TableReader,
}

/// How many bytes the damaged-region search reads at a time.
const SEARCH_WINDOW: usize = 64 << 10;

/// Reads the file prefix and header, locates the chunks and reads the tables and the trailer.
/// Only a bad prefix or header, or a failure to read them, is an error.
/// `access_counts`: whether the tables keep the access counts (FORMAT.md §7.8), which only
/// some passes report; their records are checked either way.
pub(crate) fn scan(
    path: &Path,
    source: &Source,
    want: Want,
    access_counts: bool,
) -> Result<Scanned, TraceError> {
    let mut buf = Vec::new();
    let io = |error| TraceError::Io {
        path: path.to_path_buf(),
        error,
    };
    let prefix = source
        .bytes_upto(0, FILE_PREFIX_LEN, &mut buf)
        .map_err(io)?;
    if prefix.len() < FILE_MAGIC.len() || prefix[..FILE_MAGIC.len()] != FILE_MAGIC {
        return Err(TraceError::NotATrace {
            path: path.to_path_buf(),
        });
    }
    let bad = |offset: u64, why: &str| TraceError::BadHeader {
        path: path.to_path_buf(),
        offset,
        why: why.to_string(),
    };
    if prefix.len() < FILE_PREFIX_LEN {
        return Err(bad(prefix.len() as u64, "the file ends inside the header"));
    }
    let major = u16::from_le_bytes([prefix[8], prefix[9]]);
    let minor = u16::from_le_bytes([prefix[10], prefix[11]]);
    if major != VERSION_MAJOR && major != VERSION_MAJOR_FEATURES {
        return Err(TraceError::UnsupportedVersion {
            path: path.to_path_buf(),
            major,
            minor,
        });
    }
    let hlen = u32::from_le_bytes(prefix[12..16].try_into().unwrap());
    let hcrc = u32::from_le_bytes(prefix[16..20].try_into().unwrap());
    // A 2.x prefix goes on with the required features, which the header checksum covers.
    let prefix_len = crate::frame::prefix_len(major);
    if hlen > MAX_HEADER_LEN {
        return Err(bad(
            12,
            &format!("header length {hlen} is larger than allowed"),
        ));
    }
    let hend = (prefix_len + hlen as usize) as u64;
    let checked = source
        .bytes_upto(
            FILE_PREFIX_LEN as u64,
            prefix_len - FILE_PREFIX_LEN + hlen as usize,
            &mut buf,
        )
        .map_err(io)?;
    if checked.len() < prefix_len - FILE_PREFIX_LEN + hlen as usize {
        return Err(bad(
            FILE_PREFIX_LEN as u64 + checked.len() as u64,
            "the file ends inside the header",
        ));
    }
    if crc32fast::hash(checked) != hcrc {
        return Err(bad(16, "header checksum mismatch"));
    }
    let (features, body) = checked.split_at(prefix_len - FILE_PREFIX_LEN);
    let features = match features.try_into() {
        Ok(f) => u64::from_le_bytes(f),
        Err(_) => 0,
    };
    if features & !KNOWN_FEATURES != 0 {
        return Err(TraceError::UnsupportedFeatures {
            path: path.to_path_buf(),
            major,
            minor,
            unknown: features & !KNOWN_FEATURES,
        });
    }
    // A later minor version may append fields: ignore what follows the fields we know.
    let header: Header = postcard::take_from_bytes(body)
        .map(|(h, _rest)| h)
        .map_err(|e| bad(prefix_len as u64, &format!("cannot decode the header: {e}")))?;

    let mut problems = Vec::new();
    let mut found = Found {
        chunks: Vec::new(),
        prefixes: Vec::new(),
        located: LocatedEvents::default(),
        chunk_count: 0,
        table_chunk_count: 0,
        tables: TableReader::new(access_counts),
    };
    let file_len = locate_chunks(
        source,
        hend,
        major >= VERSION_MAJOR_FEATURES,
        want,
        &mut found,
        &mut problems,
    );
    let (tables, trailer) = found.tables.finish(file_len, &mut problems);
    Ok(Scanned {
        version: (major, minor),
        header,
        header_len: hend,
        chunks: found.chunks,
        chunk_count: found.chunk_count,
        table_chunk_count: found.table_chunk_count,
        prefixes: found.prefixes,
        located: found.located,
        tables,
        trailer,
        problems,
        file_len,
    })
}

/// Finds every chunk after the file header by reading chunk headers. A damaged chunk header
/// costs only that chunk: the scan searches for the next chunk magic whose header checksum
/// holds. Returns where the bytes end (earlier than the source's length if it shrank).
fn locate_chunks(
    source: &Source,
    start: u64,
    coded: bool,
    keep: Want,
    found: &mut Found,
    problems: &mut Vec<Problem>,
) -> u64 {
    let Found {
        chunks,
        prefixes,
        located,
        chunk_count,
        table_chunk_count,
        tables,
    } = found;
    let mut end = source.len();
    let mut pos = start;
    let mut buf = Vec::new();
    let mut search = Vec::new();
    // A chunk header, and an events chunk's prefix right after it.
    const LOOK: usize = CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN;
    while pos < end {
        let want = (end - pos).min(LOOK as u64) as usize;
        let head = match source.bytes_upto(pos, want, &mut buf) {
            Ok(h) => h,
            Err(e) => {
                problems.push(read_error(pos, want, &e));
                return pos;
            }
        };
        if head.len() < want {
            // The file shrank since it was opened: it ends where the read ended.
            end = pos + head.len() as u64;
        }
        match read_chunk_header(head) {
            Ok(h) => {
                let payload_offset = pos + CHUNK_HEADER_LEN as u64;
                let chunk_end = payload_offset + h.payload_len as u64;
                if chunk_end > end {
                    problems.push(Problem {
                        offset: pos,
                        kind: ProblemKind::CutShortInChunk {
                            missing: chunk_end - end,
                        },
                    });
                    break;
                }
                let codec = if coded { h.flags } else { 0 };
                let known = codec == crate::frame::CODEC_STORED
                    || ((codec == crate::frame::CODEC_LZ4 || codec == crate::frame::CODEC_ZSTD)
                        && h.kind == ChunkKind::Events);
                if !known {
                    // Only event chunks are compressed, with a codec this reader knows: the
                    // chunk cannot be read, the ones after it can.
                    problems.push(Problem {
                        offset: pos,
                        kind: ProblemKind::BadCompressedChunk(
                            crate::compress::CompressProblem::UnknownCodec(codec),
                        ),
                    });
                    pos = chunk_end;
                    continue;
                }
                let prefix = match h.kind {
                    ChunkKind::Events
                        if keep != Want::Chunks && h.payload_len as usize >= EVENTS_PREFIX_LEN =>
                    {
                        EventsPrefix::read_from(&head[CHUNK_HEADER_LEN..]).map(|p| ChunkOwner {
                            thread: p.thread,
                            sequence: p.sequence,
                            event_count: p.event_count,
                        })
                    }
                    _ => None,
                };
                *chunk_count += 1;
                if let (Want::Located, Some(p)) = (keep, &prefix) {
                    tables.pass(pos);
                    // A chunk is in the file read, so its offset fits in 56 bits.
                    let at = ChunkLoc::new(pos, codec, h.payload_len);
                    located.chunks.push((p.thread, p.sequence, at));
                    located.declared = located.declared.saturating_add(u64::from(p.event_count));
                    pos = chunk_end;
                    continue;
                }
                let chunk = ChunkRef {
                    offset: pos,
                    kind: h.kind,
                    payload_offset,
                    payload_len: h.payload_len,
                    payload_crc: h.payload_crc,
                    // Byte 5 is a codec only in a 2.x file; a 1.x reader ignored it.
                    codec,
                };
                tables.read(source, &chunk);
                if h.kind == ChunkKind::Table {
                    *table_chunk_count += 1;
                }
                if keep == Want::Located && h.kind != ChunkKind::Events {
                    pos = chunk_end;
                    continue;
                }
                chunks.push(chunk);
                if keep == Want::Prefixes {
                    prefixes.push(prefix);
                }
                pos = chunk_end;
            }
            Err(why) => {
                let rest = head.len();
                if rest < CHUNK_HEADER_LEN && CHUNK_MAGIC.starts_with(&head[..rest.min(4)]) {
                    // The writer died while writing this chunk's header.
                    problems.push(Problem {
                        offset: pos,
                        kind: ProblemKind::CutShortInChunk {
                            missing: (CHUNK_HEADER_LEN - rest) as u64,
                        },
                    });
                    break;
                }
                if let ChunkHeaderProblem::TooLarge(len) = why {
                    problems.push(Problem {
                        offset: pos,
                        kind: ProblemKind::ChunkTooLarge { len },
                    });
                }
                let next = match find_next_chunk(source, pos + 1, &mut end, &mut search) {
                    Ok(n) => n,
                    Err((at, e)) => {
                        problems.push(Problem {
                            offset: pos,
                            kind: ProblemKind::Garbage { skipped: at - pos },
                        });
                        problems.push(read_error(at, SEARCH_WINDOW, &e));
                        return at;
                    }
                };
                problems.push(Problem {
                    offset: pos,
                    kind: ProblemKind::Garbage {
                        skipped: next.unwrap_or(end) - pos,
                    },
                });
                match next {
                    Some(n) => pos = n,
                    None => break,
                }
            }
        }
    }
    end
}

/// The offset of the next chunk magic at or after `from` that begins a valid chunk header.
/// Lowers `end` if the file turns out shorter; an I/O error comes with where it happened.
fn find_next_chunk(
    source: &Source,
    from: u64,
    end: &mut u64,
    buf: &mut Vec<u8>,
) -> Result<Option<u64>, (u64, std::io::Error)> {
    let mut header = Vec::new();
    let mut i = from;
    while i + CHUNK_MAGIC.len() as u64 <= *end {
        let want = (*end - i).min(SEARCH_WINDOW as u64) as usize;
        let window = source.bytes_upto(i, want, buf).map_err(|e| (i, e))?;
        if window.len() < want {
            *end = i + window.len() as u64;
        }
        let mut p = 0usize;
        while p + CHUNK_MAGIC.len() <= window.len() {
            let Some(f) = window[p..=window.len() - CHUNK_MAGIC.len()]
                .iter()
                .position(|&b| b == CHUNK_MAGIC[0])
            else {
                break;
            };
            let at = p + f;
            if window[at..at + CHUNK_MAGIC.len()] == CHUNK_MAGIC {
                let good = if at + CHUNK_HEADER_LEN <= window.len() {
                    read_chunk_header(&window[at..]).is_ok()
                } else {
                    let abs = i + at as u64;
                    let h = source
                        .bytes_upto(abs, CHUNK_HEADER_LEN, &mut header)
                        .map_err(|e| (abs, e))?;
                    read_chunk_header(h).is_ok()
                };
                if good {
                    return Ok(Some(i + at as u64));
                }
            }
            p = at + 1;
        }
        if window.len() < SEARCH_WINDOW {
            break;
        }
        // The next window overlaps this one by the magic's length less one byte, so that a
        // magic split between the two is found.
        i += (window.len() - (CHUNK_MAGIC.len() - 1)) as u64;
    }
    Ok(None)
}

fn read_error(offset: u64, len: usize, e: &std::io::Error) -> Problem {
    Problem {
        offset,
        kind: ProblemKind::ReadError {
            len: len as u64,
            why: e.to_string(),
        },
    }
}

/// The problem for a read of a chunk's payload that did not give all its bytes.
pub(crate) fn payload_read_problem(chunk_offset: u64, len: usize, failure: ReadFailure) -> Problem {
    match failure {
        ReadFailure::Short { got } => Problem {
            offset: chunk_offset,
            kind: ProblemKind::ShrankWhileReading {
                missing: (len - got) as u64,
            },
        },
        ReadFailure::Io(e) => read_error(chunk_offset, len, &e),
    }
}

/// Reads every table chunk and the trailer as the scan meets them, in file order. Tables must
/// be complete before any event is interpreted (`FORMAT.md` §4.3): the scan is over before
/// events are decoded. Its problems are kept apart from the framing problems the scan finds,
/// and come after them.
struct TableReader {
    tables: Tables,
    trailer: Option<Trailer>,
    /// Where the trailer is, until a chunk after it is reported.
    trailer_at: Option<u64>,
    access_counts: bool,
    buf: Vec<u8>,
    problems: Vec<Problem>,
}

impl TableReader {
    fn new(access_counts: bool) -> Self {
        TableReader {
            tables: Tables::default(),
            trailer: None,
            trailer_at: None,
            access_counts,
            buf: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// A chunk with a good header at `offset`, of any kind: data after the trailer if the
    /// trailer came before it.
    fn pass(&mut self, offset: u64) {
        if let Some(t) = self.trailer_at {
            if t < offset {
                self.problems.push(Problem {
                    offset,
                    kind: ProblemKind::DataAfterTrailer,
                });
                self.trailer_at = None; // report once
            }
        }
    }

    /// A chunk with a good header: a table chunk or the trailer is read.
    fn read(&mut self, source: &Source, c: &ChunkRef) {
        self.pass(c.offset);
        match c.kind {
            ChunkKind::Table | ChunkKind::Trailer => {
                let payload = match source.bytes_at(
                    c.payload_offset,
                    c.payload_len as usize,
                    &mut self.buf,
                ) {
                    Ok(p) => p,
                    Err(failure) => {
                        self.problems.push(payload_read_problem(
                            c.offset,
                            c.payload_len as usize,
                            failure,
                        ));
                        return;
                    }
                };
                if crc32fast::hash(payload) != c.payload_crc {
                    self.problems.push(Problem {
                        offset: c.offset,
                        kind: ProblemKind::BadChunkChecksum,
                    });
                    return;
                }
                if c.kind == ChunkKind::Table {
                    read_table_records(
                        payload,
                        c.payload_offset,
                        self.access_counts,
                        &mut self.tables,
                        &mut self.problems,
                    );
                } else {
                    match postcard::take_from_bytes::<Trailer>(payload) {
                        Ok((t, _)) => {
                            self.trailer = Some(t);
                            self.trailer_at = Some(c.offset);
                        }
                        Err(e) => self.problems.push(Problem {
                            offset: c.offset,
                            kind: ProblemKind::BadTrailer { why: e.to_string() },
                        }),
                    }
                }
            }
            ChunkKind::Events => {}
            ChunkKind::Unknown(kind) => {
                self.problems.push(Problem {
                    offset: c.offset,
                    kind: ProblemKind::UnknownChunkKind { kind },
                });
            }
        }
    }

    /// The tables and the trailer once every chunk is read; the problems found go after those
    /// of `problems`.
    fn finish(mut self, file_len: u64, problems: &mut Vec<Problem>) -> (Tables, Option<Trailer>) {
        self.tables.threads.finish();
        self.tables.access_counts.finish();
        problems.append(&mut self.problems);
        // A snapshot (FORMAT.md §7.14) has no trailer by design: the process went on.
        if self.trailer.is_none() && self.tables.snapshot_signal().is_none() {
            problems.push(Problem {
                offset: file_len,
                kind: ProblemKind::NoTrailer,
            });
        }
        (self.tables, self.trailer)
    }
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

/// `access_counts`: whether the access counts are kept (they are checked either way).
pub(crate) fn read_table_records(
    payload: &[u8],
    base: u64,
    access_counts: bool,
    tables: &mut Tables,
    problems: &mut Vec<Problem>,
) {
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
            2 => decode_record::<ThreadInfo>(body).map(|r| {
                let id = r.id;
                if tables.threads.contains_key(&id) {
                    dup("thread", id as u64)
                } else {
                    tables.threads.insert(r)
                }
            }),
            3 => decode_record::<ObjectInfo>(body)
                .map(|r| insert_first!(tables.objects, r.id, r, dup("object", r.id as u64))),
            4 => decode_site(body)
                .map(|r| insert_first!(tables.sites, r.id, r, dup("site", r.id as u64))),
            5 => decode_record::<ModuleInfo>(body)
                .map(|r| insert_first!(tables.modules, r.id, r, dup("module", r.id as u64))),
            6 => decode_record::<FrameSymbol>(body).map(|r| {
                // A later symbolisation pass may refine an earlier one: the last one wins.
                tables.symbols.insert(r.frame, r);
            }),
            // Each record counts one stretch of the thread's recording: they add up.
            7 => decode_record::<AccessCounts>(body).map(|r| {
                if access_counts {
                    tables.access_counts.push(r)
                }
            }),
            8 => decode_record::<DataVariable>(body).map(|r| {
                // Written after recording, like symbols: a later pass may refine an earlier one.
                tables.data_variables.insert((r.module, r.offset), r);
            }),
            9 => decode_record::<DataType>(body)
                .map(|r| insert_first!(tables.data_types, r.id, r, dup("data type", r.id as u64))),
            10 => decode_record::<ThreadEnd>(body).map(|r| {
                insert_first!(
                    tables.thread_ends,
                    r.thread,
                    r.state,
                    dup("thread end", r.thread as u64)
                )
            }),
            // One per trace; a second one (a forged file) is ignored.
            11 => decode_record::<RecordingStopped>(body).map(|r| {
                tables.recording_stopped.get_or_insert(r);
            }),
            12 => decode_window(body).map(|r| {
                insert_first!(
                    tables.window,
                    r.thread,
                    r,
                    dup("recording window", r.thread as u64)
                )
            }),
            13 => decode_record::<EarlierLockOrder>(body).map(|r| {
                tables.earlier_lock_order.push(r);
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

/// A site (tag 4): `id` and `frames` of version 1.0, then `first_caller` (version 1.13) when
/// the record has it; a record written before 1.13 ends after `frames` and reads as having
/// no first caller.
pub(crate) fn decode_site(body: &[u8]) -> Result<SiteInfo, String> {
    #[derive(serde::Deserialize)]
    struct Since10 {
        id: u32,
        frames: Vec<Frame>,
    }
    let (s, rest) = postcard::take_from_bytes::<Since10>(body).map_err(|e| e.to_string())?;
    let first_caller = if rest.is_empty() {
        None
    } else {
        postcard::take_from_bytes::<Option<Frame>>(rest)
            .map(|(f, _later)| f)
            .map_err(|e| e.to_string())?
    };
    Ok(SiteInfo {
        id: s.id,
        frames: s.frames,
        first_caller,
    })
}

/// A recording window (tag 12): the five fields of version 1.6, then `snapshot_signal`
/// (version 1.8) when the record has it — postcard has no defaults for missing trailing
/// fields, so a 1.6/1.7 record, which ends after `keep_last`, reads as not a snapshot.
pub(crate) fn decode_window(body: &[u8]) -> Result<RecordingWindow, String> {
    #[derive(serde::Deserialize)]
    struct Since16 {
        thread: u32,
        first_sequence: u32,
        events_dropped: u64,
        dropped_until_ns: u64,
        keep_last: u64,
    }
    let (w, rest) = postcard::take_from_bytes::<Since16>(body).map_err(|e| e.to_string())?;
    let snapshot_signal = if rest.is_empty() {
        0
    } else {
        postcard::take_from_bytes::<u32>(rest)
            .map(|(s, _later)| s)
            .map_err(|e| e.to_string())?
    };
    Ok(RecordingWindow {
        thread: w.thread,
        first_sequence: w.first_sequence,
        events_dropped: w.events_dropped,
        dropped_until_ns: w.dropped_until_ns,
        keep_last: w.keep_last,
        snapshot_signal,
    })
}

fn decode_record<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    postcard::take_from_bytes::<T>(body)
        .map(|(v, _rest)| v)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod window_tests {
    use super::*;

    #[test]
    fn a_site_without_the_first_caller_field_reads_as_having_none() {
        #[derive(serde::Serialize)]
        struct Since10 {
            id: u32,
            frames: Vec<Frame>,
        }
        let frame = Frame {
            module: 1,
            offset: 0x40,
        };
        let old = postcard::to_allocvec(&Since10 {
            id: 7,
            frames: vec![frame],
        })
        .unwrap();
        let s = decode_site(&old).unwrap();
        assert_eq!(
            s,
            SiteInfo {
                id: 7,
                frames: vec![frame],
                first_caller: None
            }
        );
        // A 1.13 record round-trips, and bytes a later minor version appends are ignored.
        let new = SiteInfo {
            first_caller: Some(Frame {
                module: 1,
                offset: 0x99,
            }),
            ..s
        };
        let mut bytes = postcard::to_allocvec(&new).unwrap();
        assert_eq!(decode_site(&bytes).unwrap(), new);
        bytes.extend_from_slice(&[5, 0xff]);
        assert_eq!(decode_site(&bytes).unwrap(), new);
        // A damaged field is reported, not read as none.
        let mut bad = old.clone();
        bad.push(7);
        assert!(decode_site(&bad).is_err());
    }

    /// A 1.6/1.7 writer's recording window: the record without `snapshot_signal`.
    #[derive(serde::Serialize)]
    struct Since16 {
        thread: u32,
        first_sequence: u32,
        events_dropped: u64,
        dropped_until_ns: u64,
        keep_last: u64,
    }

    #[test]
    fn a_window_without_the_snapshot_field_reads_as_not_a_snapshot() {
        let old = postcard::to_allocvec(&Since16 {
            thread: 3,
            first_sequence: 9,
            events_dropped: 1000,
            dropped_until_ns: 77,
            keep_last: 1 << 20,
        })
        .unwrap();
        let w = decode_window(&old).unwrap();
        assert_eq!(
            w,
            RecordingWindow {
                thread: 3,
                first_sequence: 9,
                events_dropped: 1000,
                dropped_until_ns: 77,
                keep_last: 1 << 20,
                snapshot_signal: 0,
            }
        );
        // A 1.8 record round-trips, and bytes a later minor version appends are ignored.
        let new = RecordingWindow {
            snapshot_signal: 12,
            ..w
        };
        let mut bytes = postcard::to_allocvec(&new).unwrap();
        assert_eq!(decode_window(&bytes).unwrap(), new);
        bytes.extend_from_slice(&[5, 0xff, 0x01]);
        assert_eq!(decode_window(&bytes).unwrap(), new);
        // A damaged field is reported, not read as 0.
        let mut bad = old.clone();
        bad.push(0xff);
        assert!(decode_window(&bad).is_err());
    }
}
