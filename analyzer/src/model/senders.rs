//! What can end another thread's wait: condition signals and broadcasts, semaphore posts,
//! barrier arrivals (by generation); and the semaphore counts the wait analysis needs — the
//! successful waits and the initial values, inferred when the trace did not record them; and
//! the writes and reads of hand-off channels (pipes, socketpairs, eventfds), which are posts
//! and takes of an amount.

use foldhash::{HashMap, HashMapExt};

use foresight_trace::event::{ObjectId, SiteId};

use super::SyncPoint;
use crate::stream::{Op, StreamEvent};

pub(super) struct Senders {
    pub signals: HashMap<ObjectId, Vec<SyncPoint>>,
    pub posts: HashMap<ObjectId, Vec<SyncPoint>>,
    /// Successful semaphore waits (including `sem_trywait`).
    pub sem_takes: HashMap<ObjectId, Vec<SyncPoint>>,
    pub sem_initial: HashMap<ObjectId, u32>,
    pub arrivals: HashMap<(ObjectId, u64), Vec<SyncPoint>>,
    pub handoffs: Handoffs,
    /// Per channel: amount written minus amount read, as `balance` for semaphores.
    handoff_balance: HashMap<u32, SemBalance>,
    /// By thread in a semaphore wait: the wait's site (the take's site). Only the threads
    /// waiting have an entry: a program may create 10^5 threads over its life.
    wait_site: HashMap<u32, SiteId>,
    /// Per semaphore: posts minus successful waits so far, the lowest that balance has been,
    /// and the balance at the start of the current segment (`cut`).
    balance: HashMap<ObjectId, SemBalance>,
    /// The walk has been cut into segments.
    segmented: bool,
}

/// The hand-off channels' writes and reads, by channel id: a write puts an amount (bytes, an
/// eventfd's units) in, a read takes one out.
#[derive(Debug, Default)]
pub(crate) struct Handoffs {
    pub(crate) writes: HashMap<u32, Vec<(SyncPoint, u64)>>,
    pub(crate) reads: HashMap<u32, Vec<(SyncPoint, u64)>>,
    /// What each channel held at the start of the run (of its segment): written before and not
    /// read, or read in the trace beyond what it wrote (a writer it does not show).
    pub(crate) initial: HashMap<u32, u64>,
}

#[derive(Clone, Copy, Default)]
struct SemBalance {
    now: i64,
    lowest: i64,
    at_start: i64,
}

impl Senders {
    pub fn new() -> Self {
        Senders {
            signals: HashMap::new(),
            posts: HashMap::new(),
            sem_takes: HashMap::new(),
            sem_initial: HashMap::new(),
            arrivals: HashMap::new(),
            handoffs: Handoffs::default(),
            handoff_balance: HashMap::new(),
            wait_site: HashMap::new(),
            balance: HashMap::new(),
            segmented: false,
        }
    }

    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent) {
        let point = |site| SyncPoint {
            thread: ev.thread,
            pos: ev.pos,
            site,
        };
        match ev.op {
            Op::CondSignal { cond, site, .. } => {
                self.signals.entry(cond).or_default().push(point(site));
            }
            Op::BarrierArrive {
                barrier,
                site,
                generation: Some(g),
            } => {
                self.arrivals
                    .entry((barrier, g))
                    .or_default()
                    .push(point(site));
            }
            Op::SemInit { sem, value, .. } => {
                self.sem_initial.insert(sem, value);
            }
            Op::SemPost { sem, site } => {
                self.posts.entry(sem).or_default().push(point(site));
                self.count(sem, 1);
            }
            Op::HandoffWrite {
                channel,
                amount,
                site,
                ..
            } => {
                let h = &mut self.handoffs.writes;
                h.entry(channel).or_default().push((point(site), amount));
                count(&mut self.handoff_balance, channel, amount as i64);
            }
            Op::HandoffRead {
                channel,
                amount,
                site,
                ..
            } => {
                let h = &mut self.handoffs.reads;
                h.entry(channel).or_default().push((point(site), amount));
                count(
                    &mut self.handoff_balance,
                    channel,
                    -(amount.min(i64::MAX as u64) as i64),
                );
            }
            Op::SemWaitBegin { site, .. } => {
                self.wait_site.insert(ev.thread, site);
            }
            Op::SemWaitEnd {
                acquired: false, ..
            } => {
                self.wait_site.remove(&ev.thread);
            }
            Op::SemWaitEnd {
                sem,
                acquired: true,
            } => {
                let site = self.wait_site.remove(&ev.thread).unwrap_or(0);
                self.sem_takes.entry(sem).or_default().push(point(site));
                self.count(sem, -1);
            }
            Op::SemTry {
                sem,
                site,
                acquired: true,
            } => {
                self.sem_takes.entry(sem).or_default().push(point(site));
                self.count(sem, -1);
            }
            _ => {}
        }
    }

    fn count(&mut self, sem: ObjectId, d: i64) {
        count(&mut self.balance, sem, d);
    }

    /// What each channel holds at the start of the segment: written before it and not read,
    /// plus what the trace read beyond what it wrote (known only at the end: until then the
    /// segments that follow keep every wait wakeable).
    fn handoff_initial(&self) -> HashMap<u32, u64> {
        self.handoff_balance
            .iter()
            .map(|(&c, b)| (c, (b.at_start - b.lowest).max(0) as u64))
            .collect()
    }

    /// The count each semaphore starts the segment with: its initial value (recorded, or, at
    /// the end of the walk, the least the whole trace needs) plus the posts and minus the
    /// waits before the segment. Before the end, a semaphore whose initial value the trace
    /// does not record has no known count yet (a later wait may need more): it is taken as
    /// never empty, so no wait on it is predicted from that segment.
    fn segment_initial(&self, last: bool) -> HashMap<ObjectId, u32> {
        let mut initial: HashMap<ObjectId, u32> = HashMap::new();
        for sem in self.balance.keys().chain(self.sem_initial.keys()) {
            let b = self.balance.get(sem).copied().unwrap_or_default();
            let start = match (self.sem_initial.get(sem), last) {
                (Some(&v), _) => i64::from(v) + b.at_start,
                (None, true) => -b.lowest + b.at_start,
                (None, false) => i64::from(u32::MAX),
            };
            initial.insert(*sem, start.clamp(0, i64::from(u32::MAX)) as u32);
        }
        initial
    }

    /// Ends a segment of the walk: its senders, and each semaphore's count at its start.
    /// Senders before a segment are inside every closure of it, so only the segment's are
    /// kept.
    pub fn cut(&mut self) -> Self {
        let sem_initial = self.segment_initial(false);
        let mut handoffs = std::mem::take(&mut self.handoffs);
        handoffs.initial = self.handoff_initial();
        for b in self.balance.values_mut() {
            b.at_start = b.now;
        }
        for b in self.handoff_balance.values_mut() {
            b.at_start = b.now;
        }
        self.segmented = true;
        Senders {
            signals: std::mem::take(&mut self.signals),
            posts: std::mem::take(&mut self.posts),
            sem_takes: std::mem::take(&mut self.sem_takes),
            sem_initial,
            arrivals: std::mem::take(&mut self.arrivals),
            handoffs,
            handoff_balance: HashMap::new(),
            wait_site: HashMap::new(),
            balance: HashMap::new(),
            segmented: true,
        }
    }

    /// Ends the walk. A semaphore whose init was not recorded started with at least as many
    /// tokens as the trace took before posting them: assuming fewer would let a prediction
    /// block a wait that cannot block. After segments, the count at the last one's start.
    pub fn finish(mut self) -> Self {
        self.handoffs.initial = self.handoff_initial();
        if self.segmented {
            self.sem_initial = self.segment_initial(true);
            return self;
        }
        for sem in self.sem_takes.keys() {
            if self.sem_initial.contains_key(sem) {
                continue;
            }
            let lowest = self.balance.get(sem).map_or(0, |b| b.lowest);
            self.sem_initial
                .insert(*sem, (-lowest).clamp(0, i64::from(u32::MAX)) as u32);
        }
        self
    }
}

/// Adds `d` to the balance of `key`, keeping the lowest it has been.
fn count<K: std::hash::Hash + Eq>(balances: &mut HashMap<K, SemBalance>, key: K, d: i64) {
    let b = balances.entry(key).or_default();
    b.now = b.now.saturating_add(d);
    b.lowest = b.lowest.min(b.now);
}
