//! The happens-before race pass's state: the synchronisation it follows — two streaming
//! clocks, the locksets, the live heap blocks — the shadow memory, and the pairs it found, each
//! with the place it was found ([`Found`]), which orders the instances a report keeps.

use foldhash::HashMap;
use std::collections::{BTreeMap, VecDeque};

use foresight_trace::SiteId;

use crate::alive::{Alive, BySlot};
use crate::hb::{EdgeKinds, HbPass};
use crate::stream::{Mode, Op, Pass, StreamEvent};

use super::locksets::{Held, Locksets};
use super::shadow::{AccessKind, FoundAt, Shadow, ShadowAccess, Verdict as Conflict};
use super::{
    Block, Candidates, Pair, PairKey, RaceAccess, SitePair, FIRST_INSTANCES, LATEST_INSTANCES,
};

/// Where a pair was found: the later access's place in the merged order, then the granule and
/// the entry. One pass over the whole address space finds pairs in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Found {
    pub seq: u64,
    pub at: FoundAt,
}

/// The most threads whose settled entries a collection looks for ([`RaceState::collect`]).
const COLLECT_MAX_THREADS: usize = 4096;

/// A thread's lockset id to be interned again at its next access. Never an interned id, which
/// is an index of the interned sets; were it one, that set would only be looked up again.
const STALE_LOCKSET: u32 = u32::MAX;

/// Bytes a live heap block takes in the map of blocks (its key and value, with the tree's
/// share of a node).
const BLOCK_BYTES: usize = 2 * (8 + std::mem::size_of::<Block>());

/// The pairs found, by pair of sites.
#[derive(Debug, Default)]
pub struct Findings {
    pub races: HashMap<PairKey, SitePair>,
    pub candidates: HashMap<PairKey, KeptInstances>,
}

/// Sites of a pair, the smaller first: one finding per pair of lines.
pub fn pair_key(a: &ShadowAccess, b: &ShadowAccess) -> PairKey {
    (a.site.min(b.site), a.site.max(b.site))
}

/// An instance of a pair as the pass keeps it until the cut: each access with the heap block
/// that held it when the pair was found. It becomes a [`Pair`] only if no later instance
/// pushes it out first: a busy pair finds one at nearly every access of its lines, and keeps
/// sixteen.
#[derive(Clone, Copy, Debug)]
pub struct Instance([(ShadowAccess, Option<Block>); 2]);

impl Instance {
    fn pair(self) -> Pair {
        self.0.map(|(access, block)| RaceAccess {
            access,
            block,
            variable: None,
        })
    }
}

/// The instances of one pair of sites kept so far: the first [`FIRST_INSTANCES`] and the
/// latest [`LATEST_INSTANCES`] found (both orders by where an instance was found, whatever
/// order the instances of one access come in), each sorted by it.
#[derive(Debug, Default)]
pub struct KeptInstances {
    /// Instances found in all, kept or not.
    count: u64,
    first: Vec<(Found, Instance)>,
    latest: VecDeque<(Found, Instance)>,
}

impl KeptInstances {
    /// Keeps the instance found at `found` if it is among the first or the latest;
    /// `instance` is called only then. The usual instance is the newest of its pair, which
    /// two comparisons tell.
    #[inline]
    fn keep(&mut self, found: Found, instance: impl FnOnce() -> Instance) {
        self.count += 1;
        let in_first = self.first.len() < FIRST_INSTANCES
            || self.first.last().is_some_and(|(f, _)| found < *f);
        let in_latest = self.latest.len() < LATEST_INSTANCES
            || self.latest.front().is_some_and(|(f, _)| *f < found);
        if !in_first && !in_latest {
            return;
        }
        let instance = instance();
        if in_first {
            let at = self.first.partition_point(|(f, _)| *f < found);
            self.first.insert(at, (found, instance));
            self.first.truncate(FIRST_INSTANCES);
        }
        if in_latest {
            if self.latest.back().is_none_or(|(f, _)| *f < found) {
                self.latest.push_back((found, instance));
            } else {
                let at = self.latest.partition_point(|(f, _)| *f < found);
                self.latest.insert(at, (found, instance));
            }
            if self.latest.len() > LATEST_INSTANCES {
                self.latest.pop_front();
            }
        }
    }

    /// The instances kept, as the report takes them.
    pub fn into_candidates(self) -> Candidates {
        let (found, instances) = self.first.into_iter().map(|(f, i)| (f, i.pair())).unzip();
        let (latest_found, latest) = self.latest.into_iter().map(|(f, i)| (f, i.pair())).unzip();
        Candidates {
            instances,
            count: self.count,
            found,
            latest,
            latest_found,
        }
    }
}

impl Findings {
    /// Counts a pair found at `found`; `describe` is called only for an instance that is kept.
    pub fn add(
        &mut self,
        key: PairKey,
        verdict: Conflict,
        found: Found,
        describe: impl FnOnce() -> Instance,
    ) {
        match verdict {
            Conflict::Unordered => match self.races.get_mut(&key) {
                Some(r) => {
                    r.count += 1;
                    if found < r.found {
                        r.first = describe().pair();
                        r.found = found;
                    }
                }
                None => {
                    self.races.insert(
                        key,
                        SitePair {
                            first: describe().pair(),
                            count: 1,
                            found,
                        },
                    );
                }
            },
            Conflict::Candidate => self
                .candidates
                .entry(key)
                .or_default()
                .keep(found, describe),
        }
    }
}

/// The race pass's state.
pub struct RaceState {
    /// C11 happens-before (locks in), and the synchronisation no reordering may change (locks
    /// out): a pair ordered by the first but not the second is a candidate for prediction.
    with_locks: HbPass,
    without_locks: HbPass,
    pub shadow: Shadow,
    pub locksets: Locksets,
    /// The slot of each thread alive in `threads`, given back at its exit: 4 bytes a thread
    /// ever created, and the entry per thread alive.
    alive: Alive,
    threads: BySlot<ThreadState>,
    heap: BTreeMap<u64, Block>,
    /// The most live heap blocks tracked (an eighth of the memory budget), and the blocks
    /// left untracked for want of room.
    max_blocks: usize,
    pub untracked_blocks: u64,
    /// The memory budget, bytes.
    pub memory_budget: u64,
    pub findings: Findings,
    /// Conflicts of the access being handled.
    found: Vec<(ShadowAccess, Conflict, FoundAt)>,
    /// Small blocks freed (at most [`KEPT_FREE_BYTES`] bytes, [`KEPT_FREES`] of them), by
    /// address, with the freeing thread and position: the free stays in the shadow as a write
    /// of the block, so that an access after it that nothing orders races with it (a use
    /// after free by another thread); the pair is reported as the free's, with the block.
    /// Forgotten when the address is allocated again.
    freed: BTreeMap<u64, (u32, u32, Block)>,
    /// A thread accessed memory after the clocks let its place go ([`RaceState::let_go`]):
    /// after its exit, and after its slot went on (a damaged trace). Its entries could not be
    /// compared with a clock: nothing is concluded, as when a sync event of such a thread
    /// makes the clocks abandoned.
    accessed_after_let_go: bool,
}

/// What the race pass keeps of a thread alive, by its slot.
#[derive(Clone, Copy, Debug)]
struct ThreadState {
    /// The lockset id of the locks it holds ([`STALE_LOCKSET`] while stale: interned at the
    /// thread's next access, so lock-only stretches intern nothing). The locks held are those
    /// `with_locks` keeps to know which channel a release publishes on.
    lockset: u32,
    /// The first position of its current epoch, after its last event other than a plain
    /// access (what it learns or publishes changes only at those).
    epoch: u32,
}

impl Default for ThreadState {
    fn default() -> Self {
        ThreadState {
            lockset: Locksets::EMPTY,
            epoch: 0,
        }
    }
}

/// Blocks up to this size keep their free in the shadow (one entry per 8 bytes).
const KEPT_FREE_BYTES: u64 = 64;
/// Frees kept in the shadow at most; past it a free is only checked against what came before.
const KEPT_FREES: usize = 1 << 16;

impl RaceState {
    /// The state of a pass over `threads` threads in `memory_budget` bytes: seven eighths for
    /// the shadow memory, the rest for the live heap blocks.
    pub fn new(threads: usize, memory_budget: u64) -> Self {
        let budget = usize::try_from(memory_budget).unwrap_or(usize::MAX);
        RaceState {
            with_locks: HbPass::streaming(threads, EdgeKinds::SYNC | EdgeKinds::LOCK),
            without_locks: HbPass::streaming(threads, EdgeKinds::SYNC),
            shadow: Shadow::with_budget(budget - budget / 8),
            locksets: Locksets::new(),
            alive: Alive::new(threads),
            threads: BySlot::default(),
            heap: BTreeMap::new(),
            max_blocks: budget / 8 / BLOCK_BYTES,
            untracked_blocks: 0,
            memory_budget,
            findings: Findings::default(),
            found: Vec::new(),
            freed: BTreeMap::new(),
            accessed_after_let_go: false,
        }
    }

    /// Makes room in the shadow memory ([`Shadow::collect`]): drops the entries every thread
    /// in `live` (bit `t % 64` of word `t / 64`: those of the `threads` created so far; the
    /// others will inherit their creator's clock) has ordered before it by both orders, so
    /// that no later access can race with them or be a candidate with them. A thread's own
    /// entries need no order with itself.
    #[cold]
    #[inline(never)]
    pub fn collect(&mut self, threads: usize, live: &[u64]) {
        if threads > COLLECT_MAX_THREADS {
            // The floors would cost threads² per collection: none, only the mark.
            self.shadow.collect(&[]);
            return;
        }
        let mut floor = vec![u32::MAX; threads];
        for u in (0..threads).filter(|&u| live[u / 64] >> (u % 64) & 1 == 1) {
            for (t, f) in floor.iter_mut().enumerate() {
                if t != u {
                    // By thread, not by clock entry: a slot may have passed to a later thread.
                    let (u, t) = (u as u32, t as u32);
                    *f = (*f)
                        .min(self.with_locks.knows_prefix(u, t))
                        .min(self.without_locks.knows_prefix(u, t));
                }
            }
        }
        self.shadow.collect(&floor);
    }

    /// False once a clock outgrew its budget.
    pub fn complete(&self) -> bool {
        self.with_locks.complete() && self.without_locks.complete() && !self.accessed_after_let_go
    }

    /// Lets the clocks forget where the events of threads whose slot went on sit, but for
    /// the threads the shadow memory still names: only an entry's thread is asked about as
    /// another thread's (`knows_prefix(t, u)`, `u` an entry's), and a thread whose slot went
    /// on has exited, so it makes no new entry (a damaged trace's that does makes the pass
    /// conclude nothing: `accessed_after_let_go`). A program that creates a thread per
    /// request so costs the two clocks 16 bytes a thread only while the shadow names it, or
    /// while it is among the newest [`crate::hb::PLACES_WINDOW`].
    #[cold]
    #[inline(never)]
    fn let_go(&mut self) {
        let mut named = vec![0u64; self.alive.threads().div_ceil(64)];
        self.shadow.name_threads(&mut named);
        // A thread holding a slot here accessed memory since its exit (a damaged trace): it
        // may again, without `start_accessing` to see it.
        let alive = &self.alive;
        let asked = |t: usize| {
            named.get(t / 64).is_some_and(|w| w >> (t % 64) & 1 == 1) || alive.get(t).is_some()
        };
        for clocks in [&mut self.with_locks, &mut self.without_locks] {
            if clocks.wants_letting_go() {
                clocks.let_go(asked);
            }
        }
    }

    /// Every event but a plain read or write: the clocks, the locksets, the heap. An atomic
    /// access is also an access, which the caller hands to [`RaceState::access`] afterwards.
    pub fn sync(&mut self, ev: &StreamEvent) {
        self.with_locks.handle(ev);
        self.without_locks.handle(ev);
        let t = ev.thread as usize;
        // Events that neither publish nor learn a clock leave the epoch as it is.
        let metadata = matches!(
            ev.op,
            Op::Alloc { .. }
                | Op::Free { .. }
                | Op::LockClassName { .. }
                | Op::LockSubclass { .. }
                | Op::LockRank { .. }
        );
        if !metadata && t < self.alive.threads() {
            let s = self.alive.slot(t);
            self.threads.get_mut(s).epoch = ev.pos.saturating_add(1);
        }
        match ev.op {
            // The held set may have changed (a re-entry changes nothing, and interns to the
            // same id at the next access).
            Op::LockAcquired { .. }
            | Op::LockTry { acquired: true, .. }
            | Op::CondWaitEnd { .. }
            | Op::LockRelease { .. }
            | Op::CondWaitBegin { .. } => self.relock(t),
            Op::Alloc { addr, size, site } => {
                // A new object: whatever the address held before is forgotten.
                self.shadow.forget(addr, size);
                if !self.freed.is_empty() {
                    self.freed.remove(&addr);
                }
                if self.heap.len() >= self.max_blocks && !self.heap.contains_key(&addr) {
                    // Its races are still found (the allocation forgot what the memory held
                    // before), only not named by the block.
                    self.untracked_blocks += 1;
                    return;
                }
                self.heap.insert(
                    addr,
                    Block {
                        addr,
                        size,
                        site,
                        thread: ev.thread,
                    },
                );
            }
            Op::Free { addr, site } => {
                if let Some(b) = self.heap.remove(&addr) {
                    self.shadow.forget(b.addr, b.size);
                    let room = self.freed.len() < KEPT_FREES || self.freed.contains_key(&b.addr);
                    if (1..=KEPT_FREE_BYTES).contains(&b.size) && room && t < self.alive.threads() {
                        // Nothing is left there to conflict with: this only stores the free.
                        let _ = self.check(
                            ev.thread,
                            ev.pos,
                            b.addr,
                            b.size as u32,
                            site,
                            AccessKind::Write,
                            true,
                            &[],
                        );
                        self.found.clear();
                        self.freed.insert(b.addr, (ev.thread, ev.pos, b));
                    }
                }
            }
            // A slot may have gone on to the new thread: the table of places may have grown to
            // where its oldest are let go.
            Op::Create { .. }
                if self.with_locks.wants_letting_go() || self.without_locks.wants_letting_go() =>
            {
                self.let_go()
            }
            // No event of the thread follows (a join names it, but reads none of this): its
            // slot goes to a later thread.
            Op::ThreadExit => {
                if let Some(s) = self.alive.get(t) {
                    *self.threads.get_mut(s) = ThreadState::default();
                    self.alive.release(t);
                }
            }
            _ => {}
        }
    }

    /// The locks thread `t` holds may have changed: its lockset id is stale (interned at its
    /// next access).
    #[inline]
    fn relock(&mut self, t: usize) {
        let s = self.alive.slot(t);
        self.threads.get_mut(s).lockset = STALE_LOCKSET;
    }

    /// The id of the locks thread `t` (in slot `s`) holds now.
    #[inline]
    fn lockset_of(&mut self, t: usize, s: usize) -> u32 {
        match self.threads.get_mut(s).lockset {
            STALE_LOCKSET => self.intern_lockset(t, s),
            id => id,
        }
    }

    #[cold]
    fn intern_lockset(&mut self, t: usize, s: usize) -> u32 {
        let set: Vec<Held> = self
            .with_locks
            .held(t)
            .iter()
            .map(|&(lock, mode, _)| Held {
                lock,
                shared: mode == Mode::Read,
            })
            .collect();
        let id = self.locksets.intern(&set);
        self.threads.get_mut(s).lockset = id;
        id
    }

    /// A read, write or atomic access of `thread` at `pos` (merged order `seq`): checked against
    /// the shadow memory, then recorded there unless `keep` is false (the caller knows that no
    /// later access can conflict with it). The pairs it finds go to the findings.
    /// `parts`, when not empty, are the only granules of the access to look at (runs of
    /// them, first and last): on the others nothing can conflict with it (decision 0033).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn access(
        &mut self,
        (thread, pos, seq): (u32, u32, u64),
        addr: u64,
        size: u32,
        site: SiteId,
        kind: AccessKind,
        keep: bool,
        parts: &[(u64, u64)],
    ) {
        let access = self.check(thread, pos, addr, size, site, kind, keep, parts);
        if !self.found.is_empty() {
            self.count_found(seq, &access);
        }
    }

    /// The access as the shadow keeps it: with the lockset its thread holds now; and the
    /// thread's slot.
    #[inline(always)]
    fn shadow_access(
        &mut self,
        t: u32,
        pos: u32,
        addr: u64,
        size: u32,
        site: SiteId,
        kind: AccessKind,
    ) -> (ShadowAccess, usize) {
        let slot = match self.alive.get(t as usize) {
            Some(s) => s,
            None => self.start_accessing(t as usize),
        };
        let access = ShadowAccess {
            thread: t,
            pos,
            site,
            lockset: self.lockset_of(t as usize, slot),
            kind,
            addr,
            size,
        };
        (access, slot)
    }

    /// How many of thread `u`'s events come before thread `t`'s next one by both orders the
    /// pass judges with; 0 when `t` holds no slot (its first access, or a damaged trace's
    /// after its exit, whose place the clocks may have let go: the caller learns nothing).
    #[inline]
    pub fn known_by_both(&self, t: u32, u: u32) -> u32 {
        if self.alive.get(t as usize).is_none() {
            return 0;
        }
        self.with_locks
            .knows_prefix(t, u)
            .min(self.without_locks.knows_prefix(t, u))
    }

    /// Whether both clocks let the place of thread `t` go.
    #[cfg(test)]
    pub fn let_go_of(&self, t: usize) -> bool {
        self.with_locks.let_go_of(t) && self.without_locks.let_go_of(t)
    }

    /// The slot of thread `t`, which holds none: its first access, or its first since it
    /// exited.
    #[cold]
    #[inline(never)]
    fn start_accessing(&mut self, t: usize) -> usize {
        if self.with_locks.let_go_of(t) || self.without_locks.let_go_of(t) {
            self.accessed_after_let_go = true;
        }
        self.alive.slot(t)
    }

    /// Checks an access against the shadow memory and records it there; its conflicts are
    /// left in `self.found`.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn check(
        &mut self,
        t: u32,
        pos: u32,
        addr: u64,
        size: u32,
        site: SiteId,
        kind: AccessKind,
        keep: bool,
        parts: &[(u64, u64)],
    ) -> ShadowAccess {
        let (access, slot) = self.shadow_access(t, pos, addr, size, site, kind);
        // Only other threads' entries are read: the clocks as they stand will do. Most
        // accesses look at none of them.
        let (with_locks, without_locks) = (&self.with_locks, &self.without_locks);
        let with_locks = move |u: u32| with_locks.knows_prefix(t, u);
        let without_locks = move |u: u32| without_locks.knows_prefix(t, u);
        let locksets = &self.locksets;
        let found = &mut self.found;
        let since = self.threads.get(slot).map_or(0, |e| e.epoch);
        let judge = |thread, pos, lockset| {
            if with_locks(thread) <= pos {
                Some(Conflict::Unordered)
            } else if without_locks(thread) > pos || locksets.exclude(lockset, access.lockset) {
                None
            } else {
                Some(Conflict::Candidate)
            }
        };
        if !keep {
            self.shadow
                .check(&access, parts, judge, |earlier, verdict, at| {
                    found.push((earlier, verdict, at))
                });
            return access;
        }
        let report = |earlier, verdict, at| found.push((earlier, verdict, at));
        let dominated = |thread, pos| with_locks(thread) > pos;
        let settled = |thread, pos| with_locks(thread) > pos && without_locks(thread) > pos;
        if parts.is_empty() {
            self.shadow
                .access(&access, since, judge, report, dominated, settled);
        } else {
            self.shadow
                .access_parts(&access, parts, since, judge, report, dominated, settled);
        }
        access
    }

    /// A free of `thread` at `pos` (merged order `seq`) of the live block at `addr`: a write
    /// of the whole block, checked against the shadow before [`RaceState::sync`] forgets the
    /// block. A block not tracked (the budget had no room for it) has no known size: its free
    /// is not checked.
    pub fn free(&mut self, (thread, pos, seq): (u32, u32, u64), addr: u64, site: SiteId) {
        let Some(block) = self.heap.get(&addr).copied() else {
            return;
        };
        let size = u32::try_from(block.size).unwrap_or(u32::MAX);
        let (access, _) = self.shadow_access(thread, pos, addr, size, site, AccessKind::Free);
        let (with_locks, without_locks) = (&self.with_locks, &self.without_locks);
        let locksets = &self.locksets;
        let found = &mut self.found;
        self.shadow.check_free(
            &access,
            block.size,
            |u, p, lockset| {
                if with_locks.knows_prefix(thread, u) <= p {
                    Some(Conflict::Unordered)
                } else if without_locks.knows_prefix(thread, u) > p
                    || locksets.exclude(lockset, access.lockset)
                {
                    None
                } else {
                    Some(Conflict::Candidate)
                }
            },
            |earlier, verdict, at| found.push((earlier, verdict, at)),
        );
        if !self.found.is_empty() {
            self.count_found(seq, &access);
        }
    }

    /// Counts the pairs the access just handled found.
    #[inline(never)]
    fn count_found(&mut self, seq: u64, access: &ShadowAccess) {
        let access = *access;
        let found = std::mem::take(&mut self.found);
        let heap = &self.heap;
        // The block of the later access, looked up once for all its pairs.
        let mut later_block = None;
        for &(earlier, verdict, at) in &found {
            let freed = if self.freed.is_empty() {
                None
            } else {
                self.freed
                    .range(..=earlier.addr)
                    .next_back()
                    .map(|(_, &f)| f)
                    .filter(|&(t, p, b)| {
                        (t, p) == (earlier.thread, earlier.pos) && earlier.addr - b.addr < b.size
                    })
            };
            let earlier = match freed {
                Some((_, _, b)) => ShadowAccess {
                    kind: AccessKind::Free,
                    addr: b.addr,
                    size: b.size as u32,
                    ..earlier
                },
                None => earlier,
            };
            let key = pair_key(&earlier, &access);
            let place = Found { seq, at };
            let instance = || {
                let later = *later_block.get_or_insert_with(|| block_of(heap, access.addr));
                // The memory of a block freed is named by the block as it was.
                let freed = freed.map(|(_, _, b)| b);
                let earlier_block = if earlier.addr == access.addr {
                    later
                } else {
                    block_of(heap, earlier.addr)
                };
                Instance([
                    (earlier, earlier_block.or(freed)),
                    (access, later.or(freed)),
                ])
            };
            self.findings.add(key, verdict, place, instance);
        }
        self.found = found;
        self.found.clear();
    }
}

fn block_of(heap: &BTreeMap<u64, Block>, addr: u64) -> Option<Block> {
    let (_, b) = heap.range(..=addr).next_back()?;
    (addr - b.addr < b.size.max(1)).then_some(*b)
}

/// The kind of an atomic access.
pub fn atomic_kind(stores: bool) -> AccessKind {
    if stores {
        AccessKind::AtomicWrite
    } else {
        AccessKind::AtomicRead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An instance whose earlier access's position tells which it was.
    fn instance(n: u32) -> Instance {
        let access = ShadowAccess {
            thread: 0,
            pos: n,
            site: 1,
            lockset: Locksets::EMPTY,
            kind: AccessKind::Write,
            addr: 0x1000,
            size: 8,
        };
        Instance([(access, None), (access, None)])
    }

    fn found(seq: u64, entry: u32) -> Found {
        Found {
            seq,
            at: FoundAt {
                granule: 0x200,
                entry,
                line: 0,
            },
        }
    }

    proptest::proptest! {
        /// Whatever order instances come in (accesses in the merged order, the conflicts of
        /// one access in any), the first and the latest kept are those of all of them sorted
        /// by where they were found; each described once, and only if it is kept when it comes.
        #[test]
        fn the_instances_kept_are_the_first_and_the_latest_found(
            per_access in proptest::collection::vec(
                proptest::collection::vec(0u32..24, 0..20), 0..40),
        ) {
            let mut kept = KeptInstances::default();
            let mut all = Vec::new();
            let mut described = 0;
            // Instances among the first or the latest of those found so far when they come.
            let mut worth_describing = 0;
            for (seq, entries) in per_access.iter().enumerate() {
                // In the order generated: the conflicts of one access come in any order.
                let mut seen = std::collections::HashSet::new();
                let entries: Vec<u32> = entries.iter().copied().filter(|&e| seen.insert(e)).collect();
                for &e in &entries {
                    let f = found(seq as u64, e);
                    let n = all.len() as u32;
                    all.push((f, n));
                    let before = all.iter().filter(|(g, _)| *g < f).count();
                    let after = all.iter().filter(|(g, _)| *g > f).count();
                    if before < FIRST_INSTANCES || after < LATEST_INSTANCES {
                        worth_describing += 1;
                    }
                    kept.keep(f, || {
                        described += 1;
                        instance(n)
                    });
                }
            }
            proptest::prop_assert_eq!(described, worth_describing);
            let total = all.len();
            all.sort();
            let c = kept.into_candidates();
            proptest::prop_assert_eq!(c.count, total as u64);
            let first: Vec<u32> = all.iter().take(FIRST_INSTANCES).map(|&(_, n)| n).collect();
            let latest: Vec<u32> = all[total.saturating_sub(LATEST_INSTANCES)..]
                .iter()
                .map(|&(_, n)| n)
                .collect();
            let pos = |p: &Pair| p[0].access.pos;
            proptest::prop_assert_eq!(c.instances.iter().map(pos).collect::<Vec<_>>(), first);
            proptest::prop_assert_eq!(c.latest.iter().map(pos).collect::<Vec<_>>(), latest);
            let found_first: Vec<Found> = all.iter().take(FIRST_INSTANCES).map(|&(f, _)| f).collect();
            proptest::prop_assert_eq!(&c.found, &found_first);
        }
    }
}
