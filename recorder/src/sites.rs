//! Call sites: return addresses interned into `SiteId`s.
//!
//! The hot path hashes the return address (or, with `FORESIGHT_STACK_DEPTH` > 1, the frames)
//! into a static lock-free open-addressing table: one load when the site is known. A new site
//! is claimed with a CAS; the claimer resolves its frames to module + offset, writes the site
//! record and publishes the id. No symbolisation here: `foresight record` does that after the
//! program exits.
//!
//! The return address comes from the hook's naked entry (`hooks/naked.rs`), which reads it off
//! the stack (x86-64) or the link register (AArch64) before anything can disturb it. Deeper
//! stacks use libc's `backtrace()` (slower, only when asked for); frames above the hook's own
//! are dropped by finding the return address in the backtrace.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use foresight_trace::event::SiteId;
use foresight_trace::tables::{Frame, SiteInfo, TableRecord};

use crate::config::MAX_STACK_DEPTH;
use crate::{modules, output};

const SLOTS: usize = 1 << 18;
/// Probes before giving up (the site is then `OVERFLOW`).
const MAX_PROBES: usize = 512;

struct Slot {
    key: AtomicU64,
    id: AtomicU32,
}

/// Page-aligned so that the fork child can zero it with `madvise(MADV_DONTNEED)`.
#[repr(C, align(4096))]
struct Table([Slot; SLOTS]);

static TABLE: Table = Table(
    [const {
        Slot {
            key: AtomicU64::new(0),
            id: AtomicU32::new(0),
        }
    }; SLOTS],
);
static NEXT_ID: AtomicU32 = AtomicU32::new(0);
static DEPTH: AtomicUsize = AtomicUsize::new(1);
/// The site id used when the table is full (no record: a reader reports it as dangling).
const OVERFLOW: SiteId = u32::MAX;

pub fn set_depth(d: usize) {
    DEPTH.store(d.clamp(1, MAX_STACK_DEPTH), Ordering::Relaxed);
    if d > 1 {
        // The first backtrace() loads libgcc_s (dlopen, malloc): do it now, at start-up,
        // rather than inside the first hooked call.
        let mut buf = [std::ptr::null_mut(); 4];
        // SAFETY: the buffer has room for 4 frames.
        unsafe { libc::backtrace(buf.as_mut_ptr(), 4) };
    }
}

#[inline]
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53) ^ (x >> 29)
}

/// Frames per site (`FORESIGHT_STACK_DEPTH`).
#[inline]
pub fn depth() -> usize {
    DEPTH.load(Ordering::Relaxed)
}

/// Whether sites are single return addresses (cacheable by address).
#[inline]
pub fn shallow() -> bool {
    DEPTH.load(Ordering::Relaxed) <= 1
}

/// The site of a hooked call whose return address is `ra`.
#[inline]
pub fn site(ra: usize) -> SiteId {
    if DEPTH.load(Ordering::Relaxed) <= 1 {
        intern(ra as u64 | 1 << 63, &[ra])
    } else {
        deep_site(ra)
    }
}

#[cold]
fn deep_site(ra: usize) -> SiteId {
    let depth = DEPTH.load(Ordering::Relaxed);
    let mut buf = [std::ptr::null_mut::<libc::c_void>(); MAX_STACK_DEPTH + 16];
    // SAFETY: backtrace writes at most `len` entries into the buffer.
    let n = unsafe { libc::backtrace(buf.as_mut_ptr(), buf.len() as i32) }.max(0) as usize;
    let frames: Vec<usize> = buf[..n].iter().map(|&p| p as usize).collect();
    let start = frames.iter().position(|&f| f == ra);
    let mut out = [0usize; MAX_STACK_DEPTH];
    let mut len = 1;
    out[0] = ra;
    if let Some(s) = start {
        for (o, &f) in out[1..depth].iter_mut().zip(&frames[s + 1..]) {
            *o = f;
            len += 1;
        }
    }
    frames_site(&out[..len])
}

/// The site of a stack given frame by frame (the return address first, then its callers):
/// the instrumented program's shadow stack (`accesses.rs`).
pub fn frames_site(frames: &[usize]) -> SiteId {
    if let [ra] = frames {
        return intern(*ra as u64 | 1 << 63, frames);
    }
    let mut h = 0u64;
    for &f in frames {
        h = mix(h ^ f as u64);
    }
    intern(h & !(1 << 63) | 1, frames)
}

/// `key` is non-zero and identifies the frames (the address itself at depth 1, else a hash).
#[inline]
fn intern(key: u64, frames: &[usize]) -> SiteId {
    let mut i = (mix(key) as usize) & (SLOTS - 1);
    for _ in 0..MAX_PROBES {
        let s = &TABLE.0[i];
        let cur = s.key.load(Ordering::Acquire);
        if cur == key {
            return wait_id(s);
        }
        if cur == 0 {
            match s
                .key
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return create(s, frames),
                Err(v) if v == key => return wait_id(s),
                Err(_) => {}
            }
        }
        i = (i + 1) & (SLOTS - 1);
    }
    OVERFLOW
}

#[inline]
fn wait_id(s: &Slot) -> SiteId {
    loop {
        let id = s.id.load(Ordering::Acquire);
        if id != 0 {
            return id - 1;
        }
        std::hint::spin_loop();
    }
}

#[cold]
fn create(s: &Slot, frames: &[usize]) -> SiteId {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let frames: Vec<Frame> = frames
        .iter()
        .map(|&a| {
            // An address in no module (JIT code): module u32::MAX, absolute offset.
            modules::frame_of(a as u64).unwrap_or(Frame {
                module: u32::MAX,
                offset: a as u64,
            })
        })
        .collect();
    output::table_record(&TableRecord::Site(SiteInfo { id, frames }));
    s.id.store(id + 1, Ordering::Release);
    id
}

/// fork child: forget the parent's sites.
///
/// # Safety
/// Only in a fork child, on its only thread.
pub unsafe fn reset() {
    // SAFETY: the table is a page-aligned static of atomics, zero when unused, and the
    // caller's only thread is not using it.
    unsafe {
        crate::output::zero_static(
            &TABLE as *const Table as *mut u8,
            std::mem::size_of::<Table>(),
            || {
                for s in TABLE.0.iter() {
                    if s.key.load(Ordering::Relaxed) != 0 {
                        s.key.store(0, Ordering::Relaxed);
                        s.id.store(0, Ordering::Relaxed);
                    }
                }
            },
        );
    }
    NEXT_ID.store(0, Ordering::Relaxed);
}
