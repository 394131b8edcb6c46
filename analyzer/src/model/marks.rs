//! Which events of a segment read or write memory, per thread: one bit per event for each, and
//! the positions of the few events whose outcome depends on what other threads did at that
//! moment (a failed trylock or semaphore try, a timed-out wait). Two bits per event of the
//! segment, dropped with it.
//!
//! The sync-preserving closure never needs them: it keeps the trace order of what it
//! contains, and trace order keeps every read's writer. A reordering that reverses critical
//! sections (`analyses/sync_reversal`) moves some events ahead of others, and it may do so
//! only where no read can see another write: these marks say where reads and writes are, and,
//! for the first [`KEPT_SPANS`] accesses of a segment, which bytes each touches, so that a
//! section that writes other memory than the events it overtakes read may still move.
//!
//! That analysis asks for them only when a candidate pair is left after the other race rules,
//! which most segments never have. So a walk that can read its trace again
//! ([`ModelPass::with_marks_from`](super::ModelPass::with_marks_from), what `foresight analyze`
//! does with a file) keeps none: a segment's [`SegmentMarks`] remember where the segment starts
//! and ends in each thread, and the first question reads those threads' events again
//! ([`MarksSource`]) — no cost per event of the walk, one more read of the threads for a segment
//! that has such a candidate. A walk over events it cannot read twice (a decoded trace, an
//! iterator) keeps them as it goes, with the same result.

use std::sync::{Arc, OnceLock};

use foresight_trace::event::{AtomicOp, EventKind, WaitOutcome};
use foresight_trace::ThreadId;

use super::Starts;
use crate::stream::{Op, StreamEvent};

/// Accesses of a segment whose bytes are kept (24 bytes each); past it only the marks are,
/// and any read may see any write.
pub const KEPT_SPANS: usize = 1 << 18;

/// The marks of one segment (or a whole trace).
#[derive(Clone, Debug, Default)]
pub(crate) struct AccessMarks {
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
    /// Read again, the thread had fewer events than the walk saw (the file shrank): every
    /// range is taken to hold such an event, so that no reordering moves what is unknown.
    cut_short: bool,
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
    /// Marks for `threads` threads, thread `t` starting at position `start(t)`.
    pub(crate) fn new(threads: usize, start: impl Fn(usize) -> u32) -> Self {
        AccessMarks {
            threads: (0..threads)
                .map(|t| ThreadMarks {
                    base: start(t),
                    ..ThreadMarks::default()
                })
                .collect(),
            kept: 0,
            spans_dropped: false,
        }
    }

    /// No table of threads was made yet (the marks of a segment with no event in them).
    #[inline]
    pub(crate) fn unmade(&self) -> bool {
        self.threads.is_empty()
    }

    /// Notes what the event does to memory (or what its outcome depended on).
    #[inline]
    pub(crate) fn handle(&mut self, ev: &StreamEvent) {
        if let Some(mark) = Mark::of_op(&ev.op) {
            self.mark(ev.thread, ev.pos, mark);
        }
    }

    fn mark(&mut self, thread: u32, pos: u32, mark: Mark) {
        let Some(m) = self.threads.get_mut(thread as usize) else {
            return;
        };
        if mark.read {
            ThreadMarks::set(&mut m.reads, m.base, pos);
        }
        if mark.write {
            ThreadMarks::set(&mut m.writes, m.base, pos);
        }
        if mark.fragile {
            m.fragile.push(pos);
        }
        if (mark.read || mark.write) && !self.spans_dropped {
            let (lo, hi) = mark.bytes;
            // A read-modify-write atomic is one span of each.
            for w in [false, true] {
                if (w && mark.write) || (!w && mark.read) {
                    m.spans.push(Span {
                        pos,
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
    pub(crate) fn cut(&mut self, seen: &[u32]) -> AccessMarks {
        let fresh = AccessMarks::new(self.threads.len(), |t| seen.get(t).copied().unwrap_or(0));
        std::mem::replace(self, fresh)
    }

    /// Whether thread `t` reads memory at a position in `from..to`.
    pub(crate) fn reads_in(&self, t: u32, from: u32, to: u32) -> bool {
        self.threads
            .get(t as usize)
            .is_some_and(|m| ThreadMarks::any(&m.reads, m.base, from, to))
    }

    /// Whether thread `t` writes memory at a position in `from..to`.
    pub(crate) fn writes_in(&self, t: u32, from: u32, to: u32) -> bool {
        self.threads
            .get(t as usize)
            .is_some_and(|m| ThreadMarks::any(&m.writes, m.base, from, to))
    }

    /// Whether a read of `readers` (each `(thread, from, to)`: positions `from..to`) may touch
    /// bytes that thread `writer` writes in `from..to`: by the bytes each touches while they
    /// are kept, else whether there are reads and writes at all.
    pub(crate) fn may_read_written(
        &self,
        readers: &[(u32, u32, u32)],
        writer: (u32, u32, u32),
    ) -> bool {
        let (w, w_from, w_to) = writer;
        if !self.writes_in(w, w_from, w_to)
            || !readers.iter().any(|&(t, f, e)| self.reads_in(t, f, e))
        {
            return false;
        }
        let cut_short = |t: u32| self.threads.get(t as usize).is_some_and(|m| m.cut_short);
        if self.spans_dropped || cut_short(w) || readers.iter().any(|&(t, _, _)| cut_short(t)) {
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
    pub(crate) fn fragile_in(&self, t: u32, from: u32, to: u32) -> bool {
        self.threads.get(t as usize).is_some_and(|m| {
            if m.cut_short {
                return true;
            }
            let i = m.fragile.partition_point(|&p| p < from);
            m.fragile.get(i).is_some_and(|&p| p < to)
        })
    }
}

/// What one event does that the marks keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mark {
    read: bool,
    write: bool,
    fragile: bool,
    /// The bytes an access touches, `lo..hi` (a free: any byte, as the block's size is the
    /// heap model's).
    bytes: (u64, u64),
}

impl Mark {
    const fn new(read: bool, write: bool, fragile: bool) -> Option<Mark> {
        Some(Mark {
            read,
            write,
            fragile,
            bytes: (0, 0),
        })
    }

    fn access(read: bool, write: bool, addr: u64, size: u64) -> Option<Mark> {
        Some(Mark {
            read,
            write,
            fragile: false,
            bytes: (addr, addr.saturating_add(size.max(1))),
        })
    }

    const fn free() -> Option<Mark> {
        Some(Mark {
            read: false,
            write: true,
            fragile: false,
            bytes: (0, u64::MAX),
        })
    }

    /// The mark of a converted event (none for most).
    #[inline]
    fn of_op(op: &Op) -> Option<Mark> {
        match *op {
            Op::Read { addr, size, .. } => Mark::access(true, false, addr, size.into()),
            Op::Write { addr, size, .. } => Mark::access(false, true, addr, size.into()),
            Op::Alloc { addr, size, .. } => Mark::access(false, true, addr, size),
            Op::Free { .. } => Mark::free(),
            Op::Atomic(a) => Mark::access(a.loads, a.stores, a.addr, a.size.into()),
            Op::LockTry {
                acquired: false, ..
            }
            | Op::LockFailed { .. }
            | Op::SemTry {
                acquired: false, ..
            }
            | Op::SemWaitEnd {
                acquired: false, ..
            } => Mark::new(false, false, true),
            Op::CondWaitEnd { timed_out, .. } => Mark::new(false, false, timed_out),
            _ => None,
        }
    }

    /// The mark of a wire event read again: the same as that of its conversion
    /// (`stream.rs`'s `convert`), made without the walk's thread index.
    fn of_kind(kind: &EventKind) -> Option<Mark> {
        match *kind {
            EventKind::Read { addr, size, .. } => Mark::access(true, false, addr, size.into()),
            EventKind::Write { addr, size, .. } => Mark::access(false, true, addr, size.into()),
            EventKind::Alloc { addr, size, .. } => Mark::access(false, true, addr, size),
            EventKind::Free { .. } => Mark::free(),
            EventKind::Atomic { op, addr, size, .. } => Mark::access(
                !matches!(op, AtomicOp::Store),
                matches!(op, AtomicOp::Store | AtomicOp::Rmw | AtomicOp::CasSuccess),
                addr,
                size.into(),
            ),
            EventKind::LockTry {
                acquired: false, ..
            }
            | EventKind::LockFailed { .. }
            | EventKind::SemTry {
                acquired: false, ..
            }
            | EventKind::SemWaitEnd {
                acquired: false, ..
            } => Mark::new(false, false, true),
            EventKind::CondWaitEnd { outcome, .. } => {
                Mark::new(false, false, outcome == WaitOutcome::TimedOut)
            }
            _ => None,
        }
    }
}

/// Reads a trace's threads again for the marks of one segment: thread `threads[t]` (dense
/// thread `t` of the walk) from position `start[t]` (0 when `start` is empty) up to `end[t]`
/// (excluded), as the walk read them.
pub trait MarksSource: Send + Sync {
    /// The events of thread `id` in program order, as the walk's merged read gives them.
    fn thread_events(&self, id: ThreadId) -> Box<dyn Iterator<Item = EventKind> + '_>;
}

/// A trace file read again one thread at a time.
impl MarksSource for foresight_trace::TraceStream {
    fn thread_events(&self, id: ThreadId) -> Box<dyn Iterator<Item = EventKind> + '_> {
        Box::new(foresight_trace::TraceStream::thread_events(self, id).map(|e| e.kind))
    }
}

/// A segment's marks: kept by the walk, or read again at the first question.
#[derive(Default)]
pub(crate) struct SegmentMarks {
    marks: OnceLock<AccessMarks>,
    later: Option<Later>,
}

/// Where a segment's marks are read from when they are first needed.
struct Later {
    source: Arc<dyn MarksSource>,
    /// The walk's dense threads (the table every segment's run shares).
    threads: crate::model::ThreadIds,
    /// Per dense thread, where the segment starts and ends: the tables the segment's run
    /// shares.
    start: Arc<Starts>,
    end: Arc<Vec<u32>>,
}

impl std::fmt::Debug for SegmentMarks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentMarks")
            .field("marks", &self.marks.get())
            .field("read_again", &self.later.is_some())
            .finish()
    }
}

impl SegmentMarks {
    /// Marks the walk kept.
    pub(crate) fn kept(marks: AccessMarks) -> Self {
        SegmentMarks {
            marks: OnceLock::from(marks),
            later: None,
        }
    }

    /// The marks of the segment `start..end` (per dense thread of `threads`), read from
    /// `source` when first asked for.
    pub(crate) fn read_later(
        source: Arc<dyn MarksSource>,
        threads: crate::model::ThreadIds,
        start: Arc<Starts>,
        end: Arc<Vec<u32>>,
    ) -> Self {
        SegmentMarks {
            marks: OnceLock::new(),
            later: Some(Later {
                source,
                threads,
                start,
                end,
            }),
        }
    }

    /// The segment's marks, read now if the walk did not keep them.
    pub(crate) fn get(&self) -> &AccessMarks {
        self.marks.get_or_init(|| match &self.later {
            Some(later) => later.read(),
            None => AccessMarks::default(),
        })
    }
}

impl Later {
    fn read(&self) -> AccessMarks {
        let end = |t: usize| self.end.get(t).copied().unwrap_or(0);
        let start = |t: usize| self.start.of(t as u32, end(t));
        let mut marks = AccessMarks::new(self.threads.len(), start);
        for (t, id) in self.threads.iter().enumerate() {
            let from = start(t);
            let to = end(t);
            if from >= to {
                continue;
            }
            let mut read = 0;
            let events = self.source.thread_events(id);
            for (pos, kind) in (0u32..to).zip(events) {
                read = pos + 1;
                if pos < from {
                    continue;
                }
                if let Some(mark) = Mark::of_kind(&kind) {
                    marks.mark(t as u32, pos, mark);
                }
            }
            if read < to {
                marks.threads[t].cut_short = true;
            }
        }
        marks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{BarrierGenerations, Stream};

    /// The walk's thread table for threads `ids`, unnamed.
    fn unnamed(ids: &[ThreadId]) -> crate::model::ThreadIds {
        let threads: Vec<crate::model::ThreadModel> = ids
            .iter()
            .map(|&id| crate::model::ThreadModel { id })
            .collect();
        crate::model::ThreadIds::of(&threads)
    }
    use foresight_trace::event::{LockMode, MemoryOrder};

    /// Every kind the marks keep, and some they do not.
    fn kinds() -> Vec<EventKind> {
        let (addr, size, site, lock) = (0x1000, 8, 1, 2);
        let mut kinds = vec![
            EventKind::Read { addr, size, site },
            EventKind::Write { addr, size, site },
            EventKind::Alloc {
                addr,
                size: 64,
                site,
            },
            EventKind::Free { addr, site },
            EventKind::LockFailed { lock, errno: 16 },
            EventKind::SemTry {
                sem: 3,
                site,
                acquired: false,
            },
            EventKind::SemTry {
                sem: 3,
                site,
                acquired: true,
            },
            EventKind::SemWaitEnd {
                sem: 3,
                acquired: false,
            },
            EventKind::SemWaitEnd {
                sem: 3,
                acquired: true,
            },
            EventKind::LockRequest {
                lock,
                mode: LockMode::Exclusive,
                site,
            },
            EventKind::ThreadStart,
        ];
        for acquired in [false, true] {
            for mode in [LockMode::Exclusive, LockMode::Shared] {
                kinds.push(EventKind::LockTry {
                    lock,
                    mode,
                    site,
                    acquired,
                });
            }
        }
        for outcome in [WaitOutcome::Woken, WaitOutcome::TimedOut] {
            kinds.push(EventKind::CondWaitEnd {
                cond: 4,
                mutex: lock,
                outcome,
            });
        }
        for op in [
            AtomicOp::Load,
            AtomicOp::Store,
            AtomicOp::Rmw,
            AtomicOp::CasSuccess,
            AtomicOp::CasFailure,
        ] {
            kinds.push(EventKind::Atomic {
                op,
                addr,
                size,
                order: MemoryOrder::SeqCst,
                site,
            });
        }
        kinds
    }

    #[test]
    fn a_wire_event_read_again_is_marked_as_its_conversion_is() {
        let stream = Stream::new([7], BarrierGenerations::default());
        for kind in kinds() {
            let op = stream.convert(0, 1, kind);
            assert_eq!(Mark::of_kind(&kind), Mark::of_op(&op), "{kind:?}");
        }
    }

    /// Threads' events in memory, read again as a file would be.
    struct Events(Vec<(ThreadId, Vec<EventKind>)>);

    impl MarksSource for Events {
        fn thread_events(&self, id: ThreadId) -> Box<dyn Iterator<Item = EventKind> + '_> {
            let events = self.0.iter().find(|(t, _)| *t == id).map(|(_, e)| e);
            Box::new(events.into_iter().flatten().copied())
        }
    }

    #[test]
    fn marks_read_again_are_those_the_walk_keeps_for_the_same_segment() {
        let kinds = kinds();
        let threads = vec![
            (10, kinds.clone()),
            (11, kinds.iter().rev().copied().collect()),
        ];
        let stream = Stream::new([10, 11], BarrierGenerations::default());
        // The segment: thread 0 from 3 to 20, thread 1 from 5 to its end.
        let (start, end) = (vec![3u32, 5], vec![20u32, kinds.len() as u32]);
        let mut kept = AccessMarks::new(2, |t| start[t]);
        for (t, (_, events)) in threads.iter().enumerate() {
            for (pos, &kind) in events.iter().enumerate() {
                let pos = pos as u32;
                if pos >= start[t] && pos < end[t] {
                    let op = stream.convert(t as u32, pos, kind);
                    kept.handle(&StreamEvent {
                        thread: t as u32,
                        pos,
                        seq: 0,
                        op,
                    });
                }
            }
        }
        let later = SegmentMarks::read_later(
            Arc::new(Events(threads)),
            unnamed(&[10, 11]),
            Arc::new(Starts::of_segment(vec![(1, 5), (0, 3)])),
            end.into(),
        );
        let read = later.get();
        for t in 0..2 {
            for from in 0..kinds.len() as u32 + 2 {
                for to in from..kinds.len() as u32 + 2 {
                    assert_eq!(read.reads_in(t, from, to), kept.reads_in(t, from, to));
                    assert_eq!(read.writes_in(t, from, to), kept.writes_in(t, from, to));
                    assert_eq!(read.fragile_in(t, from, to), kept.fragile_in(t, from, to));
                }
            }
        }
        assert!(read.reads_in(0, 0, 20) && read.fragile_in(1, 0, 40));
    }

    #[test]
    fn a_thread_shorter_when_read_again_moves_nothing() {
        let source = Events(vec![(1, vec![EventKind::ThreadStart; 4])]);
        let marks = SegmentMarks::read_later(
            Arc::new(source),
            unnamed(&[1]),
            Arc::default(),
            vec![10].into(),
        );
        assert!(marks.get().fragile_in(0, 0, 1));
    }

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
        let mut m = AccessMarks::new(2, |_| 0);
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
