//! Completion and checkpoints of the recording, whatever asks for them (the program's exit,
//! `_exit`, a signal, an `exec`, the flusher, `--dump-on`):
//!
//! - `finish` completes the trace: every live thread's exit or end state, its buffer, what the
//!   sink holds (the flight recorder's window), the table buffer, the trailer. It runs once,
//!   from `atexit` (after the program's own handlers, which were registered later), `_exit`, a
//!   signal, or the hang timeout.
//! - `before_exec` writes everything and a provisional trailer before an `exec`.
//! - `flush_all`, `flush_stale`: the threads' buffers written while recording goes on.
//! - `snapshot`: the flight recorder's window written to a `--dump-on` snapshot.
//!
//! Start-up and the fork handlers are in `startup.rs`.

use std::sync::atomic::AtomicI32;

use foresight_trace::event::EventKind;
use foresight_trace::tables::{EndReason, TableRecord, ThreadEnd};
use foresight_trace::writer::TableChunkBuf;

use crate::config::Config;
use crate::context::Context;
use crate::quiesce::{self, quiesce};
use crate::sequence::Key;
use crate::spin::SpinLock;
use crate::state::{own_process, STATE_DONE, STATE_PAUSED, STATE_RECORDING};
use crate::thread_state::{self, ThreadState};
use crate::{output, sink, sites, state};

/// The configuration read at start-up (`startup::init`), kept for a fork child's new trace.
pub static CONFIG: SpinLock<Option<Config>> = SpinLock::new(None);
/// `main`'s return value or `exit`'s argument, for the trailer.
pub static EXIT_STATUS: AtomicI32 = AtomicI32::new(0);

pub fn no_follow() -> bool {
    CONFIG.lock().as_ref().is_some_and(|c| c.no_follow)
}

/// What the end of a trace after the flight recorder's window takes at most (end states,
/// stop cause, trailer), kept out of the window's bound.
const END_ROOM: u64 = 16 << 10;

/// Completes the trace (once). Every lock wait as `context` allows (bounded in a signal
/// handler).
/// `caller_exits`: the calling thread ends the process (`exit`, `_exit`) and gets a
/// `thread-exit`; every other live thread gets an end state instead (FORMAT.md §7.12).
pub fn finish(reason: EndReason, context: Context, caller_exits: bool) {
    if !own_process() {
        return;
    }
    if !state::transition(STATE_RECORDING, STATE_DONE)
        && !state::transition(STATE_PAUSED, STATE_DONE)
        && !state::transition(state::STATE_STOPPED, STATE_DONE)
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
    if let Some(quiesced) = quiesce(context) {
        thread_state::for_each_live(context, |t| {
            let exits = caller_exits && std::ptr::eq(t, me_ptr);
            let Some(end) = t.close_at_end(context, exits) else {
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
    sink::write_held(context, END_ROOM);
    output::flush_tables(context);
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
/// the signal handler (every lock wait bounded there, as for `finish`): every thread's
/// buffer goes to the window and its state is noted, then the trace's prefix and table
/// chunks, the thread-end records, and the window (`flight::snapshot`) go to the new file. No
/// trailer: the process did not end. Nothing is allocated.
pub fn snapshot(signal: i32, context: Context) {
    if !own_process()
        || state::state() != STATE_RECORDING
        || sink::Sink::in_use() != sink::Sink::Ring
    {
        return;
    }
    // As the runtime: what libraries do for it here is not the program's.
    let me = thread_state::current().filter(|t| t.enter());
    write_snapshot(signal, context);
    if let Some(t) = me {
        t.leave();
    }
}

fn write_snapshot(signal: i32, context: Context) {
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
    if let Some(quiesced) = quiesce(context) {
        thread_state::for_each_live(context, |t| {
            let Some((thread, state)) = t.snapshot_state(context) else {
                return;
            };
            let r = TableRecord::ThreadEnd(ThreadEnd { thread, state });
            // Past both buffers (some 800 threads), a thread's state is left out.
            if !ends.push(&r) {
                extra.push(&r);
            }
        });
        output::flush_tables(context);
        quiesced.end();
    }
    // The names are large for a signal handler's stack (which may be an alternate one):
    // one static buffer, the snapshot's lock held (one snapshot at a time).
    let Some(mut name) = SNAPSHOT_NAME.lock_in(context) else {
        return;
    };
    let Some((fd, mut at)) = output::open_snapshot(context, &mut name) else {
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
    let done = sink::write_snapshot(context, signal as u32, at, &write);
    // SAFETY: the snapshot's descriptor, ours, closed once.
    unsafe { libc::close(fd) };
    output::publish_snapshot(&name, done.is_some());
}

static SNAPSHOT_NAME: SpinLock<output::SnapshotName> = SpinLock::new(output::SnapshotName::EMPTY);

/// Before an `exec`: the `exec` event, every buffer, and a provisional trailer, so that the
/// old image's events reach its file. Recording pauses; `after_failed_exec` resumes it.
pub fn before_exec(ra: usize) {
    if !own_process() || !state::recording() {
        return;
    }
    if let Some(t) = thread_state::current() {
        t.with(|t| {
            let site = sites::call_site(ra).0;
            t.emit(EventKind::Exec { site }, Key::Tick);
        });
    }
    if !state::transition(STATE_RECORDING, STATE_PAUSED) {
        return;
    }
    if let Some(quiesced) = quiesce(Context::Thread) {
        thread_state::for_each_live(Context::Thread, |t| {
            t.write_access_counts();
            t.flush(Context::Thread);
        });
        // The other threads go on until the image is replaced (and for good if the exec
        // fails): back to their fast path. Their chunks keep the provisional trailer last
        // (`output::write_reserved`).
        quiesced.end();
    }
    // The old image's window goes to its file before the image is replaced.
    sink::write_held(Context::Thread, END_ROOM);
    output::flush_tables(Context::Thread);
    output::write_provisional_trailer();
}

pub fn after_failed_exec() {
    if own_process() && state::state() == STATE_PAUSED {
        output::exec_failed();
        state::transition(STATE_PAUSED, STATE_RECORDING);
    }
}

/// The flusher's round: every buffer its thread left alone since the last round, or that
/// holds events older than `max_age_ns`, and the table buffer, are written; only those
/// threads are stopped, one at a time (`thread_state::flusher_round`).
pub fn flush_stale(now_ns: u64, max_age_ns: u64) {
    let round = quiesce::round();
    thread_state::flusher_round(now_ns, max_age_ns, || round.barrier());
    output::flush_tables(Context::Thread);
    drop(round);
}

/// Writes every thread's buffer and the table buffer; recording goes on. Before a crash
/// signal reaches a handler of the program's (which may end the process). A signal handler bounds
/// every wait (signal handlers).
pub fn flush_all(context: Context) {
    if !own_process() || !state::recording() {
        return;
    }
    let me = thread_state::current().filter(|t| t.enter());
    if let Some(quiesced) = quiesce(context) {
        thread_state::for_each_live(context, |t| {
            t.flush(context);
        });
        output::flush_tables(context);
        quiesced.end();
    }
    if let Some(t) = me {
        t.leave();
    }
}
