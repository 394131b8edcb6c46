//! The interposed functions. Each exported symbol is a naked entry (`naked.rs`) that passes the
//! caller's return address to a Rust implementation as an extra argument; the implementation
//! records the events around the real call.
//!
//! Rules every hook keeps:
//! - the real function is called exactly once, with the caller's arguments, and its return
//!   value is returned unchanged; `errno` is saved after the real call and restored before
//!   returning (`ThreadState::with`); the one exception is the lock fast path
//!   (`mutex::blocking`): the real non-blocking variant first, the real blocking call only if
//!   it failed, which leaves the same result as the blocking call alone;
//! - the runtime's bookkeeping runs inside `ThreadState::with` (the reentrancy guard): a hook
//!   reached from inside the runtime, or from a signal handler that interrupted it, only calls
//!   the real function;
//! - nothing with a destructor is alive across the real call, and implementations use the
//!   `"C-unwind"` ABI: cancellation points (`pthread_cond_wait`, `sem_wait`, `pthread_join`)
//!   and `pthread_exit` unwind through these frames;
//! - keys are taken inside the critical window (`sequence.rs`): releases before the real
//!   call, acquisitions after it returns;
//! - a call the C library refuses at once (known before the call: a condition wait on a
//!   mutex it will not unlock, a join of the calling thread) records no wait, release or
//!   request it did not make.

#[macro_use]
pub mod naked;
pub mod annotate;
pub mod barrier;
pub mod blocking;
pub mod cond;
pub mod fd;
pub mod handoff;
pub mod heap;
pub mod memory;
pub mod mutex;
pub mod once;
pub mod process;
pub mod rwlock;
// The variadic entries build an x86-64 `va_list`; elsewhere the family is not interposed.
#[cfg(target_arch = "x86_64")]
pub mod scanf;
pub mod sem;
pub mod spin;
pub mod sync;
pub mod thread;
pub mod tsan;

use foresight_trace::event::{EventKind, SiteId};
use foresight_trace::tables::ObjectKind;

use crate::objects::{self, Origin, Slot};
use crate::sequence::Key;
use crate::thread_state::{self, Current, ThreadState};
use crate::{output, state};

/// The calling thread's state if recording is on (adopting a thread we did not see created).
#[inline]
pub fn rt() -> Option<Current> {
    if !state::recording() {
        return None;
    }
    match thread_state::current() {
        Some(t) => Some(t),
        None if thread_state::unseen() => thread::adopt_current(),
        None => None,
    }
}

/// The calling thread's state for the lock hooks' hot path: a live state is used without
/// asking whether recording goes on (`ThreadState::enter_buf` refuses to record once it has
/// ended, and `object_slow` creates nothing then); the rest as `rt`.
#[inline(always)]
pub fn rt_lane() -> Option<Current> {
    match thread_state::current() {
        Some(t) => Some(t),
        None => rt_unseen(),
    }
}

#[cold]
#[inline(never)]
fn rt_unseen() -> Option<Current> {
    if state::recording() && thread_state::unseen() {
        thread::adopt_current()
    } else {
        None
    }
}

/// The object slot for `addr` and the site for `ra`, inside a session of `t` (through the
/// thread's small caches first: the (object, site) pair, then each on its own).
#[inline(always)]
pub fn object(
    t: &ThreadState,
    addr: usize,
    ra: usize,
    init: bool,
    kind_of: impl Fn() -> ObjectKind,
) -> Option<(&'static Slot, SiteId)> {
    if !init {
        if let Some(hit) = t.cached_pair(addr, ra) {
            return Some(hit);
        }
    }
    object_slow(t, addr, ra, init, kind_of)
}

#[inline(never)]
fn object_slow(
    t: &ThreadState,
    addr: usize,
    ra: usize,
    init: bool,
    kind_of: impl Fn() -> ObjectKind,
) -> Option<(&'static Slot, SiteId)> {
    if !state::recording() {
        return None; // the lock hooks' lane reaches here without asking (`rt_lane`)
    }
    thread_state::keep_errno(|| object_uncached(t, addr, ra, init, kind_of))
}

fn object_uncached(
    t: &ThreadState,
    addr: usize,
    ra: usize,
    init: bool,
    kind_of: impl Fn() -> ObjectKind,
) -> Option<(&'static Slot, SiteId)> {
    // A site that depends on the callers (a call from inside a lock wrapper) is never
    // cached by return address: the pair cache would give every caller the first one's.
    let (site, cacheable) = t.call_site(ra);
    let origin = if init {
        Origin::Init(site)
    } else {
        if let Some(s) = t.cached_object(addr) {
            if cacheable {
                t.cache_pair(addr, ra, s, site);
            }
            return Some((s, site));
        }
        Origin::Use(site)
    };
    let Some(s) = objects::get(addr, origin, kind_of) else {
        // The object table is full: this object's events are not recorded.
        output::count_lost(1);
        return None;
    };
    t.cache_object(addr, s);
    if cacheable {
        t.cache_pair(addr, ra, s, site);
    }
    Some((s, site))
}

/// `*_init` succeeded: a new object (generation) at `addr`.
#[inline]
pub fn record_init(addr: usize, ra: usize, kind_of: impl Fn() -> ObjectKind) {
    if let Some(t) = rt() {
        t.with(|t| {
            if let Some((s, site)) = object(t, addr, ra, true, kind_of) {
                t.emit(
                    EventKind::ObjectInit {
                        object: s.id(),
                        site,
                    },
                    Key::Release(&s.clock),
                );
            }
        });
    }
}

/// Before `*_destroy`: the object's last event; the address's next use is a new object.
#[inline]
pub fn record_destroy(addr: usize, ra: usize) {
    if let Some(t) = rt() {
        t.with(|t| {
            if let Some(s) = objects::find(addr) {
                let site = t.call_site(ra).0;
                t.emit(
                    EventKind::ObjectDestroy {
                        object: s.id(),
                        site,
                    },
                    Key::Acquire(&s.clock),
                );
                objects::retire(s);
            }
        });
    }
}
