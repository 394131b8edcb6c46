//! The runtime's own memory allocator, installed as the Rust global allocator of the library.
//!
//! Why: the runtime runs inside arbitrary programs, from inside their lock calls. Allocating
//! through the program's `malloc` could recurse into an instrumented allocator, deadlock on an
//! allocator that itself takes a `pthread_mutex` we are in the middle of recording, or perturb
//! the program's heap layout. Every Rust allocation of the runtime (per-thread chunk buffers,
//! table records, module paths) therefore comes from anonymous `mmap` regions managed here.
//!
//! Power-of-two size classes from 16 bytes to 64 KiB with free lists under one spinlock; larger
//! blocks are mapped and unmapped directly. The hot path never allocates (chunk buffers are
//! allocated once per thread), so the lock is uncontended in practice.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr;

use crate::spin::SpinLock;

const MIN_SHIFT: usize = 4; // 16 bytes
const MAX_SHIFT: usize = 16; // 64 KiB
const CLASSES: usize = MAX_SHIFT - MIN_SHIFT + 1;
const ARENA: usize = 1 << 20;
const PAGE: usize = 4096;

struct Heap {
    free: [*mut u8; CLASSES],
    bump: *mut u8,
    bump_end: *mut u8,
}

// SAFETY: the raw pointers are only touched under the spinlock.
unsafe impl Send for Heap {}

pub struct RtAlloc {
    heap: SpinLock<Heap>,
}

impl RtAlloc {
    pub const fn new() -> Self {
        Self {
            heap: SpinLock::new(Heap {
                free: [ptr::null_mut(); CLASSES],
                bump: ptr::null_mut(),
                bump_end: ptr::null_mut(),
            }),
        }
    }

    /// fork: the prepare handler holds the lock across `fork` so the child inherits a
    /// consistent heap; both sides then release it.
    pub fn lock_for_fork(&self) {
        self.heap.raw_lock();
    }

    /// # Safety
    /// Only after `lock_for_fork`, in the parent or the child.
    pub unsafe fn unlock_after_fork(&self) {
        // SAFETY: forwarded contract.
        unsafe { self.heap.force_unlock() };
    }
}

impl Default for RtAlloc {
    fn default() -> Self {
        Self::new()
    }
}

fn class_of(layout: &Layout) -> Option<usize> {
    let size = layout.size().max(layout.align()).max(1 << MIN_SHIFT);
    if size > 1 << MAX_SHIFT || layout.align() > PAGE {
        return None;
    }
    let shift = usize::BITS as usize - (size - 1).leading_zeros() as usize;
    Some(shift.max(MIN_SHIFT) - MIN_SHIFT)
}

fn map(len: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping has no preconditions; failure is checked.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

fn round_pages(n: usize) -> usize {
    (n + PAGE - 1) & !(PAGE - 1)
}

// SAFETY: blocks handed out are disjoint, at least `layout.size()` bytes and aligned to
// `layout.align()` (size classes are powers of two ≥ the alignment, carved at multiples of
// their size from page-aligned arenas; large blocks are whole page-aligned mappings).
unsafe impl GlobalAlloc for RtAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(c) = class_of(&layout) else {
            if layout.align() > PAGE {
                return ptr::null_mut();
            }
            return map(round_pages(layout.size()));
        };
        let size = 1usize << (c + MIN_SHIFT);
        let mut h = self.heap.lock();
        let head = h.free[c];
        if !head.is_null() {
            // SAFETY: a free block stores the next free block in its first word.
            h.free[c] = unsafe { *(head as *mut *mut u8) };
            return head;
        }
        // Align the bump pointer to the class size (capped at a page, the arena's alignment).
        let align = size.min(PAGE);
        let mut start = ((h.bump as usize + align - 1) & !(align - 1)) as *mut u8;
        if h.bump.is_null() || start as usize + size > h.bump_end as usize {
            let arena = map(ARENA);
            if arena.is_null() {
                return ptr::null_mut();
            }
            h.bump = arena;
            // SAFETY: one past the end of the mapping.
            h.bump_end = unsafe { arena.add(ARENA) };
            start = arena;
        }
        // SAFETY: `start + size` is within the current arena (checked above).
        h.bump = unsafe { start.add(size) };
        start
    }

    /// A large block is a fresh anonymous mapping, zero already: writing zeros into it would
    /// only fault in every page (a thread's compressed-chunk buffer is 257 KiB, of which a
    /// chunk's output touches a fraction). A small one may be a reused block: zeroed here.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded (a non-zero size).
        let p = unsafe { self.alloc(layout) };
        if !p.is_null() && class_of(&layout).is_some() {
            // SAFETY: `alloc` gave at least `layout.size()` writable bytes at `p`.
            unsafe { p.write_bytes(0, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match class_of(&layout) {
            Some(c) => {
                let mut h = self.heap.lock();
                // SAFETY: the block is ours, at least 16 bytes and pointer-aligned.
                unsafe { *(p as *mut *mut u8) = h.free[c] };
                h.free[c] = p;
            }
            None => {
                // SAFETY: large blocks are whole mappings of this rounded length.
                unsafe { libc::munmap(p.cast(), round_pages(layout.size())) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let l = |s, a| Layout::from_size_align(s, a).unwrap();
        assert_eq!(class_of(&l(1, 1)), Some(0));
        assert_eq!(class_of(&l(16, 8)), Some(0));
        assert_eq!(class_of(&l(17, 8)), Some(1));
        assert_eq!(class_of(&l(65536, 8)), Some(12));
        assert_eq!(class_of(&l(65537, 8)), None);
    }

    #[test]
    fn alloc_free_reuse() {
        let a = RtAlloc::new();
        let l = Layout::from_size_align(100, 8).unwrap();
        // SAFETY: test of the allocator contract with matching layouts.
        unsafe {
            let p = a.alloc(l);
            assert!(!p.is_null());
            p.write_bytes(7, 100);
            a.dealloc(p, l);
            let q = a.alloc(l);
            assert_eq!(p, q);
            let big = Layout::from_size_align(1 << 20, 8).unwrap();
            let b = a.alloc(big);
            b.write_bytes(1, 1 << 20);
            a.dealloc(b, big);
            a.dealloc(q, l);
        }
    }

    #[test]
    fn zeroed_blocks_are_zero_when_reused_and_when_mapped() {
        let a = RtAlloc::new();
        // SAFETY: test of the allocator contract with matching layouts.
        unsafe {
            let small = Layout::from_size_align(200, 8).unwrap();
            let p = a.alloc(small);
            p.write_bytes(0xa5, 200);
            a.dealloc(p, small);
            let q = a.alloc_zeroed(small);
            assert_eq!(p, q, "the freed block is reused");
            assert!(std::slice::from_raw_parts(q, 200).iter().all(|&b| b == 0));
            a.dealloc(q, small);
            let big = Layout::from_size_align(300 << 10, 8).unwrap();
            let b = a.alloc_zeroed(big);
            assert!(!b.is_null());
            assert!(std::slice::from_raw_parts(b, 300 << 10)
                .iter()
                .all(|&x| x == 0));
            a.dealloc(b, big);
        }
    }
}
