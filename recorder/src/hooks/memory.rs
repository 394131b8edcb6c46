//! libc functions that read or write memory on the program's behalf (`memcpy`, `strlen`,
//! `fread`, `read`, …). The compilers leave such calls alone (clang even turns struct copies
//! into `memcpy` calls), so, as ThreadSanitizer's interceptors do, these hooks record the
//! ranges they touch: a read of the source, a write of the destination, at the caller's site.
//!
//! Only in a program that has instrumented code (`accesses::instrumented`): in any other
//! program each hook is one flag test on the way to the real function. Calls from the runtime
//! itself (Rust's own `memcpy`s, which bind to these exported symbols like the program's do)
//! are told apart by their return address, inside this library, and are never recorded; the
//! session guard (`ThreadState::record_access`) keeps out the rest (libraries the runtime
//! calls, signal handlers). Before the real function is resolved (a call from inside `dlsym`)
//! the pure ones have a plain byte-by-byte fallback, made of volatile accesses so that the
//! compiler cannot turn it back into a call to the function being defined.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{size_t, ssize_t, FILE};

use foresight_trace::event::BlockingCall;

use super::{blocking, handoff};

use crate::real::real;
use crate::{accesses, modules, thread_state};

static OWN_LO: AtomicUsize = AtomicUsize::new(0);
static OWN_HI: AtomicUsize = AtomicUsize::new(0);

/// Start-up: learn where the runtime's own code is.
pub fn init() {
    let (lo, hi) = modules::own_extent();
    OWN_LO.store(lo, Ordering::Relaxed);
    OWN_HI.store(hi, Ordering::Relaxed);
}

#[inline(always)]
pub(super) fn wanted() -> bool {
    accesses::instrumented()
}

/// Records `len` bytes at `addr` read (or written) by the call whose return address is `ra`.
#[inline]
pub(super) fn range(addr: *const c_void, len: usize, write: bool, ra: usize) {
    if len == 0 || (ra >= OWN_LO.load(Ordering::Relaxed) && ra < OWN_HI.load(Ordering::Relaxed)) {
        return;
    }
    if let Some(t) = thread_state::current() {
        t.record_access(addr as usize, len << 1 | write as usize, ra);
    }
}

/// The length of a C string, without calling `strlen`.
///
/// # Safety
/// `s` is a NUL-terminated string.
pub(super) unsafe fn c_len(s: *const c_char) -> usize {
    let mut n = 0;
    // SAFETY: the caller's contract: every byte up to the NUL is readable.
    while unsafe { std::ptr::read_volatile(s.add(n)) } != 0 {
        n += 1;
    }
    n
}

// --- fallbacks while the real functions are being resolved -----------------------------------

/// # Safety
/// As `memmove`.
unsafe fn move_bytes(d: *mut c_void, s: *const c_void, n: size_t) -> *mut c_void {
    let (dp, sp) = (d as *mut u8, s as *const u8);
    // SAFETY: the caller's contract; copying backwards when the destination is above the source
    // keeps overlapping ranges right.
    unsafe {
        if (dp as usize) <= (sp as usize) {
            for i in 0..n {
                std::ptr::write_volatile(dp.add(i), std::ptr::read_volatile(sp.add(i)));
            }
        } else {
            for i in (0..n).rev() {
                std::ptr::write_volatile(dp.add(i), std::ptr::read_volatile(sp.add(i)));
            }
        }
    }
    d
}

/// # Safety
/// As `memset`.
unsafe fn set_bytes(d: *mut c_void, c: c_int, n: size_t) -> *mut c_void {
    for i in 0..n {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::write_volatile((d as *mut u8).add(i), c as u8) };
    }
    d
}

/// # Safety
/// As `memcmp`.
unsafe fn compare_bytes(a: *const c_void, b: *const c_void, n: size_t) -> c_int {
    for i in 0..n {
        // SAFETY: the caller's contract.
        let (x, y) = unsafe {
            (
                std::ptr::read_volatile((a as *const u8).add(i)),
                std::ptr::read_volatile((b as *const u8).add(i)),
            )
        };
        if x != y {
            return x as c_int - y as c_int;
        }
    }
    0
}

// --- memory ----------------------------------------------------------------------------------

type Copy = unsafe extern "C" fn(*mut c_void, *const c_void, size_t) -> *mut c_void;
type CopyChk = unsafe extern "C" fn(*mut c_void, *const c_void, size_t, size_t) -> *mut c_void;

real!(REAL_MEMCPY: Copy = b"memcpy\0");
real!(REAL_MEMMOVE: Copy = b"memmove\0");
real!(REAL_MEMSET: unsafe extern "C" fn(*mut c_void, c_int, size_t) -> *mut c_void = b"memset\0");
real!(REAL_MEMCMP: unsafe extern "C" fn(*const c_void, *const c_void, size_t) -> c_int = b"memcmp\0");
real!(REAL_BCMP: unsafe extern "C" fn(*const c_void, *const c_void, size_t) -> c_int = b"bcmp\0");
real!(REAL_MEMCHR: unsafe extern "C" fn(*const c_void, c_int, size_t) -> *mut c_void = b"memchr\0");
real!(REAL_MEMCPY_CHK: CopyChk = b"__memcpy_chk\0");
real!(REAL_MEMMOVE_CHK: CopyChk = b"__memmove_chk\0");
real!(REAL_MEMSET_CHK: unsafe extern "C" fn(*mut c_void, c_int, size_t, size_t) -> *mut c_void = b"__memset_chk\0");

entry!(memcpy, 3, memcpy_hook);
entry!(memmove, 3, memmove_hook);
entry!(memset, 3, memset_hook);
entry!(memcmp, 3, memcmp_hook);
entry!(bcmp, 3, bcmp_hook);
entry!(memchr, 3, memchr_hook);
entry!(__memcpy_chk, 4, memcpy_chk_hook);
entry!(__memmove_chk, 4, memmove_chk_hook);
entry!(__memset_chk, 4, memset_chk_hook);

unsafe extern "C" fn memcpy_hook(
    d: *mut c_void,
    s: *const c_void,
    n: size_t,
    ra: usize,
) -> *mut c_void {
    let Some(real) = REAL_MEMCPY.try_get() else {
        // SAFETY: memcpy's contract (non-overlapping ranges are a special case of memmove's).
        return unsafe { move_bytes(d, s, n) };
    };
    if wanted() {
        range(s, n, false, ra);
        range(d, n, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { real(d, s, n) }
}

unsafe extern "C" fn memmove_hook(
    d: *mut c_void,
    s: *const c_void,
    n: size_t,
    ra: usize,
) -> *mut c_void {
    let Some(real) = REAL_MEMMOVE.try_get() else {
        // SAFETY: memmove's contract.
        return unsafe { move_bytes(d, s, n) };
    };
    if wanted() {
        range(s, n, false, ra);
        range(d, n, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { real(d, s, n) }
}

unsafe extern "C" fn memset_hook(d: *mut c_void, c: c_int, n: size_t, ra: usize) -> *mut c_void {
    let Some(real) = REAL_MEMSET.try_get() else {
        // SAFETY: memset's contract.
        return unsafe { set_bytes(d, c, n) };
    };
    if wanted() {
        range(d, n, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { real(d, c, n) }
}

unsafe extern "C" fn memcmp_hook(
    a: *const c_void,
    b: *const c_void,
    n: size_t,
    ra: usize,
) -> c_int {
    let Some(real) = REAL_MEMCMP.try_get() else {
        // SAFETY: memcmp's contract.
        return unsafe { compare_bytes(a, b, n) };
    };
    if wanted() {
        range(a, n, false, ra);
        range(b, n, false, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { real(a, b, n) }
}

unsafe extern "C" fn bcmp_hook(a: *const c_void, b: *const c_void, n: size_t, ra: usize) -> c_int {
    let Some(real) = REAL_BCMP.try_get() else {
        // SAFETY: bcmp's contract (memcmp's result is a valid bcmp result).
        return unsafe { compare_bytes(a, b, n) };
    };
    if wanted() {
        range(a, n, false, ra);
        range(b, n, false, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { real(a, b, n) }
}

unsafe extern "C" fn memchr_hook(s: *const c_void, c: c_int, n: size_t, ra: usize) -> *mut c_void {
    let real = REAL_MEMCHR.get();
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { real(s, c, n) };
    if wanted() {
        let len = if r.is_null() {
            n
        } else {
            r as usize - s as usize + 1
        };
        range(s, len, false, ra);
    }
    r
}

unsafe extern "C" fn memcpy_chk_hook(
    d: *mut c_void,
    s: *const c_void,
    n: size_t,
    dlen: size_t,
    ra: usize,
) -> *mut c_void {
    if wanted() {
        range(s, n, false, ra);
        range(d, n, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_MEMCPY_CHK.get()(d, s, n, dlen) }
}

unsafe extern "C" fn memmove_chk_hook(
    d: *mut c_void,
    s: *const c_void,
    n: size_t,
    dlen: size_t,
    ra: usize,
) -> *mut c_void {
    if wanted() {
        range(s, n, false, ra);
        range(d, n, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_MEMMOVE_CHK.get()(d, s, n, dlen) }
}

unsafe extern "C" fn memset_chk_hook(
    d: *mut c_void,
    c: c_int,
    n: size_t,
    dlen: size_t,
    ra: usize,
) -> *mut c_void {
    if wanted() {
        range(d, n, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_MEMSET_CHK.get()(d, c, n, dlen) }
}

// --- strings ---------------------------------------------------------------------------------

type Str = *const c_char;
type StrMut = *mut c_char;

real!(REAL_STRLEN: unsafe extern "C" fn(Str) -> size_t = b"strlen\0");
real!(REAL_STRNLEN: unsafe extern "C" fn(Str, size_t) -> size_t = b"strnlen\0");
real!(REAL_STRCPY: unsafe extern "C" fn(StrMut, Str) -> StrMut = b"strcpy\0");
real!(REAL_STPCPY: unsafe extern "C" fn(StrMut, Str) -> StrMut = b"stpcpy\0");
real!(REAL_STRNCPY: unsafe extern "C" fn(StrMut, Str, size_t) -> StrMut = b"strncpy\0");
real!(REAL_STRCAT: unsafe extern "C" fn(StrMut, Str) -> StrMut = b"strcat\0");
real!(REAL_STRNCAT: unsafe extern "C" fn(StrMut, Str, size_t) -> StrMut = b"strncat\0");
real!(REAL_STRCMP: unsafe extern "C" fn(Str, Str) -> c_int = b"strcmp\0");
real!(REAL_STRNCMP: unsafe extern "C" fn(Str, Str, size_t) -> c_int = b"strncmp\0");
real!(REAL_STRCHR: unsafe extern "C" fn(Str, c_int) -> StrMut = b"strchr\0");
real!(REAL_STRRCHR: unsafe extern "C" fn(Str, c_int) -> StrMut = b"strrchr\0");
real!(REAL_STRSTR: unsafe extern "C" fn(Str, Str) -> StrMut = b"strstr\0");

entry!(strlen, 1, strlen_hook);
entry!(strnlen, 2, strnlen_hook);
entry!(strcpy, 2, strcpy_hook);
entry!(stpcpy, 2, stpcpy_hook);
entry!(strncpy, 3, strncpy_hook);
entry!(strcat, 2, strcat_hook);
entry!(strncat, 3, strncat_hook);
entry!(strcmp, 2, strcmp_hook);
entry!(strncmp, 3, strncmp_hook);
entry!(strchr, 2, strchr_hook);
entry!(strrchr, 2, strrchr_hook);
entry!(strstr, 2, strstr_hook);

unsafe extern "C" fn strlen_hook(s: Str, ra: usize) -> size_t {
    let Some(real) = REAL_STRLEN.try_get() else {
        // SAFETY: strlen's contract.
        return unsafe { c_len(s) };
    };
    // SAFETY: the real function with the caller's argument.
    let n = unsafe { real(s) };
    if wanted() {
        range(s.cast(), n + 1, false, ra);
    }
    n
}

unsafe extern "C" fn strnlen_hook(s: Str, max: size_t, ra: usize) -> size_t {
    // SAFETY: the real function with the caller's arguments.
    let n = unsafe { REAL_STRNLEN.get()(s, max) };
    if wanted() {
        range(s.cast(), (n + 1).min(max), false, ra);
    }
    n
}

unsafe extern "C" fn strcpy_hook(d: StrMut, s: Str, ra: usize) -> StrMut {
    if wanted() {
        // SAFETY: strcpy's contract: `s` is a string.
        let n = unsafe { c_len(s) } + 1;
        range(s.cast(), n, false, ra);
        range(d.cast(), n, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_STRCPY.get()(d, s) }
}

unsafe extern "C" fn stpcpy_hook(d: StrMut, s: Str, ra: usize) -> StrMut {
    if wanted() {
        // SAFETY: stpcpy's contract: `s` is a string.
        let n = unsafe { c_len(s) } + 1;
        range(s.cast(), n, false, ra);
        range(d.cast(), n, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_STPCPY.get()(d, s) }
}

unsafe extern "C" fn strncpy_hook(d: StrMut, s: Str, n: size_t, ra: usize) -> StrMut {
    if wanted() {
        // SAFETY: strncpy reads at most n bytes of `s`, up to its NUL.
        let read = unsafe { REAL_STRNLEN.get()(s, n) };
        range(s.cast(), (read + 1).min(n), false, ra);
        range(d.cast(), n, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_STRNCPY.get()(d, s, n) }
}

unsafe extern "C" fn strcat_hook(d: StrMut, s: Str, ra: usize) -> StrMut {
    if wanted() {
        // SAFETY: strcat's contract: both are strings.
        let (dl, sl) = unsafe { (c_len(d), c_len(s)) };
        range(d.cast(), dl + 1, false, ra);
        range(s.cast(), sl + 1, false, ra);
        // SAFETY: within the destination, which strcat's contract says has room.
        range(unsafe { d.add(dl) }.cast(), sl + 1, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_STRCAT.get()(d, s) }
}

unsafe extern "C" fn strncat_hook(d: StrMut, s: Str, n: size_t, ra: usize) -> StrMut {
    if wanted() {
        // SAFETY: strncat's contract: `d` is a string, `s` has a NUL or n readable bytes.
        let (dl, sl) = unsafe { (c_len(d), REAL_STRNLEN.get()(s, n)) };
        range(d.cast(), dl + 1, false, ra);
        range(s.cast(), (sl + 1).min(n), false, ra);
        // SAFETY: within the destination, which strncat's contract says has room.
        range(unsafe { d.add(dl) }.cast(), sl + 1, true, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_STRNCAT.get()(d, s, n) }
}

/// Bytes two strings' comparison reads: up to the first difference or NUL, that byte included.
///
/// # Safety
/// Both are strings or have `max` readable bytes.
unsafe fn compared(a: Str, b: Str, max: usize) -> usize {
    let mut i = 0;
    while i < max {
        // SAFETY: the caller's contract.
        let (x, y) = unsafe {
            (
                std::ptr::read_volatile(a.add(i)),
                std::ptr::read_volatile(b.add(i)),
            )
        };
        i += 1;
        if x != y || x == 0 {
            break;
        }
    }
    i
}

unsafe extern "C" fn strcmp_hook(a: Str, b: Str, ra: usize) -> c_int {
    let Some(real) = REAL_STRCMP.try_get() else {
        // SAFETY: strcmp's contract.
        let n = unsafe { compared(a, b, usize::MAX) };
        // SAFETY: as above; both have n readable bytes.
        return unsafe { compare_bytes(a.cast(), b.cast(), n) };
    };
    if wanted() {
        // SAFETY: strcmp's contract.
        let n = unsafe { compared(a, b, usize::MAX) };
        range(a.cast(), n, false, ra);
        range(b.cast(), n, false, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { real(a, b) }
}

unsafe extern "C" fn strncmp_hook(a: Str, b: Str, max: size_t, ra: usize) -> c_int {
    if wanted() {
        // SAFETY: strncmp's contract.
        let n = unsafe { compared(a, b, max) };
        range(a.cast(), n, false, ra);
        range(b.cast(), n, false, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_STRNCMP.get()(a, b, max) }
}

unsafe extern "C" fn strchr_hook(s: Str, c: c_int, ra: usize) -> StrMut {
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { REAL_STRCHR.get()(s, c) };
    if wanted() {
        let n = if r.is_null() {
            // SAFETY: strchr's contract: `s` is a string.
            (unsafe { c_len(s) }) + 1
        } else {
            r as usize - s as usize + 1
        };
        range(s.cast(), n, false, ra);
    }
    r
}

unsafe extern "C" fn strrchr_hook(s: Str, c: c_int, ra: usize) -> StrMut {
    if wanted() {
        // SAFETY: strrchr's contract: `s` is a string, read to its end.
        let n = unsafe { c_len(s) } + 1;
        range(s.cast(), n, false, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_STRRCHR.get()(s, c) }
}

unsafe extern "C" fn strstr_hook(h: Str, n: Str, ra: usize) -> StrMut {
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { REAL_STRSTR.get()(h, n) };
    if wanted() {
        // SAFETY: strstr's contract: both are strings.
        let (hl, nl) = unsafe { (c_len(h), c_len(n)) };
        let read = if r.is_null() {
            hl + 1
        } else {
            r as usize - h as usize + nl
        };
        range(h.cast(), read, false, ra);
        range(n.cast(), nl + 1, false, ra);
    }
    r
}

// --- files -----------------------------------------------------------------------------------

real!(REAL_FREAD: unsafe extern "C-unwind" fn(*mut c_void, size_t, size_t, *mut FILE) -> size_t = b"fread\0");
real!(REAL_FWRITE: unsafe extern "C-unwind" fn(*const c_void, size_t, size_t, *mut FILE) -> size_t = b"fwrite\0");
real!(REAL_FGETS: unsafe extern "C-unwind" fn(StrMut, c_int, *mut FILE) -> StrMut = b"fgets\0");
real!(REAL_FPUTS: unsafe extern "C-unwind" fn(Str, *mut FILE) -> c_int = b"fputs\0");
real!(REAL_PUTS: unsafe extern "C-unwind" fn(Str) -> c_int = b"puts\0");
real!(REAL_READ: unsafe extern "C-unwind" fn(c_int, *mut c_void, size_t) -> ssize_t = b"read\0");
real!(REAL_WRITE: unsafe extern "C-unwind" fn(c_int, *const c_void, size_t) -> ssize_t = b"write\0");
real!(REAL_PREAD: unsafe extern "C-unwind" fn(c_int, *mut c_void, size_t, libc::off_t) -> ssize_t = b"pread\0");
real!(REAL_PWRITE: unsafe extern "C-unwind" fn(c_int, *const c_void, size_t, libc::off_t) -> ssize_t = b"pwrite\0");

entry!(fread, 4, fread_hook);
entry!(fwrite, 4, fwrite_hook);
entry!(fgets, 3, fgets_hook);
entry!(fputs, 2, fputs_hook);
entry!(puts, 1, puts_hook);
entry!(read, 3, read_hook);
entry!(write, 3, write_hook);
entry!(pread, 4, pread_hook);
entry!(pwrite, 4, pwrite_hook);
// Large-file aliases of the same functions on 64-bit glibc.
entry!(pread64, 4, pread_hook);
entry!(pwrite64, 4, pwrite_hook);

unsafe extern "C-unwind" fn fread_hook(
    p: *mut c_void,
    size: size_t,
    n: size_t,
    f: *mut FILE,
    ra: usize,
) -> size_t {
    // SAFETY: the real function with the caller's arguments.
    let got = unsafe { REAL_FREAD.get()(p, size, n, f) };
    if wanted() {
        range(p, got.saturating_mul(size), true, ra);
    }
    got
}

unsafe extern "C-unwind" fn fwrite_hook(
    p: *const c_void,
    size: size_t,
    n: size_t,
    f: *mut FILE,
    ra: usize,
) -> size_t {
    if wanted() {
        range(p, size.saturating_mul(n), false, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_FWRITE.get()(p, size, n, f) }
}

unsafe extern "C-unwind" fn fgets_hook(s: StrMut, n: c_int, f: *mut FILE, ra: usize) -> StrMut {
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { REAL_FGETS.get()(s, n, f) };
    if wanted() && !r.is_null() {
        // SAFETY: fgets stored a string into `s`.
        let len = unsafe { c_len(s) } + 1;
        range(s.cast(), len, true, ra);
    }
    r
}

unsafe extern "C-unwind" fn fputs_hook(s: Str, f: *mut FILE, ra: usize) -> c_int {
    if wanted() {
        // SAFETY: fputs's contract: `s` is a string.
        let len = unsafe { c_len(s) } + 1;
        range(s.cast(), len, false, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_FPUTS.get()(s, f) }
}

unsafe extern "C-unwind" fn puts_hook(s: Str, ra: usize) -> c_int {
    if wanted() {
        // SAFETY: puts's contract: `s` is a string.
        let len = unsafe { c_len(s) } + 1;
        range(s.cast(), len, false, ra);
    }
    // SAFETY: the real function with the caller's argument.
    unsafe { REAL_PUTS.get()(s) }
}

/// `errno` as the real call left it: recording must not change it.
#[inline]
fn keeping_errno<R>(r: R, record: impl FnOnce()) -> R {
    thread_state::keep_errno(record);
    r
}

unsafe extern "C-unwind" fn read_hook(fd: c_int, p: *mut c_void, n: size_t, ra: usize) -> ssize_t {
    let handoff = handoff::before(fd, false, ra);
    let any_kind = handoff.is_some(); // an eventfd is neither a pipe nor a socket
    let begun = blocking::begin(BlockingCall::Read, ra, || blocking::fd_blocks(fd, any_kind));
    // SAFETY: the real function with the caller's arguments.
    let got = unsafe { REAL_READ.get()(fd, p, n) };
    if let Some(h) = handoff {
        handoff::after(h, got, p, ra);
    }
    if let Some(b) = begun {
        blocking::end(b);
    }
    if wanted() && got > 0 {
        return keeping_errno(got, || range(p, got as usize, true, ra));
    }
    got
}

unsafe extern "C-unwind" fn write_hook(
    fd: c_int,
    p: *const c_void,
    n: size_t,
    ra: usize,
) -> ssize_t {
    if wanted() {
        range(p, n, false, ra);
    }
    let handoff = handoff::before(fd, true, ra);
    let any_kind = handoff.is_some();
    let begun = blocking::begin(BlockingCall::Write, ra, || {
        blocking::fd_blocks(fd, any_kind)
    });
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { REAL_WRITE.get()(fd, p, n) };
    if let Some(h) = handoff {
        handoff::after(h, r, p, ra);
    }
    if let Some(b) = begun {
        blocking::end(b);
    }
    r
}

unsafe extern "C-unwind" fn pread_hook(
    fd: c_int,
    p: *mut c_void,
    n: size_t,
    off: libc::off_t,
    ra: usize,
) -> ssize_t {
    // SAFETY: the real function with the caller's arguments.
    let got = unsafe { REAL_PREAD.get()(fd, p, n, off) };
    if wanted() && got > 0 {
        return keeping_errno(got, || range(p, got as usize, true, ra));
    }
    got
}

unsafe extern "C-unwind" fn pwrite_hook(
    fd: c_int,
    p: *const c_void,
    n: size_t,
    off: libc::off_t,
    ra: usize,
) -> ssize_t {
    if wanted() {
        range(p, n, false, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { REAL_PWRITE.get()(fd, p, n, off) }
}

// --- lines -----------------------------------------------------------------------------------

real!(REAL_GETLINE: unsafe extern "C-unwind" fn(*mut StrMut, *mut size_t, *mut FILE) -> ssize_t = b"getline\0");
real!(REAL_GETDELIM: unsafe extern "C-unwind" fn(*mut StrMut, *mut size_t, c_int, *mut FILE) -> ssize_t = b"getdelim\0");

entry!(getline, 3, getline_hook);
entry!(getdelim, 4, getdelim_hook);
// glibc's own name for getdelim, which some programs call.
entry!(__getdelim, 4, getdelim_hook);

/// What `getline`/`getdelim` did to the caller's memory: it read the buffer pointer and its
/// size, and when it returned a line, may have stored both (a larger buffer) and stored the
/// line and its NUL.
///
/// # Safety
/// `line` and `n` are the call's arguments, and the call returned `got`.
unsafe fn got_line(line: *mut StrMut, n: *mut size_t, got: ssize_t, ra: usize) {
    let stored = got > 0;
    range(line.cast(), size_of::<StrMut>(), stored, ra);
    range(n.cast(), size_of::<size_t>(), stored, ra);
    if stored {
        // SAFETY: the call succeeded: `*line` is its buffer, holding `got` bytes and a NUL.
        range(unsafe { *line }.cast(), got as usize + 1, true, ra);
    }
}

unsafe extern "C-unwind" fn getline_hook(
    line: *mut StrMut,
    n: *mut size_t,
    f: *mut FILE,
    ra: usize,
) -> ssize_t {
    // SAFETY: the real function with the caller's arguments.
    let got = unsafe { REAL_GETLINE.get()(line, n, f) };
    if wanted() {
        // SAFETY: the call's arguments and result.
        return keeping_errno(got, || unsafe { got_line(line, n, got, ra) });
    }
    got
}

unsafe extern "C-unwind" fn getdelim_hook(
    line: *mut StrMut,
    n: *mut size_t,
    delim: c_int,
    f: *mut FILE,
    ra: usize,
) -> ssize_t {
    // SAFETY: the real function with the caller's arguments.
    let got = unsafe { REAL_GETDELIM.get()(line, n, delim, f) };
    if wanted() {
        // SAFETY: the call's arguments and result.
        return keeping_errno(got, || unsafe { got_line(line, n, got, ra) });
    }
    got
}

// --- sockets and vectors (the blocking hooks call these after the real call) -----------------

/// `recv`'s buffer of `room` bytes: the `got` bytes the call stored (`MSG_TRUNC` returns a
/// datagram's whole length, more than it stored).
pub(super) fn received(buf: *mut c_void, room: size_t, got: ssize_t, ra: usize) {
    if wanted() && got > 0 {
        thread_state::keep_errno(|| range(buf, (got as usize).min(room), true, ra));
    }
}

/// `readv`'s (or `recvmsg`'s) vector: the array read, then the `got` bytes stored across its
/// buffers in order.
///
/// # Safety
/// `iov` has `count` entries (the call read them).
pub(super) unsafe fn scattered(iov: *const libc::iovec, count: usize, got: ssize_t, ra: usize) {
    if !wanted() || iov.is_null() {
        return;
    }
    thread_state::keep_errno(|| {
        range(iov.cast(), count * size_of::<libc::iovec>(), false, ra);
        let mut left = got.max(0) as usize;
        for i in 0..count {
            if left == 0 {
                break;
            }
            // SAFETY: the caller's contract: `i < count`.
            let v = unsafe { iov.add(i).read() };
            let n = v.iov_len.min(left);
            range(v.iov_base, n, true, ra);
            left -= n;
        }
    });
}

/// `recvmsg`'s message: its header read, the data across its vector, the sender's address
/// and the control data as long as the call said, and the lengths and flags it stored there.
///
/// # Safety
/// `msg` is the call's message header.
pub(super) unsafe fn received_message(msg: *mut libc::msghdr, got: ssize_t, ra: usize) {
    if !wanted() || msg.is_null() || got < 0 {
        return;
    }
    // SAFETY: the caller's contract.
    let m = unsafe { msg.read() };
    // SAFETY: the header names the vector the call filled.
    unsafe { scattered(m.msg_iov, m.msg_iovlen, got, ra) };
    thread_state::keep_errno(|| {
        range(msg.cast(), size_of::<libc::msghdr>(), false, ra);
        // SAFETY: the addresses of three fields of the caller's header (nothing is read).
        let (namelen, controllen, flags) = unsafe {
            (
                &raw mut (*msg).msg_namelen,
                &raw mut (*msg).msg_controllen,
                &raw mut (*msg).msg_flags,
            )
        };
        range(namelen.cast(), size_of::<libc::socklen_t>(), true, ra);
        range(controllen.cast(), size_of::<size_t>(), true, ra);
        range(flags.cast(), size_of::<c_int>(), true, ra);
        if !m.msg_name.is_null() {
            // The length stored is the sender's, which a short buffer truncated.
            let stored = (m.msg_namelen as usize).min(size_of::<libc::sockaddr_storage>());
            range(m.msg_name, stored, true, ra);
        }
        if !m.msg_control.is_null() {
            range(m.msg_control, m.msg_controllen, true, ra);
        }
    });
}

/// `recvfrom`'s (or `accept`'s) sender address: the length read and stored, and as much of
/// the address as it says (at most the room the caller gave).
///
/// # Safety
/// `len` is the call's length argument, `room` its value before the call.
pub(super) unsafe fn received_address(
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    room: libc::socklen_t,
    ra: usize,
) {
    if !wanted() || addr.is_null() || len.is_null() {
        return;
    }
    thread_state::keep_errno(|| {
        range(len.cast(), size_of::<libc::socklen_t>(), true, ra);
        // SAFETY: the caller's contract.
        let stored = unsafe { len.read() }.min(room);
        range(addr.cast(), stored as usize, true, ra);
    });
}
