//! `foresight pack TRACE… -o FILE`: the traces of a run in one file for a bug report:
//! symbolised, each compressed with zstd at a high level, with a JSON manifest and SHA-256
//! checksums. `analyze`, `check`, `stats` and `graph` read a pack directly (`run_files.rs`).
//! The file's layout is in `pack_file.rs`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use sha2::{Digest, Sha256};

use foresight_symbols::{symbolize_in_place, SymbolizeOptions};
use foresight_trace::TraceFile;

use super::pack_file::{hex, Manifest, PackedTrace, PACK_MAGIC, PACK_VERSION, PREFIX_LEN};
use super::run_files::{expand, Source};

#[derive(clap::Args)]
#[command(after_help = "\
Each TRACE stands for its run: PATH.<pid> and PATH.<pid>.<n> beside it (the processes the \
command forked and the programs it executed) go into the pack too. Every trace is symbolised \
first (on a copy: the given files are not changed), so the pack reads without the binaries, \
then compressed with zstd. `foresight analyze FILE`, `check`, `stats` and `graph` read the \
pack as they read the traces; findings name each trace by its name in the pack.")]
pub struct Args {
    /// The traces (or runs) to pack.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// The pack to write.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// zstd compression level (1 to 22; higher is smaller and slower).
    #[arg(long, default_value_t = 19, value_parser = clap::value_parser!(i32).range(1..=22))]
    level: i32,
    /// Pack the traces as they are, without symbolising them.
    #[arg(long)]
    no_symbolize: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let inputs = expand(&args.traces, false)?;
    let out_dir = match args.output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if let Ok(meta) = std::fs::symlink_metadata(&args.output) {
        if !meta.is_file()
            || !(meta.len() == 0 || super::run_files::starts_with(&args.output, &PACK_MAGIC))
        {
            bail!(
                "{} exists and is not a foresight pack; not overwriting it",
                args.output.display()
            );
        }
    }
    // Beside the output, so that the final rename stays on one file system; a fresh private
    // name, removed with everything in it.
    let work = super::safe_fs::private_dir_in(&out_dir, ".foresight-pack-")
        .with_context(|| format!("cannot create a working directory in {}", out_dir.display()))?;
    let mut traces = Vec::new();
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    let mut raw_total = 0u64;
    let mut names = std::collections::HashSet::new();
    for (i, input) in inputs.iter().enumerate() {
        let bytes = match &input.source {
            Source::Packed { pack, member } => pack.read_member(*member)?,
            Source::File(p) => {
                let copy = work.path().join(format!("trace-{i}"));
                std::fs::copy(p, &copy).with_context(|| format!("cannot copy {}", p.display()))?;
                if !args.no_symbolize {
                    match symbolize_in_place(&copy, &SymbolizeOptions::default()) {
                        Ok(s) => {
                            for w in s.warnings() {
                                say!("foresight: warning: {}: {w}", input.name);
                            }
                        }
                        Err(e) => {
                            say!("foresight: warning: {}: not symbolised: {e}", input.name)
                        }
                    }
                }
                std::fs::read(&copy).with_context(|| format!("cannot read {}", copy.display()))?
            }
        };
        // A whole-file zstd -19 gains far more on plain chunks than on compressed chunks (LZ4
        // blocks or zstd frames made one by one): a compressed trace is packed
        // as its plain (1.x) trace, unless it is damaged (then as it is, damage and all).
        let plain = match foresight_trace::compress::to_plain(&bytes) {
            Ok(std::borrow::Cow::Owned(plain)) => Some(plain),
            Ok(std::borrow::Cow::Borrowed(_)) => None,
            Err(e) => {
                say!(
                    "foresight: warning: {}: packed as recorded, compressed chunks and all: {e}",
                    input.name
                );
                None
            }
        };
        let bytes = plain.unwrap_or(bytes);
        let file =
            TraceFile::from_bytes(input.name.clone(), bytes.clone()).map_err(|e| anyhow!("{e}"))?;
        let h = file.header();
        let name = Path::new(&input.name)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| input.name.clone());
        let mut unique = name.clone();
        let mut n = 2;
        while !names.insert(unique.clone()) {
            unique = format!("{name}~{n}");
            n += 1;
        }
        let packed = compress(&bytes, args.level)
            .with_context(|| format!("cannot compress {}", input.name))?;
        raw_total += bytes.len() as u64;
        traces.push(PackedTrace {
            name: unique,
            pid: h.pid,
            parent_pid: h.parent_pid,
            command: h.command.clone(),
            events: file.trailer().map(|t| t.events),
            threads: file.tables().threads.len() as u64,
            size: bytes.len() as u64,
            sha256: hex(&Sha256::digest(&bytes)),
            offset: 0,
            packed_size: packed.len() as u64,
        });
        blobs.push(packed);
    }
    let mut manifest = Manifest {
        format: PACK_VERSION,
        producer: format!("foresight {}", env!("CARGO_PKG_VERSION")),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        level: args.level,
        traces,
    };
    let tmp = work.path().join("pack");
    {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&tmp)
                .with_context(|| format!("cannot write {}", tmp.display()))?,
        );
        write_pack(&mut f, &mut manifest, &blobs)?;
        f.into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()
            .with_context(|| format!("cannot write {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, &args.output)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    let packed_total = std::fs::metadata(&args.output)
        .map(|m| m.len())
        .unwrap_or(0);
    say!(
        "foresight: packed {} into {} ({} bytes from {}, {})",
        foresight_analyzer::report::counted(manifest.traces.len(), "trace", "traces"),
        args.output.display(),
        packed_total,
        raw_total,
        ratio(raw_total, packed_total)
    );
    Ok(ExitCode::SUCCESS)
}

/// Lays the pack out: the prefix, the manifest (its traces' offsets filled in), the frames.
fn write_pack(
    out: &mut impl Write,
    manifest: &mut Manifest,
    blobs: &[Vec<u8>],
) -> anyhow::Result<()> {
    // The offsets depend on the manifest's length, which depends on the offsets' digits: lay
    // out until it is stable (twice at most in practice).
    let mut json = Vec::new();
    for _ in 0..8 {
        json = serde_json::to_vec_pretty(&*manifest)?;
        let mut at = PREFIX_LEN + json.len() as u64;
        let mut moved = false;
        for (t, b) in manifest.traces.iter_mut().zip(blobs) {
            moved |= t.offset != at;
            t.offset = at;
            at += b.len() as u64;
        }
        if !moved {
            break;
        }
    }
    out.write_all(&PACK_MAGIC)?;
    out.write_all(&PACK_VERSION.to_le_bytes())?;
    out.write_all(&(json.len() as u32).to_le_bytes())?;
    out.write_all(&Sha256::digest(&json))?;
    out.write_all(&json)?;
    for b in blobs {
        out.write_all(b)?;
    }
    Ok(())
}

/// `6.0× smaller`, as `stats` and `pack` say it.
pub fn ratio(raw: u64, packed: u64) -> String {
    if packed == 0 {
        return "empty".into();
    }
    format!("{:.1}× smaller", raw as f64 / packed as f64)
}

/// One zstd frame of `bytes` at `level`, on every core; the content size is in the frame.
fn compress(bytes: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), level)?;
    let workers = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    if workers > 1 && bytes.len() > 1 << 20 {
        enc.multithread(workers)?;
    }
    enc.include_contentsize(true)?;
    enc.include_checksum(true)?;
    enc.set_pledged_src_size(Some(bytes.len() as u64))?;
    enc.write_all(bytes)?;
    enc.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack_file::Pack;

    fn small_pack() -> Vec<u8> {
        let members: [(&str, Vec<u8>); 2] = [
            ("a.trace", b"first trace bytes, first trace bytes".to_vec()),
            ("a.trace.12", (0..3000u32).map(|i| (i % 13) as u8).collect()),
        ];
        let mut traces = Vec::new();
        let mut blobs = Vec::new();
        for (name, bytes) in &members {
            let packed = compress(bytes, 19).unwrap();
            traces.push(PackedTrace {
                name: name.to_string(),
                pid: 1,
                parent_pid: 0,
                command: vec!["x".into()],
                events: Some(3),
                threads: 1,
                size: bytes.len() as u64,
                sha256: hex(&Sha256::digest(bytes)),
                offset: 0,
                packed_size: packed.len() as u64,
            });
            blobs.push(packed);
        }
        let mut manifest = Manifest {
            format: PACK_VERSION,
            producer: "test".into(),
            created_unix: 0,
            level: 19,
            traces,
        };
        let mut out = Vec::new();
        write_pack(&mut out, &mut manifest, &blobs).unwrap();
        out
    }

    fn read_all(path: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
        let pack = Pack::open(path)?;
        (0..pack.manifest.traces.len())
            .map(|i| pack.read_member(i))
            .collect()
    }

    #[test]
    fn every_damaged_byte_of_a_pack_is_an_error_or_harmless_never_a_panic() {
        let dir = std::env::temp_dir().join(format!("foresight-pack-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = small_pack();
        let path = dir.join("p.fspk");
        std::fs::write(&path, &good).unwrap();
        let members = read_all(&path).unwrap();
        assert_eq!(members[1].len(), 3000);
        let mut caught = 0;
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x41;
            std::fs::write(&path, &bad).unwrap();
            match read_all(&path) {
                Err(e) => {
                    caught += 1;
                    assert!(e.to_string().contains("p.fspk"), "{e}");
                }
                // A byte JSON does not care about (white space that stays white space).
                Ok(read) => assert_eq!(read, members, "byte {at} changed a trace unnoticed"),
            }
        }
        assert!(caught > good.len() * 9 / 10, "{caught} of {}", good.len());
        for len in 0..good.len() {
            std::fs::write(&path, &good[..len]).unwrap();
            assert!(read_all(&path).is_err(), "cut at {len}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hex_is_lowercase_and_padded() {
        assert_eq!(hex(&[0, 0xab, 0x0f]), "00ab0f");
    }

    #[test]
    fn a_frame_decompresses_to_what_was_compressed() {
        let data: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 7).to_le_bytes())
            .collect();
        let c = compress(&data, 19).unwrap();
        assert!(c.len() * 50 < data.len());
        assert_eq!(zstd::decode_all(&c[..]).unwrap(), data);
    }
}
