//! What naming the accessed static data adds to symbolisation: symbolises fresh copies of a
//! trace (best recorded with `foresight record --no-symbolize`) with the data pass off and on,
//! taking turns, and prints the median of each (wall-clock time, and CPU time of all threads,
//! which a busy machine disturbs less), the data pass's own time and what it found, against
//! the floor of any such pass: the CPU time of streaming every thread's events and doing
//! nothing with them.
//!
//! Usage: `cargo run --release -p foresight-symbols --example data_pass -- TRACE [REPS]`
//! (REPS: 5). The copies are written next to TRACE and removed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use foresight_symbols::{symbolize_in_place, SymbolizeOptions, SymbolizeSummary};

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

/// (wall, CPU, summary) of one symbolisation of a fresh copy.
fn run(trace: &Path, copy: &Path, data: bool) -> (Duration, Duration, SymbolizeSummary) {
    std::fs::copy(trace, copy).expect("copy the trace");
    let opts = SymbolizeOptions {
        sync: false,
        data,
        ..Default::default()
    };
    let (started, cpu_before) = (Instant::now(), cpu());
    let s = symbolize_in_place(copy, &opts).expect("symbolise");
    (started.elapsed(), cpu() - cpu_before, s)
}

/// CPU time of reading every thread's events with `TraceStream::thread_events`, keeping none.
fn bare_stream(trace: &Path) -> (Duration, u64) {
    let before = cpu();
    let stream = foresight_trace::TraceStream::open(trace).expect("open the trace");
    let threads: Vec<u32> = stream.threads().collect();
    let events = threads
        .iter()
        .map(|&t| stream.thread_events(t).count() as u64)
        .sum();
    (cpu() - before, events)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let trace = PathBuf::from(args.next().expect("usage: data_pass TRACE [REPS]"));
    let reps: usize = args
        .next()
        .map_or(5, |r| r.parse().expect("REPS is a number"));
    let copy = trace.with_extension("data-pass-copy");
    let (mut off, mut on, mut pass) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cpu_off, mut cpu_on, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    let mut events = 0;
    for _ in 0..reps {
        let (c, n) = bare_stream(&trace);
        bare.push(c);
        events = n;
        let (t, c, _) = run(&trace, &copy, false);
        off.push(t);
        cpu_off.push(c);
        let (t, c, s) = run(&trace, &copy, true);
        on.push(t);
        cpu_on.push(c);
        pass.push(s.data_pass_time);
        last = Some(s);
    }
    let _ = std::fs::remove_file(&copy);
    let s = last.expect("at least one repetition");
    let bytes = std::fs::metadata(&trace).map_or(0, |m| m.len());
    let (off, on, pass) = (median(off), median(on), median(pass));
    let (cpu_off, cpu_on, bare) = (median(cpu_off), median(cpu_on), median(bare));
    println!("trace: {} ({bytes} bytes)", trace.display());
    println!(
        "memory events read: {}; static granules touched: {}; variables named: {}; types: {}; \
         granules unnamed: {}",
        s.data_accesses, s.data_granules, s.data_variables, s.data_types, s.data_unnamed_granules
    );
    println!(
        "symbolise without data: {:.1} ms; with data: {:.1} ms; added {:.1} ms \
         (the event pass: {:.1} ms, {:.0} M memory events/s); bytes appended with data: {}",
        off.as_secs_f64() * 1e3,
        on.as_secs_f64() * 1e3,
        (on.as_secs_f64() - off.as_secs_f64()) * 1e3,
        pass.as_secs_f64() * 1e3,
        s.data_accesses as f64 / pass.as_secs_f64() / 1e6,
        s.bytes_appended
    );
    println!(
        "CPU time without data: {:.1} ms; with data: {:.1} ms; added {:.1} ms ({:.0} M memory \
         events per CPU second)",
        cpu_off.as_secs_f64() * 1e3,
        cpu_on.as_secs_f64() * 1e3,
        (cpu_on.as_secs_f64() - cpu_off.as_secs_f64()) * 1e3,
        s.data_accesses as f64 / (cpu_on.as_secs_f64() - cpu_off.as_secs_f64()) / 1e6,
    );
    println!(
        "floor: streaming the {events} events and keeping nothing: {:.1} ms of CPU",
        bare.as_secs_f64() * 1e3
    );
}
