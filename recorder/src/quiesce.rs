//! The handshake between a thread's fast path into its own buffer and a foreign flush of it
//! (`finish`, `exec`, the flusher): a flusher sets `FOREIGN` and issues `membarrier`, after
//! which every owner either takes its buffer's lock or is visible as pushing (its `activity`
//! odd) (docs/decisions/0013-the-lock-hook-s-hot-path.md). The flusher's periodic round
//! does the same to the few threads it must look at, marking each instead of setting
//! `FOREIGN` (`round`), so that the others keep their fast path. Apart from the threads' states so that
//! the trace file can send owners to their slow path when a write fails.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::context::Context;
use crate::sequence;
use crate::spin::SpinLock;

/// Set while a foreign flush may happen (`Quiesced`), or for good when `membarrier` is
/// unavailable or the global counter orders events: owners then always take their buffer lock
/// (and never the lane).
static FOREIGN: AtomicBool = AtomicBool::new(true);

/// Whether `FOREIGN` may be cleared again after a foreign flush (the fast path works here).
static FAST_PATH: AtomicBool = AtomicBool::new(false);

/// One foreign flusher at a time (`finish`, `exec`, the periodic flusher): each sets
/// `FOREIGN`, works on other threads' buffers, and may clear it again, which must not happen
/// while another one is at work.
static FLUSHER: SpinLock<()> = SpinLock::new(());

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn membarrier(cmd: libc::c_long) -> bool {
    // SAFETY: the membarrier syscall takes a command and two zero arguments.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        ) == 0
    }
}

/// Start-up (and fork child): enables the owners' fast path if `membarrier` works here.
pub fn enable_fast_path() {
    let ok = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
    // The global counter is taken on the general path only: with it, `FOREIGN` stays set and
    // keeps every owner off the lane (one flag for the lane to test).
    let fast = ok && !sequence::is_global();
    FAST_PATH.store(fast, Ordering::SeqCst);
    FOREIGN.store(!fast, Ordering::SeqCst);
}

/// Recording stopped for good (a failed write): owners take the slow path, which refuses to
/// record, from now on. No barrier: an owner that has not seen it yet pushes into a buffer
/// that will not be written.
pub fn stop_fast_path() {
    FAST_PATH.store(false, Ordering::SeqCst);
    FOREIGN.store(true, Ordering::SeqCst);
}

/// A foreign flush under way: owners take their buffer lock, and every owner that was on its
/// fast path when it began is visible as pushing, so `acquire_foreign` may take any buffer.
pub struct Quiesced {
    _one_at_a_time: crate::spin::SpinGuard<'static, ()>,
}

/// Starts a foreign flush (in a signal handler, if another one ends in time). After the
/// barrier every owner either saw `FOREIGN` (slow path) or is visible as
/// pushing.
pub fn quiesce(context: Context) -> Option<Quiesced> {
    let guard = FLUSHER.lock_in(context)?;
    if !FOREIGN.swap(true, Ordering::SeqCst) {
        membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    }
    Some(Quiesced {
        _one_at_a_time: guard,
    })
}

impl Quiesced {
    /// The flush is over: owners may use their fast path again.
    pub fn end(self) {
        if FAST_PATH.load(Ordering::Relaxed) {
            FOREIGN.store(false, Ordering::SeqCst);
        }
    }

    /// Recording is over: owners stay on the slow path (which refuses to record) for good; a
    /// later foreign flush leaves them there.
    pub fn keep(self) {
        FAST_PATH.store(false, Ordering::SeqCst);
    }
}

/// The flusher's round: one foreign flusher at a time, as `quiesce`, but `FOREIGN` left
/// alone. The threads it marks (`ThreadState::mark_for_flush`) take their buffer's lock
/// after `barrier`, or are visible as pushing.
pub struct Round {
    _one_at_a_time: crate::spin::SpinGuard<'static, ()>,
}

pub fn round() -> Round {
    Round {
        _one_at_a_time: FLUSHER.lock(),
    }
}

impl Round {
    /// After the marks, before looking at the marked buffers: the handshake `quiesce` makes
    /// with `FOREIGN`, for the marks.
    pub fn barrier(&self) {
        if FAST_PATH.load(Ordering::Relaxed) {
            membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
        }
    }
}

/// Whether a foreign flush may be under way (or the fast path is off): owners take their
/// buffer's lock. Read by the owner's fast path after it announced itself.
#[inline(always)]
pub fn foreign() -> bool {
    FOREIGN.load(Ordering::Relaxed)
}

/// Fork: one foreign flusher at a time holds across it.
pub fn lock_for_fork() {
    FLUSHER.raw_lock();
}

/// # Safety
/// Only after `lock_for_fork`.
pub unsafe fn unlock_after_fork() {
    // SAFETY: forwarded contract.
    unsafe { FLUSHER.force_unlock() };
}
