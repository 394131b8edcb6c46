//! `pthread_cond_*`. glibc versions these (the 2.3.2 implementation replaced an older one), so
//! the real functions are looked up with `dlvsym(…, "GLIBC_2.3.2")`; plain `dlsym` can return
//! the old compatibility version.

use libc::{c_int, pthread_cond_t, pthread_condattr_t, pthread_mutex_t, timespec};

use foresight_trace::event::{EventKind, WaitOutcome};
use foresight_trace::tables::ObjectKind;

use super::mutex::ProgramMutex;
use super::{object, record_destroy, record_init, rt};
use crate::real::real;
use crate::sequence::Key;
use crate::thread_state::Wait;

type C = *mut pthread_cond_t;
type M = *mut pthread_mutex_t;

real!(REAL_WAIT: unsafe extern "C-unwind" fn(C, M) -> c_int = b"pthread_cond_wait\0" @ b"GLIBC_2.3.2\0");
real!(REAL_TIMEDWAIT: unsafe extern "C-unwind" fn(C, M, *const timespec) -> c_int = b"pthread_cond_timedwait\0" @ b"GLIBC_2.3.2\0");
real!(REAL_SIGNAL: unsafe extern "C-unwind" fn(C) -> c_int = b"pthread_cond_signal\0" @ b"GLIBC_2.3.2\0");
real!(REAL_BROADCAST: unsafe extern "C-unwind" fn(C) -> c_int = b"pthread_cond_broadcast\0" @ b"GLIBC_2.3.2\0");
real!(REAL_INIT: unsafe extern "C-unwind" fn(C, *const pthread_condattr_t) -> c_int = b"pthread_cond_init\0" @ b"GLIBC_2.3.2\0");
real!(REAL_DESTROY: unsafe extern "C-unwind" fn(C) -> c_int = b"pthread_cond_destroy\0" @ b"GLIBC_2.3.2\0");

entry!(pthread_cond_wait, 2, wait);
entry!(pthread_cond_timedwait, 3, timedwait);
entry!(pthread_cond_signal, 1, signal);
entry!(pthread_cond_broadcast, 1, broadcast);
entry!(pthread_cond_init, 2, init);
entry!(pthread_cond_destroy, 1, destroy);

fn kind() -> ObjectKind {
    ObjectKind::Condition
}

/// # Safety
/// `call` is the real wait with the caller's arguments; `m` is the mutex argument of that call.
#[inline(always)]
unsafe fn waiting(
    c: C,
    m: M,
    ra: usize,
    wait: Wait,
    abstime: Option<*const timespec>,
    call: impl FnOnce() -> c_int,
) -> c_int {
    // SAFETY: the program's mutex argument of the wait, used during this call.
    let pm = unsafe { ProgramMutex::new(m) };
    let mut ts = rt();
    // A wait that fails at once never waits and never gives the mutex up: nothing to record
    // (a wait and a wake-up would be a release and an acquisition that did not happen). The
    // C library refuses a deadline with invalid nanoseconds before anything else, and a
    // mutex whose owner it checks when the caller does not hold it.
    // SAFETY: the deadline argument of a timed wait, which the real call reads too.
    if abstime.is_some_and(|a| unsafe { !valid_deadline(a) })
        || ts.is_some_and(|t| pm.unlock_fails(&t))
    {
        ts = None;
    }
    // The mutex is read outside the session (`mutex.rs`, probes).
    let mutex_kind = ts.map(|_| pm.kind());
    let slots = ts.and_then(|t| {
        t.with(|t| {
            let (cs, site) = object(t, c as usize, ra, false, kind)?;
            let (ms, _) = object(t, m as usize, ra, false, || {
                mutex_kind.unwrap_or(ObjectKind::Mutex)
            })?;
            // Entering the wait releases the mutex: key before the real call.
            t.emit(
                EventKind::CondWaitBegin {
                    cond: cs.id(),
                    mutex: ms.id(),
                    site,
                },
                Key::ReleaseExclusive(&ms.clock),
            );
            Some((cs, ms))
        })
        .flatten()
    });
    let outer = slots.and(ts).map(|t| t.begin_wait(wait));
    let r = call();
    if let (Some(t), Some(outer)) = (ts, outer) {
        t.end_wait(outer);
    }
    if let (Some(t), Some((cs, ms))) = (ts, slots) {
        t.with(|t| {
            let outcome = if r == libc::ETIMEDOUT {
                WaitOutcome::TimedOut
            } else {
                WaitOutcome::Woken
            };
            t.emit(
                EventKind::CondWaitEnd {
                    cond: cs.id(),
                    mutex: ms.id(),
                    outcome,
                },
                Key::Acquire2(&ms.clock, &cs.clock),
            );
        });
    }
    r
}

/// Whether a timed wait's deadline passes the C library's check (nanoseconds in 0..10^9).
/// A null deadline is left to the real call (it faults there, outside the runtime).
///
/// # Safety
/// `abstime` is null or the deadline argument of the hooked call (valid during it).
unsafe fn valid_deadline(abstime: *const timespec) -> bool {
    // SAFETY: the caller's contract.
    unsafe { abstime.as_ref() }.is_none_or(|a| (0..1_000_000_000).contains(&a.tv_nsec))
}

unsafe extern "C-unwind" fn wait(c: C, m: M, ra: usize) -> c_int {
    let real = REAL_WAIT.get();
    // SAFETY: the real function with the caller's arguments.
    unsafe { waiting(c, m, ra, Wait::Untimed, None, || real(c, m)) }
}

unsafe extern "C-unwind" fn timedwait(c: C, m: M, t: *const timespec, ra: usize) -> c_int {
    let real = REAL_TIMEDWAIT.get();
    // SAFETY: the real function with the caller's arguments.
    unsafe { waiting(c, m, ra, Wait::Timed, Some(t), || real(c, m, t)) }
}

fn notify(c: C, ra: usize, all: bool) {
    if let Some(t) = rt() {
        t.with(|t| {
            if let Some((s, site)) = object(t, c as usize, ra, false, kind) {
                let ev = if all {
                    EventKind::CondBroadcast { cond: s.id(), site }
                } else {
                    EventKind::CondSignal { cond: s.id(), site }
                };
                t.emit(ev, Key::Release(&s.clock));
            }
        });
    }
}

unsafe extern "C-unwind" fn signal(c: C, ra: usize) -> c_int {
    let real = REAL_SIGNAL.get();
    notify(c, ra, false);
    // SAFETY: the real function with the caller's argument.
    unsafe { real(c) }
}

unsafe extern "C-unwind" fn broadcast(c: C, ra: usize) -> c_int {
    let real = REAL_BROADCAST.get();
    notify(c, ra, true);
    // SAFETY: the real function with the caller's argument.
    unsafe { real(c) }
}

unsafe extern "C-unwind" fn init(c: C, a: *const pthread_condattr_t, ra: usize) -> c_int {
    let real = REAL_INIT.get();
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { real(c, a) };
    if r == 0 {
        record_init(c as usize, ra, kind);
    }
    r
}

unsafe extern "C-unwind" fn destroy(c: C, ra: usize) -> c_int {
    let real = REAL_DESTROY.get();
    record_destroy(c as usize, ra);
    // SAFETY: the real function with the caller's argument.
    unsafe { real(c) }
}
