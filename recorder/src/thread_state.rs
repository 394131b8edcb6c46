//! Per-thread recording state, the registry of live threads, and the `pthread_t` → thread map.
//!
//! Each thread owns one `ThreadState`, allocated once (from the runtime's mmap allocator) when
//! the thread is created or first seen, holding its `ChunkWriter` (one chunk buffer of
//! `CHUNK_BYTES`), its Lamport clock and its reentrancy guard. A thread-local pointer finds it.
//! The buffer has a one-word lock: the owner takes it for each event (uncontended), and only
//! `finish` (process exit, signal, exec) takes it from another thread to flush the buffer.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{
    compiler_fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

use foresight_trace::event::{
    AtomicOp, Event, EventKind, LockMode, MemoryOrder, ObjectId, SiteId, ThreadId,
};
use foresight_trace::tables::{AccessCounts, TableRecord, ThreadEndState};
use foresight_trace::{ChunkWriter, PackedFields};

use crate::accesses::{self, AccessState};
use crate::objects::Slot;
use crate::sequence::{self, Key};
use crate::spin::SpinLock;
use crate::stripes::{self, Stripe};
use crate::{output, sites};

/// About 64 KiB of events per chunk, stored plain or compressed with LZ4.
pub const CHUNK_BYTES: usize = 64 << 10;
/// About 256 KiB of events per chunk compressed with zstd (`--compress auto|always`): zstd
/// gains more on larger inputs, and a chunk is compressed on its own
/// (docs/decisions/0004-zstd-level-1-in-a-static-context.md).
pub const ZSTD_CHUNK_BYTES: usize = 256 << 10;

/// The chunk size a benchmark asked for (`FORESIGHT_CHUNK_BYTES`, set before the first
/// writer is made); 0: by the compression mode.
static CHUNK_SIZE: AtomicUsize = AtomicUsize::new(0);

/// Sets the chunk size of new writers (4 KiB to 4 MiB).
pub fn set_chunk_bytes(bytes: usize) {
    CHUNK_SIZE.store(bytes.clamp(4 << 10, 4 << 20), Ordering::Relaxed);
}

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

static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);

/// Set while a foreign flush may happen (`Quiesced`), or for good when `membarrier` is
/// unavailable or the global counter orders events: owners then always take their buffer lock
/// (and never the lane).
static FOREIGN: AtomicBool = AtomicBool::new(true);

/// Whether `FOREIGN` may be cleared again after a foreign flush (the fast path works here).
static FAST_PATH: AtomicBool = AtomicBool::new(false);

/// One foreign flusher at a time (`finish`, `exec`, the periodic flusher): each sets
/// `FOREIGN`, works on other threads' buffers, and may clear it again, which must not happen
/// while another one is at work.
static FLUSHER: SpinLock<()> = SpinLock::new(());

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

fn membarrier(cmd: libc::c_long) -> bool {
    // SAFETY: the membarrier syscall takes a command and two zero arguments.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_long,
            0 as libc::c_long,
        ) == 0
    }
}

/// Start-up (and fork child): enables the owners' fast path if `membarrier` works here.
pub fn enable_fast_path() {
    let ok = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
    // The global counter is taken on the general path only: with it, `FOREIGN` stays set and
    // keeps every owner off the lane (one flag for the lane to test).
    let fast = ok && !sequence::is_global();
    FAST_PATH.store(fast, Ordering::SeqCst);
    FOREIGN.store(!fast, Ordering::SeqCst);
}

/// Recording stopped for good (a failed write): owners take the slow path, which refuses to
/// record, from now on. No barrier: an owner that has not seen it yet pushes into a buffer
/// that will not be written.
pub fn stop_fast_path() {
    FAST_PATH.store(false, Ordering::SeqCst);
    FOREIGN.store(true, Ordering::SeqCst);
}

/// A foreign flush under way: owners take their buffer lock, and every owner that was on its
/// fast path when it began is visible as `pushing`, so `acquire_foreign` may take any buffer.
pub struct Quiesced {
    _one_at_a_time: crate::spin::SpinGuard<'static, ()>,
}

/// Starts a foreign flush (`attempts` bounds the wait for another one to end: signal
/// handlers). After the barrier every owner either saw `FOREIGN` (slow path) or is visible as
/// `pushing`.
pub fn quiesce(attempts: Option<u32>) -> Option<Quiesced> {
    let guard = match attempts {
        Some(a) => FLUSHER.try_lock_for(a)?,
        None => FLUSHER.lock(),
    };
    if !FOREIGN.swap(true, Ordering::SeqCst) {
        membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    }
    Some(Quiesced {
        _one_at_a_time: guard,
    })
}

impl Quiesced {
    /// The flush is over: owners may use their fast path again.
    pub fn end(self) {
        if FAST_PATH.load(Ordering::Relaxed) {
            FOREIGN.store(false, Ordering::SeqCst);
        }
    }

    /// Recording is over: owners stay on the slow path (which refuses to record) for good; a
    /// later foreign flush leaves them there.
    pub fn keep(self) {
        FAST_PATH.store(false, Ordering::SeqCst);
    }
}

pub struct ThreadState {
    /// Written when the state is made and in a fork child (the only thread left); read by
    /// `finish` on other threads.
    tid: AtomicU32,
    parent: Cell<Option<ThreadId>>,
    /// Reentrancy guard: set while the runtime works on this thread's behalf.
    busy: Cell<bool>,
    /// The owner is between `enter_buf` and `leave_buf` on the fast path (see `quiesce`).
    pushing: AtomicBool,
    /// Guards `writer` and `clock` once `quiesce` ran: the owner's slow path and foreign
    /// flushes (`finish`, `exec`) take it.
    buf_lock: AtomicBool,
    /// No more events (exit recorded, or the trace was finished).
    closed: AtomicBool,
    /// Inside a blocking call its last event announced (a lock request, a wait): a `Wait`
    /// (0: not waiting), set by the owner around the real call, read by `finish` for the
    /// thread's end state.
    waiting: AtomicU8,
    clock: UnsafeCell<u64>,
    writer: UnsafeCell<ChunkWriter>,
    pub os_tid: Cell<u32>,
    errno: Cell<*mut libc::c_int>,
    /// The start routine and argument, for the `pthread_create` trampoline.
    pub start: Cell<usize>,
    pub arg: Cell<usize>,
    /// The signal mask the thread starts its routine with: a child starts with every signal
    /// blocked and sets this once its state is current (`None`: leave the mask as it is).
    pub start_mask: Cell<Option<libc::sigset_t>>,
    /// `pthread_once` in progress on this thread: (once object slot, user routine, ran).
    pub once: Cell<(usize, usize, bool)>,
    /// The create key, for the child's `thread-start` (set by the creator).
    start_after: Cell<u64>,
    /// Direct-mapped caches in front of the shared site and object tables: a hooked call
    /// usually repeats a recent site and object, and a hit costs no hashing or probing.
    site_cache: [Cell<(usize, SiteId)>; CACHE],
    obj_cache: [Cell<(usize, usize)>; CACHE],
    /// In front of both: (object address, return address) → (slot, site), one probe for the
    /// usual hook (the same lock from the same call site as recently). Only with one-frame
    /// sites (deeper sites depend on more than the return address).
    pair_cache: [Cell<PairEntry>; CACHE],
    /// Memory-access state (`accesses.rs`), allocated on the thread's first access; owned by
    /// this state and freed with it.
    accesses: Cell<*mut AccessState>,
    /// `__tsan_ignore_thread_begin`, `__tsan_mutex_pre_*`, …: while non-zero, plain accesses
    /// (`ignore_accesses`) or atomics and annotated locks (`ignore_sync`) are not recorded.
    pub ignore_accesses: Cell<u32>,
    pub ignore_sync: Cell<u32>,
    /// The stripe whose lock this thread holds around an atomic operation, or null: a fork
    /// child releases the locks its parent's other threads held (`child_after_fork`).
    held_stripe: Cell<*const Stripe>,
    /// Memory accesses that reached the recorder, and those it wrote, since the last
    /// `AccessCounts` record: written by the owner, taken by `finish` on another thread.
    executed: AtomicU64,
    recorded: AtomicU64,
    /// The program's return address left by an `operator new`/`delete` hook for the `malloc`
    /// or `free` it calls (`hooks/heap.rs`); 0 when none.
    pending_site: Cell<usize>,
    /// Owners of the allocation: the thread, and its creator until `pthread_create` has
    /// returned to it (the child may run and exit first). The last one frees it (`release`).
    owners: AtomicU32,
    /// Who names the thread's `pthread_t` in the map first (`pt_created`, `pt_started`).
    naming: AtomicU8,
    /// What the flusher saw of the buffer at its last look (chunks flushed, events pending):
    /// only the flusher touches it, under `buf_lock`.
    flusher_saw: Cell<(u32, u32)>,
}

/// `ThreadState::naming`: nobody yet, the creator is writing the entry, the creator wrote it,
/// the thread itself came first and is writing it, the thread wrote it.
const NAMING_OPEN: u8 = 0;
const NAMING_CREATOR: u8 = 1;
const NAMING_CREATOR_DONE: u8 = 2;
const NAMING_THREAD: u8 = 3;
const NAMING_THREAD_DONE: u8 = 4;

impl Drop for ThreadState {
    fn drop(&mut self) {
        let a = self.accesses.get();
        if !a.is_null() {
            // SAFETY: allocated by Box::into_raw in `access_state` and owned by this state
            // alone; nothing can reach it once the state is dropped.
            drop(unsafe { Box::from_raw(a) });
        }
    }
}

/// What the lane needs of a cached (object, call site) pair: the object's slot (its clock) and
/// the two ids, encoded.
#[derive(Clone, Copy)]
pub struct LanePair {
    pub slot: &'static Slot,
    pub fields: PackedFields,
}

/// One line each: the index is a shift, and a lookup touches one cache line.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct PairEntry {
    addr: usize,
    ra: usize,
    slot: usize,
    site: SiteId,
    /// The slot's stored id when the entry was made: the lane's hit needs it unchanged (a
    /// destroyed or re-initialised object fails the comparison and takes the general path).
    /// `NO_LANE` when the ids do not fit `PackedFields`: no slot stores 0 once its first
    /// object exists, so such an entry never passes the lane's check.
    stored_id: u32,
    /// The object and site ids, encoded for the lane (meaningless with `NO_LANE`).
    fields: PackedFields,
}

const NO_LANE: u32 = 0;

/// Matches no hook: no object lives at the (misaligned) last address, so a hit needs no
/// separate test for an empty entry.
const EMPTY_PAIR: PairEntry = PairEntry {
    addr: usize::MAX,
    ra: usize::MAX,
    slot: 0,
    site: 0,
    stored_id: NO_LANE,
    fields: PackedFields::EMPTY,
};

#[inline(always)]
fn pair_index(addr: usize, ra: usize) -> usize {
    // Objects are at least 8-byte aligned, call sites are not: the low bits of both, folded.
    ((addr >> 3) ^ ra) & (CACHE - 1)
}

const CACHE_BITS: u32 = 6;
const CACHE: usize = 1 << CACHE_BITS;

#[inline]
fn cache_index(x: usize) -> usize {
    (x ^ (x >> 6) ^ (x >> 12)) & (CACHE - 1)
}

// SAFETY: the Cells are only touched by the owning thread (or, for `start`/`arg`/`clock`, by the
// creator before the thread starts, or by `finish` under `buf_lock`).
unsafe impl Sync for ThreadState {}
// SAFETY: as above.
unsafe impl Send for ThreadState {}

impl ThreadState {
    pub fn new(parent: Option<ThreadId>, clock: u64) -> Box<Self> {
        let tid = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
        Box::new(Self {
            tid: AtomicU32::new(tid),
            parent: Cell::new(parent),
            busy: Cell::new(false),
            pushing: AtomicBool::new(false),
            buf_lock: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            waiting: AtomicU8::new(0),
            clock: UnsafeCell::new(clock),
            writer: UnsafeCell::new(new_writer(tid)),
            os_tid: Cell::new(0),
            errno: Cell::new(std::ptr::null_mut()),
            start: Cell::new(0),
            arg: Cell::new(0),
            start_mask: Cell::new(None),
            once: Cell::new((0, 0, false)),
            start_after: Cell::new(0),
            site_cache: [const { Cell::new((0, 0)) }; CACHE],
            obj_cache: [const { Cell::new((0, 0)) }; CACHE],
            pair_cache: [const { Cell::new(EMPTY_PAIR) }; CACHE],
            accesses: Cell::new(std::ptr::null_mut()),
            ignore_accesses: Cell::new(0),
            ignore_sync: Cell::new(0),
            held_stripe: Cell::new(std::ptr::null()),
            executed: AtomicU64::new(0),
            recorded: AtomicU64::new(0),
            pending_site: Cell::new(0),
            owners: AtomicU32::new(1),
            naming: AtomicU8::new(NAMING_OPEN),
            flusher_saw: Cell::new((0, 0)),
        })
    }

    /// The thread's id in the trace.
    #[inline]
    pub fn tid(&self) -> ThreadId {
        self.tid.load(Ordering::Relaxed)
    }

    /// The thread that created this one, if the recorder saw it.
    pub fn parent(&self) -> Option<ThreadId> {
        self.parent.get()
    }

    /// The creator keeps the state alive across the real `pthread_create` (see `owners`); it
    /// gives it up with `release` once that returned.
    pub fn share_with_creator(&self) {
        self.owners.store(2, Ordering::Relaxed);
    }

    /// The site of an allocation called from `ra` (owner only).
    #[inline(always)]
    pub fn site(&self, ra: usize) -> SiteId {
        if !sites::shallow() {
            return sites::site(ra);
        }
        let c = &self.site_cache[cache_index(ra)];
        let (k, v) = c.get();
        if k == ra {
            return v;
        }
        let v = sites::site(ra);
        c.set((ra, v));
        v
    }

    /// The site of a synchronisation hook called from `ra`, and whether it may be cached by
    /// `ra` (`sites::call_site`; owner only).
    #[inline(always)]
    pub fn call_site(&self, ra: usize) -> (SiteId, bool) {
        if !sites::shallow() {
            return sites::call_site(ra);
        }
        let c = &self.site_cache[cache_index(ra)];
        let (k, v) = c.get();
        if k == ra {
            return (v, true);
        }
        let (v, cacheable) = sites::call_site(ra);
        if cacheable {
            c.set((ra, v));
        }
        (v, cacheable)
    }

    #[inline(always)]
    pub fn cached_object(&self, addr: usize) -> Option<&'static Slot> {
        let (k, v) = self.obj_cache[cache_index(addr)].get();
        if k != addr || v == 0 {
            return None;
        }
        // SAFETY: cached values are `&'static Slot` pointers (slots live in a static table).
        let s: &'static Slot = unsafe { &*(v as *const Slot) };
        s.is_live_at(addr).then_some(s)
    }

    /// `cached_pair` for the lane: the slot and the packed ids, when the entry is for this
    /// (object, call site), the object it was made for is still the slot's, and the ids fit.
    #[inline(always)]
    pub fn lane_pair(&self, addr: usize, ra: usize) -> Option<LanePair> {
        let e = self.pair_cache[pair_index(addr, ra)].get();
        if (e.addr ^ addr) | (e.ra ^ ra) != 0 {
            return None;
        }
        // SAFETY: cached slots are `&'static Slot` pointers (slots live in a static table).
        let slot: &'static Slot = unsafe { &*(e.slot as *const Slot) };
        if slot.stored_id() != e.stored_id {
            return None;
        }
        Some(LanePair {
            slot,
            fields: e.fields,
        })
    }

    /// The slot and site cached for a hook on `addr` called from `ra` (owner only).
    #[inline(always)]
    pub fn cached_pair(&self, addr: usize, ra: usize) -> Option<(&'static Slot, SiteId)> {
        let e = self.pair_cache[pair_index(addr, ra)].get();
        if (e.addr ^ addr) | (e.ra ^ ra) != 0 {
            return None;
        }
        // SAFETY: cached slots are `&'static Slot` pointers (slots live in a static table).
        let s: &'static Slot = unsafe { &*(e.slot as *const Slot) };
        s.is_live_at(addr).then_some((s, e.site))
    }

    #[inline]
    pub fn cache_pair(&self, addr: usize, ra: usize, s: &'static Slot, site: SiteId) {
        if sites::shallow() {
            let stored_id = s.stored_id();
            let fields = s
                .live_id()
                .and_then(|id| PackedFields::new(id, site))
                .filter(|_| s.stored_id() == stored_id);
            self.pair_cache[pair_index(addr, ra)].set(PairEntry {
                addr,
                ra,
                slot: s as *const Slot as usize,
                site,
                stored_id: if fields.is_some() { stored_id } else { NO_LANE },
                fields: fields.unwrap_or(PackedFields::EMPTY),
            });
        }
    }

    #[inline]
    pub fn cache_object(&self, addr: usize, s: &'static Slot) {
        self.obj_cache[cache_index(addr)].set((addr, s as *const Slot as usize));
    }

    pub fn clock_hint(&self) -> u64 {
        self.start_after.get()
    }

    pub fn set_clock_hint(&self, k: u64) {
        self.start_after.set(k);
    }

    /// Runs `f` as the runtime: with the reentrancy guard set and `errno` preserved. `None` if
    /// the runtime is already active on this thread (a hook called from inside the runtime, or
    /// from a signal handler that interrupted it) or recording is off.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&Self) -> R) -> Option<R> {
        if self.closed.load(Ordering::Relaxed) || !self.enter() {
            return None;
        }
        let ep = self.errno.get();
        // SAFETY: `ep` is this thread's errno location (cached at thread start).
        let saved = unsafe { *ep };
        let r = f(self);
        // SAFETY: as above.
        unsafe { *ep = saved };
        self.leave();
        Some(r)
    }

    /// Starts a session as the runtime without saving `errno`, for the lock hooks' hot path:
    /// false, and nothing changed, if the runtime is already active on this thread. (A closed
    /// thread is let in: `enter_buf` refuses to record for it.) Every `true` must be followed
    /// by exactly one `leave` (no guard object: nothing with a destructor lives across a real
    /// call). Such a session only reaches code that leaves `errno` alone: everything that can
    /// fail a system call (flushing a chunk, creating an object or a site) is a cold path that
    /// keeps `errno` itself (`keep_errno`). A real function called inside the session (the
    /// trylock hooks' attempt) keeps its own `errno` effect; it must neither block for long
    /// nor unwind, since a signal handler that runs meanwhile is not recorded.
    #[inline(always)]
    pub fn enter(&self) -> bool {
        if self.busy.get() {
            return false;
        }
        self.busy.set(true);
        true
    }

    /// Whether the runtime is at work on this thread (a session is open).
    #[inline]
    pub fn is_busy(&self) -> bool {
        self.busy.get()
    }

    /// Ends the session `enter` started.
    #[inline(always)]
    pub fn leave(&self) {
        self.busy.set(false);
    }

    fn lock_buf(&self) {
        while self
            .buf_lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }

    fn try_lock_buf(&self, attempts: u32) -> bool {
        for _ in 0..attempts.max(1) {
            if self
                .buf_lock
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
        false
    }

    fn unlock_buf(&self) {
        self.buf_lock.store(false, Ordering::Release);
    }

    /// The owner starts working on its buffer. Fast path (no atomic read-modify-write, which
    /// would cost as much as the program's own lock): announce `pushing`, then check that no
    /// foreign flush has begun. The store-then-load pair is ordered against `quiesce`'s
    /// store-then-load by `membarrier` (an asymmetric Dekker handshake). Returns whether the
    /// slow path (the buffer lock) was taken, or `None` when nothing may be recorded.
    ///
    /// Only the slow path looks at whether recording goes on and the thread is open: both
    /// end only after `quiesce` (`finish`, `exec`) or after the thread's state is unreachable
    /// from its hooks (`thread_exit`), and an owner that saw `FOREIGN` clear pushes before any
    /// foreign flush or close can begin (the flusher waits for `pushing` to clear).
    #[inline(always)]
    fn enter_buf(&self) -> Option<bool> {
        self.pushing.store(true, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        if !FOREIGN.load(Ordering::Relaxed) {
            return Some(false);
        }
        self.enter_buf_locked()
    }

    #[cold]
    #[inline(never)]
    fn enter_buf_locked(&self) -> Option<bool> {
        self.pushing.store(false, Ordering::Release);
        self.lock_buf();
        if self.closed.load(Ordering::Relaxed) || !output::recording() {
            self.unlock_buf();
            return None;
        }
        Some(true)
    }

    #[inline]
    fn leave_buf(&self, slow: bool) {
        if slow {
            self.unlock_buf();
        } else {
            self.pushing.store(false, Ordering::Release);
        }
    }

    /// Another thread (or the owner, from `finish`) takes the buffer: waits for the owner to
    /// leave its fast path, then takes the lock. Only after `quiesce`. `attempts` bounds the
    /// waits (signal handlers).
    fn acquire_foreign(&self, attempts: Option<u32>) -> bool {
        let mut n = 0u32;
        while self.pushing.load(Ordering::Acquire) {
            n += 1;
            if attempts.is_some_and(|a| n > a) {
                return false;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
        match attempts {
            None => {
                self.lock_buf();
                true
            }
            Some(a) => self.try_lock_buf(a),
        }
    }

    /// Computes the key of the next event without recording one (an event recorded later, at
    /// this key, when the operation's outcome is known: `pthread_create`, `fork`).
    #[inline]
    pub fn take_key(&self, key: Key<'_>) -> u64 {
        let Some(slow) = self.enter_buf() else {
            return 0; // nothing is recorded: no event will carry it
        };
        // SAFETY: clock is only touched by the owner inside enter/leave, or by a foreign
        // holder of buf_lock, which excludes the owner (see enter_buf).
        let k = sequence::next(unsafe { &mut *self.clock.get() }, key);
        self.leave_buf(slow);
        k
    }

    /// Records one event; returns its key. Inlined so that at each call site the event's kind
    /// is a constant and the encoder's `match` folds away.
    #[inline(always)]
    pub fn emit(&self, kind: EventKind, key: Key<'_>) -> u64 {
        let Some(slow) = self.enter_buf() else {
            return 0;
        };
        // SAFETY: as in take_key.
        let k = sequence::next(unsafe { &mut *self.clock.get() }, key);
        self.push_locked(kind, k);
        self.leave_buf(slow);
        k
    }

    /// The lane: the lock hooks' path for the usual case, straight-line code with no call,
    /// so that a hook needs few registers and instructions. Inside a session (`enter`); with
    /// the object and site already found in the thread's cache. Each `lane_*` records one
    /// event with a `ChunkWriter::try_push_*` and returns whether it did. False means nothing
    /// changed (a foreign flush under way, the global counter, a chunk to flush or start, a
    /// field too large for the one-word encoding), and the caller takes the general path.
    ///
    /// `lane_open` is `enter_buf`'s fast path; on true the caller owns clock and writer until
    /// `lane_close`.
    #[inline(always)]
    fn lane_open(&self) -> bool {
        self.pushing.store(true, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        if FOREIGN.load(Ordering::Relaxed) {
            self.pushing.store(false, Ordering::Release);
            return false;
        }
        true
    }

    #[inline(always)]
    fn lane_close(&self) {
        self.pushing.store(false, Ordering::Release);
    }

    /// Clock and writer, between `lane_open` and `lane_close`.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    fn lane_state(&self) -> (&mut u64, &mut ChunkWriter) {
        // SAFETY: clock and writer are the owner's inside enter_buf's fast path (see
        // take_key); the callers drop the references before `lane_close`.
        unsafe { (&mut *self.clock.get(), &mut *self.writer.get()) }
    }

    /// The lane for a lock taken without waiting: one lock-immediate, acquiring through the
    /// object's clock.
    #[inline(always)]
    pub fn lane_lock_immediate(&self, p: LanePair, mode: LockMode) -> bool {
        if !self.lane_open() {
            return false;
        }
        let (clock, w) = self.lane_state();
        let key = (*clock).max(p.slot.clock.load(Ordering::Acquire)) + 1;
        let done = w.try_push_lock_immediate(p.fields, mode, key);
        if done {
            *clock = key;
        }
        self.lane_close();
        done
    }

    /// The lane for the request before a blocking acquire (at the thread's current key).
    #[inline(always)]
    pub fn lane_lock_request(&self, p: LanePair, mode: LockMode) -> bool {
        if !self.lane_open() {
            return false;
        }
        let (clock, w) = self.lane_state();
        let done = w.try_push_lock_request(p.fields, mode, *clock);
        self.lane_close();
        done
    }

    /// The lane for the acquisition after a blocking acquire returned.
    #[inline(always)]
    pub fn lane_lock_acquired(&self, p: LanePair, mode: LockMode) -> bool {
        if !self.lane_open() {
            return false;
        }
        let (clock, w) = self.lane_state();
        let key = (*clock).max(p.slot.clock.load(Ordering::Acquire)) + 1;
        let done = w.try_push_lock_acquired(p.fields, mode, key);
        if done {
            *clock = key;
        }
        self.lane_close();
        done
    }

    /// The lane for a release: the event and the object's clock, before the caller's real
    /// release. `shared`: others may release the object concurrently (rwlock readers), so
    /// its clock is raised with `fetch_max`.
    #[inline(always)]
    pub fn lane_release(&self, p: LanePair, shared: bool) -> bool {
        if !self.lane_open() {
            return false;
        }
        let (clock, w) = self.lane_state();
        let key = *clock + 1;
        let done = w.try_push_lock_release(p.fields, key);
        if done {
            if shared {
                p.slot.clock.fetch_max(key, Ordering::AcqRel);
            } else {
                // As `Key::ReleaseExclusive`: only the holder writes the clock.
                p.slot.clock.store(key, Ordering::Relaxed);
            }
            *clock = key;
        }
        self.lane_close();
        done
    }

    /// Records one event at a key taken earlier with `take_key`.
    pub fn emit_at(&self, kind: EventKind, key: u64) {
        let Some(slow) = self.enter_buf() else {
            return;
        };
        self.push_locked(kind, key);
        self.leave_buf(slow);
    }

    /// Records a lock-request of `lock` at `site` immediately followed by its acquisition at
    /// `key` (the real lock was taken without waiting): one buffer session, one encoded event
    /// that every reader sees as the two (`ChunkWriter::push_lock_immediate`).
    #[inline(always)]
    pub fn emit_lock_immediate(&self, lock: ObjectId, mode: LockMode, site: SiteId, key: Key<'_>) {
        let Some(slow) = self.enter_buf() else {
            return;
        };
        // SAFETY: as in take_key.
        let k = sequence::next(unsafe { &mut *self.clock.get() }, key);
        let (w, k) = self.writer_at(k);
        if w.push_lock_immediate(lock, mode, site, k).is_err() {
            output::count_lost(1);
        }
        self.leave_buf(slow);
    }

    #[inline(always)]
    fn push_locked(&self, kind: EventKind, key: u64) {
        let (w, key) = self.writer_at(key);
        if w.push_fast(&Event { key, kind }).is_err() {
            output::count_lost(1);
        }
    }

    /// The writer, ready for one more push (the chunk flushed when full, started when empty),
    /// and `key` raised to its last key. Inside enter/leave (which refuses a closed thread),
    /// or a foreign holder of buf_lock that checked `closed`.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    fn writer_at(&self, key: u64) -> (&mut ChunkWriter, u64) {
        // SAFETY: the writer is ours: owner inside enter/leave, or foreign under buf_lock; the
        // reference does not outlive that session (callers push and drop it).
        let w = unsafe { &mut *self.writer.get() };
        if w.needs_service() {
            service_writer(w);
        }
        let key = key.max(w.last_key());
        (w, key)
    }

    /// Flushes the buffer (thread exit, finish, exec). Foreign callers must `quiesce` first.
    /// `attempts` bounds the waits (a signal handler may have interrupted the owner); returns
    /// false if not flushed.
    pub fn flush(&self, attempts: Option<u32>) -> bool {
        if !self.acquire_foreign(attempts) {
            return false;
        }
        // SAFETY: guarded by buf_lock with the owner off its fast path.
        flush_writer(unsafe { &mut *self.writer.get() }, attempts);
        self.unlock_buf();
        true
    }

    /// The owner enters a blocking call whose request or wait it has just recorded; returns
    /// what to hand `end_wait` (a signal handler's wait nests inside the one it interrupted).
    /// Without a flusher (a program that never created a thread) the thread writes its
    /// buffer first: it may wait for ever, and a kill would lose the request.
    #[inline(always)]
    pub fn begin_wait(&self, wait: Wait) -> u8 {
        if crate::flusher::absent() {
            self.flush_before_waiting();
        }
        let outer = self.waiting.load(Ordering::Relaxed);
        self.waiting.store(wait as u8, Ordering::Relaxed);
        outer
    }

    #[cold]
    #[inline(never)]
    fn flush_before_waiting(&self) {
        // As the runtime: a signal handler that runs meanwhile must not reach the buffer.
        if self.enter() {
            self.flush(None);
            self.leave();
        }
    }

    /// The flusher's look at the buffer (after `quiesce`): writes it when the owner recorded
    /// nothing since the last look, or when its oldest event is older than `max_age_ns`.
    /// Whether it recorded anything since.
    pub fn flush_if_stale(&self, now_ns: u64, max_age_ns: u64) -> bool {
        if self.closed.load(Ordering::Acquire) || !self.acquire_foreign(None) {
            return false;
        }
        // SAFETY: guarded by buf_lock with the owner off its fast path.
        let w = unsafe { &mut *self.writer.get() };
        let now = (w.chunks_flushed(), w.pending_events());
        let progressed = now != self.flusher_saw.get();
        let old = now_ns.saturating_sub(w.start_ns()) > max_age_ns;
        if now.1 > 0 && (!progressed || old) {
            flush_writer(w, None);
        }
        self.flusher_saw
            .set((w.chunks_flushed(), w.pending_events()));
        self.unlock_buf();
        progressed
    }

    /// The blocking call returned (or unwinds).
    #[inline(always)]
    pub fn end_wait(&self, outer: u8) {
        self.waiting.store(outer, Ordering::Relaxed);
    }

    /// `finish`: the thread's last events, and it is closed (no more events). `exits`: the
    /// thread is ending the process (`exit`, `_exit`), so its last event is a `thread-exit`;
    /// any other thread was running or waiting when the process ended under it, which its
    /// end state says (it gets no `thread-exit`). Only after `quiesce`; `attempts` bounds
    /// every wait (signal handlers). `None` when the thread was closed already or its buffer
    /// could not be had in time.
    pub fn close_at_end(&self, attempts: Option<u32>, exits: bool) -> Option<EndOfThread> {
        if self.closed.load(Ordering::Acquire) || !self.acquire_foreign(attempts) {
            return None;
        }
        let state = if exits {
            {
                // SAFETY: the writer is guarded by buf_lock with the owner off its fast path;
                // the reference ends with this block.
                let w = unsafe { &mut *self.writer.get() };
                if w.is_full() {
                    // Room for the exit, so that pushing it flushes nothing (unbounded).
                    flush_writer(w, attempts);
                }
            }
            // SAFETY: as above; the owner writes its clock only under the same guard. This
            // reads it and leaves it alone (the owner's repeat check reads it outside any
            // lock, `record_access`: the owner is its only writer).
            let mut clock = unsafe { *self.clock.get() };
            let k = sequence::next(&mut clock, Key::Tick);
            self.push_locked(EventKind::ThreadExit, k);
            None
        } else {
            Some(match self.waiting.load(Ordering::Relaxed) {
                0 => ThreadEndState::Running,
                w if w == Wait::Timed as u8 => ThreadEndState::BlockedWithTimeout,
                _ => ThreadEndState::Blocked,
            })
        };
        // SAFETY: as above.
        flush_writer(unsafe { &mut *self.writer.get() }, attempts);
        let executed = self.executed.swap(0, Ordering::Relaxed);
        let recorded = self.recorded.swap(0, Ordering::Relaxed);
        self.closed.store(true, Ordering::Release);
        self.unlock_buf();
        Some(EndOfThread {
            thread: self.tid(),
            state,
            counts: (executed > 0 || recorded > 0).then_some(AccessCounts {
                thread: self.tid(),
                executed,
                recorded,
            }),
        })
    }

    /// What the thread is doing now, for a `--dump-on` snapshot: its buffer is written (to the
    /// flight recorder's window) and its state read under the buffer's lock, as `close_at_end`
    /// does, but the thread goes on recording. `None` for a closed thread or without the lock
    /// in time.
    pub fn snapshot_state(&self, attempts: Option<u32>) -> Option<(ThreadId, ThreadEndState)> {
        if self.closed.load(Ordering::Acquire) || !self.acquire_foreign(attempts) {
            return None;
        }
        let state = match self.waiting.load(Ordering::Relaxed) {
            0 => ThreadEndState::Running,
            w if w == Wait::Timed as u8 => ThreadEndState::BlockedWithTimeout,
            _ => ThreadEndState::Blocked,
        };
        // SAFETY: guarded by buf_lock with the owner off its fast path.
        flush_writer(unsafe { &mut *self.writer.get() }, attempts);
        self.unlock_buf();
        Some((self.tid(), state))
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub fn reopen(&self) {
        self.closed.store(false, Ordering::Release);
    }

    /// fork child: a fresh writer (the pending events belong to the parent's trace).
    ///
    /// # Safety
    /// Only in a fork child, on its only thread, which owns this state: nothing else can
    /// reach the writer or the access state while it is replaced.
    pub unsafe fn reset_for_child(&self, tid: ThreadId) {
        self.tid.store(tid, Ordering::Relaxed);
        self.parent.set(None);
        // SAFETY: the caller's contract: no other reference to the writer exists.
        unsafe { *self.writer.get() = new_writer(tid) };
        self.buf_lock.store(false, Ordering::Relaxed);
        self.pushing.store(false, Ordering::Relaxed);
        self.closed.store(false, Ordering::Relaxed);
        self.busy.set(false);
        self.os_tid.set(gettid());
        for c in &self.site_cache {
            c.set((0, 0));
        }
        for c in &self.obj_cache {
            c.set((0, 0));
        }
        for c in &self.pair_cache {
            c.set(EMPTY_PAIR);
        }
        if let Some(a) = self.access_state_mut() {
            a.reset_for_child();
        }
        self.held_stripe.set(std::ptr::null());
        self.executed.store(0, Ordering::Relaxed);
        self.recorded.store(0, Ordering::Relaxed);
    }

    /// Binds this state to the calling thread.
    pub fn attach(&self) {
        self.os_tid.set(gettid());
        // SAFETY: __errno_location returns this thread's errno; valid for its lifetime.
        self.errno.set(unsafe { libc::__errno_location() });
    }
}

// --- memory accesses (the ThreadSanitizer-ABI hooks, `hooks/tsan.rs`) ------------------------

/// A blocking call a thread is in (`ThreadState::begin_wait`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// It returns when the awaited thing happens (or a signal handler's code ends it).
    Untimed = 1,
    /// It also returns when its timeout expires (`timedlock`, `timedwait`, `timedjoin_np`).
    Timed = 2,
}

/// What `ThreadState::close_at_end` leaves for the tables.
pub struct EndOfThread {
    pub thread: ThreadId,
    /// `None`: the thread exited (its last event is a `thread-exit`).
    pub state: Option<ThreadEndState>,
    /// Its memory accesses since the last record, if it had some.
    pub counts: Option<AccessCounts>,
}

/// What `ThreadState::atomic_begin` hands the program's stub, and it hands back to
/// `atomic_end`: the stripe whose lock is held.
pub type AtomicToken = &'static Stripe;

#[inline(always)]
fn bump(c: &AtomicU64) {
    // Only the owner writes: a load and a store, no read-modify-write.
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl ThreadState {
    /// The access state, if allocated. Owner only, inside a session (`busy` set), which is
    /// what keeps this the only reference: a signal handler's hooks find `busy` and leave.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    fn access_state_mut(&self) -> Option<&mut AccessState> {
        // SAFETY: the pointer is null or a live allocation owned by this state, only
        // dereferenced by the owner thread inside a session (see above), or by the fork child
        // handler on the only thread left.
        unsafe { self.accesses.get().as_mut() }
    }

    /// The access state, allocated on first use.
    #[cold]
    #[inline(never)]
    fn new_access_state(&self) {
        if self.accesses.get().is_null() {
            keep_errno(|| self.accesses.set(Box::into_raw(AccessState::new())));
            accesses::set_instrumented();
        }
    }

    /// A plain read or write (`info`: `size << 1 | write`) at `addr` by the instruction
    /// before `pc`: recorded unless it repeats one of this epoch (`accesses.rs`).
    ///
    /// The usual case, a repeat, only reads: the thread's key (only this thread writes it)
    /// and one entry of its cache, with no session and no buffer. Everything else is out of
    /// line, in a session.
    #[inline(always)]
    pub fn record_access(&self, addr: usize, info: usize, pc: usize) {
        if self.busy.get() || self.ignore_accesses.get() != 0 {
            return;
        }
        bump(&self.executed);
        let a = self.accesses.get();
        if a.is_null() {
            return self.record_access_slow(addr, info, pc);
        }
        // SAFETY: the owner is the only writer of its clock (`close_at_end` only reads
        // it); `a` is this thread's live access state, only read here.
        if unsafe { AccessState::seen(a, addr, pc, info, *self.clock.get()) } {
            return;
        }
        self.record_new_access(addr, info, pc);
    }

    /// `record_access` for an access to record (or a repeat the read-only check could not
    /// tell): in a session and the lane, the cache updated, the site found, the event pushed.
    #[inline(never)]
    fn record_new_access(&self, addr: usize, info: usize, pc: usize) {
        if !sites::shallow() {
            return self.record_access_slow(addr, info, pc);
        }
        self.busy.set(true);
        if !self.lane_open() {
            self.busy.set(false);
            return self.record_access_slow(addr, info, pc);
        }
        let Some(a) = self.access_state_mut() else {
            self.lane_close();
            self.busy.set(false);
            return;
        };
        // SAFETY: the clock is the owner's inside the lane (see take_key).
        let epoch = unsafe { *self.clock.get() };
        if a.repeat(addr, pc, info, epoch) {
            self.lane_close();
            self.busy.set(false);
            return;
        }
        let site = match a.cached_site(pc) {
            Some(site) => site,
            None => {
                // A new instruction: its site is found outside the buffer (it may write a
                // table record), then the event goes in at the same key (only this thread
                // changes it).
                self.lane_close();
                let site = keep_errno(|| sites::site(pc));
                a.cache_site(pc, site);
                let Some(slow) = self.enter_buf() else {
                    self.busy.set(false);
                    return;
                };
                self.push_access(addr, info, site, epoch);
                self.leave_buf(slow);
                self.busy.set(false);
                return;
            }
        };
        self.push_access(addr, info, site, epoch);
        self.lane_close();
        self.busy.set(false);
    }

    /// `record_access` on the general path: the thread's first access, deeper stacks (the
    /// site, from the shadow stack, is what tells repeats apart), or a foreign flush under
    /// way (the buffer lock).
    #[cold]
    #[inline(never)]
    fn record_access_slow(&self, addr: usize, info: usize, pc: usize) {
        if self.accesses.get().is_null() {
            self.new_access_state();
        }
        self.busy.set(true);
        let Some(a) = self.access_state_mut() else {
            self.busy.set(false);
            return;
        };
        let deep_site = if sites::shallow() {
            None
        } else {
            Some(keep_errno(|| a.deep_site(pc, sites::depth())))
        };
        let site = deep_site.unwrap_or_else(|| match a.cached_site(pc) {
            Some(s) => s,
            None => {
                let s = keep_errno(|| sites::site(pc));
                a.cache_site(pc, s);
                s
            }
        });
        if let Some(slow) = self.enter_buf() {
            // SAFETY: the clock is the owner's inside enter_buf (see take_key).
            let epoch = unsafe { *self.clock.get() };
            let who = deep_site.map_or(pc, |s| s as usize);
            if !a.repeat(addr, who, info, epoch) {
                self.push_access(addr, info, site, epoch);
            }
            self.leave_buf(slow);
        }
        self.busy.set(false);
    }

    /// Inside enter_buf: one read or write event at the thread's current key.
    #[inline(always)]
    fn push_access(&self, addr: usize, info: usize, site: SiteId, key: u64) {
        bump(&self.recorded);
        let write = info & 1 != 0;
        let size = u32::try_from(info >> 1).unwrap_or(u32::MAX);
        // SAFETY: the writer is the owner's inside enter_buf (see writer_at).
        let w = unsafe { &mut *self.writer.get() };
        if w.try_push_access(write, size, addr as u64, site, key) {
            return;
        }
        self.push_access_general(write, size, addr, site, key);
    }

    #[inline(never)]
    fn push_access_general(&self, write: bool, size: u32, addr: usize, site: SiteId, key: u64) {
        let addr = addr as u64;
        let kind = if write {
            EventKind::Write { addr, size, site }
        } else {
            EventKind::Read { addr, size, site }
        };
        self.push_locked(kind, key);
    }

    /// The site of an instrumented instruction at `pc` (an atomic, a fence, an annotation):
    /// through the access state's cache, or the shadow stack with deeper stacks. Inside a
    /// session, outside the buffer.
    pub fn instrumented_site(&self, pc: usize) -> SiteId {
        if self.accesses.get().is_null() {
            self.new_access_state();
        }
        let Some(a) = self.access_state_mut() else {
            return keep_errno(|| sites::site(pc));
        };
        if !sites::shallow() {
            return keep_errno(|| a.deep_site(pc, sites::depth()));
        }
        if let Some(s) = a.cached_site(pc) {
            return s;
        }
        let s = keep_errno(|| sites::site(pc));
        a.cache_site(pc, s);
        s
    }

    /// The site of an allocation or free called from `pc`: through the shadow stack in an
    /// instrumented thread with deeper stacks, else as any hook's.
    pub fn alloc_site(&self, pc: usize) -> SiteId {
        if !self.accesses.get().is_null() {
            self.instrumented_site(pc)
        } else {
            self.site(pc)
        }
    }

    /// `operator new`/`delete`: the program's return address, for the allocator call inside.
    /// False (and nothing changed) when one is pending already.
    pub fn set_pending_site(&self, ra: usize) -> bool {
        if self.pending_site.get() != 0 {
            return false;
        }
        self.pending_site.set(ra);
        true
    }

    /// The address `set_pending_site` left, once.
    pub fn take_pending_site(&self) -> Option<usize> {
        let ra = self.pending_site.replace(0);
        (ra != 0).then_some(ra)
    }

    /// `__tsan_func_entry`: a call from `pc` (the shadow stack, kept with deeper stacks).
    #[inline]
    pub fn func_entry(&self, pc: usize) {
        if self.busy.get() {
            return;
        }
        if self.accesses.get().is_null() {
            self.new_access_state();
        }
        self.busy.set(true);
        if let Some(a) = self.access_state_mut() {
            a.enter(pc);
        }
        self.busy.set(false);
    }

    /// `__tsan_func_exit`.
    #[inline]
    pub fn func_exit(&self) {
        if self.busy.get() {
            return;
        }
        self.busy.set(true);
        if let Some(a) = self.access_state_mut() {
            a.exit();
        }
        self.busy.set(false);
    }

    /// Before an atomic operation on `addr`: `Some` when it is to be recorded, with the
    /// address's stripe locked and the session open (`busy`) until `atomic_end`.
    #[inline]
    pub fn atomic_begin(&self, addr: usize) -> Option<AtomicToken> {
        if self.busy.get() || self.ignore_sync.get() != 0 || self.closed.load(Ordering::Relaxed) {
            return None;
        }
        self.busy.set(true);
        let s = stripes::of(addr);
        s.lock();
        self.held_stripe.set(s);
        Some(s)
    }

    /// After the atomic operation `atomic_begin` allowed: its event, keyed through the
    /// stripe's clock while the lock still orders it, then the lock and the session end.
    pub fn atomic_end(
        &self,
        s: AtomicToken,
        addr: usize,
        op: AtomicOp,
        size: u32,
        order: MemoryOrder,
        pc: usize,
    ) {
        let ep = self.errno.get();
        // SAFETY: `ep` is this thread's errno location (cached at thread start).
        let saved = unsafe { *ep };
        let site = self.instrumented_site(pc);
        self.emit(
            EventKind::Atomic {
                op,
                addr: addr as u64,
                size,
                order,
                site,
            },
            Key::Exchange(&s.clock),
        );
        s.unlock();
        self.held_stripe.set(std::ptr::null());
        // SAFETY: as above.
        unsafe { *ep = saved };
        self.busy.set(false);
    }

    /// Writes the thread's access counts since the last record, if it had accesses. The
    /// owner, or `finish` once the owner is off its buffer.
    pub fn write_access_counts(&self) {
        let executed = self.executed.swap(0, Ordering::Relaxed);
        let recorded = self.recorded.swap(0, Ordering::Relaxed);
        if executed > 0 || recorded > 0 {
            output::table_record(&TableRecord::AccessCounts(AccessCounts {
                thread: self.tid(),
                executed,
                recorded,
            }));
        }
    }
}

/// A thread's chunk writer, compressing as the trace's prefix says (`output::compress_mode`):
/// its buffers, the compressor's included, are allocated here, once per thread, so that a
/// flush allocates nothing.
fn new_writer(tid: ThreadId) -> ChunkWriter {
    let mode = output::compress_mode();
    let bytes = match CHUNK_SIZE.load(Ordering::Relaxed) {
        0 if mode.codec() == Some(foresight_trace::frame::CODEC_ZSTD) => ZSTD_CHUNK_BYTES,
        0 => CHUNK_BYTES,
        n => n,
    };
    ChunkWriter::with_compression(tid, bytes, mode)
}

/// Writes the writer's chunk (if it holds events); `attempts` bounds the wait for the table
/// buffer that must go first (signal handlers).
#[cold]
#[inline(never)]
fn flush_writer(w: &mut ChunkWriter, attempts: Option<u32>) {
    keep_errno(|| {
        let n = w.pending_events();
        w.flush_into(output::now_ns(), |bytes| {
            output::write_event_chunk(bytes, n, attempts)
        });
    })
}

/// The writer's rare cases, out of the hot path: flush a full chunk, start an empty one.
#[cold]
#[inline(never)]
fn service_writer(w: &mut ChunkWriter) {
    if w.is_full() {
        flush_writer(w, None);
    }
    keep_errno(|| w.set_start_ns(output::now_ns()));
}

/// Runs `f` and puts the program's `errno` back afterwards: around every piece of the runtime
/// that may make a failing system call (see `ThreadState::enter`).
#[inline]
pub fn keep_errno<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: __errno_location returns the calling thread's errno, valid for its lifetime.
    let ep = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved = unsafe { *ep };
    let r = f();
    // SAFETY: as above.
    unsafe { *ep = saved };
    r
}

pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
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

/// Gives up one owner's share of a state made by `ThreadState::new` and `Box::into_raw`; the
/// last owner frees it.
///
/// # Safety
/// `p` came from `Box::into_raw` of a `ThreadState`, the caller is one of its owners (the
/// thread at its exit, its creator after the real create), gives up its share once, and no
/// longer uses `p`; the thread's own share is given up only once it is unregistered and no
/// longer current.
pub unsafe fn release(p: *mut ThreadState) {
    // SAFETY: the caller still owns a share: the state is allocated.
    let last = unsafe { (*p).owners.fetch_sub(1, Ordering::AcqRel) } == 1;
    if last {
        // SAFETY: every other owner has given up its share and no longer uses the state.
        drop(unsafe { Box::from_raw(p) });
    }
}

// --- registry -------------------------------------------------------------------------------

struct Registry {
    live: Vec<*mut ThreadState>,
}

// SAFETY: the pointers are only dereferenced under the registry lock (finish) or by their owner.
unsafe impl Send for Registry {}

static REGISTRY: SpinLock<Registry> = SpinLock::new(Registry { live: Vec::new() });

pub fn register(p: *mut ThreadState) {
    REGISTRY.lock().live.push(p);
}

pub fn unregister(p: *mut ThreadState) {
    let mut r = REGISTRY.lock();
    if let Some(i) = r.live.iter().position(|&q| q == p) {
        r.live.swap_remove(i);
    }
}

/// Whether no thread of the program is registered (the last one is exiting, or has).
pub fn no_live_threads() -> bool {
    REGISTRY.lock().live.is_empty()
}

/// Runs `f` on every live thread state, under the registry lock (`attempts`: bounded wait).
pub fn for_each_live(attempts: Option<u32>, mut f: impl FnMut(&ThreadState)) {
    let guard = match attempts {
        Some(a) => REGISTRY.try_lock_for(a),
        None => Some(REGISTRY.lock()),
    };
    if let Some(r) = guard {
        for &p in &r.live {
            // SAFETY: registered states stay allocated while registered (unregister takes the
            // lock we hold before the owner frees its state).
            f(unsafe { &*p });
        }
    }
}

pub fn lock_for_fork() {
    FLUSHER.raw_lock();
    REGISTRY.raw_lock();
}

/// fork child: only the forking thread survives; the others' states are leaked (their buffers
/// hold the parent's events, which the parent writes).
///
/// # Safety
/// Only in the fork child handler, after `lock_for_fork`.
pub unsafe fn child_after_fork(me: *mut ThreadState) {
    // SAFETY: forwarded contract: the locks were taken by lock_for_fork in the parent.
    unsafe {
        REGISTRY.force_unlock();
        FLUSHER.force_unlock();
    }
    NEXT_THREAD.store(0, Ordering::Relaxed);
    let mut r = REGISTRY.lock();
    // A thread of the parent may have been inside an atomic operation: its stripe stays
    // locked in the child, where nobody would release it.
    for &p in &r.live {
        // SAFETY: registered states stay allocated (they are leaked below, not freed), and
        // the child has no other thread that could touch them.
        let held = unsafe { (*p).held_stripe.get() };
        if !held.is_null() {
            // SAFETY: a stripe pointer comes from the static stripe table.
            unsafe { (*held).unlock() };
        }
    }
    // Leak the old Vec's other entries; keep only ourselves.
    let old = std::mem::take(&mut r.live);
    std::mem::forget(old);
    if !me.is_null() {
        r.live.push(me);
    }
}

/// # Safety
/// Only after `lock_for_fork`, in the parent.
pub unsafe fn parent_after_fork() {
    // SAFETY: forwarded contract.
    unsafe {
        REGISTRY.force_unlock();
        FLUSHER.force_unlock();
    }
}

pub fn next_thread_id() -> ThreadId {
    NEXT_THREAD.fetch_add(1, Ordering::Relaxed)
}

// --- pthread_t → thread --------------------------------------------------------------------

const PT_SLOTS: usize = 1 << 14;

struct PtSlot {
    pt: AtomicUsize,
    tid: AtomicU32,
}

static PTMAP: [PtSlot; PT_SLOTS] = [const {
    PtSlot {
        pt: AtomicUsize::new(0),
        tid: AtomicU32::new(0),
    }
}; PT_SLOTS];

/// How `pt_slot` treats a `pthread_t` it does not find.
#[derive(Clone, Copy, PartialEq)]
enum Missing {
    Give,
    Insert,
}

/// The slot of `pt`, and whether this call inserted it.
fn pt_slot(pt: usize, missing: Missing) -> Option<(&'static PtSlot, bool)> {
    if pt == 0 {
        return None;
    }
    let mut i = (pt.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50) & (PT_SLOTS - 1);
    for _ in 0..512 {
        let s = &PTMAP[i];
        let cur = s.pt.load(Ordering::Acquire);
        if cur == pt {
            return Some((s, false));
        }
        if cur == 0 {
            if missing == Missing::Give {
                return None;
            }
            match s
                .pt
                .compare_exchange(0, pt, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some((s, true)),
                Err(v) if v == pt => return Some((s, false)),
                Err(_) => {}
            }
        }
        i = (i + 1) & (PT_SLOTS - 1);
    }
    None
}

/// `pt` is thread `tid`.
pub fn pt_name(pt: usize, tid: ThreadId) {
    if let Some((s, _)) = pt_slot(pt, Missing::Insert) {
        s.tid.store(tid, Ordering::Release);
    }
}

/// The thread itself, at start: its `pthread_t` names it, unless the creator is writing that
/// very entry now (then it waits for the creator's two stores).
pub fn pt_started(pt: usize, t: &ThreadState) {
    let mut spins = 0u32;
    loop {
        match t.naming.compare_exchange(
            NAMING_OPEN,
            NAMING_THREAD,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                pt_name(pt, t.tid());
                t.naming.store(NAMING_THREAD_DONE, Ordering::Release);
                return;
            }
            Err(NAMING_CREATOR) => back_off(&mut spins),
            // The creator named it already.
            Err(_) => return,
        }
    }
}

/// One round of waiting for another thread's two stores into the map.
fn back_off(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// The creator, after `pthread_create` returned: names `pt` for a join that comes before the
/// child started (an entry left by an earlier thread with the same `pthread_t` is replaced).
/// Not once the child has named itself: it may have exited since (its exit key must stay), or
/// even have left its `pthread_t` to a newer thread.
/// When the child came first, waits until its entry is written: the creator's next call may
/// be a join of it, which must find it.
pub fn pt_created(pt: usize, child: &ThreadState) {
    match child.naming.compare_exchange(
        NAMING_OPEN,
        NAMING_CREATOR,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => {
            pt_name(pt, child.tid());
            child.naming.store(NAMING_CREATOR_DONE, Ordering::Release);
        }
        Err(NAMING_THREAD) => {
            let mut spins = 0u32;
            while child.naming.load(Ordering::Acquire) == NAMING_THREAD {
                back_off(&mut spins);
            }
        }
        Err(_) => {}
    }
}

/// The thread a `pthread_t` names.
pub fn pt_lookup(pt: usize) -> Option<ThreadId> {
    let (s, _) = pt_slot(pt, Missing::Give)?;
    Some(s.tid.load(Ordering::Acquire))
}

// --- exit keys -----------------------------------------------------------------------------

/// The key of each thread's `thread-exit`, for its joiner, by thread id (never reused, unlike
/// a `pthread_t`: once a join returns, the joined thread's `pthread_t` may name a new thread
/// before the joiner looks). Direct-mapped: an entry is overwritten only by the exit of a
/// thread 4096 ids later, and a seqlock-style check of the id tells a stale entry.
const EXIT_SLOTS: usize = 1 << 12;

struct ExitSlot {
    /// The thread id + 1, or 0 while the entry is written.
    tid: AtomicU32,
    key: AtomicU64,
}

static EXITS: [ExitSlot; EXIT_SLOTS] = [const {
    ExitSlot {
        tid: AtomicU32::new(0),
        key: AtomicU64::new(0),
    }
}; EXIT_SLOTS];

/// Thread `tid` exited at `key`.
pub fn exited(tid: ThreadId, key: u64) {
    let s = &EXITS[tid as usize & (EXIT_SLOTS - 1)];
    s.tid.store(0, Ordering::Release);
    s.key.store(key, Ordering::Release);
    s.tid.store(tid.wrapping_add(1), Ordering::Release);
}

/// The key of thread `tid`'s exit, if it exited and its entry is still there.
pub fn exit_key(tid: ThreadId) -> Option<u64> {
    let s = &EXITS[tid as usize & (EXIT_SLOTS - 1)];
    let want = tid.wrapping_add(1);
    if s.tid.load(Ordering::Acquire) != want {
        return None;
    }
    let key = s.key.load(Ordering::Acquire);
    (s.tid.load(Ordering::Acquire) == want).then_some(key)
}

/// fork child: forget the parent's threads.
pub fn pt_reset() {
    for s in PTMAP.iter() {
        s.pt.store(0, Ordering::Relaxed);
    }
    for s in EXITS.iter() {
        s.tid.store(0, Ordering::Relaxed);
    }
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
