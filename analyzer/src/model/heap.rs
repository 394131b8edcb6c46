//! Heap blocks that hold locks: the allocation whose block holds a lock, to key and name the
//! class of a lock that was never initialised by a call (a `std::mutex` inside a `new
//! Account`, a `PTHREAD_MUTEX_INITIALIZER` copied into a `malloc`ed struct). Such a lock's
//! first use says little about its role; the allocation site of its holder says what it is.
//!
//! Only blocks that hold a lock are kept: the locks' addresses are known from the object
//! table before the walk, so an allocation costs one binary search in them, a free one lookup
//! among the blocks found, and the memory is a function of the locks, not of the heap.

use foldhash::{HashMap, HashMapExt};

use foresight_trace::event::SiteId;
use foresight_trace::tables::ClassKey;
use foresight_trace::tables::Tables;

use crate::stream::{Op, StreamEvent};

pub(super) struct HeapBlocks {
    /// The addresses of the locks whose class could come from a heap block (not static),
    /// sorted, without duplicates.
    lock_addrs: Vec<u64>,
    /// Per lock address: the live block that holds it (start, allocation site).
    holder: HashMap<u64, (u64, SiteId)>,
    /// Per live block that holds locks: their addresses.
    blocks: HashMap<u64, Vec<u64>>,
}

impl HeapBlocks {
    pub fn new(tables: &Tables) -> Self {
        let mut lock_addrs: Vec<u64> = tables
            .objects
            .values()
            .filter(|o| o.kind.is_lock() && !matches!(o.class, ClassKey::Static(_)))
            .map(|o| o.address)
            .collect();
        lock_addrs.sort_unstable();
        lock_addrs.dedup();
        HeapBlocks {
            lock_addrs,
            holder: HashMap::new(),
            blocks: HashMap::new(),
        }
    }

    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent) {
        match ev.op {
            Op::Alloc { addr, size, site } => {
                let end = addr.saturating_add(size);
                let mut i = self.lock_addrs.partition_point(|&a| a < addr);
                while i < self.lock_addrs.len() && self.lock_addrs[i] < end {
                    let lock = self.lock_addrs[i];
                    self.holder.insert(lock, (addr, site));
                    self.blocks.entry(addr).or_default().push(lock);
                    i += 1;
                }
            }
            Op::Free { addr, .. } => {
                if let Some(locks) = self.blocks.remove(&addr) {
                    for lock in locks {
                        if self.holder.get(&lock).is_some_and(|h| h.0 == addr) {
                            self.holder.remove(&lock);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The allocation site of the live block holding a lock at `addr`, and the lock's offset
    /// in it.
    pub fn block_of(&self, addr: u64) -> Option<(SiteId, u64)> {
        self.holder
            .get(&addr)
            .map(|&(start, site)| (site, addr - start))
    }
}
