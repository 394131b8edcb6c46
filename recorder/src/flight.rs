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
//!   ring leaves the rest unused and goes to the start. A new chunk evicts the oldest ones until
//!   it fits. Chunks of one thread enter the ring in sequence order (its buffer's lock is held
//!   around the push), so they leave it in that order too.
//! - the pinned ring (an eighth of the bound, on top of it in memory), the same kind of ring for the last chunk of a
//!   thread that went quiet: a chunk evicted from the ring while it is its thread's only one
//!   there moves to it, so that a thread blocked since long before the window (a deadlock
//!   while others run on) keeps its last events — the request it waits in. A pinned chunk
//!   leaves when its thread pushes a new one (it is then summarised, and marked dead where it
//!   lies) or when the pinned ring needs its room.
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

use crate::context::Context;
use crate::output;
use crate::spin::SpinLock;

/// Threads whose window and held locks are tracked; a thread with a larger id keeps its
/// events in the ring but its dropped chunks are not summarised.
const MAX_THREADS: usize = 16 << 10;
/// Locks a thread is tracked holding at once (deeper ones are not).
const HELD: usize = 15;
/// Slots of the edge summary (a power of two); edges past three quarters of it are counted only.
const EDGE_SLOTS: usize = 1 << 15;
/// A ring record's header: the chunk's length, and `DEAD`.
const REC_HEADER: usize = 8;
/// Marks a held lock acquired before the window (the site's top bit; site ids stay below it).
const BEFORE_WINDOW: u32 = 1 << 31;

#[repr(C)]
#[derive(Clone, Copy)]
struct ThreadSlot {
    seen: u32,
    first_sequence: u32,
    events_dropped: u64,
    dropped_until_ns: u64,
    depth: u32,
    /// Chunks of the thread in the ring.
    in_ring: u32,
    /// (lock, site that acquired it | `BEFORE_WINDOW`).
    held: [(u32, u32); HELD],
    /// Its pinned chunk's offset in the pinned ring, plus one (0: none).
    pinned: u64,
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

/// Marks a record of the pinned ring whose chunk was summarised (its thread went on).
const DEAD: u64 = 1 << 63;

/// A ring of records (header: the chunk's length, `DEAD`; then the chunk, padded to 8).
#[derive(Clone, Copy)]
struct Fifo {
    base: *mut u8,
    cap: usize,
    /// Oldest record, next free byte, where the data before a wrap ends.
    head: usize,
    tail: usize,
    wrap_at: usize,
    wrapped: bool,
    records: usize,
    /// Bytes of live chunks (without headers).
    live_bytes: u64,
}

impl Fifo {
    const EMPTY: Fifo = Fifo {
        base: std::ptr::null_mut(),
        cap: 0,
        head: 0,
        tail: 0,
        wrap_at: 0,
        wrapped: false,
        records: 0,
        live_bytes: 0,
    };

    fn clear(&mut self) {
        *self = Fifo {
            base: self.base,
            cap: self.cap,
            ..Fifo::EMPTY
        };
    }

    /// Where a record of `rec` bytes goes now; `None`: the oldest must go first.
    fn room(&mut self, rec: usize) -> Option<usize> {
        if self.records == 0 {
            self.head = 0;
            self.tail = 0;
            self.wrapped = false;
        }
        if !self.wrapped {
            if self.tail + rec <= self.cap {
                return Some(self.tail);
            }
            // The rest of the ring stays unused until the head passes it.
            self.wrap_at = self.tail;
            self.tail = 0;
            self.wrapped = true;
        }
        (self.tail + rec <= self.head).then_some(self.tail)
    }

    fn header(&self, at: usize) -> u64 {
        // SAFETY: `at` is a record's offset, 8-aligned inside the ring (callers).
        unsafe { self.base.add(at).cast::<u64>().read() }
    }

    /// The chunk of the record at `at`, `len` bytes. Valid until the ring is written again.
    fn chunk<'a>(&self, at: usize, len: usize) -> &'a [u8] {
        // SAFETY: a record written by `commit`: `len` bytes after its header, inside the
        // ring, which lives as long as the process; callers read it before the next write.
        unsafe { std::slice::from_raw_parts(self.base.add(at + REC_HEADER), len) }
    }

    /// Writes `chunk` at `at` (from `room`).
    fn commit(&mut self, at: usize, chunk: &[u8]) {
        // SAFETY: `[at, at + record)` is free space inside the ring (`room`), 8-aligned.
        unsafe {
            self.base.add(at).cast::<u64>().write(chunk.len() as u64);
            std::ptr::copy_nonoverlapping(
                chunk.as_ptr(),
                self.base.add(at + REC_HEADER),
                chunk.len(),
            );
        }
        self.tail = at + REC_HEADER + align8(chunk.len());
        self.records += 1;
        self.live_bytes += chunk.len() as u64;
    }

    fn kill(&mut self, at: usize) {
        let h = self.header(at);
        if h & DEAD == 0 {
            // SAFETY: as in `header`.
            unsafe { self.base.add(at).cast::<u64>().write(h | DEAD) };
            self.live_bytes -= h;
        }
    }

    /// Takes the oldest record off: its offset, its length, and whether it is live.
    fn pop(&mut self) -> (usize, usize, bool) {
        if self.wrapped && self.head >= self.wrap_at {
            self.head = 0;
            self.wrapped = false;
        }
        let at = self.head;
        let h = self.header(at);
        let len = (h & !DEAD) as usize;
        let live = h & DEAD == 0;
        self.head = at + REC_HEADER + align8(len);
        self.records -= 1;
        if live {
            self.live_bytes -= len as u64;
        }
        if self.wrapped && self.head >= self.wrap_at {
            self.head = 0;
            self.wrapped = false;
        }
        (at, len, live)
    }
}

struct Ring {
    main: Fifo,
    pinned: Fifo,
    threads: *mut ThreadSlot,
    edges: *mut EdgeSlot,
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
    main: Fifo::EMPTY,
    pinned: Fifo::EMPTY,
    threads: std::ptr::null_mut(),
    edges: std::ptr::null_mut(),
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
    let pinned_cap = (cap / 8 + 4095) & !4095;
    let threads_len = MAX_THREADS * std::mem::size_of::<ThreadSlot>();
    let edges_len = EDGE_SLOTS * std::mem::size_of::<EdgeSlot>();
    let len = cap + pinned_cap + threads_len + edges_len;
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
    // The ring takes the whole bound and the pinned ring comes on top (memory: 9/8 of the
    // bound): pinned chunks are few in most runs, and `dump` trims both to the bound.
    r.main = Fifo {
        base,
        cap,
        ..Fifo::EMPTY
    };
    // SAFETY: every offset below is inside the mapping; `cap` and `pinned_cap` are whole
    // pages, so the rings and both tables are aligned.
    unsafe {
        r.pinned = Fifo {
            base: base.add(cap),
            cap: pinned_cap,
            ..Fifo::EMPTY
        };
        r.threads = base.add(cap + pinned_cap).cast();
        r.edges = base.add(cap + pinned_cap + threads_len).cast();
    }
    r.keep_last = keep_last;
    ACTIVE.store(true, Ordering::Release);
    true
}

/// Empties the rings and their summaries (a fork child's fresh trace).
fn clear(r: &mut Ring) {
    r.main.clear();
    r.pinned.clear();
    r.threads_seen = 0;
    r.edge_count = 0;
    r.edges_overflow = 0;
    if r.threads.is_null() {
        return;
    }
    let threads_len = MAX_THREADS * std::mem::size_of::<ThreadSlot>();
    let edges_len = EDGE_SLOTS * std::mem::size_of::<EdgeSlot>();
    let (start, len) = (r.threads.cast::<u8>(), threads_len + edges_len);
    // SAFETY: the two tables are the page-aligned end of our private anonymous mapping (both
    // rings are whole pages), all-zero is their empty state, and only the holder of the ring's lock
    // (`r`) touches them.
    unsafe {
        output::zero_static(start, len, || std::ptr::write_bytes(start, 0, len));
    }
}

fn record_len(chunk_len: usize) -> usize {
    REC_HEADER + align8(chunk_len)
}

/// Takes a framed event chunk; false if it could not (the ring's lock was not had in time in
/// a signal handler, or the chunk is larger than the ring: then it is lost).
pub fn push(chunk: &[u8], context: Context) -> bool {
    let Some(mut r) = RING.lock_in(context) else {
        return false;
    };
    let r = &mut *r;
    let Some(p) = chunk
        .get(CHUNK_HEADER_LEN..)
        .and_then(EventsPrefix::read_from)
    else {
        return false;
    };
    let rec = record_len(chunk.len());
    // Its thread goes on: a pinned chunk of it is no longer its last.
    unpin(r, p.thread);
    if rec > r.main.cap {
        summarise(r, chunk);
        return false;
    }
    let at = loop {
        if let Some(at) = r.main.room(rec) {
            break at;
        }
        let (at, len, live) = r.main.pop();
        if live {
            evicted(r, at, len, true);
        }
    };
    r.main.commit(at, chunk);
    PUSHED.fetch_add(1, Ordering::Relaxed);
    if let Some(t) = slot(r, p.thread) {
        if t.seen == 0 {
            t.seen = 1;
            t.first_sequence = p.sequence;
        }
        t.in_ring += 1;
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

/// A chunk taken off the ring (at `at`, `len` bytes): pinned if it was its thread's only one
/// there (and `may_pin`), else summarised.
fn evicted(r: &mut Ring, at: usize, len: usize, may_pin: bool) {
    let chunk = r.main.chunk(at, len);
    let Some(p) = EventsPrefix::read_from(&chunk[CHUNK_HEADER_LEN..]) else {
        return;
    };
    let last = match slot(r, p.thread) {
        Some(t) => {
            t.in_ring = t.in_ring.saturating_sub(1);
            t.in_ring == 0
        }
        None => false,
    };
    if may_pin && last && record_len(len) <= r.pinned.cap / 2 {
        pin(r, p.thread, chunk);
    } else {
        summarise(r, chunk);
    }
}

/// Moves a thread's last chunk to the pinned ring (the chunk is still in the main ring's
/// memory, which nothing writes meanwhile).
fn pin(r: &mut Ring, thread: u32, chunk: &[u8]) {
    let rec = record_len(chunk.len());
    let at = loop {
        if let Some(at) = r.pinned.room(rec) {
            break at;
        }
        let (at, len, live) = r.pinned.pop();
        if live {
            drop_pinned(r, at, len);
        }
    };
    r.pinned.commit(at, chunk);
    if let Some(t) = slot(r, thread) {
        t.pinned = at as u64 + 1;
    }
}

/// A live pinned chunk leaves the window for good: summarised, its thread's mark cleared.
fn drop_pinned(r: &mut Ring, at: usize, len: usize) {
    let chunk = r.pinned.chunk(at, len);
    if let Some(p) = EventsPrefix::read_from(&chunk[CHUNK_HEADER_LEN..]) {
        if let Some(t) = slot(r, p.thread) {
            t.pinned = 0;
        }
    }
    summarise(r, chunk);
}

/// The thread's pinned chunk, if any, is summarised and marked dead where it lies.
fn unpin(r: &mut Ring, thread: u32) {
    let Some(t) = slot(r, thread) else {
        return;
    };
    if t.pinned == 0 {
        return;
    }
    let at = (t.pinned - 1) as usize;
    t.pinned = 0;
    let len = (r.pinned.header(at) & !DEAD) as usize;
    let chunk = r.pinned.chunk(at, len);
    summarise(r, chunk);
    r.pinned.kill(at);
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
    let Some(t) = slot(r, thread) else { return };
    // A copy: the summary is written meanwhile (replay touches only `held` and `depth`).
    let mut t = *t;
    replay_slot(&mut t, body, base_key, in_window, &mut |h, l, hs, s| {
        add_edge(r, h, l, thread, hs, s)
    });
    if let Some(slot) = slot(r, thread) {
        *slot = t;
    }
}

/// `replay` on one thread's slot; each edge goes to `edge(held, requested, held_site, site)`.
fn replay_slot(
    t: &mut ThreadSlot,
    body: &[u8],
    base_key: u64,
    in_window: bool,
    edge: &mut dyn FnMut(u32, u32, u32, u32),
) {
    let mut d = Decoder::new(body, base_key);
    while let Ok(Some(ev)) = d.next_event() {
        match ev.kind {
            EventKind::LockRequest { lock, site, .. } => {
                let depth = t.depth as usize;
                for &(h, hsite) in &t.held[..depth.min(HELD)] {
                    if h != lock && (!in_window || hsite & BEFORE_WINDOW != 0) {
                        edge(h, lock, hsite & !BEFORE_WINDOW, site);
                    }
                }
                // The request's site, until the acquisition.
                if depth < HELD {
                    t.held[depth] = (u32::MAX, site);
                }
            }
            EventKind::LockAcquired { lock, .. } => {
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
            } => push_held(t, lock, site, in_window),
            EventKind::CondWaitEnd { mutex, .. } => push_held(t, mutex, 0, in_window),
            EventKind::LockRelease { lock, .. } | EventKind::CondWaitBegin { mutex: lock, .. } => {
                let depth = (t.depth as usize).min(HELD);
                if let Some(i) = t.held[..depth].iter().rposition(|&(h, _)| h == lock) {
                    t.held.copy_within(i + 1..depth, i);
                    t.depth -= 1;
                } else if t.depth as usize > HELD {
                    t.depth -= 1;
                }
            }
            EventKind::ThreadExit => t.depth = 0,
            _ => {}
        }
    }
}

fn push_held(t: &mut ThreadSlot, lock: u32, site: u32, in_window: bool) {
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
/// summary. Every lock wait as `context` allows (bounded in a signal handler); `end_room` is
/// what the rest of the trace's end (end states, stop cause, trailer) will take.
pub fn dump(context: Context, end_room: u64) {
    if !active() {
        return;
    }
    let Some(mut r) = RING.lock_in(context) else {
        return;
    };
    let r = &mut *r;
    output::flush_tables(context);
    // What the records after the chunks take, at most.
    let records_room = r.threads_seen as u64 * 40 + (r.edge_count as u64 + 64) * 40;
    let room = r
        .keep_last
        .saturating_sub(output::file_len())
        .saturating_sub(end_room + records_room + (4 << 10));
    // Trimmed to the bound: the oldest chunks go first, then pinned ones.
    while r.main.live_bytes + r.pinned.live_bytes > room {
        if r.main.records > 0 {
            let (at, len, live) = r.main.pop();
            if live {
                evicted(r, at, len, false);
            }
        } else if r.pinned.records > 0 {
            let (at, len, live) = r.pinned.pop();
            if live {
                drop_pinned(r, at, len);
            }
        } else {
            break;
        }
    }
    // The kept chunks, pinned ones first (each older than any other of its thread): written,
    // and replayed for the edges that cross into the window.
    for main in [false, true] {
        loop {
            let fifo = if main { &mut r.main } else { &mut r.pinned };
            if fifo.records == 0 {
                break;
            }
            let (at, len, live) = fifo.pop();
            if !live {
                continue;
            }
            let chunk = fifo.chunk(at, len);
            if let Some(p) = EventsPrefix::read_from(&chunk[CHUNK_HEADER_LEN..]) {
                output::write_counted_chunk(chunk, p.event_count);
                let body = &chunk[CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN..];
                replay(r, p.thread, body, p.base_key, true);
            }
        }
    }
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
    summary_records(r, 0, &mut put);
    if !out.is_empty() {
        output::write_chunk(out.framed());
    }
    // Written once: a later dump (a failed `exec`, then the exit) starts from nothing.
    clear(r);
}

/// What the window says of itself and of what it dropped: one `RecordingWindow` per thread
/// seen (naming `signal` for a snapshot, else 0) and the summary's `EarlierLockOrder` edges.
/// The ring's lock is held (`r`).
fn summary_records(r: &Ring, signal: u32, put: &mut impl FnMut(TableRecord)) {
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
                snapshot_signal: signal,
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
}

/// Whether the summary holds the pair.
fn has_edge(r: &Ring, held: u32, requested: u32) -> bool {
    let key = ((held as u64) << 32 | requested as u64).wrapping_add(1);
    let mut i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 49) as usize & (EDGE_SLOTS - 1);
    loop {
        // SAFETY: `i` is below EDGE_SLOTS; the table is ours under the lock `r` proves held.
        let e = unsafe { &*r.edges.add(i) };
        if e.key == key {
            return true;
        }
        if e.key == 0 {
            return false;
        }
        i = (i + 1) & (EDGE_SLOTS - 1);
    }
}

/// Writes the window as it is now to a snapshot file (`fd`, from offset `at`), leaving the
/// ring, its summary and the threads' held locks as they were (`--dump-on`): the live chunks,
/// pinned ones first, then one `RecordingWindow` per thread with `snapshot_signal`, the
/// summary, and the edges from a lock held before the window to one requested in it (found on
/// copies of the threads' held locks). Everything is written under the ring's lock, so the
/// chunks do not move meanwhile. `write(bytes, at)`: false if it failed. The offset after it,
/// or `None` (the lock not had in time in a signal handler, a failed write).
pub fn snapshot(
    context: Context,
    signal: u32,
    mut at: u64,
    write: &dyn Fn(&[u8], u64) -> bool,
) -> Option<u64> {
    if !active() {
        return None;
    }
    let mut guard = RING.lock_in(context)?;
    let r = &mut *guard;
    // The chunks: each thread's are in order within each ring, and its pinned chunk is older
    // than any of its chunks in the main ring. Walked on copies of the rings' cursors.
    for mut fifo in [r.pinned, r.main] {
        while fifo.records > 0 {
            let (off, len, live) = fifo.pop();
            if !live {
                continue;
            }
            let chunk = fifo.chunk(off, len);
            if !write(chunk, at) {
                return None;
            }
            at += chunk.len() as u64;
        }
    }
    let mut buf = [0u8; 2048];
    let mut out = TableChunkBuf::new(&mut buf)?;
    let mut ok = true;
    let mut put = |rec: TableRecord| {
        if !out.push(&rec) {
            let framed = out.framed();
            ok &= write(framed, at);
            at += framed.len() as u64;
            out.clear();
            out.push(&rec);
        }
    };
    summary_records(r, signal, &mut put);
    // Edges that cross into the window: only a thread holding a lock from before it has any.
    for id in 0..r.threads_seen {
        // SAFETY: below threads_seen ≤ MAX_THREADS; under the lock.
        let mut t = unsafe { *r.threads.add(id) };
        let depth = (t.depth as usize).min(HELD);
        if t.seen == 0 || !t.held[..depth].iter().any(|h| h.1 & BEFORE_WINDOW != 0) {
            continue;
        }
        // The last few pairs written for the thread, so that a loop does not repeat one.
        let mut recent = [0u64; 32];
        let mut n = 0usize;
        for mut fifo in [r.pinned, r.main] {
            while fifo.records > 0 {
                let (off, len, live) = fifo.pop();
                let chunk = fifo.chunk(off, len);
                let Some(p) = chunk
                    .get(CHUNK_HEADER_LEN..)
                    .and_then(EventsPrefix::read_from)
                else {
                    continue;
                };
                if !live || p.thread as usize != id {
                    continue;
                }
                let body = &chunk[CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN..];
                replay_slot(&mut t, body, p.base_key, true, &mut |h, l, hs, s| {
                    let key = (h as u64) << 32 | l as u64;
                    if recent.contains(&(key + 1)) || has_edge(r, h, l) {
                        return;
                    }
                    recent[n % recent.len()] = key + 1;
                    n += 1;
                    put(TableRecord::EarlierLockOrder(EarlierLockOrder {
                        held: h,
                        requested: l,
                        count: 1,
                        thread: id as u32,
                        held_site: hs,
                        site: s,
                    }));
                });
            }
        }
    }
    if !out.is_empty() {
        let framed = out.framed();
        ok &= write(framed, at);
        at += framed.len() as u64;
    }
    ok.then_some(at)
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
