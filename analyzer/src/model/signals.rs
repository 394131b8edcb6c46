//! Signal context (FORMAT.md §6.6.1, signal-handler and signal-mask events): per thread, the
//! points where it entered or left a handler the program installed, or changed its mask, so
//! that an analysis can ask, for any event of the thread, whether it ran inside a handler (and
//! for which signal) and which signals the thread blocked then. Only threads with such events
//! have points; a trace without them costs a match per event.

use foldhash::{HashMap, HashMapExt};

use crate::stream::{Op, StreamEvent};

/// A thread's signal context from one of its events on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SignalContext {
    /// The signal whose handler the thread runs (the innermost, when handlers nest); 0: none.
    pub(crate) handler: u8,
    /// The thread's mask in normal context: bit `s - 1` set when signal `s` is blocked.
    pub(crate) blocked: u64,
}

impl SignalContext {
    /// Whether `signal` can interrupt the thread here.
    pub(crate) fn lets_in(&self, signal: u8) -> bool {
        signal == 0 || signal > 64 || self.blocked & (1u64 << (signal - 1)) == 0
    }
}

/// The change points of every thread: `(position, context from there on)`, in position order.
/// Only threads with such events have an entry.
#[derive(Clone, Debug, Default)]
pub(crate) struct SignalContexts {
    threads: HashMap<u32, Vec<(u32, SignalContext)>>,
}

impl SignalContexts {
    /// Whether no thread ever ran a handler or blocked a signal here.
    pub(crate) fn is_empty(&self) -> bool {
        self.threads.values().all(Vec::is_empty)
    }

    /// The context of `thread` at its event `pos`.
    pub(crate) fn at(&self, thread: u32, pos: u32) -> SignalContext {
        let Some(points) = self.threads.get(&thread) else {
            return SignalContext::default();
        };
        match points.partition_point(|&(p, _)| p <= pos) {
            0 => SignalContext::default(),
            i => points[i - 1].1,
        }
    }
}

/// The visitor that collects them. By thread id, for the threads that have signal events: a
/// program may have created 10^5 threads, few of which take a signal.
pub(super) struct SignalScan {
    threads: usize,
    /// Per thread: the handlers it is in, innermost last, and its mask.
    states: HashMap<u32, (Vec<u8>, u64)>,
    points: HashMap<u32, Vec<(u32, SignalContext)>>,
}

impl SignalScan {
    pub fn new(threads: usize) -> Self {
        SignalScan {
            threads,
            states: HashMap::new(),
            points: HashMap::new(),
        }
    }

    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent) {
        let t = ev.thread;
        if t as usize >= self.threads {
            return;
        }
        match ev.op {
            Op::SignalEnter { signal } => self.states.entry(t).or_default().0.push(signal),
            Op::SignalExit { signal } => {
                // A handler left by siglongjmp never wrote its exit: an outer handler's exit
                // ends it too.
                let handlers = &mut self.states.entry(t).or_default().0;
                if let Some(i) = handlers.iter().rposition(|&s| s == signal) {
                    handlers.truncate(i);
                }
            }
            Op::SignalMask { blocked } => self.states.entry(t).or_default().1 = blocked,
            // Its last event: no later segment starts inside its handler or with its mask.
            Op::ThreadExit => {
                if !self.states.is_empty() {
                    self.states.remove(&t);
                }
                return;
            }
            _ => return,
        }
        let now = self.context(t);
        self.points.entry(t).or_default().push((ev.pos, now));
    }

    fn context(&self, t: u32) -> SignalContext {
        self.states
            .get(&t)
            .map_or(SignalContext::default(), |(handlers, blocked)| {
                SignalContext {
                    handler: handlers.last().copied().unwrap_or(0),
                    blocked: *blocked,
                }
            })
    }

    /// Ends a segment: its points; the next segment starts with each thread's context as it
    /// stands (a handler still running, a mask still set).
    pub fn cut(&mut self) -> SignalContexts {
        let done = std::mem::take(&mut self.points);
        self.points = self
            .states
            .keys()
            .filter_map(|&t| {
                let now = self.context(t);
                (now != SignalContext::default()).then(|| (t, vec![(0, now)]))
            })
            .collect();
        SignalContexts { threads: done }
    }

    pub fn finish(self) -> SignalContexts {
        SignalContexts {
            threads: self.points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(thread: u32, pos: u32, op: Op) -> StreamEvent {
        StreamEvent {
            thread,
            pos,
            seq: 0,
            op,
        }
    }

    #[test]
    fn a_thread_s_context_follows_its_handlers_and_masks_across_a_cut() {
        let mut scan = SignalScan::new(2);
        scan.handle(&ev(0, 2, Op::SignalMask { blocked: 1 << 11 }));
        scan.handle(&ev(0, 5, Op::SignalMask { blocked: 0 }));
        scan.handle(&ev(0, 7, Op::SignalEnter { signal: 10 }));
        scan.handle(&ev(0, 8, Op::SignalEnter { signal: 10 }));
        scan.handle(&ev(0, 9, Op::SignalExit { signal: 10 }));
        let first = scan.cut();
        assert_eq!(first.at(0, 1), SignalContext::default());
        assert!(!first.at(0, 3).lets_in(12) && first.at(0, 3).lets_in(10));
        assert!(first.at(0, 6).lets_in(12));
        assert_eq!(first.at(0, 8).handler, 10);
        assert_eq!(first.at(0, 9).handler, 10, "the outer handler still runs");
        assert!(first.at(1, 9) == SignalContext::default());
        // The next segment starts inside the outer handler; its exit ends it.
        scan.handle(&ev(0, 12, Op::SignalExit { signal: 10 }));
        let second = scan.finish();
        assert_eq!(second.at(0, 10).handler, 10);
        assert_eq!(second.at(0, 12).handler, 0);
        assert!(!second.is_empty());
    }
}
