//! `std::sync`'s locks and `std::thread`, recorded by foresight.
//!
//! Rust's standard locks are built on futexes, which foresight's recorder does not see. This
//! crate has the same types with the same API, so that switching is an import change:
//!
//! ```
//! use foresight_sync::{Arc, Mutex};
//! use foresight_sync::thread;
//!
//! let counter = Arc::new(Mutex::new(0));
//! let c = Arc::clone(&counter);
//! thread::spawn(move || *c.lock().unwrap() += 1).join().unwrap();
//! assert_eq!(*counter.lock().unwrap(), 1);
//! ```
//!
//! Under `foresight record` every lock, unlock, condition wait and notification, barrier wait
//! and once initialisation is recorded, at the line of the program that made it
//! (`#[track_caller]`: no debug information needed), and each lock's class is the line that
//! declared it (`Mutex::new`), so that `foresight analyze` predicts deadlocks between the
//! program's own lines. Without foresight, each operation costs `std`'s plus one load and one
//! branch (the runtime is looked up once, with `dlsym`).
//!
//! What differs from `std`: a lock moved to another address after it was first locked is a
//! new lock for foresight (its class stays the declaration's); a guard's release is recorded
//! at the line that took the lock (a drop has no caller location); `MutexGuard::map` and the
//! other unstable APIs are not there.

pub mod annotate;
mod barrier;
mod condvar;
mod declared;
mod mutex;
mod once;
#[cfg(feature = "parking_lot")]
pub mod parking_lot;
mod runtime;
mod rwlock;
mod scope;
pub mod thread;

pub use barrier::{Barrier, BarrierWaitResult};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{Mutex, MutexGuard};
pub use once::{LazyLock, Once, OnceLock, OnceState};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use std::sync::{
    atomic, mpsc, Arc, LockResult, PoisonError, TryLockError, TryLockResult, Weak,
};

/// Records a read of `place` for foresight's race analysis, at the caller's line: for memory
/// the program shares through `unsafe` code (a raw pointer, an `UnsafeCell`), which nothing
/// else reports in a Rust program. Does nothing when the program is not recorded.
#[track_caller]
#[inline]
pub fn record_read<T: ?Sized>(place: &T) {
    if let Some(rt) = runtime::get() {
        let addr = place as *const T as *const u8 as usize;
        rt.access(
            addr,
            std::mem::size_of_val(place),
            false,
            std::panic::Location::caller(),
        );
    }
}

/// Records a write of `place` for foresight's race analysis, at the caller's line (see
/// `record_read`). Takes a shared reference: the write is the program's own, through
/// whatever interior mutability or raw pointer it uses.
#[track_caller]
#[inline]
pub fn record_write<T: ?Sized>(place: &T) {
    if let Some(rt) = runtime::get() {
        let addr = place as *const T as *const u8 as usize;
        rt.access(
            addr,
            std::mem::size_of_val(place),
            true,
            std::panic::Location::caller(),
        );
    }
}

/// Whether this process is recorded by foresight (its runtime is loaded).
pub fn is_recorded() -> bool {
    runtime::get().is_some()
}
