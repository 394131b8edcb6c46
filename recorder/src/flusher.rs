//! The flusher: a thread of the runtime's own that writes the buffers their threads would not
//! write soon, so that a process killed with SIGKILL (or stopped by the hang timeout) loses
//! little.
//!
//! A thread writes its buffer when the 64 KiB chunk is full; a thread that waits, or records
//! slowly, would keep its last events in memory, and those are the events that tell where a
//! program hung. Every period (`FORESIGHT_FLUSH_MS`, 100 ms by default) the flusher glances
//! at each thread without stopping it (`ThreadState::flush_due`: how many sessions its owner
//! had on the buffer, when its chunk began) and writes the buffer of a thread that recorded
//! nothing since the last glance and has events pending, or whose oldest unwritten event is
//! older than `MAX_AGE`: only those threads are sent to their buffer's lock, each for its
//! own write (`thread_state::flusher_round`); the others keep their fast path. At most lost on SIGKILL: the events of the last `MAX_AGE` + one period of
//! each thread still recording then, and the last period of a thread that went idle
//! (`recorder/bench/kill_loss.sh` measures it).
//!
//! The thread is started when the program creates its first thread (a program that never
//! does keeps a process of one thread, which some programs require, `unshare` for one; its
//! only thread writes its buffer itself before each blocking call instead), or at start-up
//! with `foresight record --hang-timeout`, whose stop request it watches for: the file
//! `FORESIGHT_STOP_FILE`, which `foresight record` creates when no process of the run recorded
//! an event for the timeout (and which, without a hang timeout, a flusher that runs watches
//! too: `record`'s keeper creates it, saying `record-ended`, when `record` is killed). Then
//! the trace is completed, every thread with its end state, and the process is killed (SIGKILL: a program that hangs would hang in its own SIGTERM handler).
//! The thread blocks every signal, is named `foresight-rt`, and records nothing itself. It
//! must not keep the process alive: a process whose `main` left through `pthread_exit` ends
//! when its last thread does. So the program's last thread, as it exits, stops the flusher
//! and waits until it is gone (`program_thread_exiting`), and the C library then ends the
//! process as usual; if two last threads race past that check, the flusher finds itself
//! alone and ends the process (`exit(0)`, what the C library would have done).

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use foresight_trace::tables::{EndReason, StopCause};

use crate::config::Config;
use crate::context::Context;
use crate::real::{Start, REAL_CREATE, REAL_JOIN};
use crate::spin::SpinLock;
use crate::state::{
    FLUSHER as MODE, FLUSHER_NOT_STARTED as NOT_STARTED, FLUSHER_OFF as OFF,
    FLUSHER_RUNNING as RUNNING,
};
use crate::{output, runtime, sigmask, sink, state, thread_state};

/// A thread whose oldest unwritten event is this old is written whether it is idle or not.
pub const MAX_AGE_NS: u64 = 1_000_000_000;

/// The flusher's `pthread_t` while it runs (0: none), for the program's last thread to join.
static THREAD: AtomicUsize = AtomicUsize::new(0);
/// Set to end the flusher; a futex word it sleeps on between rounds.
static QUIT: AtomicU32 = AtomicU32::new(0);
static PERIOD_MS: AtomicU64 = AtomicU64::new(100);
static HANG_MS: AtomicU64 = AtomicU64::new(0);
static STOP_FILE: SpinLock<Option<CString>> = SpinLock::new(None);
/// A `--dump-on` snapshot the signal handler could not write (it interrupted the runtime):
/// the signal number, written on the flusher's next round.
static SNAPSHOT_PENDING: AtomicU32 = AtomicU32::new(0);

/// Asks the flusher for a snapshot now (from a signal handler: an atomic store and a futex
/// wake). Without a flusher (a program of one thread) it is not written.
pub fn defer_snapshot(signal: i32) {
    SNAPSHOT_PENDING.store(signal as u32, Ordering::Release);
    wake();
}

/// Start-up, and a fork child (whose flusher did not survive the fork): the period and the
/// stop file; with a stop file the flusher starts now.
pub fn configure(cfg: &Config) {
    PERIOD_MS.store(cfg.flush_ms, Ordering::Relaxed);
    THREAD.store(0, Ordering::Relaxed);
    QUIT.store(0, Ordering::Relaxed);
    HANG_MS.store(cfg.hang_timeout_ms, Ordering::Relaxed);
    let stop = cfg.stop_file.clone().and_then(|p| CString::new(p).ok());
    let watch = stop.is_some();
    *STOP_FILE.lock() = stop;
    MODE.store(
        if cfg.flush_ms == 0 { OFF } else { NOT_STARTED },
        Ordering::Release,
    );
    // Without a hang timeout the stop file is watched by a flusher that runs anyway (a
    // program with threads): a process of one thread is not given a second one for it.
    if watch && cfg.hang_timeout_ms > 0 {
        start();
    }
}

/// The program creates a thread: the flusher starts if it has not.
#[inline]
pub fn thread_created() {
    if MODE.load(Ordering::Relaxed) == NOT_STARTED {
        start();
    }
}

#[cold]
fn start() {
    if MODE
        .compare_exchange(NOT_STARTED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    match spawn_unrecorded(run) {
        Some(t) => THREAD.store(t, Ordering::Release),
        None => MODE.store(OFF, Ordering::Release),
    }
}

/// The number of threads the process has (`/proc/self/stat`), if it can be read.
fn threads_in_process() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // `pid (comm) state …`: num_threads is the 18th field after the command.
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(17)?
        .parse()
        .ok()
}

/// A thread of the program is exiting and no other is registered: if the flusher is the only
/// other thread, it ends now and this thread waits for it, so that this one is the last and
/// the C library ends the process as it would have.
pub fn program_thread_exiting() {
    let t = THREAD.load(Ordering::Acquire);
    if t == 0 || MODE.load(Ordering::Acquire) != RUNNING || threads_in_process() != Some(2) {
        return;
    }
    if THREAD
        .compare_exchange(t, 0, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    QUIT.store(1, Ordering::Release);
    wake();
    join_unrecorded(t);
    MODE.store(NOT_STARTED, Ordering::Release);
    QUIT.store(0, Ordering::Release);
}

fn wake() {
    // SAFETY: FUTEX_WAKE on a static word wakes its waiters; no memory is touched.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            QUIT.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    };
}

extern "C" fn run(_: *mut libc::c_void) -> *mut libc::c_void {
    // Hooks on this thread pass through: it is not the program's.
    thread_state::mark_dead();
    sigmask::block_all();
    // SAFETY: PR_SET_NAME with a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"foresight-rt".as_ptr()) };
    let me = state::pid();
    loop {
        let ms = PERIOD_MS.load(Ordering::Relaxed).max(1);
        if sleep_unless_quit(ms) || state::pid() != me {
            // Asked to end; or a fork child inherited this thread's memory, not the thread.
            return std::ptr::null_mut();
        }
        match state::state() {
            state::STATE_DONE => return std::ptr::null_mut(),
            state::STATE_RECORDING => {}
            _ => continue,
        }
        if stop_requested() {
            stop();
        }
        runtime::flush_stale(state::now_ns(), MAX_AGE_NS);
        let pending = SNAPSHOT_PENDING.swap(0, Ordering::AcqRel);
        if pending != 0 {
            runtime::snapshot(pending as i32, Context::Thread);
        }
        sink::touch_on_progress();
        if thread_state::no_live_threads() && threads_in_process() == Some(1) {
            // The program's threads are all gone (two of them raced past
            // `program_thread_exiting`): the process would have ended with the last one.
            // SAFETY: exit is what the C library calls when a process's last thread ends.
            unsafe { libc::exit(0) };
        }
    }
}

/// Sleeps `ms` milliseconds, or until `program_thread_exiting` asks the flusher to end:
/// whether it did.
fn sleep_unless_quit(ms: u64) -> bool {
    let ts = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a static word with a valid relative timeout; it returns at the
    // timeout, on a wake, or at once if the word is no longer 0.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            QUIT.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            0,
            &ts as *const libc::timespec,
        )
    };
    QUIT.load(Ordering::Acquire) != 0
}

fn stop_requested() -> bool {
    let stop = STOP_FILE.lock();
    let Some(path) = stop.as_ref() else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(path.as_ptr(), libc::F_OK) == 0 }
}

/// What `foresight record`'s keeper writes into the stop file when `record` itself ended
/// (was killed) while the run went on.
const RECORD_ENDED: &[u8] = b"record-ended";

/// Whether the stop file says that `foresight record` ended, rather than that the hang
/// timeout passed (an empty file).
fn record_ended() -> bool {
    let stop = STOP_FILE.lock();
    let Some(path) = stop.as_ref() else {
        return false;
    };
    // SAFETY: a NUL-terminated path; the descriptor is ours and closed below.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 16];
    // SAFETY: reads into our buffer, at most its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    crate::output::close_own(fd);
    n >= RECORD_ENDED.len() as isize && buf.starts_with(RECORD_ENDED)
}

/// `foresight record` saw no event for the hang timeout, or ended while the run went on:
/// complete the trace with every thread's end state, then end the process. The second is a
/// hang timeout of 0 ms (FORMAT.md §7.13).
fn stop() -> ! {
    let ms = if record_ended() {
        0
    } else {
        HANG_MS.load(Ordering::Relaxed)
    };
    output::note_stop(StopCause::HangTimeout { ms });
    runtime::finish(
        EndReason::Signal {
            signal: libc::SIGKILL,
        },
        Context::Thread,
        false,
    );
    // SAFETY: kill with our own pid and SIGKILL ends the process.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    // SAFETY: as above; not reached.
    unsafe { libc::_exit(128 + libc::SIGKILL) }
}

/// Starts a thread of the runtime's own, with the real `pthread_create` (nothing of it is
/// recorded: `f` marks it so first): its `pthread_t`, or `None` if it could not be created.
fn spawn_unrecorded(f: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void) -> Option<usize> {
    // SAFETY: an all-zero attribute object is what pthread_attr_init fills in next.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain calls on an attribute object we own; the thread's routine has the
    // prototype pthread_create wants (an `extern "C"` one is also `"C-unwind"`-compatible:
    // it never unwinds).
    unsafe {
        if libc::pthread_attr_init(&mut attr) != 0 {
            return None;
        }
        libc::pthread_attr_setstacksize(&mut attr, 256 << 10);
        let mut t: libc::pthread_t = 0;
        let start =
            std::mem::transmute::<extern "C" fn(*mut libc::c_void) -> *mut libc::c_void, Start>(f);
        let r = REAL_CREATE.get()(&mut t, &attr, start, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        (r == 0).then_some(t as usize)
    }
}

/// Waits for a thread `spawn_unrecorded` started to end (the real `pthread_join`).
fn join_unrecorded(t: usize) {
    // SAFETY: `t` is a joinable thread of the runtime's own, joined once.
    unsafe { REAL_JOIN.get()(t as libc::pthread_t, std::ptr::null_mut()) };
}
