//! `foresight record`: run a command under the recorder runtime (`LD_PRELOAD`), wait for it,
//! symbolise every trace the run produced, and exit with the command's status.
//!
//! The contract with the runtime is a handful of environment variables (`FORESIGHT_OUTPUT`,
//! `FORESIGHT_STACK_DEPTH`, `FORESIGHT_NO_FOLLOW`, `FORESIGHT_ALLOCATIONS`, `FORESIGHT_COMPRESS`,
//! `LD_PRELOAD`). The root process writes
//! exactly `PATH` (the runtime opens it with `O_CREAT|O_EXCL`), so `record` clears `PATH` and its
//! stale `PATH.<pid>[.<n>]` siblings first; forked children and exec'd images that find `PATH`
//! taken write those siblings.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use foresight_symbols::{symbolize_in_place, SymbolizeOptions};
use foresight_trace::frame::FILE_MAGIC;
use foresight_trace::tables::{StopCause, ThreadEndState};
use foresight_trace::{TraceFile, TraceStream};

use foresight_analyzer::report::counted;
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM};

use super::run_files::{siblings, siblings_and_snapshots, snapshots};
use super::runtime::{check_target, find_runtime, ld_preload};
use super::safe_fs::untrusted_file;

#[derive(clap::Args)]
#[command(override_usage = "foresight record [OPTIONS] [--] <CMD> [ARGS]...")]
#[command(after_long_help = "\
The runtime libforesight_rt.so travels inside the foresight executable: at first use it is \
written into a private cache directory, $FORESIGHT_CACHE_DIR (else $XDG_CACHE_HOME/foresight, \
else ~/.cache/foresight) as runtime-<hash>/libforesight_rt.so, and used from there while its \
bytes are the ones inside. FORESIGHT_RUNTIME=/path/to/libforesight_rt.so takes another one. A \
cache that cannot be written or is on a file system mounted noexec is an error (exit 2) that \
says so; so is a statically linked or musl-linked command, which LD_PRELOAD cannot reach, and \
a program built with ThreadSanitizer or AddressSanitizer, whose runtime cannot share the process \
with foresight's (build it with `foresight config`'s flags instead).

Forked children and programs the command executes are recorded too (unless --no-follow), each \
into PATH.<pid> or PATH.<pid>.<n>. An existing PATH and its PATH.<pid>[.<n>] siblings are \
removed first (only if they are foresight traces or empty). After the run every trace is \
symbolised (function, file, line) so it can be analysed without the binaries. The frames \
resolved are kept per module build (build-id) in the cache directory, frames-<stamp>/, so that \
the next recording of the same build names them without reading its debug information (the \
256 builds used last; another foresight executable's directory is removed); \
FORESIGHT_FRAME_CACHE=off turns that off.

Ctrl-C reaches the command (it is in the same process group); foresight waits for it, and the \
trace is completed as the command ends. SIGINT, SIGQUIT, SIGTERM and SIGHUP (and the signal of \
--dump-on) sent to foresight by another process are passed on to the command. If foresight is killed (even with SIGKILL), the run \
is stopped with it: each recorded process completes its trace, saying where each thread \
waits, and every process of the run (children and grandchildren too) is killed within 3 s. Signals ignored when foresight starts (nohup) are ignored in the command too.

With --hang-timeout SECS, a run in which no process records an event for SECS seconds is \
stopped: each process completes its trace, with what every thread was doing (where it waits), \
and is killed.

Exit status: the command's (128+N if a signal N killed it) whenever it ran, whatever happened to \
the trace; 2 if foresight could not start it (runtime not found or not the runtime, command not \
found, bad arguments).")]
pub struct Args {
    /// Where to write the trace [default: foresight-<command name>.trace in the working
    /// directory].
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// Frames recorded per call site, from the program's own: 1 records the return address of
    /// the call only, more record its callers too (slower).
    ///
    /// A call made inside locking machinery (the C and C++ libraries, `--wrapper`s) is recorded
    /// through it to the program's frame in any case. The callers of a memory access come from
    /// a shadow call stack the instrumentation keeps when built with `foresight config
    /// --callers`, else from unwinding each of them (tens of times slower).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..=32))]
    stack_depth: u8,
    /// Record only the command's own process: not its forked children, not the programs it
    /// executes.
    #[arg(long)]
    no_follow: bool,
    /// Leave the traces unsymbolised (addresses only; `foresight` needs the binaries later).
    #[arg(long)]
    no_symbolize: bool,
    /// Stop the run when no process of it records an event for SECS seconds (a hang, such as a
    /// deadlock): every process completes its trace, saying where each thread waits, and is
    /// killed (SIGKILL).
    ///
    /// Processes the runtime does not record count as idle.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(1..=86400))]
    hang_timeout: Option<u32>,
    /// Do not record heap allocations (malloc, free, new, delete): a program that allocates
    /// millions of blocks a second records faster and smaller without them.
    ///
    /// A program built with `foresight config` records them anyway (its memory accesses need
    /// them).
    #[arg(long)]
    no_allocations: bool,
    /// A function of the program's that wraps locking (glob; see `foresight analyze
    /// --wrapper`): calls made inside it are recorded with the callers up to the first frame
    /// outside every wrapper, so that the analysis can name them.
    ///
    /// Repeatable; the suppressions file's `wrappers = [...]` in the working directory adds
    /// more.
    #[arg(long = "wrapper", value_name = "GLOB")]
    wrappers: Vec<String>,
    /// Stop recording when the trace reaches SIZE (bytes, or with a suffix K, M, G: powers of
    /// 1024): the program runs on unrecorded and the trace says recording stopped, as when the
    /// disk is full.
    ///
    /// Each process of the run has its own bound.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, conflicts_with = "keep_last")]
    max_size: Option<u64>,
    /// Flight recorder: keep only the most recent events, within SIZE (as --max-size), and
    /// write them when the process ends (exit, a signal, a crash, --hang-timeout) or execs.
    ///
    /// Lock-order edges seen before the window are kept as a summary, so that a cycle with one
    /// side before the window is still reported (as potential). A process killed with SIGKILL
    /// writes no window.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    keep_last: Option<u64>,
    /// With --keep-last: when SIGNAL arrives (a name or a number: USR2, SIGUSR2, 12), each
    /// process writes its window as it is now to a snapshot, `PATH.snapshot-N` (N from 1), and
    /// runs on; its trace goes on too.
    ///
    /// For a server in staging: `kill -USR2 PID` when it looks stuck. The runtime takes the
    /// signal over: a handler the program installs for it is not run, and the signal no longer
    /// ends the process. A call the signal interrupts returns early if it would for any handler
    /// (`sleep`, `nanosleep`). One of HUP, INT, QUIT, USR1, USR2, PIPE, ALRM, TERM, XCPU,
    /// VTALRM, PROF. Snapshots are analysed by naming them (`foresight analyze
    /// PATH.snapshot-1`), not as processes of the run.
    #[arg(long, value_name = "SIGNAL", value_parser = parse_signal, requires = "keep_last")]
    dump_on: Option<i32>,
    /// Compress the trace's event chunks as they are written (zstd by default).
    ///
    /// `auto` compresses with zstd, and writes plain for a while after chunks that shrank less
    /// than 2x (a workload that does not
    /// compress costs little); `always` compresses every chunk with zstd; `lz4` compresses with
    /// LZ4 as `auto` does (cheaper, larger, read by foresight releases without zstd, format
    /// 2.7); `never` writes an uncompressed trace (format 1.x, which older foresight releases
    /// read), and records fastest where chunks compress least (memory accesses: an eighth less
    /// CPU time than `auto` on zstd's compressor, for a trace 1.6 times larger; `foresight
    /// pack` compresses it for a bug report).
    ///
    /// A flight recorder (--keep-last) writes its window uncompressed.
    #[arg(long, value_name = "WHEN", default_value = "auto",
          value_parser = ["auto", "always", "lz4", "never"])]
    compress: String,
    /// The command to record and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let runtime = find_runtime()?;
    let program = &args.command[0];
    check_target(program)?;
    let shown = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(default_output_name(program)));
    let output = absolute(&shown)?;
    let stale_kept = prepare_output(&output)?;

    let mut cmd = Command::new(program);
    cmd.args(&args.command[1..])
        // Absolute, because processes of the run may change directory before they open it.
        .env("FORESIGHT_OUTPUT", &output)
        .env("FORESIGHT_STACK_DEPTH", args.stack_depth.to_string())
        .env("FORESIGHT_COMPRESS", &args.compress)
        .env("LD_PRELOAD", ld_preload(&runtime)?);
    // A value inherited from the caller's environment must not change what was asked for.
    if args.no_follow {
        cmd.env("FORESIGHT_NO_FOLLOW", "1");
    } else {
        cmd.env_remove("FORESIGHT_NO_FOLLOW");
    }
    if args.no_allocations {
        cmd.env("FORESIGHT_ALLOCATIONS", "0");
    } else {
        cmd.env_remove("FORESIGHT_ALLOCATIONS");
    }
    match args.max_size {
        Some(n) => cmd.env("FORESIGHT_MAX_SIZE", n.to_string()),
        None => cmd.env_remove("FORESIGHT_MAX_SIZE"),
    };
    match args.keep_last {
        Some(n) => cmd.env("FORESIGHT_KEEP_LAST", n.to_string()),
        None => cmd.env_remove("FORESIGHT_KEEP_LAST"),
    };
    match args.dump_on {
        Some(sig) => cmd.env("FORESIGHT_DUMP_ON", sig.to_string()),
        None => cmd.env_remove("FORESIGHT_DUMP_ON"),
    };
    let config = foresight_analyzer::suppressions::Suppressions::discover(None)?;
    let mut wrappers = foresight_analyzer::sites::Wrappers::new(args.wrappers.iter().cloned());
    if let Some(c) = &config {
        wrappers.extend(&c.wrappers);
    }
    if wrappers.patterns().is_empty() {
        cmd.env_remove("FORESIGHT_WRAPPERS");
    } else {
        // One pattern a line: C++ names hold commas and spaces, never a newline.
        cmd.env("FORESIGHT_WRAPPERS", wrappers.patterns().join("\n"));
    }

    // The stop file serves the hang timeout and the keeper (`keeper.rs`), which stops the run
    // if `record` is killed; only the hang timeout cannot do without it.
    let hang = match (
        HangWatch::new(&output, args.hang_timeout),
        args.hang_timeout,
    ) {
        (Ok(h), _) => Some(h),
        (Err(e), Some(_)) => return Err(e),
        (Err(_), None) => None,
    };
    match &hang {
        Some(h) => cmd.env("FORESIGHT_STOP_FILE", &h.stop_file),
        None => cmd.env_remove("FORESIGHT_STOP_FILE"),
    };
    match args.hang_timeout {
        Some(secs) => cmd.env(
            "FORESIGHT_HANG_TIMEOUT_MS",
            (u64::from(secs) * 1000).to_string(),
        ),
        None => cmd.env_remove("FORESIGHT_HANG_TIMEOUT_MS"),
    };

    let (child_pid, status) = run_and_wait(cmd, program, hang.as_ref(), args.dump_on)?;
    // Symbolising appends to the traces: past a file size limit (`ulimit -f`) the write must
    // fail with EFBIG (a warning) instead of killing foresight with SIGXFSZ. Only now: the
    // command, already gone, must not have inherited an ignored SIGXFSZ.
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory-safety preconditions.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    if let Some(h) = hang {
        h.clean_up();
    }
    let code = exit_code(status);

    let traces = traces_of_run(&output, &stale_kept);
    if traces.is_empty() {
        match output.parent().and_then(directory_trouble) {
            // The runtime said why it could not record already; this says where.
            Some(why) => say!(
                "foresight: warning: no trace was written to {}: its directory {why}",
                shown.display()
            ),
            None => say!(
                "foresight: warning: no trace was written to {}: the runtime {} did not record \
                 {} (a statically linked or set-user-ID program ignores LD_PRELOAD, and so does \
                 one that clears its environment)",
                shown.display(),
                runtime.display(),
                Path::new(program).display()
            ),
        }
        return Ok(ExitCode::from(code));
    }
    let mut written = Vec::new();
    let mut silent = 0usize;
    // A process that executed a program the runtime could not enter (static, set-user-ID)
    // has no later trace of its pid: its trace, however silent, is what says so. Only a
    // child's trace asks (the root's is kept whatever it holds): a run of one process opens
    // its trace once fewer.
    let pids: Vec<u32> = if traces.len() > 1 {
        traces
            .iter()
            .filter_map(|(_, p)| TraceFile::open(p).ok().map(|f| f.header().pid))
            .collect()
    } else {
        Vec::new()
    };
    let continued = |pid: u32| pids.iter().filter(|&&p| p == pid).count() > 1;
    for (suffix, path) in &traces {
        let mut name = shown.clone().into_os_string();
        name.push(suffix);
        let prepared = prepare_trace(
            Path::new(&name),
            path,
            suffix.is_empty(),
            child_pid,
            &args,
            &continued,
        );
        match prepared {
            Prepared::Silent => silent += 1,
            Prepared::Written(w) => written.push(w),
            Prepared::Unreadable => {}
        }
    }
    report_run(&shown, written, silent);
    if args.dump_on.is_some() {
        report_snapshots(&output, &shown, &args);
    }
    Ok(ExitCode::from(code))
}

/// How `record` symbolises the traces of its run: without waiting for the disk (`fsync`). The
/// runtime writes a trace as any program writes a file, and the kernel writes it back in its
/// time; a sync after the tables were appended, alone among the trace's writes, made every
/// `record` wait for the trace's pages to reach the disk (milliseconds, and hundreds of them
/// on a busy disk) for no guarantee the events had. With the frame cache, a second recording
/// of the same build reads none of its modules.
fn record_symbolize_options() -> SymbolizeOptions {
    SymbolizeOptions {
        sync: false,
        frame_cache: super::cache::frame_cache_dir(),
        ..SymbolizeOptions::default()
    }
}

/// What became of one trace of the run.
enum Prepared {
    /// A process that recorded no thread but its first and no synchronisation (a shell, `env`,
    /// `readlink` on the way to the program): its trace was removed.
    Silent,
    Written(Written),
    /// Empty or unreadable (a warning said so).
    Unreadable,
}

/// A trace to list in the summary.
struct Written {
    shown: PathBuf,
    size: u64,
    events: u64,
    threads: usize,
    cut: bool,
    command: String,
    /// Said after its line: a recording stopped early, threads that had not exited.
    notes: Vec<String>,
}

/// A child's trace that holds nothing an analysis can use: one thread at most, no
/// synchronisation object (lock, condition, barrier, once, semaphore), complete (a trailer),
/// recording not stopped early, no thread that was waiting when it ended, and not the last
/// word of a process that executed a program no later trace of its pid (`continued`) records.
fn is_silent(f: &TraceFile, continued: &dyn Fn(u32) -> bool) -> bool {
    let t = f.tables();
    f.trailer().is_some()
        && f.problems().is_empty()
        && t.threads.len() <= 1
        && t.objects.is_empty()
        && t.recording_stopped.is_none()
        && t.thread_ends.is_empty()
        && (continued(f.header().pid) || !ends_in_exec(f))
}

/// The trace's (one) thread ended with an `exec`: the process became another program.
fn ends_in_exec(f: &TraceFile) -> bool {
    f.tables().threads.keys().any(|id| {
        matches!(
            f.thread_events(id).0.events.last().map(|e| &e.kind),
            Some(foresight_trace::EventKind::Exec { .. })
        )
    })
}

/// Symbolises one trace and gathers its summary line; removes a child's trace that recorded
/// nothing of use (the root's stays: it names the run).
fn prepare_trace(
    shown: &Path,
    path: &Path,
    root: bool,
    reaped: u32,
    args: &Args,
    continued: &dyn Fn(u32) -> bool,
) -> Prepared {
    let warn = |what: &dyn std::fmt::Display| {
        say!("foresight: warning: {}: {what}", shown.display());
    };
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if len == 0 {
        if root {
            match path.parent().and_then(directory_trouble) {
                Some(why) => warn(&format_args!(
                    "empty: the runtime could not write the trace's header: its directory {why}"
                )),
                None => warn(&"empty: the process ended before the runtime wrote anything"),
            }
        } else {
            // A child that died before its header: nothing in it, nothing lost.
            let _ = std::fs::remove_file(path);
            return Prepared::Silent;
        }
        return Prepared::Unreadable;
    }
    // The reader's map is dropped before the file is symbolised (appended to).
    let running = match TraceFile::open(path) {
        Ok(f) => {
            if !root && is_silent(&f, continued) && std::fs::remove_file(path).is_ok() {
                return Prepared::Silent;
            }
            f.trailer().is_none() && still_running(f.header().pid, reaped)
        }
        Err(e) => {
            say!("foresight: warning: {e}");
            return Prepared::Unreadable;
        }
    };
    if running {
        warn(&"its process is still running; not symbolised (run `foresight record` again once it ended, or symbolise later)");
    } else if !args.no_symbolize {
        match symbolize_in_place(path, &record_symbolize_options()) {
            Ok(s) => {
                for w in s.warnings() {
                    warn(&w);
                }
            }
            Err(e) => warn(&format_args!("not symbolised: {e}")),
        }
    }
    // The summary reads the tables and the chunk index only: counts come from the chunks'
    // prefixes and a waiting thread's last chunk is the only one decoded, so that the time
    // and memory `record` takes after the program exits do not grow with its events.
    match TraceStream::open(path) {
        Ok(t) => {
            let mut notes = Vec::new();
            if let Some(stop) = t.tables().recording_stopped {
                notes.push(format!(
                    "foresight: warning: {}: {}",
                    shown.display(),
                    stop_cause(stop.cause, args.max_size)
                ));
            }
            if let Some(w) = window_summary(t.tables()) {
                notes.push(format!("  {w}"));
            }
            notes.extend(waiting_threads(&t).into_iter().map(|l| format!("  {l}")));
            Prepared::Written(Written {
                shown: shown.to_path_buf(),
                size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(len),
                events: t.declared_events(),
                threads: t.threads().count().max(t.tables().threads.len()),
                cut: t.trailer().is_none(),
                command: t.header().command.join(" "),
                notes,
            })
        }
        Err(e) => {
            say!("foresight: warning: {e}");
            Prepared::Unreadable
        }
    }
}

/// The summary: one line per trace left, busiest first (the root first among equals), and
/// how many silent processes left no trace.
fn report_run(shown: &Path, mut written: Vec<Written>, silent: usize) {
    // Stable: the root (first) stays ahead of children with as many events.
    written.sort_by_key(|w| std::cmp::Reverse(w.events));
    let line = |w: &Written| {
        let threads = w.threads;
        format!(
            "{} ({}, {} events, {} thread{}{})",
            w.shown.display(),
            human_size(w.size),
            w.events,
            threads,
            if threads == 1 { "" } else { "s" },
            if w.cut { ", cut short" } else { "" }
        )
    };
    let removed = if silent == 0 {
        String::new()
    } else {
        format!(
            "; {} that recorded no thread and no synchronisation left no trace",
            counted(silent, "process", "processes")
        )
    };
    match written.as_slice() {
        [] => {}
        [one] => {
            say!("foresight: trace written to {}{removed}", line(one));
            for n in &one.notes {
                say!("{n}");
            }
        }
        many => {
            say!(
                "foresight: run written to {}: {} recorded events, busiest first{removed}; \
                 `foresight analyze {}` reads them all",
                shown.display(),
                counted(many.len(), "process", "processes"),
                shown.display()
            );
            for w in many {
                say!("foresight: trace written to {}  {}", line(w), w.command);
                for n in &w.notes {
                    say!("{n}");
                }
            }
        }
    }
}

/// `--dump-on`: the snapshots the run's processes wrote, symbolised, one line each with the
/// threads that were waiting when it was taken.
fn report_snapshots(output: &Path, shown: &Path, args: &Args) {
    let snaps = snapshots(output);
    if snaps.is_empty() {
        say!(
            "foresight: no snapshot was written (--dump-on {}: the signal did not arrive)",
            signal_label(args.dump_on.unwrap_or(0))
        );
        return;
    }
    for path in snaps {
        // The runtime creates its snapshots new (`O_EXCL|O_NOFOLLOW`): a link or another
        // user's file by that name was planted, and is neither symbolised nor read.
        if let Some(why) = std::fs::symlink_metadata(&path)
            .ok()
            .and_then(|m| untrusted_file(&m, &[]))
        {
            say!(
                "foresight: warning: {}: not a snapshot of this run, left alone: {why}",
                path.display()
            );
            continue;
        }
        let name = path
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let shown = shown.with_file_name(name);
        if !args.no_symbolize {
            if let Err(e) = symbolize_in_place(&path, &record_symbolize_options()) {
                say!(
                    "foresight: warning: {}: not symbolised: {e}",
                    shown.display()
                );
            }
        }
        match TraceStream::open(&path) {
            Ok(t) => {
                let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                let threads = t.threads().count();
                say!(
                    "foresight: snapshot written to {} ({}, {} events, {} thread{}; taken on {} \
                     while the process ran)",
                    shown.display(),
                    human_size(size),
                    t.declared_events(),
                    threads,
                    if threads == 1 { "" } else { "s" },
                    signal_label(t.tables().snapshot_signal().unwrap_or(0) as i32)
                );
                for l in waiting_threads(&t) {
                    say!("  {l}");
                }
            }
            Err(e) => say!("foresight: warning: {e}"),
        }
    }
}

/// The signals `--dump-on` accepts: those the runtime keeps a handler for, less the crash
/// signals (the window is written on a crash already) and SIGXFSZ (the runtime's own writes).
const DUMP_SIGNALS: [(&str, i32); 11] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("XCPU", libc::SIGXCPU),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
];

fn signal_label(sig: i32) -> String {
    DUMP_SIGNALS
        .iter()
        .find(|(_, n)| *n == sig)
        .map_or_else(|| format!("signal {sig}"), |(name, _)| format!("SIG{name}"))
}

/// `--dump-on SIGNAL`: a name (`USR2`, `SIGUSR2`, any case) or a number, one of
/// `DUMP_SIGNALS`.
fn parse_signal(s: &str) -> Result<i32, String> {
    let t = s.trim().to_ascii_uppercase();
    let name = t.strip_prefix("SIG").unwrap_or(&t);
    let number = match name.parse::<i32>() {
        Ok(n) => Some(n),
        Err(_) => DUMP_SIGNALS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, n)| n)
            .or(match name {
                "KILL" => Some(libc::SIGKILL),
                "STOP" => Some(libc::SIGSTOP),
                "SEGV" => Some(libc::SIGSEGV),
                "BUS" => Some(libc::SIGBUS),
                "ILL" => Some(libc::SIGILL),
                "FPE" => Some(libc::SIGFPE),
                "ABRT" => Some(libc::SIGABRT),
                "TRAP" => Some(libc::SIGTRAP),
                "SYS" => Some(libc::SIGSYS),
                "XFSZ" => Some(libc::SIGXFSZ),
                _ => None,
            }),
    };
    let Some(n) = number else {
        return Err(format!("`{s}` is not a signal name or number"));
    };
    if DUMP_SIGNALS.iter().any(|&(_, d)| d == n) {
        return Ok(n);
    }
    let why = match n {
        libc::SIGKILL | libc::SIGSTOP => "no program can catch it",
        libc::SIGSEGV
        | libc::SIGBUS
        | libc::SIGILL
        | libc::SIGFPE
        | libc::SIGABRT
        | libc::SIGTRAP
        | libc::SIGSYS => "a crash signal (the window is written on a crash already)",
        libc::SIGXFSZ => "the runtime needs it for its own writes",
        _ => "not a signal the runtime keeps a handler for",
    };
    Err(format!(
        "`{s}` (signal {n}): {why}; one of HUP, INT, QUIT, USR1, USR2, PIPE, ALRM, TERM, XCPU, \
         VTALRM, PROF"
    ))
}

/// The smallest bound `--max-size`/`--keep-last` accept: room for the tables and the window.
const MIN_BOUND: u64 = 256 << 10;

/// `SIZE`: bytes, or a number with `K`, `M`, `G` (powers of 1024, `KiB`/`KB` alike).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (bytes, or a number with K, M or G)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(format!("`{s}`: unknown unit (K, M or G)")),
    };
    let bytes = n
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))?;
    if bytes < MIN_BOUND {
        return Err(format!("`{s}` is too small: at least 256K"));
    }
    Ok(bytes)
}

/// `foresight-<basename>.trace`, with characters that are awkward in a file name replaced.
fn default_output_name(program: &OsStr) -> String {
    let base = Path::new(program)
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_else(|| "command".into());
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("foresight-{clean}.trace")
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    Ok(cwd.join(p))
}

/// What a file at an output path holds.
enum Existing {
    Absent,
    /// A foresight trace, or an empty file (a process that died before writing its header).
    Ours,
    Other(&'static str),
}

fn existing(p: &Path) -> Existing {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return Existing::Absent;
    };
    if !meta.is_file() {
        return Existing::Other("it is not a regular file");
    }
    let mut magic = [0u8; FILE_MAGIC.len()];
    let n = std::fs::File::open(p)
        .and_then(|f| f.take(magic.len() as u64).read(&mut magic))
        .unwrap_or(0);
    if meta.len() == 0 || (n == magic.len() && magic == FILE_MAGIC) {
        Existing::Ours
    } else {
        Existing::Other("it is not a foresight trace")
    }
}

/// Removes the previous run's traces so that the root process gets exactly `output`. Returns
/// the sibling-like files that were kept because they are not traces (they are not part of the
/// new run).
fn prepare_output(output: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dir = output.parent().unwrap_or(Path::new("/"));
    if !dir.is_dir() {
        bail!(
            "cannot write {}: the directory {} does not exist",
            output.display(),
            dir.display()
        );
    }
    match existing(output) {
        Existing::Absent => {}
        Existing::Ours => std::fs::remove_file(output)
            .with_context(|| format!("cannot remove the previous trace {}", output.display()))?,
        Existing::Other(why) => bail!(
            "{} exists and {why}; not overwriting it (choose another path with -o)",
            output.display()
        ),
    }
    let mut kept = Vec::new();
    let (stale_siblings, stale_snapshots) = siblings_and_snapshots(output);
    // A previous run's snapshots (this run numbers its own from 1).
    for p in stale_snapshots {
        if let Existing::Ours = existing(&p) {
            std::fs::remove_file(&p)
                .with_context(|| format!("cannot remove the previous snapshot {}", p.display()))?;
        }
    }
    for (_, p) in stale_siblings {
        match existing(&p) {
            Existing::Ours => std::fs::remove_file(&p)
                .with_context(|| format!("cannot remove the previous trace {}", p.display()))?,
            Existing::Absent => {}
            Existing::Other(_) => kept.push(p),
        }
    }
    Ok(kept)
}

/// `--hang-timeout`: the run is stopped when no trace of it grows for `secs` seconds. The
/// runtime writes a thread's events at the latest a second after it recorded them
/// (`recorder/src/flusher.rs`), so a trace that does not grow is a process that records
/// nothing. Stopping: the stop file appears, each process's runtime sees it, completes its
/// trace and ends the process.
///
/// The stop file is in a new directory of the temporary directory that only the user can
/// write (`mkdtemp`, then mode 0711: a process of the run that changed its user can still see
/// the file, no one else can create it, list the directory or plant a link in it): a file
/// beside the trace could be created by anyone who can write there, and stop the run.
struct HangWatch {
    /// `None`: no hang timeout, the stop file is the keeper's only.
    secs: Option<u32>,
    stop_file: PathBuf,
    /// Holds `stop_file`; removed with it when the run is over.
    stop_dir: tempfile::TempDir,
    output: PathBuf,
}

impl HangWatch {
    fn new(output: &Path, secs: Option<u32>) -> anyhow::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let parent = absolute(&std::env::temp_dir())?;
        let stop_dir = super::safe_fs::private_dir_in(&parent, "foresight-stop-")
            .and_then(|d| {
                std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o711))?;
                Ok(d)
            })
            .map_err(|e| {
                anyhow!(
                    "--hang-timeout: cannot create a private directory in {} for the file that \
                     stops the run: {e} (set TMPDIR to a directory of your own)",
                    parent.display()
                )
            })?;
        let mut name = std::ffi::OsString::from(".");
        name.push(output.file_name().unwrap_or(OsStr::new("trace")));
        name.push(".foresight-stop");
        Ok(Self {
            secs,
            stop_file: stop_dir.path().join(name),
            stop_dir,
            output: output.to_path_buf(),
        })
    }

    /// The sizes and modification times of the run's traces, to compare between looks (a
    /// flight recorder's trace does not grow while it records: its runtime touches the file
    /// instead).
    fn sizes(&self) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
        let mut paths = vec![self.output.clone()];
        paths.extend(siblings(&self.output).into_iter().map(|(_, p)| p));
        paths
            .into_iter()
            .filter_map(|p| {
                std::fs::metadata(&p)
                    .ok()
                    .map(|m| (p, m.len(), m.modified().ok()))
            })
            .collect()
    }

    fn stop(&self) {
        if let Err(e) = super::safe_fs::create_new(&self.stop_file, 0o644) {
            say!(
                "foresight: warning: cannot create {}: {e}",
                self.stop_file.display()
            );
        }
    }

    fn clean_up(self) {
        let dir = self.stop_dir.path().to_path_buf();
        if let Err(e) = self.stop_dir.close() {
            say!("foresight: warning: cannot remove {}: {e}", dir.display());
        }
    }
}

/// The signals `foresight` was started with ignored, bit `sig` for each
/// (`note_inherited_signals`).
static INHERITED_IGNORED: AtomicU64 = AtomicU64::new(0);

/// Notes which signals the process inherited ignored. Called before `main` (a constructor of
/// the `foresight` binary), before the Rust runtime ignores SIGPIPE and before `record`
/// installs its handlers: the command it runs is given the same (as `nohup` means: a
/// program started under it must not die on a hangup because `foresight record` ran it).
pub fn note_inherited_signals() {
    let mut ignored = 0u64;
    for sig in 1..64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: an all-zero sigaction is a valid out-value; a null `act` only reads.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0
            && old.sa_sigaction == libc::SIG_IGN
        {
            ignored |= 1 << sig;
        }
    }
    INHERITED_IGNORED.store(ignored, Ordering::Relaxed);
}

fn inherited_ignored() -> u64 {
    INHERITED_IGNORED.load(Ordering::Relaxed)
}

/// How long a stopped run may take to end before its command is killed.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Starts the command and waits for it, passing termination requests on. `record` must not
/// die before the command: the traces are symbolised after it ends; and the command must not
/// outlive `record` (it is killed with it).
/// Returns the command's pid (reaped now) and its exit status.
fn run_and_wait(
    mut cmd: Command,
    program: &OsStr,
    hang: Option<&HangWatch>,
    dump_on: Option<i32>,
) -> anyhow::Result<(u32, ExitStatus)> {
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::low_level::siginfo::Cause;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    let shown = Path::new(program).display().to_string();
    // Registered before the command starts, so that its SIGCHLD cannot be missed. These are
    // handlers, not SIG_IGN: an ignored disposition would be inherited across exec, and the
    // command would ignore Ctrl-C too.
    // `--dump-on`'s signal sent to `record` is passed on too (a snapshot of the command).
    let mut watched = vec![SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD];
    watched.extend(dump_on.filter(|s| !watched.contains(s)));
    let mut signals = signal_hook::iterator::SignalsInfo::<WithOrigin>::new(watched)
        .context("cannot install signal handlers")?;
    // Once the command has ended, the termination signals act as usual again (they end the
    // symbolisation).
    // A signal `record` was started with ignored (`nohup`, `trap '' HUP`) stays ignored.
    let ignored = inherited_ignored();
    let done = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
        if ignored & (1 << sig) == 0 {
            signal_hook::flag::register_conditional_default(sig, Arc::clone(&done))
                .context("cannot install signal handlers")?;
        }
    }
    let parent = std::process::id();
    let (mut reports, report_end) = super::keeper::pipe().map_err(|e| {
        done.store(true, Ordering::SeqCst);
        anyhow!("cannot run {shown}: cannot make a pipe: {e}")
    })?;
    let keeper = super::keeper::Keeper::new(report_end, hang.map(|h| h.stop_file.as_path()));
    // SAFETY: the closure runs in the forked child before exec and only makes system calls
    // (async-signal-safe): the signals `record` inherited ignored are ignored again (its own
    // handlers, and the Rust runtime's SIGPIPE, would otherwise reach the command as the
    // default action); if `record` died before this, it exits at once; else it splits into
    // the keeper, which stays, and the command's process, which goes on to the exec.
    unsafe {
        cmd.pre_exec(move || {
            for sig in 1..64 {
                if ignored & (1 << sig) != 0 {
                    libc::signal(sig, libc::SIG_IGN);
                }
            }
            if libc::getppid() as u32 != parent {
                libc::_exit(128 + libc::SIGKILL);
            }
            keeper.split()
        });
    }
    let spawned = cmd.spawn();
    // The keeper's write end goes with the command (it holds the only other copy), so that a
    // keeper that dies without a word is an end of the pipe, not a wait.
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            done.store(true, Ordering::SeqCst);
            return Err(anyhow!("cannot run {shown}: {e}"));
        }
    };
    // The keeper's pid is not the command's: the command's is the one the traces name.
    let command_pid = reports.command_pid().unwrap_or(child.id());
    let hang = hang.and_then(|h| h.secs.map(|secs| (h, secs)));
    let mut sizes = hang.map(|(h, _)| h.sizes()).unwrap_or_default();
    let mut last_growth = Instant::now();
    let mut stopped_at: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                done.store(true, Ordering::SeqCst);
                return Err(anyhow!("cannot wait for {shown}: {e}"));
            }
        }
        let arrived: Vec<_> = match hang {
            // Without a hang watch nothing is to be done between signals.
            None => signals.wait().collect(),
            Some(_) => {
                let now: Vec<_> = signals.pending().collect();
                if now.is_empty() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                now
            }
        };
        for origin in arrived {
            match (origin.signal, origin.cause) {
                (SIGCHLD, _) => {}
                // The terminal sent these to the whole foreground process group, the command
                // included; sending them again would count twice (many servers treat a second
                // Ctrl-C as "quit now, without cleaning up").
                // (A hangup of the terminal reaches the foreground group the same way.)
                (_, Cause::Kernel) => {}
                // Sent to `record` by a process (`kill`, a supervisor, a closing terminal):
                // pass them on, so that the command ends and its trace is completed.
                (sig, _) => forward(child.id(), sig),
            }
        }
        if let Some((h, secs)) = hang {
            match stopped_at {
                None => {
                    let now = h.sizes();
                    if now != sizes {
                        sizes = now;
                        last_growth = Instant::now();
                    } else if last_growth.elapsed() >= Duration::from_secs(secs.into()) {
                        say!(
                            "foresight: no process of the run recorded an event for {} s: \
                             stopping {shown} (its trace says where each thread waits)",
                            secs
                        );
                        h.stop();
                        stopped_at = Some(Instant::now());
                    }
                }
                Some(at) if at.elapsed() > STOP_GRACE => {
                    say!(
                        "foresight: {shown} did not stop within {} s: killing it",
                        STOP_GRACE.as_secs()
                    );
                    forward(child.id(), libc::SIGKILL);
                    stopped_at = Some(Instant::now() + STOP_GRACE * 100);
                }
                Some(_) => {}
            }
        }
    };
    done.store(true, Ordering::SeqCst);
    signals.handle().close();
    // The command's status, as the keeper saw it; the keeper's own if it could not say
    // (killed with the command when the hang timeout's grace ran out).
    let status = reports.command_status().unwrap_or(status);
    Ok((command_pid, status))
}

fn forward(pid: u32, sig: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions. The pid is our child's, which has not
    // been reaped yet (only this thread waits for it), so it cannot name another process.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The command's exit status as ours: its code, or 128 + the signal that killed it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        (None, None) => 1,
    }
}

/// `output` and its siblings written by this run: (suffix, path), the root first. Only the
/// user's own regular files: they are symbolised (written to), and the run's processes write
/// new files (`O_EXCL`), so a link or another user's file is one planted beside them (said).
fn traces_of_run(output: &Path, stale_kept: &[PathBuf]) -> Vec<(String, PathBuf)> {
    let mut candidates = Vec::new();
    if std::fs::symlink_metadata(output).is_ok() {
        candidates.push((String::new(), output.to_path_buf()));
    }
    candidates.extend(
        siblings(output)
            .into_iter()
            .filter(|(_, p)| !stale_kept.contains(p)),
    );
    candidates
        .into_iter()
        .filter(|(_, p)| match std::fs::symlink_metadata(p) {
            Ok(meta) => match untrusted_file(&meta, &[]) {
                None => true,
                Some(why) => {
                    say!(
                        "foresight: warning: {}: not a trace of this run, left alone: {why}",
                        p.display()
                    );
                    false
                }
            },
            Err(_) => false,
        })
        .collect()
}

/// Why the runtime could not write in `dir`, if the directory says it: its file system is
/// read-only or full, or the user may not write it.
fn directory_trouble(dir: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` is plain data; zeroed is a valid value for it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid, writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0 {
        if st.f_flag & libc::ST_RDONLY != 0 {
            return Some(format!("{} is on a read-only file system", dir.display()));
        }
        if st.f_bavail == 0 || (st.f_files > 0 && st.f_favail == 0) {
            return Some(format!("{}'s file system is full", dir.display()));
        }
    }
    // SAFETY: `c` is a NUL-terminated path; access only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Some(format!(
            "{} cannot be written ({})",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    None
}

/// True when the process that wrote a trace without a trailer is still running (a child that
/// outlived the command): its file is still being written and must not be touched.
fn still_running(pid: u32, reaped: u32) -> bool {
    // The command itself (and the images it executed) ended: its pid may already be reused.
    if pid == reaped || pid == std::process::id() || pid == 0 {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) S …`: the state follows the last parenthesis (comm may contain spaces).
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

/// What a flight recorder's trace holds: one line, `None` for a whole recording.
pub(crate) fn window_summary(tables: &foresight_trace::tables::Tables) -> Option<String> {
    let first = tables.window.values().next()?;
    let dropped: u64 = tables.window.values().map(|w| w.events_dropped).sum();
    let threads = tables
        .window
        .values()
        .filter(|w| w.events_dropped > 0)
        .count();
    let edges = tables.earlier_lock_order.len();
    Some(format!(
        "flight recorder window (--keep-last {}): {dropped} earlier event{} of {threads} \
         thread{} dropped; {edges} lock-order edge{} seen before the window kept as a summary",
        human_size(first.keep_last),
        if dropped == 1 { "" } else { "s" },
        if threads == 1 { "" } else { "s" },
        if edges == 1 { "" } else { "s" },
    ))
}

/// What a recording-stopped record says, for the user.
pub(crate) fn stop_cause(cause: StopCause, max_size: Option<u64>) -> String {
    match cause {
        StopCause::WriteFailed { errno } if errno == libc::EBADF || errno == libc::EMFILE => {
            format!(
                "recording stopped early, the program ran on: the program took the trace's \
                 descriptor ({}); the trace holds what was written before",
                foresight_analyzer::descriptor_taken(errno)
            )
        }
        StopCause::WriteFailed { errno } => format!(
            "recording stopped early, the program ran on: writing the trace failed ({}); the \
             trace holds what was written before",
            std::io::Error::from_raw_os_error(errno)
        ),
        StopCause::FileSizeLimit { limit } if max_size == Some(limit) => format!(
            "recording stopped early, the program ran on: the trace reached its size limit \
             (--max-size, {}); it holds what was written before",
            human_size(limit)
        ),
        StopCause::FileSizeLimit { limit } => format!(
            "recording stopped early, the program ran on: the trace reached the file size limit \
             ({limit} bytes: `ulimit -f`, or --max-size); it holds what was written before"
        ),
        StopCause::HangTimeout { ms: 0 } => "the run was stopped because `foresight record` \
             was killed while it went on; where each thread was:"
            .to_string(),
        StopCause::HangTimeout { ms } => format!(
            "the run was stopped after {} s without an event; where each thread was:",
            ms / 1000
        ),
    }
}

/// How many of a blocked thread's last chunks are read to find the wait it was in: the wait
/// is its last event, so the last chunk holds it unless the chunk was lost.
const WAIT_CHUNKS: [usize; 2] = [1, 4];

/// One line per thread that had not exited when the trace ended: what it waited in, where.
fn waiting_threads(t: &TraceStream) -> Vec<String> {
    let tables = t.tables();
    let mut lines = Vec::new();
    for (&thread, state) in &tables.thread_ends {
        let name = tables
            .thread_name(thread)
            .map_or(format!("T{thread}"), |n| format!("T{thread} {n}"));
        let how = match state {
            ThreadEndState::Running => {
                lines.push(format!("{name}: running (not in a recorded wait)"));
                continue;
            }
            ThreadEndState::Blocked => "blocked",
            ThreadEndState::BlockedWithTimeout => "blocked (with a timeout)",
        };
        let last = WAIT_CHUNKS.iter().find_map(|&chunks| {
            t.thread_tail(thread, chunks)
                .filter(|e| e.kind.site().is_some())
                .last()
        });
        let what = match last {
            Some(e) => {
                let object = e
                    .kind
                    .object()
                    .map(|o| format!(" {}", tables.describe_object(o)))
                    .unwrap_or_default();
                let site = e
                    .kind
                    .site()
                    .map(|s| format!(" at {}", tables.describe_site(s)))
                    .unwrap_or_default();
                format!(" in {}{object}{site}", e.kind.name())
            }
            None => String::new(),
        };
        lines.push(format!("{name}: {how}{what}"));
    }
    lines
}

fn human_size(n: u64) -> String {
    const K: f64 = 1024.0;
    let f = n as f64;
    if n < 1024 {
        format!("{n} bytes")
    } else if f < K * K {
        format!("{:.1} KiB", f / K)
    } else if f < K * K * K {
        format!("{:.1} MiB", f / (K * K))
    } else {
        format!("{:.1} GiB", f / (K * K * K))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names() {
        assert_eq!(
            default_output_name(OsStr::new("/usr/bin/true")),
            "foresight-true.trace"
        );
        assert_eq!(
            default_output_name(OsStr::new("./my server")),
            "foresight-my_server.trace"
        );
    }

    #[test]
    fn a_live_process_is_running_and_a_dead_or_zombie_one_is_not() {
        let mut sleeper = Command::new("sleep").arg("5").spawn().unwrap();
        assert!(still_running(sleeper.id(), 0));
        assert!(
            !still_running(sleeper.id(), sleeper.id()),
            "the reaped command"
        );
        sleeper.kill().unwrap();
        // Killed but not reaped yet: a zombie, whose trace nobody writes any more.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!still_running(sleeper.id(), 0));
        sleeper.wait().unwrap();
    }

    #[test]
    fn sizes() {
        assert_eq!(human_size(10), "10 bytes");
        assert_eq!(human_size(2048), "2.0 KiB");
        assert_eq!(human_size(3 << 20), "3.0 MiB");
    }
}
