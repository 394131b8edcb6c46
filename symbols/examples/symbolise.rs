//! What symbolising a trace costs, as `foresight record` does it when the program ends:
//! symbolises fresh copies of a trace (recorded with `foresight record --no-symbolize`) and
//! prints the median wall-clock and CPU time (CPU time, of all threads, is what a busy machine
//! disturbs less), reading the modules (a first recording of a build: cold) and from a frame
//! cache that a first run filled (`SymbolizeOptions::frame_cache`: warm), taking turns.
//!
//! Usage: `cargo run --release -p foresight-symbols --example symbolise -- TRACE [REPS]`
//! (REPS: 11). The copies and the cache are written next to TRACE and removed.

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
    let cache = trace.with_extension("symbolise-cache");
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).expect("create the frame cache directory");
    let cold = SymbolizeOptions {
        sync: false,
        ..Default::default()
    };
    let warm = SymbolizeOptions {
        frame_cache: Some(cache.clone()),
        ..cold.clone()
    };
    let run = |opts: &SymbolizeOptions| {
        std::fs::copy(&trace, &copy).expect("copy the trace");
        let (started, before) = (Instant::now(), cpu());
        let s = symbolize_in_place(&copy, opts).expect("symbolise");
        (started.elapsed(), cpu() - before, s.symbolised)
    };
    // Fills the cache.
    run(&warm);
    let (mut times, mut frames) = ([Vec::new(), Vec::new(), Vec::new(), Vec::new()], [0, 0]);
    for _ in 0..reps {
        for (k, opts) in [&cold, &warm].into_iter().enumerate() {
            let (wall, cpu, n) = run(opts);
            times[2 * k].push(wall);
            times[2 * k + 1].push(cpu);
            frames[k] = n;
        }
    }
    let _ = std::fs::remove_file(&copy);
    let _ = std::fs::remove_dir_all(&cache);
    let [cold_wall, cold_cpu, warm_wall, warm_cpu] = times.map(|t| median(t).as_secs_f64() * 1e3);
    println!(
        "{}: medians of {reps} runs taking turns: {} frames symbolised in {cold_wall:.1} ms \
         ({cold_cpu:.1} ms of CPU) reading the modules; {} in {warm_wall:.1} ms ({warm_cpu:.1} ms \
         of CPU) from the frame cache",
        trace.display(),
        frames[0],
        frames[1],
    );
}
