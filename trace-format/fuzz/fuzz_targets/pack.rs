//! Any bytes as a pack (`foresight pack`, layout in `cli/src/pack_file.rs`): the manifest
//! check (`Pack::open`), then each member decompressed through its SHA-256 (`Pack::unpack`)
//! and, when it checks, read as a trace (`Pack::open_member`). No input may panic; every error
//! names the pack; a member is never taken for more bytes than its declared size.
//!
//! The first byte chooses how the rest is used: odd, it is a manifest and what follows it, and
//! the target writes the prefix (magic, version, length, the manifest's SHA-256) in front, so
//! that the fuzzer reaches past the manifest's checksum (the manifest's length is the second
//! to fifth bytes, little-endian); even, the rest is the whole pack file as it is.
#![no_main]

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use foresight_cli::pack_file::{Pack, PACK_MAGIC, PACK_VERSION};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

/// Counts what a member decompresses to, keeping nothing.
struct Counted(u64);

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a scratch directory");
        let path = dir.path().join("fuzz.pack");
        (dir, path)
    });
    path
}

/// The pack file for `data`, per the first byte.
fn pack_bytes(data: &[u8]) -> Vec<u8> {
    let Some((&mode, rest)) = data.split_first() else {
        return Vec::new();
    };
    if mode & 1 == 0 {
        return rest.to_vec();
    }
    let (len, body) = match rest.split_first_chunk::<4>() {
        Some((len, body)) => (u32::from_le_bytes(*len) as usize, body),
        None => (0, rest),
    };
    let manifest = &body[..len.min(body.len())];
    let mut bytes = Vec::with_capacity(48 + body.len());
    bytes.extend_from_slice(&PACK_MAGIC);
    bytes.extend_from_slice(&PACK_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(manifest.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&Sha256::digest(manifest));
    bytes.extend_from_slice(body);
    bytes
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    std::fs::write(path, pack_bytes(data)).expect("writing the scratch pack");
    let shown = path.display().to_string();
    let names_pack = |e: &anyhow::Error| {
        let text = format!("{e:#}");
        assert!(text.contains(&shown), "an error that does not name the pack: {text}");
    };
    let pack = match Pack::open(path) {
        Ok(p) => p,
        Err(e) => return names_pack(&e),
    };
    for (i, t) in pack.manifest.traces.iter().enumerate() {
        let mut out = Counted(0);
        match pack.unpack(i, &mut out) {
            Ok(()) => assert_eq!(out.0, t.size, "a member checked at another size"),
            Err(e) => {
                names_pack(&e);
                assert!(
                    out.0 <= t.size.saturating_add(1),
                    "{} bytes written out of a member declared {} (one past it is the sign of more)",
                    out.0,
                    t.size
                );
                continue;
            }
        }
        // A member that checks is read as any trace is; its problems are the trace readers'
        // (fuzzed on their own), only a panic counts here.
        if let Ok(stream) = pack.open_member(i) {
            for _ in stream.merged() {}
        }
    }
});
