//! The fuzz targets' properties (`fuzz/`), as property tests that run with the test suite:
//! any payload of an events chunk or of a table chunk, framed with good checksums inside a
//! valid file (so that it reaches the decoders instead of stopping at a checksum), never
//! makes either reader panic, and every problem names an offset inside the file. The seeds
//! of the fuzz corpus read without a panic too.

use foresight_trace::event::{Event, EventKind, LockMode};
use foresight_trace::frame::{write_chunk_header, ChunkKind, CHUNK_HEADER_LEN};
use foresight_trace::tables::{Header, Ordering};
use foresight_trace::writer::file_prefix;
use foresight_trace::{ChunkWriter, Trace, TraceStream};
use proptest::prelude::*;

fn framed(kind: ChunkKind, payload: &[u8]) -> Vec<u8> {
    let mut file = file_prefix(&Header {
        producer: "hostile".into(),
        pid: 1,
        parent_pid: 0,
        command: vec![],
        start_unix_ns: 0,
        ordering: Ordering::Logical,
        pointer_width: 8,
        stack_depth: 1,
    });
    let mut header = [0u8; CHUNK_HEADER_LEN];
    write_chunk_header(&mut header, kind, payload);
    file.extend_from_slice(&header);
    file.extend_from_slice(payload);
    // A chunk that uses thread, object and site 0, whatever the tables say of them.
    let mut w = ChunkWriter::new(0, 4096);
    for kind in [
        EventKind::ThreadStart,
        EventKind::LockRequest {
            lock: 0,
            mode: LockMode::Exclusive,
            site: 0,
        },
    ] {
        w.push(&Event { key: 1, kind }).unwrap();
    }
    w.flush_into(1, |bytes| file.extend_from_slice(bytes));
    file
}

fn read_both_ways(file: Vec<u8>) {
    let len = file.len() as u64;
    if let Ok(trace) = Trace::from_bytes("hostile", file.clone()) {
        assert!(
            trace.problems.iter().all(|p| p.offset <= len),
            "{:?}",
            trace.problems
        );
        for p in foresight_trace::ordering::check(&trace) {
            assert!(p.offset <= len, "{p:?}");
        }
        let _ = trace.merged().count();
    }
    if let Ok(stream) = TraceStream::from_bytes("hostile", file) {
        let mut merged = stream.merged().with_ordering_check();
        for _ in merged.by_ref() {}
        assert!(merged.problems().iter().all(|p| p.offset <= len));
    }
}

/// An events payload: a prefix that names thread 0 and a count, then anything.
fn events_payload() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<u32>(),
        any::<u64>(),
        0u32..64,
        prop::collection::vec(any::<u8>(), 0..400),
    )
        .prop_map(|(sequence, base_key, count, events)| {
            let mut p = Vec::new();
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&(sequence % 4).to_le_bytes());
            p.extend_from_slice(&(base_key % 1000).to_le_bytes());
            p.extend_from_slice(&count.to_le_bytes());
            p.extend_from_slice(&[0u8; 16]);
            p.extend_from_slice(&events);
            p
        })
}

/// A table payload: records with known tags (1–11) and lengths that mostly fit, then anything.
fn table_payload() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((1u8..12, prop::collection::vec(any::<u8>(), 0..24)), 0..12).prop_map(
        |records| {
            let mut p = Vec::new();
            for (tag, body) in records {
                p.push(tag);
                p.push(body.len() as u8);
                p.extend_from_slice(&body);
            }
            p
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_events_payload_reads_without_a_panic(payload in events_payload()) {
        read_both_ways(framed(ChunkKind::Events, &payload));
    }

    #[test]
    fn any_bytes_as_an_events_payload_read_without_a_panic(
        payload in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        read_both_ways(framed(ChunkKind::Events, &payload));
    }

    #[test]
    fn any_table_payload_reads_without_a_panic(payload in table_payload()) {
        read_both_ways(framed(ChunkKind::Table, &payload));
    }
}

#[test]
fn the_fuzz_seeds_read_without_a_panic() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut read = 0;
    for target in ["file", "stream", "events_chunk", "table_chunk"] {
        for entry in std::fs::read_dir(corpus.join(target)).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            match target {
                "events_chunk" => read_both_ways(framed(ChunkKind::Events, &bytes)),
                "table_chunk" => read_both_ways(framed(ChunkKind::Table, &bytes)),
                _ => read_both_ways(bytes),
            }
            read += 1;
        }
    }
    assert!(read >= 10, "the seed corpus is there");
}
