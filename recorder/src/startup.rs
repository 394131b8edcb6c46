//! Start-up and fork handling of the whole runtime.
//!
//! - `init` runs from `.init_array` (before `main`, after libc is ready): reads the env
//!   contract, opens the trace, registers the fork and exit handlers, installs the signal
//!   handlers, and records the main thread's start. Hooks called before it (another library's
//!   constructor) find the state not `RECORDING` and only call the real function.
//! - The fork handlers hold every runtime lock across `fork`, and turn the child into a fresh
//!   recording with its own file.

use std::sync::atomic::Ordering;

use foresight_trace::event::EventKind;
use foresight_trace::tables::{EndReason, TableRecord, ThreadInfo};
use foresight_trace::CompressMode;

use crate::config::{self, Config};
use crate::context::Context;
use crate::hooks::thread;
use crate::runtime::{finish, CONFIG, EXIT_STATUS};
use crate::sequence::{self, Key};
use crate::state::{getpid, STATE_DONE, STATE_OFF, STATE_PAUSED, STATE_RECORDING, STATE_STARTING};
use crate::trace_header::{header, trace_path};
use crate::{modules, objects, output, quiesce, sink, sites, state, thread_state, wrappers, ALLOC};

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

pub extern "C" fn init() {
    if !state::transition(STATE_OFF, STATE_STARTING) {
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
    state::set_pid(pid);
    let path = trace_path(&cfg, pid);
    let fd = match output::open_trace(&path, pid, false) {
        Ok((fd, opened)) => {
            output::set_trace_path(&opened);
            fd
        }
        Err(e) => {
            output::complain(&e);
            state::set_state(STATE_DONE);
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
        state::set_state(STATE_DONE);
        return;
    }
    crate::flusher::configure(&cfg);
    if cfg.keep_last > 0 {
        crate::signals::set_dump_on(cfg.dump_on);
    }
    *CONFIG.lock() = Some(cfg);
    thread::init_exit_key();
    crate::hooks::mutex::check_own_trylock();
    quiesce::enable_fast_path();
    // SAFETY: registering handlers with the right signatures.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
        libc::atexit(at_exit);
    }
    crate::signals::init();
    thread::start_main();
    state::set_state(STATE_RECORDING);
    // The mask the main thread inherited: a handler cannot interrupt it for those signals.
    crate::signals::record_start_mask();
}

/// A size limit under which chunks are made smaller than the default 64 KiB.
const SMALL_LIMIT: u64 = 512 << 10;

extern "C" fn at_exit() {
    finish(
        EndReason::Exit {
            status: EXIT_STATUS.load(Ordering::Relaxed),
        },
        Context::Thread,
        true,
    );
}

// --- fork -----------------------------------------------------------------------------------

/// Holds every runtime lock across `fork`, so the child inherits consistent tables and heap.
/// Order: configuration, registry, modules, wrapper symbols, the sinks (flight ring, table
/// buffer, file), allocator (the
/// configuration's lock nests with none; the others in the order in which the runtime nests
/// them).
extern "C" fn fork_prepare() {
    crate::hooks::mutex::pause_own_trylock();
    CONFIG.raw_lock();
    thread_state::lock_for_fork();
    modules::lock_for_fork();
    wrappers::lock_for_fork();
    sink::lock_for_fork();
    ALLOC.lock_for_fork();
}

extern "C" fn fork_parent() {
    // SAFETY: fork_prepare took these locks on this thread.
    unsafe {
        ALLOC.unlock_after_fork();
        sink::unlock_after_fork();
        wrappers::unlock_after_fork();
        modules::unlock_after_fork();
        thread_state::parent_after_fork();
        CONFIG.force_unlock();
    }
    crate::hooks::mutex::resume_own_trylock();
}

extern "C" fn fork_child() {
    let me = thread_state::current_ptr();
    // SAFETY: the child is single-threaded; fork_prepare took these locks in the parent.
    unsafe {
        ALLOC.unlock_after_fork();
        sink::unlock_after_fork();
        wrappers::unlock_after_fork();
        modules::unlock_after_fork();
        thread_state::child_after_fork(me);
        CONFIG.force_unlock();
    }
    let st = state::state();
    if st != STATE_RECORDING && st != STATE_PAUSED {
        return;
    }
    let parent = state::pid();
    let pid = getpid();
    state::set_pid(pid);
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
        state::set_state(STATE_DONE);
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
            state::set_state(STATE_DONE);
            return;
        }
    };
    output::start(fd, &header(&cfg, pid, parent), cfg.compress);
    quiesce::enable_fast_path();
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
    // The thread's kernel id is the child's from here (`reset_for_child`); until then, and
    // in a child that records nothing, the lock hooks call the C library's attempt.
    crate::hooks::mutex::resume_own_trylock();
    state::set_state(STATE_RECORDING);
    crate::signals::record_start_mask();
}

#[cfg(test)]
mod tests {
    #[test]
    fn readers_recognise_the_producer_name() {
        // The symboliser trusts what this recorder always writes by this name.
        assert!(
            crate::trace_header::PRODUCER.starts_with(foresight_trace::tables::RECORDER_PRODUCER)
        );
    }
}
