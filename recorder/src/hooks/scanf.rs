//! The `scanf` family (`scanf`, `fscanf`, `sscanf`, their `v` forms and glibc's `__isoc99_` and
//! `__isoc23_` names for them): what the conversions stored through their pointer arguments
//! is recorded as writes at the caller's site, and `sscanf`'s input string as a read, as
//! ThreadSanitizer's interceptors do.
//!
//! The ranges come from the format, walked after the real call: the call's result says how
//! many conversions assigned, and `%s`/`%[` store a string whose length is read back. Only
//! what the call certainly stored is recorded (a `%n` after a failed match is not); a
//! positional argument (`%1$d`) ends the walk, since it is rare and its argument order would
//! have to be rebuilt.
//!
//! The variadic forms have no stable Rust definition: a naked entry (x86-64 only, as for
//! `execl`) saves the argument registers in a `va_list` of its own, as a C variadic function's
//! prologue does, and calls the implementation with it; the implementation passes it on to the
//! real `v` function after copying it (`va_copy` is a plain copy on x86-64), and reads the
//! pointer arguments from the copy. Floating-point registers are not saved: every argument a
//! `scanf` conversion takes is a pointer.

use std::ffi::{c_char, c_int, c_void};

use libc::FILE;

use super::memory::{c_len, range, wanted};
use crate::real::real;
use crate::thread_state;

/// What a conversion stores through its pointer argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Store {
    /// A fixed number of bytes (a number, `%c`'s characters, an `m` conversion's pointer).
    Bytes(usize),
    /// A NUL-terminated string (`%s`, `%[`).
    String,
    /// A wide string (`%ls`, `%l[`, `%S`).
    WideString,
}

const WCHAR: usize = std::mem::size_of::<libc::wchar_t>();
const POINTER: usize = std::mem::size_of::<*const c_void>();

/// The size a length modifier gives an integer conversion (`%d`, `%n`, …).
fn integer_size(modifier: &[u8]) -> usize {
    match modifier {
        b"hh" => 1,
        b"h" => 2,
        b"" => std::mem::size_of::<c_int>(),
        b"l" => std::mem::size_of::<libc::c_long>(),
        // glibc takes `L` with an integer conversion as `ll`.
        b"ll" | b"q" | b"L" => 8,
        b"j" => std::mem::size_of::<libc::intmax_t>(),
        b"z" => std::mem::size_of::<libc::size_t>(),
        b"t" => std::mem::size_of::<libc::ptrdiff_t>(),
        _ => std::mem::size_of::<c_int>(),
    }
}

/// The size a length modifier gives a floating-point conversion.
fn float_size(modifier: &[u8]) -> usize {
    match modifier {
        b"l" => 8,
        // long double: 80 bits stored in 16 bytes on x86-64, 128 bits on AArch64.
        b"L" | b"ll" | b"q" => 16,
        _ => 4,
    }
}

/// Walks `format` as a call that returned `result` ran it, calling `store` once for each
/// pointer argument the call stored through, in argument order, with what it stored. Stops
/// where the call may have stopped.
pub(super) fn walk(format: &[u8], result: c_int, mut store: impl FnMut(Store)) {
    if result < 0 {
        return;
    }
    // Successful assignments still to come: while some are, every directive before the last
    // of them was reached and matched.
    let mut left = result as usize;
    let mut i = 0;
    while i < format.len() {
        let c = format[i];
        i += 1;
        if c.is_ascii_whitespace() {
            // Matches any amount of white space, none included: never fails.
            continue;
        }
        if c != b'%' {
            if left == 0 {
                return;
            }
            continue;
        }
        if format.get(i) == Some(&b'%') {
            i += 1;
            if left == 0 {
                return;
            }
            continue;
        }
        let suppressed = format.get(i) == Some(&b'*');
        if suppressed {
            i += 1;
        }
        let digits = format[i..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let width: Option<usize> = std::str::from_utf8(&format[i..i + digits])
            .ok()
            .and_then(|w| w.parse().ok());
        i += digits;
        if format.get(i) == Some(&b'$') {
            return;
        }
        let allocates = format.get(i) == Some(&b'm');
        if allocates {
            i += 1;
        }
        let modifier_len = match format.get(i..i + 2) {
            Some(b"hh") | Some(b"ll") => 2,
            _ => match format.get(i) {
                Some(b'h' | b'l' | b'L' | b'q' | b'j' | b'z' | b't') => 1,
                _ => 0,
            },
        };
        let modifier = &format[i..i + modifier_len];
        i += modifier_len;
        let Some(&conversion) = format.get(i) else {
            return;
        };
        i += 1;
        let wide = modifier == b"l";
        let what = match conversion {
            b'd' | b'i' | b'o' | b'u' | b'x' | b'X' | b'b' | b'n' => {
                Store::Bytes(integer_size(modifier))
            }
            b'a' | b'A' | b'e' | b'E' | b'f' | b'F' | b'g' | b'G' => {
                Store::Bytes(float_size(modifier))
            }
            b'p' => Store::Bytes(POINTER),
            b'c' | b'C' => {
                let chars = width.unwrap_or(1);
                Store::Bytes(if wide || conversion == b'C' {
                    chars * WCHAR
                } else {
                    chars
                })
            }
            b's' | b'S' | b'[' => {
                if conversion == b'[' {
                    // The scan set: a `]` right after `[` or `[^` is one of its characters.
                    if format.get(i) == Some(&b'^') {
                        i += 1;
                    }
                    if format.get(i) == Some(&b']') {
                        i += 1;
                    }
                    match format[i..].iter().position(|&b| b == b']') {
                        Some(end) => i += end + 1,
                        None => return,
                    }
                }
                if wide || conversion == b'S' {
                    Store::WideString
                } else {
                    Store::String
                }
            }
            _ => return,
        };
        if conversion == b'n' {
            // Reached: either a later conversion assigned, or only white space (which cannot
            // fail) came since the last one that did. It does not count in the result.
            if !suppressed {
                store(what);
            }
            continue;
        }
        if left == 0 {
            return;
        }
        if suppressed {
            continue;
        }
        left -= 1;
        if allocates {
            // The pointer to the block the call allocated; the block itself is new memory.
            store(Store::Bytes(POINTER));
        } else {
            store(what);
        }
    }
}

/// A System V x86-64 `va_list`: where the next integer-class argument is.
#[repr(C)]
#[derive(Clone, Copy)]
struct VaList {
    gp_offset: u32,
    fp_offset: u32,
    overflow_arg_area: *const usize,
    reg_save_area: *const u8,
}

impl VaList {
    /// The next pointer argument, as `va_arg(ap, void *)` takes it.
    ///
    /// # Safety
    /// The list is a copy of a live `va_list` (its save area and stack arguments still exist)
    /// that has at least one more integer-class argument.
    unsafe fn next_pointer(&mut self) -> usize {
        const GP_AREA: u32 = 6 * 8;
        if self.gp_offset < GP_AREA {
            // SAFETY: the caller's contract: the register save area holds the argument.
            let p = unsafe { self.reg_save_area.add(self.gp_offset as usize) } as *const usize;
            self.gp_offset += 8;
            // SAFETY: as above; the save area is 8-byte aligned.
            unsafe { p.read() }
        } else {
            let p = self.overflow_arg_area;
            // SAFETY: the caller's contract: the argument is in the stack area.
            unsafe {
                self.overflow_arg_area = p.add(1);
                p.read()
            }
        }
    }
}

/// Records what a call that returned `result` stored through the pointers of `args` by
/// `format`, and the string `input` it read (`sscanf`), at `ra`.
///
/// # Safety
/// `format` (and `input` when not null) are the call's strings; `args` is a copy of the
/// call's `va_list` taken before the call, whose arguments are still alive.
unsafe fn record(
    format: *const c_char,
    input: *const c_char,
    mut args: VaList,
    result: c_int,
    ra: usize,
) {
    thread_state::keep_errno(|| {
        if !input.is_null() {
            // glibc's sscanf reads its whole input first (it measures it to make a stream).
            // SAFETY: the caller's contract: `input` is a string.
            range(input.cast(), unsafe { c_len(input) } + 1, false, ra);
        }
        // SAFETY: the caller's contract: `format` is a string the call read.
        let format = unsafe { std::slice::from_raw_parts(format.cast::<u8>(), c_len(format)) };
        walk(format, result, |what| {
            // SAFETY: the walk asks for no more arguments than the format's conversions, which
            // the caller passed (the call itself consumed them).
            let p = unsafe { args.next_pointer() } as *const c_void;
            let len = match what {
                Store::Bytes(n) => n,
                // SAFETY: the call stored a string there.
                Store::String => (unsafe { c_len(p.cast()) }) + 1,
                // SAFETY: as above, a wide string.
                Store::WideString => (unsafe { wide_len(p.cast()) } + 1) * WCHAR,
            };
            range(p, len, true, ra);
        });
    });
}

/// The length of a wide string, in characters.
///
/// # Safety
/// `s` is a NUL-terminated wide string.
unsafe fn wide_len(s: *const libc::wchar_t) -> usize {
    let mut n = 0;
    // SAFETY: the caller's contract.
    while unsafe { std::ptr::read_volatile(s.add(n)) } != 0 {
        n += 1;
    }
    n
}

// --- the hooks -------------------------------------------------------------------------------

/// The call through `real` of a `scanf` whose `va_list` is `args`, recorded.
///
/// # Safety
/// `args` is the call's `va_list`; `format` and `input` (null for a stream) its strings.
#[inline(always)]
unsafe fn scanned(
    input: *const c_char,
    format: *const c_char,
    args: *mut VaList,
    ra: usize,
    real: impl FnOnce() -> c_int,
) -> c_int {
    // `va_copy`: the real call advances the caller's list.
    // SAFETY: the caller's contract: a live `va_list`.
    let copy = unsafe { args.read() };
    let result = real();
    if wanted() {
        // SAFETY: the caller's contract; `copy` was taken before the call.
        unsafe { record(format, input, copy, result, ra) };
    }
    result
}

/// `variadic_entry!(symbol, fixed, implementation)`: exports the variadic `symbol`, whose C
/// prototype has `fixed` named arguments (1 or 2) before `...`; `implementation` takes those,
/// a pointer to a `va_list` over the rest, and the return address. Unlike `entry!` this one
/// calls the implementation (the `va_list` and its register save area live in its frame), and
/// describes its frame for unwinders: `scanf` is a cancellation point.
macro_rules! variadic_entry {
    ($export:ident, 1, $imp:path) => {
        variadic_entry!(@ $export, $imp, 8, "lea rsi, [rsp + 48]", "mov rdx, [rsp + 88]");
    };
    ($export:ident, 2, $imp:path) => {
        variadic_entry!(@ $export, $imp, 16, "lea rdx, [rsp + 48]", "mov rcx, [rsp + 88]");
    };
    (@ $export:ident, $imp:path, $gp_offset:literal, $va_arg:literal, $ra_arg:literal) => {
        /// Interposed (variadic; see the implementation named in the body).
        ///
        /// # Safety
        /// Called by C code with the C prototype of the libc function of the same name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $export() {
            core::arch::naked_asm!(
                ".cfi_startproc",
                // [rsp, +48): the six argument registers; [+48, +72): the va_list. The return
                // address stays at [rsp + 88], and the stack is 16-byte aligned for the call.
                "sub rsp, 88",
                ".cfi_adjust_cfa_offset 88",
                "mov [rsp], rdi",
                "mov [rsp + 8], rsi",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rcx",
                "mov [rsp + 32], r8",
                "mov [rsp + 40], r9",
                // gp_offset: past the named arguments; fp_offset: no vector register saved.
                "mov dword ptr [rsp + 48], {gp_offset}",
                "mov dword ptr [rsp + 52], 176",
                // overflow_arg_area: the caller's stack arguments, above the return address.
                "lea rax, [rsp + 96]",
                "mov [rsp + 56], rax",
                // reg_save_area.
                "mov [rsp + 64], rsp",
                $va_arg,
                $ra_arg,
                "call {imp}",
                "add rsp, 88",
                ".cfi_adjust_cfa_offset -88",
                "ret",
                ".cfi_endproc",
                gp_offset = const $gp_offset,
                imp = sym $imp,
            )
        }
    };
}

/// `scan_family!(vscanf, scanf, REAL, "vscanf", implementation)` and the same for the stream
/// (`file`) and string (`string`) forms: the `v` function and the variadic one, both through
/// the real `v` function.
macro_rules! scan_family {
    (stdin $v:ident, $variadic:ident, $real:ident, $sym:literal, $imp:ident) => {
        real!($real: unsafe extern "C-unwind" fn(*const c_char, *mut VaList) -> c_int = $sym);
        entry!($v, 2, $imp);
        variadic_entry!($variadic, 1, $imp);

        unsafe extern "C-unwind" fn $imp(format: *const c_char, args: *mut VaList, ra: usize) -> c_int {
            let real = $real.get();
            // SAFETY: the real function with the caller's arguments.
            unsafe { scanned(std::ptr::null(), format, args, ra, || real(format, args)) }
        }
    };
    (file $v:ident, $variadic:ident, $real:ident, $sym:literal, $imp:ident) => {
        real!($real: unsafe extern "C-unwind" fn(*mut FILE, *const c_char, *mut VaList) -> c_int = $sym);
        entry!($v, 3, $imp);
        variadic_entry!($variadic, 2, $imp);

        unsafe extern "C-unwind" fn $imp(
            f: *mut FILE,
            format: *const c_char,
            args: *mut VaList,
            ra: usize,
        ) -> c_int {
            let real = $real.get();
            // SAFETY: the real function with the caller's arguments.
            unsafe { scanned(std::ptr::null(), format, args, ra, || real(f, format, args)) }
        }
    };
    (string $v:ident, $variadic:ident, $real:ident, $sym:literal, $imp:ident) => {
        real!($real: unsafe extern "C-unwind" fn(*const c_char, *const c_char, *mut VaList) -> c_int = $sym);
        entry!($v, 3, $imp);
        variadic_entry!($variadic, 2, $imp);

        unsafe extern "C-unwind" fn $imp(
            s: *const c_char,
            format: *const c_char,
            args: *mut VaList,
            ra: usize,
        ) -> c_int {
            let real = $real.get();
            // SAFETY: the real function with the caller's arguments.
            unsafe { scanned(s, format, args, ra, || real(s, format, args)) }
        }
    };
}

// The names glibc's headers give them: plain with `_GNU_SOURCE`, `__isoc99_` otherwise, and
// `__isoc23_` in C23 mode (glibc 2.38 and later: `%b`, `0b` prefixes).
mod family {
    use super::*;

    scan_family!(stdin vscanf, scanf, REAL_VSCANF, b"vscanf\0", vscanf_hook);
    scan_family!(file vfscanf, fscanf, REAL_VFSCANF, b"vfscanf\0", vfscanf_hook);
    scan_family!(string vsscanf, sscanf, REAL_VSSCANF, b"vsscanf\0", vsscanf_hook);
    scan_family!(stdin __isoc99_vscanf, __isoc99_scanf, REAL_ISOC99_VSCANF, b"__isoc99_vscanf\0", isoc99_vscanf_hook);
    scan_family!(file __isoc99_vfscanf, __isoc99_fscanf, REAL_ISOC99_VFSCANF, b"__isoc99_vfscanf\0", isoc99_vfscanf_hook);
    scan_family!(string __isoc99_vsscanf, __isoc99_sscanf, REAL_ISOC99_VSSCANF, b"__isoc99_vsscanf\0", isoc99_vsscanf_hook);
    scan_family!(stdin __isoc23_vscanf, __isoc23_scanf, REAL_ISOC23_VSCANF, b"__isoc23_vscanf\0", isoc23_vscanf_hook);
    scan_family!(file __isoc23_vfscanf, __isoc23_fscanf, REAL_ISOC23_VFSCANF, b"__isoc23_vfscanf\0", isoc23_vfscanf_hook);
    scan_family!(string __isoc23_vsscanf, __isoc23_sscanf, REAL_ISOC23_VSSCANF, b"__isoc23_vsscanf\0", isoc23_vsscanf_hook);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stores(format: &str, result: c_int) -> Vec<Store> {
        let mut out = Vec::new();
        walk(format.as_bytes(), result, |s| out.push(s));
        out
    }

    #[test]
    fn each_conversion_stores_its_type() {
        assert_eq!(
            stores("%d %hhd %hd %ld %lld %zu %jd %p", 8),
            [4, 1, 2, 8, 8, 8, 8, 8].map(Store::Bytes)
        );
        assert_eq!(
            stores("%f %lf %Lf", 3),
            [Store::Bytes(4), Store::Bytes(8), Store::Bytes(16)]
        );
        assert_eq!(
            stores("%s %5c %c %[^,], %[]a] %ls %ms", 7),
            [
                Store::String,
                Store::Bytes(5),
                Store::Bytes(1),
                Store::String,
                Store::String,
                Store::WideString,
                Store::Bytes(POINTER),
            ]
        );
    }

    #[test]
    fn only_what_the_call_assigned_is_stored() {
        assert_eq!(stores("%d %d %d", 2), [Store::Bytes(4), Store::Bytes(4)]);
        assert_eq!(stores("%d %d", -1), []);
        assert_eq!(stores("%d %d", 0), []);
    }

    #[test]
    fn suppressed_and_literal_directives_take_no_argument() {
        assert_eq!(
            stores("x=%*d,%%%hd", 1),
            [Store::Bytes(2)],
            "`%*d` and `%%` take nothing"
        );
    }

    #[test]
    fn a_count_is_stored_only_where_the_call_reached_it() {
        // Before a conversion that assigned, and after the last one across white space only.
        assert_eq!(
            stores("%n%d %n", 1),
            [Store::Bytes(4), Store::Bytes(4), Store::Bytes(4)]
        );
        // After a literal that may not have matched: not stored.
        assert_eq!(stores("%d,%n", 1), [Store::Bytes(4)]);
        assert_eq!(stores("%d %d%n", 1), [Store::Bytes(4)]);
    }

    #[test]
    fn positional_arguments_and_unknown_conversions_end_the_walk() {
        assert_eq!(stores("%d %1$d", 2), [Store::Bytes(4)]);
        assert_eq!(stores("%d %y %d", 2), [Store::Bytes(4)]);
        assert_eq!(stores("%d %[abc", 2), [Store::Bytes(4)]);
    }
}
