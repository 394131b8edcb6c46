//! `pthread_barrier_*`. The generation of an arrival is its index among all arrivals at the
//! barrier divided by the count: every thread of generation g arrives before any leaves it, so
//! arrivals are numbered generation by generation. The arrival records it (FORMAT.md §6.6's
//! arrival-generation extension), and so does the departure.

use std::sync::atomic::Ordering;

use libc::{c_int, c_uint, pthread_barrier_t, pthread_barrierattr_t};

use foresight_trace::event::EventKind;
use foresight_trace::tables::ObjectKind;

use super::{object, record_destroy, rt};
use crate::real::real;
use crate::sequence::Key;

type B = *mut pthread_barrier_t;

real!(REAL_INIT: unsafe extern "C-unwind" fn(B, *const pthread_barrierattr_t, c_uint) -> c_int = b"pthread_barrier_init\0");
real!(REAL_WAIT: unsafe extern "C-unwind" fn(B) -> c_int = b"pthread_barrier_wait\0");
real!(REAL_DESTROY: unsafe extern "C-unwind" fn(B) -> c_int = b"pthread_barrier_destroy\0");

entry!(pthread_barrier_init, 3, init);
entry!(pthread_barrier_wait, 1, wait);
entry!(pthread_barrier_destroy, 1, destroy);

fn kind() -> ObjectKind {
    ObjectKind::Barrier
}

unsafe extern "C-unwind" fn init(
    b: B,
    a: *const pthread_barrierattr_t,
    count: c_uint,
    ra: usize,
) -> c_int {
    let real = REAL_INIT.get();
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { real(b, a, count) };
    if r == 0 {
        if let Some(t) = rt() {
            t.with(|t| {
                if let Some((s, site)) = object(t, b as usize, ra, true, kind) {
                    s.count.store(count, Ordering::Release);
                    t.emit(
                        EventKind::BarrierInit {
                            barrier: s.id(),
                            count,
                            site,
                        },
                        Key::Release(&s.clock),
                    );
                }
            });
        }
    }
    r
}

unsafe extern "C-unwind" fn wait(b: B, ra: usize) -> c_int {
    let real = REAL_WAIT.get();
    let ts = rt();
    let arrival = ts.and_then(|t| {
        t.with(|t| {
            let (s, site) = object(t, b as usize, ra, false, kind)?;
            let count = s.count.load(Ordering::Acquire).max(1) as u64;
            let generation = s.arrivals.fetch_add(1, Ordering::AcqRel) / count;
            t.emit(
                EventKind::BarrierWaitBegin {
                    barrier: s.id(),
                    site,
                    // Known now, and recorded now: the thread may never return from the
                    // wait (the process can end first), yet it belongs to this generation.
                    generation: Some(generation),
                },
                Key::Release(&s.clock),
            );
            Some((s, generation))
        })
        .flatten()
    });
    // SAFETY: the real function with the caller's argument.
    let r = unsafe { real(b) };
    if let (Some(t), Some((s, generation))) = (ts, arrival) {
        t.with(|t| {
            t.emit(
                EventKind::BarrierWaitEnd {
                    barrier: s.id(),
                    generation,
                    serial: r == libc::PTHREAD_BARRIER_SERIAL_THREAD,
                },
                Key::Acquire(&s.clock),
            );
        });
    }
    r
}

unsafe extern "C-unwind" fn destroy(b: B, ra: usize) -> c_int {
    let real = REAL_DESTROY.get();
    record_destroy(b as usize, ra);
    // SAFETY: the real function with the caller's argument.
    unsafe { real(b) }
}
