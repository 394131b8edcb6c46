//! Any bytes as one compressed events chunk of a 2.9 file (FORMAT.md §5.3), framed with good
//! checksums, so that every input reaches the decompressor and then the event decoder of both
//! readers. The first byte chooses the codec (bit 1: zstd, else LZ4) and the shape (bit 0):
//! even, the rest is the payload as stored (events prefix, decoded length, LZ4 block or zstd
//! frame: damaged blocks and lengths); odd, the rest is an events prefix and encoded events,
//! which the writer's compressor compresses (valid blocks of any events).
#![no_main]

use foresight_trace::compress::{CompressMode, Compressor};
use foresight_trace::frame::{
    write_chunk_header_coded, ChunkKind, CHUNK_HEADER_LEN, CODEC_LZ4, CODEC_ZSTD,
    EVENTS_PREFIX_LEN, FEATURE_COMPRESSED_CHUNKS, FEATURE_ZSTD_CHUNKS,
};
use foresight_trace::tables::{Header, Ordering};
use foresight_trace::writer::file_prefix_with;
use foresight_trace::{Trace, TraceStream};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let mut file = file_prefix_with(
        &Header {
            producer: "fuzz".into(),
            pid: 1,
            parent_pid: 0,
            command: vec![],
            start_unix_ns: 0,
            ordering: Ordering::Logical,
            pointer_width: 8,
            stack_depth: 1,
        },
        FEATURE_COMPRESSED_CHUNKS | FEATURE_ZSTD_CHUNKS,
    );
    let zstd = shape & 2 != 0;
    if shape & 1 == 0 {
        let mut header = [0u8; CHUNK_HEADER_LEN];
        let codec = if zstd { CODEC_ZSTD } else { CODEC_LZ4 };
        write_chunk_header_coded(&mut header, ChunkKind::Events, codec, rest);
        file.extend_from_slice(&header);
        file.extend_from_slice(rest);
    } else {
        let mut plain = vec![0u8; CHUNK_HEADER_LEN];
        plain.extend_from_slice(rest);
        if plain.len() < CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN {
            return;
        }
        let body = plain.len() - CHUNK_HEADER_LEN - EVENTS_PREFIX_LEN;
        let mode = if zstd {
            CompressMode::Always
        } else {
            CompressMode::Lz4
        };
        let mut c = Compressor::new(mode, body).expect("a compressor");
        match c.compress_chunk(&plain) {
            Some(framed) => file.extend_from_slice(framed),
            None => return, // incompressible: the plain chunk is `events_chunk`'s input
        }
    }
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
