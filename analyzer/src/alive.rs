//! Per-thread state for the threads alive. A program that creates a thread per request has
//! created 10^5 threads by the end while 8 ran at once: a table with an entry per thread ever
//! created costs its entry size for each. The model's and the race pass's tables are kept by
//! *slot* instead: a dense index of the threads alive, handed out at a thread's first event and
//! taken back once it exited holding no lock and waiting for none (no later event of the trace
//! needs its state: a join names the thread it waits for, but reads none of these tables). One
//! index ([`Alive`], 2 bytes per thread ever created) serves every table of its owner, each of
//! which holds an entry per slot ([`BySlot`]).

/// Which slot each thread holds, if any.
#[derive(Debug)]
pub(crate) struct Alive {
    /// Per thread ever created (dense index): its slot, or [`NARROW_NONE`], while every slot
    /// handed out fits 16 bits (threads alive at once, not ever created: a program has that
    /// many at once rarely); 2 bytes a thread ever created.
    at: Vec<u16>,
    /// The same in 32 bits ([`NONE`] for none), once a slot does not fit: `at` is then empty.
    wide: Vec<u32>,
    /// Slots given back, for the next thread that starts.
    free: Vec<u32>,
    /// Slots handed out so far.
    slots: u32,
}

const NONE: u32 = u32::MAX;
const NARROW_NONE: u16 = u16::MAX;

impl Alive {
    /// An index for `threads` threads, none with a slot yet.
    pub fn new(threads: usize) -> Self {
        Alive {
            at: vec![NARROW_NONE; threads],
            wide: Vec::new(),
            free: Vec::new(),
            slots: 0,
        }
    }

    /// How many threads the index is for.
    pub fn threads(&self) -> usize {
        self.at.len().max(self.wide.len())
    }

    /// Thread `t`'s slot, handed out now if it has none.
    #[inline(always)]
    pub fn slot(&mut self, t: usize) -> usize {
        match self.get(t) {
            Some(s) => s,
            None => self.hand_out(t),
        }
    }

    /// Thread `t`'s slot, if it holds one.
    #[inline]
    pub fn get(&self, t: usize) -> Option<usize> {
        if self.wide.is_empty() {
            match self.at.get(t) {
                Some(&NARROW_NONE) | None => None,
                Some(&s) => Some(s as usize),
            }
        } else {
            match self.wide.get(t) {
                Some(&NONE) | None => None,
                Some(&s) => Some(s as usize),
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn hand_out(&mut self, t: usize) -> usize {
        let s = self.free.pop().unwrap_or_else(|| {
            self.slots += 1;
            self.slots - 1
        });
        if self.wide.is_empty() && s >= u32::from(NARROW_NONE) {
            self.wide = self
                .at
                .iter()
                .map(|&s| if s == NARROW_NONE { NONE } else { u32::from(s) })
                .collect();
            self.at = Vec::new();
        }
        self.set(t, s);
        s as usize
    }

    fn set(&mut self, t: usize, s: u32) {
        if self.wide.is_empty() {
            self.at[t] = if s == NONE { NARROW_NONE } else { s as u16 };
        } else {
            self.wide[t] = s;
        }
    }

    /// Thread `t` needs its slot no more; the tables keyed by slot must have reset its
    /// entries, which go to the next thread that starts.
    pub fn release(&mut self, t: usize) {
        if let Some(s) = self.get(t) {
            self.set(t, NONE);
            self.free.push(s as u32);
        }
    }
}

/// A table of one entry per slot of an [`Alive`] index, made (as `T::default()`) when first
/// asked for.
#[derive(Debug, Default)]
pub(crate) struct BySlot<T>(Vec<T>);

impl<T: Default> BySlot<T> {
    /// The entry of slot `s`, if it was made.
    #[inline]
    pub fn get(&self, s: usize) -> Option<&T> {
        self.0.get(s)
    }

    /// The entry of slot `s`, made if it was not.
    #[inline(always)]
    pub fn get_mut(&mut self, s: usize) -> &mut T {
        if s >= self.0.len() {
            self.grow(s);
        }
        &mut self.0[s]
    }

    /// The entry of slot `s` to change, if it was made.
    #[inline]
    pub fn get_mut_if_any(&mut self, s: usize) -> Option<&mut T> {
        self.0.get_mut(s)
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, s: usize) {
        self.0.resize_with(s + 1, T::default);
    }

    /// Every entry, those of slots given back included (as reset).
    pub fn entries_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut()
    }

    /// Every entry, those of slots given back included (as reset).
    pub fn entries(&self) -> impl Iterator<Item = &T> {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_given_back_goes_to_the_next_thread() {
        let mut alive = Alive::new(4);
        let mut held: BySlot<Vec<u32>> = BySlot::default();
        assert_eq!(alive.get(0), None);
        let s0 = alive.slot(0);
        held.get_mut(s0).push(7);
        let s1 = alive.slot(1);
        held.get_mut(s1).push(8);
        assert_ne!(s0, s1);
        assert_eq!(alive.slot(0), s0, "a thread keeps its slot");
        held.get_mut(s0).clear();
        alive.release(0);
        assert_eq!(alive.get(0), None);
        let s2 = alive.slot(2);
        assert_eq!(s2, s0, "the slot given back is handed on");
        assert!(held.get_mut(s2).is_empty());
        assert_eq!(held.entries().count(), 2, "two slots for three threads");
        assert_eq!(held.get(s1).map(Vec::as_slice), Some(&[8][..]));
        alive.release(3);
        assert_eq!(alive.threads(), 4);
        assert_eq!(
            alive.get(9),
            None,
            "a thread the index is not for holds none"
        );
    }

    #[test]
    fn slots_past_16_bits_keep_every_thread_s_slot() {
        let threads = 70_000;
        let mut alive = Alive::new(threads);
        // Every thread alive at once: the slots outgrow the 16-bit table.
        for t in (0..threads).rev() {
            assert_eq!(alive.slot(t), threads - 1 - t);
        }
        for t in [0, 1, 4_463, 4_464, 4_465, threads - 1] {
            assert_eq!(alive.get(t), Some(threads - 1 - t));
        }
        alive.release(4_464);
        assert_eq!(alive.get(4_464), None);
        assert_eq!(alive.get(4_465), Some(threads - 1 - 4_465));
        alive.release(threads - 1);
        let mut after = Alive::new(2);
        assert_eq!(after.slot(1), 0);
        after.release(1);
        assert_eq!(after.slot(0), 0, "a slot given back in the narrow table");
        assert_eq!((alive.threads(), after.threads()), (threads, 2));
    }
}
