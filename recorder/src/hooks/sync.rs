//! The entry points of `foresight-sync`, the Rust crate whose `Mutex`, `RwLock`, `Condvar`,
//! `Barrier`, `Once` and threads record into this runtime: Rust's standard locks are built on
//! futexes, not on the pthread functions the other hooks interpose, so they call here instead.
//!
//! The crate finds the table `__foresight_sync_v1` with `dlsym(RTLD_DEFAULT, …)` once; without
//! the runtime it finds nothing and records nothing. The table's layout is the ABI between the
//! two (`sync/src/runtime.rs`): its first word is its size, and entries are only ever appended,
//! so a newer crate can tell which entries an older runtime has.
//!
//! The crate performs every operation itself (with `std`'s types) and calls here only to
//! record it, around the real call as the pthread hooks do: acquisitions after they return,
//! releases before. Every entry keeps the rules of `hooks/mod.rs` (the session guard, `errno`
//! untouched, nothing from inside the runtime). Sites are the `#[track_caller]` locations the
//! crate passes (`sites::source_site`): the address of the location's static descriptor stands
//! in for a return address, so the lock hooks' shapes, caches and lane apply unchanged.

use std::ffi::c_void;

use foresight_trace::event::{EventKind, LockMode, WaitOutcome};
use foresight_trace::tables::ObjectKind;

use super::annotate::{annotate, string_id};
use super::mutex::{record_release, taken_at_once};
use super::{object, record_destroy, record_init, rt_lane};
use crate::sequence::Key;
use crate::sites;
use crate::stripes;
use crate::thread_state::{self, ThreadState, Wait};

/// A `#[track_caller]` location, as the crate passes it.
#[repr(C)]
pub struct SourceSite {
    /// The address of the location's static descriptor: one per call site.
    key: usize,
    file: *const u8,
    file_len: usize,
    line: u32,
    column: u32,
}

// The crate's object kinds (0, or anything unknown: a mutex).
const KIND_RWLOCK: u32 = 1;
const KIND_CONDITION: u32 = 2;
const KIND_BARRIER: u32 = 3;
const KIND_ONCE: u32 = 4;

// The crate's annotations.
const ANNOTATE_SUBCLASS: u32 = 1;
const ANNOTATE_RANK: u32 = 2;

/// The table, laid out as `Runtime` in `sync/src/runtime.rs`.
#[repr(C)]
pub struct Runtime {
    /// `size_of::<Runtime>()`: entries are appended, never changed.
    size: usize,
    declare: unsafe extern "C" fn(usize, u32, u32, *const SourceSite),
    forget: unsafe extern "C" fn(usize, *const SourceSite),
    lock_immediate: unsafe extern "C" fn(usize, u32, u32, *const SourceSite),
    lock_request: unsafe extern "C" fn(usize, u32, u32, *const SourceSite) -> usize,
    lock_acquired: unsafe extern "C" fn(usize, u32, u32, *const SourceSite, usize),
    lock_try: unsafe extern "C" fn(usize, u32, u32, *const SourceSite, bool),
    release: unsafe extern "C" fn(usize, u32, *const SourceSite),
    cond_wait_begin: unsafe extern "C" fn(usize, usize, bool, *const SourceSite) -> usize,
    cond_wait_end: unsafe extern "C" fn(usize, usize, *const SourceSite, usize, bool),
    cond_notify: unsafe extern "C" fn(usize, bool, *const SourceSite),
    barrier_wait_begin: unsafe extern "C" fn(usize, *const SourceSite) -> u64,
    barrier_wait_end: unsafe extern "C" fn(usize, *const SourceSite, u64, bool),
    once_begin: unsafe extern "C" fn(usize, *const SourceSite) -> usize,
    once_run: unsafe extern "C" fn(usize, *const SourceSite),
    once_end: unsafe extern "C" fn(usize, *const SourceSite),
    once_finish: unsafe extern "C" fn(usize, *const SourceSite, usize, bool),
    happens: unsafe extern "C" fn(u64, bool, *const SourceSite),
    lock_class: unsafe extern "C" fn(usize, *const u8, usize, *const SourceSite),
    annotate: unsafe extern "C" fn(usize, u32, u32, *const SourceSite),
    access: unsafe extern "C" fn(usize, usize, bool, *const SourceSite),
    spawn_site: unsafe extern "C" fn(*const SourceSite),
}

#[allow(non_upper_case_globals)]
#[no_mangle]
pub static __foresight_sync_v1: Runtime = Runtime {
    size: std::mem::size_of::<Runtime>(),
    declare,
    forget,
    lock_immediate,
    lock_request,
    lock_acquired,
    lock_try,
    release,
    cond_wait_begin,
    cond_wait_end,
    cond_notify,
    barrier_wait_begin,
    barrier_wait_end,
    once_begin,
    once_run,
    once_end,
    once_finish,
    happens,
    lock_class,
    annotate: annotate_lock,
    access,
    spawn_site,
};

fn object_kind(kind: u32) -> ObjectKind {
    match kind {
        KIND_RWLOCK => ObjectKind::RwLock,
        KIND_CONDITION => ObjectKind::Condition,
        KIND_BARRIER => ObjectKind::Barrier,
        KIND_ONCE => ObjectKind::Once,
        _ => ObjectKind::Mutex,
    }
}

fn lock_mode(mode: u32) -> LockMode {
    if mode == 1 {
        LockMode::Shared
    } else {
        LockMode::Exclusive
    }
}

/// The site's key, its site interned first (with its file and line) if it is new, inside a
/// session of the calling thread. A call the session guard refuses interns nothing, and the
/// event it is for is then not recorded either (the same guard refuses it).
///
/// # Safety
/// `site` points at a `SourceSite` whose `file` is `file_len` readable bytes.
unsafe fn known(site: *const SourceSite) -> usize {
    // SAFETY: the caller's contract.
    let s = unsafe { &*site };
    if let Some(t) = rt_lane() {
        t.with(|_| {
            // SAFETY: the caller's contract: `file_len` bytes at `file`.
            let file = unsafe { std::slice::from_raw_parts(s.file, s.file_len) };
            thread_state::keep_errno(|| sites::source_site(s.key, file, s.line, s.column));
        });
    }
    s.key
}

/// The site's key alone: for a lane lookup (a hit means the site is known), or for the end
/// of a call whose beginning made it known.
///
/// # Safety
/// As for `known`.
#[inline(always)]
unsafe fn key_of(site: *const SourceSite) -> usize {
    // SAFETY: the caller's contract.
    unsafe { (*site).key }
}

/// A new object at `addr`, declared where the program made it (`Mutex::new`): its class is
/// that site. `count`: a barrier's.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn declare(addr: usize, kind: u32, count: u32, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    let kind = object_kind(kind);
    if kind != ObjectKind::Barrier {
        record_init(addr, ra, move || kind);
        return;
    }
    if let Some(t) = rt_lane() {
        t.with(|t| {
            if let Some((s, site)) = object(t, addr, ra, true, || ObjectKind::Barrier) {
                s.count.store(count, std::sync::atomic::Ordering::Release);
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

/// The object at `addr` is gone (dropped): the address's next object is a new one.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn forget(addr: usize, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    record_destroy(addr, ra);
}

/// A lock taken without waiting (the crate's `try_lock` first succeeded).
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn lock_immediate(addr: usize, mode: u32, kind: u32, site: *const SourceSite) {
    let mode = lock_mode(mode);
    // SAFETY: the caller's contract.
    let ra = unsafe { key_of(site) };
    if let Some(t) = thread_state::current() {
        if t.enter() {
            let done = t
                .lane_pair(addr, ra)
                .is_some_and(|p| t.lane_lock_immediate(p, mode));
            t.leave();
            if done {
                return;
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { known(site) };
    let kind = object_kind(kind);
    taken_at_once(addr, ra, mode, move || kind);
}

/// Before a blocking acquire: the request, and the thread waits. The token goes to
/// `lock_acquired` (0: nothing was recorded).
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn lock_request(
    addr: usize,
    mode: u32,
    kind: u32,
    site: *const SourceSite,
) -> usize {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    let kind = object_kind(kind);
    let Some(t) = rt_lane() else {
        return 0;
    };
    let requested = t.with(|t| {
        let (s, site) = object(t, addr, ra, false, move || kind)?;
        t.emit(
            EventKind::LockRequest {
                lock: s.id(),
                mode: lock_mode(mode),
                site,
            },
            Key::Same,
        );
        Some(())
    });
    if requested.flatten().is_none() {
        return 0;
    }
    t.begin_wait(Wait::Untimed) as usize + 1
}

/// After a blocking acquire returned (std's locks always take the lock).
///
/// # Safety
/// `site` as for `known`; `token` is what `lock_request` returned on this thread.
unsafe extern "C" fn lock_acquired(
    addr: usize,
    mode: u32,
    kind: u32,
    site: *const SourceSite,
    token: usize,
) {
    if token == 0 {
        return;
    }
    let Some(t) = thread_state::current() else {
        return;
    };
    t.end_wait((token - 1) as u8);
    // SAFETY: the caller's contract.
    let ra = unsafe { key_of(site) };
    let kind = object_kind(kind);
    t.with(|t| {
        if let Some((s, _)) = object(t, addr, ra, false, move || kind) {
            t.emit(
                EventKind::LockAcquired {
                    lock: s.id(),
                    mode: lock_mode(mode),
                },
                Key::Acquire(&s.clock),
            );
        }
    });
}

/// After a non-blocking attempt (`try_lock`, `try_read`, `try_write`).
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn lock_try(
    addr: usize,
    mode: u32,
    kind: u32,
    site: *const SourceSite,
    acquired: bool,
) {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    let kind = object_kind(kind);
    if let Some(t) = rt_lane() {
        t.with(|t| {
            if let Some((s, site)) = object(t, addr, ra, false, move || kind) {
                let key = if acquired {
                    Key::Acquire(&s.clock)
                } else {
                    Key::Same
                };
                t.emit(
                    EventKind::LockTry {
                        lock: s.id(),
                        mode: lock_mode(mode),
                        site,
                        acquired,
                    },
                    key,
                );
            }
        });
    }
}

/// Before a guard releases its lock.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn release(addr: usize, kind: u32, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let ra = unsafe { key_of(site) };
    if let Some(t) = thread_state::current() {
        if t.enter() {
            let done = t
                .lane_pair(addr, ra)
                .is_some_and(|p| t.lane_release(p, kind == KIND_RWLOCK));
            t.leave();
            if done {
                return;
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { known(site) };
    let kind = object_kind(kind);
    record_release(addr, ra, move || kind, |_, _: &ThreadState| true);
}

/// Before a condition wait gives its mutex up. The token goes to `cond_wait_end`.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn cond_wait_begin(
    cond: usize,
    mutex: usize,
    timed: bool,
    site: *const SourceSite,
) -> usize {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    let Some(t) = rt_lane() else {
        return 0;
    };
    let begun = t.with(|t| {
        let (cs, site) = object(t, cond, ra, false, || ObjectKind::Condition)?;
        let (ms, _) = object(t, mutex, ra, false, || ObjectKind::Mutex)?;
        t.emit(
            EventKind::CondWaitBegin {
                cond: cs.id(),
                mutex: ms.id(),
                site,
            },
            Key::ReleaseExclusive(&ms.clock),
        );
        Some(())
    });
    if begun.flatten().is_none() {
        return 0;
    }
    let wait = if timed { Wait::Timed } else { Wait::Untimed };
    t.begin_wait(wait) as usize + 1
}

/// After a condition wait returned, holding its mutex again.
///
/// # Safety
/// `site` as for `known`; `token` is what `cond_wait_begin` returned on this thread.
unsafe extern "C" fn cond_wait_end(
    cond: usize,
    mutex: usize,
    site: *const SourceSite,
    token: usize,
    timed_out: bool,
) {
    if token == 0 {
        return;
    }
    let Some(t) = thread_state::current() else {
        return;
    };
    t.end_wait((token - 1) as u8);
    // SAFETY: the caller's contract.
    let ra = unsafe { key_of(site) };
    t.with(|t| {
        let cs = object(t, cond, ra, false, || ObjectKind::Condition)?.0;
        let ms = object(t, mutex, ra, false, || ObjectKind::Mutex)?.0;
        let outcome = if timed_out {
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
        Some(())
    });
}

/// Before `notify_one` (`all`: `notify_all`).
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn cond_notify(cond: usize, all: bool, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    if let Some(t) = rt_lane() {
        t.with(|t| {
            if let Some((s, site)) = object(t, cond, ra, false, || ObjectKind::Condition) {
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

/// Before a barrier wait: the arrival, and its generation (as `hooks/barrier.rs` numbers
/// them). The token (generation << 8 | outer wait + 1; 0: nothing recorded) goes to
/// `barrier_wait_end`.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn barrier_wait_begin(b: usize, site: *const SourceSite) -> u64 {
    use std::sync::atomic::Ordering;
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    let Some(t) = rt_lane() else {
        return 0;
    };
    let generation = t.with(|t| {
        let (s, site) = object(t, b, ra, false, || ObjectKind::Barrier)?;
        let count = s.count.load(Ordering::Acquire).max(1) as u64;
        let generation = s.arrivals.fetch_add(1, Ordering::AcqRel) / count;
        t.emit(
            EventKind::BarrierWaitBegin {
                barrier: s.id(),
                site,
                generation: Some(generation),
            },
            Key::Release(&s.clock),
        );
        Some(generation)
    });
    let Some(generation) = generation.flatten() else {
        return 0;
    };
    let outer = t.begin_wait(Wait::Untimed) as u64;
    generation << 8 | (outer + 1)
}

/// After a barrier wait returned (`leader`: `BarrierWaitResult::is_leader`).
///
/// # Safety
/// `site` as for `known`; `token` is what `barrier_wait_begin` returned on this thread.
unsafe extern "C" fn barrier_wait_end(b: usize, site: *const SourceSite, token: u64, leader: bool) {
    if token == 0 {
        return;
    }
    let Some(t) = thread_state::current() else {
        return;
    };
    t.end_wait(((token & 0xff) - 1) as u8);
    let generation = token >> 8;
    // SAFETY: the caller's contract.
    let ra = unsafe { key_of(site) };
    t.with(|t| {
        if let Some((s, _)) = object(t, b, ra, false, || ObjectKind::Barrier) {
            t.emit(
                EventKind::BarrierWaitEnd {
                    barrier: s.id(),
                    generation,
                    serial: leader,
                },
                Key::Acquire(&s.clock),
            );
        }
    });
}

/// Before `call_once` (and `OnceLock`'s initialisation): the thread may wait for another
/// thread's initialiser. The token goes to `once_finish`.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn once_begin(o: usize, site: *const SourceSite) -> usize {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    let Some(t) = rt_lane() else {
        return 0;
    };
    let begun = t.with(|t| {
        let (s, site) = object(t, o, ra, false, || ObjectKind::Once)?;
        t.emit(EventKind::OnceBegin { once: s.id(), site }, Key::Same);
        Some(())
    });
    if begun.flatten().is_none() {
        return 0;
    }
    t.begin_wait(Wait::Untimed) as usize + 1
}

/// The once's initialiser starts on this thread.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn once_run(o: usize, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    if let Some(t) = thread_state::current() {
        // This thread runs the initialiser: it is not waiting.
        t.end_wait(0);
        t.with(|t| {
            if let Some((s, _)) = object(t, o, ra, false, || ObjectKind::Once) {
                t.emit(EventKind::OnceRun { once: s.id() }, Key::Acquire(&s.clock));
            }
        });
    }
}

/// The once's initialiser returned (or unwound).
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn once_end(o: usize, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    if let Some(t) = thread_state::current() {
        t.with(|t| {
            if let Some((s, _)) = object(t, o, ra, false, || ObjectKind::Once) {
                t.emit(EventKind::OnceEnd { once: s.id() }, Key::Release(&s.clock));
            }
        });
    }
}

/// After `call_once` returned: `ran` says whether this call ran the initialiser; if not, it
/// found it done (a skip, ordered after the initialiser's end).
///
/// # Safety
/// `site` as for `known`; `token` is what `once_begin` returned on this thread.
unsafe extern "C" fn once_finish(o: usize, site: *const SourceSite, token: usize, ran: bool) {
    if token == 0 {
        return;
    }
    let Some(t) = thread_state::current() else {
        return;
    };
    t.end_wait((token - 1) as u8);
    if ran {
        return;
    }
    // SAFETY: the caller's contract.
    let ra = unsafe { key_of(site) };
    t.with(|t| {
        if let Some((s, _)) = object(t, o, ra, false, || ObjectKind::Once) {
            t.emit(EventKind::OnceSkip { once: s.id() }, Key::Acquire(&s.clock));
        }
    });
}

/// A happens-before edge the crate declares (`before`: its source; else its target), by tag:
/// a scoped thread's end before its scope's end.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn happens(tag: u64, before: bool, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    if let Some(t) = rt_lane() {
        t.with(|t| {
            let site = t.call_site(ra).0;
            let clock = &stripes::of(tag as usize).clock;
            if before {
                t.emit(EventKind::HappensBefore { tag, site }, Key::Release(clock));
            } else {
                t.emit(EventKind::HappensAfter { tag, site }, Key::Acquire(clock));
            }
        });
    }
}

/// `foresight.h`'s `foresight_lock_class` for the crate's locks (the name is not
/// NUL-terminated).
///
/// # Safety
/// `site` as for `known`; `name` is `len` readable bytes.
unsafe extern "C" fn lock_class(addr: usize, name: *const u8, len: usize, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    annotate(addr as *mut c_void, ra, |id| {
        // SAFETY: the caller's contract; the name is cut as the C entry cuts it.
        let bytes = unsafe { std::slice::from_raw_parts(name, len.min(256)) };
        Some(EventKind::LockClassName {
            lock: id,
            name: string_id(bytes),
        })
    });
}

/// `foresight_lock_subclass` and `foresight_lock_rank` for the crate's locks.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn annotate_lock(addr: usize, what: u32, value: u32, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let ra = unsafe { known(site) };
    annotate(addr as *mut c_void, ra, |id| match what {
        ANNOTATE_SUBCLASS => Some(EventKind::LockSubclass {
            lock: id,
            subclass: value,
        }),
        ANNOTATE_RANK => Some(EventKind::LockRank {
            lock: id,
            rank: value,
        }),
        _ => None,
    });
}

/// A read or write of `size` bytes at `addr` that the program asks to have checked for races
/// (`foresight_sync::record_read`/`record_write`: memory it shares through `unsafe` code,
/// which no compiler instrumentation reports in a Rust program). Recorded as an instrumented
/// program's accesses are (`ThreadState::record_access`), at the caller's line.
///
/// # Safety
/// `site` as for `known`.
unsafe extern "C" fn access(addr: usize, size: usize, write: bool, site: *const SourceSite) {
    // SAFETY: the caller's contract.
    let pc = unsafe { known(site) };
    if let Some(t) = rt_lane() {
        t.record_access(addr, size << 1 | usize::from(write), pc);
    }
}

/// Names the program's line that creates the calling thread's next thread (the crate's
/// `spawn`s, just before `std`'s), for the `pthread_create` hook, which takes it
/// (`hooks/thread.rs`); null forgets it (the crate's spawn returned, a thread created or not).
///
/// # Safety
/// `site` is null, or as for `known`.
unsafe extern "C" fn spawn_site(site: *const SourceSite) {
    if site.is_null() {
        if let Some(t) = thread_state::current() {
            t.set_spawn_site(None);
        }
        return;
    }
    let Some(t) = rt_lane() else {
        return;
    };
    // SAFETY: the caller's contract.
    let s = unsafe { &*site };
    let named = t.with(|_| {
        // SAFETY: the caller's contract: `file_len` bytes at `file`.
        let file = unsafe { std::slice::from_raw_parts(s.file, s.file_len) };
        thread_state::keep_errno(|| sites::source_site(s.key, file, s.line, s.column))
    });
    t.set_spawn_site(named);
}
