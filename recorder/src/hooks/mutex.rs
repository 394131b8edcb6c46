//! `pthread_mutex_*`: normal, recursive and error-checking mutexes.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

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
/// `__count`: a recursive mutex's levels.
const COUNT_WORD: usize = 1;
/// `__nusers`: the holders a lock adds and an unlock removes.
const NUSERS_WORD: usize = 3;
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

    /// The blocking hooks' attempt first (`blocking`'s `try_first`): whether the mutex was
    /// free (or, recursive, the caller's already) and is now the caller's, exactly as the real
    /// `pthread_mutex_trylock` would have left it. A private normal or recursive mutex
    /// without flags (kind word 0 or 1: `PTHREAD_MUTEX_INITIALIZER`, a default or recursive
    /// attribute) is taken here (`try_lock_own`) when the C library's own attempt was found
    /// to do the same (`check_own_trylock`); any other through the real `trylock`, when a
    /// successful one is exactly what `pthread_mutex_lock` would have done without waiting
    /// and a failed one has no effect: true for the normal, recursive, error-checking and
    /// adaptive types (an error-checking mutex the caller owns gives `EBUSY`, and the real
    /// lock then gives `EDEADLK`; a recursive one at its count limit gives `EAGAIN` both
    /// times), not for robust, PI or PP mutexes.
    #[inline(always)]
    fn try_first(self) -> bool {
        let kind = self.kind_word();
        if own_kind(kind) && OWN_TRYLOCK.load(Ordering::Relaxed) {
            if let Some(t) = thread_state::current() {
                return self.try_lock_own(kind, t.os_tid.get());
            }
        }
        kind & KIND_ROBUST_PI_PP == 0
            // SAFETY: the real function with the hooked call's mutex (`new`'s contract).
            && REAL_TRYLOCK.try_get().is_some_and(|f| unsafe { f(self.0) } == 0)
    }

    /// glibc's `pthread_mutex_trylock` of a mutex whose kind word is `kind`, 0 or 1
    /// (`own_kind`), without the call. A recursive mutex the caller (`tid`, its kernel thread
    /// id) holds: one more level, unless the count is at its limit. Otherwise, if the lock
    /// word is 0, a compare-and-swap to 1 (acquire), then the holder's own writes: the owner
    /// word, a recursive mutex's count (1), one more user. A held mutex is left alone. Only
    /// while `OWN_TRYLOCK` says the C library does the same.
    #[inline(always)]
    fn try_lock_own(self, kind: c_int, tid: u32) -> bool {
        let words = self.0.cast::<c_int>();
        if kind == KIND_RECURSIVE && self.word(OWNER_WORD) as u32 == tid {
            // SAFETY: the caller holds the mutex (its owner word is the caller's, which only
            // the holder writes), and the holder changes the count with plain stores; the
            // word is inside the valid mutex (`new`'s contract).
            unsafe {
                let count = words.add(COUNT_WORD);
                let n = count.read_volatile() as u32;
                if n == u32::MAX {
                    return false;
                }
                count.write_volatile(n.wrapping_add(1) as c_int);
            }
            return true;
        }
        // SAFETY: `new`'s contract: the mutex is valid; its lock word is an aligned int that
        // the C library itself reads and writes only atomically.
        let lock = unsafe { AtomicI32::from_ptr(words.add(LOCK_WORD)) };
        // As glibc's attempt: a load first, so that a held mutex's line is not taken from
        // its holder.
        if lock.load(Ordering::Relaxed) != 0
            || lock
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        // SAFETY: the caller now holds the mutex, and the holder writes these words with
        // plain stores (glibc's trylock and lock do); they are inside the valid mutex.
        unsafe {
            if kind == KIND_RECURSIVE {
                words.add(COUNT_WORD).write_volatile(1);
            }
            let users = words.add(NUSERS_WORD);
            users.write_volatile(users.read_volatile().wrapping_add(1));
            words.add(OWNER_WORD).write_volatile(tid as c_int);
        }
        true
    }
}

/// glibc's kind word of a private recursive mutex without flags.
const KIND_RECURSIVE: c_int = 1;

/// Whether a mutex of kind word `kind` may be taken by the hooks' own attempt
/// (`try_lock_own`): a private normal or recursive one without flags.
#[inline(always)]
fn own_kind(kind: c_int) -> bool {
    (kind as u32) <= KIND_RECURSIVE as u32
}

/// Whether the lock hooks take a free normal or recursive mutex themselves (`try_lock_own`)
/// instead of calling the C library's `pthread_mutex_trylock`: the call, its dispatch on the
/// mutex's type and the hook's saving of registers around it were a third of the
/// instructions the runtime adds to an uncontended lock. Set by `check_own_trylock` at
/// start-up when this C library's attempt leaves such mutexes exactly as `try_lock_own`
/// does; cleared across `fork` (`pause_own_trylock`), whose child's first hooks may run
/// before its thread id is known.
static OWN_TRYLOCK: AtomicBool = AtomicBool::new(false);
/// What `check_own_trylock` found, for `resume_own_trylock`.
static OWN_TRYLOCK_CHECKED: AtomicBool = AtomicBool::new(false);

/// Start-up, before the program's threads: whether the C library's `pthread_mutex_trylock`
/// and `try_lock_own` leave the same bytes, on a default mutex (`PTHREAD_MUTEX_INITIALIZER`,
/// all zero) and on a recursive one: taking it free, taking it again (recursive) or failing
/// on it held (normal), and after the real unlocks. Anything else (another C library's
/// layout, lock elision forced by a tunable, a changed implementation) keeps the real call.
pub(crate) fn check_own_trylock() {
    let ok = same_as_own_trylock(false) && same_as_own_trylock(true);
    OWN_TRYLOCK_CHECKED.store(ok, Ordering::Relaxed);
    OWN_TRYLOCK.store(ok, Ordering::Relaxed);
}

fn same_as_own_trylock(recursive: bool) -> bool {
    let (Some(trylock), Some(unlock), Some(init)) = (
        REAL_TRYLOCK.try_get(),
        REAL_UNLOCK.try_get(),
        REAL_INIT.try_get(),
    ) else {
        return false;
    };
    let tid = thread_state::gettid();
    // SAFETY: an all-zero `pthread_mutex_t` is glibc's `PTHREAD_MUTEX_INITIALIZER`, and an
    // all-zero attribute object is initialised by `pthread_mutexattr_init` below before use.
    let (mut theirs, mut ours, mut attr): (pthread_mutex_t, pthread_mutex_t, pthread_mutexattr_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed(), std::mem::zeroed()) };
    let t: M = &mut theirs;
    let o: M = &mut ours;
    let bytes = |m: &pthread_mutex_t| {
        // SAFETY: a mutex is plain bytes to look at (a union over an int array, zeroed
        // above: no byte is uninitialised).
        unsafe {
            std::slice::from_raw_parts(
                (m as *const pthread_mutex_t).cast::<u8>(),
                std::mem::size_of::<pthread_mutex_t>(),
            )
        }
        .to_vec()
    };
    // SAFETY: both mutexes and the attribute object live in this frame and are used by this
    // thread only; the real functions with those arguments.
    unsafe {
        if recursive {
            if libc::pthread_mutexattr_init(&mut attr) != 0
                || libc::pthread_mutexattr_settype(&mut attr, libc::PTHREAD_MUTEX_RECURSIVE) != 0
                || init(t, &attr) != 0
                || init(o, &attr) != 0
            {
                return false;
            }
            libc::pthread_mutexattr_destroy(&mut attr);
        }
        let before = bytes(&ours);
        let pm = ProgramMutex::new(o);
        let kind = pm.kind_word();
        if !own_kind(kind) || (kind == KIND_RECURSIVE) != recursive || bytes(&theirs) != before {
            return false;
        }
        // Free, then taken again (a recursive mutex) or held (a normal one).
        if trylock(t) != 0 || !pm.try_lock_own(kind, tid) || bytes(&theirs) != bytes(&ours) {
            return false;
        }
        let again = if recursive { 0 } else { libc::EBUSY };
        if trylock(t) != again
            || pm.try_lock_own(kind, tid) != recursive
            || bytes(&theirs) != bytes(&ours)
        {
            return false;
        }
        for _ in 0..1 + usize::from(recursive) {
            if unlock(t) != 0 || unlock(o) != 0 || bytes(&theirs) != bytes(&ours) {
                return false;
            }
        }
        bytes(&ours) == before
    }
}

/// Before `fork` (the prepare handler): the lock hooks call the C library's attempt until
/// `resume_own_trylock`, so that a mutex the child takes before its handlers ran gets the
/// C library's idea of the child's thread id.
pub(crate) fn pause_own_trylock() {
    OWN_TRYLOCK.store(false, Ordering::Relaxed);
}

/// After `fork`, in the parent, and in the child once its thread's id is its own.
pub(crate) fn resume_own_trylock() {
    OWN_TRYLOCK.store(
        OWN_TRYLOCK_CHECKED.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
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
    // A normal or recursive mutex, taken by the hook's own attempt: the usual case calls
    // nothing, so it saves and restores no register; every other case is a tail call.
    let kind = pm.kind_word();
    if own_kind(kind) && OWN_TRYLOCK.load(Ordering::Relaxed) {
        if let Some(t) = thread_state::current() {
            if !pm.try_lock_own(kind, t.os_tid.get()) {
                // SAFETY: the real function, called with the caller's argument.
                return unsafe {
                    contended(
                        m as usize,
                        ra,
                        LockMode::Exclusive,
                        Wait::Untimed,
                        move || kind_of_word(kind),
                        move || REAL_LOCK.try_get().map_or(0, |real| real(m)),
                        acquired,
                        |r| r,
                    )
                };
            }
            if t.enter() {
                let done = t
                    .lane_pair(m as usize, ra)
                    .is_some_and(|p| t.lane_lock_immediate(p, LockMode::Exclusive));
                t.leave();
                if done {
                    return 0;
                }
            }
            return own_taken_general(m as usize, ra, kind);
        }
    }
    // SAFETY: forwarded: the caller's arguments.
    unsafe { mutex_lock_other(m, ra) }
}

/// A mutex taken by the own attempt, recorded off the lane; the lock call's result.
#[inline(never)]
fn own_taken_general(addr: usize, ra: usize, kind: c_int) -> c_int {
    taken_at_once_general(addr, ra, LockMode::Exclusive, move || kind_of_word(kind));
    0
}

/// `pthread_mutex_lock` of any other mutex, or before the own attempt is checked.
///
/// # Safety
/// `m` is the caller's argument.
#[inline(never)]
unsafe fn mutex_lock_other(m: M, ra: usize) -> c_int {
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
            || pm.try_first(),
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
            || pm.try_first(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::UnsafeCell;
    use std::sync::atomic::AtomicU32;

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn own_attempt_leaves_a_mutex_as_the_c_library_does() {
        assert!(same_as_own_trylock(false), "a default mutex");
        assert!(same_as_own_trylock(true), "a recursive one");
    }

    #[test]
    fn a_mutex_taken_by_the_own_attempt_is_waited_for_and_released_by_the_c_library() {
        let (Some(lock), Some(unlock)) = (REAL_LOCK.try_get(), REAL_UNLOCK.try_get()) else {
            panic!("the C library's mutex functions");
        };
        struct Shared(UnsafeCell<pthread_mutex_t>);
        // SAFETY: the mutex is only used through the C library's thread-safe functions and
        // the own attempt, which is as safe as its trylock.
        unsafe impl Sync for Shared {}
        impl Shared {
            fn ptr(&self) -> M {
                self.0.get()
            }
        }
        // SAFETY: an all-zero mutex is `PTHREAD_MUTEX_INITIALIZER`.
        let m = Shared(UnsafeCell::new(unsafe { std::mem::zeroed() }));
        // SAFETY: the mutex lives until the scope's threads are joined.
        let pm = unsafe { ProgramMutex::new(m.ptr()) };
        let tid = thread_state::gettid();
        assert!(pm.try_lock_own(0, tid), "a free mutex is taken");
        assert_eq!(pm.word(OWNER_WORD) as u32, tid);
        assert!(!pm.try_lock_own(0, tid), "a held one is not");
        let stage = AtomicU32::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                stage.store(1, Ordering::SeqCst);
                // SAFETY: the real lock and unlock of a valid mutex, on this thread.
                unsafe {
                    assert_eq!(lock(m.ptr()), 0);
                    // The holder let it go before this lock returned.
                    assert_eq!(stage.load(Ordering::SeqCst), 2);
                    assert_eq!(unlock(m.ptr()), 0);
                }
            });
            while stage.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            stage.store(2, Ordering::SeqCst);
            // SAFETY: this thread holds the mutex (taken above).
            assert_eq!(unsafe { unlock(m.ptr()) }, 0);
        });
        assert!(pm.try_lock_own(0, tid), "free again");
        // SAFETY: held by this thread.
        assert_eq!(unsafe { unlock(m.ptr()) }, 0);
    }
}
