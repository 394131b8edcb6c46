//! Analysis speed on a synthetic trace of ten million events: model conversion (the one pass
//! that builds critical sections and clocks), the lock-order graph, the cycle search and the
//! prediction. Run with `cargo bench -p foresight-analyzer --bench analyze`; criterion prints
//! the throughput in events per second (decoding is the trace-format crate's bench).
//!
//! The program it pretends to record: 8 workers, 64 locks; each iteration takes two locks in
//! the global order (rarely, one code path takes lock_1 then lock_0: a cycle to predict), reads
//! and writes under them; every 4096 iterations all workers meet at a barrier. The data
//! accesses add reads-from edges, so the nearest sampled candidates fail and the complete
//! abstract-pattern search (which walks the trace once) finds the deadlock: the figure covers
//! the conversion, the graphs, the cycle search and one full closure walk. `model-synthetic-10M`
//! is the conversion alone: the one pass over the merged stream that every analysis shares.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use foresight_analyzer::analysis::analyze;
use foresight_analyzer::model::build_run;
use foresight_analyzer::options::Options;
use foresight_trace::builder::TraceBuilder;
use foresight_trace::event::EventKind;
use foresight_trace::tables::ObjectKind;
use foresight_trace::Trace;

const TARGET_EVENTS: usize = 10_000_000;
const WORKERS: usize = 8;
const LOCKS: usize = 64;

fn synthetic_trace() -> Trace {
    let mut b = TraceBuilder::new("synthetic");
    let main = b.main_thread();
    let locks: Vec<_> = (0..LOCKS).map(|i| b.mutex(&format!("lock_{i}"))).collect();
    let barrier = b.object(ObjectKind::Barrier, "phase");
    let spawn = b.site("main", "synthetic.c", 1);
    let outer = b.site("work", "synthetic.c", 10);
    let inner = b.site("work", "synthetic.c", 11);
    let unlock = b.site("work", "synthetic.c", 12);
    let arrive = b.site("work", "synthetic.c", 20);
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| b.spawn(main, spawn, &format!("worker-{i}")))
        .collect();
    // About 8 events per worker and iteration; stop past the target.
    let iterations = TARGET_EVENTS / WORKERS * 10 / 80 + 4096;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut generation = 0u64;
    for it in 0..iterations {
        for &w in &workers {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = (x % LOCKS as u64) as usize;
            let j = ((x >> 16) % LOCKS as u64) as usize;
            if i == j {
                b.lock(w, locks[i], outer);
                b.write(w, 0x1000 + 8 * i as u64, 8, outer);
                b.unlock(w, locks[i], unlock);
                continue;
            }
            let (mut lo, mut hi) = (i.min(j), i.max(j));
            if x % 20_000 == 7 {
                // The one inverted path of the program: lock_1 then lock_0.
                (lo, hi) = (1, 0);
            }
            b.lock(w, locks[lo], outer);
            b.lock(w, locks[hi], inner);
            b.read(w, 0x1000 + 8 * lo as u64, 8, inner);
            b.write(w, 0x1000 + 8 * hi as u64, 8, inner);
            b.unlock(w, locks[hi], unlock);
            b.unlock(w, locks[lo], unlock);
        }
        if it % 4096 == 4095 {
            for &w in &workers {
                b.event(
                    w,
                    EventKind::BarrierWaitBegin {
                        barrier,
                        site: arrive,
                        generation: None,
                    },
                );
            }
            for &w in &workers {
                b.event(
                    w,
                    EventKind::BarrierWaitEnd {
                        barrier,
                        generation,
                        serial: false,
                    },
                );
            }
            generation += 1;
        }
    }
    for &w in &workers {
        b.join(main, w, spawn);
    }
    Trace::from_bytes("synthetic.trace", b.finish()).expect("the synthetic trace reads")
}

fn bench(c: &mut Criterion) {
    let trace = synthetic_trace();
    let events = trace.event_count();
    let mut group = c.benchmark_group("analyze");
    group.sample_size(10);
    group.throughput(Throughput::Elements(events));
    group.bench_function("synthetic-10M", |bench| {
        bench.iter(|| {
            let run = build_run(&trace, &mut |_| {});
            analyze(&[run], &[], &Options::default())
        })
    });
    group.bench_function("model-synthetic-10M", |bench| {
        bench.iter(|| build_run(&trace, &mut |_| {}))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
