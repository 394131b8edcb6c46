//! The threads a segment's closures keep state for.
//!
//! A run cut from a program that created 10^5 threads over its life shares one thread table
//! with every other segment (`Run::threads`), but only a few thousand of those threads do
//! anything in the segment: the ones created in it and the few still running when it began.
//! Every other thread's part of the segment is empty: its prefix in any closure is its whole
//! life before the segment (`Run::start`), which no rule can move, since no clock of the
//! segment knows more of it than that. Per-thread state for those threads would make each
//! closure cost memory and time in the threads ever created, not in the segment's.

use super::Run;

/// The threads with events, critical sections or stored receives in a run, numbered densely:
/// the few below `first` by a sorted list, every thread from `first` on by its distance from
/// it (a segment's own threads are consecutive, being the ones created in it).
#[derive(Debug, Default)]
pub(crate) struct SegmentThreads {
    below: Box<[u32]>,
    first: u32,
    end: u32,
}

impl SegmentThreads {
    pub(crate) fn of(run: &Run) -> Self {
        let n = run.threads.len() as u32;
        let involved = |t: u32| {
            run.has_events_in_segment(t)
                || !run.thread_acquisitions(t as usize).is_empty()
                || run.hb.receive_count(t as usize) > 0
        };
        let involved: Vec<u32> = (0..n).filter(|&t| involved(t)).collect();
        // Where the consecutive part starts: the split that gives the fewest slots, counting
        // one for each thread listed below it and one for each thread from it to the end.
        let (split, _) = (0..=involved.len())
            .map(|i| {
                let window = involved.get(i).map_or(0, |&first| (n - first) as usize);
                (i, i + window)
            })
            .min_by_key(|&(_, slots)| slots)
            .unwrap_or((0, 0));
        SegmentThreads {
            first: involved.get(split).copied().unwrap_or(n),
            below: involved[..split].into(),
            end: n,
        }
    }

    /// How many threads have a slot.
    pub(crate) fn len(&self) -> usize {
        self.below.len() + (self.end - self.first) as usize
    }

    /// Thread `t`'s slot, if it has one.
    #[inline]
    pub(crate) fn slot(&self, t: u32) -> Option<usize> {
        if t >= self.first {
            (t < self.end).then(|| self.below.len() + (t - self.first) as usize)
        } else {
            self.below.binary_search(&t).ok()
        }
    }

    /// The thread of slot `i`.
    #[inline]
    pub(crate) fn thread(&self, i: usize) -> u32 {
        match self.below.get(i) {
            Some(&t) => t,
            None => self.first + (i - self.below.len()) as u32,
        }
    }
}
