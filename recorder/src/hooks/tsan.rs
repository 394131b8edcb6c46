//! The ThreadSanitizer ABI, runtime side: the table `__foresight_tsan_runtime_v1` through which
//! the stub linked into an instrumented program (`recorder/stub/tsan_stub.c`, installed by
//! `foresight config`) reports its memory accesses, atomics, fences, call stack and
//! annotations. The stub performs every operation itself and calls here only to record it, so
//! nothing here changes what the program does.
//!
//! The table's layout is the ABI between the two files; its symbol name carries the version.
//! The stub reaches it through a weak reference that the dynamic linker binds when this
//! library is loaded, and finds nothing (so records nothing) otherwise.
//!
//! Every entry keeps the runtime's rules (`hooks/mod.rs`): nothing before start-up, nothing
//! from inside the runtime or a signal handler that interrupted it (the session guard),
//! `errno` untouched, no allocation on the hot path (`ThreadState::record_access`).

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use foresight_trace::event::{AtomicOp, EventKind, LockMode, MemoryOrder};
use foresight_trace::tables::ObjectKind;

use super::{object, record_destroy, record_init, rt_lane};
use crate::accesses;
use crate::sequence::Key;
use crate::stripes;
use crate::thread_state::{self, ThreadState};

/// `flags`: the stub calls `func_entry`/`func_exit` (the shadow call stack of `--stack-depth`).
const WANTS_FUNC_ENTRY: usize = 1;

/// The table, laid out as `struct foresight_tsan_runtime` in the stub.
#[repr(C)]
pub struct Runtime {
    flags: AtomicUsize,
    init: extern "C" fn(),
    access: extern "C" fn(usize, usize, usize),
    func_entry: extern "C" fn(usize),
    func_exit: extern "C" fn(),
    atomic_begin: extern "C" fn(usize) -> usize,
    /// # Safety
    /// `token` is 0 or what `atomic_begin` returned on this thread, handed back once.
    atomic_end: unsafe extern "C" fn(usize, usize, usize, usize),
    fence: extern "C" fn(c_int, usize),
    annotate: extern "C" fn(c_int, usize, usize, usize) -> usize,
}

#[allow(non_upper_case_globals)]
#[no_mangle]
pub static __foresight_tsan_runtime_v1: Runtime = Runtime {
    flags: AtomicUsize::new(0),
    init,
    access,
    func_entry,
    func_exit,
    atomic_begin,
    atomic_end,
    fence,
    annotate,
};

/// Start-up: the shadow stack is kept only when sites have callers.
pub fn configure(stack_depth: usize) {
    let flags = if stack_depth > 1 { WANTS_FUNC_ENTRY } else { 0 };
    __foresight_tsan_runtime_v1
        .flags
        .store(flags, Ordering::Relaxed);
}

extern "C" fn init() {
    accesses::set_instrumented();
}

extern "C" fn access(addr: usize, info: usize, pc: usize) {
    if let Some(t) = thread_state::current() {
        t.record_access(addr, info, pc);
    } else {
        access_unseen(addr, info, pc);
    }
}

#[cold]
#[inline(never)]
fn access_unseen(addr: usize, info: usize, pc: usize) {
    if let Some(t) = rt_lane() {
        t.record_access(addr, info, pc);
    }
}

extern "C" fn func_entry(pc: usize) {
    if let Some(t) = rt_lane() {
        t.func_entry(pc);
    }
}

extern "C" fn func_exit() {
    if let Some(t) = thread_state::current() {
        t.func_exit();
    }
}

extern "C" fn atomic_begin(addr: usize) -> usize {
    rt_lane()
        .and_then(|t| t.atomic_begin(addr))
        .map_or(0, |s| s as *const stripes::Stripe as usize)
}

/// `info`: size << 8 | op << 4 | order, as the stub encodes it.
///
/// # Safety
/// `token` is a non-zero value `atomic_begin` returned on this thread, handed back once.
unsafe extern "C" fn atomic_end(token: usize, addr: usize, info: usize, pc: usize) {
    // SAFETY: the caller's contract: the token is the stripe `atomic_begin` returned, a
    // `&'static Stripe` of the static table.
    let stripe: &'static stripes::Stripe = unsafe { &*(token as *const stripes::Stripe) };
    let Some(t) = thread_state::current() else {
        // atomic_begin found a state: it cannot have gone, but the lock must not stay taken.
        stripe.unlock();
        return;
    };
    let op = match (info >> 4) & 0xf {
        0 => AtomicOp::Load,
        1 => AtomicOp::Store,
        2 => AtomicOp::Rmw,
        3 => AtomicOp::CasSuccess,
        _ => AtomicOp::CasFailure,
    };
    let order = memory_order(info & 0xf);
    let size = u32::try_from(info >> 8).unwrap_or(u32::MAX);
    t.atomic_end(stripe, addr, op, size, order, pc);
}

fn memory_order(v: usize) -> MemoryOrder {
    MemoryOrder::from_u8(v.min(5) as u8).unwrap_or(MemoryOrder::SeqCst)
}

extern "C" fn fence(order: c_int, pc: usize) {
    if let Some(t) = rt_lane() {
        if t.ignore_sync.get() != 0 {
            return;
        }
        t.with(|t| {
            let site = t.instrumented_site(pc);
            t.emit(
                EventKind::Fence {
                    order: memory_order(order.max(0) as usize),
                    site,
                },
                Key::Tick,
            );
        });
    }
}

// --- annotations ------------------------------------------------------------------------------

// `what`, as the stub numbers it.
const MUTEX_CREATE: c_int = 1;
const MUTEX_DESTROY: c_int = 2;
const MUTEX_PRE_LOCK: c_int = 3;
const MUTEX_POST_LOCK: c_int = 4;
const MUTEX_PRE_UNLOCK: c_int = 5;
const MUTEX_POST_UNLOCK: c_int = 6;
const MUTEX_PRE_SIGNAL: c_int = 7;
const MUTEX_POST_SIGNAL: c_int = 8;
const MUTEX_PRE_DIVERT: c_int = 9;
const MUTEX_POST_DIVERT: c_int = 10;
const HAPPENS_AFTER: c_int = 11;
const HAPPENS_BEFORE: c_int = 12;
const IGNORE_ACCESSES_BEGIN: c_int = 13;
const IGNORE_ACCESSES_END: c_int = 14;
const IGNORE_SYNC_BEGIN: c_int = 15;
const IGNORE_SYNC_END: c_int = 16;

// `__tsan_mutex_*` flags (<sanitizer/tsan_interface.h>).
const WRITE_REENTRANT: usize = 1 << 1;
const READ_REENTRANT: usize = 1 << 2;
const READ_LOCK: usize = 1 << 3;
const TRY_LOCK: usize = 1 << 4;
const TRY_LOCK_FAILED: usize = 1 << 5;

extern "C" fn annotate(what: c_int, addr: usize, arg: usize, pc: usize) -> usize {
    let Some(t) = rt_lane() else {
        return 0;
    };
    match what {
        IGNORE_ACCESSES_BEGIN => raise(&t.ignore_accesses),
        IGNORE_ACCESSES_END => lower(&t.ignore_accesses),
        IGNORE_SYNC_BEGIN => raise(&t.ignore_sync),
        IGNORE_SYNC_END => lower(&t.ignore_sync),
        // The custom lock's own code (its atomics and plain accesses) runs between each pre_
        // and post_ call: as ThreadSanitizer does, none of it is recorded; the lock events
        // stand for it. A divert is user code called from inside it (a callback): recorded.
        MUTEX_PRE_SIGNAL => ignore_all(&t, true),
        MUTEX_POST_SIGNAL | MUTEX_POST_UNLOCK => ignore_all(&t, false),
        MUTEX_PRE_DIVERT => ignore_all(&t, false),
        MUTEX_POST_DIVERT => ignore_all(&t, true),
        _ => {
            // The lock's own code is ignored from its pre_ call to its post_ call: the post_
            // call itself is the lock's and is recorded.
            if what == MUTEX_POST_LOCK {
                ignore_all(&t, false);
            }
            if t.ignore_sync.get() == 0 {
                annotate_sync(&t, what, addr, arg, pc);
            }
            if what == MUTEX_PRE_LOCK || what == MUTEX_PRE_UNLOCK {
                ignore_all(&t, true);
            }
        }
    }
    // `__tsan_mutex_pre_unlock` returns how many recursive levels it released, which the
    // program passes back to `post_lock`: one level, as every unlock is recorded.
    0
}

fn raise(c: &std::cell::Cell<u32>) {
    c.set(c.get().saturating_add(1));
}

fn lower(c: &std::cell::Cell<u32>) {
    c.set(c.get().saturating_sub(1));
}

fn ignore_all(t: &ThreadState, on: bool) {
    if on {
        raise(&t.ignore_accesses);
        raise(&t.ignore_sync);
    } else {
        lower(&t.ignore_accesses);
        lower(&t.ignore_sync);
    }
}

fn mutex_kind(flags: usize) -> ObjectKind {
    if flags & READ_REENTRANT != 0 {
        ObjectKind::RwLock
    } else if flags & WRITE_REENTRANT != 0 {
        ObjectKind::RecursiveMutex
    } else {
        ObjectKind::Mutex
    }
}

fn annotate_sync(t: &ThreadState, what: c_int, addr: usize, flags: usize, pc: usize) {
    let mode = if flags & READ_LOCK != 0 {
        LockMode::Shared
    } else {
        LockMode::Exclusive
    };
    match what {
        MUTEX_CREATE => record_init(addr, pc, || mutex_kind(flags)),
        MUTEX_DESTROY => record_destroy(addr, pc),
        HAPPENS_BEFORE | HAPPENS_AFTER => {
            t.with(|t| {
                let site = t.instrumented_site(pc);
                let clock = &stripes::of(addr).clock;
                let tag = addr as u64;
                if what == HAPPENS_BEFORE {
                    t.emit(EventKind::HappensBefore { tag, site }, Key::Release(clock));
                } else {
                    t.emit(EventKind::HappensAfter { tag, site }, Key::Acquire(clock));
                }
            });
        }
        MUTEX_PRE_LOCK if flags & TRY_LOCK == 0 => {
            t.with(|t| {
                if let Some((s, site)) = object(t, addr, pc, false, || mutex_kind(flags)) {
                    t.emit(
                        EventKind::LockRequest {
                            lock: s.id(),
                            mode,
                            site,
                        },
                        Key::Same,
                    );
                }
            });
        }
        MUTEX_POST_LOCK => {
            t.with(|t| {
                let Some((s, site)) = object(t, addr, pc, false, || mutex_kind(flags)) else {
                    return;
                };
                let lock = s.id();
                let failed = flags & TRY_LOCK_FAILED != 0;
                if flags & TRY_LOCK != 0 {
                    let kind = EventKind::LockTry {
                        lock,
                        mode,
                        site,
                        acquired: !failed,
                    };
                    let key = if failed {
                        Key::Same
                    } else {
                        Key::Acquire(&s.clock)
                    };
                    t.emit(kind, key);
                } else if failed {
                    t.emit(EventKind::LockFailed { lock, errno: 0 }, Key::Same);
                } else {
                    t.emit(
                        EventKind::LockAcquired { lock, mode },
                        Key::Acquire(&s.clock),
                    );
                }
            });
        }
        MUTEX_PRE_UNLOCK => {
            t.with(|t| {
                if let Some((s, site)) = object(t, addr, pc, false, || mutex_kind(flags)) {
                    // Before the lock's own release: readers of an rwlock release concurrently.
                    t.emit(
                        EventKind::LockRelease { lock: s.id(), site },
                        Key::Release(&s.clock),
                    );
                }
            });
        }
        _ => {}
    }
}
