//! What naming the accessed static data adds to symbolisation: symbolises fresh copies of a
//! trace (best recorded with `foresight record --no-symbolize`) with the data pass off and on,
//! taking turns, and prints the median of each, the data pass's own time and what it found.
//!
//! Usage: `cargo run --release -p foresight-symbols --example data_pass -- TRACE [REPS]`
//! (REPS: 5). The copies are written next to TRACE and removed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use foresight_symbols::{symbolize_in_place, SymbolizeOptions, SymbolizeSummary};

fn run(trace: &Path, copy: &Path, data: bool) -> (Duration, SymbolizeSummary) {
    std::fs::copy(trace, copy).expect("copy the trace");
    let opts = SymbolizeOptions {
        sync: false,
        data,
        ..Default::default()
    };
    let started = Instant::now();
    let s = symbolize_in_place(copy, &opts).expect("symbolise");
    (started.elapsed(), s)
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
    let mut last = None;
    for _ in 0..reps {
        off.push(run(&trace, &copy, false).0);
        let (t, s) = run(&trace, &copy, true);
        on.push(t);
        pass.push(s.data_pass_time);
        last = Some(s);
    }
    let _ = std::fs::remove_file(&copy);
    let s = last.expect("at least one repetition");
    let bytes = std::fs::metadata(&trace).map_or(0, |m| m.len());
    let (off, on, pass) = (median(off), median(on), median(pass));
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
}
