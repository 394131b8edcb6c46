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

use foresight_trace::tables::{
    EndReason, Header, RecordingStopped, StopCause, TableRecord, Trailer,
};
use foresight_trace::writer::{features_for, file_prefix_with, trailer_chunk_into};
use foresight_trace::{CompressMode, TableWriter};

use crate::context::Context;
use crate::spin::SpinLock;
use crate::state::{now_ns, state, transition, STATE_PAUSED, STATE_RECORDING, STATE_STOPPED};

/// Closes a descriptor of the runtime's own with the system call: the C library's `close`
/// is interposed (`hooks/fd.rs`) and would take it for the program's.
pub(crate) fn close_own(fd: i32) {
    // SAFETY: the close system call on a descriptor the runtime owns, closed once.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

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

pub fn new_string_id() -> u32 {
    NEXT_STRING.fetch_add(1, Ordering::Relaxed)
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
            let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD);
            if high >= 0 {
                close_own(fd);
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

// --- the trace's descriptor ------------------------------------------------------------------
//
// The runtime's descriptor is invisible to the program: a `close`, `close_range`, `closefrom`,
// `dup2` or `dup3` of the program's that names it (`hooks/fd.rs`) first moves the trace to
// another descriptor (`keep_clear_of`), or is split around it, so that the program's call
// does what it would have done without the runtime (a `close` of the number fails with
// `EBADF`, a `dup2` onto it succeeds) and the trace never goes to the program's file. A raw
// system call gets past that: before each write the descriptor is checked to still be the
// trace's file (`FdUse::take`), and if it is not, the trace is opened again by its path.

/// The lowest descriptor the trace takes when it can: out of the low range that `open` hands
/// to the program (lowest free number first).
pub const HIGH_FD: i32 = 900;

/// The trace file's device and inode, to tell it from whatever else its descriptor may hold.
static FD_DEV: AtomicU64 = AtomicU64::new(0);
static FD_INO: AtomicU64 = AtomicU64::new(0);
/// Writes and other uses of `FD` under way: a move closes the old descriptor after them.
static FD_USERS: AtomicU32 = AtomicU32::new(0);
/// The program took the descriptor and no other was free to move it to: the trace is opened
/// again by its path for its end (`FdUse::take`).
static LOST: AtomicBool = AtomicBool::new(false);
/// One move at a time.
static MOVING: SpinLock<()> = SpinLock::new(());
/// The trace's absolute path (`/proc/self/fd`), NUL-terminated: reopened by it when the
/// descriptor was taken (a fixed buffer, read where nothing may allocate).
static OWN_PATH: SpinLock<TracePath> = SpinLock::new(TracePath {
    len: 0,
    bytes: [0; 4096],
});

/// How long a move waits for the writes under way on the old descriptor, and a reopening
/// for the path's lock (yields; bounded: a signal handler may have interrupted one).
const FD_WAIT: u32 = 10_000;

/// The device and inode of the file open at `fd`, if it is open.
fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid out-value; fstat writes the struct we pass.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Whether `fd` is the trace file.
fn is_trace_file(fd: i32) -> bool {
    identity(fd).is_some_and(|(dev, ino)| {
        dev == FD_DEV.load(Ordering::Acquire) && ino == FD_INO.load(Ordering::Acquire)
    })
}

/// Makes `fd` the trace's descriptor and notes what it is (start-up, a fork child's trace).
fn adopt(fd: i32) {
    let (dev, ino) = identity(fd).unwrap_or((0, 0));
    FD_DEV.store(dev, Ordering::Release);
    FD_INO.store(ino, Ordering::Release);
    LOST.store(false, Ordering::Release);
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
    {
        let mut p = OWN_PATH.lock();
        p.len = 0;
        if let Some(link) = link {
            let b = std::os::unix::ffi::OsStrExt::as_bytes(link.as_os_str());
            if b.first() == Some(&b'/') && b.len() < p.bytes.len() {
                p.bytes[..b.len()].copy_from_slice(b);
                p.bytes[b.len()] = 0;
                p.len = b.len();
            }
        }
    }
    FD.store(fd, Ordering::SeqCst);
}

/// The trace's descriptor now (-1: none), for the hooks' quick test.
#[inline]
pub fn trace_fd() -> i32 {
    FD.load(Ordering::Acquire)
}

/// The trace's descriptor for one use, checked to hold the trace file; a move waits for the
/// use to end before it closes the old descriptor.
struct FdUse {
    fd: i32,
}

impl FdUse {
    fn take() -> Option<FdUse> {
        FD_USERS.fetch_add(1, Ordering::SeqCst);
        let mut owned = FdUse { fd: -1 };
        let fd = FD.load(Ordering::SeqCst);
        if fd >= 0 && is_trace_file(fd) {
            owned.fd = fd;
            return Some(owned);
        }
        if fd >= 0 || LOST.load(Ordering::Acquire) {
            owned.fd = reopen(fd)?;
            return Some(owned);
        }
        None
    }
}

impl Drop for FdUse {
    fn drop(&mut self) {
        FD_USERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The descriptor `bad` no longer holds the trace (a raw `close` or `dup2` of the program's;
/// -1: the program took it, `keep_clear_of`): the trace is opened again by its path, if that
/// still names it. If not, recording stops (nothing more can be written where it belongs).
/// `bad` is never closed: its number is the program's now.
fn reopen(bad: i32) -> Option<i32> {
    let fd = open_own_path();
    if let Some(fd) = fd {
        match FD.compare_exchange(bad, fd, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => {
                LOST.store(false, Ordering::Release);
                return Some(fd);
            }
            Err(now) => {
                // Another thread reopened it first.
                close_own(fd);
                return (now >= 0 && is_trace_file(now)).then_some(now);
            }
        }
    }
    if bad >= 0
        && FD
            .compare_exchange(bad, -1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    {
        LOST.store(true, Ordering::Release);
        stop_at(file_len(), StopCause::WriteFailed { errno: libc::EBADF });
    }
    None
}

/// The trace opened again by its absolute path, if that still names it (never following a
/// link), on a high descriptor.
fn open_own_path() -> Option<i32> {
    let p = OWN_PATH.try_lock_for(FD_WAIT)?;
    if p.len == 0 {
        return None;
    }
    // SAFETY: the path is NUL-terminated at `len` (`adopt`).
    let fd = unsafe {
        libc::open(
            p.bytes.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    drop(p);
    if fd < 0 {
        return None;
    }
    if !is_trace_file(fd) {
        close_own(fd);
        return None;
    }
    // SAFETY: plain fcntl on the descriptor we just opened.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD) };
    if high >= 0 {
        close_own(fd);
        return Some(high);
    }
    Some(fd)
}

/// The program is about to close or replace descriptor `target`: if it is the trace's, the
/// trace moves to another descriptor first (and the old one is closed), so that the
/// program's call finds the number free, as it would without the runtime. If no descriptor is
/// free, the runtime gives it up: recording stops (`WriteFailed` with `EMFILE`), the
/// descriptor is closed (the program's call then does what it does on a closed number) and
/// the trace's end is written through its path when the process ends. The caller keeps errno.
pub fn keep_clear_of(target: i32) {
    if target < 0 || FD.load(Ordering::Acquire) != target {
        return;
    }
    move_away(target);
}

#[cold]
#[inline(never)]
fn move_away(target: i32) {
    // A vfork child shares this memory but not the descriptor table.
    if !crate::state::own_process() {
        return;
    }
    let Some(_one) = MOVING.try_lock_for(FD_WAIT) else {
        return;
    };
    if FD.load(Ordering::SeqCst) != target {
        return;
    }
    let mut moved = -1;
    for from in [HIGH_FD, 3] {
        // SAFETY: plain fcntl on our descriptor.
        moved = unsafe { libc::fcntl(target, libc::F_DUPFD_CLOEXEC, from) };
        if moved >= 0 {
            break;
        }
    }
    if moved >= 0 {
        FD.store(moved, Ordering::SeqCst);
    } else {
        FD.store(-1, Ordering::SeqCst);
        LOST.store(true, Ordering::Release);
    }
    // The writes that took the old number end before it goes.
    for _ in 0..FD_WAIT {
        if FD_USERS.load(Ordering::SeqCst) == 0 {
            break;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    // The number is closed in either case, as the program finds it without the runtime: its
    // `close` of it fails with EBADF, a `dup2` onto it finds it free.
    close_own(target);
    if moved < 0 {
        stop_at(
            file_len(),
            StopCause::WriteFailed {
                errno: libc::EMFILE,
            },
        );
    }
}

/// How event chunks are compressed (`FORESIGHT_COMPRESS`): 0 never, 1 auto, 2 always, 3 lz4. Set
/// before the file prefix is written and never changed while recording, so that every chunk
/// writer made afterwards (`compress_mode`) agrees with the prefix (a 1.x prefix for never).
static COMPRESS: AtomicU8 = AtomicU8::new(0);

/// The compression every new chunk writer of this process uses.
pub fn compress_mode() -> CompressMode {
    match COMPRESS.load(Ordering::Acquire) {
        1 => CompressMode::Auto,
        2 => CompressMode::Always,
        3 => CompressMode::Lz4,
        _ => CompressMode::Never,
    }
}

/// Starts a trace on `fd`: writes the file prefix (a 2.x prefix when chunks may be compressed,
/// FORMAT.md §2.1) and resets the counters.
pub fn start(fd: i32, header: &Header, compress: CompressMode) {
    COMPRESS.store(
        match compress {
            CompressMode::Never => 0,
            CompressMode::Auto => 1,
            CompressMode::Always => 2,
            CompressMode::Lz4 => 3,
        },
        Ordering::Release,
    );
    let prefix = file_prefix_with(header, features_for(compress));
    adopt(fd);
    FILE_LEN.store(0, Ordering::Release);
    EVENT_CHUNKS.store(0, Ordering::Relaxed);
    EVENTS.store(0, Ordering::Relaxed);
    EVENTS_LOST.store(0, Ordering::Relaxed);
    NEXT_STRING.store(0, Ordering::Relaxed);
    STOP_KIND.store(0, Ordering::Relaxed);
    GOOD_END.store(u64::MAX, Ordering::Relaxed);
    TAIL_AT.store(0, Ordering::Relaxed);
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
    // After a failed write, the end of the trace goes where the good bytes end
    // (`write_tail`): a chunk after the failed one would be cut off with it (and counted as
    // written), whether a thread's last buffer written by `finish` or any other.
    if SEALED.load(Ordering::Acquire) || state() == STATE_STOPPED || write_stopped() {
        return false;
    }
    let Some(owned) = FdUse::take() else {
        return false;
    };
    let fd = owned.fd;
    WRITING.fetch_add(1, Ordering::SeqCst);
    if state() == STATE_PAUSED {
        WRITING.fetch_sub(1, Ordering::SeqCst);
        let placed = PAUSED_WRITES.lock();
        let ok = reserve_and_write(fd, bytes);
        if *placed && ok {
            place_provisional_trailer(fd);
        }
        return ok;
    }
    let ok = reserve_and_write(fd, bytes);
    WRITING.fetch_sub(1, Ordering::SeqCst);
    ok
}

/// Room kept under the file size limit for the end of the trace (end states, trailer).
pub const TAIL_ROOM: u64 = 64 << 10;

/// `--max-size` (`FORESIGHT_MAX_SIZE`): the trace stops growing at this many bytes (0: no
/// bound), as under a file size limit.
static MAX_SIZE: AtomicU64 = AtomicU64::new(0);

pub fn set_max_size(bytes: u64) {
    MAX_SIZE.store(bytes, Ordering::Relaxed);
}

/// The bytes reserved in the file so far.
pub fn file_len() -> u64 {
    FILE_LEN.load(Ordering::Acquire)
}

/// The size the trace may not pass: the file size limit or `--max-size`, the smaller.
pub fn size_limit() -> Option<u64> {
    match (file_size_limit(), MAX_SIZE.load(Ordering::Relaxed)) {
        (l, 0) => l,
        (Some(l), m) => Some(l.min(m)),
        (None, m) => Some(m),
    }
}

/// The room kept under `limit` for the end of the trace: `TAIL_ROOM`, or half of a limit
/// too small for it (the end of a trace with few threads takes a few hundred bytes).
fn tail_room(limit: u64) -> u64 {
    TAIL_ROOM.min(limit / 2)
}

/// The bytes at the next free offset; a write that fails, or would pass the file size limit,
/// stops recording (`stop_at`). The file's first bytes (its prefix, the header) need no room
/// kept after them: under any limit they fit in, the file is a trace.
fn reserve_and_write(fd: i32, bytes: &[u8]) -> bool {
    let len = bytes.len() as u64;
    let off = FILE_LEN.fetch_add(len, Ordering::AcqRel);
    if let Some(limit) = size_limit() {
        let room = if off == 0 { 0 } else { tail_room(limit) };
        if off.saturating_add(len).saturating_add(room) > limit {
            stop_at(off, StopCause::FileSizeLimit { limit });
            return false;
        }
    }
    match pwrite_all(fd, bytes, off) {
        // A write before this one failed meanwhile: this chunk is past the trace's good
        // bytes, and cut off with them.
        Ok(()) => GOOD_END.load(Ordering::Acquire) > off,
        Err(errno) => {
            stop_at(off, StopCause::WriteFailed { errno });
            false
        }
    }
}

/// The process's file size limit (`RLIMIT_FSIZE`), if it has one: a write past it would fail
/// with `EFBIG` and send it `SIGXFSZ`, which ends it.
fn file_size_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

/// Where the trace's good bytes end after a failed write: the failed chunk's offset (what
/// follows it may be partly written).
static GOOD_END: AtomicU64 = AtomicU64::new(u64::MAX);

/// A write at `off` failed or would have passed the size limit: recording stops there, the
/// program runs on. `finish` writes the end of the trace at `off`.
fn stop_at(off: u64, cause: StopCause) {
    note_stop(cause);
    GOOD_END.fetch_min(off, Ordering::AcqRel);
    if transition(STATE_RECORDING, STATE_STOPPED) || transition(STATE_PAUSED, STATE_STOPPED) {
        crate::quiesce::stop_fast_path();
    }
}

/// Whether recording stopped because of a failed write.
pub fn write_stopped() -> bool {
    GOOD_END.load(Ordering::Acquire) != u64::MAX
}

/// A trailer at the end of the file, without reserving its bytes (the exec's provisional one).
fn place_provisional_trailer(fd: i32) {
    let mut buf = [0u8; 128];
    if let Some(n) = trailer_into(EndReason::Exit { status: 0 }, &mut buf) {
        // A trailer that cannot be written leaves the file without one: cut short.
        let _ = pwrite_all(fd, &buf[..n], FILE_LEN.load(Ordering::Acquire));
    }
}

/// `before_exec`, once the buffers are written: the provisional trailer, after every write
/// that began before the pause; it stays last until the exec's outcome.
pub fn write_provisional_trailer() {
    if SEALED.load(Ordering::Acquire) {
        return;
    }
    let Some(owned) = FdUse::take() else {
        return;
    };
    let fd = owned.fd;
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

/// Writes all of `bytes` at `off`; the errno of a failure (a write that writes nothing counts
/// as `ENOSPC`).
fn pwrite_all(fd: i32, mut bytes: &[u8], mut off: u64) -> Result<(), i32> {
    IN_WRITE.with(|w| w.set(true));
    let mut result = Ok(());
    while !bytes.is_empty() {
        // SAFETY: writes from a valid slice; the fd is ours.
        let n = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), off as i64) };
        if n < 0 {
            // SAFETY: __errno_location is always valid.
            let e = unsafe { *libc::__errno_location() };
            if e == libc::EINTR {
                continue;
            }
            result = Err(e);
            break;
        }
        if n == 0 {
            result = Err(libc::ENOSPC);
            break;
        }
        bytes = &bytes[n as usize..];
        off += n as u64;
    }
    IN_WRITE.with(|w| w.set(false));
    result
}

thread_local! {
    /// The thread is in one of the runtime's writes to the trace: a `SIGXFSZ` now is the
    /// kernel's answer to that write, not to the program (`signals.rs` drops it).
    static IN_WRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is in a write to the trace (for the signal handler).
pub fn in_trace_write() -> bool {
    IN_WRITE.with(|w| w.get())
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

/// Writes one framed event chunk holding `events` events to the file, after the pending
/// table records. In a signal handler the wait for the table buffer is bounded (the
/// interrupted code may hold it): past it the chunk is written without them, since its events
/// matter more than the ordering of the records they name (readers read every table chunk
/// first anyway). The flight recorder's chunks take another way (`sink.rs`).
pub fn write_event_chunk(chunk: &[u8], events: u32, context: Context) {
    flush_tables(context);
    write_counted_chunk(chunk, events);
}

/// An event chunk whose table records are written already (the flight recorder's window,
/// `flight::dump`), counted in the trailer like any other; its events counted as lost if it
/// could not be written.
pub fn write_counted_chunk(chunk: &[u8], events: u32) {
    if write_reserved(chunk) {
        EVENT_CHUNKS.fetch_add(1, Ordering::Relaxed);
        EVENTS.fetch_add(events as u64, Ordering::Relaxed);
    } else {
        EVENTS_LOST.fetch_add(events as u64, Ordering::Relaxed);
    }
}

/// Why recording stopped early, first cause first: its kind (0: none; else
/// 1 + the `StopCause` variant), its number, and when.
static STOP_KIND: AtomicU8 = AtomicU8::new(0);
static STOP_ARG: AtomicU64 = AtomicU64::new(0);
static STOP_NS: AtomicU64 = AtomicU64::new(0);

/// Notes why recording stops (or stopped the program) before it ended; the first cause is
/// kept. `finish` writes it (FORMAT.md §7.13).
pub fn note_stop(cause: StopCause) {
    let (kind, arg) = match cause {
        StopCause::WriteFailed { errno } => (1, errno as u32 as u64),
        StopCause::FileSizeLimit { limit } => (2, limit),
        StopCause::HangTimeout { ms } => (3, ms),
    };
    if STOP_KIND
        .compare_exchange(0, 0xff, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        STOP_ARG.store(arg, Ordering::Relaxed);
        STOP_NS.store(now_ns(), Ordering::Relaxed);
        STOP_KIND.store(kind, Ordering::Release);
    }
}

/// The cause `note_stop` kept, if any.
pub fn stopped() -> Option<RecordingStopped> {
    let arg = STOP_ARG.load(Ordering::Relaxed);
    let cause = match STOP_KIND.load(Ordering::Acquire) {
        1 => StopCause::WriteFailed {
            errno: arg as u32 as i32,
        },
        2 => StopCause::FileSizeLimit { limit: arg },
        3 => StopCause::HangTimeout { ms: arg },
        _ => return None,
    };
    Some(RecordingStopped {
        unix_ns: STOP_NS.load(Ordering::Relaxed),
        cause,
    })
}

/// Writes a chunk built outside the table buffer (the end-state records `finish` builds on
/// its stack); false if it was not written. After a failed write it goes where the trace's
/// good bytes end (`write_tail`).
pub fn write_chunk(chunk: &[u8]) -> bool {
    if write_stopped() {
        return write_tail(chunk);
    }
    write_reserved(chunk)
}

/// `finish` after a failed write: the end of the trace (end states, trailer) goes right after
/// its last good chunk, once the writes under way are over, in the room the failed chunk
/// left (it is cut off first).
fn write_tail(bytes: &[u8]) -> bool {
    if SEALED.load(Ordering::Acquire) {
        return false;
    }
    let Some(owned) = FdUse::take() else {
        return false;
    };
    let fd = owned.fd;
    for _ in 0..1000 {
        if WRITING.load(Ordering::SeqCst) == 0 {
            break;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    let end = GOOD_END.load(Ordering::Acquire);
    let at = if FILE_LEN.load(Ordering::Acquire) > end && TAIL_AT.load(Ordering::Acquire) == 0 {
        // SAFETY: plain syscall on our fd.
        unsafe { libc::ftruncate(fd, end as i64) };
        TAIL_AT.store(end, Ordering::Release);
        end
    } else {
        TAIL_AT.load(Ordering::Acquire).max(end)
    };
    // A part of the end that would pass the limit is left out (the kernel would refuse it
    // and send SIGXFSZ); a smaller one after it may still fit.
    if size_limit().is_some_and(|limit| at.saturating_add(bytes.len() as u64) > limit) {
        return false;
    }
    let ok = pwrite_all(fd, bytes, at).is_ok();
    if ok {
        TAIL_AT.store(at + bytes.len() as u64, Ordering::Release);
        FILE_LEN.store(at + bytes.len() as u64, Ordering::Release);
    }
    ok
}

/// Where the next tail write goes (0: none yet).
static TAIL_AT: AtomicU64 = AtomicU64::new(0);

pub fn count_lost(n: u64) {
    EVENTS_LOST.fetch_add(n, Ordering::Relaxed);
}

/// Drains the table buffer (in a signal handler, if its lock is had in time).
pub fn flush_tables(context: Context) {
    if let Some(mut t) = TABLES.lock_in(context) {
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
    // A trailer the disk has no room for goes where the good bytes end, like the rest of the
    // tail.
    let written = write_chunk(&buf[..n]) || (write_stopped() && write_tail(&buf[..n]));
    if !written {
        return;
    }
    SEALED.store(true, Ordering::Release);
    truncate_to_end();
}

/// Cuts the file at the reserved length (bytes of an overwritten provisional trailer).
pub fn truncate_to_end() {
    if let Some(owned) = FdUse::take() {
        // SAFETY: plain syscall on our fd.
        unsafe { libc::ftruncate(owned.fd, FILE_LEN.load(Ordering::Acquire) as i64) };
    }
}

/// The process's trace path (`open_trace`'s choice), for `--dump-on` snapshots, which are
/// named after it and copy its first bytes: a fixed buffer, read in signal handlers.
struct TracePath {
    len: usize,
    bytes: [u8; 4096],
}

static TRACE_PATH: SpinLock<TracePath> = SpinLock::new(TracePath {
    len: 0,
    bytes: [0; 4096],
});
/// Snapshots written by this process (the next one is `PATH.snapshot-<N + 1>`).
static SNAPSHOTS: AtomicU32 = AtomicU32::new(0);

/// Remembers the trace's path (start-up, and a fork child's new trace); a path too long for
/// the buffer leaves none (then no snapshot can be written).
pub fn set_trace_path(path: &[u8]) {
    let mut p = TRACE_PATH.lock();
    if path.len() < p.bytes.len() {
        p.bytes[..path.len()].copy_from_slice(path);
        p.len = path.len();
    } else {
        p.len = 0;
    }
    SNAPSHOTS.store(0, Ordering::Relaxed);
}

/// Appends the decimal digits of `n` to `buf` at `at`: the end, or `None` if it is full.
fn put_decimal(buf: &mut [u8], mut at: usize, n: u32) -> Option<usize> {
    let mut digits = [0u8; 10];
    let mut k = 0;
    let mut v = n;
    loop {
        digits[k] = b'0' + (v % 10) as u8;
        k += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for &d in digits[..k].iter().rev() {
        *buf.get_mut(at)? = d;
        at += 1;
    }
    Some(at)
}

/// A `--dump-on` snapshot's file names: where it is written, and the name it takes when it
/// is complete (`publish_snapshot`), both NUL-terminated.
pub struct SnapshotName {
    partial: [u8; 4200],
    done: [u8; 4200],
}

impl SnapshotName {
    pub const EMPTY: SnapshotName = SnapshotName {
        partial: [0; 4200],
        done: [0; 4200],
    };
}

/// A `--dump-on` snapshot of the trace (`runtime::snapshot`): opens `PATH.snapshot-<N>.partial`
/// for the next N whose `PATH.snapshot-<N>` does not exist, copies the trace's bytes so far
/// into it under the table buffer's lock (the file prefix and every table chunk: in
/// flight-recorder mode the trace holds nothing else until the window is written), and returns
/// the new file's descriptor and its length. No allocation; every lock wait as `context`
/// allows (bounded in a signal handler).
pub fn open_snapshot(context: Context, name: &mut SnapshotName) -> Option<(i32, u64)> {
    let base_len = {
        let p = TRACE_PATH.lock_in(context)?;
        if p.len == 0 {
            return None;
        }
        name.done[..p.len].copy_from_slice(&p.bytes[..p.len]);
        p.len
    };
    name.done[base_len] = 0;
    // SAFETY: `done` is NUL-terminated at `base_len`.
    let src = unsafe { libc::open(name.done.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if src < 0 {
        return None;
    }
    let suffix = b".snapshot-";
    let mut dst = -1;
    for _ in 0..10_000 {
        let n = SNAPSHOTS.fetch_add(1, Ordering::Relaxed) + 1;
        let at = base_len + suffix.len();
        name.done[base_len..at].copy_from_slice(suffix);
        let Some(end) = put_decimal(&mut name.done, at, n) else {
            break;
        };
        let partial = b".partial";
        if end + partial.len() >= name.partial.len() {
            break;
        }
        name.done[end] = 0;
        name.partial[..end].copy_from_slice(&name.done[..end]);
        name.partial[end..end + partial.len()].copy_from_slice(partial);
        name.partial[end + partial.len()] = 0;
        // SAFETY: NUL-terminated path.
        if unsafe { libc::access(name.done.as_ptr().cast(), libc::F_OK) } == 0 {
            continue;
        }
        // A new file only: never through a link planted at the name, never over a file that
        // is there (someone else's, or a half-written snapshot): that name is skipped.
        // SAFETY: `partial` is NUL-terminated; the mode argument is required with O_CREAT.
        dst = unsafe {
            libc::open(
                name.partial.as_ptr().cast(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            )
        };
        // SAFETY: __errno_location is always valid.
        if dst < 0 && unsafe { *libc::__errno_location() } == libc::EEXIST {
            continue;
        }
        break;
    }
    let copied = if dst >= 0 {
        copy_trace_into(src, dst, context)
    } else {
        None
    };
    // SAFETY: our descriptors, closed once.
    unsafe {
        libc::close(src);
        if copied.is_none() && dst >= 0 {
            libc::close(dst);
            libc::unlink(name.partial.as_ptr().cast());
        }
    }
    Some((dst, copied?))
}

/// The snapshot is complete: it takes its name (so that a reader never finds it half
/// written). `ok`: false removes it instead.
pub fn publish_snapshot(name: &SnapshotName, ok: bool) {
    // SAFETY: both names NUL-terminated (`open_snapshot`).
    unsafe {
        if ok {
            libc::rename(name.partial.as_ptr().cast(), name.done.as_ptr().cast());
        } else {
            libc::unlink(name.partial.as_ptr().cast());
        }
    }
}

/// The trace's bytes so far, from `src` (the trace opened for reading) to `dst`, after the
/// table buffer is drained; under its lock, so that no table chunk is half written meanwhile.
fn copy_trace_into(src: i32, dst: i32, context: Context) -> Option<u64> {
    let mut guard = TABLES.lock_in(context)?;
    if let Some(w) = guard.as_mut() {
        flush_tables_locked(w);
    }
    let len = file_len();
    let mut buf = [0u8; 4096];
    let mut off = 0u64;
    while off < len {
        let want = (len - off).min(buf.len() as u64) as usize;
        // SAFETY: reads into a buffer we own, at most its length.
        let n = unsafe { libc::pread(src, buf.as_mut_ptr().cast(), want, off as i64) };
        if n <= 0 {
            // SAFETY: __errno_location is always valid.
            if n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return None;
        }
        pwrite_all(dst, &buf[..n as usize], off).ok()?;
        off += n as u64;
    }
    Some(len)
}

/// Writes `bytes` at `off` of `fd` (a snapshot file); false on failure.
pub fn write_at(fd: i32, bytes: &[u8], off: u64) -> bool {
    pwrite_all(fd, bytes, off).is_ok()
}

/// Sets the trace's modification time to now (the flight recorder's sign of life).
pub fn touch() {
    if let Some(owned) = FdUse::take() {
        // SAFETY: a null `times` means "now"; plain syscall on our fd.
        unsafe { libc::futimens(owned.fd, std::ptr::null()) };
    }
}

pub fn close() {
    LOST.store(false, Ordering::Release);
    let fd = FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        close_own(fd);
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
    // Last: a move takes no other lock (a fork child must not inherit a move half done: the
    // old descriptor open, or the move's lock held by a thread it does not have).
    MOVING.raw_lock();
}

/// # Safety
/// Only after `lock_for_fork`.
pub unsafe fn unlock_after_fork() {
    // SAFETY: forwarded contract.
    unsafe {
        MOVING.force_unlock();
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
