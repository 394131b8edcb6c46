//! Versions 2.7 and 2.9: compressed event chunks, LZ4 and zstd (FORMAT.md §5.3), and the
//! required-features word (§2.1, §3.1). Round trips through both readers, a damaged
//! compressed chunk costing only that chunk, and the refusals of files a reader cannot read.

use foresight_trace::builder::TraceBuilder;
use foresight_trace::compress::{CompressProblem, BLOCK_START};
use foresight_trace::frame::{
    read_chunk_header, ChunkKind, CHUNK_HEADER_LEN, CODEC_LZ4, CODEC_ZSTD, EVENTS_PREFIX_LEN,
    FEATURE_COMPRESSED_CHUNKS, FEATURE_ZSTD_CHUNKS, FILE_PREFIX_LEN_V2, VERSION_MINOR,
};
use foresight_trace::{CompressMode, ProblemKind, Trace, TraceError, TraceStream};

/// A lock-heavy trace of three threads taking two mutexes many times, in small chunks.
fn lock_heavy(mode: CompressMode) -> Vec<u8> {
    let mut b = TraceBuilder::new("lock-heavy");
    b.chunk_bytes(2048).compress(mode);
    let main = b.main_thread();
    let spawn_site = b.site("main", "main.c", 10);
    let workers: Vec<_> = (0..2)
        .map(|i| b.spawn(main, spawn_site, &format!("worker{i}")))
        .collect();
    let a = b.mutex("a");
    let m = b.mutex("m");
    let s1 = b.site("work", "work.c", 20);
    let s2 = b.site("work", "work.c", 21);
    for round in 0..2000 {
        let t = workers[round % 2];
        b.lock(t, a, s1);
        b.lock(t, m, s2);
        b.unlock(t, m, s2);
        b.unlock(t, a, s1);
    }
    for &t in &workers {
        b.join(main, t, spawn_site);
    }
    b.finish()
}

/// Every chunk of the file: (offset, kind, codec).
fn chunks(bytes: &[u8]) -> Vec<(usize, ChunkKind, u8)> {
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut pos = FILE_PREFIX_LEN_V2 + hlen;
    let mut out = Vec::new();
    while pos < bytes.len() {
        let h = read_chunk_header(&bytes[pos..]).unwrap();
        out.push((pos, h.kind, h.flags));
        pos += CHUNK_HEADER_LEN + h.payload_len as usize;
    }
    out
}

/// Rewrites the payload checksum (and the header checksum) of the chunk at `at`, so that damage
/// inside it reaches the decompressor.
fn reseal(bytes: &mut [u8], at: usize) {
    let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
    let payload = &bytes[at + CHUNK_HEADER_LEN..at + CHUNK_HEADER_LEN + len];
    let crc = crc32fast::hash(payload);
    bytes[at + 12..at + 16].copy_from_slice(&crc.to_le_bytes());
    let hcrc = crc32fast::hash(&bytes[at..at + 16]);
    bytes[at + 16..at + 20].copy_from_slice(&hcrc.to_le_bytes());
}

/// The compressing modes and the codec each writes.
const MODES: [(CompressMode, u8); 3] = [
    (CompressMode::Always, CODEC_ZSTD),
    (CompressMode::Auto, CODEC_ZSTD),
    (CompressMode::Lz4, CODEC_LZ4),
];

#[test]
fn compressed_trace_reads_as_the_plain_one() {
    let plain = lock_heavy(CompressMode::Never);
    for (mode, codec) in MODES {
        let packed = lock_heavy(mode);
        assert_eq!(
            u16::from_le_bytes([plain[8], plain[9]]),
            1,
            "plain stays 1.x"
        );
        assert_eq!(u16::from_le_bytes([packed[8], packed[9]]), 2);
        let features = u64::from_le_bytes(packed[20..28].try_into().unwrap());
        let expected = match codec {
            CODEC_ZSTD => FEATURE_COMPRESSED_CHUNKS | FEATURE_ZSTD_CHUNKS,
            _ => FEATURE_COMPRESSED_CHUNKS,
        };
        assert_eq!(features, expected, "{mode:?}");
        assert!(
            packed.len() * 4 < plain.len(),
            "{mode:?}: {} vs {}",
            packed.len(),
            plain.len()
        );
        assert!(chunks(&packed)
            .iter()
            .all(|c| c.2 == 0 || (c.2 == codec && c.1 == ChunkKind::Events)));
        let p = Trace::from_bytes("plain", plain.clone()).unwrap();
        let c = Trace::from_bytes("packed", packed.clone()).unwrap();
        assert!(c.ended_cleanly(), "{:?}", c.problems);
        assert_eq!(c.version, (2, VERSION_MINOR));
        assert_eq!(p.threads.len(), c.threads.len());
        for (a, b) in p.threads.iter().zip(&c.threads) {
            assert_eq!(a.events, b.events);
            assert_eq!(a.encoded_bytes, b.encoded_bytes);
            assert_eq!(a.stored_bytes, a.encoded_bytes);
            assert_eq!(a.compressed_chunks, 0);
        }
        let compressed: u32 = c.threads.iter().map(|t| t.compressed_chunks).sum();
        let zstd: u32 = c.threads.iter().map(|t| t.zstd_chunks).sum();
        assert!(compressed > 2);
        assert_eq!(zstd, if codec == CODEC_ZSTD { compressed } else { 0 });
        let stored: u64 = c.threads.iter().map(|t| t.stored_bytes).sum();
        let decoded: u64 = c.threads.iter().map(|t| t.encoded_bytes).sum();
        assert!(stored * 4 < decoded, "{stored} vs {decoded}");
        // The streaming reader agrees, summaries included.
        let stream = TraceStream::from_bytes("packed", packed).unwrap();
        let mut it = stream.merged();
        let n = it.by_ref().count() as u64;
        assert_eq!(n, c.event_count());
        let outcome = it.outcome();
        assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
        let s_stored: u64 = outcome.threads.iter().map(|t| t.stored_bytes).sum();
        assert_eq!(s_stored, stored);
        let s_zstd: u32 = outcome.threads.iter().map(|t| t.zstd_chunks).sum();
        assert_eq!(s_zstd, zstd);
    }
}

#[test]
fn auto_compresses_a_lock_heavy_trace() {
    for mode in [CompressMode::Auto, CompressMode::Lz4] {
        let c = Trace::from_bytes("auto", lock_heavy(mode)).unwrap();
        assert!(c.ended_cleanly(), "{:?}", c.problems);
        let chunks: usize = c.threads.iter().map(|t| t.chunks.len()).sum();
        let compressed: u32 = c.threads.iter().map(|t| t.compressed_chunks).sum();
        // Every worker chunk shrinks more than 4x; the main thread's few events do not.
        assert!(
            compressed as usize >= chunks - 1,
            "{mode:?}: {compressed} of {chunks}"
        );
    }
}

/// A compressed chunk whose LZ4 block or zstd frame is damaged (its checksum made to match) costs that chunk
/// alone, reported at its offset by both readers; the next chunk of the thread still reads.
#[test]
fn a_damaged_compressed_chunk_costs_only_that_chunk() {
    for (mode, codec) in [
        (CompressMode::Always, CODEC_ZSTD),
        (CompressMode::Lz4, CODEC_LZ4),
    ] {
        damaged_chunk_costs_only_that_chunk(mode, codec);
    }
}

fn damaged_chunk_costs_only_that_chunk(mode: CompressMode, codec: u8) {
    let good = lock_heavy(mode);
    let all = chunks(&good);
    let events: Vec<_> = all
        .iter()
        .filter(|c| c.1 == ChunkKind::Events && c.2 == codec)
        .collect();
    assert!(events.len() >= 3);
    let (at, _, _) = *events[1];
    let whole = Trace::from_bytes("good", good.clone()).unwrap();

    for damage in 0..4 {
        let mut bytes = good.clone();
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let block = at + CHUNK_HEADER_LEN + BLOCK_START;
        let decl = at + CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN;
        match damage {
            // LZ4: a block that says to copy from before its start; zstd: no frame magic.
            0 => bytes[block..at + CHUNK_HEADER_LEN + len].fill(0xF0),
            // A decoded length larger than the block can hold.
            1 => bytes[decl..decl + 4].copy_from_slice(&u32::MAX.to_le_bytes()),
            // A decoded length the block does not fill.
            2 => {
                let d = u32::from_le_bytes(bytes[decl..decl + 4].try_into().unwrap());
                bytes[decl..decl + 4].copy_from_slice(&(d + 1).to_le_bytes());
            }
            // A block cut short.
            _ => bytes[at + CHUNK_HEADER_LEN + len - 1] ^= 0xFF,
        }
        reseal(&mut bytes, at);
        let t = Trace::from_bytes("damaged", bytes.clone()).unwrap();
        let bad: Vec<_> = t
            .problems
            .iter()
            .filter(|p| matches!(p.kind, ProblemKind::BadCompressedChunk(_)))
            .collect();
        // The last damage may also decode (LZ4 literals are not checked, nor zstd's without a
        // content checksum), into wrong events that the decoder rejects; either way the
        // problem names this chunk.
        let at_chunk = t
            .problems
            .iter()
            .any(|p| p.offset == at as u64 && p.is_damage());
        assert!(at_chunk, "{mode:?} damage {damage}: {:?}", t.problems);
        if damage < 3 {
            assert_eq!(bad.len(), 1, "{mode:?} damage {damage}: {:?}", t.problems);
            assert_eq!(bad[0].offset, at as u64);
            // One chunk's events are gone, the others are all there.
            let lost = whole.event_count() - t.event_count();
            assert!(lost > 0 && lost < 2048, "lost {lost}");
        }
        let stream = TraceStream::from_bytes("damaged", bytes).unwrap();
        let mut it = stream.merged();
        let n = it.by_ref().count() as u64;
        if damage < 3 {
            assert_eq!(n, t.event_count());
            assert_eq!(it.outcome().problems, t.problems);
        }
    }
}

#[test]
fn unknown_required_feature_is_refused_by_name() {
    let mut bytes = lock_heavy(CompressMode::Always);
    bytes[20..28].copy_from_slice(&(1u64 | 1 << 5).to_le_bytes());
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let crc = crc32fast::hash(&bytes[20..28 + hlen]);
    bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    match Trace::from_bytes("future", bytes.clone()) {
        Err(e @ TraceError::UnsupportedFeatures { unknown: 32, .. }) => {
            let msg = e.to_string();
            let version = format!("2.{VERSION_MINOR}");
            // The feature word follows the 20-byte prefix: the message says where.
            assert!(msg.contains("bit 5") && msg.contains(&version), "{msg}");
            assert!(msg.contains("byte 20:"), "{msg}");
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a file with an unknown required feature was read"),
    }
    assert!(TraceStream::from_bytes("future", bytes).is_err());
}

#[test]
fn unknown_major_is_refused_by_version() {
    let mut bytes = lock_heavy(CompressMode::Always);
    bytes[8..10].copy_from_slice(&3u16.to_le_bytes());
    let Err(e) = Trace::from_bytes("v3", bytes) else {
        panic!("a 3.x file was read");
    };
    assert!(e.to_string().contains(&format!("3.{VERSION_MINOR}")), "{e}");
    assert!(e.to_string().contains("byte 8:"), "{e}");
}

#[test]
fn unknown_codec_costs_its_chunk() {
    let mut bytes = lock_heavy(CompressMode::Always);
    let all = chunks(&bytes);
    let (at, _, _) = *all
        .iter()
        .find(|c| c.1 == ChunkKind::Events)
        .expect("an event chunk");
    bytes[at + 5] = 9;
    reseal(&mut bytes, at);
    let t = Trace::from_bytes("codec", bytes).unwrap();
    assert!(t.problems.iter().any(|p| p.offset == at as u64
        && p.kind == ProblemKind::BadCompressedChunk(CompressProblem::UnknownCodec(9))));
    assert!(t.event_count() > 0);
}

/// In a 1.x file byte 5 of a chunk header is flags, which a reader ignores: a plain trace
/// with it set reads as before.
#[test]
fn flags_in_a_1x_file_are_not_a_codec() {
    let mut bytes = lock_heavy(CompressMode::Never);
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let at = 20 + hlen;
    bytes[at + 5] = CODEC_LZ4;
    reseal(&mut bytes, at);
    let t = Trace::from_bytes("flags", bytes).unwrap();
    assert!(t.ended_cleanly(), "{:?}", t.problems);
}

/// A 2.x trace rewritten plain is the 1.x trace of the same events, byte for byte what the
/// writer gives uncompressed; a damaged one is refused with the offset.
#[test]
fn a_compressed_trace_rewritten_plain_is_the_uncompressed_trace() {
    use foresight_trace::compress::to_plain;
    let plain = lock_heavy(CompressMode::Never);
    assert_eq!(to_plain(&plain).unwrap().as_ref(), &plain[..]);
    for (mode, _) in MODES {
        let packed = lock_heavy(mode);
        assert_eq!(to_plain(&packed).unwrap().as_ref(), &plain[..], "{mode:?}");
        let mut bad = packed.clone();
        let at = chunks(&bad)[1].0;
        bad[at + 30] ^= 1;
        let e = to_plain(&bad).unwrap_err();
        assert!(e.contains(&format!("byte {at}")), "{e}");
    }
}

/// A reader that knows zstd names the feature of a trace that needs it.
#[test]
fn the_zstd_feature_has_a_name() {
    let names = foresight_trace::frame::feature_names(FEATURE_ZSTD_CHUNKS | 1 << 7);
    assert!(names.contains("bit 1 (zstd-compressed chunks)"), "{names}");
    assert!(names.contains("bit 7"), "{names}");
}

mod damage {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any bytes changed inside one compressed chunk's block (its checksums made to match,
        /// so that the bytes reach the decompressor), either codec: both readers read the file
        /// without a panic, every problem is at an offset inside the file, and at most that
        /// chunk's events are lost.
        #[test]
        fn damage_inside_a_block_costs_at_most_its_chunk(
            zstd in any::<bool>(),
            which in 0usize..8,
            flips in prop::collection::vec((any::<usize>(), 1u8..=255), 1..6),
        ) {
            let mode = if zstd { CompressMode::Always } else { CompressMode::Lz4 };
            let codec = if zstd { CODEC_ZSTD } else { CODEC_LZ4 };
            let good = lock_heavy(mode);
            let whole = Trace::from_bytes("good", good.clone()).unwrap();
            let events: Vec<_> = chunks(&good)
                .into_iter()
                .filter(|c| c.1 == ChunkKind::Events && c.2 == codec)
                .collect();
            let (at, _, _) = events[which % events.len()];
            let len = u32::from_le_bytes(good[at + 8..at + 12].try_into().unwrap()) as usize;
            let block = at + CHUNK_HEADER_LEN + BLOCK_START;
            let end = at + CHUNK_HEADER_LEN + len;
            let mut bytes = good.clone();
            for (i, x) in flips {
                bytes[block + i % (end - block)] ^= x;
            }
            reseal(&mut bytes, at);
            let file_len = bytes.len() as u64;
            let t = Trace::from_bytes("damaged", bytes.clone()).unwrap();
            prop_assert!(t.problems.iter().all(|p| p.offset <= file_len));
            prop_assert!(whole.event_count() - t.event_count() < 2048);
            let stream = TraceStream::from_bytes("damaged", bytes).unwrap();
            let mut it = stream.merged().with_ordering_check();
            // Damaged bytes may decode as extension events, which the stream hands out and
            // the whole-trace reader skips: compare the events both read.
            let n = it.by_ref().filter(|e| !e.event.kind.is_extension()).count() as u64;
            prop_assert_eq!(n, t.event_count());
            prop_assert!(it.problems().iter().all(|p| p.offset <= file_len));
        }
    }
}
