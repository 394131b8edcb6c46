//! The runtime's process-wide state: where it is in its life cycle (off, starting, recording,
//! paused for an `exec`, done, stopped after a failed write), which process owns the trace (a
//! `vfork` child shares the memory but not the trace), and whether a flusher thread runs.
//! Every other module reads it; it depends on none, so the trace file (`output.rs`), the
//! flight ring (`flight.rs`) and the threads' buffers (`thread_state/`) can each ask "are we
//! recording" without reaching up into the code that starts and ends the recording.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// Runtime life cycle.
pub const STATE_OFF: u8 = 0;
pub const STATE_STARTING: u8 = 1;
pub const STATE_RECORDING: u8 = 2;
/// Recording paused (an `exec` is under way); hooks pass through.
pub const STATE_PAUSED: u8 = 3;
/// The trace is complete (exit, signal) or could not be opened; hooks pass through.
pub const STATE_DONE: u8 = 4;
/// A write failed (the disk is full, the file size limit): nothing more is recorded, hooks
/// pass through; `finish` still completes the trace (end states, trailer) where it stopped.
pub const STATE_STOPPED: u8 = 5;

static STATE: AtomicU8 = AtomicU8::new(STATE_OFF);

#[inline]
pub fn state() -> u8 {
    STATE.load(Ordering::Acquire)
}

/// Whether events are recorded: while recording, and while paused for an `exec` (the other
/// threads go on until the image is replaced: their events stay in their buffers, kept if the
/// exec fails).
#[inline]
pub fn recording() -> bool {
    state().wrapping_sub(STATE_RECORDING) <= STATE_PAUSED - STATE_RECORDING
}

pub fn set_state(s: u8) {
    STATE.store(s, Ordering::Release);
}

/// Moves from `from` to `to`; false if the state was something else.
pub fn transition(from: u8, to: u8) -> bool {
    STATE
        .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// The recorded process (a `vfork` child shares our memory but has another pid: it must not
/// touch the parent's trace).
static PID: AtomicU32 = AtomicU32::new(0);

pub fn getpid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// The recorded process's pid.
pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

/// Start-up and a fork child: this process owns the trace.
pub fn set_pid(pid: u32) {
    PID.store(pid, Ordering::Relaxed);
}

/// True in the process that owns the trace (not in a `vfork` child).
pub fn own_process() -> bool {
    getpid() == PID.load(Ordering::Relaxed)
}

/// The flusher thread (`flusher.rs`): not started yet, running, or off for good.
pub const FLUSHER_NOT_STARTED: u8 = 0;
pub const FLUSHER_RUNNING: u8 = 1;
pub const FLUSHER_OFF: u8 = 2;

/// The flusher's mode; `flusher.rs` alone changes it.
pub static FLUSHER: AtomicU8 = AtomicU8::new(FLUSHER_NOT_STARTED);

/// Whether no flusher runs and none will: the calling thread writes its own buffer before it
/// blocks (`ThreadState::begin_wait`).
#[inline(always)]
pub fn flusher_absent() -> bool {
    FLUSHER.load(Ordering::Relaxed) == FLUSHER_NOT_STARTED
}

/// The current time of day in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
