//! Storage of a dropped segment's critical sections, kept for the next segment.
//!
//! A trace read in segments builds one [`Run`](super::Run) per segment and drops it once it is
//! analysed. Its acquisitions are the one large table of a segment (56 bytes per critical
//! section: 80 MB for a segment of 4·2^20 lock-heavy events), and the allocator hands a table
//! that large back to the kernel when it is freed, so every segment paid for its pages again
//! (on a 10^8-event lock trace, 420,000 page faults and a fifth of the analysis's CPU time in
//! the kernel). The next segment takes the storage instead, when its own table first needs to
//! grow: by then the segment before it has been analysed and dropped, so one table is alive at
//! a time, as before. At most two tables are kept, and only large ones.

use std::sync::Mutex;

use super::Acquisition;

/// Tables smaller than this are not worth keeping.
const KEPT_FROM: usize = 1 << 14;
/// Tables kept at once (segments of traces analysed in parallel each take one).
const KEPT_AT_MOST: usize = 2;

static SPARE: Mutex<Vec<Vec<Acquisition>>> = Mutex::new(Vec::new());

/// Keeps `table`'s storage for a later [`take`], if it is large.
pub(super) fn give(mut table: Vec<Acquisition>) {
    if table.capacity() < KEPT_FROM {
        return;
    }
    table.clear();
    // A panic elsewhere while the lock was held cannot leave the list inconsistent.
    let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
    if spare.len() < KEPT_AT_MOST {
        spare.push(table);
    }
}

/// An empty table, with the storage of a dropped one when there is one.
pub(super) fn take() -> Vec<Acquisition> {
    SPARE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_table_is_given_back_empty_with_its_storage_and_a_small_one_is_not_kept() {
        // No other test of this crate builds a table this large, so the one taken is ours.
        let mut table: Vec<Acquisition> = Vec::with_capacity(KEPT_FROM);
        table.extend(std::iter::repeat_n(
            Acquisition::blocking_write(0, 0, 0, 0),
            3,
        ));
        let storage = table.as_ptr();
        give(table);
        let got = take();
        assert_eq!(got.as_ptr(), storage);
        assert!(got.is_empty());
        assert!(got.capacity() >= KEPT_FROM);
        give(Vec::with_capacity(1));
        assert!(take().capacity() == 0, "a small table is not kept");
    }
}
