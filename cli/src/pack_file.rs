//! The pack file: what `foresight pack` writes and `analyze`, `check`, `stats` and `graph` read
//! (`run_files.rs`).
//!
//! Layout (all integers little-endian):
//!
//! | offset | size | what |
//! |---|---|---|
//! | 0 | 8 | magic `FSIGHTPK` |
//! | 8 | 4 | pack format version (1) |
//! | 12 | 4 | manifest length M (at most 16 MiB) |
//! | 16 | 32 | SHA-256 of the manifest |
//! | 48 | M | the manifest, JSON ([`Manifest`]) |
//! | … | … | each trace as one zstd frame, at its `offset` (from the start of the pack), `packed_size` bytes |
//!
//! A reader checks the manifest's checksum, that every trace lies inside the file after the
//! manifest, and each trace's size and SHA-256 once decompressed (decompression stops at the
//! declared size). Any failure is an error that names the pack, the trace and the offset.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const PACK_MAGIC: [u8; 8] = *b"FSIGHTPK";
pub const PACK_VERSION: u32 = 1;
pub const PREFIX_LEN: u64 = 48;
const MAX_MANIFEST: u32 = 16 << 20;
/// No trace of a pack is believed to be larger than this once decompressed.
const MAX_TRACE: u64 = 1 << 40;

/// What a pack holds, as its manifest says.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// `foresight <version>`.
    pub producer: String,
    pub created_unix: u64,
    /// The zstd level the traces were compressed at.
    pub level: i32,
    pub traces: Vec<PackedTrace>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PackedTrace {
    /// The trace's name (its file name when packed), unique in the pack.
    pub name: String,
    pub pid: u32,
    pub parent_pid: u32,
    pub command: Vec<String>,
    /// Events, as the trailer counts them (`null` for a trace cut short).
    pub events: Option<u64>,
    pub threads: u64,
    /// The trace's size.
    pub size: u64,
    /// SHA-256 of the trace, hexadecimal.
    pub sha256: String,
    /// Where its zstd frame starts in the pack, and its length.
    pub offset: u64,
    pub packed_size: u64,
}

/// An opened pack: its manifest checked; traces are read on demand.
pub struct Pack {
    pub path: PathBuf,
    pub manifest: Manifest,
    pub file_len: u64,
    file: std::fs::File,
}

impl Pack {
    pub fn open(path: &Path) -> anyhow::Result<Pack> {
        use std::os::unix::fs::FileExt;
        let shown = path.display();
        let file = std::fs::File::open(path).with_context(|| format!("cannot open {shown}"))?;
        let file_len = file.metadata()?.len();
        let mut prefix = [0u8; PREFIX_LEN as usize];
        if file_len < PREFIX_LEN {
            bail!(
                "{shown}: not a foresight pack: {file_len} bytes, shorter than the {PREFIX_LEN}-byte \
                 prefix (offset {file_len})"
            );
        }
        file.read_exact_at(&mut prefix, 0)
            .with_context(|| format!("{shown}: cannot read the pack's prefix at offset 0"))?;
        if prefix[..8] != PACK_MAGIC {
            bail!("{shown}: not a foresight pack (no FSIGHTPK at offset 0)");
        }
        let version = u32::from_le_bytes(prefix[8..12].try_into().expect("4 bytes"));
        if version != PACK_VERSION {
            bail!(
                "{shown}: pack format version {version} at offset 8; this foresight reads version \
                 {PACK_VERSION} (a newer foresight wrote it?)"
            );
        }
        let len = u32::from_le_bytes(prefix[12..16].try_into().expect("4 bytes"));
        if len > MAX_MANIFEST || PREFIX_LEN + len as u64 > file_len {
            bail!(
                "{shown}: manifest length {len} at offset 12 is impossible (the pack has \
                 {file_len} bytes)"
            );
        }
        let mut manifest = vec![0u8; len as usize];
        file.read_exact_at(&mut manifest, PREFIX_LEN)
            .with_context(|| format!("{shown}: cannot read the manifest at offset {PREFIX_LEN}"))?;
        if Sha256::digest(&manifest)[..] != prefix[16..48] {
            bail!(
                "{shown}: the manifest (offset {PREFIX_LEN}, {len} bytes) does not match its \
                 checksum at offset 16: the pack is damaged"
            );
        }
        let manifest: Manifest = serde_json::from_slice(&manifest).map_err(|e| {
            anyhow!("{shown}: the manifest at offset {PREFIX_LEN} is not valid: {e}")
        })?;
        let data_start = PREFIX_LEN + len as u64;
        let mut names = std::collections::HashSet::new();
        for t in &manifest.traces {
            let end = t.offset.checked_add(t.packed_size);
            if t.offset < data_start || end.is_none_or(|e| e > file_len) {
                bail!(
                    "{shown}: trace {} is said to lie at offset {} ({} bytes), outside the \
                     pack's data ({data_start}..{file_len}): the pack is damaged or cut short",
                    t.name,
                    t.offset,
                    t.packed_size
                );
            }
            if t.size > MAX_TRACE {
                bail!(
                    "{shown}: trace {} claims an impossible size {}",
                    t.name,
                    t.size
                );
            }
            if t.name.is_empty() || !names.insert(t.name.as_str()) {
                bail!(
                    "{shown}: the manifest names trace {:?} twice or not at all",
                    t.name
                );
            }
        }
        Ok(Pack {
            path: path.to_path_buf(),
            manifest,
            file_len,
            file,
        })
    }

    /// The trace `i`, decompressed and checked, in memory (to pack it again). It is
    /// decompressed into a temporary file first, so that memory is taken only for a trace
    /// whose size and checksum are right.
    pub fn read_member(&self, i: usize) -> anyhow::Result<Vec<u8>> {
        let mut file = self.unpack_to_temp(i)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| {
            anyhow!(
                "{}: trace {}: cannot read it back from its temporary file: {e}",
                self.path.display(),
                self.manifest.traces[i].name
            )
        })?;
        Ok(bytes)
    }

    /// The trace `i`, checked, for one streaming pass: decompressed into a temporary file
    /// (unnamed, private), which the stream reads as it reads any trace file, so that memory
    /// does not grow with the trace. The stream is named by the member's name, and keeps of
    /// the tables what `options` asks for.
    pub fn open_member(
        &self,
        i: usize,
        options: foresight_trace::StreamOptions,
    ) -> anyhow::Result<foresight_trace::TraceStream> {
        let file = self.unpack_to_temp(i)?;
        let name = self.manifest.traces[i].name.clone();
        foresight_trace::TraceStream::from_file_with(name, file, options)
            .map_err(|e| anyhow!("{}: {e}", self.path.display()))
    }

    /// Decompresses trace `i` into a new unnamed temporary file, checked; the file is at its
    /// start.
    fn unpack_to_temp(&self, i: usize) -> anyhow::Result<std::fs::File> {
        use std::io::Seek;
        let t = &self.manifest.traces[i];
        let temp = tempfile::tempfile().map_err(|e| {
            anyhow!(
                "{}: trace {}: cannot create a temporary file in {} to decompress it into: {e} \
                 (set TMPDIR to a directory with room)",
                self.path.display(),
                t.name,
                std::env::temp_dir().display()
            )
        })?;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, temp);
        self.unpack(i, &mut out)?;
        let mut file = out.into_inner().map_err(|e| {
            anyhow!(
                "{}: trace {}: cannot write its temporary file: {}",
                self.path.display(),
                t.name,
                e.error()
            )
        })?;
        file.rewind().map_err(|e| {
            anyhow!(
                "{}: trace {}: cannot read its temporary file: {e}",
                self.path.display(),
                t.name
            )
        })?;
        Ok(file)
    }

    /// Decompresses trace `i` into `out` as it goes, through its SHA-256: the compressed bytes
    /// are read from the pack's file, no further than the member's end, and decompression
    /// stops one byte past the declared size, so that neither a false size nor a frame that
    /// expands without end costs more than a buffer of memory. The size and the checksum are
    /// checked at the end; what `out` holds is to be used only then.
    pub fn unpack(&self, i: usize, out: &mut impl Write) -> anyhow::Result<()> {
        let t = &self.manifest.traces[i];
        let shown = self.path.display();
        let at = || format!("{shown}: trace {} at offset {}", t.name, t.offset);
        let packed = Region {
            file: &self.file,
            at: t.offset,
            end: t.offset + t.packed_size,
        };
        let decoder = zstd::stream::Decoder::new(packed)
            .map_err(|e| anyhow!("{}: cannot decompress it: {}", at(), zstd_error(&e)))?;
        let mut decoder = decoder.take(t.size + 1);
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let n = match decoder.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => bail!("{}: {}", at(), zstd_error(&e)),
            };
            total += n as u64;
            hash.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| anyhow!("{}: cannot write it out: {e}", at()))?;
        }
        if total != t.size {
            bail!(
                "{}: decompresses to {}{} bytes, not the {} the manifest says",
                at(),
                if total > t.size { "more than " } else { "" },
                total.min(t.size),
                t.size
            );
        }
        if hex(&hash.finalize()) != t.sha256 {
            bail!("{}: its SHA-256 does not match the manifest's", at());
        }
        Ok(())
    }
}

/// What went wrong decompressing, in words: zstd's allocation failures and window limit are
/// memory, not damage.
fn zstd_error(e: &std::io::Error) -> String {
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    if lower.contains("memory") {
        format!("not enough memory to decompress it ({text})")
    } else {
        format!("corrupt compressed data ({text})")
    }
}

/// The bytes of one member in the pack's file, read with positioned reads up to its end.
struct Region<'a> {
    file: &'a std::fs::File,
    at: u64,
    end: u64,
}

impl Read for Region<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let left = self.end.saturating_sub(self.at);
        let want = (buf.len() as u64).min(left) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the pack ends at offset {} (it shrank)", self.at),
            ));
        }
        self.at += n as u64;
        Ok(n)
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
