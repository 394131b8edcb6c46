//! Naked entry points: the exported symbol reads the caller's return address and jumps to the
//! Rust implementation with it as one more argument.
//!
//! Why: Rust has no stable `__builtin_return_address`; walking frame pointers is unreliable
//! (the program may be built without them) and unwinding is far too slow for every lock call.
//! At the very first instruction of the exported function the return address is exactly at
//! `[rsp]` (x86-64) or in `x30` (AArch64), so a two-instruction trampoline that copies it into
//! the next free argument register and tail-jumps keeps the stack untouched: the
//! implementation runs as if called directly by the program and returns straight to it.

#[cfg(target_arch = "x86_64")]
macro_rules! ra_into {
    (0) => {
        "mov rdi, [rsp]"
    };
    (1) => {
        "mov rsi, [rsp]"
    };
    (2) => {
        "mov rdx, [rsp]"
    };
    (3) => {
        "mov rcx, [rsp]"
    };
    (4) => {
        "mov r8, [rsp]"
    };
    (5) => {
        "mov r9, [rsp]"
    };
}

#[cfg(target_arch = "x86_64")]
macro_rules! tail_jump {
    () => {
        "jmp {imp}"
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! ra_into {
    (0) => {
        "mov x0, x30"
    };
    (1) => {
        "mov x1, x30"
    };
    (2) => {
        "mov x2, x30"
    };
    (3) => {
        "mov x3, x30"
    };
    (4) => {
        "mov x4, x30"
    };
    (5) => {
        "mov x5, x30"
    };
    (6) => {
        "mov x6, x30"
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! tail_jump {
    () => {
        "b {imp}"
    };
}

/// `entry!(symbol, n, implementation)`: exports `symbol`, whose C prototype has `n`
/// arguments; `implementation` takes those `n` arguments and then the return address.
macro_rules! entry {
    ($export:ident, $n:tt, $imp:path) => {
        /// Interposed (see the implementation named in the body).
        ///
        /// # Safety
        /// Called by C code with the C prototype of the libc function of the same name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $export() {
            core::arch::naked_asm!(ra_into!($n), tail_jump!(), imp = sym $imp)
        }
    };
}

/// `entry6!(symbol, implementation)`: `entry!` for a function of six arguments, whose return
/// address is a seventh. On x86-64 that one goes on the stack: the entry pushes a copy of the
/// return address as the stack argument and calls the implementation (one frame more, which it
/// describes for unwinders: the six-argument socket calls are cancellation points).
#[cfg(target_arch = "x86_64")]
macro_rules! entry6 {
    ($export:ident, $imp:path) => {
        /// Interposed (see the implementation named in the body).
        ///
        /// # Safety
        /// Called by C code with the C prototype of the libc function of the same name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $export() {
            core::arch::naked_asm!(
                ".cfi_startproc",
                // The stack is 16-byte aligned after the push, for the call.
                "push qword ptr [rsp]",
                ".cfi_adjust_cfa_offset 8",
                "call {imp}",
                "add rsp, 8",
                ".cfi_adjust_cfa_offset -8",
                "ret",
                ".cfi_endproc",
                imp = sym $imp,
            )
        }
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! entry6 {
    ($export:ident, $imp:path) => {
        entry!($export, 6, $imp);
    };
}
