//! A dense lock graph (`support/dense.rs`: four threads, 2,000 nested pairs each of 32 mutexes
//! in random order; 992 edges, 226,176 cycles of up to 4 locks): the whole analysis and both
//! renderings, as the CLI runs them, against listing every cycle the former default budget
//! of 2·10^6 search steps reaches (`--all --cycle-budget 2000000`: 62,050 cycles, what the
//! report was before cycles were summarised by component) in the same run. Prints the report's size
//! first. `cargo bench -p foresight-analyzer --bench dense`; peak memory is the CLI's:
//! `cargo run --release -p foresight-analyzer --example dense_trace -- dense.trace` then
//! `/usr/bin/time -v foresight analyze dense.trace`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use foresight_analyzer::analysis::analyze;
use foresight_analyzer::model::build_run;
use foresight_analyzer::options::Options;
use foresight_analyzer::report::{json, text, Report};
use foresight_trace::Trace;

#[path = "support/dense.rs"]
mod dense;

fn analyse_and_render(trace: &Trace, opts: &Options) -> (Report, usize, usize) {
    let run = build_run(trace, &mut |_| {});
    let report = analyze(&[run], &[], opts);
    let mut t = Vec::new();
    text::write(&mut t, &report).expect("writing to memory");
    let mut j = Vec::new();
    json::write(&mut j, &report).expect("writing to memory");
    let lines = t.iter().filter(|&&b| b == b'\n').count();
    (report, lines, j.len())
}

fn bench(c: &mut Criterion) {
    let trace = Trace::from_bytes("dense.trace", dense::dense_trace(&dense::DEFAULT))
        .expect("the dense trace reads");
    let events = trace.event_count();
    let all = Options {
        cycles_listed: usize::MAX,
        cycle_budget: 2_000_000,
        ..Options::default()
    };
    for (name, opts) in [
        ("default", Options::default()),
        ("listing all", all.clone()),
    ] {
        let (r, lines, bytes) = analyse_and_render(&trace, &opts);
        eprintln!(
            "dense, {name}: {events} events, {} edges, {} cycles, {} findings; text {lines} \
             lines, JSON {bytes} bytes",
            r.summary.lock_order_edges,
            r.summary.class_cycles,
            r.findings.len()
        );
    }
    let mut group = c.benchmark_group("dense");
    group.sample_size(10);
    group.throughput(Throughput::Elements(events));
    group.bench_function("default", |b| {
        b.iter(|| analyse_and_render(&trace, &Options::default()))
    });
    group.bench_function("all", |b| b.iter(|| analyse_and_render(&trace, &all)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
