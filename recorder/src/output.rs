//! The trace file: opening it under the env contract, writing chunks with `pwrite`, table
//! records, and the trailer.
//!
//! Event chunks are written without a global lock: each takes its file offset with one
//! `fetch_add` on the file length and `pwrite`s there. Table records are buffered under one
//! spinlock and written as a table chunk *before* any event chunk is written (every event chunk
//! write first drains the table buffer, under the lock, at a lower offset), so a table record
//! always precedes the first event chunk that can refer to it (`FORMAT.md` §4.3).

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

use foresight_trace::tables::{EndReason, Header, TableRecord, Trailer};
use foresight_trace::writer::{file_prefix, trailer_chunk_into};
use foresight_trace::TableWriter;

use crate::spin::SpinLock;

/// Runtime life cycle.
pub const STATE_OFF: u8 = 0;
pub const STATE_STARTING: u8 = 1;
pub const STATE_RECORDING: u8 = 2;
/// Recording paused (an `exec` is under way); hooks pass through.
pub const STATE_PAUSED: u8 = 3;
/// The trace is complete (exit, signal) or could not be opened; hooks pass through.
pub const STATE_DONE: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(STATE_OFF);
static FD: AtomicI32 = AtomicI32::new(-1);
static FILE_LEN: AtomicU64 = AtomicU64::new(0);
static EVENT_CHUNKS: AtomicU64 = AtomicU64::new(0);
static EVENTS: AtomicU64 = AtomicU64::new(0);
static EVENTS_LOST: AtomicU64 = AtomicU64::new(0);
static NEXT_STRING: AtomicU32 = AtomicU32::new(0);
/// The final trailer is written: nothing may follow it (a late table flush from a thread that
/// was still interning when the process ended).
static SEALED: AtomicBool = AtomicBool::new(false);

static TABLES: SpinLock<Option<TableWriter>> = SpinLock::new(None);

#[inline]
pub fn state() -> u8 {
    STATE.load(Ordering::Acquire)
}

/// Whether events are recorded: while recording, and while paused for an `exec` (the other
/// threads go on until the image is replaced: their events stay in their buffers, kept if the
/// exec fails).
#[inline]
pub fn recording() -> bool {
    state().wrapping_sub(STATE_RECORDING) <= STATE_PAUSED - STATE_RECORDING
}

pub fn set_state(s: u8) {
    STATE.store(s, Ordering::Release);
}

/// Moves from `from` to `to`; false if the state was something else.
pub fn transition(from: u8, to: u8) -> bool {
    STATE
        .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

pub fn new_string_id() -> u32 {
    NEXT_STRING.fetch_add(1, Ordering::Relaxed)
}

pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `open(path, O_CREAT|O_EXCL|…)`: the fd, or the errno.
fn open_excl(path: &[u8]) -> Result<i32, i32> {
    let c = CString::new(path).map_err(|_| libc::EINVAL)?;
    // SAFETY: `c` is NUL-terminated; the mode argument is required with O_CREAT.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    if fd >= 0 {
        // Move the descriptor out of the low range that `open` hands to the program (lowest
        // free number first), so a program that closes and reopens descriptors is unlikely to
        // be given ours.
        // SAFETY: plain fcntl/close on the descriptor we just opened.
        unsafe {
            let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 900);
            if high >= 0 {
                libc::close(fd);
                return Ok(high);
            }
        }
        Ok(fd)
    } else {
        // SAFETY: __errno_location is always valid.
        Err(unsafe { *libc::__errno_location() })
    }
}

/// Opens the trace under the env contract: `path`, else `path.<pid>`, else `path.<pid>.<n>`
/// (always `O_EXCL`); a forked child (`skip_plain`) starts at `path.<pid>`.
pub fn open_trace(base: &[u8], pid: u32, skip_plain: bool) -> Result<(i32, Vec<u8>), String> {
    let mut candidates: Vec<Vec<u8>> = Vec::new();
    if !skip_plain {
        candidates.push(base.to_vec());
    }
    let with_pid = [base, format!(".{pid}").as_bytes()].concat();
    candidates.push(with_pid.clone());
    let mut last_err = 0;
    for c in candidates {
        match open_excl(&c) {
            Ok(fd) => return Ok((fd, c)),
            Err(e) => last_err = e,
        }
        if last_err != libc::EEXIST {
            break;
        }
    }
    if last_err == libc::EEXIST {
        for n in 1..10_000u32 {
            let c = [&with_pid[..], format!(".{n}").as_bytes()].concat();
            match open_excl(&c) {
                Ok(fd) => return Ok((fd, c)),
                Err(libc::EEXIST) => continue,
                Err(e) => {
                    last_err = e;
                    break;
                }
            }
        }
    }
    Err(format!(
        "{}: {}",
        String::from_utf8_lossy(base),
        std::io::Error::from_raw_os_error(last_err)
    ))
}

/// Starts a trace on `fd`: writes the file prefix and resets the counters.
pub fn start(fd: i32, header: &Header) {
    let prefix = file_prefix(header);
    FD.store(fd, Ordering::Release);
    FILE_LEN.store(0, Ordering::Release);
    EVENT_CHUNKS.store(0, Ordering::Relaxed);
    EVENTS.store(0, Ordering::Relaxed);
    EVENTS_LOST.store(0, Ordering::Relaxed);
    NEXT_STRING.store(0, Ordering::Relaxed);
    SEALED.store(false, Ordering::Release);
    *TABLES.lock() = Some(TableWriter::new());
    write_reserved(&prefix);
}

/// Writes under way that began while recording (not paused): the exec's provisional trailer
/// waits for them.
static WRITING: AtomicU32 = AtomicU32::new(0);

/// While recording is paused for an `exec`: writes one at a time, and whether the exec's
/// provisional trailer is placed (then each write moves it to the new end of the file).
static PAUSED_WRITES: SpinLock<bool> = SpinLock::new(false);

/// Reserves `bytes.len()` at the end of the file and writes them there; false on failure.
///
/// While an `exec` is under way (recording paused), the other threads go on, and a chunk one
/// of them writes must not land on the provisional trailer: such writes take turns, and each
/// puts the provisional trailer back at the new end, so that it ends the file if the exec
/// succeeds (and is overwritten by the next write if it fails).
fn write_reserved(bytes: &[u8]) -> bool {
    let fd = FD.load(Ordering::Acquire);
    if fd < 0 || SEALED.load(Ordering::Acquire) {
        return false;
    }
    WRITING.fetch_add(1, Ordering::SeqCst);
    if state() == STATE_PAUSED {
        WRITING.fetch_sub(1, Ordering::SeqCst);
        let placed = PAUSED_WRITES.lock();
        let off = FILE_LEN.fetch_add(bytes.len() as u64, Ordering::AcqRel);
        let ok = pwrite_all(fd, bytes, off);
        if *placed {
            place_provisional_trailer(fd);
        }
        return ok;
    }
    let off = FILE_LEN.fetch_add(bytes.len() as u64, Ordering::AcqRel);
    let ok = pwrite_all(fd, bytes, off);
    WRITING.fetch_sub(1, Ordering::SeqCst);
    ok
}

/// A trailer at the end of the file, without reserving its bytes (the exec's provisional one).
fn place_provisional_trailer(fd: i32) {
    let mut buf = [0u8; 128];
    if let Some(n) = trailer_into(EndReason::Exit { status: 0 }, &mut buf) {
        pwrite_all(fd, &buf[..n], FILE_LEN.load(Ordering::Acquire));
    }
}

/// `before_exec`, once the buffers are written: the provisional trailer, after every write
/// that began before the pause; it stays last until the exec's outcome.
pub fn write_provisional_trailer() {
    let fd = FD.load(Ordering::Acquire);
    if fd < 0 || SEALED.load(Ordering::Acquire) {
        return;
    }
    while WRITING.load(Ordering::SeqCst) != 0 {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    let mut placed = PAUSED_WRITES.lock();
    place_provisional_trailer(fd);
    *placed = true;
}

/// The exec failed: the provisional trailer is no longer put back (the next write overwrites
/// it). Before recording resumes.
pub fn exec_failed() {
    *PAUSED_WRITES.lock() = false;
}

fn pwrite_all(fd: i32, mut bytes: &[u8], mut off: u64) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writes from a valid slice; the fd is ours.
        let n = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), off as i64) };
        if n < 0 {
            // SAFETY: __errno_location is always valid.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return false;
        }
        if n == 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
        off += n as u64;
    }
    true
}

/// Buffers one table record; flushed before the next event chunk.
pub fn table_record(r: &TableRecord) {
    let mut t = TABLES.lock();
    if let Some(w) = t.as_mut() {
        w.push(r);
        if w.pending_bytes() > 60 << 10 {
            flush_tables_locked(w);
        }
    }
}

fn flush_tables_locked(w: &mut TableWriter) {
    w.flush_into(write_reserved);
}

/// Writes one framed event chunk holding `events` events, after the pending table records.
/// `attempts` bounds the wait for the table buffer (signal handlers, where the interrupted code
/// may hold it): past it the chunk is written without them, since its events matter more than
/// the ordering of the records they name (readers read every table chunk first anyway).
pub fn write_event_chunk(chunk: &[u8], events: u32, attempts: Option<u32>) {
    let guard = match attempts {
        Some(a) => TABLES.try_lock_for(a),
        None => Some(TABLES.lock()),
    };
    if let Some(mut t) = guard {
        if let Some(w) = t.as_mut() {
            flush_tables_locked(w);
        }
    }
    if write_reserved(chunk) {
        EVENT_CHUNKS.fetch_add(1, Ordering::Relaxed);
        EVENTS.fetch_add(events as u64, Ordering::Relaxed);
    } else {
        EVENTS_LOST.fetch_add(events as u64, Ordering::Relaxed);
    }
}

/// Writes a chunk built outside the table buffer (the end-state records `finish` builds on
/// its stack); false if it was not written.
pub fn write_chunk(chunk: &[u8]) -> bool {
    write_reserved(chunk)
}

pub fn count_lost(n: u64) {
    EVENTS_LOST.fetch_add(n, Ordering::Relaxed);
}

/// Drains the table buffer; `attempts` bounds the wait for its lock (signal handlers).
pub fn flush_tables(attempts: Option<u32>) {
    let guard = match attempts {
        Some(a) => TABLES.try_lock_for(a),
        None => Some(TABLES.lock()),
    };
    if let Some(mut t) = guard {
        if let Some(w) = t.as_mut() {
            flush_tables_locked(w);
        }
    }
}

/// The trailer chunk in `buf`, with the counts so far: its length.
fn trailer_into(reason: EndReason, buf: &mut [u8]) -> Option<usize> {
    let trailer = Trailer {
        end_unix_ns: now_ns(),
        reason,
        event_chunks: EVENT_CHUNKS.load(Ordering::Relaxed),
        events: EVENTS.load(Ordering::Relaxed),
        events_lost: EVENTS_LOST.load(Ordering::Relaxed),
    };
    trailer_chunk_into(&trailer, buf)
}

/// Writes the final trailer at the end of the file; nothing is written after it.
pub fn write_trailer(reason: EndReason) {
    // No allocation: this may run in a signal handler.
    let mut buf = [0u8; 128];
    let Some(n) = trailer_into(reason, &mut buf) else {
        return;
    };
    if FD.load(Ordering::Acquire) < 0 {
        return;
    }
    write_reserved(&buf[..n]);
    SEALED.store(true, Ordering::Release);
    truncate_to_end();
}

/// Cuts the file at the reserved length (bytes of an overwritten provisional trailer).
pub fn truncate_to_end() {
    let fd = FD.load(Ordering::Acquire);
    if fd >= 0 {
        // SAFETY: plain syscall on our fd.
        unsafe { libc::ftruncate(fd, FILE_LEN.load(Ordering::Acquire) as i64) };
    }
}

pub fn close() {
    let fd = FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: our fd, closed once (swap).
        unsafe { libc::close(fd) };
    }
}

/// fork child: the inherited fd is the parent's file; forget it without closing the parent's
/// description's position (pwrite has none) — but close our copy.
pub fn forget_parent_file() {
    close();
    *TABLES.lock() = None;
}

pub fn lock_for_fork() {
    TABLES.raw_lock();
    PAUSED_WRITES.raw_lock();
}

/// # Safety
/// Only after `lock_for_fork`.
pub unsafe fn unlock_after_fork() {
    // SAFETY: forwarded contract.
    unsafe {
        PAUSED_WRITES.force_unlock();
        TABLES.force_unlock();
    }
}

/// Prints the one-line failure message to stderr (never stdout).
pub fn complain(msg: &str) {
    let line = format!("foresight: cannot record: {msg}\n");
    // SAFETY: writes a valid buffer to fd 2.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// Zeroes a page-aligned static table in the fork child: `madvise(MADV_DONTNEED)` on its
/// private anonymous pages gives back zero pages without touching every slot; `fallback` does
/// it slot by slot if that fails.
///
/// # Safety
/// `start..start + len` is a whole page-aligned static table in private anonymous memory,
/// made of atomics whose all-zero state is their initial state, and nothing else reads or
/// writes it meanwhile (the fork child is single-threaded).
pub unsafe fn zero_static(start: *mut u8, len: usize, fallback: impl FnOnce()) {
    // SAFETY: the caller's contract.
    let r = unsafe { libc::madvise(start.cast(), len, libc::MADV_DONTNEED) };
    if r != 0 {
        fallback();
    }
}
