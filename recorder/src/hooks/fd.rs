//! Descriptors: `close`, `close_range`, `closefrom`, `dup2` and `dup3`, interposed so that the
//! trace's descriptor is invisible to the program (`output::keep_clear_of`). A call that does
//! not name the trace's descriptor goes straight to the real function; one that does finds
//! the number free, as it would without the runtime: the trace moves to another descriptor
//! first, or a range is closed around it. Nothing is recorded.

use libc::{c_int, c_uint};

use crate::output;
use crate::real::real;

real!(REAL_CLOSE: unsafe extern "C" fn(c_int) -> c_int = b"close\0");
real!(REAL_CLOSE_RANGE: unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int = b"close_range\0");
real!(REAL_CLOSEFROM: unsafe extern "C" fn(c_int) = b"closefrom\0");
real!(REAL_DUP2: unsafe extern "C" fn(c_int, c_int) -> c_int = b"dup2\0");
real!(REAL_DUP3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int = b"dup3\0");

/// `close_range`'s flag that marks the range close-on-exec instead of closing it.
const CLOSE_RANGE_CLOEXEC: c_int = 1 << 2;
/// `close_range`'s flag that unshares the descriptor table first.
const CLOSE_RANGE_UNSHARE: c_int = 1 << 1;

fn errno() -> c_int {
    // SAFETY: __errno_location is always valid.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

/// The program's call is about to close or replace `fd`: the trace leaves it first (errno
/// kept: the runtime's calls are not the program's).
#[inline]
fn clear(fd: c_int) {
    if fd >= 0 && output::trace_fd() == fd {
        let e = errno();
        output::keep_clear_of(fd);
        set_errno(e);
    }
}

/// The real `close` (the runtime's own descriptors; never through the hook).
pub fn real_close(fd: c_int) -> c_int {
    match REAL_CLOSE.try_get() {
        // SAFETY: the real close on a descriptor the caller owns.
        Some(f) => unsafe { f(fd) },
        // SAFETY: the system call itself, on a descriptor the caller owns.
        None => unsafe { libc::syscall(libc::SYS_close, fd) as c_int },
    }
}

/// The real `close_range`, or the system call where the C library has none.
fn real_close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    match REAL_CLOSE_RANGE.try_get() {
        // SAFETY: the real close_range with the caller's arguments.
        Some(f) => unsafe { f(first, last, flags) },
        // SAFETY: the system call with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) as c_int },
    }
}

/// Interposed `close`.
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    clear(fd);
    super::handoff::forget(fd);
    real_close(fd)
}

/// Interposed `close_range`: a range that holds the trace's descriptor is closed around it
/// (the descriptor keeps its number).
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & CLOSE_RANGE_CLOEXEC == 0 {
        super::handoff::forget_range(first, last);
    }
    let ours = output::trace_fd();
    // Marking the range close-on-exec leaves the trace's descriptor as it is (it is already).
    if ours < 0
        || first > last
        || flags & CLOSE_RANGE_CLOEXEC != 0
        || (ours as c_uint) < first
        || (ours as c_uint) > last
    {
        return real_close_range(first, last, flags);
    }
    let ours = ours as c_uint;
    if first == last {
        clear(ours as c_int);
        return real_close_range(first, last, flags);
    }
    let mut rest_flags = flags;
    if first < ours {
        let r = real_close_range(first, ours - 1, flags);
        if r != 0 {
            return r;
        }
        rest_flags &= !CLOSE_RANGE_UNSHARE;
    }
    if ours < last {
        return real_close_range(ours + 1, last, rest_flags);
    }
    0
}

/// Interposed `closefrom`: closes every descriptor from `low` up but the trace's.
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    super::handoff::forget_range(low.max(0) as c_uint, c_uint::MAX);
    let ours = output::trace_fd();
    let low = low.max(0);
    if ours < low {
        closefrom_real(low);
        return;
    }
    let e = errno();
    if low < ours && real_close_range(low as c_uint, ours as c_uint - 1, 0) != 0 {
        // No close_range in this kernel: one by one, as the C library's fallback does.
        for fd in low..ours {
            real_close(fd);
        }
    }
    set_errno(e);
    closefrom_real(ours + 1);
}

fn closefrom_real(low: c_int) {
    match REAL_CLOSEFROM.try_get() {
        // SAFETY: the real closefrom with the caller's argument.
        Some(f) => unsafe { f(low) },
        None => {
            real_close_range(low as c_uint, c_uint::MAX, 0);
        }
    }
}

/// Interposed `dup2`: neither descriptor may be the trace's (the program sees its number free).
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    clear(old);
    clear(new);
    let f = REAL_DUP2.get();
    // SAFETY: the real dup2 with the caller's arguments.
    let r = unsafe { f(old, new) };
    if r >= 0 {
        super::handoff::duplicate(old, new);
    }
    r
}

/// Interposed `dup3`, as `dup2`.
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    clear(old);
    clear(new);
    let f = REAL_DUP3.get();
    // SAFETY: the real dup3 with the caller's arguments.
    let r = unsafe { f(old, new, flags) };
    if r >= 0 {
        super::handoff::duplicate(old, new);
    }
    r
}
