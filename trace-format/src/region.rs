//! Region markers (FORMAT.md §6.6): extension events that mark where a code region of a thread
//! begins and ends, such as the `begin` and `end` of RAPID's STD text format (an atomic block,
//! a transaction). Every reader of this crate skips extension events, and the analyses have no
//! use for regions; this module writes them and reads them back, so that a trace converted
//! from STD converts back without losing them.
//!
//! Reading them is a pass of its own over each thread's chunks ([`RegionMarkers`]), in memory
//! bounded like [`crate::TraceStream`]'s: one chunk per thread, and the markers of that chunk.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use crate::codec::tag::{LOCK_IMMEDIATE, LOCK_IMMEDIATE_SHARED};
use crate::codec::{Decoder, EncodeError, EXTENSION_TAGS, KEY_FLAG};
use crate::error::TraceError;
use crate::event::{SiteId, ThreadId};
use crate::frame::{ChunkKind, EVENTS_PREFIX_LEN};
use crate::reader::check_events_payload;
use crate::scan::scan;
use crate::source::Source;
use crate::varint;
use crate::writer::ChunkWriter;

/// Extension tag of a region-begin marker.
pub(crate) const REGION_BEGIN: u8 = 0x61;
/// Extension tag of a region-end marker.
pub(crate) const REGION_END: u8 = 0x62;

/// Which end of a region a marker is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegionKind {
    /// `begin`.
    Begin,
    /// `end`.
    End,
}

/// One marker, where its thread's events put it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionMarker {
    /// Begin or end.
    pub kind: RegionKind,
    /// Its key: the merged order puts it among the events as if it were one (FORMAT.md §6.3).
    pub key: u64,
    /// Where the program marked it.
    pub site: SiteId,
    /// How many events of its thread come before it: it sits just before the thread's event of
    /// this index (`StreamEvent::index`).
    pub position: u64,
}

/// Appends a marker of `kind` at `site` to a thread's chunk, with key `key`.
pub fn push_region(
    w: &mut ChunkWriter,
    kind: RegionKind,
    key: u64,
    site: SiteId,
) -> Result<(), EncodeError> {
    let mut body = Vec::with_capacity(varint::MAX_LEN);
    varint::put(&mut body, site as u64);
    let tag = match kind {
        RegionKind::Begin => REGION_BEGIN,
        RegionKind::End => REGION_END,
    };
    w.push_extension(tag, key, &body)
}

/// Where one events chunk is.
#[derive(Clone, Copy, Debug)]
struct ChunkAt {
    sequence: u32,
    offset: u64,
    payload_offset: u64,
    payload_len: u32,
    payload_crc: u32,
}

/// One thread's chunks and what has been read of them.
struct ThreadMarkers {
    chunks: Vec<ChunkAt>,
    next_chunk: usize,
    /// Events of the thread in the chunks read so far.
    events: u64,
    /// Markers read but not taken yet, in program order.
    pending: VecDeque<RegionMarker>,
}

/// The region markers of a trace, thread by thread, in program order. Chunks are read as
/// [`crate::TraceStream`] reads them: a chunk whose checksum or prefix is bad is left out, and
/// a chunk stops at an event that does not decode, so that positions count the same events
/// the stream gives.
pub struct RegionMarkers {
    path: PathBuf,
    source: Source,
    threads: BTreeMap<ThreadId, ThreadMarkers>,
    buf: Vec<u8>,
}

impl RegionMarkers {
    /// Locates the event chunks of the trace at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref().to_path_buf();
        let source = Source::open(&path)?;
        Self::build(path, source)
    }

    /// The same for a trace in memory.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self, TraceError> {
        Self::build(name.into(), Source::Memory(bytes))
    }

    fn build(path: PathBuf, source: Source) -> Result<Self, TraceError> {
        let s = scan(&path, &source, crate::scan::Want::Prefixes, true)?;
        let mut threads: BTreeMap<ThreadId, ThreadMarkers> = BTreeMap::new();
        for (c, prefix) in s.chunks.iter().zip(&s.prefixes) {
            if c.kind != ChunkKind::Events {
                continue;
            }
            if let Some(prefix) = prefix {
                threads
                    .entry(prefix.thread)
                    .or_insert_with(|| ThreadMarkers {
                        chunks: Vec::new(),
                        next_chunk: 0,
                        events: 0,
                        pending: VecDeque::new(),
                    })
                    .chunks
                    .push(ChunkAt {
                        sequence: prefix.sequence,
                        offset: c.offset,
                        payload_offset: c.payload_offset,
                        payload_len: c.payload_len,
                        payload_crc: c.payload_crc,
                    });
            }
        }
        for t in threads.values_mut() {
            t.chunks.sort_by_key(|c| (c.sequence, c.offset));
        }
        Ok(Self {
            path,
            source,
            threads,
            buf: Vec::new(),
        })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The threads that have event chunks.
    pub fn threads(&self) -> impl Iterator<Item = ThreadId> + '_ {
        self.threads.keys().copied()
    }

    /// The next marker of `thread` not taken yet, reading its chunks as far as needed.
    pub fn peek(&mut self, thread: ThreadId) -> Option<RegionMarker> {
        let t = self.threads.get_mut(&thread)?;
        while t.pending.is_empty() && t.next_chunk < t.chunks.len() {
            let c = t.chunks[t.next_chunk];
            // A second copy of a sequence number is left out, as the stream leaves it out.
            let duplicate = t.next_chunk > 0 && t.chunks[t.next_chunk - 1].sequence == c.sequence;
            t.next_chunk += 1;
            if !duplicate {
                read_chunk(&self.source, &c, &mut self.buf, t);
            }
        }
        t.pending.front().copied()
    }

    /// Takes the marker [`Self::peek`] gave.
    pub fn take(&mut self, thread: ThreadId) -> Option<RegionMarker> {
        self.peek(thread)?;
        self.threads.get_mut(&thread)?.pending.pop_front()
    }
}

/// Decodes one chunk of `t`, noting its markers with their positions and counting its events.
fn read_chunk(source: &Source, c: &ChunkAt, buf: &mut Vec<u8>, t: &mut ThreadMarkers) {
    let Ok(payload) = source.bytes_at(c.payload_offset, c.payload_len as usize, buf) else {
        return;
    };
    let Ok(prefix) = check_events_payload(c.offset, c.payload_crc, payload) else {
        return;
    };
    let body = &payload[EVENTS_PREFIX_LEN..];
    let mut dec = Decoder::new(body, prefix.base_key);
    // The key of the last event or marker read: a marker's key delta is relative to it.
    let mut key = prefix.base_key;
    while let Some(&raw) = body.get(dec.position()) {
        let at = dec.position();
        let tag = raw & !KEY_FLAG;
        if EXTENSION_TAGS.contains(&tag) {
            let Ok(true) = dec.skip_extension() else {
                return;
            };
            if let Some(m) = marker_at(body, at, key, t.events) {
                key = m.key;
                t.pending.push_back(m);
            } else if raw & KEY_FLAG != 0 {
                // Another extension event: only its key delta matters here.
                let mut p = at + 1;
                match varint::get(body, &mut p) {
                    Ok(d) => key = key.saturating_add(d),
                    Err(_) => return,
                }
            }
            continue;
        }
        // A lock-immediate decodes to two events, the second handed out without reading
        // bytes: take both before looking at the bytes again.
        let pair = matches!(tag, LOCK_IMMEDIATE | LOCK_IMMEDIATE_SHARED);
        for _ in 0..if pair { 2 } else { 1 } {
            match dec.next_event() {
                Ok(Some(ev)) => {
                    t.events += 1;
                    key = ev.key;
                }
                Ok(None) | Err(_) => return,
            }
        }
    }
}

/// The marker whose extension event starts at `at` (already checked to be well formed by the
/// decoder), if its tag is a region tag and its body names a site; `key_before` is the key
/// before its own delta.
fn marker_at(body: &[u8], at: usize, key_before: u64, position: u64) -> Option<RegionMarker> {
    let raw = body[at];
    let kind = match raw & !KEY_FLAG {
        REGION_BEGIN => RegionKind::Begin,
        REGION_END => RegionKind::End,
        _ => return None,
    };
    let mut pos = at + 1;
    let key = if raw & KEY_FLAG != 0 {
        key_before.checked_add(varint::get(body, &mut pos).ok()?)?
    } else {
        key_before
    };
    let len = varint::get(body, &mut pos).ok()? as usize;
    let content = body.get(pos..pos.checked_add(len)?)?;
    let mut p = 0;
    let site = u32::try_from(varint::get(content, &mut p).ok()?).ok()?;
    Some(RegionMarker {
        kind,
        key,
        site,
        position,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, EventKind, LockMode};
    use crate::tables::{
        ClassKey, EndReason, Header, ObjectInfo, ObjectKind, Ordering, SiteInfo, TableRecord,
        ThreadInfo, Trailer,
    };
    use crate::writer::TraceWriter;

    fn header() -> Header {
        Header {
            producer: "test".into(),
            pid: 1,
            parent_pid: 0,
            command: vec![],
            start_unix_ns: 0,
            ordering: Ordering::GlobalSequence,
            pointer_width: 8,
            stack_depth: 1,
        }
    }

    #[test]
    fn markers_read_back_with_their_positions_and_readers_skip_them() {
        let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
        w.table(&TableRecord::Thread(ThreadInfo {
            id: 0,
            os_tid: 1,
            parent: None,
            name: None,
        }))
        .unwrap();
        w.table(&TableRecord::Object(ObjectInfo {
            id: 1,
            kind: ObjectKind::Mutex,
            address: 0x100,
            generation: 0,
            class: ClassKey::FirstUse(0),
        }))
        .unwrap();
        for id in 0..200 {
            w.table(&TableRecord::Site(SiteInfo {
                id,
                frames: vec![],
                first_caller: None,
            }))
            .unwrap();
        }
        w.flush_tables().unwrap();
        // Tiny chunks: markers fall into several chunks, one into a chunk of its own.
        let mut c = ChunkWriter::new(0, 64);
        let mut want = Vec::new();
        let mut key = 1;
        let mut events = 0u64;
        c.push(&Event {
            key,
            kind: EventKind::ThreadStart,
        })
        .unwrap();
        events += 1;
        for i in 0..40u32 {
            key += 1;
            push_region(&mut c, RegionKind::Begin, key, i).unwrap();
            want.push(RegionMarker {
                kind: RegionKind::Begin,
                key,
                site: i,
                position: events,
            });
            if i % 3 == 0 {
                // A lock-immediate is two events.
                key += 1;
                c.push_lock_immediate(1, LockMode::Exclusive, i, key)
                    .unwrap();
                events += 2;
            } else {
                key += 1;
                c.push(&Event {
                    key,
                    kind: EventKind::Write {
                        addr: 0x1000 + 8 * i as u64,
                        size: 8,
                        site: i,
                    },
                })
                .unwrap();
                events += 1;
            }
            // Same key as the event before: no key delta.
            push_region(&mut c, RegionKind::End, key, i + 100).unwrap();
            want.push(RegionMarker {
                kind: RegionKind::End,
                key,
                site: i + 100,
                position: events,
            });
            if c.is_full() {
                w.write_chunk(&mut c).unwrap();
            }
        }
        key += 1;
        push_region(&mut c, RegionKind::End, key, 7).unwrap();
        want.push(RegionMarker {
            kind: RegionKind::End,
            key,
            site: 7,
            position: events,
        });
        // A chunk of one marker and no event is written too.
        w.write_chunk(&mut c).unwrap();
        let bytes = w
            .finish(Trailer {
                end_unix_ns: 0,
                reason: EndReason::Synthetic,
                event_chunks: 0,
                events: 0,
                events_lost: 0,
            })
            .unwrap();

        let mut m = RegionMarkers::from_bytes("t", bytes.clone()).unwrap();
        let mut got = Vec::new();
        while let Some(x) = m.take(0) {
            got.push(x);
        }
        assert_eq!(got, want);
        assert_eq!(m.peek(1), None);

        // Every reader skips them and counts the same events.
        let trace = crate::Trace::from_bytes("t", bytes.clone()).unwrap();
        assert!(trace.problems.is_empty(), "{:?}", trace.problems);
        assert_eq!(trace.event_count(), events);
        let stream = crate::TraceStream::from_bytes("t", bytes).unwrap();
        let mut merged = stream.merged();
        assert_eq!(merged.by_ref().count() as u64, events);
        assert!(merged.problems().is_empty(), "{:?}", merged.problems());
    }
}
