//! What symbolising a trace costs, as `foresight record` does it when the program ends:
//! symbolises fresh copies of a trace (recorded with `foresight record --no-symbolize`) and
//! prints the median wall-clock and CPU time (CPU time, of all threads, is what a busy machine
//! disturbs less).
//!
//! Usage: `cargo run --release -p foresight-symbols --example symbolise -- TRACE [REPS]`
//! (REPS: 11). The copies are written next to TRACE and removed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use foresight_symbols::{symbolize_in_place, SymbolizeOptions};

/// CPU time (user and system) the process used so far.
fn cpu() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes a `rusage` into the pointer it is given, which points at one.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(u.ru_utime) + t(u.ru_stime)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let trace = PathBuf::from(args.next().expect("usage: symbolise TRACE [REPS]"));
    let reps: usize = args
        .next()
        .map_or(11, |r| r.parse().expect("REPS is a number"));
    let copy = trace.with_extension("symbolise-copy");
    let opts = SymbolizeOptions {
        sync: false,
        ..Default::default()
    };
    let (mut wall, mut cpus) = (Vec::new(), Vec::new());
    let mut frames = 0;
    for _ in 0..reps {
        std::fs::copy(&trace, &copy).expect("copy the trace");
        let (started, before) = (Instant::now(), cpu());
        let s = symbolize_in_place(&copy, &opts).expect("symbolise");
        wall.push(started.elapsed());
        cpus.push(cpu() - before);
        frames = s.symbolised;
    }
    let _ = std::fs::remove_file(&copy);
    println!(
        "{}: {frames} frames symbolised; symbolising took {:.1} ms (median of {reps}), {:.1} ms of CPU",
        trace.display(),
        median(wall).as_secs_f64() * 1e3,
        median(cpus).as_secs_f64() * 1e3,
    );
}
