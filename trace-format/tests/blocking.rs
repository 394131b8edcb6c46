//! Version 1.10's addition: blocking calls as extension events (`0x63`, `0x64`, FORMAT.md
//! §6.6.1). A stream reader hands them out among the thread's events, counted apart from the
//! chunk's event count; a reader that does not ask for them (the whole-trace reader, as any
//! older reader) skips them; a body it cannot read is skipped too.

use foresight_trace::builder::TraceBuilder;
use foresight_trace::codec::{tag, Decoder};
use foresight_trace::event::{BlockingCall, Event, EventKind};
use foresight_trace::{ChunkWriter, Trace, TraceStream};

fn trace() -> Vec<u8> {
    let mut b = TraceBuilder::new("blocking");
    let main = b.main_thread();
    let m = b.mutex("queue_lock");
    let s = b.site("main", "q.c", 10);
    b.lock(main, m, s);
    b.event(
        main,
        EventKind::BlockingBegin {
            call: BlockingCall::Recv,
            site: s,
            timeout_ns: Some(5_000_000),
        },
    );
    b.event(
        main,
        EventKind::BlockingEnd {
            call: BlockingCall::Recv,
            duration_ns: 1234,
        },
    );
    b.event(
        main,
        EventKind::BlockingBegin {
            call: BlockingCall::Sleep,
            site: s,
            timeout_ns: None,
        },
    );
    b.unlock(main, m, s);
    b.finish()
}

/// The events the trailer counts.
fn counted(bytes: &[u8]) -> u64 {
    let t = Trace::from_bytes("blocking.trace", bytes.to_vec()).expect("the trace opens");
    t.trailer.expect("a trailer").events
}

#[test]
fn a_stream_gives_the_blocking_calls_and_counts_them_apart() {
    let bytes = trace();
    let counted = counted(&bytes);
    let stream = TraceStream::from_bytes("blocking.trace", bytes).expect("the trace opens");
    let mut merged = stream.merged();
    let mut kinds = Vec::new();
    for ev in merged.by_ref() {
        kinds.push(ev.event.kind);
    }
    assert!(merged.problems().is_empty(), "{:?}", merged.problems());
    assert_eq!(merged.events_given(), counted);
    let blocking: Vec<_> = kinds.iter().filter(|k| k.is_extension()).collect();
    assert_eq!(
        blocking,
        [
            &EventKind::BlockingBegin {
                call: BlockingCall::Recv,
                site: 0,
                timeout_ns: Some(5_000_000)
            },
            &EventKind::BlockingEnd {
                call: BlockingCall::Recv,
                duration_ns: 1234
            },
            &EventKind::BlockingBegin {
                call: BlockingCall::Sleep,
                site: 0,
                timeout_ns: None
            },
        ]
    );
    // In the thread's order: after the acquisition, before the release.
    let acquired = kinds
        .iter()
        .position(|k| matches!(k, EventKind::LockAcquired { .. }))
        .unwrap();
    let begin = kinds.iter().position(EventKind::is_extension).unwrap();
    let release = kinds
        .iter()
        .position(|k| matches!(k, EventKind::LockRelease { .. }))
        .unwrap();
    assert!(acquired < begin && begin < release, "{kinds:?}");
}

#[test]
fn a_reader_that_does_not_ask_for_them_skips_them() {
    let bytes = trace();
    let counted = counted(&bytes) as usize;
    let t = Trace::from_bytes("blocking.trace", bytes).expect("the trace opens");
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let events: Vec<&Event> = t.threads.iter().flat_map(|t| &t.events).collect();
    assert_eq!(events.len(), counted);
    assert!(events.iter().all(|e| !e.kind.is_extension()));
}

#[test]
fn an_unknown_call_or_a_short_body_is_skipped() {
    let mut w = ChunkWriter::new(0, 1 << 12);
    // A call code of a later version, then a body too short for its site.
    w.push_extension(tag::BLOCKING_BEGIN, 0, &[200, 1]).unwrap();
    w.push_extension(tag::BLOCKING_BEGIN, 0, &[0]).unwrap();
    w.push(&Event {
        key: 1,
        kind: EventKind::ThreadStart,
    })
    .unwrap();
    w.push_extension(tag::BLOCKING_END, 1, &[3, 7, 99]).unwrap();
    let mut body = Vec::new();
    w.flush_into(0, |b| body.extend_from_slice(b));
    let events = &body
        [foresight_trace::frame::CHUNK_HEADER_LEN + foresight_trace::frame::EVENTS_PREFIX_LEN..];
    let mut dec = Decoder::resume(
        events,
        foresight_trace::codec::DecoderState::starting_at(0).with_extensions(),
    );
    let mut got = Vec::new();
    dec.for_each(|e| {
        got.push(e.kind);
        true
    })
    .unwrap();
    assert_eq!(
        got,
        [
            EventKind::ThreadStart,
            // Fields appended by a later version are skipped with the rest of the body.
            EventKind::BlockingEnd {
                call: BlockingCall::Send,
                duration_ns: 7
            }
        ]
    );
}
