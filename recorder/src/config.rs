//! The environment contract (fixed: `foresight record` is written against it).
//!
//! - `FORESIGHT_OUTPUT=<path>`: the trace path (see `output::open_trace` for the `.pid`/`.n`
//!   fallbacks); unset: `foresight-<pid>.trace` in the working directory.
//! - `FORESIGHT_STACK_DEPTH=N`: frames per call site, 1..=32, default 1.
//! - `FORESIGHT_NO_FOLLOW=1`: programs this one execs are not recorded.
//! - `FORESIGHT_ALLOCATIONS=0`: heap allocations are not recorded (unless the program has
//!   instrumented code, whose accesses need them).
//! - `FORESIGHT_FLUSH_MS=N`: the flusher's period (default 100; 0: no flusher). Every N ms it
//!   writes the buffer of each thread idle since its last look, and of each thread whose
//!   oldest unwritten event is older than a second.
//! - `FORESIGHT_STOP_FILE=<path>` and `FORESIGHT_HANG_TIMEOUT_MS=N` (`foresight record
//!   --hang-timeout`): the flusher runs from start-up and looks for that file on each round;
//!   when it appears (no process of the run recorded an event for N ms), the trace is
//!   completed with every thread's end state and the process ends with SIGKILL.
//! - `FORESIGHT_WRAPPERS=GLOB\nGLOB…`: the program's own lock wrappers, one glob a line
//!   (`wrappers.rs`): calls made inside them are recorded with their callers.
//! - `FORESIGHT_MAX_SIZE=BYTES` (`foresight record --max-size`): recording stops before the
//!   trace would grow past it (as under a file size limit: cause `FileSizeLimit`); the program
//!   runs on.
//! - `FORESIGHT_KEEP_LAST=BYTES` (`foresight record --keep-last`): flight recorder: only the
//!   most recent events are kept (`flight.rs`) and written when the trace is completed; the
//!   file stays within the bound.
//! - `FORESIGHT_DUMP_ON=N` (`foresight record --dump-on`, with `FORESIGHT_KEEP_LAST` only):
//!   signal N (one of the signals the runtime manages, not a crash signal) writes the flight
//!   recorder's window as a snapshot, `PATH.snapshot-<n>`, and the program runs on; the
//!   runtime takes the signal over (the program's own disposition for it is kept but not run).
//! - `FORESIGHT_COMPRESS=auto|always|lz4|never` (`foresight record --compress`): how event
//!   chunks are compressed when they are written (FORMAT.md §5.3–§5.4); default `auto` (zstd,
//!   backing off where it gains less than 2×). `always` compresses every chunk with zstd;
//!   `lz4` uses LZ4 as `auto` does zstd (a 2.7 trace, for readers without zstd); `never`
//!   writes a 1.x trace, as before compression existed.
//! - `FORESIGHT_ZSTD_LEVEL=N`: the zstd level of `auto` and `always` (default
//!   `foresight_trace::compress::DEFAULT_ZSTD_LEVEL`); a benchmark's knob
//!   (`bench/compress.sh`), not an option of `foresight record`.
//! - `FORESIGHT_CHUNK_BYTES=N`: the events per chunk, in bytes (default 64 KiB, 4 KiB to
//!   4 MiB); a benchmark's knob as well.
//! - `FORESIGHT_ORDERING=global`: one process-wide counter (`Ordering::GlobalSequence`)
//!   instead of the default Lamport clocks per object (`Ordering::Logical`, also selected by
//!   `logical`). The counter is a cache line every core writes on every synchronising event:
//!   on 2 cores a lock-heavy run took 1.8x to 3.1x as long as with the clocks
//!   (`bench/lock_overhead.sh`). It is kept for comparison, and for readers who want every
//!   synchronising event to have its own key.

use std::ffi::CStr;

use foresight_trace::CompressMode;

pub const MAX_STACK_DEPTH: usize = 32;

#[derive(Clone, Debug)]
pub struct Config {
    pub output: Option<Vec<u8>>,
    pub stack_depth: usize,
    pub no_follow: bool,
    pub global_sequence: bool,
    /// `FORESIGHT_ALLOCATIONS=0`: record no heap allocations of a program without
    /// instrumented code (an instrumented program's are always recorded); `1` or unset:
    /// record them.
    pub allocations: Option<bool>,
    /// The flusher's period in milliseconds; 0: none.
    pub flush_ms: u64,
    /// The file whose appearance asks this process to stop (`--hang-timeout`), and the
    /// timeout that made `foresight record` create it.
    pub stop_file: Option<Vec<u8>>,
    pub hang_timeout_ms: u64,
    /// `FORESIGHT_WRAPPERS`, as given.
    pub wrappers: Option<Vec<u8>>,
    /// `FORESIGHT_MAX_SIZE`, bytes (0: none).
    pub max_size: u64,
    /// `FORESIGHT_KEEP_LAST`, bytes (0: not a flight recorder).
    pub keep_last: u64,
    /// `FORESIGHT_COMPRESS`; an unknown value is `auto`, the default.
    pub compress: CompressMode,
    /// `FORESIGHT_ZSTD_LEVEL`.
    pub zstd_level: Option<i32>,
    /// `FORESIGHT_CHUNK_BYTES`.
    pub chunk_bytes: Option<u64>,
    /// `FORESIGHT_DUMP_ON`, a signal number (0: none).
    pub dump_on: i32,
}

fn var(name: &CStr) -> Option<Vec<u8>> {
    // SAFETY: `name` is NUL-terminated; getenv returns NULL or a NUL-terminated string that
    // we copy at once (before anything can modify the environment on this thread).
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null result of getenv, NUL-terminated.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
}

impl Config {
    pub fn from_env() -> Self {
        let output = var(c"FORESIGHT_OUTPUT").filter(|v| !v.is_empty());
        let stack_depth = var(c"FORESIGHT_STACK_DEPTH")
            .and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse::<usize>().ok())
            .map_or(1, |n| n.clamp(1, MAX_STACK_DEPTH));
        let no_follow = var(c"FORESIGHT_NO_FOLLOW").is_some_and(|v| v == b"1");
        let global_sequence = var(c"FORESIGHT_ORDERING").is_some_and(|v| v == b"global");
        let allocations = var(c"FORESIGHT_ALLOCATIONS").and_then(|v| match &v[..] {
            b"1" => Some(true),
            b"0" => Some(false),
            _ => None,
        });
        let number = |name: &CStr| {
            var(name).and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse::<u64>().ok())
        };
        let wrappers = var(c"FORESIGHT_WRAPPERS").filter(|v| !v.is_empty());
        let compress = var(c"FORESIGHT_COMPRESS")
            .and_then(|v| CompressMode::parse(std::str::from_utf8(&v).ok()?.trim()))
            .unwrap_or_default();
        Self {
            output,
            stack_depth,
            no_follow,
            global_sequence,
            allocations,
            flush_ms: number(c"FORESIGHT_FLUSH_MS").unwrap_or(100),
            stop_file: var(c"FORESIGHT_STOP_FILE").filter(|v| !v.is_empty()),
            hang_timeout_ms: number(c"FORESIGHT_HANG_TIMEOUT_MS").unwrap_or(0),
            wrappers,
            max_size: number(c"FORESIGHT_MAX_SIZE").unwrap_or(0),
            keep_last: number(c"FORESIGHT_KEEP_LAST").unwrap_or(0),
            compress,
            chunk_bytes: number(c"FORESIGHT_CHUNK_BYTES"),
            zstd_level: var(c"FORESIGHT_ZSTD_LEVEL")
                .and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse::<i32>().ok()),
            dump_on: number(c"FORESIGHT_DUMP_ON").map_or(0, |n| n.min(64) as i32),
        }
    }
}

/// Removes every `LD_PRELOAD` entry that names this runtime (its file name contains
/// `foresight_rt`), keeping the others; `None` when nothing is left.
pub fn strip_preload(value: &[u8]) -> Option<Vec<u8>> {
    let kept: Vec<&[u8]> = value
        .split(|&b| b == b':' || b == b' ')
        .filter(|e| !e.is_empty())
        .filter(|e| !e.windows(12).any(|w| w == b"foresight_rt"))
        .collect();
    if kept.is_empty() {
        None
    } else {
        Some(kept.join(&b':'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip() {
        assert_eq!(strip_preload(b"/x/libforesight_rt.so"), None);
        assert_eq!(
            strip_preload(b"/a/liba.so:/x/libforesight_rt.so /b/libb.so").as_deref(),
            Some(&b"/a/liba.so:/b/libb.so"[..])
        );
    }
}
