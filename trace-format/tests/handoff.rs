//! Version 1.12's addition: hand-offs through pipes, socketpairs and eventfds as extension
//! events (`0x67`, `0x68`, FORMAT.md §6.6.1) with key deltas of their own. A stream reader hands
//! them out at their keys, counted apart; a reader that does not ask for them skips them and
//! still applies their key deltas; a body it cannot read is skipped.

use foresight_trace::builder::TraceBuilder;
use foresight_trace::codec::{tag, Decoder, DecoderState};
use foresight_trace::event::{ChannelKind, Event, EventKind};
use foresight_trace::{ChunkWriter, Trace, TraceStream};

fn write(channel: u32, amount: u64, site: u32) -> EventKind {
    EventKind::HandoffWrite {
        channel,
        kind: ChannelKind::Pipe,
        fd: 4,
        amount,
        site,
    }
}

fn read(channel: u32, amount: u64, site: u32) -> EventKind {
    EventKind::HandoffRead {
        channel,
        kind: ChannelKind::Pipe,
        fd: 3,
        amount,
        site,
    }
}

fn trace() -> (Vec<u8>, u32) {
    let mut b = TraceBuilder::new("handoff");
    let main = b.main_thread();
    let s = b.site("main", "p.c", 10);
    let worker = b.spawn(main, s, "worker");
    b.event(main, write(1, 300, s));
    b.event(worker, read(1, 200, s));
    b.event(worker, read(1, 100, s));
    (b.finish(), s)
}

#[test]
fn a_stream_gives_the_hand_offs_at_their_keys_and_counts_them_apart() {
    let (bytes, s) = trace();
    let t = Trace::from_bytes("handoff.trace", bytes.clone()).expect("the trace opens");
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let counted = t.trailer.expect("a trailer").events;
    // The whole-trace reader skips them.
    assert!(t
        .threads
        .iter()
        .flat_map(|t| &t.events)
        .all(|e| !e.kind.is_extension()));
    let stream = TraceStream::from_bytes("handoff.trace", bytes).expect("the trace opens");
    let mut merged = stream.merged();
    let mut got = Vec::new();
    for ev in merged.by_ref() {
        if ev.event.kind.is_extension() {
            got.push((ev.event.key, ev.event.kind));
        }
    }
    assert!(merged.problems().is_empty(), "{:?}", merged.problems());
    assert_eq!(merged.events_given(), counted);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0].1, write(1, 300, s));
    assert_eq!(got[1].1, read(1, 200, s));
    assert_eq!(got[2].1, read(1, 100, s));
    // Synchronising: fresh keys, the write's before the reads'.
    assert!(got[0].0 < got[1].0 && got[1].0 < got[2].0, "{got:?}");
}

#[test]
fn an_unknown_kind_or_a_short_body_is_skipped_and_its_key_delta_kept() {
    let mut w = ChunkWriter::new(0, 1 << 12);
    // A kind of a later version, then a body too short for its site.
    w.push_extension(tag::HANDOFF_WRITE, 2, &[9, 1, 4, 1, 0])
        .unwrap();
    w.push_extension(tag::HANDOFF_READ, 3, &[0, 1, 3]).unwrap();
    w.push(&Event {
        key: 3,
        kind: EventKind::ThreadStart,
    })
    .unwrap();
    // Fields a later version appends are skipped with the rest of the body.
    w.push_extension(tag::HANDOFF_READ, 5, &[3, 7, 5, 8, 2, 42])
        .unwrap();
    let mut body = Vec::new();
    w.flush_into(0, |b| body.extend_from_slice(b));
    let events = &body
        [foresight_trace::frame::CHUNK_HEADER_LEN + foresight_trace::frame::EVENTS_PREFIX_LEN..];
    let mut dec = Decoder::resume(events, DecoderState::starting_at(0).with_extensions());
    let mut got = Vec::new();
    dec.for_each(|e| {
        got.push((e.key, e.kind));
        true
    })
    .unwrap();
    assert_eq!(
        got,
        [
            (3, EventKind::ThreadStart),
            (
                5,
                EventKind::HandoffRead {
                    channel: 7,
                    kind: ChannelKind::Eventfd,
                    fd: 5,
                    amount: 8,
                    site: 2
                }
            )
        ]
    );
}
