//! `pthread_once`. Whether this call runs the initialiser is only known inside
//! `pthread_once`, so the hook passes a trampoline that records `once-run`, calls the user's
//! routine and records `once-end`; the routine and the once object travel through the
//! thread's state (the trampoline runs on the calling thread). If the trampoline did not run,
//! the call was a skip, recorded after the real call returned (after the running thread's
//! `once-end`, which it waited for).

use libc::{c_int, pthread_once_t};

use foresight_trace::event::EventKind;
use foresight_trace::tables::ObjectKind;

use super::{object, rt};
use crate::objects::Slot;
use crate::real::real;
use crate::sequence::Key;
use crate::thread_state::{self, Wait};

type O = *mut pthread_once_t;
type Init = unsafe extern "C-unwind" fn();

real!(REAL_ONCE: unsafe extern "C-unwind" fn(O, Init) -> c_int = b"pthread_once\0");

entry!(pthread_once, 2, once);

unsafe extern "C-unwind" fn once(o: O, routine: Init, ra: usize) -> c_int {
    let real = REAL_ONCE.get();
    let Some(t) = rt() else {
        // SAFETY: the real function with the caller's arguments.
        return unsafe { real(o, routine) };
    };
    let slot = t
        .with(|t| {
            let (s, site) = object(t, o as usize, ra, false, || ObjectKind::Once)?;
            t.emit(EventKind::OnceBegin { once: s.id(), site }, Key::Same);
            Some(s)
        })
        .flatten();
    let Some(slot) = slot else {
        // SAFETY: as above.
        return unsafe { real(o, routine) };
    };
    let outer = t
        .once
        .replace((slot as *const Slot as usize, routine as usize, false));
    // Waiting, unless this call runs the routine (the trampoline ends the wait) or returns at
    // once; another thread's routine may be running.
    let outer_wait = t.begin_wait(Wait::Untimed);
    // SAFETY: the real function; `trampoline` calls `routine` exactly when pthread_once would.
    let r = unsafe { real(o, trampoline) };
    t.end_wait(outer_wait);
    let (_, _, ran) = t.once.replace(outer);
    if !ran && r == 0 {
        t.with(|t| {
            t.emit(
                EventKind::OnceSkip { once: slot.id() },
                Key::Acquire(&slot.clock),
            );
        });
    }
    r
}

unsafe extern "C-unwind" fn trampoline() {
    let Some(t) = thread_state::current() else {
        return;
    };
    let (slot, routine, _) = t.once.get();
    t.once.set((slot, routine, true));
    // This thread runs the routine: not waiting (`once` restores the outer state after).
    t.end_wait(0);
    // SAFETY: `slot` was set by `once` on this thread from a `&'static Slot`.
    let s: &'static Slot = unsafe { &*(slot as *const Slot) };
    t.with(|t| {
        t.emit(EventKind::OnceRun { once: s.id() }, Key::Acquire(&s.clock));
    });
    // SAFETY: `routine` is the user's init routine passed to pthread_once (a fn pointer).
    let f: Init = unsafe { std::mem::transmute::<usize, Init>(routine) };
    // SAFETY: calling the user's routine, as pthread_once would.
    unsafe { f() };
    t.with(|t| {
        t.emit(EventKind::OnceEnd { once: s.id() }, Key::Release(&s.clock));
    });
}
