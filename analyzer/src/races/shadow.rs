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

use crate::addr_map::AddrMap;

/// How many entries a granule keeps.
pub const CELL_CAPACITY: usize = 16;

/// What an access did to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccessKind {
    Read,
    Write,
    AtomicRead,
    /// An atomic store or read-modify-write.
    AtomicWrite,
}

impl AccessKind {
    pub fn is_write(self) -> bool {
        matches!(self, AccessKind::Write | AccessKind::AtomicWrite)
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, AccessKind::AtomicRead | AccessKind::AtomicWrite)
    }

    /// Two accesses to one byte conflict when one of them writes and they are not both atomic
    /// (atomics never race with atomics).
    pub fn conflicts(self, other: AccessKind) -> bool {
        (self.is_write() || other.is_write()) && !(self.is_atomic() && other.is_atomic())
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::AtomicRead => "atomic read",
            AccessKind::AtomicWrite => "atomic write",
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

#[derive(Clone, Copy, Debug)]
struct Entry {
    access: ShadowAccess,
    mask: u8,
}

/// The entries of one granule, oldest first.
#[derive(Clone, Debug, Default)]
struct Cell {
    entries: Vec<Entry>,
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

/// The shadow memory of one run.
#[derive(Debug, Default)]
pub struct Shadow {
    cells: AddrMap<Cell>,
    /// Entries dropped because a granule was full.
    pub evicted: u64,
}

impl Shadow {
    pub fn new() -> Self {
        Self::default()
    }

    /// Granules tracked now (the live shared footprint).
    pub fn granules(&self) -> usize {
        self.cells.len()
    }

    /// Checks `access` against what the granules it covers hold, then records it.
    ///
    /// `judge(earlier)` decides, for a conflicting earlier access of another thread, whether it
    /// is unordered with `access`, a candidate for prediction, or ordered (`None`);
    /// `report(earlier, verdict)` is called once per earlier access that is not ordered, however
    /// many granules the two share.
    pub fn access(
        &mut self,
        access: ShadowAccess,
        mut judge: impl FnMut(&ShadowAccess) -> Option<Verdict>,
        mut report: impl FnMut(&ShadowAccess, Verdict),
        mut dominated: impl FnMut(&ShadowAccess) -> bool,
    ) {
        let size = u64::from(access.size.max(1));
        let end = access.addr.saturating_add(size);
        let mut granule = access.addr >> 3;
        let last = (end - 1) >> 3;
        // The earlier accesses already reported for this access (one access may span granules).
        let mut reported: Vec<(u32, u32)> = Vec::new();
        loop {
            let lo = if granule == access.addr >> 3 {
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
            let cell = self.cells.entry(granule).or_default();
            // Entries of this thread, site and kind that the newcomer covers: superseded.
            let mut superseded = 0usize;
            let mut last_superseded = 0usize;
            for (i, e) in cell.entries.iter().enumerate() {
                let earlier = &e.access;
                if earlier.thread == access.thread {
                    if earlier.site == access.site
                        && earlier.kind == access.kind
                        && e.mask & !mask == 0
                    {
                        superseded += 1;
                        last_superseded = i;
                    }
                    continue;
                }
                if e.mask & mask == 0
                    || !earlier.kind.conflicts(access.kind)
                    || reported.contains(&(earlier.thread, earlier.pos))
                {
                    continue;
                }
                if let Some(v) = judge(earlier) {
                    reported.push((earlier.thread, earlier.pos));
                    report(earlier, v);
                }
            }
            let entry = Entry { access, mask };
            match superseded {
                // The usual case of a loop: the same line again, updated in place.
                1 => cell.entries[last_superseded] = entry,
                0 => {
                    if cell.entries.len() >= CELL_CAPACITY {
                        let victim = cell
                            .entries
                            .iter()
                            .position(|e| dominated(&e.access))
                            .unwrap_or(0);
                        cell.entries.remove(victim);
                        self.evicted += 1;
                    }
                    cell.entries.push(entry);
                }
                _ => {
                    cell.entries.retain(|e| {
                        !(e.access.thread == access.thread
                            && e.access.site == access.site
                            && e.access.kind == access.kind
                            && e.mask & !mask == 0)
                    });
                    cell.entries.push(entry);
                }
            }
            if granule == last {
                break;
            }
            granule += 1;
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
        let mut seen = Vec::new();
        shadow.access(
            a,
            |_| Some(Verdict::Unordered),
            |e, _| seen.push((e.thread, e.pos)),
            |_| false,
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
            acc(1, 0, 99, AccessKind::Read, 0x3000, 1),
            |_| None,
            |_, _| {},
            |e| e.site == 5,
        );
        assert_eq!(s.evicted, 1);
        let seen = check(&mut s, acc(2, 0, 100, AccessKind::Write, 0x3000, 1));
        assert!(!seen.contains(&(0, 5)));
        assert!(seen.contains(&(0, 0)));
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
