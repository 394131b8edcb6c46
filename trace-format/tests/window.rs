//! Version 1.6's additions: a flight-recorder window (table record 12, per thread: where its
//! kept chunks start and what was dropped) and the lock-order edges seen before it (record 13),
//! read by both readers; a window's first chunk is not reported as missing chunks.

use foresight_trace::event::{Event, EventKind, LockMode};
use foresight_trace::tables::{
    ClassKey, EarlierLockOrder, EndReason, Header, ObjectInfo, ObjectKind, Ordering,
    RecordingWindow, SiteInfo, ThreadInfo, Trailer,
};
use foresight_trace::writer::ChunkWriter;
use foresight_trace::{ProblemKind, TableRecord, Trace, TraceStream, TraceWriter};

fn header() -> Header {
    Header {
        producer: "window".into(),
        pid: 7,
        parent_pid: 1,
        command: vec![],
        start_unix_ns: 1,
        ordering: Ordering::Logical,
        pointer_width: 8,
        stack_depth: 1,
    }
}

/// One thread whose first chunk is dropped (as the flight recorder drops it), then `records`.
fn file(records: &[TableRecord]) -> Vec<u8> {
    file_ending(records, true)
}

/// `file`, with a trailer or without one (a snapshot, or a trace cut short).
fn file_ending(records: &[TableRecord], trailer: bool) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    w.table(&TableRecord::Thread(ThreadInfo {
        id: 0,
        os_tid: 10,
        parent: None,
        name: None,
    }))
    .unwrap();
    for id in 0..2 {
        w.table(&TableRecord::Object(ObjectInfo {
            id,
            kind: ObjectKind::Mutex,
            address: 0x1000 + 64 * id as u64,
            generation: 0,
            class: ClassKey::FirstUse(0),
        }))
        .unwrap();
    }
    w.table(&TableRecord::Site(SiteInfo {
        id: 0,
        frames: vec![],
        first_caller: None,
    }))
    .unwrap();
    let mut c = ChunkWriter::new(0, 4096);
    let lock = |lock| EventKind::LockRequest {
        lock,
        mode: LockMode::Exclusive,
        site: 0,
    };
    c.push(&Event {
        key: 1,
        kind: EventKind::ThreadStart,
    })
    .unwrap();
    // The dropped chunk.
    c.flush_into(0, |_| ());
    c.push(&Event {
        key: 2,
        kind: lock(1),
    })
    .unwrap();
    w.write_chunk(&mut c).unwrap();
    for r in records {
        w.table(r).unwrap();
    }
    if !trailer {
        return w.abandon().unwrap();
    }
    w.finish(Trailer {
        end_unix_ns: 2,
        reason: EndReason::Exit { status: 0 },
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    })
    .unwrap()
}

fn window() -> TableRecord {
    TableRecord::RecordingWindow(RecordingWindow {
        thread: 0,
        first_sequence: 1,
        events_dropped: 1,
        dropped_until_ns: 5,
        keep_last: 1 << 20,
        snapshot_signal: 0,
    })
}

fn earlier() -> TableRecord {
    TableRecord::EarlierLockOrder(EarlierLockOrder {
        held: 0,
        requested: 1,
        count: 3,
        thread: 0,
        held_site: 0,
        site: 0,
    })
}

#[test]
fn a_window_reads_without_missing_chunks_in_both_readers() {
    let bytes = file(&[window(), earlier()]);
    let t = Trace::from_bytes("window", bytes.clone()).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert!(t.tables.is_window());
    assert_eq!(t.tables.window[&0].events_dropped, 1);
    assert_eq!(t.tables.earlier_lock_order.len(), 1);
    assert_eq!(t.tables.earlier_lock_order[0].count, 3);
    assert_eq!(t.thread(0).map(|e| e.events.len()), Some(1));
    let s = TraceStream::from_bytes("window", bytes).unwrap();
    assert_eq!(s.tables().window, t.tables.window);
    assert_eq!(s.tables().earlier_lock_order, t.tables.earlier_lock_order);
    let mut merged = s.merged();
    let mut n = 0;
    for _ in merged.by_ref() {
        n += 1;
    }
    assert_eq!(n, 1);
    let problems = merged.problems();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn without_the_window_record_the_dropped_chunk_is_missing() {
    let t = Trace::from_bytes("cut", file(&[])).unwrap();
    assert!(!t.tables.is_window());
    assert!(
        t.problems.iter().any(|p| matches!(
            p.kind,
            ProblemKind::MissingChunks {
                thread: 0,
                from: 0,
                to: 1
            }
        )),
        "{:?}",
        t.problems
    );
}

/// Version 1.8: a window written as a snapshot (`snapshot_signal`), which has no trailer by
/// design: both readers read the field, and neither reports the trace as cut short; the same
/// file without the field is cut short.
#[test]
fn a_snapshot_has_no_trailer_and_is_not_cut_short() {
    let snap = TableRecord::RecordingWindow(RecordingWindow {
        thread: 0,
        first_sequence: 1,
        events_dropped: 1,
        dropped_until_ns: 5,
        keep_last: 1 << 20,
        snapshot_signal: 12,
    });
    let bytes = file_ending(&[snap, earlier()], false);
    let t = Trace::from_bytes("snap", bytes.clone()).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert!(t.trailer.is_none());
    assert_eq!(t.tables.snapshot_signal(), Some(12));
    let s = TraceStream::from_bytes("snap", bytes).unwrap();
    assert_eq!(s.tables().snapshot_signal(), Some(12));
    let mut merged = s.merged();
    assert_eq!(merged.by_ref().count(), 1);
    let problems = merged.problems();
    assert!(problems.is_empty(), "{problems:?}");

    let cut = Trace::from_bytes("cut", file_ending(&[window(), earlier()], false)).unwrap();
    assert_eq!(cut.tables.snapshot_signal(), None);
    assert!(
        cut.problems
            .iter()
            .any(|p| matches!(p.kind, ProblemKind::NoTrailer)),
        "{:?}",
        cut.problems
    );
}
