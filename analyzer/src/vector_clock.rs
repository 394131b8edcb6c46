//! Vector clocks over thread slots.
//!
//! A clock has one entry per *slot*, not per thread: a slot is handed on from a thread that
//! has ended to a thread created after it, when the whole of the ended thread happens before
//! the new one's creation (it was joined, or its exit is known to the creator). The slot's
//! entry then counts on where the old thread stopped: the new thread's event at position `p`
//! is entry `offset + p + 1`, `offset` being the sum of its predecessors' lengths. That is
//! sound for happens-before because every event of the old thread is before every event of
//! the new one, so a clock that knows any event of the new thread knows all of the old one.
//! Clocks then have as many entries as threads alive at once (ThreadSanitizer reuses its
//! thread slots the same way), whatever the number of threads a program creates over its life.
//!
//! Read through [`Slots`], an entry is a *prefix length* per thread: the number of events of
//! thread `u` (counted by position in that thread's event list, memory accesses included) that
//! happen before the event the clock belongs to, that event included for its own thread.
//! Prefix lengths, rather than Lamport counters, let the sync-preserving closure (`closure.rs`)
//! use a clock directly as a lower bound on how much of each thread a reordering must contain.

use foldhash::{HashMap, HashMapExt};

/// A vector clock indexed by slot ([`Slots`] says which thread a value belongs to).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VectorClock(Vec<u32>);

impl VectorClock {
    /// The clock that knows nothing (every entry 0), for `slots` slots.
    pub fn new(slots: usize) -> Self {
        Self(vec![0; slots])
    }

    /// The raw entry of a slot.
    pub fn get(&self, slot: usize) -> u32 {
        self.0.get(slot).copied().unwrap_or(0)
    }

    pub fn set(&mut self, slot: usize, value: u32) {
        if slot >= self.0.len() {
            self.0.resize(slot + 1, 0);
        }
        self.0[slot] = value;
    }

    /// Pointwise maximum; returns whether any entry grew.
    pub fn join(&mut self, other: &VectorClock) -> bool {
        self.join_entries(&other.0)
    }

    /// [`VectorClock::join`] with a clock given by its raw entries (a stored one).
    pub fn join_entries(&mut self, other: &[u32]) -> bool {
        if other.len() > self.0.len() {
            self.0.resize(other.len(), 0);
        }
        // Branch-free, so that the compiler does several entries at a time.
        let mut grew = false;
        for (mine, &theirs) in self.0.iter_mut().zip(other) {
            grew |= theirs > *mine;
            *mine = (*mine).max(theirs);
        }
        grew
    }

    /// Forgets every entry, keeping the room (a slot's clock handed on to a new thread).
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Whether every entry of `self` is at most the matching entry of `other`.
    pub fn le(&self, other: &VectorClock) -> bool {
        self.0.iter().enumerate().all(|(i, &v)| v <= other.get(i))
    }

    /// The raw entries, by slot.
    pub fn entries(&self) -> &[u32] {
        &self.0
    }
}

/// Where a thread's events sit in its slot: 8 bytes a thread ever created. Where they end is
/// not kept: it is where the slot's next holder starts, which only [`Slots::prefix_in`] asks
/// for (from the holder lists, which a builder of stored clocks keeps); a question about one
/// of the thread's events (`raw`, [`Slots::reach`]) needs only where they start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    slot: u32,
    /// The slot's entry before the thread's first event, with [`HANDED_ON`] set once the
    /// slot went on to another thread (offsets stay below it: `HbBuilder::place_child` hands
    /// a slot on only below `u32::MAX / 2`).
    offset: u32,
}

const HANDED_ON: u32 = 1 << 31;

const UNPLACED: Place = Place {
    slot: u32::MAX,
    offset: 0,
};

impl Place {
    #[inline]
    fn start(self) -> u32 {
        self.offset & !HANDED_ON
    }

    #[inline]
    fn handed_on(self) -> bool {
        self.offset & HANDED_ON != 0
    }
}

/// Which thread holds which slot, and from which entry on: what turns a clock's raw entries
/// into prefix lengths of threads. It grows by 8 bytes per thread ever created (its place,
/// made for every thread at once), and by 4 more where the holders of each slot are listed
/// (the builder of stored clocks, whose readers ask which thread an entry speaks of); clocks
/// grow with the slots. Where the holders are not listed, the places of threads whose slot
/// went on can be let go once nothing will ask about their events ([`Slots::let_go`]): the
/// table then holds the newest threads' places, and a map the older threads' still needed.
#[derive(Clone, Debug)]
pub struct Slots {
    /// By dense thread index from `first` on; threads not placed yet have `slot == u32::MAX`.
    places: Vec<Place>,
    /// The thread `places` starts with: below it, a thread's place is in `kept`, or was let go.
    first: usize,
    /// The places of threads below `first` that were not let go: those still holding their
    /// slot (or without one yet), and those something may still ask about.
    kept: HashMap<u32, Place>,
    /// How many threads the table holds before its oldest are let go: 0 for a table that
    /// keeps every place ([`Slots::for_threads`]).
    window: usize,
    /// The table's length at which [`Slots::wants_letting_go`] says so next.
    let_go_at: usize,
    /// By slot: the thread that holds it now.
    holder: Vec<u32>,
    /// By slot: its threads, in order (their offsets, which grow along the list, are in
    /// `places`), when kept ([`Slots::listing_holders`]).
    holders: Option<Vec<Vec<u32>>>,
}

/// The place of a thread let go ([`Slots::let_go`]): its slot went on, and it has none now.
const LET_GO: Place = Place {
    slot: u32::MAX,
    offset: HANDED_ON,
};

impl Default for Slots {
    fn default() -> Self {
        Self::for_threads(0)
    }
}

impl Slots {
    /// Room for the places of `threads` threads made at once: the table is not grown by
    /// doubling (a quarter of it would stay unused at 10^5 threads). Each slot's holders are
    /// not listed: a clock's entry is read by thread ([`Slots::reach`]), not by slot.
    pub fn for_threads(threads: usize) -> Self {
        Self {
            places: vec![UNPLACED; threads],
            first: 0,
            kept: HashMap::new(),
            window: 0,
            let_go_at: usize::MAX,
            holder: Vec::new(),
            holders: None,
        }
    }

    /// Places made as threads are placed, in a table of about `window` threads whose oldest
    /// places are let go ([`Slots::let_go`]), for a trace of `threads` threads.
    pub fn windowed(window: usize, threads: usize) -> Self {
        Self {
            places: Vec::with_capacity(window.min(threads)),
            window,
            let_go_at: window,
            ..Self::for_threads(0)
        }
    }

    /// These slots, listing each slot's holders from now on (before any thread is placed):
    /// what [`Slots::known`] and [`Slots::prefix_in`] read.
    pub fn listing_holders(mut self) -> Self {
        debug_assert!(self.holder.is_empty());
        self.holders = Some(Vec::new());
        self
    }

    /// The place of `thread`: none past the table (not placed yet). One look for a thread of
    /// the table (a thread below it wraps past its end); below it, the map of those kept.
    #[inline(always)]
    fn place(&self, thread: usize) -> Option<Place> {
        match self.places.get(thread.wrapping_sub(self.first)) {
            Some(&p) => Some(p),
            None => self.place_outside(thread),
        }
    }

    #[cold]
    #[inline(never)]
    fn place_outside(&self, thread: usize) -> Option<Place> {
        if thread >= self.first {
            return None;
        }
        Some(self.kept.get(&(thread as u32)).copied().unwrap_or(LET_GO))
    }

    /// The slot of `thread` while it holds it, else an index no slot has (one look at its
    /// place, for the walk's every event).
    #[inline]
    pub fn held_index(&self, thread: usize) -> usize {
        match self.place(thread) {
            // An unplaced thread's slot is past every slot.
            Some(p) if !p.handed_on() => p.slot as usize,
            _ => usize::MAX,
        }
    }

    /// The slot of `thread`, if it has one (a thread let go has none).
    #[inline]
    pub fn slot_of(&self, thread: usize) -> Option<usize> {
        match self.place(thread) {
            Some(p) if p.slot != u32::MAX => Some(p.slot as usize),
            _ => None,
        }
    }

    /// Whether `thread` was ever placed (it has a slot, or had one and was let go).
    #[inline]
    pub fn placed(&self, thread: usize) -> bool {
        self.place(thread)
            .is_some_and(|p| p.slot != u32::MAX || p.handed_on())
    }

    /// The thread that holds `slot` now.
    pub fn holder(&self, slot: usize) -> Option<u32> {
        self.holder.get(slot).copied()
    }

    /// The slot's entry before `thread`'s first event.
    #[inline]
    pub fn offset_of(&self, thread: usize) -> u32 {
        self.place(thread).map_or(0, |p| p.start())
    }

    /// Gives `thread` a slot of its own, if it has none yet.
    pub fn place_fresh(&mut self, thread: usize) -> usize {
        if let Some(s) = self.slot_of(thread) {
            return s;
        }
        let slot = self.holder.len();
        self.holder.push(thread as u32);
        if let Some(holders) = &mut self.holders {
            holders.push(vec![thread as u32]);
        }
        self.put(thread, slot as u32, 0);
        slot
    }

    /// Hands `slot` on to `thread`, whose events count from `offset` on (the slot's last
    /// holder ended there; below [`HANDED_ON`]). The caller has checked that the whole of that
    /// holder happens before `thread`.
    pub fn hand_on(&mut self, slot: usize, thread: usize, offset: u32) {
        debug_assert!(self.slot_of(thread).is_none());
        debug_assert!(offset < HANDED_ON);
        let old = std::mem::replace(&mut self.holder[slot], thread as u32) as usize;
        // A slot's holder is never let go: its place is in the table or kept.
        match old.checked_sub(self.first) {
            Some(i) => self.places[i].offset |= HANDED_ON,
            None => {
                if let Some(p) = self.kept.get_mut(&(old as u32)) {
                    p.offset |= HANDED_ON;
                }
            }
        }
        if let Some(holders) = &mut self.holders {
            holders[slot].push(thread as u32);
        }
        self.put(thread, slot as u32, offset);
    }

    /// Places the table and the map of those kept hold.
    #[cfg(test)]
    pub fn places_held(&self) -> usize {
        self.places.len() + self.kept.len()
    }

    /// Whether the place of `thread` was let go ([`Slots::let_go`]).
    #[inline]
    pub fn let_go_of(&self, thread: usize) -> bool {
        thread < self.first && !self.kept.contains_key(&(thread as u32))
    }

    /// Whether the slot of `thread` was handed on to another thread.
    #[inline]
    pub fn handed_on(&self, thread: usize) -> bool {
        self.place(thread).is_some_and(|p| p.handed_on())
    }

    fn put(&mut self, thread: usize, slot: u32, offset: u32) {
        let place = Place { slot, offset };
        let Some(i) = thread.checked_sub(self.first) else {
            self.kept.insert(thread as u32, place);
            return;
        };
        if i >= self.places.len() {
            self.places.resize(i + 1, UNPLACED);
        }
        self.places[i] = place;
    }

    /// Whether the table grew to its window since its oldest places were last let go (or
    /// twice what it was when none could be).
    #[inline]
    pub fn wants_letting_go(&self) -> bool {
        self.places.len() >= self.let_go_at
    }

    /// Lets go of the places of the table's oldest three quarters, and of those kept, whose
    /// thread's slot went on and that `asked` does not name: the caller vouches that nothing
    /// will ask where their events sit (every event of theirs was seen, and no record of one
    /// is left to compare with a clock). The others below the table go to the map of those
    /// kept; if they are so many that the map would take more than the table, the table stays
    /// as it is, to be looked at again once it doubled. Not for slots that list their holders
    /// (their readers find every holder's place).
    pub fn let_go(&mut self, asked: impl Fn(usize) -> bool) {
        debug_assert!(self.holders.is_none());
        let let_go = |t: usize, p: &Place| p.handed_on() && !asked(t);
        self.kept.retain(|&t, p| !let_go(t as usize, p));
        let older = self.places.len() - self.places.len() / 4;
        let first = self.first;
        let kept = (self.places[..older].iter().enumerate())
            .filter(|&(i, p)| !let_go(first + i, p))
            .count();
        // A thread kept in the map takes about twice its place in the table.
        if kept * 2 > older {
            self.let_go_at = self.places.len() * 2;
            return;
        }
        for (i, p) in self.places.drain(..older).enumerate() {
            if !let_go(first + i, &p) {
                self.kept.insert((first + i) as u32, p);
            }
        }
        self.first += older;
        self.let_go_at = self.window.max(self.places.len() * 2);
    }

    /// The raw entry that says "the first `prefix` events of `thread`" (`thread` placed).
    #[inline]
    pub fn raw(&self, thread: usize, prefix: u32) -> u32 {
        self.offset_of(thread).saturating_add(prefix)
    }

    /// How far a clock (by its raw entries) reaches into `thread`: the number of its events
    /// that happen before (or at) the clock's event while `thread` holds its slot, and at
    /// least its length once its slot went on and the clock knows all of it. Exact for what
    /// it is asked about one of the thread's events: whether the clock knows the event at
    /// `pos` is `reach > pos` (the event's raw entry is below the slot's next holder's
    /// first). One look at the thread's place, so the race pass asks it at each access.
    #[inline]
    pub fn reach(&self, entries: &[u32], thread: usize) -> u32 {
        // A thread let go reads as none: nothing asks about its events any more.
        let Some(p) = self.place(thread) else {
            return 0;
        };
        let v = entries.get(p.slot as usize).copied().unwrap_or(0);
        v.saturating_sub(p.start())
    }

    /// [`Slots::reach`] of the current clock of `thread` (`clocks` by slot) into `other`,
    /// when both threads are in the table: the race pass asks at each access, and a look at
    /// each place is all it takes. None when either is not (placed past it, or kept or let go
    /// below it).
    #[inline(always)]
    pub fn reach_in_table(
        &self,
        clocks: &[VectorClock],
        thread: usize,
        other: usize,
    ) -> Option<u32> {
        let t = self.places.get(thread.wrapping_sub(self.first))?;
        let o = self.places.get(other.wrapping_sub(self.first))?;
        // A thread whose slot went on has no clock; one not placed yet has none either.
        let clock = match t.handed_on() {
            false => clocks.get(t.slot as usize),
            true => None,
        };
        let v = clock.map_or(0, |c| c.get(o.slot as usize));
        Some(v.saturating_sub(o.start()))
    }

    /// How many events of `thread` happen before (or at) the clock's event.
    #[cfg(test)]
    pub fn prefix(&self, clock: &VectorClock, thread: usize) -> u32 {
        self.prefix_in(clock.entries(), thread)
    }

    /// [`Slots::prefix`] of a clock given by its raw entries (a stored one). A thread whose
    /// slot went on ends where the next holder starts, which is read from the slot's holder
    /// list; without one ([`Slots::listing_holders`]) the answer is [`Slots::reach`]'s.
    #[inline]
    pub fn prefix_in(&self, entries: &[u32], thread: usize) -> u32 {
        let Some(p) = self.place(thread) else {
            return 0;
        };
        let mut v = entries.get(p.slot as usize).copied().unwrap_or(0);
        if p.handed_on() && v > p.start() {
            v = v.min(self.end_of(p));
        }
        v.saturating_sub(p.start())
    }

    /// The slot's entry after the last event of a thread whose slot went on: the next holder's
    /// offset.
    #[cold]
    fn end_of(&self, p: Place) -> u32 {
        // Slots that list their holders let none go: every place is in the table.
        debug_assert_eq!(self.first, 0);
        let Some(list) = self.holders.as_ref().and_then(|h| h.get(p.slot as usize)) else {
            return u32::MAX;
        };
        let next = list.partition_point(|&t| self.places[t as usize].start() <= p.start());
        list.get(next)
            .map_or(u32::MAX, |&t| self.places[t as usize].start())
    }

    /// The threads a clock knows of, each with its prefix length: per slot, the latest holder
    /// the clock knows any event of. Its predecessors in the slot are known whole (they happen
    /// before its first event, whose stored clock says so). The clock is given by its raw
    /// entries (a stored one, or [`VectorClock::entries`]); the slots list their holders
    /// ([`Slots::listing_holders`]).
    pub fn known<'a>(&'a self, entries: &'a [u32]) -> impl Iterator<Item = (usize, u32)> + 'a {
        debug_assert!(self.holders.is_some() || self.holder.is_empty());
        debug_assert_eq!(self.first, 0);
        let holders = self.holders.as_deref().unwrap_or(&[]);
        entries
            .iter()
            .enumerate()
            .filter(|&(_, &v)| v > 0)
            .filter_map(move |(slot, &v)| {
                let holders = holders.get(slot)?;
                // The next holder (if any) starts at or past `v`: the one found is not known
                // past its end.
                let i = holders.partition_point(|&t| self.places[t as usize].start() < v);
                let thread = holders[i.checked_sub(1)?];
                Some((thread as usize, v - self.places[thread as usize].start()))
            })
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

    #[test]
    fn a_slot_handed_on_reads_as_the_old_thread_whole_and_the_new_one_by_prefix() {
        let mut slots = Slots::default().listing_holders();
        assert_eq!(slots.place_fresh(0), 0);
        assert_eq!(slots.place_fresh(1), 1);
        // Thread 1 had 5 events; thread 2 continues its slot.
        slots.hand_on(1, 2, 5);
        let mut clock = VectorClock::default();
        clock.set(1, 3);
        assert_eq!(slots.prefix(&clock, 1), 3);
        assert_eq!(slots.prefix(&clock, 2), 0);
        clock.set(1, 7);
        assert_eq!(slots.prefix(&clock, 1), 5, "the old thread whole");
        assert_eq!(slots.prefix(&clock, 2), 2);
        assert_eq!(slots.prefix(&clock, 9), 0, "a thread never placed");
        assert_eq!(
            slots.known(clock.entries()).collect::<Vec<_>>(),
            vec![(2, 2)]
        );
        clock.set(1, 5);
        assert_eq!(
            slots.known(clock.entries()).collect::<Vec<_>>(),
            vec![(1, 5)]
        );
        assert!(slots.handed_on(1) && !slots.handed_on(2));
    }

    #[test]
    fn a_thread_between_two_holders_of_a_slot_ends_where_the_next_one_starts() {
        let mut slots = Slots::for_threads(2).listing_holders();
        assert_eq!(slots.place_fresh(0), 0);
        // Threads 1, 2, 3 hold slot 0 one after another, with 4, 3 and 6 events.
        slots.hand_on(0, 1, 4);
        slots.hand_on(0, 2, 7);
        slots.hand_on(0, 3, 10);
        let mut clock = VectorClock::default();
        clock.set(0, 12);
        assert_eq!(
            [0, 1, 2, 3].map(|t| slots.prefix(&clock, t)),
            [4, 3, 3, 2],
            "every earlier holder whole, the last by prefix"
        );
        clock.set(0, 6);
        assert_eq!([0, 1, 2, 3].map(|t| slots.prefix(&clock, t)), [4, 2, 0, 0]);
        assert_eq!(
            slots.known(clock.entries()).collect::<Vec<_>>(),
            vec![(1, 2)]
        );
        clock.set(0, 7);
        assert_eq!(
            slots.known(clock.entries()).collect::<Vec<_>>(),
            vec![(1, 3)]
        );
        assert_eq!(slots.offset_of(2), 7);
        assert_eq!(slots.holder(0), Some(3));
        assert!(slots.handed_on(2) && !slots.handed_on(3));
        assert_eq!(slots.slot_of(2), Some(0));
        assert_eq!(slots.slot_of(5), None);
    }

    #[test]
    fn slots_without_holder_lists_answer_questions_about_events_alike() {
        let mut listed = Slots::for_threads(4).listing_holders();
        let mut unlisted = Slots::for_threads(4);
        for slots in [&mut listed, &mut unlisted] {
            slots.place_fresh(0);
            // Threads 1, 2, 3 hold slot 1 one after another, with 4, 3 and 6 events.
            slots.place_fresh(1);
            slots.hand_on(1, 2, 4);
            slots.hand_on(1, 3, 7);
            assert_eq!(slots.holder(1), Some(3));
            assert!(slots.handed_on(1) && slots.handed_on(2) && !slots.handed_on(3));
            assert_eq!(slots.held_index(2), usize::MAX);
            assert_eq!(slots.held_index(3), 1);
        }
        for v in 0..=14 {
            let clock = [0, v];
            for t in 0..4 {
                let (exact, reach) = (listed.prefix_in(&clock, t), unlisted.reach(&clock, t));
                assert_eq!(reach, listed.reach(&clock, t));
                let length = [0, 4, 3, u32::MAX][t];
                for pos in 0..length.min(20) {
                    assert_eq!(exact > pos, reach > pos, "thread {t} at {pos}, entry {v}");
                }
                assert_eq!(exact, reach.min(length));
            }
        }
    }
}
