//! `pthread_mutex_*`: normal, recursive and error-checking mutexes.

use libc::{c_int, pthread_mutex_t, pthread_mutexattr_t, timespec};

use foresight_trace::event::{EventKind, LockMode};
use foresight_trace::tables::ObjectKind;

use super::{object, record_destroy, record_init, rt, rt_lane};
use crate::objects::Slot;
use crate::real::real;
use crate::sequence::Key;
use crate::thread_state::{self, ThreadState, Wait};

type M = *mut pthread_mutex_t;

real!(REAL_LOCK: unsafe extern "C-unwind" fn(M) -> c_int = b"pthread_mutex_lock\0");
real!(REAL_TRYLOCK: unsafe extern "C-unwind" fn(M) -> c_int = b"pthread_mutex_trylock\0");
real!(REAL_TIMEDLOCK: unsafe extern "C-unwind" fn(M, *const timespec) -> c_int = b"pthread_mutex_timedlock\0");
real!(REAL_UNLOCK: unsafe extern "C-unwind" fn(M) -> c_int = b"pthread_mutex_unlock\0");
real!(REAL_INIT: unsafe extern "C-unwind" fn(M, *const pthread_mutexattr_t) -> c_int = b"pthread_mutex_init\0");
real!(REAL_DESTROY: unsafe extern "C-unwind" fn(M) -> c_int = b"pthread_mutex_destroy\0");

entry!(pthread_mutex_lock, 1, mutex_lock);
entry!(pthread_mutex_trylock, 1, mutex_trylock);
entry!(pthread_mutex_timedlock, 2, mutex_timedlock);
entry!(pthread_mutex_unlock, 1, mutex_unlock);
entry!(pthread_mutex_init, 2, mutex_init);
entry!(pthread_mutex_destroy, 1, mutex_destroy);

/// glibc's `struct __pthread_mutex_s` on 64-bit targets: `int __lock; unsigned __count;
/// int __owner; unsigned __nusers; int __kind; …`. `__kind & 3` is the type (0 normal, 1
/// recursive, 2 error-checking, 3 adaptive); `__owner` is the owner's kernel tid. Reading them
/// avoids tracking attributes, and works for statically initialised mutexes
/// (`PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP`) too.
const KIND_WORD: usize = 4;
const OWNER_WORD: usize = 2;
const LOCK_WORD: usize = 0;
/// The holder's tid in a robust mutex's lock word (the other bits are waiter flags).
const FUTEX_TID_MASK: c_int = 0x3fff_ffff;
/// glibc's robust-mutex kind flag.
const KIND_ROBUST: c_int = 16;

/// glibc's mutex kind flags that change what `trylock` means: robust (a trylock can take the
/// lock *and* fail with `EOWNERDEAD`), priority inheritance, priority protection.
const KIND_ROBUST_PI_PP: c_int = 16 | 32 | 64;

/// A mutex the program passed to the hooked call that made this value: its words are read
/// during that call only.
#[derive(Clone, Copy)]
pub(crate) struct ProgramMutex(M);

impl ProgramMutex {
    /// # Safety
    /// `m` points at a glibc `pthread_mutex_t` that stays valid while the value is used: the
    /// mutex argument of the hooked call that makes it, used only during that call.
    #[inline(always)]
    pub(crate) unsafe fn new(m: M) -> Self {
        Self(m)
    }

    #[inline(always)]
    fn word(self, index: usize) -> c_int {
        // SAFETY: `new`'s contract: the mutex is valid, and the word is at a fixed offset
        // inside it. A racy read of an int that the C library changes is harmless here.
        unsafe { std::ptr::read_volatile((self.0 as *const c_int).add(index)) }
    }

    pub(crate) fn kind(self) -> ObjectKind {
        kind_of_word(self.word(KIND_WORD))
    }

    /// The kind word, read once for a hook that needs both the type and the flags.
    #[inline(always)]
    fn kind_word(self) -> c_int {
        self.word(KIND_WORD)
    }

    fn owned_by(self, t: &ThreadState) -> bool {
        self.word(OWNER_WORD) as u32 == t.os_tid.get()
    }

    /// Whether unlocking the mutex (`pthread_mutex_unlock`, or the unlock that starts a
    /// condition wait) fails with `EPERM` for thread `t`, without any effect: the C library
    /// checks the owner of a robust mutex in its lock word (the holder's tid, whatever state
    /// a dead owner left), and of a recursive or error-checking one in its owner word; not of
    /// a normal or adaptive one. Either word holds the caller's own tid exactly when it holds
    /// the mutex, so the answer does not race with other threads.
    pub(crate) fn unlock_fails(self, t: &ThreadState) -> bool {
        self.unlock_fails_as(self.word(KIND_WORD), t)
    }

    /// `unlock_fails` with the kind word read already (`kind_word`).
    #[inline(always)]
    fn unlock_fails_as(self, kind: c_int, t: &ThreadState) -> bool {
        if kind & KIND_ROBUST != 0 {
            (self.word(LOCK_WORD) & FUTEX_TID_MASK) as u32 != t.os_tid.get()
        } else {
            matches!(kind & 3, 1 | 2) && !self.owned_by(t)
        }
    }

    /// Whether a successful `pthread_mutex_trylock` of the mutex is exactly what
    /// `pthread_mutex_lock` would have done without waiting, and a failed one has no effect:
    /// true for the normal, recursive, error-checking and adaptive types (an error-checking
    /// mutex the caller owns gives `EBUSY`, and the real lock then gives `EDEADLK`; a
    /// recursive one at its count limit gives `EAGAIN` both times), not for robust, PI or PP
    /// mutexes.
    #[inline(always)]
    fn trylock_first_ok(self) -> bool {
        self.word(KIND_WORD) & KIND_ROBUST_PI_PP == 0
    }
}

/// The mutex type a glibc kind word names.
#[inline(always)]
fn kind_of_word(kind: c_int) -> ObjectKind {
    match kind & 3 {
        1 => ObjectKind::RecursiveMutex,
        2 => ObjectKind::ErrorCheckMutex,
        _ => ObjectKind::Mutex,
    }
}

// Probes. The hooks read the program's object (a mutex's kind and owner words) before they
// enter the runtime's session, on every path where the address may be new to them: a
// pointer that faults (a null or garbage mutex) then faults outside the runtime, where the
// signal layer completes the trace before the default action, as for any crash, instead of
// inside it, where it must leave the thread's buffer alone. The real call would have
// faulted on the same pointer: the program dies of the same signal.

/// The shared shape of a blocking acquire. First `try_first`, the real non-blocking attempt,
/// before anything else (it must succeed exactly when the blocking call would take the lock
/// without waiting and return 0, and have no effect otherwise): if it took the lock, one
/// lock-immediate event (request + acquired) in one short session, and 0 is returned, as the
/// blocking call would have. Otherwise: the request (in the buffer before the thread can
/// block), the real call outside any session, then acquired or failed.
///
/// # Safety
/// `call` is the real function applied to the caller's arguments; `try_first` is `|| false`
/// or the real non-blocking variant applied to them.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn blocking(
    addr: usize,
    ra: usize,
    mode: LockMode,
    wait: Wait,
    kind_of: impl Fn() -> ObjectKind + Copy,
    try_first: impl FnOnce() -> bool,
    call: impl FnOnce() -> c_int,
    // Whether `r` means the lock was acquired (pthread functions return 0, others may differ).
    acquired: impl Fn(c_int) -> bool,
    errno_of: impl Fn(c_int) -> c_int,
) -> c_int {
    if try_first() {
        taken_at_once(addr, ra, mode, kind_of);
        return 0;
    }
    // SAFETY: the caller's contract.
    unsafe { contended(addr, ra, mode, wait, kind_of, call, acquired, errno_of) }
}

/// Records that the lock at `addr` was taken without waiting: the lane when it can, else the
/// general path.
#[inline(always)]
pub(crate) fn taken_at_once(
    addr: usize,
    ra: usize,
    mode: LockMode,
    kind_of: impl Fn() -> ObjectKind + Copy,
) {
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
    taken_at_once_general(addr, ra, mode, kind_of);
}

#[inline(never)]
fn taken_at_once_general(
    addr: usize,
    ra: usize,
    mode: LockMode,
    kind_of: impl Fn() -> ObjectKind + Copy,
) {
    if let Some(t) = rt_lane() {
        if t.enter() {
            if let Some((s, site)) = object(&t, addr, ra, false, kind_of) {
                t.emit_lock_immediate(s.id(), mode, site, Key::Acquire(&s.clock));
            }
            t.leave();
        }
    }
}

/// `blocking` when the attempt did not take the lock, out of line: the lock hooks' fast path
/// then needs few registers.
///
/// # Safety
/// As for `blocking`.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn contended(
    addr: usize,
    ra: usize,
    mode: LockMode,
    wait: Wait,
    kind_of: impl Fn() -> ObjectKind + Copy,
    call: impl FnOnce() -> c_int,
    acquired: impl Fn(c_int) -> bool,
    errno_of: impl Fn(c_int) -> c_int,
) -> c_int {
    // The lane for the request, then the real call, then the lane for the acquisition: a
    // thread that failed its attempt usually gets the lock a moment later, and the less it
    // does in that moment, the less it lengthens the wait of the others.
    if let Some(t) = thread_state::current() {
        if t.enter() {
            let hit = t.lane_pair(addr, ra);
            let requested = hit.is_some_and(|p| t.lane_lock_request(p, mode));
            t.leave();
            if let (true, Some(p)) = (requested, hit) {
                let outer = t.begin_wait(wait);
                let r = call();
                t.end_wait(outer);
                if acquired(r) && t.enter() {
                    let done = t.lane_lock_acquired(p, mode);
                    t.leave();
                    if done {
                        return r;
                    }
                }
                after_real_call(p.slot, mode, r, acquired, errno_of);
                return r;
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { contended_general(addr, ra, mode, wait, kind_of, call, acquired, errno_of) }
}

/// The outcome of a blocking call whose request was recorded, on the general path.
#[inline(never)]
fn after_real_call(
    s: &Slot,
    mode: LockMode,
    r: c_int,
    acquired: impl Fn(c_int) -> bool,
    errno_of: impl Fn(c_int) -> c_int,
) {
    if let Some(t) = thread_state::current() {
        t.with(|t| {
            if acquired(r) {
                t.emit(
                    EventKind::LockAcquired { lock: s.id(), mode },
                    Key::Acquire(&s.clock),
                );
            } else {
                t.emit(
                    EventKind::LockFailed {
                        lock: s.id(),
                        errno: errno_of(r) as u32,
                    },
                    Key::Same,
                );
            }
        });
    }
}

/// `contended` on the general path.
///
/// # Safety
/// As for `blocking`.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn contended_general(
    addr: usize,
    ra: usize,
    mode: LockMode,
    wait: Wait,
    kind_of: impl Fn() -> ObjectKind + Copy,
    call: impl FnOnce() -> c_int,
    acquired: impl Fn(c_int) -> bool,
    errno_of: impl Fn(c_int) -> c_int,
) -> c_int {
    let Some(t) = rt() else {
        return call();
    };
    // The program's object is read outside the session (`probe`).
    let kind = kind_of();
    if !t.enter() {
        return call();
    }
    let found = object(&t, addr, ra, false, move || kind);
    if let Some((s, site)) = found {
        t.emit(
            EventKind::LockRequest {
                lock: s.id(),
                mode,
                site,
            },
            Key::Same,
        );
    }
    t.leave();
    let outer = t.begin_wait(wait);
    let r = call();
    t.end_wait(outer);
    if let Some((s, _)) = found {
        after_real_call(s, mode, r, acquired, errno_of);
    }
    r
}

/// The shared shape of a non-blocking attempt: the lookup, the real call and the event in one
/// session (the lookup before the call, outside any critical section it opens).
#[inline(always)]
pub(crate) fn attempt(
    addr: usize,
    ra: usize,
    mode: LockMode,
    kind_of: impl Fn() -> ObjectKind + Copy,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let Some(t) = rt() else {
        return call();
    };
    // The program's object is read outside the session (`probe`).
    let kind = kind_of();
    if !t.enter() {
        return call();
    }
    let found = object(&t, addr, ra, false, move || kind);
    let r = call();
    if let Some((s, site)) = found {
        // A robust mutex whose holder died is taken, with EOWNERDEAD (no other primitive
        // returns it).
        let taken = acquired(r);
        let ev = EventKind::LockTry {
            lock: s.id(),
            mode,
            site,
            acquired: taken,
        };
        let key = if taken {
            Key::Acquire(&s.clock)
        } else {
            Key::Same
        };
        t.emit(ev, key);
    }
    t.leave();
    r
}

/// The shared shape of a release: the event (and the object's clock) before the real call,
/// which is then the last thing the hook does. Both ways end in a tail call (the real call,
/// or the general path that makes it), so that the lane runs without saving a register.
#[inline(always)]
pub(crate) fn release(
    addr: usize,
    ra: usize,
    kind_of: impl Fn() -> ObjectKind + Copy,
    owned: impl Fn(ObjectKind, &ThreadState) -> bool + Copy,
    call: impl FnOnce() -> c_int,
) -> c_int {
    if release_on_lane(addr, ra, kind_of, owned) {
        return call();
    }
    release_general(addr, ra, kind_of, owned, call)
}

/// `release` off the lane, out of line.
#[inline(never)]
fn release_general(
    addr: usize,
    ra: usize,
    kind_of: impl Fn() -> ObjectKind + Copy,
    owned: impl Fn(ObjectKind, &ThreadState) -> bool + Copy,
    call: impl FnOnce() -> c_int,
) -> c_int {
    record_release_general(addr, ra, kind_of, owned);
    call()
}

/// The release's event: the lane when it can, else the general path.
#[inline(always)]
pub(crate) fn record_release(
    addr: usize,
    ra: usize,
    kind_of: impl Fn() -> ObjectKind + Copy,
    owned: impl Fn(ObjectKind, &ThreadState) -> bool + Copy,
) {
    if !release_on_lane(addr, ra, kind_of, owned) {
        record_release_general(addr, ra, kind_of, owned);
    }
}

/// The release's event on the lane; false when the general path must record it.
#[inline(always)]
fn release_on_lane(
    addr: usize,
    ra: usize,
    kind_of: impl Fn() -> ObjectKind + Copy,
    owned: impl Fn(ObjectKind, &ThreadState) -> bool + Copy,
) -> bool {
    let Some(t) = thread_state::current() else {
        return false;
    };
    if !t.enter() {
        return false;
    }
    let done = t.lane_pair(addr, ra).is_some_and(|p| {
        let kind = kind_of();
        // Not owned: nothing to record (the real call fails), and nothing more to do.
        !owned(kind, &t) || t.lane_release(p, kind == ObjectKind::RwLock)
    });
    t.leave();
    done
}

#[inline(never)]
fn record_release_general(
    addr: usize,
    ra: usize,
    kind_of: impl Fn() -> ObjectKind + Copy,
    owned: impl Fn(ObjectKind, &ThreadState) -> bool + Copy,
) {
    if let Some(t) = rt_lane() {
        // The program's object is read outside the session (`probe`).
        let kind = kind_of();
        let owns = owned(kind, &t);
        if t.enter() {
            if let Some((s, site)) = object(&t, addr, ra, false, move || kind) {
                if owns {
                    let key = if kind == ObjectKind::RwLock {
                        Key::Release(&s.clock)
                    } else {
                        Key::ReleaseExclusive(&s.clock)
                    };
                    t.emit(EventKind::LockRelease { lock: s.id(), site }, key);
                }
            }
            t.leave();
        }
    }
}

/// Whether a mutex lock call's result means the caller holds the mutex: 0, or `EOWNERDEAD`
/// (a robust mutex whose holder died, taken over in an inconsistent state).
fn acquired(r: c_int) -> bool {
    r == 0 || r == libc::EOWNERDEAD
}

unsafe extern "C-unwind" fn mutex_lock(m: M, ra: usize) -> c_int {
    // SAFETY: the program's mutex argument, used during this call.
    let pm = unsafe { ProgramMutex::new(m) };
    // SAFETY: the real functions, called with the caller's argument.
    unsafe {
        blocking(
            m as usize,
            ra,
            LockMode::Exclusive,
            Wait::Untimed,
            move || pm.kind(),
            || pm.trylock_first_ok() && REAL_TRYLOCK.try_get().is_some_and(|t| t(m) == 0),
            // None: inside dlsym's bootstrap, single-threaded, nothing to lock against.
            move || REAL_LOCK.try_get().map_or(0, |real| real(m)),
            acquired,
            |r| r,
        )
    }
}

unsafe extern "C-unwind" fn mutex_timedlock(m: M, t: *const timespec, ra: usize) -> c_int {
    let real = REAL_TIMEDLOCK.get();
    // SAFETY: the program's mutex argument, used during this call.
    let pm = unsafe { ProgramMutex::new(m) };
    // SAFETY: the real function with the caller's arguments.
    unsafe {
        blocking(
            m as usize,
            ra,
            LockMode::Exclusive,
            Wait::Timed,
            move || pm.kind(),
            // A free mutex is taken whatever the timeout (POSIX: the timeout is not checked
            // then), so the attempt first is exact here too.
            || pm.trylock_first_ok() && REAL_TRYLOCK.try_get().is_some_and(|t| t(m) == 0),
            || real(m, t),
            acquired,
            |r| r,
        )
    }
}

unsafe extern "C-unwind" fn mutex_trylock(m: M, ra: usize) -> c_int {
    let Some(real) = REAL_TRYLOCK.try_get() else {
        return 0;
    };
    // SAFETY: the program's mutex argument, used during this call.
    let pm = unsafe { ProgramMutex::new(m) };
    attempt(
        m as usize,
        ra,
        LockMode::Exclusive,
        move || pm.kind(),
        // SAFETY: the real function with the caller's argument.
        || unsafe { real(m) },
    )
}

unsafe extern "C-unwind" fn mutex_unlock(m: M, ra: usize) -> c_int {
    // The lane, then the real call as a tail call: the usual unlock saves no register. Every
    // other case (the real function not resolved yet, the lane refused) is `unlock_general`.
    if REAL_UNLOCK.resolved().is_some() {
        // SAFETY: the program's mutex argument, used during this call.
        let pm = unsafe { ProgramMutex::new(m) };
        // Read once, before any session (`probe`): the type and the flags both come from it.
        let kind = pm.kind_word();
        let recorded = release_on_lane(
            m as usize,
            ra,
            move || kind_of_word(kind),
            // A mutex whose owner is checked reports EPERM to a non-owner: no release then.
            move |_, t| !pm.unlock_fails_as(kind, t),
        );
        if recorded {
            // Loaded again rather than kept in a register across the lane (a resolved
            // address stays).
            if let Some(real) = REAL_UNLOCK.resolved() {
                // SAFETY: the real function with the caller's argument.
                return unsafe { real(m) };
            }
            // SAFETY: forwarded: the caller's argument.
            return unsafe { unlock_unrecorded(m) };
        }
    }
    // SAFETY: forwarded: the caller's arguments.
    unsafe { unlock_general(m, ra) }
}

/// `pthread_mutex_unlock` whose release is recorded already.
///
/// # Safety
/// `m` is the caller's argument.
#[inline(never)]
unsafe fn unlock_unrecorded(m: M) -> c_int {
    match REAL_UNLOCK.try_get() {
        // SAFETY: the real function with the caller's argument.
        Some(real) => unsafe { real(m) },
        None => 0,
    }
}

/// `pthread_mutex_unlock` off the lane: the general path records the release.
///
/// # Safety
/// `m` and `ra` are the caller's arguments.
#[inline(never)]
unsafe fn unlock_general(m: M, ra: usize) -> c_int {
    let Some(real) = REAL_UNLOCK.try_get() else {
        return 0;
    };
    // SAFETY: the program's mutex argument, used during this call.
    let pm = unsafe { ProgramMutex::new(m) };
    let kind = pm.kind_word();
    record_release_general(
        m as usize,
        ra,
        move || kind_of_word(kind),
        move |_, t| !pm.unlock_fails_as(kind, t),
    );
    // SAFETY: the real function with the caller's argument.
    unsafe { real(m) }
}

unsafe extern "C-unwind" fn mutex_init(m: M, a: *const pthread_mutexattr_t, ra: usize) -> c_int {
    let Some(real) = REAL_INIT.try_get() else {
        return 0;
    };
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { real(m, a) };
    if r == 0 {
        // SAFETY: the program's mutex argument, used during this call.
        let pm = unsafe { ProgramMutex::new(m) };
        record_init(m as usize, ra, || pm.kind());
    }
    r
}

unsafe extern "C-unwind" fn mutex_destroy(m: M, ra: usize) -> c_int {
    let Some(real) = REAL_DESTROY.try_get() else {
        return 0;
    };
    record_destroy(m as usize, ra);
    // SAFETY: the real function with the caller's argument.
    unsafe { real(m) }
}
