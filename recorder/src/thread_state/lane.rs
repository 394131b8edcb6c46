//! The lane: the lock hooks' path for the usual case (`docs/decisions/0013`).

use std::sync::atomic::{compiler_fence, Ordering};

use foresight_trace::event::LockMode;
use foresight_trace::ChunkWriter;

use super::{LanePair, ThreadState};

impl ThreadState {
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
    pub(super) fn lane_open(&self) -> bool {
        self.announce();
        compiler_fence(Ordering::SeqCst);
        if self.must_lock() {
            self.retire();
            return false;
        }
        true
    }

    #[inline(always)]
    pub(super) fn lane_close(&self) {
        self.retire();
    }

    /// Clock and writer, between `lane_open` and `lane_close`.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    pub(super) fn lane_state(&self) -> (&mut u64, &mut ChunkWriter) {
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
            self.note_acquired();
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
            self.note_acquired();
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
            self.note_released();
        }
        self.lane_close();
        done
    }
}
