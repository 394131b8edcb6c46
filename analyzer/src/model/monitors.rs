//! Which locks are monitors, learnt before a walk that is cut into segments. The whole-trace
//! model marks a lock as a monitor when it sees it used with a condition (`locks.rs`), and the
//! closure's monitor rule then applies to every section on it, since the analysis runs after
//! the walk. A segment is analysed when it is cut, before the rest of the trace is read: a lock
//! that becomes a monitor only later would miss the rule there, and a segment could predict
//! what the whole trace does not. So a trace that will be cut and has conditions is first
//! scanned thread by thread (the held stack is the thread's own), as `stream.rs` scans barrier
//! generations: the mutex of every condition wait and the innermost lock held at every signal
//! or broadcast.

use foldhash::HashSet;
use std::borrow::Borrow;

use foresight_trace::event::{EventKind, ObjectId};

/// The monitor locks of a trace, by object.
#[derive(Debug, Default)]
pub struct MonitorScan {
    pub(crate) monitors: HashSet<ObjectId>,
}

impl MonitorScan {
    /// Takes in what a scan of other threads found (threads scanned side by side).
    pub fn merge(&mut self, other: MonitorScan) {
        self.monitors.extend(other.monitors);
    }

    /// Scans one thread's events in its own order.
    pub fn scan_thread<E: Borrow<EventKind>>(&mut self, events: impl IntoIterator<Item = E>) {
        // (lock, recursion depth), outermost first.
        let mut held: Vec<(ObjectId, u32)> = Vec::new();
        let acquire =
            |held: &mut Vec<(ObjectId, u32)>, lock| match held.iter_mut().find(|(l, _)| *l == lock)
            {
                Some((_, depth)) => *depth += 1,
                None => held.push((lock, 1)),
            };
        let release = |held: &mut Vec<(ObjectId, u32)>, lock| {
            if let Some(i) = held.iter().rposition(|(l, _)| *l == lock) {
                held[i].1 -= 1;
                if held[i].1 == 0 {
                    held.remove(i);
                }
            }
        };
        for ev in events {
            match *ev.borrow() {
                EventKind::LockAcquired { lock, .. }
                | EventKind::LockTry {
                    lock,
                    acquired: true,
                    ..
                } => acquire(&mut held, lock),
                EventKind::LockRelease { lock, .. } => release(&mut held, lock),
                EventKind::CondWaitBegin { mutex, .. } => {
                    self.monitors.insert(mutex);
                    release(&mut held, mutex);
                }
                EventKind::CondWaitEnd { mutex, .. } => acquire(&mut held, mutex),
                EventKind::CondSignal { .. } | EventKind::CondBroadcast { .. } => {
                    if let Some(&(lock, _)) = held.last() {
                        self.monitors.insert(lock);
                    }
                }
                _ => {}
            }
        }
    }
}
