//! `parking_lot`'s locks, recorded by foresight (feature `parking_lot`).
//!
//! The same types with the same API as the `parking_lot` crate for what a program uses of it
//! (no poisoning: `lock` returns the guard; `try_lock_for`; `into_inner` and `get_mut` return
//! the value; `Condvar::wait` takes the guard by `&mut`), so that switching is an import change:
//!
//! ```
//! use foresight_sync::parking_lot::{Condvar, Mutex};
//! use std::sync::Arc;
//!
//! let pair = Arc::new((Mutex::new(false), Condvar::new()));
//! let other = Arc::clone(&pair);
//! let t = foresight_sync::thread::spawn(move || {
//!     *other.0.lock() = true;
//!     other.1.notify_one();
//! });
//! let mut ready = pair.0.lock();
//! pair.1.wait_while(&mut ready, |ready| !*ready);
//! drop(ready);
//! t.join().unwrap();
//! ```
//!
//! Each type wraps `parking_lot`'s and records as this crate's `std`-based types do: sites from
//! `#[track_caller]`, classes from the line of `new`. A timed acquisition (`try_lock_for`,
//! `try_read_until`, …) is recorded as a try-lock: it gives up instead of waiting for ever, so
//! it takes no part in a deadlock. A `ReentrantMutex` is recorded as a mutex taken by the
//! outermost `lock` of its holder and released by the last of its guards to drop: a re-entry
//! cannot block. Not here: upgradable reads, guard mapping, fair unlocking and the raw lock
//! traits.

use std::cell::Cell;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::panic::Location;
use std::time::{Duration, Instant};

pub use ::parking_lot::{OnceState, WaitTimeoutResult};

use crate::declared::{acquire, Declared, Release};
use crate::once::Call;
use crate::runtime::{self, Kind, Mode, Runtime};

/// A mutual exclusion lock: `parking_lot::Mutex` with the same API, whose locking foresight
/// records.
#[repr(C)]
pub struct Mutex<T: ?Sized> {
    declared: Declared,
    inner: ::parking_lot::Mutex<T>,
}

/// The guard of a locked `Mutex`: the lock is released when it drops.
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MutexGuard<'a, T: ?Sized + 'a> {
    // Dropped first: the release is recorded before `inner` unlocks.
    release: Release,
    inner: ::parking_lot::MutexGuard<'a, T>,
}

/// Records a try-lock's outcome (taken or not) and gives the guard's release when taken.
fn tried<G>(
    rt: Runtime,
    addr: usize,
    mode: Mode,
    kind: Kind,
    at: &'static Location<'static>,
    r: Option<G>,
) -> Option<(Release, G)> {
    rt.lock_try(addr, mode, kind, at, r.is_some());
    r.map(|g| {
        (
            Release {
                held: Some((addr, kind, at)),
            },
            g,
        )
    })
}

impl<T> Mutex<T> {
    /// A new mutex; its class for foresight is the caller's line.
    #[track_caller]
    pub const fn new(t: T) -> Mutex<T> {
        Mutex {
            declared: Declared::here(),
            inner: ::parking_lot::Mutex::new(t),
        }
    }

    /// The value.
    pub fn into_inner(self) -> T {
        let Mutex { declared, inner } = self;
        drop(declared);
        inner.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Takes the lock, blocking until it is free.
    #[track_caller]
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let Some(rt) = runtime::get() else {
            return MutexGuard {
                release: Release::none(),
                inner: self.inner.lock(),
            };
        };
        let at = Location::caller();
        let addr = self.declared.announce(rt, Kind::Mutex, 0);
        let (inner, release) = acquire(
            rt,
            addr,
            Mode::Exclusive,
            Kind::Mutex,
            at,
            || self.inner.try_lock(),
            || self.inner.lock(),
        );
        MutexGuard { release, inner }
    }

    /// Takes the lock if it is free, without blocking.
    #[track_caller]
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.try_with(Location::caller(), || self.inner.try_lock())
    }

    /// Takes the lock, waiting for it at most `timeout`.
    #[track_caller]
    pub fn try_lock_for(&self, timeout: Duration) -> Option<MutexGuard<'_, T>> {
        self.try_with(Location::caller(), || self.inner.try_lock_for(timeout))
    }

    /// Takes the lock, waiting for it until `deadline` at the latest.
    #[track_caller]
    pub fn try_lock_until(&self, deadline: Instant) -> Option<MutexGuard<'_, T>> {
        self.try_with(Location::caller(), || self.inner.try_lock_until(deadline))
    }

    #[inline(always)]
    fn try_with<'a>(
        &'a self,
        at: &'static Location<'static>,
        attempt: impl FnOnce() -> Option<::parking_lot::MutexGuard<'a, T>>,
    ) -> Option<MutexGuard<'a, T>> {
        let Some(rt) = runtime::get() else {
            return attempt().map(|inner| MutexGuard {
                release: Release::none(),
                inner,
            });
        };
        let addr = self.declared.announce(rt, Kind::Mutex, 0);
        tried(rt, addr, Mode::Exclusive, Kind::Mutex, at, attempt())
            .map(|(release, inner)| MutexGuard { release, inner })
    }

    /// Whether some thread holds the lock now.
    pub fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    /// The value, through the exclusive borrow (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    /// A raw pointer to the value, as `parking_lot` gives it.
    pub fn data_ptr(&self) -> *mut T {
        self.inner.data_ptr()
    }
}

impl<T> From<T> for Mutex<T> {
    #[track_caller]
    fn from(t: T) -> Self {
        Mutex::new(t)
    }
}

impl<T: Default> Default for Mutex<T> {
    #[track_caller]
    fn default() -> Mutex<T> {
        Mutex::new(T::default())
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// A condition variable: `parking_lot::Condvar` with the same API, whose waits and
/// notifications foresight records (a wait gives its mutex up and takes it back).
#[derive(Default)]
pub struct Condvar {
    inner: ::parking_lot::Condvar,
}

impl Condvar {
    /// A new condition variable.
    pub const fn new() -> Condvar {
        Condvar {
            inner: ::parking_lot::Condvar::new(),
        }
    }

    fn addr(&self) -> usize {
        self as *const Condvar as usize
    }

    /// Runs `wait` (one wait of `parking_lot`'s on the guard's mutex), recorded; `wait` says
    /// whether it timed out.
    #[inline(always)]
    fn recorded<'a, T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'a, T>,
        timed: bool,
        at: &'static Location<'static>,
        wait: impl FnOnce(&mut ::parking_lot::MutexGuard<'a, T>) -> bool,
    ) -> bool {
        let held = guard.release.disarm();
        let (Some(rt), Some((mutex, _, _))) = (held.and(runtime::get()), held) else {
            let timed_out = wait(&mut guard.inner);
            guard.release.held = held;
            return timed_out;
        };
        let token = rt.cond_wait_begin(self.addr(), mutex, timed, at);
        let timed_out = wait(&mut guard.inner);
        rt.cond_wait_end(self.addr(), mutex, at, token, timed_out);
        guard.release.held = held;
        timed_out
    }

    /// Blocks until notified, giving the guard's mutex up meanwhile.
    #[track_caller]
    pub fn wait<T: ?Sized>(&self, guard: &mut MutexGuard<'_, T>) {
        self.recorded(guard, false, Location::caller(), |g| {
            self.inner.wait(g);
            false
        });
    }

    /// `wait` for at most `timeout`.
    #[track_caller]
    pub fn wait_for<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        let mut result = None;
        self.recorded(guard, true, Location::caller(), |g| {
            let r = self.inner.wait_for(g, timeout);
            result = Some(r);
            r.timed_out()
        });
        result.expect("the wait ran")
    }

    /// `wait` until `deadline` at the latest.
    #[track_caller]
    pub fn wait_until<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        let mut result = None;
        self.recorded(guard, true, Location::caller(), |g| {
            let r = self.inner.wait_until(g, deadline);
            result = Some(r);
            r.timed_out()
        });
        result.expect("the wait ran")
    }

    /// Blocks while `condition` holds, giving the mutex up during each wait.
    #[track_caller]
    pub fn wait_while<T: ?Sized, F>(&self, guard: &mut MutexGuard<'_, T>, condition: F)
    where
        F: FnMut(&mut T) -> bool,
    {
        self.recorded_while(guard, condition, false, Location::caller(), |g, c| {
            self.inner.wait_while(g, c);
            None
        });
    }

    /// `wait_while` for at most `timeout` in all.
    #[track_caller]
    pub fn wait_while_for<T: ?Sized, F>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        condition: F,
        timeout: Duration,
    ) -> WaitTimeoutResult
    where
        F: FnMut(&mut T) -> bool,
    {
        self.recorded_while(guard, condition, true, Location::caller(), |g, c| {
            Some(self.inner.wait_while_for(g, c, timeout))
        })
        .expect("a timed wait's result")
    }

    /// `wait_while` until `deadline` at the latest.
    #[track_caller]
    pub fn wait_while_until<T: ?Sized, F>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        condition: F,
        deadline: Instant,
    ) -> WaitTimeoutResult
    where
        F: FnMut(&mut T) -> bool,
    {
        self.recorded_while(guard, condition, true, Location::caller(), |g, c| {
            Some(self.inner.wait_while_until(g, c, deadline))
        })
        .expect("a timed wait's result")
    }

    /// Runs `wait` (one of `parking_lot`'s `wait_while*` on the guard's mutex), recorded:
    /// `parking_lot` calls the condition with the mutex held before each wait and after each
    /// wake-up, and the waits are recorded from there.
    fn recorded_while<'a, T: ?Sized, F>(
        &self,
        guard: &mut MutexGuard<'a, T>,
        mut condition: F,
        timed: bool,
        at: &'static Location<'static>,
        wait: impl FnOnce(
            &mut ::parking_lot::MutexGuard<'a, T>,
            &mut dyn FnMut(&mut T) -> bool,
        ) -> Option<WaitTimeoutResult>,
    ) -> Option<WaitTimeoutResult>
    where
        F: FnMut(&mut T) -> bool,
    {
        let held = guard.release.disarm();
        let (Some(rt), Some((mutex, _, _))) = (held.and(runtime::get()), held) else {
            let r = wait(&mut guard.inner, &mut condition);
            guard.release.held = held;
            return r;
        };
        let cond = self.addr();
        let mut waiting = None;
        let r = wait(&mut guard.inner, &mut |value: &mut T| {
            if let Some(token) = waiting.take() {
                rt.cond_wait_end(cond, mutex, at, token, false);
            }
            let more = condition(value);
            if more {
                waiting = Some(rt.cond_wait_begin(cond, mutex, timed, at));
            }
            more
        });
        if let Some(token) = waiting {
            // The deadline passed: `parking_lot` returned without waiting again.
            rt.cond_wait_end(cond, mutex, at, token, true);
        }
        guard.release.held = held;
        r
    }

    /// Wakes one waiting thread; whether there was one.
    #[track_caller]
    pub fn notify_one(&self) -> bool {
        if let Some(rt) = runtime::get() {
            rt.cond_notify(self.addr(), false, Location::caller());
        }
        self.inner.notify_one()
    }

    /// Wakes every waiting thread; how many there were.
    #[track_caller]
    pub fn notify_all(&self) -> usize {
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

/// A reader-writer lock: `parking_lot::RwLock` with the same API, whose locking foresight
/// records (readers in shared mode).
#[repr(C)]
pub struct RwLock<T: ?Sized> {
    declared: Declared,
    inner: ::parking_lot::RwLock<T>,
}

/// Shared access to a `RwLock`'s value, released when it drops.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockReadGuard<'a, T: ?Sized + 'a> {
    _release: Release,
    inner: ::parking_lot::RwLockReadGuard<'a, T>,
}

/// Exclusive access to a `RwLock`'s value, released when it drops.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockWriteGuard<'a, T: ?Sized + 'a> {
    _release: Release,
    inner: ::parking_lot::RwLockWriteGuard<'a, T>,
}

impl<T> RwLock<T> {
    /// A new lock; its class for foresight is the caller's line.
    #[track_caller]
    pub const fn new(t: T) -> RwLock<T> {
        RwLock {
            declared: Declared::here(),
            inner: ::parking_lot::RwLock::new(t),
        }
    }

    /// The value.
    pub fn into_inner(self) -> T {
        let RwLock { declared, inner } = self;
        drop(declared);
        inner.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Takes the lock for reading, blocking while a writer holds it.
    #[track_caller]
    #[inline]
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        let Some(rt) = runtime::get() else {
            return RwLockReadGuard {
                _release: Release::none(),
                inner: self.inner.read(),
            };
        };
        let at = Location::caller();
        let addr = self.declared.announce(rt, Kind::RwLock, 0);
        let (inner, release) = acquire(
            rt,
            addr,
            Mode::Shared,
            Kind::RwLock,
            at,
            || self.inner.try_read(),
            || self.inner.read(),
        );
        RwLockReadGuard {
            _release: release,
            inner,
        }
    }

    /// Takes the lock for writing, blocking while anyone holds it.
    #[track_caller]
    #[inline]
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        let Some(rt) = runtime::get() else {
            return RwLockWriteGuard {
                _release: Release::none(),
                inner: self.inner.write(),
            };
        };
        let at = Location::caller();
        let addr = self.declared.announce(rt, Kind::RwLock, 0);
        let (inner, release) = acquire(
            rt,
            addr,
            Mode::Exclusive,
            Kind::RwLock,
            at,
            || self.inner.try_write(),
            || self.inner.write(),
        );
        RwLockWriteGuard {
            _release: release,
            inner,
        }
    }

    /// Takes the lock for reading if no writer holds it, without blocking.
    #[track_caller]
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        self.try_read_with(Location::caller(), || self.inner.try_read())
    }

    /// Takes the lock for reading, waiting for it at most `timeout`.
    #[track_caller]
    pub fn try_read_for(&self, timeout: Duration) -> Option<RwLockReadGuard<'_, T>> {
        self.try_read_with(Location::caller(), || self.inner.try_read_for(timeout))
    }

    /// Takes the lock for reading, waiting for it until `deadline` at the latest.
    #[track_caller]
    pub fn try_read_until(&self, deadline: Instant) -> Option<RwLockReadGuard<'_, T>> {
        self.try_read_with(Location::caller(), || self.inner.try_read_until(deadline))
    }

    /// Takes the lock for writing if no one holds it, without blocking.
    #[track_caller]
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        self.try_write_with(Location::caller(), || self.inner.try_write())
    }

    /// Takes the lock for writing, waiting for it at most `timeout`.
    #[track_caller]
    pub fn try_write_for(&self, timeout: Duration) -> Option<RwLockWriteGuard<'_, T>> {
        self.try_write_with(Location::caller(), || self.inner.try_write_for(timeout))
    }

    /// Takes the lock for writing, waiting for it until `deadline` at the latest.
    #[track_caller]
    pub fn try_write_until(&self, deadline: Instant) -> Option<RwLockWriteGuard<'_, T>> {
        self.try_write_with(Location::caller(), || self.inner.try_write_until(deadline))
    }

    fn try_read_with<'a>(
        &'a self,
        at: &'static Location<'static>,
        attempt: impl FnOnce() -> Option<::parking_lot::RwLockReadGuard<'a, T>>,
    ) -> Option<RwLockReadGuard<'a, T>> {
        let Some(rt) = runtime::get() else {
            return attempt().map(|inner| RwLockReadGuard {
                _release: Release::none(),
                inner,
            });
        };
        let addr = self.declared.announce(rt, Kind::RwLock, 0);
        tried(rt, addr, Mode::Shared, Kind::RwLock, at, attempt()).map(|(release, inner)| {
            RwLockReadGuard {
                _release: release,
                inner,
            }
        })
    }

    fn try_write_with<'a>(
        &'a self,
        at: &'static Location<'static>,
        attempt: impl FnOnce() -> Option<::parking_lot::RwLockWriteGuard<'a, T>>,
    ) -> Option<RwLockWriteGuard<'a, T>> {
        let Some(rt) = runtime::get() else {
            return attempt().map(|inner| RwLockWriteGuard {
                _release: Release::none(),
                inner,
            });
        };
        let addr = self.declared.announce(rt, Kind::RwLock, 0);
        tried(rt, addr, Mode::Exclusive, Kind::RwLock, at, attempt()).map(|(release, inner)| {
            RwLockWriteGuard {
                _release: release,
                inner,
            }
        })
    }

    /// Whether some thread holds the lock now, for reading or writing.
    pub fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    /// Whether a writer holds the lock now.
    pub fn is_locked_exclusive(&self) -> bool {
        self.inner.is_locked_exclusive()
    }

    /// The value, through the exclusive borrow (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut()
    }

    /// A raw pointer to the value, as `parking_lot` gives it.
    pub fn data_ptr(&self) -> *mut T {
        self.inner.data_ptr()
    }
}

impl<T> From<T> for RwLock<T> {
    #[track_caller]
    fn from(t: T) -> Self {
        RwLock::new(t)
    }
}

impl<T: Default> Default for RwLock<T> {
    #[track_caller]
    fn default() -> RwLock<T> {
        RwLock::new(T::default())
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for RwLockReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for RwLockWriteGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// A one-time initialisation: `parking_lot::Once` with the same API, recorded (the
/// initialiser's run, and every call that found it done or waited for it).
pub struct Once {
    inner: ::parking_lot::Once,
}

impl Once {
    /// A new `Once`.
    #[allow(clippy::new_without_default)] // as parking_lot's
    pub const fn new() -> Once {
        Once {
            inner: ::parking_lot::Once::new(),
        }
    }

    fn addr(&self) -> usize {
        self as *const Once as usize
    }

    /// Where the initialisation stands: not begun, running, done or poisoned.
    pub fn state(&self) -> OnceState {
        self.inner.state()
    }

    /// Runs `f` if no call has run an initialiser yet; otherwise waits for the one running.
    #[track_caller]
    pub fn call_once<F: FnOnce()>(&self, f: F) {
        let Some(rt) = runtime::get() else {
            return self.inner.call_once(f);
        };
        let mut call = Call::begin(rt, self.addr(), Location::caller());
        self.inner.call_once(|| call.run(f));
    }

    /// `call_once`, also after a panicked initialiser (poisoned).
    #[track_caller]
    pub fn call_once_force<F: FnOnce(OnceState)>(&self, f: F) {
        let Some(rt) = runtime::get() else {
            return self.inner.call_once_force(f);
        };
        let mut call = Call::begin(rt, self.addr(), Location::caller());
        self.inner.call_once_force(|state| call.run(|| f(state)));
    }
}

impl fmt::Debug for Once {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Once")
            .field("state", &self.state())
            .finish()
    }
}

/// A mutex its holder may lock again: `parking_lot::ReentrantMutex` with the same API, whose
/// outermost acquisitions foresight records.
#[repr(C)]
pub struct ReentrantMutex<T: ?Sized> {
    declared: Declared,
    inner: ::parking_lot::ReentrantMutex<Held<T>>,
}

/// The value, and what only the lock's holder reads and changes.
struct Held<T: ?Sized> {
    /// How many guards the holder has.
    depth: Cell<usize>,
    /// Where the holder's outermost recorded acquisition was (`None`: not recorded).
    taken_at: Cell<Option<&'static Location<'static>>>,
    value: T,
}

/// Shared access to a locked `ReentrantMutex`'s value; the holder's last guard to drop
/// releases the lock.
#[must_use = "if unused the ReentrantMutex will immediately unlock"]
pub struct ReentrantMutexGuard<'a, T: ?Sized + 'a> {
    addr: usize,
    inner: ::parking_lot::ReentrantMutexGuard<'a, Held<T>>,
}

impl<T: ?Sized> Drop for ReentrantMutexGuard<'_, T> {
    fn drop(&mut self) {
        // Before `inner` unlocks, as every recorded release.
        let depth = self.inner.depth.get() - 1;
        self.inner.depth.set(depth);
        if depth == 0 {
            if let Some(at) = self.inner.taken_at.take() {
                if let Some(rt) = runtime::get() {
                    rt.release(self.addr, Kind::Mutex, at);
                }
            }
        }
    }
}

impl<T> ReentrantMutex<T> {
    /// A new mutex; its class for foresight is the caller's line.
    #[track_caller]
    pub const fn new(t: T) -> ReentrantMutex<T> {
        ReentrantMutex {
            declared: Declared::here(),
            inner: ::parking_lot::ReentrantMutex::new(Held {
                depth: Cell::new(0),
                taken_at: Cell::new(None),
                value: t,
            }),
        }
    }

    /// The value.
    pub fn into_inner(self) -> T {
        let ReentrantMutex { declared, inner } = self;
        drop(declared);
        inner.into_inner().value
    }
}

impl<T: ?Sized> ReentrantMutex<T> {
    /// The guard of an acquisition; `release` is the recorded one's (the outermost).
    fn guard<'a>(
        &'a self,
        inner: ::parking_lot::ReentrantMutexGuard<'a, Held<T>>,
        mut release: Release,
    ) -> ReentrantMutexGuard<'a, T> {
        inner.depth.set(inner.depth.get() + 1);
        if let Some((_, _, at)) = release.disarm() {
            inner.taken_at.set(Some(at));
        }
        ReentrantMutexGuard {
            addr: self.declared.addr(),
            inner,
        }
    }

    /// Takes the lock, blocking until it is free or this thread holds it.
    #[track_caller]
    #[inline]
    pub fn lock(&self) -> ReentrantMutexGuard<'_, T> {
        let rt = runtime::get();
        let (Some(rt), false) = (rt, rt.is_some() && self.inner.is_owned_by_current_thread())
        else {
            // Not recorded, or a re-entry: it cannot block, and orders nothing.
            return self.guard(self.inner.lock(), Release::none());
        };
        let addr = self.declared.announce(rt, Kind::Mutex, 0);
        let (inner, release) = acquire(
            rt,
            addr,
            Mode::Exclusive,
            Kind::Mutex,
            Location::caller(),
            || self.inner.try_lock(),
            || self.inner.lock(),
        );
        self.guard(inner, release)
    }

    /// Takes the lock if it is free or this thread holds it, without blocking.
    #[track_caller]
    pub fn try_lock(&self) -> Option<ReentrantMutexGuard<'_, T>> {
        self.try_with(Location::caller(), || self.inner.try_lock())
    }

    /// Takes the lock, waiting for it at most `timeout`.
    #[track_caller]
    pub fn try_lock_for(&self, timeout: Duration) -> Option<ReentrantMutexGuard<'_, T>> {
        self.try_with(Location::caller(), || self.inner.try_lock_for(timeout))
    }

    /// Takes the lock, waiting for it until `deadline` at the latest.
    #[track_caller]
    pub fn try_lock_until(&self, deadline: Instant) -> Option<ReentrantMutexGuard<'_, T>> {
        self.try_with(Location::caller(), || self.inner.try_lock_until(deadline))
    }

    fn try_with<'a>(
        &'a self,
        at: &'static Location<'static>,
        attempt: impl FnOnce() -> Option<::parking_lot::ReentrantMutexGuard<'a, Held<T>>>,
    ) -> Option<ReentrantMutexGuard<'a, T>> {
        let rt = runtime::get();
        let (Some(rt), false) = (rt, rt.is_some() && self.inner.is_owned_by_current_thread())
        else {
            return attempt().map(|inner| self.guard(inner, Release::none()));
        };
        let addr = self.declared.announce(rt, Kind::Mutex, 0);
        tried(rt, addr, Mode::Exclusive, Kind::Mutex, at, attempt())
            .map(|(release, inner)| self.guard(inner, release))
    }

    /// Whether some thread holds the lock now.
    pub fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    /// Whether this thread holds the lock.
    pub fn is_owned_by_current_thread(&self) -> bool {
        self.inner.is_owned_by_current_thread()
    }

    /// The value, through the exclusive borrow (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner.get_mut().value
    }
}

impl<T> From<T> for ReentrantMutex<T> {
    #[track_caller]
    fn from(t: T) -> Self {
        ReentrantMutex::new(t)
    }
}

impl<T: Default> Default for ReentrantMutex<T> {
    #[track_caller]
    fn default() -> ReentrantMutex<T> {
        ReentrantMutex::new(T::default())
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for ReentrantMutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As `parking_lot`'s: the value if the lock can be had without waiting.
        match self.inner.try_lock() {
            Some(g) => f
                .debug_struct("ReentrantMutex")
                .field("data", &&g.value)
                .finish(),
            None => f
                .debug_struct("ReentrantMutex")
                .field("data", &format_args!("<locked>"))
                .finish(),
        }
    }
}

impl<T: ?Sized> Deref for ReentrantMutexGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.inner.value
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for ReentrantMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for ReentrantMutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
