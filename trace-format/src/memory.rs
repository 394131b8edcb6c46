//! Advice to the kernel about large tables of the analysis.

/// The size of a transparent huge page on x86-64 and AArch64 with 4 KiB base pages.
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the memory of `table` with transparent huge pages where it can
/// (`madvise(MADV_HUGEPAGE)` on the whole 2 MiB pages inside it): a table read at random
/// (the race pass's shadow memory, hundreds of MiB on real programs) otherwise costs a TLB
/// miss and a page walk on almost every look-up, on top of the cache miss. Call it before the
/// table is first written: pages already touched stay as they are until the kernel's
/// background collapse. The advice changes no content and no permission; where the kernel
/// does not follow it (huge pages disabled, `never`) nothing changes.
pub fn advise_huge_pages<T>(table: &[T]) {
    let start = table.as_ptr() as usize;
    let end = start.saturating_add(std::mem::size_of_val(table));
    let first = start.next_multiple_of(HUGE_PAGE);
    let last = end & !(HUGE_PAGE - 1);
    if last <= first {
        return;
    }
    // SAFETY: `[first, last)` lies inside `table`'s memory, which the caller's borrow keeps
    // mapped; MADV_HUGEPAGE changes neither what that memory holds nor who may access it
    // (only the size of the pages backing it), and its failure (EINVAL where the kernel lacks
    // huge pages) leaves everything as it was, so the result is not needed.
    unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            last - first,
            libc::MADV_HUGEPAGE,
        );
    }
}

/// Asks the processor to bring the cache lines holding the first and the last byte of `item`
/// into its caches (all of a value of up to two lines, as a table's slot), without waiting for
/// them: a look-up that will read a slot of a large table at random a few events from now
/// then finds it there, the misses of several look-ups overlapping instead of following one
/// another. Only a hint: nothing is read or written, and
/// where the target has no such instruction nothing happens.
#[inline(always)]
pub fn prefetch<T: ?Sized>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let first = (item as *const T).cast::<i8>();
        let last = first.wrapping_add(std::mem::size_of_val(item).saturating_sub(1));
        // SAFETY: a prefetch never faults and changes no memory or architectural state (Intel
        // SDM, PREFETCHh); the addresses lie inside `item`, which the borrow keeps mapped, and
        // SSE, which the instruction needs, is part of every x86-64 processor.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(first);
            _mm_prefetch::<_MM_HINT_T0>(last);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}

/// Whether the mapping holding `addr` was advised to take huge pages: `hg` among its flags
/// in `/proc/self/smaps` (`None` when that file cannot be read or no mapping holds `addr`).
/// What the tests of [`advise_huge_pages`]'s callers check it by.
pub fn huge_pages_advised(addr: usize) -> Option<bool> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = range.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = lo <= addr && addr < hi;
                continue;
            }
        }
        if let Some(flags) = line.strip_prefix("VmFlags:").filter(|_| inside) {
            return Some(flags.split_whitespace().any(|f| f == "hg"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_table_is_advised_and_keeps_its_contents() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            // A kernel without transparent huge pages refuses the advice: nothing to see.
            return;
        }
        let mut table: Vec<u64> = Vec::with_capacity(3 * HUGE_PAGE / 8);
        advise_huge_pages(table.spare_capacity_mut());
        table.extend(0..(3 * HUGE_PAGE / 8) as u64);
        let inner = table.as_ptr() as usize + HUGE_PAGE;
        assert_eq!(
            huge_pages_advised(inner),
            Some(true),
            "the table's whole huge pages are advised"
        );
        assert!(table.iter().enumerate().all(|(i, &v)| v == i as u64));
        // Smaller than a huge page: no whole one inside, nothing asked.
        advise_huge_pages(&table[..100]);
    }
}
