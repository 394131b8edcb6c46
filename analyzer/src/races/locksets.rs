//! Locksets: the locks a thread holds at an access, interned so that an access carries one id.
//! Two accesses that hold one lock in modes that exclude each other (not both read) can never
//! meet in any schedule, and no reordering is asked about them.

use foldhash::{HashMap, HashMapExt};

/// A lock held in a mode: `shared` for the read side of a rwlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Held {
    pub(crate) lock: u32,
    pub(crate) shared: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Locksets {
    sets: Vec<Vec<Held>>,
    ids: HashMap<Vec<Held>, u32>,
}

impl Default for Locksets {
    fn default() -> Self {
        Self::new()
    }
}

impl Locksets {
    /// The empty lockset has id 0.
    pub(crate) const EMPTY: u32 = 0;

    pub(crate) fn new() -> Self {
        let mut ids = HashMap::new();
        ids.insert(Vec::new(), 0);
        Self {
            sets: vec![Vec::new()],
            ids,
        }
    }

    /// The id of `held` (any order; a lock held twice, as a recursive mutex is, counts once).
    pub(crate) fn intern(&mut self, held: &[Held]) -> u32 {
        let mut set = held.to_vec();
        set.sort_unstable();
        set.dedup();
        if let Some(&id) = self.ids.get(&set) {
            return id;
        }
        let id = self.sets.len() as u32;
        self.sets.push(set.clone());
        self.ids.insert(set, id);
        id
    }

    pub(crate) fn get(&self, id: u32) -> &[Held] {
        self.sets.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// Whether some lock in both sets is held exclusively by at least one side.
    pub(crate) fn exclude(&self, a: u32, b: u32) -> bool {
        if a == Self::EMPTY || b == Self::EMPTY {
            return false;
        }
        let (a, b) = (self.get(a), self.get(b));
        a.iter().any(|x| {
            b.iter()
                .any(|y| x.lock == y.lock && !(x.shared && y.shared))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(lock: u32, shared: bool) -> Held {
        Held { lock, shared }
    }

    #[test]
    fn interning_ignores_order_and_repeats() {
        let mut l = Locksets::new();
        let a = l.intern(&[held(2, false), held(1, false)]);
        let b = l.intern(&[held(1, false), held(2, false), held(1, false)]);
        assert_eq!(a, b);
        assert_eq!(l.intern(&[]), Locksets::EMPTY);
        assert_eq!(l.get(a), &[held(1, false), held(2, false)]);
    }

    #[test]
    fn a_common_lock_excludes_unless_both_only_read_it() {
        let mut l = Locksets::new();
        let w1 = l.intern(&[held(1, false)]);
        let r1 = l.intern(&[held(1, true)]);
        let r1b = l.intern(&[held(1, true), held(3, false)]);
        let w2 = l.intern(&[held(2, false)]);
        assert!(l.exclude(w1, r1));
        assert!(!l.exclude(r1, r1b));
        assert!(!l.exclude(w1, w2));
        assert!(!l.exclude(w1, Locksets::EMPTY));
    }
}
