//! Version 1.1's additions: access counts (table record 7) add up per thread, a 1.0 file (no
//! counts) still reads, and the writer's fast path for plain accesses writes exactly what the
//! general encoder writes.

use foresight_trace::event::{Event, EventKind};
use foresight_trace::tables::{AccessCounts, EndReason, Header, Ordering, ThreadInfo, Trailer};
use foresight_trace::{ChunkWriter, StreamOptions, TableRecord, Trace, TraceStream, TraceWriter};

fn header() -> Header {
    Header {
        producer: "accesses".into(),
        pid: 7,
        parent_pid: 1,
        command: vec![],
        start_unix_ns: 1,
        ordering: Ordering::Logical,
        pointer_width: 8,
        stack_depth: 1,
    }
}

fn trailer() -> Trailer {
    Trailer {
        end_unix_ns: 2,
        reason: EndReason::Exit { status: 0 },
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    }
}

fn file(records: &[TableRecord]) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    for id in 0..2 {
        w.table(&TableRecord::Thread(ThreadInfo {
            id,
            os_tid: 10 + id,
            parent: None,
            name: None,
        }))
        .unwrap();
    }
    for r in records {
        w.table(r).unwrap();
    }
    let read = |addr| Event {
        key: 1,
        kind: EventKind::Read {
            addr,
            size: 4,
            site: 0,
        },
    };
    w.thread_events(0, &[read(0x1000), read(0x1004)], 4096)
        .unwrap();
    w.finish(trailer()).unwrap()
}

fn counts(thread: u32, executed: u64, recorded: u64) -> TableRecord {
    TableRecord::AccessCounts(AccessCounts {
        thread,
        executed,
        recorded,
    })
}

#[test]
fn access_counts_of_a_thread_add_up() {
    let bytes = file(&[counts(0, 10, 2), counts(1, 5, 5), counts(0, 7, 1)]);
    let t = Trace::from_bytes("counts", bytes).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(t.version, (1, foresight_trace::frame::VERSION_MINOR));
    let c0 = t.tables.access_counts.get(0).unwrap();
    assert_eq!((c0.executed, c0.recorded), (17, 3));
    let c1 = t.tables.access_counts.get(1).unwrap();
    assert_eq!((c1.executed, c1.recorded), (5, 5));
}

#[test]
fn a_version_1_0_file_reads_with_no_access_counts() {
    let mut bytes = file(&[]);
    // The minor version (bytes 10–11) is outside the header's checksum.
    bytes[10..12].copy_from_slice(&0u16.to_le_bytes());
    let t = Trace::from_bytes("v1.0", bytes).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(t.version, (1, 0));
    assert!(t.tables.access_counts.is_empty());
    assert_eq!(t.event_count(), 2);
}

#[test]
fn a_record_with_an_unknown_tag_is_skipped_as_a_1_0_reader_skips_tag_7() {
    // What a 1.0 reader does with tag 7 is what this reader does with tag 240 (a tag no
    // version defines): skip it by its length and read on.
    let mut bytes = file(&[counts(0, 1, 1)]);
    let pos = bytes
        .windows(4)
        .position(|w| w == [7, 3, 0, 1])
        .expect("the counts record: tag 7, length 3, thread 0, executed 1");
    bytes[pos] = 240;
    // The table chunk's payload checksum must follow.
    let t = Trace::from_bytes("unknown-tag", fix_checksums(bytes)).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert!(t.tables.access_counts.is_empty());
    assert_eq!(t.tables.threads.len(), 2);
}

#[test]
fn a_stream_that_keeps_no_access_counts_still_reports_a_bad_counts_record() {
    let mut bytes = file(&[counts(1, 5, 5), counts(0, 1, 1)]);
    let pos = bytes
        .windows(4)
        .position(|w| w == [7, 3, 0, 1])
        .expect("the counts record: tag 7, length 3, thread 0, executed 1");
    // A thread id whose varint does not end within the record.
    bytes[pos + 2..pos + 5].copy_from_slice(&[0xff, 0xff, 0xff]);
    let bytes = fix_checksums(bytes);
    let kept = TraceStream::from_bytes("counts", bytes.clone()).unwrap();
    let options = StreamOptions {
        access_counts: false,
    };
    let not_kept = TraceStream::from_bytes_with("counts", bytes, options).unwrap();
    let c1 = kept.tables().access_counts.get(1).unwrap();
    assert_eq!((c1.executed, c1.recorded), (5, 5));
    assert_eq!(kept.tables().access_counts.len(), 1);
    assert!(not_kept.tables().access_counts.is_empty());
    // The same problems, the bad record among them, at the same offset; the rest of the
    // tables and the chunks the same.
    let problems = |s: &TraceStream| {
        s.scan_problems()
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
    };
    assert!(
        problems(&kept)
            .iter()
            .any(|p| p.contains("table record (tag 7)")),
        "{:?}",
        problems(&kept)
    );
    assert_eq!(problems(&kept), problems(&not_kept));
    assert_eq!(kept.tables().threads, not_kept.tables().threads);
    assert_eq!(
        (kept.chunk_count(), kept.table_chunk_count()),
        (not_kept.chunk_count(), not_kept.table_chunk_count())
    );
    assert_eq!(
        kept.threads().collect::<Vec<_>>(),
        not_kept.threads().collect::<Vec<_>>()
    );
    assert_eq!(kept.declared_events(), not_kept.declared_events());
}

/// Recomputes the checksums of every chunk (after a test changed a payload byte).
fn fix_checksums(mut bytes: Vec<u8>) -> Vec<u8> {
    let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut pos = 20 + header_len;
    while pos + 20 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let payload = crc32fast::hash(&bytes[pos + 20..pos + 20 + len]);
        bytes[pos + 12..pos + 16].copy_from_slice(&payload.to_le_bytes());
        let head = crc32fast::hash(&bytes[pos..pos + 16]);
        bytes[pos + 16..pos + 20].copy_from_slice(&head.to_le_bytes());
        pos += 20 + len;
    }
    bytes
}

/// The chunk bytes of `events` pushed one way or the other.
fn chunk(events: &[(bool, u32, u64, u32)], fast: bool) -> Vec<u8> {
    let mut w = ChunkWriter::new(0, 1 << 16);
    w.set_start_ns(1);
    for &(write, size, addr, site) in events {
        let pushed = fast && w.try_push_access(write, size, addr, site, 0);
        if !pushed {
            let kind = if write {
                EventKind::Write { addr, size, site }
            } else {
                EventKind::Read { addr, size, site }
            };
            w.push(&Event { key: 0, kind }).unwrap();
        }
    }
    let mut out = Vec::new();
    w.flush_into(2, |b| out.extend_from_slice(b));
    out
}

#[test]
fn the_access_fast_path_writes_what_the_encoder_writes() {
    let mut events = Vec::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..2000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = [1, 2, 4, 8, 16, 3, 24, 4096][(x % 8) as usize];
        // Near and far addresses, small and large site deltas, both directions.
        let addr = if i % 3 == 0 {
            x
        } else {
            0x7f00_0000_0000 + (x % 4096)
        };
        let site = (x >> 20) as u32 % if i % 5 == 0 { u32::MAX } else { 64 };
        events.push((x & 1 == 1, size, addr, site));
    }
    assert_eq!(chunk(&events, true), chunk(&events, false));
}

#[test]
fn the_access_fast_path_declines_what_it_cannot_encode() {
    let mut w = ChunkWriter::new(0, 1 << 16);
    assert!(
        !w.try_push_access(false, 4, 0x1000, 1, 0),
        "a chunk not started"
    );
    w.set_start_ns(1);
    assert!(w.try_push_access(false, 4, 0x1000, 1, 0));
    assert!(!w.try_push_access(false, 4, 0x1000, 1, 5), "another key");
    assert!(
        !w.try_push_access(true, 12, 0x1000, 1, 0),
        "a size without a class"
    );
    assert_eq!(w.pending_events(), 1);
}
