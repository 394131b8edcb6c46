//! Prints, per thread of a trace, its events and the wall-clock time its last written chunk
//! ends (nanoseconds since the Unix epoch): what `recorder/bench/kill_loss.sh` compares with
//! the moment the recorded process was killed.
//!
//! ```text
//! cargo run --release -p foresight-trace --example thread_ends -- FILE
//! ```

use foresight_trace::stream::TraceStream;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: thread_ends FILE");
        std::process::exit(2);
    };
    let stream = match TraceStream::open(&path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let mut merged = stream.merged();
    for _ in merged.by_ref() {}
    for t in merged.thread_summaries() {
        println!("{} {} {}", t.thread, t.events, t.end_ns);
    }
}
