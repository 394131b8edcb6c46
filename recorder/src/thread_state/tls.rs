//! The thread-local pointer to the calling thread's `ThreadState`, and the `Current` handle
//! hooks hold.

use super::ThreadState;

/// The thread-local pointer: null (not seen yet), `DEAD` (exited or being set up: record
/// nothing), or a live `ThreadState`.
const DEAD: *mut ThreadState = std::ptr::dangling_mut::<ThreadState>();

/// The thread-local pointer itself. On x86-64 it is an initial-exec TLS variable: the runtime
/// is loaded at start-up (`LD_PRELOAD`), so its TLS is in the static block and a read is one
/// `fs:`-relative load, where Rust's `thread_local!` in a shared object goes through
/// `__tls_get_addr` (general dynamic: a call on every hook). Elsewhere, `thread_local!`.
#[cfg(target_arch = "x86_64")]
mod current_slot {
    use super::ThreadState;

    // An 8-byte zero-initialised TLS object. Global but hidden: the inline asm below may be
    // inlined into any codegen unit of this crate, and must link to it from there, while it
    // stays invisible outside the library.
    core::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".p2align 3",
        ".globl foresight_rt_current",
        ".hidden foresight_rt_current",
        ".type foresight_rt_current,@object",
        ".size foresight_rt_current,8",
        "foresight_rt_current:",
        ".zero 8",
        ".popsection",
    );

    #[inline(always)]
    pub fn get() -> *mut ThreadState {
        let p: *mut ThreadState;
        // SAFETY: reads this thread's copy of the 8-byte TLS object above (initial-exec: the
        // offset from the thread pointer comes from the GOT); no other memory is touched.
        unsafe {
            core::arch::asm!(
                "mov {p}, qword ptr [rip + foresight_rt_current@GOTTPOFF]",
                "mov {p}, qword ptr fs:[{p}]",
                p = out(reg) p,
                options(nostack, preserves_flags, readonly, pure),
            );
        }
        p
    }

    #[inline]
    pub fn set(v: *mut ThreadState) {
        // SAFETY: writes this thread's copy of the TLS object above.
        unsafe {
            core::arch::asm!(
                "mov {o}, qword ptr [rip + foresight_rt_current@GOTTPOFF]",
                "mov qword ptr fs:[{o}], {v}",
                o = out(reg) _,
                v = in(reg) v,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod current_slot {
    use super::ThreadState;
    use std::cell::Cell;

    thread_local! {
        static CURRENT: Cell<*mut ThreadState> = const { Cell::new(std::ptr::null_mut()) };
    }

    #[inline(always)]
    pub fn get() -> *mut ThreadState {
        CURRENT.with(|c| c.get())
    }

    #[inline]
    pub fn set(v: *mut ThreadState) {
        CURRENT.with(|c| c.set(v));
    }
}

/// The calling thread's own state, as `current` hands it out: valid on this thread until the
/// thread's exit is recorded (`take_current`), which frees it.
///
/// Not `'static` and not `Send`: a handle stays on the thread that made it, and a reference
/// to the state lives no longer than one borrow of the handle. A thread's exit is recorded
/// only where the thread then ends (the start trampoline's return, `pthread_exit`, a key
/// destructor, a fork child's leftover threads never run): frames below that hold a handle are
/// unwound or left without using it again.
#[derive(Clone, Copy)]
pub struct Current {
    state: std::ptr::NonNull<ThreadState>,
    _this_thread: std::marker::PhantomData<*mut ()>,
}

impl std::ops::Deref for Current {
    type Target = ThreadState;

    #[inline(always)]
    fn deref(&self) -> &ThreadState {
        // SAFETY: made by `current` from this thread's live pointer (the handle cannot leave
        // the thread); the state is freed only by `take_current` on this thread, after which
        // no handle is used (see the type's comment).
        unsafe { self.state.as_ref() }
    }
}

/// The calling thread's state, if it is being recorded.
#[inline]
pub fn current() -> Option<Current> {
    let p = current_slot::get();
    // Null and `DEAD` in one comparison: `DEAD` is a small address (the type's alignment),
    // and no live state lies at or below it.
    if p as usize <= DEAD as usize {
        return None;
    }
    // A live pointer is never null (it is above DEAD).
    std::ptr::NonNull::new(p).map(|state| Current {
        state,
        _this_thread: std::marker::PhantomData,
    })
}

/// The calling thread's state as the pointer `Box::into_raw` gave (null if it has none), for
/// the fork child handler.
pub fn current_ptr() -> *mut ThreadState {
    let p = current_slot::get();
    if p as usize <= DEAD as usize {
        std::ptr::null_mut()
    } else {
        p
    }
}

/// The calling thread's state as the owning pointer `Box::into_raw` gave, and the thread marked
/// exited: from now on `current` is `None` on this thread and no hook records for it. The
/// caller records the exit and frees the state.
pub fn take_current() -> Option<*mut ThreadState> {
    let p = current_slot::get();
    if p as usize <= DEAD as usize {
        return None;
    }
    mark_dead();
    Some(p)
}

/// Whether the calling thread has no state yet (neither live nor dead).
pub fn unseen() -> bool {
    current_slot::get().is_null()
}

pub fn set_current(p: *mut ThreadState) {
    current_slot::set(p);
}

pub fn mark_dead() {
    current_slot::set(DEAD);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_is_none_for_an_unseen_or_dead_thread() {
        set_current(std::ptr::null_mut());
        assert!(current().is_none(), "unseen");
        assert!(unseen());
        mark_dead();
        assert!(current().is_none(), "exited or being set up");
        assert!(!unseen());
        let t = Box::into_raw(ThreadState::new(None, 0));
        set_current(t);
        assert!(current().is_some_and(|c| std::ptr::eq(&*c, t)));
        set_current(std::ptr::null_mut());
        // SAFETY: allocated above by Box::into_raw and no longer reachable.
        drop(unsafe { Box::from_raw(t) });
    }
}
