//! A tiny spinlock. The runtime cannot use `std::sync::Mutex` in places that a signal handler
//! or the fork child handler may reach with the lock held, and it must never call the program's
//! `pthread_mutex_*` (which it interposes). Critical sections under these locks are short and off
//! the hot path (interning, table records, registry), so spinning with a yield is enough.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::context::Context;

pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `locked` (acquire on lock, release on unlock).
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; nothing is tied to a thread.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    pub fn lock(&self) -> SpinGuard<'_, T> {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // The holder may be descheduled: let it run (sched_yield is a plain syscall).
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
        SpinGuard { lock: self }
    }

    /// Bounded attempt, for signal handlers: the interrupted code may hold the lock.
    pub fn try_lock_for(&self, attempts: u32) -> Option<SpinGuard<'_, T>> {
        for _ in 0..attempts.max(1) {
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Some(SpinGuard { lock: self });
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
        None
    }

    /// The lock as `context` allows: waited for on a thread's own path, tried a bounded
    /// number of times in a signal handler (`None` if it was not had in time).
    #[inline]
    pub fn lock_in(&self, context: Context) -> Option<SpinGuard<'_, T>> {
        match context.attempts() {
            None => Some(self.lock()),
            Some(attempts) => self.try_lock_for(attempts),
        }
    }

    /// Forces the lock open: only for the fork child, where the holder no longer exists.
    ///
    /// # Safety
    /// No other thread may be using the lock (true in a freshly forked child).
    pub unsafe fn force_unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// Takes the lock without a guard (fork prepare); pair with `force_unlock`.
    pub fn raw_lock(&self) {
        std::mem::forget(self.lock());
    }
}

pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves we hold the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves we hold the lock exclusively.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}
