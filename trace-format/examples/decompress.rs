//! Decompression and decoding speed on one core, for recorded traces (`recorder/bench/
//! compress.sh` runs it on the traces it records):
//!
//! ```text
//! cargo run --release -p foresight-trace --example decompress -- [--reps N] [--decode-only] TRACE...
//! ```
//!
//! For each trace, the median of N runs (default 7) of: every event chunk decompressed alone
//! (`decompress`, LZ4 or zstd into a reused buffer), and decompressed and decoded into a reused event
//! buffer (`decompress+decode`, `TraceFile::for_each_chunk` on a one-thread pool: the reader's
//! own path, checksums and reference checks included). A trace with no compressed chunk shows
//! decoding alone. Figures are millions of decoded events per second of one core.
//! `--decode-only` skips the decompression-alone runs, so that the process's CPU time (as
//! `time` reports it) is the reader's path alone: on a shared machine, the user time of runs
//! with different N is steadier than the wall time this prints.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use foresight_trace::compress::decompress_events;
use foresight_trace::frame::{ChunkKind, CODEC_STORED};
use foresight_trace::TraceFile;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut reps = 7usize;
    let mut alone = true;
    loop {
        match args.first().map(String::as_str) {
            Some("--reps") if args.len() > 1 => {
                reps = args[1].parse().expect("--reps N");
                args.drain(..2);
            }
            Some("--decode-only") => {
                alone = false;
                args.remove(0);
            }
            _ => break,
        }
    }
    if args.is_empty() {
        eprintln!("usage: decompress [--reps N] [--decode-only] TRACE...");
        std::process::exit(2);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a one-thread pool");
    println!(
        "{:<40} {:>10} {:>9} {:>14} {:>22}",
        "trace", "events", "chunks", "decompress", "decompress+decode"
    );
    for path in &args {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let file =
            TraceFile::from_bytes(path.as_str(), bytes.clone()).unwrap_or_else(|e| panic!("{e}"));
        let compressed: Vec<_> = file
            .chunks()
            .iter()
            .filter(|c| c.kind == ChunkKind::Events && c.codec != CODEC_STORED)
            .map(|c| {
                let at = c.payload_offset as usize;
                (c.codec, &bytes[at..at + c.payload_len as usize])
            })
            .collect();
        let events = AtomicU64::new(0);
        let mut decompress = Vec::new();
        let mut both = Vec::new();
        let mut out = Vec::new();
        for _ in 0..reps {
            events.store(0, Ordering::Relaxed);
            let t = Instant::now();
            let problems = pool.install(|| {
                file.for_each_chunk(|c| {
                    events.fetch_add(c.events.len() as u64, Ordering::Relaxed);
                })
            });
            let s = t.elapsed().as_secs_f64();
            assert!(problems.iter().all(|p| !p.is_damage()), "{problems:?}");
            let n = events.load(Ordering::Relaxed) as f64;
            both.push(n / s / 1e6);
            let t = Instant::now();
            for &(codec, p) in compressed.iter().filter(|_| alone) {
                std::hint::black_box(decompress_events(codec, p, &mut out).expect("a good block"));
            }
            let s = t.elapsed().as_secs_f64();
            decompress.push(if compressed.is_empty() || !alone {
                0.0
            } else {
                n / s / 1e6
            });
        }
        let name = std::path::Path::new(path)
            .file_name()
            .map_or(path.clone(), |n| n.to_string_lossy().into_owned());
        println!(
            "{:<40} {:>10} {:>9} {:>10.1} M/s {:>18.1} M/s",
            name,
            events.load(Ordering::Relaxed),
            compressed.len(),
            median(decompress),
            median(both)
        );
    }
}
