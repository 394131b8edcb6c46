//! The reentrancy guard: bookkeeping runs inside a per-thread session, and a hook reached
//! from inside one (the runtime's own calls, a signal handler that interrupted it) only calls
//! the real function. The program's `errno` survives every session.

use std::sync::atomic::Ordering;

use super::ThreadState;

impl ThreadState {
    /// Runs `f` as the runtime: with the reentrancy guard set and `errno` preserved. `None` if
    /// the runtime is already active on this thread (a hook called from inside the runtime, or
    /// from a signal handler that interrupted it) or recording is off.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&Self) -> R) -> Option<R> {
        if self.closed.load(Ordering::Relaxed) || !self.enter() {
            return None;
        }
        let ep = self.errno.get();
        // SAFETY: `ep` is this thread's errno location (cached at thread start).
        let saved = unsafe { *ep };
        let r = f(self);
        // SAFETY: as above.
        unsafe { *ep = saved };
        self.leave();
        Some(r)
    }

    /// Starts a session as the runtime without saving `errno`, for the lock hooks' hot path:
    /// false, and nothing changed, if the runtime is already active on this thread. (A closed
    /// thread is let in: `enter_buf` refuses to record for it.) Every `true` must be followed
    /// by exactly one `leave` (no guard object: nothing with a destructor lives across a real
    /// call). Such a session only reaches code that leaves `errno` alone: everything that can
    /// fail a system call (flushing a chunk, creating an object or a site) is a cold path that
    /// keeps `errno` itself (`keep_errno`). A real function called inside the session (the
    /// trylock hooks' attempt) keeps its own `errno` effect; it must neither block for long
    /// nor unwind, since a signal handler that runs meanwhile is not recorded.
    #[inline(always)]
    pub fn enter(&self) -> bool {
        if self.busy.get() {
            return false;
        }
        self.busy.set(true);
        true
    }

    /// Whether the runtime is at work on this thread (a session is open).
    #[inline]
    pub fn is_busy(&self) -> bool {
        self.busy.get()
    }

    /// Ends the session `enter` started.
    #[inline(always)]
    pub fn leave(&self) {
        self.busy.set(false);
    }
}

/// Runs `f` and puts the program's `errno` back afterwards: around every piece of the runtime
/// that may make a failing system call (see `ThreadState::enter`).
#[inline]
pub fn keep_errno<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: __errno_location returns the calling thread's errno, valid for its lifetime.
    let ep = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *ep };
    let r = f();
    // SAFETY: as above.
    unsafe { *ep = saved };
    r
}
