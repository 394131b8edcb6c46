//! A segment's critical sections: the one large table of a segment (56 bytes a section), kept
//! in blocks of [`BLOCK`] sections, with the blocks of dropped segments kept for the next.
//!
//! Blocks, not one vector: a vector grown by doubling holds up to twice what it needs at the
//! moment that counts, the segment's end (at 10^5 short threads, 16,390 sections a segment in
//! a table of 32,768: 0.9 MB of a peak of 9), and each growth copies the table and leaves the
//! old storage in the allocator's free space; a block is written once and never moved, and the
//! last one is the only one with room.
//!
//! Kept blocks: a trace read in segments builds one [`Run`](super::Run) per segment and drops
//! it once it is analysed, and the allocator hands storage that large back to the kernel when
//! it is freed, so every segment paid for its pages again (on a 10^8-event lock trace, 420,000
//! page faults and a fifth of the analysis's CPU time in the kernel). The next segment takes
//! the dropped run's blocks instead, when it first needs one: by then the segment before it has
//! been analysed and dropped, so one table is alive at a time, as before.

use std::ops::{Index, IndexMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::Acquisition;

/// Sections a block holds: 57 KiB. The first block of a table grows as a vector does, so that
/// a run of a few sections is not charged a whole block.
const BLOCK_SHIFT: u32 = 10;
const BLOCK: usize = 1 << BLOCK_SHIFT;

/// The critical sections of a run, by index.
#[derive(Clone, Debug, Default)]
pub struct Sections {
    blocks: Vec<Vec<Acquisition>>,
    len: usize,
}

impl Sections {
    /// How many sections the run has.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the run has no section.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Section `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&Acquisition> {
        self.blocks.get(i >> BLOCK_SHIFT)?.get(i & (BLOCK - 1))
    }

    /// The sections in index order.
    pub fn iter(&self) -> Iter<'_> {
        self.into_iter()
    }

    #[inline]
    pub(crate) fn push(&mut self, a: Acquisition) {
        match self.blocks.last_mut() {
            Some(last) if last.len() < BLOCK => last.push(a),
            _ => self.push_in_new_block(a),
        }
        self.len += 1;
    }

    #[cold]
    #[inline(never)]
    fn push_in_new_block(&mut self, a: Acquisition) {
        let mut block = if self.blocks.is_empty() {
            Vec::new()
        } else {
            take_block()
        };
        block.push(a);
        self.blocks.push(block);
    }
}

/// The sections of a [`Sections`] in index order: a block's at a time, as a slice's.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    blocks: std::slice::Iter<'a, Vec<Acquisition>>,
    block: std::slice::Iter<'a, Acquisition>,
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Acquisition;

    #[inline]
    fn next(&mut self) -> Option<&'a Acquisition> {
        loop {
            if let Some(a) = self.block.next() {
                self.left -= 1;
                return Some(a);
            }
            self.block = self.blocks.next()?.iter();
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl Index<usize> for Sections {
    type Output = Acquisition;

    #[inline]
    fn index(&self, i: usize) -> &Acquisition {
        &self.blocks[i >> BLOCK_SHIFT][i & (BLOCK - 1)]
    }
}

impl IndexMut<usize> for Sections {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut Acquisition {
        &mut self.blocks[i >> BLOCK_SHIFT][i & (BLOCK - 1)]
    }
}

impl<'a> IntoIterator for &'a Sections {
    type Item = &'a Acquisition;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        Iter {
            blocks: self.blocks.iter(),
            block: [].iter(),
            left: self.len,
        }
    }
}

impl Drop for Sections {
    fn drop(&mut self) {
        give_blocks(&mut self.blocks);
    }
}

/// Blocks kept for later tables.
static KEPT: Mutex<Vec<Vec<Acquisition>>> = Mutex::new(Vec::new());
/// The most blocks one table has held: as many are kept at most. (A table's first block is
/// made at the cut, before the table before it is dropped: a bound of two tables' worth let
/// the blocks not taken again pile up, a table's worth of them on a long trace. Segments of
/// traces analysed in parallel share the kept blocks and make the rest.)
static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// Keeps the full blocks of a dropped table for a later [`take_block`].
fn give_blocks(blocks: &mut Vec<Vec<Acquisition>>) {
    let largest = LARGEST
        .fetch_max(blocks.len(), Ordering::Relaxed)
        .max(blocks.len());
    // A panic elsewhere while the lock was held cannot leave the list inconsistent.
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    keep(&mut kept, blocks, largest);
}

/// Moves the whole blocks of `blocks` to `kept`, emptied, while it has fewer than `most`.
fn keep(kept: &mut Vec<Vec<Acquisition>>, blocks: &mut Vec<Vec<Acquisition>>, most: usize) {
    for mut block in blocks.drain(..) {
        if block.capacity() == BLOCK && kept.len() < most {
            block.clear();
            kept.push(block);
        }
    }
}

/// An empty block, the storage of a dropped table's when there is one.
fn take_block() -> Vec<Acquisition> {
    KEPT.lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .unwrap_or_else(|| Vec::with_capacity(BLOCK))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(thread: u32) -> Acquisition {
        Acquisition::blocking_write(thread, 0, 0, 0)
    }

    #[test]
    fn sections_are_found_by_index_across_blocks_and_in_order() {
        let mut s = Sections::default();
        for t in 0..(3 * BLOCK as u32 + 5) {
            s.push(section(t));
        }
        assert_eq!(s.len(), 3 * BLOCK + 5);
        assert_eq!(s[BLOCK].thread, BLOCK as u32);
        assert_eq!(s[3 * BLOCK + 4].thread, 3 * BLOCK as u32 + 4);
        assert!(s.get(3 * BLOCK + 5).is_none());
        s[7].thread = 70_000;
        assert_eq!(s.get(7).map(|a| a.thread), Some(70_000));
        let threads: Vec<u32> = s.iter().map(|a| a.thread).collect();
        assert_eq!(threads.len(), s.len());
        assert_eq!(
            threads[8..],
            (8..3 * BLOCK as u32 + 5).collect::<Vec<_>>()[..]
        );
    }

    #[test]
    fn a_dropped_tables_whole_blocks_are_kept_emptied_up_to_the_bound() {
        let mut s = Sections::default();
        for t in 0..(3 * BLOCK as u32 + 1) {
            s.push(section(t));
        }
        let mut blocks = std::mem::take(&mut s.blocks);
        let whole: Vec<*const Acquisition> = blocks[1..3].iter().map(|b| b.as_ptr()).collect();
        let mut kept = Vec::new();
        keep(&mut kept, &mut blocks, 3);
        assert!(blocks.is_empty());
        // The first block grew as a vector does, to a block's room; the last is whole too:
        // every block has a block's room, and three are kept of four.
        assert_eq!(kept.len(), 3);
        assert!(kept.iter().all(|b| b.is_empty() && b.capacity() == BLOCK));
        assert!(whole.iter().all(|p| kept.iter().any(|b| b.as_ptr() == *p)));
        let mut small = vec![Vec::with_capacity(3)];
        keep(&mut kept, &mut small, 10);
        assert_eq!(
            kept.len(),
            3,
            "a block smaller than a whole one is not kept"
        );
    }
}
