//! Race analysis speed and memory on long traces, one measurement per process so that peaks do
//! not mix (`analyzer/bench/race_speed.sh` runs them all and prints the table):
//!
//! ```text
//! race_bench synth FILE EVENTS [WORKERS]   write an access-heavy synthetic trace
//! race_bench stream FILE                   the merged stream, converted: the floor of any pass
//! race_bench races FILE                    the happens-before race pass alone
//! race_bench walk FILE                     `analyze`'s walk without the race pass: the merged
//!                                          read, the model, its clocks and reads-from
//! race_bench analyze FILE                  what `foresight analyze` does: the walk (deadlock
//!                                          model and race pass), then every analysis,
//!                                          sync-preserving race prediction included
//! ```
//!
//! Both run on one thread, as `foresight analyze` does.
//!
//! Each prints one line of `key=value` fields: events, seconds, millions of events per second
//! of wall time and of CPU time, the peak resident set size of the process (Linux `VmHWM`) and what was found.
//!
//! The synthetic program: `WORKERS` threads (4 unless told), each with a private heap block,
//! reading a table the main thread filled before creating them, touching its stack; every 16th
//! round it updates a shared histogram under one mutex; every 64th round it passes a token to
//! the next worker through slots each written under the worker's own lock, the hand-off
//! ordered only by the critical sections of a third lock — pairs that happens-before orders
//! only through lock hand-offs, with disjoint locksets: candidates for the sync-preserving
//! predictor (which confirms them: one predicted race). Addresses jump between the heap, the
//! globals and the stack, as a recorded program's do.

use std::io::BufWriter;
use std::sync::Arc;
use std::time::Instant;

use foresight_analyzer::analysis::analyze;
use foresight_analyzer::model::{walk, ModelPass, SegmentBounds};
use foresight_analyzer::options::Options;
use foresight_analyzer::races::RacePass;
use foresight_analyzer::stream::{Op, Pass, Runs, Stream, StreamEvent};
use foresight_trace::event::{Event, EventKind, LockMode};
use foresight_trace::tables::{
    ClassKey, EndReason, Frame, Header, ObjectInfo, ObjectKind, Ordering, SiteInfo, ThreadInfo,
    Trailer,
};
use foresight_trace::{ChunkWriter, TableRecord, TraceStream, TraceWriter};

const USAGE: &str = "usage: race_bench synth FILE EVENTS [WORKERS] | stream FILE | \
                     races FILE | walk FILE | analyze FILE";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, path) = match args.as_slice() {
        [mode, path, ..] => (mode.as_str(), path.as_str()),
        _ => usage(),
    };
    let number = |i: usize, default: u64| -> u64 {
        args.get(i)
            .map_or(Some(default), |a| a.parse().ok())
            .unwrap_or_else(|| usage())
    };
    match mode {
        "synth" => {
            let events = number(2, 100_000_000);
            let workers = number(3, 4) as u32;
            let start = Instant::now();
            let written = synth(path, events, workers);
            println!(
                "synth file={path} events={written} workers={workers} secs={:.2}",
                start.elapsed().as_secs_f64()
            );
        }
        "stream" => measure("stream", path, |stream| {
            let walk = Stream::of_stream(stream);
            let mut merged = stream.merged();
            let mut pass = Floor(0);
            let events = walk.walk(Runs(&mut merged), &mut pass, &mut |_| {});
            (events, format!("checksum={:x}", pass.0))
        }),
        "races" => measure("races", path, |stream| {
            let walk = Stream::of_stream(stream);
            let threads = stream.threads().count();
            let mut merged = stream.merged();
            let mut pass = RacePass::new(
                threads,
                Some(stream.tables()),
                foresight_analyzer::races::DEFAULT_MEMORY_MIB << 20,
            );
            let events = walk.walk(Runs(&mut merged), &mut pass, &mut |_| {});
            let out = pass.finish();
            let candidates: u64 = out.candidates.iter().map(|c| c.count).sum();
            (
                events,
                format!(
                    "accesses={} race_pairs={} candidate_pairs={} candidate_instances={} \
                     peak_granules={}",
                    out.accesses,
                    out.races.len(),
                    out.candidates.len(),
                    candidates,
                    out.peak_granules
                ),
            )
        }),
        "walk" => measure("walk", path, |stream| {
            // What `analyze`'s walk costs without the race pass: the merged read, the model,
            // its clocks and reads-from.
            let model = ModelPass::of_stream(stream, path).without_race_pass();
            let stream_walk = Stream::of_stream(stream);
            let mut merged = stream.merged();
            let run = walk(
                &stream_walk,
                model,
                Runs(&mut merged),
                &mut |_| {},
                SegmentBounds::default(),
                &mut |_| {},
                None,
            );
            (run.events, String::new())
        }),
        "analyze" => measure("analyze", path, |stream| {
            let walk_start = Instant::now();
            // As `foresight analyze` does with a file: marks read again when asked for.
            let model = ModelPass::of_stream(stream, path).with_marks_from(stream.clone());
            let stream_walk = Stream::of_stream(stream);
            let mut merged = stream.merged();
            let run = walk(
                &stream_walk,
                model,
                Runs(&mut merged),
                &mut |_| {},
                SegmentBounds::of_events(0),
                &mut |_| {},
                None,
            );
            let walk_secs = walk_start.elapsed().as_secs_f64();
            let events = run.events;
            let analysis_start = Instant::now();
            let report = analyze(&[run], &[], &Options::default());
            let analysis_secs = analysis_start.elapsed().as_secs_f64();
            let races = report
                .findings
                .iter()
                .filter(|f| f.kind == foresight_analyzer::report::Kind::Race)
                .count();
            (
                events,
                format!(
                    "walk_secs={walk_secs:.2} analysis_secs={analysis_secs:.2} \
                     findings={} races={races} race_candidates={} candidates_checked={}",
                    report.findings.len(),
                    report.summary.race_candidates,
                    report.summary.race_candidates_checked
                ),
            )
        }),
        _ => usage(),
    }
}

fn usage() -> ! {
    eprintln!("{USAGE}");
    std::process::exit(2)
}

/// Opens the trace, runs `work` on it and prints what it returned with the time and the peak
/// memory.
fn measure(mode: &str, path: &str, work: impl FnOnce(&Arc<TraceStream>) -> (u64, String)) {
    let start = Instant::now();
    let stream = Arc::new(TraceStream::open(path).unwrap_or_else(|e| {
        eprintln!("race_bench: {e}");
        std::process::exit(2)
    }));
    let (events, found) = work(&stream);
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_secs("/proc/self/stat");
    println!(
        "{mode} events={events} secs={secs:.2} meps={:.2} cpu_secs={cpu:.2} cpu_meps={:.2} \
         rss_kb={} {found}",
        events as f64 / secs / 1e6,
        events as f64 / cpu / 1e6,
        peak_rss_kb().unwrap_or(0)
    );
}

/// The process's CPU time so far, user and system, from `/proc/self/stat`, in clock ticks of
/// 1/100 s on Linux. On a machine other work shares, events per CPU second say what the pass
/// costs where wall time says what else ran.
fn cpu_secs(file: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(file) else {
        return f64::NAN;
    };
    // Fields after the command name (which may hold spaces) and its closing parenthesis.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return f64::NAN;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line: the 12th and 13th after the name.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => (u + s) / 100.0,
        _ => f64::NAN,
    }
}

/// The process's peak resident set size in KiB, from `/proc/self/status`.
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line["VmHWM:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A pass that does nothing but look at each event: what the walk itself costs.
struct Floor(u64);

impl Pass for Floor {
    type Output = u64;
    fn handle(&mut self, ev: &StreamEvent) {
        let x = match ev.op {
            Op::Read { addr, .. } | Op::Write { addr, .. } => addr,
            _ => ev.seq,
        };
        self.0 = self.0.wrapping_add(x ^ ev.thread as u64);
    }
    fn finish(self) -> u64 {
        self.0
    }
}

/// Addresses of the synthetic program, spread as a real process's are.
const TABLE: u64 = 0x5603_2a4e_1040;
const HISTOGRAM: u64 = 0x5603_2a4e_2080;
const SLOTS: u64 = 0x5603_2a4e_2400;
const HEAP: u64 = 0x7f3a_2c00_0b20;
const STACK: u64 = 0x7f3a_3f7f_ee30;
const TABLE_LEN: u64 = 256;
const PRIVATE_LEN: u64 = 64;

/// Site ids of the synthetic program.
mod site {
    pub const CREATE: u32 = 0;
    pub const JOIN: u32 = 1;
    pub const FILL: u32 = 2;
    pub const ALLOC: u32 = 3;
    pub const PRIVATE_READ: u32 = 4;
    pub const PRIVATE_WRITE: u32 = 5;
    pub const TABLE_READ: u32 = 6;
    pub const STACK: u32 = 7;
    pub const LOCK: u32 = 8;
    pub const HIST_READ: u32 = 9;
    pub const HIST_WRITE: u32 = 10;
    pub const UNLOCK: u32 = 11;
    pub const TOKEN_READ: u32 = 12;
    pub const TOKEN_WRITE: u32 = 13;
    pub const FREE: u32 = 14;
    pub const COUNT: u32 = 15;
}

/// One thread's events being written: its chunk and its current key.
struct Writer {
    chunk: ChunkWriter,
    key: u64,
    events: u64,
}

impl Writer {
    fn new(thread: u32) -> Self {
        Writer {
            chunk: ChunkWriter::new(thread, 64 << 10),
            key: 0,
            events: 0,
        }
    }

    /// An event at the thread's current key (plain accesses take no key of their own).
    fn at_key<W: std::io::Write>(&mut self, out: &mut TraceWriter<W>, kind: EventKind) {
        if self.chunk.is_full() {
            out.write_chunk(&mut self.chunk).expect("write a chunk");
        }
        self.chunk
            .push(&Event {
                key: self.key,
                kind,
            })
            .expect("keys never go backwards");
        self.events += 1;
    }

    /// A synchronising event: the next key of the run's global sequence.
    fn sync<W: std::io::Write>(
        &mut self,
        out: &mut TraceWriter<W>,
        clock: &mut u64,
        kind: EventKind,
    ) {
        *clock += 1;
        self.key = *clock;
        self.at_key(out, kind);
    }

    fn access<W: std::io::Write>(
        &mut self,
        out: &mut TraceWriter<W>,
        write: bool,
        addr: u64,
        size: u32,
        site: u32,
    ) {
        let kind = if write {
            EventKind::Write { addr, size, site }
        } else {
            EventKind::Read { addr, size, site }
        };
        self.at_key(out, kind);
    }

    fn locked<W: std::io::Write>(
        &mut self,
        out: &mut TraceWriter<W>,
        clock: &mut u64,
        lock: u32,
        body: impl FnOnce(&mut Self, &mut TraceWriter<W>),
    ) {
        let mode = LockMode::Exclusive;
        self.at_key(
            out,
            EventKind::LockRequest {
                lock,
                mode,
                site: site::LOCK,
            },
        );
        self.sync(out, clock, EventKind::LockAcquired { lock, mode });
        body(self, out);
        self.sync(
            out,
            clock,
            EventKind::LockRelease {
                lock,
                site: site::UNLOCK,
            },
        );
    }
}

/// Writes the synthetic trace (about `target` events) and returns the events written.
fn synth(path: &str, target: u64, workers: u32) -> u64 {
    let header = Header {
        producer: "race_bench synth".into(),
        pid: 1,
        parent_pid: 0,
        command: vec!["race_bench".into(), "synth".into()],
        start_unix_ns: 0,
        ordering: Ordering::GlobalSequence,
        pointer_width: 8,
        stack_depth: 1,
    };
    let file = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).expect("create"));
    let mut out = TraceWriter::new(file, &header).expect("write the header");
    // Locks: the histogram's, the hand-off's, one per worker for its token slot.
    let histogram_lock = 0u32;
    let handoff_lock = 1u32;
    let own_lock = |w: u32| 2 + w;
    let mut records = Vec::new();
    for id in 0..=workers {
        records.push(TableRecord::Thread(ThreadInfo {
            id,
            os_tid: 1000 + id,
            parent: id.checked_sub(1).map(|_| 0),
            name: None,
        }));
    }
    for lock in 0..2 + workers {
        records.push(TableRecord::Object(ObjectInfo {
            id: lock,
            kind: ObjectKind::Mutex,
            address: 0x5603_2a4e_3000 + lock as u64 * 64,
            generation: 0,
            class: ClassKey::FirstUse(site::LOCK),
        }));
    }
    for id in 0..site::COUNT {
        records.push(TableRecord::Site(SiteInfo {
            id,
            frames: vec![Frame {
                module: 0,
                offset: 0x1200 + id as u64 * 12,
            }],
            first_caller: None,
        }));
    }
    for r in &records {
        out.table(r).expect("write a table record");
    }

    let mut clock = 0u64;
    let mut main = Writer::new(0);
    main.sync(&mut out, &mut clock, EventKind::ThreadStart);
    for i in 0..TABLE_LEN / 2 {
        main.access(&mut out, true, TABLE + 8 * i, 8, site::FILL);
    }
    let mut threads: Vec<Writer> = (1..=workers).map(Writer::new).collect();
    for (w, t) in threads.iter_mut().enumerate() {
        let child = w as u32 + 1;
        main.sync(
            &mut out,
            &mut clock,
            EventKind::ThreadCreate {
                child,
                site: site::CREATE,
            },
        );
        t.sync(&mut out, &mut clock, EventKind::ThreadStart);
        t.sync(
            &mut out,
            &mut clock,
            EventKind::Alloc {
                addr: HEAP + w as u64 * 0x0400_0000,
                size: PRIVATE_LEN * 4,
                site: site::ALLOC,
            },
        );
    }
    // 20 events per worker and round, 5 more on a histogram round, 11 on a hand-off round.
    let rounds = target / workers as u64 / 20;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for r in 0..rounds {
        for (w, t) in threads.iter_mut().enumerate() {
            let w = w as u64;
            let mine = HEAP + w * 0x0400_0000;
            for i in 0..6u64 {
                // Distinct elements within the round: the recorder drops repeats in an epoch.
                let j = (i * 11 + r) % PRIVATE_LEN;
                t.access(&mut out, false, mine + 4 * j, 4, site::PRIVATE_READ);
                t.access(&mut out, true, mine + 4 * j, 4, site::PRIVATE_WRITE);
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = x % TABLE_LEN;
                t.access(&mut out, false, TABLE + 4 * k, 4, site::TABLE_READ);
            }
            let frame = STACK - w * 0x0080_0000;
            t.access(&mut out, true, frame - 8 * (r % 4), 8, site::STACK);
            t.access(&mut out, false, frame - 8 * (r % 4), 8, site::STACK);
            if r % 16 == 15 {
                let bucket = HISTOGRAM + 8 * (x % 64);
                t.locked(&mut out, &mut clock, histogram_lock, |t, out| {
                    t.access(out, false, bucket, 8, site::HIST_READ);
                    t.access(out, true, bucket, 8, site::HIST_WRITE);
                });
            }
            if r % 64 == 63 {
                // The token: read the previous worker's slot, write our own, each under our
                // own lock; the hand-off lock's empty sections order the workers.
                let before = (w + workers as u64 - 1) % workers as u64;
                t.locked(&mut out, &mut clock, handoff_lock, |_, _| {});
                t.locked(&mut out, &mut clock, own_lock(w as u32), |t, out| {
                    t.access(out, false, SLOTS + 64 * before, 8, site::TOKEN_READ);
                    t.access(out, true, SLOTS + 64 * w, 8, site::TOKEN_WRITE);
                });
                t.locked(&mut out, &mut clock, handoff_lock, |_, _| {});
            }
        }
    }
    for (w, t) in threads.iter_mut().enumerate() {
        t.sync(
            &mut out,
            &mut clock,
            EventKind::Free {
                addr: HEAP + w as u64 * 0x0400_0000,
                site: site::FREE,
            },
        );
        t.sync(&mut out, &mut clock, EventKind::ThreadExit);
    }
    for w in 0..workers {
        let child = w + 1;
        main.at_key(
            &mut out,
            EventKind::JoinRequest {
                child,
                site: site::JOIN,
            },
        );
        main.sync(
            &mut out,
            &mut clock,
            EventKind::JoinEnd {
                child,
                joined: true,
            },
        );
    }
    main.sync(&mut out, &mut clock, EventKind::ThreadExit);
    let mut written = main.events;
    out.write_chunk(&mut main.chunk).expect("write a chunk");
    for t in &mut threads {
        written += t.events;
        out.write_chunk(&mut t.chunk).expect("write a chunk");
    }
    out.finish(Trailer {
        end_unix_ns: 0,
        reason: EndReason::Synthetic,
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    })
    .expect("write the trailer");
    written
}
