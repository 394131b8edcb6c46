//! Per-thread state for the threads alive. A program that creates a thread per request has
//! created 10^5 threads by the end while 8 ran at once: a table with an entry per thread ever
//! created costs its entry size for each, one that hands a thread's entry on once the thread
//! exited costs 4 bytes for each and an entry per thread alive.

/// An entry per thread that has one, made at the thread's first use and handed on to a later
/// thread when [`Live::release`]d (its value reset, its room kept).
#[derive(Debug)]
pub(super) struct Live<T> {
    /// Per thread ever created (dense index): where its entry is, or [`NONE`].
    at: Vec<u32>,
    entries: Vec<T>,
    /// Entries released, for the next thread that needs one.
    free: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl<T: Default> Live<T> {
    /// A table for `threads` threads, none with an entry yet.
    pub fn new(threads: usize) -> Self {
        Live {
            at: vec![NONE; threads],
            entries: Vec::new(),
            free: Vec::new(),
        }
    }

    /// How many threads the table is for.
    pub fn threads(&self) -> usize {
        self.at.len()
    }

    /// The entry of thread `t`, if it has one.
    #[inline]
    pub fn get(&self, t: usize) -> Option<&T> {
        match self.at[t] {
            NONE => None,
            i => Some(&self.entries[i as usize]),
        }
    }

    /// The entry of thread `t`, made (as `T::default()`) if it has none.
    #[inline]
    pub fn get_mut(&mut self, t: usize) -> &mut T {
        match self.at[t] {
            NONE => self.make(t),
            i => &mut self.entries[i as usize],
        }
    }

    /// The entry of thread `t` to change, if it has one.
    #[inline]
    pub fn get_mut_if_any(&mut self, t: usize) -> Option<&mut T> {
        match self.at[t] {
            NONE => None,
            i => Some(&mut self.entries[i as usize]),
        }
    }

    #[cold]
    #[inline(never)]
    fn make(&mut self, t: usize) -> &mut T {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.entries.push(T::default());
                (self.entries.len() - 1) as u32
            }
        };
        self.at[t] = i;
        &mut self.entries[i as usize]
    }

    /// Thread `t` needs its entry no more: `reset` makes it as new (keeping its room) and it
    /// goes to the next thread that needs one.
    pub fn release(&mut self, t: usize, reset: impl FnOnce(&mut T)) {
        let i = self.at[t];
        if i == NONE {
            return;
        }
        reset(&mut self.entries[i as usize]);
        self.at[t] = NONE;
        self.free.push(i);
    }

    /// Every entry, those released included (as reset).
    pub fn entries_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.iter_mut()
    }

    /// Every entry, those released included (as reset).
    pub fn entries(&self) -> impl Iterator<Item = &T> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_released_goes_to_the_next_thread_reset() {
        let mut live: Live<Vec<u32>> = Live::new(4);
        assert!(live.get(0).is_none());
        live.get_mut(0).push(7);
        live.get_mut(1).push(8);
        assert_eq!(live.get(0).map(Vec::as_slice), Some(&[7][..]));
        live.release(0, Vec::clear);
        assert!(live.get(0).is_none());
        assert!(
            live.get_mut(2).is_empty(),
            "a released entry comes back reset"
        );
        live.get_mut(2).push(9);
        assert_eq!(
            live.entries().count(),
            2,
            "the released entry was handed on"
        );
        assert_eq!(live.get(1).map(Vec::as_slice), Some(&[8][..]));
        assert_eq!(live.get(2).map(Vec::as_slice), Some(&[9][..]));
        live.release(3, Vec::clear);
        assert_eq!(live.threads(), 4);
    }
}
