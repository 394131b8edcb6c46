//! Compressed event chunks (FORMAT.md §5.3): an LZ4 block (codec 1) or a zstd frame (codec 2)
//! of the encoded events after the uncompressed events prefix and the decoded length.
//!
//! The writer side ([`Compressor`]) allocates everything it needs when it is made, with the
//! thread's chunk buffer, so that compressing a chunk at flush allocates nothing (the recorder
//! flushes from its hooks and its flusher thread, where the program's `malloc` must not be
//! called; zstd works in a static context, `zstd_cctx.rs`). The reader side
//! ([`decompress_events`]) checks the declared length before it allocates, and turns every
//! failure into a [`CompressProblem`] instead of a panic.

use std::cell::RefCell;
use std::sync::atomic::{AtomicI32, Ordering};

use lz4_flex::block::CompressTable;
use lz4_flex::block::{compress_into_with_table, decompress_into, get_maximum_output_size};

use crate::frame::{
    codec_name, write_chunk_header_coded, ChunkKind, CHUNK_HEADER_LEN, CODEC_LZ4, CODEC_ZSTD,
    EVENTS_PREFIX_LEN, FEATURE_COMPRESSED_CHUNKS, FEATURE_ZSTD_CHUNKS, MAX_PAYLOAD_LEN,
};
use crate::zstd_cctx::StaticCCtx;

/// What the decoded length takes in a compressed payload, after the events prefix.
pub(crate) const DECODED_LEN_BYTES: usize = 4;
/// Where the compressed block (LZ4 block or zstd frame) starts in a compressed payload.
pub const BLOCK_START: usize = EVENTS_PREFIX_LEN + DECODED_LEN_BYTES;

/// When and how a chunk is compressed (`foresight record --compress`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompressMode {
    /// Never: the trace is written as 1.x, as before compression existed.
    Never,
    /// zstd; store a chunk plain when that does not pay, and after a chunk that shrank less
    /// than `CompressMode::min_ratio`× write the next chunks plain without trying: one after
    /// a first such chunk, then twice as many after each further one in a row, at most
    /// `AUTO_BACKOFF_CHUNKS`; a chunk that shrinks enough starts over.
    #[default]
    Auto,
    /// zstd on every chunk; store it compressed whenever that is smaller.
    Always,
    /// LZ4 as `Auto` does it: the cheapest compression, and a trace that 2.7 and 2.8 readers
    /// read (no zstd feature).
    Lz4,
}

impl CompressMode {
    /// `never`, `auto`, `always` or `lz4` (the option's and `FORESIGHT_COMPRESS`'s values).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "never" | "0" | "off" => Some(Self::Never),
            "auto" => Some(Self::Auto),
            "always" | "1" | "on" | "zstd" => Some(Self::Always),
            "lz4" => Some(Self::Lz4),
            _ => None,
        }
    }

    /// The mode's name, as `--compress` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::Auto => "auto",
            Self::Always => "always",
            Self::Lz4 => "lz4",
        }
    }

    /// The codec of the chunks this mode compresses; `None` for `Never`.
    pub fn codec(self) -> Option<u8> {
        match self {
            Self::Never => None,
            Self::Auto | Self::Always => Some(CODEC_ZSTD),
            Self::Lz4 => Some(CODEC_LZ4),
        }
    }

    /// The required features a trace written in this mode declares (FORMAT.md §2.1).
    pub fn features(self) -> u64 {
        match self {
            Self::Never => 0,
            Self::Lz4 => FEATURE_COMPRESSED_CHUNKS,
            Self::Auto | Self::Always => FEATURE_COMPRESSED_CHUNKS | FEATURE_ZSTD_CHUNKS,
        }
    }

    /// The least a chunk must shrink (compressed × this ≤ plain) for the modes that back off
    /// to keep compressing: LZ4 is cheap but gains little on hard traces; zstd gains more
    /// and its chunks are worth keeping at a smaller ratio.
    pub(crate) fn min_ratio(self) -> Option<usize> {
        match self {
            Self::Auto => Some(AUTO_MIN_RATIO_ZSTD),
            Self::Lz4 => Some(AUTO_MIN_RATIO),
            Self::Never | Self::Always => None,
        }
    }
}

/// `lz4` keeps compressing while chunks shrink at least this much.
pub(crate) const AUTO_MIN_RATIO: usize = 4;
/// `auto` (zstd) keeps compressing while chunks shrink at least this much.
pub(crate) const AUTO_MIN_RATIO_ZSTD: usize = 2;
/// The most chunks `auto` writes plain, after chunks that shrank less, before it probes again.
pub(crate) const AUTO_BACKOFF_CHUNKS: u32 = 16;

/// The zstd level the recorder compresses at unless told otherwise (`FORESIGHT_ZSTD_LEVEL`):
/// docs/decisions/0004-zstd-level-1-in-a-static-context.md and docs/perf/compression.md for the
/// measurements behind it.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;

/// The zstd level `auto` switches to after a chunk that shrank less than
/// [`FAST_BELOW_RATIO`]×, until one shrinks at least that much: such chunks (events of accesses
/// spread over much memory, as a compressor's) gain little from level 1's work, which took a
/// third of the recording's CPU time on zstd's compressor (docs/perf/real_programs.md: level -3
/// on every chunk took 13% less CPU time for 27% more bytes). Level -10 rather than -3 for
/// those chunks took another 7–15% off recording that compressor, for 7–13% more bytes
/// (docs/perf/real_programs.md, "The fast level"); the random-order lock benchmark's trace
/// grew by 1% at most.
/// Lock-heavy and SQLite traces shrink 5 to 20× and stay at level 1.
pub const FAST_ZSTD_LEVEL: i32 = -10;
/// See [`FAST_ZSTD_LEVEL`].
pub const FAST_BELOW_RATIO: usize = 4;

static ZSTD_LEVEL: AtomicI32 = AtomicI32::new(DEFAULT_ZSTD_LEVEL);

/// Sets the zstd level of the compressors made from now on in this process (a benchmark's
/// knob: `FORESIGHT_ZSTD_LEVEL`); zstd's levels, clamped to those it has, 0 being its default.
pub fn set_zstd_level(level: i32) {
    ZSTD_LEVEL.store(level, Ordering::Relaxed);
}

/// The zstd level new compressors use.
pub fn zstd_level() -> i32 {
    ZSTD_LEVEL.load(Ordering::Relaxed)
}

enum Engine {
    Lz4(Box<CompressTable>),
    Zstd(StaticCCtx),
}

/// One thread's compressor: a reusable LZ4 hash table or a static zstd context, and an output
/// buffer for the largest chunk the thread's writer makes.
pub struct Compressor {
    mode: CompressMode,
    engine: Engine,
    out: Vec<u8>,
    /// Chunks `auto` still writes plain before it tries again.
    skip: u32,
    /// How many it writes plain after the next chunk that shrinks too little.
    backoff: u32,
    /// `auto`'s levels, and whether the fast one is in use: `(level, fast level)`, the
    /// same when there is no faster one (`FAST_ZSTD_LEVEL`).
    levels: (i32, i32),
    fast: bool,
}

/// The most bytes the compressed form of `len` bytes may take, in either codec.
fn bound(len: usize) -> usize {
    get_maximum_output_size(len).max(zstd_safe::compress_bound(len))
}

impl Compressor {
    /// A compressor for chunks of at most `max_body` bytes of events; `None` for `Never`, or
    /// when a zstd context cannot be had (the chunks are then written plain).
    pub fn new(mode: CompressMode, max_body: usize) -> Option<Self> {
        let engine = match mode.codec()? {
            CODEC_LZ4 => Engine::Lz4(Box::new(CompressTable::large())),
            _ => Engine::Zstd(StaticCCtx::new(zstd_level(), max_body)?),
        };
        let cap = CHUNK_HEADER_LEN + BLOCK_START + bound(max_body);
        Some(Self {
            mode,
            engine,
            out: vec![0; cap],
            skip: 0,
            backoff: 1,
            levels: (zstd_level(), zstd_level().min(FAST_ZSTD_LEVEL)),
            fast: false,
        })
    }

    /// The mode this compressor was made for.
    pub fn mode(&self) -> CompressMode {
        self.mode
    }

    /// The codec of the chunks this compressor makes.
    pub fn codec(&self) -> u8 {
        match self.engine {
            Engine::Lz4(_) => CODEC_LZ4,
            Engine::Zstd(_) => CODEC_ZSTD,
        }
    }

    /// `chunk` is a framed plain event chunk (chunk header, events prefix, events; the prefix
    /// written, the header not needed). Returns the framed compressed chunk to write instead,
    /// or `None` to write `chunk` as it is. Allocates nothing.
    pub fn compress_chunk(&mut self, chunk: &[u8]) -> Option<&[u8]> {
        if chunk.len() < CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN {
            return None;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return None;
        }
        let body = &chunk[CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN..];
        let start = CHUNK_HEADER_LEN + BLOCK_START;
        if body.is_empty() || self.out.len() < start + bound(body.len()) {
            return None;
        }
        let codec = self.codec();
        let n = match &mut self.engine {
            Engine::Lz4(table) => {
                compress_into_with_table(body, &mut self.out[start..], table).ok()?
            }
            Engine::Zstd(cctx) => cctx.compress(&mut self.out[start..], body)?,
        };
        if let Some(ratio) = self.mode.min_ratio() {
            if n * ratio > body.len() {
                self.skip = self.backoff;
                self.backoff = (self.backoff * 2).min(AUTO_BACKOFF_CHUNKS);
            } else {
                self.backoff = 1;
            }
        }
        if let (CompressMode::Auto, Engine::Zstd(cctx)) = (self.mode, &mut self.engine) {
            let fast = n * FAST_BELOW_RATIO > body.len();
            if fast != self.fast && self.levels.0 != self.levels.1 {
                let level = if fast { self.levels.1 } else { self.levels.0 };
                if cctx.set_level(level).is_some() {
                    self.fast = fast;
                }
            }
        }
        if n + DECODED_LEN_BYTES >= body.len() {
            return None;
        }
        let (head, rest) = self.out.split_at_mut(CHUNK_HEADER_LEN);
        rest[..EVENTS_PREFIX_LEN]
            .copy_from_slice(&chunk[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN]);
        rest[EVENTS_PREFIX_LEN..BLOCK_START].copy_from_slice(&(body.len() as u32).to_le_bytes());
        let payload = &rest[..BLOCK_START + n];
        write_chunk_header_coded(head, ChunkKind::Events, codec, payload);
        Some(&self.out[..start + n])
    }
}

/// Why a compressed chunk's events cannot be had.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompressProblem {
    /// The payload is shorter than its decoded-length field.
    #[error("the compressed payload is too short ({0} bytes) to hold its decoded length")]
    TooShort(usize),
    /// The decoded length cannot come from so few compressed bytes (a decompression bomb or damage).
    #[error(
        "decoded length {declared} is impossible for {stored} compressed bytes (at most {max})"
    )]
    BadLength {
        /// The decoded length the payload declares.
        declared: u32,
        /// Compressed bytes stored.
        stored: usize,
        /// The largest decoded length those bytes can give.
        max: u64,
    },
    /// The codec refused the block.
    #[error("the {} block is damaged: {why}", codec_name(*codec))]
    Damaged {
        /// The codec (`CODEC_LZ4`, `CODEC_ZSTD`).
        codec: u8,
        /// What the codec said.
        why: String,
    },
    /// The block decompressed to another length than declared.
    #[error(
        "the {} block decompresses to {found} bytes, not the {declared} it declares",
        codec_name(*codec)
    )]
    WrongLength {
        /// The codec.
        codec: u8,
        /// The decoded length the payload declares.
        declared: u32,
        /// The length it decompressed to.
        found: usize,
    },
    /// A codec byte this version does not know.
    #[error("unknown codec {0}")]
    UnknownCodec(u8),
}

/// The largest decoded length a compressed block of `stored` bytes may declare: an LZ4 block
/// expands at most 255×; a zstd frame at most 32 768× (each block of at most 128 KiB takes
/// at least a 3-byte header and one byte, FORMAT.md §5.3).
pub(crate) fn max_decoded_len(codec: u8, stored: usize) -> u64 {
    let factor = if codec == CODEC_ZSTD { 32_768 } else { 255 };
    (stored as u64 * factor + 16).min(MAX_PAYLOAD_LEN as u64)
}

/// The decoded length a compressed events payload declares, checked against its bounds.
pub(crate) fn decoded_len(codec: u8, payload: &[u8]) -> Result<usize, CompressProblem> {
    if payload.len() < BLOCK_START {
        return Err(CompressProblem::TooShort(payload.len()));
    }
    let declared = u32::from_le_bytes(
        payload[EVENTS_PREFIX_LEN..BLOCK_START]
            .try_into()
            .expect("four bytes"),
    );
    let stored = payload.len() - BLOCK_START;
    let max = max_decoded_len(codec, stored);
    if declared as u64 > max {
        return Err(CompressProblem::BadLength {
            declared,
            stored,
            max,
        });
    }
    Ok(declared as usize)
}

thread_local! {
    /// A reading thread's zstd decompression context, made at its first zstd chunk.
    static DCTX: RefCell<Option<zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

/// Decompresses one zstd frame, which must take all of `src`, into exactly `dst`.
fn zstd_into(src: &[u8], dst: &mut [u8]) -> Result<usize, CompressProblem> {
    let damaged = |why: String| CompressProblem::Damaged {
        codec: CODEC_ZSTD,
        why,
    };
    match zstd_safe::find_frame_compressed_size(src) {
        Ok(n) if n == src.len() => {}
        Ok(n) => {
            return Err(damaged(format!(
                "the frame takes {n} of its {} bytes",
                src.len()
            )))
        }
        Err(code) => return Err(damaged(zstd_safe::get_error_name(code).to_string())),
    }
    DCTX.with(|d| {
        let mut d = d.borrow_mut();
        let dctx = d.get_or_insert_with(zstd_safe::DCtx::create);
        dctx.decompress(dst, src)
            .map_err(|code| damaged(zstd_safe::get_error_name(code).to_string()))
    })
}

/// Decompresses the events of a compressed events payload (prefix included, checksum
/// already checked) of codec `codec` into `out`, which is reused: the returned slice is the
/// events.
pub fn decompress_events<'o>(
    codec: u8,
    payload: &[u8],
    out: &'o mut Vec<u8>,
) -> Result<&'o [u8], CompressProblem> {
    if codec != CODEC_LZ4 && codec != CODEC_ZSTD {
        return Err(CompressProblem::UnknownCodec(codec));
    }
    let d = decoded_len(codec, payload)?;
    if out.len() < d {
        out.resize(d, 0);
    }
    let src = &payload[BLOCK_START..];
    let n = if codec == CODEC_LZ4 {
        decompress_into(src, &mut out[..d]).map_err(|e| CompressProblem::Damaged {
            codec,
            why: e.to_string(),
        })?
    } else {
        zstd_into(src, &mut out[..d])?
    };
    if n != d {
        return Err(CompressProblem::WrongLength {
            codec,
            declared: d as u32,
            found: n,
        });
    }
    Ok(&out[..d])
}

/// The same trace with every chunk stored as written: a 2.x trace rewritten as the 1.x trace
/// of the same events (FORMAT.md §2.1: the lowest major that can express it), for a tool that
/// recompresses whole files with a stronger codec (a pack), which gains more on plain chunks
/// than on LZ4 blocks. A 1.x trace is returned as it is. Only a trace that reads cleanly
/// chunk by chunk is rewritten: any damage (a chunk header, a checksum, a block, an unknown
/// codec) is an error naming its offset, and the caller keeps the original bytes.
pub fn to_plain(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    use crate::frame::{
        read_chunk_header, write_chunk_header, CODEC_STORED, FILE_MAGIC, FILE_PREFIX_LEN,
        FILE_PREFIX_LEN_V2, KNOWN_FEATURES, VERSION_MAJOR, VERSION_MAJOR_FEATURES, VERSION_MINOR,
    };
    if bytes.len() < FILE_PREFIX_LEN || bytes[..8] != FILE_MAGIC {
        return Err("not a foresight trace".into());
    }
    let major = u16::from_le_bytes([bytes[8], bytes[9]]);
    if major == VERSION_MAJOR {
        return Ok(std::borrow::Cow::Borrowed(bytes));
    }
    if major != VERSION_MAJOR_FEATURES || bytes.len() < FILE_PREFIX_LEN_V2 {
        return Err(format!(
            "byte 8: format major {major} is not one this rewrite reads"
        ));
    }
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().expect("four bytes")) as usize;
    let features = u64::from_le_bytes(bytes[20..28].try_into().expect("eight bytes"));
    let hend = FILE_PREFIX_LEN_V2 + hlen;
    if features & !KNOWN_FEATURES != 0 || hend > bytes.len() {
        return Err("byte 12: the file header is not one this rewrite reads".into());
    }
    let stored_crc = u32::from_le_bytes(bytes[16..20].try_into().expect("four bytes"));
    if crc32fast::hash(&bytes[20..hend]) != stored_crc {
        return Err("byte 16: header checksum mismatch".into());
    }
    let header = &bytes[FILE_PREFIX_LEN_V2..hend];
    let mut out = Vec::with_capacity(bytes.len() * 4);
    out.extend_from_slice(&FILE_MAGIC);
    out.extend_from_slice(&VERSION_MAJOR.to_le_bytes());
    out.extend_from_slice(&VERSION_MINOR.to_le_bytes());
    out.extend_from_slice(&(hlen as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(header).to_le_bytes());
    out.extend_from_slice(header);
    let mut pos = hend;
    let mut plain = Vec::new();
    while pos < bytes.len() {
        let h = read_chunk_header(&bytes[pos..])
            .map_err(|why| format!("byte {pos}: not a whole chunk header ({why:?})"))?;
        let start = pos + CHUNK_HEADER_LEN;
        let end = start + h.payload_len as usize;
        if end > bytes.len() {
            return Err(format!("byte {pos}: the file ends inside this chunk"));
        }
        let payload = &bytes[start..end];
        if crc32fast::hash(payload) != h.payload_crc {
            return Err(format!("byte {pos}: chunk checksum mismatch"));
        }
        match h.flags {
            CODEC_STORED => {
                // A 1.x reader ignores byte 5: written as 0 all the same.
                let at = out.len();
                out.extend_from_slice(&bytes[pos..end]);
                write_chunk_header(&mut out[at..at + CHUNK_HEADER_LEN], h.kind, payload);
            }
            CODEC_LZ4 | CODEC_ZSTD if h.kind == ChunkKind::Events => {
                let body = decompress_events(h.flags, payload, &mut plain)
                    .map_err(|why| format!("byte {pos}: {why}"))?;
                let at = out.len();
                out.resize(at + CHUNK_HEADER_LEN, 0);
                out.extend_from_slice(&payload[..EVENTS_PREFIX_LEN]);
                out.extend_from_slice(body);
                let (head, rest) = out[at..].split_at_mut(CHUNK_HEADER_LEN);
                write_chunk_header(head, ChunkKind::Events, rest);
            }
            codec => return Err(format!("byte {pos}: unknown codec {codec}")),
        }
        pos = end;
    }
    Ok(std::borrow::Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{read_chunk_header, EventsPrefix};

    fn chunk(body: &[u8]) -> Vec<u8> {
        let mut c = vec![0u8; CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN];
        EventsPrefix {
            thread: 3,
            sequence: 1,
            base_key: 9,
            event_count: 7,
            start_ns: 1,
            end_ns: 2,
        }
        .write_to(&mut c[CHUNK_HEADER_LEN..]);
        c.extend_from_slice(body);
        c
    }

    #[test]
    fn repetitive_chunk_round_trips() {
        let body: Vec<u8> = (0..4000).map(|i| (i % 7) as u8).collect();
        for (mode, codec) in [
            (CompressMode::Always, CODEC_ZSTD),
            (CompressMode::Auto, CODEC_ZSTD),
            (CompressMode::Lz4, CODEC_LZ4),
        ] {
            let mut c = Compressor::new(mode, body.len()).unwrap();
            let plain = chunk(&body);
            let framed = c.compress_chunk(&plain).expect("compresses").to_vec();
            let h = read_chunk_header(&framed).unwrap();
            assert_eq!(h.flags, codec);
            let payload = &framed[CHUNK_HEADER_LEN..];
            assert_eq!(h.payload_len as usize, payload.len());
            assert_eq!(
                &payload[..EVENTS_PREFIX_LEN],
                &plain[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN]
            );
            let mut out = Vec::new();
            assert_eq!(
                decompress_events(codec, payload, &mut out).unwrap(),
                &body[..]
            );
            // The other codec does not read it.
            let other = CODEC_LZ4 + CODEC_ZSTD - codec;
            assert!(decompress_events(other, payload, &mut out).is_err());
        }
    }

    #[test]
    fn incompressible_chunk_stays_plain_and_auto_backs_off() {
        let mut x = 0x1234_5678u32;
        let body: Vec<u8> = (0..4000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        for mode in [CompressMode::Auto, CompressMode::Lz4] {
            let mut c = Compressor::new(mode, body.len()).unwrap();
            let easy = vec![5u8; 4000];
            // Backing off: after the k-th incompressible chunk in a row, the next 2^(k-1)
            // chunks (at most 16) are written plain, even repetitive ones.
            let mut tries = 0;
            for skip in [1, 2, 4, 8, 16, 16] {
                assert!(c.compress_chunk(&chunk(&body)).is_none());
                tries += 1;
                for _ in 0..skip {
                    assert!(c.compress_chunk(&chunk(&easy)).is_none(), "try {tries}");
                }
            }
            assert!(c.compress_chunk(&chunk(&easy)).is_some());
            // A chunk that shrank enough starts over: one plain chunk after the next failure.
            assert!(c.compress_chunk(&chunk(&body)).is_none());
            assert!(c.compress_chunk(&chunk(&easy)).is_none());
            assert!(c.compress_chunk(&chunk(&easy)).is_some());
        }
        // `always` never backs off.
        let mut c = Compressor::new(CompressMode::Always, body.len()).unwrap();
        assert!(c.compress_chunk(&chunk(&body)).is_none());
        assert!(c.compress_chunk(&chunk(&vec![5u8; 4000])).is_some());
    }

    /// A chunk of `len` bytes that zstd 1 shrinks by about 3× (between `auto`'s 2× and
    /// `FAST_BELOW_RATIO`): blocks of 16 bytes, four in five a copy of a recent one.
    fn middling(len: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let mut body: Vec<u8> = Vec::with_capacity(len + 16);
        while body.len() < len {
            if body.len() >= 4096 && next() % 5 != 0 {
                let from = body.len() - 16 * (1 + next() as usize % 200);
                body.extend_from_within(from..from + 16);
            } else {
                body.extend((0..16).map(|_| next() as u8));
            }
        }
        body.truncate(len);
        body
    }

    #[test]
    fn auto_compresses_faster_after_a_chunk_that_shrank_little_and_back_after_one_that_shrank_much()
    {
        let len = 64 << 10;
        let mut c = Compressor::new(CompressMode::Auto, len).unwrap();
        let mut at_level_1 = Compressor::new(CompressMode::Always, len).unwrap();
        let easy: Vec<u8> = (0..len).map(|i| (i % 7) as u8).collect();
        let mut out = Vec::new();
        let mut sizes = Vec::new();
        for (round, body) in [
            middling(len, 1),
            middling(len, 2),
            easy.clone(),
            middling(len, 3),
        ]
        .iter()
        .enumerate()
        {
            let framed = c.compress_chunk(&chunk(body)).expect("compressed").to_vec();
            let payload = &framed[CHUNK_HEADER_LEN..];
            assert_eq!(
                decompress_events(CODEC_ZSTD, payload, &mut out).unwrap(),
                &body[..],
                "round {round}"
            );
            let level_1 = at_level_1.compress_chunk(&chunk(body)).unwrap().len();
            sizes.push((framed.len(), level_1));
        }
        assert_eq!(sizes[0].0, sizes[0].1, "the first chunk at level 1");
        assert!(sizes[1].0 > sizes[1].1, "after it, faster: {sizes:?}");
        assert!(
            sizes[0].1 * FAST_BELOW_RATIO > len,
            "shrank less: {sizes:?}"
        );
        assert!(sizes[0].1 * 2 < len, "but enough to keep: {sizes:?}");
        assert_eq!(
            sizes[3].0, sizes[3].1,
            "after the easy chunk, level 1 again"
        );
    }

    #[test]
    fn bad_lengths_and_blocks_are_problems() {
        let body: Vec<u8> = (0..3000).map(|i| (i % 13 + i / 300) as u8).collect();
        for mode in [CompressMode::Always, CompressMode::Lz4] {
            let mut c = Compressor::new(mode, body.len()).unwrap();
            let codec = c.codec();
            let framed = c.compress_chunk(&chunk(&body)).unwrap().to_vec();
            let payload = &framed[CHUNK_HEADER_LEN..];
            let mut out = Vec::new();
            let mut p = payload.to_vec();
            p[EVENTS_PREFIX_LEN..BLOCK_START].copy_from_slice(&u32::MAX.to_le_bytes());
            assert!(matches!(
                decompress_events(codec, &p, &mut out),
                Err(CompressProblem::BadLength { .. })
            ));
            let mut p = payload.to_vec();
            p[EVENTS_PREFIX_LEN..BLOCK_START].copy_from_slice(&2999u32.to_le_bytes());
            assert!(decompress_events(codec, &p, &mut out).is_err());
            let mut p = payload.to_vec();
            p[EVENTS_PREFIX_LEN..BLOCK_START].copy_from_slice(&3001u32.to_le_bytes());
            assert!(decompress_events(codec, &p, &mut out).is_err());
            let mut p = payload.to_vec();
            p.truncate(p.len() - 1);
            assert!(decompress_events(codec, &p, &mut out).is_err());
            let mut p = payload.to_vec();
            p.push(0);
            assert!(decompress_events(codec, &p, &mut out).is_err());
            assert!(matches!(
                decompress_events(codec, &payload[..10], &mut out),
                Err(CompressProblem::TooShort(10))
            ));
        }
    }
}
