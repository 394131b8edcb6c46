//! Lock annotations, as `foresight.h` gives C programs: name a lock's class, declare the
//! nesting level of instances of one class, or a rank that acquisitions must follow. Without
//! foresight they do nothing.
//!
//! ```
//! use foresight_sync::{annotate, Mutex};
//!
//! let from = Mutex::new(10);
//! let to = Mutex::new(0);
//! annotate::lock_class(&from, "account");
//! annotate::lock_class(&to, "account");
//! // Both accounts are locked lower id first: the second is at nesting level 1.
//! annotate::lock_subclass(&to, 1);
//! ```

use std::panic::Location;

use crate::declared::Declared;
use crate::runtime::{self, Annotation, Kind};
use crate::{Mutex, RwLock};

/// A lock of this crate that annotations apply to.
pub trait Lock: sealed::Sealed {
    #[doc(hidden)]
    fn declared(&self) -> LockRef<'_>;
}

/// A lock, as annotations see it.
#[doc(hidden)]
pub struct LockRef<'a>(&'a Declared, Kind);

mod sealed {
    pub trait Sealed {}
    impl<T: ?Sized> Sealed for crate::Mutex<T> {}
    impl<T: ?Sized> Sealed for crate::RwLock<T> {}
}

impl<T: ?Sized> Lock for Mutex<T> {
    fn declared(&self) -> LockRef<'_> {
        LockRef(&self.declared, Kind::Mutex)
    }
}

impl<T: ?Sized> Lock for RwLock<T> {
    fn declared(&self) -> LockRef<'_> {
        LockRef(&self.declared, Kind::RwLock)
    }
}

/// Names the lock's class (`foresight_lock_class`): reports name it so, and locks given the
/// same name are one class.
#[track_caller]
pub fn lock_class(lock: &impl Lock, name: &str) {
    if let Some(rt) = runtime::get() {
        let LockRef(d, kind) = lock.declared();
        let addr = d.announce(rt, kind, 0);
        rt.lock_class(addr, name, Location::caller());
    }
}

/// Declares the lock's nesting level within its class (`foresight_lock_subclass`): instances
/// nested by a stated rule (the lower id first) are not reported as the class's self-nesting.
#[track_caller]
pub fn lock_subclass(lock: &impl Lock, subclass: u32) {
    if let Some(rt) = runtime::get() {
        let LockRef(d, kind) = lock.declared();
        let addr = d.announce(rt, kind, 0);
        rt.annotate(addr, Annotation::Subclass, subclass, Location::caller());
    }
}

/// Declares the lock's rank (`foresight_lock_rank`): taking a lock of a rank not above the
/// highest one the thread holds is a `rank-violation` finding.
#[track_caller]
pub fn lock_rank(lock: &impl Lock, rank: u32) {
    if let Some(rt) = runtime::get() {
        let LockRef(d, kind) = lock.declared();
        let addr = d.announce(rt, kind, 0);
        rt.annotate(addr, Annotation::Rank, rank, Location::caller());
    }
}
