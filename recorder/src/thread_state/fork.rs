//! What a fork does to the threads' states: the registry's lock held across it, only the
//! forking thread kept in the child, its state made fresh for the child's own trace.

use std::sync::atomic::Ordering;

use foresight_trace::event::ThreadId;

use super::buffer::new_writer;
use super::registry::{NEXT_THREAD, REGISTRY};
use super::{gettid, ThreadState};
use crate::quiesce;

pub fn lock_for_fork() {
    quiesce::lock_for_fork();
    REGISTRY.raw_lock();
}

/// fork child: only the forking thread survives; the others' states are leaked (their buffers
/// hold the parent's events, which the parent writes).
///
/// # Safety
/// Only in the fork child handler, after `lock_for_fork`.
pub unsafe fn child_after_fork(me: *mut ThreadState) {
    // SAFETY: forwarded contract: the locks were taken by lock_for_fork in the parent.
    unsafe {
        REGISTRY.force_unlock();
        quiesce::unlock_after_fork();
    }
    NEXT_THREAD.store(0, Ordering::Relaxed);
    let mut r = REGISTRY.lock();
    // A thread of the parent may have been inside an atomic operation: its stripe stays
    // locked in the child, where nobody would release it.
    for &p in &r.live {
        // SAFETY: registered states stay allocated (they are leaked below, not freed), and
        // the child has no other thread that could touch them.
        let held = unsafe { (*p).held_stripe.get() };
        if !held.is_null() {
            // SAFETY: a stripe pointer comes from the static stripe table.
            unsafe { (*held).unlock() };
        }
    }
    // Leak the old Vec's other entries; keep only ourselves.
    let old = std::mem::take(&mut r.live);
    std::mem::forget(old);
    if !me.is_null() {
        r.live.push(me);
    }
}

/// # Safety
/// Only after `lock_for_fork`, in the parent.
pub unsafe fn parent_after_fork() {
    // SAFETY: forwarded contract.
    unsafe {
        REGISTRY.force_unlock();
        quiesce::unlock_after_fork();
    }
}

impl ThreadState {
    /// fork child: a fresh writer (the pending events belong to the parent's trace).
    ///
    /// # Safety
    /// Only in a fork child, on its only thread, which owns this state: nothing else can
    /// reach the writer or the access state while it is replaced.
    pub unsafe fn reset_for_child(&self, tid: ThreadId) {
        self.tid.store(tid, Ordering::Relaxed);
        self.parent.set(None);
        // SAFETY: the caller's contract: no other reference to the writer exists.
        unsafe { *self.writer.get() = new_writer(tid) };
        self.buf_lock.store(false, Ordering::Relaxed);
        self.activity.store(0, Ordering::Relaxed);
        self.flush_mark.store(false, Ordering::Relaxed);
        self.flusher_saw.set((0, true));
        self.closed.store(false, Ordering::Relaxed);
        self.busy.set(false);
        self.os_tid.set(gettid());
        self.clear_caches();
        if let Some(a) = self.access_state_mut() {
            a.reset_for_child();
        }
        self.held_stripe.set(std::ptr::null());
        self.executed.store(0, Ordering::Relaxed);
        self.recorded.store(0, Ordering::Relaxed);
    }
}
