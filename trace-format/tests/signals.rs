//! Version 1.11's addition: signal context as extension events (`0x65` signal-handler, `0x66`
//! signal-mask, FORMAT.md §6.6.1). A stream reader hands them out in the thread's order,
//! counted apart; the whole-trace reader skips them; a phase it does not know is skipped.

use foresight_trace::builder::TraceBuilder;
use foresight_trace::codec::{tag, Decoder, DecoderState};
use foresight_trace::event::{Event, EventKind};
use foresight_trace::{ChunkWriter, Trace, TraceStream};

fn trace() -> Vec<u8> {
    let mut b = TraceBuilder::new("signals");
    let main = b.main_thread();
    let m = b.mutex("log_lock");
    let s = b.site("main", "s.c", 10);
    b.event(
        main,
        EventKind::SignalMask {
            blocked: 1 << (SIGUSR1 - 1),
        },
    );
    b.lock(main, m, s);
    b.unlock(main, m, s);
    b.event(main, EventKind::SignalMask { blocked: 0 });
    b.event(
        main,
        EventKind::SignalEnter {
            signal: SIGUSR1 as u8,
        },
    );
    b.lock(main, m, s);
    b.unlock(main, m, s);
    b.event(
        main,
        EventKind::SignalExit {
            signal: SIGUSR1 as u8,
        },
    );
    b.finish()
}

const SIGUSR1: u32 = 10;

#[test]
fn a_stream_gives_the_signal_context_in_the_threads_order() {
    let bytes = trace();
    let t = Trace::from_bytes("signals.trace", bytes.clone()).expect("the trace opens");
    let counted = t.trailer.expect("a trailer").events;
    // The whole-trace reader skips them.
    assert!(t
        .threads
        .iter()
        .flat_map(|t| &t.events)
        .all(|e| !e.kind.is_extension()));
    let stream = TraceStream::from_bytes("signals.trace", bytes).expect("the trace opens");
    let mut merged = stream.merged();
    let kinds: Vec<EventKind> = merged.by_ref().map(|e| e.event.kind).collect();
    assert!(merged.problems().is_empty(), "{:?}", merged.problems());
    assert_eq!(merged.events_given(), counted);
    let names: Vec<&str> = kinds
        .iter()
        .filter(|k| !matches!(k, EventKind::ThreadStart | EventKind::ThreadExit))
        .map(|k| k.name())
        .collect();
    assert_eq!(
        names,
        [
            "signal-mask",
            "lock-request",
            "lock-acquired",
            "lock-release",
            "signal-mask",
            "signal-enter",
            "lock-request",
            "lock-acquired",
            "lock-release",
            "signal-exit"
        ],
        "{kinds:?}"
    );
    assert!(kinds.contains(&EventKind::SignalMask { blocked: 1 << 9 }));
    assert!(kinds.contains(&EventKind::SignalEnter {
        signal: SIGUSR1 as u8
    }));
    assert!(kinds.contains(&EventKind::SignalExit {
        signal: SIGUSR1 as u8
    }));
}

#[test]
fn an_unknown_phase_or_a_short_body_is_skipped() {
    let mut w = ChunkWriter::new(0, 1 << 12);
    w.push_extension(tag::SIGNAL_HANDLER, 0, &[7, 10]).unwrap();
    w.push_extension(tag::SIGNAL_HANDLER, 0, &[0]).unwrap();
    w.push_extension(tag::SIGNAL_MASK, 0, &[]).unwrap();
    w.push(&Event {
        key: 1,
        kind: EventKind::ThreadStart,
    })
    .unwrap();
    // A field a later version appends is skipped with the rest of the body.
    w.push_extension(tag::SIGNAL_HANDLER, 1, &[1, 12, 99])
        .unwrap();
    let mut body = Vec::new();
    w.flush_into(0, |b| body.extend_from_slice(b));
    let events = &body
        [foresight_trace::frame::CHUNK_HEADER_LEN + foresight_trace::frame::EVENTS_PREFIX_LEN..];
    let mut dec = Decoder::resume(events, DecoderState::starting_at(0).with_extensions());
    let mut got = Vec::new();
    dec.for_each(|e| {
        got.push(e.kind);
        true
    })
    .unwrap();
    assert_eq!(
        got,
        [EventKind::ThreadStart, EventKind::SignalExit { signal: 12 }]
    );
}
