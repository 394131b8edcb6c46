//! Per-thread state for the memory accesses of an instrumented program (the
//! ThreadSanitizer-ABI hooks, `hooks/tsan.rs`): what was already recorded in the current
//! epoch, the sites of recent access instructions and the shadow call stack. (The counts of
//! accesses executed and recorded are in `ThreadState`: `finish` reads them from another
//! thread.)
//!
//! **Deduplication.** Within one thread, between two of its synchronising events (one *epoch*:
//! the thread's key does not change in between), a race analysis needs only the first read
//! and the first write of an address from each site: a later identical access races with
//! exactly what the first one races with. `Dedup` is a direct-mapped cache of (address, site,
//! kind and size, epoch): a hit is a repeat and is dropped; a miss is recorded and replaces
//! the entry. A collision evicts an entry, so a repeat may be recorded again, but a first
//! access never hits (every field of the key is compared, the epoch exactly). FORMAT.md §7.8
//! states what a trace keeps.
//!
//! The state is allocated on a thread's first access (most threads of an unmodified program
//! never have one) from the runtime's own allocator, and freed with the thread's state.

use std::sync::atomic::{AtomicBool, Ordering};

use foresight_trace::event::SiteId;

use crate::config::MAX_STACK_DEPTH;
use crate::sites;

/// Entries of the dedup cache: enough for the working set of one epoch of a tight loop.
const DEDUP: usize = 1 << 10;
/// Entries of the access-site cache (return address → site id).
const SITE_CACHE: usize = 1 << 9;
/// Frames the shadow stack keeps; deeper calls are counted but not stored.
const STACK: usize = 256;

/// Set when an instrumented module reported itself or a thread recorded its first access:
/// the libc interceptors (`hooks/memory.rs`) record only in such a program.
static INSTRUMENTED: AtomicBool = AtomicBool::new(false);

pub fn set_instrumented() {
    if !INSTRUMENTED.load(Ordering::Relaxed) {
        INSTRUMENTED.store(true, Ordering::Relaxed);
    }
}

#[inline(always)]
pub fn instrumented() -> bool {
    INSTRUMENTED.load(Ordering::Relaxed)
}

#[derive(Clone, Copy)]
struct DedupEntry {
    addr: usize,
    /// The site: the return address at depth 1, the interned site id with deeper stacks.
    who: usize,
    /// `size << 1 | write`, as the hooks receive it.
    info: usize,
    epoch: u64,
}

/// All zeros, as the state is allocated: no access has `info` 0 (its size is at least 1).
const NO_ENTRY: DedupEntry = DedupEntry {
    addr: 0,
    who: 0,
    info: 0,
    epoch: 0,
};

pub struct AccessState {
    dedup: [DedupEntry; DEDUP],
    sites: [(usize, SiteId); SITE_CACHE],
    stack: [usize; STACK],
    /// Frames entered and not left (may exceed `STACK`).
    depth: usize,
}

#[inline(always)]
fn dedup_index(addr: usize, who: usize) -> usize {
    // Accesses of one loop are neighbouring addresses from a few sites.
    let h = (addr >> 2) ^ (who.rotate_left(17));
    (h ^ (h >> 10)) & (DEDUP - 1)
}

#[inline(always)]
fn site_index(pc: usize) -> usize {
    (pc ^ (pc >> 9)) & (SITE_CACHE - 1)
}

impl AccessState {
    /// Zeroed straight on the heap: the state is about 40 KiB, more than the stack of a
    /// thread with a small stack can spare.
    pub fn new() -> Box<Self> {
        let layout = std::alloc::Layout::new::<Self>();
        // SAFETY: the layout is the type's own (not zero-sized).
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Self>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `p` was allocated with the global allocator for this layout, and every
        // field is an integer or an array of integers, for which all-zero bytes are a valid
        // value (and mean: empty caches, empty stack).
        unsafe { Box::from_raw(p) }
    }

    /// True when this access repeats one recorded in `epoch`; otherwise remembers it (the
    /// caller records it).
    #[inline(always)]
    pub fn repeat(&mut self, addr: usize, who: usize, info: usize, epoch: u64) -> bool {
        let e = &mut self.dedup[dedup_index(addr, who)];
        if e.addr == addr && e.who == who && e.info == info && e.epoch == epoch {
            return true;
        }
        *e = DedupEntry {
            addr,
            who,
            info,
            epoch,
        };
        false
    }

    /// The site of access instruction `pc` when the thread's cache knows it.
    #[inline(always)]
    pub fn cached_site(&self, pc: usize) -> Option<SiteId> {
        let (k, s) = self.sites[site_index(pc)];
        (k == pc && pc != 0).then_some(s)
    }

    pub fn cache_site(&mut self, pc: usize, site: SiteId) {
        self.sites[site_index(pc)] = (pc, site);
    }

    #[inline(always)]
    pub fn enter(&mut self, pc: usize) {
        if self.depth < STACK {
            self.stack[self.depth] = pc;
        }
        self.depth += 1;
    }

    #[inline(always)]
    pub fn exit(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// The site of an access at `pc` with the shadow stack's callers, `depth` frames in all.
    pub fn deep_site(&self, pc: usize, depth: usize) -> SiteId {
        let mut frames = [0usize; MAX_STACK_DEPTH];
        frames[0] = pc;
        let mut n = 1;
        let mut i = self.depth.min(STACK);
        while n < depth && i > 0 {
            i -= 1;
            frames[n] = self.stack[i];
            n += 1;
        }
        sites::frames_site(&frames[..n])
    }

    /// fork child: the parent's epochs and site ids mean nothing in the child's trace.
    pub fn reset_for_child(&mut self) {
        self.dedup.fill(NO_ENTRY);
        self.sites.fill((0, 0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_in_the_same_epoch_is_dropped_and_nothing_else() {
        let mut a = AccessState::new();
        assert!(!a.repeat(0x1000, 0x40, 8 << 1, 5), "first");
        assert!(a.repeat(0x1000, 0x40, 8 << 1, 5), "repeat");
        assert!(
            !a.repeat(0x1000, 0x40, 8 << 1 | 1, 5),
            "a write is not a read"
        );
        assert!(!a.repeat(0x1000, 0x44, 8 << 1 | 1, 5), "another site");
        assert!(!a.repeat(0x1008, 0x44, 8 << 1 | 1, 5), "another address");
        assert!(!a.repeat(0x1008, 0x44, 8 << 1 | 1, 6), "a new epoch");
        assert!(!a.repeat(0x1008, 0x44, 4 << 1 | 1, 6), "another size");
    }

    #[test]
    fn collisions_never_drop_a_first_access() {
        let mut a = AccessState::new();
        let mut seen = std::collections::HashSet::new();
        for i in 0..100_000usize {
            let (addr, who) = ((i * 7919) % 5000 * 8, 0x400 + i % 13);
            let first = seen.insert((addr, who));
            let repeat = a.repeat(addr, who, 8 << 1, 1);
            assert!(!(first && repeat), "access {i} was first and dropped");
        }
    }

    #[test]
    fn the_shadow_stack_keeps_the_innermost_frames() {
        let mut a = AccessState::new();
        for pc in 1..=STACK + 10 {
            a.enter(pc);
        }
        for _ in 0..10 {
            a.exit();
        }
        assert_eq!(a.depth, STACK);
        assert_eq!(a.stack[STACK - 1], STACK);
    }
}
