//! Happens-before over the synchronisation that can never be reordered: thread create/join,
//! barrier generations, `pthread_once`, semaphores, condition hand-offs, user annotations,
//! release/acquire atomics — and, as the analysis that uses the clocks chooses ([`EdgeKinds`]),
//! reads-from of memory accesses.
//!
//! The deadlock analysis ([`EdgeKinds::DEADLOCK`]) keeps reads-from (a read must keep its
//! writer in a reordering) and never orders lock release → acquire: critical sections may be
//! reordered (that is what makes a deadlock predictable), and the sync-preserving closure
//! handles locks by its own rule.
//!
//! Where matching is ambiguous (which post a semaphore wait consumed, which signal woke a
//! condition wait) every earlier sender is joined in. That over-approximates the order, which
//! only ever removes predictions: it keeps them sound.

use std::collections::HashMap;

use crate::stream::{Op, Pass, StreamEvent};
use crate::vector_clock::VectorClock;

/// The clocks of one trace, stored sparsely: a thread's clock changes by a join only at a
/// *receive* event (a join, a barrier departure, a once skip, a semaphore or condition wake-up,
/// a happens-after, an acquire load), so only those are kept. Between two receives a thread's
/// clock differs only in its own entry, which is the event's position + 1.
#[derive(Debug, Default)]
pub struct HappensBefore {
    /// Per thread: (position, clock at that event), by position.
    receives: Vec<Vec<(u32, VectorClock)>>,
    /// False when the clocks outgrew their memory budget and were abandoned: then nothing may
    /// be predicted from this trace (missing edges would make predictions unsound).
    pub complete: bool,
}

impl HappensBefore {
    /// The clock of event `pos` of `thread`, own entry included.
    pub fn clock_at(&self, thread: usize, pos: u32) -> VectorClock {
        let mut clock = match self.receive_before(thread, pos) {
            Some(c) => c.clone(),
            None => VectorClock::default(),
        };
        clock.set(thread, pos + 1);
        clock
    }

    /// The stored clock of the last receive at or before `pos` in `thread`.
    pub fn receive_before(&self, thread: usize, pos: u32) -> Option<&VectorClock> {
        let list = self.receives.get(thread)?;
        let i = list.partition_point(|(p, _)| *p <= pos);
        i.checked_sub(1).map(|i| &list[i].1)
    }

    /// The receives of a thread, by position (the closure walks them).
    pub fn receives(&self, thread: usize) -> &[(u32, VectorClock)] {
        self.receives.get(thread).map_or(&[], |v| v.as_slice())
    }

    /// Whether event (`a_thread`, `a_pos`) happens before (`b_thread`, `b_pos`).
    pub fn happens_before(&self, a_thread: usize, a_pos: u32, b_thread: usize, b_pos: u32) -> bool {
        if a_thread == b_thread {
            return a_pos < b_pos;
        }
        self.receive_before(b_thread, b_pos)
            .is_some_and(|c| c.get(a_thread) > a_pos)
    }
}

/// Where a sender's clock is published for later receivers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    Fork(usize),
    Barrier(u32, u64),
    Once(u32),
    Semaphore(u32),
    Condition(u32),
    Tag(u64),
    Atomic(u64),
}

/// Builds [`HappensBefore`] from events given in the causal (merged) order.
/// Clock entries (4 bytes each) the builder may hold: vector clocks cost threads² in the worst
/// case, and a trace of a thread-per-request server can have tens of thousands of threads.
pub const CLOCK_ENTRY_BUDGET: usize = 1 << 26;

pub struct HbBuilder {
    /// Clock entries stored so far (snapshots and channels), against the budget.
    stored: usize,
    budget: usize,
    overflowed: bool,
    current: Vec<VectorClock>,
    /// Events of each thread seen so far.
    seen: Vec<u32>,
    channels: HashMap<Channel, VectorClock>,
    receives: Vec<Vec<(u32, VectorClock)>>,
    /// The last write to each address: (thread, position).
    last_write: HashMap<u64, (usize, u32)>,
}

impl HbBuilder {
    pub fn new(threads: usize) -> Self {
        Self::with_budget(threads, CLOCK_ENTRY_BUDGET)
    }

    /// A builder that gives up (and says so) past `budget` stored clock entries.
    pub fn with_budget(threads: usize, budget: usize) -> Self {
        Self {
            stored: 0,
            budget,
            overflowed: false,
            // Empty clocks grow as they learn: memory follows what threads know of each other.
            current: vec![VectorClock::default(); threads],
            seen: vec![0; threads],
            channels: HashMap::new(),
            receives: vec![Vec::new(); threads],
            last_write: HashMap::new(),
        }
    }

    /// A memory write (or atomic store) to `addr`.
    pub fn write(&mut self, thread: usize, pos: u32, addr: u64) {
        if self.overflowed {
            return;
        }
        self.last_write.insert(addr, (thread, pos));
    }

    /// A memory read (or atomic load) of `addr`: reads-from is an edge. A reordering in which a
    /// read sees another write may take another path, so a prediction must keep the writer
    /// before the reader. The writer is the last write in the merged order, which is the true
    /// one for every access ordered by synchronisation (a racy read may have read another).
    pub fn read(&mut self, thread: usize, pos: u32, addr: u64) {
        if self.overflowed {
            return;
        }
        let Some(&(writer, at)) = self.last_write.get(&addr) else {
            return;
        };
        if writer == thread || self.current[thread].get(writer) > at {
            return;
        }
        let list = &self.receives[writer];
        let i = list.partition_point(|(p, _)| *p <= at);
        let mut clock = match i.checked_sub(1) {
            Some(i) => list[i].1.clone(),
            None => VectorClock::default(),
        };
        clock.set(writer, at + 1);
        if self.current[thread].join(&clock) {
            self.record(thread, pos);
        }
    }

    /// Every event goes through here, in merged order, before `send`/`receive` for it.
    pub fn step(&mut self, thread: usize, pos: u32) {
        self.seen[thread] = pos + 1;
    }

    fn own(&mut self, thread: usize) -> &VectorClock {
        let n = self.seen[thread];
        self.current[thread].set(thread, n);
        &self.current[thread]
    }

    /// Publishes the thread's clock (as of its current event) on `channel`.
    pub fn send(&mut self, thread: usize, channel: Channel) {
        if self.overflowed {
            return;
        }
        let clock = self.own(thread).clone();
        self.charge(clock.entries().len());
        self.channels
            .entry(channel)
            .and_modify(|c| {
                c.join(&clock);
            })
            .or_insert(clock);
    }

    /// Joins what was published on `channel` into the thread's clock.
    pub fn receive(&mut self, thread: usize, pos: u32, channel: &Channel) {
        if self.overflowed {
            return;
        }
        let Some(sent) = self.channels.get(channel) else {
            return;
        };
        if self.current[thread].join(sent) {
            self.record(thread, pos);
        }
    }

    /// Joins the whole clock of `child` (a join returned).
    pub fn receive_thread(&mut self, thread: usize, pos: u32, child: usize) {
        if self.overflowed || child == thread || child >= self.current.len() {
            return;
        }
        let sent = self.own(child).clone();
        if self.current[thread].join(&sent) {
            self.record(thread, pos);
        }
    }

    /// Counts stored entries; past the budget every clock is dropped and the result is marked
    /// incomplete.
    fn charge(&mut self, entries: usize) {
        self.stored += entries;
        if self.stored > self.budget {
            self.overflowed = true;
            self.receives = vec![Vec::new(); self.receives.len()];
            self.channels = HashMap::new();
            self.current = vec![VectorClock::default(); self.current.len()];
            self.last_write = HashMap::new();
        }
    }

    fn record(&mut self, thread: usize, pos: u32) {
        self.charge(self.current[thread].entries().len());
        if self.overflowed {
            return;
        }
        let mut snapshot = self.current[thread].clone();
        snapshot.set(thread, pos + 1);
        self.receives[thread].push((pos, snapshot));
    }

    pub fn finish(self) -> HappensBefore {
        HappensBefore {
            receives: self.receives,
            complete: !self.overflowed,
        }
    }
}

/// A set of happens-before edge kinds: which synchronisation orders events for the analysis
/// that builds the clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EdgeKinds(u16);

impl EdgeKinds {
    /// Thread create → the child's first event; the child's last event → the join.
    pub const CREATE_JOIN: EdgeKinds = EdgeKinds(1);
    /// Every arrival of a barrier generation → every departure of it.
    pub const BARRIER: EdgeKinds = EdgeKinds(1 << 1);
    /// A `pthread_once` initialiser's end → every call that skipped it.
    pub const ONCE: EdgeKinds = EdgeKinds(1 << 2);
    /// Every earlier post → a successful semaphore wait.
    pub const SEMAPHORE: EdgeKinds = EdgeKinds(1 << 3);
    /// Every earlier signal or broadcast → the return of a condition wait.
    pub const CONDITION: EdgeKinds = EdgeKinds(1 << 4);
    /// The program's own happens-before/happens-after annotations, matched by tag.
    pub const USER: EdgeKinds = EdgeKinds(1 << 5);
    /// Every earlier release (or stronger) atomic store → an acquire (or stronger) load of the
    /// address. Relaxed accesses order nothing.
    pub const ATOMIC: EdgeKinds = EdgeKinds(1 << 6);
    /// Reads-from: a read (plain or atomic, any order) is ordered after the last write to its
    /// address in the merged order — the true writer of every access ordered by
    /// synchronisation.
    pub const READS_FROM: EdgeKinds = EdgeKinds(1 << 7);

    /// The synchronisation no reordering may change.
    pub const SYNC: EdgeKinds = EdgeKinds(
        Self::CREATE_JOIN.0
            | Self::BARRIER.0
            | Self::ONCE.0
            | Self::SEMAPHORE.0
            | Self::CONDITION.0
            | Self::USER.0
            | Self::ATOMIC.0,
    );
    /// What the deadlock analysis orders by: the synchronisation, and reads-from.
    pub const DEADLOCK: EdgeKinds = EdgeKinds(Self::SYNC.0 | Self::READS_FROM.0);

    pub const fn union(self, other: EdgeKinds) -> EdgeKinds {
        EdgeKinds(self.0 | other.0)
    }

    pub const fn without(self, other: EdgeKinds) -> EdgeKinds {
        EdgeKinds(self.0 & !other.0)
    }

    /// Whether every kind of `other` is in the set.
    pub const fn contains(self, other: EdgeKinds) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for EdgeKinds {
    type Output = EdgeKinds;
    fn bitor(self, other: EdgeKinds) -> EdgeKinds {
        self.union(other)
    }
}

/// The happens-before visitor: builds [`HappensBefore`] from the merged stream, with the edge
/// kinds its analysis asked for.
pub struct HbPass {
    builder: HbBuilder,
    edges: EdgeKinds,
}

impl HbPass {
    pub fn new(threads: usize, edges: EdgeKinds) -> Self {
        Self::with_builder(HbBuilder::new(threads), edges)
    }

    /// A pass over a builder made by the caller (a smaller clock budget, in tests).
    pub fn with_builder(builder: HbBuilder, edges: EdgeKinds) -> Self {
        HbPass { builder, edges }
    }

    pub fn edges(&self) -> EdgeKinds {
        self.edges
    }

    fn on(&self, kind: EdgeKinds) -> bool {
        self.edges.contains(kind)
    }
}

impl Pass for HbPass {
    type Output = HappensBefore;

    #[inline]
    fn handle(&mut self, ev: &StreamEvent) {
        let (t, pos) = (ev.thread as usize, ev.pos);
        let create_join = self.on(EdgeKinds::CREATE_JOIN);
        let b = &mut self.builder;
        b.step(t, pos);
        if pos == 0 && create_join {
            b.receive(t, pos, &Channel::Fork(t));
        }
        match ev.op {
            Op::Read { addr, .. } if self.edges.contains(EdgeKinds::READS_FROM) => {
                b.read(t, pos, addr)
            }
            Op::Write { addr, .. } if self.edges.contains(EdgeKinds::READS_FROM) => {
                b.write(t, pos, addr)
            }
            Op::Create { child: Some(c), .. } if create_join => {
                b.send(t, Channel::Fork(c as usize))
            }
            Op::Join {
                child: Some(c),
                joined: true,
            } if create_join => b.receive_thread(t, pos, c as usize),
            Op::CondSignal { cond, .. } if self.edges.contains(EdgeKinds::CONDITION) => {
                b.send(t, Channel::Condition(cond))
            }
            Op::CondWaitEnd { cond, .. } if self.edges.contains(EdgeKinds::CONDITION) => {
                b.receive(t, pos, &Channel::Condition(cond))
            }
            Op::BarrierArrive {
                barrier,
                generation: Some(g),
                ..
            } if self.edges.contains(EdgeKinds::BARRIER) => b.send(t, Channel::Barrier(barrier, g)),
            Op::BarrierDepart {
                barrier,
                generation,
                ..
            } if self.edges.contains(EdgeKinds::BARRIER) => {
                b.receive(t, pos, &Channel::Barrier(barrier, generation))
            }
            Op::OnceEnd { once } if self.edges.contains(EdgeKinds::ONCE) => {
                b.send(t, Channel::Once(once))
            }
            Op::OnceSkip { once } if self.edges.contains(EdgeKinds::ONCE) => {
                b.receive(t, pos, &Channel::Once(once))
            }
            Op::SemPost { sem, .. } if self.edges.contains(EdgeKinds::SEMAPHORE) => {
                b.send(t, Channel::Semaphore(sem))
            }
            Op::SemWaitEnd {
                sem,
                acquired: true,
            }
            | Op::SemTry {
                sem,
                acquired: true,
                ..
            } if self.edges.contains(EdgeKinds::SEMAPHORE) => {
                b.receive(t, pos, &Channel::Semaphore(sem))
            }
            Op::HappensBefore { tag, .. } if self.edges.contains(EdgeKinds::USER) => {
                b.send(t, Channel::Tag(tag))
            }
            Op::HappensAfter { tag, .. } if self.edges.contains(EdgeKinds::USER) => {
                b.receive(t, pos, &Channel::Tag(tag))
            }
            Op::Atomic(a) => {
                let atomic = self.edges.contains(EdgeKinds::ATOMIC);
                let reads_from = self.edges.contains(EdgeKinds::READS_FROM);
                if a.acquire && atomic {
                    b.receive(t, pos, &Channel::Atomic(a.addr));
                }
                if a.loads && reads_from {
                    b.read(t, pos, a.addr);
                }
                if a.stores && reads_from {
                    b.write(t, pos, a.addr);
                }
                if a.release && atomic {
                    b.send(t, Channel::Atomic(a.addr));
                }
            }
            _ => {}
        }
    }

    fn finish(self) -> HappensBefore {
        self.builder.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_orders_the_parent_prefix_before_the_child() {
        let mut b = HbBuilder::new(2);
        b.step(0, 0);
        b.step(0, 1);
        b.send(0, Channel::Fork(1));
        b.step(1, 0);
        b.receive(1, 0, &Channel::Fork(1));
        let hb = b.finish();
        assert!(hb.happens_before(0, 1, 1, 0));
        assert!(!hb.happens_before(0, 2, 1, 0));
        assert!(!hb.happens_before(1, 0, 0, 5));
        assert!(hb.complete);
    }

    #[test]
    fn clocks_past_their_budget_are_marked_incomplete() {
        let mut b = HbBuilder::with_budget(4, 5);
        for child in 1..4 {
            b.step(0, child as u32);
            b.send(0, Channel::Fork(child));
            b.step(child, 0);
            b.receive(child, 0, &Channel::Fork(child));
        }
        let hb = b.finish();
        assert!(!hb.complete);
        assert!(
            !hb.happens_before(0, 0, 3, 0),
            "nothing is claimed once abandoned"
        );
    }
}
