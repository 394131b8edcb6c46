//! The thread's chunk buffer: events and keys pushed by the owner, and the foreign flushes
//! (`finish`, `exec`, the flusher) that take the buffer from another thread after `quiesce`.
//! The owner's fast path announces itself (`activity` odd) and takes no lock; a foreign flush
//! makes owners take the buffer's lock instead (`crate::quiesce` for all of them, the
//! flusher's mark for one).

use std::sync::atomic::{compiler_fence, AtomicUsize, Ordering};

use foresight_trace::event::{Event, EventKind, LockMode, ObjectId, SiteId, ThreadId};
use foresight_trace::tables::{AccessCounts, ThreadEndState};
use foresight_trace::ChunkWriter;

use super::session::keep_errno;
use super::ThreadState;
use crate::context::Context;
use crate::sequence::{self, Key};
use crate::{output, quiesce, sink, state};

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

/// Spins on a held buffer lock before yielding the processor instead.
const LOCK_SPINS: u32 = 100;

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

impl ThreadState {
    fn lock_buf(&self) {
        let mut spins = 0u32;
        while self
            .buf_lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // The holder may be writing a chunk (compressing it) or be descheduled on a busy
            // machine: after a short spin, give the processor to it.
            if spins < LOCK_SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
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
    /// would cost as much as the program's own lock): announce itself (`activity` odd), then check that no
    /// foreign flush has begun. The store-then-load pair is ordered against `quiesce`'s
    /// store-then-load by `membarrier` (an asymmetric Dekker handshake). Returns whether the
    /// slow path (the buffer lock) was taken, or `None` when nothing may be recorded.
    ///
    /// Only the slow path looks at whether recording goes on and the thread is open: both
    /// end only after `quiesce` (`finish`, `exec`) or after the thread's state is unreachable
    /// from its hooks (`thread_exit`), and an owner that saw `FOREIGN` clear pushes before any
    /// foreign flush or close can begin (the flusher waits for `activity` to be even).
    #[inline(always)]
    pub(super) fn enter_buf(&self) -> Option<bool> {
        self.announce();
        compiler_fence(Ordering::SeqCst);
        if !self.must_lock() {
            return Some(false);
        }
        self.enter_buf_locked()
    }

    #[cold]
    #[inline(never)]
    fn enter_buf_locked(&self) -> Option<bool> {
        self.retire();
        self.lock_buf();
        if self.closed.load(Ordering::Relaxed) || !state::recording() {
            self.unlock_buf();
            return None;
        }
        Some(true)
    }

    #[inline]
    pub(super) fn leave_buf(&self, slow: bool) {
        if slow {
            // Still even, and seen to have changed by a flusher that looked while this
            // session waited for the lock.
            self.activity.store(
                self.activity.load(Ordering::Relaxed).wrapping_add(2),
                Ordering::Relaxed,
            );
            self.unlock_buf();
        } else {
            self.retire();
        }
    }

    /// The owner enters its fast path: `activity` odd. Only the owner writes it, so a load
    /// and a store (no read-modify-write).
    #[inline(always)]
    pub(super) fn announce(&self) {
        let a = self.activity.load(Ordering::Relaxed);
        self.activity.store(a.wrapping_add(1), Ordering::Relaxed);
    }

    /// The owner leaves its fast path (or does not take it): `activity` even again, its
    /// pushes visible to whoever sees the new value.
    #[inline(always)]
    pub(super) fn retire(&self) {
        let a = self.activity.load(Ordering::Relaxed);
        self.activity.store(a.wrapping_add(1), Ordering::Release);
    }

    /// After `announce`: whether a foreign flush may be under way, of every buffer
    /// (`quiesce`) or of this one (the flusher's mark): the owner takes the buffer's lock.
    #[inline(always)]
    pub(super) fn must_lock(&self) -> bool {
        quiesce::foreign() | self.flush_mark.load(Ordering::Relaxed)
    }

    /// Another thread (or the owner, from `finish`) takes the buffer: waits for the owner to
    /// leave its fast path, then takes the lock. Only after `quiesce`. In a signal handler the
    /// waits are bounded.
    fn acquire_foreign(&self, context: Context) -> bool {
        let attempts = context.attempts();
        let mut n = 0u32;
        while self.activity.load(Ordering::Acquire) & 1 != 0 {
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
        self.note_acquired();
        self.leave_buf(slow);
    }

    #[inline(always)]
    pub(super) fn push_locked(&self, kind: EventKind, key: u64) {
        match kind {
            EventKind::LockAcquired { .. }
            | EventKind::LockTry { acquired: true, .. }
            | EventKind::CondWaitEnd { .. } => self.note_acquired(),
            EventKind::LockRelease { .. } | EventKind::CondWaitBegin { .. } => self.note_released(),
            _ => {}
        }
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
            self.chunk_start_ns.store(w.start_ns(), Ordering::Relaxed);
        }
        let key = key.max(w.last_key());
        (w, key)
    }

    /// One more lock held (`locks_held`): a plain load and store, never a read-modify-write
    /// (only the owner writes it), and no saturation test (64 bits never wrap here).
    #[inline(always)]
    pub(super) fn note_acquired(&self) {
        let n = self.locks_held.load(Ordering::Relaxed);
        self.locks_held.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// One lock fewer; a release whose acquisition was not recorded leaves 0.
    #[inline(always)]
    pub(super) fn note_released(&self) {
        let n = self.locks_held.load(Ordering::Relaxed);
        self.locks_held
            .store(n.saturating_sub(1), Ordering::Relaxed);
    }

    /// Whether the thread holds a lock it was recorded taking: a blocking call is recorded
    /// only then.
    #[inline(always)]
    pub fn holds_locks(&self) -> bool {
        self.locks_held.load(Ordering::Relaxed) != 0
    }

    /// Flushes the buffer (thread exit, finish, exec). Foreign callers must `quiesce` first.
    /// In a signal handler the waits are bounded (it may have interrupted the owner); returns
    /// false if not flushed.
    pub fn flush(&self, context: Context) -> bool {
        if !self.acquire_foreign(context) {
            return false;
        }
        // SAFETY: guarded by buf_lock with the owner off its fast path.
        flush_writer(unsafe { &mut *self.writer.get() }, context);
        self.unlock_buf();
        true
    }

    /// The owner enters a blocking call whose request or wait it has just recorded; returns
    /// what to hand `end_wait` (a signal handler's wait nests inside the one it interrupted).
    /// Without a flusher (a program that never created a thread) the thread writes its
    /// buffer first: it may wait for ever, and a kill would lose the request.
    #[inline(always)]
    pub fn begin_wait(&self, wait: Wait) -> u8 {
        if state::flusher_absent() {
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
            self.flush(Context::Thread);
            self.leave();
        }
    }

    /// The flusher's glance at the thread, without stopping it: whether its buffer may need
    /// writing, because the owner used it not at all since the last glance (it went idle,
    /// and its buffer was not empty then) or its current chunk is older than `max_age_ns`.
    /// A thread that records steadily, into young chunks, is left alone.
    pub fn flush_due(&self, now_ns: u64, max_age_ns: u64) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let activity = self.activity.load(Ordering::Acquire);
        let (saw, empty) = self.flusher_saw.get();
        if activity == saw {
            return !empty;
        }
        self.flusher_saw.set((activity, false));
        now_ns.saturating_sub(self.chunk_start_ns.load(Ordering::Relaxed)) > max_age_ns
    }

    /// The flusher's round marks this buffer (after `flush_due`): from the round's barrier
    /// on, the owner takes the buffer's lock (`must_lock`).
    pub fn mark_for_flush(&self) {
        self.flush_mark.store(true, Ordering::SeqCst);
    }

    pub fn marked_for_flush(&self) -> bool {
        self.flush_mark.load(Ordering::Relaxed)
    }

    /// The flusher's look at a buffer it marked, after the round's barrier: writes what it
    /// holds, notes it empty, and lets the owner back onto its fast path.
    pub fn flush_marked(&self) {
        if !self.closed.load(Ordering::Acquire) && self.acquire_foreign(Context::Thread) {
            // SAFETY: guarded by buf_lock with the owner off its fast path.
            let w = unsafe { &mut *self.writer.get() };
            if w.pending_events() > 0 {
                flush_writer(w, Context::Thread);
            }
            // A session of the owner's that waits for the lock now pushes after this look,
            // and raises `activity` again before it lets the lock go (`leave_buf`).
            self.flusher_saw.set((
                self.activity.load(Ordering::Acquire),
                w.pending_events() == 0,
            ));
            self.unlock_buf();
        }
        self.flush_mark.store(false, Ordering::Release);
    }

    /// The blocking call returned (or unwinds).
    #[inline(always)]
    pub fn end_wait(&self, outer: u8) {
        self.waiting.store(outer, Ordering::Relaxed);
    }

    /// `finish`: the thread's last events, and it is closed (no more events). `exits`: the
    /// thread is ending the process (`exit`, `_exit`), so its last event is a `thread-exit`;
    /// any other thread was running or waiting when the process ended under it, which its
    /// end state says (it gets no `thread-exit`). Only after `quiesce`; a signal handler bounds
    /// every wait. `None` when the thread was closed already or its buffer
    /// could not be had in time.
    pub fn close_at_end(&self, context: Context, exits: bool) -> Option<EndOfThread> {
        if self.closed.load(Ordering::Acquire) || !self.acquire_foreign(context) {
            return None;
        }
        let state = if exits {
            {
                // SAFETY: the writer is guarded by buf_lock with the owner off its fast path;
                // the reference ends with this block.
                let w = unsafe { &mut *self.writer.get() };
                if w.is_full() {
                    // Room for the exit, so that pushing it flushes nothing (unbounded).
                    flush_writer(w, context);
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
        flush_writer(unsafe { &mut *self.writer.get() }, context);
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
    pub fn snapshot_state(&self, context: Context) -> Option<(ThreadId, ThreadEndState)> {
        if self.closed.load(Ordering::Acquire) || !self.acquire_foreign(context) {
            return None;
        }
        let state = match self.waiting.load(Ordering::Relaxed) {
            0 => ThreadEndState::Running,
            w if w == Wait::Timed as u8 => ThreadEndState::BlockedWithTimeout,
            _ => ThreadEndState::Blocked,
        };
        // SAFETY: guarded by buf_lock with the owner off its fast path.
        flush_writer(unsafe { &mut *self.writer.get() }, context);
        self.unlock_buf();
        Some((self.tid(), state))
    }
}

/// A thread's chunk writer, compressing as the trace's prefix says (`output::compress_mode`):
/// its buffers, the compressor's included, are allocated here, once per thread, so that a
/// flush allocates nothing.
pub(super) fn new_writer(tid: ThreadId) -> ChunkWriter {
    let mode = output::compress_mode();
    let bytes = match CHUNK_SIZE.load(Ordering::Relaxed) {
        0 if mode.codec() == Some(foresight_trace::frame::CODEC_ZSTD) => ZSTD_CHUNK_BYTES,
        0 => CHUNK_BYTES,
        n => n,
    };
    ChunkWriter::with_compression(tid, bytes, mode)
}

/// Writes the writer's chunk (if it holds events) to the sink; a signal handler bounds the
/// wait for the table buffer that must go first.
#[cold]
#[inline(never)]
fn flush_writer(w: &mut ChunkWriter, context: Context) {
    keep_errno(|| {
        let n = w.pending_events();
        w.flush_into(state::now_ns(), |bytes| {
            sink::write_event_chunk(bytes, n, context)
        });
    })
}

/// The writer's rare cases, out of the hot path: flush a full chunk, start an empty one.
#[cold]
#[inline(never)]
fn service_writer(w: &mut ChunkWriter) {
    if w.is_full() {
        flush_writer(w, Context::Thread);
    }
    keep_errno(|| w.set_start_ns(state::now_ns()));
}
