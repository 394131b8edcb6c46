//! Shadow memory: for every 8-byte granule of the program's memory that the trace touched, the
//! accesses a later access could still race with.
//!
//! An entry is kept per (thread, site, kind) and granule: a later access of the same thread
//! from the same site supersedes it, losing no pair of sites a report could name (whatever races
//! with the earlier access races with the later one too: both are of one thread, the later one
//! after). Entries from other sites stay, so that every pair of racing lines is seen, not only
//! the last writer as FastTrack keeps (Flanagan & Freund, PLDI 2009); a granule holds at most
//! [`CELL_CAPACITY`] entries, beyond which the oldest entry already ordered before the newcomer
//! goes first (then the oldest), and the evictions are counted.
//!
//! Bytes are tracked within a granule by a mask, so that two threads writing neighbouring bytes
//! of one word (two `char` fields of a struct) do not race.
//!
//! **Layout.** An entry is 24 bytes: thread, kind and byte mask packed in one word, position,
//! site, lockset, and the access's start and size for reports (the start as its low 32 bits:
//! with the granule they give the whole address, [`Entry::start`]). A granule's first
//! [`INLINE`] entries live in the map's own slot, without an allocation of their own; a
//! granule that needs more moves them to a vector. Per granule tracked: about 112 bytes in the
//! map (more while the map is below its load factor), plus 24 per entry beyond [`INLINE`].

use crate::addr_map::AddrMap;

/// How many entries a granule keeps.
pub const CELL_CAPACITY: usize = 16;

/// Entries a granule keeps in place, before it needs a vector of its own: two threads reading
/// both halves of a word from one site each, or one thread reading and writing both halves.
pub const INLINE: usize = 4;

/// Threads the shadow can tell apart: the thread index takes the low 22 bits of an entry's
/// first word.
pub const MAX_THREADS: usize = 1 << 22;

const THREAD_BITS: u32 = (1 << 22) - 1;
const KIND_SHIFT: u32 = 22;
const MASK_SHIFT: u32 = 24;

/// What an access did to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccessKind {
    Read = 0,
    Write = 1,
    AtomicRead = 2,
    /// An atomic store or read-modify-write.
    AtomicWrite = 3,
}

impl AccessKind {
    pub fn is_write(self) -> bool {
        self as u8 & 1 != 0
    }

    pub fn is_atomic(self) -> bool {
        self as u8 & 2 != 0
    }

    /// Two accesses to one byte conflict when one of them writes and they are not both atomic
    /// (atomics never race with atomics).
    #[inline]
    pub fn conflicts(self, other: AccessKind) -> bool {
        let (a, b) = (self as u8, other as u8);
        (a | b) & 1 != 0 && (a & b) & 2 == 0
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::AtomicRead => "atomic read",
            AccessKind::AtomicWrite => "atomic write",
        }
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
pub struct ShadowAccess {
    /// Dense thread index.
    pub thread: u32,
    /// Position of the access in its thread.
    pub pos: u32,
    pub site: u32,
    /// The locks held at the access ([`super::locksets::Locksets`] id).
    pub lockset: u32,
    pub kind: AccessKind,
    /// The whole access, for reports (it may span granules).
    pub addr: u64,
    pub size: u32,
}

/// One access in one granule.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    /// Thread (low 22 bits), kind (2 bits), byte mask within the granule (high 8 bits).
    tkm: u32,
    pos: u32,
    site: u32,
    lockset: u32,
    /// The low 32 bits of the access's first byte, and its size.
    start_low: u32,
    size: u32,
}

impl Entry {
    fn new(a: &ShadowAccess, mask: u8) -> Self {
        Entry {
            tkm: a.thread | (a.kind as u32) << KIND_SHIFT | (mask as u32) << MASK_SHIFT,
            pos: a.pos,
            site: a.site,
            lockset: a.lockset,
            start_low: a.addr as u32,
            size: a.size,
        }
    }

    /// Becomes a later access of the same thread, site and kind.
    #[inline]
    fn update(&mut self, a: &ShadowAccess, mask: u8) {
        self.tkm = a.thread | (a.kind as u32) << KIND_SHIFT | (mask as u32) << MASK_SHIFT;
        self.pos = a.pos;
        self.lockset = a.lockset;
        self.start_low = a.addr as u32;
        self.size = a.size;
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

    /// The access's first byte. The entry's first byte in `granule` is at most `size - 1`
    /// bytes after it, less than 2^32: the low 32 bits of the difference are the difference.
    fn start(&self, granule: u64) -> u64 {
        let first_here = granule * 8 + u64::from(self.mask().trailing_zeros());
        first_here - u64::from((first_here as u32).wrapping_sub(self.start_low))
    }

    fn access(&self, granule: u64) -> ShadowAccess {
        ShadowAccess {
            thread: self.thread(),
            pos: self.pos,
            site: self.site,
            lockset: self.lockset,
            kind: self.kind(),
            addr: self.start(granule),
            size: self.size,
        }
    }
}

/// The entries of one granule, oldest first.
#[derive(Clone, Debug)]
enum Cell {
    Inline(u8, [Entry; INLINE]),
    Spilled(Vec<Entry>),
}

impl Default for Cell {
    fn default() -> Self {
        Cell::Inline(0, [Entry::default(); INLINE])
    }
}

impl Cell {
    #[inline]
    fn entries(&self) -> &[Entry] {
        match self {
            Cell::Inline(n, e) => &e[..*n as usize],
            Cell::Spilled(v) => v,
        }
    }

    #[inline]
    fn entries_mut(&mut self) -> &mut [Entry] {
        match self {
            Cell::Inline(n, e) => &mut e[..*n as usize],
            Cell::Spilled(v) => v,
        }
    }

    fn push(&mut self, e: Entry) {
        match self {
            Cell::Inline(n, slots) if (*n as usize) < INLINE => {
                slots[*n as usize] = e;
                *n += 1;
            }
            Cell::Inline(_, slots) => {
                let mut v = Vec::with_capacity(CELL_CAPACITY);
                v.extend_from_slice(slots);
                v.push(e);
                *self = Cell::Spilled(v);
            }
            Cell::Spilled(v) => v.push(e),
        }
    }

    /// Removes entry `i`, keeping the others in order.
    fn remove(&mut self, i: usize) {
        match self {
            Cell::Inline(n, slots) => {
                slots.copy_within(i + 1..*n as usize, i);
                *n -= 1;
            }
            Cell::Spilled(v) => {
                v.remove(i);
            }
        }
    }

    fn retain(&mut self, keep: impl Fn(&Entry) -> bool) {
        match self {
            Cell::Inline(n, slots) => {
                let mut kept = 0;
                for i in 0..*n as usize {
                    if keep(&slots[i]) {
                        slots[kept] = slots[i];
                        kept += 1;
                    }
                }
                *n = kept as u8;
            }
            Cell::Spilled(v) => v.retain(keep),
        }
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

/// Where a conflict was found: the granule, and the earlier access's entry in it. With the
/// later access's place in the merged order this is the order in which one pass over the
/// whole address space finds pairs (granules in address order, entries oldest first), which
/// shards of the address space reproduce when their findings are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FoundAt {
    pub granule: u64,
    pub entry: u32,
}

/// The shadow memory of one run (or of one shard's granules).
#[derive(Debug, Default)]
pub struct Shadow {
    cells: AddrMap<Cell>,
    /// Entries dropped because a granule was full.
    pub evicted: u64,
}

/// The 8-byte granules an access touches, and its byte mask in each.
#[inline]
pub fn granule_span(addr: u64, size: u32) -> (u64, u64) {
    let end = addr.saturating_add(u64::from(size.max(1)));
    (addr >> 3, (end - 1) >> 3)
}

impl Shadow {
    pub fn new() -> Self {
        Self::default()
    }

    /// Granules tracked now (the live shared footprint).
    pub fn granules(&self) -> usize {
        self.cells.len()
    }

    /// Checks `access` against what the granules it covers hold, then records it; only the
    /// granules `owns` says are this shadow's are looked at (all of them but for a shard).
    ///
    /// `judge(thread, pos, lockset)` decides, for a conflicting earlier access of another
    /// thread, whether it is unordered with `access`, a candidate for prediction, or ordered
    /// (`None`); `report(earlier, verdict, at)` is called once per earlier access that is not
    /// ordered, at the first granule that shows it, however many granules the two share;
    /// `dominated(thread, pos)` says whether an entry is ordered before `access` (it is evicted
    /// first from a full granule).
    #[inline]
    pub fn access(
        &mut self,
        access: &ShadowAccess,
        owns: impl Fn(u64) -> bool,
        mut judge: impl FnMut(u32, u32, u32) -> Option<Verdict>,
        mut report: impl FnMut(ShadowAccess, Verdict, FoundAt),
        mut dominated: impl FnMut(u32, u32) -> bool,
    ) {
        let (first, last) = granule_span(access.addr, access.size);
        if first == last {
            // The usual access: within one granule.
            if owns(first) {
                let lo = (access.addr & 7) as u32;
                let mask = (((1u32 << (lo + access.size.max(1))) - 1) & !((1u32 << lo) - 1)) as u8;
                self.visit(
                    first,
                    mask,
                    access,
                    None,
                    &mut judge,
                    &mut report,
                    &mut dominated,
                );
            }
            return;
        }
        self.access_spanning(access, first, last, owns, judge, report, dominated);
    }

    /// An access over several granules: each earlier access it meets is reported once.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn access_spanning(
        &mut self,
        access: &ShadowAccess,
        first: u64,
        last: u64,
        owns: impl Fn(u64) -> bool,
        mut judge: impl FnMut(u32, u32, u32) -> Option<Verdict>,
        mut report: impl FnMut(ShadowAccess, Verdict, FoundAt),
        mut dominated: impl FnMut(u32, u32) -> bool,
    ) {
        let end = access.addr.saturating_add(u64::from(access.size.max(1)));
        let mut reported: Vec<(u32, u32)> = Vec::new();
        for granule in first..=last {
            if !owns(granule) {
                continue;
            }
            let lo = if granule == first {
                (access.addr & 7) as u32
            } else {
                0
            };
            let hi = if granule == last {
                ((end - 1) & 7) as u32
            } else {
                7
            };
            let mask = (((1u32 << (hi + 1)) - 1) & !((1u32 << lo) - 1)) as u8;
            self.visit(
                granule,
                mask,
                access,
                Some(&mut reported),
                &mut judge,
                &mut report,
                &mut dominated,
            );
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
        mut reported: Option<&mut Vec<(u32, u32)>>,
        judge: &mut impl FnMut(u32, u32, u32) -> Option<Verdict>,
        report: &mut impl FnMut(ShadowAccess, Verdict, FoundAt),
        dominated: &mut impl FnMut(u32, u32) -> bool,
    ) {
        let t = access.thread;
        let same = t | (access.kind as u32) << KIND_SHIFT;
        let cell = self.cells.entry(granule).or_default();
        // Entries of this thread, site and kind that the newcomer covers: superseded.
        let mut superseded = 0usize;
        let mut last_superseded = 0usize;
        for (i, e) in cell.entries().iter().enumerate() {
            let tkm = e.tkm;
            let bytes = (tkm >> MASK_SHIFT) as u8;
            if tkm & THREAD_BITS == t {
                if tkm & (THREAD_BITS | 3 << KIND_SHIFT) == same
                    && e.site == access.site
                    && bytes & !mask == 0
                {
                    superseded += 1;
                    last_superseded = i;
                }
            } else if bytes & mask != 0 && e.kind().conflicts(access.kind) {
                let id = (e.thread(), e.pos);
                if reported.as_ref().is_some_and(|r| r.contains(&id)) {
                    continue;
                }
                if let Some(v) = judge(e.thread(), e.pos, e.lockset) {
                    if let Some(r) = reported.as_mut() {
                        r.push(id);
                    }
                    let at = FoundAt {
                        granule,
                        entry: i as u32,
                    };
                    report(e.access(granule), v, at);
                }
            }
        }
        match superseded {
            // The usual case of a loop: the same line again, updated in place (field by
            // field: a whole entry assembled first and copied in costs a stall on every
            // access, as its wide loads wait for the narrow stores).
            1 => cell.entries_mut()[last_superseded].update(access, mask),
            0 => {
                if cell.entries().len() >= CELL_CAPACITY {
                    let victim = cell
                        .entries()
                        .iter()
                        .position(|e| dominated(e.thread(), e.pos))
                        .unwrap_or(0);
                    cell.remove(victim);
                    self.evicted += 1;
                }
                cell.push(Entry::new(access, mask));
            }
            _ => {
                cell.retain(|e| {
                    !(e.tkm & (THREAD_BITS | 3 << KIND_SHIFT) == same
                        && e.site == access.site
                        && e.mask() & !mask == 0)
                });
                cell.push(Entry::new(access, mask));
            }
        }
    }

    /// Forgets `[addr, addr + size)`: freed memory, or memory allocated anew, is a new object.
    pub fn forget(&mut self, addr: u64, size: u64) {
        if size == 0 {
            return;
        }
        let first = addr >> 3;
        let last = (addr.saturating_add(size) - 1) >> 3;
        let span = last - first + 1;
        if span > self.cells.len() as u64 {
            // Cheaper to look at what is tracked than at every granule of a large block.
            self.cells.retain(|g, _| *g < first || *g > last);
            return;
        }
        for g in first..=last {
            self.cells.remove(&g);
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
            |_| true,
            |_, _, _| Some(Verdict::Unordered),
            |e, _, _| seen.push(e),
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
        // Also when the access is longer than the lower 32 bits of an address can say, seen
        // from its last granule.
        let big = acc(0, 1, 10, AccessKind::Write, 0x7fff_ffff_fff3, u32::MAX);
        let (first, last) = granule_span(big.addr, big.size);
        for g in [first, first + 1, last - 1, last] {
            let lo = if g == first { big.addr & 7 } else { 0 };
            let entry = Entry::new(&big, 0xffu8 << lo);
            assert_eq!(entry.access(g), big, "granule {g:#x}");
        }
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
            |_| true,
            |_, _, _| None,
            |_, _, _| {},
            |_, pos| pos == 5,
        );
        assert_eq!(s.evicted, 1);
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
    fn a_shard_looks_only_at_its_granules() {
        let mut s = Shadow::new();
        let odd = |g: u64| g % 2 == 1;
        let mut seen = Vec::new();
        for a in [
            acc(0, 1, 10, AccessKind::Write, 0x1000, 16),
            acc(1, 1, 11, AccessKind::Read, 0x1000, 16),
        ] {
            s.access(
                &a,
                odd,
                |_, _, _| Some(Verdict::Unordered),
                |e, _, at| seen.push((e.thread, at.granule)),
                |_, _| false,
            );
        }
        assert_eq!(seen, vec![(0, 0x201)]);
        assert_eq!(s.granules(), 1);
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
}
