//! Start-up, completion and fork handling of the whole runtime.
//!
//! - `init` runs from `.init_array` (before `main`, after libc is ready): reads the env
//!   contract, opens the trace, registers the fork and exit handlers, installs the SIGINT and
//!   SIGTERM handlers, and records the main thread's start. Hooks called before it (another
//!   library's constructor) find the state not `RECORDING` and only call the real function.
//! - `finish` completes the trace: every live thread's exit, its buffer, the table buffer,
//!   the trailer. It runs once, from `atexit` (after the program's own handlers, which were
//!   registered later), `_exit`, a signal, or a failed-exec-safe checkpoint (`before_exec`).
//! - The fork child handler turns the child into a fresh recording with its own file.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use foresight_trace::event::EventKind;
use foresight_trace::tables::{
    EndReason, Header, Ordering as KeyOrdering, TableRecord, ThreadEnd, ThreadInfo,
};
use foresight_trace::writer::TableChunkBuf;
use foresight_trace::CompressMode;

use crate::config::{self, Config};
use crate::hooks::thread;
use crate::output::{self, STATE_DONE, STATE_OFF, STATE_PAUSED, STATE_RECORDING, STATE_STARTING};
use crate::sequence::{self, Key};
use crate::spin::SpinLock;
use crate::thread_state::{self, ThreadState};
use crate::{modules, objects, sites, wrappers, ALLOC};

static CONFIG: SpinLock<Option<Config>> = SpinLock::new(None);
/// The recorded process (a `vfork` child shares our memory but has another pid: it must not
/// touch the parent's trace).
static PID: AtomicU32 = AtomicU32::new(0);
/// `main`'s return value or `exit`'s argument, for the trailer.
pub static EXIT_STATUS: AtomicI32 = AtomicI32::new(0);

pub const PRODUCER: &str = concat!("foresight-recorder ", env!("CARGO_PKG_VERSION"));

fn getpid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// The recorded process's pid.
pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

/// True in the process that owns the trace (not in a `vfork` child).
pub fn own_process() -> bool {
    getpid() == PID.load(Ordering::Relaxed)
}

fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn header(cfg: &Config, pid: u32, parent_pid: u32) -> Header {
    Header {
        producer: PRODUCER.to_string(),
        pid,
        parent_pid,
        command: command_line(),
        start_unix_ns: output::now_ns(),
        ordering: if cfg.global_sequence {
            KeyOrdering::GlobalSequence
        } else {
            KeyOrdering::Logical
        },
        pointer_width: std::mem::size_of::<usize>() as u8,
        stack_depth: cfg.stack_depth as u8,
    }
}

fn trace_path(cfg: &Config, pid: u32) -> Vec<u8> {
    cfg.output
        .clone()
        .unwrap_or_else(|| format!("foresight-{pid}.trace").into_bytes())
}

/// `FORESIGHT_NO_FOLLOW=1`: remove the runtime from our own `LD_PRELOAD` at start-up, so that
/// every program started from this one (exec, posix_spawn, system) inherits an environment
/// without it. `execve` with an explicit environment is filtered in its hook.
fn strip_own_preload() {
    // SAFETY: getenv/setenv/unsetenv at start-up, before the program's threads exist.
    unsafe {
        let p = libc::getenv(c"LD_PRELOAD".as_ptr());
        if p.is_null() {
            return;
        }
        let v = std::ffi::CStr::from_ptr(p).to_bytes().to_vec();
        match config::strip_preload(&v) {
            None => {
                libc::unsetenv(c"LD_PRELOAD".as_ptr());
            }
            Some(kept) => {
                if let Ok(c) = std::ffi::CString::new(kept) {
                    libc::setenv(c"LD_PRELOAD".as_ptr(), c.as_ptr(), 1);
                }
            }
        }
    }
}

pub fn no_follow() -> bool {
    CONFIG.lock().as_ref().is_some_and(|c| c.no_follow)
}

pub extern "C" fn init() {
    if !output::transition(STATE_OFF, STATE_STARTING) {
        return;
    }
    let cfg = Config::from_env();
    sequence::set_global(cfg.global_sequence);
    sites::set_depth(cfg.stack_depth);
    wrappers::configure(cfg.wrappers.as_deref());
    crate::hooks::tsan::configure(cfg.stack_depth);
    crate::hooks::memory::init();
    crate::hooks::heap::set_recording(cfg.allocations.unwrap_or(true));
    if cfg.no_follow {
        strip_own_preload();
    }
    let pid = getpid();
    PID.store(pid, Ordering::Relaxed);
    let path = trace_path(&cfg, pid);
    let fd = match output::open_trace(&path, pid, false) {
        Ok((fd, opened)) => {
            output::set_trace_path(&opened);
            fd
        }
        Err(e) => {
            output::complain(&e);
            output::set_state(STATE_DONE);
            return;
        }
    };
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() } as u32;
    // The flight recorder decodes the chunks it drops (for the lock-order summary) and keeps
    // a bounded window: its chunks are written plain.
    let compress = if cfg.keep_last > 0 {
        CompressMode::Never
    } else {
        cfg.compress
    };
    if let Some(bytes) = cfg.chunk_bytes {
        thread_state::set_chunk_bytes(bytes as usize);
    }
    if let Some(level) = cfg.zstd_level {
        // Before any chunk writer is made (a forked child inherits it).
        foresight_trace::compress::set_zstd_level(level);
    }
    output::start(fd, &header(&cfg, pid, ppid), compress);
    output::set_max_size(cfg.max_size);
    if cfg.chunk_bytes.is_none() {
        // Under a small size limit (`ulimit -f`, --max-size), smaller chunks: the events
        // that fit are written, instead of none for want of room for one whole chunk.
        if let Some(limit) = output::size_limit().filter(|&l| l < SMALL_LIMIT) {
            thread_state::set_chunk_bytes((limit / 8) as usize);
        }
    }
    if cfg.keep_last > 0 && !crate::flight::configure(cfg.keep_last) {
        output::complain("cannot map the flight recorder's window (--keep-last)");
        output::set_state(STATE_DONE);
        return;
    }
    crate::flusher::configure(&cfg);
    if cfg.keep_last > 0 {
        crate::signals::set_dump_on(cfg.dump_on);
    }
    *CONFIG.lock() = Some(cfg);
    thread::init_exit_key();
    thread_state::enable_fast_path();
    // SAFETY: registering handlers with the right signatures.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        libc::atexit(at_exit);
    }
    crate::signals::init();
    thread::start_main();
    output::set_state(STATE_RECORDING);
}

/// A size limit under which chunks are made smaller than the default 64 KiB.
const SMALL_LIMIT: u64 = 512 << 10;

extern "C" fn at_exit() {
    finish(
        EndReason::Exit {
            status: EXIT_STATUS.load(Ordering::Relaxed),
        },
        None,
        true,
    );
}

/// What the end of a trace after the flight recorder's window takes at most (end states,
/// stop cause, trailer), kept out of the window's bound.
const END_ROOM: u64 = 16 << 10;

/// Completes the trace (once). `attempts` bounds every lock wait (signal handlers).
/// `caller_exits`: the calling thread ends the process (`exit`, `_exit`) and gets a
/// `thread-exit`; every other live thread gets an end state instead (FORMAT.md §7.12).
pub fn finish(reason: EndReason, attempts: Option<u32>, caller_exits: bool) {
    if !own_process() {
        return;
    }
    if !output::transition(STATE_RECORDING, STATE_DONE)
        && !output::transition(STATE_PAUSED, STATE_DONE)
        && !output::transition(output::STATE_STOPPED, STATE_DONE)
    {
        return;
    }
    // As the runtime: what libraries do for it here (a `memcpy` of theirs) is not the
    // program's.
    let me = thread_state::current().filter(|t| t.enter());
    let me_ptr = me
        .as_ref()
        .map_or(std::ptr::null(), |t| &**t as *const ThreadState);
    // The end states and access counts go straight to the file from this stack buffer: the
    // table buffer allocates, and a signal handler must not.
    let mut buf = [0u8; 2048];
    let mut ends = TableChunkBuf::new(&mut buf);
    // After a failed write or at the size limit, the room left may not hold every thread's
    // end: the cause goes first, in a chunk of its own, so that the trace says why it ends.
    let stop_first = output::write_stopped();
    if stop_first {
        write_stop_cause();
    }
    // Without the flush lock in time (a signal handler, another flusher stuck), the threads'
    // buffers are left alone: only what is written already, and the trailer.
    if let Some(quiesced) = thread_state::quiesce(attempts) {
        thread_state::for_each_live(attempts, |t| {
            let exits = caller_exits && std::ptr::eq(t, me_ptr);
            let Some(end) = t.close_at_end(attempts, exits) else {
                return;
            };
            let Some(chunk) = ends.as_mut() else {
                return;
            };
            let state = end.state.map(|state| {
                TableRecord::ThreadEnd(ThreadEnd {
                    thread: end.thread,
                    state,
                })
            });
            for r in state
                .iter()
                .chain(end.counts.map(TableRecord::AccessCounts).iter())
            {
                if !chunk.push(r) {
                    output::write_chunk(chunk.framed());
                    chunk.clear();
                    chunk.push(r);
                }
            }
        });
        quiesced.keep();
    }
    // The flight recorder's window, now that every buffer is in it (before the end states
    // that may name its threads' last requests).
    crate::flight::dump(attempts, END_ROOM);
    output::flush_tables(attempts);
    if let Some(chunk) = ends.as_mut() {
        if let Some(stop) = output::stopped().filter(|_| !stop_first) {
            let r = TableRecord::RecordingStopped(stop);
            if !chunk.push(&r) {
                output::write_chunk(chunk.framed());
                chunk.clear();
                chunk.push(&r);
            }
        }
        if !chunk.is_empty() {
            output::write_chunk(chunk.framed());
        }
    }
    output::write_trailer(reason);
    if let Some(t) = me {
        t.leave();
    }
    // The descriptor stays open (it is close-on-exec): closing it here could let the program
    // reuse its number while a late writer still holds it.
}

/// The recording-stopped record, in a table chunk of its own (built on the stack).
fn write_stop_cause() {
    let Some(stop) = output::stopped() else {
        return;
    };
    let mut buf = [0u8; 128];
    if let Some(mut chunk) = TableChunkBuf::new(&mut buf) {
        if chunk.push(&TableRecord::RecordingStopped(stop)) {
            output::write_chunk(chunk.framed());
        }
    }
}

/// `--dump-on`: the flight recorder's window as it is now, written to a snapshot file of its
/// own (`PATH.snapshot-<N>`, FORMAT.md §7.14) while the process and its trace go on. Run from
/// the signal handler (`attempts` bounds every lock wait, as for `finish`): every thread's
/// buffer goes to the window and its state is noted, then the trace's prefix and table
/// chunks, the thread-end records, and the window (`flight::snapshot`) go to the new file. No
/// trailer: the process did not end. Nothing is allocated.
pub fn snapshot(signal: i32, attempts: Option<u32>) {
    if !own_process() || output::state() != STATE_RECORDING || !crate::flight::active() {
        return;
    }
    // As the runtime: what libraries do for it here is not the program's.
    let me = thread_state::current().filter(|t| t.enter());
    write_snapshot(signal, attempts);
    if let Some(t) = me {
        t.leave();
    }
}

fn write_snapshot(signal: i32, attempts: Option<u32>) {
    // The threads' states, in a stack buffer until the file's first bytes are in place.
    let mut ends_buf = [0u8; 2048];
    let Some(mut ends) = TableChunkBuf::new(&mut ends_buf) else {
        return;
    };
    // More threads than the buffer holds: their states go after the first ones (`extra`).
    let mut extra_buf = [0u8; 2048];
    let Some(mut extra) = TableChunkBuf::new(&mut extra_buf) else {
        return;
    };
    if let Some(quiesced) = thread_state::quiesce(attempts) {
        thread_state::for_each_live(attempts, |t| {
            let Some((thread, state)) = t.snapshot_state(attempts) else {
                return;
            };
            let r = TableRecord::ThreadEnd(ThreadEnd { thread, state });
            // Past both buffers (some 800 threads), a thread's state is left out.
            if !ends.push(&r) {
                extra.push(&r);
            }
        });
        output::flush_tables(attempts);
        quiesced.end();
    }
    // The names are large for a signal handler's stack (which may be an alternate one):
    // one static buffer, the snapshot's lock held (one snapshot at a time).
    let Some(mut name) = (match attempts {
        Some(a) => SNAPSHOT_NAME.try_lock_for(a),
        None => Some(SNAPSHOT_NAME.lock()),
    }) else {
        return;
    };
    let Some((fd, mut at)) = output::open_snapshot(attempts, &mut name) else {
        return;
    };
    let write = |bytes: &[u8], off: u64| output::write_at(fd, bytes, off);
    for chunk in [&mut ends, &mut extra] {
        if !chunk.is_empty() {
            let framed = chunk.framed();
            if write(framed, at) {
                at += framed.len() as u64;
            }
        }
    }
    let done = crate::flight::snapshot(attempts, signal as u32, at, &write);
    // SAFETY: the snapshot's descriptor, ours, closed once.
    unsafe { libc::close(fd) };
    output::publish_snapshot(&name, done.is_some());
}

static SNAPSHOT_NAME: SpinLock<output::SnapshotName> = SpinLock::new(output::SnapshotName::EMPTY);

/// Before an `exec`: the `exec` event, every buffer, and a provisional trailer, so that the
/// old image's events reach its file. Recording pauses; `after_failed_exec` resumes it.
pub fn before_exec(ra: usize) {
    if !own_process() || !output::recording() {
        return;
    }
    if let Some(t) = thread_state::current() {
        t.with(|t| {
            let site = sites::call_site(ra).0;
            t.emit(EventKind::Exec { site }, Key::Tick);
        });
    }
    if !output::transition(STATE_RECORDING, STATE_PAUSED) {
        return;
    }
    if let Some(quiesced) = thread_state::quiesce(None) {
        thread_state::for_each_live(None, |t| {
            t.write_access_counts();
            t.flush(None);
        });
        // The other threads go on until the image is replaced (and for good if the exec
        // fails): back to their fast path. Their chunks keep the provisional trailer last
        // (`output::write_reserved`).
        quiesced.end();
    }
    // The old image's window goes to its file before the image is replaced.
    crate::flight::dump(None, END_ROOM);
    output::flush_tables(None);
    output::write_provisional_trailer();
}

pub fn after_failed_exec() {
    if own_process() && output::state() == STATE_PAUSED {
        output::exec_failed();
        output::transition(STATE_PAUSED, STATE_RECORDING);
    }
}

/// The flusher's round: every buffer its thread left alone since the last round, or that
/// holds events older than `max_age_ns`, and the table buffer, are written.
pub fn flush_stale(now_ns: u64, max_age_ns: u64) {
    if let Some(quiesced) = thread_state::quiesce(None) {
        thread_state::for_each_live(None, |t| {
            t.flush_if_stale(now_ns, max_age_ns);
        });
        output::flush_tables(None);
        quiesced.end();
    }
}

/// Writes every thread's buffer and the table buffer; recording goes on. Before a crash
/// signal reaches a handler of the program's (which may end the process). `attempts` bounds
/// every wait (signal handlers).
pub fn flush_all(attempts: Option<u32>) {
    if !own_process() || !output::recording() {
        return;
    }
    let me = thread_state::current().filter(|t| t.enter());
    if let Some(quiesced) = thread_state::quiesce(attempts) {
        thread_state::for_each_live(attempts, |t| {
            t.flush(attempts);
        });
        output::flush_tables(attempts);
        quiesced.end();
    }
    if let Some(t) = me {
        t.leave();
    }
}

// --- fork -----------------------------------------------------------------------------------

/// Holds every runtime lock across `fork`, so the child inherits consistent tables and heap.
/// Order: configuration, registry, modules, wrapper symbols, tables, allocator (the
/// configuration's lock nests with none; the others in the order in which the runtime nests
/// them).
extern "C" fn fork_prepare() {
    CONFIG.raw_lock();
    thread_state::lock_for_fork();
    modules::lock_for_fork();
    wrappers::lock_for_fork();
    output::lock_for_fork();
    ALLOC.lock_for_fork();
}

extern "C" fn fork_parent() {
    // SAFETY: fork_prepare took these locks on this thread.
    unsafe {
        ALLOC.unlock_after_fork();
        output::unlock_after_fork();
        wrappers::unlock_after_fork();
        modules::unlock_after_fork();
        thread_state::parent_after_fork();
        CONFIG.force_unlock();
    }
}

extern "C" fn fork_child() {
    let me = thread_state::current_ptr();
    // SAFETY: the child is single-threaded; fork_prepare took these locks in the parent.
    unsafe {
        ALLOC.unlock_after_fork();
        output::unlock_after_fork();
        wrappers::unlock_after_fork();
        modules::unlock_after_fork();
        thread_state::child_after_fork(me);
        CONFIG.force_unlock();
    }
    let st = output::state();
    if st != STATE_RECORDING && st != STATE_PAUSED {
        return;
    }
    let parent = PID.load(Ordering::Relaxed);
    let pid = getpid();
    PID.store(pid, Ordering::Relaxed);
    // SAFETY: the fork child's only thread.
    unsafe {
        objects::reset();
        sites::reset();
    }
    modules::reset();
    wrappers::reset();
    thread_state::pt_reset();
    output::forget_parent_file();
    crate::flight::reset_in_child();
    let Some(cfg) = CONFIG.lock().clone() else {
        output::set_state(STATE_DONE);
        return;
    };
    // With FORESIGHT_OUTPUT the child writes `<path>.<pid>` (then `.n`); without it, its own
    // `foresight-<pid>.trace`.
    let opened = match &cfg.output {
        Some(path) => output::open_trace(path, pid, true),
        None => output::open_trace(&trace_path(&cfg, pid), pid, false),
    };
    let fd = match opened {
        Ok((fd, path)) => {
            output::set_trace_path(&path);
            fd
        }
        Err(e) => {
            output::complain(&e);
            output::set_state(STATE_DONE);
            return;
        }
    };
    output::start(fd, &header(&cfg, pid, parent), cfg.compress);
    thread_state::enable_fast_path();
    // The flusher is not among the child's threads: it starts again when the child creates
    // one (or now, to watch for a stop request).
    crate::flusher::configure(&cfg);
    if !me.is_null() {
        let tid = thread_state::next_thread_id();
        // SAFETY: the state this thread owns, allocated (it stays registered).
        let t = unsafe { &*me };
        // SAFETY: the child's only thread, which owns the state.
        unsafe { t.reset_for_child(tid) };
        // SAFETY: pthread_self has no preconditions.
        thread_state::pt_name(unsafe { libc::pthread_self() } as usize, tid);
        output::table_record(&TableRecord::Thread(ThreadInfo {
            id: tid,
            os_tid: t.os_tid.get(),
            parent: None,
            name: None,
        }));
        t.emit(EventKind::ThreadStart, Key::Tick);
    }
    output::set_state(STATE_RECORDING);
}

#[cfg(test)]
mod tests {
    #[test]
    fn readers_recognise_the_producer_name() {
        // The symboliser trusts what this recorder always writes by this name.
        assert!(super::PRODUCER.starts_with(foresight_trace::tables::RECORDER_PRODUCER));
    }
}
