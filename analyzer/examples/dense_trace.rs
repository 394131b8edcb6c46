//! Writes the dense-lock-graph trace of `benches/dense.rs` to a file, to measure the CLI on it:
//! `cargo run --release -p foresight-analyzer --example dense_trace -- dense.trace [THREADS
//! PAIRS LOCKS [joined]]`, then `/usr/bin/time -v foresight analyze dense.trace`. `joined`:
//! each worker is created once the previous one was joined (nothing predictable).

#[path = "../benches/support/dense.rs"]
mod dense;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: dense_trace OUT.trace [THREADS PAIRS LOCKS [joined]]");
        std::process::exit(2);
    };
    let mut d = dense::DEFAULT;
    let mut num = |default: usize| {
        args.next()
            .map(|s| s.parse().expect("a number"))
            .unwrap_or(default)
    };
    d.threads = num(d.threads);
    d.pairs = num(d.pairs);
    d.locks = num(d.locks).max(2);
    d.joined = args.next().as_deref() == Some("joined");
    std::fs::write(&path, dense::dense_trace(&d)).expect("writing the trace");
}
