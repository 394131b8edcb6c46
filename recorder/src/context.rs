//! Where the runtime's code runs: on a thread's own path, or in a signal handler.
//!
//! A signal handler may have interrupted the runtime itself, on its own thread or on another
//! one that it then waits for, holding a lock the handler needs: every wait there is bounded,
//! and what cannot be had in time is left out (a thread's buffer, the table buffer, the flight
//! ring). The code that completes or snapshots the trace is the same in both places, so it
//! takes the context and each lock wait asks it how long it may wait.

/// The context the runtime's completion, flushing and snapshot code runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// A thread's own path (a hook, `atexit`, the flusher, `exec`): a lock is waited for until
    /// it is free.
    Thread,
    /// The runtime's signal handler (`signals.rs`): a lock is tried `SIGNAL_HANDLER_ATTEMPTS`
    /// times (yielding between tries), then given up.
    SignalHandler,
}

/// How many times a signal handler tries a lock (or waits for a thread to leave its buffer)
/// before it gives up on what the lock guards.
pub const SIGNAL_HANDLER_ATTEMPTS: u32 = 200;

impl Context {
    /// The bound on a lock wait: `None` to wait until the lock is free.
    #[inline]
    pub fn attempts(self) -> Option<u32> {
        match self {
            Context::Thread => None,
            Context::SignalHandler => Some(SIGNAL_HANDLER_ATTEMPTS),
        }
    }
}
