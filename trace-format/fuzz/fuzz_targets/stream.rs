//! Any bytes as a whole trace file, read by the streaming reader: `TraceStream::from_bytes`,
//! the merged order with the ordering check, then each thread on its own. No input may
//! panic; a problem names an offset inside the input.
#![no_main]

use foresight_trace::TraceStream;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    let Ok(stream) = TraceStream::from_bytes("fuzz", data.to_vec()) else {
        return;
    };
    let mut merged = stream.merged().with_ordering_check();
    for e in merged.by_ref() {
        assert!(e.chunk_offset < len);
    }
    for p in merged.problems() {
        assert!(p.offset <= len, "problem past the end: {p:?}");
    }
    let _ = merged.outcome();
    let threads: Vec<_> = stream.threads().collect();
    for t in threads {
        let mut events = stream.thread_events(t);
        for _ in events.by_ref() {}
        for p in events.problems() {
            assert!(p.offset <= len, "problem past the end: {p:?}");
        }
    }
});
