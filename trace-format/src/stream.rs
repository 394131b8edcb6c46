//! Streaming: the events of a trace in the causal merged order, read straight from the file
//! with positioned reads, in memory bounded by the number of threads rather than by the length
//! of the trace.
//!
//! [`TraceStream::open`] makes one cheap pass over the file (`scan.rs`): it reads the chunk
//! headers, and the events prefix that follows each events chunk header, but skips the event
//! payloads; it reads table chunks and the trailer in full, since tables must be complete
//! before any event is interpreted (`FORMAT.md` §4.3). What it keeps of the event chunks is an
//! index: per thread, where each chunk is, in sequence order (a few bytes of varints per
//! chunk, a chunk being 64 KiB as the recorder writes them; its header and prefix are read
//! again, in the same read as its payload).
//!
//! [`TraceStream::merged`] then gives every event in the order of [`Trace::merged`] — by key,
//! then thread, then position in the thread — with one cursor per thread: the payload of the
//! thread's current chunk (read with one `pread` and checked against its checksum before any
//! event of it is used), the decoder's state within it, and a small batch of decoded events.
//! A heap over the threads' next events picks the next one; the thread that just gave an event
//! keeps giving while its next event still comes first, without touching the heap.
//!
//! **Memory.** Per thread that is giving events: a cursor, with one chunk payload (at most the
//! chunk size; 64 MiB for a hostile file, the format's limit) and [`BATCH`] decoded events. A
//! thread whose turn has not come is its first event's key in a list of the waiting threads
//! in the merged order (about 3 bytes: only the list's first is in the heap) and a few words:
//! where its first chunk is, and what the pass learnt of it; its chunk is read again (and
//! checked against its checksum again) when the turn comes. A thread that has ended keeps its
//! summary (only its event count, 2 bytes with its place while it is below 16,383, for a pass
//! that asks for no more: [`TraceStream::merged_event_counts`]), and hands its cursor's
//! buffers to the next thread to start. Plus the index (a byte per thread where its entries
//! are found, its id none while the ids have no gap, and about 4 per events chunk), the
//! tables, and the problems found. Nothing grows with the number of events, and a program
//! that created 10^5 short threads over its life (one chunk each) costs about 7 bytes per
//! thread (47 with the bytes and times of its summary), and a cursor per thread running at
//! once.
//!
//! **Same answers as the decoding reader.** Each thread's events, their indices, the merged
//! order, and the problems are those of [`Trace`] on the same bytes, with two exceptions that
//! only damaged files show: a chunk whose payload fails its checksum is placed by the prefix
//! the scan read (it is dropped either way), and the index named in a dangling-reference
//! problem counts the events actually kept before it. A file that shrinks while it is read
//! ends where it ends now: the chunk that runs past its new end is reported as cut short
//! ([`ProblemKind::ShrankWhileReading`]) and the thread goes on with its next chunk, if any.
//!
//! [`Trace`]: crate::Trace
//! [`Trace::merged`]: crate::Trace::merged

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::{Path, PathBuf};

use crate::codec::{Decoder, DecoderState, PLACEHOLDER};
use crate::compress::{decoded_len, decompress_events};
use crate::error::{Problem, ProblemKind, TraceError};
use crate::event::{Event, ThreadId};
use crate::frame::{
    read_chunk_header, ChunkKind, EventsPrefix, CHUNK_HEADER_LEN, CODEC_STORED, CODEC_ZSTD,
    EVENTS_PREFIX_LEN,
};
use crate::ordering::Checker;
use crate::reader::{
    check_events_payload, keep_first_shrink, limit_reference_reports, ReferenceCheck, Trace,
    MAX_REFERENCE_REPORTS,
};
use crate::scan::{payload_read_problem, read_table_records, scan, ChunkLoc};
use crate::source::{ReadFailure, Source};
use crate::tables::{Header, TableRecord, Tables, Trailer};
use crate::varint;

/// How many events a cursor decodes at a time. Decoding in batches keeps the decoder's loop
/// tight; a batch costs `BATCH * 32` bytes per thread.
pub const BATCH: usize = 256;

/// What [`TraceStream::open_with`] keeps of the tables beyond what the merged pass needs.
/// [`StreamOptions::default`] keeps everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// The per-thread access counts (FORMAT.md §7.8; what `stats` shows), in
    /// [`Tables::access_counts`]. Not kept, their records are still read and a bad one is
    /// reported as ever: a process that created 10^5 threads wrote 10^5 of them, 24 bytes
    /// each, that a pass that does not report them need not hold while the trace is opened.
    pub access_counts: bool,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            access_counts: true,
        }
    }
}

/// A trace opened for streaming: header, tables and trailer read, event chunks located.
pub struct TraceStream {
    path: PathBuf,
    source: Source,
    version: (u16, u16),
    header: Header,
    header_len: u64,
    file_len: u64,
    tables: Tables,
    trailer: Option<Trailer>,
    /// What the scan found wrong.
    problems: Vec<Problem>,
    /// Problems of event chunks too short to name their thread (found by the scan, reported
    /// with the chunks' own problems).
    orphan_problems: Vec<Problem>,
    /// Threads with event chunks, by thread id (a range of ids, as a recorder numbers them,
    /// takes no room).
    threads: PlanIds,
    /// Where the entries of threads `PLAN_GROUP * g` on start in `index`, for each `g`: a
    /// thread's are found from there, past the few threads before it in its group (a word a
    /// thread would be 0.4 MB for a process that created 10^5 threads).
    group_from: Vec<u32>,
    /// Every events chunk, by thread, in (sequence, file offset) order: per thread, the number
    /// of its chunks, then their [`ChunkList`] entries.
    index: Vec<u8>,
    /// The events the chunks' prefixes declare, added up by the scan.
    declared_events: u64,
    chunk_count: usize,
    table_chunk_count: usize,
    refs: ReferenceCheck,
}

/// The ids of the threads with event chunks, in order: `first..first + len` while they have no
/// gap (a recorder numbers its threads from 0 on), else listed.
#[derive(Debug, Default)]
struct PlanIds {
    first: ThreadId,
    len: usize,
    /// Empty while the ids are a range.
    listed: Vec<ThreadId>,
}

impl PlanIds {
    /// Adds `id`, larger than the ids before it.
    fn push(&mut self, id: ThreadId) {
        if self.listed.is_empty() {
            if self.len == 0 {
                self.first = id;
                self.len = 1;
                return;
            }
            if u64::from(self.first) + self.len as u64 == u64::from(id) {
                self.len += 1;
                return;
            }
            self.listed = self.iter().collect();
        }
        self.listed.push(id);
        self.len += 1;
    }

    #[inline]
    fn get(&self, plan: usize) -> ThreadId {
        if self.listed.is_empty() {
            self.first + plan as ThreadId
        } else {
            self.listed[plan]
        }
    }

    fn find(&self, id: ThreadId) -> Option<usize> {
        if self.listed.is_empty() {
            let at = id.checked_sub(self.first)? as usize;
            (at < self.len).then_some(at)
        } else {
            self.listed.binary_search(&id).ok()
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn iter(&self) -> impl Iterator<Item = ThreadId> + '_ {
        (0..self.len).map(|plan| self.get(plan))
    }
}

/// One thread's entries of the stream's chunk index, read in order: each chunk's header
/// offset (the first one of a group of threads as it is, the next ones from where the chunk
/// before ends, zigzag), then its payload length, its codec and whether it is the thread's
/// last chunk in one more (a codec of [`CODEC_ESCAPE`] or above in a byte of its own), as
/// varints: about 4 bytes a chunk, where a process that created 10^5 threads left 10^5 chunks
/// or more. Its header (with the payload's checksum) and its prefix (sequence, declared
/// events) are not kept: they are read again with its payload, in the same read, and checked;
/// the chunks were put in sequence order when the index was made.
#[derive(Clone, Copy, Debug, Default)]
struct ChunkList<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Where the chunk before ends; `None` before the first.
    end: Option<u64>,
    /// An entry is left: the last one read was not the thread's last.
    more: bool,
}

/// Threads of [`TraceStream::index`] found from one place of [`TraceStream::group_from`].
const PLAN_GROUP: usize = 4;

/// Codecs from this one on take a byte of their own in the index, after the entry's length.
const CODEC_ESCAPE: u8 = 3;

impl<'a> ChunkList<'a> {
    /// Writes `loc`'s entry after that of the chunk that ends at `end` (`None`: the first of
    /// a group of threads), `last` when it is its thread's last; returns where `loc` ends.
    fn put(index: &mut Vec<u8>, end: Option<u64>, loc: &ChunkLoc, last: bool) -> u64 {
        match end {
            None => varint::put(index, loc.offset()),
            // Offsets are below 2^56.
            Some(end) => varint::put(index, varint::zigzag(loc.offset() as i64 - end as i64)),
        }
        let codec = loc.codec().min(CODEC_ESCAPE);
        varint::put(
            index,
            (u64::from(loc.payload_len) << 3) | (u64::from(codec) << 1) | u64::from(last),
        );
        if codec == CODEC_ESCAPE {
            index.push(loc.codec());
        }
        loc.end()
    }

    /// The list of the thread whose entries start at `at` of `bytes`, after the chunk that
    /// ends at `end` (`None`: the thread is the first of its group).
    fn at(bytes: &'a [u8], at: usize, end: Option<u64>) -> Self {
        ChunkList {
            bytes,
            at,
            end,
            more: true,
        }
    }
}

impl Iterator for ChunkList<'_> {
    type Item = ChunkLoc;

    fn next(&mut self) -> Option<ChunkLoc> {
        if !std::mem::take(&mut self.more) {
            return None;
        }
        // The entries were written by `put`: they read back.
        let mut field = || varint::get(self.bytes, &mut self.at).ok();
        let place = field()?;
        let offset = match self.end {
            None => place,
            Some(end) => (end as i64).wrapping_add(varint::unzigzag(place)) as u64,
        };
        let fields = field()?;
        let mut codec = ((fields >> 1) & 3) as u8;
        if codec == CODEC_ESCAPE {
            codec = *self.bytes.get(self.at)?;
            self.at += 1;
        }
        let loc = ChunkLoc::new(offset, codec, (fields >> 3) as u32);
        self.end = Some(loc.end());
        self.more = fields & 1 == 0;
        Some(loc)
    }
}

/// One event of the merged stream: the owned counterpart of [`crate::reader::MergedEvent`],
/// with the byte offset of the event's chunk for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamEvent {
    /// The thread that ran the event.
    pub thread: ThreadId,
    /// Position in the thread's events (what `Trace::threads[..].events` would index).
    pub index: usize,
    /// The event as decoded.
    pub event: Event,
    /// Byte offset of the header of the chunk that holds the event.
    pub chunk_offset: u64,
}

// The owned merged order of a trace in memory is the stream's vocabulary: it is defined here,
// beside [`StreamEvent`], so that the reader does not depend on the stream.
impl Trace {
    /// The merged order as [`TraceStream::merged`] gives it (owned events with their chunk's
    /// offset), so that a pass written for the stream also runs over a trace in memory.
    pub fn merged_owned(&self) -> impl Iterator<Item = StreamEvent> + '_ {
        self.merged().map(|m| StreamEvent {
            thread: m.thread,
            index: m.index,
            event: *m.event,
            chunk_offset: self.thread(m.thread).map_or(0, |t| t.offset_of(m.index)),
        })
    }
}

/// What the merged pass learnt of one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSummary {
    /// The thread summarised.
    pub thread: ThreadId,
    /// Events given so far (all of them once the stream is exhausted).
    pub events: u64,
    /// Encoded bytes of the thread's chunks used so far (decompressed).
    pub encoded_bytes: u64,
    /// The same bytes as stored in the file (FORMAT.md §5.3).
    pub stored_bytes: u64,
    /// How many of those chunks were compressed.
    pub compressed_chunks: u32,
    /// How many of those were compressed with zstd (the others with LZ4).
    pub zstd_chunks: u32,
    /// Wall-clock times of the first and of the last of those chunks (0 when unknown).
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
}

impl TraceStream {
    /// Opens a trace file for streaming. Only a regular file is opened (`source.rs` says why).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        Self::open_with(path, StreamOptions::default())
    }

    /// [`TraceStream::open`], keeping of the tables what `options` asks for.
    pub fn open_with(path: impl AsRef<Path>, options: StreamOptions) -> Result<Self, TraceError> {
        let path = path.as_ref().to_path_buf();
        let source = Source::open(&path)?;
        Self::build(path, source, options)
    }

    /// Streams a trace from a file already open for reading (a temporary file that has no
    /// name of its own, say), called `name` in errors and problems. Only a regular file.
    pub fn from_file(name: impl Into<PathBuf>, file: std::fs::File) -> Result<Self, TraceError> {
        Self::from_file_with(name, file, StreamOptions::default())
    }

    /// [`TraceStream::from_file`], keeping of the tables what `options` asks for.
    pub fn from_file_with(
        name: impl Into<PathBuf>,
        file: std::fs::File,
        options: StreamOptions,
    ) -> Result<Self, TraceError> {
        let path = name.into();
        let source = Source::from_file(&path, file)?;
        Self::build(path, source, options)
    }

    /// Streams a trace that is already in memory.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, TraceError> {
        Self::from_bytes_with(name, bytes, StreamOptions::default())
    }

    /// [`TraceStream::from_bytes`], keeping of the tables what `options` asks for.
    pub fn from_bytes_with(
        name: impl Into<PathBuf>,
        bytes: Vec<u8>,
        options: StreamOptions,
    ) -> Result<Self, TraceError> {
        Self::build(name.into(), Source::Memory(bytes), options)
    }

    fn build(path: PathBuf, source: Source, options: StreamOptions) -> Result<Self, TraceError> {
        let mut s = scan(
            &path,
            &source,
            crate::scan::Want::Located,
            options.access_counts,
        )?;
        // The events chunks with a prefix are apart, 20 bytes each: a process that created
        // 10^5 threads left 10^5 of them, and as many table chunks (read, counted, not kept).
        let mut located = std::mem::take(&mut s.located.chunks);
        let chunk_count = s.chunk_count;
        let table_chunk_count = s.table_chunk_count;
        // Not yet checked against the checksums: what `declared_events` tells without
        // decoding.
        let declared_events = s.located.declared;
        let mut orphan_problems = Vec::new();
        let mut buf = Vec::new();
        // The chunks left in the list are events chunks shorter than an events prefix: their
        // checksum or their prefix is reported now.
        for c in &s.chunks {
            let problem = match source.bytes_at(c.payload_offset, c.payload_len as usize, &mut buf)
            {
                Ok(payload) => check_events_payload(c.offset, c.payload_crc, payload)
                    .err()
                    .unwrap_or(Problem {
                        offset: c.offset,
                        kind: ProblemKind::BadEventsPrefix,
                    }),
                Err(f) => payload_read_problem(c.offset, c.payload_len as usize, f),
            };
            orphan_problems.push(problem);
        }
        s.chunks = Vec::new();
        if u32::try_from(located.len()).is_err() {
            return Err(TraceError::Io {
                path,
                error: std::io::Error::other(format!(
                    "{} event chunks, more than the {} this reader indexes",
                    located.len(),
                    u32::MAX
                )),
            });
        }
        // By thread, then (sequence, offset): no two chunks have the same offset.
        located.sort_unstable_by_key(|(thread, sequence, c)| (*thread, *sequence, c.offset()));
        let thread_count = located.windows(2).filter(|w| w[0].0 != w[1].0).count()
            + usize::from(!located.is_empty());
        let mut threads = PlanIds::default();
        let mut group_from: Vec<u32> = Vec::with_capacity(thread_count.div_ceil(PLAN_GROUP));
        let mut index = Vec::new();
        let mut from = 0;
        let mut end = None;
        while let Some(&(thread, _, _)) = located.get(from) {
            let to = from + located[from..].partition_point(|l| l.0 == thread);
            if threads.len() % PLAN_GROUP == 0 {
                group_from.push(index.len() as u32);
                end = None;
            }
            threads.push(thread);
            for (i, (_, _, c)) in located[from..to].iter().enumerate() {
                end = Some(ChunkList::put(&mut index, end, c, from + i + 1 == to));
            }
            from = to;
        }
        drop(located);
        if u32::try_from(index.len()).is_err() {
            return Err(TraceError::Io {
                path,
                error: std::io::Error::other(format!(
                    "an index of {} bytes for the event chunks, more than the {} this reader \
                     keeps",
                    index.len(),
                    u32::MAX
                )),
            });
        }
        // Of the exact length (not the doubling's room).
        index.shrink_to_fit();
        threads.listed.shrink_to_fit();
        Ok(TraceStream {
            path,
            source,
            version: s.version,
            header: s.header,
            header_len: s.header_len,
            file_len: s.file_len,
            refs: ReferenceCheck::new(&s.tables),
            tables: s.tables,
            trailer: s.trailer,
            problems: s.problems,
            orphan_problems,
            threads,
            group_from,
            index,
            declared_events,
            chunk_count,
            table_chunk_count,
        })
    }

    /// The chunks of thread `plan` (of `self.threads`).
    fn chunks_of(&self, plan: usize) -> ChunkList<'_> {
        let mut list = ChunkList::at(
            &self.index,
            self.group_from[plan / PLAN_GROUP] as usize,
            None,
        );
        // The index was written by `build`: it reads back.
        for _ in 0..plan % PLAN_GROUP {
            list.by_ref().for_each(drop);
            list.more = true;
        }
        list
    }

    /// The chunks of every thread, in order: one pass over the index, not a search from its
    /// group's start for each.
    fn all_chunks(&self) -> impl Iterator<Item = ChunkList<'_>> + '_ {
        let mut walker = ChunkList::at(&self.index, 0, None);
        (0..self.threads.len()).map(move |plan| {
            if plan > 0 {
                walker.by_ref().for_each(drop);
            }
            if plan % PLAN_GROUP == 0 {
                walker.end = None;
            }
            walker.more = true;
            walker
        })
    }

    /// The file the stream reads, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version of the file, major and minor (FORMAT.md §2.1).
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// The file's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Bytes of the file prefix and header.
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Where the file ends, as far as the scan could read it.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Every table of the file (threads, locks, sites, modules, …), read before any event.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// Lets the thread table's kernel thread ids and parents go, for a pass that does not
    /// report them ([`crate::tables::ThreadTable::forget_details`]): 8 bytes a thread.
    pub fn forget_thread_details(&mut self) {
        self.tables.threads.forget_details();
    }

    /// Adds `records` to the tables as if they were table chunks at the end of the file, after
    /// every chunk it has (`Tables::add_records`): what a symbolisation pass would append
    /// (`foresight_symbols::symbol_records`), without writing the file. Their problems, if any,
    /// are reported at the file's end.
    pub fn add_table_records(&mut self, records: &[TableRecord]) {
        let file_len = self.file_len;
        let problems = self.tables.add_records(records);
        self.problems.extend(problems.into_iter().map(|mut p| {
            p.offset = p.offset.saturating_add(file_len);
            p
        }));
        self.refs = ReferenceCheck::new(&self.tables);
    }

    /// The trailer, when the trace ended cleanly.
    pub fn trailer(&self) -> Option<&Trailer> {
        self.trailer.as_ref()
    }

    /// Chunks located, of every kind.
    pub fn chunk_count(&self) -> usize {
        self.chunk_count
    }

    /// Chunks located that hold tables.
    pub fn table_chunk_count(&self) -> usize {
        self.table_chunk_count
    }

    /// What the scan found wrong (framing, tables, trailer). The merged pass finds the rest:
    /// [`MergedStream::problems`].
    pub fn scan_problems(&self) -> &[Problem] {
        &self.problems
    }

    /// The threads that have event chunks, by id.
    pub fn threads(&self) -> impl Iterator<Item = ThreadId> + '_ {
        self.threads.iter()
    }

    /// Every event in the causal merged order: by key, then thread, then position in the
    /// thread, as [`crate::Trace::merged`] gives them.
    pub fn merged(&self) -> MergedStream<'_> {
        self.merged_keeping(true)
    }

    fn merged_keeping(&self, keep_bytes: bool) -> MergedStream<'_> {
        let ctx = Ctx {
            source: &self.source,
            tables: &self.tables,
            refs: &self.refs,
            problems: self.orphan_problems.clone(),
            thread_refs: Vec::new(),
            references: 0,
            shrunk_to: None,
        };
        MergedStream::new(self, ctx, keep_bytes)
    }

    /// [`TraceStream::merged`] for a pass that needs only each thread's event count of the
    /// summaries: what it keeps of a thread that is waiting or has ended is its place and its
    /// event count (2 bytes with its place), not its bytes and times too, and
    /// [`MergedStream::thread_summaries`] gives those as 0.
    pub fn merged_event_counts(&self) -> MergedStream<'_> {
        self.merged_keeping(false)
    }

    /// The events the chunks' prefixes declare, in all: what a summary of the trace says
    /// without decoding a chunk (time and memory follow the chunk index, not the events). The prefixes are not checked against their
    /// chunks' checksums here; a damaged chunk still counts what it declared.
    pub fn declared_events(&self) -> u64 {
        self.declared_events
    }

    /// The events prefix of chunk `loc`, read again (not checked against the checksum, as the
    /// scan's was not); `None` when it cannot be read.
    fn prefix_of(&self, loc: &ChunkLoc, buf: &mut Vec<u8>) -> Option<EventsPrefix> {
        let len = EVENTS_PREFIX_LEN.min(loc.payload_len as usize);
        let bytes = self.source.bytes_at(loc.payload_offset(), len, buf).ok()?;
        EventsPrefix::read_from(bytes)
    }

    /// The events of one thread, in program order, read as the merged pass reads them.
    pub fn thread_events(&self, thread: ThreadId) -> ThreadStream<'_> {
        self.thread_tail(thread, usize::MAX)
    }

    /// The events of a thread's last `chunks` event chunks, in program order: what a thread
    /// was doing when the trace ends, read in time and memory bounded by the chunks' size.
    /// Positions ([`StreamEvent::index`]-style) count the events the skipped chunks declare.
    pub fn thread_tail(&self, thread: ThreadId, chunks: usize) -> ThreadStream<'_> {
        let all = self
            .threads
            .find(thread)
            .map_or_else(ChunkList::default, |plan| self.chunks_of(plan));
        // The chunks skipped, when some are: they are counted first.
        let skipped = if chunks == usize::MAX {
            0
        } else {
            all.count().saturating_sub(chunks)
        };
        let mut kept = all;
        let mut skipped_events = 0usize;
        let mut buf = Vec::new();
        for _ in 0..skipped {
            // A few chunks' prefixes, read again: the index keeps none (a chunk whose prefix
            // no longer reads counts no events, and is reported when the cursor reaches it).
            if let Some(c) = kept.next() {
                skipped_events = skipped_events.saturating_add(
                    self.prefix_of(&c, &mut buf)
                        .map_or(0, |p| p.event_count as usize),
                );
            }
        }
        let mut cursor = Cursor::new(thread, kept, self.tables.first_sequence(thread));
        if skipped > 0 {
            if let Some(first) = kept.next() {
                if let Some(prefix) = self.prefix_of(&first, &mut buf) {
                    cursor.expected_sequence = prefix.sequence;
                }
                cursor.index = skipped_events;
            }
        }
        ThreadStream {
            stream: self,
            ctx: Ctx {
                source: &self.source,
                tables: &self.tables,
                refs: &self.refs,
                problems: Vec::new(),
                thread_refs: Vec::new(),
                references: 0,
                shrunk_to: None,
            },
            cursor,
            started: false,
        }
    }

    /// Every problem: the scan's, then those of the merged pass (`found`), sorted by offset,
    /// with the decoding reader's limit on dangling-reference reports; the trailer's event
    /// count is compared with `given` only when the pass read every event.
    fn all_problems(&self, ctx: &Ctx<'_>, given: u64, complete: bool) -> Vec<Problem> {
        let mut all = self.problems.clone();
        all.extend(ctx.problems.iter().cloned());
        all.extend(ctx.thread_refs.iter().cloned());
        if let (Some(t), true) = (&self.trailer, complete) {
            if t.events != given && !all.iter().any(Problem::loses_events) {
                all.push(Problem {
                    offset: self.file_len,
                    kind: ProblemKind::TrailerCountMismatch {
                        declared: t.events,
                        found: given,
                    },
                });
            }
        }
        all.sort_by_key(|p| p.offset);
        limit_reference_reports(&mut all);
        keep_first_shrink(&mut all);
        all
    }
}

/// What cursors share while reading: the bytes, the reference check, and where problems go.
struct Ctx<'a> {
    source: &'a Source,
    tables: &'a Tables,
    refs: &'a ReferenceCheck,
    /// Problems of event chunks, in the order found.
    problems: Vec<Problem>,
    /// Threads that have events but no entry in the thread table (reported after the rest,
    /// as the decoding reader does).
    thread_refs: Vec<Problem>,
    /// Dangling-reference problems in `problems`.
    references: usize,
    /// Where the file ends now, when a read showed that it shrank since it was opened.
    shrunk_to: Option<u64>,
}

impl Ctx<'_> {
    /// A chunk's payload could not be read. A file that shrank is reported once, at the first
    /// chunk it cut: a chunk that starts past the end already seen needs no report of its own.
    fn read_failed(&mut self, loc: &ChunkLoc, failure: ReadFailure) {
        if let ReadFailure::Short { got } = failure {
            if self.shrunk_to.is_some_and(|end| loc.offset() >= end) {
                return;
            }
            let end = loc.payload_offset() + got as u64;
            self.shrunk_to = Some(self.shrunk_to.map_or(end, |e| e.min(end)));
        }
        let len = loc.payload_len as usize;
        self.problems
            .push(payload_read_problem(loc.offset(), len, failure));
    }

    /// Keeps the reference problems bounded: only the first `MAX_REFERENCE_REPORTS` by offset
    /// are ever reported, so older ones beyond that can go. Sorting by offset here does not
    /// change the final order, which is a stable sort by offset too.
    fn prune_references(&mut self) {
        if self.references <= 2 * MAX_REFERENCE_REPORTS as usize {
            return;
        }
        self.problems.sort_by_key(|p| p.offset);
        limit_reference_reports(&mut self.problems);
        self.references = MAX_REFERENCE_REPORTS as usize;
    }
}

/// A chunk whose bytes are no longer those the trace was opened (or first read) with.
fn changed_while_reading(loc: &ChunkLoc) -> Problem {
    Problem {
        offset: loc.offset(),
        kind: ProblemKind::ReadError {
            len: u64::from(loc.payload_len),
            why: "the chunk changed while the trace was being read".into(),
        },
    }
}

/// The chunk a cursor is decoding.
struct Chunk {
    offset: u64,
    /// The events body: offset in the file and length.
    body_offset: u64,
    body_len: usize,
    /// The body is the cursor's decompressed `plain` bytes (FORMAT.md §5.3).
    compressed: bool,
    thread: ThreadId,
    /// Its prefix's: where a thread that waits for its turn is read again from.
    sequence: u32,
    base_key: u64,
    declared: u32,
    /// Events that may be kept: a chunk holding more than it declared keeps only that many,
    /// as the decoding reader (which reserves room for the declared count) does.
    capacity: usize,
    found: u64,
    written: usize,
    /// Index in the thread of the chunk's first event.
    first_index: u64,
    state: DecoderState,
    /// A `base_key` below the thread's last key, reported when the chunk ends.
    keys_backwards: Option<Problem>,
}

/// One thread's position in its events.
struct Cursor<'a> {
    thread: ThreadId,
    chunks: ChunkList<'a>,
    /// Chunks taken from `chunks`.
    next_chunk: usize,
    /// The current chunk's payload when it is read from a file.
    payload: Vec<u8>,
    /// The current chunk's events when it is compressed, decompressed.
    plain: Vec<u8>,
    chunk: Option<Chunk>,
    batch: Vec<Event>,
    at: usize,
    /// The offset of the chunk the batch came from.
    batch_offset: u64,
    /// Index in the thread of `batch[at]`.
    index: usize,
    /// Extension events decoded (blocking calls): given with the others, counted apart, as a
    /// chunk's event count leaves them out.
    extensions: usize,
    expected_sequence: u32,
    /// The key of the last event kept, for the check that keys do not go backwards.
    last_key: u64,
    summary: ThreadSummary,
    /// Some chunk of the thread passed its checks.
    any_chunk: bool,
    finished: bool,
    /// The first batch is the thread's first event alone: the merge needs every thread's next
    /// event from the start, and a process that created 10^5 short threads has 10^5 of them;
    /// a batch is decoded once the thread's turn comes.
    first_batch: bool,
    /// The thread's index in [`TraceStream::threads`] (the merged stream's name for it).
    plan: u32,
    /// The next chunk loaded was read, checked and counted before (a waiting thread's, whose
    /// turn has come): a failed check now means that the file changed.
    rereading: bool,
}

impl<'a> Cursor<'a> {
    /// Events given that a chunk's event count counts (extension events left out).
    fn counted_given(&self) -> u64 {
        self.index.saturating_sub(self.extensions) as u64
    }

    fn new(thread: ThreadId, chunks: ChunkList<'a>, first_sequence: u32) -> Self {
        Cursor {
            thread,
            chunks,
            next_chunk: 0,
            payload: Vec::new(),
            plain: Vec::new(),
            chunk: None,
            // Grown by the first batch, to what the thread's first chunk holds: a process of
            // many short threads has a cursor for each.
            batch: Vec::new(),
            at: 0,
            batch_offset: 0,
            index: 0,
            extensions: 0,
            expected_sequence: first_sequence,
            last_key: 0,
            summary: ThreadSummary {
                thread,
                ..Default::default()
            },
            any_chunk: false,
            finished: false,
            first_batch: true,
            plan: 0,
            rereading: false,
        }
    }

    /// Gives this cursor's buffers to `to`, emptied: a merge of many short threads reads one
    /// thread after another, and their buffers need not be allocated anew for each.
    fn lend_buffers(&mut self, to: &mut Cursor<'_>) {
        for (from, to) in [
            (&mut self.payload, &mut to.payload),
            (&mut self.plain, &mut to.plain),
        ] {
            std::mem::swap(from, to);
            to.clear();
        }
        std::mem::swap(&mut self.batch, &mut to.batch);
        to.batch.clear();
    }

    #[inline(always)]
    fn head(&self) -> &Event {
        &self.batch[self.at]
    }

    /// Moves past the head; false when the thread has no more events.
    #[inline(always)]
    fn advance(&mut self, ctx: &mut Ctx<'_>) -> bool {
        self.index += 1;
        self.at += 1;
        self.at < self.batch.len() || self.refill(ctx)
    }

    /// Decodes the next batch, moving to the next good chunk as needed; false at the end.
    #[inline(never)]
    fn refill(&mut self, ctx: &mut Ctx<'_>) -> bool {
        self.at = 0;
        loop {
            if self.chunk.is_some() {
                // The batch becomes the events decoded (its slots are reused, not cleared).
                self.decode_batch(ctx);
                if !self.batch.is_empty() {
                    return true;
                }
            } else if !self.load_next_chunk(ctx) {
                self.batch.clear();
                self.summary.events = self.index as u64;
                return false;
            }
        }
    }

    /// Reads, checks and starts the thread's next usable chunk; false when there is none.
    fn load_next_chunk(&mut self, ctx: &mut Ctx<'_>) -> bool {
        for loc in self.chunks.by_ref() {
            let loc = &loc;
            self.next_chunk += 1;
            let rereading = std::mem::take(&mut self.rereading);
            let len = loc.payload_len as usize;
            let compressed = loc.codec() != CODEC_STORED;
            // A block that does not decompress costs its chunk, which still takes its place
            // in the thread's sequence (as in the decoding reader, which finds it later).
            let mut broken = None;
            // The header is read with the payload: the index does not keep its checksum.
            let prefix =
                match ctx
                    .source
                    .bytes_at(loc.offset(), CHUNK_HEADER_LEN + len, &mut self.payload)
                {
                    Ok(bytes) => {
                        let (header, payload) = bytes.split_at(CHUNK_HEADER_LEN);
                        let crc = match read_chunk_header(header) {
                            // The scan found this header, and a 2.x chunk's codec in it (a 1.x
                            // file's byte 5 is no codec).
                            Ok(h)
                                if h.kind == ChunkKind::Events
                                    && h.payload_len == loc.payload_len
                                    && (h.flags == loc.codec() || loc.codec() == CODEC_STORED) =>
                            {
                                h.payload_crc
                            }
                            _ => {
                                ctx.problems.push(changed_while_reading(loc));
                                continue;
                            }
                        };
                        match check_events_payload(loc.offset(), crc, payload) {
                            Ok(prefix) if compressed => {
                                // A decoded length out of bounds: the chunk is not planned at all.
                                if let Err(why) = decoded_len(loc.codec(), payload) {
                                    ctx.problems.push(Problem {
                                        offset: loc.offset(),
                                        kind: ProblemKind::BadCompressedChunk(why),
                                    });
                                    continue;
                                }
                                match decompress_events(loc.codec(), payload, &mut self.plain) {
                                    Ok(body) => {
                                        let n = body.len();
                                        self.plain.truncate(n);
                                    }
                                    Err(why) => {
                                        self.plain.clear();
                                        broken = Some((
                                            why,
                                            decoded_len(loc.codec(), payload).unwrap_or(0),
                                        ));
                                    }
                                }
                                prefix
                            }
                            Ok(prefix) => prefix,
                            Err(_) if rereading => {
                                ctx.problems.push(changed_while_reading(loc));
                                continue;
                            }
                            Err(problem) => {
                                ctx.problems.push(problem);
                                continue;
                            }
                        }
                    }
                    Err(failure) => {
                        // Reported as the payload's read (the scan read the header).
                        let failure = match failure {
                            ReadFailure::Short { got } => ReadFailure::Short {
                                got: got.saturating_sub(CHUNK_HEADER_LEN),
                            },
                            failure => failure,
                        };
                        ctx.read_failed(loc, failure);
                        continue;
                    }
                };
            if prefix.thread != self.thread
                || (rereading && prefix.sequence != self.expected_sequence)
            {
                // The checksum holds, so these bytes were written as they are: the file
                // changed between the scan (or the first read) and this read.
                ctx.problems.push(changed_while_reading(loc));
                continue;
            }
            let body_len = if let Some((_, declared)) = &broken {
                *declared
            } else if compressed {
                self.plain.len()
            } else {
                len - EVENTS_PREFIX_LEN
            };
            if prefix.event_count == 0 && body_len == 0 {
                continue; // an empty chunk takes no part in the sequence
            }
            let sequence = prefix.sequence;
            if self.any_chunk && sequence < self.expected_sequence {
                ctx.problems.push(Problem {
                    offset: loc.offset(),
                    kind: ProblemKind::DuplicateChunk {
                        thread: self.thread,
                        sequence,
                    },
                });
                continue;
            }
            if sequence > self.expected_sequence {
                ctx.problems.push(Problem {
                    offset: loc.offset(),
                    kind: ProblemKind::MissingChunks {
                        thread: self.thread,
                        from: self.expected_sequence,
                        to: sequence,
                    },
                });
            }
            self.expected_sequence = sequence.saturating_add(1);
            if !self.any_chunk {
                self.any_chunk = true;
                self.summary.start_ns = prefix.start_ns;
                if !ctx.tables.threads.contains_key(&self.thread) {
                    ctx.thread_refs.push(Problem {
                        offset: loc.offset(),
                        kind: ProblemKind::Reference(format!(
                            "thread {} has events but no entry in the thread table",
                            self.thread
                        )),
                    });
                }
            }
            if !rereading {
                self.summary.end_ns = prefix.end_ns;
                self.summary.encoded_bytes += body_len as u64;
                self.summary.stored_bytes += (len - EVENTS_PREFIX_LEN) as u64;
                self.summary.compressed_chunks += compressed as u32;
                self.summary.zstd_chunks += (loc.codec() == CODEC_ZSTD) as u32;
            }
            let keys_backwards = (prefix.base_key < self.last_key).then_some(Problem {
                offset: loc.offset(),
                kind: ProblemKind::KeysBackwards {
                    thread: self.thread,
                    previous: self.last_key,
                    next: prefix.base_key,
                },
            });
            if let Some((why, _)) = broken {
                ctx.problems.push(Problem {
                    offset: loc.offset(),
                    kind: ProblemKind::BadCompressedChunk(why),
                });
                ctx.problems.extend(keys_backwards);
                continue;
            }
            self.chunk = Some(Chunk {
                offset: loc.offset(),
                body_offset: loc.payload_offset() + EVENTS_PREFIX_LEN as u64,
                body_len,
                compressed,
                thread: self.thread,
                sequence,
                base_key: prefix.base_key,
                declared: prefix.event_count,
                // Every event takes at least one byte.
                capacity: (prefix.event_count as usize).min(body_len),
                found: 0,
                written: 0,
                first_index: self.index as u64,
                // The stream hands out the blocking-call extensions too (counted apart).
                state: DecoderState::starting_at(prefix.base_key).with_extensions(),
                keys_backwards,
            });
            return true;
        }
        false
    }

    /// The current chunk's event bytes (its payload was read and checked by
    /// `load_next_chunk`).
    fn body<'s>(source: &'s Source, payload: &'s [u8], plain: &'s [u8], c: &Chunk) -> &'s [u8] {
        if c.compressed {
            return &plain[..c.body_len];
        }
        match source {
            Source::Memory(b) => &b[c.body_offset as usize..c.body_offset as usize + c.body_len],
            // The cursor's buffer holds the chunk's header, then its payload.
            Source::File { .. } => {
                let from = CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN;
                &payload[from..from + c.body_len]
            }
        }
    }

    /// Decodes up to `BATCH` events of the current chunk into `batch`, which then holds just
    /// those; ends the chunk when its bytes are done or an event does not decode.
    fn decode_batch(&mut self, ctx: &mut Ctx<'_>) {
        let Some(c) = self.chunk.as_mut() else {
            return;
        };
        let body = Self::body(ctx.source, &self.payload, &self.plain, c);
        let mut dec = Decoder::resume(body, c.state);
        self.batch_offset = c.offset;
        let room = (c.capacity - c.written).min(if self.first_batch { 1 } else { BATCH });
        self.first_batch = false;
        let batch = &mut self.batch;
        let result = if room > 0 {
            // The decoder writes over the batch's slots: only slots it never had are filled
            // first (the batch is cut to the events decoded, and is mostly full).
            batch.resize(room, PLACEHOLDER);
            let kept = dec.decode_to(&mut batch[..]);
            batch.truncate(kept.events);
            // Extension events take slots but are not in the declared count.
            let counted = kept.events - kept.extensions;
            self.extensions += kept.extensions;
            c.found += counted as u64;
            c.written += counted;
            if let Some(key) = kept.last_key {
                self.last_key = key;
            }
            kept.error.map_or(Ok(()), Err)
        } else {
            batch.clear();
            // No room left: what the chunk holds beyond its declared count is counted, not
            // kept; extension events (a blocking call the thread was still in) are kept, a
            // batch at a time.
            let found = &mut c.found;
            let extensions = &mut self.extensions;
            dec.for_each(|ev| {
                if ev.kind.is_extension() {
                    batch.push(ev);
                    *extensions += 1;
                } else {
                    *found += 1;
                }
                batch.len() < BATCH
            })
        };
        c.state = dec.state();
        match result {
            Ok(()) if !dec.is_at_end() => {}
            _ => {
                let c = self.chunk.take().expect("a chunk is being decoded");
                Self::end_chunk(ctx, &self.payload, &self.plain, c, result.err());
            }
        }
    }

    /// The checks made once a chunk is decoded: dangling references, then the bad event or the
    /// count mismatch, then keys going backwards (the decoding reader's order).
    #[cold]
    fn end_chunk(
        ctx: &mut Ctx<'_>,
        payload: &[u8],
        plain: &[u8],
        c: Chunk,
        error: Option<crate::codec::DecodeError>,
    ) {
        let body = Self::body(ctx.source, payload, plain, &c);
        let dec = Decoder::resume(body, c.state);
        // The decoder noted the largest ids; only a chunk naming an id the tables may lack is
        // looked at event by event, in a second pass.
        if !ctx.refs.covers(dec.objects_below(), dec.sites_below()) {
            let mut index = 0u64;
            let mut reported = 0u32;
            let refs = ctx.refs;
            let problems = &mut ctx.problems;
            let _ = Decoder::new(body, c.base_key).for_each(|ev| {
                if !refs.defines(&ev.kind) {
                    let at = c.first_index + index;
                    problems.push(refs.describe(c.offset, c.thread, at, &ev));
                    reported += 1;
                }
                index += 1;
                reported < MAX_REFERENCE_REPORTS
            });
            ctx.references += reported as usize;
        }
        match error {
            Some(e) => ctx.problems.push(Problem {
                // A compressed chunk's event offsets are in its decompressed bytes.
                offset: if c.compressed {
                    c.offset
                } else {
                    c.body_offset + e.offset as u64
                },
                kind: ProblemKind::BadEvent {
                    index: c.found.min(u32::MAX as u64) as u32,
                    what: e.what,
                },
            }),
            None if c.found != c.declared as u64 => ctx.problems.push(Problem {
                offset: c.offset,
                kind: ProblemKind::EventCountMismatch {
                    declared: c.declared,
                    found: c.found.min(u32::MAX as u64) as u32,
                },
            }),
            None => {}
        }
        if let Some(p) = c.keys_backwards {
            ctx.problems.push(p);
        }
        ctx.prune_references();
    }
}

/// The merged stream: an iterator of [`StreamEvent`]s. Problems met on the way are collected;
/// ask for them with [`MergedStream::problems`].
pub struct MergedStream<'a> {
    stream: &'a TraceStream,
    ctx: Ctx<'a>,
    /// The cursors of the threads that are giving events; a finished thread's slot (and its
    /// buffers) goes to the next thread whose turn comes (`free`).
    cursors: Vec<Cursor<'a>>,
    free: Vec<u32>,
    /// Per thread of [`TraceStream::threads`]: where it is, and its event count once ended
    /// (an open cursor keeps its own summary).
    threads: Vec<PackedState>,
    /// The states whose fields do not fit their [`PackedState`], by thread.
    far_states: BTreeMap<u32, u64>,
    /// Per thread of [`TraceStream::threads`], the bytes and times of its summary while it
    /// waits and once it has ended; `None` when the pass asked for event counts only
    /// ([`TraceStream::merged_event_counts`]).
    bytes: Option<Vec<ThreadBytes>>,
    /// Events given by the threads that have ended.
    given_by_finished: u64,
    /// The next event of every unfinished thread but `current`'s and those in `runs`.
    heap: BinaryHeap<Reverse<NextEvent>>,
    /// The first events of the threads that wait for their first turn, in runs of up to
    /// [`PENDING_RUN`] threads (of consecutive plans) each in the merged order: each entry the
    /// varint of its key's step from the one before and the zigzag varint of its thread's
    /// (about 3 bytes a thread, not a heap entry of 12, since a process that created 10^5
    /// short threads has them all waiting from the start). Only the first entry of each run
    /// left, its `admitted`, is in the heap: the run's others come after it. Sorted a run at a
    /// time, so that starting the merge holds one run's entries, not every thread's; each
    /// run's bytes let go once all its threads have had their turn.
    runs: Vec<PendingRun>,
    /// The cursor whose head comes next; `NONE` when every thread is done.
    current: usize,
    /// (key, thread) of the heap's top: the current thread keeps the lead while its next
    /// event comes before it.
    bound: (u64, ThreadId),
    ordering: Option<Box<Checker<'a>>>,
    /// The last run handed out ([`MergedStream::next_run`]) is done with: its thread must be
    /// stepped (refilled, and the lead handed on) before anything else is read.
    run_given: bool,
    /// A thread's join of itself that ended the last run: checked for ordering once the
    /// thread has been stepped, when it is known whether the thread has events after it.
    deferred_check: Option<StreamEvent>,
}

/// Events of one thread that come next in the merged order, in program order: what
/// [`MergedStream::next_run`] gives.
#[derive(Clone, Copy, Debug)]
pub struct EventRun<'a> {
    /// The thread that ran the events.
    pub thread: ThreadId,
    /// Position in the thread of the first event.
    pub first_index: usize,
    /// The events, in program order.
    pub events: &'a [Event],
    /// Byte offset of the header of the chunk that holds the events.
    pub chunk_offset: u64,
}

const NONE: usize = usize::MAX;
/// A closed cursor's buffer larger than this is let go, not handed to the slot's next thread.
const KEPT_BUFFER: usize = 64 << 10;
/// No thread of [`TraceStream::threads`].
const NO_PLAN: u32 = u32::MAX;

/// A thread's next event in the merge's heap: its key, and the thread's index in
/// [`TraceStream::threads`], which are in the order of their ids, so that the entries are in
/// the merged order (key, then thread). 12 bytes, not the 16 of a (key, thread, index) tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct NextEvent {
    key_high: u32,
    key_low: u32,
    plan: u32,
}

impl NextEvent {
    #[inline]
    fn new(key: u64, plan: u32) -> Self {
        NextEvent {
            key_high: (key >> 32) as u32,
            key_low: key as u32,
            plan,
        }
    }

    #[inline]
    fn key(self) -> u64 {
        (u64::from(self.key_high) << 32) | u64::from(self.key_low)
    }
}

/// Threads whose first events are sorted together into one run of [`MergedStream::runs`]:
/// 12 bytes each while sorted (96 KiB), and one entry of the heap per run (13 for 10^5
/// threads). Small in the crate's tests, so that they go through many runs.
const PENDING_RUN: usize = if cfg!(test) { 16 } else { 8192 };

/// One run of [`MergedStream::runs`]: its entries, where its next entry is, and its last
/// entry taken (in the heap; its key and thread the base of the next one's).
#[derive(Clone, Debug)]
struct PendingRun {
    /// Empty once every entry has been taken.
    entries: Box<[u8]>,
    at: usize,
    admitted: NextEvent,
}

/// One thread's place in the merge, and what the merge keeps of it while no cursor is open
/// for it (kept as a [`PackedState`]): the rest of its summary is in [`MergedStream::bytes`],
/// when kept.
#[derive(Clone, Copy, Debug)]
enum ThreadState {
    /// Its first event is in the heap, or in [`MergedStream::runs`], and nothing else of
    /// it is held (no event given yet): its cursor is made again, from `chunks[chunk]` (read
    /// and checked again, its prefix declaring `sequence`), when its turn comes.
    Waiting { chunk: u32, sequence: u32 },
    /// Giving events from `cursors[slot]`.
    Open { slot: u32 },
    /// No more events; `used`: some chunk of it passed its checks.
    Finished { used: bool, events: u64 },
}

/// A [`ThreadState`] in 2 bytes, not the enum's 16 (a process may have created 10^5 threads):
/// which state it is in the top two bits, its fields in the 14 below — a waiting thread's
/// chunk and sequence 7 bits each, an open one's slot, a finished one's event count. A state
/// whose fields do not fit (a thread of 16,383 events or more, a sequence of 127, which a
/// thread of 127 chunks or a window's thread reaches) is in a map of the merge's,
/// [`MergedStream::far_states`], its fields then [`FAR`]: few threads of a process that created
/// 10^5 of them are long, and those few are read a chunk of events at a time.
#[derive(Clone, Copy, Debug)]
struct PackedState(u16);

const WAITING: u16 = 0;
const OPEN: u16 = 1;
const FINISHED_USED: u16 = 2;
const FINISHED_UNUSED: u16 = 3;
const STATE_SHIFT: u32 = 14;
/// The fields of a state kept in the map.
const FAR: u16 = (1 << STATE_SHIFT) - 1;
/// Bits of a waiting thread's chunk, and of its sequence, in a packed state.
const WAITING_BITS: u32 = 7;
/// A waiting thread's chunk and sequence are below this to be packed (and not make `FAR`).
const WAITING_FIELD: u32 = 1 << WAITING_BITS;

impl PackedState {
    /// `state` of thread `plan`, packed; fields too large for it go to `far`.
    fn pack(state: ThreadState, plan: u32, far: &mut BTreeMap<u32, u64>) -> Self {
        let (which, wide) = match state {
            ThreadState::Waiting { chunk, sequence } => {
                if chunk < WAITING_FIELD && sequence < WAITING_FIELD - 1 {
                    let fields = (sequence << WAITING_BITS) | chunk;
                    return PackedState((WAITING << STATE_SHIFT) | fields as u16);
                }
                (WAITING, (u64::from(sequence) << 32) | u64::from(chunk))
            }
            ThreadState::Open { slot } => (OPEN, u64::from(slot)),
            ThreadState::Finished { used, events } => {
                (if used { FINISHED_USED } else { FINISHED_UNUSED }, events)
            }
        };
        let fields = if wide < u64::from(FAR) {
            wide as u16
        } else {
            far.insert(plan, wide);
            FAR
        };
        PackedState((which << STATE_SHIFT) | fields)
    }

    /// The state of thread `plan`, packed with `far`.
    #[inline]
    fn unpack(self, plan: u32, far: &BTreeMap<u32, u64>) -> ThreadState {
        let fields = self.0 & FAR;
        let which = self.0 >> STATE_SHIFT;
        if fields == FAR {
            return Self::unpack_far(which, far.get(&plan).copied().unwrap_or(0));
        }
        let fields = u32::from(fields);
        match which {
            WAITING => ThreadState::Waiting {
                chunk: fields & (WAITING_FIELD - 1),
                sequence: fields >> WAITING_BITS,
            },
            OPEN => ThreadState::Open { slot: fields },
            which => ThreadState::Finished {
                used: which == FINISHED_USED,
                events: u64::from(fields),
            },
        }
    }

    #[cold]
    fn unpack_far(which: u16, wide: u64) -> ThreadState {
        match which {
            WAITING => ThreadState::Waiting {
                chunk: wide as u32,
                sequence: (wide >> 32) as u32,
            },
            OPEN => ThreadState::Open { slot: wide as u32 },
            which => ThreadState::Finished {
                used: which == FINISHED_USED,
                events: wide,
            },
        }
    }
}

impl ThreadState {
    /// Events given, as far as this state knows (an open cursor counts its own).
    fn events(self) -> u64 {
        match self {
            ThreadState::Finished { events, .. } => events,
            ThreadState::Waiting { .. } | ThreadState::Open { .. } => 0,
        }
    }
}

/// The part of a [`ThreadSummary`] that only a pass that reports bytes and times needs.
#[derive(Clone, Copy, Debug, Default)]
struct ThreadBytes {
    encoded_bytes: u64,
    stored_bytes: u64,
    compressed_chunks: u32,
    zstd_chunks: u32,
    start_ns: u64,
    end_ns: u64,
}

impl ThreadBytes {
    fn of(s: &ThreadSummary) -> Self {
        ThreadBytes {
            encoded_bytes: s.encoded_bytes,
            stored_bytes: s.stored_bytes,
            compressed_chunks: s.compressed_chunks,
            zstd_chunks: s.zstd_chunks,
            start_ns: s.start_ns,
            end_ns: s.end_ns,
        }
    }

    fn summary(&self, thread: ThreadId, events: u64) -> ThreadSummary {
        ThreadSummary {
            thread,
            events,
            encoded_bytes: self.encoded_bytes,
            stored_bytes: self.stored_bytes,
            compressed_chunks: self.compressed_chunks,
            zstd_chunks: self.zstd_chunks,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
        }
    }
}

impl<'a> MergedStream<'a> {
    /// Every thread's first event is decoded, since the merge must put them in order; then a
    /// thread whose first chunk has more to give lets its cursor go and waits as its first
    /// event's key in the list of waiting threads and a few words (a process that created
    /// 10^5 short threads over its life has them all from the start), and is read again from
    /// that chunk when its turn comes.
    fn new(stream: &'a TraceStream, mut ctx: Ctx<'a>, keep_bytes: bool) -> Self {
        let mut heap = BinaryHeap::new();
        let mut firsts = Vec::with_capacity(stream.threads.len().min(PENDING_RUN));
        let mut runs = Vec::new();
        let mut cursors = Vec::new();
        let mut threads = Vec::with_capacity(stream.threads.len());
        let mut far_states = BTreeMap::new();
        let mut bytes = keep_bytes.then(|| Vec::with_capacity(stream.threads.len()));
        let mut scratch = Cursor::new(0, ChunkList::default(), 0);
        for ((i, thread), chunks) in stream.threads.iter().enumerate().zip(stream.all_chunks()) {
            let mut c = Cursor::new(thread, chunks, stream.tables.first_sequence(thread));
            c.plan = i as u32;
            scratch.lend_buffers(&mut c);
            let state = if !c.refill(&mut ctx) {
                ThreadState::Finished {
                    used: c.any_chunk,
                    events: c.summary.events,
                }
            } else if let Some(chunk) = &c.chunk {
                // The chunk's checks so far (its prefix, the sequence, the thread table) are
                // not made again when it is read again: they hold for the same bytes.
                firsts.push(NextEvent::new(c.head().key, i as u32));
                if firsts.len() == PENDING_RUN {
                    Self::put_run(&mut firsts, &mut runs);
                }
                ThreadState::Waiting {
                    chunk: (c.next_chunk - 1) as u32,
                    sequence: chunk.sequence,
                }
            } else {
                // Its first chunk ended with its first event (and had its end-of-chunk
                // checks): the cursor is kept rather than the chunk read and checked twice.
                heap.push(Reverse(NextEvent::new(c.head().key, i as u32)));
                cursors.push(c);
                let open = ThreadState::Open {
                    slot: (cursors.len() - 1) as u32,
                };
                threads.push(PackedState::pack(open, i as u32, &mut far_states));
                if let Some(bytes) = &mut bytes {
                    bytes.push(ThreadBytes::default());
                }
                continue;
            };
            c.lend_buffers(&mut scratch);
            threads.push(PackedState::pack(state, i as u32, &mut far_states));
            if let Some(bytes) = &mut bytes {
                bytes.push(ThreadBytes::of(&c.summary));
            }
        }
        Self::put_run(&mut firsts, &mut runs);
        drop(firsts);
        runs.shrink_to_fit();
        let mut m = MergedStream {
            stream,
            ctx,
            cursors,
            free: Vec::new(),
            threads,
            far_states,
            bytes,
            given_by_finished: 0,
            heap,
            runs,
            current: NONE,
            bound: (0, 0),
            ordering: None,
            run_given: false,
            deferred_check: None,
        };
        for run in 0..m.runs.len() {
            m.admit_next(run);
        }
        m.current = m.take_lead();
        m.bound = m.heap_bound();
        m
    }

    /// Where thread `plan` is.
    #[inline]
    fn state(&self, plan: usize) -> ThreadState {
        self.threads[plan].unpack(plan as u32, &self.far_states)
    }

    fn set_state(&mut self, plan: usize, state: ThreadState) {
        // A long thread's state that no longer needs the map (its chunk's was far, its slot
        // is not) leaves no entry there.
        if self.threads[plan].0 & FAR == FAR {
            self.far_states.remove(&(plan as u32));
        }
        self.threads[plan] = PackedState::pack(state, plan as u32, &mut self.far_states);
    }

    /// Sorts the first events of `firsts` into the merged order and writes them to a run of
    /// their own; `firsts` is left empty.
    fn put_run(firsts: &mut Vec<NextEvent>, runs: &mut Vec<PendingRun>) {
        if firsts.is_empty() {
            return;
        }
        firsts.sort_unstable();
        let mut entries = Vec::new();
        let mut before = NextEvent::new(0, NO_PLAN);
        for next in firsts.iter() {
            varint::put(&mut entries, next.key() - before.key());
            let step = i64::from(next.plan) - i64::from(before.plan);
            varint::put(&mut entries, varint::zigzag(step));
            before = *next;
        }
        firsts.clear();
        runs.push(PendingRun {
            entries: entries.into_boxed_slice(),
            at: 0,
            admitted: NextEvent::new(0, NO_PLAN),
        });
    }

    /// Puts the first event of the next waiting thread of run `run` in the heap.
    #[cold]
    #[inline(never)]
    fn admit_next(&mut self, run: usize) {
        let r = &mut self.runs[run];
        if r.at == r.entries.len() {
            r.admitted = NextEvent::new(0, NO_PLAN);
            r.entries = Box::default();
            r.at = 0;
            return;
        }
        // The list was written by `new`: it reads back.
        let mut step = || varint::get(&r.entries, &mut r.at).unwrap_or(0);
        let key = r.admitted.key().wrapping_add(step());
        let plan = i64::from(r.admitted.plan) + varint::unzigzag(step());
        r.admitted = NextEvent::new(key, plan as u32);
        self.heap.push(Reverse(r.admitted));
    }

    /// Pops the heap's top, opening its thread's cursor if it was waiting, and returns the
    /// cursor, or `NONE` when no thread is left. A thread read again whose first event is no
    /// longer what it was (the file changed under the reader, which is reported) goes back to
    /// the heap at its new place.
    fn take_lead(&mut self) -> usize {
        match self.heap.pop() {
            Some(Reverse(next)) => self.lead(next.plan),
            None => NONE,
        }
    }

    /// The cursor of thread `plan`, just taken from the heap's top (see `take_lead`). When it
    /// is waiting (then the entry of a run of `runs` in the heap: a waiting thread enters
    /// the heap only so), the next one of its run goes in (`reopen`): its first event comes
    /// after this one's, and before those of the run's threads still waiting.
    #[inline]
    fn lead(&mut self, mut plan: u32) -> usize {
        loop {
            match self.state(plan as usize) {
                // Its head is the key it had in the heap.
                ThreadState::Open { slot } => return slot as usize,
                ThreadState::Waiting { chunk, sequence } => {
                    if let Some(slot) = self.reopen(plan as usize, chunk as usize, sequence) {
                        let head = NextEvent::new(self.cursors[slot].head().key, plan);
                        match self.heap.peek() {
                            Some(Reverse(next)) if *next < head => {
                                self.heap.push(Reverse(head));
                            }
                            _ => return slot,
                        }
                    }
                }
                ThreadState::Finished { .. } => {}
            }
            match self.heap.pop() {
                Some(Reverse(next)) => plan = next.plan,
                None => return NONE,
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn reopen(&mut self, plan: usize, chunk: usize, sequence: u32) -> Option<usize> {
        // Here, not in `lead`, which the threads' every switch goes through.
        if let Some(run) = self
            .runs
            .iter()
            .position(|r| r.admitted.plan == plan as u32)
        {
            self.admit_next(run);
        }
        let stream = self.stream;
        let thread = stream.threads.get(plan);
        let state = self.state(plan);
        let mut chunks = stream.chunks_of(plan);
        for _ in 0..chunk {
            chunks.next();
        }
        let mut c = Cursor::new(thread, chunks, stream.tables.first_sequence(thread));
        c.plan = plan as u32;
        c.next_chunk = chunk;
        // Its sequence and the thread table were checked, and its bytes counted in the
        // summary, at the first read.
        c.expected_sequence = sequence;
        c.any_chunk = true;
        c.first_batch = false;
        c.rereading = true;
        c.summary = self.summary_of(plan, state);
        let slot = match self.free.pop() {
            Some(slot) => {
                let slot = slot as usize;
                self.cursors[slot].lend_buffers(&mut c);
                self.cursors[slot] = c;
                slot
            }
            None => {
                self.cursors.push(c);
                self.cursors.len() - 1
            }
        };
        self.set_state(plan, ThreadState::Open { slot: slot as u32 });
        let cur = &mut self.cursors[slot];
        if cur.refill(&mut self.ctx) {
            Some(slot)
        } else {
            self.close(slot);
            None
        }
    }

    /// The thread of cursor `slot` has no more events: its summary is kept, its slot freed.
    fn close(&mut self, slot: usize) {
        let cur = &mut self.cursors[slot];
        let given = cur.counted_given();
        cur.finished = true;
        cur.at = 0;
        cur.batch.clear();
        // The slot's next threads get its buffers: a long thread's, sized for its largest
        // chunk, would stay with short threads that never need them.
        for buf in [&mut cur.payload, &mut cur.plain] {
            if buf.capacity() > KEPT_BUFFER {
                *buf = Vec::new();
            }
        }
        self.given_by_finished += given;
        let plan = cur.plan as usize;
        let finished = ThreadState::Finished {
            used: cur.any_chunk,
            events: given,
        };
        if let Some(bytes) = &mut self.bytes {
            bytes[plan] = ThreadBytes::of(&cur.summary);
        }
        self.set_state(plan, finished);
        self.free.push(slot as u32);
    }

    /// The summary of thread `plan`, in `state` (not open): its bytes and times are 0 when
    /// they are not kept.
    fn summary_of(&self, plan: usize, state: ThreadState) -> ThreadSummary {
        let thread = self.stream.threads.get(plan);
        match &self.bytes {
            Some(bytes) => bytes[plan].summary(thread, state.events()),
            None => ThreadSummary {
                thread,
                events: state.events(),
                ..ThreadSummary::default()
            },
        }
    }

    /// The next events of the merged order that come from one thread: as many as come before
    /// any other thread's next event, up to the end of the thread's decoded batch. The same
    /// events, in the same order, as [`Iterator::next`] gives one at a time (the two may be
    /// mixed), without a comparison with the other threads per event: a thread's plain memory
    /// accesses share its key, so in an instrumented trace runs are long.
    pub fn next_run(&mut self) -> Option<EventRun<'_>> {
        self.settle();
        let c = self.current;
        let cur = self.cursors.get_mut(c)?;
        let rest = &cur.batch[cur.at..];
        // Keys never decrease within a thread, so the events that come before the bound are a
        // prefix; the head always does.
        let (bound_key, bound_thread) = self.bound;
        let thread = cur.thread;
        let before = |e: &Event| e.key < bound_key || (e.key == bound_key && thread < bound_thread);
        let n = if rest.last().is_some_and(before) {
            rest.len()
        } else {
            // Galloping from the head: a lock-heavy trace's runs are a few events long, and
            // a search of the whole batch per run cost more than the events it found.
            let mut hi = 1;
            while hi < rest.len() && before(&rest[hi]) {
                hi *= 2;
            }
            // rest[..=hi / 2] come before; rest[hi] (if any) does not.
            let lo = hi / 2 + 1;
            lo + rest[lo..hi.min(rest.len())].partition_point(before)
        };
        let start = cur.at;
        let first_index = cur.index;
        cur.at += n;
        cur.index += n;
        self.run_given = true;
        let chunk_offset = cur.batch_offset;
        if self.ordering.is_some() {
            self.check_run(c, start, n);
        }
        let cur = &self.cursors[c];
        Some(EventRun {
            thread,
            first_index,
            events: &cur.batch[start..start + n],
            chunk_offset,
        })
    }

    /// Steps the thread of the run last given, now that its events are no longer borrowed.
    #[inline]
    fn settle(&mut self) {
        if self.run_given {
            self.run_given = false;
            // Nothing has moved the lead since the run was given.
            self.step(self.current);
            if let Some(e) = self.deferred_check.take() {
                self.check_ordering(&e);
            }
        }
    }

    /// The ordering check of a run's events. The checker looks at a plain access only when the
    /// thread changes (at the run's first event); a join whose thread is its own asks whether
    /// the thread has events after it, which for the last event of a run is known only once
    /// the thread has been stepped.
    #[cold]
    fn check_run(&mut self, c: usize, start: usize, n: usize) {
        let Some(mut check) = self.ordering.take() else {
            return;
        };
        let cur = &self.cursors[c];
        let (thread, offset) = (cur.thread, cur.batch_offset);
        let mut deferred = None;
        for (i, ev) in cur.batch[start..start + n].iter().enumerate() {
            if i > 0 && Checker::ignores_past_thread_switch(&ev.kind) {
                continue;
            }
            if i + 1 == n
                && matches!(ev.kind, crate::event::EventKind::JoinEnd { child, .. } if child == thread)
            {
                deferred = Some(StreamEvent {
                    thread,
                    index: cur.index - n + i,
                    event: *ev,
                    chunk_offset: offset,
                });
                continue;
            }
            // Every other event of the run is followed by more of the thread's events.
            check.observe(thread, ev, offset, |t| t == thread || self.unfinished(t));
        }
        self.deferred_check = deferred;
        self.ordering = Some(check);
    }

    fn heap_bound(&self) -> (u64, ThreadId) {
        self.heap
            .peek()
            .map_or((u64::MAX, ThreadId::MAX), |Reverse(next)| {
                (next.key(), self.stream.threads.get(next.plan as usize))
            })
    }

    /// Also checks the ordering invariant as events go by (`ordering.rs`); its breaks join
    /// [`MergedStream::problems`].
    pub fn with_ordering_check(mut self) -> Self {
        self.ordering = Some(Box::new(Checker::new(&self.stream.tables)));
        self
    }

    /// The trace being read.
    pub fn stream(&self) -> &'a TraceStream {
        self.stream
    }

    /// Every problem found so far, sorted by offset: the scan's and those of the chunks read.
    /// Once the stream is exhausted this is the complete list, the same as
    /// [`crate::Trace::problems`] on the same bytes (plus the ordering breaks when asked for).
    pub fn problems(&self) -> Vec<Problem> {
        let complete = self.current == NONE;
        let given = self.events_given();
        let mut all = self.stream.all_problems(&self.ctx, given, complete);
        if let Some(check) = &self.ordering {
            let mut breaks = check.snapshot(self.stream.file_len);
            if !breaks.is_empty() {
                all.append(&mut breaks);
                all.sort_by_key(|p| p.offset);
            }
        }
        all
    }

    /// What the pass found, in one value: problems, per-thread summaries, events given.
    pub fn outcome(&self) -> MergedOutcome {
        MergedOutcome {
            problems: self.problems(),
            threads: self.thread_summaries().collect(),
            events: self.events_given(),
        }
    }

    /// Events given so far.
    pub fn events_given(&self) -> u64 {
        self.given_by_finished
            + self
                .cursors
                .iter()
                .filter(|c| !c.finished)
                .map(Cursor::counted_given)
                .sum::<u64>()
    }

    /// What the pass learnt of each thread with a usable chunk so far, by thread id (only the
    /// thread and its events, the rest 0, from [`TraceStream::merged_event_counts`]).
    pub fn thread_summaries(&self) -> impl Iterator<Item = ThreadSummary> + '_ {
        self.threads.iter().enumerate().filter_map(|(plan, t)| {
            match t.unpack(plan as u32, &self.far_states) {
                t @ (ThreadState::Waiting { .. } | ThreadState::Finished { used: true, .. }) => {
                    Some(self.summary_of(plan, t))
                }
                ThreadState::Finished { used: false, .. } => None,
                ThreadState::Open { slot } => {
                    let c = &self.cursors[slot as usize];
                    c.any_chunk.then(|| {
                        let summary = ThreadSummary {
                            events: c.counted_given(),
                            ..c.summary
                        };
                        match self.bytes {
                            Some(_) => summary,
                            None => ThreadSummary {
                                thread: summary.thread,
                                events: summary.events,
                                ..ThreadSummary::default()
                            },
                        }
                    })
                }
            }
        })
    }

    /// Whether `thread` has events still to come.
    pub fn unfinished(&self, thread: ThreadId) -> bool {
        self.stream
            .threads
            .find(thread)
            .is_some_and(|i| !matches!(self.state(i), ThreadState::Finished { .. }))
    }

    /// The current thread's next event is not in its batch or does not come first: refill the
    /// batch, and give the lead to the thread whose event comes first.
    #[inline(never)]
    fn step(&mut self, c: usize) {
        let cur = &mut self.cursors[c];
        if cur.at < cur.batch.len() || cur.refill(&mut self.ctx) {
            let head = NextEvent::new(cur.head().key, cur.plan);
            let mut next = None;
            if let Some(mut top) = self.heap.peek_mut() {
                let Reverse(other) = *top;
                if other < head {
                    *top = Reverse(head);
                    next = Some(other.plan);
                }
            }
            if let Some(other) = next {
                self.current = self.lead(other);
            }
        } else {
            self.close(c);
            self.current = self.take_lead();
        }
        self.bound = self.heap_bound();
    }

    #[cold]
    fn check_ordering(&mut self, e: &StreamEvent) {
        let Some(mut check) = self.ordering.take() else {
            return;
        };
        check.observe(e.thread, &e.event, e.chunk_offset, |t| self.unfinished(t));
        self.ordering = Some(check);
    }
}

impl Iterator for MergedStream<'_> {
    type Item = StreamEvent;

    #[inline]
    fn next(&mut self) -> Option<StreamEvent> {
        if self.run_given {
            self.settle();
        }
        let c = self.current;
        let cur = self.cursors.get_mut(c)?;
        let out = StreamEvent {
            thread: cur.thread,
            index: cur.index,
            event: cur.batch[cur.at],
            chunk_offset: cur.batch_offset,
        };
        cur.index += 1;
        cur.at += 1;
        // The usual case: the thread's next event is in its batch and still comes first.
        let keeps_lead = cur
            .batch
            .get(cur.at)
            .is_some_and(|e| (e.key, cur.thread) < self.bound);
        if !keeps_lead {
            self.step(c);
        }
        if self.ordering.is_some() {
            self.check_ordering(&out);
        }
        Some(out)
    }
}

/// What a merged pass found: [`MergedStream::outcome`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergedOutcome {
    /// As [`MergedStream::problems`].
    pub problems: Vec<Problem>,
    /// As [`MergedStream::thread_summaries`].
    pub threads: Vec<ThreadSummary>,
    /// Events given.
    pub events: u64,
}

/// The events of one thread, in program order: [`TraceStream::thread_events`].
pub struct ThreadStream<'a> {
    stream: &'a TraceStream,
    ctx: Ctx<'a>,
    cursor: Cursor<'a>,
    started: bool,
}

impl ThreadStream<'_> {
    /// The problems of the thread's chunks found so far, sorted by offset (the scan's are
    /// [`TraceStream::scan_problems`]).
    pub fn problems(&self) -> Vec<Problem> {
        let mut all = self.ctx.problems.clone();
        all.extend(self.ctx.thread_refs.iter().cloned());
        all.sort_by_key(|p| p.offset);
        limit_reference_reports(&mut all);
        keep_first_shrink(&mut all);
        all
    }

    /// The trace being read.
    pub fn stream(&self) -> &TraceStream {
        self.stream
    }
}

impl Iterator for ThreadStream<'_> {
    type Item = Event;

    #[inline]
    fn next(&mut self) -> Option<Event> {
        let more = if self.started {
            self.cursor.advance(&mut self.ctx)
        } else {
            self.started = true;
            self.cursor.refill(&mut self.ctx)
        };
        if more {
            Some(*self.cursor.head())
        } else {
            // Stay at the end: a later call must not move past it again.
            self.cursor.batch.clear();
            self.cursor.at = 0;
            self.cursor.chunks = ChunkList::default();
            None
        }
    }
}

impl Tables {
    /// Reads `records` into the tables as the reader reads table records after every chunk
    /// it read before (what a symbolisation pass appends to a file): a later symbol or data
    /// variable record replaces an earlier one of its frame or address, a string, data type,
    /// thread, object, site or module of an id already defined is a problem (its offset counted
    /// from the first record's) and left out. The records go through the file's encoding, so
    /// the tables are those a reader of the file with the records appended would have.
    pub fn add_records(&mut self, records: &[TableRecord]) -> Vec<Problem> {
        let mut payload = Vec::new();
        let mut w = crate::writer::TableWriter::new();
        for r in records {
            w.push(r);
        }
        w.flush_into(|chunk| payload.extend_from_slice(&chunk[crate::frame::CHUNK_HEADER_LEN..]));
        let mut problems = Vec::new();
        read_table_records(&payload, 0, true, self, &mut problems);
        self.threads.finish();
        self.access_counts.finish();
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::TraceBuilder;

    /// The stream of `bytes`, and the merged order of the reader that decodes the whole trace.
    fn stream_and_whole_order(name: &str, bytes: Vec<u8>) -> (TraceStream, Vec<StreamEvent>) {
        let whole = Trace::from_bytes(name, bytes.clone()).unwrap();
        let expected = whole.merged_owned().collect();
        (TraceStream::from_bytes(name, bytes).unwrap(), expected)
    }

    /// Records added to a stream's tables read as they would appended to its file: a static
    /// variable then names an access, a later variable record of the same address replaces the
    /// earlier one, a second string of an id is a problem reported at the file's end.
    #[test]
    fn records_added_to_the_tables_read_as_appended_ones() {
        use crate::tables::{DataVariable, ModuleInfo, StringEntry};
        let bytes = TraceBuilder::new("t").finish();
        let len = bytes.len() as u64;
        let mut stream = TraceStream::from_bytes("t", bytes).unwrap();
        let string = |id, text: &str| {
            TableRecord::String(StringEntry {
                id,
                text: text.into(),
            })
        };
        let variable = |name, size| {
            TableRecord::DataVariable(DataVariable {
                module: 7,
                offset: 0x10,
                size,
                name,
                file: None,
                line: 3,
                ty: None,
            })
        };
        stream.add_table_records(&[
            string(900, "/bin/prog"),
            TableRecord::Module(ModuleInfo {
                id: 7,
                path: 900,
                build_id: Vec::new(),
                base: 0x1000,
                size: 0x100,
            }),
            string(901, "counter"),
            variable(901, 4),
        ]);
        let named = |s: &TraceStream| s.tables().data_symbol(0x1012, 1).map(|d| d.name);
        assert_eq!(named(&stream).as_deref(), Some("counter+0x2"));
        let problems = stream.scan_problems().len();
        stream.add_table_records(&[string(901, "other"), string(902, "total"), variable(902, 8)]);
        assert_eq!(named(&stream).as_deref(), Some("total+0x2"));
        assert_eq!(stream.tables().string(901), Some("counter"));
        let new = &stream.scan_problems()[problems..];
        assert_eq!(new.len(), 1, "{new:?}");
        assert!(new[0].offset >= len);
    }

    /// Threads that start in the reverse order of their ids, and two at the same time: the
    /// list of waiting threads gives their first events in the merged order all the same.
    #[test]
    fn waiting_threads_start_in_the_merged_order_not_by_id() {
        let mut b = TraceBuilder::new("reversed");
        let main = b.main_thread();
        let site = b.site("main", "reversed.c", 3);
        let m = b.mutex("m");
        let workers: Vec<_> = (0..40).map(|_| b.spawn(main, site, "w")).collect();
        for pair in workers.rchunks(2) {
            for &w in pair {
                b.lock(w, m, site);
                b.write(w, 0x1000, 8, site);
                b.unlock(w, m, site);
            }
            for &w in pair {
                b.read(w, 0x2000, 8, site);
                b.exit(w);
            }
        }
        for &w in &workers {
            b.join(main, w, site);
        }
        b.exit(main);
        let (stream, expected) = stream_and_whole_order("reversed", b.finish());
        let mut merged = stream.merged();
        let got: Vec<_> = merged.by_ref().collect();
        assert_eq!(got, expected);
        assert!(merged.problems().is_empty(), "{:?}", merged.problems());
        let counted: Vec<_> = stream.merged_event_counts().collect();
        assert_eq!(counted, expected);
    }

    /// A thread per request, one after another: the merge must see every thread's first event
    /// from the start, but holds a cursor only for the threads giving events, so that its
    /// memory follows the threads that run at once, not those created over the program's life.
    #[test]
    fn threads_that_wait_for_their_turn_hold_no_cursor() {
        let mut b = TraceBuilder::new("requests");
        let main = b.main_thread();
        let site = b.site("main", "requests.c", 3);
        let m = b.mutex("m");
        let requests = 500;
        for _ in 0..requests {
            let w = b.spawn(main, site, "w");
            b.lock(w, m, site);
            b.unlock(w, m, site);
            b.exit(w);
            b.join(main, w, site);
        }
        b.exit(main);
        let (stream, expected) = stream_and_whole_order("requests", b.finish());
        let mut merged = stream.merged();
        // The waiting threads are a few bytes each in a list, not entries of the heap: one
        // of them per run sorted apart (many runs here, since the tests' runs are short).
        assert!(merged.runs.len() >= requests / PENDING_RUN);
        assert!(
            merged.heap.len() <= 2 + merged.runs.len(),
            "{} in the heap",
            merged.heap.len()
        );
        let pending: usize = merged.runs.iter().map(|r| r.entries.len()).sum();
        assert!(pending <= 3 * requests, "{pending}");
        let mut got = Vec::new();
        let mut most_open = 0;
        let mut runs_let_go = Vec::new();
        while let Some(e) = merged.next() {
            got.push(e);
            let open = merged.cursors.iter().filter(|c| !c.finished).count();
            most_open = most_open.max(open);
            runs_let_go.push(merged.runs.iter().filter(|r| r.entries.is_empty()).count());
        }
        assert_eq!(got, expected);
        // A run's entries are let go once its threads have all had their turn, one run after
        // another as the requests were created, not when the merge ends.
        assert_eq!(runs_let_go.last(), Some(&merged.runs.len()));
        let halfway = runs_let_go[runs_let_go.len() / 2];
        assert!(
            halfway > 0 && halfway < merged.runs.len(),
            "{halfway} of {} runs let go halfway",
            merged.runs.len()
        );
        assert!(merged.problems().is_empty(), "{:?}", merged.problems());
        assert_eq!(merged.events_given(), expected.len() as u64);
        assert_eq!(merged.thread_summaries().count(), requests + 1);
        // main and the request it waits for (plus one whose turn is being handed on).
        assert!(most_open <= 3, "{most_open} cursors open at once");
        assert!(
            merged.cursors.len() <= 3,
            "{} cursors",
            merged.cursors.len()
        );
        // A pass that asks for event counts only gets the same events and counts, and keeps
        // 2 bytes for each thread not open.
        let mut counting = stream.merged_event_counts();
        let again: Vec<_> = counting.by_ref().collect();
        assert_eq!(again, expected);
        assert!(counting.bytes.is_none());
        let full: Vec<_> = merged.thread_summaries().collect();
        let counts: Vec<_> = counting.thread_summaries().collect();
        assert_eq!(counts.len(), full.len());
        for (c, f) in counts.iter().zip(&full) {
            assert_eq!((c.thread, c.events), (f.thread, f.events));
            assert_eq!(c.encoded_bytes, 0);
        }
        assert!(full.iter().all(|f| f.encoded_bytes > 0));
        assert_eq!(std::mem::size_of::<PackedState>(), 2);
        let mut far = BTreeMap::new();
        for (plan, state) in [
            ThreadState::Waiting {
                chunk: 7,
                sequence: u32::MAX,
            },
            ThreadState::Waiting {
                chunk: u32::MAX,
                sequence: 0,
            },
            ThreadState::Waiting {
                chunk: WAITING_FIELD - 1,
                sequence: WAITING_FIELD - 2,
            },
            ThreadState::Waiting {
                chunk: 0,
                sequence: WAITING_FIELD - 1,
            },
            ThreadState::Open { slot: 3 },
            ThreadState::Open { slot: u32::MAX },
            ThreadState::Finished {
                used: true,
                events: (5 << 32) | 9,
            },
            ThreadState::Finished {
                used: true,
                events: u64::from(FAR) - 1,
            },
            ThreadState::Finished {
                used: false,
                events: u64::from(FAR),
            },
            ThreadState::Finished {
                used: false,
                events: 0,
            },
        ]
        .into_iter()
        .enumerate()
        {
            let packed = PackedState::pack(state, plan as u32, &mut far);
            assert_eq!(
                format!("{:?}", packed.unpack(plan as u32, &far)),
                format!("{state:?}")
            );
        }
        assert_eq!(far.len(), 6);
        assert_eq!(std::mem::size_of::<ChunkLoc>(), 12);
        let far = ChunkLoc::new((1 << 56) - 21, CODEC_ZSTD, 7);
        assert_eq!((far.offset(), far.codec()), ((1 << 56) - 21, CODEC_ZSTD));
        // A thread's chunks in the index: a few bytes each, read back in order, wherever
        // they are.
        let locs = [
            ChunkLoc::new(1 << 40, CODEC_STORED, 65_536),
            ChunkLoc::new(100, CODEC_ZSTD, 9),
            // A codec this reader does not know is kept, to be reported as it is.
            ChunkLoc::new(300, 200, 17),
            ChunkLoc::new(400, CODEC_ESCAPE, 0),
            ChunkLoc::new((1 << 56) - 21, CODEC_ZSTD, u32::MAX),
            ChunkLoc::new(
                (1 << 40) + 65_536 + CHUNK_HEADER_LEN as u64,
                CODEC_STORED,
                0,
            ),
        ];
        let mut index = Vec::new();
        let mut end = None;
        for (i, loc) in locs.iter().enumerate() {
            end = Some(ChunkList::put(&mut index, end, loc, i + 1 == locs.len()));
        }
        let list = ChunkList::at(&index, 0, None);
        let again: Vec<_> = list
            .map(|c| (c.offset(), c.codec(), c.payload_len))
            .collect();
        let expected: Vec<_> = locs
            .iter()
            .map(|c| (c.offset(), c.codec(), c.payload_len))
            .collect();
        assert_eq!(again, expected);
        // The index of the 500 requests: a thread's plan and chunks about 10 bytes.
        assert_eq!(stream.threads.len(), requests + 1);
        assert!(stream.threads.listed.is_empty());
        assert!(
            stream.index.len() + 4 * stream.group_from.len() <= 8 * (requests + 1),
            "{} bytes",
            stream.index.len()
        );
        assert_eq!(std::mem::size_of::<NextEvent>(), 12);
        assert!(NextEvent::new(1 << 32, 0) > NextEvent::new((1 << 32) - 1, 7));
        assert!(NextEvent::new(5, 2) > NextEvent::new(5, 1));
        assert_eq!(NextEvent::new(u64::MAX - 3, 0).key(), u64::MAX - 3);
    }
}
