//! Happens-before races of an STD trace, read straight from the text in one pass: the
//! analysis RAPID's `HBEpoch` runs, for a user who compares the two tools on the same file
//! (`foresight analyze --only hb-races`).
//!
//! STD has only threads, exclusive locks, fork and join, and plain accesses to named
//! variables, so happens-before is what FastTrack (Flanagan and Freund, PLDI 2009) computes with
//! vector clocks and epochs: a release publishes the thread's clock on the lock, an acquire
//! joins it, a fork gives the child its parent's clock, a join takes the child's. A variable
//! keeps the epoch of its last write and of its last read, or a read clock once reads are
//! concurrent. An access races with an earlier conflicting access of another thread whose
//! epoch its thread's clock does not cover.
//!
//! Findings are the racy location pairs (the earlier access's location and the later one's),
//! each with the variable and lines of its first occurrence and how often it was seen; a
//! *racy event* is an access that races with some earlier one. The epochs follow RAPID's
//! HBEpoch (a write in the epoch of the last write is still checked against the reads since;
//! a single read survives a later write), with one difference: a read that races with the last
//! write is still recorded, where HBEpoch drops it, so a later write concurrent with that read
//! is reported too. The racy events are therefore every one HBEpoch counts, plus those that
//! race only with a read it dropped (on random traces of 2·10^4 to 2·10^5 lines: 143 against
//! 140, 1,387 against 1,377; the racy locations were the same).
//! Memory: the clocks (threads × threads, locks × threads), a state per variable and a table of
//! 4096 lines remembered (about 230 KB), nothing per line.
//!
//! Speed: lines repeat (a thread doing the same accesses at the same locations in a loop; the
//! 2·10^6 lines of `foresight synth`'s default trace are 688 distinct ones), so a line of up
//! to 23 bytes met again is replayed from what it resolved to (a line pushed out of the table,
//! or never seen, costs its key and a compare more than before); locations are not interned unless they race; an access that races with
//! nothing skips collecting races.

use foldhash::{HashMap, HashMapExt};

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;
use std::io::{self, Read};

use super::import::{Failure, ImportError, Packable};
use super::names::{self, Interned, NameError, Names};
use super::parse::{self, Op};

/// A race found: the pair of locations, in trace order.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HbRace {
    pub variable: String,
    /// Location and line of the earlier access and of the later (racy) one, first seen.
    pub first: (String, u64),
    pub second: (String, u64),
    /// Which two kinds of access: `write-write`, `write-read` (a read after a write) or
    /// `read-write`.
    pub kind: &'static str,
    /// Racy events with this pair of locations.
    pub count: u64,
}

/// What the pass found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct HbRaces {
    pub lines: u64,
    pub events: u64,
    pub threads: usize,
    pub locks: usize,
    pub variables: usize,
    /// Accesses that race with an earlier access.
    pub racy_events: u64,
    /// Locations of those accesses.
    pub racy_locations: usize,
    pub races: Vec<HbRace>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Epoch {
    thread: u32,
    clock: u32,
}

const NONE: Epoch = Epoch {
    thread: u32::MAX,
    clock: 0,
};

/// A location as an access keeps it, without a lookup: an ASCII name of 1 to 15 bytes packed
/// in two words ([`names::pack`]: the second word is never 0), any other (empty, longer, not
/// ASCII) by its id in `Engine::locations` and 0. A location becomes an id only when an access
/// there races: most accesses never do, and interning every one cost a hash per access.
type Loc = (u64, u64);

const NO_LOC: Loc = (0, 0);

#[derive(Clone)]
enum Reads {
    /// The last read, and its location and line.
    One(Epoch, Loc, u64),
    /// Concurrent reads: per thread, clock, location and line (clock 0: none).
    Many(Vec<(u32, Loc, u64)>),
}

#[derive(Clone)]
struct Variable {
    write: Epoch,
    write_site: Loc,
    write_line: u64,
    reads: Reads,
}

impl Default for Variable {
    fn default() -> Self {
        Variable {
            write: NONE,
            write_site: NO_LOC,
            write_line: 0,
            reads: Reads::One(NONE, NO_LOC, 0),
        }
    }
}

/// A line remembered: its key ([`super::import::line_key`]: never all 0) and what it
/// resolved to (`target`: the lock or the variable).
#[derive(Clone, Copy)]
struct Memo {
    key: [u64; 3],
    thread: u32,
    target: u32,
    op: Op,
    loc: Loc,
}

const MEMO: usize = 1 << 12;

struct Engine {
    threads: Names,
    locks: Names,
    variables: Names,
    locations: Names,
    /// Clock of each thread, one entry per thread (ids grow as threads appear).
    clocks: Vec<Vec<u32>>,
    lock_clocks: Vec<Vec<u32>>,
    vars: Vec<Variable>,
    /// (earlier location, later location) → index in `races`.
    pairs: HashMap<(u32, u32), usize>,
    races: Vec<(u32, u32, u64, u64, u32, &'static str, u64)>,
    racy_events: u64,
    racy_sites: Vec<bool>,
    events: u64,
    /// Lines seen lately (acquires, releases and accesses of up to 23 bytes), by their bytes:
    /// what they resolved to (a few hundred distinct lines often make most of a trace: a
    /// thread doing the same accesses at the same locations in a loop), so that a line met
    /// again costs a hash and a compare of three words instead of its parse and three names
    /// looked up. Direct-mapped: a line another pushed out is resolved again.
    memo: Box<[Memo]>,
    /// The slot and key of the current line, when it is to be remembered.
    pending: Option<(usize, [u64; 3])>,
    /// The thread of the last line, by its packed name ((0, 0): none, or a name too long to
    /// pack): consecutive lines are often one thread's.
    last_thread: ((u64, u64), u32),
}

#[inline]
fn covered(e: Epoch, clock: &[u32]) -> bool {
    e.thread == u32::MAX || clock.get(e.thread as usize).copied().unwrap_or(0) >= e.clock
}

fn join_into(into: &mut Vec<u32>, from: &[u32]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (a, &b) in into.iter_mut().zip(from) {
        *a = (*a).max(b);
    }
}

fn name_failure(e: NameError, line: u64, what: &str) -> Failure {
    let message = match e {
        NameError::NotUtf8(at) => format!("the {what} name is not UTF-8 (byte {} of it)", at + 1),
        NameError::TooMany => format!("more than 2^32 {what} names"),
    };
    Failure::Input(ImportError {
        line,
        column: None,
        message,
    })
}

impl Engine {
    fn new() -> Self {
        Engine {
            threads: Names::new(),
            locks: Names::new(),
            variables: Names::new(),
            locations: Names::new(),
            clocks: Vec::new(),
            lock_clocks: Vec::new(),
            vars: Vec::new(),
            pairs: HashMap::new(),
            races: Vec::new(),
            racy_events: 0,
            racy_sites: Vec::new(),
            events: 0,
            last_thread: ((0, 0), u32::MAX),
            memo: vec![
                Memo {
                    key: [0; 3],
                    thread: 0,
                    target: 0,
                    op: Op::Begin,
                    loc: NO_LOC,
                };
                MEMO
            ]
            .into_boxed_slice(),
            pending: None,
        }
    }

    #[inline]
    fn thread(&mut self, name: &[u8], packed: (u64, u64), line: u64) -> Result<u32, Failure> {
        match self
            .threads
            .intern_packed(name, Some(packed).filter(|p| p.1 != 0))
        {
            Ok(Interned::Known(id)) => Ok(id),
            Ok(Interned::New(id)) => {
                let mut c = vec![0; id as usize + 1];
                // A thread's own entry starts at 1, so that its first epoch is not covered by
                // a clock that never heard of it.
                c[id as usize] = 1;
                self.clocks.push(c);
                Ok(id)
            }
            Err(e) => Err(name_failure(e, line, "thread")),
        }
    }

    /// The id of a location kept as [`Loc`].
    fn site(&mut self, loc: Loc, line: u64) -> Result<u32, Failure> {
        if loc.1 == 0 {
            return Ok(loc.0 as u32);
        }
        let (bytes, len) = names::unpack(loc);
        match self.locations.intern(&bytes[..len]) {
            Ok(Interned::Known(id)) => Ok(id),
            Ok(Interned::New(id)) => {
                self.racy_sites.push(false);
                Ok(id)
            }
            Err(e) => Err(name_failure(e, line, "location")),
        }
    }

    /// `location` as an access keeps it.
    #[inline(always)]
    fn loc(&mut self, location: &[u8], (lo, hi): (u64, u64), line: u64) -> Result<Loc, Failure> {
        const HIGH: u64 = 0x8080_8080_8080_8080;
        if hi != 0 && (lo | hi) & HIGH == 0 {
            Ok((lo, hi))
        } else {
            self.loc_by_id(location, line)
        }
    }

    #[inline(never)]
    fn loc_by_id(&mut self, location: &[u8], line: u64) -> Result<Loc, Failure> {
        match self.locations.intern(location) {
            Ok(Interned::Known(id)) => Ok((id as u64, 0)),
            Ok(Interned::New(id)) => {
                self.racy_sites.push(false);
                Ok((id as u64, 0))
            }
            Err(e) => Err(name_failure(e, line, "location")),
        }
    }

    #[cold]
    fn race(
        &mut self,
        earlier: (Loc, u64),
        later: (Loc, u64),
        var: u32,
        kind: &'static str,
    ) -> Result<(), Failure> {
        let earlier = (self.site(earlier.0, later.1)?, earlier.1);
        let later = (self.site(later.0, later.1)?, later.1);
        self.racy_sites[later.0 as usize] = true;
        let races = &mut self.races;
        let i = *self.pairs.entry((earlier.0, later.0)).or_insert_with(|| {
            races.push((earlier.0, later.0, earlier.1, later.1, var, kind, 0));
            races.len() - 1
        });
        self.races[i].6 += 1;
        Ok(())
    }

    #[inline(always)]
    fn line(&mut self, n: u64, l: &parse::Line<'_>, names: Packable<'_>) -> Result<(), Failure> {
        self.events += 1;
        let thread = names.pack(0, l.thread);
        let target = names.pack(1, l.target);
        let t = if thread.1 != 0 && thread == self.last_thread.0 {
            self.last_thread.1
        } else {
            let t = self.thread(l.thread, thread, n)?;
            self.last_thread = (thread, t);
            t
        };
        match l.op {
            Op::Acquire | Op::Release => {
                let lock = self.lock(l.target, target, n)?;
                self.remember(t, l.op, lock, NO_LOC);
                self.lock_op(t, l.op == Op::Acquire, lock);
            }
            Op::Fork => {
                let u = self.thread(l.target, target, n)?;
                let parent = std::mem::take(&mut self.clocks[t as usize]);
                join_into(&mut self.clocks[u as usize], &parent);
                self.clocks[t as usize] = parent;
                self.clocks[t as usize][t as usize] += 1;
            }
            Op::Join => {
                let u = self.thread(l.target, target, n)?;
                let child = std::mem::take(&mut self.clocks[u as usize]);
                join_into(&mut self.clocks[t as usize], &child);
                self.clocks[u as usize] = child;
                self.clocks[u as usize][u as usize] += 1;
            }
            Op::Read | Op::Write => {
                let x = match self
                    .variables
                    .intern_packed(l.target, Some(target).filter(|p| p.1 != 0))
                {
                    Ok(Interned::Known(id)) => id,
                    Ok(Interned::New(id)) => {
                        self.vars.push(Variable::default());
                        id
                    }
                    Err(e) => return Err(name_failure(e, n, "variable")),
                };
                let site = self.loc(l.location, names.pack(2, l.location), n)?;
                self.remember(t, l.op, x, site);
                if l.op == Op::Write {
                    self.write(t, x, site, n)?;
                } else {
                    self.read(t, x, site, n)?;
                }
            }
            Op::Request | Op::Begin | Op::End => {}
        }
        Ok(())
    }

    /// An acquire (`acquire`) or release of `lock` by `t`.
    #[inline(always)]
    fn lock_op(&mut self, t: u32, acquire: bool, lock: u32) {
        if acquire {
            let (clocks, locks) = (&mut self.clocks, &self.lock_clocks);
            join_into(&mut clocks[t as usize], &locks[lock as usize]);
        } else {
            let c = &mut self.clocks[t as usize];
            let held = &mut self.lock_clocks[lock as usize];
            held.clear();
            held.extend_from_slice(c);
            c[t as usize] += 1;
        }
    }

    /// What the line whose key [`ParsedLines::seen`] was given last resolved to, for the next
    /// line with the same bytes.
    #[inline(always)]
    fn remember(&mut self, t: u32, op: Op, target: u32, loc: Loc) {
        if let Some((slot, key)) = self.pending.take() {
            self.memo[slot] = Memo {
                key,
                thread: t,
                target,
                op,
                loc,
            };
        }
    }

    /// Line `n`, with the bytes of one seen before: the thread, operation, target and
    /// location it resolved to then.
    #[inline(always)]
    fn replay(&mut self, n: u64, m: Memo) -> Result<(), Failure> {
        self.events += 1;
        match m.op {
            Op::Acquire => self.lock_op(m.thread, true, m.target),
            Op::Release => self.lock_op(m.thread, false, m.target),
            Op::Write => self.write(m.thread, m.target, m.loc, n)?,
            _ => self.read(m.thread, m.target, m.loc, n)?,
        }
        Ok(())
    }

    #[inline(always)]
    fn lock(&mut self, name: &[u8], packed: (u64, u64), line: u64) -> Result<u32, Failure> {
        match self
            .locks
            .intern_packed(name, Some(packed).filter(|p| p.1 != 0))
        {
            Ok(Interned::Known(id)) => Ok(id),
            Ok(Interned::New(id)) => {
                self.lock_clocks.push(Vec::new());
                Ok(id)
            }
            Err(e) => Err(name_failure(e, line, "lock")),
        }
    }

    /// A write: when it races with nothing, the update [`Engine::access`] would make, without
    /// collecting races; otherwise that.
    #[inline(always)]
    fn write(&mut self, t: u32, x: u32, site: Loc, n: u64) -> Result<(), Failure> {
        let c = &self.clocks[t as usize];
        let v = &mut self.vars[x as usize];
        let racy = (v.write.thread != t && !covered(v.write, c))
            || match &v.reads {
                Reads::One(r, _, _) => r.thread != t && !covered(*r, c),
                Reads::Many(rs) => rs.iter().enumerate().any(|(u, &(clock, _, _))| {
                    u as u32 != t && clock > c.get(u).copied().unwrap_or(0)
                }),
            };
        if racy {
            return self.access(t, x, site, n, true);
        }
        let now = Epoch {
            thread: t,
            clock: c[t as usize],
        };
        if v.write != now {
            v.write = now;
            v.write_site = site;
            v.write_line = n;
            if matches!(v.reads, Reads::Many(_)) {
                v.reads = Reads::One(NONE, NO_LOC, 0);
            }
        }
        Ok(())
    }

    /// A read: the same.
    #[inline(always)]
    fn read(&mut self, t: u32, x: u32, site: Loc, n: u64) -> Result<(), Failure> {
        let c = &self.clocks[t as usize];
        let v = &mut self.vars[x as usize];
        if v.write.thread != t && !covered(v.write, c) {
            return self.access(t, x, site, n, false);
        }
        let now = Epoch {
            thread: t,
            clock: c[t as usize],
        };
        match &mut v.reads {
            Reads::One(r, s, line) => {
                if *r == now {
                } else if r.thread == u32::MAX || r.thread == t || covered(*r, c) {
                    *r = now;
                    *s = site;
                    *line = n;
                } else {
                    return self.access(t, x, site, n, false);
                }
            }
            Reads::Many(rs) if (t as usize) < rs.len() => rs[t as usize] = (now.clock, site, n),
            Reads::Many(_) => return self.access(t, x, site, n, false),
        }
        Ok(())
    }

    /// Any access, collecting its races.
    #[inline(never)]
    fn access(&mut self, t: u32, x: u32, site: Loc, n: u64, write: bool) -> Result<(), Failure> {
        let c = &self.clocks[t as usize];
        let now = Epoch {
            thread: t,
            clock: c[t as usize],
        };
        let v = &self.vars[x as usize];
        let mut racy: Option<((Loc, u64), &'static str)> = None;
        let mut more: Vec<((Loc, u64), &'static str)> = Vec::new();
        if write {
            // No fast path for a write in the epoch of the last write: a read of another
            // thread since then may race with it (RAPID's HBEpoch counts that write too).
            if v.write.thread != t && !covered(v.write, c) {
                racy = Some(((v.write_site, v.write_line), "write-write"));
            }
            match &v.reads {
                Reads::One(r, s, line) => {
                    if r.thread != t && !covered(*r, c) {
                        more.push(((*s, *line), "read-write"));
                    }
                }
                Reads::Many(rs) => {
                    for (u, &(clock, s, line)) in rs.iter().enumerate() {
                        if u as u32 != t && clock > c.get(u).copied().unwrap_or(0) {
                            more.push(((s, line), "read-write"));
                        }
                    }
                }
            }
            let v = &mut self.vars[x as usize];
            if v.write != now {
                v.write = now;
                v.write_site = site;
                v.write_line = n;
                // Concurrent reads are forgotten, as FastTrack does (this write raced with
                // those it does not cover, and later accesses race with it); a single read
                // stays, as in RAPID's HBEpoch: a later write that this one's thread does not
                // order after it still races with it.
                if matches!(v.reads, Reads::Many(_)) {
                    v.reads = Reads::One(NONE, NO_LOC, 0);
                }
            }
        } else {
            if v.write.thread != t && !covered(v.write, c) {
                racy = Some(((v.write_site, v.write_line), "write-read"));
            }
            // A read in the epoch of the last read of the same thread: nothing to record (its
            // race with the last write is counted above, as RAPID counts it).
            if let Reads::One(r, _, _) = &v.reads {
                if *r == now && racy.is_none() {
                    return Ok(());
                }
            }
            let c = &self.clocks[t as usize];
            let v = &mut self.vars[x as usize];
            match &mut v.reads {
                Reads::One(r, s, line) => {
                    if r.thread == u32::MAX || r.thread == t || covered(*r, c) {
                        *r = now;
                        *s = site;
                        *line = n;
                    } else {
                        let mut rs = vec![(0, NO_LOC, 0); self.clocks.len().max(t as usize + 1)];
                        rs[r.thread as usize] = (r.clock, *s, *line);
                        rs[t as usize] = (now.clock, site, n);
                        v.reads = Reads::Many(rs);
                    }
                }
                Reads::Many(rs) => {
                    if rs.len() <= t as usize {
                        rs.resize(t as usize + 1, (0, NO_LOC, 0));
                    }
                    rs[t as usize] = (now.clock, site, n);
                }
            }
        }
        if racy.is_some() || !more.is_empty() {
            self.racy_events += 1;
            for (earlier, kind) in racy.into_iter().chain(more) {
                self.race(earlier, (site, n), x, kind)?;
            }
        }
        Ok(())
    }

    fn finish(self, lines: u64) -> HbRaces {
        let mut races: Vec<HbRace> = self
            .races
            .iter()
            .map(|&(a, b, la, lb, x, kind, count)| HbRace {
                variable: self.variables.name(x).to_string(),
                first: (self.locations.name(a).to_string(), la),
                second: (self.locations.name(b).to_string(), lb),
                kind,
                count,
            })
            .collect();
        races.sort_by_key(|r| (r.second.1, r.first.1));
        HbRaces {
            lines,
            events: self.events,
            threads: self.threads.len(),
            locks: self.locks.len(),
            variables: self.variables.len(),
            racy_events: self.racy_events,
            racy_locations: self.racy_sites.iter().filter(|&&r| r).count(),
            races,
        }
    }
}

impl super::import::ParsedLines for Engine {
    #[inline(always)]
    fn seen(&mut self, n: u64, key: Option<[u64; 3]>) -> Result<bool, Failure> {
        let Some(key) = key else {
            self.pending = None;
            return Ok(false);
        };
        let h = (key[0] ^ key[1].rotate_left(21) ^ key[2].rotate_left(42)).wrapping_mul(MUL);
        let slot = (h >> (64 - MEMO.trailing_zeros())) as usize;
        let m = self.memo[slot];
        if m.key == key {
            self.replay(n, m)?;
            return Ok(true);
        }
        self.pending = Some((slot, key));
        Ok(false)
    }

    #[inline(always)]
    fn line(&mut self, n: u64, l: &parse::Line<'_>, names: Packable<'_>) -> Result<(), Failure> {
        Engine::line(self, n, l, names)
    }
}

/// Reads the STD text from `input` and finds its happens-before races.
pub fn hb_races<R: Read>(input: R) -> Result<HbRaces, Failure> {
    let mut engine = Engine::new();
    let lines = super::import::for_each_parsed_line(input, &mut engine)?;
    Ok(engine.finish(lines))
}

/// The same for a file.
pub fn hb_races_file(path: &std::path::Path) -> Result<HbRaces, Failure> {
    let file = std::fs::File::open(path)?;
    hb_races(io::BufReader::with_capacity(0, file))
}
