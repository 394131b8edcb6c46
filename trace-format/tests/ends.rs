//! Version 1.4's additions: the end state of each thread that had not exited (table record
//! 10) and why recording stopped early (record 11), read by both readers; a file of an older
//! version reads with neither.

use foresight_trace::event::{Event, EventKind, LockMode};
use foresight_trace::tables::{
    ClassKey, EndReason, Header, ObjectInfo, ObjectKind, Ordering, RecordingStopped, SiteInfo,
    StopCause, ThreadEnd, ThreadEndState, ThreadInfo, Trailer,
};
use foresight_trace::{ProblemKind, TableRecord, Trace, TraceStream, TraceWriter};

fn header() -> Header {
    Header {
        producer: "ends".into(),
        pid: 7,
        parent_pid: 1,
        command: vec![],
        start_unix_ns: 1,
        ordering: Ordering::Logical,
        pointer_width: 8,
        stack_depth: 1,
    }
}

/// Two threads: 0 exits, 1 is left blocked in a lock request; then `records`.
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
    w.table(&TableRecord::Object(ObjectInfo {
        id: 0,
        kind: ObjectKind::Mutex,
        address: 0x1000,
        generation: 0,
        class: ClassKey::FirstUse(0),
    }))
    .unwrap();
    w.table(&TableRecord::Site(SiteInfo {
        id: 0,
        frames: vec![],
        first_caller: None,
    }))
    .unwrap();
    let ev = |key, kind| Event { key, kind };
    w.thread_events(
        0,
        &[ev(1, EventKind::ThreadStart), ev(2, EventKind::ThreadExit)],
        4096,
    )
    .unwrap();
    w.thread_events(
        1,
        &[
            ev(1, EventKind::ThreadStart),
            ev(
                1,
                EventKind::LockRequest {
                    lock: 0,
                    mode: LockMode::Exclusive,
                    site: 0,
                },
            ),
        ],
        4096,
    )
    .unwrap();
    for r in records {
        w.table(r).unwrap();
    }
    w.finish(Trailer {
        end_unix_ns: 2,
        reason: EndReason::Signal { signal: 15 },
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    })
    .unwrap()
}

fn end(thread: u32, state: ThreadEndState) -> TableRecord {
    TableRecord::ThreadEnd(ThreadEnd { thread, state })
}

fn stopped(cause: StopCause) -> TableRecord {
    TableRecord::RecordingStopped(RecordingStopped { unix_ns: 5, cause })
}

#[test]
fn end_states_and_the_stop_cause_read_in_both_readers() {
    let bytes = file(&[
        end(1, ThreadEndState::Blocked),
        stopped(StopCause::HangTimeout { ms: 3000 }),
    ]);
    let t = Trace::from_bytes("ends", bytes.clone()).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(t.tables.thread_ends.len(), 1);
    assert_eq!(t.tables.thread_ends[&1], ThreadEndState::Blocked);
    assert_eq!(
        t.tables.recording_stopped.map(|r| r.cause),
        Some(StopCause::HangTimeout { ms: 3000 })
    );
    let s = TraceStream::from_bytes("ends", bytes).unwrap();
    assert_eq!(s.tables().thread_ends, t.tables.thread_ends);
    assert_eq!(s.tables().recording_stopped, t.tables.recording_stopped);
}

#[test]
fn a_second_end_state_for_a_thread_is_reported_and_the_first_kept() {
    let bytes = file(&[
        end(1, ThreadEndState::BlockedWithTimeout),
        end(1, ThreadEndState::Running),
        stopped(StopCause::WriteFailed { errno: 28 }),
        stopped(StopCause::FileSizeLimit { limit: 4096 }),
    ]);
    let t = Trace::from_bytes("twice", bytes).unwrap();
    assert_eq!(t.tables.thread_ends[&1], ThreadEndState::BlockedWithTimeout);
    assert_eq!(
        t.tables.recording_stopped.map(|r| r.cause),
        Some(StopCause::WriteFailed { errno: 28 })
    );
    assert!(
        matches!(
            t.problems.as_slice(),
            [p] if matches!(p.kind, ProblemKind::DuplicateRecord { what: "thread end", id: 1 })
        ),
        "{:?}",
        t.problems
    );
}

#[test]
fn a_version_1_1_file_has_no_end_states() {
    let mut bytes = file(&[]);
    // The minor version (bytes 10–11) is outside the header's checksum.
    bytes[10..12].copy_from_slice(&1u16.to_le_bytes());
    let t = Trace::from_bytes("v1.1", bytes).unwrap();
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(t.version, (1, 1));
    assert!(t.tables.thread_ends.is_empty());
    assert!(t.tables.recording_stopped.is_none());
}

#[test]
fn a_damaged_end_state_is_reported_with_its_offset_and_the_rest_reads() {
    let mut bytes = file(&[
        end(1, ThreadEndState::Blocked),
        end(0, ThreadEndState::Running),
    ]);
    // Record 10 for thread 1: tag 10, length 2, thread 1, state 1. An unknown state (7) does
    // not decode.
    let pos = bytes
        .windows(4)
        .position(|w| w == [10, 2, 1, 1])
        .expect("the end state of thread 1");
    bytes[pos + 3] = 7;
    let bytes = fix_checksums(bytes);
    let t = Trace::from_bytes("damaged", bytes).unwrap();
    assert_eq!(t.tables.thread_ends.len(), 1, "{:?}", t.tables.thread_ends);
    assert_eq!(t.tables.thread_ends[&0], ThreadEndState::Running);
    assert!(
        t.problems.iter().any(|p| p.offset == pos as u64
            && matches!(p.kind, ProblemKind::BadTableRecord { tag: 10, .. })),
        "{:?}",
        t.problems
    );
}

/// Recomputes the checksums of every chunk (after a test changed a payload byte).
fn fix_checksums(mut bytes: Vec<u8>) -> Vec<u8> {
    let header_len = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut at = 20 + header_len;
    while at + 20 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let payload = crc32fast::hash(&bytes[at + 20..at + 20 + len]);
        bytes[at + 12..at + 16].copy_from_slice(&payload.to_le_bytes());
        let head = crc32fast::hash(&bytes[at..at + 16]);
        bytes[at + 16..at + 20].copy_from_slice(&head.to_le_bytes());
        at += 20 + len;
    }
    bytes
}
