//! `Mutex`: `std::sync::Mutex`, recorded.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::panic::Location;
use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};

use crate::declared::{acquire, Declared, Release};
use crate::runtime::{self, Kind, Mode};

/// A mutual exclusion lock: `std::sync::Mutex` with the same API, whose locking foresight
/// records.
#[repr(C)]
pub struct Mutex<T: ?Sized> {
    pub(crate) declared: Declared,
    pub(crate) inner: std::sync::Mutex<T>,
}

/// The guard of a locked `Mutex`: the lock is released when it drops.
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MutexGuard<'a, T: ?Sized + 'a> {
    // Dropped first: the release is recorded before `inner` unlocks.
    pub(crate) release: Release,
    pub(crate) inner: std::sync::MutexGuard<'a, T>,
}

/// `std`'s lock result with this crate's guard.
pub(crate) fn wrap<G, H>(r: LockResult<G>, f: impl FnOnce(G) -> H) -> LockResult<H> {
    match r {
        Ok(g) => Ok(f(g)),
        Err(p) => Err(PoisonError::new(f(p.into_inner()))),
    }
}

impl<T> Mutex<T> {
    /// A new mutex; its class for foresight is the caller's line.
    #[track_caller]
    pub const fn new(t: T) -> Mutex<T> {
        Mutex {
            declared: Declared::here(),
            inner: std::sync::Mutex::new(t),
        }
    }

    /// The value, if no thread panicked while holding the lock.
    pub fn into_inner(self) -> LockResult<T> {
        let Mutex { declared, inner } = self;
        drop(declared);
        inner.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Takes the lock, blocking until it is free.
    #[track_caller]
    #[inline]
    pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        match runtime::get() {
            None => wrap(self.inner.lock(), |inner| MutexGuard {
                release: Release::none(),
                inner,
            }),
            Some(rt) => {
                let at = Location::caller();
                let addr = self.declared.announce(rt, Kind::Mutex, 0);
                let (r, release) = acquire(
                    rt,
                    addr,
                    Mode::Exclusive,
                    Kind::Mutex,
                    at,
                    || match self.inner.try_lock() {
                        Ok(g) => Some(Ok(g)),
                        Err(TryLockError::Poisoned(p)) => Some(Err(p)),
                        Err(TryLockError::WouldBlock) => None,
                    },
                    || self.inner.lock(),
                );
                wrap(r, |inner| MutexGuard { release, inner })
            }
        }
    }

    /// Takes the lock if it is free, without blocking.
    #[track_caller]
    #[inline]
    pub fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
        let Some(rt) = runtime::get() else {
            return try_wrap(self.inner.try_lock(), Release::none);
        };
        let at = Location::caller();
        let addr = self.declared.announce(rt, Kind::Mutex, 0);
        let r = self.inner.try_lock();
        let taken = !matches!(r, Err(TryLockError::WouldBlock));
        rt.lock_try(addr, Mode::Exclusive, Kind::Mutex, at, taken);
        try_wrap(r, || Release {
            held: Some((addr, Kind::Mutex, at)),
        })
    }

    /// Whether a thread panicked while holding the lock.
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

pub(crate) fn try_wrap<G, H>(
    r: TryLockResult<G>,
    release: impl FnOnce() -> Release,
) -> TryLockResult<H>
where
    H: From<(Release, G)>,
{
    match r {
        Ok(g) => Ok(H::from((release(), g))),
        Err(TryLockError::Poisoned(p)) => Err(TryLockError::Poisoned(PoisonError::new(H::from((
            release(),
            p.into_inner(),
        ))))),
        Err(TryLockError::WouldBlock) => Err(TryLockError::WouldBlock),
    }
}

impl<'a, T: ?Sized> From<(Release, std::sync::MutexGuard<'a, T>)> for MutexGuard<'a, T> {
    fn from((release, inner): (Release, std::sync::MutexGuard<'a, T>)) -> Self {
        MutexGuard { release, inner }
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
