//! Memory accesses, atomics and the shadow stack of an instrumented thread (the
//! ThreadSanitizer-ABI hooks, `hooks/tsan.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

use foresight_trace::event::{AtomicOp, EventKind, MemoryOrder, SiteId};
use foresight_trace::tables::{AccessCounts, TableRecord};

use super::session::keep_errno;
use super::ThreadState;
use crate::accesses::{self, AccessState, Probe};
use crate::sequence::Key;
use crate::stripes::{self, Stripe};
use crate::{output, sites};

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
    pub(super) fn access_state_mut(&self) -> Option<&mut AccessState> {
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
        match unsafe { AccessState::probe(a, addr, pc, info, *self.clock.get()) } {
            Probe::Repeat => {}
            Probe::New(key) => self.record_new_access(addr, info, pc, key),
            Probe::Unsure => self.record_access_unsure(addr, info, pc),
        }
    }

    /// `record_access` for an access the probe found new with `key`: in a session and the
    /// lane, remembered, its site found in the cache, the event pushed. Straight-line code
    /// that calls nothing (so saves no registers); every other case (a foreign flush under
    /// way, an epoch the probe did not decide, a new instruction, a chunk to start) leaves
    /// by a call in tail position.
    #[inline(never)]
    fn record_new_access(&self, addr: usize, info: usize, pc: usize, key: u64) {
        self.busy.set(true);
        if !self.lane_open() {
            self.busy.set(false);
            return self.record_access_slow(addr, info, pc);
        }
        // SAFETY: the clock is the owner's inside the lane (see take_key).
        let epoch = unsafe { *self.clock.get() };
        let Some(a) = self.access_state_mut() else {
            return self.record_access_in_lane(addr, info, pc, epoch);
        };
        if !a.remember(addr, pc, key, epoch) {
            return self.record_access_in_lane(addr, info, pc, epoch);
        }
        let Some(site) = a.cached_site(pc) else {
            return self.push_access_new_site_in_lane(addr, info, pc, epoch);
        };
        bump(&self.recorded);
        // SAFETY: the writer is the owner's inside the lane (see writer_at).
        let w = unsafe { &mut *self.writer.get() };
        // `remember` took the key: the size is 1, 2, 4, 8 or 16 bytes.
        let log_size = (info >> 1).trailing_zeros();
        if !w.try_push_access_of(info & 1 != 0, log_size, addr as u64, site, epoch) {
            return self.push_access_general_in_lane(addr, info, site, epoch);
        }
        self.lane_close();
        self.busy.set(false);
    }

    /// The rest of `record_new_access` when `remember` could not take the access (`repeat`
    /// decides); in the session and the lane.
    #[cold]
    #[inline(never)]
    fn record_access_in_lane(&self, addr: usize, info: usize, pc: usize, epoch: u64) {
        let Some(a) = self.access_state_mut() else {
            self.lane_close();
            self.busy.set(false);
            return;
        };
        if a.repeat(addr, pc, info, epoch) {
            self.lane_close();
            self.busy.set(false);
            return;
        }
        let Some(site) = a.cached_site(pc) else {
            self.lane_close();
            return self.push_access_new_site(addr, info, pc, epoch);
        };
        self.push_access(addr, info, site, epoch);
        self.lane_close();
        self.busy.set(false);
    }

    /// The rest of `record_new_access` when the access, remembered, is an instruction's
    /// that the site cache does not hold.
    #[cold]
    #[inline(never)]
    fn push_access_new_site_in_lane(&self, addr: usize, info: usize, pc: usize, epoch: u64) {
        self.lane_close();
        self.push_access_new_site(addr, info, pc, epoch);
    }

    /// The rest of `record_new_access` when the event does not fit the writer's short path
    /// (a chunk to start or flush, a key to write).
    #[cold]
    #[inline(never)]
    fn push_access_general_in_lane(&self, addr: usize, info: usize, site: SiteId, key: u64) {
        let size = u32::try_from(info >> 1).unwrap_or(u32::MAX);
        self.push_access_general(info & 1 != 0, size, addr, site, key);
        self.lane_close();
        self.busy.set(false);
    }

    /// `record_access` for what the probe could not decide (a new epoch, an access never
    /// deduplicated, deeper stacks): `repeat` in a session decides.
    #[inline(never)]
    fn record_access_unsure(&self, addr: usize, info: usize, pc: usize) {
        if !sites::shallow() {
            return self.record_access_slow(addr, info, pc);
        }
        // Key 0 is no key (`remember` refuses it): `record_new_access` goes on to `repeat`.
        self.record_new_access(addr, info, pc, 0);
    }

    /// A new instruction's access, already remembered, in a session out of the lane: its
    /// site is found outside the buffer (it may write a table record), then the event goes
    /// in at the same key (only this thread changes it).
    #[cold]
    #[inline(never)]
    fn push_access_new_site(&self, addr: usize, info: usize, pc: usize, epoch: u64) {
        let site = keep_errno(|| sites::site(pc));
        if let Some(a) = self.access_state_mut() {
            a.cache_site(pc, site);
        }
        if let Some(slow) = self.enter_buf() {
            self.push_access(addr, info, site, epoch);
            self.leave_buf(slow);
        }
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
        // SAFETY: only the owner writes its clock (see record_access), and this is the owner.
        let before = unsafe { *self.clock.get() };
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
        if order == MemoryOrder::Relaxed && matches!(op, AtomicOp::Load | AtomicOp::CasFailure) {
            // SAFETY: as above.
            let after = unsafe { *self.clock.get() };
            if let Some(a) = self.access_state_mut() {
                a.carry_epoch(before, after);
            }
        }
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
