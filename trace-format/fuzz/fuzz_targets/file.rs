//! Any bytes as a whole trace file, read by the decoding reader: `Trace::from_bytes` (the
//! scan, the tables, every chunk decoded in parallel), the ordering check and the merged
//! order. No input may panic; an error or a problem names an offset inside the input.
#![no_main]

use foresight_trace::{ordering, Trace};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    if let Ok(trace) = Trace::from_bytes("fuzz", data.to_vec()) {
        for p in &trace.problems {
            assert!(p.offset <= len, "problem past the end: {p:?}");
        }
        for p in ordering::check(&trace) {
            assert!(p.offset <= len, "ordering problem past the end: {p:?}");
        }
        let mut n = 0u64;
        for e in trace.merged() {
            n += 1;
            let _ = e.event.kind.name();
        }
        assert_eq!(n, trace.event_count());
    }
});
