//! Any bytes as the payload of one table chunk, framed with good checksums inside a valid
//! file, followed by a small events chunk that names thread, object and site 0: every input
//! reaches the table-record decoder (strings, threads, objects, sites, modules, symbols,
//! access counts, end states, stop causes), and the tables it builds are used.
#![no_main]

use foresight_trace::event::{Event, EventKind, LockMode};
use foresight_trace::frame::{write_chunk_header, ChunkKind, CHUNK_HEADER_LEN};
use foresight_trace::tables::{Header, Ordering};
use foresight_trace::writer::file_prefix;
use foresight_trace::{ChunkWriter, Trace, TraceStream};
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
    write_chunk_header(&mut header, ChunkKind::Table, data);
    file.extend_from_slice(&header);
    file.extend_from_slice(data);
    let mut w = ChunkWriter::new(0, 4096);
    for kind in [
        EventKind::ThreadStart,
        EventKind::LockRequest {
            lock: 0,
            mode: LockMode::Exclusive,
            site: 0,
        },
    ] {
        let _ = w.push(&Event { key: 1, kind });
    }
    w.flush_into(1, |bytes| file.extend_from_slice(bytes));
    let len = file.len() as u64;
    if let Ok(trace) = Trace::from_bytes("fuzz", file.clone()) {
        for p in &trace.problems {
            assert!(p.offset <= len, "problem past the end: {p:?}");
        }
        let t = &trace.tables;
        for &s in t.sites.keys() {
            let _ = t.describe_site(s);
        }
        for &o in t.objects.keys() {
            let _ = t.describe_object(o);
        }
        for id in t.threads.keys() {
            let _ = t.thread_name(id);
        }
    }
    if let Ok(stream) = TraceStream::from_bytes("fuzz", file) {
        let mut merged = stream.merged();
        for _ in merged.by_ref() {}
        for p in merged.problems() {
            assert!(p.offset <= len, "problem past the end: {p:?}");
        }
    }
});
