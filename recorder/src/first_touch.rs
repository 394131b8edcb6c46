//! The first touch of a page of the runtime's static tables is a write.
//!
//! The tables (`objects`, the wrappers' classes, the heap's clocks) are zero-initialised
//! static memory, of which only the pages that hold used slots are ever touched. A page whose
//! first touch is a read is mapped to the kernel's shared zero page; the write that follows
//! (a slot claimed, a clock released) then faults again and the kernel flushes that address
//! from the TLB of every core the program runs on, with an interrupt to each. Those were most
//! of the write faults SQLite's run took in the runtime (docs/perf/recording-overhead.md). A
//! first touch that writes maps a page of its own at once, with no flush.

use std::sync::atomic::{AtomicU64, Ordering};

/// The value of `a`, read by a read-modify-write that leaves it as it is: the page is touched
/// for writing.
fn load_for_write(a: &AtomicU64, order: Ordering) -> u64 {
    // A compare-exchange of 0 for 0 changes nothing, and is a locked write either way (x86
    // writes the old value back when the comparison fails). An idempotent `fetch_add(0)` or
    // `fetch_or(0)` may be compiled into a plain load.
    match a.compare_exchange(0, 0, order, order) {
        Ok(v) | Err(v) => v,
    }
}

/// Touches for writing the first word of each page of `table`, at start-up: for a static
/// table whose pages a program that records at all soon touches (its rows spread over all of
/// it by hash), and whose look-ups are too frequent to write to themselves (the heap's
/// clocks, read by every allocation; the wrappers' classes, read at every unwound frame).
/// The object table needs none: its slots are claimed and found by one compare-exchange,
/// once per object and thread. The site table (4 MiB) is neither written ahead nor probed by
/// a write: see `sites::intern_with`.
pub fn pages<T>(table: &[T], mut word: impl FnMut(&T) -> &AtomicU64) {
    let per_page = (4096 / std::mem::size_of::<T>().max(1)).max(1);
    for row in table.iter().step_by(per_page) {
        load_for_write(word(row), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_for_write_reads_the_value_and_leaves_it() {
        for v in [0, 1, u64::MAX, 0x8000_0000_0000_0001] {
            let a = AtomicU64::new(v);
            assert_eq!(load_for_write(&a, Ordering::Acquire), v);
            assert_eq!(a.load(Ordering::Relaxed), v);
        }
    }

    #[test]
    fn pages_touches_the_first_row_of_each_page_and_changes_none() {
        // Rows of 64 bytes: one in 64 is touched; all keep their values.
        #[repr(align(64))]
        struct Row(AtomicU64);
        let table: Vec<Row> = (0..200).map(|i| Row(AtomicU64::new(i))).collect();
        let mut touched = Vec::new();
        pages(&table, |r| {
            touched.push(r.0.load(Ordering::Relaxed));
            &r.0
        });
        assert_eq!(touched, [0, 64, 128, 192]);
        assert!(table
            .iter()
            .enumerate()
            .all(|(i, r)| r.0.load(Ordering::Relaxed) == i as u64));
    }
}
