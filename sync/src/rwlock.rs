//! `RwLock`: `std::sync::RwLock`, recorded (readers in shared mode).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::panic::Location;
use std::sync::{LockResult, TryLockError, TryLockResult};

use crate::declared::{acquire, Declared, Release};
use crate::mutex::{try_wrap, wrap};
use crate::runtime::{self, Kind, Mode};

/// A reader-writer lock: `std::sync::RwLock` with the same API, whose locking foresight
/// records.
#[repr(C)]
pub struct RwLock<T: ?Sized> {
    pub(crate) declared: Declared,
    inner: std::sync::RwLock<T>,
}

/// Shared access to a `RwLock`'s value, released when it drops.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockReadGuard<'a, T: ?Sized + 'a> {
    _release: Release,
    inner: std::sync::RwLockReadGuard<'a, T>,
}

/// Exclusive access to a `RwLock`'s value, released when it drops.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockWriteGuard<'a, T: ?Sized + 'a> {
    _release: Release,
    inner: std::sync::RwLockWriteGuard<'a, T>,
}

impl<T> RwLock<T> {
    /// A new lock; its class for foresight is the caller's line.
    #[track_caller]
    pub const fn new(t: T) -> RwLock<T> {
        RwLock {
            declared: Declared::here(),
            inner: std::sync::RwLock::new(t),
        }
    }

    /// The value, if no thread panicked while holding the lock for writing.
    pub fn into_inner(self) -> LockResult<T> {
        let RwLock { declared, inner } = self;
        drop(declared);
        inner.into_inner()
    }
}

/// `std`'s try result with the `TryLockError` cases spelled out for `acquire`.
fn attempt<G>(r: TryLockResult<G>) -> Option<LockResult<G>> {
    match r {
        Ok(g) => Some(Ok(g)),
        Err(TryLockError::Poisoned(p)) => Some(Err(p)),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Takes the lock for reading, blocking while a writer holds it.
    #[track_caller]
    #[inline]
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, T>> {
        let Some(rt) = runtime::get() else {
            return wrap(self.inner.read(), |inner| RwLockReadGuard {
                _release: Release::none(),
                inner,
            });
        };
        let at = Location::caller();
        let addr = self.declared.announce(rt, Kind::RwLock, 0);
        let (r, release) = acquire(
            rt,
            addr,
            Mode::Shared,
            Kind::RwLock,
            at,
            || attempt(self.inner.try_read()),
            || self.inner.read(),
        );
        wrap(r, |inner| RwLockReadGuard {
            _release: release,
            inner,
        })
    }

    /// Takes the lock for writing, blocking while anyone holds it.
    #[track_caller]
    #[inline]
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
        let Some(rt) = runtime::get() else {
            return wrap(self.inner.write(), |inner| RwLockWriteGuard {
                _release: Release::none(),
                inner,
            });
        };
        let at = Location::caller();
        let addr = self.declared.announce(rt, Kind::RwLock, 0);
        let (r, release) = acquire(
            rt,
            addr,
            Mode::Exclusive,
            Kind::RwLock,
            at,
            || attempt(self.inner.try_write()),
            || self.inner.write(),
        );
        wrap(r, |inner| RwLockWriteGuard {
            _release: release,
            inner,
        })
    }

    /// Takes the lock for reading if no writer holds it, without blocking.
    #[track_caller]
    pub fn try_read(&self) -> TryLockResult<RwLockReadGuard<'_, T>> {
        let Some(rt) = runtime::get() else {
            return try_wrap(self.inner.try_read(), Release::none);
        };
        let at = Location::caller();
        let addr = self.declared.announce(rt, Kind::RwLock, 0);
        let r = self.inner.try_read();
        let taken = !matches!(r, Err(TryLockError::WouldBlock));
        rt.lock_try(addr, Mode::Shared, Kind::RwLock, at, taken);
        try_wrap(r, || Release {
            held: Some((addr, Kind::RwLock, at)),
        })
    }

    /// Takes the lock for writing if no one holds it, without blocking.
    #[track_caller]
    pub fn try_write(&self) -> TryLockResult<RwLockWriteGuard<'_, T>> {
        let Some(rt) = runtime::get() else {
            return try_wrap(self.inner.try_write(), Release::none);
        };
        let at = Location::caller();
        let addr = self.declared.announce(rt, Kind::RwLock, 0);
        let r = self.inner.try_write();
        let taken = !matches!(r, Err(TryLockError::WouldBlock));
        rt.lock_try(addr, Mode::Exclusive, Kind::RwLock, at, taken);
        try_wrap(r, || Release {
            held: Some((addr, Kind::RwLock, at)),
        })
    }

    /// Whether a thread panicked while holding the lock for writing.
    pub fn is_poisoned(&self) -> bool {
        self.inner.is_poisoned()
    }

    /// Clears the poisoned state.
    pub fn clear_poison(&self) {
        self.inner.clear_poison()
    }

    /// The value, through the exclusive borrow (no locking needed).
    pub fn get_mut(&mut self) -> LockResult<&mut T> {
        self.inner.get_mut()
    }
}

impl<'a, T: ?Sized> From<(Release, std::sync::RwLockReadGuard<'a, T>)> for RwLockReadGuard<'a, T> {
    fn from((release, inner): (Release, std::sync::RwLockReadGuard<'a, T>)) -> Self {
        RwLockReadGuard {
            _release: release,
            inner,
        }
    }
}

impl<'a, T: ?Sized> From<(Release, std::sync::RwLockWriteGuard<'a, T>)>
    for RwLockWriteGuard<'a, T>
{
    fn from((release, inner): (Release, std::sync::RwLockWriteGuard<'a, T>)) -> Self {
        RwLockWriteGuard {
            _release: release,
            inner,
        }
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
