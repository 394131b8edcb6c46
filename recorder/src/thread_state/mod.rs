//! Per-thread recording state: one `ThreadState` per thread of the program, allocated once
//! (from the runtime's mmap allocator) when the thread is created or first seen, and found
//! through a thread-local pointer. It holds the thread's `ChunkWriter` (one chunk buffer), its
//! Lamport clock, its reentrancy guard and the caches in front of the shared tables. The
//! buffer has a one-word lock: the owner takes it for each event (uncontended), and only a
//! foreign flush (`finish`, `exec`, the flusher, after `quiesce`) takes it from another thread.
//!
//! One concern per module:
//! - `tls`: the thread-local pointer and the `Current` handle that `current()` gives hooks.
//! - `session`: the reentrancy guard (`with`, `enter`, `leave`) and `keep_errno`.
//! - `buffer`: the chunk buffer, its lock and the foreign flushes' side of it; events, keys,
//!   waits, a thread's end.
//! - `lane`: the lock hooks' straight-line path into the buffer.
//! - `caches`: the site, object and (object, call site) caches.
//! - `memory_access`: an instrumented thread's accesses, atomics and shadow stack.
//! - `registry`: the live threads and thread ids; `fork`: what a fork does to them.
//! - `pthreads`: the `pthread_t` → thread map and the exit keys joiners read.

mod buffer;
mod caches;
mod fork;
mod lane;
mod memory_access;
mod pthreads;
mod registry;
mod session;
mod tls;

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

use foresight_trace::event::{SiteId, ThreadId};
use foresight_trace::ChunkWriter;

use crate::accesses::AccessState;
use crate::stripes::Stripe;

pub use buffer::{set_chunk_bytes, EndOfThread, Wait, CHUNK_BYTES, ZSTD_CHUNK_BYTES};
pub use caches::LanePair;
pub use fork::{child_after_fork, lock_for_fork, parent_after_fork};
pub use memory_access::AtomicToken;
pub use pthreads::{exit_key, exited, pt_created, pt_lookup, pt_name, pt_reset, pt_started};
pub use registry::{
    flusher_round, for_each_live, next_thread_id, no_live_threads, register, unregister,
};
pub use session::keep_errno;
pub use tls::{current, current_ptr, mark_dead, set_current, take_current, unseen, Current};

use buffer::new_writer;
use caches::{PairEntry, CACHE, EMPTY_PAIR};
use pthreads::NAMING_OPEN;
use registry::NEXT_THREAD;

pub struct ThreadState {
    /// Written when the state is made and in a fork child (the only thread left); read by
    /// `finish` on other threads.
    tid: AtomicU32,
    parent: Cell<Option<ThreadId>>,
    /// Reentrancy guard: set while the runtime works on this thread's behalf.
    busy: Cell<bool>,
    /// The owner's sessions on its buffer, counted: odd while it is between `enter_buf` and
    /// `leave_buf` on the fast path (see `quiesce`), raised again by every session on the
    /// locked path. Only the owner writes it; the flusher reads it to tell a thread that
    /// recorded since its last look from one that went idle, without stopping either.
    activity: AtomicU32,
    /// Set by the flusher's round on the threads it will look at (`flusher_round`): their
    /// owners take the buffer's lock, as under `quiesce`, while the others keep their fast
    /// path.
    flush_mark: AtomicBool,
    /// When the buffer's current chunk was started (`set_start_ns`), published for the
    /// flusher's glance; stale while the chunk is empty.
    chunk_start_ns: AtomicU64,
    /// Guards `writer` and `clock` once `quiesce` ran: the owner's slow path and foreign
    /// flushes (`finish`, `exec`) take it.
    buf_lock: AtomicBool,
    /// No more events (exit recorded, or the trace was finished).
    closed: AtomicBool,
    /// Inside a blocking call its last event announced (a lock request, a wait): a `Wait`
    /// (0: not waiting), set by the owner around the real call, read by `finish` for the
    /// thread's end state.
    waiting: AtomicU8,
    /// How many lock acquisitions this thread has recorded and not yet released (a
    /// condition wait releases and takes back its mutex): a blocking call is recorded only
    /// while it is above 0. Written by the owner with plain loads and stores; 64 bits, so that
    /// an acquisition adds one without a test (no program holds 2^64 locks).
    locks_held: AtomicU64,
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
    /// The program's own site for the thread this thread creates next: `foresight-sync`'s
    /// spawns name their caller's line, where the `pthread_create` hook would see a return
    /// address inside Rust's `std` (`hooks/sync.rs`, `hooks/thread.rs`).
    spawn_site: Cell<Option<SiteId>>,
    /// Owners of the allocation: the thread, and its creator until `pthread_create` has
    /// returned to it (the child may run and exit first). The last one frees it (`release`).
    owners: AtomicU32,
    /// Who names the thread's `pthread_t` in the map first (`pt_created`, `pt_started`).
    naming: AtomicU8,
    /// What the flusher saw at its last glance: the owner's `activity`, and whether the
    /// buffer was empty then. Only the flusher touches it, under the registry lock.
    flusher_saw: Cell<(u32, bool)>,
}

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
            activity: AtomicU32::new(0),
            flush_mark: AtomicBool::new(false),
            chunk_start_ns: AtomicU64::new(0),
            buf_lock: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            waiting: AtomicU8::new(0),
            locks_held: AtomicU64::new(0),
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
            spawn_site: Cell::new(None),
            owners: AtomicU32::new(1),
            naming: AtomicU8::new(NAMING_OPEN),
            flusher_saw: Cell::new((0, true)),
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

    pub fn clock_hint(&self) -> u64 {
        self.start_after.get()
    }

    pub fn set_clock_hint(&self, k: u64) {
        self.start_after.set(k);
    }

    /// Names (or, `None`, forgets) the site of the next thread this thread creates.
    pub fn set_spawn_site(&self, site: Option<SiteId>) {
        self.spawn_site.set(site);
    }

    /// The site `set_spawn_site` left, once.
    pub fn take_spawn_site(&self) -> Option<SiteId> {
        self.spawn_site.take()
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub fn reopen(&self) {
        self.closed.store(false, Ordering::Release);
    }

    /// Binds this state to the calling thread.
    pub fn attach(&self) {
        self.os_tid.set(gettid());
        // SAFETY: __errno_location returns this thread's errno; valid for its lifetime.
        self.errno.set(unsafe { libc::__errno_location() });
    }
}

pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
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
