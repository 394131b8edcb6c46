//! Threads: `pthread_create` (with a start trampoline), `join`/`tryjoin_np`/`timedjoin_np`,
//! `detach`, `pthread_exit`, and the thread-exit paths.
//!
//! The creator allocates the child's state and takes the `thread-create` key *before* the real
//! create; the child's first act in the trampoline is its `thread-start` (key after the create
//! key). A thread's exit is recorded when its start routine returns (trampoline), in
//! `pthread_exit`, or — for cancellation and threads we adopted — in a pthread-key destructor;
//! its exit key is stored for the joiner, which takes its `join` key after the real join.

use std::sync::atomic::{AtomicU32, Ordering};

use libc::{c_int, c_void, pthread_attr_t, pthread_t, timespec};

use foresight_trace::event::EventKind;
use foresight_trace::tables::{TableRecord, ThreadInfo};

use super::rt;
use crate::context::Context;
use crate::real::{real, Start, REAL_CREATE, REAL_JOIN};
use crate::sequence::Key;
use crate::sites;
use crate::thread_state::{self, Current, ThreadState, Wait};

real!(REAL_TRYJOIN: unsafe extern "C-unwind" fn(pthread_t, *mut *mut c_void) -> c_int = b"pthread_tryjoin_np\0");
real!(REAL_TIMEDJOIN: unsafe extern "C-unwind" fn(pthread_t, *mut *mut c_void, *const timespec) -> c_int = b"pthread_timedjoin_np\0");
real!(REAL_DETACH: unsafe extern "C-unwind" fn(pthread_t) -> c_int = b"pthread_detach\0");
real!(REAL_EXIT: unsafe extern "C-unwind" fn(*mut c_void) -> ! = b"pthread_exit\0");
// glibc 2.32 and later; `try_get` is `None` where it does not exist.
real!(REAL_ATTR_GETSIGMASK: unsafe extern "C" fn(*const pthread_attr_t, *mut libc::sigset_t) -> c_int = b"pthread_attr_getsigmask_np\0");

entry!(pthread_create, 4, create);
entry!(pthread_join, 2, join);
entry!(pthread_tryjoin_np, 2, tryjoin);
entry!(pthread_timedjoin_np, 3, timedjoin);
entry!(pthread_detach, 1, detach);
entry!(pthread_exit, 1, exit);

/// The pthread key whose destructor records the exit of threads that did not leave through
/// the trampoline or `pthread_exit` (cancelled threads, adopted threads).
static EXIT_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

pub fn init_exit_key() {
    let mut k: libc::pthread_key_t = 0;
    // SAFETY: plain call with a valid out-pointer and a destructor with the right signature.
    if unsafe { libc::pthread_key_create(&mut k, Some(exit_destructor)) } == 0 {
        EXIT_KEY.store(k, Ordering::Release);
    }
}

fn set_exit_key(p: *mut ThreadState) {
    let k = EXIT_KEY.load(Ordering::Acquire);
    if k != u32::MAX {
        // SAFETY: the key was created by init_exit_key; the value is an opaque pointer.
        unsafe { libc::pthread_setspecific(k, p as *const c_void) };
    }
}

unsafe extern "C" fn exit_destructor(p: *mut c_void) {
    if thread_state::current().is_some_and(|t| std::ptr::eq(&*t, p as *const ThreadState)) {
        thread_exit();
    }
}

fn self_pt() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// Makes `p` the calling thread's state: registers it, writes its thread record and its
/// `thread-start` event (after `after`, the create key).
fn start_on_current(p: *mut ThreadState, after: u64) {
    // SAFETY: `p` is a live state allocated for this thread and not yet shared.
    let t = unsafe { &*p };
    t.attach();
    thread_state::register(p);
    thread_state::pt_started(self_pt(), t);
    crate::output::table_record(&TableRecord::Thread(ThreadInfo {
        id: t.tid(),
        os_tid: t.os_tid.get(),
        parent: t.parent(),
        name: None,
    }));
    t.emit(EventKind::ThreadStart, Key::After(after));
    set_exit_key(p);
    thread_state::set_current(p);
}

/// A thread we did not see created (created before recording started, or by `clone`).
#[cold]
pub fn adopt_current() -> Option<Current> {
    thread_state::keep_errno(|| {
        crate::flusher::thread_created();
        // Guard: while the state is built (allocation, table records), hooks on this thread
        // pass through.
        thread_state::mark_dead();
        let p = Box::into_raw(ThreadState::new(None, 0));
        start_on_current(p, 0);
        crate::signals::record_start_mask();
        thread_state::current()
    })
}

/// The main thread, at start-up.
pub fn start_main() {
    thread_state::mark_dead();
    let p = Box::into_raw(ThreadState::new(None, 0));
    start_on_current(p, 0);
}

/// Records the calling thread's exit, flushes its buffer and releases its state (nothing if
/// the thread has none). The thread ends right after: no handle of it is used again.
pub fn thread_exit() {
    let Some(p) = thread_state::take_current() else {
        return;
    };
    {
        // SAFETY: the state this thread owned, still registered and allocated; the reference
        // ends with this block, before the state is freed.
        let t = unsafe { &*p };
        let key = t.emit(EventKind::ThreadExit, Key::Tick);
        thread_state::exited(t.tid(), key);
        t.write_access_counts();
        t.flush(Context::Thread);
        t.close();
    }
    set_exit_key(std::ptr::null_mut());
    thread_state::unregister(p);
    // SAFETY: the thread's share, given up once: it is unregistered and no longer current;
    // the creator may still hold its own share for a moment.
    unsafe { thread_state::release(p) };
    if thread_state::no_live_threads() {
        crate::flusher::program_thread_exiting();
    }
}

unsafe extern "C-unwind" fn trampoline(arg: *mut c_void) -> *mut c_void {
    // Until the state is current, a signal handler's hooks on this thread pass through: they
    // would otherwise adopt the thread a second time, under a new id that would then name
    // its `pthread_t` (and the joiner would wait for a thread that never ends).
    thread_state::mark_dead();
    let p = arg as *mut ThreadState;
    // SAFETY: `arg` is the state allocated by `create` for this thread.
    let (start, user_arg, after) = unsafe {
        let t = &*p;
        (t.start.get(), t.arg.get(), t.clock_hint())
    };
    start_on_current(p, after);
    // SAFETY: the state is this thread's own and current.
    if let Some(mask) = unsafe { &*p }.start_mask.take() {
        crate::sigmask::set_mask(&mask);
    }
    crate::signals::record_start_mask();
    // SAFETY: `start` is the user's start routine passed to pthread_create.
    let f: Start = unsafe { std::mem::transmute::<usize, Start>(start) };
    // SAFETY: calling the user's start routine with its argument, as pthread_create would.
    let r = unsafe { f(user_arg as *mut c_void) };
    thread_exit();
    r
}

unsafe extern "C-unwind" fn create(
    out: *mut pthread_t,
    attr: *const pthread_attr_t,
    start: Start,
    arg: *mut c_void,
    ra: usize,
) -> c_int {
    let real = REAL_CREATE.get();
    let Some(t) = rt() else {
        // SAFETY: the real function with the caller's arguments.
        return unsafe { real(out, attr, start, arg) };
    };
    // Taken whatever becomes of this create: a site named for it is not left for the next.
    let named = t.take_spawn_site();
    let prepared = t.with(|t| {
        crate::flusher::thread_created();
        let site = named.unwrap_or_else(|| sites::call_site(ra).0);
        let child = ThreadState::new(Some(t.tid()), 0);
        child.start.set(start as usize);
        child.arg.set(arg as usize);
        // The create key is taken before the real create; the event is written after it
        // succeeded, at that key.
        let key = t.take_key(Key::Tick);
        child.set_clock_hint(key);
        // Until the real create has returned here, the child may run, exit and give up its
        // state: the creator keeps a share of it.
        child.share_with_creator();
        (Box::into_raw(child), site, key)
    });
    let Some((child, site, key)) = prepared else {
        // SAFETY: as above.
        return unsafe { real(out, attr, start, arg) };
    };
    // The C library gives the new thread its signal mask just before it calls the start
    // routine. A signal delivered there, before the trampoline has made the child's state
    // current, would run a handler whose hooks adopt the thread a second time, under an id
    // that then names its `pthread_t`. So the child starts with every signal blocked and
    // takes its own mask in the trampoline, as ThreadSanitizer's interceptor does; the creator
    // keeps them blocked until its create event is written (a handler's events would
    // otherwise come before it at later keys). A pending signal is delivered right after.
    let creator_mask = crate::sigmask::block_all_saving();
    // SAFETY: the child's state is not shared before the real create.
    unsafe { &*child }
        .start_mask
        .set(start_mask(attr).or(creator_mask));
    // Inside a session: what the C library does on this thread for the create (allocations)
    // is not recorded. The create event is written afterwards at the key taken before; an
    // event recorded in between would raise this thread's key above it, and the child's
    // start would no longer follow its creation. (`enter` keeps no errno: the create's own
    // effect on it stays.)
    let entered = t.enter();
    // SAFETY: the real function, with our trampoline and the child's state as its argument.
    let r = unsafe { real(out, attr, trampoline, child.cast()) };
    if entered {
        t.leave();
    }
    if r != 0 {
        // SAFETY: the thread was not created: nobody else has the state.
        drop(unsafe { Box::from_raw(child) });
        if let Some(mask) = creator_mask {
            crate::sigmask::set_mask(&mask);
        }
        return r;
    }
    {
        // SAFETY: the creator's share keeps the state allocated (released below).
        let c = unsafe { &*child };
        let tid = c.tid();
        // SAFETY: on success pthread_create stored the new thread's id.
        thread_state::pt_created(unsafe { *out } as usize, c);
        t.with(|t| t.emit_at(EventKind::ThreadCreate { child: tid, site }, key));
    }
    // SAFETY: the creator's share, given up once; `child` is not used after this.
    unsafe { thread_state::release(child) };
    if let Some(mask) = creator_mask {
        crate::sigmask::set_mask(&mask);
    }
    r
}

/// The signal mask `attr` gives the thread it creates (`pthread_attr_setsigmask_np`), if any.
fn start_mask(attr: *const pthread_attr_t) -> Option<libc::sigset_t> {
    if attr.is_null() {
        return None;
    }
    let get = REAL_ATTR_GETSIGMASK.try_get()?;
    // SAFETY: an all-zero sigset_t is the empty set, filled in by the call.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `attr` is the caller's initialised attribute object; `mask` is ours. It returns
    // 0 when the attribute holds a mask, PTHREAD_ATTR_NO_SIGMASK_NP (-1) when it does not.
    (unsafe { get(attr, &mut mask) } == 0).then_some(mask)
}

/// Join-like calls: `blocking` ones (`Some`: with or without a timeout) record a request
/// first.
///
/// # Safety
/// `call` is the real function with the caller's arguments.
#[inline(always)]
unsafe fn joining(
    pt: pthread_t,
    ra: usize,
    blocking: Option<Wait>,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let ts = rt();
    // A join of the calling thread itself fails at once with EDEADLK: no request (there is
    // no wait, and a thread waiting for its own end would be a deadlock), only the failed
    // attempt.
    // SAFETY: pthread_self has no preconditions.
    let blocking = blocking.filter(|_| pt != unsafe { libc::pthread_self() });
    let child = ts.and_then(|t| {
        t.with(|t| {
            let child = thread_state::pt_lookup(pt as usize)?;
            if blocking.is_some() {
                let site = sites::call_site(ra).0;
                t.emit(EventKind::JoinRequest { child, site }, Key::Same);
            }
            Some(child)
        })
        .flatten()
    });
    let outer = match (ts, child, blocking) {
        (Some(t), Some(_), Some(wait)) => Some(t.begin_wait(wait)),
        _ => None,
    };
    let r = call();
    if let (Some(t), Some(outer)) = (ts, outer) {
        t.end_wait(outer);
    }
    if let (Some(t), Some(child)) = (ts, child) {
        t.with(|t| {
            if r == 0 {
                // The exit's key, which the child left before it ended (0: lost, then the join
                // is ordered by nothing more than a fresh key).
                let exit_key = thread_state::exit_key(child).unwrap_or(0);
                t.emit(
                    EventKind::JoinEnd {
                        child,
                        joined: true,
                    },
                    Key::After(exit_key),
                );
            } else {
                t.emit(
                    EventKind::JoinEnd {
                        child,
                        joined: false,
                    },
                    Key::Tick,
                );
            }
        });
    }
    r
}

unsafe extern "C-unwind" fn join(pt: pthread_t, ret: *mut *mut c_void, ra: usize) -> c_int {
    let real = REAL_JOIN.get();
    // SAFETY: the real function with the caller's arguments.
    unsafe { joining(pt, ra, Some(Wait::Untimed), || real(pt, ret)) }
}

unsafe extern "C-unwind" fn tryjoin(pt: pthread_t, ret: *mut *mut c_void, ra: usize) -> c_int {
    let real = REAL_TRYJOIN.get();
    // SAFETY: the real function with the caller's arguments.
    unsafe { joining(pt, ra, None, || real(pt, ret)) }
}

unsafe extern "C-unwind" fn timedjoin(
    pt: pthread_t,
    ret: *mut *mut c_void,
    abs: *const timespec,
    ra: usize,
) -> c_int {
    let real = REAL_TIMEDJOIN.get();
    // SAFETY: the real function with the caller's arguments.
    unsafe { joining(pt, ra, Some(Wait::Timed), || real(pt, ret, abs)) }
}

unsafe extern "C-unwind" fn detach(pt: pthread_t, ra: usize) -> c_int {
    let real = REAL_DETACH.get();
    if let Some(t) = rt() {
        t.with(|t| {
            if let Some(child) = thread_state::pt_lookup(pt as usize) {
                let site = sites::call_site(ra).0;
                t.emit(EventKind::ThreadDetach { child, site }, Key::Tick);
            }
        });
    }
    // SAFETY: the real function with the caller's argument.
    unsafe { real(pt) }
}

unsafe extern "C-unwind" fn exit(v: *mut c_void, _ra: usize) -> ! {
    let real = REAL_EXIT.get();
    if crate::state::recording() {
        thread_exit();
    }
    // SAFETY: the real pthread_exit; it unwinds through this frame, which holds nothing that
    // needs dropping.
    unsafe { real(v) }
}
