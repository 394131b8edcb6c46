//! The `pthread_t` → thread map (joins name the thread they wait for by its `pthread_t`) and
//! each thread's exit key, for its joiner.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use foresight_trace::event::ThreadId;

use super::ThreadState;

/// `ThreadState::naming`: nobody yet, the creator is writing the entry, the creator wrote it,
/// the thread itself came first and is writing it, the thread wrote it.
pub(super) const NAMING_OPEN: u8 = 0;
const NAMING_CREATOR: u8 = 1;
const NAMING_CREATOR_DONE: u8 = 2;
const NAMING_THREAD: u8 = 3;
const NAMING_THREAD_DONE: u8 = 4;

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
