//! Blocking calls made while holding locks (FORMAT.md §6.6.1: the recorder writes them only
//! then): the call, its site, the held set at the call (read from the lock-section visitor)
//! and how long it took.

use foresight_trace::event::BlockingCall;
use foresight_trace::SiteId;

use super::locks::LockSections;
use crate::stream::{Op, StreamEvent};

/// A blocking call entered while holding locks.
#[derive(Clone, Debug)]
pub(crate) struct HeldBlocking {
    pub(crate) thread: u32,
    pub(crate) call: BlockingCall,
    pub(crate) site: SiteId,
    /// The longest the call asked to wait (a sleep's duration, a poll's timeout); `None`: no
    /// limit.
    pub(crate) timeout_ns: Option<u64>,
    /// Acquisitions held during the call.
    pub(crate) held: std::ops::Range<u32>,
    /// How long the call took; `None` when its end is not in this run (the thread was still
    /// in it when the trace ended, or the end fell in a later segment).
    pub(crate) duration_ns: Option<u64>,
}

pub(super) struct HeldBlockingCalls {
    calls: Vec<HeldBlocking>,
    /// Per thread: the index of the call it is in (`usize::MAX`: none).
    open: Vec<usize>,
}

impl HeldBlockingCalls {
    pub fn new(threads: usize) -> Self {
        HeldBlockingCalls {
            calls: Vec::new(),
            open: vec![usize::MAX; threads],
        }
    }

    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent, locks: &mut LockSections) {
        let t = ev.thread as usize;
        match ev.op {
            Op::BlockingBegin {
                call,
                site,
                timeout_ns,
            } => {
                let held = locks.push_held(ev.thread);
                let slot = if held.is_empty() {
                    usize::MAX
                } else {
                    self.calls.push(HeldBlocking {
                        thread: ev.thread,
                        call,
                        site,
                        timeout_ns,
                        held,
                        duration_ns: None,
                    });
                    self.calls.len() - 1
                };
                if let Some(o) = self.open.get_mut(t) {
                    *o = slot;
                }
            }
            Op::BlockingEnd { call, duration_ns } => {
                let Some(o) = self.open.get_mut(t) else {
                    return;
                };
                let i = std::mem::replace(o, usize::MAX);
                if let Some(c) = self.calls.get_mut(i) {
                    if c.thread == ev.thread && c.call == call {
                        c.duration_ns = Some(duration_ns);
                    }
                }
            }
            _ => {}
        }
    }

    /// Ends a segment of the walk: its calls (one still open at the cut keeps no duration).
    pub fn cut(&mut self) -> Vec<HeldBlocking> {
        self.open.iter_mut().for_each(|o| *o = usize::MAX);
        std::mem::take(&mut self.calls)
    }

    pub fn finish(self) -> Vec<HeldBlocking> {
        self.calls
    }
}
