//! Blocking calls made while holding locks (FORMAT.md §6.6.1: the recorder writes them only
//! then): the call, its site, the held set at the call (read from the lock-section visitor)
//! and how long it took.

use foresight_trace::event::BlockingCall;
use foresight_trace::SiteId;

use super::locks::LockSections;
use super::IndexMap;
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

#[derive(Default)]
pub(super) struct HeldBlockingCalls {
    calls: Vec<HeldBlocking>,
    /// Per thread inside a call it entered holding locks: the call's index. Only those: a
    /// program may have created 10^5 threads, and few are inside such a call at once.
    open: IndexMap<u32, usize>,
}

impl HeldBlockingCalls {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent, locks: &mut LockSections) {
        match ev.op {
            Op::BlockingBegin {
                call,
                site,
                timeout_ns,
            } => {
                let held = locks.push_held(ev.thread);
                if held.is_empty() {
                    self.open.remove(&ev.thread);
                } else {
                    self.calls.push(HeldBlocking {
                        thread: ev.thread,
                        call,
                        site,
                        timeout_ns,
                        held,
                        duration_ns: None,
                    });
                    self.open.insert(ev.thread, self.calls.len() - 1);
                }
            }
            Op::BlockingEnd { call, duration_ns } => {
                let Some(i) = self.open.remove(&ev.thread) else {
                    return;
                };
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
        self.open.clear();
        std::mem::take(&mut self.calls)
    }

    pub fn finish(self) -> Vec<HeldBlocking> {
        self.calls
    }
}
