//! The program's lock annotations (`foresight.h`): class names, subclasses and ranks, each in
//! force from its event on. Subclasses and ranks are kept per object, and applied to the lock
//! table as they come (an annotation of a lock not yet seen waits for its first use); class
//! names are applied when the run is finished.

use foldhash::{HashMap, HashMapExt};

use foresight_trace::event::ObjectId;
use foresight_trace::tables::Tables;

use super::locks::LockSections;
use crate::stream::{Op, StreamEvent};

pub(super) struct Annotations<'t> {
    tables: &'t Tables,
    class_names: HashMap<ObjectId, String>,
    subclasses: HashMap<ObjectId, u32>,
    ranks: HashMap<ObjectId, u32>,
}

impl<'t> Annotations<'t> {
    pub fn new(tables: &'t Tables) -> Self {
        Annotations {
            tables,
            class_names: HashMap::new(),
            subclasses: HashMap::new(),
            ranks: HashMap::new(),
        }
    }

    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent, locks: &mut LockSections) {
        match ev.op {
            Op::LockClassName { lock, name } => {
                if let Some(s) = self.tables.string(name) {
                    self.class_names.insert(lock, s.to_string());
                }
            }
            Op::LockSubclass { lock, subclass } => {
                // Applies to the acquisitions after it (the program declares the level of the
                // lock it is about to take).
                self.subclasses.insert(lock, subclass);
                locks.set_subclass(lock, subclass);
            }
            Op::LockRank { lock, rank } => {
                // Applies from here on: acquisitions before the declaration are not checked.
                self.ranks.insert(lock, rank);
                locks.set_rank(lock, rank);
            }
            _ => {}
        }
    }

    /// The declared class name of a lock (the last one declared).
    pub fn class_name(&self, object: ObjectId) -> Option<&str> {
        self.class_names.get(&object).map(String::as_str)
    }

    /// The subclass in force for a lock (0: the class itself).
    pub fn subclass(&self, object: ObjectId) -> u32 {
        self.subclasses.get(&object).copied().unwrap_or(0)
    }

    /// The rank in force for a lock.
    pub fn rank(&self, object: ObjectId) -> Option<u32> {
        self.ranks.get(&object).copied()
    }
}
