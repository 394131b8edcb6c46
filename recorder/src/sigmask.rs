//! Signal masks of the runtime's threads and of the threads it starts for the program.
//!
//! The runtime exports `pthread_sigmask` and `sigprocmask` (`signals.rs` records the
//! program's changes): its own calls go to the C library's through `REAL_PTHREAD_SIGMASK`, so
//! that nothing here is recorded as the program's.

use libc::c_int;

use crate::real::real;

real!(pub(crate) REAL_PTHREAD_SIGMASK: unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int = b"pthread_sigmask\0");

/// The C library's `pthread_sigmask`, or the system call when it cannot be resolved now (a
/// call from inside `dlsym`): an error number, as `pthread_sigmask` returns.
///
/// # Safety
/// `set` and `old` are null or valid, as for `pthread_sigmask`.
pub unsafe fn real_pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    if let Some(f) = REAL_PTHREAD_SIGMASK.try_get() {
        // SAFETY: the real function with the caller's (valid or null) pointers.
        return unsafe { f(how, set, old) };
    }
    // SAFETY: rt_sigprocmask with the kernel's set size and the same pointers.
    let r = unsafe { libc::syscall(libc::SYS_rt_sigprocmask, how, set, old, 8usize) };
    if r == 0 {
        0
    } else {
        // SAFETY: __errno_location is always valid.
        unsafe { *libc::__errno_location() }
    }
}

/// The empty signal set.
pub fn empty_set() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is the empty set.
    unsafe { std::mem::zeroed() }
}

/// Every signal.
pub fn full_set() -> libc::sigset_t {
    let mut set = empty_set();
    // SAFETY: sigfillset writes the set we own.
    unsafe { libc::sigfillset(&mut set) };
    set
}

/// Blocks every signal on the calling thread (the runtime's own threads: no process signal is
/// ever delivered to them).
pub fn block_all() {
    let _ = block_all_saving();
}

/// Blocks every signal on the calling thread and returns the mask it had (`None` if it could
/// not be changed). Signals the C library keeps for itself stay unblocked (glibc drops them
/// from the set).
pub fn block_all_saving() -> Option<libc::sigset_t> {
    let set = full_set();
    let mut old = empty_set();
    // SAFETY: a valid set and a valid out-pointer.
    (unsafe { real_pthread_sigmask(libc::SIG_SETMASK, &set, &mut old) } == 0).then_some(old)
}

/// Sets the calling thread's signal mask to `mask` (one `block_all_saving` returned, or the
/// mask a thread was to start with).
pub fn set_mask(mask: &libc::sigset_t) {
    // SAFETY: a valid set, no out-pointer.
    unsafe { real_pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}
