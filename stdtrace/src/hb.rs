//! Happens-before races of an STD trace, read straight from the text in one pass: the
//! analysis RAPID's `HBEpoch` runs, for a user who compares the two tools on the same file
//! (`foresight analyze --only hb-races`).
//!
//! This is the reference engine, apart from the analysis: it counts what RAPID counts (racy
//! events, HBEpoch's epochs), on RAPID's input, at RAPID's granularity, so that the two tools
//! can be compared number for number. `foresight analyze` never runs it: an STD file given to
//! `analyze` is imported into a trace and goes through the one pipeline, whose race pass
//! (`foresight_analyzer::races`) makes the race findings. The two are kept in agreement by
//! `cli/tests/stdtrace.rs` (`hb_races_on_text_agree_with_analyze_on_a_racy_trace`: the same
//! racy variables on random racy traces, with more threads than the narrowest clocks hold).
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
//! Memory: the clocks (threads and locks, each as wide as a power of two of at least 8 and the
//! number of threads), a state per variable and a table of 8192 lines remembered (about 460
//! KB, of which only the sets of lines met are touched), nothing per line.
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
    /// The variable both access.
    pub variable: String,
    /// Location and line of the earlier access and of the later (racy) one, first seen.
    pub first: (String, u64),
    /// The later access's location and line.
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
    /// Lines read.
    pub lines: u64,
    /// Lines that were events.
    pub events: u64,
    /// Threads named.
    pub threads: usize,
    /// Locks named.
    pub locks: usize,
    /// Variables named.
    pub variables: usize,
    /// Accesses that race with an earlier access.
    pub racy_events: u64,
    /// Locations of those accesses.
    pub racy_locations: usize,
    /// The races, one per pair of locations, in the order first seen.
    pub races: Vec<HbRace>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Epoch {
    thread: u32,
    clock: u32,
}

/// No access: thread 0 at clock 0, which every clock covers (a thread's own entry starts at 1,
/// so no access has clock 0).
impl Epoch {
    /// Both fields in a word, to compare them with one test where `==` makes two.
    #[inline(always)]
    fn bits(self) -> u64 {
        u64::from(self.thread) << 32 | u64::from(self.clock)
    }
}

const NONE: Epoch = Epoch {
    thread: 0,
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

/// Sets of remembered lines: two lines each.
const MEMO_SETS: usize = 1 << 12;

struct Engine {
    threads: Names,
    locks: Names,
    variables: Names,
    locations: Names,
    /// The vector clocks of the threads and of the locks.
    clocks: Clocks,
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
    /// looked up. Two ways a set, the newer first, so that two lines whose keys hash alike
    /// both stay: on `foresight synth`'s 688 distinct lines, one line in 19 was resolved again
    /// with a slot a line (4096 of them), one in 260 with two (three lines seldom share a set).
    /// A line pushed out of its set is resolved again.
    memo: Box<[[Memo; 2]]>,
    /// The set and key of the current line, when it is to be remembered.
    pending: Option<(usize, [u64; 3])>,
    /// The thread of the last line, by its packed name ((0, 0): none, or a name too long to
    /// pack): consecutive lines are often one thread's.
    last_thread: ((u64, u64), u32),
}

/// Whether `clock` (a thread's, as wide as [`Clocks`] makes it) orders `e` before it. [`NONE`]
/// is covered by every clock (no entry is below 0), and so is an epoch of the clock's own
/// thread (its entry only grows): neither needs a test of its own.
#[inline(always)]
fn covered(e: Epoch, clock: &[u32]) -> bool {
    clock[e.thread as usize] >= e.clock
}

/// Vector clocks, of the threads and of the locks, in two tables of `width` entries per clock
/// (a power of two, at least [`Clocks::WIDTH`] and the number of threads; the entries of
/// threads not seen yet are 0), so that an acquire is a maximum of fixed-size blocks and a
/// release their copy: no length to compare, nothing to allocate, no pointer to follow.
struct Clocks {
    width: usize,
    threads: Vec<u32>,
    locks: Vec<u32>,
}

impl Clocks {
    const WIDTH: usize = 8;

    fn new() -> Self {
        Clocks {
            width: Self::WIDTH,
            threads: Vec::new(),
            locks: Vec::new(),
        }
    }

    /// Room for thread `t` (the next id), whose clock starts at 1 in its own entry, so that its
    /// first epoch is not covered by a clock that never heard of it.
    fn add_thread(&mut self, t: u32) {
        let t = t as usize;
        if t >= self.width {
            let width = (t + 1).next_power_of_two();
            for table in [&mut self.threads, &mut self.locks] {
                let mut wide = vec![0; table.len() / self.width * width];
                for (to, from) in wide
                    .chunks_exact_mut(width)
                    .zip(table.chunks_exact(self.width))
                {
                    to[..self.width].copy_from_slice(from);
                }
                *table = wide;
            }
            self.width = width;
        }
        self.threads.resize((t + 1) * self.width, 0);
        self.threads[t * self.width + t] = 1;
    }

    fn add_lock(&mut self) {
        self.locks.resize(self.locks.len() + self.width, 0);
    }

    #[inline(always)]
    fn thread(&self, t: u32) -> &[u32] {
        &self.threads[t as usize * self.width..][..self.width]
    }

    /// `t`'s clock joined with lock `l`'s.
    #[inline(always)]
    fn acquire(&mut self, t: u32, l: u32) {
        let w = self.width;
        let from = &self.locks[l as usize * w..][..w];
        let into = &mut self.threads[t as usize * w..][..w];
        join(into, from);
    }

    /// `t`'s clock published on lock `l`, then `t`'s entry stepped.
    #[inline(always)]
    fn release(&mut self, t: u32, l: u32) {
        let w = self.width;
        let from = &self.threads[t as usize * w..][..w];
        let into = &mut self.locks[l as usize * w..][..w];
        for (a, b) in blocks_mut(into).zip(blocks(from)) {
            *a = *b;
        }
        self.threads[t as usize * w + t as usize] += 1;
    }

    /// `u`'s clock joined with `t`'s, then `t`'s entry stepped: a fork of `u` by `t`, or (the
    /// other way round) a join of `t` by `u`.
    fn hand_over(&mut self, t: u32, u: u32) {
        let w = self.width;
        let (t, u) = (t as usize, u as usize);
        if t != u {
            let from = self.threads[t * w..][..w].to_vec();
            join(&mut self.threads[u * w..][..w], &from);
        }
        self.threads[t * w + t] += 1;
    }
}

/// `clock` (a multiple of [`Clocks::WIDTH`] entries) as arrays of that many, which the compiler
/// copies and compares as vectors.
#[inline(always)]
fn blocks(clock: &[u32]) -> impl Iterator<Item = &[u32; Clocks::WIDTH]> {
    clock
        .chunks_exact(Clocks::WIDTH)
        .map(|b| b.try_into().expect("a block"))
}

/// The same, to change them.
#[inline(always)]
fn blocks_mut(clock: &mut [u32]) -> impl Iterator<Item = &mut [u32; Clocks::WIDTH]> {
    clock
        .chunks_exact_mut(Clocks::WIDTH)
        .map(|b| b.try_into().expect("a block"))
}

/// `into` joined with `from`, both of a width that is a multiple of [`Clocks::WIDTH`], a
/// block at a time (which the compiler turns into vector maxima).
#[inline(always)]
fn join(into: &mut [u32], from: &[u32]) {
    for (a, b) in blocks_mut(into).zip(blocks(from)) {
        for k in 0..Clocks::WIDTH {
            a[k] = a[k].max(b[k]);
        }
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
            clocks: Clocks::new(),
            vars: Vec::new(),
            pairs: HashMap::new(),
            races: Vec::new(),
            racy_events: 0,
            racy_sites: Vec::new(),
            events: 0,
            last_thread: ((0, 0), u32::MAX),
            memo: vec![
                [Memo {
                    key: [0; 3],
                    thread: 0,
                    target: 0,
                    op: Op::Begin,
                    loc: NO_LOC,
                }; 2];
                MEMO_SETS
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
                self.clocks.add_thread(id);
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
                self.clocks.hand_over(t, u);
            }
            Op::Join => {
                let u = self.thread(l.target, target, n)?;
                self.clocks.hand_over(u, t);
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
                self.touch(t, x, site, n, l.op == Op::Write)?;
            }
            Op::Request | Op::Begin | Op::End => {}
        }
        Ok(())
    }

    /// An acquire (`acquire`) or release of `lock` by `t`.
    #[inline(always)]
    fn lock_op(&mut self, t: u32, acquire: bool, lock: u32) {
        if acquire {
            self.clocks.acquire(t, lock);
        } else {
            self.clocks.release(t, lock);
        }
    }

    /// What the line whose key [`ParsedLines::seen`] was given last resolved to, for the next
    /// line with the same bytes.
    #[inline(always)]
    fn remember(&mut self, t: u32, op: Op, target: u32, loc: Loc) {
        if let Some((slot, key)) = self.pending.take() {
            let set = &mut self.memo[slot];
            set[1] = set[0];
            set[0] = Memo {
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
            _ => self.touch(m.thread, m.target, m.loc, n, m.op == Op::Write)?,
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
                self.clocks.add_lock();
                Ok(id)
            }
            Err(e) => Err(name_failure(e, line, "lock")),
        }
    }

    /// A read or a write (`write`). With a single last read (the usual state), both kinds are
    /// the same code: an access that races with neither the last write nor the last read (the
    /// tests a read makes too, as the last read's epoch is either its own or one it must order)
    /// becomes the last of its kind, unless it is in the same epoch as that one. So the replay
    /// of a remembered line makes no branch on whether it reads or writes, which depends on
    /// the line and is hard to predict.
    #[inline(always)]
    fn touch(&mut self, t: u32, x: u32, site: Loc, n: u64, write: bool) -> Result<(), Failure> {
        let c = self.clocks.thread(t);
        let v = &mut self.vars[x as usize];
        let Reads::One(r, r_site, r_line) = &mut v.reads else {
            return if write {
                self.write(t, x, site, n)
            } else {
                self.read(t, x, site, n)
            };
        };
        if !(covered(v.write, c) & covered(*r, c)) {
            return self.access(t, x, site, n, write);
        }
        let now = Epoch {
            thread: t,
            clock: c[t as usize],
        };
        let (last, last_site, last_line) = if write {
            (&mut v.write, &mut v.write_site, &mut v.write_line)
        } else {
            (r, r_site, r_line)
        };
        // In the same epoch as the last, the access keeps its site and line (the first of the
        // epoch, as the other paths keep them), by selects: whether it is depends on the
        // trace, not on the line.
        let same = last.bits() == now.bits();
        *last = now;
        *last_site = if same { *last_site } else { site };
        *last_line = if same { *last_line } else { n };
        Ok(())
    }

    /// A write: when it races with nothing, the update [`Engine::access`] would make, without
    /// collecting races; otherwise that.
    #[inline(always)]
    fn write(&mut self, t: u32, x: u32, site: Loc, n: u64) -> Result<(), Failure> {
        let c = self.clocks.thread(t);
        let v = &mut self.vars[x as usize];
        let racy = (!covered(v.write, c))
            || match &v.reads {
                Reads::One(r, _, _) => !covered(*r, c),
                Reads::Many(rs) => rs
                    .iter()
                    .enumerate()
                    .any(|(u, &(clock, _, _))| u as u32 != t && clock > c[u]),
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
        let c = self.clocks.thread(t);
        let v = &mut self.vars[x as usize];
        if !covered(v.write, c) {
            return self.access(t, x, site, n, false);
        }
        let now = Epoch {
            thread: t,
            clock: c[t as usize],
        };
        match &mut v.reads {
            Reads::One(r, s, line) => {
                if *r == now {
                } else if covered(*r, c) {
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
        let c = self.clocks.thread(t);
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
            if !covered(v.write, c) {
                racy = Some(((v.write_site, v.write_line), "write-write"));
            }
            match &v.reads {
                Reads::One(r, s, line) => {
                    if !covered(*r, c) {
                        more.push(((*s, *line), "read-write"));
                    }
                }
                Reads::Many(rs) => {
                    for (u, &(clock, s, line)) in rs.iter().enumerate() {
                        if u as u32 != t && clock > c[u] {
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
            if !covered(v.write, c) {
                racy = Some(((v.write_site, v.write_line), "write-read"));
            }
            // A read in the epoch of the last read of the same thread: nothing to record (its
            // race with the last write is counted above, as RAPID counts it).
            if let Reads::One(r, _, _) = &v.reads {
                if *r == now && racy.is_none() {
                    return Ok(());
                }
            }
            let c = self.clocks.thread(t);
            let v = &mut self.vars[x as usize];
            match &mut v.reads {
                Reads::One(r, s, line) => {
                    if covered(*r, c) {
                        *r = now;
                        *s = site;
                        *line = n;
                    } else {
                        let mut rs = vec![(0, NO_LOC, 0); self.threads.len()];
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
        let slot = (h >> (64 - MEMO_SETS.trailing_zeros())) as usize;
        let set = &self.memo[slot];
        let m = if set[0].key == key {
            set[0]
        } else if set[1].key == key {
            set[1]
        } else {
            self.pending = Some((slot, key));
            return Ok(false);
        };
        self.replay(n, m)?;
        Ok(true)
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
