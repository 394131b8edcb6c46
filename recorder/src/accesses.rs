//! Per-thread state for the memory accesses of an instrumented program (the
//! ThreadSanitizer-ABI hooks, `hooks/tsan.rs`): what was already recorded in the current
//! epoch, the sites of recent access instructions and the shadow call stack. (The counts of
//! accesses executed and recorded are in `ThreadState`: `finish` reads them from another
//! thread.)
//!
//! **Deduplication.** Within one thread, between two of its synchronising events (one *epoch*:
//! the thread's key does not change in between), a race analysis needs only the first read
//! and the first write of an address from each site: a later identical access races with
//! exactly what the first one races with. The dedup cache is a two-way set-associative cache
//! of (address, site, kind and size, epoch): a hit is a repeat and is dropped; a miss is
//! recorded and replaces the set's older entry. An eviction may let a repeat be recorded
//! again, but a first access never hits (every field of the key is compared, the epoch
//! exactly, through its generation). An epoch runs on across a relaxed atomic load, which
//! takes a key but orders nothing (`carry_epoch`). FORMAT.md §7.8 states what a trace keeps.
//!
//! The state is allocated on a thread's first access (most threads of an unmodified program
//! never have one) from the runtime's own allocator, and freed with the thread's state.

use std::sync::atomic::{AtomicBool, Ordering};

use foresight_trace::event::SiteId;

use crate::config::MAX_STACK_DEPTH;
use crate::sites;

/// Entries of the dedup cache (16 bytes each, in sets of two), 64 KiB a thread: enough for
/// the working set of one epoch of a tight loop. Half as many took SQLite's recording 6% more
/// CPU time, twice as many 3% more (docs/perf/real_programs.md).
const DEDUP: usize = 1 << 12;
/// Sets of the access-site cache (return address → site id), two ways of 8 bytes each, 64
/// KiB a thread: a miss probes the global site table (4 MiB, a cache miss of its own), and
/// SQLite's hot loops touch a few thousand of its 6,200 access instructions (at 512
/// direct-mapped entries the misses were 12% of its recording's CPU time, 5% at 4,096, under
/// 1% in 4,096 sets of two; docs/perf/real_programs.md).
const SITE_SETS: usize = 1 << 12;
/// A cached site is `tag << SITE_BITS | (site + 1)`, where the tag is the instruction's bits
/// above the set index (the set index gives back the rest: `site_slot`); 0 is an empty way.
const SITE_BITS: u32 = 28;
/// Sites at or above this are not cached (never reached: the global table has 2^18 slots).
const SITE_LIMIT: u64 = (1 << SITE_BITS) - 1;
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

/// One remembered access: its address, and its instruction, kind and size and epoch packed
/// into one word (`dedup_key`). All zeros, as the state is allocated, matches nothing: a key's
/// generation is never 0.
#[derive(Clone, Copy)]
struct DedupEntry {
    addr: usize,
    key: u64,
}

/// Code addresses below this fit the key's 48 bits (every x86-64 and AArch64 user address
/// with 4-level page tables); an instruction above it is recorded every time.
const PC_LIMIT: usize = 1 << 48;
/// Epoch generations: 12 bits, then the cache is cleared and they start again at 1.
const GENERATIONS: u16 = 1 << 12;

/// (instruction or site, kind and size, generation) as one word, or `None` for an access that
/// is never deduplicated (a range of another size than 1, 2, 4, 8 or 16 bytes, an instruction
/// beyond `PC_LIMIT`).
#[inline(always)]
fn dedup_key(who: usize, info: usize, generation: u16) -> Option<u64> {
    let kind = *KIND_KEYS.get(info)?;
    if kind == 0 || who >= PC_LIMIT {
        return None;
    }
    Some(who as u64 | kind | (generation as u64) << 52)
}

/// `info` (`size << 1 | write`) → a 4-bit code in the key's bits 48 to 51: for sizes 1, 2, 4,
/// 8, 16, `(log2(size) + 1) << 1 | write`, 2 to 11; 0 for every other size (never
/// deduplicated). Shifted in the table, so that the probe's key is one load and two `or`s.
const KIND_KEYS: [u64; 34] = {
    let mut t = [0u64; 34];
    let mut log = 0;
    while log < 5 {
        let size = 1usize << log;
        t[size << 1] = (((log + 1) << 1) as u64) << 48;
        t[size << 1 | 1] = (((log + 1) << 1 | 1) as u64) << 48;
        log += 1;
    }
    t
};

/// The generation a key was made in.
#[inline(always)]
fn key_generation(key: u64) -> u16 {
    (key >> 52) as u16
}

#[inline(always)]
fn dedup_index(addr: usize, who: usize) -> usize {
    // Accesses of one loop are neighbouring addresses from a few neighbouring instructions:
    // neighbouring addresses get neighbouring entries, and each instruction its own offset,
    // from a multiplicative hash (neighbouring instructions must not get neighbouring offsets,
    // or the read and the write of one loop evict each other).
    let offset = (who as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    // The four bytes of a word go a quarter of the table apart: the two bits below the
    // word land on the set's top two (the bits shifted above them are masked off).
    let spread = addr << (DEDUP.trailing_zeros() - 3);
    // Two ways per set, side by side in one cache line: two accesses whose entries collide
    // both stay.
    (((addr >> 2) ^ spread ^ offset as usize) << 1) & (DEDUP - 2)
}

/// What `AccessState::probe` found for an access.
pub enum Probe {
    /// It repeats one recorded in this epoch: dropped.
    Repeat,
    /// It is new in this epoch, with its key (`dedup_key`): recorded, and remembered with
    /// `remember`.
    New(u64),
    /// Not decided by reading alone (a new epoch, deeper stacks, an access never
    /// deduplicated): the caller goes on to `repeat` in a session.
    Unsure,
}

/// The sets of the dedup cache, each in one cache line.
#[repr(C, align(64))]
struct DedupTable([DedupEntry; DEDUP]);

/// The fields the probe reads first, then the cache: the probe of a repeat touches this
/// line and the set's, no other of the state.
#[repr(C)]
pub struct AccessState {
    /// The thread's key when the current generation began, and the generation: a new key is
    /// a new epoch, numbered by one more generation (the key itself can jump anywhere).
    epoch: u64,
    generation: u16,
    /// Sites are single return addresses (`--stack-depth 1`): the only case `probe` handles.
    shallow: bool,
    dedup: DedupTable,
    sites: [[u64; 2]; SITE_SETS],
    stack: [usize; STACK],
    /// Frames entered and not left (may exceed `STACK`).
    depth: usize,
}

/// The set of instruction `pc` in the site cache, and the tag its ways hold for it: the set
/// is the low bits of `pc` folded with the next ones (instructions a page apart do not share
/// a set), and the tag the bits above the low ones, which with the set gives `pc` back: a tag
/// match is an exact match. `None` for an instruction beyond `PC_LIMIT` or 0 (not cached).
#[inline(always)]
fn site_slot(pc: usize) -> Option<(usize, u64)> {
    if pc >= PC_LIMIT || pc == 0 {
        return None;
    }
    let shift = SITE_SETS.trailing_zeros();
    let set = (pc ^ (pc >> shift)) & (SITE_SETS - 1);
    Some((set, ((pc >> shift) as u64) << SITE_BITS))
}

impl AccessState {
    /// Zeroed straight on the heap: the state is about 100 KiB, more than the stack of a
    /// thread with a small stack can spare.
    pub fn new() -> Box<Self> {
        let layout = std::alloc::Layout::new::<Self>();
        // SAFETY: the layout is the type's own (not zero-sized).
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Self>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `p` was allocated with the global allocator for this layout, and every
        // field is an integer, a bool or an array of integers, for which all-zero bytes are a
        // valid value (and mean: empty caches, empty stack, no generation yet).
        let mut b = unsafe { Box::from_raw(p) };
        b.shallow = sites::shallow();
        b
    }

    /// Whether this access surely repeats one recorded in `epoch`, found by reading alone (no
    /// session: a signal handler may interrupt and run `repeat` itself, which leaves any entry
    /// read here either still true or gone). `New` hands `remember` the key, so that the
    /// access is not looked up twice; `Unsure` sends the caller to `repeat` in a session.
    ///
    /// # Safety
    /// `this` is the calling thread's live access state.
    #[inline(always)]
    pub unsafe fn probe(
        this: *const Self,
        addr: usize,
        who: usize,
        info: usize,
        epoch: u64,
    ) -> Probe {
        // SAFETY: the caller's contract; plain reads of the owner's memory, through the raw
        // pointer (no reference is held while a handler might write).
        unsafe {
            if (*this).epoch != epoch || !(*this).shallow {
                return Probe::Unsure;
            }
            let Some(key) = dedup_key(who, info, (*this).generation) else {
                return Probe::Unsure;
            };
            let set = dedup_index(addr, who);
            let first = std::ptr::read(&raw const (*this).dedup.0[set]);
            let second = std::ptr::read(&raw const (*this).dedup.0[set + 1]);
            // Both ways compared without a branch (they share a line): the one branch left,
            // repeat or new, is the only one a predictor cannot learn.
            let first_differs = (first.addr ^ addr) as u64 | (first.key ^ key);
            let second_differs = (second.addr ^ addr) as u64 | (second.key ^ key);
            if first_differs.min(second_differs) == 0 {
                return Probe::Repeat;
            }
            Probe::New(key)
        }
    }

    /// In a session, after `probe` found the access new with `key`: remembers it, when the
    /// epoch it was probed in is still the current one (`epoch`, the thread's key now, is
    /// the state's and the generation is the key's), and returns true: the caller records
    /// it. False when a signal handler began another epoch in between: the caller goes on
    /// to `repeat`. A handler that recorded the same access in between makes it recorded
    /// twice, as an eviction may.
    #[inline(always)]
    pub fn remember(&mut self, addr: usize, who: usize, key: u64, epoch: u64) -> bool {
        if epoch != self.epoch || self.generation == 0 || key_generation(key) != self.generation {
            return false;
        }
        self.insert(dedup_index(addr, who), addr, key);
        true
    }

    /// The newer entry first: the older one is the one to go.
    #[inline(always)]
    fn insert(&mut self, set: usize, addr: usize, key: u64) {
        let [first, second] = &mut self.dedup.0[set..set + 2] else {
            unreachable!("a set is two entries")
        };
        *second = *first;
        *first = DedupEntry { addr, key };
    }

    /// True when this access repeats one recorded in `epoch` (the thread's current key);
    /// otherwise remembers it (the caller records it). `who` is the instruction (or, with
    /// deeper stacks, the site id).
    #[inline(always)]
    pub fn repeat(&mut self, addr: usize, who: usize, info: usize, epoch: u64) -> bool {
        if epoch != self.epoch || self.generation == 0 {
            self.new_epoch(epoch);
        }
        let Some(key) = dedup_key(who, info, self.generation) else {
            return false;
        };
        let set = dedup_index(addr, who);
        let [first, second] = &self.dedup.0[set..set + 2] else {
            unreachable!("a set is two entries")
        };
        if (first.addr == addr && first.key == key) || (second.addr == addr && second.key == key) {
            return true;
        }
        self.insert(set, addr, key);
        false
    }

    /// The thread's key went from `from` to `to` through an event that orders none of its
    /// accesses (a relaxed atomic load: it is no release, and the analysis draws no edge to
    /// it): the epoch of `from` goes on under the new key, and a repeat across it is still a
    /// repeat. A loop that polls a relaxed flag (SQLite's interrupt check, once per row of a
    /// scan) would otherwise begin a new epoch per iteration and record every access again.
    pub fn carry_epoch(&mut self, from: u64, to: u64) {
        if self.epoch == from && self.generation != 0 {
            self.epoch = to;
        }
    }

    #[cold]
    #[inline(never)]
    fn new_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.generation = (self.generation + 1) % GENERATIONS;
        if self.generation == 0 {
            // The generations wrapped: an old entry could pass for one of this epoch.
            self.dedup.0.fill(DedupEntry { addr: 0, key: 0 });
            self.generation = 1;
        }
    }

    /// The site of access instruction `pc` when the thread's cache knows it.
    #[inline(always)]
    pub fn cached_site(&self, pc: usize) -> Option<SiteId> {
        let (set, tag) = site_slot(pc)?;
        let [first, second] = self.sites[set];
        // A way holds `tag | (site + 1)`: xor with the tag leaves `site + 1`, in 1..=SITE_LIMIT,
        // exactly when the tag is the instruction's and the way is not empty.
        let first = (first ^ tag).wrapping_sub(1);
        if first < SITE_LIMIT {
            return Some(first as SiteId);
        }
        let second = (second ^ tag).wrapping_sub(1);
        (second < SITE_LIMIT).then_some(second as SiteId)
    }

    /// Caches `site` for `pc` in the first way of its set, the first way's moving to the
    /// second: the set keeps the two instructions that missed last.
    pub fn cache_site(&mut self, pc: usize, site: SiteId) {
        let Some((set, tag)) = site_slot(pc) else {
            return;
        };
        if u64::from(site) >= SITE_LIMIT {
            return;
        }
        let ways = &mut self.sites[set];
        ways[1] = ways[0];
        ways[0] = tag | (u64::from(site) + 1);
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
        self.dedup.0.fill(DedupEntry { addr: 0, key: 0 });
        self.generation = 0;
        self.sites.fill([0, 0]);
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
        assert!(!a.repeat(0x1008, 0x44, 24 << 1, 6), "a range");
        assert!(
            !a.repeat(0x1008, 0x44, 24 << 1, 6),
            "a range, again: never dropped"
        );
        assert!(
            !a.repeat(0x1000, 0x40, 8 << 1, 5),
            "an old epoch's key is a new epoch"
        );
    }

    #[test]
    fn a_probed_key_is_remembered_only_in_the_epoch_it_was_made_in() {
        let mut a = AccessState::new();
        assert!(!a.repeat(0x2000, 0x80, 8 << 1, 5), "begins epoch 5");
        let probe = |a: &AccessState, epoch| {
            // SAFETY: a live state, read on this thread.
            unsafe { AccessState::probe(a, 0x1000, 0x40, 8 << 1, epoch) }
        };
        let Probe::New(key) = probe(&a, 5) else {
            panic!("a first access is new")
        };
        assert!(a.remember(0x1000, 0x40, key, 5));
        assert!(matches!(probe(&a, 5), Probe::Repeat));
        assert!(
            a.repeat(0x1000, 0x40, 8 << 1, 5),
            "remembered for repeat too"
        );
        assert!(matches!(probe(&a, 6), Probe::Unsure), "another epoch");
        assert!(!a.repeat(0x3000, 0x80, 8 << 1, 6), "begins epoch 6");
        assert!(!a.remember(0x1000, 0x40, key, 6), "a key of epoch 5");
        assert!(!a.remember(0x1000, 0x40, 0, 6), "no key");
        assert!(!a.repeat(0x1000, 0x40, 8 << 1, 6), "first in epoch 6");
        // SAFETY: as above.
        let range = unsafe { AccessState::probe(&*a, 0x1000, 0x40, 24 << 1, 6) };
        assert!(matches!(range, Probe::Unsure), "never deduplicated");
    }

    #[test]
    fn generations_wrap_without_dropping_a_first_access() {
        let mut a = AccessState::new();
        assert!(!a.repeat(0x1000, 0x40, 8 << 1, 1));
        // Exactly one full turn of generations later, the entry's generation comes back.
        for epoch in 2..=GENERATIONS as u64 {
            a.repeat(0x2000, 0x80, 8 << 1, epoch);
        }
        let wrapped = GENERATIONS as u64 + 1;
        assert!(
            !a.repeat(0x1000, 0x40, 8 << 1, wrapped),
            "first in its epoch"
        );
        assert!(a.repeat(0x1000, 0x40, 8 << 1, wrapped));
    }

    #[test]
    fn a_loop_reading_and_writing_an_array_keeps_one_access_of_each_per_epoch() {
        let mut a = AccessState::new();
        let (read, write) = (0x5555_5555_71a3usize, 0x5555_5555_71d6usize);
        let mut kept = 0;
        for round in 0..16 {
            for j in 0..53usize {
                let addr = 0x7ffb_0800_0c20 + 4 * j;
                kept += !a.repeat(addr, read, 4 << 1, 9) as usize;
                kept += !a.repeat(addr, write, 4 << 1 | 1, 9) as usize;
                kept += !a.repeat(
                    0x5555_5556_0000 + 4 * ((j * 3 + round) % 256),
                    0x5555_5555_71ca,
                    4 << 1,
                    9,
                ) as usize;
            }
        }
        // 53 reads and 53 writes, and the table's distinct entries (at most 256).
        assert!(kept <= 2 * 53 + 256, "{kept}");
    }

    #[test]
    fn a_loop_over_a_small_table_of_bytes_keeps_it_while_it_writes_a_stream_of_bytes() {
        // A generator copying the characters of a few words into a buffer, one byte at a
        // time: every write is new, and every read after the first round repeats.
        let mut a = AccessState::new();
        let (read, write) = (0x5555_5555_6a31usize, 0x5555_5555_6a38usize);
        let table = 0x5555_5560_a07dusize;
        let mut reads_kept = 0;
        for i in 0..200_000usize {
            reads_kept += !a.repeat(table + (i * 7) % 197, read, 1 << 1, 3) as usize;
            assert!(!a.repeat(0x7f00_0000_0000 + i, write, 1 << 1 | 1, 3), "new");
        }
        // Each of the table's 197 bytes first, then again each time the stream has evicted it
        // (about every 4,096 writes: two per set).
        assert!(reads_kept < 200_000 / 10, "{reads_kept}");
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
    fn the_site_cache_answers_only_for_the_instruction_it_holds() {
        let mut a = AccessState::new();
        let pc = 0x5555_5555_71a3usize;
        assert_eq!(a.cached_site(pc), None, "empty");
        a.cache_site(pc, 0);
        assert_eq!(a.cached_site(pc), Some(0));
        // Instructions of the same set: the two last cached stay, each with its own site.
        let shift = SITE_SETS.trailing_zeros();
        let same_set = |k: usize| pc ^ (k << shift) ^ k;
        assert_eq!(site_slot(same_set(1)).unwrap().0, site_slot(pc).unwrap().0);
        a.cache_site(same_set(1), 7);
        assert_eq!(a.cached_site(pc), Some(0));
        assert_eq!(a.cached_site(same_set(1)), Some(7));
        a.cache_site(same_set(2), 9);
        assert_eq!(a.cached_site(pc), None, "evicted");
        assert_eq!(a.cached_site(same_set(1)), Some(7));
        assert_eq!(a.cached_site(same_set(2)), Some(9));
        assert_eq!(a.cached_site(same_set(3)), None, "never cached");
        let big = (SITE_LIMIT - 1) as SiteId;
        a.cache_site(pc, big);
        assert_eq!(a.cached_site(pc), Some(big));
        a.cache_site(pc + 1, SiteId::MAX);
        assert_eq!(a.cached_site(pc + 1), None, "too large to cache");
        a.cache_site(PC_LIMIT, 3);
        assert_eq!(a.cached_site(PC_LIMIT), None, "beyond the key's bits");
        assert_eq!(a.cached_site(0), None);
        a.reset_for_child();
        assert_eq!(
            a.cached_site(same_set(1)),
            None,
            "forgotten in a fork child"
        );
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
