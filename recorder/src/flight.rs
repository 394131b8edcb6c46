//! Flight-recorder mode (`FORESIGHT_KEEP_LAST=BYTES`, `foresight record --keep-last`): event
//! chunks go to a ring in memory instead of the file, and only the most recent ones are
//! written, when the trace is completed (exit, a crash signal, the hang timeout, a signal the
//! user named with `--dump-on`) or before an `exec`.
//!
//! Everything lives in one anonymous `mmap`, made at start-up, so that nothing here allocates
//! (the ring is filled from hooks and read from signal handlers):
//!
//! - the ring: framed event chunks, exactly as they would have been written, each after an
//!   8-byte header (its length), oldest first; a chunk that does not fit before the end of the
//!   ring leaves a wrap mark and goes to the start. A new chunk evicts the oldest ones until it
//!   fits. Chunks of one thread enter the ring in sequence order (its buffer's lock is held
//!   around the push), so they leave it in that order too.
//! - per thread (ids below `MAX_THREADS`): the window's first sequence number, the events
//!   dropped before it, and the locks the thread held at the end of its last dropped chunk
//!   (each with the site that acquired it).
//! - the summary of lock-order edges seen in dropped chunks: an open-addressing table of
//!   (held, requested) object pairs with a count, one thread and both sites.
//!
//! An evicted chunk is decoded (`Decoder`, which does not allocate) to update the held locks
//! and the summary. When the window is written, the kept chunks are replayed over the held
//! locks too: an edge from a lock acquired before the window to one requested in it is in
//! neither part alone, and goes to the summary as well. The window is trimmed to what the
//! `--keep-last` bound leaves after the tables already written and the end of the trace.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use foresight_trace::codec::Decoder;
use foresight_trace::event::EventKind;
use foresight_trace::frame::{EventsPrefix, CHUNK_HEADER_LEN, EVENTS_PREFIX_LEN};
use foresight_trace::tables::{EarlierLockOrder, RecordingWindow, TableRecord};
use foresight_trace::writer::TableChunkBuf;

use crate::output;
use crate::spin::SpinLock;

/// Threads whose window and held locks are tracked; a thread with a larger id keeps its
/// events in the ring but its dropped chunks are not summarised.
const MAX_THREADS: usize = 16 << 10;
/// Locks a thread is tracked holding at once (deeper ones are not).
const HELD: usize = 15;
/// Slots of the edge summary (a power of two); edges past three quarters of it are counted only.
const EDGE_SLOTS: usize = 1 << 15;
/// A ring record's header: the chunk's length (`WRAP`: the next record is at offset 0).
const REC_HEADER: usize = 8;
const WRAP: u64 = u64::MAX;
/// Marks a held lock acquired before the window (the site's top bit; site ids stay below it).
const BEFORE_WINDOW: u32 = 1 << 31;

#[repr(C)]
struct ThreadSlot {
    seen: u32,
    first_sequence: u32,
    events_dropped: u64,
    dropped_until_ns: u64,
    depth: u32,
    _pad: u32,
    /// (lock, site that acquired it | `BEFORE_WINDOW`).
    held: [(u32, u32); HELD],
}

#[repr(C)]
struct EdgeSlot {
    /// `(held << 32 | requested) + 1`; 0: empty.
    key: u64,
    count: u64,
    thread: u32,
    held_site: u32,
    site: u32,
    _pad: u32,
}

struct Ring {
    base: *mut u8,
    cap: usize,
    threads: *mut ThreadSlot,
    edges: *mut EdgeSlot,
    /// Oldest record, next free byte, where the data before a wrap ends.
    head: usize,
    tail: usize,
    wrap_at: usize,
    wrapped: bool,
    records: usize,
    /// Chunk bytes (without record headers) in the ring.
    live_bytes: u64,
    keep_last: u64,
    threads_seen: usize,
    edge_count: usize,
    edges_overflow: u64,
}

// SAFETY: the pointers are into the ring's own mapping, used only under `RING`'s lock.
unsafe impl Send for Ring {}

static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Chunks pushed, and the count at the flusher's last look.
static PUSHED: AtomicU64 = AtomicU64::new(0);
static PUSHED_SEEN: AtomicU64 = AtomicU64::new(0);
static RING: SpinLock<Ring> = SpinLock::new(Ring {
    base: std::ptr::null_mut(),
    cap: 0,
    threads: std::ptr::null_mut(),
    edges: std::ptr::null_mut(),
    head: 0,
    tail: 0,
    wrap_at: 0,
    wrapped: false,
    records: 0,
    live_bytes: 0,
    keep_last: 0,
    threads_seen: 0,
    edge_count: 0,
    edges_overflow: 0,
});

/// Whether chunks go to the ring.
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Maps the ring for a bound of `keep_last` bytes; false if it cannot be (then the caller does
/// not record: a trace without a bound is not what was asked for).
pub fn configure(keep_last: u64) -> bool {
    // Page-aligned, so that the tables after it can be given back with `madvise`.
    let cap = ((keep_last as usize).max(64 << 10) + 4095) & !4095;
    let threads_len = MAX_THREADS * std::mem::size_of::<ThreadSlot>();
    let edges_len = EDGE_SLOTS * std::mem::size_of::<EdgeSlot>();
    let len = cap + threads_len + edges_len;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    let base = p.cast::<u8>();
    let mut r = RING.lock();
    r.base = base;
    r.cap = cap;
    // SAFETY: both offsets are inside the mapping; `cap` is a multiple of 8 and the slots'
    // alignment is 8, so both tables are aligned.
    unsafe {
        r.threads = base.add(cap).cast();
        r.edges = base.add(cap + threads_len).cast();
    }
    r.keep_last = keep_last;
    ACTIVE.store(true, Ordering::Release);
    true
}

/// Empties the ring and its summaries (a fork child's fresh trace).
fn clear(r: &mut Ring) {
    r.head = 0;
    r.tail = 0;
    r.wrap_at = 0;
    r.wrapped = false;
    r.records = 0;
    r.live_bytes = 0;
    r.threads_seen = 0;
    r.edge_count = 0;
    r.edges_overflow = 0;
    if r.base.is_null() {
        return;
    }
    let threads_len = MAX_THREADS * std::mem::size_of::<ThreadSlot>();
    let edges_len = EDGE_SLOTS * std::mem::size_of::<EdgeSlot>();
    let (start, len) = (r.threads.cast::<u8>(), threads_len + edges_len);
    // SAFETY: the two tables are the page-aligned end of our private anonymous mapping (`cap`
    // and the thread table are whole pages), all-zero is their empty state, and only the
    // holder of the ring's lock (`r`) touches them.
    unsafe {
        output::zero_static(start, len, || std::ptr::write_bytes(start, 0, len));
    }
}

/// Takes a framed event chunk holding `events` events; false if it could not (the ring's lock
/// was not had within `attempts`, or the chunk is larger than the ring: then it is lost).
pub fn push(chunk: &[u8], attempts: Option<u32>) -> bool {
    let guard = match attempts {
        Some(a) => RING.try_lock_for(a),
        None => Some(RING.lock()),
    };
    let Some(mut r) = guard else {
        return false;
    };
    let rec = REC_HEADER + align8(chunk.len());
    if rec + REC_HEADER > r.cap || chunk.len() < CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN {
        summarise(&mut r, chunk);
        return false;
    }
    loop {
        if r.records == 0 {
            r.head = 0;
            r.tail = 0;
            r.wrapped = false;
        }
        if !r.wrapped {
            if r.tail + rec <= r.cap {
                break;
            }
            // Wrap: the rest of the ring is left unused until the head passes it.
            let at = r.tail;
            if at + REC_HEADER <= r.cap {
                // SAFETY: 8 bytes inside the ring, 8-aligned.
                unsafe { r.base.add(at).cast::<u64>().write(WRAP) };
            }
            r.wrap_at = at;
            r.tail = 0;
            r.wrapped = true;
        }
        if r.tail + rec <= r.head {
            break;
        }
        evict_oldest(&mut r);
    }
    let at = r.tail;
    // SAFETY: `[at, at + rec)` is free space inside the ring (the loop above), 8-aligned.
    unsafe {
        r.base.add(at).cast::<u64>().write(chunk.len() as u64);
        std::ptr::copy_nonoverlapping(chunk.as_ptr(), r.base.add(at + REC_HEADER), chunk.len());
    }
    r.tail = at + rec;
    r.records += 1;
    PUSHED.fetch_add(1, Ordering::Relaxed);
    r.live_bytes += chunk.len() as u64;
    if let Some(p) = EventsPrefix::read_from(&chunk[CHUNK_HEADER_LEN..]) {
        if let Some(t) = slot(&mut r, p.thread) {
            if t.seen == 0 {
                t.seen = 1;
                t.first_sequence = p.sequence;
            }
        }
    }
    true
}

/// The thread's slot, counting it as seen.
fn slot(r: &mut Ring, thread: u32) -> Option<&mut ThreadSlot> {
    if thread as usize >= MAX_THREADS {
        return None;
    }
    r.threads_seen = r.threads_seen.max(thread as usize + 1);
    // SAFETY: `thread` is below MAX_THREADS: a slot of the table, which we reach only under
    // the lock that `r` proves held.
    Some(unsafe { &mut *r.threads.add(thread as usize) })
}

/// The oldest record: its offset and length (after following a wrap mark).
fn oldest(r: &mut Ring) -> (usize, usize) {
    if r.wrapped && r.head >= r.wrap_at {
        r.head = 0;
        r.wrapped = false;
    }
    // SAFETY: the head is a record header inside the ring.
    let len = unsafe { r.base.add(r.head).cast::<u64>().read() };
    (r.head, len as usize)
}

fn evict_oldest(r: &mut Ring) {
    let (at, len) = oldest(r);
    // SAFETY: a record written by `push`: `len` bytes after its header, inside the ring.
    let chunk = unsafe { std::slice::from_raw_parts(r.base.add(at + REC_HEADER), len) };
    summarise(r, chunk);
    r.head = at + REC_HEADER + align8(len);
    r.records -= 1;
    r.live_bytes -= len as u64;
    if r.wrapped && r.head >= r.wrap_at {
        r.head = 0;
        r.wrapped = false;
    }
}

/// A chunk leaves the window: its thread's dropped counts, and its lock-order edges.
fn summarise(r: &mut Ring, chunk: &[u8]) {
    let Some(p) = chunk
        .get(CHUNK_HEADER_LEN..)
        .and_then(EventsPrefix::read_from)
    else {
        return;
    };
    let Some(t) = slot(r, p.thread) else {
        return;
    };
    t.seen = 1;
    t.first_sequence = p.sequence.wrapping_add(1);
    t.events_dropped += p.event_count as u64;
    t.dropped_until_ns = p.end_ns;
    let body = &chunk[CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN..];
    replay(r, p.thread, body, p.base_key, false);
}

/// Walks a chunk's events over the thread's held locks; with `in_window`, only edges from a
/// lock acquired before the window are summarised, and nothing is marked before the window.
fn replay(r: &mut Ring, thread: u32, body: &[u8], base_key: u64, in_window: bool) {
    let mut d = Decoder::new(body, base_key);
    while let Ok(Some(ev)) = d.next_event() {
        match ev.kind {
            EventKind::LockRequest { lock, site, .. } => {
                let Some(t) = slot(r, thread) else { return };
                let depth = t.depth as usize;
                let held = t.held;
                for &(h, hsite) in &held[..depth] {
                    if h != lock && (!in_window || hsite & BEFORE_WINDOW != 0) {
                        add_edge(r, h, lock, thread, hsite & !BEFORE_WINDOW, site);
                    }
                }
                // The request's site, until the acquisition.
                let t = slot(r, thread).expect("checked above");
                if depth < HELD {
                    t.held[depth] = (u32::MAX, site);
                }
            }
            EventKind::LockAcquired { lock, .. } => {
                let Some(t) = slot(r, thread) else { return };
                let depth = t.depth as usize;
                if depth < HELD {
                    let site = if t.held[depth].0 == u32::MAX {
                        t.held[depth].1
                    } else {
                        0
                    };
                    let mark = if in_window { 0 } else { BEFORE_WINDOW };
                    t.held[depth] = (lock, site | mark);
                }
                t.depth += 1;
            }
            EventKind::LockTry {
                lock,
                site,
                acquired: true,
                ..
            } => push_held(r, thread, lock, site, in_window),
            EventKind::CondWaitEnd { mutex, .. } => push_held(r, thread, mutex, 0, in_window),
            EventKind::LockRelease { lock, .. } | EventKind::CondWaitBegin { mutex: lock, .. } => {
                let Some(t) = slot(r, thread) else { return };
                let depth = (t.depth as usize).min(HELD);
                if let Some(i) = t.held[..depth].iter().rposition(|&(h, _)| h == lock) {
                    t.held.copy_within(i + 1..depth, i);
                    t.depth -= 1;
                } else if t.depth as usize > HELD {
                    t.depth -= 1;
                }
            }
            EventKind::ThreadExit => {
                if let Some(t) = slot(r, thread) {
                    t.depth = 0;
                }
            }
            _ => {}
        }
    }
}

fn push_held(r: &mut Ring, thread: u32, lock: u32, site: u32, in_window: bool) {
    let Some(t) = slot(r, thread) else { return };
    let depth = t.depth as usize;
    if depth < HELD {
        let mark = if in_window { 0 } else { BEFORE_WINDOW };
        t.held[depth] = (lock, (site & !BEFORE_WINDOW) | mark);
    }
    t.depth += 1;
}

fn add_edge(r: &mut Ring, held: u32, requested: u32, thread: u32, held_site: u32, site: u32) {
    let key = ((held as u64) << 32 | requested as u64).wrapping_add(1);
    if key == 0 {
        return;
    }
    let mut i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 49) as usize & (EDGE_SLOTS - 1);
    loop {
        // SAFETY: `i` is below EDGE_SLOTS; the table is ours under the lock `r` proves held.
        let e = unsafe { &mut *r.edges.add(i) };
        if e.key == key {
            e.count += 1;
            return;
        }
        if e.key == 0 {
            if r.edge_count >= EDGE_SLOTS / 4 * 3 {
                r.edges_overflow += 1;
                return;
            }
            *e = EdgeSlot {
                key,
                count: 1,
                thread,
                held_site,
                site,
                _pad: 0,
            };
            r.edge_count += 1;
            return;
        }
        i = (i + 1) & (EDGE_SLOTS - 1);
    }
}

/// Writes the window to the trace (once: the ring is empty afterwards): the chunks that fit
/// the bound, oldest first, then one `RecordingWindow` per thread and the `EarlierLockOrder`
/// summary. `attempts` bounds every lock wait (signal handlers); `end_room` is what the rest
/// of the trace's end (end states, stop cause, trailer) will take.
pub fn dump(attempts: Option<u32>, end_room: u64) {
    if !active() {
        return;
    }
    let guard = match attempts {
        Some(a) => RING.try_lock_for(a),
        None => Some(RING.lock()),
    };
    let Some(mut r) = guard else {
        return;
    };
    output::flush_tables(attempts);
    // What the records after the chunks take, at most.
    let records_room = r.threads_seen as u64 * 40 + (r.edge_count as u64 + 64) * 40;
    let room = r
        .keep_last
        .saturating_sub(output::file_len())
        .saturating_sub(end_room + records_room + (4 << 10));
    while r.records > 0 && r.live_bytes > room {
        evict_oldest(&mut r);
    }
    // The kept chunks: written, and replayed for the edges that cross into the window.
    while r.records > 0 {
        let (at, len) = oldest(&mut r);
        // SAFETY: a record written by `push`, inside the ring.
        let chunk = unsafe { std::slice::from_raw_parts(r.base.add(at + REC_HEADER), len) };
        if let Some(p) = EventsPrefix::read_from(&chunk[CHUNK_HEADER_LEN..]) {
            output::write_window_chunk(chunk, p.event_count);
            let body = &chunk[CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN..];
            replay(&mut r, p.thread, body, p.base_key, true);
        }
        r.head = at + REC_HEADER + align8(len);
        r.records -= 1;
        r.live_bytes -= len as u64;
    }
    r.head = 0;
    r.tail = 0;
    r.wrapped = false;
    let mut buf = [0u8; 2048];
    let Some(mut out) = TableChunkBuf::new(&mut buf) else {
        return;
    };
    let mut put = |rec: TableRecord| {
        if !out.push(&rec) {
            output::write_chunk(out.framed());
            out.clear();
            out.push(&rec);
        }
    };
    for id in 0..r.threads_seen {
        // SAFETY: below threads_seen ≤ MAX_THREADS; under the lock.
        let t = unsafe { &*r.threads.add(id) };
        if t.seen != 0 {
            put(TableRecord::RecordingWindow(RecordingWindow {
                thread: id as u32,
                first_sequence: t.first_sequence,
                events_dropped: t.events_dropped,
                dropped_until_ns: t.dropped_until_ns,
                keep_last: r.keep_last,
            }));
        }
    }
    for i in 0..EDGE_SLOTS {
        // SAFETY: below EDGE_SLOTS; under the lock.
        let e = unsafe { &*r.edges.add(i) };
        if e.key != 0 {
            let key = e.key.wrapping_sub(1);
            put(TableRecord::EarlierLockOrder(EarlierLockOrder {
                held: (key >> 32) as u32,
                requested: key as u32,
                count: e.count,
                thread: e.thread,
                held_site: e.held_site,
                site: e.site,
            }));
        }
    }
    if !out.is_empty() {
        output::write_chunk(out.framed());
    }
    // Written once: a later dump (a failed `exec`, then the exit) starts from nothing.
    clear(&mut r);
}

/// The flusher's round: a window that took chunks since the last round touches the trace's
/// modification time, which `foresight record --hang-timeout` watches (the file itself does
/// not grow until the window is written).
pub fn touch_on_progress() {
    if !active() {
        return;
    }
    let now = PUSHED.load(Ordering::Relaxed);
    if PUSHED_SEEN.swap(now, Ordering::Relaxed) != now {
        output::touch();
    }
}

/// Fork: the ring's lock is held across it, so the child inherits a consistent ring.
pub fn lock_for_fork() {
    RING.raw_lock();
}

/// # Safety
/// Only after `lock_for_fork`.
pub unsafe fn unlock_after_fork() {
    // SAFETY: forwarded contract.
    unsafe { RING.force_unlock() };
}

/// The fork child starts a fresh trace: the parent's window is not its own.
pub fn reset_in_child() {
    if active() {
        clear(&mut RING.lock());
    }
}
