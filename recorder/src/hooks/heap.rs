//! The allocator functions: `malloc`, `calloc`, `realloc`, `reallocarray`, `free`,
//! `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`, and C++'s `operator new` and
//! `operator delete`. Each block becomes an alloc event (address, size, site) and its release
//! a free event, so that a reused address is a new object to every analysis (FORMAT.md §6.4).
//!
//! Keys: a free takes a release key through its address's clock (`heap_clock`) before the
//! real free, an alloc an acquire key after the real allocation returned: the allocator's own
//! synchronisation orders a free before the allocation that reuses the address, so the merged
//! order does too (FORMAT.md §10, item 8).
//!
//! Sites: `operator new` and `delete` call `malloc` and `free` from inside libstdc++, whose
//! return addresses say nothing about the program. Their hooks leave the program's return
//! address in the thread's state for the `malloc`/`free` they lead to (the first one after
//! them, which is theirs), and that is the site recorded.
//!
//! `dlsym` itself allocates (`calloc`) while the real functions are being looked up: those
//! calls are served from a small static arena, whose blocks are never released.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use libc::size_t;

use foresight_trace::event::EventKind;

use crate::real::real;
use crate::sequence::Key;
use crate::thread_state::{self, ThreadState};

/// Whether allocations are recorded in a program without instrumented code (set at start-up,
/// `startup.rs`); an instrumented program's always are.
static RECORD: AtomicBool = AtomicBool::new(false);

pub fn set_recording(on: bool) {
    RECORD.store(on, Ordering::Relaxed);
    // Allocations read their block's clock before frees write it: see `first_touch`.
    crate::first_touch::pages(&HEAP_CLOCK, |c| &c.0);
}

// --- the bootstrap arena ----------------------------------------------------------------------

const ARENA_BYTES: usize = 64 << 10;

#[repr(C, align(64))]
struct Arena([u8; ARENA_BYTES]);

static mut ARENA: Arena = Arena([0; ARENA_BYTES]);
static ARENA_USED: AtomicUsize = AtomicUsize::new(0);

fn arena_base() -> usize {
    // SAFETY: only the address of the static is taken; its bytes are handed out in disjoint
    // blocks by the atomic bump below.
    (&raw const ARENA) as usize
}

fn in_arena(p: *mut c_void) -> bool {
    let a = p as usize;
    a >= arena_base() && a < arena_base() + ARENA_BYTES
}

/// A zeroed block from the arena (null when it is exhausted), `align` a power of two ≤ 64.
fn arena_alloc(n: usize, align: usize) -> *mut c_void {
    let align = align.clamp(16, 64);
    let mut used = ARENA_USED.load(Ordering::Relaxed);
    loop {
        let start = (used + align - 1) & !(align - 1);
        let end = start.saturating_add(n.max(1));
        if end > ARENA_BYTES {
            return std::ptr::null_mut();
        }
        match ARENA_USED.compare_exchange_weak(used, end, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return (arena_base() + start) as *mut c_void,
            Err(u) => used = u,
        }
    }
}

// --- recording --------------------------------------------------------------------------------

/// The state of a thread whose allocations are recorded now.
#[inline(always)]
fn recorder() -> Option<thread_state::Current> {
    if !RECORD.load(Ordering::Relaxed) && !crate::accesses::instrumented() {
        return None;
    }
    thread_state::current()
}

/// The clocks that order a free before the allocation that reuses its address, shared by
/// addresses by hash (a shared clock only orders more, `stripes.rs`). A table of their own,
/// 256 KiB, rather than the 4 MiB of `stripes`: heap blocks spread over the whole of that
/// table and faulted in most of its pages (SQLite, 4 threads: about 1,100 of the 2,200 page
/// faults the recorder added). One cache line each, as the stripes, so that threads freeing
/// blocks of their own rarely write one line.
const HEAP_CLOCKS: usize = 1 << 12;

#[repr(align(64))]
struct HeapClock(AtomicU64);

static HEAP_CLOCK: [HeapClock; HEAP_CLOCKS] = [const { HeapClock(AtomicU64::new(0)) }; HEAP_CLOCKS];

/// The clock of the heap block at `p` (blocks are 16-byte aligned).
#[inline]
fn heap_clock(p: *mut c_void) -> &'static AtomicU64 {
    let h = ((p as usize >> 4) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52;
    &HEAP_CLOCK[h as usize & (HEAP_CLOCKS - 1)].0
}

fn site_of(t: &ThreadState, ra: usize) -> foresight_trace::event::SiteId {
    t.alloc_site(t.take_pending_site().unwrap_or(ra))
}

#[inline]
fn allocated(p: *mut c_void, n: usize, ra: usize) {
    if p.is_null() {
        return;
    }
    if let Some(t) = recorder() {
        t.with(|t| {
            let site = site_of(t, ra);
            t.emit(
                EventKind::Alloc {
                    addr: p as u64,
                    size: n as u64,
                    site,
                },
                Key::Acquire(heap_clock(p)),
            );
        });
    }
}

#[inline]
fn freeing(p: *mut c_void, ra: usize) {
    if p.is_null() {
        return;
    }
    if let Some(t) = recorder() {
        t.with(|t| {
            let site = site_of(t, ra);
            t.emit(
                EventKind::Free {
                    addr: p as u64,
                    site,
                },
                Key::Release(heap_clock(p)),
            );
        });
    }
}

// --- C ----------------------------------------------------------------------------------------

real!(REAL_MALLOC: unsafe extern "C" fn(size_t) -> *mut c_void = b"malloc\0");
real!(REAL_CALLOC: unsafe extern "C" fn(size_t, size_t) -> *mut c_void = b"calloc\0");
real!(REAL_REALLOC: unsafe extern "C" fn(*mut c_void, size_t) -> *mut c_void = b"realloc\0");
real!(REAL_REALLOCARRAY: unsafe extern "C" fn(*mut c_void, size_t, size_t) -> *mut c_void = b"reallocarray\0");
real!(REAL_FREE: unsafe extern "C" fn(*mut c_void) = b"free\0");
real!(REAL_POSIX_MEMALIGN: unsafe extern "C" fn(*mut *mut c_void, size_t, size_t) -> c_int = b"posix_memalign\0");
real!(REAL_ALIGNED_ALLOC: unsafe extern "C" fn(size_t, size_t) -> *mut c_void = b"aligned_alloc\0");
real!(REAL_MEMALIGN: unsafe extern "C" fn(size_t, size_t) -> *mut c_void = b"memalign\0");
real!(REAL_VALLOC: unsafe extern "C" fn(size_t) -> *mut c_void = b"valloc\0");
real!(REAL_USABLE_SIZE: unsafe extern "C" fn(*mut c_void) -> size_t = b"malloc_usable_size\0");

entry!(malloc, 1, malloc_hook);
entry!(calloc, 2, calloc_hook);
entry!(realloc, 2, realloc_hook);
entry!(reallocarray, 3, reallocarray_hook);
entry!(free, 1, free_hook);
entry!(posix_memalign, 3, posix_memalign_hook);
entry!(aligned_alloc, 2, aligned_alloc_hook);
entry!(memalign, 2, memalign_hook);
entry!(valloc, 1, valloc_hook);

unsafe extern "C" fn malloc_hook(n: size_t, ra: usize) -> *mut c_void {
    let Some(real) = REAL_MALLOC.try_get() else {
        return arena_alloc(n, 16);
    };
    // SAFETY: the real function with the caller's argument.
    let p = unsafe { real(n) };
    allocated(p, n, ra);
    p
}

unsafe extern "C" fn calloc_hook(count: size_t, size: size_t, ra: usize) -> *mut c_void {
    let Some(real) = REAL_CALLOC.try_get() else {
        // The arena is zeroed and never reused.
        return count
            .checked_mul(size)
            .map_or(std::ptr::null_mut(), |n| arena_alloc(n, 16));
    };
    // SAFETY: the real function with the caller's arguments.
    let p = unsafe { real(count, size) };
    allocated(p, count.saturating_mul(size), ra);
    p
}

/// A `realloc`: the old block's free first (its release key before the real call), then the
/// new block's alloc; when the real call fails the old block lives on, and is allocated again
/// in the trace.
///
/// # Safety
/// `call` is the real function applied to the caller's arguments.
unsafe fn reallocating(
    old: *mut c_void,
    n: usize,
    ra: usize,
    call: impl FnOnce() -> *mut c_void,
) -> *mut c_void {
    let recording = recorder().is_some() && !old.is_null();
    let old_size = if recording {
        // SAFETY: `old` is a live block of the real allocator (the caller's contract).
        REAL_USABLE_SIZE.try_get().map_or(0, |f| unsafe { f(old) })
    } else {
        0
    };
    if recording {
        freeing(old, ra);
    }
    let p = call();
    if p.is_null() && n != 0 {
        if recording {
            allocated(old, old_size, ra);
        }
    } else {
        allocated(p, n, ra);
    }
    p
}

unsafe extern "C" fn realloc_hook(old: *mut c_void, n: size_t, ra: usize) -> *mut c_void {
    let Some(real) = REAL_REALLOC.try_get() else {
        return arena_alloc(n, 16);
    };
    if in_arena(old) {
        return arena_to_heap(old, n, ra);
    }
    // SAFETY: the real function with the caller's arguments.
    unsafe { reallocating(old, n, ra, || real(old, n)) }
}

/// A bootstrap block grown by the program (which never happens in practice): a heap block
/// with the arena block's bytes. The arena block's size is unknown; what follows it in the
/// arena is readable, so copying `n` bytes is safe, if more than needed.
fn arena_to_heap(old: *mut c_void, n: usize, ra: usize) -> *mut c_void {
    // SAFETY: calling our own malloc hook, as the program would.
    let p = unsafe { malloc_hook(n, ra) };
    if !p.is_null() {
        let avail = arena_base() + ARENA_BYTES - old as usize;
        // SAFETY: `p` has n bytes; `old` has at least `avail` readable bytes of the arena.
        unsafe { std::ptr::copy_nonoverlapping(old as *const u8, p as *mut u8, n.min(avail)) };
    }
    p
}

unsafe extern "C" fn reallocarray_hook(
    old: *mut c_void,
    count: size_t,
    size: size_t,
    ra: usize,
) -> *mut c_void {
    let real = REAL_REALLOCARRAY.get();
    let n = count.saturating_mul(size);
    // SAFETY: the real function with the caller's arguments.
    unsafe { reallocating(old, n, ra, || real(old, count, size)) }
}

unsafe extern "C" fn free_hook(p: *mut c_void, ra: usize) {
    if p.is_null() || in_arena(p) {
        return;
    }
    let Some(real) = REAL_FREE.try_get() else {
        // Nothing to free with: leaking one block beats crashing.
        return;
    };
    freeing(p, ra);
    // SAFETY: the real function with the caller's argument.
    unsafe { real(p) }
}

unsafe extern "C" fn posix_memalign_hook(
    out: *mut *mut c_void,
    align: size_t,
    n: size_t,
    ra: usize,
) -> c_int {
    let real = REAL_POSIX_MEMALIGN.get();
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { real(out, align, n) };
    if r == 0 {
        // SAFETY: on success the real function stored the block in `*out`.
        allocated(unsafe { *out }, n, ra);
    }
    r
}

unsafe extern "C" fn aligned_alloc_hook(align: size_t, n: size_t, ra: usize) -> *mut c_void {
    let Some(real) = REAL_ALIGNED_ALLOC.try_get() else {
        return arena_alloc(n, align);
    };
    // SAFETY: the real function with the caller's arguments.
    let p = unsafe { real(align, n) };
    allocated(p, n, ra);
    p
}

unsafe extern "C" fn memalign_hook(align: size_t, n: size_t, ra: usize) -> *mut c_void {
    let Some(real) = REAL_MEMALIGN.try_get() else {
        return arena_alloc(n, align);
    };
    // SAFETY: the real function with the caller's arguments.
    let p = unsafe { real(align, n) };
    allocated(p, n, ra);
    p
}

unsafe extern "C" fn valloc_hook(n: size_t, ra: usize) -> *mut c_void {
    let real = REAL_VALLOC.get();
    // SAFETY: the real function with the caller's argument.
    let p = unsafe { real(n) };
    allocated(p, n, ra);
    p
}

// --- C++ ----------------------------------------------------------------------------------------

/// `operator new`/`delete` (and their array, sized, aligned and nothrow forms): the real one,
/// after leaving the program's return address for the `malloc` or `free` it calls.
macro_rules! cxx {
    ($sym:ident = $name:literal, $n:tt, $imp:ident, $real:ident, fn($($a:ident: $t:ty),*) $(-> $r:ty)?) => {
        real!($real: unsafe extern "C-unwind" fn($($t),*) $(-> $r)? = $name);
        entry!($sym, $n, $imp);
        unsafe extern "C-unwind" fn $imp($($a: $t,)* ra: usize) $(-> $r)? {
            let real = $real.get();
            // The outermost one counts: libstdc++'s sized and aligned forms call the plain
            // ones, which land here again with a return address inside libstdc++.
            let t = recorder().filter(|t| t.set_pending_site(ra));
            // SAFETY: the real function with the caller's arguments. (An exception from it
            // unwinds through this frame, which holds nothing to drop.)
            let r = unsafe { real($($a),*) };
            if let Some(t) = t {
                t.take_pending_site();
            }
            r
        }
    };
}

type Align = size_t;
type NoThrow = *const c_void;

cxx!(
    _Znwm = b"_Znwm\0",
    1,
    new_hook,
    REAL_NEW,
    fn(n: size_t) -> *mut c_void
);
cxx!(
    _Znam = b"_Znam\0",
    1,
    new_array_hook,
    REAL_NEW_ARRAY,
    fn(n: size_t) -> *mut c_void
);
cxx!(
    _ZnwmRKSt9nothrow_t = b"_ZnwmRKSt9nothrow_t\0",
    2,
    new_nothrow_hook,
    REAL_NEW_NOTHROW,
    fn(n: size_t, nt: NoThrow) -> *mut c_void
);
cxx!(
    _ZnamRKSt9nothrow_t = b"_ZnamRKSt9nothrow_t\0",
    2,
    new_array_nothrow_hook,
    REAL_NEW_ARRAY_NOTHROW,
    fn(n: size_t, nt: NoThrow) -> *mut c_void
);
cxx!(
    _ZnwmSt11align_val_t = b"_ZnwmSt11align_val_t\0",
    2,
    new_aligned_hook,
    REAL_NEW_ALIGNED,
    fn(n: size_t, al: Align) -> *mut c_void
);
cxx!(
    _ZnamSt11align_val_t = b"_ZnamSt11align_val_t\0",
    2,
    new_array_aligned_hook,
    REAL_NEW_ARRAY_ALIGNED,
    fn(n: size_t, al: Align) -> *mut c_void
);
cxx!(
    _ZdlPv = b"_ZdlPv\0",
    1,
    delete_hook,
    REAL_DELETE,
    fn(p: *mut c_void)
);
cxx!(
    _ZdaPv = b"_ZdaPv\0",
    1,
    delete_array_hook,
    REAL_DELETE_ARRAY,
    fn(p: *mut c_void)
);
cxx!(
    _ZdlPvm = b"_ZdlPvm\0",
    2,
    delete_sized_hook,
    REAL_DELETE_SIZED,
    fn(p: *mut c_void, n: size_t)
);
cxx!(
    _ZdaPvm = b"_ZdaPvm\0",
    2,
    delete_array_sized_hook,
    REAL_DELETE_ARRAY_SIZED,
    fn(p: *mut c_void, n: size_t)
);
cxx!(
    _ZdlPvSt11align_val_t = b"_ZdlPvSt11align_val_t\0",
    2,
    delete_aligned_hook,
    REAL_DELETE_ALIGNED,
    fn(p: *mut c_void, al: Align)
);
cxx!(
    _ZdaPvSt11align_val_t = b"_ZdaPvSt11align_val_t\0",
    2,
    delete_array_aligned_hook,
    REAL_DELETE_ARRAY_ALIGNED,
    fn(p: *mut c_void, al: Align)
);
cxx!(
    _ZdlPvmSt11align_val_t = b"_ZdlPvmSt11align_val_t\0",
    3,
    delete_sized_aligned_hook,
    REAL_DELETE_SIZED_ALIGNED,
    fn(p: *mut c_void, n: size_t, al: Align)
);
cxx!(
    _ZdaPvmSt11align_val_t = b"_ZdaPvmSt11align_val_t\0",
    3,
    delete_array_sized_aligned_hook,
    REAL_DELETE_ARRAY_SIZED_ALIGNED,
    fn(p: *mut c_void, n: size_t, al: Align)
);
