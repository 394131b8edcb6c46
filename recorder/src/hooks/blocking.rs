//! Blocking calls (`read` and `write` are hooked in `memory.rs`, which calls `begin` and
//! `end` here): I/O on pipes, FIFOs and sockets, waits for descriptors, sleeps, waits for
//! children, `fsync`. Each is recorded as a blocking-begin before the real call and a
//! blocking-end with its duration after it (FORMAT.md §6.6.1), and only while the thread holds
//! a lock it was recorded taking (`ThreadState::holds_locks`): the analyzer reports a lock held
//! across such a call (`blocking-under-lock`), and a call under no lock tells it nothing.
//!
//! Cost: a call under no lock pays one thread-local load and a compare. Under a lock, a
//! `read`/`write`/`readv`/`writev` first asks the kernel what its descriptor is (`fstat`; a
//! regular file or a device is not recorded) and every descriptor call whether it is
//! non-blocking (`fcntl`): a call that cannot block (`O_NONBLOCK`, `MSG_DONTWAIT`, `WNOHANG`, a
//! zero timeout) is not recorded.
//!
//! Not seen: calls the C library makes inside itself (`fread`'s `read`, `system`'s
//! `waitpid`) and the six-argument `sendto` and `pselect` (`recvfrom`, six too, has an entry
//! of its own, `entry6!`, for what it stores).

use libc::{c_int, c_uint, c_void, size_t, ssize_t};

use foresight_trace::event::{BlockingCall, EventKind};

use super::memory;
use crate::real::real;
use crate::sequence::Key;
use crate::state;
use crate::thread_state::{self, ThreadState};

/// A blocking call that was recorded as begun: its end is recorded with the time it took.
#[derive(Clone, Copy)]
pub(super) struct Begun {
    call: BlockingCall,
    start_ns: u64,
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether a call can block, and for how long at most: `None`, it cannot (it is not
/// recorded); `Some(None)`, with no limit (or none known); `Some(Some(ns))`, at most `ns`.
pub(super) type Blocks = Option<Option<u64>>;

/// Before the real call: records its beginning if the thread holds a lock and `blocks`
/// (asked only then) says the call can block.
#[inline(always)]
pub(super) fn begin(
    call: BlockingCall,
    ra: usize,
    blocks: impl FnOnce() -> Blocks,
) -> Option<Begun> {
    let t = thread_state::current()?;
    if !t.holds_locks() {
        return None;
    }
    begin_under_lock(&t, call, ra, blocks)
}

#[cold]
#[inline(never)]
fn begin_under_lock(
    t: &ThreadState,
    call: BlockingCall,
    ra: usize,
    blocks: impl FnOnce() -> Blocks,
) -> Option<Begun> {
    if !state::recording() {
        return None;
    }
    t.with(|t| {
        let timeout_ns = blocks()?;
        let site = t.call_site(ra).0;
        t.emit(
            EventKind::BlockingBegin {
                call,
                site,
                timeout_ns,
            },
            Key::Same,
        );
        Some(Begun {
            call,
            start_ns: monotonic_ns(),
        })
    })
    .flatten()
}

/// After the real call: its end, with how long it took.
#[cold]
#[inline(never)]
pub(super) fn end(b: Begun) {
    let duration_ns = monotonic_ns().saturating_sub(b.start_ns);
    if let Some(t) = thread_state::current() {
        t.with(|t| {
            t.emit(
                EventKind::BlockingEnd {
                    call: b.call,
                    duration_ns,
                },
                Key::Same,
            )
        });
    }
}

/// Whether a call on `fd` can block: not opened `O_NONBLOCK` (and, unless `any_kind`, a pipe,
/// FIFO or socket: reads and writes of regular files and devices are not what this records).
pub(super) fn fd_blocks(fd: c_int, any_kind: bool) -> Blocks {
    fd_may_block(fd, any_kind).then_some(None)
}

fn fd_may_block(fd: c_int, any_kind: bool) -> bool {
    if !any_kind {
        // SAFETY: an all-zero stat is a valid value for fstat to fill in.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat writes the stat we pass; a bad descriptor fails.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return false;
        }
        let kind = st.st_mode & libc::S_IFMT;
        if kind != libc::S_IFIFO && kind != libc::S_IFSOCK {
            return false;
        }
    }
    // SAFETY: F_GETFL takes no argument and only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK == 0
}

/// `timeout` in milliseconds (poll, epoll): 0 returns at once, a negative one waits for ever.
fn waits_ms(timeout: c_int) -> Blocks {
    match timeout {
        0 => None,
        t if t < 0 => Some(None),
        t => Some(Some(t as u64 * 1_000_000)),
    }
}

fn ns_of(sec: i64, nsec: i64) -> u64 {
    (sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(nsec.max(0) as u64)
}

/// A relative `timespec`: null waits for ever, zero returns at once.
fn waits_ts(ts: *const libc::timespec) -> Blocks {
    // SAFETY: the caller's argument: null or a valid timespec (the real call reads it too).
    match unsafe { ts.as_ref() } {
        None => Some(None),
        Some(t) if t.tv_sec == 0 && t.tv_nsec == 0 => None,
        Some(t) => Some(Some(ns_of(t.tv_sec, t.tv_nsec))),
    }
}

/// A `timeval` (select): null waits for ever, zero returns at once.
fn waits_tv(tv: *const libc::timeval) -> Blocks {
    // SAFETY: the caller's argument: null or a valid timeval (the real call reads it too).
    match unsafe { tv.as_ref() } {
        None => Some(None),
        Some(t) if t.tv_sec == 0 && t.tv_usec == 0 => None,
        Some(t) => Some(Some(ns_of(t.tv_sec, t.tv_usec.saturating_mul(1000)))),
    }
}

/// A sleep of `ns` (0 returns at once).
fn sleeps(ns: u64) -> Blocks {
    (ns != 0).then_some(Some(ns))
}

/// A wait for a child: `WNOHANG` returns at once.
fn waits_child(options: c_int) -> Blocks {
    (options & libc::WNOHANG == 0).then_some(None)
}

/// A socket call: `MSG_DONTWAIT` returns at once.
fn socket_blocks(fd: c_int, flags: c_int) -> Blocks {
    if flags & libc::MSG_DONTWAIT != 0 {
        return None;
    }
    fd_blocks(fd, true)
}

/// `hook!(export, n, implementation, REAL, "symbol", (args) -> ret, call, blocks)`: the
/// interposed function (`n` arguments), recording `call` around the real one when
/// `blocks` (an expression over the arguments, a `Blocks`) says it can block. With
/// `handoff(write, fd, buf)`, a write (or read) of a hand-off descriptor (`handoff.rs`) is
/// recorded too; `fd` is -1 for a call that moves no bytes (`MSG_PEEK`). With
/// `after |r, ra| expr`, `expr` runs once the call returned `r`, before it is returned (what
/// the call stored in the program's memory, `memory.rs`).
macro_rules! hook {
    ($export:ident, $n:tt, $imp:ident, $real:ident, $sym:literal,
     ($($a:ident: $t:ty),*) -> $ret:ty, $call:expr, $blocks:expr
     $(, handoff($write:expr, $fd:expr, $buf:expr))?
     $(, after |$r:ident, $ra:ident| $after:expr)?) => {
        real!($real: unsafe extern "C-unwind" fn($($t),*) -> $ret = $sym);
        entry!($export, $n, $imp);

        unsafe extern "C-unwind" fn $imp($($a: $t,)* ra: usize) -> $ret {
            let real = $real.get();
            $(let handoff = super::handoff::before($fd, $write, ra);)?
            let begun = begin($call, ra, || $blocks);
            // SAFETY: the real function with the caller's arguments.
            let r = unsafe { real($($a),*) };
            $(if let Some(h) = handoff {
                super::handoff::after(h, r as isize, $buf as *const c_void, ra);
            })?
            if let Some(b) = begun {
                end(b);
            }
            $(let ($r, $ra) = (r, ra);
            let () = $after;)?
            r
        }
    };
}

/// The descriptor a receive moves bytes from: none (-1) for `MSG_PEEK`, which leaves them.
fn taking(fd: c_int, flags: c_int) -> c_int {
    if flags & libc::MSG_PEEK != 0 {
        -1
    } else {
        fd
    }
}

/// No buffer of one piece (vectored calls): an eventfd's value is not read through them.
const VECTORED: *const c_void = std::ptr::null();

type Iov = *const libc::iovec;
type Addr = *mut libc::sockaddr;
type Len = *mut libc::socklen_t;

hook!(readv, 3, readv_hook, REAL_READV, b"readv\0",
    (fd: c_int, iov: Iov, n: c_int) -> ssize_t,
    BlockingCall::Read, fd_blocks(fd, false), handoff(false, fd, VECTORED),
    // SAFETY: the call read `n` vector entries.
    after |r, ra| unsafe { memory::scattered(iov, n.max(0) as usize, r, ra) });
hook!(writev, 3, writev_hook, REAL_WRITEV, b"writev\0",
    (fd: c_int, iov: Iov, n: c_int) -> ssize_t,
    BlockingCall::Write, fd_blocks(fd, false), handoff(true, fd, VECTORED));
hook!(recv, 4, recv_hook, REAL_RECV, b"recv\0",
    (fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t,
    BlockingCall::Recv, socket_blocks(fd, flags), handoff(false, taking(fd, flags), buf),
    after |r, ra| memory::received(buf, n, r, ra));
hook!(recvmsg, 3, recvmsg_hook, REAL_RECVMSG, b"recvmsg\0",
    (fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t,
    BlockingCall::Recv, socket_blocks(fd, flags), handoff(false, taking(fd, flags), VECTORED),
    // SAFETY: the call's message header.
    after |r, ra| unsafe { memory::received_message(msg, r, ra) });

real!(REAL_RECVFROM: unsafe extern "C-unwind" fn(c_int, *mut c_void, size_t, c_int, Addr, Len) -> ssize_t = b"recvfrom\0");
entry6!(recvfrom, recvfrom_hook);

unsafe extern "C-unwind" fn recvfrom_hook(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: Addr,
    len: Len,
    ra: usize,
) -> ssize_t {
    let real = REAL_RECVFROM.get();
    // SAFETY: null or the caller's length, which the real call reads too.
    let room = unsafe { len.as_ref() }.copied().unwrap_or(0);
    let handoff = super::handoff::before(taking(fd, flags), false, ra);
    let begun = begin(BlockingCall::Recv, ra, || socket_blocks(fd, flags));
    // SAFETY: the real function with the caller's arguments.
    let r = unsafe { real(fd, buf, n, flags, addr, len) };
    if let Some(h) = handoff {
        super::handoff::after(h, r, buf as *const c_void, ra);
    }
    if let Some(b) = begun {
        end(b);
    }
    memory::received(buf, n, r, ra);
    if r >= 0 {
        // SAFETY: the call's address arguments and the room it was given.
        unsafe { memory::received_address(addr, len, room, ra) };
    }
    r
}
hook!(send, 4, send_hook, REAL_SEND, b"send\0",
    (fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t,
    BlockingCall::Send, socket_blocks(fd, flags), handoff(true, fd, buf));
hook!(sendmsg, 3, sendmsg_hook, REAL_SENDMSG, b"sendmsg\0",
    (fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t,
    BlockingCall::Send, socket_blocks(fd, flags), handoff(true, fd, VECTORED));
hook!(accept, 3, accept_hook, REAL_ACCEPT, b"accept\0",
    (fd: c_int, addr: Addr, len: Len) -> c_int,
    BlockingCall::Accept, fd_blocks(fd, true));
hook!(accept4, 4, accept4_hook, REAL_ACCEPT4, b"accept4\0",
    (fd: c_int, addr: Addr, len: Len, flags: c_int) -> c_int,
    BlockingCall::Accept, fd_blocks(fd, true));
hook!(connect, 3, connect_hook, REAL_CONNECT, b"connect\0",
    (fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int,
    BlockingCall::Connect, fd_blocks(fd, true));
hook!(poll, 3, poll_hook, REAL_POLL, b"poll\0",
    (fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int,
    BlockingCall::Poll, waits_ms(timeout));
hook!(ppoll, 4, ppoll_hook, REAL_PPOLL, b"ppoll\0",
    (fds: *mut libc::pollfd, n: libc::nfds_t, ts: *const libc::timespec,
     mask: *const libc::sigset_t) -> c_int,
    BlockingCall::Poll, waits_ts(ts));
hook!(select, 5, select_hook, REAL_SELECT, b"select\0",
    (n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set,
     tv: *mut libc::timeval) -> c_int,
    BlockingCall::Select, waits_tv(tv));
hook!(epoll_wait, 4, epoll_wait_hook, REAL_EPOLL_WAIT, b"epoll_wait\0",
    (fd: c_int, events: *mut libc::epoll_event, n: c_int, timeout: c_int) -> c_int,
    BlockingCall::EpollWait, waits_ms(timeout));
hook!(epoll_pwait, 5, epoll_pwait_hook, REAL_EPOLL_PWAIT, b"epoll_pwait\0",
    (fd: c_int, events: *mut libc::epoll_event, n: c_int, timeout: c_int,
     mask: *const libc::sigset_t) -> c_int,
    BlockingCall::EpollWait, waits_ms(timeout));
hook!(sleep, 1, sleep_hook, REAL_SLEEP, b"sleep\0",
    (seconds: c_uint) -> c_uint,
    BlockingCall::Sleep, sleeps(seconds as u64 * 1_000_000_000));
hook!(usleep, 1, usleep_hook, REAL_USLEEP, b"usleep\0",
    (us: libc::useconds_t) -> c_int,
    BlockingCall::Sleep, sleeps(us as u64 * 1000));
hook!(nanosleep, 2, nanosleep_hook, REAL_NANOSLEEP, b"nanosleep\0",
    (req: *const libc::timespec, rem: *mut libc::timespec) -> c_int,
    BlockingCall::Sleep, waits_ts(req));
hook!(clock_nanosleep, 4, clock_nanosleep_hook, REAL_CLOCK_NANOSLEEP, b"clock_nanosleep\0",
    (clock: libc::clockid_t, flags: c_int, req: *const libc::timespec,
     rem: *mut libc::timespec) -> c_int,
    // An absolute deadline's length is not known here.
    BlockingCall::Sleep, if flags & libc::TIMER_ABSTIME != 0 { Some(None) } else { waits_ts(req) });
hook!(wait, 1, wait_hook, REAL_WAIT, b"wait\0",
    (status: *mut c_int) -> libc::pid_t,
    BlockingCall::WaitChild, Some(None));
hook!(waitpid, 3, waitpid_hook, REAL_WAITPID, b"waitpid\0",
    (pid: libc::pid_t, status: *mut c_int, options: c_int) -> libc::pid_t,
    BlockingCall::WaitChild, waits_child(options));
hook!(wait4, 4, wait4_hook, REAL_WAIT4, b"wait4\0",
    (pid: libc::pid_t, status: *mut c_int, options: c_int, usage: *mut libc::rusage)
        -> libc::pid_t,
    BlockingCall::WaitChild, waits_child(options));
hook!(waitid, 4, waitid_hook, REAL_WAITID, b"waitid\0",
    (idtype: libc::idtype_t, id: libc::id_t, info: *mut libc::siginfo_t, options: c_int)
        -> c_int,
    BlockingCall::WaitChild, waits_child(options));
hook!(fsync, 1, fsync_hook, REAL_FSYNC, b"fsync\0",
    (fd: c_int) -> c_int,
    BlockingCall::Sync, Some(None));
hook!(fdatasync, 1, fdatasync_hook, REAL_FDATASYNC, b"fdatasync\0",
    (fd: c_int) -> c_int,
    BlockingCall::Sync, Some(None));
