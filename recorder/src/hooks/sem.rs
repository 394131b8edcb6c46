//! POSIX semaphores (`sem_*`). A post is recorded (and releases the semaphore's clock) before
//! the real post, but for one at the largest value, which fails (EOVERFLOW) and is recorded
//! only if it posted; a wait after it returns.

use libc::{c_int, c_uint, sem_t, timespec};

use foresight_trace::event::EventKind;
use foresight_trace::tables::ObjectKind;

use super::{object, record_destroy, rt};
use crate::real::real;
use crate::sequence::Key;
use crate::thread_state::Wait;

type S = *mut sem_t;

real!(REAL_INIT: unsafe extern "C-unwind" fn(S, c_int, c_uint) -> c_int = b"sem_init\0");
real!(REAL_DESTROY: unsafe extern "C-unwind" fn(S) -> c_int = b"sem_destroy\0");
real!(REAL_POST: unsafe extern "C-unwind" fn(S) -> c_int = b"sem_post\0");
real!(REAL_WAIT: unsafe extern "C-unwind" fn(S) -> c_int = b"sem_wait\0");
real!(REAL_TRYWAIT: unsafe extern "C-unwind" fn(S) -> c_int = b"sem_trywait\0");
real!(REAL_TIMEDWAIT: unsafe extern "C-unwind" fn(S, *const timespec) -> c_int = b"sem_timedwait\0");

entry!(sem_init, 3, init);
entry!(sem_destroy, 1, destroy);
entry!(sem_post, 1, post);
entry!(sem_wait, 1, wait);
entry!(sem_trywait, 1, trywait);
entry!(sem_timedwait, 2, timedwait);

fn kind() -> ObjectKind {
    ObjectKind::Semaphore
}

unsafe extern "C-unwind" fn init(s: S, pshared: c_int, value: c_uint, ra: usize) -> c_int {
    let real = REAL_INIT.get();
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { real(s, pshared, value) };
    if r == 0 {
        if let Some(t) = rt() {
            t.with(|t| {
                if let Some((o, site)) = object(t, s as usize, ra, true, kind) {
                    t.emit(
                        EventKind::SemInit {
                            sem: o.id(),
                            value,
                            site,
                        },
                        Key::Release(&o.clock),
                    );
                }
            });
        }
    }
    r
}

unsafe extern "C-unwind" fn destroy(s: S, ra: usize) -> c_int {
    let real = REAL_DESTROY.get();
    record_destroy(s as usize, ra);
    // SAFETY: the real function with the caller's argument.
    unsafe { real(s) }
}

/// The largest value a semaphore holds (glibc's `SEM_VALUE_MAX`): a post at it fails with
/// EOVERFLOW and posts nothing.
const SEM_VALUE_MAX: c_int = c_int::MAX;

unsafe extern "C-unwind" fn post(s: S, ra: usize) -> c_int {
    let real = REAL_POST.get();
    let record = || {
        if let Some(t) = rt() {
            t.with(|t| {
                if let Some((o, site)) = object(t, s as usize, ra, false, kind) {
                    t.emit(
                        EventKind::SemPost { sem: o.id(), site },
                        Key::Release(&o.clock),
                    );
                }
            });
        }
    };
    let mut value: c_int = 0;
    // SAFETY: the caller's semaphore, which the real post reads too (a bad pointer faults
    // here as it would there); `value` is ours.
    let full = rt().is_some()
        && unsafe { libc::sem_getvalue(s, &mut value) } == 0
        && value == SEM_VALUE_MAX;
    if full {
        // The post will most likely fail: recorded only if it did post (a wait took a unit
        // meanwhile). Every wait it could satisfy finds units posted before it, so recording
        // it after the real post keeps a post before the wait it satisfies.
        // SAFETY: the real function with the caller's argument.
        let r = unsafe { real(s) };
        if r == 0 {
            record();
        }
        return r;
    }
    // Recorded first, so that the wait this post wakes is recorded after it.
    record();
    // SAFETY: the real function with the caller's argument.
    unsafe { real(s) }
}

/// # Safety
/// `call` is the real wait with the caller's arguments.
#[inline(always)]
unsafe fn waiting(s: S, ra: usize, wait: Wait, call: impl FnOnce() -> c_int) -> c_int {
    let ts = rt();
    let slot = ts.and_then(|t| {
        t.with(|t| {
            let (o, site) = object(t, s as usize, ra, false, kind)?;
            t.emit(EventKind::SemWaitBegin { sem: o.id(), site }, Key::Same);
            Some(o)
        })
        .flatten()
    });
    let outer = slot.and(ts).map(|t| t.begin_wait(wait));
    let r = call();
    if let (Some(t), Some(outer)) = (ts, outer) {
        t.end_wait(outer);
    }
    if let (Some(t), Some(o)) = (ts, slot) {
        t.with(|t| {
            let ev = EventKind::SemWaitEnd {
                sem: o.id(),
                acquired: r == 0,
            };
            t.emit(
                ev,
                if r == 0 {
                    Key::Acquire(&o.clock)
                } else {
                    Key::Tick
                },
            );
        });
    }
    r
}

unsafe extern "C-unwind" fn wait(s: S, ra: usize) -> c_int {
    let real = REAL_WAIT.get();
    // SAFETY: the real function with the caller's argument.
    unsafe { waiting(s, ra, Wait::Untimed, || real(s)) }
}

unsafe extern "C-unwind" fn timedwait(s: S, t: *const timespec, ra: usize) -> c_int {
    let real = REAL_TIMEDWAIT.get();
    // The C library refuses a deadline with invalid nanoseconds at once (EINVAL), before it
    // looks at the semaphore: no wait to record. A null deadline faults in the real call.
    // SAFETY: the deadline argument, which the real call reads too.
    if unsafe { t.as_ref() }.is_some_and(|d| !(0..1_000_000_000).contains(&d.tv_nsec)) {
        // SAFETY: the real function with the caller's arguments.
        return unsafe { real(s, t) };
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { waiting(s, ra, Wait::Timed, || real(s, t)) }
}

unsafe extern "C-unwind" fn trywait(s: S, ra: usize) -> c_int {
    let real = REAL_TRYWAIT.get();
    // SAFETY: the real function with the caller's argument.
    let r = unsafe { real(s) };
    if let Some(t) = rt() {
        t.with(|t| {
            if let Some((o, site)) = object(t, s as usize, ra, false, kind) {
                let ev = EventKind::SemTry {
                    sem: o.id(),
                    site,
                    acquired: r == 0,
                };
                t.emit(
                    ev,
                    if r == 0 {
                        Key::Acquire(&o.clock)
                    } else {
                        Key::Same
                    },
                );
            }
        });
    }
    r
}
