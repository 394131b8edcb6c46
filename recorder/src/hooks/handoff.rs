//! Hand-offs through pipes, socketpairs and eventfds made in the process: within one process
//! such a descriptor is a queue between threads, and a read that took bytes another thread
//! wrote is ordered after that write as a semaphore wait is after its post. Each write and
//! each read that moved bytes is recorded (FORMAT.md §6.6.1, `0x67`/`0x68`) with the channel,
//! the descriptor and the amount, under a lock or not, so that the analyzer can pair a read
//! with the writes whose bytes it took (oldest first) and predict a thread that blocks reading
//! while it holds a lock the writer needs.
//!
//! The descriptors are kept in a table indexed by descriptor number (`pipe`, `pipe2`,
//! `socketpair` and `eventfd` enter them; `close`, `close_range`, `closefrom`, `dup2` and
//! `dup3` over them forget them, `fd.rs`): a read or write of any other descriptor costs one
//! bounds check and one relaxed load. A write takes its key (a release through the channel's
//! clock) before the real call, so that a reader that took its bytes, whose acquire reads that
//! clock after its own real call, comes after it in the merged order; the event is written
//! after the call, at that key, once the amount is known. A call that moved nothing (an error,
//! `EAGAIN`, end of file, `MSG_PEEK`) records nothing. Results and `errno` are the real call's.
//!
//! Not seen: descriptors copied by `dup` or `fcntl(F_DUPFD)` (their hand-offs are not
//! recorded), numbers from 1024 up, more than 4095 channels in a process, an eventfd's value
//! moved by `readv`/`writev`, and the C library's own calls (`fread` on a `fdopen`ed pipe).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use libc::{c_int, c_uint, c_void};

use foresight_trace::event::{ChannelKind, EventKind, SiteId};

use super::rt;
use crate::real::real;
use crate::sequence::Key;

/// Descriptors below this number are tracked.
const FDS: usize = 1024;
/// Channels a process can make (ids 1 to `CHANNELS - 1`); later ones are not recorded.
const CHANNELS: usize = 4096;

/// Per descriptor: 0, not a hand-off descriptor; else the channel its writes go to (bits
/// 0–15), the channel its reads take from (bits 16–31) and the kind's code (bits 32–39).
static TABLE: [AtomicU64; FDS] = [const { AtomicU64::new(0) }; FDS];
/// Per channel: the largest key released through it (the Lamport clock, `sequence.rs`).
static CLOCKS: [AtomicU64; CHANNELS] = [const { AtomicU64::new(0) }; CHANNELS];
/// The last channel id given out.
static LAST_CHANNEL: AtomicU32 = AtomicU32::new(0);

/// A hand-off descriptor's table entry.
#[derive(Clone, Copy)]
pub struct Entry(u64);

impl Entry {
    fn new(write: u32, read: u32, kind: ChannelKind) -> Self {
        Entry(write as u64 | (read as u64) << 16 | (kind.code() as u64) << 32)
    }

    fn channel(self, write: bool) -> u32 {
        (if write { self.0 } else { self.0 >> 16 }) as u32 & 0xffff
    }

    fn kind(self) -> ChannelKind {
        ChannelKind::from_code(self.0 >> 32 & 0xff).unwrap_or(ChannelKind::Pipe)
    }
}

/// The hand-off entry of `fd`, if it is one: the one lookup every read and write pays.
#[inline(always)]
pub fn lookup(fd: c_int) -> Option<Entry> {
    let v = TABLE
        .get(usize::try_from(fd).ok()?)?
        .load(Ordering::Relaxed);
    (v != 0).then_some(Entry(v))
}

fn set(fd: c_int, e: Option<Entry>) {
    if let Some(slot) = usize::try_from(fd).ok().and_then(|i| TABLE.get(i)) {
        slot.store(e.map_or(0, |e| e.0), Ordering::Relaxed);
    }
}

/// `fd` is closed or replaced: it is no longer a hand-off descriptor.
#[inline]
pub fn forget(fd: c_int) {
    if lookup(fd).is_some() {
        set(fd, None);
    }
}

/// Descriptors `first..=last` are closed.
pub fn forget_range(first: c_uint, last: c_uint) {
    let end = (last as usize).saturating_add(1).min(FDS);
    for slot in TABLE.iter().take(end).skip(first as usize) {
        slot.store(0, Ordering::Relaxed);
    }
}

/// `dup2(old, new)` succeeded: `new` is what `old` is.
pub fn duplicate(old: c_int, new: c_int) {
    if old != new {
        set(new, lookup(old));
    }
}

/// A new channel id, or `None` once the table is full.
fn new_channel() -> Option<u32> {
    let c = LAST_CHANNEL.fetch_add(1, Ordering::Relaxed) + 1;
    ((c as usize) < CHANNELS).then_some(c)
}

/// A write or read about to be made on a hand-off descriptor.
pub struct Pending {
    entry: Entry,
    fd: c_int,
    write: bool,
    /// A write's key, taken before the real call (0: none was, nothing is recorded).
    key: u64,
    site: SiteId,
}

/// Before a real write (`write` true) or read of `fd`: `None` for a descriptor that is not a
/// hand-off one (one lookup) or when nothing is recorded.
#[inline(always)]
pub fn before(fd: c_int, write: bool, ra: usize) -> Option<Pending> {
    let entry = lookup(fd)?;
    before_handoff(entry, fd, write, ra)
}

#[cold]
#[inline(never)]
fn before_handoff(entry: Entry, fd: c_int, write: bool, ra: usize) -> Option<Pending> {
    if !write {
        return Some(Pending {
            entry,
            fd,
            write,
            key: 0,
            site: 0,
        });
    }
    let t = rt()?;
    t.with(|t| {
        let clock = &CLOCKS[entry.channel(true) as usize];
        let key = t.take_key(Key::Release(clock));
        Pending {
            entry,
            fd,
            write,
            key,
            site: t.call_site(ra).0,
        }
    })
}

/// After the real call, which returned `result` (bytes moved, or −1): records the hand-off if
/// it moved anything. `buf` is the call's buffer (an eventfd's 8-byte counter value).
#[cold]
#[inline(never)]
pub fn after(p: Pending, result: isize, buf: *const c_void, ra: usize) {
    if result <= 0 {
        return;
    }
    let kind = p.entry.kind();
    let amount = if kind == ChannelKind::Eventfd {
        if result != 8 || buf.is_null() {
            return;
        }
        // SAFETY: the real call read or wrote these 8 bytes of the caller's buffer.
        unsafe { std::ptr::read_unaligned(buf as *const u64) }
    } else {
        result as u64
    };
    record(p, amount, ra);
}

/// Records the hand-off of `amount` bytes (units); nothing for none.
fn record(p: Pending, amount: u64, ra: usize) {
    if amount == 0 {
        return;
    }
    let Some(t) = rt() else { return };
    let channel = p.entry.channel(p.write);
    let fd = p.fd as u32;
    let kind = p.entry.kind();
    t.with(|t| {
        if p.write {
            if p.key == 0 {
                return;
            }
            let ev = EventKind::HandoffWrite {
                channel,
                kind,
                fd,
                amount,
                site: p.site,
            };
            // At the key taken before the call: the thread's clock still holds it (`Same`),
            // unless a signal handler recorded events meanwhile, and then this one follows
            // theirs instead of going back before them.
            t.emit(ev, Key::Same);
        } else {
            let site = t.call_site(ra).0;
            let ev = EventKind::HandoffRead {
                channel,
                kind,
                fd,
                amount,
                site,
            };
            t.emit(ev, Key::Acquire(&CLOCKS[channel as usize]));
        }
    });
}

real!(REAL_PIPE: unsafe extern "C" fn(*mut c_int) -> c_int = b"pipe\0");
real!(REAL_PIPE2: unsafe extern "C" fn(*mut c_int, c_int) -> c_int = b"pipe2\0");
real!(REAL_SOCKETPAIR: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_int) -> c_int = b"socketpair\0");
real!(REAL_EVENTFD: unsafe extern "C" fn(c_uint, c_int) -> c_int = b"eventfd\0");
real!(REAL_EVENTFD_READ: unsafe extern "C-unwind" fn(c_int, *mut u64) -> c_int = b"eventfd_read\0");
real!(REAL_EVENTFD_WRITE: unsafe extern "C-unwind" fn(c_int, u64) -> c_int = b"eventfd_write\0");

/// A pipe was made: `fds[0]` reads what `fds[1]` writes.
fn made_pipe(r: c_int, fds: *const c_int) {
    if r != 0 || fds.is_null() {
        return;
    }
    // SAFETY: the real call succeeded and filled the caller's two descriptors.
    let (rd, wr) = unsafe { (*fds, *fds.add(1)) };
    forget(rd);
    forget(wr);
    if let Some(c) = new_channel() {
        set(rd, Some(Entry::new(0, c, ChannelKind::Pipe)));
        set(wr, Some(Entry::new(c, 0, ChannelKind::Pipe)));
    }
}

/// Interposed `pipe`.
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn pipe(fds: *mut c_int) -> c_int {
    // SAFETY: the real function with the caller's argument.
    let r = unsafe { REAL_PIPE.get()(fds) };
    made_pipe(r, fds);
    r
}

/// Interposed `pipe2`.
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { REAL_PIPE2.get()(fds, flags) };
    made_pipe(r, fds);
    r
}

/// Interposed `socketpair`: each socket's writes are the other's reads, a channel per
/// direction.
///
/// # Safety
/// The C prototype.
#[no_mangle]
pub unsafe extern "C" fn socketpair(
    domain: c_int,
    ty: c_int,
    protocol: c_int,
    sv: *mut c_int,
) -> c_int {
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { REAL_SOCKETPAIR.get()(domain, ty, protocol, sv) };
    if r != 0 || sv.is_null() {
        return r;
    }
    // SAFETY: the real call succeeded and filled the caller's two descriptors.
    let (a, b) = unsafe { (*sv, *sv.add(1)) };
    forget(a);
    forget(b);
    let kind = if ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) == libc::SOCK_STREAM {
        ChannelKind::StreamSocket
    } else {
        ChannelKind::DatagramSocket
    };
    if let (Some(ab), Some(ba)) = (new_channel(), new_channel()) {
        set(a, Some(Entry::new(ab, ba, kind)));
        set(b, Some(Entry::new(ba, ab, kind)));
    }
    r
}

entry!(eventfd, 2, eventfd_hook);

/// Interposed `eventfd`: one channel, both ways. A counter that starts above zero was filled
/// by its creator: recorded as the creator's write.
unsafe extern "C" fn eventfd_hook(initval: c_uint, flags: c_int, ra: usize) -> c_int {
    // SAFETY: the real function with the caller's arguments.
    let fd = unsafe { REAL_EVENTFD.get()(initval, flags) };
    if fd < 0 {
        return fd;
    }
    forget(fd);
    if let Some(c) = new_channel() {
        set(fd, Some(Entry::new(c, c, ChannelKind::Eventfd)));
        if initval > 0 {
            if let Some(p) = before(fd, true, ra) {
                record(p, initval as u64, ra);
            }
        }
    }
    fd
}

entry!(eventfd_read, 2, eventfd_read_hook);
entry!(eventfd_write, 2, eventfd_write_hook);

unsafe extern "C-unwind" fn eventfd_read_hook(fd: c_int, value: *mut u64, ra: usize) -> c_int {
    let pending = before(fd, false, ra);
    let begun = super::blocking::begin(foresight_trace::event::BlockingCall::Read, ra, || {
        super::blocking::fd_blocks(fd, true)
    });
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { REAL_EVENTFD_READ.get()(fd, value) };
    if let Some(p) = pending {
        if r == 0 {
            after(p, 8, value as *const c_void, ra);
        }
    }
    if let Some(b) = begun {
        super::blocking::end(b);
    }
    r
}

unsafe extern "C-unwind" fn eventfd_write_hook(fd: c_int, value: u64, ra: usize) -> c_int {
    let pending = before(fd, true, ra);
    let begun = super::blocking::begin(foresight_trace::event::BlockingCall::Write, ra, || {
        super::blocking::fd_blocks(fd, true)
    });
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { REAL_EVENTFD_WRITE.get()(fd, value) };
    if let Some(p) = pending {
        if r == 0 {
            after(p, 8, &value as *const u64 as *const c_void, ra);
        }
    }
    if let Some(b) = begun {
        super::blocking::end(b);
    }
    r
}
