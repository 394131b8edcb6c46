//! `pthread_spin_*`.

use libc::{c_int, pthread_spinlock_t};

use foresight_trace::event::LockMode;
use foresight_trace::tables::ObjectKind;

use super::mutex::{attempt, blocking, release};
use super::{record_destroy, record_init};
use crate::real::real;
use crate::thread_state::Wait;

type S = *mut pthread_spinlock_t;

real!(REAL_LOCK: unsafe extern "C-unwind" fn(S) -> c_int = b"pthread_spin_lock\0");
real!(REAL_TRYLOCK: unsafe extern "C-unwind" fn(S) -> c_int = b"pthread_spin_trylock\0");
real!(REAL_UNLOCK: unsafe extern "C-unwind" fn(S) -> c_int = b"pthread_spin_unlock\0");
real!(REAL_INIT: unsafe extern "C-unwind" fn(S, c_int) -> c_int = b"pthread_spin_init\0");
real!(REAL_DESTROY: unsafe extern "C-unwind" fn(S) -> c_int = b"pthread_spin_destroy\0");

entry!(pthread_spin_lock, 1, lock);
entry!(pthread_spin_trylock, 1, trylock);
entry!(pthread_spin_unlock, 1, unlock);
entry!(pthread_spin_init, 2, init);
entry!(pthread_spin_destroy, 1, destroy);

fn kind() -> ObjectKind {
    ObjectKind::SpinLock
}

unsafe extern "C-unwind" fn lock(s: S, ra: usize) -> c_int {
    let real = REAL_LOCK.get();
    // SAFETY: the real function with the caller's argument.
    unsafe {
        blocking(
            s as usize,
            ra,
            LockMode::Exclusive,
            Wait::Untimed,
            kind,
            // A spinlock has no types and no errors: trylock succeeds exactly when the lock is
            // free, which is when spin_lock would take it at once.
            || REAL_TRYLOCK.try_get().is_some_and(|t| t(s) == 0),
            || real(s),
            |r| r == 0,
            |r| r,
        )
    }
}

unsafe extern "C-unwind" fn trylock(s: S, ra: usize) -> c_int {
    let real = REAL_TRYLOCK.get();
    // SAFETY: the real function with the caller's argument.
    attempt(s as usize, ra, LockMode::Exclusive, kind, || unsafe {
        real(s)
    })
}

unsafe extern "C-unwind" fn unlock(s: S, ra: usize) -> c_int {
    let real = REAL_UNLOCK.get();
    // SAFETY: the real function with the caller's argument.
    release(s as usize, ra, kind, |_, _| true, || unsafe { real(s) })
}

unsafe extern "C-unwind" fn init(s: S, pshared: c_int, ra: usize) -> c_int {
    let real = REAL_INIT.get();
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { real(s, pshared) };
    if r == 0 {
        record_init(s as usize, ra, kind);
    }
    r
}

unsafe extern "C-unwind" fn destroy(s: S, ra: usize) -> c_int {
    let real = REAL_DESTROY.get();
    record_destroy(s as usize, ra);
    // SAFETY: the real function with the caller's argument.
    unsafe { real(s) }
}
