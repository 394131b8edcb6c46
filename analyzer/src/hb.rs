//! Happens-before over the synchronisation that can never be reordered: thread create/join,
//! barrier generations, `pthread_once`, semaphores, condition hand-offs, pipe, socketpair and
//! eventfd hand-offs (a write → the read that took its bytes, `handoffs.rs`), user annotations,
//! release/acquire atomics — and, as the analysis that uses the clocks chooses ([`EdgeKinds`]),
//! reads-from of memory accesses and lock release → acquire.
//!
//! The deadlock analysis ([`EdgeKinds::DEADLOCK`]) keeps reads-from (a read must keep its
//! writer in a reordering) and leaves lock release → acquire out: critical sections may be
//! reordered (that is what makes a deadlock predictable), and the sync-preserving closure
//! (`closure.rs`) handles locks by its own rule. A happens-before race analysis wants the
//! opposite, `EdgeKinds::SYNC | EdgeKinds::LOCK`: lock edges in, and reads-from out (a
//! reads-from edge would order exactly the write → read pairs that race).
//!
//! Where matching is ambiguous (which post a semaphore wait consumed, which signal woke a
//! condition wait) every earlier sender is joined in. That over-approximates the order, which
//! only ever removes predictions: it keeps them sound.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use crate::handoffs::HandoffQueues;
use crate::last_writers::LastWriters;
use crate::stream::{Mode, Op, Pass, StreamEvent};
use crate::vector_clock::{Slots, VectorClock};

/// The clocks of one trace, stored sparsely: a thread's clock changes by a join only at a
/// *receive* event (a join, a barrier departure, a once skip, a semaphore or condition wake-up,
/// a happens-after, an acquire load), so only those are kept. Between two receives a thread's
/// clock differs only in its own entry, which is the event's position + 1.
#[derive(Debug, Default)]
pub struct HappensBefore {
    /// The clock at each receive event.
    receives: StoredClocks,
    /// Which thread each clock entry speaks of (`vector_clock.rs`).
    slots: Arc<Slots>,
    /// False when the clocks outgrew their memory budget and were abandoned: then nothing may
    /// be predicted from this trace (missing edges would make predictions unsound).
    pub complete: bool,
    /// Writes whose memory the reads-from table had no room for (`last_writers.rs`), so far:
    /// a read of that memory is not kept after its writer by predictions.
    pub writes_not_followed: u64,
}

/// A stored receive: the event's position and where its clock sits in the buffer of encoded
/// clocks ([`put_clock`]).
#[derive(Clone, Copy, Debug)]
struct Receive {
    pos: u32,
    /// Byte offset of its encoded clock.
    start: u32,
}

/// A thread's receives are stored whole at least this often, so that reading one decodes at
/// most this many clocks.
const WHOLE_EVERY: u32 = 8;

impl Receive {
    /// Whether its clock is stored as itself rather than as differences from the thread's
    /// receive before it (the low bit of the encoding's first varint, [`put_clock`]).
    #[inline]
    fn whole(self, buf: &[u8]) -> bool {
        buf.get(self.start as usize).is_some_and(|b| b & 1 != 0)
    }
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn get_varint(buf: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    while let Some(&b) = buf.get(*at) {
        *at += 1;
        if shift < 64 {
            v |= u64::from(b & 0x7f) << shift;
        }
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    v
}

/// Appends `clock`: its number of entries and whether it is whole (`2 * len + whole`), then
/// its entries as differences from `base` (the thread's clock at its receive before, or
/// nothing for a clock stored whole), each a zigzag varint. A thread's clock changes in few
/// entries and by little between two of its receives, while its raw entries are large
/// (offsets that grow over every holder of a slot): at 10^5 threads a segment's clocks take
/// 0.9 MB where their entries took 2.4.
fn put_clock(buf: &mut Vec<u8>, clock: &[u32], base: &[u32], whole: bool) {
    // At most 5 bytes an entry and 10 for the length.
    grow_by_quarters(buf, 5 * clock.len() + 10);
    put_varint(buf, 2 * clock.len() as u64 + u64::from(whole));
    for (k, &v) in clock.iter().enumerate() {
        let d = i64::from(v) - i64::from(base.get(k).copied().unwrap_or(0));
        put_varint(buf, ((d << 1) ^ (d >> 63)) as u64);
    }
}

/// Applies the clock of `r` (stored by [`put_clock`]) to `out`, which holds its base.
fn apply_clock(buf: &[u8], r: Receive, out: &mut Vec<u32>) {
    let mut at = r.start as usize;
    let head = get_varint(buf, &mut at);
    // A clock has at most an entry per thread (a `u32` index).
    let len = usize::try_from(head / 2)
        .unwrap_or(usize::MAX)
        .min(u32::MAX as usize);
    if head & 1 != 0 {
        out.clear();
    }
    out.resize(len.max(out.len()), 0);
    for v in out.iter_mut().take(len) {
        let z = get_varint(buf, &mut at);
        let d = (z >> 1) as i64 ^ -((z & 1) as i64);
        *v = (i64::from(*v) + d) as u32;
    }
    out.truncate(len);
}

/// The clock of receive `i` of `list` into `out`: from the last one stored whole at or before
/// it, the differences after it applied in turn.
fn decode_clock(buf: &[u8], list: &[Receive], i: usize, out: &mut Vec<u32>) {
    let first = list[..=i].iter().rposition(|r| r.whole(buf)).unwrap_or(0);
    out.clear();
    for &r in &list[first..=i] {
        apply_clock(buf, r, out);
    }
}

/// Room for `more` items in a segment's buffer of receives or clocks, grown by a quarter
/// rather than doubled: the buffers are at their largest when the segment is cut, and the
/// walk's heap with them (a doubled buffer leaves up to half of itself unused: at 10^5
/// threads a segment's clocks took 0.95 MB of a buffer doubled to 2).
fn grow_by_quarters<T>(buf: &mut Vec<T>, more: usize) {
    if buf.capacity() - buf.len() < more {
        buf.reserve_exact(more.max(buf.len() / 4).max(1024));
    }
}

/// Where a thread's receives are: `len` receives of the closed ones from `start`.
#[derive(Clone, Copy, Debug)]
struct ReceiveList {
    start: u32,
    len: u32,
}

/// The clocks stored at the receive events of a segment (or of the whole walk), for the
/// analyses after it. Their encodings share one buffer rather than each having an allocation
/// of its own (a thread-per-request program stores two or three small clocks per request, and
/// for those the allocation and the `Vec` header cost more than the entries), and so do the
/// lists of receives, one after another. A thread with receives in the segment costs 12 bytes
/// (who and where), a thread without none: no table of every thread of the trace.
#[derive(Debug, Default)]
struct StoredClocks {
    /// The threads with receives, by thread, each with where its list is in `receives`.
    threads: Vec<(u32, ReceiveList)>,
    /// Every thread's receives, by position, one list after another.
    receives: Vec<Receive>,
    /// The encoded clocks ([`put_clock`]), one after another.
    entries: Vec<u8>,
}

impl StoredClocks {
    /// The receives of `thread`, by position.
    #[inline]
    fn list(&self, thread: usize) -> &[Receive] {
        let Some(&(first, _)) = self.threads.first() else {
            return &[];
        };
        // Threads with receives are mostly consecutive: try where it would be then.
        let guess = (thread as u32).wrapping_sub(first) as usize;
        let found = match self.threads.get(guess) {
            Some(&(t, r)) if t as usize == thread => Some(r),
            _ => self
                .threads
                .binary_search_by_key(&(thread as u32), |&(t, _)| t)
                .ok()
                .map(|i| self.threads[i].1),
        };
        found.map_or(&[], |r| {
            &self.receives[r.start as usize..(r.start + r.len) as usize]
        })
    }

    /// The clock of the last receive of `thread` at or before `pos`, decoded into `out`.
    fn before<'a>(&self, thread: usize, pos: u32, out: &'a mut DecodedClock) -> Option<&'a [u32]> {
        let list = self.list(thread);
        let i = list.partition_point(|r| r.pos <= pos).checked_sub(1)?;
        self.decode(thread, list, i, out);
        Some(&out.clock)
    }

    /// Receive `i` of `thread`: its position, and its clock decoded into `out`.
    fn receive<'a>(
        &self,
        thread: usize,
        i: usize,
        out: &'a mut DecodedClock,
    ) -> Option<(u32, &'a [u32])> {
        let list = self.list(thread);
        let r = list.get(i)?;
        self.decode(thread, list, i, out);
        Some((r.pos, &out.clock))
    }

    fn decode(&self, thread: usize, list: &[Receive], i: usize, out: &mut DecodedClock) {
        let tag = self.entries.as_ptr() as usize;
        decode_cached(&self.entries, (tag, thread), list, i, out);
    }
}

/// Receive `i` of a list (`key`: whose buffer, and which thread's list) into `out`: nothing
/// to do when `out` holds it already (a write many threads read), only its differences when
/// `out` holds the receive before it (the closure walks a thread's receives in order).
fn decode_cached(
    buf: &[u8],
    key: (usize, usize),
    list: &[Receive],
    i: usize,
    out: &mut DecodedClock,
) {
    match out.at {
        Some((k, j)) if k == key && j == i => {}
        Some((k, j)) if k == key && j + 1 == i && !list[i].whole(buf) => {
            apply_clock(buf, list[i], &mut out.clock)
        }
        _ => decode_clock(buf, list, i, &mut out.clock),
    }
    out.at = Some((key, i));
}

/// A stored clock read back ([`HappensBefore::receive`], [`HappensBefore::receive_before`]),
/// with which receive it is: reading the next receive of the same thread then decodes only
/// what changed. A caller that asks often keeps one for its questions.
#[derive(Debug, Default)]
pub struct DecodedClock {
    /// (the clocks' buffer, thread), and the receive's index in the thread's list.
    at: Option<((usize, usize), usize)>,
    clock: Vec<u32>,
}

/// A running thread's list of receives, and the clocks its next receive is stored against.
#[derive(Debug, Default)]
struct OpenList {
    thread: u32,
    receives: Vec<Receive>,
    /// The clock of its last receive and, when that one is stored as differences, the clock
    /// those are from (empty when it is whole); not kept (`false`) for a list reopened from
    /// the closed ones.
    last: Vec<u32>,
    base: Vec<u32>,
    kept: bool,
    /// Receives stored as differences since the last one stored whole.
    since_whole: u32,
}

/// The receives the builder stores as it goes: a running thread's list is one of its own,
/// found by the thread's slot (lists follow the threads alive); an exited thread's is moved to
/// one list of every closed one, found by thread in a map of the threads closed in the segment.
/// Nothing is kept per thread ever created: a segment ([`ReceiveStore::take`]) takes what was
/// stored, and the walk goes on with the running threads' lists emptied.
#[derive(Debug, Default)]
struct ReceiveStore {
    /// By slot: the list of `open` its holder adds to, if any.
    open_of_slot: Vec<u32>,
    /// The lists of the threads still receiving, and lists emptied for the next thread.
    open: Vec<OpenList>,
    /// Lists of `open` that no thread uses.
    free: Vec<u32>,
    /// The receives of the threads whose lists were closed, one list after another.
    closed: Vec<Receive>,
    /// Where in `closed` each thread closed in this segment has its receives.
    closed_of: ClosedThreads,
    /// The encoded clocks ([`put_clock`]), one after another.
    entries: Vec<u8>,
    /// Where the clock encoded last starts: the one a second receive of its event grows in
    /// place.
    tail: u32,
    /// Changes when a stored clock does (a grown one, a segment taken): a clock decoded
    /// before ([`DecodedClock`]) is not read again then.
    generation: usize,
    /// What the last segment taken stored (receives, bytes of clocks): the next segment's
    /// buffers are made that large, and a sixteenth more, when it first stores one, rather
    /// than grown from nothing. Grown by a quarter at a time, a buffer is copied a dozen
    /// times a segment, and at each copy the old buffer and the new one are both alive: at
    /// 10^5 threads one such moment was the heap's peak.
    sizes: (usize, usize),
}

/// Where in the closed receives each thread closed in a segment has its own: a vector sorted
/// by thread, and the last few closed out of order, merged into it once there are
/// [`ClosedThreads::RECENT`]. Threads mostly close in the order they were made, and a
/// segment's run takes the sorted vector as it is; a map of the 16,384 threads of a segment
/// at 10^5 requests was 0.43 MB at the segment's end, copied into such a vector there.
#[derive(Debug, Default)]
struct ClosedThreads {
    sorted: Vec<(u32, ReceiveList)>,
    recent: Vec<(u32, ReceiveList)>,
    /// Threads the last segment closed: the room made once this one has closed a few.
    before: usize,
}

impl ClosedThreads {
    const RECENT: usize = 64;

    fn insert(&mut self, thread: u32, list: ReceiveList) {
        if self.recent.is_empty() && self.sorted.last().is_none_or(|&(t, _)| t < thread) {
            let s = &mut self.sorted;
            if s.len() == s.capacity() && s.len() >= Self::RECENT && s.capacity() < self.before {
                s.reserve_exact(first_room(self.before) - s.len());
            }
            s.push((thread, list));
            return;
        }
        self.recent.push((thread, list));
        if self.recent.len() >= Self::RECENT {
            self.merge();
        }
    }

    /// Moves the recent ones into the sorted vector: merged from the back, in place, down to
    /// where the smallest of them goes (they are mostly a little out of order, near the end).
    fn merge(&mut self) {
        if self.recent.is_empty() {
            return;
        }
        self.recent.sort_unstable_by_key(|&(t, _)| t);
        let (old, more) = (self.sorted.len(), self.recent.len());
        self.sorted
            .resize(old + more, (0, ReceiveList { start: 0, len: 0 }));
        let (mut i, mut j) = (old, more);
        let mut k = old + more;
        while j > 0 {
            k -= 1;
            if i > 0 && self.sorted[i - 1].0 > self.recent[j - 1].0 {
                i -= 1;
                self.sorted[k] = self.sorted[i];
            } else {
                j -= 1;
                self.sorted[k] = self.recent[j];
            }
        }
        self.recent.clear();
    }

    fn get(&self, thread: u32) -> Option<ReceiveList> {
        match self.sorted.binary_search_by_key(&thread, |&(t, _)| t) {
            Ok(i) => Some(self.sorted[i].1),
            Err(_) => self
                .recent
                .iter()
                .rev()
                .find(|&&(t, _)| t == thread)
                .map(|&(_, r)| r),
        }
    }

    /// Takes `thread`'s entry out (its list is reopened: an event after its exit, in a damaged
    /// trace).
    fn remove(&mut self, thread: u32) -> Option<ReceiveList> {
        if let Some(i) = self.recent.iter().rposition(|&(t, _)| t == thread) {
            return Some(self.recent.remove(i).1);
        }
        let i = self
            .sorted
            .binary_search_by_key(&thread, |&(t, _)| t)
            .ok()?;
        Some(self.sorted.remove(i).1)
    }

    /// Every thread closed, sorted, with room for `more`; starts afresh.
    fn take(&mut self, more: usize) -> Vec<(u32, ReceiveList)> {
        self.merge();
        self.before = self.sorted.len();
        let mut sorted = std::mem::take(&mut self.sorted);
        sorted.reserve_exact(more);
        sorted
    }
}

/// Room to make for a segment's buffer when it first needs some, the last segment having used
/// `used`.
fn first_room(used: usize) -> usize {
    used + used / 16
}

const NO_LIST: u32 = u32::MAX;

impl ReceiveStore {
    /// The open list of `thread` (in `slot`), if it has one.
    #[inline]
    fn open_of(&self, thread: usize, slot: Option<usize>) -> Option<&OpenList> {
        let &i = self.open_of_slot.get(slot?)?;
        self.open
            .get(i as usize)
            .filter(|l| l.thread as usize == thread)
    }

    /// The receives of `thread` (whose slot is `slot`, if it has one), by position.
    #[inline]
    fn list(&self, thread: usize, slot: Option<usize>) -> &[Receive] {
        if let Some(l) = self.open_of(thread, slot) {
            return &l.receives;
        }
        match self.closed_of.get(thread as u32) {
            Some(r) => &self.closed[r.start as usize..(r.start + r.len) as usize],
            None => &[],
        }
    }

    /// The clock of the last receive of `thread` at or before `pos`: the one kept with its
    /// open list when it is that list's last, else decoded into `out`.
    fn before<'a>(
        &'a self,
        thread: usize,
        slot: Option<usize>,
        pos: u32,
        out: &'a mut DecodedClock,
    ) -> Option<&'a [u32]> {
        let open = self.open_of(thread, slot);
        let list = self.list(thread, slot);
        let i = list.partition_point(|r| r.pos <= pos).checked_sub(1)?;
        match open {
            Some(l) if l.kept && i + 1 == list.len() => Some(&l.last),
            _ => {
                decode_cached(&self.entries, (self.generation, thread), list, i, out);
                Some(&out.clock)
            }
        }
    }

    /// The index in `open` of the list of `thread` (in `slot`) to add to: its open list, made
    /// (from its closed receives, if it has any: an event after its exit, in a damaged trace)
    /// if it has none.
    fn open_list(&mut self, thread: usize, slot: usize) -> Option<usize> {
        if slot >= self.open_of_slot.len() {
            self.open_of_slot.resize(slot + 1, NO_LIST);
        }
        let i = self.open_of_slot[slot];
        if i != NO_LIST {
            if self.open[i as usize].thread as usize == thread {
                return Some(i as usize);
            }
            // The slot's earlier holder did not close its list (no exit in the trace).
            if !self.close_list(i) {
                return None;
            }
        }
        let i = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.open.push(OpenList::default());
                self.open.len() - 1
            }
        };
        let list = &mut self.open[i];
        list.thread = thread as u32;
        list.kept = false;
        if let Some(r) = self.closed_of.remove(thread as u32) {
            let closed = &self.closed[r.start as usize..(r.start + r.len) as usize];
            list.receives.extend_from_slice(closed);
        }
        self.open_of_slot[slot] = i as u32;
        Some(i)
    }

    /// Moves the open list `i` to the closed ones; false when out of offsets (more than 2^32
    /// receives).
    fn close_list(&mut self, i: u32) -> bool {
        let list = &mut self.open[i as usize];
        let start = self.closed.len();
        let Ok(end) = u32::try_from(start + list.receives.len()) else {
            return false;
        };
        if self.closed.capacity() == 0 {
            self.closed.reserve_exact(first_room(self.sizes.0));
        }
        grow_by_quarters(&mut self.closed, list.receives.len());
        self.closed.append(&mut list.receives);
        self.closed_of.insert(
            list.thread,
            ReceiveList {
                start: start as u32,
                len: end - start as u32,
            },
        );
        self.free.push(i);
        true
    }

    /// The thread in `slot` exited: its receives are complete, and move to the closed ones;
    /// its list goes to the next thread. False when out of offsets.
    fn close(&mut self, thread: usize, slot: usize) -> bool {
        let Some(&i) = self.open_of_slot.get(slot) else {
            return true;
        };
        if i == NO_LIST || self.open[i as usize].thread as usize != thread {
            return true;
        }
        self.open_of_slot[slot] = NO_LIST;
        self.close_list(i)
    }

    /// The receives stored so far, every list closed, for a segment; the threads still
    /// receiving keep their lists, emptied.
    fn take(&mut self) -> StoredClocks {
        let mut receives = std::mem::take(&mut self.closed);
        // The closed threads go with the segment: the next one's are noted as its threads
        // exit (they are a segment's threads, not a table kept for the walk).
        let open = self.open.iter().filter(|l| !l.receives.is_empty()).count();
        let mut threads = self.closed_of.take(open);
        // The running threads' receives join the closed ones: room for exactly those, not a
        // doubling of the buffer.
        receives.reserve_exact(self.open.iter().map(|l| l.receives.len()).sum());
        for list in &mut self.open {
            if list.receives.is_empty() {
                continue;
            }
            let start = receives.len() as u32;
            receives.append(&mut list.receives);
            threads.push((
                list.thread,
                ReceiveList {
                    start,
                    len: receives.len() as u32 - start,
                },
            ));
        }
        threads.sort_unstable_by_key(|&(t, _)| t);
        // The buffers grew by doubling: the segment keeps what it uses (cut in place, not
        // copied), and the next segment's grow afresh.
        receives.shrink_to_fit();
        let mut entries = std::mem::take(&mut self.entries);
        entries.shrink_to_fit();
        self.sizes = (receives.len(), entries.len());
        self.tail = NO_LIST;
        self.generation = self.generation.wrapping_add(1);
        StoredClocks {
            threads,
            receives,
            entries,
        }
    }

    /// Encodes the last clock of open list `i` (`list.last`) at the buffer's end, whole or
    /// against `list.base`; returns where it starts, or `None` when out of offsets.
    fn put_last(&mut self, i: usize, whole: bool) -> Option<u32> {
        let list = &self.open[i];
        let start = u32::try_from(self.entries.len()).ok()?;
        if self.entries.capacity() == 0 {
            self.entries.reserve_exact(first_room(self.sizes.1));
        }
        let base: &[u32] = if whole { &[] } else { &list.base };
        put_clock(&mut self.entries, &list.last, base, whole);
        u32::try_from(self.entries.len()).ok()?;
        self.tail = start;
        Some(start)
    }

    /// Stores `clock` with its entry `slot` (the thread's own) set to `raw` as the clock of
    /// receive `pos` of `thread` (a later one than any stored for it). False when the buffer
    /// is out of offsets.
    fn push(&mut self, thread: usize, slot: usize, pos: u32, clock: &[u32], raw: u32) -> bool {
        let Some(i) = self.open_list(thread, slot) else {
            return false;
        };
        let list = &mut self.open[i];
        let whole = !list.kept || list.receives.is_empty() || list.since_whole + 1 >= WHOLE_EVERY;
        std::mem::swap(&mut list.base, &mut list.last);
        list.last.clear();
        list.last.extend_from_slice(clock);
        if list.last.len() <= slot {
            list.last.resize(slot + 1, 0);
        }
        list.last[slot] = raw;
        if whole {
            list.base.clear();
            list.since_whole = 0;
        } else {
            list.since_whole += 1;
        }
        list.kept = true;
        let Some(start) = self.put_last(i, whole) else {
            return false;
        };
        self.open[i].receives.push(Receive { pos, start });
        true
    }

    /// Joins `clock` into the last stored clock of `thread` and sets its entry `slot` (the
    /// thread's own) to `raw`; returns how many entries it grew by, or `None` when the buffer
    /// is out of offsets.
    fn grow_last(&mut self, thread: usize, slot: usize, clock: &[u32], raw: u32) -> Option<usize> {
        let i = self.open_list(thread, slot)?;
        let last = *self.open[i].receives.last()?;
        self.generation = self.generation.wrapping_add(1);
        let list = &mut self.open[i];
        if !list.kept {
            // Reopened from the closed lists: the last clock is read back and stored again
            // whole.
            decode_clock(
                &self.entries,
                &list.receives,
                list.receives.len() - 1,
                &mut list.last,
            );
            list.base.clear();
            list.since_whole = 0;
            list.kept = true;
        }
        let len = list.last.len();
        let new_len = len.max(clock.len()).max(slot + 1);
        list.last.resize(new_len, 0);
        for (mine, &theirs) in list.last.iter_mut().zip(clock) {
            *mine = (*mine).max(theirs);
        }
        list.last[slot] = raw;
        let whole = list.base.is_empty();
        // A second receive of an event comes right after the first, so its clock is
        // normally the buffer's last and is encoded again in place; one that is not moves to
        // the end.
        if last.start == self.tail {
            self.entries.truncate(last.start as usize);
        }
        self.open[i].receives.last_mut()?.start = self.put_last(i, whole)?;
        Some(new_len - len)
    }
}

impl HappensBefore {
    /// The clock of event `pos` of `thread`, own entry included.
    pub fn clock_at(&self, thread: usize, pos: u32) -> VectorClock {
        let mut clock = VectorClock::default();
        if let Some(c) = self.receive_before(thread, pos, &mut DecodedClock::default()) {
            clock.join_entries(c);
        }
        if let Some(slot) = self.slots.slot_of(thread) {
            clock.set(slot, self.slots.raw(thread, pos + 1));
        }
        clock
    }

    /// How many events of `thread` happen before (or at) the event of `clock`, a clock of
    /// this trace.
    #[inline]
    pub fn prefix(&self, clock: &[u32], thread: usize) -> u32 {
        self.slots.prefix_in(clock, thread)
    }

    /// The threads `clock` knows of, with their prefix lengths (see [`Slots::known`]: a
    /// thread whose slot a later thread took over is known whole through that thread's
    /// first receive).
    pub fn known<'a>(&'a self, clock: &'a [u32]) -> impl Iterator<Item = (usize, u32)> + 'a {
        self.slots.known(clock)
    }

    /// The stored clock (its entries, by slot) of the last receive at or before `pos` in
    /// `thread`, decoded into `buf` (clocks are stored encoded).
    pub fn receive_before<'a>(
        &self,
        thread: usize,
        pos: u32,
        buf: &'a mut DecodedClock,
    ) -> Option<&'a [u32]> {
        self.receives.before(thread, pos, buf)
    }

    /// The `i`th receive of a thread, by position: its position and its stored clock,
    /// decoded into `buf` (the closure walks them).
    pub fn receive<'a>(
        &self,
        thread: usize,
        i: usize,
        buf: &'a mut DecodedClock,
    ) -> Option<(u32, &'a [u32])> {
        self.receives.receive(thread, i, buf)
    }

    /// How many receives of a thread are stored.
    pub fn receive_count(&self, thread: usize) -> usize {
        self.receives.list(thread).len()
    }

    /// Whether event (`a_thread`, `a_pos`) happens before (`b_thread`, `b_pos`).
    pub fn happens_before(&self, a_thread: usize, a_pos: u32, b_thread: usize, b_pos: u32) -> bool {
        if a_thread == b_thread {
            return a_pos < b_pos;
        }
        self.receive_before(b_thread, b_pos, &mut DecodedClock::default())
            .is_some_and(|c| self.slots.reach(c, a_thread) > a_pos)
    }
}

/// Where a sender's clock is published for later receivers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    Fork(usize),
    Barrier(u32, u64),
    Once(u32),
    Semaphore(u32),
    Condition(u32),
    Tag(u64),
    Atomic(u64),
    /// Write releases of a lock (mutexes, spinlocks, rwlocks held for writing).
    Lock(u32),
    /// Read releases of an rwlock: a writer waits for them, a reader does not.
    LockReaders(u32),
}

/// Builds [`HappensBefore`] from events given in the causal (merged) order.
/// Clock entries (4 bytes each) the builder may hold: vector clocks cost threads² in the worst
/// case, and a trace of a thread-per-request server can have tens of thousands of threads.
pub const CLOCK_ENTRY_BUDGET: usize = 1 << 26;

pub struct HbBuilder {
    /// Clock entries stored so far (snapshots and channels), against the budget.
    stored: usize,
    budget: usize,
    overflowed: bool,
    /// The current clock of each slot's holder, by slot: a slot's clock goes to the thread it is
    /// handed on to, so these follow the threads alive at once, not the threads ever created.
    current: Vec<VectorClock>,
    /// How many threads the trace has (dense indices below it).
    threads: usize,
    /// By slot: what the builder keeps of its holder (the threads alive, and those whose slot
    /// no thread took yet), not a table of every thread ever created.
    holders: Vec<Holder>,
    /// Which thread each clock entry speaks of: a thread's slot is handed on to a thread
    /// created after it ended, when the creator knows all of it (`vector_clock.rs`). Shared
    /// with the run of the segment last cut ([`HbBuilder::cut`]), which is analysed and dropped
    /// before the walk places another thread: a cut copies no table of every thread.
    slots: Arc<Slots>,
    /// Slots whose holder exited, candidates for a thread about to be created.
    free_slots: Vec<u32>,
    channels: HashMap<Channel, VectorClock>,
    /// The lock channels by object id (`2 * lock`, `+ 1` for its readers; ids below
    /// [`DIRECT_LOCKS`]): the most frequent sends and receives, looked up without hashing.
    lock_channels: Vec<Option<VectorClock>>,
    receives: ReceiveStore,
    /// Where a stored clock read back during the walk is decoded.
    decoded: DecodedClock,
    /// Whether receives are stored (the clocks of the whole trace, which the closure walks) or
    /// only the current clocks are kept (a streaming pass reads them as it goes).
    snapshots: bool,
    /// The last write to each 8-byte granule: (thread, position).
    last_write: LastWriters,
}

impl HbBuilder {
    pub fn new(threads: usize) -> Self {
        Self::with_budget(threads, CLOCK_ENTRY_BUDGET)
    }

    /// A builder that gives up (and says so) past `budget` stored clock entries.
    pub fn with_budget(threads: usize, budget: usize) -> Self {
        // The stored clocks' readers ask which thread an entry speaks of: the slots list
        // their holders (a streaming builder's do not, `without_snapshots`).
        Self::with_slots(
            threads,
            budget,
            Slots::for_threads(threads).listing_holders(),
        )
    }

    fn with_slots(threads: usize, budget: usize, slots: Slots) -> Self {
        Self {
            stored: 0,
            budget,
            overflowed: false,
            // One clock per slot, made as slots are: memory follows the threads alive at once
            // and what they know of each other.
            current: Vec::new(),
            threads,
            holders: Vec::new(),
            slots: Arc::new(slots),
            free_slots: Vec::new(),
            channels: HashMap::new(),
            lock_channels: Vec::new(),
            receives: ReceiveStore::default(),
            decoded: DecodedClock::default(),
            snapshots: true,
            last_write: LastWriters::new(),
        }
    }

    /// A builder that keeps only the current clocks and the channels — memory in threads and
    /// synchronisation objects, not in trace length — for a pass that reads each thread's
    /// clock as it goes ([`HbBuilder::clock`]). The clocks it finishes with are empty, and it
    /// cannot follow reads-from (which reads the writer's stored clock).
    pub fn streaming(threads: usize) -> Self {
        Self::with_slots(threads, CLOCK_ENTRY_BUDGET, Slots::default()).without_snapshots()
    }

    /// This builder, keeping only the current clocks (see [`HbBuilder::streaming`]).
    pub fn without_snapshots(mut self) -> Self {
        self.snapshots = false;
        // Nothing reads a stored clock: nothing asks which thread a slot's entry speaks of,
        // and the places of threads whose slot went on may be let go ([`HbBuilder::let_go`]).
        debug_assert!(self.slots.holder(0).is_none());
        self.slots = Arc::new(Slots::windowed(PLACES_WINDOW, self.threads));
        self
    }

    /// The clock of the thread's latest event (its own entry included). Empty once the
    /// builder outgrew its budget.
    pub fn clock(&mut self, thread: usize) -> &VectorClock {
        self.own(thread)
    }

    /// False once the clocks outgrew their budget and were dropped.
    pub fn complete(&self) -> bool {
        !self.overflowed
    }

    /// A memory write (or atomic store) of `size` bytes at `addr`. Writers are kept per 8-byte
    /// granule, so that a read of part of what was written (or of several writes) finds them.
    pub fn write(&mut self, thread: usize, pos: u32, addr: u64, size: u32) {
        if self.overflowed {
            return;
        }
        let granules = granules(addr, size);
        self.last_write
            .set(*granules.start(), *granules.end(), (thread as u32, pos));
    }

    /// A memory read (or atomic load) of `addr`: reads-from is an edge. A reordering in which a
    /// read sees another write may take another path, so a prediction must keep the writer
    /// before the reader. The writer is the last write in the merged order, which is the true
    /// one for every access ordered by synchronisation (a racy read may have read another).
    /// A granule's writer stands for the writer of every byte of it: an over-approximation
    /// (more order, so fewer predictions), never a missed writer.
    pub fn read(&mut self, thread: usize, pos: u32, addr: u64, size: u32) {
        if self.overflowed {
            return;
        }
        for g in granules(addr, size) {
            self.read_granule(thread, pos, g);
        }
    }

    fn read_granule(&mut self, thread: usize, pos: u32, granule: u64) {
        let Some((writer, at)) = self.last_write.get(granule) else {
            return;
        };
        let writer = writer as usize;
        if writer == thread || self.knows_prefix(thread, writer) > at {
            return;
        }
        // The reader learns what the writer knew at the write: the writer's last receive
        // before it, joined in place (a read from another thread must not allocate), and the
        // write itself, which is news (checked above), so the clock grows.
        let mine = self.place(thread);
        let writer_slot = self.slots.slot_of(writer);
        if let Some(stored) = self
            .receives
            .before(writer, writer_slot, at, &mut self.decoded)
        {
            self.current[mine].join_entries(stored);
        }
        let slot = self.place(writer);
        let raw = self.slots.raw(writer, at + 1);
        self.current[mine].set(slot, raw);
        self.record(thread, pos);
    }

    /// Every event goes through here, in merged order, before `send`/`receive` for it.
    #[inline]
    pub fn step(&mut self, thread: usize, pos: u32) {
        // One look at the thread's place: a thread holding its slot finds its state there; one
        // not placed yet or whose slot went on has no slot index of a holder.
        if let Some(holder) = self.holders.get_mut(self.slots.held_index(thread)) {
            holder.seen = pos + 1;
            holder.exited = false;
            return;
        }
        self.step_unheld(thread, pos);
    }

    /// [`HbBuilder::step`] of a thread without a slot yet, or whose slot went on.
    #[cold]
    fn step_unheld(&mut self, thread: usize, pos: u32) {
        // Before `place`: a thread let go has no slot to find, and must not be given one.
        if self.slots.handed_on(thread) {
            self.after_hand_on();
            return;
        }
        let slot = self.place(thread);
        let holder = &mut self.holders[slot];
        holder.seen = pos + 1;
        holder.exited = false;
    }

    /// An event of a thread whose slot went on to another thread, after its exit (a hostile
    /// or damaged trace): its clock entries are ambiguous, so the clocks are abandoned as when
    /// they outgrow their budget. (An event after an exit whose slot is still held only keeps
    /// the slot from being handed on: `step` clears `exited`.)
    #[cold]
    fn after_hand_on(&mut self) {
        if !self.overflowed {
            self.abandon();
        }
    }

    /// The thread's exit (its last event): its slot may go to a thread created once the whole
    /// of it is known to the creator.
    pub fn exit(&mut self, thread: usize) {
        if self.overflowed || thread >= self.threads {
            return;
        }
        if let Some(slot) = self.slots.slot_of(thread) {
            // Its stored clocks are complete: their list joins the closed ones (10^5 short
            // threads would each keep a list of its own).
            if !self.receives.close(thread, slot) {
                self.abandon();
                return;
            }
            if self.slots.holder(slot) == Some(thread as u32) {
                if let Some(holder) = self.holders.get_mut(slot) {
                    holder.exited = true;
                }
                self.free_slots.push(slot as u32);
            }
        }
    }

    /// Gives the thread `child` that `parent` is creating a slot: the slot of a thread that
    /// exited and that the parent knows whole (it joined it, or learnt of its exit otherwise),
    /// else a new one. A thread's slot is never handed on while the new thread could run
    /// beside it, so the clocks stay exact. Returns the slot when it was handed on: what the
    /// caller keeps by slot for its old holder goes.
    pub fn place_child(&mut self, parent: usize, child: usize) -> Option<usize> {
        if self.overflowed || child >= self.threads || self.slots.placed(child) {
            return None;
        }
        self.place(parent);
        // Most recent exits first; a slot whose holder is not known whole yet stays a
        // candidate, and a bounded look keeps creation cheap when many stay unknown.
        let mut i = self.free_slots.len();
        let mut looked = 0;
        while i > 0 && looked < FREE_SLOTS_LOOKED_AT {
            i -= 1;
            looked += 1;
            let slot = self.free_slots[i] as usize;
            let Some(holder) = self.slots.holder(slot).map(|h| h as usize) else {
                self.free_slots.swap_remove(i);
                continue;
            };
            let Some(&Holder {
                seen: length,
                exited: true,
            }) = self.holders.get(slot)
            else {
                self.free_slots.swap_remove(i);
                continue;
            };
            let end = self.slots.raw(holder, length);
            if self.knows_prefix(parent, holder) < length || end > u32::MAX / 2 {
                continue;
            }
            self.free_slots.swap_remove(i);
            Arc::make_mut(&mut self.slots).hand_on(slot, child, end);
            self.holders[slot] = Holder::default();
            // Nothing may join the old thread again (a second join, or a join of a detached
            // thread, is undefined): its clock is not needed any more, and the slot's clock
            // starts afresh for the child (keeping its room).
            if let Some(clock) = self.current.get_mut(slot) {
                clock.clear();
            }
            return Some(slot);
        }
        Arc::make_mut(&mut self.slots).place_fresh(child);
        None
    }

    /// Gives the thread a new slot if it has none (the first thread, one whose creation the
    /// trace does not have), and its slot a clock; returns the slot, which indexes the
    /// thread's current clock.
    #[inline]
    fn place(&mut self, thread: usize) -> usize {
        let slot = match self.slots.slot_of(thread) {
            Some(s) => s,
            None => Arc::make_mut(&mut self.slots).place_fresh(thread),
        };
        if slot >= self.current.len() {
            self.current.resize_with(slot + 1, VectorClock::default);
        }
        if slot >= self.holders.len() {
            self.holders.resize(slot + 1, Holder::default());
        }
        slot
    }

    /// The slot of `thread` (given one if it has none): what the pass keeps per thread alive
    /// is kept by it.
    #[inline]
    pub(crate) fn slot(&mut self, thread: usize) -> usize {
        self.place(thread)
    }

    /// The slot of `thread` while it holds it: none before it has one or after it went on.
    #[inline]
    pub(crate) fn held_slot(&self, thread: usize) -> Option<usize> {
        let slot = self.slots.slot_of(thread)?;
        (!self.slots.handed_on(thread)).then_some(slot)
    }

    /// The current clock of `thread`: none for a thread without a slot yet (it has received
    /// nothing) or one whose slot went on to another thread (its clock was let go then).
    #[inline]
    fn current_of(&self, thread: usize) -> Option<&VectorClock> {
        // One look at the thread's place (the race pass asks at each access).
        self.current.get(self.slots.held_index(thread))
    }

    fn own(&mut self, thread: usize) -> &VectorClock {
        let slot = self.place(thread);
        let raw = self.slots.raw(thread, self.holders[slot].seen);
        self.current[slot].set(slot, raw);
        &self.current[slot]
    }

    /// How far the thread's latest clock reaches into `other` ([`Slots::reach`]): it knows
    /// the event of `other` at `pos` when this is above `pos`. Exact while `other` holds its
    /// slot; for one whose slot went on, at least its length once all of it is known.
    #[inline]
    pub fn knows_prefix(&self, thread: usize, other: usize) -> u32 {
        match self.slots.reach_in_table(&self.current, thread, other) {
            Some(reach) => reach,
            None => self.knows_prefix_outside(thread, other),
        }
    }

    /// [`HbBuilder::knows_prefix`] when a thread's place is not in the table.
    #[cold]
    #[inline(never)]
    fn knows_prefix_outside(&self, thread: usize, other: usize) -> u32 {
        self.current_of(thread)
            .map_or(0, |clock| self.slots.reach(clock.entries(), other))
    }

    /// Whether the table of places has grown to [`PLACES_WINDOW`] threads since its oldest
    /// were last let go ([`HbBuilder::let_go`]).
    #[inline]
    pub fn wants_letting_go(&self) -> bool {
        self.slots.wants_letting_go()
    }

    /// Lets go of the places of the threads whose slot went on and that `asked` does not
    /// name, but the newest ([`Slots::let_go`]): the caller vouches that no
    /// [`HbBuilder::knows_prefix`] will name them as `other` (no record of one of their events
    /// is left to compare with a clock). A thread let go that has an event after all makes
    /// the clocks abandoned, as any event of a thread whose slot went on does. Only for a
    /// builder that stores no clocks (their readers find every holder's place).
    pub fn let_go(&mut self, asked: impl Fn(usize) -> bool) {
        if self.snapshots {
            return;
        }
        Arc::make_mut(&mut self.slots).let_go(asked);
    }

    /// Publishes the thread's clock (as of its current event) on `channel`.
    pub fn send(&mut self, thread: usize, channel: Channel) {
        if self.overflowed {
            return;
        }
        self.own(thread);
        let slot = self.place(thread);
        if self.snapshots {
            self.charge(self.current[slot].entries().len());
            if self.overflowed {
                return;
            }
        }
        // Joined from the thread's own clock in place: a send per lock release must not
        // allocate.
        let clock = &self.current[slot];
        let grown = publish(&mut self.channels, &mut self.lock_channels, channel, clock);
        if !self.snapshots {
            // Only what the channels hold: a send into a known channel costs nothing new.
            self.charge(grown);
        }
    }

    /// Publishes `clock` (an earlier clock of the thread: a release fence's) on `channel`.
    pub fn send_clock(&mut self, channel: Channel, clock: &VectorClock) {
        if self.overflowed {
            return;
        }
        if self.snapshots {
            self.charge(clock.entries().len());
        }
        let grown = publish(&mut self.channels, &mut self.lock_channels, channel, clock);
        if !self.snapshots {
            self.charge(grown);
        }
    }

    /// What was published on `channel` so far.
    pub fn published(&self, channel: &Channel) -> Option<&VectorClock> {
        match lock_slot(channel) {
            Some(i) => self.lock_channels.get(i).and_then(Option::as_ref),
            None => self.channels.get(channel),
        }
    }

    /// Joins `clock` into the thread's clock (an acquire fence takes what the relaxed loads
    /// before it saw).
    pub fn receive_clock(&mut self, thread: usize, pos: u32, clock: &VectorClock) {
        if self.overflowed {
            return;
        }
        let slot = self.place(thread);
        if self.current[slot].join(clock) {
            self.record(thread, pos);
        }
    }

    /// Joins what was published on `channel` into the thread's clock.
    pub fn receive(&mut self, thread: usize, pos: u32, channel: &Channel) {
        if self.overflowed {
            return;
        }
        let slot = self.place(thread);
        let sent = match lock_slot(channel) {
            Some(i) => self.lock_channels.get(i).and_then(Option::as_ref),
            None => self.channels.get(channel),
        };
        let Some(sent) = sent else {
            return;
        };
        if self.current[slot].join(sent) {
            self.record(thread, pos);
        }
    }

    /// A lock acquisition: joins what the lock's write releases published, and for a write
    /// acquisition also its read releases. The same as [`HbBuilder::receive`] on
    /// `Channel::Lock(lock)` and then `Channel::LockReaders(lock)`, with the lock's table slot
    /// found once.
    #[inline]
    pub fn receive_lock(&mut self, thread: usize, pos: u32, lock: u32, write: bool) {
        if self.overflowed {
            return;
        }
        if lock >= DIRECT_LOCKS {
            self.receive(thread, pos, &Channel::Lock(lock));
            if write {
                self.receive(thread, pos, &Channel::LockReaders(lock));
            }
            return;
        }
        let i = 2 * lock as usize;
        let slot = self.place(thread);
        let grew = match self.lock_channels.get(i) {
            Some(Some(sent)) => self.current[slot].join(sent),
            _ => false,
        };
        if grew {
            self.record(thread, pos);
        }
        if write {
            let grew = match self.lock_channels.get(i + 1) {
                Some(Some(sent)) => self.current[slot].join(sent),
                _ => false,
            };
            if grew {
                self.record(thread, pos);
            }
        }
    }

    /// A lock release: publishes the thread's clock on the lock's channel for `mode`'s
    /// releases ([`HbBuilder::send`] on `Channel::Lock` or `Channel::LockReaders`).
    #[inline]
    pub fn send_lock(&mut self, thread: usize, lock: u32, mode: Mode) {
        let channel = match mode {
            Mode::Write => Channel::Lock(lock),
            Mode::Read => Channel::LockReaders(lock),
        };
        self.send(thread, channel);
    }

    /// Joins the whole clock of `child` (a join returned).
    pub fn receive_thread(&mut self, thread: usize, pos: u32, child: usize) {
        if self.overflowed || child == thread || child >= self.threads {
            return;
        }
        // A child whose slot went on already was let go (joining it again is undefined):
        // there is nothing of it to join.
        if self.slots.handed_on(child) {
            return;
        }
        let theirs = self.place(child);
        self.own(child);
        let mine = self.place(thread);
        if mine == theirs {
            return;
        }
        let (mine, sent) = if mine < theirs {
            let (a, b) = self.current.split_at_mut(theirs);
            (&mut a[mine], &b[0])
        } else {
            let (a, b) = self.current.split_at_mut(mine);
            (&mut b[0], &a[theirs])
        };
        if mine.join(sent) {
            self.record(thread, pos);
        }
    }

    /// Forgets what was published on `channel` (a thread's creation, once the thread received
    /// it: each is received once).
    pub fn forget(&mut self, channel: &Channel) {
        if lock_slot(channel).is_none() {
            self.channels.remove(channel);
        }
    }

    /// Counts stored entries; past the budget every clock is dropped and the result is marked
    /// incomplete.
    fn charge(&mut self, entries: usize) {
        self.stored += entries;
        if self.stored > self.budget {
            self.abandon();
        }
    }

    /// Drops every clock; the result is marked incomplete.
    #[cold]
    fn abandon(&mut self) {
        self.overflowed = true;
        self.receives = ReceiveStore::default();
        self.channels = HashMap::new();
        self.lock_channels = Vec::new();
        self.current = Vec::new();
        self.last_write = LastWriters::new();
        self.free_slots = Vec::new();
    }

    fn record(&mut self, thread: usize, pos: u32) {
        if !self.snapshots {
            return;
        }
        let (slot, raw) = (self.place(thread), self.slots.raw(thread, pos + 1));
        // A second receive at the same event (a read spanning granules of several writes, a
        // write acquisition joining both of a lock's channels) grows the snapshot stored for
        // it: the clock only grew since, and no closure asks for the clock between the two.
        if self
            .receives
            .list(thread, Some(slot))
            .last()
            .is_some_and(|r| r.pos == pos)
        {
            let clock = self.current[slot].entries();
            match self.receives.grow_last(thread, slot, clock, raw) {
                Some(grown) => self.charge(grown),
                None => self.abandon(),
            }
            return;
        }
        self.charge(self.current[slot].entries().len());
        if self.overflowed {
            return;
        }
        let clock = self.current[slot].entries();
        if !self.receives.push(thread, slot, pos, clock, raw) {
            self.abandon();
        }
    }

    pub fn finish(self) -> HappensBefore {
        let mut receives = self.receives;
        HappensBefore {
            receives: receives.take(),
            slots: self.slots,
            complete: !self.overflowed,
            writes_not_followed: self.last_write.writes_not_followed(),
        }
    }

    /// Ends a segment of the walk (`model::walk`): hands over the clocks stored so
    /// far and starts storing afresh, keeping the current clocks, the channels and the last
    /// writers. A later segment's closures start with every event before it inside, so a clock
    /// stored before it — whose entries are all prefixes of that part of the trace — is never
    /// needed again (a reads-from of an earlier write joins what the writer knew without it:
    /// only entries below the segment's start, which every closure of it already has). The
    /// budget applies per segment; once overflowed, the clocks stay abandoned.
    pub fn cut(&mut self) -> HappensBefore {
        let receives = self.receives.take();
        if !self.overflowed {
            self.stored = 0;
        }
        HappensBefore {
            receives,
            slots: self.slots.clone(),
            complete: !self.overflowed,
            // Counted once, by the walk's last part (`finish`), as the race pass counts.
            writes_not_followed: 0,
        }
    }
}

/// What [`HbBuilder`] keeps of a slot's holder.
#[derive(Clone, Copy, Debug, Default)]
struct Holder {
    /// Its events seen so far.
    seen: u32,
    /// Whether its last event so far is its exit.
    exited: bool,
}

/// Locks whose channels live in `HbBuilder::lock_channels`. The recorder numbers objects from
/// 1 up, so the ids of real traces are small; an id of a hostile trace may be any `u32`, and
/// those above the bound go to the map (the table's worst case: 24 bytes a slot, 3 MiB).
const DIRECT_LOCKS: u32 = 1 << 16;

/// Threads whose places a builder that stores no clocks keeps in its table before it lets the
/// older ones go ([`HbBuilder::let_go`]): 64 KiB of places.
pub const PLACES_WINDOW: usize = 8192;

/// Free slots a creation looks at: most are taken by the next thread; detached threads whose
/// exit no creator learns of would otherwise make every creation slower.
const FREE_SLOTS_LOOKED_AT: usize = 64;

/// The slot of a lock channel in `HbBuilder::lock_channels`.
#[inline]
fn lock_slot(channel: &Channel) -> Option<usize> {
    match *channel {
        Channel::Lock(l) if l < DIRECT_LOCKS => Some(2 * l as usize),
        Channel::LockReaders(l) if l < DIRECT_LOCKS => Some(2 * l as usize + 1),
        _ => None,
    }
}

/// Joins `clock` into what `channel` holds; returns the entries it grew by.
fn publish(
    channels: &mut HashMap<Channel, VectorClock>,
    lock_channels: &mut Vec<Option<VectorClock>>,
    channel: Channel,
    clock: &VectorClock,
) -> usize {
    let slot = match lock_slot(&channel) {
        Some(i) => {
            if i >= lock_channels.len() {
                lock_channels.resize(i + 1, None);
            }
            &mut lock_channels[i]
        }
        None => {
            return match channels.entry(channel) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    let before = e.get().entries().len();
                    e.get_mut().join(clock);
                    e.get().entries().len() - before
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(clock.clone()).entries().len()
                }
            };
        }
    };
    match slot {
        Some(held) => {
            let before = held.entries().len();
            held.join(clock);
            held.entries().len() - before
        }
        None => slot.insert(clock.clone()).entries().len(),
    }
}

/// The 8-byte granules `size` bytes at `addr` touch (at least one).
fn granules(addr: u64, size: u32) -> std::ops::RangeInclusive<u64> {
    let last = addr.saturating_add(u64::from(size.max(1)) - 1);
    (addr >> 3)..=(last >> 3)
}

/// A set of happens-before edge kinds: which synchronisation orders events for the analysis
/// that builds the clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EdgeKinds(u16);

impl EdgeKinds {
    /// Thread create → the child's first event; the child's last event → the join.
    pub const CREATE_JOIN: EdgeKinds = EdgeKinds(1);
    /// Every arrival of a barrier generation → every departure of it.
    pub const BARRIER: EdgeKinds = EdgeKinds(1 << 1);
    /// A `pthread_once` initialiser's end → every call that skipped it.
    pub const ONCE: EdgeKinds = EdgeKinds(1 << 2);
    /// Every earlier post → a successful semaphore wait.
    pub const SEMAPHORE: EdgeKinds = EdgeKinds(1 << 3);
    /// Every earlier signal or broadcast → the return of a condition wait.
    pub const CONDITION: EdgeKinds = EdgeKinds(1 << 4);
    /// The program's own happens-before/happens-after annotations, matched by tag.
    pub const USER: EdgeKinds = EdgeKinds(1 << 5);
    /// Every earlier release (or stronger) atomic store → an acquire (or stronger) load of the
    /// address; fences (a release fence makes the thread's later stores release, an acquire
    /// fence makes its earlier loads acquire). Relaxed accesses order nothing.
    pub const ATOMIC: EdgeKinds = EdgeKinds(1 << 6);
    /// Reads-from: a read (plain or atomic, any order) is ordered after the last write to its
    /// address in the merged order — the true writer of every access ordered by
    /// synchronisation.
    pub const READS_FROM: EdgeKinds = EdgeKinds(1 << 7);
    /// A lock's release → its next acquisition (a condition wait releases and re-takes its
    /// mutex). For rwlocks, a write acquisition follows every earlier release, a read
    /// acquisition only the write releases: readers are not ordered with each other.
    pub const LOCK: EdgeKinds = EdgeKinds(1 << 8);
    /// A write to a pipe, socketpair or eventfd → the read that took its bytes
    /// (`handoffs.rs`).
    pub const HANDOFF: EdgeKinds = EdgeKinds(1 << 9);

    /// The synchronisation no reordering may change.
    pub const SYNC: EdgeKinds = EdgeKinds(
        Self::CREATE_JOIN.0
            | Self::BARRIER.0
            | Self::ONCE.0
            | Self::SEMAPHORE.0
            | Self::CONDITION.0
            | Self::USER.0
            | Self::ATOMIC.0
            | Self::HANDOFF.0,
    );
    /// What the deadlock analysis orders by: the synchronisation, and reads-from.
    pub const DEADLOCK: EdgeKinds = EdgeKinds(Self::SYNC.0 | Self::READS_FROM.0);

    pub const fn union(self, other: EdgeKinds) -> EdgeKinds {
        EdgeKinds(self.0 | other.0)
    }

    pub const fn without(self, other: EdgeKinds) -> EdgeKinds {
        EdgeKinds(self.0 & !other.0)
    }

    /// Whether every kind of `other` is in the set.
    pub const fn contains(self, other: EdgeKinds) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for EdgeKinds {
    type Output = EdgeKinds;
    fn bitor(self, other: EdgeKinds) -> EdgeKinds {
        self.union(other)
    }
}

/// The happens-before visitor: builds [`HappensBefore`] from the merged stream, with the edge
/// kinds its analysis asked for.
pub struct HbPass {
    builder: HbBuilder,
    edges: EdgeKinds,
    /// With lock edges: per thread alive, by its slot (`HbBuilder::slot`), the locks it holds
    /// (object, mode, recursion depth), to know which channel a release publishes on.
    held: Vec<Vec<(u32, Mode, u32)>>,
    /// With atomic edges, by thread: the clock at its last release fence, which its later
    /// relaxed stores publish (C11 7.17.4: a release fence before a store makes the store
    /// release what preceded the fence)…
    release_fence: HashMap<u32, VectorClock>,
    /// …and what its relaxed loads since the last acquire fence could have read, which the
    /// next acquire fence takes. Both by thread id, for the few threads that use fences and
    /// relaxed atomics: not a slot per thread ever created.
    acquire_pending: HashMap<u32, VectorClock>,
    /// With hand-off edges: the writes not yet read, per channel.
    handoffs: HandoffQueues,
}

impl HbPass {
    pub fn new(threads: usize, edges: EdgeKinds) -> Self {
        Self::with_builder(HbBuilder::new(threads), edges)
    }

    /// A pass over a builder made by the caller (a smaller clock budget, in tests).
    pub fn with_builder(builder: HbBuilder, edges: EdgeKinds) -> Self {
        HbPass {
            builder,
            edges,
            held: Vec::new(),
            release_fence: HashMap::new(),
            acquire_pending: HashMap::new(),
            handoffs: HandoffQueues::new(),
        }
    }

    /// A pass that keeps only the current clocks (see [`HbBuilder::streaming`]): for a race
    /// pass that reads [`HbPass::clock`] at each access, in memory independent of trace length.
    /// Reads-from needs the stored clocks, so `edges` must not ask for it.
    pub fn streaming(threads: usize, edges: EdgeKinds) -> Self {
        assert!(
            !edges.contains(EdgeKinds::READS_FROM),
            "a streaming happens-before cannot follow reads-from"
        );
        Self::with_builder(HbBuilder::streaming(threads), edges)
    }

    /// The clock of the thread's latest handled event, own entry included: what happens before
    /// it (as prefix lengths per thread).
    #[cfg(test)]
    pub fn clock(&mut self, thread: u32) -> &VectorClock {
        self.builder.clock(thread as usize)
    }

    /// How many events of `other` happen before the latest handled event of `thread` (the
    /// thread's own entry may lag behind), for a comparison with a position of `other`: once
    /// the slot of `other` went on, any value at least its length says "all of it"
    /// ([`HbBuilder::knows_prefix`]).
    #[inline]
    pub fn knows_prefix(&self, thread: u32, other: u32) -> u32 {
        self.builder.knows_prefix(thread as usize, other as usize)
    }

    /// With lock edges: the locks `thread` holds (object, mode, recursion depth), outermost
    /// first.
    #[inline]
    pub fn held(&self, thread: usize) -> &[(u32, Mode, u32)] {
        self.builder
            .held_slot(thread)
            .and_then(|slot| self.held.get(slot))
            .map_or(&[], Vec::as_slice)
    }

    /// The clocks stored since the last cut ([`HbBuilder::cut`]); the walk goes on.
    pub fn cut(&mut self) -> HappensBefore {
        self.builder.cut()
    }

    /// See [`HbBuilder::wants_letting_go`].
    #[inline]
    pub fn wants_letting_go(&self) -> bool {
        self.builder.wants_letting_go()
    }

    /// See [`HbBuilder::let_go`].
    pub fn let_go(&mut self, asked: impl Fn(usize) -> bool) {
        self.builder.let_go(asked)
    }

    /// Whether the place of `thread` was let go ([`HbBuilder::let_go`]).
    pub fn let_go_of(&self, thread: usize) -> bool {
        self.builder.slots.let_go_of(thread)
    }

    /// False once the clocks outgrew their budget: nothing may then be concluded from them.
    pub fn complete(&self) -> bool {
        self.builder.complete()
    }

    /// A lock request, failed lock or failed trylock past the thread's first event: what
    /// [`Pass::handle`] does with one (a step), for a caller that has matched the event
    /// already (the model's own dispatch).
    #[inline(always)]
    pub(crate) fn lock_wait(&mut self, t: usize, pos: u32) {
        debug_assert!(pos != 0, "a thread's first event goes through `handle`");
        self.builder.step(t, pos);
    }

    /// A lock acquired (or a trylock that took it) past the thread's first event, as
    /// [`Pass::handle`] settles it.
    #[inline(always)]
    pub(crate) fn lock_acquired(&mut self, t: usize, pos: u32, lock: u32, mode: Mode) {
        debug_assert!(pos != 0, "a thread's first event goes through `handle`");
        self.builder.step(t, pos);
        if self.edges.contains(EdgeKinds::LOCK) {
            self.acquire(t, pos, lock, mode);
        }
    }

    /// A lock released past the thread's first event, as [`Pass::handle`] settles it.
    #[inline(always)]
    pub(crate) fn lock_released(&mut self, t: usize, pos: u32, lock: u32) {
        debug_assert!(pos != 0, "a thread's first event goes through `handle`");
        self.builder.step(t, pos);
        if self.edges.contains(EdgeKinds::LOCK) {
            self.release(t, lock);
        }
    }

    /// A plain read past the thread's first event, as [`Pass::handle`] settles it: with
    /// reads-from, a step and the read's lookup of its writers; without, nothing.
    #[inline(always)]
    pub(crate) fn plain_read(&mut self, t: usize, pos: u32, addr: u64, size: u32) {
        debug_assert!(pos != 0, "a thread's first event goes through `handle`");
        if self.edges.contains(EdgeKinds::READS_FROM) {
            self.builder.step(t, pos);
            self.builder.read(t, pos, addr, size);
        }
    }

    /// A plain write past the thread's first event, as [`Pass::handle`] settles it.
    #[inline(always)]
    pub(crate) fn plain_write(&mut self, t: usize, pos: u32, addr: u64, size: u32) {
        debug_assert!(pos != 0, "a thread's first event goes through `handle`");
        if self.edges.contains(EdgeKinds::READS_FROM) {
            self.builder.step(t, pos);
            self.builder.write(t, pos, addr, size);
        }
    }

    /// The locks `t` holds, for a change.
    #[inline]
    fn held_by(&mut self, t: usize) -> &mut Vec<(u32, Mode, u32)> {
        let slot = self.builder.slot(t);
        if slot >= self.held.len() {
            self.held.resize_with(slot + 1, Vec::new);
        }
        &mut self.held[slot]
    }

    /// Lock edges: an acquisition joins the releases it must follow (a re-entry of a held lock
    /// joins nothing new).
    fn acquire(&mut self, t: usize, pos: u32, lock: u32, mode: Mode) {
        let held = self.held_by(t);
        if let Some(h) = held.iter_mut().rev().find(|h| h.0 == lock) {
            h.2 += 1;
            return;
        }
        held.push((lock, mode, 1));
        self.builder.receive_lock(t, pos, lock, mode == Mode::Write);
    }

    /// Lock edges: the outermost release publishes the thread's clock (a release of a lock the
    /// trace never showed taken counts as a write release).
    fn release(&mut self, t: usize, lock: u32) {
        let held = self.held_by(t);
        let mode = match held.iter().rposition(|h| h.0 == lock) {
            Some(i) => {
                held[i].2 -= 1;
                if held[i].2 > 0 {
                    return;
                }
                // Releases are mostly in reverse order of acquisition: the top goes.
                if i + 1 == held.len() {
                    held.pop().map_or(Mode::Write, |h| h.1)
                } else {
                    held.remove(i).1
                }
            }
            None => Mode::Write,
        };
        self.builder.send_lock(t, lock, mode);
    }
}

impl Pass for HbPass {
    type Output = HappensBefore;

    /// The two kinds of event that make most of a trace are settled here, inline: plain
    /// accesses and allocations (skipped unless reads-from is asked for) and lock operations
    /// past a thread's first event (a step, and with lock edges the acquisition or release
    /// itself). Everything else goes to [`HbPass::handle_sync`], which is what this did for
    /// every event before, and gives the same clocks for these.
    #[inline]
    fn handle(&mut self, ev: &StreamEvent) {
        let (t, pos) = (ev.thread as usize, ev.pos);
        // Plain accesses and allocations order nothing unless reads-from is asked for: most of
        // an instrumented trace, skipped at once. (The thread's own entry then lags until its
        // next synchronisation event, which steps it before it sends.)
        if !self.edges.contains(EdgeKinds::READS_FROM) && ev.op.is_plain_memory() {
            return;
        }
        // A thread's first event also receives its creation (`handle_sync`).
        if pos != 0 {
            match ev.op {
                Op::LockRequest { .. } | Op::LockFailed { .. } | Op::LockTry { .. } => {
                    match ev.op {
                        Op::LockTry {
                            lock,
                            mode,
                            acquired: true,
                            ..
                        } => self.lock_acquired(t, pos, lock, mode),
                        _ => self.lock_wait(t, pos),
                    }
                    return;
                }
                Op::LockAcquired { lock, mode } => {
                    self.lock_acquired(t, pos, lock, mode);
                    return;
                }
                Op::LockRelease { lock, .. } => {
                    self.lock_released(t, pos, lock);
                    return;
                }
                _ => {}
            }
        }
        self.handle_sync(ev);
    }

    fn finish(self) -> HappensBefore {
        self.builder.finish()
    }
}

impl HbPass {
    /// A thread exited: what is kept for it alone goes, so that memory follows the threads
    /// alive. Its pending relaxed loads and its last release fence can publish nothing more
    /// (an event after the exit is a damaged trace's); the locks it still holds stay, for
    /// their releases' modes, until its slot goes on to another thread.
    fn exited(&mut self, t: usize) {
        if !self.release_fence.is_empty() {
            self.release_fence.remove(&(t as u32));
        }
        if !self.acquire_pending.is_empty() {
            self.acquire_pending.remove(&(t as u32));
        }
    }

    /// Every event but those [`Pass::handle`] settles inline.
    #[inline(never)]
    fn handle_sync(&mut self, ev: &StreamEvent) {
        let (t, pos) = (ev.thread as usize, ev.pos);
        let create_join = self.edges.contains(EdgeKinds::CREATE_JOIN);
        let b = &mut self.builder;
        b.step(t, pos);
        if pos == 0 && create_join {
            b.receive(t, pos, &Channel::Fork(t));
            b.forget(&Channel::Fork(t));
        }
        match ev.op {
            Op::Read { addr, size, .. } if self.edges.contains(EdgeKinds::READS_FROM) => {
                b.read(t, pos, addr, size)
            }
            Op::Write { addr, size, .. } if self.edges.contains(EdgeKinds::READS_FROM) => {
                b.write(t, pos, addr, size)
            }
            Op::Create { child: Some(c), .. } if create_join => {
                if let Some(slot) = b.place_child(t, c as usize) {
                    if let Some(held) = self.held.get_mut(slot) {
                        held.clear();
                    }
                }
                b.send(t, Channel::Fork(c as usize))
            }
            Op::ThreadExit => {
                b.exit(t);
                self.exited(t);
            }
            Op::Join {
                child: Some(c),
                joined: true,
            } if create_join => b.receive_thread(t, pos, c as usize),
            Op::CondSignal { cond, .. } if self.edges.contains(EdgeKinds::CONDITION) => {
                b.send(t, Channel::Condition(cond))
            }
            Op::CondWaitBegin { mutex, .. } if self.edges.contains(EdgeKinds::LOCK) => {
                self.release(t, mutex)
            }
            Op::CondWaitEnd { cond, mutex, .. } => {
                if self.edges.contains(EdgeKinds::CONDITION) {
                    b.receive(t, pos, &Channel::Condition(cond));
                }
                if self.edges.contains(EdgeKinds::LOCK) {
                    self.acquire(t, pos, mutex, Mode::Write);
                }
            }
            Op::BarrierArrive {
                barrier,
                generation: Some(g),
                ..
            } if self.edges.contains(EdgeKinds::BARRIER) => b.send(t, Channel::Barrier(barrier, g)),
            Op::BarrierDepart {
                barrier,
                generation,
                ..
            } if self.edges.contains(EdgeKinds::BARRIER) => {
                b.receive(t, pos, &Channel::Barrier(barrier, generation))
            }
            Op::OnceEnd { once } if self.edges.contains(EdgeKinds::ONCE) => {
                b.send(t, Channel::Once(once))
            }
            Op::OnceSkip { once } if self.edges.contains(EdgeKinds::ONCE) => {
                b.receive(t, pos, &Channel::Once(once))
            }
            Op::SemPost { sem, .. } if self.edges.contains(EdgeKinds::SEMAPHORE) => {
                b.send(t, Channel::Semaphore(sem))
            }
            Op::SemWaitEnd {
                sem,
                acquired: true,
            }
            | Op::SemTry {
                sem,
                acquired: true,
                ..
            } if self.edges.contains(EdgeKinds::SEMAPHORE) => {
                b.receive(t, pos, &Channel::Semaphore(sem))
            }
            Op::HandoffWrite {
                channel, amount, ..
            } if self.edges.contains(EdgeKinds::HANDOFF) && !b.overflowed => {
                let stored = self.handoffs.write(channel, amount, b.own(t));
                b.charge(stored);
            }
            Op::HandoffRead {
                channel,
                kind,
                amount,
                ..
            } if self.edges.contains(EdgeKinds::HANDOFF) => {
                if let Some(sent) = self.handoffs.read(channel, amount, kind.by_message()) {
                    b.receive_clock(t, pos, &sent);
                }
            }
            Op::HappensBefore { tag, .. } if self.edges.contains(EdgeKinds::USER) => {
                b.send(t, Channel::Tag(tag))
            }
            Op::HappensAfter { tag, .. } if self.edges.contains(EdgeKinds::USER) => {
                b.receive(t, pos, &Channel::Tag(tag))
            }
            Op::LockAcquired { lock, mode }
            | Op::LockTry {
                lock,
                mode,
                acquired: true,
                ..
            } if self.edges.contains(EdgeKinds::LOCK) => self.acquire(t, pos, lock, mode),
            Op::LockRelease { lock, .. } if self.edges.contains(EdgeKinds::LOCK) => {
                self.release(t, lock)
            }
            Op::Atomic(a) => {
                let atomic = self.edges.contains(EdgeKinds::ATOMIC);
                let reads_from = self.edges.contains(EdgeKinds::READS_FROM);
                let channel = Channel::Atomic(a.addr);
                if a.acquire && atomic {
                    b.receive(t, pos, &channel);
                } else if a.loads && atomic {
                    if let Some(sent) = b.published(&channel) {
                        self.acquire_pending.entry(t as u32).or_default().join(sent);
                    }
                }
                if a.loads && reads_from {
                    b.read(t, pos, a.addr, a.size);
                }
                if a.stores && reads_from {
                    b.write(t, pos, a.addr, a.size);
                }
                if a.release && atomic {
                    b.send(t, channel);
                } else if a.stores && atomic {
                    if let Some(fence) = self.release_fence.get(&(t as u32)) {
                        b.send_clock(channel, fence);
                    }
                }
            }
            Op::Fence {
                acquire, release, ..
            } if self.edges.contains(EdgeKinds::ATOMIC) => {
                if acquire {
                    let pending = self.acquire_pending.remove(&(t as u32)).unwrap_or_default();
                    b.receive_clock(t, pos, &pending);
                }
                if release {
                    self.release_fence.insert(t as u32, b.clock(t).clone());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_threads_are_found_whatever_order_they_close_in_and_taken_sorted() {
        let mut closed = ClosedThreads::default();
        let list = |t: u32| ReceiveList {
            start: t * 10,
            len: t,
        };
        // Mostly rising, with runs out of order longer than the recent ones' bound.
        let mut order: Vec<u32> = (0..500).collect();
        order[100..300].reverse();
        order.swap(7, 450);
        for &t in &order {
            closed.insert(t, list(t));
            assert_eq!(closed.get(t).map(|r| r.start), Some(t * 10));
        }
        for t in 0..500 {
            assert_eq!(closed.get(t).map(|r| r.len), Some(t), "thread {t}");
        }
        assert!(closed.get(500).is_none());
        assert_eq!(closed.remove(450).map(|r| r.len), Some(450));
        assert_eq!(closed.remove(7).map(|r| r.len), Some(7));
        assert!(closed.remove(7).is_none() && closed.get(7).is_none());
        closed.insert(7, list(7));
        let taken = closed.take(3);
        let threads: Vec<u32> = taken.iter().map(|&(t, _)| t).collect();
        let expected: Vec<u32> = (0..500).filter(|&t| t != 450).collect();
        assert_eq!(threads, expected);
        assert!(taken.iter().all(|&(t, r)| r.start == t * 10 && r.len == t));
        assert!(taken.capacity() >= taken.len() + 3);
        assert!(closed.get(3).is_none(), "a take starts afresh");
    }

    #[test]
    fn receives_read_the_same_once_their_thread_exited_and_after_a_cut() {
        let mut stored = ReceiveStore::default();
        // Threads 0 and 1 in slots 0 and 1.
        assert!(stored.push(0, 0, 1, &[2], 2));
        assert!(stored.push(1, 1, 0, &[2], 1));
        assert!(stored.push(0, 0, 5, &[3, 1], 6));
        assert!(stored.close(0, 0));
        // Thread 2 takes slot 0 and the list thread 0 let go, emptied.
        assert!(stored.push(2, 0, 0, &[6, 1], 7));
        assert_eq!(stored.list(0, Some(0)).len(), 2);
        assert_eq!(
            stored.before(0, Some(0), 4, &mut DecodedClock::default()),
            Some(&[2][..])
        );
        assert_eq!(
            stored.before(0, Some(0), 9, &mut DecodedClock::default()),
            Some(&[6, 1][..])
        );
        assert_eq!(
            stored.before(2, Some(0), 0, &mut DecodedClock::default()),
            Some(&[7, 1][..])
        );
        assert_eq!(
            stored.list(2, None).len(),
            0,
            "an open list is found by its slot"
        );
        // A damaged trace's receive after the exit (its slot not handed on: thread 3 in
        // slot 2) reopens the list, the earlier ones kept.
        assert!(stored.push(3, 2, 0, &[1], 1));
        assert!(stored.close(3, 2));
        assert!(stored.push(3, 2, 7, &[6, 1], 8));
        assert_eq!(stored.list(3, Some(2)).len(), 2);
        assert_eq!(
            stored.before(3, Some(2), 5, &mut DecodedClock::default()),
            Some(&[1, 0, 1][..])
        );
        let segment = stored.take();
        assert_eq!(
            segment.before(1, 0, &mut DecodedClock::default()),
            Some(&[2, 1][..])
        );
        assert_eq!(
            segment.before(0, 7, &mut DecodedClock::default()),
            Some(&[6, 1][..])
        );
        assert_eq!(
            segment.before(3, 7, &mut DecodedClock::default()),
            Some(&[6, 1, 8][..])
        );
        assert_eq!(segment.list(2).len(), 1);
        assert_eq!(segment.list(4).len(), 0);
        // The walk goes on with empty lists; a running thread keeps receiving.
        assert!(stored.list(0, Some(0)).is_empty() && stored.list(1, Some(1)).is_empty());
        assert!(stored.push(1, 1, 4, &[9, 3], 5));
        assert_eq!(
            stored.before(1, Some(1), 4, &mut DecodedClock::default()),
            Some(&[9, 5][..])
        );
        assert_eq!(stored.list(1, Some(1)).len(), 1);
        let next = stored.take();
        assert_eq!(next.list(1).len(), 1);
        assert_eq!(next.list(0).len(), 0);
    }

    #[test]
    fn a_stored_clock_grown_away_from_the_buffer_end_moves_and_the_others_stay() {
        let mut stored = ReceiveStore::default();
        assert!(stored.push(0, 0, 3, &[4, 1], 4));
        assert!(stored.push(1, 1, 0, &[4], 1));
        assert_eq!(stored.grow_last(0, 0, &[2, 0, 7], 5), Some(1));
        assert_eq!(
            stored.before(0, Some(0), 3, &mut DecodedClock::default()),
            Some(&[5, 1, 7][..])
        );
        assert_eq!(
            stored.before(0, Some(0), 2, &mut DecodedClock::default()),
            None
        );
        assert_eq!(
            stored.before(1, Some(1), 9, &mut DecodedClock::default()),
            Some(&[4, 1][..])
        );
        assert_eq!(stored.grow_last(1, 1, &[0, 0], 2), Some(0));
        assert_eq!(
            stored.before(1, Some(1), 0, &mut DecodedClock::default()),
            Some(&[4, 2][..])
        );
        assert_eq!(
            stored.before(0, Some(0), 3, &mut DecodedClock::default()),
            Some(&[5, 1, 7][..])
        );
    }

    #[test]
    fn clocks_stored_as_differences_read_back_as_stored() {
        let mut stored = ReceiveStore::default();
        let mut expected: Vec<(u32, Vec<u32>)> = Vec::new();
        // One thread (slot 1) with more receives than are stored between two whole ones,
        // clocks that grow, shrink in an entry (a damaged trace's) and jump by large steps,
        // and a second receive at some events (grown in place).
        let mut clock = vec![0u32; 3];
        for pos in 0..3 * WHOLE_EVERY {
            clock[0] = clock[0].wrapping_mul(3).wrapping_add(pos * 1_000_003) % u32::MAX;
            clock[2] = if pos % 5 == 0 { 0 } else { u32::MAX - pos };
            if pos == 7 {
                clock.push(9);
            }
            let raw = 10 + pos;
            assert!(stored.push(1, 1, pos * 2, &clock, raw));
            let mut own = clock.clone();
            own[1] = raw;
            if pos % 4 == 3 {
                // The other thread stores one in between: not at the buffer's end any more.
                if pos % 8 == 7 {
                    assert!(stored.push(0, 0, pos, &[pos], pos));
                }
                let more = [0, 0, 0, 0, 77 + pos];
                assert_eq!(stored.grow_last(1, 1, &more, raw + 1), Some(5 - own.len()));
                own.resize(5, 0);
                own[4] = 77 + pos;
                own[1] = raw + 1;
            }
            expected.push((pos * 2, own));
        }
        for (pos, clock) in &expected {
            assert_eq!(
                stored.before(1, Some(1), *pos, &mut DecodedClock::default()),
                Some(&clock[..]),
                "at {pos}, open"
            );
        }
        assert!(stored.close(1, 1));
        // Reopened after its exit (a damaged trace), the last one grown again.
        let (last_pos, mut last) = expected.pop().expect("receives");
        assert_eq!(stored.grow_last(1, 1, &[1, 0, 0, 0, 0, 6], 99), Some(1));
        last[0] = last[0].max(1);
        last[1] = 99;
        last.push(6);
        expected.push((last_pos, last));
        let segment = stored.take();
        let mut buf = DecodedClock::default();
        for (i, (pos, clock)) in expected.iter().enumerate() {
            assert_eq!(segment.before(1, *pos, &mut buf), Some(&clock[..]));
            assert_eq!(segment.receive(1, i, &mut buf), Some((*pos, &clock[..])));
        }
        // Read backwards, and with another thread's clock read in between.
        for (i, (pos, clock)) in expected.iter().enumerate().rev() {
            assert_eq!(segment.receive(1, i, &mut buf), Some((*pos, &clock[..])));
            assert!(segment.before(0, u32::MAX, &mut buf).is_some());
        }
    }

    #[test]
    fn a_clock_read_back_during_the_walk_is_read_again_once_it_grew() {
        let mut stored = ReceiveStore::default();
        let mut buf = DecodedClock::default();
        assert!(stored.push(0, 0, 1, &[5, 3], 6));
        assert!(stored.push(0, 0, 4, &[5, 4], 7));
        assert!(stored.push(1, 1, 0, &[2], 1));
        // Thread 0's first receive, decoded (its last is the one kept with its list).
        assert_eq!(stored.before(0, Some(0), 2, &mut buf), Some(&[6, 3][..]));
        assert_eq!(stored.before(0, Some(0), 3, &mut buf), Some(&[6, 3][..]));
        assert!(stored.push(0, 0, 9, &[5, 9], 8));
        assert_eq!(stored.before(0, Some(0), 5, &mut buf), Some(&[7, 4][..]));
        // The list closed and reopened (a damaged trace), its last receive grown: read anew.
        assert!(stored.close(0, 0));
        assert_eq!(stored.before(0, Some(0), 9, &mut buf), Some(&[8, 9][..]));
        assert_eq!(stored.grow_last(0, 0, &[1, 10, 4], 8), Some(1));
        assert_eq!(
            stored.before(0, Some(0), 9, &mut buf),
            Some(&[8, 10, 4][..])
        );
        assert_eq!(stored.before(0, Some(0), 4, &mut buf), Some(&[7, 4][..]));
        let segment = stored.take();
        assert_eq!(segment.before(0, 9, &mut buf), Some(&[8, 10, 4][..]));
        assert_eq!(segment.before(1, 0, &mut buf), Some(&[2, 1][..]));
    }

    #[test]
    fn fork_orders_the_parent_prefix_before_the_child() {
        let mut b = HbBuilder::new(2);
        b.step(0, 0);
        b.step(0, 1);
        b.send(0, Channel::Fork(1));
        b.step(1, 0);
        b.receive(1, 0, &Channel::Fork(1));
        let hb = b.finish();
        assert!(hb.happens_before(0, 1, 1, 0));
        assert!(!hb.happens_before(0, 2, 1, 0));
        assert!(!hb.happens_before(1, 0, 0, 5));
        assert!(hb.complete);
    }

    #[test]
    fn clocks_past_their_budget_are_marked_incomplete() {
        let mut b = HbBuilder::with_budget(4, 5);
        for child in 1..4 {
            b.step(0, child as u32);
            b.send(0, Channel::Fork(child));
            b.step(child, 0);
            b.receive(child, 0, &Channel::Fork(child));
        }
        let hb = b.finish();
        assert!(!hb.complete);
        assert!(
            !hb.happens_before(0, 0, 3, 0),
            "nothing is claimed once abandoned"
        );
    }

    #[test]
    fn a_streaming_builder_lets_go_of_places_nothing_asks_about_and_answers_the_rest_alike() {
        // Thread 0 creates and joins one child after another; thread 1, alive throughout,
        // learns of every third child's end by a tag. The caller still holds records of the
        // events of every 1000th child (`asked`): their places must stay.
        let children = 3 * PLACES_WINDOW;
        let threads = children + 2;
        let asked = |t: usize| t % 1000 == 7;
        let mut whole = HbBuilder::streaming(threads);
        let mut windowed = HbBuilder::streaming(threads);
        let (mut pos0, mut pos1) = (0, 0);
        for b in [&mut whole, &mut windowed] {
            b.step(0, 0);
            b.place_child(0, 1);
            b.send(0, Channel::Fork(1));
            b.step(1, 0);
            b.receive(1, 0, &Channel::Fork(1));
        }
        let mut most_kept = 0;
        for c in 2..threads {
            pos0 += 1;
            pos1 += 1;
            for b in [&mut whole, &mut windowed] {
                b.step(0, pos0);
                b.place_child(0, c);
                b.send(0, Channel::Fork(c));
                b.step(c, 0);
                b.receive(c, 0, &Channel::Fork(c));
                b.forget(&Channel::Fork(c));
                b.step(c, 1);
                b.step(c, 2);
                b.exit(c);
                b.step(0, pos0 + 1);
                b.receive_thread(0, pos0 + 1, c);
                b.step(0, pos0 + 2);
                if c % 3 == 0 {
                    b.send(0, Channel::Tag(c as u64));
                    b.step(1, pos1);
                    b.receive(1, pos1, &Channel::Tag(c as u64));
                }
            }
            pos0 += 2;
            if windowed.wants_letting_go() {
                windowed.let_go(asked);
            }
            most_kept = most_kept.max(windowed.slots.places_held());
            // Thread 1, the newest child, and the oldest child asked about.
            for u in [1, c, 7] {
                for t in [0, 1] {
                    for pos in [0, 1, 2, 3] {
                        assert_eq!(
                            whole.knows_prefix(t, u) > pos,
                            windowed.knows_prefix(t, u) > pos,
                            "does thread {t} know event {pos} of thread {u}, child {c} created"
                        );
                    }
                }
            }
        }
        assert!(whole.complete() && windowed.complete());
        assert!(windowed.slots.let_go_of(500) && !windowed.slots.let_go_of(1007));
        assert!(!whole.slots.let_go_of(500));
        assert!(
            most_kept <= PLACES_WINDOW + threads / 1000 + 2,
            "{most_kept} places kept for {threads} threads"
        );
        // An event of a thread let go abandons the clocks, as one of a thread whose slot went
        // on does.
        windowed.step(500, 3);
        assert!(!windowed.complete());
    }

    use crate::stream::Stream;
    use foresight_trace::builder::TraceBuilder;
    use foresight_trace::event::{AtomicOp, EventKind, LockMode, MemoryOrder};
    use foresight_trace::{ThreadId, Trace};

    /// The clocks of a builder's trace, with these edge kinds.
    fn clocks(b: TraceBuilder, edges: EdgeKinds) -> HappensBefore {
        let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
        let stream = Stream::of_trace(&trace);
        let mut pass = HbPass::new(trace.threads.len(), edges);
        stream.drive(
            trace.merged().map(|m| (m.thread, m.index, m.event.kind)),
            &mut pass,
            &mut |_| {},
        );
        pass.finish()
    }

    /// A main thread and two children, by dense index 0, 1, 2.
    fn three_threads() -> (TraceBuilder, [ThreadId; 3], u32) {
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let t1 = b.spawn(main, s, "t1");
        let t2 = b.spawn(main, s, "t2");
        (b, [main, t1, t2], s)
    }

    const RACES: EdgeKinds = EdgeKinds::SYNC.union(EdgeKinds::LOCK);

    #[test]
    fn a_joined_thread_s_slot_goes_to_the_next_thread_and_an_unjoined_one_s_does_not() {
        let build = |join: bool| {
            let mut b = TraceBuilder::new("t");
            let main = b.main_thread();
            let s = b.site("f", "t.c", 1);
            let t1 = b.spawn(main, s, "t1"); // main: 1 create
            b.write(t1, 0x10, 4, s); // t1: 1
            if join {
                b.join(main, t1, s); // t1: 2 exit; main: 2 request, 3 joined
            } else {
                b.exit(t1); // t1: 2
            }
            let t2 = b.spawn(main, s, "t2");
            b.write(t2, 0x10, 4, s); // t2: 1
            b
        };
        for edges in [RACES, EdgeKinds::DEADLOCK] {
            let hb = clocks(build(true), edges);
            assert_eq!(
                hb.slots.slot_of(1),
                hb.slots.slot_of(2),
                "t2 continues t1's slot"
            );
            assert!(hb.happens_before(1, 2, 2, 1), "t1's exit before t2's write");
            assert!(
                hb.happens_before(0, 4, 2, 0),
                "the creation before t2's start"
            );
            assert!(
                !hb.happens_before(2, 1, 0, 5),
                "nothing of t2 before main's end"
            );
            let mut buf = DecodedClock::default();
            let c = hb
                .receive_before(2, 1, &mut buf)
                .expect("t2's start received its creation");
            assert_eq!(hb.prefix(c, 1), 3, "all of t1");
            assert_eq!(hb.prefix(c, 2), 1, "t2's first event");

            let hb = clocks(build(false), edges);
            assert_ne!(
                hb.slots.slot_of(1),
                hb.slots.slot_of(2),
                "main never learnt t1 ended"
            );
            assert!(!hb.happens_before(1, 1, 2, 1), "t1's write races with t2's");
        }
    }

    #[test]
    fn each_builder_hands_a_slot_on_from_what_its_own_edges_tell_the_creator() {
        // A reaper joins t1 and tells main through a lock-protected flag; main then creates
        // t2. Only the builders whose edges carry that news (a lock's, a read's) know t1 whole
        // at the creation: the slot assignments of the three builders differ.
        let build = || {
            let mut b = TraceBuilder::new("t");
            let main = b.main_thread();
            let s = b.site("f", "t.c", 1);
            let m = b.mutex("m");
            let t1 = b.spawn(main, s, "t1");
            let reaper = b.spawn(main, s, "reaper");
            b.join(reaper, t1, s);
            b.lock(reaper, m, s);
            b.write(reaper, 0x20, 4, s);
            b.unlock(reaper, m, s);
            b.lock(main, m, s);
            b.read(main, 0x20, 4, s);
            b.unlock(main, m, s);
            let t2 = b.spawn(main, s, "t2");
            b.write(t2, 0x10, 4, s);
            b
        };
        let (t1, t2) = (1, 3);
        for (edges, hands_on) in [
            (EdgeKinds::SYNC, false),
            (RACES, true),
            (EdgeKinds::DEADLOCK, true),
        ] {
            let hb = clocks(build(), edges);
            assert_eq!(
                hb.slots.slot_of(t1) == hb.slots.slot_of(t2),
                hands_on,
                "t2 continues t1's slot with {edges:?}"
            );
        }
    }

    #[test]
    fn an_event_after_an_exit_whose_slot_was_handed_on_abandons_the_clocks() {
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let t1 = b.spawn(main, s, "t1");
        b.join(main, t1, s);
        let t2 = b.spawn(main, s, "t2");
        b.write(t2, 0x10, 4, s);
        b.write(t1, 0x10, 4, s); // a damaged trace: t1 after its exit
        let hb = clocks(b, RACES);
        assert!(!hb.complete, "nothing is concluded from ambiguous clocks");
    }

    #[test]
    fn lock_channels_order_alike_above_and_below_the_direct_table() {
        // Ids below DIRECT_LOCKS live in a table, the rest (any u32 of a hostile trace) in the
        // map: the same order either way, and no table sized by a huge id.
        for lock in [0, 1, DIRECT_LOCKS - 1, DIRECT_LOCKS, u32::MAX] {
            let mut b = HbBuilder::new(2);
            b.step(0, 0);
            b.send(0, Channel::Lock(lock));
            b.step(1, 0);
            b.receive(1, 0, &Channel::Lock(lock));
            b.step(1, 1);
            b.receive(1, 1, &Channel::LockReaders(lock));
            assert!(b.published(&Channel::Lock(lock)).is_some());
            assert!(b.published(&Channel::LockReaders(lock)).is_none());
            assert!(b.lock_channels.len() <= 2 * DIRECT_LOCKS as usize);
            let hb = b.finish();
            assert!(hb.happens_before(0, 0, 1, 0), "lock {lock}");
        }
    }

    #[test]
    fn lock_edges_order_critical_sections_only_when_asked() {
        let build = || {
            let (mut b, [_, t1, t2], s) = three_threads();
            let m = b.mutex("m");
            b.lock(t1, m, s); // t1: 1 request, 2 acquired
            b.unlock(t1, m, s); // 3
            b.lock(t2, m, s); // t2: 1 request, 2 acquired
            b
        };
        assert!(!clocks(build(), EdgeKinds::DEADLOCK).happens_before(1, 3, 2, 2));
        let races = clocks(build(), RACES);
        assert!(races.happens_before(1, 3, 2, 2));
        assert!(
            !races.happens_before(1, 3, 2, 1),
            "the request is not ordered"
        );
    }

    #[test]
    fn readers_follow_writers_and_writers_follow_readers_but_readers_not_readers() {
        let (mut b, [main, t1, t2], s) = three_threads();
        let rw = b.object(foresight_trace::tables::ObjectKind::RwLock, "rw");
        b.lock_mode(t1, rw, LockMode::Shared, s); // t1: 1, 2
        b.unlock(t1, rw, s); // 3
        b.lock_mode(t2, rw, LockMode::Shared, s); // t2: 1, 2
        b.unlock(t2, rw, s); // 3
        b.lock(main, rw, s); // main: 3 request, 4 acquired (after two creates)
        b.unlock(main, rw, s); // 5
        b.lock_mode(t1, rw, LockMode::Shared, s); // t1: 4, 5
        let hb = clocks(b, RACES);
        assert!(!hb.happens_before(1, 3, 2, 2), "reader → reader");
        assert!(hb.happens_before(1, 3, 0, 4), "reader → writer");
        assert!(hb.happens_before(2, 3, 0, 4), "reader → writer");
        assert!(hb.happens_before(0, 5, 1, 5), "writer → reader");
    }

    #[test]
    fn reads_from_orders_a_read_after_its_writer_only_when_asked() {
        let build = || {
            let (mut b, [_, t1, t2], s) = three_threads();
            b.write(t1, 0x10, 4, s); // t1: 1
            b.read(t2, 0x10, 4, s); // t2: 1
            b
        };
        assert!(clocks(build(), EdgeKinds::DEADLOCK).happens_before(1, 1, 2, 1));
        assert!(!clocks(build(), RACES).happens_before(1, 1, 2, 1));
    }

    #[test]
    fn a_read_of_several_writes_stores_one_clock_for_its_event() {
        // t1 writes two granules at 1 and 2, t2 the next at 1; t0 then reads all three at once.
        let mut b = HbBuilder::new(3);
        b.step(1, 1);
        b.write(1, 1, 0x10, 8);
        b.step(1, 2);
        b.write(1, 2, 0x18, 8);
        b.step(2, 1);
        b.write(2, 1, 0x20, 8);
        b.step(0, 5);
        b.read(0, 5, 0x10, 24);
        let hb = b.finish();
        assert_eq!(hb.receive_count(0), 1, "one stored clock for the read");
        assert!(hb.happens_before(1, 2, 0, 5));
        assert!(hb.happens_before(2, 1, 0, 5));
        assert!(!hb.happens_before(1, 3, 0, 5));
    }

    #[test]
    fn relaxed_atomics_order_nothing_and_release_acquire_does() {
        let build = |store: MemoryOrder| {
            let (mut b, [_, t1, t2], s) = three_threads();
            let atomic = |op, order| EventKind::Atomic {
                op,
                addr: 0x20,
                size: 4,
                order,
                site: s,
            };
            b.event(t1, atomic(AtomicOp::Store, store)); // t1: 1
            b.event(t2, atomic(AtomicOp::Load, MemoryOrder::Acquire)); // t2: 1
            b
        };
        assert!(!clocks(build(MemoryOrder::Relaxed), RACES).happens_before(1, 1, 2, 1));
        assert!(clocks(build(MemoryOrder::Release), RACES).happens_before(1, 1, 2, 1));
    }

    #[test]
    fn a_condition_wait_releases_and_retakes_its_mutex() {
        let (mut b, [_, t1, t2], s) = three_threads();
        let m = b.mutex("m");
        let c = b.object(foresight_trace::tables::ObjectKind::Condition, "c");
        b.lock(t1, m, s); // t1: 1, 2
        b.event(
            t1,
            EventKind::CondWaitBegin {
                cond: c,
                mutex: m,
                site: s,
            },
        ); // 3
        b.lock(t2, m, s); // t2: 1, 2
        b.unlock(t2, m, s); // 3
        b.event(
            t1,
            EventKind::CondWaitEnd {
                cond: c,
                mutex: m,
                outcome: foresight_trace::event::WaitOutcome::TimedOut,
            },
        ); // 4
        let hb = clocks(b, RACES);
        assert!(hb.happens_before(1, 3, 2, 2), "the wait released m");
        assert!(hb.happens_before(2, 3, 1, 4), "the wait re-took m");
    }

    /// Reads a thread's clock as a race pass would: right after the happens-before pass
    /// handled the event.
    struct Probe {
        hb: HbPass,
        at: (u32, u32),
        clock: Option<VectorClock>,
    }

    impl Pass for Probe {
        type Output = (Option<VectorClock>, bool);
        fn handle(&mut self, ev: &StreamEvent) {
            self.hb.handle(ev);
            if (ev.thread, ev.pos) == self.at {
                self.clock = Some(self.hb.clock(ev.thread).clone());
            }
        }
        fn finish(self) -> Self::Output {
            (self.clock, self.hb.complete())
        }
    }

    fn probe(b: TraceBuilder, hb: HbPass, at: (u32, u32)) -> (Option<VectorClock>, bool) {
        let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
        let mut pass = Probe {
            hb,
            at,
            clock: None,
        };
        Stream::of_trace(&trace).drive(
            trace.merged().map(|m| (m.thread, m.index, m.event.kind)),
            &mut pass,
            &mut |_| {},
        );
        pass.finish()
    }

    #[test]
    fn a_streaming_pass_reads_current_clocks_in_memory_that_does_not_grow_with_the_trace() {
        // 200 hand-offs of one lock between two threads, then a probe of t1's last event.
        let build = || {
            let (mut b, [_, t1, t2], s) = three_threads();
            let m = b.mutex("m");
            for _ in 0..100 {
                b.lock(t1, m, s);
                b.unlock(t1, m, s);
                b.lock(t2, m, s);
                b.unlock(t2, m, s);
            }
            b.lock(t1, m, s); // t1: 301 request, 302 acquired
            b
        };
        let streaming =
            HbPass::with_builder(HbBuilder::with_budget(3, 64).without_snapshots(), RACES);
        let (clock, complete) = probe(build(), streaming, (1, 302));
        assert!(complete, "a send into a known channel stores nothing new");
        assert_eq!(
            clock.expect("probed").get(2),
            301,
            "t2's last release, at 300"
        );
        // Stored clocks grow with every receive and send: the same budget runs out.
        let stored = HbPass::with_builder(HbBuilder::with_budget(3, 64), RACES);
        assert!(!probe(build(), stored, (1, 302)).1);
    }
}
