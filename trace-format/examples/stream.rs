//! Reads a trace the ways `foresight-trace` offers and prints events per second and the peak
//! resident memory of the process (Linux `VmHWM`), one way per run so that peaks do not mix:
//!
//! ```text
//! cargo run --release -p foresight-trace --example stream -- synth FILE THREADS EVENTS_PER_THREAD
//! cargo run --release -p foresight-trace --example stream -- merged|threads|chunks|decode FILE
//! ```
//!
//! `synth` writes a lock-heavy trace (two nested locks per iteration, as the codec benchmark's);
//! `merged` streams it in the merged order (`TraceStream::merged`), `threads` streams each
//! thread in turn (`TraceStream::thread_events`), `chunks` decodes every chunk into a reused
//! buffer on one core (`TraceFile::for_each_chunk`, the codec's floor), `decode` decodes it
//! into memory (`Trace::open`) and walks `Trace::merged`.

use std::time::Instant;

use foresight_trace::event::{Event, EventKind, LockMode};
use foresight_trace::stream::TraceStream;
use foresight_trace::tables::{
    ClassKey, EndReason, Frame, Header, ObjectInfo, ObjectKind, Ordering, SiteInfo, ThreadInfo,
    Trailer,
};
use foresight_trace::{ChunkWriter, TableRecord, Trace, TraceWriter};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        "usage: stream synth FILE THREADS EVENTS_PER_THREAD | merged|threads|chunks|decode FILE";
    let (mode, path) = match args.as_slice() {
        [mode, path, ..] => (mode.as_str(), path.as_str()),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let start = Instant::now();
    let (events, checksum) = match mode {
        "synth" => {
            let threads: u32 = args.get(2).and_then(|a| a.parse().ok()).expect(usage);
            let per_thread: u64 = args.get(3).and_then(|a| a.parse().ok()).expect(usage);
            synth(path, threads, per_thread);
            println!("wrote {path}");
            return;
        }
        "merged" => {
            let stream = TraceStream::open(path).expect("the trace opens");
            let mut it = stream.merged();
            let mut sum = 0u64;
            let mut n = 0u64;
            for m in it.by_ref() {
                sum = sum.wrapping_add(m.event.key ^ m.thread as u64);
                n += 1;
            }
            report_problems(&it.problems());
            (n, sum)
        }
        "threads" => {
            let stream = TraceStream::open(path).expect("the trace opens");
            let mut sum = 0u64;
            let mut n = 0u64;
            let threads: Vec<_> = stream.threads().collect();
            for t in threads {
                for ev in stream.thread_events(t) {
                    sum = sum.wrapping_add(ev.key);
                    n += 1;
                }
            }
            (n, sum)
        }
        "chunks" => {
            let file = foresight_trace::TraceFile::open(path).expect("the trace opens");
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap();
            let n = std::sync::atomic::AtomicU64::new(0);
            let sum = std::sync::atomic::AtomicU64::new(0);
            pool.install(|| {
                file.for_each_chunk(|c| {
                    n.fetch_add(c.events.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    let s: u64 = c.events.iter().map(|e| e.key).fold(0, u64::wrapping_add);
                    sum.fetch_add(s, std::sync::atomic::Ordering::Relaxed);
                })
            });
            (n.into_inner(), sum.into_inner())
        }
        "decode" => {
            let trace = Trace::open(path).expect("the trace opens");
            let mut sum = 0u64;
            let mut n = 0u64;
            for m in trace.merged() {
                sum = sum.wrapping_add(m.event.key ^ m.thread as u64);
                n += 1;
            }
            report_problems(&trace.problems);
            (n, sum)
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{mode}: {events} events in {secs:.3} s: {:.1} M events/s; peak RSS {} (checksum {checksum:x})",
        events as f64 / secs / 1e6,
        peak_rss().unwrap_or_else(|| "unknown".into())
    );
}

fn report_problems(problems: &[foresight_trace::Problem]) {
    for p in problems.iter().take(5) {
        eprintln!("problem: {p}");
    }
}

/// The process's peak resident set size, from `/proc/self/status`.
fn peak_rss() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line["VmHWM:".len()..].trim().to_string())
}

fn synth(path: &str, threads: u32, per_thread: u64) {
    let header = Header {
        producer: "stream example".into(),
        pid: 1,
        parent_pid: 0,
        command: vec![],
        start_unix_ns: 0,
        ordering: Ordering::GlobalSequence,
        pointer_width: 8,
        stack_depth: 1,
    };
    let file = std::io::BufWriter::new(std::fs::File::create(path).expect("create the file"));
    let mut w = TraceWriter::new(file, &header).expect("write the header");
    // The tables a recorder would write, so that reading pays for its reference checks as it
    // does on a real trace.
    let mut tables = Vec::new();
    for id in 0..threads {
        tables.push(TableRecord::Thread(ThreadInfo {
            id,
            os_tid: 100 + id,
            parent: id.checked_sub(1),
            name: None,
        }));
        for lock in [id * 2, id * 2 + 1] {
            tables.push(TableRecord::Object(ObjectInfo {
                id: lock,
                kind: ObjectKind::Mutex,
                address: 0x5000 + lock as u64 * 64,
                generation: 0,
                class: ClassKey::FirstUse(0),
            }));
        }
    }
    for id in 0..40 {
        tables.push(TableRecord::Site(SiteInfo {
            id,
            frames: vec![Frame {
                module: 0,
                offset: 0x1000 + id as u64 * 16,
            }],
            first_caller: None,
        }));
    }
    for r in &tables {
        w.table(r).expect("write a table record");
    }
    // Threads interleave by key as they would in a run: thread t's i-th iteration takes keys
    // near (i * threads + t) * 8. Events are encoded as they are made, a chunk at a time, so
    // that a trace of any length is written in little memory.
    for t in 0..threads {
        let mut chunk = ChunkWriter::new(t, 64 << 10);
        let (a, b) = (t * 2, t * 2 + 1);
        let mut written = 0u64;
        let mut push = |w: &mut TraceWriter<_>, chunk: &mut ChunkWriter, key: u64, kind| {
            if written < per_thread {
                if chunk.is_full() {
                    w.write_chunk(chunk).expect("write a chunk");
                }
                chunk.push(&Event { key, kind }).expect("keys increase");
                written += 1;
            }
        };
        for i in 0..per_thread.div_ceil(6) {
            let mut key = (i * threads as u64 + t as u64) * 8 + 1;
            let site = (i % 7) as u32;
            let mode = LockMode::Exclusive;
            for (lock, s) in [(a, site), (b, site + 10)] {
                let request = EventKind::LockRequest {
                    lock,
                    mode,
                    site: s,
                };
                push(&mut w, &mut chunk, key, request);
                key += 1;
                push(
                    &mut w,
                    &mut chunk,
                    key,
                    EventKind::LockAcquired { lock, mode },
                );
            }
            for (lock, s) in [(b, site + 20), (a, site + 30)] {
                key += 1;
                push(
                    &mut w,
                    &mut chunk,
                    key,
                    EventKind::LockRelease { lock, site: s },
                );
            }
        }
        w.write_chunk(&mut chunk).expect("write a chunk");
    }
    w.finish(Trailer {
        end_unix_ns: 0,
        reason: EndReason::Synthetic,
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    })
    .expect("write the trailer");
}
