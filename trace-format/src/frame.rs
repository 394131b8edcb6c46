//! The file header and chunk framing: the byte layout that lets a reader find every complete
//! chunk of a file, check it, and skip what it cannot use (`FORMAT.md`, "File layout").

/// The first eight bytes of every trace.
pub const FILE_MAGIC: [u8; 8] = *b"\x7fFSTRACE";
/// The major version of a trace that uses no required feature (FORMAT.md §2.1): what this
/// crate writes unless it may compress.
pub(crate) const VERSION_MAJOR: u16 = 1;
/// The major version of a trace that uses required features (its prefix lists them).
pub const VERSION_MAJOR_FEATURES: u16 = 2;
/// The minor version this crate writes, in the one minor sequence shared by all majors.
pub const VERSION_MINOR: u16 = 13;
/// Magic, major, minor, header length, header checksum: a 1.x file prefix.
pub const FILE_PREFIX_LEN: usize = 8 + 2 + 2 + 4 + 4;
/// A 2.x file prefix: the 1.x fields, then the required-features word.
pub const FILE_PREFIX_LEN_V2: usize = FILE_PREFIX_LEN + 8;
/// Required feature bit 0 (2.7): event chunks may be compressed (FORMAT.md §5.3).
pub const FEATURE_COMPRESSED_CHUNKS: u64 = 1;
/// Required feature bit 1 (2.9): event chunks may be compressed with zstd (codec 2,
/// FORMAT.md §5.3); always set together with bit 0.
pub const FEATURE_ZSTD_CHUNKS: u64 = 2;
/// Every required feature this reader knows.
pub(crate) const KNOWN_FEATURES: u64 = FEATURE_COMPRESSED_CHUNKS | FEATURE_ZSTD_CHUNKS;

/// Where the header starts in a file of this major version.
pub fn prefix_len(major: u16) -> usize {
    if major >= VERSION_MAJOR_FEATURES {
        FILE_PREFIX_LEN_V2
    } else {
        FILE_PREFIX_LEN
    }
}

/// The required features' names, for an error that names them.
pub fn feature_names(bits: u64) -> String {
    let mut names = Vec::new();
    for bit in 0..64 {
        if bits & (1 << bit) != 0 {
            names.push(match bit {
                0 => "bit 0 (compressed chunks)".to_string(),
                1 => "bit 1 (zstd-compressed chunks)".to_string(),
                b => format!("bit {b}"),
            });
        }
    }
    names.join(", ")
}

/// A chunk's codec (byte 5 of its header in a 2.x file, FORMAT.md §5.3): stored as is.
pub const CODEC_STORED: u8 = 0;
/// An LZ4 block after the events prefix and the decoded length.
pub const CODEC_LZ4: u8 = 1;
/// One zstd frame after the events prefix and the decoded length (2.9, feature bit 1).
pub const CODEC_ZSTD: u8 = 2;

/// The codec's name, for `stats` and for problems.
pub(crate) fn codec_name(codec: u8) -> &'static str {
    match codec {
        CODEC_STORED => "stored",
        CODEC_LZ4 => "LZ4",
        CODEC_ZSTD => "zstd",
        _ => "unknown",
    }
}
/// A header larger than this is refused before it is read.
pub(crate) const MAX_HEADER_LEN: u32 = 1 << 20;

/// The first four bytes of every chunk; a reader that lost its place searches for them.
pub(crate) const CHUNK_MAGIC: [u8; 4] = *b"\xf5CHK";
/// Magic, kind, flags, reserved, payload length, payload checksum, header checksum.
pub const CHUNK_HEADER_LEN: usize = 4 + 1 + 1 + 2 + 4 + 4 + 4;
/// A chunk payload larger than this is refused before it is read.
pub(crate) const MAX_PAYLOAD_LEN: u32 = 64 << 20;

/// Thread, chunk sequence number, base key, event count, start and end time.
pub const EVENTS_PREFIX_LEN: usize = 4 + 4 + 8 + 4 + 8 + 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
/// What a chunk holds (the kind byte of its header).
pub enum ChunkKind {
    /// Events of one thread.
    Events,
    /// Table records.
    Table,
    /// The trailer.
    Trailer,
    /// A kind this reader does not know; it is skipped.
    Unknown(u8),
}

impl ChunkKind {
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            Self::Events => 1,
            Self::Table => 2,
            Self::Trailer => 3,
            Self::Unknown(b) => b,
        }
    }

    pub(crate) fn from_byte(b: u8) -> Self {
        match b {
            1 => Self::Events,
            2 => Self::Table,
            3 => Self::Trailer,
            b => Self::Unknown(b),
        }
    }
}

/// The fixed prefix of an event chunk's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventsPrefix {
    /// The thread whose events the chunk holds.
    pub thread: u32,
    /// 0 for the first chunk of a thread, then 1, 2, …: a gap means a chunk was lost.
    pub sequence: u32,
    /// The key of the thread's last event before this chunk (0 before its first).
    pub base_key: u64,
    /// Events in the chunk (extension events not counted).
    pub event_count: u32,
    /// Wall-clock time of the first and last event, nanoseconds since the Unix epoch (0 when
    /// the producer has no clock).
    pub start_ns: u64,
    /// Wall-clock time of the last event, as `start_ns`.
    pub end_ns: u64,
}

impl EventsPrefix {
    pub(crate) fn write_to(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.thread.to_le_bytes());
        out[4..8].copy_from_slice(&self.sequence.to_le_bytes());
        out[8..16].copy_from_slice(&self.base_key.to_le_bytes());
        out[16..20].copy_from_slice(&self.event_count.to_le_bytes());
        out[20..28].copy_from_slice(&self.start_ns.to_le_bytes());
        out[28..36].copy_from_slice(&self.end_ns.to_le_bytes());
    }

    /// Parses the prefix at the start of `b`; `None` when `b` is too short.
    pub fn read_from(b: &[u8]) -> Option<Self> {
        if b.len() < EVENTS_PREFIX_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Some(Self {
            thread: u32_at(0),
            sequence: u32_at(4),
            base_key: u64_at(8),
            event_count: u32_at(16),
            start_ns: u64_at(20),
            end_ns: u64_at(28),
        })
    }
}

/// Writes the chunk header for `payload` into `header` (`CHUNK_HEADER_LEN` bytes).
pub fn write_chunk_header(header: &mut [u8], kind: ChunkKind, payload: &[u8]) {
    write_chunk_header_coded(header, kind, CODEC_STORED, payload)
}

/// The same with a codec (FORMAT.md §4.1; only in a 2.x file with compressed chunks).
pub fn write_chunk_header_coded(header: &mut [u8], kind: ChunkKind, codec: u8, payload: &[u8]) {
    header[0..4].copy_from_slice(&CHUNK_MAGIC);
    header[4] = kind.to_byte();
    header[5] = codec;
    header[6..8].copy_from_slice(&0u16.to_le_bytes());
    header[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    header[12..16].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let hcrc = crc32fast::hash(&header[0..16]);
    header[16..20].copy_from_slice(&hcrc.to_le_bytes());
}

/// A parsed chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// What the chunk holds.
    pub kind: ChunkKind,
    /// The codec byte (`CODEC_STORED` in a 1.x file).
    pub flags: u8,
    /// Bytes of payload after the header.
    pub payload_len: u32,
    pub(crate) payload_crc: u32,
}

/// Why bytes are not a chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkHeaderProblem {
    /// The bytes do not start with the chunk magic.
    NoMagic,
    /// The header's own checksum does not match.
    BadChecksum,
    /// The payload length is above `MAX_PAYLOAD_LEN`.
    TooLarge(u32),
}

/// Parses the chunk header at the start of `b`, checking its magic, its checksum and its length.
pub fn read_chunk_header(b: &[u8]) -> Result<ChunkHeader, ChunkHeaderProblem> {
    if b.len() < CHUNK_HEADER_LEN || b[0..4] != CHUNK_MAGIC {
        return Err(ChunkHeaderProblem::NoMagic);
    }
    let stored = u32::from_le_bytes(b[16..20].try_into().unwrap());
    if crc32fast::hash(&b[0..16]) != stored {
        return Err(ChunkHeaderProblem::BadChecksum);
    }
    let payload_len = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if payload_len > MAX_PAYLOAD_LEN {
        return Err(ChunkHeaderProblem::TooLarge(payload_len));
    }
    Ok(ChunkHeader {
        kind: ChunkKind::from_byte(b[4]),
        flags: b[5],
        payload_len,
        payload_crc: u32::from_le_bytes(b[12..16].try_into().unwrap()),
    })
}

/// Where one chunk is in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRef {
    /// Offset of the chunk header.
    pub offset: u64,
    /// What the chunk holds.
    pub kind: ChunkKind,
    /// Offset and length of the payload.
    pub payload_offset: u64,
    /// Bytes of payload.
    pub payload_len: u32,
    pub(crate) payload_crc: u32,
    /// How the payload is stored (FORMAT.md §5.3): `CODEC_STORED` in every 1.x file.
    pub codec: u8,
}
