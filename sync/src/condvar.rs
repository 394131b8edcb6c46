//! `Condvar`: `std::sync::Condvar`, recorded (a wait gives its mutex up and takes it back).

use std::fmt;
use std::panic::Location;
use std::sync::LockResult;
use std::time::Duration;

pub use std::sync::WaitTimeoutResult;

use crate::declared::Release;
use crate::mutex::{wrap, MutexGuard};
use crate::runtime;

/// A condition variable: `std::sync::Condvar` with the same API, whose waits and
/// notifications foresight records.
#[derive(Default)]
pub struct Condvar {
    inner: std::sync::Condvar,
}

impl Condvar {
    /// A new condition variable.
    pub const fn new() -> Condvar {
        Condvar {
            inner: std::sync::Condvar::new(),
        }
    }

    fn addr(&self) -> usize {
        self as *const Condvar as usize
    }

    /// Blocks until notified, giving the guard's mutex up meanwhile.
    #[track_caller]
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
        let MutexGuard { mut release, inner } = guard;
        let held = release.disarm();
        let rt = held.and(runtime::get());
        let (Some(rt), Some((mutex, _, _))) = (rt, held) else {
            return wrap(self.inner.wait(inner), |inner| MutexGuard {
                release: Release { held },
                inner,
            });
        };
        let at = Location::caller();
        let token = rt.cond_wait_begin(self.addr(), mutex, false, at);
        let r = self.inner.wait(inner);
        rt.cond_wait_end(self.addr(), mutex, at, token, false);
        wrap(r, |inner| MutexGuard {
            release: Release { held },
            inner,
        })
    }

    /// Blocks while `condition` holds, giving the mutex up during each wait.
    #[track_caller]
    pub fn wait_while<'a, T, F>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: F,
    ) -> LockResult<MutexGuard<'a, T>>
    where
        F: FnMut(&mut T) -> bool,
    {
        while condition(&mut *guard) {
            guard = self.wait(guard)?;
        }
        Ok(guard)
    }

    /// `wait` for at most `dur`.
    #[track_caller]
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        dur: Duration,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
        let MutexGuard { mut release, inner } = guard;
        let held = release.disarm();
        let rt = held.and(runtime::get());
        let rebuild = |(inner, result)| {
            (
                MutexGuard {
                    release: Release { held },
                    inner,
                },
                result,
            )
        };
        let (Some(rt), Some((mutex, _, _))) = (rt, held) else {
            return wrap(self.inner.wait_timeout(inner, dur), rebuild);
        };
        let at = Location::caller();
        let token = rt.cond_wait_begin(self.addr(), mutex, true, at);
        let r = self.inner.wait_timeout(inner, dur);
        let timed_out = match &r {
            Ok((_, w)) => w.timed_out(),
            Err(p) => p.get_ref().1.timed_out(),
        };
        rt.cond_wait_end(self.addr(), mutex, at, token, timed_out);
        wrap(r, rebuild)
    }

    /// `wait_while` for at most `dur` in all.
    #[track_caller]
    pub fn wait_timeout_while<'a, T, F>(
        &self,
        guard: MutexGuard<'a, T>,
        dur: Duration,
        mut condition: F,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)>
    where
        F: FnMut(&mut T) -> bool,
    {
        let MutexGuard { mut release, inner } = guard;
        let held = release.disarm();
        let rt = held.and(runtime::get());
        let rebuild = |(inner, result)| {
            (
                MutexGuard {
                    release: Release { held },
                    inner,
                },
                result,
            )
        };
        let (Some(rt), Some((mutex, _, _))) = (rt, held) else {
            return wrap(
                self.inner.wait_timeout_while(inner, dur, condition),
                rebuild,
            );
        };
        // `std` calls the condition with the mutex held before each wait and after each
        // wake-up: the waits are recorded from there.
        let at = Location::caller();
        let cond = self.addr();
        let mut waiting = None;
        let r = self.inner.wait_timeout_while(inner, dur, |value| {
            if let Some(token) = waiting.take() {
                rt.cond_wait_end(cond, mutex, at, token, false);
            }
            let more = condition(value);
            if more {
                waiting = Some(rt.cond_wait_begin(cond, mutex, true, at));
            }
            more
        });
        if let Some(token) = waiting {
            // The deadline passed: std returned without waiting again.
            rt.cond_wait_end(cond, mutex, at, token, true);
        }
        wrap(r, rebuild)
    }

    /// Wakes one waiting thread.
    #[track_caller]
    pub fn notify_one(&self) {
        if let Some(rt) = runtime::get() {
            rt.cond_notify(self.addr(), false, Location::caller());
        }
        self.inner.notify_one()
    }

    /// Wakes every waiting thread.
    #[track_caller]
    pub fn notify_all(&self) {
        if let Some(rt) = runtime::get() {
            rt.cond_notify(self.addr(), true, Location::caller());
        }
        self.inner.notify_all()
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}
