//! What can end another thread's wait: condition signals and broadcasts, semaphore posts,
//! barrier arrivals (by generation); and the semaphore counts the wait analysis needs — the
//! successful waits and the initial values, inferred when the trace did not record them.

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
    /// Per thread: the site of its last semaphore wait (the take's site).
    wait_site: Vec<SiteId>,
}

impl Senders {
    pub fn new(threads: usize) -> Self {
        Senders {
            signals: HashMap::new(),
            posts: HashMap::new(),
            sem_takes: HashMap::new(),
            sem_initial: HashMap::new(),
            arrivals: HashMap::new(),
            wait_site: vec![0; threads],
        }
    }

    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent) {
        let point = |site| SyncPoint {
            thread: ev.thread,
            pos: ev.pos,
            site,
            seq: ev.seq,
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
            }
            Op::SemWaitBegin { site, .. } => self.wait_site[ev.thread as usize] = site,
            Op::SemWaitEnd {
                sem,
                acquired: true,
            } => {
                let site = self.wait_site[ev.thread as usize];
                self.sem_takes.entry(sem).or_default().push(point(site));
            }
            Op::SemTry {
                sem,
                site,
                acquired: true,
            } => {
                self.sem_takes.entry(sem).or_default().push(point(site));
            }
            _ => {}
        }
    }

    /// Ends the walk. A semaphore whose init was not recorded started with at least as many
    /// tokens as the trace took before posting them: assuming fewer would let a prediction
    /// block a wait that cannot block.
    pub fn finish(mut self) -> Self {
        for (sem, takes) in &self.sem_takes {
            if self.sem_initial.contains_key(sem) {
                continue;
            }
            let mut ops: Vec<(u64, i64)> = takes.iter().map(|p| (p.seq, -1)).collect();
            ops.extend(
                self.posts
                    .get(sem)
                    .into_iter()
                    .flatten()
                    .map(|p| (p.seq, 1)),
            );
            ops.sort_unstable();
            let (mut balance, mut lowest) = (0i64, 0i64);
            for (_, d) in ops {
                balance += d;
                lowest = lowest.min(balance);
            }
            self.sem_initial.insert(*sem, (-lowest) as u32);
        }
        self
    }
}
