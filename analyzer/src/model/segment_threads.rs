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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Lives, Starts, ThreadIds};
    use std::sync::Arc;

    #[test]
    fn a_segment_numbers_the_threads_it_runs_and_no_others() {
        // Thread 0 runs on through the segment, 1 to 5 ended before it, 6 to 9 start in it.
        let mut run = Run {
            threads: ThreadIds::Range {
                first: 1,
                count: 10,
            },
            ..Run::default()
        };
        run.lives = Lives::new(Arc::new(vec![40, 3, 3, 3, 3, 3, 5, 5, 5, 5]), &[0b11_1110]);
        let starts = vec![(9, 0), (0, 20), (6, 0), (8, 0), (7, 0)];
        run.start = Arc::new(Starts::of_segment(starts));
        let s = SegmentThreads::of(&run);
        assert_eq!(s.len(), 5);
        assert_eq!(s.slot(0), Some(0));
        assert!((1..=5).all(|t| s.slot(t).is_none()));
        let slots: Vec<Option<usize>> = (6..10).map(|t| s.slot(t)).collect();
        assert_eq!(slots, [Some(1), Some(2), Some(3), Some(4)]);
        let threads: Vec<u32> = (0..s.len()).map(|i| s.thread(i)).collect();
        assert_eq!(threads, [0, 6, 7, 8, 9]);
        assert!(s.slot(10).is_none());
        // A thread without events there starts where it ends: no rule can move it.
        assert_eq!(run.start_of(3), 3);
        assert_eq!(run.start_of(0), 20);
    }

    #[test]
    fn a_trace_analysed_whole_numbers_every_thread_with_events() {
        let mut run = Run {
            threads: ThreadIds::Range { first: 1, count: 4 },
            ..Run::default()
        };
        run.lives = Lives::new(Arc::new(vec![7, 2, 0, 9]), &[0]);
        let s = SegmentThreads::of(&run);
        // Thread 2 has no event, and no slot: three slots, one for each of the others.
        assert_eq!(s.len(), 3);
        assert!(s.slot(2).is_none());
        for t in [0, 1, 3] {
            let i = s.slot(t).expect("a slot");
            assert_eq!(s.thread(i), t);
        }
        assert_eq!(run.start_of(3), 0);
    }
}
