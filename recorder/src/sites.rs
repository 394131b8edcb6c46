//! Call sites: return addresses interned into `SiteId`s.
//!
//! The hot path hashes the return address (or, with `FORESIGHT_STACK_DEPTH` > 1, the frames)
//! into a static lock-free open-addressing table: one load when the site is known. A new site
//! is claimed with a CAS; the claimer resolves its frames to module + offset, writes the site
//! record and publishes the id. No symbolisation here: `foresight record` does that after the
//! program exits.
//!
//! The return address comes from the hook's naked entry (`hooks/naked.rs`), which reads it off
//! the stack (x86-64) or the link register (AArch64) before anything can disturb it.
//!
//! A synchronisation hook's site ([`call_site`]) needs more than its return address where that
//! address is inside locking machinery (`wrappers.rs`: a libstdc++ lock function, a C
//! library, a wrapper the program names): the site is then the frames up to the first one
//! outside the machinery, unwound at every call, and never cached by address (the same
//! return address has other callers). Whether an address is machinery is decided once, when
//! its slot is created: the slot then holds `DEEP` instead of a site. Deeper stacks
//! (`FORESIGHT_STACK_DEPTH` > 1) are unwound the same way, the user's frame and its callers.
//! Unwinding is libgcc's `_Unwind_Backtrace` (the unwinder every Rust and C++ program already
//! loads), stopped as soon as the frames wanted are in; frames above the hook's own are
//! dropped by finding the return address among them. Memory-access and allocation sites stay
//! single return addresses ([`site`]): their hot paths cache sites by address.
//!
//! With one frame per site (the default), a site's record also names the caller of the
//! function its last frame is in, as seen at its first occurrence (`SiteInfo::first_caller`):
//! a report can then say where the function was called from at the cost of one short unwind
//! per new site, never per call. It is unwound when a lookup finds no slot for the site, before
//! the slot is claimed, so that no thread waits on a claimed slot while the unwinder runs (it
//! takes the loader's lock); a lookup that finds the site does nothing more than before.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use foresight_trace::event::SiteId;
use foresight_trace::tables::{
    Frame, FrameSymbol, SiteInfo, SourceLocation, StringEntry, TableRecord,
};

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
/// A slot's `id` for a return address inside locking machinery: its calls are unwound.
const DEEP: u32 = u32::MAX - 1;
/// Frames a site unwinds to at most (the machinery's, the user's, and its callers).
const MAX_UNWOUND: usize = MAX_STACK_DEPTH + 16;

pub fn set_depth(d: usize) {
    DEPTH.store(d.clamp(1, MAX_STACK_DEPTH), Ordering::Relaxed);
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

/// The site of a memory access or an allocation at return address (or instruction) `ra`,
/// with `FORESIGHT_STACK_DEPTH` > 1 its callers too: never deepened for machinery (their hot
/// paths cache sites by address).
#[inline]
pub fn site(ra: usize) -> SiteId {
    if DEPTH.load(Ordering::Relaxed) <= 1 {
        match intern(ra as u64 | 1 << 63, &[ra], false) {
            DEEP => unwound_site(ra, 1),
            id => id,
        }
    } else {
        unwound_site(ra, DEPTH.load(Ordering::Relaxed))
    }
}

/// The site of a synchronisation hook called from `ra`, and whether it may be cached by
/// `ra` (false when the site depends on the callers: deeper stacks, or `ra` inside locking
/// machinery, whose calls are unwound to the first frame outside it). Always inlined: every
/// frame between the hook and the unwinder costs each unwound call one more frame to step.
#[inline(always)]
pub fn call_site(ra: usize) -> (SiteId, bool) {
    if DEPTH.load(Ordering::Relaxed) <= 1 {
        match intern(ra as u64 | 1 << 63, &[ra], true) {
            DEEP => (unwound_site(ra, 1), false),
            id => (id, true),
        }
    } else {
        (unwound_site(ra, DEPTH.load(Ordering::Relaxed)), false)
    }
}

/// A source location the program names itself: a Rust `#[track_caller]` location, passed by
/// `foresight-sync` (`hooks/sync.rs`). `key` is the address of the location's static
/// descriptor in the program's image, one per call site, which stands in for a return address:
/// the site's one frame is that address (module + offset), and its symbol (the file, line and
/// column, no function) is written with the site, so the trace names the line without debug
/// information; the symboliser leaves a frame that already has a symbol alone. Interned under
/// the key a return address would have, so the hooks' site caches and `call_site(key)` find
/// it afterwards.
#[cold]
pub fn source_site(key: usize, file: &[u8], line: u32, column: u32) -> SiteId {
    let symbol = SourceSymbol { file, line, column };
    match intern_with(key as u64 | 1 << 63, &[key], false, Some(&symbol)) {
        DEEP => OVERFLOW,
        id => id,
    }
}

/// What `source_site` writes for its frame.
struct SourceSymbol<'a> {
    file: &'a [u8],
    line: u32,
    column: u32,
}

/// The frames from `ra` out to the first one outside the locking machinery, then `depth - 1`
/// more callers.
#[cold]
#[inline(never)]
fn unwound_site(ra: usize, depth: usize) -> SiteId {
    let mut walk = Walk {
        ra,
        started: false,
        skipped: 0,
        frames: [0; MAX_UNWOUND],
        len: 0,
        user: None,
        depth,
    };
    // SAFETY: `step` only touches the `Walk` it is given, which outlives the call, and reads
    // the instruction pointer of the context the unwinder passes it.
    unsafe { _Unwind_Backtrace(step, (&mut walk as *mut Walk).cast()) };
    if walk.len == 0 {
        // The return address was not found among the frames (nothing to unwind through).
        walk.frames[0] = ra;
        walk.len = 1;
    }
    hashed_site(&walk.frames[..walk.len])
}

struct Walk {
    ra: usize,
    started: bool,
    skipped: usize,
    frames: [usize; MAX_UNWOUND],
    len: usize,
    /// Index of the first frame outside the machinery, once found.
    user: Option<usize>,
    depth: usize,
}

const URC_NO_REASON: libc::c_int = 0;
const URC_END_OF_STACK: libc::c_int = 5;

type TraceFn = extern "C" fn(ctx: *mut libc::c_void, arg: *mut libc::c_void) -> libc::c_int;

// libgcc's unwinder (the Itanium C++ ABI's `_Unwind_Backtrace`), which this library already
// links for Rust's own unwinding.
#[link(name = "gcc_s")]
extern "C" {
    fn _Unwind_Backtrace(trace: TraceFn, arg: *mut libc::c_void) -> libc::c_int;
    fn _Unwind_GetIP(ctx: *mut libc::c_void) -> usize;
}

extern "C" fn step(ctx: *mut libc::c_void, arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Walk` `unwound_site` passed, alive and not otherwise borrowed
    // during the walk; `ctx` is the unwinder's context for this frame.
    let (w, ip) = unsafe { (&mut *(arg as *mut Walk), _Unwind_GetIP(ctx)) };
    if !w.started {
        if ip != w.ra {
            // The runtime's own frames, above the hook's caller.
            w.skipped += 1;
            return if w.skipped > 64 {
                URC_END_OF_STACK
            } else {
                URC_NO_REASON
            };
        }
        w.started = true;
    }
    w.frames[w.len] = ip;
    w.len += 1;
    if w.user.is_none() && !crate::wrappers::is_machinery(ip) {
        w.user = Some(w.len - 1);
    }
    let enough = w.user.is_some_and(|u| w.len - u >= w.depth);
    if enough || w.len == MAX_UNWOUND {
        URC_END_OF_STACK
    } else {
        URC_NO_REASON
    }
}

/// The site of a stack given frame by frame (the return address first, then its callers):
/// the instrumented program's shadow stack (`accesses.rs`).
pub fn frames_site(frames: &[usize]) -> SiteId {
    if let [ra] = frames {
        return site(*ra);
    }
    hashed_site(frames)
}

/// The site of several frames (or one unwound frame), keyed by their hash: never the key of
/// a single return address, whose slot may say `DEEP`.
fn hashed_site(frames: &[usize]) -> SiteId {
    let mut h = frames.len() as u64;
    for &f in frames {
        h = mix(h ^ f as u64);
    }
    intern(h & !(1 << 63) | 1, frames, false)
}

/// `key` is non-zero and identifies the frames (the address itself at depth 1, else a hash).
/// With `classify`, a new single return address inside locking machinery gets `DEEP` instead
/// of a site; an existing slot answers what it holds.
#[inline]
fn intern(key: u64, frames: &[usize], classify: bool) -> SiteId {
    intern_with(key, frames, classify, None)
}

#[inline]
fn intern_with(
    key: u64,
    frames: &[usize],
    classify: bool,
    symbol: Option<&SourceSymbol>,
) -> SiteId {
    let mut i = (mix(key) as usize) & (SLOTS - 1);
    // The first caller of a new site, unwound once the site is known to be new (`None`: not
    // unwound yet).
    let mut caller: Option<Option<usize>> = None;
    for _ in 0..MAX_PROBES {
        let s = &TABLE.0[i];
        // A plain load, although a new site's slot is written next (`first_touch`): sites
        // unwound past locking machinery, and deeper stacks, are looked up here on every
        // call, where a locked write to a slot that threads share costs more than the fault
        // it would save once.
        let cur = s.key.load(Ordering::Acquire);
        if cur == key {
            return wait_id(s);
        }
        if cur == 0 {
            let first_caller =
                *caller.get_or_insert_with(|| first_caller(frames, symbol.is_some()));
            match s
                .key
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return create(s, frames, classify, symbol, first_caller),
                Err(v) if v == key => return wait_id(s),
                Err(_) => {}
            }
        }
        i = (i + 1) & (SLOTS - 1);
    }
    OVERFLOW
}

/// The caller of the function `frames`' last frame is in, for a new site recorded one frame
/// per site; `None` with deeper stacks (the frames hold the callers), for a location the
/// program named itself (`source`: no return address to find on the stack), or when the
/// stack does not show it (a return address passed by instrumented code rather than taken
/// from the call).
#[cold]
#[inline(never)]
fn first_caller(frames: &[usize], source: bool) -> Option<usize> {
    let (Some(&ra), false, true) = (frames.first(), source, shallow()) else {
        return None;
    };
    let mut walk = CallerWalk {
        ra,
        started: false,
        skipped: 0,
        seen: 0,
        wanted: frames.len(),
        caller: None,
    };
    // SAFETY: `caller_step` only touches the `CallerWalk` it is given, which outlives the
    // call, and reads the instruction pointer of the context the unwinder passes it.
    unsafe { _Unwind_Backtrace(caller_step, (&mut walk as *mut CallerWalk).cast()) };
    walk.caller
}

struct CallerWalk {
    ra: usize,
    started: bool,
    skipped: usize,
    /// Frames from `ra` on, `ra`'s included.
    seen: usize,
    /// The site's frames: the caller is the next one.
    wanted: usize,
    caller: Option<usize>,
}

extern "C" fn caller_step(ctx: *mut libc::c_void, arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `CallerWalk` `first_caller` passed, alive and not otherwise
    // borrowed during the walk; `ctx` is the unwinder's context for this frame.
    let (w, ip) = unsafe { (&mut *(arg as *mut CallerWalk), _Unwind_GetIP(ctx)) };
    if !w.started {
        if ip != w.ra {
            // The runtime's own frames, above the hook's caller.
            w.skipped += 1;
            return if w.skipped > 64 {
                URC_END_OF_STACK
            } else {
                URC_NO_REASON
            };
        }
        w.started = true;
    }
    w.seen += 1;
    if w.seen > w.wanted {
        // A return address of 0 ends the stack (a thread's first frame).
        w.caller = (ip != 0).then_some(ip);
        return URC_END_OF_STACK;
    }
    URC_NO_REASON
}

#[inline]
fn wait_id(s: &Slot) -> SiteId {
    loop {
        let id = s.id.load(Ordering::Acquire);
        if id == DEEP {
            return DEEP;
        }
        if id != 0 {
            return id - 1;
        }
        std::hint::spin_loop();
    }
}

#[cold]
fn create(
    s: &Slot,
    frames: &[usize],
    classify: bool,
    symbol: Option<&SourceSymbol>,
    first_caller: Option<usize>,
) -> SiteId {
    if let (true, [ra]) = (classify, frames) {
        if crate::wrappers::is_machinery(*ra) {
            s.id.store(DEEP, Ordering::Release);
            return DEEP;
        }
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    // An address in no module (JIT code): module u32::MAX, absolute offset.
    let frame = |a: usize| {
        modules::frame_of(a as u64).unwrap_or(Frame {
            module: u32::MAX,
            offset: a as u64,
        })
    };
    let frames: Vec<Frame> = frames.iter().map(|&a| frame(a)).collect();
    // A return address like the site's own frames (symbolised one byte before, at the call).
    let first_caller = first_caller.and_then(|a| modules::frame_of(a as u64));
    if let (Some(sym), Some(&frame)) = (symbol, frames.first()) {
        // Before the id is published, as every record (FORMAT.md §4.3).
        let file = output::new_string_id();
        output::table_record(&TableRecord::String(StringEntry {
            id: file,
            text: String::from_utf8_lossy(sym.file).into_owned(),
        }));
        output::table_record(&TableRecord::Symbol(FrameSymbol {
            frame,
            locations: vec![SourceLocation {
                function: None,
                file: Some(file),
                line: sym.line,
                column: sym.column,
            }],
        }));
    }
    output::table_record(&TableRecord::Site(SiteInfo {
        id,
        frames,
        first_caller,
    }));
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
