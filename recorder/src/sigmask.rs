//! Signal masks of the runtime's threads and of the threads it starts for the program.

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
    // SAFETY: pthread_sigmask with a valid set and a valid out-pointer.
    (unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &set, &mut old) } == 0).then_some(old)
}

/// Sets the calling thread's signal mask to `mask` (one `block_all_saving` returned, or the
/// mask a thread was to start with).
pub fn set_mask(mask: &libc::sigset_t) {
    // SAFETY: pthread_sigmask with a valid set.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}
