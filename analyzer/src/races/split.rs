//! The happens-before race pass on two threads, split by address share: the thread that reads,
//! merges and converts the trace (the *front*) also runs the shard of its share of the
//! granules, and hands the other share's accesses — one 64-bit word each, their thread,
//! position and `seq` said once per run — and every other event to a second thread (the
//! *back*), which runs the other shard. Each shard sees every synchronisation event in merged
//! order (its own clocks, locksets and heap blocks: they are the same in both) and the
//! accesses that touch its granules; what they find merges into exactly what one pass finds
//! (`shard::Findings::merge`).
//!
//! Shares: a granule is the front's when its hash falls in the first `front_share` of
//! [`SHARES`] buckets (0: the back runs the whole race pass, the front only reads — for a front
//! that has other work, the deadlock model). An access whose granules are in both shares (it
//! spans granules) is checked by the front in its granules first; the conflicts it found
//! there travel with the access, and the back merges them with its own before counting, an
//! earlier access found in both counted once where one pass finds it (its first granule).
//! Locksets are interned as they change in both shards, so their ids agree.
//!
//! The share can move while the pass runs ([`Balance::Adaptive`]): what an access costs to
//! check depends on the trace, so a share that keeps both threads busy on one trace leaves one
//! waiting on another. Every [`REVIEW`] batches the front compares how often it waited for
//! room in the queue with how often the back found it empty, and moves one bucket toward the
//! thread that waited more. A move happens between runs, marked at the end of a batch: the
//! granules of a bucket the front gives up travel with the mark; for a bucket it takes, the
//! back sends their granules once it has handled the batch, and the front waits for them.
//! A granule's cell depends only on its accesses and on the clocks, which both shards keep
//! the same, so it goes on in the other shard as it would have in its own.
//!
//! The hand-off is bounded: batches of [`BATCH`] records, at most [`IN_FLIGHT`] queued,
//! buffers given back and reused. It is what two threads spend beyond one: the front packs
//! a stretch of plain accesses of both shares in one loop over the decoded events (a word
//! apiece, its own accesses checked on the way and a skip word left for the back), the back
//! unpacks a word and checks it in its one granule with the check compiled into its loop
//! ([`Shard::access_one`]). On the 10^7-event recording the two threads take 1.67 and 1.64 *
//! 10^9 instructions at 11 buckets against 3.44 for one thread (callgrind,
//! `race_bench races FILE 2 11`; 1.92 and 2.14 when the front's loop took the back's
//! accesses alone and the back called the check for each); the front spends about 44
//! instructions an event handing it over, 36 in its loop for an access the back gets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{
    channel, sync_channel, Receiver, Sender, SyncSender, TryRecvError, TrySendError,
};

use foresight_trace::stream::MergedStream;
use foresight_trace::tables::Tables;

use foresight_trace::event::{Event, EventKind};

use crate::stream::{Op, Pass, Stream, StreamEvent};

use super::shadow::{self, granule_span, AccessKind, Cells};
use super::shard::{atomic_kind, Shard, ShareConflict};
use super::{RaceOutput, Totals};

/// Granule hash buckets the address space is shared out by.
pub const SHARES: u32 = 64;

/// The front's share unless told (`race_bench races FILE 2 SHARE` measures others): on the
/// recorded access-heavy trace (`bench/race_speed.sh`) the front spends about 77
/// instructions an event reading and decoding and 44 handing it over, and the back about 190
/// on each access it checks. Instructions balance near 11 buckets of 64 (1.67 and 1.64 *
/// 10^9 by callgrind on the 10^7-event recording, against 3.44 for one thread), and so does
/// CPU time (1.30 and 1.33 s on the 10^8-event recording, medians of three; 1.27 and 1.37 at
/// 9, 1.43 and 1.33 at 13). On the synthetic trace the back's accesses cost more (1.59 and
/// 1.73 * 10^9 at 8 buckets): the adaptive share finds that.
pub const DEFAULT_FRONT_SHARE: u32 = 11;

/// Words per batch handed to the back.
pub const BATCH: usize = 4 << 10;
/// Events other than compact accesses per batch at most.
const SIDE_BATCH: usize = 512;
/// Batches queued for the back at most.
pub const IN_FLIGHT: usize = 8;

/// A word of the batch: a plain access of the back's share in one granule — site (bits
/// 50..64), address (3..50), size (1..3, as log2: 1 to 8 bytes), write (0) — or, by its top
/// bits, one of these. An access is at the position and `seq` after the last event handed
/// over of its thread's run (a side item says when that is not so).
const TAG_SHIFT: u32 = 50;
/// The next `count` (the low bits) events of the run are not the back's.
const SKIP: u64 = 0x3ffd;
/// An access that one word cannot hold: write (bit 0), then its address, then its site
/// (low 32 bits) and size (high 32 bits) in the next two words.
const WIDE: u64 = 0x3ffe;
/// The next item of the batch's side list.
const MARK: u64 = 0x3fff;
const ADDR_BITS: u32 = TAG_SHIFT - 3;

/// The word of an access, if one holds it: an access of 1, 2, 4 or 8 bytes in one granule,
/// below 2^47, its site below [`SKIP`]. The tests are combined without branching between
/// them: the usual access passes them all.
#[inline(always)]
fn word(addr: u64, size: u32, site: u32, write: bool) -> Option<u64> {
    // Sizes 1, 2, 4 and 8 are bits 1, 2, 4 and 8 of 0x116 (the shift is taken modulo 32:
    // a larger size fails the granule's test anyway).
    let fits = (u64::from(site) < SKIP)
        & (addr >> ADDR_BITS == 0)
        & ((addr & 7) + u64::from(size) <= 8)
        & ((0x116u32 >> (size & 31)) & 1 != 0);
    fits.then(|| {
        u64::from(site) << TAG_SHIFT
            | addr << 3
            | u64::from((size | 8).trailing_zeros()) << 1
            | u64::from(write)
    })
}

/// An access's address, size, site and kind from its word.
#[inline(always)]
fn unpack(w: u64) -> (u64, u32, u32, AccessKind) {
    let addr = (w >> 3) & ((1 << ADDR_BITS) - 1);
    let size = 1 << ((w >> 1) & 3);
    let kind = if w & 1 != 0 {
        AccessKind::Write
    } else {
        AccessKind::Read
    };
    (addr, size, (w >> TAG_SHIFT) as u32, kind)
}

/// Whether the front owns granule `g` when its share is `share` buckets.
#[inline]
fn front_owns(share: u32, g: u64) -> bool {
    ((g.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as u32) < share
}

/// The word of a usual access, whichever share it is in: a plain read or write that one
/// word holds.
#[inline(always)]
fn usual_word(kind: &EventKind) -> Option<u64> {
    let (EventKind::Read { addr, size, site } | EventKind::Write { addr, size, site }) = *kind
    else {
        return None;
    };
    word(addr, size, site, matches!(kind, EventKind::Write { .. }))
}

/// The granule of an access's word.
#[inline(always)]
fn word_granule(w: u64) -> u64 {
    (w >> 6) & ((1 << (ADDR_BITS - 3)) - 1)
}

/// The bytes within its granule of the access a word holds (of `size` bytes, from `addr`).
#[inline(always)]
fn word_mask(addr: u64, size: u32) -> u8 {
    (((1u32 << size) - 1) << (addr & 7)) as u8
}

/// A usual access of the front's share, from its word: checked in the front's shard. Kept
/// out of the front's loop, which then keeps its state in registers.
#[inline(never)]
fn front_access(shard: &mut Shard, at: (u32, u32, u64), w: u64) {
    let (addr, size, site, kind) = unpack(w);
    let mask = word_mask(addr, size);
    shard.access_one(at, word_granule(w), mask, addr, size, site, kind);
}

/// What a mark stands for.
enum Side {
    /// The accesses that follow are of `thread`, from `pos` and `seq` on.
    Run { thread: u32, pos: u32, seq: u64 },
    /// Any other event, whole (synchronisation, atomics, accesses a record cannot hold).
    Event(StreamEvent),
    /// An access in both shares, with what the front found in its granules.
    Straddle(StreamEvent, Vec<ShareConflict>),
}

struct Batch {
    words: Words,
    side: Vec<Side>,
    /// After this batch the front's share is another: see [`Rebalance`].
    rebalance: Option<Rebalance>,
}

impl Batch {
    fn with_capacity() -> Self {
        Batch {
            words: Words::new(),
            side: Vec::with_capacity(SIDE_BATCH),
            rebalance: None,
        }
    }
}

/// The front's share changes at the end of a batch, to `share` buckets. When the front gives
/// buckets up, their granules travel here; when it takes buckets, the back sends it theirs
/// once it has handled the batch, and the front waits for them before it reads on.
struct Rebalance {
    share: u32,
    cells: Option<Cells>,
}

/// How the granules are shared out between the two threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balance {
    /// The front checks this many of the [`SHARES`] buckets throughout.
    Fixed(u32),
    /// The front starts with this many buckets and takes one more, or gives one up, whenever
    /// over [`REVIEW`] batches it waited for the back more often than the back waited for it,
    /// or the other way round: what an access costs to check depends on the trace, and so
    /// does the share that keeps both threads busy.
    Adaptive(u32),
    /// For tests: the share moves by one bucket every `every` batches, up then down.
    Alternate { start: u32, every: u32 },
}

impl Balance {
    /// Batches between two reviews, if the share ever moves.
    fn review_every(self) -> Option<u32> {
        match self {
            Balance::Fixed(_) => None,
            Balance::Adaptive(_) => Some(REVIEW),
            Balance::Alternate { every, .. } => Some(every.max(1)),
        }
    }
}

/// Where the balance ended: the front's share, and how many times a bucket moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitBalance {
    pub share: u32,
    pub moves: u32,
}

/// Batches between two looks at the balance (about 10^6 accesses).
pub const REVIEW: u32 = 256;
/// Waits of one thread more than of the other, over a review, that move a bucket.
const WAITS_MARGIN: u64 = 4;

/// The words of a batch: a buffer of fixed size, so that the front's loop over a stretch of
/// usual accesses writes them with neither a capacity check nor a bounds check per word (a
/// `Vec` extended from an iterator that may stop early cost about 40 instructions a word).
struct Words {
    buf: Box<[u64]>,
    len: usize,
}

impl Words {
    /// Room for [`BATCH`] words and one more access of three.
    const CAPACITY: usize = BATCH + 3;

    fn new() -> Self {
        Words {
            buf: vec![0; Self::CAPACITY].into_boxed_slice(),
            len: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Callers send the batch once it holds [`BATCH`] words, so there is always room for
    /// the three words of one more access.
    #[inline]
    fn push(&mut self, w: u64) {
        self.buf[self.len] = w;
        self.len += 1;
    }

    #[inline]
    fn extend_from_slice(&mut self, ws: &[u64]) {
        self.buf[self.len..self.len + ws.len()].copy_from_slice(ws);
        self.len += ws.len();
    }

    /// The free words at the end, at most `n`.
    #[inline]
    fn room(&mut self, n: usize) -> &mut [u64] {
        let end = BATCH.max(self.len).min(self.len + n);
        &mut self.buf[self.len..end]
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    fn as_slice(&self) -> &[u64] {
        &self.buf[..self.len]
    }
}

/// Feeds a file's merged stream to the race pass split over this thread and a second one
/// (the granules of the buckets `balance` says here); returns the events read and the race
/// pass's output — the same as [`super::RacePass`]'s over one walk, but for its
/// `peak_granules`, the sum of the two shares' peaks — and where the balance ended.
pub fn drive_split(
    stream: &Stream<'_>,
    merged: &mut MergedStream<'_>,
    threads: usize,
    tables: Option<&Tables>,
    balance: Balance,
    progress: &mut dyn FnMut(u64),
) -> (u64, RaceOutput, SplitBalance) {
    split::<NoPass>(stream, merged, None, threads, tables, balance, progress)
}

/// [`drive_split`] with `here` fed every event on this thread too (the deadlock model), the
/// front's share fixed.
pub fn drive_split_beside<A: Pass>(
    stream: &Stream<'_>,
    merged: &mut MergedStream<'_>,
    here: &mut A,
    threads: usize,
    tables: Option<&Tables>,
    front_share: u32,
    progress: &mut dyn FnMut(u64),
) -> (u64, RaceOutput) {
    let (read, out, _) = split(
        stream,
        merged,
        Some(here),
        threads,
        tables,
        Balance::Fixed(front_share),
        progress,
    );
    (read, out)
}

/// No pass beside the front.
struct NoPass;

impl Pass for NoPass {
    type Output = ();
    fn handle(&mut self, _: &StreamEvent) {}
    fn finish(self) {}
}

#[allow(clippy::too_many_arguments)]
fn split<A: Pass>(
    stream: &Stream<'_>,
    merged: &mut MergedStream<'_>,
    here: Option<&mut A>,
    threads: usize,
    tables: Option<&Tables>,
    balance: Balance,
    progress: &mut dyn FnMut(u64),
) -> (u64, RaceOutput, SplitBalance) {
    let share = match balance {
        Balance::Fixed(s) | Balance::Adaptive(s) | Balance::Alternate { start: s, .. } => s,
    }
    .min(SHARES);
    let too_many_threads = threads > shadow::MAX_THREADS;
    let (to_back, batches) = sync_channel::<Batch>(IN_FLIGHT);
    let (give_back, spare) = channel::<Batch>();
    let (cells_to_front, cells) = channel::<Cells>();
    let back_waits = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let back_waits = &back_waits;
        let back = scope.spawn(move || {
            let mut back = Back {
                shard: Shard::shared(threads),
                share,
                created: (0..threads).map(|t| t == 0).collect(),
                too_many_threads,
                next: (0, 0, 0),
            };
            loop {
                let mut batch = match batches.try_recv() {
                    Ok(batch) => batch,
                    Err(TryRecvError::Empty) => {
                        back_waits.fetch_add(1, Ordering::Relaxed);
                        match batches.recv() {
                            Ok(batch) => batch,
                            Err(_) => break,
                        }
                    }
                    Err(TryRecvError::Disconnected) => break,
                };
                back.batch(&batch);
                if let Some(r) = batch.rebalance.take() {
                    back.rebalance(r, &cells_to_front);
                }
                batch.words.clear();
                batch.side.clear();
                // The walk may be over already: a buffer nobody takes back is dropped.
                let _ = give_back.send(batch);
            }
            back.shard
        });
        let mut front = Front {
            shard: Shard::shared(threads),
            share,
            created: (0..threads).map(|t| t == 0).collect(),
            too_many_threads,
            accesses: 0,
            orphan_accesses: 0,
            next: (u32::MAX, 0, 0),
            batch: Batch::with_capacity(),
            to_back: Some(to_back),
            spare,
            balance,
            cells,
            back_waits,
            sent: 0,
            waits: (0, 0),
            front_waits: 0,
            review_due: false,
            moves: 0,
        };
        let read = match here {
            // The pass beside needs every event converted: the front takes them so.
            Some(here) => stream.for_each_in_runs(merged, progress, |ev| {
                here.handle(&ev);
                front.event(&ev);
            }),
            None => stream.for_each_run(merged, progress, |thread, pos, seq, events| {
                front.run(stream, thread, pos, seq, events)
            }),
        };
        front.send();
        front.to_back = None;
        let back = match back.join() {
            Ok(shard) => shard,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        let balance = SplitBalance {
            share: front.share,
            moves: front.moves,
        };
        (read, front.finish(back, tables), balance)
    })
}

/// The front's half: its shard, the counts, the batch being filled.
struct Front<'a> {
    shard: Shard,
    share: u32,
    created: Vec<bool>,
    too_many_threads: bool,
    accesses: u64,
    orphan_accesses: u64,
    /// Where the back expects the next access: thread, position, seq.
    next: (u32, u32, u64),
    batch: Batch,
    /// `None` once the back hung up (it panicked: raised when it is joined).
    to_back: Option<SyncSender<Batch>>,
    spare: Receiver<Batch>,
    balance: Balance,
    /// The granules of buckets the front takes, from the back.
    cells: Receiver<Cells>,
    /// How often the back found no batch waiting.
    back_waits: &'a AtomicU64,
    /// Batches sent.
    sent: u32,
    /// Waits of the front (for room in the queue) and of the back, at the last review.
    waits: (u64, u64),
    front_waits: u64,
    /// A review of the balance is due at the next run.
    review_due: bool,
    /// Times a bucket moved.
    moves: u32,
}

impl Front<'_> {
    /// A run of one thread's events: `pos` and `seq` are the first's.
    ///
    /// Stretches of usual accesses ([`usual_word`]) of a thread whose creation the trace
    /// holds go through a loop of their own ([`Front::stretch`]); any other event goes the
    /// long way. The front reads, decodes and hands over every event: what it spends on each
    /// bounds what two threads gain.
    #[inline]
    fn run(&mut self, stream: &Stream<'_>, thread: u32, pos: u32, seq: u64, events: &[Event]) {
        if self.review_due {
            self.review();
        }
        // The share moves only here, between runs: every word of a run is made with one.
        let share = self.share;
        let mut usual = self.created(thread) && !self.too_many_threads;
        let mut i = 0usize;
        while i < events.len() {
            let at = (
                thread,
                pos.wrapping_add(i as u32),
                seq.wrapping_add(i as u64),
            );
            if usual {
                let n = self.stretch(share, at, &events[i..]);
                if n > 0 {
                    i += n;
                    continue;
                }
            }
            self.one(stream, at, &events[i]);
            // A thread's creation may come in its own run (a hostile trace).
            usual = self.created(thread) && !self.too_many_threads;
            i += 1;
        }
    }

    /// The usual accesses at the start of `events` (the first at `at`), as many as the batch
    /// has room for: one word each into the batch, the back's word or, for an access in the
    /// front's share, checked here, a skip of one. Returns how many were taken.
    ///
    /// One loop for both shares, one hash and one comparison apart: a loop over the back's
    /// accesses alone, left at each of the front's, cost the front some 45 instructions an
    /// access handed over, its way in and out again and the skips' bookkeeping at every one
    /// of the front's accesses.
    #[inline(always)]
    fn stretch(&mut self, share: u32, at: (u32, u32, u64), events: &[Event]) -> usize {
        let Some(first) = events.first().and_then(|e| usual_word(&e.kind)) else {
            return 0;
        };
        if at != self.next {
            self.moved(at);
        }
        let Front {
            shard,
            batch,
            accesses,
            ..
        } = self;
        let words = &mut batch.words;
        let room = words.room(events.len());
        let mut taken = 0usize;
        let mut w = first;
        let (thread, pos, seq) = at;
        for (slot, e) in room.iter_mut().zip(events) {
            if taken > 0 {
                match usual_word(&e.kind) {
                    Some(next) => w = next,
                    None => break,
                }
            }
            *slot = if front_owns(share, word_granule(w)) {
                let at = (
                    thread,
                    pos.wrapping_add(taken as u32),
                    seq.wrapping_add(taken as u64),
                );
                front_access(shard, at, w);
                SKIP << TAG_SHIFT | 1
            } else {
                w
            };
            taken += 1;
        }
        words.len += taken;
        *accesses += taken as u64;
        self.next = (
            thread,
            pos.wrapping_add(taken as u32),
            seq.wrapping_add(taken as u64),
        );
        if self.batch.words.len() >= BATCH {
            self.send();
        }
        taken
    }

    /// An event of a run that is not a usual access where the back expects it.
    #[inline(never)]
    fn one(&mut self, stream: &Stream<'_>, at: (u32, u32, u64), e: &Event) {
        let (addr, size, site, kind) = match e.kind {
            EventKind::Read { addr, size, site } => (addr, size, site, AccessKind::Read),
            EventKind::Write { addr, size, site } => (addr, size, site, AccessKind::Write),
            kind => {
                let (thread, pos, seq) = at;
                let op = stream.convert(thread, pos, kind);
                return self.other(&StreamEvent {
                    thread,
                    pos,
                    seq,
                    op,
                });
            }
        };
        self.accesses += 1;
        let created = self.created(at.0);
        self.access(created, at, addr, size, site, kind);
    }

    /// One event, converted (when a pass beside the front needs them so).
    #[inline]
    fn event(&mut self, ev: &StreamEvent) {
        let (addr, size, site, kind) = match ev.op {
            Op::Read { addr, size, site } => (addr, size, site, AccessKind::Read),
            Op::Write { addr, size, site } => (addr, size, site, AccessKind::Write),
            _ => return self.other(ev),
        };
        self.accesses += 1;
        let created = self.created(ev.thread);
        self.access(created, (ev.thread, ev.pos, ev.seq), addr, size, site, kind);
    }

    /// A plain access (counted by the caller) of a thread whose creation the trace holds, or
    /// not.
    #[inline]
    fn access(
        &mut self,
        created: bool,
        at: (u32, u32, u64),
        addr: u64,
        size: u32,
        site: u32,
        kind: AccessKind,
    ) {
        if !created {
            self.orphan_accesses += 1;
            return;
        }
        if self.too_many_threads {
            return;
        }
        let (first, last) = granule_span(addr, size);
        if first == last && !front_owns(self.share, first) {
            // The usual access: in one granule, the back's.
            self.record(at, addr, size, site, kind);
        } else {
            self.plain(at, addr, size, site, kind);
        }
    }

    /// Whether the trace holds a thread's creation: a thread whose creation it lacks (its
    /// creator's events were lost when the process ended) has no known predecessors, and
    /// everything would look unordered with it. Its accesses are left out and counted, as
    /// [`super::RacePass`] does.
    #[inline]
    fn created(&self, thread: u32) -> bool {
        self.created.get(thread as usize).copied().unwrap_or(false)
    }

    /// Which shares an access's granules are in: (front's, back's).
    #[inline]
    fn shares(&self, addr: u64, size: u32) -> (bool, bool) {
        let (first, last) = granule_span(addr, size);
        if first == last {
            let here = front_owns(self.share, first);
            return (here, !here);
        }
        if last - first >= u64::from(SHARES) {
            return (self.share > 0, self.share < SHARES);
        }
        let here = (first..=last)
            .filter(|&g| front_owns(self.share, g))
            .count() as u64;
        (here > 0, here <= last - first)
    }

    /// A plain access that is not in one granule of the back's share.
    #[cold]
    fn plain(&mut self, at: (u32, u32, u64), addr: u64, size: u32, site: u32, kind: AccessKind) {
        let share = self.share;
        let owns = move |g| front_owns(share, g);
        match self.shares(addr, size) {
            (true, false) => self.shard.access(at, addr, size, site, kind, owns),
            (false, _) => self.record(at, addr, size, site, kind),
            (true, true) => {
                let mut found = Vec::new();
                let (thread, pos, seq) = at;
                self.shard
                    .access_found((thread, pos), addr, size, site, kind, owns, &mut found);
                let op = if kind.is_write() {
                    Op::Write { addr, size, site }
                } else {
                    Op::Read { addr, size, site }
                };
                let ev = StreamEvent {
                    thread,
                    pos,
                    seq,
                    op,
                };
                self.side(Side::Straddle(ev, found));
            }
        }
    }

    /// Every event but a plain access: the front's shard takes it, and the back.
    #[cold]
    fn other(&mut self, ev: &StreamEvent) {
        let share = self.share;
        let owns = move |g| front_owns(share, g);
        match ev.op {
            Op::Atomic(a) => {
                self.shard.sync(ev);
                self.accesses += 1;
                let created = self.created(ev.thread);
                if !created {
                    self.orphan_accesses += 1;
                }
                if !created || self.too_many_threads {
                    // The back takes the synchronisation and leaves the access out too.
                    self.side(Side::Event(*ev));
                    return;
                }
                let kind = atomic_kind(a.stores);
                match self.shares(a.addr, a.size) {
                    (true, true) => {
                        let mut found = Vec::new();
                        let at = (ev.thread, ev.pos);
                        self.shard
                            .access_found(at, a.addr, a.size, a.site, kind, owns, &mut found);
                        self.side(Side::Straddle(*ev, found));
                        return;
                    }
                    (true, false) => {
                        let at = (ev.thread, ev.pos, ev.seq);
                        self.shard.access(at, a.addr, a.size, a.site, kind, owns);
                    }
                    (false, _) => {}
                }
            }
            Op::Create { child: Some(c), .. } => {
                if let Some(created) = self.created.get_mut(c as usize) {
                    *created = true;
                }
                self.shard.sync(ev);
            }
            _ => self.shard.sync(ev),
        }
        self.side(Side::Event(*ev));
    }

    /// A plain access of the back's share, as one word (or three).
    #[inline]
    fn record(&mut self, at: (u32, u32, u64), addr: u64, size: u32, site: u32, kind: AccessKind) {
        if at != self.next {
            self.moved(at);
        }
        self.next = (at.0, at.1.wrapping_add(1), at.2.wrapping_add(1));
        let write = kind.is_write();
        match word(addr, size, site, write) {
            Some(w) => self.batch.words.push(w),
            None => {
                let wide = [
                    WIDE << TAG_SHIFT | u64::from(write),
                    addr,
                    u64::from(size) << 32 | u64::from(site),
                ];
                self.batch.words.extend_from_slice(&wide);
            }
        }
        if self.batch.words.len() >= BATCH {
            self.send();
        }
    }

    /// The next access is not where the back expects it: a skip within the run, or a run.
    #[cold]
    fn moved(&mut self, (thread, pos, seq): (u32, u32, u64)) {
        let skip = pos.wrapping_sub(self.next.1);
        if thread == self.next.0 && seq.wrapping_sub(self.next.2) == u64::from(skip) {
            self.batch.words.push(SKIP << TAG_SHIFT | u64::from(skip));
        } else {
            self.side(Side::Run { thread, pos, seq });
        }
    }

    #[cold]
    fn side(&mut self, side: Side) {
        if let Side::Event(ev) | Side::Straddle(ev, _) = &side {
            // The run goes on after it.
            self.next = (ev.thread, ev.pos.wrapping_add(1), ev.seq.wrapping_add(1));
        }
        self.batch.words.push(MARK << TAG_SHIFT);
        self.batch.side.push(side);
        if self.batch.words.len() >= BATCH || self.batch.side.len() >= SIDE_BATCH {
            self.send();
        }
    }

    #[cold]
    fn send(&mut self) {
        if self.batch.words.is_empty() && self.batch.rebalance.is_none() {
            return;
        }
        let next = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Batch::with_capacity());
        let batch = std::mem::replace(&mut self.batch, next);
        if let Some(to_back) = &self.to_back {
            let sent = match to_back.try_send(batch) {
                Ok(()) => true,
                Err(TrySendError::Full(batch)) => {
                    self.front_waits += 1;
                    to_back.send(batch).is_ok()
                }
                Err(TrySendError::Disconnected(_)) => false,
            };
            // Only a back that panicked hangs up: its panic is raised when it is joined.
            if !sent {
                self.to_back = None;
            }
        }
        self.sent = self.sent.wrapping_add(1);
        if let Some(every) = self.balance.review_every() {
            self.review_due |= self.sent % every == 0;
        }
    }

    /// Moves a bucket to the thread that waited less, if one did by the margin.
    #[cold]
    fn review(&mut self) {
        self.review_due = false;
        let waits = (self.front_waits, self.back_waits.load(Ordering::Relaxed));
        let (front, back) = (waits.0 - self.waits.0, waits.1 - self.waits.1);
        self.waits = waits;
        let share = match self.balance {
            Balance::Fixed(_) => return,
            // The front waited for room: the back is behind, and takes fewer buckets.
            Balance::Adaptive(_) if front > back + WAITS_MARGIN => self.share + 1,
            Balance::Adaptive(_) if back > front + WAITS_MARGIN => self.share.saturating_sub(1),
            Balance::Adaptive(_) => return,
            Balance::Alternate { every, .. } => {
                if (self.sent / every.max(1)) % 2 == 1 {
                    self.share + 1
                } else {
                    self.share.saturating_sub(1)
                }
            }
        }
        .min(SHARES);
        if share == self.share {
            return;
        }
        let old = self.share;
        self.moves += 1;
        let cells = (share < old).then(|| {
            // The buckets given up, `share..old`, with what their granules hold.
            self.shard
                .shadow
                .take_cells(|g| !front_owns(share, g) && front_owns(old, g))
        });
        let taking = cells.is_none();
        self.batch.rebalance = Some(Rebalance { share, cells });
        self.send();
        self.share = share;
        if taking && self.to_back.is_some() {
            match self.cells.recv() {
                Ok(cells) => self.shard.shadow.put_cells(cells),
                // The back panicked: its panic is raised when it is joined.
                Err(_) => self.to_back = None,
            }
        }
    }

    /// Both shares' findings in one output.
    fn finish(self, back: Shard, tables: Option<&Tables>) -> RaceOutput {
        let mut front = self.shard;
        debug_assert_eq!(
            front.locksets.count(),
            back.locksets.count(),
            "both shares intern the same locksets"
        );
        let complete = front.complete() && back.complete() && !self.too_many_threads;
        let totals = Totals {
            accesses: self.accesses,
            evicted: front.shadow.evicted + back.shadow.evicted,
            peak_granules: front.shadow.peak_granules() + back.shadow.peak_granules(),
            orphan_accesses: self.orphan_accesses,
            complete,
        };
        front.findings.merge(back.findings);
        RaceOutput::new(tables, front.findings, front.locksets, totals)
    }
}

/// The back's half: its shard, and where the next access is.
struct Back {
    shard: Shard,
    share: u32,
    created: Vec<bool>,
    too_many_threads: bool,
    next: (u32, u32, u64),
}

impl Back {
    /// The words of a batch. Every access in a word (or a wide one) is in the back's share
    /// whole: the front hands over an access with a granule of its own as an event.
    fn batch(&mut self, batch: &Batch) {
        let all = |_| true;
        let mut side = batch.side.iter();
        let mut words = batch.words.as_slice().iter();
        // Where the next access is, in registers for the batch's loop.
        let (mut thread, mut pos, mut seq) = self.next;
        while let Some(&w) = words.next() {
            if w >> TAG_SHIFT < SKIP {
                let (addr, size, site, kind) = unpack(w);
                let (granule, mask) = (word_granule(w), word_mask(addr, size));
                self.shard
                    .access_one((thread, pos, seq), granule, mask, addr, size, site, kind);
                pos = pos.wrapping_add(1);
                seq = seq.wrapping_add(1);
                continue;
            }
            match w >> TAG_SHIFT {
                SKIP => {
                    let n = w & ((1 << TAG_SHIFT) - 1);
                    pos = pos.wrapping_add(n as u32);
                    seq = seq.wrapping_add(n);
                }
                WIDE => {
                    let (Some(&addr), Some(&more)) = (words.next(), words.next()) else {
                        break;
                    };
                    let kind = if w & 1 != 0 {
                        AccessKind::Write
                    } else {
                        AccessKind::Read
                    };
                    let (site, size) = (more as u32, (more >> 32) as u32);
                    self.shard
                        .access((thread, pos, seq), addr, size, site, kind, all);
                    pos = pos.wrapping_add(1);
                    seq = seq.wrapping_add(1);
                }
                _ => {
                    match side.next() {
                        Some(Side::Run { thread, pos, seq }) => self.next = (*thread, *pos, *seq),
                        Some(Side::Event(ev)) => self.event(ev, &[]),
                        Some(Side::Straddle(ev, found)) => self.event(ev, found),
                        None => continue,
                    }
                    (thread, pos, seq) = self.next;
                }
            }
        }
        self.next = (thread, pos, seq);
    }

    /// The front's share changes after the batch just handled: granules given up come in,
    /// granules taken go out to the front.
    #[cold]
    fn rebalance(&mut self, r: Rebalance, to_front: &Sender<Cells>) {
        let old = self.share;
        let new = r.share;
        self.share = new;
        match r.cells {
            Some(cells) => self.shard.shadow.put_cells(cells),
            None => {
                let cells = self
                    .shard
                    .shadow
                    .take_cells(|g| front_owns(new, g) && !front_owns(old, g));
                // The front may be gone only if it panicked.
                let _ = to_front.send(cells);
            }
        }
    }

    /// An event handed over whole; `found`: what the front found of it in its granules.
    fn event(&mut self, ev: &StreamEvent, found: &[ShareConflict]) {
        self.next = (ev.thread, ev.pos.wrapping_add(1), ev.seq.wrapping_add(1));
        let share = self.share;
        let owns = move |g| !front_owns(share, g);
        let (addr, size, site, kind) = match ev.op {
            Op::Read { addr, size, site } => (addr, size, site, AccessKind::Read),
            Op::Write { addr, size, site } => (addr, size, site, AccessKind::Write),
            Op::Atomic(a) => {
                self.shard.sync(ev);
                (a.addr, a.size, a.site, atomic_kind(a.stores))
            }
            Op::Create { child: Some(c), .. } => {
                if let Some(created) = self.created.get_mut(c as usize) {
                    *created = true;
                }
                self.shard.sync(ev);
                return;
            }
            _ => {
                self.shard.sync(ev);
                return;
            }
        };
        let created = self
            .created
            .get(ev.thread as usize)
            .copied()
            .unwrap_or(false);
        if created && !self.too_many_threads {
            let at = (ev.thread, ev.pos, ev.seq);
            self.shard
                .access_merging(at, addr, size, site, kind, owns, found);
        }
    }
}
