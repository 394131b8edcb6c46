//! The runtime's signal layer: one handler of the runtime's own for every signal whose default
//! action ends the process, chained to whatever the program installs.
//!
//! Why: a trace is wanted most when the program dies (a crash, Ctrl-C on a hang, a
//! supervisor's SIGTERM), and what the program does with a signal must not change. So the
//! runtime keeps its handler installed in the kernel for each such signal, and interposes
//! `sigaction` and the `signal` family: what the program installs goes into a table (the
//! program's view, which `sigaction` also reports back), and the kernel gets the runtime's
//! handler with the program's mask and flags. When a signal arrives:
//! - the program's disposition is a handler: for a crash signal (`SIGSEGV`, `SIGBUS`,
//!   `SIGILL`, `SIGFPE`, `SIGABRT`, `SIGTRAP`, `SIGSYS`) every buffer is written first (the
//!   handler may end the process), then the handler runs exactly as the kernel would have
//!   run it (with `siginfo` and the context when it asked for them; `SA_RESETHAND` honoured);
//!   for any other signal the handler runs at once;
//! - the default action: the trace is completed (`runtime::finish`, every lock wait bounded),
//!   then the default action happens: the disposition is reset and the signal raised again, or,
//!   for a fault of the instruction itself, the handler returns and the instruction faults
//!   again, so the process dies of the same signal, with the same core dump;
//! - ignored: the kernel ignores it (the runtime's handler is not installed then), so an
//!   ignored signal stays ignored across `exec` and `posix_spawn`, as the program set it.
//!
//! The table is read from signal handlers and written by `sigaction` (which is
//! async-signal-safe, so may itself run in a handler): each signal has a few slots; a writer
//! fills a slot that is not the published one and then publishes it, and a reader copies the
//! published slot and checks its sequence number, so a reader never waits for a writer.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use libc::{c_int, siginfo_t};

use foresight_trace::tables::EndReason;

use crate::context::Context;
use crate::real::real;
use crate::sigmask::{empty_set, full_set};
use crate::{runtime, thread_state};

type Handler = unsafe extern "C" fn(c_int);
type InfoHandler = unsafe extern "C" fn(c_int, *mut siginfo_t, *mut libc::c_void);

real!(REAL_SIGACTION: unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int = b"sigaction\0");

/// The signals whose default action ends the process (SIGKILL and SIGSTOP aside, which no
/// handler sees; real-time signals aside, which programs that use them handle themselves).
const MANAGED: [c_int; 19] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGABRT,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGUSR1,
    libc::SIGSEGV,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGSYS,
];

/// Signals that report a fault of the program (its own handler may end it: buffers first).
fn is_crash(sig: c_int) -> bool {
    matches!(
        sig,
        libc::SIGSEGV
            | libc::SIGBUS
            | libc::SIGILL
            | libc::SIGFPE
            | libc::SIGABRT
            | libc::SIGTRAP
            | libc::SIGSYS
    )
}

/// The signal that writes a snapshot of the flight recorder's window (`--dump-on`; 0: none).
/// Set at start-up, before `init`: the runtime takes the signal over.
static DUMP_ON: AtomicI32 = AtomicI32::new(0);

/// `FORESIGHT_DUMP_ON`: a managed signal other than a crash signal (others are refused, as
/// `foresight record` refuses them).
pub fn set_dump_on(sig: c_int) {
    if MANAGED.contains(&sig) && !is_crash(sig) && sig != libc::SIGXFSZ {
        DUMP_ON.store(sig, Ordering::Release);
    }
}

fn is_dump_on(sig: c_int) -> bool {
    sig != 0 && DUMP_ON.load(Ordering::Acquire) == sig
}

/// `sa_flags` bit glibc adds to every disposition it installs, and reports back.
#[cfg(target_arch = "x86_64")]
const SA_RESTORER: c_int = 0x0400_0000;
#[cfg(not(target_arch = "x86_64"))]
const SA_RESTORER: c_int = 0;

const SIGSET_WORDS: usize = std::mem::size_of::<libc::sigset_t>() / 8;
const SLOTS: usize = 8;
const NSIG: usize = 65;

/// One disposition as the program set it.
struct Slot {
    /// Odd while the slot is written.
    seq: AtomicU32,
    handler: AtomicUsize,
    flags: AtomicI32,
    mask: [AtomicU64; SIGSET_WORDS],
}

struct Entry {
    /// Whether the runtime manages the signal (its table is in use).
    managed: AtomicU32,
    published: AtomicUsize,
    next: AtomicUsize,
    slots: [Slot; SLOTS],
}

static TABLE: [Entry; NSIG] = [const {
    Entry {
        managed: AtomicU32::new(0),
        published: AtomicUsize::new(0),
        next: AtomicUsize::new(0),
        slots: [const {
            Slot {
                seq: AtomicU32::new(0),
                handler: AtomicUsize::new(libc::SIG_DFL),
                flags: AtomicI32::new(0),
                mask: [const { AtomicU64::new(0) }; SIGSET_WORDS],
            }
        }; SLOTS],
    }
}; NSIG];

/// A copy of the program's disposition.
#[derive(Clone, Copy)]
struct Disposition {
    handler: usize,
    flags: c_int,
    mask: libc::sigset_t,
}

fn entry(sig: c_int) -> Option<&'static Entry> {
    let e = TABLE.get(usize::try_from(sig).ok()?)?;
    (e.managed.load(Ordering::Acquire) != 0).then_some(e)
}

impl Entry {
    fn read(&self) -> Disposition {
        loop {
            let s = &self.slots[self.published.load(Ordering::Acquire)];
            let before = s.seq.load(Ordering::Acquire);
            let mut words = [0u64; SIGSET_WORDS];
            for (w, m) in words.iter_mut().zip(&s.mask) {
                *w = m.load(Ordering::Relaxed);
            }
            let d = Disposition {
                handler: s.handler.load(Ordering::Relaxed),
                flags: s.flags.load(Ordering::Relaxed),
                mask: words_to_set(words),
            };
            std::sync::atomic::fence(Ordering::Acquire);
            // The published slot is only rewritten after SLOTS newer writes: then retry with
            // the newest one.
            if before & 1 == 0 && s.seq.load(Ordering::Relaxed) == before {
                return d;
            }
        }
    }

    fn write(&self, d: &Disposition) {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % SLOTS;
        let s = &self.slots[i];
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq | 1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        s.handler.store(d.handler, Ordering::Relaxed);
        s.flags.store(d.flags, Ordering::Relaxed);
        for (m, w) in s.mask.iter().zip(set_to_words(&d.mask)) {
            m.store(w, Ordering::Relaxed);
        }
        s.seq.store((seq | 1).wrapping_add(1), Ordering::Release);
        self.published.store(i, Ordering::Release);
    }
}

fn set_to_words(set: &libc::sigset_t) -> [u64; SIGSET_WORDS] {
    let mut words = [0u64; SIGSET_WORDS];
    // SAFETY: a sigset_t is plain bytes, SIGSET_WORDS * 8 of them.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (set as *const libc::sigset_t).cast::<u8>(),
            std::mem::size_of::<libc::sigset_t>(),
        )
    };
    for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        *w = u64::from_ne_bytes(chunk.try_into().unwrap_or([0; 8]));
    }
    words
}

fn words_to_set(words: [u64; SIGSET_WORDS]) -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is the empty set.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above: plain bytes, SIGSET_WORDS * 8 of them, written through a unique borrow.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(
            (&mut set as *mut libc::sigset_t).cast::<u8>(),
            std::mem::size_of::<libc::sigset_t>(),
        )
    };
    for (chunk, w) in bytes.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    set
}

fn real_sigaction(
    sig: c_int,
    act: Option<&libc::sigaction>,
    old: Option<&mut libc::sigaction>,
) -> c_int {
    let Some(f) = REAL_SIGACTION.try_get() else {
        return -1;
    };
    let act = act.map_or(std::ptr::null(), |a| a as *const libc::sigaction);
    let old = old.map_or(std::ptr::null_mut(), |o| o as *mut libc::sigaction);
    // SAFETY: the real sigaction with valid (or null) pointers.
    unsafe { f(sig, act, old) }
}

/// What the kernel is given for `sig` when the program's disposition is `d`: the runtime's
/// handler (with the program's mask and flags when it has a handler of its own), or `SIG_IGN`.
fn install(sig: c_int, d: &Disposition) -> c_int {
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    if is_dump_on(sig) {
        // The runtime's, whatever the program asks (the program's view keeps what it set):
        // every other signal blocked while the snapshot is written, interrupted calls restarted.
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_mask = full_set();
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    } else if d.handler == libc::SIG_IGN {
        sa.sa_sigaction = libc::SIG_IGN;
        sa.sa_mask = empty_set();
        sa.sa_flags = d.flags & !(libc::SA_SIGINFO | libc::SA_RESETHAND | SA_RESTORER);
    } else if d.handler == libc::SIG_DFL {
        // The process will end: nothing else interrupts the trace's completion.
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_mask = full_set();
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
    } else {
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_mask = d.mask;
        sa.sa_flags = (d.flags & !(libc::SA_RESETHAND | SA_RESTORER)) | libc::SA_SIGINFO;
    }
    real_sigaction(sig, Some(&sa), None)
}

/// Start-up: takes over every managed signal, keeping what the process inherited or another
/// library installed as the program's disposition.
pub fn init() {
    for sig in MANAGED {
        // SAFETY: an all-zero sigaction is a valid out-value.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        if real_sigaction(sig, None, Some(&mut old)) != 0 {
            continue;
        }
        let e = &TABLE[sig as usize];
        e.write(&Disposition {
            handler: old.sa_sigaction,
            flags: old.sa_flags,
            mask: old.sa_mask,
        });
        e.managed.store(1, Ordering::Release);
        if old.sa_sigaction != libc::SIG_IGN || is_dump_on(sig) {
            install(
                sig,
                &Disposition {
                    handler: old.sa_sigaction,
                    flags: old.sa_flags,
                    mask: old.sa_mask,
                },
            );
        }
    }
}

/// Interposed `sigaction`: a managed signal's disposition goes into the table, and the kernel
/// keeps the runtime's handler; `oldact` is the program's previous disposition.
///
/// # Safety
/// The C prototype: `act` and `oldact` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    oldact: *mut libc::sigaction,
) -> c_int {
    let Some(e) = entry(sig) else {
        let Some(f) = REAL_SIGACTION.try_get() else {
            // SAFETY: __errno_location is always valid.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            return -1;
        };
        // SAFETY: the real function with the caller's arguments.
        return unsafe { f(sig, act, oldact) };
    };
    let old = e.read();
    // SAFETY: `act` is null or valid (the caller's contract).
    if let Some(new) = unsafe { act.as_ref() } {
        let d = Disposition {
            handler: new.sa_sigaction,
            flags: new.sa_flags | SA_RESTORER,
            mask: new.sa_mask,
        };
        e.write(&d);
        if install(sig, &d) != 0 {
            e.write(&old);
            return -1;
        }
    }
    // SAFETY: `oldact` is null or valid (the caller's contract).
    if let Some(out) = unsafe { oldact.as_mut() } {
        // SAFETY: an all-zero sigaction is a valid value to fill in.
        *out = unsafe { std::mem::zeroed() };
        out.sa_sigaction = old.handler;
        out.sa_flags = old.flags;
        out.sa_mask = old.mask;
    }
    0
}

/// `signal`, `bsd_signal` (BSD semantics: restarted calls, the signal blocked in its handler)
/// and `sysv_signal` (System V: reset on entry, not blocked, calls not restarted), through the
/// interposed `sigaction`.
fn signal_with(sig: c_int, handler: usize, flags: c_int) -> usize {
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler;
    sa.sa_flags = flags;
    sa.sa_mask = empty_set();
    if flags & libc::SA_NODEFER == 0 {
        // SAFETY: sigaddset on a set we own; an invalid signal is rejected by sigaction below.
        unsafe { libc::sigaddset(&mut sa.sa_mask, sig) };
    }
    // SAFETY: valid pointers to our own structs.
    if unsafe { sigaction(sig, &sa, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// Interposed `signal` (glibc: BSD semantics).
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: usize) -> usize {
    signal_with(sig, handler, libc::SA_RESTART)
}

/// Interposed `bsd_signal`.
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: usize) -> usize {
    signal_with(sig, handler, libc::SA_RESTART)
}

/// Interposed `sysv_signal`.
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(sig: c_int, handler: usize) -> usize {
    signal_with(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER)
}

/// Interposed `__sysv_signal` (what `signal` compiles to under strict ISO C).
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn __sysv_signal(sig: c_int, handler: usize) -> usize {
    signal_with(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER)
}

/// Whether the calling thread was inside the runtime when the signal came: then it may hold a
/// lock the runtime needs, and the runtime leaves its buffers alone.
fn interrupted_runtime() -> bool {
    thread_state::current().is_some_and(|t| t.is_busy())
}

/// The runtime's handler for every managed signal.
extern "C" fn on_signal(sig: c_int, info: *mut siginfo_t, uctx: *mut libc::c_void) {
    if sig == libc::SIGXFSZ && crate::output::in_trace_write() {
        // The runtime's own write passed the file size limit: the kernel's answer to it, not
        // to the program (`output.rs` checks the limit first, so this is a limit lowered
        // meanwhile). The write fails, and recording stops.
        return;
    }
    // SAFETY: __errno_location is always valid; the program's errno survives the handler.
    let saved_errno = unsafe { *libc::__errno_location() };
    if is_dump_on(sig) {
        // Consumed: the window goes to a snapshot and the program runs on. A thread
        // interrupted inside the runtime may hold its locks: the flusher writes it then.
        if interrupted_runtime() {
            crate::flusher::defer_snapshot(sig);
        } else {
            runtime::snapshot(sig, Context::SignalHandler);
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved_errno };
        return;
    }
    let Some(e) = entry(sig) else {
        return;
    };
    let d = e.read();
    if d.handler == libc::SIG_IGN {
        return;
    }
    if d.handler == libc::SIG_DFL {
        if !interrupted_runtime() {
            runtime::finish(
                EndReason::Signal { signal: sig },
                Context::SignalHandler,
                false,
            );
        }
        die(sig, info);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved_errno };
        return;
    }
    if is_crash(sig) && !interrupted_runtime() {
        runtime::flush_all(Context::SignalHandler);
    }
    if d.flags & libc::SA_RESETHAND != 0 {
        // The kernel's one-shot semantics, on the program's view.
        let dfl = Disposition {
            handler: libc::SIG_DFL,
            flags: SA_RESTORER,
            mask: empty_set(),
        };
        e.write(&dfl);
        install(sig, &dfl);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
    if d.flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this handler with SA_SIGINFO: it takes the signal,
        // its siginfo and the context, which the kernel gave us.
        let h: InfoHandler = unsafe { std::mem::transmute::<usize, InfoHandler>(d.handler) };
        // SAFETY: calling the program's handler as the kernel would have.
        unsafe { h(sig, info, uctx) };
    } else {
        // SAFETY: a handler installed without SA_SIGINFO takes the signal number alone.
        let h: Handler = unsafe { std::mem::transmute::<usize, Handler>(d.handler) };
        // SAFETY: calling the program's handler as the kernel would have.
        unsafe { h(sig) };
    }
}

/// The default action of `sig`, as if the runtime's handler had never been there.
fn die(sig: c_int, info: *mut siginfo_t) {
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    dfl.sa_sigaction = libc::SIG_DFL;
    real_sigaction(sig, Some(&dfl), None);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    let fault = matches!(
        sig,
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP
    ) && code > 0;
    if fault {
        // Returning re-executes the faulting instruction, which faults again: the default
        // action then, with the kernel's own siginfo and core dump.
        return;
    }
    // SAFETY: unblocking the signal on this thread and raising it: the process ends as it
    // would have without the runtime.
    unsafe {
        let mut set = empty_set();
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_keeps_the_last_disposition_written() {
        let e = &TABLE[libc::SIGUSR1 as usize];
        for h in 10..30usize {
            let mut mask = empty_set();
            // SAFETY: a set we own.
            unsafe { libc::sigaddset(&mut mask, (h % 30) as c_int + 1) };
            e.write(&Disposition {
                handler: h,
                flags: h as c_int,
                mask,
            });
            let d = e.read();
            assert_eq!((d.handler, d.flags), (h, h as c_int));
            assert_eq!(set_to_words(&d.mask), set_to_words(&mask));
        }
    }
}
