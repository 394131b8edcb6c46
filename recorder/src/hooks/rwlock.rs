//! `pthread_rwlock_*`: shared (read) and exclusive (write) acquisitions.

use libc::{c_int, pthread_rwlock_t, pthread_rwlockattr_t, timespec};

use foresight_trace::event::LockMode;
use foresight_trace::tables::ObjectKind;

use super::mutex::{attempt, blocking, release};
use super::{record_destroy, record_init};
use crate::real::real;
use crate::thread_state::Wait;

type L = *mut pthread_rwlock_t;

real!(REAL_RDLOCK: unsafe extern "C-unwind" fn(L) -> c_int = b"pthread_rwlock_rdlock\0");
real!(REAL_WRLOCK: unsafe extern "C-unwind" fn(L) -> c_int = b"pthread_rwlock_wrlock\0");
real!(REAL_TRYRDLOCK: unsafe extern "C-unwind" fn(L) -> c_int = b"pthread_rwlock_tryrdlock\0");
real!(REAL_TRYWRLOCK: unsafe extern "C-unwind" fn(L) -> c_int = b"pthread_rwlock_trywrlock\0");
real!(REAL_TIMEDRDLOCK: unsafe extern "C-unwind" fn(L, *const timespec) -> c_int = b"pthread_rwlock_timedrdlock\0");
real!(REAL_TIMEDWRLOCK: unsafe extern "C-unwind" fn(L, *const timespec) -> c_int = b"pthread_rwlock_timedwrlock\0");
real!(REAL_UNLOCK: unsafe extern "C-unwind" fn(L) -> c_int = b"pthread_rwlock_unlock\0");
real!(REAL_INIT: unsafe extern "C-unwind" fn(L, *const pthread_rwlockattr_t) -> c_int = b"pthread_rwlock_init\0");
real!(REAL_DESTROY: unsafe extern "C-unwind" fn(L) -> c_int = b"pthread_rwlock_destroy\0");

entry!(pthread_rwlock_rdlock, 1, rdlock);
entry!(pthread_rwlock_wrlock, 1, wrlock);
entry!(pthread_rwlock_tryrdlock, 1, tryrdlock);
entry!(pthread_rwlock_trywrlock, 1, trywrlock);
entry!(pthread_rwlock_timedrdlock, 2, timedrdlock);
entry!(pthread_rwlock_timedwrlock, 2, timedwrlock);
entry!(pthread_rwlock_unlock, 1, unlock);
entry!(pthread_rwlock_init, 2, init);
entry!(pthread_rwlock_destroy, 1, destroy);

fn kind() -> ObjectKind {
    ObjectKind::RwLock
}

unsafe extern "C-unwind" fn rdlock(l: L, ra: usize) -> c_int {
    let real = REAL_RDLOCK.get();
    // SAFETY: the real function with the caller's argument.
    unsafe {
        blocking(
            l as usize,
            ra,
            LockMode::Shared,
            Wait::Untimed,
            kind,
            || false,
            || real(l),
            |r| r == 0,
            |r| r,
        )
    }
}

unsafe extern "C-unwind" fn wrlock(l: L, ra: usize) -> c_int {
    let real = REAL_WRLOCK.get();
    // SAFETY: the real function with the caller's argument.
    unsafe {
        blocking(
            l as usize,
            ra,
            LockMode::Exclusive,
            Wait::Untimed,
            kind,
            || false,
            || real(l),
            |r| r == 0,
            |r| r,
        )
    }
}

unsafe extern "C-unwind" fn timedrdlock(l: L, t: *const timespec, ra: usize) -> c_int {
    let real = REAL_TIMEDRDLOCK.get();
    // SAFETY: the real function with the caller's arguments.
    unsafe {
        blocking(
            l as usize,
            ra,
            LockMode::Shared,
            Wait::Timed,
            kind,
            || false,
            || real(l, t),
            |r| r == 0,
            |r| r,
        )
    }
}

unsafe extern "C-unwind" fn timedwrlock(l: L, t: *const timespec, ra: usize) -> c_int {
    let real = REAL_TIMEDWRLOCK.get();
    // SAFETY: the real function with the caller's arguments.
    unsafe {
        blocking(
            l as usize,
            ra,
            LockMode::Exclusive,
            Wait::Timed,
            kind,
            || false,
            || real(l, t),
            |r| r == 0,
            |r| r,
        )
    }
}

unsafe extern "C-unwind" fn tryrdlock(l: L, ra: usize) -> c_int {
    let real = REAL_TRYRDLOCK.get();
    // SAFETY: the real function with the caller's argument.
    attempt(l as usize, ra, LockMode::Shared, kind, || unsafe {
        real(l)
    })
}

unsafe extern "C-unwind" fn trywrlock(l: L, ra: usize) -> c_int {
    let real = REAL_TRYWRLOCK.get();
    // SAFETY: the real function with the caller's argument.
    attempt(l as usize, ra, LockMode::Exclusive, kind, || unsafe {
        real(l)
    })
}

unsafe extern "C-unwind" fn unlock(l: L, ra: usize) -> c_int {
    let real = REAL_UNLOCK.get();
    // SAFETY: the real function with the caller's argument.
    release(l as usize, ra, kind, |_, _| true, || unsafe { real(l) })
}

unsafe extern "C-unwind" fn init(l: L, a: *const pthread_rwlockattr_t, ra: usize) -> c_int {
    let real = REAL_INIT.get();
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { real(l, a) };
    if r == 0 {
        record_init(l as usize, ra, kind);
    }
    r
}

unsafe extern "C-unwind" fn destroy(l: L, ra: usize) -> c_int {
    let real = REAL_DESTROY.get();
    record_destroy(l as usize, ra);
    // SAFETY: the real function with the caller's argument.
    unsafe { real(l) }
}
