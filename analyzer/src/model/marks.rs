//! Which events of a segment read or write memory, per thread: one bit per event for each, and
//! the positions of the few events whose outcome depends on what other threads did at that
//! moment (a failed trylock or semaphore try, a timed-out wait). Kept only where a race
//! analysis runs; two bits per event of the segment, dropped with it.
//!
//! The sync-preserving closure never needs them: it keeps the trace order of what it
//! contains, and trace order keeps every read's writer. A reordering that reverses critical
//! sections (`analyses/sync_reversal`) moves some events ahead of others, and it may do so
//! only where no read can see another write: these marks say where reads and writes are, and,
//! for the first [`KEPT_SPANS`] accesses of a segment, which bytes each touches, so that a
//! section that writes other memory than the events it overtakes read may still move.

use crate::stream::{Op, StreamEvent};

/// Accesses of a segment whose bytes are kept (24 bytes each); past it only the marks are,
/// and any read may see any write.
pub const KEPT_SPANS: usize = 1 << 18;

/// The marks of one segment (or a whole trace).
#[derive(Clone, Debug, Default)]
pub struct AccessMarks {
    threads: Vec<ThreadMarks>,
    /// Spans kept so far.
    kept: usize,
    /// More than [`KEPT_SPANS`] accesses: the spans were dropped.
    spans_dropped: bool,
}

/// The bytes one access touches: `lo..hi`.
#[derive(Clone, Copy, Debug)]
struct Span {
    pos: u32,
    write: bool,
    lo: u64,
    hi: u64,
}

#[derive(Clone, Debug, Default)]
struct ThreadMarks {
    /// Position of the thread's first event in this segment: bit `i` is event `base + i`.
    base: u32,
    reads: Vec<u64>,
    writes: Vec<u64>,
    /// Events whose outcome depends on the timing of other threads (in position order).
    fragile: Vec<u32>,
    /// The bytes of its accesses, in position order (empty once dropped).
    spans: Vec<Span>,
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
            kept: 0,
            spans_dropped: false,
        }
    }

    /// Notes what the event does to memory (or what its outcome depended on).
    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent) {
        let whole = |addr: u64, size: u64| (addr, addr.saturating_add(size.max(1)));
        let (read, write, fragile, bytes) = match ev.op {
            Op::Read { addr, size, .. } => (true, false, false, whole(addr, size.into())),
            Op::Write { addr, size, .. } => (false, true, false, whole(addr, size.into())),
            Op::Alloc { addr, size, .. } => (false, true, false, whole(addr, size)),
            // The block's size is the heap model's: any byte, to be safe.
            Op::Free { .. } => (false, true, false, (0, u64::MAX)),
            Op::Atomic(a) => (a.loads, a.stores, false, whole(a.addr, a.size.into())),
            Op::LockTry {
                acquired: false, ..
            }
            | Op::LockFailed { .. }
            | Op::SemTry {
                acquired: false, ..
            }
            | Op::SemWaitEnd {
                acquired: false, ..
            } => (false, false, true, (0, 0)),
            Op::CondWaitEnd { timed_out, .. } => (false, false, timed_out, (0, 0)),
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
        if (read || write) && !self.spans_dropped {
            let (lo, hi) = bytes;
            // A read-modify-write atomic is one span of each.
            for w in [false, true] {
                if (w && write) || (!w && read) {
                    m.spans.push(Span {
                        pos: ev.pos,
                        write: w,
                        lo,
                        hi,
                    });
                    self.kept += 1;
                }
            }
            if self.kept > KEPT_SPANS {
                self.spans_dropped = true;
                for t in &mut self.threads {
                    t.spans = Vec::new();
                }
            }
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

    /// Whether a read of `readers` (each `(thread, from, to)`: positions `from..to`) may touch
    /// bytes that thread `writer` writes in `from..to`: by the bytes each touches while they
    /// are kept, else whether there are reads and writes at all.
    pub fn may_read_written(&self, readers: &[(u32, u32, u32)], writer: (u32, u32, u32)) -> bool {
        let (w, w_from, w_to) = writer;
        if !self.writes_in(w, w_from, w_to)
            || !readers.iter().any(|&(t, f, e)| self.reads_in(t, f, e))
        {
            return false;
        }
        if self.spans_dropped {
            return true;
        }
        let spans = |t: u32, from: u32, to: u32, write: bool| {
            let s = self
                .threads
                .get(t as usize)
                .map_or(&[][..], |m| &m.spans[..]);
            let i = s.partition_point(|x| x.pos < from);
            s[i..]
                .iter()
                .take_while(move |x| x.pos < to)
                .filter(move |x| x.write == write)
                .map(|x| (x.lo, x.hi))
        };
        // Sweep both sets of spans by start: one overlaps the other's furthest end so far.
        let mut all: Vec<(u64, u64, bool)> = spans(w, w_from, w_to, true)
            .map(|(lo, hi)| (lo, hi, true))
            .collect();
        for &(t, f, e) in readers {
            all.extend(spans(t, f, e, false).map(|(lo, hi)| (lo, hi, false)));
        }
        all.sort_unstable_by_key(|&(lo, _, _)| lo);
        let (mut read_end, mut write_end) = (0u64, 0u64);
        for (lo, hi, write) in all {
            if (write && lo < read_end) || (!write && lo < write_end) {
                return true;
            }
            if write {
                write_end = write_end.max(hi);
            } else {
                read_end = read_end.max(hi);
            }
        }
        false
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

    fn access(thread: u32, pos: u32, write: bool, addr: u64) -> StreamEvent {
        let site = 0;
        let op = if write {
            Op::Write {
                addr,
                size: 4,
                site,
            }
        } else {
            Op::Read {
                addr,
                size: 4,
                site,
            }
        };
        StreamEvent {
            thread,
            pos,
            seq: 0,
            op,
        }
    }

    #[test]
    fn reads_see_writes_only_of_the_bytes_they_touch() {
        let mut m = AccessMarks::new(2, &[]);
        m.handle(&access(0, 0, false, 0x100)); // thread 0 reads 0x100..0x104
        m.handle(&access(0, 1, false, 0x200));
        m.handle(&access(1, 0, true, 0x104)); // thread 1 writes next to it
        m.handle(&access(1, 1, true, 0x202)); // and over the second read
        assert!(!m.may_read_written(&[(0, 0, 1)], (1, 0, 2)));
        assert!(m.may_read_written(&[(0, 0, 2)], (1, 0, 2)));
        assert!(!m.may_read_written(&[(0, 0, 2)], (1, 0, 1)));
        assert!(
            !m.may_read_written(&[(1, 0, 2)], (0, 0, 2)),
            "writes of thread 0: none"
        );
        // Past the kept spans, any read may see any write.
        m.spans_dropped = true;
        assert!(m.may_read_written(&[(0, 0, 1)], (1, 0, 2)));
    }

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
