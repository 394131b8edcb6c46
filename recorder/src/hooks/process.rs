//! Processes: `fork`, the `exec` family, `posix_spawn`/`posix_spawnp` and `vfork` (a fork and
//! an exec, `spawned.rs`), `exit`/`_exit`/`_Exit`, and `__libc_start_main` (to learn `main`'s
//! return value for the trailer).

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, pid_t};

use foresight_trace::event::EventKind;
use foresight_trace::tables::EndReason;

use super::rt;
use crate::context::Context;
use crate::real::{real, RealFn};
use crate::runtime::{self, EXIT_STATUS};
use crate::sequence::Key;
use crate::{config, sites, spawned, state};

type Argv = *const *const c_char;
type Main = unsafe extern "C-unwind" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;

real!(REAL_FORK: unsafe extern "C-unwind" fn() -> pid_t = b"fork\0");
real!(REAL_EXECVE: unsafe extern "C-unwind" fn(*const c_char, Argv, Argv) -> c_int = b"execve\0");
real!(REAL_EXECV: unsafe extern "C-unwind" fn(*const c_char, Argv) -> c_int = b"execv\0");
real!(REAL_EXECVP: unsafe extern "C-unwind" fn(*const c_char, Argv) -> c_int = b"execvp\0");
real!(REAL_EXECVPE: unsafe extern "C-unwind" fn(*const c_char, Argv, Argv) -> c_int = b"execvpe\0");
real!(REAL_POSIX_SPAWN: Spawn = b"posix_spawn\0");
real!(REAL_POSIX_SPAWNP: Spawn = b"posix_spawnp\0");
real!(REAL_EXIT: unsafe extern "C-unwind" fn(c_int) -> ! = b"exit\0");
real!(REAL__EXIT: unsafe extern "C-unwind" fn(c_int) -> ! = b"_exit\0");
real!(REAL__EXIT2: unsafe extern "C-unwind" fn(c_int) -> ! = b"_Exit\0");
real!(REAL_START_MAIN: unsafe extern "C-unwind" fn(Main, c_int, *mut *mut c_char, usize, usize, usize, usize) -> c_int = b"__libc_start_main\0");

entry!(fork, 0, fork_hook);
entry!(execve, 3, execve_hook);
entry!(execv, 2, execv_hook);
entry!(execvp, 2, execvp_hook);
entry!(execvpe, 3, execvpe_hook);
entry!(exit, 1, exit_hook);
entry!(_exit, 1, immediate_exit_hook);
entry!(_Exit, 1, immediate_exit2_hook);

unsafe extern "C-unwind" fn fork_hook(ra: usize) -> pid_t {
    let real = REAL_FORK.get();
    let t = rt();
    // The fork key is taken before the real fork; the event (which names the child's pid) is
    // written in the parent once it is known.
    let pre = t.and_then(|t| t.with(|t| (t.take_key(Key::Tick), sites::call_site(ra).0)));
    // SAFETY: the real fork. The atfork child handler (startup::fork_child) sets up the
    // child's own trace inside it.
    let pid = unsafe { real() };
    if pid > 0 {
        if let (Some(t), Some((key, site))) = (t, pre) {
            t.with(|t| {
                t.emit_at(
                    EventKind::Fork {
                        child_pid: pid as u32,
                        site,
                    },
                    key,
                )
            });
        }
    }
    pid
}

/// `envp` without the runtime in `LD_PRELOAD` (`FORESIGHT_NO_FOLLOW=1`). The returned vector
/// owns the rewritten entry and the pointer array; keep it alive across the exec.
fn filtered_env(envp: Argv) -> Option<(Vec<*const c_char>, Option<std::ffi::CString>)> {
    if envp.is_null() || !runtime::no_follow() {
        return None;
    }
    let mut out = Vec::new();
    let mut owned = None;
    let mut i = 0;
    loop {
        // SAFETY: envp is a NULL-terminated array of NUL-terminated strings (exec's contract).
        let p = unsafe { *envp.add(i) };
        if p.is_null() {
            break;
        }
        i += 1;
        // SAFETY: as above.
        let s = unsafe { CStr::from_ptr(p) }.to_bytes();
        if let Some(v) = s.strip_prefix(b"LD_PRELOAD=") {
            if let Some(kept) = config::strip_preload(v) {
                let c = std::ffi::CString::new([&b"LD_PRELOAD="[..], &kept].concat()).ok()?;
                out.push(c.as_ptr());
                owned = Some(c);
            }
            continue;
        }
        out.push(p);
    }
    out.push(std::ptr::null());
    Some((out, owned))
}

/// # Safety
/// `call` is the real exec with the caller's arguments (and possibly a filtered environment).
#[inline(always)]
unsafe fn exec_common(ra: usize, call: impl FnOnce() -> c_int) -> c_int {
    runtime::before_exec(ra);
    spawned::vfork_child_exec(ra);
    let r = call();
    // Only reached when the exec failed.
    runtime::after_failed_exec();
    spawned::vfork_child_exec_failed();
    r
}

unsafe extern "C-unwind" fn execve_hook(
    path: *const c_char,
    argv: Argv,
    envp: Argv,
    ra: usize,
) -> c_int {
    let real = REAL_EXECVE.get();
    let env = filtered_env(envp);
    let envp2 = env.as_ref().map_or(envp, |(v, _)| v.as_ptr());
    // SAFETY: the real function with the caller's arguments (environment possibly filtered).
    unsafe { exec_common(ra, || real(path, argv, envp2)) }
}

unsafe extern "C-unwind" fn execvpe_hook(
    file: *const c_char,
    argv: Argv,
    envp: Argv,
    ra: usize,
) -> c_int {
    let real = REAL_EXECVPE.get();
    let env = filtered_env(envp);
    let envp2 = env.as_ref().map_or(envp, |(v, _)| v.as_ptr());
    // SAFETY: as above.
    unsafe { exec_common(ra, || real(file, argv, envp2)) }
}

unsafe extern "C-unwind" fn execv_hook(path: *const c_char, argv: Argv, ra: usize) -> c_int {
    let real = REAL_EXECV.get();
    // SAFETY: the real function with the caller's arguments (uses `environ`, already filtered
    // at start-up under FORESIGHT_NO_FOLLOW).
    unsafe { exec_common(ra, || real(path, argv)) }
}

unsafe extern "C-unwind" fn execvp_hook(file: *const c_char, argv: Argv, ra: usize) -> c_int {
    let real = REAL_EXECVP.get();
    // SAFETY: as above.
    unsafe { exec_common(ra, || real(file, argv)) }
}

/// `execl`, `execlp`, `execle` are variadic (no stable Rust definition): a naked entry saves
/// the argument registers, lets `variadic_pre_exec` finish the trace's buffers and resolve the
/// real function, restores the registers and the stack exactly, and tail-jumps. If the exec
/// fails, recording stays paused (the trace keeps its provisional trailer).
#[cfg(target_arch = "x86_64")]
macro_rules! variadic_exec {
    ($export:ident, $slot:ident, $name:literal) => {
        static $slot: RealFn = RealFn::new($name);
        $crate::real::resolve_at_load!($slot);

        /// Interposed `exec` variant (variadic).
        ///
        /// # Safety
        /// Called by C code with the libc prototype.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $export() {
            core::arch::naked_asm!(
                // 7 pushes after the return address: the stack is 16-byte aligned for the call.
                "push rdi",
                "push rsi",
                "push rdx",
                "push rcx",
                "push r8",
                "push r9",
                "push rax",
                "mov rdi, [rsp + 56]",
                "lea rsi, [rip + {slot}]",
                "call {pre}",
                "mov r11, rax",
                "pop rax",
                "pop r9",
                "pop r8",
                "pop rcx",
                "pop rdx",
                "pop rsi",
                "pop rdi",
                "jmp r11",
                slot = sym $slot,
                pre = sym variadic_pre_exec,
            )
        }
    };
}

#[cfg(target_arch = "x86_64")]
variadic_exec!(execl, REAL_EXECL, b"execl\0");
#[cfg(target_arch = "x86_64")]
variadic_exec!(execlp, REAL_EXECLP, b"execlp\0");
#[cfg(target_arch = "x86_64")]
variadic_exec!(execle, REAL_EXECLE, b"execle\0");

#[cfg(target_arch = "x86_64")]
extern "C" fn variadic_pre_exec(ra: usize, real: &RealFn) -> usize {
    runtime::before_exec(ra);
    spawned::vfork_child_exec(ra);
    real.get()
}

/// `posix_spawn` and `posix_spawnp` take six arguments, so the return address is a seventh,
/// passed on the stack (x86-64: the entry copies it below itself and calls the hook, whose
/// frame then sits on the copy) or in `x6` (AArch64: a tail jump, as `entry!`).
macro_rules! entry6 {
    ($export:ident, $imp:path) => {
        /// Interposed (see the implementation named in the body).
        ///
        /// # Safety
        /// Called by C code with the C prototype of the libc function of the same name.
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $export() {
            core::arch::naked_asm!(
                // [rsp] is the return address; pushing a copy aligns the stack for the call,
                // after which the copy is the hook's seventh argument.
                "push qword ptr [rsp]",
                "call {imp}",
                "add rsp, 8",
                "ret",
                imp = sym $imp,
            )
        }

        /// Interposed (see the implementation named in the body).
        ///
        /// # Safety
        /// Called by C code with the C prototype of the libc function of the same name.
        #[cfg(target_arch = "aarch64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $export() {
            core::arch::naked_asm!("mov x6, x30", "b {imp}", imp = sym $imp)
        }
    };
}

entry6!(posix_spawn, posix_spawn_hook);
entry6!(posix_spawnp, posix_spawnp_hook);

type Spawn = unsafe extern "C-unwind" fn(
    *mut pid_t,
    *const c_char,
    *const libc::c_void,
    *const libc::c_void,
    Argv,
    Argv,
) -> c_int;

/// # Safety
/// `real` is the real `posix_spawn` or `posix_spawnp`, called with the caller's arguments.
#[allow(clippy::too_many_arguments)]
unsafe fn spawn_common(
    real: Spawn,
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const libc::c_void,
    attr: *const libc::c_void,
    argv: Argv,
    envp: Argv,
    ra: usize,
) -> c_int {
    let env = filtered_env(envp);
    let envp2 = env.as_ref().map_or(envp, |(v, _)| v.as_ptr());
    let start = state::now_ns();
    let mut child: pid_t = 0;
    // SAFETY: the real function with the caller's arguments (environment possibly filtered);
    // the child's pid goes to the caller's `pid` once known, as the real function does.
    let r = unsafe { real(&mut child, path, actions, attr, argv, envp2) };
    if r == 0 {
        if !pid.is_null() {
            // SAFETY: the caller's pid pointer, which the real function would have written.
            unsafe { *pid = child };
        }
        spawned::spawned(child as u32, start, ra);
    }
    r
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn posix_spawn_hook(
    pid: *mut pid_t,
    path: *const c_char,
    actions: *const libc::c_void,
    attr: *const libc::c_void,
    argv: Argv,
    envp: Argv,
    ra: usize,
) -> c_int {
    let real = REAL_POSIX_SPAWN.get();
    // SAFETY: forwarded contract.
    unsafe { spawn_common(real, pid, path, actions, attr, argv, envp, ra) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn posix_spawnp_hook(
    pid: *mut pid_t,
    file: *const c_char,
    actions: *const libc::c_void,
    attr: *const libc::c_void,
    argv: Argv,
    envp: Argv,
    ra: usize,
) -> c_int {
    let real = REAL_POSIX_SPAWNP.get();
    // SAFETY: forwarded contract.
    unsafe { spawn_common(real, pid, file, actions, attr, argv, envp, ra) }
}

/// `vfork` cannot be wrapped: the child returns from it on the parent's stack, so nothing may
/// stand between the program and the real call. The entry marks the thread as in a `vfork`
/// (`spawned::vfork_pre`, which also hands back the real function) and tail-jumps to it with
/// the stack as the program left it; the child's exec hook then writes the child's trace.
#[cfg(target_arch = "x86_64")]
static REAL_VFORK: RealFn = RealFn::new(b"vfork\0");
#[cfg(target_arch = "x86_64")]
crate::real::resolve_at_load!(REAL_VFORK);

/// Interposed `vfork` (see `REAL_VFORK`).
///
/// # Safety
/// Called by C code with the libc prototype.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn vfork() {
    core::arch::naked_asm!(
        "mov rdi, [rsp]",
        // The stack is 16-byte aligned for the call after this.
        "sub rsp, 8",
        "call {pre}",
        "add rsp, 8",
        "jmp rax",
        pre = sym vfork_pre,
    )
}

#[cfg(target_arch = "x86_64")]
extern "C" fn vfork_pre(ra: usize) -> usize {
    spawned::vfork_pre(ra);
    REAL_VFORK.get()
}

unsafe extern "C-unwind" fn exit_hook(status: c_int, _ra: usize) -> ! {
    let real = REAL_EXIT.get();
    EXIT_STATUS.store(status, Ordering::Relaxed);
    // SAFETY: the real exit; our atexit handler completes the trace with this status.
    unsafe { real(status) }
}

unsafe extern "C-unwind" fn immediate_exit_hook(status: c_int, _ra: usize) -> ! {
    let real = REAL__EXIT.get();
    runtime::finish(EndReason::ImmediateExit { status }, Context::Thread, true);
    // SAFETY: the real _exit.
    unsafe { real(status) }
}

unsafe extern "C-unwind" fn immediate_exit2_hook(status: c_int, _ra: usize) -> ! {
    let real = REAL__EXIT2.get();
    runtime::finish(EndReason::ImmediateExit { status }, Context::Thread, true);
    // SAFETY: the real _Exit.
    unsafe { real(status) }
}

static REAL_MAIN: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C-unwind" fn wrapped_main(
    argc: c_int,
    argv: *mut *mut c_char,
    envp: *mut *mut c_char,
) -> c_int {
    // SAFETY: REAL_MAIN holds the program's `main`, stored by __libc_start_main below.
    let main: Main =
        unsafe { std::mem::transmute::<usize, Main>(REAL_MAIN.load(Ordering::Relaxed)) };
    // SAFETY: calling the program's main with the arguments libc prepared.
    let r = unsafe { main(argc, argv, envp) };
    EXIT_STATUS.store(r, Ordering::Relaxed);
    r
}

/// Interposed so that `main`'s return value (which libc passes to its internal `exit`, not to
/// ours) reaches the trailer.
///
/// # Safety
/// Called by the program's `_start` with the libc prototype.
#[no_mangle]
pub unsafe extern "C-unwind" fn __libc_start_main(
    main: Main,
    argc: c_int,
    argv: *mut *mut c_char,
    init: usize,
    fini: usize,
    rtld_fini: usize,
    stack_end: usize,
) -> c_int {
    let real = REAL_START_MAIN.get();
    REAL_MAIN.store(main as usize, Ordering::Relaxed);
    // SAFETY: the real __libc_start_main with the caller's arguments, our wrapper for main.
    unsafe { real(wrapped_main, argc, argv, init, fini, rtld_fini, stack_end) }
}
