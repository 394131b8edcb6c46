//! Writer cost per event, decoding speed (one core and all cores) and bytes per event, on
//! synthetic lock-heavy and memory-access traces. Sizes are printed once; times by criterion.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use foresight_trace::event::{Event, EventKind, LockMode};
use foresight_trace::stream::TraceStream;
use foresight_trace::tables::{EndReason, Header, Ordering, Trailer};
use foresight_trace::{ChunkWriter, PackedFields, Trace, TraceFile, TraceWriter};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Two nested locks per iteration: request, acquire, release of each, with sites.
fn lock_heavy(thread: u32, iterations: u64, key: &mut u64) -> Vec<Event> {
    let mut out = Vec::with_capacity(iterations as usize * 6);
    let (a, b) = (thread * 2, thread * 2 + 1);
    for i in 0..iterations {
        let site = (i % 7) as u32;
        for (lock, s) in [(a, site), (b, site + 10)] {
            out.push(Event {
                key: *key,
                kind: EventKind::LockRequest {
                    lock,
                    mode: LockMode::Exclusive,
                    site: s,
                },
            });
            *key += 2;
            out.push(Event {
                key: *key,
                kind: EventKind::LockAcquired {
                    lock,
                    mode: LockMode::Exclusive,
                },
            });
        }
        for (lock, s) in [(b, site + 20), (a, site + 30)] {
            *key += 2;
            out.push(Event {
                key: *key,
                kind: EventKind::LockRelease { lock, site: s },
            });
        }
    }
    out
}

/// The same work as `lock_heavy` on `threads` threads whose iterations alternate: thread t's
/// i-th iteration takes keys near `(i * threads + t) * 8`, so that in the merged order every
/// event comes from another thread than the one before it: the merge's worst case.
fn lock_interleaved(threads: u32, iterations: u64) -> Vec<Vec<Event>> {
    (0..threads)
        .map(|t| {
            let mut out = Vec::with_capacity(iterations as usize * 6);
            let (a, b) = (t * 2, t * 2 + 1);
            for i in 0..iterations {
                let mut key = (i * threads as u64 + t as u64) * 8 + 1;
                let site = (i % 7) as u32;
                for (lock, s) in [(a, site), (b, site + 10)] {
                    let mode = LockMode::Exclusive;
                    out.push(Event {
                        key,
                        kind: EventKind::LockRequest {
                            lock,
                            mode,
                            site: s,
                        },
                    });
                    key += 1;
                    out.push(Event {
                        key,
                        kind: EventKind::LockAcquired { lock, mode },
                    });
                }
                for (lock, s) in [(b, site + 20), (a, site + 30)] {
                    key += 1;
                    out.push(Event {
                        key,
                        kind: EventKind::LockRelease { lock, site: s },
                    });
                }
            }
            out
        })
        .collect()
}

/// A loop over an array: 8-byte reads and writes at neighbouring addresses from a few sites.
fn memory_heavy(n: u64) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let addr = 0x7f00_0000_0000 + (i / 2) * 8;
            let site = 100 + (i % 3) as u32;
            let kind = if i % 2 == 0 {
                EventKind::Read {
                    addr,
                    size: 8,
                    site,
                }
            } else {
                EventKind::Write {
                    addr,
                    size: 8,
                    site,
                }
            };
            Event { key: 0, kind }
        })
        .collect()
}

fn header() -> Header {
    Header {
        producer: "bench".into(),
        pid: 1,
        parent_pid: 0,
        command: vec![],
        start_unix_ns: 0,
        ordering: Ordering::GlobalSequence,
        pointer_width: 8,
        stack_depth: 1,
    }
}

fn file(threads: &[Vec<Event>]) -> Vec<u8> {
    use foresight_trace::tables::{ClassKey, Frame, ObjectInfo, ObjectKind, SiteInfo, ThreadInfo};
    use foresight_trace::TableRecord;
    let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
    // The tables a recorder would write, so that decoding pays for its reference checks as it
    // does on a real trace.
    for id in 0..threads.len() as u32 {
        w.table(&TableRecord::Thread(ThreadInfo {
            id,
            os_tid: 100 + id,
            parent: id.checked_sub(1),
            name: None,
        }))
        .unwrap();
    }
    for id in 0..threads.len() as u32 * 2 {
        w.table(&TableRecord::Object(ObjectInfo {
            id,
            kind: ObjectKind::Mutex,
            address: 0x5000 + id as u64 * 64,
            generation: 0,
            class: ClassKey::FirstUse(id % 7),
        }))
        .unwrap();
    }
    for id in 0..40 {
        w.table(&TableRecord::Site(SiteInfo {
            id,
            frames: vec![Frame {
                module: 0,
                offset: 0x1000 + id as u64 * 16,
            }],
            first_caller: None,
        }))
        .unwrap();
    }
    for (t, evs) in threads.iter().enumerate() {
        w.thread_events(t as u32, evs, 64 << 10).unwrap();
    }
    w.finish(Trailer {
        end_unix_ns: 0,
        reason: EndReason::Synthetic,
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    })
    .unwrap()
}

fn bytes_per_event(trace: &Trace) -> f64 {
    let bytes: u64 = trace.threads.iter().map(|t| t.encoded_bytes).sum();
    bytes as f64 / trace.event_count() as f64
}

fn benches(c: &mut Criterion) {
    let mut key = 1;
    let threads: Vec<Vec<Event>> = (0..8).map(|t| lock_heavy(t, 250_000, &mut key)).collect();
    let events: u64 = threads.iter().map(|t| t.len() as u64).sum();
    let lock_file = file(&threads);
    let mem_file = file(&[memory_heavy(1_000_000)]);
    let interleaved = lock_interleaved(8, 250_000);
    assert_eq!(
        interleaved.iter().map(|t| t.len() as u64).sum::<u64>(),
        events
    );
    let interleaved_file = file(&interleaved);
    drop(interleaved);
    let lock_trace = Trace::from_bytes("lock", lock_file.clone()).unwrap();
    let mem_trace = Trace::from_bytes("mem", mem_file.clone()).unwrap();
    assert!(
        lock_trace.problems.is_empty() && mem_trace.problems.is_empty(),
        "the benchmark traces read cleanly: {:?}",
        lock_trace.problems
    );
    println!(
        "size: lock-heavy {:.2} bytes/event, memory accesses {:.2} bytes/event",
        bytes_per_event(&lock_trace),
        bytes_per_event(&mem_trace)
    );

    let mut g = c.benchmark_group("write");
    g.throughput(Throughput::Elements(threads[0].len() as u64));
    g.bench_function("chunk_writer_push", |b| {
        let mut sink = 0usize;
        b.iter(|| {
            // A fresh writer per pass: keys restart (one allocation per million events).
            let mut w = ChunkWriter::new(0, 64 << 10);
            for ev in &threads[0] {
                if w.is_full() {
                    w.flush_into(0, |bytes| sink += bytes.len());
                }
                w.push(black_box(ev)).unwrap();
            }
            w.flush_into(0, |bytes| sink += bytes.len());
        });
        black_box(sink);
    });
    // The same bytes through the lock-event fast encoder, serviced as the recorder does
    // (a chunk is started before its first event, which keeps the inline encoder in use).
    g.bench_function("chunk_writer_push_fast", |b| {
        let mut sink = 0usize;
        b.iter(|| {
            let mut w = ChunkWriter::new(0, 64 << 10);
            for ev in &threads[0] {
                if w.needs_service() {
                    if w.is_full() {
                        w.flush_into(0, |bytes| sink += bytes.len());
                    }
                    w.set_start_ns(0);
                }
                w.push_fast(black_box(ev)).unwrap();
            }
            w.flush_into(0, |bytes| sink += bytes.len());
        });
        black_box(sink);
    });
    // The recorder's lane: ids packed once (as its per-thread cache holds them), one store
    // per event, `push_fast` when the lane declines.
    let packed: Vec<Option<PackedFields>> = threads[0]
        .iter()
        .map(|ev| match ev.kind {
            EventKind::LockRequest { lock, site, .. } | EventKind::LockRelease { lock, site } => {
                PackedFields::new(lock, site)
            }
            EventKind::LockAcquired { lock, .. } => PackedFields::new(lock, 0),
            _ => None,
        })
        .collect();
    g.bench_function("chunk_writer_lane", |b| {
        let mut sink = 0usize;
        b.iter(|| {
            let mut w = ChunkWriter::new(0, 64 << 10);
            for (ev, f) in threads[0].iter().zip(&packed) {
                let ev = black_box(ev);
                let done = f.is_some_and(|f| match ev.kind {
                    EventKind::LockRequest { mode, .. } => w.try_push_lock_request(f, mode, ev.key),
                    EventKind::LockAcquired { mode, .. } => {
                        w.try_push_lock_acquired(f, mode, ev.key)
                    }
                    EventKind::LockRelease { .. } => w.try_push_lock_release(f, ev.key),
                    _ => false,
                });
                if !done {
                    if w.needs_service() {
                        if w.is_full() {
                            w.flush_into(0, |bytes| sink += bytes.len());
                        }
                        w.set_start_ns(0);
                    }
                    w.push_fast(ev).unwrap();
                }
            }
            w.flush_into(0, |bytes| sink += bytes.len());
        });
        black_box(sink);
    });
    g.finish();

    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Elements(events));
    g.sample_size(10);
    for n in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap();
        g.bench_function(format!("lock_heavy_{n}_threads"), |b| {
            // Copying the file is set-up, not decoding: keep it out of the measurement. The
            // decoded trace is returned, so that criterion frees it after the measurement, as
            // it frees the floor's vector below: both figures then count filling memory, and
            // neither counts giving it back.
            b.iter_batched(
                || lock_file.clone(),
                |bytes| pool.install(|| Trace::from_bytes("lock", bytes).unwrap()),
                BatchSize::LargeInput,
            )
        });
    }
    // The floor under a materialised decode: the same number of in-memory events written into
    // fresh memory, with no decoding at all. Its ratio to `lock_heavy_1_threads` is what
    // materialising costs beyond the memory it needs.
    g.bench_function("fresh_memory_fill_1_thread", |b| {
        b.iter_batched(
            || (),
            |()| {
                let mut v = Vec::with_capacity(events as usize);
                for key in 0..events {
                    v.push(Event {
                        key,
                        kind: EventKind::ThreadStart,
                    });
                }
                black_box(v)
            },
            BatchSize::LargeInput,
        )
    });
    // The codec alone: every chunk checked and decoded into a reused buffer, nothing kept. A
    // materialised trace also pays for writing 32 bytes per event into fresh memory, which on
    // a virtual machine costs about as much as decoding them (page faults).
    let file = TraceFile::from_bytes("lock", lock_file.clone()).unwrap();
    for n in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap();
        g.bench_function(format!("lock_heavy_streaming_{n}_threads"), |b| {
            b.iter(|| {
                let seen = AtomicU64::new(0);
                pool.install(|| {
                    file.for_each_chunk(|c| {
                        seen.fetch_add(c.events.len() as u64, Relaxed);
                    })
                });
                assert_eq!(seen.load(Relaxed), events);
            })
        });
    }

    // Streaming from a file (`TraceStream`: positioned reads, memory bounded by the threads),
    // on one core: each thread in turn, then the merged order, for the lock-heavy trace (its
    // threads' keys do not interleave: one thread runs at a time in the merged order) and for
    // one whose threads alternate at every event. Opening (the scan of chunk headers and
    // tables) is part of every pass.
    let dir = std::env::temp_dir();
    let lock_path = dir.join(format!(
        "foresight-codec-bench-{}.trace",
        std::process::id()
    ));
    let interleaved_path = dir.join(format!(
        "foresight-codec-bench-{}-i.trace",
        std::process::id()
    ));
    std::fs::write(&lock_path, &lock_file).unwrap();
    std::fs::write(&interleaved_path, &interleaved_file).unwrap();
    for (name, path) in [
        ("lock_heavy", &lock_path),
        ("lock_interleaved", &interleaved_path),
    ] {
        g.bench_function(format!("{name}_stream_threads_file"), |b| {
            b.iter(|| {
                let stream = TraceStream::open(path).unwrap();
                let threads: Vec<u32> = stream.threads().collect();
                let (mut n, mut sum) = (0u64, 0u64);
                for t in threads {
                    for ev in stream.thread_events(t) {
                        sum = sum.wrapping_add(ev.key);
                        n += 1;
                    }
                }
                assert_eq!(n, events);
                black_box(sum);
            })
        });
        g.bench_function(format!("{name}_stream_merged_file"), |b| {
            b.iter(|| {
                let stream = TraceStream::open(path).unwrap();
                let (mut n, mut sum) = (0u64, 0u64);
                for m in stream.merged() {
                    sum = sum.wrapping_add(m.event.key ^ m.thread as u64);
                    n += 1;
                }
                assert_eq!(n, events);
                black_box(sum);
            })
        });
    }
    // The decoding reader's merged order over the same interleaved trace, decoded beforehand:
    // what the streaming merge replaces, without its decoding.
    let decoded = Trace::open(&interleaved_path).unwrap();
    g.bench_function("lock_interleaved_decoded_merged_walk", |b| {
        b.iter(|| {
            let (mut n, mut sum) = (0u64, 0u64);
            for m in decoded.merged() {
                sum = sum.wrapping_add(m.event.key ^ m.thread as u64);
                n += 1;
            }
            assert_eq!(n, events);
            black_box(sum);
        })
    });
    drop(decoded);
    let _ = std::fs::remove_file(&lock_path);
    let _ = std::fs::remove_file(&interleaved_path);
    g.finish();
}

criterion_group!(codec, benches);
criterion_main!(codec);
