//! The happens-before race pass over one share of the address space (all of it when the pass
//! runs on one thread): the synchronisation every share follows — two streaming clocks, the
//! locksets, the live heap blocks — the shadow memory of its granules, and the pairs it found,
//! each with the place it was found ([`Found`]), so that shares merge into what one pass over
//! everything finds.

use foldhash::HashMap;
use std::collections::BTreeMap;

use foresight_trace::SiteId;

use crate::hb::{EdgeKinds, HbPass};
use crate::model::Mode;
use crate::stream::{Op, Pass, StreamEvent};

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

/// The pairs found, by pair of sites.
#[derive(Debug, Default)]
pub struct Findings {
    pub races: HashMap<PairKey, SitePair>,
    pub candidates: HashMap<PairKey, Candidates>,
}

/// Sites of a pair, the smaller first: one finding per pair of lines.
pub fn pair_key(a: &ShadowAccess, b: &ShadowAccess) -> PairKey {
    (a.site.min(b.site), a.site.max(b.site))
}

impl Findings {
    /// Counts a pair found at `found`. Pairs come in the order they are found within one
    /// share; `describe` is called only for an instance that is kept.
    pub fn add(
        &mut self,
        key: PairKey,
        verdict: Conflict,
        found: Found,
        describe: impl FnOnce() -> Pair,
    ) {
        match verdict {
            Conflict::Unordered => match self.races.get_mut(&key) {
                Some(r) => {
                    r.count += 1;
                    if found < r.found {
                        r.first = describe();
                        r.found = found;
                    }
                }
                None => {
                    self.races.insert(
                        key,
                        SitePair {
                            first: describe(),
                            count: 1,
                            found,
                        },
                    );
                }
            },
            Conflict::Candidate => {
                let c = self.candidates.entry(key).or_insert(Candidates {
                    instances: Vec::new(),
                    count: 0,
                    found: Vec::new(),
                    latest: Vec::new(),
                    latest_found: Vec::new(),
                });
                c.count += 1;
                c.keep(found, describe);
            }
        }
    }
}

impl Candidates {
    /// Keeps the instance if it is among the first [`FIRST_INSTANCES`] or the latest
    /// [`LATEST_INSTANCES`] found (shares merge into what one pass keeps: both are orders by
    /// where an instance was found).
    fn keep(&mut self, found: Found, describe: impl FnOnce() -> Pair) {
        let first_at = self.found.partition_point(|f| *f < found);
        let in_first = first_at < FIRST_INSTANCES;
        let latest_at = self.latest_found.partition_point(|f| *f < found);
        let in_latest = self.latest_found.len() < LATEST_INSTANCES || latest_at > 0;
        if !in_first && !in_latest {
            return;
        }
        let pair = describe();
        if in_latest {
            self.latest_found.insert(latest_at, found);
            self.latest.insert(latest_at, pair.clone());
            if self.latest.len() > LATEST_INSTANCES {
                self.latest_found.remove(0);
                self.latest.remove(0);
            }
        }
        if in_first {
            self.found.insert(first_at, found);
            self.instances.insert(first_at, pair);
            self.found.truncate(FIRST_INSTANCES);
            self.instances.truncate(FIRST_INSTANCES);
        }
    }
}

/// One share's state.
pub struct Shard {
    /// C11 happens-before (locks in), and the synchronisation no reordering may change (locks
    /// out): a pair ordered by the first but not the second is a candidate for prediction.
    with_locks: HbPass,
    without_locks: HbPass,
    pub shadow: Shadow,
    pub locksets: Locksets,
    /// Per thread: the lockset id of the locks it holds (`None` while stale: interned at the
    /// thread's next access, so lock-only stretches intern nothing). The locks held are those
    /// `with_locks` keeps to know which channel a release publishes on.
    lockset: Vec<Option<u32>>,
    heap: BTreeMap<u64, Block>,
    pub findings: Findings,
    /// Conflicts of the access being handled.
    found: Vec<(ShadowAccess, Conflict, FoundAt)>,
}

impl Shard {
    pub fn new(threads: usize) -> Self {
        Shard {
            with_locks: HbPass::streaming(threads, EdgeKinds::SYNC | EdgeKinds::LOCK),
            without_locks: HbPass::streaming(threads, EdgeKinds::SYNC),
            shadow: Shadow::new(),
            locksets: Locksets::new(),
            lockset: vec![Some(Locksets::EMPTY); threads],
            heap: BTreeMap::new(),
            findings: Findings::default(),
            found: Vec::new(),
        }
    }

    /// False once a clock outgrew its budget.
    pub fn complete(&self) -> bool {
        self.with_locks.complete() && self.without_locks.complete()
    }

    /// Every event but a plain read or write: the clocks, the locksets, the heap. An atomic
    /// access is also an access, which the caller hands to [`Shard::access`] afterwards.
    pub fn sync(&mut self, ev: &StreamEvent) {
        self.with_locks.handle(ev);
        self.without_locks.handle(ev);
        let t = ev.thread as usize;
        match ev.op {
            // The held set may have changed (a re-entry changes nothing, and interns to the
            // same id at the next access).
            Op::LockAcquired { .. }
            | Op::LockTry { acquired: true, .. }
            | Op::CondWaitEnd { .. }
            | Op::LockRelease { .. }
            | Op::CondWaitBegin { .. } => self.lockset[t] = None,
            Op::Alloc { addr, size, site } => {
                // A new object: whatever the address held before is forgotten.
                self.shadow.forget(addr, size);
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
            Op::Free { addr, .. } => {
                if let Some(b) = self.heap.remove(&addr) {
                    self.shadow.forget(b.addr, b.size);
                }
            }
            _ => {}
        }
    }

    /// The id of the locks thread `t` holds now.
    #[inline]
    fn lockset_of(&mut self, t: usize) -> u32 {
        match self.lockset[t] {
            Some(id) => id,
            None => self.intern_lockset(t),
        }
    }

    #[cold]
    fn intern_lockset(&mut self, t: usize) -> u32 {
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
        self.lockset[t] = Some(id);
        id
    }

    /// A read, write or atomic access of `thread` at `pos` (merged order `seq`): checked against
    /// the granules `owns` says are this share's, then recorded in them. The pairs it finds go
    /// to the share's findings.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn access(
        &mut self,
        ev: &StreamEvent,
        addr: u64,
        size: u32,
        site: SiteId,
        kind: AccessKind,
        owns: impl Fn(u64) -> bool,
    ) {
        let t = ev.thread;
        let lockset = self.lockset_of(t as usize);
        let access = ShadowAccess {
            thread: t,
            pos: ev.pos,
            site,
            lockset,
            kind,
            addr,
            size,
        };
        // Only other threads' entries are read: the clocks as they stand will do. Most
        // accesses look at none of them.
        let (with_locks, without_locks) = (&self.with_locks, &self.without_locks);
        let with_locks = move |u: u32| with_locks.knows(t).get(u as usize);
        let without_locks = move |u: u32| without_locks.knows(t).get(u as usize);
        let locksets = &self.locksets;
        let found = &mut self.found;
        self.shadow.access(
            &access,
            owns,
            |thread, pos, lockset| {
                if with_locks(thread) <= pos {
                    Some(Conflict::Unordered)
                } else if without_locks(thread) > pos || locksets.exclude(lockset, access.lockset) {
                    None
                } else {
                    Some(Conflict::Candidate)
                }
            },
            |earlier, verdict, at| found.push((earlier, verdict, at)),
            |thread, pos| with_locks(thread) > pos,
            |thread, pos| with_locks(thread) > pos && without_locks(thread) > pos,
        );
        if !self.found.is_empty() {
            self.count_found(ev.seq, &access);
        }
    }

    /// Counts the pairs the access just handled found.
    #[inline(never)]
    fn count_found(&mut self, seq: u64, access: &ShadowAccess) {
        let access = *access;
        let found = std::mem::take(&mut self.found);
        let heap = &self.heap;
        for &(earlier, verdict, at) in &found {
            let key = pair_key(&earlier, &access);
            let place = Found { seq, at };
            let pair = || describe(heap, earlier, access);
            self.findings.add(key, verdict, place, pair);
        }
        self.found = found;
        self.found.clear();
    }
}

fn block_of(heap: &BTreeMap<u64, Block>, addr: u64) -> Option<Block> {
    let (_, b) = heap.range(..=addr).next_back()?;
    (addr - b.addr < b.size.max(1)).then_some(*b)
}

/// The pair as reported: the blocks that hold the accesses now (the variables are named from
/// the tables when the pass ends).
fn describe(heap: &BTreeMap<u64, Block>, earlier: ShadowAccess, later: ShadowAccess) -> Pair {
    [earlier, later].map(|access| RaceAccess {
        access,
        block: block_of(heap, access.addr),
        variable: None,
    })
}

/// The kind of an atomic access.
pub fn atomic_kind(stores: bool) -> AccessKind {
    if stores {
        AccessKind::AtomicWrite
    } else {
        AccessKind::AtomicRead
    }
}
