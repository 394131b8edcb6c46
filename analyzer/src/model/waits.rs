//! Blocking waits entered while holding locks — join, barrier, condition and semaphore waits,
//! and blocking reads of hand-off channels — with the held set at the wait (read from the
//! lock-section visitor, after a condition wait released its own mutex), and whether the wait
//! timed out in the trace.
//!
//! A blocking read is a wait at its blocking-begin (the recorder writes one for a read that can
//! block under a lock); which channel it waits on is said by the hand-off read the recorder
//! writes before the call's blocking-end. A read that took nothing (an error, end of file) or
//! never returned names no channel and is no wait here.

use foresight_trace::event::BlockingCall;

use super::locks::LockSections;
use super::{IndexMap, Wait, WaitKind};
use crate::stream::{Op, StreamEvent};

pub(super) struct HeldWaits {
    waits: Vec<Wait>,
    /// By thread in a condition or semaphore wait: the index the wait would have, which a
    /// timeout marks if the wait was recorded. Only the threads waiting have an entry: a
    /// program may create 10^5 threads over its life.
    entered: IndexMap<u32, usize>,
    /// By thread in a blocking read: the position and site of its blocking-begin.
    reading: IndexMap<u32, (u32, foresight_trace::SiteId)>,
}

impl HeldWaits {
    pub fn new() -> Self {
        HeldWaits {
            waits: Vec::new(),
            entered: IndexMap::default(),
            reading: IndexMap::default(),
        }
    }

    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent, locks: &mut LockSections) {
        let (t, pos) = (ev.thread, ev.pos);
        match ev.op {
            Op::JoinRequest {
                child: Some(c),
                site,
            } => self.enter(locks, t, pos, WaitKind::Join { child: c }, site),
            Op::CondWaitBegin { cond, mutex, site } => {
                self.entered.insert(t, self.waits.len());
                self.enter(locks, t, pos, WaitKind::Condition { cond, mutex }, site);
            }
            Op::CondWaitEnd { timed_out, .. } => {
                if timed_out {
                    self.mark_timed_out(t);
                }
                self.entered.remove(&t);
            }
            Op::BarrierArrive {
                barrier,
                site,
                generation,
            } => self.enter(
                locks,
                t,
                pos,
                WaitKind::Barrier {
                    barrier,
                    generation,
                },
                site,
            ),
            Op::SemWaitBegin { sem, site } => {
                self.entered.insert(t, self.waits.len());
                self.enter(locks, t, pos, WaitKind::Semaphore { sem }, site);
            }
            Op::BlockingBegin { call, site, .. } => {
                let read = matches!(call, BlockingCall::Read | BlockingCall::Recv);
                if read {
                    self.reading.insert(t, (pos, site));
                } else {
                    self.reading.remove(&t);
                }
            }
            Op::BlockingEnd { .. } => {
                self.reading.remove(&t);
            }
            Op::HandoffRead {
                channel, kind, fd, ..
            } => {
                if let Some((begin, site)) = self.reading.remove(&t) {
                    let kind = WaitKind::Handoff { channel, kind, fd };
                    self.enter(locks, t, begin, kind, site);
                }
            }
            Op::SemWaitEnd { acquired, .. } => {
                if !acquired {
                    self.mark_timed_out(t);
                }
                self.entered.remove(&t);
            }
            _ => {}
        }
    }

    /// A wait of `thread`, kept when it holds locks.
    fn enter(
        &mut self,
        locks: &mut LockSections,
        thread: u32,
        pos: u32,
        kind: WaitKind,
        site: foresight_trace::SiteId,
    ) {
        let held = locks.push_held(thread);
        if !held.is_empty() {
            self.waits.push(Wait {
                thread,
                pos,
                kind,
                site,
                held,
                timed_out: false,
            });
        }
    }

    /// The wait the thread entered last ended by a timeout.
    fn mark_timed_out(&mut self, thread: u32) {
        let Some(&entered) = self.entered.get(&thread) else {
            return;
        };
        if let Some(w) = self.waits.get_mut(entered) {
            if w.thread == thread {
                w.timed_out = true;
            }
        }
    }

    /// Ends a segment of the walk: its waits, less the condition and semaphore waits still
    /// going on at the cut (whether they time out is in the next segment: left out, so that
    /// no prediction rests on a wait that may be a timed one).
    pub fn cut(&mut self) -> Vec<Wait> {
        // A read begun before the cut is a wait of the segment it began in: its channel is
        // not known there, so it is left out.
        self.reading.clear();
        let waits_now = &self.waits;
        let open: Vec<usize> = self
            .entered
            .drain()
            .filter(|&(t, e)| waits_now.get(e).is_some_and(|w| w.thread == t))
            .map(|(_, e)| e)
            .collect();
        let waits = std::mem::take(&mut self.waits);
        if open.is_empty() {
            return waits;
        }
        waits
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !open.contains(i))
            .map(|(_, w)| w)
            .collect()
    }

    pub fn finish(self) -> Vec<Wait> {
        self.waits
    }
}
