//! Vector clocks over thread positions.
//!
//! Entry `u` of a clock is a *prefix length*: the number of events of thread `u` (counted by
//! position in that thread's event list, memory accesses included) that happen before the event
//! the clock belongs to, that event included for its own thread. Prefix lengths, rather than
//! Lamport counters, let the sync-preserving closure (`closure.rs`) use a clock directly as a
//! lower bound on how much of each thread a reordering must contain.

/// A vector clock indexed by the analyzer's dense thread index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VectorClock(Vec<u32>);

impl VectorClock {
    /// The clock that knows nothing (every entry 0), for `threads` threads.
    pub fn new(threads: usize) -> Self {
        Self(vec![0; threads])
    }

    pub fn get(&self, thread: usize) -> u32 {
        self.0.get(thread).copied().unwrap_or(0)
    }

    pub fn set(&mut self, thread: usize, value: u32) {
        if thread >= self.0.len() {
            self.0.resize(thread + 1, 0);
        }
        self.0[thread] = value;
    }

    /// Pointwise maximum; returns whether any entry grew.
    pub fn join(&mut self, other: &VectorClock) -> bool {
        if other.0.len() > self.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        // Branch-free, so that the compiler does several entries at a time.
        let mut grew = false;
        for (mine, &theirs) in self.0.iter_mut().zip(&other.0) {
            grew |= theirs > *mine;
            *mine = (*mine).max(theirs);
        }
        grew
    }

    /// Whether every entry of `self` is at most the matching entry of `other`.
    pub fn le(&self, other: &VectorClock) -> bool {
        self.0.iter().enumerate().all(|(i, &v)| v <= other.get(i))
    }

    pub fn entries(&self) -> &[u32] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_is_pointwise_max_and_reports_growth() {
        let mut a = VectorClock::new(3);
        a.set(0, 4);
        let mut b = VectorClock::new(3);
        b.set(1, 2);
        assert!(a.join(&b));
        assert_eq!(a.entries(), &[4, 2, 0]);
        assert!(!a.join(&b));
        assert!(b.le(&a));
        assert!(!a.le(&b));
    }
}
