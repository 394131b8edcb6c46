//! The live threads (for foreign flushes and `finish`) and the thread ids.

use std::sync::atomic::{AtomicU32, Ordering};

use foresight_trace::event::ThreadId;

use super::ThreadState;
use crate::context::Context;
use crate::spin::SpinLock;

/// The next thread's id (ids are never reused within a trace).
pub(super) static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);

pub(super) struct Registry {
    pub(super) live: Vec<*mut ThreadState>,
}

// SAFETY: the pointers are only dereferenced under the registry lock (finish) or by their owner.
unsafe impl Send for Registry {}

pub(super) static REGISTRY: SpinLock<Registry> = SpinLock::new(Registry { live: Vec::new() });

pub fn register(p: *mut ThreadState) {
    REGISTRY.lock().live.push(p);
}

pub fn unregister(p: *mut ThreadState) {
    let mut r = REGISTRY.lock();
    if let Some(i) = r.live.iter().position(|&q| q == p) {
        r.live.swap_remove(i);
    }
}

/// Whether no thread of the program is registered (the last one is exiting, or has).
pub fn no_live_threads() -> bool {
    REGISTRY.lock().live.is_empty()
}

/// Runs `f` on every live thread state, under the registry lock (in a signal handler, if it
/// is had in time).
pub fn for_each_live(context: Context, mut f: impl FnMut(&ThreadState)) {
    if let Some(r) = REGISTRY.lock_in(context) {
        for &p in &r.live {
            // SAFETY: registered states stay allocated while registered (unregister takes the
            // lock we hold before the owner frees its state).
            f(unsafe { &*p });
        }
    }
}

/// The flusher's round over the live threads (under the registry lock): a glance at each
/// (`flush_due`) without stopping it; the threads that need a look are marked, `barrier`
/// is passed once, and each marked buffer is written and unmarked in turn. A round where
/// every thread records steadily, or stays idle with nothing pending, stops none of them.
pub fn flusher_round(now_ns: u64, max_age_ns: u64, barrier: impl FnOnce()) {
    let r = REGISTRY.lock();
    let live = || {
        r.live.iter().map(|&p| {
            // SAFETY: registered states stay allocated while registered (unregister takes
            // the lock we hold before the owner frees its state).
            unsafe { &*p }
        })
    };
    let mut marked = 0usize;
    for t in live() {
        if t.flush_due(now_ns, max_age_ns) {
            t.mark_for_flush();
            marked += 1;
        }
    }
    if marked == 0 {
        return;
    }
    barrier();
    for t in live() {
        if t.marked_for_flush() {
            t.flush_marked();
        }
    }
}

pub fn next_thread_id() -> ThreadId {
    NEXT_THREAD.fetch_add(1, Ordering::Relaxed)
}
