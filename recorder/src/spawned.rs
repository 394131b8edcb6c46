//! Children that start another program without a `fork` the runtime sees: `posix_spawn` (glibc
//! clones and calls `execve` inside itself, never through the hooks) and `vfork` followed by
//! `exec` (dash runs every command of `sh -c` so). Each is recorded as the fork and exec it
//! stands for: the child gets the trace a forked child would have written up to its exec (its
//! thread's start, then the exec at the call's site), a trace of its own under the child's pid.
//! If the program it executes is recorded too (dynamically linked, LD_PRELOAD inherited), that
//! program's trace continues it; if not (statically linked, set-user-ID), the trace is what
//! tells `foresight` that a program ran unseen, as for a forked child that executed it.
//!
//! A `vfork` child shares the parent's memory and runs on the calling thread's stack and
//! thread-local storage until it executes or exits: the child writes its trace with a file and
//! a buffer of its own, and changes nothing of the parent's recording (no event of the parent's
//! thread, no state, no descriptor the parent keeps). The parent's hook only marks the thread
//! as in a `vfork` (`vfork_pre`), which is how the child's exec hook knows what it is.

use std::cell::Cell;
use std::io::Write;

use foresight_trace::event::{Event, EventKind};
use foresight_trace::tables::{
    EndReason, Frame, SiteInfo, StringEntry, TableRecord, ThreadInfo, Trailer,
};
use foresight_trace::writer::TraceWriter;

use crate::runtime::CONFIG;
use crate::{modules, output, state, trace_header};

thread_local! {
    /// The return address of this thread's `vfork` call, while one may be under way; read by
    /// the child, which runs on this thread's storage.
    static VFORK_FROM: Cell<usize> = const { Cell::new(0) };
    /// The trace a `vfork` child wrote before its exec, removed if the exec fails.
    static STUB: Cell<Option<&'static [u8]>> = const { Cell::new(None) };
}

/// In the parent, before the real `vfork`: marks the thread.
pub fn vfork_pre(ra: usize) {
    VFORK_FROM.with(|v| v.set(ra));
}

/// Whether this process is a `vfork` child of the recorded process that has not executed yet.
fn in_vfork_child() -> bool {
    VFORK_FROM.with(Cell::get) != 0
        && !state::own_process()
        // SAFETY: getppid has no preconditions.
        && unsafe { libc::getppid() } as u32 == state::pid()
}

/// In a `vfork` child about to execute a program (an exec hook, before the real call): writes
/// the child's trace, ending in the exec at `ra`. Keeps `errno`.
pub fn vfork_child_exec(ra: usize) {
    if !in_vfork_child() || !state::recording() {
        return;
    }
    VFORK_FROM.with(|v| v.set(0));
    let saved = errno();
    let pid = state::getpid();
    let written = write_exec_trace(pid, state::pid(), state::now_ns(), ra);
    // The path is kept until the exec replaces the image (or fails): a leak only if it fails.
    STUB.with(|s| s.set(written.map(|p| &*Vec::leak(p))));
    set_errno(saved);
}

/// The exec of a `vfork` child failed: the trace it wrote for it is removed (the child goes
/// on as the parent's stand-in and usually `_exit`s). Keeps `errno`.
pub fn vfork_child_exec_failed() {
    let Some(path) = STUB.with(|s| s.take()) else {
        return;
    };
    let saved = errno();
    if let Ok(c) = std::ffi::CString::new(path) {
        // SAFETY: unlink of a NUL-terminated path.
        unsafe { libc::unlink(c.as_ptr()) };
    }
    set_errno(saved);
}

/// In the parent, after `posix_spawn` started `child` from the call at `ra` (recording began
/// at `start_ns`): the child's trace, ending in the exec.
pub fn spawned(child: u32, start_ns: u64, ra: usize) {
    if !state::own_process() || !state::recording() {
        return;
    }
    let saved = errno();
    write_exec_trace(child, state::pid(), start_ns, ra);
    set_errno(saved);
}

/// Whether children's programs are recorded at all (`FORESIGHT_NO_FOLLOW` says not).
fn follows() -> bool {
    CONFIG.lock().as_ref().is_some_and(|c| !c.no_follow)
}

/// Writes the trace of process `pid`, a child of `parent`, which started at `start_ns` and
/// executed another program at `ra`: the child's one thread starts, then executes. Returns
/// the file's path. Nothing is written when children are not followed.
fn write_exec_trace(pid: u32, parent: u32, start_ns: u64, ra: usize) -> Option<Vec<u8>> {
    if !follows() {
        return None;
    }
    let cfg = CONFIG.lock().clone()?;
    let mut header = trace_header::header(&cfg, pid, parent);
    header.start_unix_ns = start_ns;
    let bytes = exec_trace(&header, ra).ok()?;
    let opened = match &cfg.output {
        Some(path) => output::open_trace(path, pid, true),
        None => output::open_trace(&trace_header::trace_path(&cfg, pid), pid, false),
    };
    let (fd, path) = match opened {
        Ok(o) => o,
        Err(e) => {
            output::complain(&e);
            return None;
        }
    };
    // SAFETY: `fd` was just opened for this file and is owned here alone; the `File` closes it.
    let mut file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if let Err(e) = file.write_all(&bytes) {
        output::complain(&format!("{}: {e}", String::from_utf8_lossy(&path)));
    }
    Some(path)
}

/// The bytes of a child's trace up to its exec at `ra`.
fn exec_trace(header: &foresight_trace::tables::Header, ra: usize) -> std::io::Result<Vec<u8>> {
    let mut w = TraceWriter::new(Vec::new(), header)?;
    let frame = match modules::record_at(ra as u64) {
        Some((mut module, path)) => {
            w.table(&TableRecord::String(StringEntry { id: 0, text: path }))?;
            module.path = 0;
            let frame = Frame {
                module: module.id,
                offset: (ra as u64).wrapping_sub(module.base),
            };
            w.table(&TableRecord::Module(module))?;
            frame
        }
        // An address in no module (JIT code): as the sites of every trace name one.
        None => Frame {
            module: u32::MAX,
            offset: ra as u64,
        },
    };
    w.table(&TableRecord::Site(SiteInfo {
        id: 0,
        frames: vec![frame],
        first_caller: None,
    }))?;
    w.table(&TableRecord::Thread(ThreadInfo {
        id: 0,
        os_tid: header.pid,
        parent: None,
        name: None,
    }))?;
    let events = [
        Event {
            key: 1,
            kind: EventKind::ThreadStart,
        },
        Event {
            key: 2,
            kind: EventKind::Exec { site: 0 },
        },
    ];
    w.thread_events(0, &events, 4096)?;
    w.finish(Trailer {
        end_unix_ns: state::now_ns(),
        reason: EndReason::Exit { status: 0 },
        event_chunks: 0,
        events: 0,
        events_lost: 0,
    })
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() }
}

fn set_errno(v: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = v };
}
