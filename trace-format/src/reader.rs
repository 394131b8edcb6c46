//! Reading traces: locate every chunk, check it, decode event chunks in parallel, and offer the
//! events per thread and as one causally ordered stream.
//!
//! Nothing here trusts the file: lengths are checked against the bytes actually present before
//! anything is sliced or allocated, and every problem is reported with its byte offset instead of
//! stopping the read. A file whose writer died reads up to its last complete chunk.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::codec::{Decoder, EventSlot, PLACEHOLDER};
use crate::compress::{decoded_len, decompress_events};
use crate::error::{Problem, ProblemKind, TraceError};
use crate::event::{Event, ThreadId};
use crate::frame::{
    ChunkKind, ChunkRef, EventsPrefix, CODEC_STORED, CODEC_ZSTD, EVENTS_PREFIX_LEN,
};
use crate::scan::{payload_read_problem, scan};
use crate::source::Source;
use crate::tables::{Header, Tables, Trailer};

/// Where the events of one thread came from in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Offset of the chunk header in the file.
    pub offset: u64,
    /// Index of the chunk's first event in the thread's event list.
    pub(crate) first_event: u32,
    /// Wall-clock time of the chunk's first event (0: no clock).
    pub start_ns: u64,
    /// Wall-clock time of its last event.
    pub end_ns: u64,
}

/// The events of one thread, in program order.
#[derive(Clone, Debug, Default)]
pub struct ThreadEvents {
    /// The thread.
    pub thread: ThreadId,
    /// Its events, in program order.
    pub events: Vec<Event>,
    /// The chunks they came from, in order.
    pub chunks: Vec<ChunkSpan>,
    /// Encoded bytes of this thread's events (payloads of its chunks after their prefixes,
    /// decompressed).
    pub encoded_bytes: u64,
    /// The same bytes as stored in the file: smaller than `encoded_bytes` when chunks were
    /// compressed (FORMAT.md §5.3).
    pub stored_bytes: u64,
    /// How many of its chunks were compressed.
    pub compressed_chunks: u32,
    /// How many of those were compressed with zstd (the others with LZ4).
    pub zstd_chunks: u32,
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
    source: Source,
    version: (u16, u16),
    header: Header,
    header_len: u64,
    /// Where the bytes end, as far as the scan could read them.
    file_len: u64,
    chunks: Vec<ChunkRef>,
    tables: Tables,
    trailer: Option<Trailer>,
    problems: Vec<Problem>,
}

/// A decoded trace.
pub struct Trace {
    /// The file read.
    pub path: PathBuf,
    /// Format version, major and minor.
    pub version: (u16, u16),
    /// The file header.
    pub header: Header,
    /// The side tables.
    pub tables: Tables,
    /// The trailer, when the trace ended cleanly.
    pub trailer: Option<Trailer>,
    /// Sorted by thread id.
    pub threads: Vec<ThreadEvents>,
    /// What was wrong in the file; the reader kept what it could.
    pub problems: Vec<Problem>,
    /// Bytes of the file.
    pub file_len: u64,
    /// Chunks of every kind.
    pub chunk_count: usize,
    /// Table chunks.
    pub table_chunk_count: usize,
    /// Bytes of the file header (magic, version, header record).
    pub header_len: u64,
}

impl TraceFile {
    /// Opens a trace file: its chunks are located (reading chunk headers only) and its tables
    /// and trailer are read; event chunks are read when they are decoded. Only a regular file
    /// is opened (`source.rs` says why).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref().to_path_buf();
        let source = Source::open(&path)?;
        Self::parse(path, source)
    }

    /// Opens a trace held in memory; `name` names it in errors.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, TraceError> {
        Self::parse(name.into(), Source::Memory(bytes))
    }

    fn parse(path: PathBuf, source: Source) -> Result<Self, TraceError> {
        let s = scan(&path, &source, crate::scan::Want::Chunks, true)?;
        Ok(TraceFile {
            path,
            source,
            version: s.version,
            header: s.header,
            header_len: s.header_len,
            file_len: s.file_len,
            chunks: s.chunks,
            tables: s.tables,
            trailer: s.trailer,
            problems: s.problems,
        })
    }

    /// The file opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The side tables.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// Where each chunk is, in file order.
    pub fn chunks(&self) -> &[ChunkRef] {
        &self.chunks
    }

    /// The trailer, when the trace ended cleanly.
    pub fn trailer(&self) -> Option<&Trailer> {
        self.trailer.as_ref()
    }

    /// What was wrong in the file.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// Checks an event chunk's checksum and prefix: the part of decoding that must happen before
    /// the chunk's events can be given a place in their thread.
    fn plan_chunk(&self, c: &ChunkRef, buf: &mut Vec<u8>) -> Result<PlannedChunk, Problem> {
        let payload = self
            .source
            .bytes_at(c.payload_offset, c.payload_len as usize, buf)
            .map_err(|f| payload_read_problem(c.offset, c.payload_len as usize, f))?;
        let prefix = check_events_payload(c.offset, c.payload_crc, payload)?;
        let compressed = c.codec != CODEC_STORED;
        let body_len = if compressed {
            // The decoded length, checked against what the compressed bytes can hold.
            decoded_len(c.codec, payload).map_err(|why| Problem {
                offset: c.offset,
                kind: ProblemKind::BadCompressedChunk(why),
            })?
        } else {
            payload.len() - EVENTS_PREFIX_LEN
        };
        Ok(PlannedChunk {
            offset: c.offset,
            body_offset: c.payload_offset + EVENTS_PREFIX_LEN as u64,
            body_len,
            compressed: compressed.then_some((c.payload_offset, c.payload_len, c.codec)),
            prefix,
            // Every event takes at least one byte, so the declared count cannot make us reserve
            // more than the chunk's size warrants.
            capacity: (prefix.event_count as usize).min(body_len),
            first_event: 0,
        })
    }

    /// Decodes one planned chunk into the slots reserved for it in its thread's event vector.
    fn decode_chunk_into(
        &self,
        c: &PlannedChunk,
        slots: &mut [MaybeUninit<Event>],
        refs: &ReferenceCheck,
        buf: &mut ChunkBufs,
    ) -> ChunkOutcome {
        self.decode_chunk_with(c, refs, buf, slots)
    }

    /// Decodes one planned chunk into the first slots of `store` (a chunk holding more events
    /// than there are slots has no room for the rest: they are counted).
    #[inline]
    fn decode_chunk_with(
        &self,
        c: &PlannedChunk,
        refs: &ReferenceCheck,
        buf: &mut ChunkBufs,
        store: &mut [impl EventSlot],
    ) -> ChunkOutcome {
        let mut out = ChunkOutcome {
            written: 0,
            last_key: c.prefix.base_key,
            problems: Vec::new(),
        };
        let body = match c.compressed {
            None => self
                .source
                .bytes_at(c.body_offset, c.body_len, &mut buf.raw)
                .map(Ok),
            Some((at, len, codec)) => self
                .source
                .bytes_at(at, len as usize, &mut buf.raw)
                .map(|payload| decompress_events(codec, payload, &mut buf.plain)),
        };
        let body = match body {
            Ok(Ok(body)) => body,
            Ok(Err(why)) => {
                // A compressed chunk whose block is damaged costs that chunk alone.
                out.problems.push(Problem {
                    offset: c.offset,
                    kind: ProblemKind::BadCompressedChunk(why),
                });
                return out;
            }
            Err(failure) => {
                let len = c.compressed.map_or(c.body_len, |(_, l, _)| l as usize);
                let problem = payload_read_problem(c.offset, len, failure);
                out.problems.push(problem);
                return out;
            }
        };
        let mut dec = Decoder::new(body, c.prefix.base_key);
        let kept = dec.decode_to(store);
        out.written = kept.events;
        if let Some(key) = kept.last_key {
            out.last_key = key;
        }
        let mut found = kept.events as u64;
        let result = match kept.error {
            Some(e) => Err(e),
            // No room for the rest: counted, not kept.
            None => dec.for_each(|_| {
                found += 1;
                true
            }),
        };
        // The decoder noted the largest ids; only a chunk naming an id the tables may lack is
        // looked at event by event, in a second pass.
        if !refs.covers(dec.objects_below(), dec.sites_below()) {
            let mut index = 0u64;
            let mut again = Decoder::new(body, c.prefix.base_key);
            let _ = again.for_each(|ev| {
                if !refs.defines(&ev.kind) {
                    let at = c.first_event as u64 + index;
                    out.problems
                        .push(refs.describe(c.offset, c.prefix.thread, at, &ev));
                }
                index += 1;
                (out.problems.len() as u32) < MAX_REFERENCE_REPORTS
            });
        }
        if let Err(e) = result {
            out.problems.push(Problem {
                // In a compressed chunk, the event's offset is in the decompressed bytes: the
                // chunk's offset is the one in the file.
                offset: match c.compressed {
                    None => c.body_offset + e.offset as u64,
                    Some(_) => c.offset,
                },
                kind: ProblemKind::BadEvent {
                    index: found.min(u32::MAX as u64) as u32,
                    what: e.what,
                },
            });
        } else if found != c.prefix.event_count as u64 {
            out.problems.push(Problem {
                offset: c.offset,
                kind: ProblemKind::EventCountMismatch {
                    declared: c.prefix.event_count,
                    found: found.min(u32::MAX as u64) as u32,
                },
            });
        }
        out
    }

    /// Checks every event chunk of the threads `wanted` accepts (in parallel) and orders the
    /// good ones per thread.
    fn plan_threads(
        &self,
        wanted: impl Fn(ThreadId) -> bool + Sync,
    ) -> (Vec<ThreadChunks>, Vec<Problem>) {
        let planned: Vec<Result<PlannedChunk, Problem>> = self
            .chunks
            .par_iter()
            .filter(|c| c.kind == ChunkKind::Events)
            .map_init(Vec::new, |buf, c| {
                // The thread is the payload's first four bytes: unwanted threads' chunks are not
                // read further. A chunk too short to say is planned, which reports it.
                if c.payload_len >= 4 {
                    if let Ok(p) = self.source.bytes_at(c.payload_offset, 4, buf) {
                        if !wanted(u32::from_le_bytes(p.try_into().unwrap())) {
                            return None;
                        }
                    }
                }
                Some(self.plan_chunk(c, buf))
            })
            .flatten()
            .collect();
        let mut problems = Vec::new();
        let mut good = Vec::with_capacity(planned.len());
        for p in planned {
            match p {
                Ok(c) if wanted(c.prefix.thread) => good.push(c),
                Ok(_) => {}
                Err(problem) => problems.push(problem),
            }
        }
        let groups = group_by_thread(good, &self.tables, &mut problems);
        (groups, problems)
    }

    /// Decodes the event chunks of the threads `wanted` accepts: chunks in parallel, each
    /// straight into its place in its thread's vector, so no events are copied afterwards.
    fn decode_threads(
        &self,
        wanted: impl Fn(ThreadId) -> bool + Sync,
    ) -> (Vec<ThreadEvents>, Vec<Problem>) {
        let (groups, mut problems) = self.plan_threads(wanted);

        // Reserve each thread's vector and hand every chunk its own disjoint window of it.
        let mut vectors: Vec<Vec<Event>> = groups
            .iter()
            .map(|g| Vec::with_capacity(g.chunks.iter().map(|c| c.capacity).sum()))
            .collect();
        let mut work: Vec<(&PlannedChunk, &mut [MaybeUninit<Event>])> = Vec::new();
        for (g, v) in groups.iter().zip(vectors.iter_mut()) {
            let mut rest = v.spare_capacity_mut();
            for c in &g.chunks {
                let (mine, tail) = rest.split_at_mut(c.capacity);
                work.push((c, mine));
                rest = tail;
            }
        }
        let refs = ReferenceCheck::new(&self.tables);
        let outcomes: Vec<ChunkOutcome> = work
            .into_par_iter()
            .map_init(ChunkBufs::default, |buf, (c, slots)| {
                self.decode_chunk_into(c, slots, &refs, buf)
            })
            .collect();

        let mut outcomes = outcomes.into_iter();
        let mut threads = Vec::with_capacity(groups.len());
        for (g, mut events) in groups.into_iter().zip(vectors) {
            let mut t = ThreadEvents {
                thread: g.thread,
                events: Vec::new(),
                chunks: Vec::with_capacity(g.chunks.len()),
                encoded_bytes: 0,
                stored_bytes: 0,
                compressed_chunks: 0,
                zstd_chunks: 0,
            };
            let mut filled = 0usize; // slots [0, filled) hold events, in program order
            let mut window = 0usize; // start of the current chunk's window
            let mut last_key = 0u64;
            for c in &g.chunks {
                let o = outcomes.next().expect("one outcome per planned chunk");
                problems.extend(o.problems);
                if c.prefix.base_key < last_key {
                    problems.push(Problem {
                        offset: c.offset,
                        kind: ProblemKind::KeysBackwards {
                            thread: g.thread,
                            previous: last_key,
                            next: c.prefix.base_key,
                        },
                    });
                }
                if o.written > 0 {
                    last_key = o.last_key;
                }
                // A chunk that held fewer events than it declared leaves a gap: close it.
                if window != filled {
                    events
                        .spare_capacity_mut()
                        .copy_within(window..window + o.written, filled);
                }
                t.chunks.push(ChunkSpan {
                    offset: c.offset,
                    first_event: filled.min(u32::MAX as usize) as u32,
                    start_ns: c.prefix.start_ns,
                    end_ns: c.prefix.end_ns,
                });
                t.encoded_bytes += c.body_len as u64;
                t.stored_bytes += c.compressed.map_or(c.body_len as u64, |(_, len, _)| {
                    (len as usize).saturating_sub(EVENTS_PREFIX_LEN) as u64
                });
                t.compressed_chunks += c.compressed.is_some() as u32;
                t.zstd_chunks += matches!(c.compressed, Some((_, _, CODEC_ZSTD))) as u32;
                filled += o.written;
                window += c.capacity;
            }
            // SAFETY: `filled` never exceeds the capacity reserved above (each chunk writes at
            // most `capacity` slots of its own window), and every slot below `filled` was
            // initialised: `decode_chunk_into` wrote slots `0..written` of each window, and the
            // `copy_within` above moved exactly those initialised slots down, in order, so that
            // they tile `0..filled` with no gap. `Event` is `Copy`, so nothing needs dropping.
            unsafe { events.set_len(filled) };
            t.events = events;
            threads.push(t);
        }
        (threads, problems)
    }

    /// Decodes every event chunk without keeping the events: each chunk's events are handed to
    /// `visit` in a buffer that is reused for the next chunk. Chunks are visited in parallel and
    /// in no particular order; within a chunk, events are in program order. This is the fast
    /// path for one-pass work (counting, summaries) over traces larger than memory wants to
    /// hold: nothing is allocated per event. A chunk holding more events than it declares hands
    /// over the declared number, as [`TraceFile::decode`] keeps (the count mismatch is a
    /// problem). Returns the problems found, sorted by offset.
    pub fn for_each_chunk(&self, visit: impl Fn(ChunkEvents<'_>) + Sync) -> Vec<Problem> {
        let (groups, mut problems) = self.plan_threads(|_| true);
        let refs = ReferenceCheck::new(&self.tables);
        let chunks: Vec<&PlannedChunk> = groups.iter().flat_map(|g| &g.chunks).collect();
        let found: Vec<Vec<Problem>> = chunks
            .into_par_iter()
            .map_init(
                || (Vec::new(), ChunkBufs::default()),
                |(events, bytes): &mut (Vec<Event>, ChunkBufs), c| {
                    // The buffer only grows: the decoder writes over the slots it needs.
                    if events.len() < c.capacity {
                        events.resize(c.capacity, PLACEHOLDER);
                    }
                    let outcome =
                        self.decode_chunk_with(c, &refs, bytes, &mut events[..c.capacity]);
                    visit(ChunkEvents {
                        thread: c.prefix.thread,
                        sequence: c.prefix.sequence,
                        offset: c.offset,
                        events: &events[..outcome.written],
                    });
                    outcome.problems
                },
            )
            .collect();
        problems.extend(found.into_iter().flatten());
        problems.sort_by_key(|p| p.offset);
        limit_reference_reports(&mut problems);
        keep_first_shrink(&mut problems);
        problems
    }

    /// Decodes the events of one thread only.
    pub fn thread_events(&self, thread: ThreadId) -> (ThreadEvents, Vec<Problem>) {
        let (mut threads, problems) = self.decode_threads(|t| t == thread);
        let t = threads.pop().unwrap_or(ThreadEvents {
            thread,
            ..Default::default()
        });
        (t, problems)
    }

    /// Decodes every event chunk, in parallel.
    pub fn decode(self) -> Trace {
        let (threads, decode_problems) = self.decode_threads(|_| true);
        let mut problems = self.problems.clone();
        problems.extend(decode_problems);
        for t in &threads {
            if !self.tables.threads.contains_key(&t.thread) {
                problems.push(Problem {
                    offset: t.chunks.first().map_or(0, |c| c.offset),
                    kind: ProblemKind::Reference(format!(
                        "thread {} has events but no entry in the thread table",
                        t.thread
                    )),
                });
            }
        }
        let found: u64 = threads.iter().map(|t| t.events.len() as u64).sum();
        if let Some(t) = &self.trailer {
            if t.events != found && !problems.iter().any(Problem::loses_events) {
                problems.push(Problem {
                    offset: self.file_len,
                    kind: ProblemKind::TrailerCountMismatch {
                        declared: t.events,
                        found,
                    },
                });
            }
        }
        problems.sort_by_key(|p| p.offset);
        limit_reference_reports(&mut problems);
        keep_first_shrink(&mut problems);
        Trace {
            path: self.path,
            version: self.version,
            header: self.header,
            tables: self.tables,
            trailer: self.trailer,
            threads,
            problems,
            file_len: self.file_len,
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

/// Checks an events chunk's payload checksum, then reads its prefix.
pub(crate) fn check_events_payload(
    chunk_offset: u64,
    crc: u32,
    payload: &[u8],
) -> Result<EventsPrefix, Problem> {
    if crc32fast::hash(payload) != crc {
        return Err(Problem {
            offset: chunk_offset,
            kind: ProblemKind::BadChunkChecksum,
        });
    }
    EventsPrefix::read_from(payload).ok_or(Problem {
        offset: chunk_offset,
        kind: ProblemKind::BadEventsPrefix,
    })
}

/// The events of one chunk, as [`TraceFile::for_each_chunk`] hands them over.
#[derive(Clone, Copy, Debug)]
pub struct ChunkEvents<'a> {
    /// The thread.
    pub thread: ThreadId,
    /// The chunk's number within its thread.
    pub sequence: u32,
    /// Byte offset of the chunk header.
    pub offset: u64,
    /// The chunk's events.
    pub events: &'a [Event],
}

/// An event chunk with a good checksum and prefix, and its place in its thread.
/// A decoding worker's buffers: the bytes read from a file, and a compressed chunk's events.
#[derive(Default)]
pub(crate) struct ChunkBufs {
    raw: Vec<u8>,
    plain: Vec<u8>,
}

struct PlannedChunk {
    offset: u64,
    body_offset: u64,
    /// Bytes of encoded events (decompressed, for a compressed chunk).
    body_len: usize,
    /// A compressed chunk's payload (offset, length) and codec, which is read and
    /// decompressed whole.
    compressed: Option<(u64, u32, u8)>,
    prefix: EventsPrefix,
    /// Slots reserved for its events.
    capacity: usize,
    /// Index of its first event in the thread, if no earlier chunk comes up short.
    first_event: usize,
}

struct ChunkOutcome {
    written: usize,
    last_key: u64,
    problems: Vec<Problem>,
}

struct ThreadChunks {
    thread: ThreadId,
    chunks: Vec<PlannedChunk>,
}

/// Orders good chunks per thread by sequence number, dropping duplicates and reporting gaps.
fn group_by_thread(
    mut chunks: Vec<PlannedChunk>,
    tables: &Tables,
    problems: &mut Vec<Problem>,
) -> Vec<ThreadChunks> {
    chunks.retain(|c| c.prefix.event_count > 0 || c.body_len > 0);
    chunks.sort_by_key(|c| (c.prefix.thread, c.prefix.sequence, c.offset));
    let mut threads: Vec<ThreadChunks> = Vec::new();
    let mut expected_seq = 0u32;
    let mut first_event = 0usize;
    for mut c in chunks {
        let new_thread = threads.last().is_none_or(|t| t.thread != c.prefix.thread);
        if new_thread {
            threads.push(ThreadChunks {
                thread: c.prefix.thread,
                chunks: Vec::new(),
            });
            expected_seq = tables.first_sequence(c.prefix.thread);
            first_event = 0;
        }
        let t = threads.last_mut().expect("pushed above");
        let seq = c.prefix.sequence;
        if !new_thread && seq < expected_seq {
            problems.push(Problem {
                offset: c.offset,
                kind: ProblemKind::DuplicateChunk {
                    thread: t.thread,
                    sequence: seq,
                },
            });
            continue;
        }
        if seq > expected_seq {
            problems.push(Problem {
                offset: c.offset,
                kind: ProblemKind::MissingChunks {
                    thread: t.thread,
                    from: expected_seq,
                    to: seq,
                },
            });
        }
        expected_seq = seq.saturating_add(1);
        c.first_event = first_event;
        first_event += c.capacity;
        t.chunks.push(c);
    }
    threads
}

/// At most this many dangling references are reported per chunk, and per trace.
pub(crate) const MAX_REFERENCE_REPORTS: u32 = 20;

/// Keeps the first `MAX_REFERENCE_REPORTS` reference problems (already sorted by offset).
pub(crate) fn limit_reference_reports(problems: &mut Vec<Problem>) {
    let mut seen = 0u32;
    problems.retain(|p| {
        if matches!(p.kind, ProblemKind::Reference(_)) {
            seen += 1;
            seen <= MAX_REFERENCE_REPORTS
        } else {
            true
        }
    });
}

/// Keeps the first report of a file that shrank while it was read (problems sorted by offset):
/// every chunk after the first one it cut is gone too.
pub(crate) fn keep_first_shrink(problems: &mut Vec<Problem>) {
    let mut seen = false;
    problems.retain(|p| {
        if matches!(p.kind, ProblemKind::ShrankWhileReading { .. }) {
            !std::mem::replace(&mut seen, true)
        } else {
            true
        }
    });
}

/// Which object and site ids the tables define: a compressed bitmap, as small for the dense
/// ids of a recorder's trace as for the scattered ids a hostile file may declare.
struct IdSet(roaring::RoaringBitmap);

impl IdSet {
    fn new(ids: impl Iterator<Item = u32>) -> Self {
        IdSet(ids.collect())
    }

    /// The length of the run of defined ids starting at 0.
    fn dense_prefix(&self) -> u64 {
        self.0
            .iter()
            .zip(0u64..)
            .take_while(|&(id, i)| u64::from(id) == i)
            .count() as u64
    }

    #[inline]
    fn contains(&self, id: u32) -> bool {
        self.0.contains(id)
    }
}

/// Checks that an event's object and (synchronisation) site are in the tables.
pub(crate) struct ReferenceCheck {
    objects: IdSet,
    sites: IdSet,
    /// Every object id below this is defined (ids are dense in a recorder's trace).
    objects_dense: u64,
    sites_dense: u64,
}

impl ReferenceCheck {
    pub(crate) fn new(tables: &Tables) -> Self {
        let objects = IdSet::new(tables.objects.keys().copied());
        let sites = IdSet::new(tables.sites.keys().copied());
        ReferenceCheck {
            objects_dense: objects.dense_prefix(),
            sites_dense: sites.dense_prefix(),
            objects,
            sites,
        }
    }

    /// True when every object id below `objects_below` and site id below `sites_below` is
    /// defined.
    #[inline]
    pub(crate) fn covers(&self, objects_below: u64, sites_below: u64) -> bool {
        objects_below <= self.objects_dense && sites_below <= self.sites_dense
    }

    #[inline]
    pub(crate) fn defines(&self, kind: &crate::event::EventKind) -> bool {
        use crate::event::EventKind::{CondWaitBegin, CondWaitEnd};
        if let Some(o) = kind.object() {
            if !self.objects.contains(o) {
                return false;
            }
        }
        if let CondWaitBegin { mutex, .. } | CondWaitEnd { mutex, .. } = *kind {
            if !self.objects.contains(mutex) {
                return false;
            }
        }
        match kind.site() {
            // Memory sites are plain code addresses; only synchronisation sites are interned.
            Some(s) if !self.sites.contains(s) => is_memory_like(kind),
            _ => true,
        }
    }

    /// The problem for event `index` (in its thread) of the chunk at `chunk_offset`, which
    /// names something the tables do not define.
    #[cold]
    pub(crate) fn describe(
        &self,
        chunk_offset: u64,
        thread: ThreadId,
        index: u64,
        ev: &Event,
    ) -> Problem {
        use crate::event::EventKind::{CondWaitBegin, CondWaitEnd};
        let what = match (ev.kind.object(), ev.kind) {
            (Some(o), _) if !self.objects.contains(o) => format!("object {o}"),
            (_, CondWaitBegin { mutex, .. } | CondWaitEnd { mutex, .. })
                if !self.objects.contains(mutex) =>
            {
                format!("object {mutex}")
            }
            _ => format!("site {}", ev.kind.site().unwrap_or_default()),
        };
        Problem {
            offset: chunk_offset,
            kind: ProblemKind::Reference(format!(
                "thread {thread} event {index} ({}) names {what}, which the tables do not define",
                ev.kind.name()
            )),
        }
    }
}

fn is_memory_like(kind: &crate::event::EventKind) -> bool {
    matches!(
        kind.category(),
        crate::event::Category::Memory
            | crate::event::Category::Atomic
            | crate::event::Category::Allocation
    )
}

impl Trace {
    /// Opens and decodes a trace file.
    ///
    /// The whole file is read into memory first, with one read: decoding visits every byte
    /// anyway, and a snapshot cannot change under the decoder. A file too large for memory is
    /// an error, not an abort.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref().to_path_buf();
        let bytes = Source::open(&path)?
            .into_memory()
            .map_err(|error| TraceError::Io {
                path: path.clone(),
                error,
            })?;
        Ok(TraceFile::parse(path, Source::Memory(bytes))?.decode())
    }

    /// Decodes a trace held in memory; `name` names it in errors.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, TraceError> {
        Ok(TraceFile::from_bytes(name, bytes)?.decode())
    }

    /// True when the trace has its trailer and no chunk was lost.
    pub fn ended_cleanly(&self) -> bool {
        self.trailer.is_some() && self.problems.iter().all(|p| !p.is_damage())
    }

    /// Events of every thread.
    pub fn event_count(&self) -> u64 {
        self.threads.iter().map(|t| t.events.len() as u64).sum()
    }

    /// The events of thread `id`.
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
    /// The thread.
    pub thread: ThreadId,
    /// Position in the thread's event list.
    pub index: usize,
    /// The event.
    pub event: &'a Event,
}

/// The events of a [`Trace`] in the merged order: [`Trace::merged`].
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

#[cfg(test)]
mod tests {
    use super::IdSet;

    #[test]
    fn id_sets_answer_for_dense_and_scattered_ids() {
        let set = IdSet::new([3, 0, 2, 1, 5, u32::MAX, 1 << 31].into_iter());
        assert_eq!(set.dense_prefix(), 4, "0..4 defined, 4 missing");
        for id in [0, 1, 2, 3, 5, u32::MAX, 1 << 31] {
            assert!(set.contains(id), "{id}");
        }
        for id in [4, 6, u32::MAX - 1, (1 << 31) + 1] {
            assert!(!set.contains(id), "{id}");
        }
        assert_eq!(IdSet::new([1, 2].into_iter()).dense_prefix(), 0);
        assert_eq!(IdSet::new(std::iter::empty()).dense_prefix(), 0);
    }
}
