//! Uncontended `Mutex::lock` + drop timed by the process's CPU clock rather than the wall clock,
//! so that other processes on a busy machine do not inflate the figures (the criterion bench,
//! `benches/lock.rs`, times wall clock). Prints nanoseconds per lock and drop, `std`'s and
//! `foresight-sync`'s, the best of several rounds of each, alternating:
//!
//! ```sh
//! cargo run --release -p foresight-sync --example lock_cpu
//! foresight record --no-symbolize -- target/release/examples/lock_cpu
//! ```

use std::hint::black_box;

const ITERATIONS: u64 = 2_000_000;
const ROUNDS: usize = 15;

fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn per_iteration(mut f: impl FnMut()) -> f64 {
    let start = process_cpu_ns();
    for _ in 0..ITERATIONS {
        f();
    }
    (process_cpu_ns() - start) as f64 / ITERATIONS as f64
}

fn main() {
    let std_mutex = std::sync::Mutex::new(0u64);
    let ours = foresight_sync::Mutex::new(0u64);
    let (mut best_std, mut best_ours) = (f64::MAX, f64::MAX);
    for _ in 0..ROUNDS {
        best_std = best_std.min(per_iteration(|| {
            *black_box(&std_mutex).lock().unwrap() += 1;
        }));
        best_ours = best_ours.min(per_iteration(|| {
            *black_box(&ours).lock().unwrap() += 1;
        }));
    }
    println!(
        "{}: std {best_std:.1} ns, foresight-sync {best_ours:.1} ns, ratio {:.2}",
        if foresight_sync::is_recorded() {
            "recorded"
        } else {
            "not recorded"
        },
        best_ours / best_std
    );
}
