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
//! A handler the program installs for any other signal (`SIGCHLD`, `SIGWINCH`, a real-time
//! signal, …) is wrapped the same way from its first installation on: the signal's entry is
//! taken into the table then (`WRAPPED`), and while the program's disposition is the default
//! or ignore, the kernel holds that disposition itself.
//!
//! Around the program's handler the runtime writes signal-handler events (FORMAT.md §6.6.1:
//! the thread's events in between ran inside the handler), and `pthread_sigmask` and
//! `sigprocmask` write the thread's mask when they change it, so that the analyzer can tell
//! a lock a handler takes from one taken where the handler could not interrupt
//! (`signal-unsafe-lock`). Both are written through the reentrancy guard: a handler that
//! interrupted the runtime itself is not marked, as nothing it does is recorded either. The
//! guard also keeps what the wrapper does async-signal-safe: it writes into the thread's own
//! chunk buffer, as any hook in a handler does.
//!
//! The table is read from signal handlers and written by `sigaction` (which is
//! async-signal-safe, so may itself run in a handler): each signal has a few slots; a writer
//! fills a slot that is not the published one and then publishes it, and a reader copies the
//! published slot and checks its sequence number, so a reader never waits for a writer.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use libc::{c_int, siginfo_t};

use foresight_trace::event::EventKind;
use foresight_trace::tables::EndReason;

use crate::context::Context;
use crate::real::real;
use crate::sequence::Key;
use crate::sigmask::{empty_set, full_set};
use crate::{runtime, state, thread_state};

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

/// `Entry::managed`: not in the table (the kernel holds the program's disposition).
const UNMANAGED: u32 = 0;
/// A signal whose default action ends the process: the runtime's handler stays installed.
const MANAGED_DEFAULT: u32 = 1;
/// Another signal the program installed a handler for: the runtime's handler is installed
/// only while the program's disposition is a handler.
const WRAPPED: u32 = 2;

struct Entry {
    /// Whether the runtime manages the signal (its table is in use), and how.
    managed: AtomicU32,
    published: AtomicUsize,
    next: AtomicUsize,
    slots: [Slot; SLOTS],
}

static TABLE: [Entry; NSIG] = [const {
    Entry {
        managed: AtomicU32::new(UNMANAGED),
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
    (e.managed.load(Ordering::Acquire) != UNMANAGED).then_some(e)
}

/// Takes `sig` into the table as `WRAPPED`, with the disposition the kernel holds now, when
/// the program installs a handler for it: `None` when the kernel refuses the signal (an
/// invalid number, one the C library keeps for itself), which the real call then reports.
fn adopt(sig: c_int) -> Option<&'static Entry> {
    if sig == libc::SIGKILL || sig == libc::SIGSTOP {
        return None;
    }
    let e = TABLE.get(usize::try_from(sig).ok()?)?;
    // SAFETY: an all-zero sigaction is a valid out-value.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    if real_sigaction(sig, None, Some(&mut now)) != 0 {
        return None;
    }
    // Two threads adopting at once write the same disposition; one that finds the signal
    // already taken leaves the table as it is.
    if e.managed.load(Ordering::Acquire) == UNMANAGED {
        e.write(&Disposition {
            handler: now.sa_sigaction,
            flags: now.sa_flags,
            mask: now.sa_mask,
        });
        let _ = e
            .managed
            .compare_exchange(UNMANAGED, WRAPPED, Ordering::AcqRel, Ordering::Acquire);
    }
    Some(e)
}

/// Whether `handler` is a function of the program (not `SIG_DFL`, `SIG_IGN` or `SIG_ERR`).
fn is_function(handler: usize) -> bool {
    handler != libc::SIG_DFL && handler != libc::SIG_IGN && handler != libc::SIG_ERR
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
    } else if d.handler == libc::SIG_DFL && !is_managed_default(sig) {
        // A wrapped signal's default action (ignore, stop, continue, or end the process
        // without a completed trace, as without the runtime) is the kernel's.
        sa.sa_sigaction = libc::SIG_DFL;
        sa.sa_mask = d.mask;
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

/// Whether `sig` is one of the signals the runtime keeps its handler installed for.
fn is_managed_default(sig: c_int) -> bool {
    usize::try_from(sig)
        .ok()
        .and_then(|i| TABLE.get(i))
        .is_some_and(|e| e.managed.load(Ordering::Acquire) == MANAGED_DEFAULT)
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
        e.managed.store(MANAGED_DEFAULT, Ordering::Release);
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
    // SAFETY: `act` is null or valid (the caller's contract).
    let installs_handler = unsafe { act.as_ref() }.is_some_and(|a| is_function(a.sa_sigaction));
    let known = entry(sig).or_else(|| installs_handler.then(|| adopt(sig)).flatten());
    let Some(e) = known else {
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

/// `SIG_HOLD`: `sigset`'s "block the signal" disposition.
const SIG_HOLD: usize = 2;

/// Interposed `sigset` (System V): installs `disp` (no flags, an empty mask) and unblocks the
/// signal, or blocks it for `SIG_HOLD`; returns `SIG_HOLD` if the signal was blocked before,
/// else the previous disposition. The C library's own goes to the kernel without the
/// interposed `sigaction`.
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn sigset(sig: c_int, disp: usize) -> usize {
    let mut one = empty_set();
    // SAFETY: a set we own; an invalid signal fails here, as glibc's `sigset` does.
    if unsafe { libc::sigaddset(&mut one, sig) } != 0 {
        return libc::SIG_ERR;
    }
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let mut before = empty_set();
    if disp == SIG_HOLD {
        // SAFETY: valid pointers to our own values.
        let held = unsafe {
            sigprocmask(libc::SIG_BLOCK, &one, &mut before) == 0
                && sigaction(sig, std::ptr::null(), &mut old) == 0
        };
        if !held {
            return libc::SIG_ERR;
        }
    } else {
        // SAFETY: as above.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = disp;
        // SAFETY: valid pointers to our own values.
        let set = unsafe {
            sigaction(sig, &sa, &mut old) == 0
                && sigprocmask(libc::SIG_UNBLOCK, &one, &mut before) == 0
        };
        if !set {
            return libc::SIG_ERR;
        }
    }
    // SAFETY: a set we own.
    if unsafe { libc::sigismember(&before, sig) } == 1 {
        SIG_HOLD
    } else {
        old.sa_sigaction
    }
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
    if d.handler == libc::SIG_DFL && !is_managed_default(sig) {
        // A wrapped signal whose handler was reset meanwhile: its default action, as the
        // kernel would have taken it.
        die(sig, info);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved_errno };
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
    let marked = mark_handler(EventKind::SignalEnter { signal: sig as u8 });
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
    if marked {
        // The errno the handler leaves is the program's: `with` keeps it.
        mark_handler(EventKind::SignalExit { signal: sig as u8 });
    }
}

/// Writes a signal-handler event on the calling thread; false when nothing was written (no
/// recording, a thread the runtime does not know, or a handler that interrupted the runtime).
fn mark_handler(kind: EventKind) -> bool {
    if !state::recording() {
        return false;
    }
    let Some(t) = thread_state::current() else {
        return false;
    };
    t.with(|t| t.emit(kind, Key::Same) != 0).unwrap_or(false)
}

/// The signals 1 to 64 of `set`, bit `s - 1` for signal `s` (FORMAT.md §6.6.1, signal-mask).
fn mask_bits(set: &libc::sigset_t) -> u64 {
    set_to_words(set)[0]
}

/// Writes the calling thread's mask, if it blocks anything: at its start (a thread inherits
/// its creator's mask; the main thread, its parent process's).
pub fn record_start_mask() {
    let mut now = empty_set();
    // SAFETY: no set (a query) and a valid out-pointer.
    let r = unsafe {
        crate::sigmask::real_pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now)
    };
    if r != 0 {
        return;
    }
    let blocked = mask_bits(&now);
    if blocked != 0 {
        record_mask(blocked);
    }
}

fn record_mask(blocked: u64) {
    if !state::recording() {
        return;
    }
    if let Some(t) = thread_state::current() {
        t.with(|t| t.emit(EventKind::SignalMask { blocked }, Key::Same));
    }
}

/// The mask `how` and `set` make of `old` (what the kernel will hold: `SIGKILL` and
/// `SIGSTOP` are never blocked).
fn mask_after(how: c_int, set: &libc::sigset_t, old: u64) -> u64 {
    let set = mask_bits(set);
    let new = match how {
        libc::SIG_BLOCK => old | set,
        libc::SIG_UNBLOCK => old & !set,
        _ => set,
    };
    new & !((1 << (libc::SIGKILL - 1)) | (1 << (libc::SIGSTOP - 1)))
}

/// Calls the real mask function through `call` (with the old mask's out-pointer always
/// given), then writes the new mask when it differs from the old one. Returns what `call`
/// returned; `ok` says whether that is success.
fn change_mask(
    how: c_int,
    set: *const libc::sigset_t,
    oldset: *mut libc::sigset_t,
    call: impl FnOnce(*mut libc::sigset_t) -> c_int,
) -> c_int {
    let watched = !set.is_null() && thread_state::current().is_some_and(|t| !t.is_busy());
    if !watched {
        return call(oldset);
    }
    let mut old = empty_set();
    let r = call(&mut old);
    if r != 0 {
        return r;
    }
    // SAFETY: `set` is non-null and valid (the caller's contract; the real call read it),
    // and the kernel read it before `oldset` is written (they may be the same).
    let new = mask_after(how, unsafe { &*set }, mask_bits(&old));
    // SAFETY: `oldset` is null or valid (the caller's contract).
    if let Some(out) = unsafe { oldset.as_mut() } {
        *out = old;
    }
    if new != mask_bits(&old) {
        record_mask(new);
    }
    r
}

/// Interposed `pthread_sigmask`: the thread's new mask is recorded when it changed.
///
/// # Safety
/// The C prototype: `set` and `oldset` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    oldset: *mut libc::sigset_t,
) -> c_int {
    change_mask(how, set, oldset, |old| {
        // SAFETY: the caller's (valid or null) set, and a valid or null out-pointer.
        unsafe { crate::sigmask::real_pthread_sigmask(how, set, old) }
    })
}

real!(REAL_SIGPROCMASK: unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int = b"sigprocmask\0");

/// Interposed `sigprocmask` (the calling thread's mask, as `pthread_sigmask`; errors in
/// `errno`).
///
/// # Safety
/// The C prototype: `set` and `oldset` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    oldset: *mut libc::sigset_t,
) -> c_int {
    change_mask(how, set, oldset, |old| match REAL_SIGPROCMASK.try_get() {
        // SAFETY: the real function with the caller's (valid or null) pointers.
        Some(f) => unsafe { f(how, set, old) },
        // SAFETY: as above.
        None => match unsafe { crate::sigmask::real_pthread_sigmask(how, set, old) } {
            0 => 0,
            e => {
                // SAFETY: __errno_location is always valid.
                unsafe { *libc::__errno_location() = e };
                -1
            }
        },
    })
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
        crate::sigmask::real_pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
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
