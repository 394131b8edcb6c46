//! Data races: two accesses to the same memory from different threads, at least one a write,
//! not both atomic, that nothing orders.
//!
//! Two rules make a race finding, both with verdict `predicted`:
//!
//! - **happens-before** ([`RacePass`], one streaming pass): the accesses are unordered by the
//!   C11 happens-before of the recorded run — create/join, lock release → acquire (rwlock
//!   readers not ordered with each other), barrier generations, `pthread_once`, semaphores,
//!   condition hand-offs, the program's annotations, release/acquire atomics and fences
//!   (`hb.rs`, `EdgeKinds::SYNC` with `EdgeKinds::LOCK`). C11 (5.1.2.4) calls such a pair a
//!   data race of that very execution: no other schedule is needed to make it one. Shadow
//!   memory (`shadow.rs`) keeps, per granule, the accesses a later one could race with.
//! - **sync-preserving** (`race_findings.rs`, after the walk): the accesses are ordered only
//!   through lock hand-offs, and hold no common lock. If the sync-preserving closure (`closure.rs`: thread
//!   order, the synchronisation no reordering may change, every read's writer, critical
//!   sections kept in trace order, the monitor rule) of the events strictly before the two
//!   accesses contains neither, then running that closure in trace order and then both
//!   accesses is a valid reordering of the run — every read reads what it read, every lock is
//!   free when taken — in which the two accesses are next together (Mathur, Pavlogiannis and
//!   Viswanathan, "Optimal prediction of synchronization-preserving races", POPL 2021). That is
//!   the witness the finding carries. Such races are invisible to happens-before: in the run,
//!   the critical sections that order them happened to come in that order.
//!
//! A `free` (and the old block of a `realloc`, recorded as its free) is a write of the whole
//! block by the freeing thread at the free's site (`AccessKind::Free`), checked against the
//! shadow before the block is forgotten (decision 0022); a block not tracked has no known size
//! and its free is not checked. A small block's free (64 bytes at most) then stays in the
//! shadow as a write of the block until the address is allocated again, so that another
//! thread's access after it, unordered with it, races with the free as ThreadSanitizer
//! reports it (a use after free).
//!
//! Pairs a reordering could only expose by reversing two critical sections on one lock
//! (sync-preserving prediction keeps their order) are left to `analyses/sync_reversal`. What
//! no rule reports: pairs of accesses
//! the recorder dropped as repeats within an epoch (their first instance is kept, FORMAT.md
//! §7.8). The candidate pairs checked with the closure are bounded (per pair of sites the first
//! `FIRST_INSTANCES` and the latest `LATEST_INSTANCES` instances, and the analysis's
//! candidate budget); the report says when either left a pair undecided.

mod granules;
pub(crate) mod locksets;
mod page_order;
mod private;
pub(crate) mod shadow;
mod site_sets;
mod state;

pub use page_order::{PageOrderPass, PageOrders};
pub use private::{PrivateLookup, PrivatePages};

use std::cell::Cell;
use std::collections::VecDeque;

use foresight_trace::event::EventKind;
use foresight_trace::tables::Tables;
use foresight_trace::SiteId;

use crate::stream::{Op, Pass, StreamEvent};

use locksets::Locksets;
use shadow::{AccessKind, ShadowAccess, SiteCounts, Untracked};
use state::{Found, RaceState};

/// The race pass's memory budget unless the command line says otherwise (`--race-memory`),
/// MiB: the shadow memory takes at most seven eighths of it, the live heap blocks the rest.
pub const DEFAULT_MEMORY_MIB: u64 = 512;

/// Instances of one pair of sites kept for the predictor: the first found, and the latest
/// (an early instance may be ordered by what a read read, where a later one of the same two
/// lines is not: a variable that one line always writes and another always reads).
pub(crate) const FIRST_INSTANCES: usize = 8;
pub(crate) const LATEST_INSTANCES: usize = 8;

/// What the race pass does with an access ([`RacePass::fate`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Nothing: no access of another thread can race with it.
    LeftOut,
    /// Checked against the shadow, not kept there: no later access can conflict with it.
    Checked,
    /// Checked and kept.
    Kept,
}

/// A live heap block (from the recorder's allocation events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) addr: u64,
    pub(crate) size: u64,
    pub(crate) site: SiteId,
    pub(crate) thread: u32,
}

/// One access of a race, as found.
#[derive(Clone, Debug)]
pub(crate) struct RaceAccess {
    pub(crate) access: ShadowAccess,
    /// The heap block holding the access, if any.
    pub(crate) block: Option<Block>,
    /// The static variable (and element) holding the access, when the trace names it.
    pub(crate) variable: Option<Variable>,
}

/// A static variable, as the trace's data records name it (`counters[3]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variable {
    /// The variable and element (`Tables::data_symbol`'s name).
    pub name: String,
    /// The file of its declaration, when known.
    pub file: Option<String>,
    /// The line of its declaration (0: unknown).
    pub line: u32,
}

/// Names the static data of the accesses the race pass reports, in place of the trace's data
/// records ([`Tables::data_symbol`]): for a trace that was not symbolised, the command line
/// reads the variables of only the accesses its findings hold from the binaries, rather than
/// every access's in a pass of its own over the events.
pub trait DataNames: Sync {
    /// The variable of each access, in order: what [`Tables::data_symbol`] gives the access
    /// once the trace is symbolised.
    fn names(&self, accesses: &[DataAccess]) -> Vec<Option<Variable>>;
}

/// An access whose static data [`DataNames`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataAccess {
    /// Run-time address of its first byte.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The write of a heap block by its `free` (decision 0022), not a recorded access.
    pub freed: bool,
}

/// The two accesses of one pair: the earlier one in the trace first.
pub(crate) type Pair = [RaceAccess; 2];

/// What the race pass found for one pair of access sites.
#[derive(Clone, Debug)]
pub struct SitePair {
    /// The first instance found.
    pub(crate) first: Pair,
    /// Instances found (pairs of dynamic accesses).
    pub(crate) count: u64,
    /// Where the first instance was found.
    found: Found,
}

/// The pairs of one pair of sites that happens-before orders only through locks.
#[derive(Clone, Debug)]
pub struct Candidates {
    /// The first [`FIRST_INSTANCES`] instances found.
    pub(crate) instances: Vec<Pair>,
    /// Instances found in all, kept or not.
    pub count: u64,
    /// Where each instance was found.
    found: Vec<Found>,
    /// The latest [`LATEST_INSTANCES`] instances found (some may also be among the first),
    /// and where.
    latest: VecDeque<Pair>,
    latest_found: VecDeque<Found>,
}

impl Candidates {
    /// The instances kept, each once: the first ones, then the latest that are not among them.
    pub(crate) fn kept(&self) -> impl Iterator<Item = &Pair> {
        self.instances.iter().chain(
            self.latest
                .iter()
                .zip(&self.latest_found)
                .filter(|(_, f)| !self.found.contains(f))
                .map(|(p, _)| p),
        )
    }
}

/// Sites of a pair, the smaller first: one finding per pair of lines.
type PairKey = (SiteId, SiteId);

/// The happens-before race pass: reads the merged stream once, in memory proportional to the
/// threads, the synchronisation objects, the live shared granules and the pairs of sites found
/// (never to the trace's length).
pub struct RacePass<'t> {
    /// The trace's tables, to name the variables of the pairs found.
    tables: Option<&'t Tables>,
    /// Names them instead of the tables, when given.
    names: Option<&'t dyn DataNames>,
    /// What a first pass found of each page of the whole trace, when there was one: the one
    /// thread that touches it, whose accesses stay out of the shadow, and its writers.
    private: PrivateLookup<'t>,
    /// Per thread, its events the pass has seen: whether a page's writers have made their
    /// last writes of it yet.
    seen: Vec<u32>,
    state: RaceState,
    accesses: u64,
    /// The trace has more threads than the shadow memory tells apart, or the events the pass
    /// was fed again were not those of the walk ([`RacePass::abandon`]): nothing is concluded.
    too_many_threads: bool,
    /// Bit `t % 64` of word `t / 64`: thread `t`'s creation is in the trace (the first
    /// thread needs none).
    created: Vec<u64>,
    /// Threads of the trace.
    threads: usize,
    /// Accesses of threads whose creation the trace lacks, left out.
    orphan_accesses: u64,
    /// Accesses counted in the outputs of earlier segments (`cut`).
    accesses_reported: u64,
    /// The memory budget is 0: the race analysis is left out, every event ignored.
    off: bool,
    /// The granules of the access being handled that lie on pages not ordered, when some of
    /// its pages are ([`PrivateLookup::unordered_runs`]).
    parts: Vec<(u64, u64)>,
    /// Which accesses' shadow slots the walk fetches ahead ([`RacePass::prefetch`]).
    fetch_ahead: FetchAhead,
    /// The page each step of the fetch ahead asked about last, and whether its accesses may
    /// reach the shadow ([`PrivateLookup::may_reach_shadow`]).
    ahead: Cell<(u64, bool)>,
    nearer: Cell<(u64, bool)>,
}

/// Which accesses' shadow slots the walk fetches ahead, for their misses to overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FetchAhead {
    /// Every access's: no shared page was found ordered.
    Every,
    /// Those on pages not found private or ordered, which many accesses reach: the pages'
    /// answer costs a look-up ahead, which pays only then.
    Unordered,
    /// None: most accesses to shared pages are left out (ordered pages).
    Never,
}

/// The walk fetches ahead the shadow slots of accesses to pages not ordered when at least
/// one in this many visits of shared pages is to such a page (`PrivatePages::unordered_visits`).
/// zstd's 2-worker recordings have one in 3 where the workers' compression contexts changed
/// hands under the pool's lock alone, where fetching ahead saved 6% of the time, and one in
/// 860 where they did not, where it cost 8% (docs/perf/analysis-speed-and-memory.md).
const FETCH_UNORDERED_FROM: u64 = 8;

/// What the race pass hands on.
#[derive(Debug, Default)]
pub struct RaceOutput {
    /// Pairs unordered by happens-before, by pair of sites.
    pub races: Vec<SitePair>,
    /// Pairs ordered only through lock hand-offs, holding no common lock.
    pub candidates: Vec<Candidates>,
    pub(crate) locksets: Locksets,
    /// Memory accesses read.
    pub accesses: u64,
    /// Shadow entries dropped because a granule was full (pairs may be missing), by the site
    /// of the access dropped.
    pub evicted: SiteCounts,
    /// Accesses not checked: the memory budget had no room to track the memory they touched.
    pub(crate) untracked: Untracked,
    /// Shadow entries dropped because their granule gave way to a new one in a full memory
    /// budget, by the site of the access dropped.
    pub(crate) given_way: SiteCounts,
    /// Granules that gave way to new ones.
    pub(crate) granules_given_way: u64,
    /// Heap blocks not tracked for want of room (their races name no block).
    pub(crate) untracked_blocks: u64,
    /// The memory budget the pass ran with, bytes.
    pub(crate) memory_budget: u64,
    /// The most granules tracked at once.
    pub peak_granules: usize,
    /// Accesses of threads whose creation the trace does not hold, which are left out.
    pub orphan_accesses: u64,
    /// False when the clocks outgrew their budget: nothing was concluded.
    pub complete: bool,
}

impl<'t> RacePass<'t> {
    /// A pass over `threads` threads in `memory_budget` bytes (0: no race analysis, as
    /// `graph` wants); `tables` names the variables of what it finds.
    pub fn new(threads: usize, tables: Option<&'t Tables>, memory_budget: u64) -> Self {
        let budget = memory_budget;
        RacePass {
            tables,
            names: None,
            private: PrivateLookup::new(None),
            seen: vec![0; threads.min(shadow::MAX_THREADS)],
            state: RaceState::new(threads, budget),
            accesses: 0,
            too_many_threads: threads > shadow::MAX_THREADS,
            created: {
                let mut bits = vec![0u64; threads.div_ceil(64)];
                if let Some(w) = bits.first_mut() {
                    *w = 1;
                }
                bits
            },
            threads,
            orphan_accesses: 0,
            accesses_reported: 0,
            off: budget == 0,
            parts: Vec::new(),
            fetch_ahead: FetchAhead::Every,
            ahead: Cell::new((u64::MAX, true)),
            nearer: Cell::new((u64::MAX, true)),
        }
    }

    /// Names the static data of what it finds with `names` rather than with the tables.
    pub fn with_data_names(mut self, names: Option<&'t dyn DataNames>) -> Self {
        self.names = names;
        self
    }

    /// Leaves out of the shadow the accesses to pages that `private` found one thread alone
    /// touches (decision 0031): no other thread's access can race with them; and the reads
    /// no other thread's write can meet, or none to come (decision 0032).
    pub fn with_private_pages(mut self, private: Option<&'t PrivatePages>) -> Self {
        self.private = PrivateLookup::new(private);
        self.fetch_ahead = match private {
            Some(p) if p.ordered_pages() > 0 => {
                if p.unordered_visits().saturating_mul(FETCH_UNORDERED_FROM) >= p.shared_visits() {
                    FetchAhead::Unordered
                } else {
                    FetchAhead::Never
                }
            }
            _ => FetchAhead::Every,
        };
        self
    }

    /// Ends a segment of the walk (`model::drive_segments`): the candidates found since the
    /// last cut whose pair of sites is not already a happens-before race, for the segment's
    /// closure to decide; the happens-before races are counted on to the end of the walk. The
    /// shadow memory, clocks and locksets go on. A candidate whose earlier access is in an
    /// earlier segment is not predicted there (every closure of the segment holds it).
    pub(crate) fn cut(&mut self) -> RaceOutput {
        let mut candidates = std::mem::take(&mut self.state.findings.candidates);
        candidates.retain(|k, _| !self.state.findings.races.contains_key(k));
        let findings = state::Findings {
            races: Default::default(),
            candidates,
        };
        let accesses = self.accesses - self.accesses_reported;
        self.accesses_reported = self.accesses;
        RaceOutput::new(
            Naming {
                tables: self.tables,
                names: self.names,
            },
            findings,
            self.state.locksets.clone(),
            Totals {
                accesses,
                evicted: SiteCounts::default(),
                untracked: Untracked::default(),
                given_way: SiteCounts::default(),
                granules_given_way: 0,
                untracked_blocks: 0,
                memory_budget: self.state.memory_budget,
                peak_granules: self.state.shadow.peak_granules(),
                orphan_accesses: 0,
                complete: self.state.complete() && !self.too_many_threads,
            },
        )
    }

    /// Concludes nothing from this trace: its input was not what the walk read.
    pub(crate) fn abandon(&mut self) {
        self.too_many_threads = true;
    }

    /// Whether the trace holds the creation of the event's thread (the first thread needs none).
    #[inline]
    fn created_thread(&self, ev: &StreamEvent) -> bool {
        let t = ev.thread as usize;
        self.created
            .get(t / 64)
            .is_some_and(|w| w >> (t % 64) & 1 == 1)
    }

    #[inline]
    fn access(&mut self, ev: &StreamEvent, addr: u64, size: u32, site: SiteId, kind: AccessKind) {
        self.accesses += 1;
        // A thread whose creation the trace lacks (its creator's events were lost when the
        // process ended) has no known predecessors: everything would look unordered with it.
        if !self.created_thread(ev) {
            self.orphan_accesses += 1;
            return;
        }
        let page = self.private.page(addr, size);
        let keep = match self.fate(page, ev.thread, kind) {
            Fate::LeftOut => return,
            Fate::Checked => false,
            Fate::Kept => true,
        };
        if !self.too_many_threads {
            let (first, last) = shadow::granule_span(addr, size);
            if first >> 9 != last >> 9 {
                // Over pages some of which may be ordered: only the others' granules.
                self.private.unordered_runs(addr, size, &mut self.parts);
            }
            if keep && self.state.shadow.wants_collection(last - first + 1) {
                self.state.collect(self.threads, &self.created);
            }
            self.state.access(
                (ev.thread, ev.pos, ev.seq),
                addr,
                size,
                site,
                kind,
                keep,
                &self.parts,
            );
            self.parts.clear();
        }
    }

    /// What becomes of an access of `thread` to memory the first pass knows as `page`
    /// (decisions 0031, 0032).
    #[inline(always)]
    fn fate(&self, page: &private::Page, thread: u32, kind: AccessKind) -> Fate {
        if page.private() || page.ordered() {
            return Fate::LeftOut;
        }
        if kind != AccessKind::Read {
            return Fate::Kept;
        }
        if page.read_races_nothing(thread) {
            // No other thread writes this memory: the read is one side of no race.
            return Fate::LeftOut;
        }
        // Every other writer of the page has made its last write of it, and frees it, if
        // ever, only after it joined this thread: no later access can conflict with this
        // read, which is only checked against the writes before.
        let seen = |w: u32| self.seen.get(w as usize).copied().unwrap_or(0);
        if !page.written_for_good(thread, seen, |w| self.private.joined_at(w, thread)) {
            return Fate::Kept;
        }
        // And when the reader already knows each of those writes by both orders, the check
        // would find nothing: the shadow is not asked (a miss in a table too large for the
        // cache, on real programs' hand-offs of buffers).
        if page.writes_known_by(thread, seen, |w| self.state.known_by_both(thread, w)) {
            return Fate::LeftOut;
        }
        Fate::Checked
    }

    /// Starts bringing the shadow slot of a plain access the walk will hand over a few events
    /// from now into the cache ([`shadow::Shadow::prefetch`]): the look-ups of a program's
    /// memory read at random then wait for their misses side by side. Without ordered pages,
    /// also for accesses the pass will leave out: asking the first pass's pages here first
    /// cost SQLite's analysis 7% more, and gained zstd's nothing; asking [`RacePass::fate`]
    /// itself, which also leaves out the reads whose writes are known, cost zstd's 21% more.
    /// With them, only where the pages' answer pays ([`FetchAhead`]).
    #[inline(always)]
    pub(crate) fn prefetch(&self, kind: &EventKind) {
        if self.fetch_ahead == FetchAhead::Never {
            return;
        }
        if let EventKind::Read { addr, size, .. } | EventKind::Write { addr, size, .. } = *kind {
            if self.fetch_ahead == FetchAhead::Unordered
                && !self.private.may_reach_shadow(addr, &self.ahead)
            {
                return;
            }
            // Both ends: most accesses over two granules are unaligned words, whose second
            // granule is as far from the first in the table as any other.
            let (first, last) = shadow::granule_span(addr, size);
            self.state.shadow.prefetch(first);
            if last != first {
                self.state.shadow.prefetch(last);
            }
        }
    }

    /// The second step of [`RacePass::prefetch`], nearer the access: its granule's spilled
    /// entries, once its slot has arrived ([`shadow::Shadow::prefetch_entries`]).
    #[inline(always)]
    pub(crate) fn prefetch_entries(&self, kind: &EventKind) {
        if self.fetch_ahead == FetchAhead::Never {
            return;
        }
        if let EventKind::Read { addr, .. } | EventKind::Write { addr, .. } = *kind {
            if self.fetch_ahead == FetchAhead::Unordered
                && !self.private.may_reach_shadow(addr, &self.nearer)
            {
                return;
            }
            self.state.shadow.prefetch_entries(addr >> 3);
        }
    }
}

impl Pass for RacePass<'_> {
    type Output = RaceOutput;

    #[inline]
    fn handle(&mut self, ev: &StreamEvent) {
        if self.off {
            return;
        }
        if let Some(s) = self.seen.get_mut(ev.thread as usize) {
            *s = ev.pos + 1;
        }
        match ev.op {
            // Plain accesses order nothing: the clocks and locksets need not see them.
            Op::Read { addr, size, site } => self.access(ev, addr, size, site, AccessKind::Read),
            Op::Write { addr, size, site } => self.access(ev, addr, size, site, AccessKind::Write),
            Op::Atomic(a) => {
                self.state.sync(ev);
                self.access(ev, a.addr, a.size, a.site, state::atomic_kind(a.stores));
            }
            // A free writes the whole block: checked while the block is still known, before
            // the clocks see it and the shadow forgets the block.
            Op::Free { addr, site } => {
                if self.created_thread(ev) && !self.too_many_threads {
                    self.state.free((ev.thread, ev.pos, ev.seq), addr, site);
                }
                self.state.sync(ev);
            }
            Op::Create { child: Some(c), .. } => {
                let c = c as usize;
                if c < self.threads {
                    self.created[c / 64] |= 1 << (c % 64);
                }
                self.state.sync(ev);
            }
            _ => self.state.sync(ev),
        }
    }

    fn finish(self) -> RaceOutput {
        let mut state = self.state;
        let complete = state.complete() && !self.too_many_threads;
        let evicted = std::mem::take(&mut state.shadow.evicted);
        let untracked = std::mem::take(&mut state.shadow.untracked);
        let given_way = std::mem::take(&mut state.shadow.given_way);
        RaceOutput::new(
            Naming {
                tables: self.tables,
                names: self.names,
            },
            state.findings,
            state.locksets,
            Totals {
                accesses: self.accesses - self.accesses_reported,
                evicted,
                untracked,
                given_way,
                granules_given_way: state.shadow.granules_given_way,
                untracked_blocks: state.untracked_blocks,
                memory_budget: state.memory_budget,
                peak_granules: state.shadow.peak_granules(),
                orphan_accesses: self.orphan_accesses,
                complete,
            },
        )
    }
}

/// The counts of a pass.
struct Totals {
    accesses: u64,
    evicted: SiteCounts,
    untracked: Untracked,
    given_way: SiteCounts,
    granules_given_way: u64,
    untracked_blocks: u64,
    memory_budget: u64,
    peak_granules: usize,
    orphan_accesses: u64,
    complete: bool,
}

impl RaceOutput {
    /// What a race pass hands on over events without a memory access (a segment before the
    /// trace's first one, `model::drive_segments_replaying`): no pairs, no accesses, the empty
    /// lockset only.
    pub(crate) fn without_accesses() -> Self {
        RaceOutput {
            locksets: Locksets::new(),
            complete: true,
            ..RaceOutput::default()
        }
    }

    /// The pairs found, in a fixed order (by the first instance's earlier access, then its
    /// later one: two pairs of sites never share both), the variables named.
    fn new(
        naming: Naming<'_>,
        findings: state::Findings,
        locksets: Locksets,
        totals: Totals,
    ) -> Self {
        let order = |p: &Pair| {
            let (a, b) = (&p[0].access, &p[1].access);
            (a.thread, a.pos, b.thread, b.pos)
        };
        let mut races: Vec<SitePair> = findings.races.into_values().collect();
        races.sort_by_key(|r| order(&r.first));
        let mut candidates: Vec<Candidates> = findings
            .candidates
            .into_iter()
            .filter(|(k, _)| !races.iter().any(|r| pair_key_of(&r.first) == *k))
            .map(|(_, c)| c.into_candidates())
            .collect();
        candidates.sort_by_key(|c| order(&c.instances[0]));
        // Every access named, in one order: the races' first instances, then each
        // candidate's instances, first and latest.
        let pairs = || {
            races.iter().map(|r| &r.first).chain(
                candidates
                    .iter()
                    .flat_map(|c| c.instances.iter().chain(&c.latest)),
            )
        };
        let names: Vec<Option<Variable>> = match naming.names {
            Some(names) => {
                let asked: Vec<DataAccess> = pairs()
                    .flatten()
                    .map(|a| DataAccess {
                        addr: a.access.addr,
                        len: u64::from(a.access.size),
                        freed: a.access.kind == AccessKind::Free,
                    })
                    .collect();
                let mut got = names.names(&asked);
                got.resize(asked.len(), None);
                got
            }
            None => pairs()
                .flatten()
                .map(|a| variable(naming.tables, &a.access))
                .collect(),
        };
        let mut names = names.into_iter();
        let mut name = |pair: &mut Pair| {
            for a in pair.iter_mut() {
                a.variable = names.next().flatten();
            }
        };
        for r in &mut races {
            name(&mut r.first);
        }
        for c in &mut candidates {
            c.instances.iter_mut().for_each(&mut name);
            c.latest.iter_mut().for_each(&mut name);
        }
        RaceOutput {
            races,
            candidates,
            locksets,
            accesses: totals.accesses,
            evicted: totals.evicted,
            untracked: totals.untracked,
            given_way: totals.given_way,
            granules_given_way: totals.granules_given_way,
            untracked_blocks: totals.untracked_blocks,
            memory_budget: totals.memory_budget,
            peak_granules: totals.peak_granules,
            orphan_accesses: totals.orphan_accesses,
            complete: totals.complete,
        }
    }
}

/// How the pairs found are named: by `names` when given, else by the tables.
struct Naming<'t> {
    tables: Option<&'t Tables>,
    names: Option<&'t dyn DataNames>,
}

/// The static variable (and element) an access touched, when the tables name it.
fn variable(tables: Option<&Tables>, access: &ShadowAccess) -> Option<Variable> {
    let s = tables?.data_symbol(access.addr, u64::from(access.size))?;
    Some(Variable {
        name: s.name,
        file: s.file.map(str::to_string),
        line: s.line,
    })
}

fn pair_key_of(p: &Pair) -> PairKey {
    state::pair_key(&p[0].access, &p[1].access)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hb::PLACES_WINDOW;
    use crate::stream::Stream;
    use foresight_trace::builder::TraceBuilder;
    use foresight_trace::event::{AtomicOp, EventKind, MemoryOrder};
    use foresight_trace::Trace;

    #[test]
    fn an_early_thread_s_access_is_judged_alike_after_the_clocks_let_older_threads_go() {
        // Main creates and joins one child after another, more than the clocks' table of
        // places holds; thread `watcher`, alive throughout, learns of child 7's end (main
        // publishes after joining it) but not of child 9's. Each child writes a scratch word
        // the others overwrite; child 7 and child 9 each write a word of their own, which
        // `watcher` writes at the end: ordered after child 7's write, racing with child 9's.
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let watcher = b.spawn(main, s, "watcher");
        let flag = |op, order| EventKind::Atomic {
            op,
            addr: 0x20,
            size: 4,
            order,
            site: s,
        };
        for i in 0..3 * PLACES_WINDOW {
            let child = b.spawn(main, s, "child");
            b.write(child, 0x3000, 8, s);
            match i {
                7 => b.write(child, 0x1000, 8, s),
                9 => b.write(child, 0x1008, 8, s),
                _ => {}
            }
            b.join(main, child, s);
            if i == 7 {
                b.event(main, flag(AtomicOp::Store, MemoryOrder::Release));
                b.event(watcher, flag(AtomicOp::Load, MemoryOrder::Acquire));
            }
        }
        b.write(watcher, 0x1000, 8, s);
        b.write(watcher, 0x1008, 8, s);
        let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
        let mut pass = RacePass::new(trace.threads.len(), None, 64 << 20);
        Stream::of_trace(&trace).drive(
            trace.merged().map(|m| (m.thread, m.index, m.event.kind)),
            &mut pass,
            &mut |_| {},
        );
        assert!(pass.state.let_go_of(100), "an early child's place went");
        let out = pass.finish();
        assert!(out.complete);
        let raced: Vec<u64> = out.races.iter().map(|r| r.first[0].access.addr).collect();
        assert_eq!(
            raced,
            [0x1008],
            "child 9's write races, child 7's is ordered"
        );
    }

    /// A random program of a main thread and two children over a heap block (one page), two
    /// words of another page and a buffer of three more: plain and locked reads and writes
    /// (some over two pages of the buffer), release stores and acquire loads of a flag,
    /// joins, the block's free.
    fn program(steps: &[(u8, u8, u8)]) -> Trace {
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let m = b.mutex("m");
        let s0 = b.site("main", "p.c", 1);
        let block = 0x10_0000u64;
        b.event(
            main,
            EventKind::Alloc {
                addr: block,
                size: 64,
                site: s0,
            },
        );
        let children = [b.spawn(main, s0, "a"), b.spawn(main, s0, "b")];
        let threads = [main, children[0], children[1]];
        let word = |w: u8| match w % 6 {
            w @ 0..4 => block + 8 * u64::from(w),
            w => 0x20_0000 + 8 * u64::from(w - 4),
        };
        let (mut joined, mut freed) = ([false; 2], false);
        for &(t, op, w) in steps {
            let t = usize::from(t % 3);
            if t > 0 && joined[t - 1] {
                continue;
            }
            let th = threads[t];
            let site = b.site(
                "f",
                "p.c",
                100 * t as u32 + 10 * u32::from(op % 10) + u32::from(w % 6),
            );
            // A buffer of three pages, 0x30_0000 on: an access over two of them, or within one.
            let buffer = 0x30_0000 + 4096 * u64::from(w % 3);
            // A flag, stored with release and loaded with acquire: hand-offs that order
            // both ways, in either direction between any two threads.
            let flag = |op, order| EventKind::Atomic {
                op,
                addr: 0x40_0000,
                size: 4,
                order,
                site,
            };
            match op % 10 {
                8 => b.event(th, flag(AtomicOp::Store, MemoryOrder::Release)),
                9 => b.event(th, flag(AtomicOp::Load, MemoryOrder::Acquire)),
                6 => b.write(
                    th,
                    buffer + 4096 - 8 * u64::from(1 + w % 2),
                    4096 + 16,
                    site,
                ),
                7 => b.read(th, buffer + 8 * u64::from(w % 2), 8, site),
                0 => b.read(th, word(w), 8, site),
                1 => b.write(th, word(w), 8, site),
                2 | 3 => {
                    b.lock(th, m, site);
                    if op % 6 == 2 {
                        b.read(th, word(w), 8, site);
                    } else {
                        b.write(th, word(w), 8, site);
                    }
                    b.unlock(th, m, site);
                }
                4 if t == 0 => {
                    let c = usize::from(w % 2);
                    if !joined[c] {
                        b.join(main, children[c], site);
                        joined[c] = true;
                    }
                }
                _ if !freed => {
                    b.event(th, EventKind::Free { addr: block, site });
                    freed = true;
                }
                _ => b.read(th, word(w), 4, site),
            }
        }
        Trace::from_bytes("t.trace", b.finish()).expect("trace reads")
    }

    /// The pairs of lines a pass found: races and candidates, by kind and line.
    fn lines_found(trace: &Trace, private: Option<&PrivatePages>) -> Vec<(bool, [(u32, bool); 2])> {
        let mut pass =
            RacePass::new(trace.threads.len(), None, 64 << 20).with_private_pages(private);
        Stream::of_trace(trace).drive(
            trace.merged().map(|m| (m.thread, m.index, m.event.kind)),
            &mut pass,
            &mut |_| {},
        );
        let out = pass.finish();
        let line = |a: &RaceAccess| (a.access.site, a.access.kind.is_write());
        let mut found: Vec<_> = out
            .races
            .iter()
            .map(|r| (true, [line(&r.first[0]), line(&r.first[1])]))
            .chain(
                out.candidates
                    .iter()
                    .flat_map(|c| c.kept())
                    .map(|p| (false, [line(&p[0]), line(&p[1])])),
            )
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }

    /// The first pass over `trace`, as `analyze` makes it; with `orders`, also the pass that
    /// finds the pages whose accesses are all ordered.
    fn first_pass(trace: &Trace, orders: bool) -> PrivatePages {
        let mut p = PrivatePages::default();
        let index = |id| trace.threads.iter().position(|t| t.thread == id);
        for (i, t) in trace.threads.iter().enumerate() {
            for (pos, e) in t.events.iter().enumerate() {
                p.note_event(i, pos as u32, &e.kind, index);
            }
        }
        p.finish();
        if orders {
            let found = PageOrderPass::run(
                trace.threads.len(),
                Some(&p),
                &Stream::of_trace(trace),
                trace.merged().map(|m| (m.thread, m.index, m.event.kind)),
            );
            p.note_orders(&found);
        }
        p
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Whatever the first pass leaves out (memory one thread touches, reads of memory
        /// no other thread writes) or checks without keeping (reads after every other writer's
        /// last write, before a free that follows a join), the pairs of lines found are those
        /// of the pass that keeps every access.
        #[test]
        fn what_the_first_pass_leaves_out_changes_no_pair_found(
            steps in proptest::collection::vec((0u8..3, 0u8..6, 0u8..6), 0..60)
        ) {
            let trace = program(&steps);
            let pages = first_pass(&trace, false);
            proptest::prop_assert_eq!(lines_found(&trace, Some(&pages)), lines_found(&trace, None));
        }

        /// Nor do the pages whose every two accesses of different threads are ordered both
        /// ways (decision 0033): their accesses are left out, a wide access's granules on them
        /// too, and the pairs of lines found are still those of the pass that keeps every
        /// access.
        #[test]
        fn what_the_page_order_pass_leaves_out_changes_no_pair_found(
            steps in proptest::collection::vec((0u8..3, 0u8..10, 0u8..6), 0..60)
        ) {
            let trace = program(&steps);
            let pages = first_pass(&trace, true);
            proptest::prop_assert_eq!(lines_found(&trace, Some(&pages)), lines_found(&trace, None));
        }
    }
}
