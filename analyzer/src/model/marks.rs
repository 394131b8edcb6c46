//! Which events of a segment read or write memory, per thread: one bit per event for each, and
//! the positions of the few events whose outcome depends on what other threads did at that
//! moment (a failed trylock or semaphore try, a timed-out wait). Kept only where a race
//! analysis runs; two bits per event of the segment, dropped with it.
//!
//! The sync-preserving closure never needs them: it keeps the trace order of what it
//! contains, and trace order keeps every read's writer. A reordering that reverses critical
//! sections (`analyses/sync_reversal`) moves some events ahead of others, and it may do so
//! only where no read can see another write: these marks say where reads and writes are.

use crate::stream::{Op, StreamEvent};

/// The marks of one segment (or a whole trace).
#[derive(Clone, Debug, Default)]
pub struct AccessMarks {
    threads: Vec<ThreadMarks>,
}

#[derive(Clone, Debug, Default)]
struct ThreadMarks {
    /// Position of the thread's first event in this segment: bit `i` is event `base + i`.
    base: u32,
    reads: Vec<u64>,
    writes: Vec<u64>,
    /// Events whose outcome depends on the timing of other threads (in position order).
    fragile: Vec<u32>,
}

impl ThreadMarks {
    #[inline]
    fn set(bits: &mut Vec<u64>, base: u32, pos: u32) {
        let Some(i) = pos.checked_sub(base) else {
            return;
        };
        let (word, bit) = ((i / 64) as usize, i % 64);
        if word >= bits.len() {
            bits.resize(word + 1, 0);
        }
        bits[word] |= 1 << bit;
    }

    /// Whether any bit of `bits` in positions `from..to` is set.
    fn any(bits: &[u64], base: u32, from: u32, to: u32) -> bool {
        let from = from.saturating_sub(base);
        let to = to.saturating_sub(base).min(bits.len() as u32 * 64);
        if from >= to {
            return false;
        }
        let (first, last) = ((from / 64) as usize, ((to - 1) / 64) as usize);
        (first..=last).any(|w| {
            let mut word = bits[w];
            if w == first {
                word &= u64::MAX << (from % 64);
            }
            if w == last && to % 64 != 0 {
                word &= u64::MAX >> (64 - to % 64);
            }
            word != 0
        })
    }
}

impl AccessMarks {
    /// Marks for `threads` threads, each starting at position `start[t]` (0 when `start` is
    /// empty).
    pub fn new(threads: usize, start: &[u32]) -> Self {
        AccessMarks {
            threads: (0..threads)
                .map(|t| ThreadMarks {
                    base: start.get(t).copied().unwrap_or(0),
                    ..ThreadMarks::default()
                })
                .collect(),
        }
    }

    /// Notes what the event does to memory (or what its outcome depended on).
    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent) {
        let (read, write, fragile) = match ev.op {
            Op::Read { .. } => (true, false, false),
            Op::Write { .. } | Op::Alloc { .. } | Op::Free { .. } => (false, true, false),
            Op::Atomic(a) => (a.loads, a.stores, false),
            Op::LockTry {
                acquired: false, ..
            }
            | Op::LockFailed { .. }
            | Op::SemTry {
                acquired: false, ..
            }
            | Op::SemWaitEnd {
                acquired: false, ..
            } => (false, false, true),
            Op::CondWaitEnd { timed_out, .. } => (false, false, timed_out),
            _ => return,
        };
        let Some(m) = self.threads.get_mut(ev.thread as usize) else {
            return;
        };
        if read {
            ThreadMarks::set(&mut m.reads, m.base, ev.pos);
        }
        if write {
            ThreadMarks::set(&mut m.writes, m.base, ev.pos);
        }
        if fragile {
            m.fragile.push(ev.pos);
        }
    }

    /// Hands the marks so far over and starts afresh where each thread has reached (`seen`).
    pub fn cut(&mut self, seen: &[u32]) -> AccessMarks {
        let fresh = AccessMarks::new(self.threads.len(), seen);
        std::mem::replace(self, fresh)
    }

    /// Whether thread `t` reads memory at a position in `from..to`.
    pub fn reads_in(&self, t: u32, from: u32, to: u32) -> bool {
        self.threads
            .get(t as usize)
            .is_some_and(|m| ThreadMarks::any(&m.reads, m.base, from, to))
    }

    /// Whether thread `t` writes memory at a position in `from..to`.
    pub fn writes_in(&self, t: u32, from: u32, to: u32) -> bool {
        self.threads
            .get(t as usize)
            .is_some_and(|m| ThreadMarks::any(&m.writes, m.base, from, to))
    }

    /// Whether thread `t` has, in `from..to`, an event whose outcome depended on other
    /// threads' timing.
    pub fn fragile_in(&self, t: u32, from: u32, to: u32) -> bool {
        self.threads.get(t as usize).is_some_and(|m| {
            let i = m.fragile.partition_point(|&p| p < from);
            m.fragile.get(i).is_some_and(|&p| p < to)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_find_the_bits_set_in_them_and_no_others() {
        let mut bits = Vec::new();
        for p in [3u32, 64, 200] {
            ThreadMarks::set(&mut bits, 0, p);
        }
        assert!(ThreadMarks::any(&bits, 0, 0, 4));
        assert!(!ThreadMarks::any(&bits, 0, 0, 3));
        assert!(!ThreadMarks::any(&bits, 0, 4, 64));
        assert!(ThreadMarks::any(&bits, 0, 4, 65));
        assert!(!ThreadMarks::any(&bits, 0, 65, 200));
        assert!(ThreadMarks::any(&bits, 0, 65, 201));
        assert!(!ThreadMarks::any(&bits, 0, 201, 10_000));
        // A base: positions before it were in an earlier segment.
        let mut based = Vec::new();
        ThreadMarks::set(&mut based, 100, 130);
        ThreadMarks::set(&mut based, 100, 50);
        assert!(ThreadMarks::any(&based, 100, 0, 131));
        assert!(!ThreadMarks::any(&based, 100, 0, 130));
    }
}
