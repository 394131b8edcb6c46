//! Uncontended `Mutex::lock` + drop: `std::sync::Mutex` beside `foresight_sync::Mutex`.
//!
//! Plainly (`cargo bench -p foresight-sync --bench lock`), the crate's mutex finds no runtime
//! and should cost within 5% of std's. Recorded, it records a lock and a release per
//! iteration: build the bench (`cargo bench -p foresight-sync --bench lock --no-run` names its
//! binary), then `foresight record --no-symbolize -- target/release/deps/lock-HASH --bench`; the
//! group is then named `uncontended-lock/recorded`, and the target is at most 2x std's time
//! (`docs/perf/rust-sync.md`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

fn lock_and_drop(c: &mut Criterion) {
    let group_name = if foresight_sync::is_recorded() {
        "uncontended-lock/recorded"
    } else {
        "uncontended-lock/not-recorded"
    };
    let mut group = c.benchmark_group(group_name);
    let std_mutex = std::sync::Mutex::new(0u64);
    group.bench_function("std", |b| {
        b.iter(|| {
            let mut g = black_box(&std_mutex).lock().unwrap();
            *g += 1;
        })
    });
    let ours = foresight_sync::Mutex::new(0u64);
    group.bench_function("foresight-sync", |b| {
        b.iter(|| {
            let mut g = black_box(&ours).lock().unwrap();
            *g += 1;
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = lock_and_drop
}
criterion_main!(benches);
