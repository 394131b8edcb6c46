//! Shadow memory: for every 8-byte granule of the program's memory that the trace touched, the
//! accesses a later access could still race with.
//!
//! An entry is kept per (thread, site, kind) and granule: a later access of the same thread
//! from the same site supersedes it, losing no pair of sites a report could name (whatever races
//! with the earlier access races with the later one too: both are of one thread, the later one
//! after). Entries from other sites stay, so that every pair of racing lines is seen, not only
//! the last writer as FastTrack keeps (Flanagan & Freund, PLDI 2009).
//!
//! **Epochs.** Where a granule would otherwise spill or drop an entry, an access
//! merges into an entry of its thread, kind and locks from the thread's current epoch (no event
//! of the thread but plain accesses and allocations since): every later access is ordered with
//! both or with neither, so the verdicts stay exact. The same bytes from another line make the
//! entry stand for a set of lines (interned, `site_sets.rs`; each line is still reported, with
//! the epoch's newest position); the same line with other bytes widens its bytes. A thread
//! reading a buffer from a dozen lines between two synchronisations so keeps one entry, not a
//! dozen. Only entries of different epochs still fill a granule: it holds at most
//! [`CELL_CAPACITY`] entries, beyond which the oldest entry already ordered before the
//! newcomer goes first (then the oldest), and the evictions are counted by line.
//!
//! **Covered entries.** Before a full granule evicts, it drops the entries each line of which
//! a newer entry of the same thread, kind and locks holds with every byte of theirs
//! ([`Cell::drop_covered`]); an entry widened to more bytes of its line drops the line's older
//! entries within them at once. Whatever a later access would report of such an entry (its
//! line, unordered or a candidate), the newer one reports too: a later position of the same
//! thread is ordered before no more accesses than an earlier one, and the same locks exclude
//! the same ones. A granule one thread reads from the same lines in epoch after epoch (a
//! compressor's window, job after job) so keeps its lines' newest epoch instead of evicting.
//!
//! Bytes are tracked within a granule by a mask, so that two threads writing neighbouring bytes
//! of one word (two `char` fields of a struct) do not race.
//!
//! **Layout.** An entry is 20 bytes: thread, kind and byte mask packed in one word, position,
//! site, lockset, and the access's start and size for reports, as the low 16 bits of each
//! (from any granule of the access, the granule and the start's low bits give the whole
//! start, [`Entry::access`]); an access of [`LARGE_FROM`] bytes or more, a buffer copied,
//! keeps its start and size aside, by thread and position ([`LargeAccesses`]). A granule's
//! first [`INLINE`] entries live in its cell, in the table's own slot (`granules.rs`), without
//! an allocation of their own; a granule that needs more moves them to a [`Spill`] of
//! [`CELL_CAPACITY`] entries, named by its index in the shadow's [`Spills`]. A cell also
//! summarises its entries ([`Cell`]), so that most accesses look at none of them for
//! conflicts. Per granule tracked: a 64-byte slot, one cache line, its 8-byte key beside its
//! 56-byte cell, in a table at most three quarters full (up to twice that just after it
//! grew), plus a 320-byte spill for a granule that needs more than [`INLINE`] entries, kept as
//! two arrays: each entry's thread, kind, bytes and line, which an access compares with its
//! own all at once to find its entry, and the rest. An access over several granules (a buffer
//! copied) reads their slots' keys first, so that their misses overlap.
//!
//! **Collection.** An entry whose position every other thread has ordered before it, by both
//! orders the race pass judges with, can race with nothing any more (threads created later
//! inherit their creator's clock, so they order it too): before the table grows past
//! [`COLLECT_FROM_SLOTS`] slots, and whenever it is at the budget's limit, such entries are
//! dropped and the granules left empty go ([`Shadow::collect`]). A buffer one thread filled
//! before starting the threads that read it, or a job's memory once its result was handed
//! back, so stops costing a slot: the table holds the memory whose last accesses some thread
//! has not synchronised with yet, not all the memory the run touched.
//!
//! **Budget.** The table and the spills stay within the pass's memory budget
//! ([`Shadow::with_budget`]; spills within half of it). When the table would outgrow it,
//! the spilled granules first give up all but their newest [`INLINE`] entries (counted by
//! line in [`Shadow::evicted`]: pairs of lines may be missing, the memory is still checked);
//! then a granule not tracked yet takes the place of a tracked one near its home, the one of
//! fewest entries, whose entries are dropped (counted by line in [`Shadow::given_way`]:
//! decision 0030). Only an access wider than 64 bytes leaves the granules it finds no room
//! for unchecked ([`Shadow::untracked`], counted by line with its addresses), so that one
//! copy of a large buffer cannot empty the table. Real code (zstd's compressor) reads much of
//! its memory from many lines of one thread: on its 8 MiB run compaction kept 99.9% of the
//! accesses checked within the default budget, where refusing new granules first left 92%
//! unchecked; on its 32 MiB runs giving way checks the quarter of them that refusing left.

use foldhash::HashMap;

use super::granules::GranuleTable;
use super::site_sets::{Lines, SiteSets};

/// Evictions a full granule makes after a look for covered entries found none, before it
/// looks again: a granule of many threads or lines seldom has any, and the look costs the
/// square of its entries.
const COVERED_WAIT: u8 = 8;

/// How many entries a granule keeps.
pub(crate) const CELL_CAPACITY: usize = 16;

/// Entries a granule keeps in place, before it needs a spill of its own: a reader and a
/// writer, or two threads' accesses from one line each. Two rather than four: a third less
/// memory per granule, for a spill sooner when three or four lines touch one.
pub(crate) const INLINE: usize = 2;

const _: () = assert!(std::mem::size_of::<Cell>() == 56);

/// How many granules ahead a freed block's walk over its granules ([`Shadow::check_free`],
/// [`Shadow::forget`]) asks for their slots.
const FREE_AHEAD: u64 = 8;

/// Bytes a slot of the granule table takes: its key and its cell.
const SLOT_BYTES: usize = 8 + std::mem::size_of::<Cell>();

const _: () = assert!(super::granules::slot_bytes::<Cell>() == SLOT_BYTES && SLOT_BYTES == 64);

/// Bytes a granule's entries take once they move to a [`Spill`].
const SPILL_BYTES: usize = std::mem::size_of::<Spill>();

const _: () = assert!(SPILL_BYTES == CELL_CAPACITY * std::mem::size_of::<Entry>());

/// The smallest table that is collected before it grows ([`Shadow::wants_collection`]; 4 MiB
/// of slots): below it, growing costs less than looking for settled entries. At the budget's
/// limit the table is collected whatever its size.
pub(crate) const COLLECT_FROM_SLOTS: usize = 1 << 16;

/// The least a collection waits for (granules, spills and cuts asked for since the last one),
/// however small the table.
const MIN_SLOTS_BETWEEN_COLLECTIONS: usize = 4096;

/// Sites counted one by one in a [`SiteCounts`]; the accesses of any further site are counted
/// together, so that a trace naming millions of sites cannot grow the counts without bound.
const SITES_COUNTED: usize = 4096;

/// Accesses counted by site.
#[derive(Clone, Debug, Default)]
pub struct SiteCounts {
    pub(crate) by_site: HashMap<u32, u64>,
    /// Accesses of sites beyond the first [`SITES_COUNTED`].
    pub(crate) other_sites: u64,
    pub total: u64,
}

impl SiteCounts {
    #[cold]
    pub(crate) fn add(&mut self, site: u32) {
        self.total += 1;
        if let Some(n) = self.by_site.get_mut(&site) {
            *n += 1;
        } else if self.by_site.len() < SITES_COUNTED {
            self.by_site.insert(site, 1);
        } else {
            self.other_sites += 1;
        }
    }

    /// The sites with the most accesses, most first (then by site), at most `n`.
    pub(crate) fn most(&self, n: usize) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self.by_site.iter().map(|(&s, &c)| (s, c)).collect();
        v.sort_unstable_by_key(|&(s, c)| (std::cmp::Reverse(c), s));
        v.truncate(n);
        v
    }
}

/// Accesses the shadow did not check for races: the memory they touched was not tracked yet,
/// and the memory budget had no room to track it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Untracked {
    pub(crate) accesses: SiteCounts,
    /// The lowest and highest address of those accesses.
    pub(crate) lowest: u64,
    pub(crate) highest: u64,
}

impl Untracked {
    #[cold]
    fn add(&mut self, access: &ShadowAccess) {
        let end = access
            .addr
            .saturating_add(u64::from(access.size.max(1)) - 1);
        if self.accesses.total == 0 {
            (self.lowest, self.highest) = (access.addr, end);
        } else {
            self.lowest = self.lowest.min(access.addr);
            self.highest = self.highest.max(end);
        }
        self.accesses.add(access.site);
    }
}

/// Threads the shadow can tell apart: the thread index takes the low 22 bits of an entry's
/// first word.
pub(crate) const MAX_THREADS: usize = 1 << 22;

const THREAD_BITS: u32 = (1 << 22) - 1;
const KIND_SHIFT: u32 = 22;
const MASK_SHIFT: u32 = 24;

/// What an access did to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum AccessKind {
    Read = 0,
    Write = 1,
    AtomicRead = 2,
    /// An atomic store or read-modify-write.
    AtomicWrite = 3,
    /// A `free` (or the old block of a `realloc`): a plain write of the whole block. Never
    /// kept in the shadow as such ([`Shadow::check_free`] only checks, then the block is
    /// forgotten; a small block's free is then kept as a `Write`, which the race state names
    /// a free again when it reports it), so it needs no bits in an entry.
    Free = 5,
}

impl AccessKind {
    pub(crate) fn is_write(self) -> bool {
        self as u8 & 1 != 0
    }

    /// Two accesses to one byte conflict when one of them writes and they are not both atomic
    /// (atomics never race with atomics).
    #[inline]
    pub(crate) fn conflicts(self, other: AccessKind) -> bool {
        let (a, b) = (self as u8, other as u8);
        (a | b) & 1 != 0 && (a & b) & 2 == 0
    }

    fn from_bits(bits: u32) -> AccessKind {
        match bits & 3 {
            0 => AccessKind::Read,
            1 => AccessKind::Write,
            2 => AccessKind::AtomicRead,
            _ => AccessKind::AtomicWrite,
        }
    }
}

/// One access as the shadow keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShadowAccess {
    /// Dense thread index.
    pub(crate) thread: u32,
    /// Position of the access in its thread.
    pub(crate) pos: u32,
    pub(crate) site: u32,
    /// The locks held at the access ([`super::locksets::Locksets`] id).
    pub(crate) lockset: u32,
    pub(crate) kind: AccessKind,
    /// The whole access, for reports (it may span granules).
    pub(crate) addr: u64,
    pub(crate) size: u32,
}

/// Accesses of at least this many bytes keep their start and size in the shadow's
/// [`LargeAccesses`] rather than in their entries. Below it, the low 16 bits of an access's
/// start say the whole start from any granule it touches ([`Entry::access`]).
const LARGE_FROM: u32 = 0xfff8;

/// The size half of an entry's `span` for an access of [`LARGE_FROM`] bytes or more.
const LARGE: u32 = 0xffff;

/// One access in one granule.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// Thread (low 22 bits), kind (2 bits), byte mask within the granule (high 8 bits).
    tkm: u32,
    pos: u32,
    site: u32,
    lockset: u32,
    /// For reports: the low 16 bits of the access's first byte (high half) and its size (low
    /// half), or [`LARGE`] as the size of an access kept whole in [`LargeAccesses`].
    span: u32,
}

/// An access's start and size as an entry keeps them ([`Entry::span`]).
#[inline]
fn span_of(a: &ShadowAccess) -> u32 {
    if a.size < LARGE_FROM {
        (a.addr as u32) << 16 | a.size
    } else {
        LARGE
    }
}

impl Entry {
    fn new(a: &ShadowAccess, mask: u8) -> Self {
        Entry {
            tkm: a.thread | (a.kind as u32) << KIND_SHIFT | (mask as u32) << MASK_SHIFT,
            pos: a.pos,
            site: a.site,
            lockset: a.lockset,
            span: span_of(a),
        }
    }

    /// Becomes a later access of the same thread, site and kind.
    #[inline]
    fn update(&mut self, a: &ShadowAccess, mask: u8) {
        self.tkm = a.thread | (a.kind as u32) << KIND_SHIFT | (mask as u32) << MASK_SHIFT;
        self.pos = a.pos;
        self.lockset = a.lockset;
        self.span = span_of(a);
    }

    #[inline]
    fn thread(&self) -> u32 {
        self.tkm & THREAD_BITS
    }

    #[inline]
    fn kind(&self) -> AccessKind {
        AccessKind::from_bits(self.tkm >> KIND_SHIFT)
    }

    #[inline]
    fn mask(&self) -> u8 {
        (self.tkm >> MASK_SHIFT) as u8
    }

    /// Whether the access's start and size are in [`LargeAccesses`].
    #[inline]
    fn is_large(&self) -> bool {
        self.span & 0xffff == LARGE
    }

    /// The access, whole, as found in `granule`. An access touching the granule starts at
    /// most `size + 6` bytes before the granule's last byte, less than 2^16 for a size below
    /// [`LARGE_FROM`]: the low 16 bits of the difference are the difference.
    fn access(&self, granule: u64, large: &LargeAccesses) -> ShadowAccess {
        let (addr, size) = if self.is_large() {
            // Every large access is noted before its entries are made; a position repeated
            // by a thread (past 2^32 events of it) can only name another of its accesses.
            large
                .get(self.thread(), self.pos)
                .unwrap_or((granule * 8, 8))
        } else {
            let last = granule * 8 + 7;
            let below = (last as u16).wrapping_sub((self.span >> 16) as u16);
            (last - u64::from(below), self.span & 0xffff)
        };
        ShadowAccess {
            thread: self.thread(),
            pos: self.pos,
            site: self.site,
            lockset: self.lockset,
            kind: self.kind(),
            addr,
            size,
        }
    }
}

/// The start and size of the accesses of [`LARGE_FROM`] bytes or more that entries may still
/// name, by thread and position (each names one access). A program copying buffers of
/// megabytes makes few of them, each over thousands of granules; the map is swept of those
/// no entry names when it has doubled since the last sweep ([`Shadow::sweep_large`]).
#[derive(Debug)]
pub(crate) struct LargeAccesses {
    by_access: HashMap<(u32, u32), (u64, u32)>,
    /// The size at which the map is swept next.
    sweep_at: usize,
}

impl Default for LargeAccesses {
    fn default() -> Self {
        LargeAccesses {
            by_access: HashMap::default(),
            sweep_at: Self::SWEEP_FROM,
        }
    }
}

impl LargeAccesses {
    /// The least size at which the map is swept.
    const SWEEP_FROM: usize = 4096;

    fn note(&mut self, a: &ShadowAccess) {
        self.by_access.insert((a.thread, a.pos), (a.addr, a.size));
    }

    fn get(&self, thread: u32, pos: u32) -> Option<(u64, u32)> {
        self.by_access.get(&(thread, pos)).copied()
    }

    fn wants_sweep(&self) -> bool {
        self.by_access.len() >= self.sweep_at
    }
}

/// The entries of one granule, oldest first, and a summary of them that lets an access skip
/// the conflict checks when no other thread's entry can conflict with it. 56 bytes: with its
/// key, a slot is one cache line.
#[derive(Clone, Debug, Default)]
struct Cell {
    /// The entries while they fit; once they spill to a [`Spill`] of the shadow's [`Spills`],
    /// the first one's `pos` is its index there.
    inline: [Entry; INLINE],
    /// Per thread below 31: a bit of its own when the cell holds an entry of the thread, in
    /// `threads`, and a writing one (plain or atomic), in `writers`; every thread from 31 on
    /// shares bit 31, which can only make a check look needed (for one of those threads, its
    /// own bit may stand for others).
    threads: u32,
    writers: u32,
    /// Per thread below 32: a bit when every other thread's writing entry here is ordered
    /// before the thread by both orders ([`Shadow::access`]'s `settled`). Those orders only
    /// grow, so the bit holds until another thread's writing entry is added or changed: until
    /// then a read of the thread can race with nothing here, nor be a candidate, and skips the
    /// conflict checks.
    read_clean: u32,
    /// Bit `i`: entry `i` stands for accesses of several lines merged within one epoch of its
    /// thread, and its `site` is the id of their set ([`SiteSets`]).
    merged: u16,
    len: u8,
    /// [`SPILLED`], [`NESTED`], and the evictions left before a full cell looks for covered
    /// entries again after a look found none (from [`WAIT_SHIFT`] on;
    /// [`Cell::drop_covered`] costs the square of the entries).
    flags: u8,
}

/// The entries moved to a [`Spill`].
const SPILLED: u8 = 1;
/// Two entries of one thread, kind and site have held bytes one inside the other's here.
/// Until then, an entry with exactly the newcomer's thread, kind, site and bytes is the only
/// one it supersedes.
const NESTED: u8 = 2;
const WAIT_SHIFT: u32 = 4;

const _: () = assert!(COVERED_WAIT as u32 <= 0xff >> WAIT_SHIFT);

/// A granule's entries once they outgrow its cell, as two arrays: each entry's thread, kind,
/// bytes and line ([`Spill::key`]), which an access compares with its own at once to find its
/// entry, and the rest.
#[derive(Clone, Debug)]
struct Spill {
    keys: [u64; CELL_CAPACITY],
    rest: [Rest; CELL_CAPACITY],
}

/// An entry's fields other than its key.
#[derive(Clone, Copy, Debug, Default)]
struct Rest {
    pos: u32,
    lockset: u32,
    span: u32,
}

impl Spill {
    const EMPTY: Spill = Spill {
        keys: [0; CELL_CAPACITY],
        rest: [Rest {
            pos: 0,
            lockset: 0,
            span: 0,
        }; CELL_CAPACITY],
    };

    #[inline]
    fn key(e: &Entry) -> u64 {
        u64::from(e.tkm) | u64::from(e.site) << 32
    }

    #[inline]
    fn get(&self, i: usize) -> Entry {
        let (key, rest) = (self.keys[i], self.rest[i]);
        Entry {
            tkm: key as u32,
            pos: rest.pos,
            site: (key >> 32) as u32,
            lockset: rest.lockset,
            span: rest.span,
        }
    }

    #[inline]
    fn set(&mut self, i: usize, e: Entry) {
        self.keys[i] = Spill::key(&e);
        self.rest[i] = Rest {
            pos: e.pos,
            lockset: e.lockset,
            span: e.span,
        };
    }
}

/// Spills handed out at a time, as one allocation (320 KiB): few enough chunks that their
/// pointers stay in cache, and no spill ever moves (a vector doubling would copy them all,
/// holding both copies at once).
const SPILLS_PER_CHUNK: usize = 1024;

/// The granules' spilled entries, by index: a cell names its [`Spill`] in 4 bytes rather than
/// a pointer's 8 and a tag, which keeps a slot to one cache line, and a spill costs no
/// allocation of its own. Spills given back are handed out again first.
#[derive(Debug, Default)]
pub(crate) struct Spills {
    chunks: Vec<Box<[Spill; SPILLS_PER_CHUNK]>>,
    free: Vec<u32>,
    /// Indices ever handed out: those below it are in a chunk.
    fresh: usize,
    /// Spills handed out and not given back.
    live: usize,
}

impl Spills {
    fn take(&mut self) -> u32 {
        self.live += 1;
        if let Some(i) = self.free.pop() {
            return i;
        }
        if self.fresh == self.chunks.len() * SPILLS_PER_CHUNK {
            let chunk = vec![Spill::EMPTY; SPILLS_PER_CHUNK].into_boxed_slice();
            self.chunks
                .push(chunk.try_into().expect("a chunk's length"));
        }
        self.fresh += 1;
        (self.fresh - 1) as u32
    }

    fn give_back(&mut self, i: u32) {
        self.live -= 1;
        self.free.push(i);
    }

    /// Gives back every spill at once.
    fn clear(&mut self) {
        *self = Spills::default();
    }

    #[inline]
    fn get(&self, i: u32) -> &Spill {
        let i = i as usize;
        &self.chunks[i / SPILLS_PER_CHUNK][i % SPILLS_PER_CHUNK]
    }

    #[inline]
    fn get_mut(&mut self, i: u32) -> &mut Spill {
        let i = i as usize;
        &mut self.chunks[i / SPILLS_PER_CHUNK][i % SPILLS_PER_CHUNK]
    }
}

/// A copy of a cell's entries, for the passes that are not on an access's way.
struct EntryList {
    len: u8,
    entries: [Entry; CELL_CAPACITY],
}

impl std::ops::Deref for EntryList {
    type Target = [Entry];

    fn deref(&self) -> &[Entry] {
        &self.entries[..self.len as usize]
    }
}

#[inline]
fn thread_bit(thread: u32) -> u32 {
    1u32 << thread.min(31)
}

/// Whether every line of `want` (the set `set` of lines, sorted) is held by one of the
/// entries `among` (bits): an entry of one line holds its line, an entry of a set its set's.
/// Sets are interned, so an entry of the same set holds them all.
fn held_by(
    sets: &SiteSets,
    lines: &[u32],
    merged: u64,
    among: u64,
    set: u32,
    want: &[u32],
) -> bool {
    if want.len() > 64 {
        // Beyond a set's longest (`MAX_SET_LEN`): line by line.
        return want.iter().all(|&line| {
            bits(among).any(|j| {
                if merged >> j & 1 != 0 {
                    sets.set(lines[j]).binary_search(&line).is_ok()
                } else {
                    lines[j] == line
                }
            })
        });
    }
    let all = if want.len() == 64 {
        u64::MAX
    } else {
        (1u64 << want.len()) - 1
    };
    let mut held = 0u64;
    for j in bits(among) {
        let site = lines[j];
        if merged >> j & 1 == 0 {
            if let Ok(a) = want.binary_search(&site) {
                held |= 1 << a;
            }
        } else if site == set {
            return true;
        } else {
            let have = sets.set(site);
            let (mut a, mut b) = (0, 0);
            while a < want.len() && b < have.len() {
                match want[a].cmp(&have[b]) {
                    std::cmp::Ordering::Less => a += 1,
                    std::cmp::Ordering::Greater => b += 1,
                    std::cmp::Ordering::Equal => {
                        held |= 1 << a;
                        a += 1;
                        b += 1;
                    }
                }
            }
        }
        if held == all {
            return true;
        }
    }
    held == all
}

/// The indices of the bits set in `b`, lowest first.
#[inline]
fn bits(mut b: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let i = b.trailing_zeros() as usize;
        b &= b.wrapping_sub(1);
        (i < 64).then_some(i)
    })
}

impl Cell {
    /// How many entries the cell holds.
    #[inline]
    fn len(&self) -> usize {
        self.len as usize
    }

    #[inline]
    fn is_spilled(&self) -> bool {
        self.flags & SPILLED != 0
    }

    /// The index of the cell's [`Spill`], when it has one.
    #[inline]
    fn spill(&self) -> u32 {
        self.inline[0].pos
    }

    #[inline]
    fn nested(&self) -> bool {
        self.flags & NESTED != 0
    }

    #[inline]
    fn set_nested(&mut self, nested: bool) {
        self.flags = self.flags & !NESTED | if nested { NESTED } else { 0 };
    }

    #[inline]
    fn covered_wait(&self) -> u8 {
        self.flags >> WAIT_SHIFT
    }

    #[inline]
    fn set_covered_wait(&mut self, wait: u8) {
        self.flags = self.flags & ((1 << WAIT_SHIFT) - 1) | wait << WAIT_SHIFT;
    }

    /// Entry `i`.
    #[inline]
    fn get(&self, sp: &Spills, i: usize) -> Entry {
        if self.is_spilled() {
            sp.get(self.spill()).get(i)
        } else {
            self.inline[i]
        }
    }

    /// Entry `i`'s thread, kind and bytes (low half) and line (high half): [`Spill::key`].
    #[inline]
    fn key(&self, sp: &Spills, i: usize) -> u64 {
        if self.is_spilled() {
            sp.get(self.spill()).keys[i]
        } else {
            Spill::key(&self.inline[i])
        }
    }

    /// Replaces entry `i`.
    #[inline]
    fn set(&mut self, sp: &mut Spills, i: usize, e: Entry) {
        if self.is_spilled() {
            sp.get_mut(self.spill()).set(i, e);
        } else {
            self.inline[i] = e;
        }
    }

    /// A copy of the entries, oldest first.
    fn entries(&self, sp: &Spills) -> EntryList {
        let mut list = EntryList {
            len: self.len,
            entries: [Entry::default(); CELL_CAPACITY],
        };
        for i in 0..self.len() {
            list.entries[i] = self.get(sp, i);
        }
        list
    }

    /// The first entry of exactly `tkm` and `site`.
    #[inline]
    fn find_exact(&self, sp: &Spills, tkm: u32, site: u32) -> Option<usize> {
        if !self.is_spilled() {
            return self.inline[..self.len()]
                .iter()
                .position(|e| e.tkm == tkm && e.site == site);
        }
        let s = sp.get(self.spill());
        let want = u64::from(tkm) | u64::from(site) << 32;
        let mut hits = 0u32;
        for j in 0..CELL_CAPACITY {
            hits |= u32::from(s.keys[j] == want) << j;
        }
        hits &= (1u32 << self.len) - 1;
        (hits != 0).then(|| hits.trailing_zeros() as usize)
    }

    /// Whether an access of `thread` (writing or not) may conflict with another thread's
    /// entry here.
    #[inline]
    fn others_may_conflict(&self, thread: u32, writes: bool) -> bool {
        let others = if writes { self.threads } else { self.writers };
        if thread >= 31 {
            // Its bit is shared: any entry may be another thread's.
            return others != 0;
        }
        others & !thread_bit(thread) != 0
    }

    fn note(&mut self, e: &Entry) {
        let bit = thread_bit(e.thread());
        self.threads |= bit;
        if e.kind().is_write() {
            self.writers |= bit;
            self.wrote(e.thread());
        }
    }

    /// A writing entry of `thread` was added or changed: no other thread's read is clean.
    #[inline]
    fn wrote(&mut self, thread: u32) {
        self.read_clean &= if thread < 32 { thread_bit(thread) } else { 0 };
    }

    /// Whether a read of `thread` here can skip the conflict checks.
    #[inline]
    fn read_is_clean(&self, thread: u32) -> bool {
        thread < 32 && self.read_clean & thread_bit(thread) != 0
    }

    /// The summary again, after entries went.
    fn resummarise(&mut self, sp: &Spills) {
        // Fewer entries keep `read_clean` true.
        let mut threads = 0;
        let mut writers = 0;
        for i in 0..self.len() {
            let e = self.get(sp, i);
            let bit = thread_bit(e.thread());
            threads |= bit;
            if e.kind().is_write() {
                writers |= bit;
            }
        }
        self.threads = threads;
        self.writers = writers;
    }

    fn push(&mut self, sp: &mut Spills, e: Entry) {
        self.note(&e);
        const KEY_BITS: u32 = THREAD_BITS | 3 << KIND_SHIFT;
        let mask = e.mask();
        let nests = (0..self.len()).any(|i| {
            let o = self.get(sp, i);
            (o.tkm ^ e.tkm) & KEY_BITS == 0 && o.site == e.site && o.mask() & mask == mask
        });
        if nests {
            self.set_nested(true);
        }
        let n = self.len();
        if !self.is_spilled() && n >= INLINE {
            let index = sp.take();
            let s = sp.get_mut(index);
            for (i, o) in self.inline.iter().enumerate() {
                s.set(i, *o);
            }
            self.inline = Default::default();
            self.inline[0].pos = index;
            self.flags |= SPILLED;
        }
        self.len += 1;
        self.set(sp, n, e);
    }

    /// The line or lines entry `i` stands for.
    #[inline]
    fn lines(&self, sp: &Spills, i: usize) -> Lines {
        let site = self.get(sp, i).site;
        if self.is_merged(i) {
            Lines::Set(site)
        } else {
            Lines::Site(site)
        }
    }

    #[inline]
    fn is_merged(&self, i: usize) -> bool {
        self.merged >> i & 1 != 0
    }

    /// Moves the entries of a spilled cell that has at most [`INLINE`] of them back into it,
    /// giving its spill back.
    fn unspill(&mut self, sp: &mut Spills) {
        if self.is_spilled() {
            debug_assert!(self.len() <= INLINE);
            let index = self.spill();
            let s = sp.get(index);
            let mut inline = [Entry::default(); INLINE];
            for (i, slot) in inline.iter_mut().enumerate().take(self.len()) {
                *slot = s.get(i);
            }
            self.inline = inline;
            self.flags &= !SPILLED;
            sp.give_back(index);
        }
    }

    /// Gives back the cell's spill, if any, as the cell goes.
    fn release(&self, sp: &mut Spills) {
        if self.is_spilled() {
            sp.give_back(self.spill());
        }
    }

    /// Removes entry `i`, keeping the others in order.
    fn remove(&mut self, sp: &mut Spills, i: usize) {
        let below = (1u16 << i) - 1;
        self.merged = self.merged & below | self.merged >> 1 & !below;
        let n = self.len();
        if self.is_spilled() {
            let s = sp.get_mut(self.spill());
            s.keys.copy_within(i + 1..n, i);
            s.rest.copy_within(i + 1..n, i);
        } else {
            self.inline.copy_within(i + 1..n, i);
        }
        self.len -= 1;
        self.resummarise(sp);
    }

    /// Keeps the entries `keep(entry, merged)` says, in order.
    fn retain(&mut self, sp: &mut Spills, keep: impl Fn(&Entry, bool) -> bool) {
        self.retain_at(sp, |_, e, merged| keep(e, merged));
    }

    /// Keeps the entries `keep(index, entry, merged)` says, in order.
    fn retain_at(&mut self, sp: &mut Spills, keep: impl Fn(usize, &Entry, bool) -> bool) {
        let merged = self.merged;
        let mut still_merged = 0u16;
        let mut kept = 0;
        for i in 0..self.len() {
            let m = merged >> i & 1 != 0;
            let e = self.get(sp, i);
            if keep(i, &e, m) {
                self.set(sp, kept, e);
                still_merged |= u16::from(m) << kept;
                kept += 1;
            }
        }
        self.len = kept as u8;
        self.merged = still_merged;
        self.resummarise(sp);
    }
}

impl Cell {
    /// Drops the entries each line of which a newer entry of the same thread, kind and locks
    /// holds, with every byte of theirs: whatever a later access would report of such an
    /// entry (a line of its thread, unordered or a candidate), the newer one reports too, since
    /// a later position is ordered before no more than an earlier one and the same locks
    /// exclude the same accesses. A granule one thread reads from many lines over many epochs
    /// so keeps each line's newest epoch, not every epoch until it is full. Only the entries
    /// of `thread` and `kind` (the newcomer's, which needs the room) are looked at. Returns
    /// how many went.
    #[cold]
    #[inline(never)]
    fn drop_covered(
        &mut self,
        sp: &mut Spills,
        sets: &SiteSets,
        thread: u32,
        kind: AccessKind,
    ) -> usize {
        let covered = self.covered(sp, sets, thread, kind);
        if covered == 0 {
            return 0;
        }
        self.retain_at(sp, |i, _, _| covered >> i & 1 == 0);
        covered.count_ones() as usize
    }

    /// The entries [`Cell::drop_covered`] drops, as bits. Only entries of the newcomer's
    /// thread and kind are covered, and only by each other: an entry is covered when newer
    /// ones of them under the same locks, each with every byte of it, hold all its lines.
    /// For each entry the newer ones and those of its line are found as bits by comparing
    /// arrays of the cell's fields; only the entries standing for sets of lines are looked at
    /// one by one. On the recorded SQLite trace, whose full granules ask this on many pushes,
    /// the passes for each entry over every entry (and their sets) took 9% of the analysis.
    #[inline]
    fn covered(&self, sp: &Spills, sets: &SiteSets, thread: u32, kind: AccessKind) -> u64 {
        const KEY_BITS: u32 = THREAD_BITS | 3 << KIND_SHIFT;
        let key = thread | (kind as u32) << KIND_SHIFT;
        let n = self.len();
        // The fields compared, in arrays: each entry's newer entries and those of its line
        // are then found by comparing arrays (vector instructions), not by a pass per pair.
        // A spilled cell's are read from its own arrays, without assembling its entries
        // first. Slots past the last entry hold whatever they hold: only bits of entries
        // of the key are ever used.
        let (mut tkms, mut lines, mut positions, mut locks) = (
            [0u32; CELL_CAPACITY],
            [0u32; CELL_CAPACITY],
            [0u32; CELL_CAPACITY],
            [0u32; CELL_CAPACITY],
        );
        if self.is_spilled() {
            let s = sp.get(self.spill());
            for j in 0..CELL_CAPACITY {
                tkms[j] = s.keys[j] as u32;
                lines[j] = (s.keys[j] >> 32) as u32;
                positions[j] = s.rest[j].pos;
                locks[j] = s.rest[j].lockset;
            }
        } else {
            for (j, e) in self.inline.iter().enumerate().take(n) {
                tkms[j] = e.tkm;
                lines[j] = e.site;
                positions[j] = e.pos;
                locks[j] = e.lockset;
            }
        }
        let mut of_key = 0u64;
        for (j, &tkm) in tkms.iter().enumerate() {
            of_key |= u64::from(tkm & KEY_BITS == key) << j;
        }
        of_key &= (1u64 << n) - 1;
        if of_key.count_ones() < 2 {
            return 0;
        }
        let merged = u64::from(self.merged);
        let (one_line, of_sets) = (of_key & !merged, of_key & merged);
        let mut covered = 0u64;
        for i in bits(of_key) {
            let (pos, lockset, mask, site) =
                (positions[i], locks[i], tkms[i] >> MASK_SHIFT, lines[i]);
            // Of the thread and kind, later, under the same locks, with every byte of `e`.
            let mut newer = 0u64;
            let mut of_line = 0u64;
            for j in 0..CELL_CAPACITY {
                let n = (positions[j] > pos)
                    & (locks[j] == lockset)
                    & ((tkms[j] >> MASK_SHIFT) & mask == mask);
                newer |= u64::from(n) << j;
                of_line |= u64::from(lines[j] == site) << j;
            }
            newer &= of_key;
            let is_covered = if newer == 0 {
                false
            } else if merged >> i & 1 != 0 {
                held_by(sets, &lines, merged, newer, site, sets.set(site))
            } else {
                newer & of_line & one_line != 0
                    || bits(newer & of_sets)
                        .any(|j| sets.set(lines[j]).binary_search(&site).is_ok())
            };
            covered |= u64::from(is_covered) << i;
        }
        covered
    }
}

impl Cell {
    /// A new entry of thread and kind `key`, line `site` and locks `lockset` went into a cell
    /// whose entries nest: drops the older entries of that thread, kind, line and locks every
    /// byte of which newer ones of them hold between them, and if any went, says again
    /// whether any entries nest. Whatever a later access would report of such an entry (its line,
    /// unordered or a candidate), the newer entry holding the byte they share reports too: a
    /// later position of one thread is ordered before no more accesses than an earlier one,
    /// and the same locks exclude the same ones. A word a thread widened to all its bytes in
    /// one epoch and reads half by half in the next so goes back to entries that each access
    /// finds by its exact bytes, instead of every access scanning the cell for good.
    #[cold]
    #[inline(never)]
    fn settle_nesting(&mut self, sp: &mut Spills, key: u32, site: u32, lockset: u32) {
        const KEY_BITS: u32 = THREAD_BITS | 3 << KIND_SHIFT;
        // The entries of the line, thread, kind and locks, as bits.
        let mut of_line = 0u64;
        for i in 0..self.len() {
            let e = self.get(sp, i);
            let is = !self.is_merged(i)
                && e.tkm & KEY_BITS == key
                && e.site == site
                && e.lockset == lockset;
            of_line |= u64::from(is) << i;
        }
        let mut covered = 0u64;
        for i in bits(of_line) {
            let e = self.get(sp, i);
            let newer_bytes = bits(of_line)
                .map(|j| self.get(sp, j))
                .filter(|o| o.pos > e.pos)
                .fold(0u8, |bytes, o| bytes | o.mask());
            if e.mask() & !newer_bytes == 0 {
                covered |= 1 << i;
            }
        }
        if covered == 0 {
            // Still nested (a full cell of many lines, most often): the pairs are not looked at.
            return;
        }
        self.retain_at(sp, |i, _, _| covered >> i & 1 == 0);
        // As `push` judges it: the `site` of every entry, a set's id for a merged one, which
        // can only find nesting where there is none.
        let entries = self.entries(sp);
        let nested = entries.iter().enumerate().any(|(i, a)| {
            entries.iter().enumerate().any(|(j, b)| {
                i != j
                    && (a.tkm ^ b.tkm) & KEY_BITS == 0
                    && a.site == b.site
                    && a.mask() & b.mask() == a.mask()
            })
        });
        self.set_nested(nested);
    }
}

/// What the shadow says of a conflicting pair, judged by the caller's orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not ordered: a race in the observed run.
    Unordered,
    /// Ordered, but only through what a reordering may change (lock hand-offs), and no common
    /// lock excludes the two: worth asking the predictor.
    Candidate,
}

/// Merges `access` (its bytes in the granule `mask`) into an entry of its thread's current
/// epoch (`since`), kind and locks, when one can stand for both: every later access is ordered
/// with both or with neither (no synchronisation of the thread lies between them). An entry of
/// the same bytes takes the newcomer's line into its set of lines; an entry of the same single
/// line takes the newcomer's bytes. The entry then has the newcomer's position: a report of one
/// of its older lines names the epoch's newest access of them. False when no entry can (or the
/// sets of lines are full).
fn merge(
    cell: &mut Cell,
    sp: &mut Spills,
    sets: &mut SiteSets,
    access: &ShadowAccess,
    since: u32,
    mask: u8,
    tidy: bool,
) -> bool {
    const KEY_BITS: u32 = THREAD_BITS | 3 << KIND_SHIFT;
    let same = access.thread | (access.kind as u32) << KIND_SHIFT;
    let exact = same | u32::from(mask) << MASK_SHIFT;
    // The line's own entry of the epoch first (its bytes widen, no set grows), else the
    // newest of the same bytes (without `tidy`: the newest of either, as before).
    let mut same_bytes = None;
    let mut partner = None;
    for i in (0..cell.len()).rev() {
        let e = cell.get(sp, i);
        if e.pos < since || e.lockset != access.lockset || (e.tkm ^ same) & KEY_BITS != 0 {
            continue;
        }
        if !tidy && e.tkm == exact {
            partner = Some((i, false));
            break;
        }
        if !cell.is_merged(i) && e.site == access.site {
            partner = Some((i, true));
            break;
        }
        if same_bytes.is_none() && e.tkm == exact {
            same_bytes = Some((i, false));
        }
    }
    let Some((i, own_line)) = partner.or(same_bytes) else {
        return false;
    };
    if own_line {
        return widen(cell, sp, i, access, mask, tidy);
    }
    let Some(set) = sets.union(cell.lines(sp, i), access.site) else {
        return false;
    };
    let mut e = cell.get(sp, i);
    e.update(access, mask);
    e.site = set;
    cell.set(sp, i, e);
    cell.merged |= 1 << i;
    true
}

/// Widens entry `i`, of the access's line, thread, kind and locks from its epoch, to the
/// access's bytes too: every later access is ordered with both or with neither, so the entry
/// stands for both, at the access's position.
/// With `tidy`, the line's older entries it now covers go ([`drop_within`]); without, the cell
/// is only marked as holding nested entries. False, and nothing changed, when the entry
/// would have to name a large access ([`LargeAccesses`]) at another's position.
fn widen(
    cell: &mut Cell,
    sp: &mut Spills,
    i: usize,
    access: &ShadowAccess,
    mask: u8,
    tidy: bool,
) -> bool {
    {
        let mut e = cell.get(sp, i);
        let bytes = e.mask() | mask;
        // The reported start and size stay those of the access with the lowest byte here.
        let span = if mask.trailing_zeros() <= e.mask().trailing_zeros() {
            span_of(access)
        } else if e.is_large() {
            return false;
        } else {
            e.span
        };
        let grew = bytes != e.mask();
        e.update(access, bytes);
        e.span = span;
        cell.set(sp, i, e);
        if !tidy {
            // Entries of the line with fewer bytes may remain from earlier epochs.
            cell.set_nested(true);
            return true;
        }
        if !grew {
            return true;
        }
    }
    drop_within(cell, sp, i);
    true
}

/// Entry `i` (of one line) widened: drops the older entries of its thread, kind, line and locks
/// whose bytes it now holds (whatever a later access would report of them, it reports too,
/// from a later position), and notes when entries of the line nest in it otherwise.
fn drop_within(cell: &mut Cell, sp: &mut Spills, i: usize) {
    const KEY_BITS: u32 = THREAD_BITS | 3 << KIND_SHIFT;
    let w = cell.get(sp, i);
    let bytes = w.mask();
    let mut covered = 0u64;
    let mut nests = false;
    for j in 0..cell.len() {
        let o = cell.get(sp, j);
        if j == i || cell.is_merged(j) || (o.tkm ^ w.tkm) & KEY_BITS != 0 || o.site != w.site {
            continue;
        }
        let theirs = o.mask();
        if theirs & !bytes == 0 && o.lockset == w.lockset && o.pos < w.pos {
            covered |= 1 << j;
        } else if theirs & bytes == theirs || theirs & bytes == bytes {
            nests = true;
        }
    }
    if nests {
        cell.set_nested(true);
    }
    if covered != 0 {
        cell.retain_at(sp, |j, _, _| covered >> j & 1 == 0);
    }
}

/// Reports entry `i` of `cell` in `granule`, which conflicts with the access `judge` judges,
/// unless `judge` finds it ordered before the access or a spanning access already reported it
/// (`reported`): each of its lines, for an entry that stands for a set of lines.
#[inline(always)]
fn report_entry(
    cell: &Cell,
    sp: &Spills,
    (sets, large): (&SiteSets, &LargeAccesses),
    (granule, i): (u64, usize),
    mut reported: Option<&mut Reported>,
    judge: &mut impl FnMut(u32, u32, u32) -> Option<Verdict>,
    report: &mut impl FnMut(ShadowAccess, Verdict, FoundAt),
) {
    let e = cell.get(sp, i);
    if cell.merged >> i & 1 != 0 {
        let sites = sets.set(e.site);
        if let Some(r) = reported.as_ref() {
            let id = (e.thread(), e.pos);
            if sites.iter().all(|&s| r.contains(&(id.0, id.1, s))) {
                return;
            }
        }
        if let Some(v) = judge(e.thread(), e.pos, e.lockset) {
            let earlier = e.access(granule, large);
            for (line, &s) in sites.iter().enumerate() {
                let id = (e.thread(), e.pos, s);
                if let Some(r) = reported.as_mut() {
                    if r.contains(&id) {
                        continue;
                    }
                    r.push(id);
                }
                let at = FoundAt {
                    granule,
                    entry: i as u32,
                    line: line as u32,
                };
                report(ShadowAccess { site: s, ..earlier }, v, at);
            }
        }
        return;
    }
    let id = (e.thread(), e.pos, e.site);
    if reported.as_ref().is_some_and(|r| r.contains(&id)) {
        return;
    }
    if let Some(v) = judge(e.thread(), e.pos, e.lockset) {
        if let Some(r) = reported.as_mut() {
            r.push(id);
        }
        let at = FoundAt {
            granule,
            entry: i as u32,
            line: 0,
        };
        report(e.access(granule, large), v, at);
    }
}

/// Counts the lines of an entry dropped.
#[cold]
fn count_dropped(evicted: &mut SiteCounts, sets: &SiteSets, lines: Lines) {
    match lines {
        Lines::Site(s) => evicted.add(s),
        Lines::Set(id) => sets.set(id).iter().for_each(|&s| evicted.add(s)),
    }
}

/// The earlier accesses (thread, position, line) a spanning access already reported: a list
/// while short, a set once long (a copy of megabytes may meet millions, and a list's look-up
/// per entry met made such an access cost their square).
#[derive(Default)]
struct Reported {
    list: Vec<(u32, u32, u32)>,
    set: foldhash::HashSet<(u32, u32, u32)>,
}

impl Reported {
    /// Entries a list holds before they move to the set.
    const LIST: usize = 32;

    #[inline]
    fn contains(&self, id: &(u32, u32, u32)) -> bool {
        if self.set.is_empty() {
            self.list.contains(id)
        } else {
            self.set.contains(id)
        }
    }

    #[inline]
    fn push(&mut self, id: (u32, u32, u32)) {
        if self.set.is_empty() {
            self.list.push(id);
            if self.list.len() > Self::LIST {
                self.set.extend(self.list.drain(..));
            }
        } else {
            self.set.insert(id);
        }
    }
}

/// Where a conflict was found: the granule, and the earlier access's entry in it. With the
/// later access's place in the merged order this is the order in which one pass over the
/// whole address space finds pairs (granules in address order, entries oldest first), which
/// reproduces however the conflicts of one access are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FoundAt {
    pub(crate) granule: u64,
    pub(crate) entry: u32,
    /// The line's place in the entry's set of lines (0 for an entry of one line).
    pub(crate) line: u32,
}

/// The shadow memory of one run, within a memory budget: the granule table and the granules'
/// spilled entries take at most `budget` bytes. When the table would grow past it, a granule
/// not tracked yet takes a tracked one's place (its entries counted in `given_way`), or, for
/// an access wider than 64 bytes, stays untracked (the access counted in `untracked`, not
/// checked); when a granule's entries cannot spill, it keeps [`INLINE`] of them instead of
/// [`CELL_CAPACITY`].
#[derive(Debug)]
pub(crate) struct Shadow {
    cells: GranuleTable<Cell>,
    /// The sets of lines that merged entries stand for.
    sets: SiteSets,
    /// Entries merged into another of their thread, kind and bytes within one epoch, instead
    /// of dropped from a full granule.
    pub(crate) merged: u64,
    /// Entries dropped because a granule was full, by the site of the entry dropped (every
    /// line of a merged entry).
    pub(crate) evicted: SiteCounts,
    pub(crate) untracked: Untracked,
    /// Entries dropped because their granule gave way to a new one in a full table, by the
    /// site of the entry dropped (every line of a merged entry).
    pub(crate) given_way: SiteCounts,
    /// Granules that gave way to new ones in a full table.
    pub(crate) granules_given_way: u64,
    budget: usize,
    /// The entries of the granules that hold more than [`INLINE`].
    spills: Spills,
    large: LargeAccesses,
    /// The table was refused a granule for want of room: accesses spanning more granules than
    /// it holds look only at those it holds.
    full: bool,
    /// What the shadow was asked to hold at the last collection ([`Shadow::asked`]): the next
    /// waits until an eighth of the table's slots more were asked for, so that its cost, a look
    /// at every slot, is paid for by the accesses between.
    collected_at: u64,
    /// Collections in a row that freed little ([`Shadow::collect`]): each doubles the wait
    /// for the next.
    fruitless: u32,
    /// Collections made.
    pub(crate) collections: u64,
    /// Entries that newer ones of their thread made redundant, dropped from full granules
    /// instead of evicting ([`Cell::drop_covered`]).
    pub(crate) covered_dropped: u64,
    /// Whether a full granule drops the entries newer ones cover before evicting
    /// ([`Cell::drop_covered`]), a widened entry the older ones of its line it covers
    /// ([`drop_within`]), and a merge prefers the line's own entry; off only in tests that
    /// compare with the shadow before it.
    tidy: bool,
    /// Entries dropped by collections: ordered before every thread, they can race with nothing.
    pub(crate) settled_dropped: u64,
}

impl Default for Shadow {
    fn default() -> Self {
        Shadow::with_budget(usize::MAX)
    }
}

/// The bytes of `granule` that an access of `[addr, end)` over granules `first..=last` covers.
#[inline]
fn span_mask(addr: u64, end: u64, first: u64, last: u64, granule: u64) -> u8 {
    let lo = if granule == first {
        (addr & 7) as u32
    } else {
        0
    };
    let hi = if granule == last {
        ((end - 1) & 7) as u32
    } else {
        7
    };
    (((1u32 << (hi + 1)) - 1) & !((1u32 << lo) - 1)) as u8
}

/// Whether one more granule's entries may spill, for a table of `slots` slots
/// with `spilled` granules spilled: spilled entries take at most half the budget, the rest is
/// for granules.
#[inline]
fn spill_room(slots: usize, spilled: usize, budget: usize) -> bool {
    slots * SLOT_BYTES + spilled * SPILL_BYTES + SPILL_BYTES <= budget
        && (spilled + 1) * SPILL_BYTES <= budget / 2
        // A spill's index is 32 bits (1.3 TB of spills).
        && spilled < u32::MAX as usize
}

/// The slots the granule table may take of a `budget` (bytes): three quarters of it, the
/// table's sizes fitted to that (`GranuleTable::with_room`). The largest table and the
/// quarter of the budget at which spills are compacted (`Shadow::visit`) fit together,
/// so spills never keep the table from its last doubling. At the default budget that is
/// 5·2^20 slots, 320 MiB of 448, where sizes of powers of two stopped at 2^22 (256 MiB) and
/// left a compressor's trace a fifth of its accesses unchecked
/// (`docs/perf/analysis-speed-and-memory.md`, "The granule table's sizes").
fn table_room(budget: usize) -> usize {
    budget / SLOT_BYTES / 4 * 3
}

/// Whether a granule of `access` not tracked yet takes a tracked one's place in a full table
/// ([`Shadow::give_way`]): an access of up to 64 bytes does; a larger one (a buffer copied)
/// leaves its granules not tracked unchecked (counted in `untracked`), so that one access
/// cannot empty the table, nor take time in proportion to its size rather than the table's.
#[inline]
fn gives_way_for(access: &ShadowAccess) -> bool {
    let (first, last) = granule_span(access.addr, access.size);
    last - first < GIVE_WAY_SPAN
}

/// The most granules an access may span and still have tracked granules give way to its own.
const GIVE_WAY_SPAN: u64 = 8;

/// The 8-byte granules an access touches, and its byte mask in each.
#[inline]
pub(crate) fn granule_span(addr: u64, size: u32) -> (u64, u64) {
    let end = addr.saturating_add(u64::from(size.max(1)));
    (addr >> 3, (end - 1) >> 3)
}

impl Shadow {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A shadow that takes at most `budget` bytes.
    pub(crate) fn with_budget(budget: usize) -> Self {
        Shadow {
            cells: GranuleTable::with_room(table_room(budget)),
            sets: SiteSets::default(),
            merged: 0,
            evicted: SiteCounts::default(),
            untracked: Untracked::default(),
            given_way: SiteCounts::default(),
            granules_given_way: 0,
            budget,
            spills: Spills::default(),
            large: LargeAccesses::default(),
            full: false,
            collected_at: 0,
            fruitless: 0,
            collections: 0,
            settled_dropped: 0,
            covered_dropped: 0,
            tidy: true,
        }
    }

    /// Whether a collection ([`Shadow::collect`]) is due before an access over `granules`
    /// granules: if they were all new, the table of at least [`COLLECT_FROM_SLOTS`] slots
    /// would grow or find no room within the budget, and an eighth of the table's slots more
    /// were asked for since the last one.
    #[inline]
    pub(crate) fn wants_collection(&self, granules: u64) -> bool {
        let (slots, len) = (self.cells.slots(), self.cells.len());
        let grows = (len as u64).saturating_add(granules).saturating_mul(4) > slots as u64 * 3
            && (slots >= COLLECT_FROM_SLOTS || self.cells.full_at(self.max_slots()));
        (grows || !self.spill_room()) && self.collection_due(slots)
    }

    /// Whether one more granule's entries may spill: spilled entries take at most
    /// half the budget, the rest is for granules.
    #[inline]
    fn spill_room(&self) -> bool {
        spill_room(self.cells.slots(), self.spills.live, self.budget)
    }

    /// What the shadow was asked to hold since the last collection: granules, spilled
    /// granules, and what the budget cut (accesses not checked, entries dropped).
    #[inline]
    fn asked(&self) -> u64 {
        (self.cells.len() + self.spills.live) as u64
            + self.untracked.accesses.total
            + self.evicted.total
            + self.given_way.total
    }

    #[cold]
    fn collection_due(&self, slots: usize) -> bool {
        let wait = ((slots / 8).max(MIN_SLOTS_BETWEEN_COLLECTIONS) as u64) << self.fruitless;
        self.asked() >= self.collected_at.saturating_add(wait)
    }

    /// Drops every entry of a thread `t` at a position below `floor[t]` (threads past the end
    /// of `floor`: none), and the granules left with none: the caller says that every thread
    /// that is or will be (threads not yet created inherit their creator's clock) has those
    /// positions ordered before it, by every order `judge` consults. Such an entry can never
    /// be reported again, so the verdicts of every later access stay those of the shadow that
    /// kept it. What changes is only where later entries of that thread go (a supersession or
    /// merge that would have found it pushes anew), which no report tells apart but by the
    /// order of two instances of one pair of lines found by one access in one granule.
    /// Memory that a thread wrote and every other thread has since synchronised with (a
    /// buffer filled before the workers that read it are created, a job handed back) so costs
    /// nothing until it is touched again.
    #[cold]
    #[inline(never)]
    pub(crate) fn collect(&mut self, floor: &[u32]) {
        let below = |e: &Entry| floor.get(e.thread() as usize).is_some_and(|&f| e.pos < f);
        let held = self.cells.len();
        let mut dropped = 0u64;
        let sp = &mut self.spills;
        self.cells.retain_cells(|cell| {
            if cell.entries(sp).iter().any(below) {
                let before = cell.len();
                cell.retain(sp, |e, _| !below(e));
                dropped += (before - cell.len()) as u64;
                if cell.len() <= INLINE {
                    // A spilled cell emptied is unspilled before it goes.
                    cell.unspill(sp);
                }
            }
            cell.len() > 0
        });
        self.large
            .by_access
            .retain(|&(t, pos), _| floor.get(t as usize).is_none_or(|&f| pos >= f));
        self.settled_dropped += dropped;
        self.full = false;
        // A collection that freed less than an eighth of the granules waits twice as long
        // for the next: threads that never synchronise keep each other's entries.
        self.fruitless = if (held - self.cells.len()) * 8 < held {
            (self.fruitless + 1).min(32)
        } else {
            0
        };
        self.collected_at = self.asked();
        self.collections += 1;
    }

    /// Sets bit `t % 64` of word `t / 64` of `named` for every thread `t` an entry names
    /// (threads past its end: none): the threads a later access may still ask about.
    #[cold]
    #[inline(never)]
    pub(crate) fn name_threads(&self, named: &mut [u64]) {
        for cell in self.cells.values() {
            for i in 0..cell.len() {
                let t = (cell.key(&self.spills, i) as u32 & THREAD_BITS) as usize;
                if let Some(w) = named.get_mut(t / 64) {
                    *w |= 1 << (t % 64);
                }
            }
        }
    }

    /// Bytes the shadow takes now (the table's slots and the spilled entries).
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.cells.slots() * SLOT_BYTES + self.spills.live * SPILL_BYTES
    }

    /// The most slots the table may take with the budget's room.
    #[inline]
    fn max_slots(&self) -> usize {
        self.budget.saturating_sub(self.spills.live * SPILL_BYTES) / SLOT_BYTES
    }

    /// Granules tracked now (the live shared footprint).
    #[cfg(test)]
    pub(crate) fn granules(&self) -> usize {
        self.cells.len()
    }

    /// The most granules tracked at once.
    pub(crate) fn peak_granules(&self) -> usize {
        self.cells.peak()
    }

    /// Checks `access` against what the granules it covers hold, then records it.
    ///
    /// `judge(thread, pos, lockset)` decides, for a conflicting earlier access of another
    /// thread, whether it is unordered with `access`, a candidate for prediction, or ordered
    /// (`None`); `report(earlier, verdict, at)` is called once per earlier access that is not
    /// ordered, at the first granule that shows it, however many granules the two share;
    /// `settled(thread, pos)` says whether an entry is ordered before `access` by every order
    /// `judge` consults (then it is neither unordered nor a candidate, for this access and any
    /// later one of its thread); `dominated(thread, pos)` says whether an entry is ordered
    /// before `access` (it is evicted
    /// first from a full granule). `since` is the first position of the access's thread's
    /// current epoch: no synchronisation of the thread lies between an entry of it at `since`
    /// or later and `access`, so every later access is ordered with both or with neither, and
    /// in a full granule such an entry of the same kind and bytes is merged with `access`.
    #[inline]
    pub(crate) fn access(
        &mut self,
        access: &ShadowAccess,
        since: u32,
        judge: impl FnMut(u32, u32, u32) -> Option<Verdict>,
        report: impl FnMut(ShadowAccess, Verdict, FoundAt),
        dominated: impl FnMut(u32, u32) -> bool,
        settled: impl FnMut(u32, u32) -> bool,
    ) {
        let (first, last) = granule_span(access.addr, access.size);
        if access.size >= LARGE_FROM {
            if self.large.wants_sweep() {
                self.sweep_large();
            }
            self.large.note(access);
        }
        if first == last {
            // The usual access: within one granule.
            // `lo + size <= 8`: the access ends in this granule.
            let lo = (access.addr & 7) as u32;
            let mask = ((0xffu32 >> (8 - access.size.max(1))) << lo) as u8;
            if !self.access_in(
                first, mask, access, since, judge, report, dominated, settled,
            ) {
                self.untracked.add(access);
            }
            return;
        }
        self.access_spanning(
            access,
            since,
            (first, last),
            &[],
            judge,
            report,
            dominated,
            settled,
        );
    }

    /// [`Shadow::access`] of the granules `parts` of an access over several granules (runs
    /// of them, each first and last, in order), its other granules left as they are: the
    /// caller knows that nothing there can conflict with it (decision 0033). The entries and
    /// what is reported are the access's, whole.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn access_parts(
        &mut self,
        access: &ShadowAccess,
        parts: &[(u64, u64)],
        since: u32,
        judge: impl FnMut(u32, u32, u32) -> Option<Verdict>,
        report: impl FnMut(ShadowAccess, Verdict, FoundAt),
        dominated: impl FnMut(u32, u32) -> bool,
        settled: impl FnMut(u32, u32) -> bool,
    ) {
        if access.size >= LARGE_FROM {
            if self.large.wants_sweep() {
                self.sweep_large();
            }
            self.large.note(access);
        }
        self.access_spanning(
            access,
            since,
            granule_span(access.addr, access.size),
            parts,
            judge,
            report,
            dominated,
            settled,
        );
    }

    /// Forgets the large accesses no entry names any more, and waits for the map to double
    /// before the next sweep: a look at every slot, paid for by the thousands of granules of
    /// each large access noted since the last.
    #[cold]
    #[inline(never)]
    fn sweep_large(&mut self) {
        let mut named = foldhash::HashSet::default();
        for cell in self.cells.values() {
            for i in 0..cell.len() {
                let e = cell.get(&self.spills, i);
                if e.is_large() {
                    named.insert((e.thread(), e.pos));
                }
            }
        }
        self.large.by_access.retain(|k, _| named.contains(k));
        self.large.sweep_at = (2 * self.large.by_access.len()).max(LargeAccesses::SWEEP_FROM);
    }

    /// [`Shadow::access`] for an access known to lie in one granule, `granule`, its bytes
    /// there `mask`. False when the granule was not tracked and the budget had no room for it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn access_in(
        &mut self,
        granule: u64,
        mask: u8,
        access: &ShadowAccess,
        since: u32,
        mut judge: impl FnMut(u32, u32, u32) -> Option<Verdict>,
        mut report: impl FnMut(ShadowAccess, Verdict, FoundAt),
        mut dominated: impl FnMut(u32, u32) -> bool,
        mut settled: impl FnMut(u32, u32) -> bool,
    ) -> bool {
        self.visit(
            granule,
            mask,
            access,
            since,
            None,
            &mut judge,
            &mut report,
            &mut dominated,
            &mut settled,
        )
    }

    /// Starts bringing the slot of `granule` into the cache, some accesses before
    /// [`Shadow::access`] looks it up.
    #[inline(always)]
    pub(crate) fn prefetch(&self, granule: u64) {
        self.cells.prefetch(granule);
    }

    /// Starts bringing the spilled entries of `granule` into the cache, when its slot (fetched
    /// earlier by [`Shadow::prefetch`]) is at home and has spilled: a granule many lines
    /// read otherwise waits for its spill's miss after its slot's.
    #[inline(always)]
    pub(crate) fn prefetch_entries(&self, granule: u64) {
        if let Some(cell) = self.cells.at_home(granule).filter(|c| c.is_spilled()) {
            // The keys alone, which every access compares: the rest, read by fewer, fetched
            // as well cost SQLite's analysis 4% more than it saved.
            // Both halves: 128 bytes at any 16-byte alignment span three lines, and a prefetch
            // asks for a range's first and last.
            let keys = &self.spills.get(cell.spill()).keys;
            foresight_trace::memory::prefetch(&keys[..CELL_CAPACITY / 2]);
            foresight_trace::memory::prefetch(&keys[CELL_CAPACITY / 2..]);
        }
    }

    /// Checks `access` against what the granules it covers hold, as [`Shadow::access`] does,
    /// but keeps nothing of it: for an access the caller knows no later access can conflict
    /// with. Granules not tracked hold nothing to check against, and are not tracked now.
    /// `parts`, when not empty, are the only granules looked at (as for
    /// [`Shadow::access_parts`]).
    #[inline]
    pub(crate) fn check(
        &self,
        access: &ShadowAccess,
        parts: &[(u64, u64)],
        mut judge: impl FnMut(u32, u32, u32) -> Option<Verdict>,
        mut report: impl FnMut(ShadowAccess, Verdict, FoundAt),
    ) {
        let (first, last) = granule_span(access.addr, access.size);
        let end = access.addr.saturating_add(u64::from(access.size.max(1)));
        let mut reported = (first != last).then(Reported::default);
        let mut look = |shadow: &Shadow, granule: u64| {
            let Some(cell) = shadow.cells.get(granule) else {
                return;
            };
            let mask = span_mask(access.addr, end, first, last, granule);
            let t = access.thread;
            if !cell.others_may_conflict(t, access.kind.is_write()) {
                return;
            }
            let sp = &shadow.spills;
            for i in 0..cell.len() {
                let tkm = cell.key(sp, i) as u32;
                let bytes = (tkm >> MASK_SHIFT) as u8;
                let kind = AccessKind::from_bits(tkm >> KIND_SHIFT);
                if tkm & THREAD_BITS != t && bytes & mask != 0 && kind.conflicts(access.kind) {
                    report_entry(
                        cell,
                        sp,
                        (&shadow.sets, &shadow.large),
                        (granule, i),
                        reported.as_mut(),
                        &mut judge,
                        &mut report,
                    );
                }
            }
        };
        let whole = [(first, last)];
        for &(from, to) in if parts.is_empty() { &whole[..] } else { parts } {
            // A run over more granules than the table has slots looks only at those tracked:
            // a look at every slot, which costs less than one per granule.
            if to - from >= self.cells.slots() as u64 {
                self.cells
                    .granules_in(from, to)
                    .into_iter()
                    .for_each(|g| look(self, g));
            } else {
                (from..=to).for_each(|g| look(self, g));
            }
        }
    }

    /// An access over several granules, `first` to `last` (of them only the runs `parts`,
    /// when not empty): each earlier access it meets is reported once.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn access_spanning(
        &mut self,
        access: &ShadowAccess,
        since: u32,
        (first, last): (u64, u64),
        parts: &[(u64, u64)],
        mut judge: impl FnMut(u32, u32, u32) -> Option<Verdict>,
        mut report: impl FnMut(ShadowAccess, Verdict, FoundAt),
        mut dominated: impl FnMut(u32, u32) -> bool,
        mut settled: impl FnMut(u32, u32) -> bool,
    ) {
        let end = access.addr.saturating_add(u64::from(access.size.max(1)));
        let mut reported = Reported::default();
        let mut all_tracked = true;
        let whole = [(first, last)];
        for &(from, to) in if parts.is_empty() { &whole[..] } else { parts } {
            // The granules' slots are far apart in the table: their misses overlap.
            self.cells.touch(from, to);
            let mut granule = from;
            while granule <= to {
                if self.full && to - granule >= self.cells.len() as u64 {
                    // No room for the granules not tracked yet, and more of them ahead than the
                    // table holds: the rest of a (hostile or huge) access looks only at the
                    // granules tracked, in order, in time bounded by the budget.
                    let held = self.cells.granules_in(granule, to);
                    all_tracked &= held.len() as u64 == to - granule + 1;
                    for g in held {
                        let mask = span_mask(access.addr, end, first, last, g);
                        self.visit(
                            g,
                            mask,
                            access,
                            since,
                            Some(&mut reported),
                            &mut judge,
                            &mut report,
                            &mut dominated,
                            &mut settled,
                        );
                    }
                    break;
                }
                let mask = span_mask(access.addr, end, first, last, granule);
                all_tracked &= self.visit(
                    granule,
                    mask,
                    access,
                    since,
                    Some(&mut reported),
                    &mut judge,
                    &mut report,
                    &mut dominated,
                    &mut settled,
                );
                granule += 1;
            }
        }
        if !all_tracked {
            self.untracked.add(access);
        }
    }

    /// One granule of an access: its conflicts with other threads' entries, then its own entry
    /// (superseding those of its thread, site and kind that it covers). `reported` lists the
    /// earlier accesses already reported for a spanning access.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn visit(
        &mut self,
        granule: u64,
        mask: u8,
        access: &ShadowAccess,
        since: u32,
        mut reported: Option<&mut Reported>,
        judge: &mut impl FnMut(u32, u32, u32) -> Option<Verdict>,
        report: &mut impl FnMut(ShadowAccess, Verdict, FoundAt),
        dominated: &mut impl FnMut(u32, u32) -> bool,
        settled: &mut impl FnMut(u32, u32) -> bool,
    ) -> bool {
        let t = access.thread;
        let same = t | (access.kind as u32) << KIND_SHIFT;
        let site = access.site;
        // Whether the granule may spill is judged by the shadow before this access (before a
        // compaction or growth it may cause), but only asked when a new entry has no room.
        let (slots_before, spilled_before) = (self.cells.slots(), self.spills.live);
        // Only a table at its load limit may grow or need room: the usual access looks up
        // its granule and nothing else.
        let cell = if self.cells.at_load_limit() {
            if self.cells.full_at(self.max_slots())
                && self.spills.live * SPILL_BYTES >= self.budget / 4
            {
                self.compact();
            }
            let max_slots = self.max_slots();
            match self.cells.cell_within(granule, max_slots) {
                Some(cell) => cell,
                None if gives_way_for(access) => {
                    if !self.give_way(granule) {
                        self.full = true;
                        return false;
                    }
                    // A granule given way leaves the table below its load limit: no growth.
                    self.cells.cell(granule)
                }
                None => {
                    self.full = true;
                    return false;
                }
            }
        } else {
            self.cells.cell(granule)
        };
        let sp = &mut self.spills;
        // Entries of this thread, site and kind that the newcomer covers: superseded.
        let mut superseded = 0usize;
        let mut last_superseded = 0usize;
        // An entry is superseded when it has the newcomer's thread, kind and site, and no
        // byte outside the newcomer's.
        let outside = u32::from(!mask) << MASK_SHIFT;
        const KEY_BITS: u32 = THREAD_BITS | 3 << KIND_SHIFT;
        let reads = !access.kind.is_write();
        if !cell.others_may_conflict(t, !reads) || reads && cell.read_is_clean(t) {
            // The usual case: only the supersession to find, most often an entry of the same
            // line and bytes, which is then the only one superseded (when none is nested).
            let exact = same | u32::from(mask) << MASK_SHIFT;
            let found = if cell.nested() {
                None
            } else {
                cell.find_exact(sp, exact, site)
                    .filter(|&i| !cell.is_merged(i))
            };
            if let Some(i) = found {
                superseded = 1;
                last_superseded = i;
            } else {
                for i in 0..cell.len() {
                    let e = cell.get(sp, i);
                    // A merged entry's `site` is a set's id: it is superseded by nothing.
                    if (e.tkm ^ same) & KEY_BITS == 0
                        && e.site == site
                        && e.tkm & outside == 0
                        && !cell.is_merged(i)
                    {
                        superseded += 1;
                        last_superseded = i;
                    }
                }
            }
        } else {
            // Whether every other thread's writing entry is settled before this read.
            let mut clean = reads && t < 32;
            for i in 0..cell.len() {
                // The key first: the rest of an entry only for another thread's.
                let key = cell.key(sp, i);
                let tkm = key as u32;
                let bytes = (tkm >> MASK_SHIFT) as u8;
                let kind = AccessKind::from_bits(tkm >> KIND_SHIFT);
                if tkm & THREAD_BITS != t && clean && kind.is_write() {
                    clean = settled(tkm & THREAD_BITS, cell.get(sp, i).pos);
                }
                if tkm & THREAD_BITS == t {
                    if tkm & (THREAD_BITS | 3 << KIND_SHIFT) == same
                        && (key >> 32) as u32 == site
                        && bytes & !mask == 0
                        && cell.merged >> i & 1 == 0
                    {
                        superseded += 1;
                        last_superseded = i;
                    }
                } else if bytes & mask != 0 && kind.conflicts(access.kind) {
                    report_entry(
                        cell,
                        sp,
                        (&self.sets, &self.large),
                        (granule, i),
                        reported.as_deref_mut(),
                        judge,
                        report,
                    );
                }
            }
            if clean {
                cell.read_clean |= thread_bit(t);
            }
        }
        match superseded {
            // The usual case of a loop: the same line again, updated in place (field by
            // field: a whole entry assembled first and copied in costs a stall on every
            // access, as its wide loads wait for the narrow stores).
            1 => {
                let mut e = cell.get(sp, last_superseded);
                e.update(access, mask);
                cell.set(sp, last_superseded, e);
                if !reads {
                    cell.wrote(t);
                }
            }
            0 => {
                let spilled = cell.is_spilled();
                // Without room to spill, a granule keeps what fits in its cell.
                let capacity = if spilled || spill_room(slots_before, spilled_before, self.budget) {
                    CELL_CAPACITY
                } else {
                    INLINE
                };
                let len = cell.len();
                let mut full = len >= capacity;
                // Pushing would move the entries to a spill of their own.
                let would_spill = !spilled && len >= INLINE;
                if (full || would_spill || cell.merged != 0)
                    && merge(cell, sp, &mut self.sets, access, since, mask, self.tidy)
                {
                    if !reads {
                        cell.wrote(t);
                    }
                    self.merged += 1;
                    return true;
                }
                if full && self.tidy {
                    if cell.covered_wait() == 0 {
                        let dropped = cell.drop_covered(sp, &self.sets, t, access.kind);
                        self.covered_dropped += dropped as u64;
                        full = cell.len() >= capacity;
                        if dropped == 0 {
                            cell.set_covered_wait(COVERED_WAIT);
                        }
                    } else {
                        cell.set_covered_wait(cell.covered_wait() - 1);
                    }
                }
                if full {
                    let victim = (0..cell.len())
                        .position(|i| {
                            let e = cell.get(sp, i);
                            dominated(e.thread(), e.pos)
                        })
                        .unwrap_or(0);
                    count_dropped(&mut self.evicted, &self.sets, cell.lines(sp, victim));
                    cell.remove(sp, victim);
                }
                cell.push(sp, Entry::new(access, mask));
                if cell.nested() && self.tidy {
                    cell.settle_nesting(sp, same, access.site, access.lockset);
                }
            }
            _ => {
                cell.retain(sp, |e, merged| {
                    merged
                        || !(e.tkm & (THREAD_BITS | 3 << KIND_SHIFT) == same
                            && e.site == access.site
                            && e.mask() & !mask == 0)
                });
                cell.push(sp, Entry::new(access, mask));
            }
        }
        true
    }

    /// Makes room for `granule` in a full table: the granule of fewest entries among a few
    /// near its home goes, its entries counted by line in [`Shadow::given_way`]. False when
    /// the table held none (a budget too small for its first slots).
    #[cold]
    #[inline(never)]
    fn give_way(&mut self, granule: u64) -> bool {
        let Some((_, cell)) = self.cells.give_way(granule, |c| c.len()) else {
            return false;
        };
        for i in 0..cell.len() {
            count_dropped(&mut self.given_way, &self.sets, cell.lines(&self.spills, i));
        }
        cell.release(&mut self.spills);
        self.granules_given_way += 1;
        true
    }

    /// Makes room for more granules: every granule whose entries spilled keeps only its
    /// newest [`INLINE`] entries, in its cell; the others are dropped (and counted, by site,
    /// as a full granule's are). Losing some pairs of lines on the busiest granules is what the
    /// budget costs then, rather than leaving new memory unchecked.
    #[cold]
    #[inline(never)]
    fn compact(&mut self) {
        let evicted = &mut self.evicted;
        let sp = &mut self.spills;
        for cell in self.cells.values_mut() {
            if cell.is_spilled() {
                let keep = cell.len().saturating_sub(INLINE);
                for i in 0..keep {
                    count_dropped(evicted, &self.sets, cell.lines(sp, i));
                }
                cell.retain_at(sp, |i, _, _| i >= keep);
                cell.unspill(sp);
            }
        }
        // Every spill was given back: their memory goes too.
        sp.clear();
        self.full = false;
    }

    /// Checks a free of the block `[free.addr, free.addr + size)` (a write of every byte of
    /// it, `free.kind` [`AccessKind::Free`]) against the accesses the shadow holds there, and
    /// records nothing: the caller forgets the block next. Each earlier access is reported
    /// once, at the first granule that shows it. Only the granules tracked are looked at:
    /// at most as many lookups as the table holds granules, however big the block.
    pub(crate) fn check_free(
        &self,
        free: &ShadowAccess,
        size: u64,
        mut judge: impl FnMut(u32, u32, u32) -> Option<Verdict>,
        mut report: impl FnMut(ShadowAccess, Verdict, FoundAt),
    ) {
        if size == 0 || self.cells.len() == 0 {
            return;
        }
        let first = free.addr >> 3;
        let last = (free.addr.saturating_add(size) - 1) >> 3;
        // A set: a big block's free may meet as many earlier accesses as the table holds.
        let mut reported: foldhash::HashSet<(u32, u32, u32)> = Default::default();
        let mut visit = |g: u64| {
            let Some(cell) = self.cells.get(g) else {
                return;
            };
            for i in 0..cell.len() {
                let e = cell.get(&self.spills, i);
                if e.thread() == free.thread || !e.kind().conflicts(free.kind) {
                    continue;
                }
                let sites: &[u32] = if cell.is_merged(i) {
                    self.sets.set(e.site)
                } else {
                    std::slice::from_ref(&e.site)
                };
                if sites
                    .iter()
                    .all(|&s| reported.contains(&(e.thread(), e.pos, s)))
                {
                    continue;
                }
                let Some(v) = judge(e.thread(), e.pos, e.lockset) else {
                    continue;
                };
                let earlier = e.access(g, &self.large);
                for (line, &s) in sites.iter().enumerate() {
                    if !reported.insert((e.thread(), e.pos, s)) {
                        continue;
                    }
                    let at = FoundAt {
                        granule: g,
                        entry: i as u32,
                        line: line as u32,
                    };
                    report(ShadowAccess { site: s, ..earlier }, v, at);
                }
            }
        };
        if last - first < self.cells.len() as u64 {
            for g in first..=last {
                // A block's granules lie all over the table: each look-up a miss, unless
                // asked for ahead.
                if g + FREE_AHEAD <= last {
                    self.cells.prefetch(g + FREE_AHEAD);
                }
                visit(g);
            }
        } else {
            self.cells
                .granules_in(first, last)
                .into_iter()
                .for_each(visit);
        }
    }

    /// Forgets `[addr, addr + size)`: freed memory, or memory allocated anew, is a new object.
    pub(crate) fn forget(&mut self, addr: u64, size: u64) {
        if size == 0 {
            return;
        }
        let first = addr >> 3;
        let last = (addr.saturating_add(size) - 1) >> 3;
        let span = last - first + 1;
        if span > self.cells.len() as u64 {
            // Cheaper to look at what is tracked than at every granule of a large block.
            let sp = &mut self.spills;
            self.cells.retain(|g, cell| {
                let keep = g < first || g > last;
                if !keep {
                    cell.release(sp);
                }
                keep
            });
            return;
        }
        for g in first..=last {
            if g + FREE_AHEAD <= last {
                self.cells.prefetch(g + FREE_AHEAD);
            }
            if let Some(cell) = self.cells.remove(g) {
                cell.release(&mut self.spills);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(
        thread: u32,
        pos: u32,
        site: u32,
        kind: AccessKind,
        addr: u64,
        size: u32,
    ) -> ShadowAccess {
        ShadowAccess {
            thread,
            pos,
            site,
            lockset: 0,
            kind,
            addr,
            size,
        }
    }

    /// Runs `access` with every conflicting earlier access judged unordered; returns the
    /// (thread, pos) of those reported.
    fn check(shadow: &mut Shadow, a: ShadowAccess) -> Vec<(u32, u32)> {
        reports(shadow, a)
            .into_iter()
            .map(|e| (e.thread, e.pos))
            .collect()
    }

    /// The earlier accesses reported, whole.
    fn reports(shadow: &mut Shadow, a: ShadowAccess) -> Vec<ShadowAccess> {
        let mut seen = Vec::new();
        shadow.access(
            &a,
            u32::MAX,
            |_, _, _| Some(Verdict::Unordered),
            |e, _, _| seen.push(e),
            |_, _| false,
            |_, _| false,
        );
        seen
    }

    #[test]
    fn conflicts_need_a_write_and_a_plain_access() {
        use AccessKind::*;
        assert!(Write.conflicts(Read));
        assert!(Read.conflicts(Write));
        assert!(!Read.conflicts(Read));
        assert!(!AtomicWrite.conflicts(AtomicRead));
        assert!(AtomicWrite.conflicts(Read));
        assert!(Write.conflicts(AtomicRead));
        assert!(!AtomicRead.conflicts(Read));
        assert!(Write.conflicts(Write));
        assert!(AtomicWrite.conflicts(Write));
        assert!(!AtomicWrite.conflicts(AtomicWrite));
    }

    #[test]
    fn neighbouring_bytes_do_not_conflict() {
        let mut s = Shadow::new();
        assert!(check(&mut s, acc(0, 1, 10, AccessKind::Write, 0x1000, 1)).is_empty());
        assert!(check(&mut s, acc(1, 1, 11, AccessKind::Write, 0x1001, 1)).is_empty());
        assert_eq!(
            check(&mut s, acc(1, 2, 12, AccessKind::Write, 0x1000, 2)),
            vec![(0, 1)]
        );
    }

    #[test]
    fn an_access_spanning_granules_reports_each_earlier_access_once() {
        let mut s = Shadow::new();
        check(&mut s, acc(0, 1, 10, AccessKind::Write, 0x1000, 16));
        check(&mut s, acc(2, 1, 10, AccessKind::Write, 0x100c, 1));
        let seen = check(&mut s, acc(1, 5, 11, AccessKind::Read, 0x1004, 12));
        assert_eq!(seen, vec![(0, 1), (2, 1)]);
    }

    #[test]
    fn an_access_spanning_many_earlier_accesses_reports_each_once() {
        // More earlier accesses than the list of those reported holds before it becomes a set,
        // each over two granules.
        let mut s = Shadow::new();
        let n = 3 * Reported::LIST as u32;
        for t in 1..=n {
            check(
                &mut s,
                acc(t, 1, 10, AccessKind::Write, 0x8000 + 8 * u64::from(t), 16),
            );
        }
        let mut seen = check(&mut s, acc(0, 1, 11, AccessKind::Read, 0x8000, 8 * (n + 2)));
        seen.sort_unstable();
        assert_eq!(seen, (1..=n).map(|t| (t, 1)).collect::<Vec<_>>());
    }

    #[test]
    fn a_reported_access_is_whole_wherever_it_was_found() {
        // Found in a granule after its first one, the earlier access still has its start and
        // size.
        let mut s = Shadow::new();
        let odd = acc(0, 2, 12, AccessKind::Write, 0x2005, 7);
        check(&mut s, odd);
        assert_eq!(
            reports(&mut s, acc(1, 2, 13, AccessKind::Read, 0x2008, 1)),
            vec![odd]
        );
        // Seen from any of its granules, an access of any size at any start: up to the
        // largest kept in its entries, the low 16 bits of its start say the rest; larger ones,
        // longer than the low 32 bits of an address can say too, are kept whole aside.
        for size in [1, 8, 9, 4096, LARGE_FROM - 1, LARGE_FROM, 1 << 20, u32::MAX] {
            for addr in [0x7fff_ffff_fff3u64, 0x1_0000_fffa, 0x2000, 0x2007] {
                let a = acc(0, 1, 10, AccessKind::Write, addr, size);
                let mut large = LargeAccesses::default();
                if size >= LARGE_FROM {
                    large.note(&a);
                }
                let (first, last) = granule_span(a.addr, a.size);
                for g in [first, first + 1, last.saturating_sub(1), last] {
                    let g = g.clamp(first, last);
                    let lo = if g == first { a.addr & 7 } else { 0 };
                    let entry = Entry::new(&a, 0xffu8 << lo);
                    assert_eq!(entry.is_large(), size >= LARGE_FROM);
                    assert_eq!(
                        entry.access(g, &large),
                        a,
                        "{size} at {addr:#x}, granule {g:#x}"
                    );
                }
            }
        }
        // Through the shadow: a copy of a megabyte at an odd address, met at its last byte.
        let mut s = Shadow::new();
        let copy = acc(0, 3, 14, AccessKind::Write, 0x10_0003, 1 << 20);
        check(&mut s, copy);
        assert_eq!(
            reports(
                &mut s,
                acc(1, 3, 15, AccessKind::Read, 0x10_0003 + (1 << 20) - 1, 1)
            ),
            vec![copy]
        );
    }

    #[test]
    fn a_large_access_is_not_widened_into_under_another_position() {
        // Thread 0's large read ends in the granule's low half; its line then reads the high
        // half in the same epoch. Widened, the entry would name the large access at the later
        // read's position, which does not say its start and size: the two stay apart, each
        // reported whole.
        let mut s = Shadow::new();
        let other = acc(0, 1, 5, AccessKind::Read, 0x30_0000, 8);
        let large = acc(0, 2, 7, AccessKind::Read, 0x30_0004 - (1 << 17), 1 << 17);
        let high = acc(0, 3, 7, AccessKind::Read, 0x30_0004, 4);
        for a in [other, large, high] {
            s.access(
                &a,
                0,
                |_, _, _| None,
                |_, _, _| {},
                |_, _| false,
                |_, _| false,
            );
        }
        let mut seen = reports(&mut s, acc(1, 1, 9, AccessKind::Write, 0x30_0000, 8));
        seen.sort_by_key(|a| a.pos);
        assert_eq!(seen, vec![other, large, high]);
    }

    #[test]
    fn large_accesses_no_entry_names_are_forgotten() {
        // A thread copies a buffer of 64 KiB from one line again and again: each copy
        // supersedes the last one's entries, and the start and size of the copies no entry
        // names any more go at the next sweep.
        let mut s = Shadow::new();
        s.large.sweep_at = 4;
        for pos in 0..6 {
            check(
                &mut s,
                acc(0, pos, 10, AccessKind::Write, 0x40_0000, LARGE_FROM),
            );
        }
        // Swept at the fifth copy, when only the fourth was named: the fourth and the fifth
        // (noted after the sweep), then the sixth.
        assert_eq!(s.large.by_access.len(), 3);
        assert_eq!(s.large.sweep_at, LargeAccesses::SWEEP_FROM);
        let newest = acc(0, 5, 10, AccessKind::Write, 0x40_0000, LARGE_FROM);
        assert_eq!(
            reports(&mut s, acc(1, 0, 11, AccessKind::Read, 0x40_0008, 1)),
            vec![newest]
        );
        // Settled by every other thread, they go with their entries at a collection.
        s.collect(&[6]);
        assert!(s.large.by_access.is_empty());
    }

    #[test]
    fn every_earlier_site_is_kept_not_only_the_last_writer() {
        let mut s = Shadow::new();
        check(&mut s, acc(0, 1, 10, AccessKind::Write, 0x2000, 4));
        check(&mut s, acc(0, 2, 11, AccessKind::Write, 0x2000, 4));
        let seen = check(&mut s, acc(1, 1, 12, AccessKind::Write, 0x2000, 4));
        assert_eq!(seen, vec![(0, 1), (0, 2)]);
    }

    #[test]
    fn a_later_access_of_the_same_site_supersedes_the_earlier() {
        let mut s = Shadow::new();
        check(&mut s, acc(0, 1, 10, AccessKind::Write, 0x2000, 4));
        check(&mut s, acc(0, 7, 10, AccessKind::Write, 0x2000, 4));
        let seen = check(&mut s, acc(1, 1, 12, AccessKind::Read, 0x2000, 4));
        assert_eq!(seen, vec![(0, 7)]);
    }

    #[test]
    fn full_granules_evict_ordered_entries_first() {
        let mut s = Shadow::new();
        for site in 0..CELL_CAPACITY as u32 {
            check(&mut s, acc(0, site, site, AccessKind::Read, 0x3000, 1));
        }
        // Site 5's entry is the one the newcomer says is ordered before it.
        s.access(
            &acc(1, 0, 99, AccessKind::Read, 0x3000, 1),
            u32::MAX,
            |_, _, _| None,
            |_, _, _| {},
            |_, pos| pos == 5,
            |_, _| false,
        );
        assert_eq!(s.evicted.total, 1);
        assert_eq!(s.evicted.most(2), vec![(5, 1)]);
        let seen = check(&mut s, acc(2, 0, 100, AccessKind::Write, 0x3000, 1));
        assert!(!seen.contains(&(0, 5)));
        assert!(seen.contains(&(0, 0)));
        // Oldest first, the newcomer last.
        let order: Vec<u32> = seen.iter().map(|&(_, p)| p).collect();
        let mut want: Vec<u32> = (0..CELL_CAPACITY as u32).filter(|&p| p != 5).collect();
        want.push(0);
        assert_eq!(order, want);
    }

    #[test]
    fn a_full_granule_merges_lines_of_one_epoch_and_reports_each() {
        // Thread 0 reads one word from more lines than a granule keeps, all in its epoch
        // starting at 0: nothing is dropped, and a racing write sees every line.
        let mut s = Shadow::new();
        let lines = CELL_CAPACITY as u32 + 4;
        for site in 0..lines {
            s.access(
                &acc(0, site, site, AccessKind::Read, 0x3000, 8),
                0,
                |_, _, _| None,
                |_, _, _| {},
                |_, _| true,
                |_, _| false,
            );
        }
        // The third line would have spilled the granule: it and every later one merged.
        assert_eq!(s.evicted.total, 0);
        assert_eq!(s.merged, u64::from(lines) - INLINE as u64);
        assert!(!s.cells.get(0x3000 >> 3).unwrap().is_spilled());
        let mut seen: Vec<u32> = reports(&mut s, acc(1, 0, 99, AccessKind::Write, 0x3000, 8))
            .iter()
            .map(|e| e.site)
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..lines).collect::<Vec<_>>());
        // Another epoch (or other bytes) merges nothing: the oldest ordered entry goes.
        let mut s = Shadow::new();
        for site in 0..lines {
            s.access(
                &acc(0, site, site, AccessKind::Read, 0x3000, 8),
                site,
                |_, _, _| None,
                |_, _, _| {},
                |_, _| true,
                |_, _| false,
            );
        }
        assert_eq!(s.merged, 0);
        assert_eq!(s.evicted.total, 4);

        // One line's accesses to other bytes of the granule widen its entry; a write to
        // those bytes races with that line only.
        let mut s = Shadow::new();
        let read = |s: &mut Shadow, pos, site, addr| {
            s.access(
                &acc(0, pos, site, AccessKind::Read, addr, 4),
                0,
                |_, _, _| None,
                |_, _, _| {},
                |_, _| true,
                |_, _| false,
            )
        };
        read(&mut s, 1, 5, 0x3000);
        read(&mut s, 2, 6, 0x3000);
        read(&mut s, 3, 5, 0x3004);
        assert_eq!(s.merged, 1);
        let seen = reports(&mut s, acc(1, 0, 99, AccessKind::Write, 0x3006, 1));
        assert_eq!(seen.len(), 1);
        assert_eq!((seen[0].site, seen[0].pos), (5, 3));
        // The start reported is one of the line's accesses, found again from the bytes.
        assert_eq!((seen[0].addr, seen[0].size), (0x3000, 4));
    }

    #[test]
    fn entries_superseded_at_once_leave_the_others_in_order() {
        // Two entries of one site (each half of a word), then the whole word from that site:
        // both go, the other site's entry stays first.
        let mut s = Shadow::new();
        check(&mut s, acc(0, 1, 10, AccessKind::Write, 0x5000, 4));
        check(&mut s, acc(0, 2, 11, AccessKind::Write, 0x5000, 8));
        check(&mut s, acc(0, 3, 10, AccessKind::Write, 0x5004, 4));
        check(&mut s, acc(0, 4, 10, AccessKind::Write, 0x5000, 8));
        let seen = check(&mut s, acc(1, 1, 12, AccessKind::Read, 0x5000, 8));
        assert_eq!(seen, vec![(0, 2), (0, 4)]);
    }

    #[test]
    fn a_read_that_skips_settled_writes_still_sees_a_new_one() {
        // Thread 0's write is settled before thread 1 (ordered by every order): thread 1's
        // reads skip the checks, until thread 2 writes.
        let mut s = Shadow::new();
        let run = |s: &mut Shadow, a: ShadowAccess| {
            let mut seen = Vec::new();
            s.access(
                &a,
                u32::MAX,
                |t, _, _| (t != 0).then_some(Verdict::Unordered),
                |e, _, _| seen.push((e.thread, e.pos)),
                |_, _| false,
                |t, _| t == 0,
            );
            seen
        };
        assert!(run(&mut s, acc(0, 1, 10, AccessKind::Write, 0x6000, 4)).is_empty());
        assert!(run(&mut s, acc(1, 1, 11, AccessKind::Read, 0x6000, 4)).is_empty());
        assert!(run(&mut s, acc(1, 2, 11, AccessKind::Read, 0x6000, 4)).is_empty());
        assert!(run(&mut s, acc(2, 1, 12, AccessKind::Write, 0x6004, 4)).is_empty());
        assert!(run(&mut s, acc(1, 3, 11, AccessKind::Read, 0x6000, 4)).is_empty());
        assert_eq!(
            run(&mut s, acc(1, 4, 13, AccessKind::Read, 0x6000, 8)),
            vec![(2, 1)]
        );
        // A new write of thread 2 to the bytes thread 1 read before: seen by its next read.
        assert_eq!(
            run(&mut s, acc(2, 2, 12, AccessKind::Write, 0x6000, 4)),
            vec![(1, 3), (1, 4)]
        );
        assert_eq!(
            run(&mut s, acc(1, 5, 11, AccessKind::Read, 0x6000, 4)),
            vec![(2, 2)]
        );
    }

    #[test]
    fn an_entry_of_the_same_bytes_is_not_the_only_one_superseded_when_entries_nest() {
        // The whole word, then its first half, from one line: the half nests in the word.
        // The whole word again supersedes both.
        let mut s = Shadow::new();
        check(&mut s, acc(0, 1, 10, AccessKind::Write, 0x7000, 8));
        check(&mut s, acc(0, 2, 10, AccessKind::Write, 0x7000, 4));
        check(&mut s, acc(0, 3, 10, AccessKind::Write, 0x7000, 8));
        assert_eq!(
            check(&mut s, acc(1, 1, 12, AccessKind::Read, 0x7000, 8)),
            vec![(0, 3)]
        );
    }

    #[test]
    fn a_spill_given_back_is_handed_out_again_and_none_moves() {
        let mut sp = Spills::default();
        let taken: Vec<u32> = (0..2 * SPILLS_PER_CHUNK + 1).map(|_| sp.take()).collect();
        assert_eq!(sp.chunks.len(), 3);
        sp.get_mut(taken[SPILLS_PER_CHUNK + 5]).keys[3] = 7;
        sp.give_back(taken[10]);
        sp.give_back(taken[11]);
        assert_eq!(sp.live, taken.len() - 2);
        assert_eq!(sp.take(), taken[11]);
        assert_eq!(sp.take(), taken[10]);
        assert_eq!(sp.chunks.len(), 3);
        assert_eq!(sp.get(taken[SPILLS_PER_CHUNK + 5]).keys[3], 7);
    }

    #[test]
    fn forgotten_granules_give_their_spills_back() {
        // Eight granules read from eight lines each spill; forgetting them one by one, or as
        // a block larger than the table holds, gives every spill back, and spilling again
        // takes them, not new ones.
        for block in [64u64, 1 << 30] {
            let mut s = Shadow::new();
            for round in 0..3 {
                for g in 0..8u64 {
                    for site in 0..8 {
                        check(
                            &mut s,
                            acc(0, site, site, AccessKind::Read, 0x1000 + g * 8, 1),
                        );
                    }
                }
                assert_eq!(s.spills.live, 8, "round {round}");
                s.forget(0x1000, block);
                assert_eq!((s.spills.live, s.granules()), (0, 0), "round {round}");
                assert_eq!(s.spills.fresh, 8);
            }
        }
    }

    #[test]
    fn a_full_budget_compacts_spilled_granules_before_leaving_memory_unchecked() {
        let budget = 64 * SLOT_BYTES + 8 * SPILL_BYTES;
        let mut s = Shadow::with_budget(budget);
        // Eight granules read from eight lines each: they spill.
        for g in 0..8u64 {
            for site in 0..8 {
                check(
                    &mut s,
                    acc(0, site, site, AccessKind::Read, 0x1000 + g * 8, 1),
                );
            }
        }
        assert_eq!(s.spills.live, 8);
        // New granules, until the table is at its limit: the spilled granules give their
        // oldest entries up first (counted by line), then what finds no room is counted.
        for g in 0..200u64 {
            check(
                &mut s,
                acc(1, 0, 100, AccessKind::Write, 0x10_0000 + g * 8, 8),
            );
            assert!(s.bytes() <= budget, "{} > {budget}", s.bytes());
        }
        assert_eq!(s.spills.live, 0);
        assert_eq!(s.evicted.total, 8 * (8 - INLINE as u64));
        assert_eq!(s.evicted.by_site[&0], 8);
        // Then new granules take the place of tracked ones: none is left unchecked.
        assert_eq!(s.untracked.accesses.total, 0);
        assert!(s.granules_given_way > 0);
        assert_eq!(s.given_way.by_site[&100], s.given_way.total);
        // The granules kept still see races: the newest entries of the compacted ones.
        assert_eq!(
            check(&mut s, acc(2, 0, 101, AccessKind::Write, 0x1000, 1)),
            vec![(0, 6), (0, 7)]
        );
    }

    /// A shadow with room for 64 slots and no spill, filled by 48 granules that thread 0
    /// wrote from line 10, from 0x1000 on.
    fn full_table() -> Shadow {
        let mut s = Shadow::with_budget(64 * SLOT_BYTES);
        for g in 0..48u64 {
            check(&mut s, acc(0, 1, 10, AccessKind::Write, 0x1000 + g * 8, 8));
        }
        s
    }

    #[test]
    fn a_full_table_takes_new_memory_in_place_of_a_granule_of_fewest_entries() {
        // Eight of the granules of a full table hold entries of two threads; then other
        // granules come, one after another.
        let mut s = full_table();
        let budget = s.budget;
        for g in 0..8u64 {
            check(&mut s, acc(1, 1, 11, AccessKind::Read, 0x1000 + g * 8, 8));
        }
        assert_eq!((s.cells.slots(), s.granules()), (64, 48));
        for g in 0..100u64 {
            check(&mut s, acc(3, 1, 20, AccessKind::Write, 0x9000 + g * 8, 8));
            assert!(s.bytes() <= budget);
            assert_eq!(s.granules(), 48);
        }
        assert_eq!(s.untracked.accesses.total, 0);
        assert_eq!(s.granules_given_way, 100);
        assert_eq!(s.given_way.total, 100);
        // The granules of two entries stayed: among a granule's neighbours, those of one
        // entry went first.
        for g in 0..8u64 {
            assert_eq!(
                s.cells.get(0x200 + g).map(|c| c.len()),
                Some(2),
                "granule {g}"
            );
        }
        // The newest memory is checked: a race there is found.
        assert_eq!(
            check(&mut s, acc(4, 1, 30, AccessKind::Read, 0x9000 + 99 * 8, 4)),
            vec![(3, 1)]
        );
        assert_eq!(s.untracked.accesses.total, 0);
    }

    #[test]
    fn a_wide_access_leaves_memory_unchecked_in_a_full_table_rather_than_empty_it() {
        let mut s = full_table();
        // 72 bytes: nine granules, none tracked.
        check(&mut s, acc(1, 1, 11, AccessKind::Write, 0x9000, 72));
        assert_eq!(s.granules_given_way, 0);
        assert_eq!(s.untracked.accesses.most(1), vec![(11, 1)]);
        // 64 bytes: eight granules take tracked ones' places.
        check(&mut s, acc(1, 2, 12, AccessKind::Write, 0xa000, 64));
        assert_eq!(s.granules_given_way, 8);
        assert_eq!(s.untracked.accesses.total, 1);
        assert_eq!(s.granules(), 48);
    }

    #[test]
    fn forgotten_memory_races_with_nothing() {
        let mut s = Shadow::new();
        check(&mut s, acc(0, 1, 10, AccessKind::Write, 0x4000, 64));
        s.forget(0x4000, 64);
        assert!(check(&mut s, acc(1, 1, 11, AccessKind::Write, 0x4010, 8)).is_empty());
        // A large block forgets by scanning what is tracked.
        check(&mut s, acc(0, 2, 10, AccessKind::Write, 0x9000, 8));
        s.forget(0, u64::MAX);
        assert_eq!(s.granules(), 0);
    }

    /// The earlier accesses a free of `[addr, addr + size)` by `thread` meets, all judged
    /// unordered.
    fn frees(shadow: &Shadow, thread: u32, addr: u64, size: u64) -> Vec<(u32, u32, u32)> {
        let free = ShadowAccess {
            size: u32::try_from(size).unwrap_or(u32::MAX),
            ..acc(thread, 100, 77, AccessKind::Free, addr, 0)
        };
        let mut seen = Vec::new();
        shadow.check_free(
            &free,
            size,
            |_, _, _| Some(Verdict::Unordered),
            |e, _, _| seen.push((e.thread, e.pos, e.site)),
        );
        seen
    }

    #[test]
    fn a_free_conflicts_with_other_threads_accesses_to_any_byte_of_the_block() {
        let mut s = Shadow::new();
        check(&mut s, acc(1, 1, 10, AccessKind::Write, 0x1000, 4));
        check(&mut s, acc(1, 2, 11, AccessKind::Read, 0x1038, 8));
        check(&mut s, acc(2, 1, 12, AccessKind::AtomicRead, 0x1020, 4));
        // The freeing thread's own access, and one just past the block: not conflicts.
        check(&mut s, acc(0, 1, 13, AccessKind::Write, 0x1010, 4));
        check(&mut s, acc(1, 3, 14, AccessKind::Write, 0x1040, 4));
        let mut seen = frees(&s, 0, 0x1000, 64);
        seen.sort_unstable();
        assert_eq!(seen, vec![(1, 1, 10), (1, 2, 11), (2, 1, 12)]);
        // Nothing was recorded: the free checks, the caller forgets.
        assert_eq!(s.granules(), 5);
    }

    #[test]
    fn an_access_over_several_granules_is_met_once_by_a_free() {
        let mut s = Shadow::new();
        check(&mut s, acc(1, 1, 10, AccessKind::Write, 0x2000, 64));
        assert_eq!(frees(&s, 0, 0x2000, 64), vec![(1, 1, 10)]);
    }

    #[test]
    fn a_huge_free_looks_only_at_the_granules_tracked() {
        let mut s = Shadow::new();
        check(
            &mut s,
            acc(1, 1, 10, AccessKind::Write, 0x7000_0000_1000, 4),
        );
        check(
            &mut s,
            acc(1, 2, 11, AccessKind::Write, 0x7fff_0000_0000, 4),
        );
        // 2^40 bytes, 2^37 granules: one by one this would not end.
        let mut seen = frees(&s, 0, 0x7000_0000_0000, 1 << 40);
        seen.sort_unstable();
        assert_eq!(seen, vec![(1, 1, 10)]);
    }

    #[test]
    fn threads_64_apart_are_told_apart() {
        let mut s = Shadow::new();
        check(&mut s, acc(64, 1, 10, AccessKind::Write, 0x1000, 4));
        assert_eq!(
            check(&mut s, acc(0, 1, 11, AccessKind::Write, 0x1000, 4)),
            vec![(64, 1)]
        );
    }

    /// One step of a random run: an access, or `from` publishing to `to` (a release its
    /// acquire, a create, a join: both threads' epochs end).
    #[derive(Clone, Debug)]
    enum Step {
        Access {
            thread: u32,
            site: u32,
            write: bool,
            addr: u64,
            size: u32,
        },
        Sync {
            from: u32,
            to: u32,
        },
        Collect,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            6 => (0..3u32, 0..3u32, any::<bool>(), 0..12u64, prop_oneof![Just(4u32), Just(8), Just(12)])
                .prop_map(|(thread, site, write, addr, size)| Step::Access {
                    thread,
                    site,
                    write,
                    addr: 0x1000 + 4 * addr,
                    size,
                }),
            1 => access_step(3, 0..40, 1..=12),
            2 => (0..3u32, 1..3u32).prop_map(|(from, d)| Step::Sync { from, to: (from + d) % 3 }),
            1 => Just(Step::Collect),
        ]
    }

    /// An access of one of three threads from one of `sites` lines, a read or a write, at
    /// `0x1000` plus an offset in `offsets`, of a size in `sizes`.
    fn access_step(
        sites: u32,
        offsets: std::ops::Range<u64>,
        sizes: std::ops::RangeInclusive<u32>,
    ) -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        (0..3u32, 0..sites, any::<bool>(), offsets, sizes).prop_map(
            |(thread, site, write, addr, size)| Step::Access {
                thread,
                site,
                write,
                addr: 0x1000 + addr,
                size,
            },
        )
    }

    /// The threads' positions and what each knows of the others, as prefix lengths.
    struct Clocks {
        pos: [u32; 3],
        knows: [[u32; 3]; 3],
        since: [u32; 3],
    }

    impl Clocks {
        /// The next access of `thread`, its position counted.
        fn step(
            &mut self,
            thread: u32,
            site: u32,
            write: bool,
            addr: u64,
            size: u32,
        ) -> ShadowAccess {
            let kind = if write {
                AccessKind::Write
            } else {
                AccessKind::Read
            };
            let pos = &mut self.pos[thread as usize];
            *pos += 1;
            acc(thread, *pos - 1, site, kind, addr, size)
        }

        /// The floors a collection may drop below: what every other thread knows.
        fn floors(&self) -> Vec<u32> {
            (0..3)
                .map(|t| {
                    (0..3)
                        .filter(|&u| u != t)
                        .map(|u| self.knows[u][t])
                        .min()
                        .unwrap()
                })
                .collect()
        }

        /// `from` synchronises with `to`: `to` learns what `from` knows, and both begin an epoch.
        fn sync(&mut self, from: u32, to: u32) {
            let (f, t) = (from as usize, to as usize);
            self.pos[f] += 1;
            let mut learnt = self.knows[f];
            learnt[f] = self.pos[f];
            for (k, l) in self.knows[t].iter_mut().zip(learnt) {
                *k = (*k).max(l);
            }
            self.pos[t] += 1;
            self.since[f] = self.pos[f];
            self.since[t] = self.pos[t];
        }

        /// The earlier threads and lines `shadow` reports for `a` (a thread's access, after
        /// its position was counted), as a sorted set.
        fn seen_by(&self, shadow: &mut Shadow, a: &ShadowAccess) -> Vec<(u32, u32)> {
            let t = a.thread as usize;
            let knows = self.knows[t];
            let mut seen = Vec::new();
            shadow.access(
                a,
                self.since[t],
                |u, pos, _| (knows[u as usize] <= pos).then_some(Verdict::Unordered),
                |e, _, _| seen.push((e.thread, e.site)),
                |u, pos| knows[u as usize] > pos,
                |u, pos| knows[u as usize] > pos,
            );
            seen.sort_unstable();
            seen.dedup();
            seen
        }
    }

    proptest::proptest! {
        /// A shadow that collects settled entries reports, for every access, the same earlier
        /// lines of the same threads as one that keeps them, and holds no more granules.
        #[test]
        fn collecting_settled_entries_changes_no_verdict(
            steps in proptest::collection::vec(step(), 1..400)
        ) {
            let mut plain = Shadow::new();
            let mut collected = Shadow::new();
            let mut c = Clocks { pos: [0; 3], knows: [[0; 3]; 3], since: [0; 3] };
            let mut collections = 0;
            for s in steps {
                match s {
                    Step::Access { thread, site, write, addr, size } => {
                        let a = c.step(thread, site, write, addr, size);
                        let seen = [c.seen_by(&mut plain, &a), c.seen_by(&mut collected, &a)];
                        proptest::prop_assert_eq!(&seen[0], &seen[1], "{:?}", a);
                    }
                    Step::Sync { from, to } => c.sync(from, to),
                    Step::Collect => {
                        collected.collect(&c.floors());
                        collections += 1;
                    }
                }
                // Once a full granule dropped entries, the two differ by those: beyond what
                // the property is about.
                if plain.evicted.total > 0 {
                    break;
                }
                proptest::prop_assert!(collected.granules() <= plain.granules());
            }
            let _ = collections;
        }

        /// A shadow that merges within epochs in spilled granules and drops covered entries
        /// from full ones reports, for every access, the same earlier threads and lines as
        /// the shadow before it (until that one evicts), and as every earlier access checked
        /// one by one (until it evicts itself): a few granules, touched by three threads from
        /// eight lines at every offset and size, across many epochs.
        #[test]
        fn tidy_granules_change_no_verdict(
            steps in proptest::collection::vec(busy_step(), 1..600)
        ) {
            let mut before = Shadow::new();
            before.tidy = false;
            let mut after = Shadow::new();
            let mut every: Vec<ShadowAccess> = Vec::new();
            let mut c = Clocks { pos: [0; 3], knows: [[0; 3]; 3], since: [0; 3] };
            for s in steps {
                match s {
                    Step::Access { thread, site, write, addr, size } => {
                        let t = thread as usize;
                        let kind = match (write, site % 5 == 4) {
                            (false, false) => AccessKind::Read,
                            (true, false) => AccessKind::Write,
                            (false, true) => AccessKind::AtomicRead,
                            (true, true) => AccessKind::AtomicWrite,
                        };
                        let a = acc(thread, c.pos[t], site, kind, addr, size);
                        c.pos[t] += 1;
                        let knows = c.knows[t];
                        let seen = [c.seen_by(&mut before, &a), c.seen_by(&mut after, &a)];
                        let end = |x: &ShadowAccess| x.addr + u64::from(x.size);
                        let mut expected: Vec<(u32, u32)> = every
                            .iter()
                            .filter(|e| {
                                e.thread != thread
                                    && e.addr < end(&a)
                                    && a.addr < end(e)
                                    && e.kind.conflicts(kind)
                                    && knows[e.thread as usize] <= e.pos
                            })
                            .map(|e| (e.thread, e.site))
                            .collect();
                        expected.sort_unstable();
                        expected.dedup();
                        every.push(a);
                        if before.evicted.total == 0 {
                            proptest::prop_assert_eq!(&seen[0], &seen[1], "{:?}", a);
                        }
                        if after.evicted.total == 0 {
                            proptest::prop_assert_eq!(&seen[1], &expected, "{:?}", a);
                        } else {
                            break;
                        }
                    }
                    Step::Sync { from, to } => c.sync(from, to),
                    Step::Collect => {}
                }
            }
        }
    }

    /// One step of a run over more memory than a small budget holds: narrow accesses over
    /// 400 granules, now and then a wide one, synchronisations and collections.
    fn roaming_step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            12 => access_step(6, 0..3200, 1..=16),
            1 => access_step(6, 0..3200, 57..=200),
            2 => (0..3u32, 1..3u32).prop_map(|(from, d)| Step::Sync { from, to: (from + d) % 3 }),
            1 => Just(Step::Collect),
        ]
    }

    proptest::proptest! {
        /// A shadow in a budget far smaller than the memory touched stays within it, and
        /// leaves no access of at most 64 bytes unchecked: a full table takes new granules in
        /// place of old ones (decision 0030), counted; only wider accesses may go unchecked.
        #[test]
        fn a_small_budget_leaves_only_wide_accesses_unchecked(
            steps in proptest::collection::vec(roaming_step(), 1..600)
        ) {
            let budget = 64 * SLOT_BYTES + 2 * SPILL_BYTES;
            let mut s = Shadow::with_budget(budget);
            let mut c = Clocks { pos: [0; 3], knows: [[0; 3]; 3], since: [0; 3] };
            for step in steps {
                match step {
                    Step::Access { thread, site, write, addr, size } => {
                        let a = c.step(thread, site, write, addr, size);
                        let before = s.untracked.accesses.total;
                        c.seen_by(&mut s, &a);
                        let (first, last) = granule_span(addr, size);
                        proptest::prop_assert!(
                            s.untracked.accesses.total == before || last - first >= GIVE_WAY_SPAN,
                            "{:?} left unchecked", a
                        );
                    }
                    Step::Sync { from, to } => c.sync(from, to),
                    Step::Collect => s.collect(&c.floors()),
                }
                proptest::prop_assert!(s.bytes() <= budget, "{} > {budget}", s.bytes());
                proptest::prop_assert!(s.granules() * 4 <= s.cells.slots() * 3);
                proptest::prop_assert!(s.given_way.total == 0 || s.granules_given_way > 0);
            }
        }
    }

    /// One step of a run that keeps a few granules busy: three threads, eight lines, every
    /// offset and size within 24 bytes, and synchronisations that end epochs.
    fn busy_step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            12 => (0..3u32, 0..8u32, proptest::bool::weighted(0.2), 0..24u64, 1..=8u32)
                .prop_map(|(thread, site, write, addr, size)| Step::Access {
                    thread,
                    site,
                    write,
                    addr: 0x1000 + addr,
                    size,
                }),
            1 => (0..3u32, 1..3u32).prop_map(|(from, d)| Step::Sync { from, to: (from + d) % 3 }),
        ]
    }

    /// The entries a full granule drops as covered, found the way the first version did: for
    /// each entry of the thread and kind, a pass for any newer one, then one per line for a
    /// newer one holding it.
    fn covered_one_by_one(
        cell: &Cell,
        sp: &Spills,
        sets: &SiteSets,
        thread: u32,
        kind: AccessKind,
    ) -> u64 {
        const KEY_BITS: u32 = THREAD_BITS | 3 << KIND_SHIFT;
        let key = thread | (kind as u32) << KIND_SHIFT;
        let entries = cell.entries(sp);
        if entries.iter().filter(|e| e.tkm & KEY_BITS == key).count() < 2 {
            return 0;
        }
        let lines = |i: usize| -> &[u32] {
            if cell.is_merged(i) {
                sets.set(entries[i].site)
            } else {
                std::slice::from_ref(&entries[i].site)
            }
        };
        let mut covered = 0u64;
        for (i, e) in entries.iter().enumerate() {
            if e.tkm & KEY_BITS != key {
                continue;
            }
            let newer = |o: &Entry| {
                o.pos > e.pos
                    && (o.tkm ^ e.tkm) & KEY_BITS == 0
                    && o.lockset == e.lockset
                    && o.mask() & e.mask() == e.mask()
            };
            if !entries.iter().any(newer) {
                continue;
            }
            let held = |line: u32| {
                entries.iter().enumerate().any(|(j, o)| {
                    newer(o)
                        && if cell.is_merged(j) {
                            sets.set(o.site).binary_search(&line).is_ok()
                        } else {
                            o.site == line
                        }
                })
            };
            if lines(i).iter().all(|&l| held(l)) {
                covered |= 1 << i;
            }
        }
        covered
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2000))]
        /// The covered entries found by comparing arrays are those found one by one, in full
        /// cells mostly of one thread, kind and lockset (so that entries cover each other),
        /// with a few positions, byte masks and lines, some entries standing for sets of two
        /// or three lines.
        #[test]
        fn covered_entries_found_in_one_pass_are_those_found_one_by_one(
            cell_entries in proptest::collection::vec(
                (proptest::bool::weighted(0.15), proptest::bool::weighted(0.15), 0..6u32,
                 proptest::bool::weighted(0.15),
                 proptest::sample::select(vec![0x01u8, 0x03, 0x0f, 0xf0, 0xff, 0x3c]),
                 0..4u32, proptest::option::weighted(0.4, (0..4u32, proptest::option::of(0..4u32)))),
                0..=CELL_CAPACITY,
            ),
            write in proptest::bool::weighted(0.15),
        ) {
            let mut sets = SiteSets::default();
            let mut cell = Cell::default();
            let mut sp = Spills::default();
            let mut merged = 0u16;
            for (i, &(other_thread, w, pos, locked, mask, site, more)) in cell_entries.iter().enumerate() {
                let kind = if w { AccessKind::Write } else { AccessKind::Read };
                let a = ShadowAccess {
                    thread: u32::from(other_thread),
                    pos,
                    site,
                    lockset: u32::from(locked),
                    kind,
                    addr: 0x1000,
                    size: 8,
                };
                let mut e = Entry::new(&a, mask);
                if let Some((second, third)) = more.filter(|&(s2, _)| s2 != site) {
                    let mut set = sets.union(Lines::Site(site), second).unwrap();
                    if let Some(third) = third {
                        set = sets.union(Lines::Set(set), third).unwrap();
                    }
                    e.site = set;
                    merged |= 1 << i;
                }
                cell.push(&mut sp, e);
            }
            cell.merged = merged;
            let kind = if write { AccessKind::Write } else { AccessKind::Read };
            proptest::prop_assert_eq!(
                cell.covered(&sp, &sets, 0, kind),
                covered_one_by_one(&cell, &sp, &sets, 0, kind)
            );
        }
    }

    #[test]
    fn a_full_granule_drops_what_newer_entries_cover_before_evicting() {
        // One thread reads a word from twelve lines in each of twenty epochs: each epoch's
        // lines merge into an entry of several lines, which nothing supersedes, so the granule
        // fills with one per epoch. Full, it drops those whose lines a newer one holds with
        // the same bytes, where the shadow before evicted them (counted as dropped).
        let run = |tidy: bool| {
            let mut s = Shadow::new();
            s.tidy = tidy;
            let mut pos = 0;
            for _ in 0..20 {
                let since = pos;
                for site in 0..12 {
                    s.access(
                        &acc(0, pos, site, AccessKind::Read, 0x2000, 8),
                        since,
                        |_, _, _| None,
                        |_, _, _| {},
                        |_, _| false,
                        |_, _| false,
                    );
                    pos += 1;
                }
                pos += 1;
            }
            s
        };
        assert!(run(false).evicted.total > 0);
        let mut s = run(true);
        assert_eq!(s.evicted.total, 0);
        assert!(s.covered_dropped > 0);
        // Every line is still seen by another thread's write.
        let seen = reports(&mut s, acc(1, 0, 99, AccessKind::Write, 0x2000, 8));
        let mut lines: Vec<u32> = seen.iter().map(|e| e.site).collect();
        lines.sort_unstable();
        lines.dedup();
        assert_eq!(lines, (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn a_word_widened_in_one_epoch_and_read_by_halves_in_the_next_stops_nesting() {
        // One thread reads and writes both halves of a word, epoch after epoch (a private
        // array of 4-byte elements). The first epoch widens its two entries to the whole word
        // (two fit in the cell); the next one's halves nest in them until both halves are
        // back, when the widened entries go and every access finds its entry by its bytes.
        let mut s = Shadow::new();
        let mut pos = 0;
        for epoch in 0..3 {
            let since = pos;
            for _ in 0..2 {
                for (site, kind, addr) in [
                    (1, AccessKind::Read, 0x2000),
                    (2, AccessKind::Write, 0x2000),
                    (1, AccessKind::Read, 0x2004),
                    (2, AccessKind::Write, 0x2004),
                ] {
                    s.access(
                        &acc(0, pos, site, kind, addr, 4),
                        since,
                        |_, _, _| None,
                        |_, _, _| {},
                        |_, _| false,
                        |_, _| false,
                    );
                    pos += 1;
                }
            }
            pos += 1;
            let cell = s.cells.get(0x2000 >> 3).unwrap();
            if epoch > 0 {
                assert!(!cell.nested(), "epoch {epoch}");
                assert_eq!(cell.entries(&s.spills).len(), 4);
            }
        }
        // Another thread's write of the word still meets both lines at their newest halves.
        let mut seen: Vec<(u32, u32, u64)> =
            reports(&mut s, acc(1, 0, 99, AccessKind::Write, 0x2000, 8))
                .iter()
                .map(|e| (e.site, e.pos, e.addr))
                .collect();
        seen.sort_unstable();
        assert_eq!(
            seen,
            vec![
                (1, 22, 0x2000),
                (1, 24, 0x2004),
                (2, 23, 0x2000),
                (2, 25, 0x2004)
            ]
        );
    }

    #[test]
    fn an_entry_gone_from_a_spilled_granule_is_not_found_again() {
        // Thread 0 reads a word's halves from one line (a third line's entry spills the
        // granule), then the whole word from that line, which supersedes both halves: the
        // granule holds two entries where it held three. The upper half read again is a new
        // entry, which another thread's write of it meets at its own position.
        let mut s = Shadow::new();
        check(&mut s, acc(0, 1, 9, AccessKind::Read, 0x2000, 8));
        check(&mut s, acc(0, 2, 1, AccessKind::Read, 0x2000, 4));
        check(&mut s, acc(0, 3, 1, AccessKind::Read, 0x2004, 4));
        assert!(s.cells.get(0x2000 >> 3).unwrap().is_spilled());
        check(&mut s, acc(0, 4, 1, AccessKind::Read, 0x2000, 8));
        assert_eq!(s.cells.get(0x2000 >> 3).unwrap().len(), 2);
        check(&mut s, acc(0, 5, 1, AccessKind::Read, 0x2004, 4));
        let mut seen: Vec<(u32, u32, u64)> =
            reports(&mut s, acc(1, 0, 99, AccessKind::Write, 0x2004, 4))
                .iter()
                .map(|e| (e.site, e.pos, e.addr))
                .collect();
        seen.sort_unstable();
        assert_eq!(seen, vec![(1, 4, 0x2000), (1, 5, 0x2004), (9, 1, 0x2000)]);
    }

    #[test]
    fn a_collection_drops_only_entries_every_other_thread_has_ordered() {
        let mut s = Shadow::new();
        check(&mut s, acc(0, 1, 10, AccessKind::Write, 0x1000, 8));
        check(&mut s, acc(0, 2, 10, AccessKind::Write, 0x2000, 8));
        check(&mut s, acc(1, 5, 11, AccessKind::Read, 0x2000, 8));
        // Thread 0's first two positions are ordered before every other thread; thread 1's
        // are not.
        s.collect(&[3, 0]);
        assert_eq!(s.settled_dropped, 2);
        assert_eq!(s.granules(), 1);
        assert_eq!(
            check(&mut s, acc(2, 1, 12, AccessKind::Write, 0x2000, 8)),
            vec![(1, 5)]
        );
        assert!(check(&mut s, acc(2, 2, 12, AccessKind::Write, 0x1000, 8)).is_empty());
        // A spilled granule whose entries mostly go moves back into its cell.
        let mut s = Shadow::new();
        for site in 0..6 {
            check(&mut s, acc(0, site, site, AccessKind::Read, 0x3000, 8));
        }
        assert_eq!(s.spills.live, 1);
        s.collect(&[5]);
        assert_eq!(s.spills.live, 0);
        assert!(!s.cells.get(0x3000 >> 3).unwrap().is_spilled());
        assert_eq!(
            check(&mut s, acc(1, 0, 99, AccessKind::Write, 0x3000, 8)),
            vec![(0, 5)]
        );
    }
}
