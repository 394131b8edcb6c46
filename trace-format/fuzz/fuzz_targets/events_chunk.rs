//! Any bytes as the payload of one events chunk (prefix and encoded events), framed with good
//! checksums inside a valid file, so that every input reaches the event decoder of both
//! readers (a payload with a bad checksum stops at the chunk header).
#![no_main]

use foresight_trace::frame::{write_chunk_header, ChunkKind, CHUNK_HEADER_LEN};
use foresight_trace::tables::{Header, Ordering};
use foresight_trace::writer::file_prefix;
use foresight_trace::{Trace, TraceStream};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut file = file_prefix(&Header {
        producer: "fuzz".into(),
        pid: 1,
        parent_pid: 0,
        command: vec![],
        start_unix_ns: 0,
        ordering: Ordering::Logical,
        pointer_width: 8,
        stack_depth: 1,
    });
    let mut header = [0u8; CHUNK_HEADER_LEN];
    write_chunk_header(&mut header, ChunkKind::Events, data);
    file.extend_from_slice(&header);
    file.extend_from_slice(data);
    let len = file.len() as u64;
    if let Ok(trace) = Trace::from_bytes("fuzz", file.clone()) {
        for p in &trace.problems {
            assert!(p.offset <= len, "problem past the end: {p:?}");
        }
        let _ = foresight_trace::ordering::check(&trace);
    }
    if let Ok(stream) = TraceStream::from_bytes("fuzz", file) {
        let mut merged = stream.merged().with_ordering_check();
        for _ in merged.by_ref() {}
        for p in merged.problems() {
            assert!(p.offset <= len, "problem past the end: {p:?}");
        }
    }
});
