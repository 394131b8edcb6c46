//! The keeper: a small process between `foresight record` and the command, so that the run
//! never outlives `record`, even when `record` is killed with SIGKILL (which it cannot catch).
//!
//! `record` forks; before the exec, the forked process forks again: the new process goes on to
//! run the command, and the one in between stays as the keeper. The keeper is the command's
//! parent and a child subreaper (`PR_SET_CHILD_SUBREAPER`): every process of the run that
//! loses its parent comes to it, so it can always reach the whole process tree. It passes on
//! the signals `record` sends it, tells `record` the command's pid and then its wait status
//! (through a pipe), and ends when the command does. The command gets SIGKILL if the keeper
//! dies (`PR_SET_PDEATHSIG`).
//!
//! When `record` ends before the command (killed), the keeper stops the run: it creates the
//! stop file, which every recorded process with a flusher sees within its period (it completes
//! its trace with each thread's end state, so that a deadlock reads as observed, and ends
//! itself), then, after [`GRACE_MS`], kills what is left of the tree (processes the runtime does
//! not record: `--no-follow`, or of one thread) until no process of the run remains.
//!
//! Between `fork` and `exec` only async-signal-safe system calls may be made (the parent may
//! have had other threads): the keeper uses nothing else, and no memory it did not get before
//! the fork.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// How long the processes of a run whose `record` was killed have to complete their traces
/// before the rest of the tree is killed.
const GRACE_MS: i64 = 3000;
/// How often the keeper looks whether `record` is still there.
const LOOK_MS: i64 = 50;

/// What the stop file says when `record` ended (the runtime reads it: `flusher.rs`).
const RECORD_ENDED: &[u8] = b"record-ended\n";

/// What the keeper needs, made before the fork.
pub struct Keeper {
    record: libc::pid_t,
    stop_file: Option<CString>,
    stop_dir: Option<CString>,
    report: OwnedFd,
}

/// `record`'s end of the keeper's pipe.
pub struct Reports {
    pipe: std::fs::File,
}

/// A pipe for the keeper's reports: (`record`'s read end, the keeper's write end), both
/// close-on-exec.
pub fn pipe() -> io::Result<(Reports, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((
        Reports {
            pipe: std::fs::File::from(read),
        },
        write,
    ))
}

impl Reports {
    fn word(&mut self) -> Option<i32> {
        use std::io::Read;
        let mut b = [0u8; 4];
        self.pipe.read_exact(&mut b).ok()?;
        Some(i32::from_le_bytes(b))
    }

    /// The command's pid, which the keeper sends once it has forked it.
    pub fn command_pid(&mut self) -> Option<u32> {
        self.word().and_then(|p| u32::try_from(p).ok())
    }

    /// The command's wait status, which the keeper sends when it ended (after the keeper
    /// ended: `None` if it could not say).
    pub fn command_status(&mut self) -> Option<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        self.word().map(std::process::ExitStatus::from_raw)
    }
}

impl Keeper {
    pub fn new(report: OwnedFd, stop_file: Option<&std::path::Path>) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &std::path::Path| CString::new(p.as_os_str().as_bytes()).ok();
        Keeper {
            record: std::process::id() as libc::pid_t,
            stop_file: stop_file.and_then(c),
            stop_dir: stop_file.and_then(|p| p.parent()).and_then(c),
            report,
        }
    }

    /// Runs in the process `record` forked, before the exec: forks the command's process,
    /// which returns to exec the command, while this one stays the keeper and never returns.
    ///
    /// # Safety
    /// Only between `fork` and `exec` of a `Command` (`pre_exec`), once.
    pub unsafe fn split(&self) -> io::Result<()> {
        // SAFETY: the calls below are async-signal-safe system calls on memory of this
        // process's stack; the sets are initialised by sigfillset before use.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            // Blocked before the fork: a signal `record` passes on in between waits for the
            // keeper's loop instead of ending it.
            libc::sigprocmask(libc::SIG_BLOCK, &all, &mut before);
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
            let keeper = libc::getpid();
            match libc::fork() {
                -1 => {
                    let e = io::Error::last_os_error();
                    libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                    Err(e)
                }
                0 => {
                    // The command: the signal mask it was given, no subreaper role, and
                    // SIGKILL when the keeper dies (or at once if it already has).
                    libc::sigprocmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    if libc::getppid() != keeper {
                        libc::_exit(128 + libc::SIGKILL);
                    }
                    Ok(())
                }
                command => self.keep(command, &all),
            }
        }
    }

    /// The keeper's life: see the module's comment.
    ///
    /// # Safety
    /// As [`Keeper::split`], in the keeper.
    unsafe fn keep(&self, command: libc::pid_t, all: &libc::sigset_t) -> ! {
        let report = self.report.as_raw_fd();
        // SAFETY: async-signal-safe system calls on this process's descriptors and memory.
        unsafe {
            // Nothing of `record`'s but the report pipe: no descriptor of the run held open
            // by the keeper (the pipe through which `Command` learns the exec succeeded,
            // a terminal, a pipe a reader waits to see closed).
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null >= 0 {
                for fd in 0..3 {
                    if fd != null {
                        libc::dup2(null, fd);
                    }
                }
                if null > 2 && null != report {
                    libc::close(null);
                }
            }
            close_all_from_3_but(report);
            // Its children's ends must reach `waitpid` (the command keeps the disposition
            // `record` was started with, SIGCHLD ignored included).
            libc::signal(libc::SIGCHLD, libc::SIG_DFL);
            write_word(report, command);
        }
        let mut command_status: Option<i32> = None;
        let mut stopping_since: Option<i64> = None;
        loop {
            // Reaps what ended; whether any child is left.
            let any_left = loop {
                let mut status = 0;
                // SAFETY: waitpid writes the status into our integer.
                let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if r == command {
                    command_status = Some(status);
                } else if r <= 0 {
                    break r == 0;
                }
            };
            match (stopping_since, command_status) {
                (None, Some(status)) => {
                    // The command ended: its status to `record`, which goes on as usual.
                    // SAFETY: a write on our pipe, then the end of this process.
                    unsafe {
                        write_word(report, status);
                        libc::_exit(0)
                    }
                }
                // Gone without a status the keeper could collect: `record` uses the keeper's.
                (None, None) if !any_left => {
                    // SAFETY: ends this process.
                    unsafe { libc::_exit(1) }
                }
                (Some(_), _) if !any_left => {
                    self.remove_stop_file();
                    // SAFETY: ends this process.
                    unsafe { libc::_exit(0) }
                }
                (Some(since), _) if now_ms() - since >= GRACE_MS => {
                    // SAFETY: async-signal-safe system calls; the pids are this process's
                    // children (unreaped, so not reused).
                    unsafe { kill_children() };
                }
                _ => {}
            }
            // SAFETY: getppid has no preconditions.
            if stopping_since.is_none() && unsafe { libc::getppid() } != self.record {
                // `record` is gone: the run stops with it.
                stopping_since = Some(if self.create_stop_file() {
                    now_ms()
                } else {
                    now_ms() - GRACE_MS
                });
                continue;
            }
            let timeout = libc::timespec {
                tv_sec: 0,
                tv_nsec: LOOK_MS * 1_000_000,
            };
            // SAFETY: an all-zero siginfo is a valid out-value for sigtimedwait.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: the blocked set, our siginfo and timeout.
            let sig = unsafe { libc::sigtimedwait(all, &mut info, &timeout) };
            // Sent by a process (`record` passing on a termination request or its --dump-on
            // signal): passed on to the command. The terminal's signals (Ctrl-C) reached the
            // command already, from the kernel.
            if sig > 0 && sig != libc::SIGCHLD && info.si_code <= 0 && stopping_since.is_none() {
                // SAFETY: kill(2) of our child, not yet reaped.
                unsafe { libc::kill(command, sig) };
            }
        }
    }

    fn create_stop_file(&self) -> bool {
        let Some(path) = &self.stop_file else {
            return false;
        };
        // SAFETY: a NUL-terminated path; the descriptor is ours and closed below.
        unsafe {
            let fd = libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o644,
            );
            if fd < 0 {
                return false;
            }
            libc::write(fd, RECORD_ENDED.as_ptr().cast(), RECORD_ENDED.len());
            libc::close(fd);
        }
        true
    }

    /// `record`'s private directory for the stop file, which `record` did not live to remove.
    fn remove_stop_file(&self) {
        // SAFETY: NUL-terminated paths.
        unsafe {
            if let Some(p) = &self.stop_file {
                libc::unlink(p.as_ptr());
            }
            if let Some(d) = &self.stop_dir {
                libc::rmdir(d.as_ptr());
            }
        }
    }
}

/// # Safety
/// Async-signal-safe; `fd` is a pipe's write end.
unsafe fn write_word(fd: i32, word: i32) {
    let b = word.to_le_bytes();
    // SAFETY: writes our 4 bytes.
    unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
}

/// Closes every descriptor from 3 up but `keep`.
///
/// # Safety
/// Async-signal-safe; no descriptor closed here may be in use by this process afterwards.
unsafe fn close_all_from_3_but(keep: i32) {
    let range = |first: i32, last: u32| {
        // SAFETY: close_range on this process's descriptors.
        unsafe { libc::syscall(libc::SYS_close_range, first as u32, last, 0) == 0 }
    };
    let done = (keep <= 3 || range(3, keep as u32 - 1)) && range(keep + 1, u32::MAX);
    if !done {
        // No close_range (a kernel before 5.9): one by one, as far as the limit goes.
        for fd in 3..4096 {
            if fd != keep {
                // SAFETY: close of a descriptor number; a closed one fails with EBADF.
                unsafe { libc::close(fd) };
            }
        }
    }
}

/// SIGKILL to every child of this process (the command and the orphans of the run that came
/// to it), listed by `/proc/thread-self/children`.
///
/// # Safety
/// Async-signal-safe.
unsafe fn kill_children() {
    let mut buf = [0u8; 4096];
    // SAFETY: a NUL-terminated path, our buffer, our descriptor.
    let n = unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return;
    }
    for word in buf[..n as usize].split(|&b| b == b' ' || b == b'\n') {
        let mut pid: libc::pid_t = 0;
        for &d in word {
            if !d.is_ascii_digit() {
                pid = 0;
                break;
            }
            pid = pid
                .saturating_mul(10)
                .saturating_add((d - b'0') as libc::pid_t);
        }
        if pid > 0 {
            // SAFETY: kill(2) of our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn now_ms() -> i64 {
    // SAFETY: an all-zero timespec is a valid out-value.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into our timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}
