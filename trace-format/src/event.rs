//! The event model: what a trace says happened, one thread at a time.
//!
//! These are the wire types. The analyzer converts them into its own in-memory types; nothing
//! outside this crate should depend on how they are laid out in bytes (that is `codec.rs`).

/// A thread, numbered by the recorder in the order it first saw them (the main thread is 0).
pub type ThreadId = u32;
/// A synchronisation object (mutex, rwlock, spinlock, condition variable, barrier, once,
/// semaphore). One address with one lifetime: a lock destroyed and re-initialised at the same
/// address gets a new id.
pub type ObjectId = u32;
/// A call site (a short stack of return addresses), interned in the site table.
pub type SiteId = u32;
/// A string interned in the string table.
pub type StringId = u32;

/// Shared (read) or exclusive (write) acquisition of a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockMode {
    Exclusive,
    Shared,
}

/// How a condition-variable wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitOutcome {
    /// Woken (by a signal, a broadcast or spuriously); the mutex is held again.
    Woken,
    /// The timeout expired; the mutex is held again.
    TimedOut,
}

/// C11/C++11 memory orders, as the ThreadSanitizer ABI numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryOrder {
    Relaxed = 0,
    Consume = 1,
    Acquire = 2,
    Release = 3,
    AcqRel = 4,
    SeqCst = 5,
}

impl MemoryOrder {
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Relaxed,
            1 => Self::Consume,
            2 => Self::Acquire,
            3 => Self::Release,
            4 => Self::AcqRel,
            5 => Self::SeqCst,
            _ => return None,
        })
    }
}

/// The kind of an atomic access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    Load,
    Store,
    /// Read-modify-write (exchange, fetch-add and friends).
    Rmw,
    /// Compare-exchange that stored.
    CasSuccess,
    /// Compare-exchange that only loaded.
    CasFailure,
}

/// A call that can block for as long as another thread or process decides (FORMAT.md §6.6.1,
/// extension events `0x63`/`0x64`): each names a family of C functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockingCall {
    /// `read`, `readv` on a pipe, FIFO or socket.
    Read = 0,
    /// `write`, `writev` on a pipe, FIFO or socket.
    Write = 1,
    /// `recv`, `recvfrom`, `recvmsg`.
    Recv = 2,
    /// `send`, `sendto`, `sendmsg`.
    Send = 3,
    /// `accept`, `accept4`.
    Accept = 4,
    Connect = 5,
    /// `poll`, `ppoll`.
    Poll = 6,
    /// `select`, `pselect`.
    Select = 7,
    /// `epoll_wait`, `epoll_pwait`.
    EpollWait = 8,
    /// `sleep`, `usleep`, `nanosleep`, `clock_nanosleep`.
    Sleep = 9,
    /// `wait`, `waitpid`, `wait4`, `waitid`.
    WaitChild = 10,
    /// `fsync`, `fdatasync`.
    Sync = 11,
}

impl BlockingCall {
    pub const ALL: [BlockingCall; 12] = [
        Self::Read,
        Self::Write,
        Self::Recv,
        Self::Send,
        Self::Accept,
        Self::Connect,
        Self::Poll,
        Self::Select,
        Self::EpollWait,
        Self::Sleep,
        Self::WaitChild,
        Self::Sync,
    ];

    /// The call's code in an event body; `None` for a code this version does not know (a
    /// later writer's): the event is skipped as any unknown extension.
    pub fn from_code(code: u64) -> Option<Self> {
        Self::ALL.get(usize::try_from(code).ok()?).copied()
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    /// The family's name, as reports and suppressions spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Recv => "recv",
            Self::Send => "send",
            Self::Accept => "accept",
            Self::Connect => "connect",
            Self::Poll => "poll",
            Self::Select => "select",
            Self::EpollWait => "epoll_wait",
            Self::Sleep => "sleep",
            Self::WaitChild => "waitpid",
            Self::Sync => "fsync",
        }
    }
}

/// What a hand-off channel is (extension events `0x67`/`0x68`): a queue between threads of one
/// process, made by `pipe`, `socketpair` or `eventfd`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChannelKind {
    /// A pipe (`pipe`, `pipe2`): a read takes the oldest bytes written.
    Pipe = 0,
    /// One direction of a stream `socketpair`: as a pipe.
    StreamSocket = 1,
    /// One direction of a datagram or sequenced-packet `socketpair`: a read takes one message,
    /// the oldest.
    DatagramSocket = 2,
    /// An `eventfd`: the amount is the counter's units; a read takes them (all, or one in
    /// semaphore mode), the oldest first.
    Eventfd = 3,
}

impl ChannelKind {
    pub const ALL: [ChannelKind; 4] = [
        Self::Pipe,
        Self::StreamSocket,
        Self::DatagramSocket,
        Self::Eventfd,
    ];

    /// The kind's code in an event body; `None` for a code this version does not know.
    pub fn from_code(code: u64) -> Option<Self> {
        Self::ALL.get(usize::try_from(code).ok()?).copied()
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kind's name, as reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pipe => "pipe",
            Self::StreamSocket | Self::DatagramSocket => "socketpair",
            Self::Eventfd => "eventfd",
        }
    }

    /// Whether a read takes one whole write (a message) rather than an amount of it.
    pub fn by_message(self) -> bool {
        self == Self::DatagramSocket
    }
}

/// One event of one thread.
///
/// `key` orders events across threads (see `FORMAT.md`, "The ordering invariant"). Events that do
/// not synchronise (requests, memory accesses, annotations) usually carry their thread's previous
/// key; the merged order breaks ties by thread and by position within the thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub key: u64,
    pub kind: EventKind,
}

/// What happened. Every blocking operation has a `…Request`/`…Begin` event (where the thread
/// would block) and an event for its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    // --- threads and processes ---------------------------------------------------------------
    /// First event of every thread.
    ThreadStart,
    /// Last event of a thread (return from its start routine, `pthread_exit`, or process exit).
    ThreadExit,
    /// This thread created `child`.
    ThreadCreate {
        child: ThreadId,
        site: SiteId,
    },
    /// This thread is about to wait for `child` to finish.
    JoinRequest {
        child: ThreadId,
        site: SiteId,
    },
    /// The join of `child` returned; `joined` is false for a failed `tryjoin`/`timedjoin`.
    JoinEnd {
        child: ThreadId,
        joined: bool,
    },
    /// This thread detached `child`.
    ThreadDetach {
        child: ThreadId,
        site: SiteId,
    },
    /// The process forked; the child process writes its own trace.
    Fork {
        child_pid: u32,
        site: SiteId,
    },
    /// The process is about to `exec`.
    Exec {
        site: SiteId,
    },

    // --- locks (mutex, recursive mutex, rwlock, spinlock) ------------------------------------
    /// About to block acquiring `lock`.
    LockRequest {
        lock: ObjectId,
        mode: LockMode,
        site: SiteId,
    },
    /// The pending request of this thread for `lock` was granted. Its site is the request's.
    LockAcquired {
        lock: ObjectId,
        mode: LockMode,
    },
    /// The pending request for `lock` ended without it (timeout, `EDEADLK`, …).
    LockFailed {
        lock: ObjectId,
        errno: u32,
    },
    /// A non-blocking attempt (`trylock`); it never waits.
    LockTry {
        lock: ObjectId,
        mode: LockMode,
        site: SiteId,
        acquired: bool,
    },
    /// `lock` released by this thread (one level of a recursive mutex).
    LockRelease {
        lock: ObjectId,
        site: SiteId,
    },
    /// `lock` initialised; its class key is in the object table.
    ObjectInit {
        object: ObjectId,
        site: SiteId,
    },
    /// `object` destroyed; its id is never used again.
    ObjectDestroy {
        object: ObjectId,
        site: SiteId,
    },

    // --- condition variables ------------------------------------------------------------------
    /// Entering a wait: `mutex` is released, the thread blocks on `cond`.
    CondWaitBegin {
        cond: ObjectId,
        mutex: ObjectId,
        site: SiteId,
    },
    /// The wait returned with `mutex` held again.
    CondWaitEnd {
        cond: ObjectId,
        mutex: ObjectId,
        outcome: WaitOutcome,
    },
    CondSignal {
        cond: ObjectId,
        site: SiteId,
    },
    CondBroadcast {
        cond: ObjectId,
        site: SiteId,
    },

    // --- barriers -----------------------------------------------------------------------------
    BarrierInit {
        barrier: ObjectId,
        count: u32,
        site: SiteId,
    },
    /// Arrival at the barrier. `generation`, when the recorder says (version 1.3, an extension
    /// after the arrival, §6.6), is the generation the arrival belongs to: known even when the
    /// thread never returns from the wait (the process ended first).
    BarrierWaitBegin {
        barrier: ObjectId,
        site: SiteId,
        generation: Option<u64>,
    },
    /// Departure from generation `generation`; `serial` for the one thread that got
    /// `PTHREAD_BARRIER_SERIAL_THREAD`.
    BarrierWaitEnd {
        barrier: ObjectId,
        generation: u64,
        serial: bool,
    },

    // --- pthread_once ---------------------------------------------------------------------------
    OnceBegin {
        once: ObjectId,
        site: SiteId,
    },
    /// This thread runs the initialiser.
    OnceRun {
        once: ObjectId,
    },
    /// The initialiser returned.
    OnceEnd {
        once: ObjectId,
    },
    /// Another thread ran (or is running and finished) the initialiser; this call did nothing.
    OnceSkip {
        once: ObjectId,
    },

    // --- semaphores ---------------------------------------------------------------------------
    SemInit {
        sem: ObjectId,
        value: u32,
        site: SiteId,
    },
    SemPost {
        sem: ObjectId,
        site: SiteId,
    },
    /// About to block in `sem_wait`/`sem_timedwait`.
    SemWaitBegin {
        sem: ObjectId,
        site: SiteId,
    },
    /// The wait returned; `acquired` is false on timeout or error.
    SemWaitEnd {
        sem: ObjectId,
        acquired: bool,
    },
    /// `sem_trywait`; it never waits.
    SemTry {
        sem: ObjectId,
        site: SiteId,
        acquired: bool,
    },

    // --- memory -------------------------------------------------------------------------------
    Read {
        addr: u64,
        size: u32,
        site: SiteId,
    },
    Write {
        addr: u64,
        size: u32,
        site: SiteId,
    },
    Atomic {
        op: AtomicOp,
        addr: u64,
        size: u32,
        order: MemoryOrder,
        site: SiteId,
    },
    Fence {
        order: MemoryOrder,
        site: SiteId,
    },
    Alloc {
        addr: u64,
        size: u64,
        site: SiteId,
    },
    Free {
        addr: u64,
        site: SiteId,
    },

    // --- annotations --------------------------------------------------------------------------
    /// The program named the class of `lock`.
    LockClassName {
        lock: ObjectId,
        name: StringId,
    },
    /// Instances of one class nested by a stated rule: this instance is at nesting level
    /// `subclass`.
    LockSubclass {
        lock: ObjectId,
        subclass: u32,
    },
    /// Declared rank of `lock`: locks must be acquired in increasing rank.
    LockRank {
        lock: ObjectId,
        rank: u32,
    },
    /// User-declared happens-before edge: everything before this event in this thread happens
    /// before everything after a `HappensAfter` with the same `tag`.
    HappensBefore {
        tag: u64,
        site: SiteId,
    },
    HappensAfter {
        tag: u64,
        site: SiteId,
    },

    // --- blocking calls (extension events, FORMAT.md §6.6.1) ----------------------------------
    /// About to make a blocking `call` at `site`, which asked to wait at most `timeout_ns`
    /// (a sleep's duration, a poll's timeout; `None`: no limit, or none the call takes). An
    /// extension event: not counted in a chunk's event count, and only a reader that asks for
    /// extensions sees it.
    BlockingBegin {
        call: BlockingCall,
        site: SiteId,
        timeout_ns: Option<u64>,
    },
    /// The blocking call this thread began last returned, after `duration_ns`.
    BlockingEnd {
        call: BlockingCall,
        duration_ns: u64,
    },

    // --- signal context (extension events, FORMAT.md §6.6.1) ---------------------------------
    /// The thread starts running the program's handler for `signal`: its events up to the
    /// matching `SignalExit` were recorded inside the handler.
    SignalEnter {
        signal: u8,
    },
    /// The handler for `signal` returned.
    SignalExit {
        signal: u8,
    },
    /// The thread's signal mask changed (`pthread_sigmask`, `sigprocmask`), or a thread started
    /// with signals blocked: bit `s - 1` of `blocked` is set when signal `s` is blocked.
    SignalMask {
        blocked: u64,
    },
    // --- hand-offs through a pipe, socketpair or eventfd (extension events, §6.6.1) -----------
    /// The thread put `amount` bytes (an eventfd: counter units) into hand-off channel
    /// `channel` through descriptor `fd`, at `site`. A release: its key is fresh, taken before
    /// the real call, so every read that took these bytes comes after it in the merged order.
    HandoffWrite {
        channel: u32,
        kind: ChannelKind,
        fd: u32,
        amount: u64,
        site: SiteId,
    },
    /// The thread took `amount` bytes (units; a datagram channel: one message of `amount`
    /// bytes) out of `channel`: the oldest written and not yet taken. An acquire.
    HandoffRead {
        channel: u32,
        kind: ChannelKind,
        fd: u32,
        amount: u64,
        site: SiteId,
    },
}

/// The coarse category of an event, for statistics and filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    Thread,
    Lock,
    Condition,
    Barrier,
    Once,
    Semaphore,
    Memory,
    Atomic,
    Allocation,
    Annotation,
    Blocking,
    Signal,
    Handoff,
}

impl EventKind {
    /// A short stable name, used by `foresight dump` and `stats`.
    pub fn name(&self) -> &'static str {
        use EventKind::*;
        match self {
            ThreadStart => "thread-start",
            ThreadExit => "thread-exit",
            ThreadCreate { .. } => "thread-create",
            JoinRequest { .. } => "join-request",
            JoinEnd { joined: true, .. } => "join",
            JoinEnd { joined: false, .. } => "join-failed",
            ThreadDetach { .. } => "detach",
            Fork { .. } => "fork",
            Exec { .. } => "exec",
            LockRequest {
                mode: LockMode::Exclusive,
                ..
            } => "lock-request",
            LockRequest {
                mode: LockMode::Shared,
                ..
            } => "read-lock-request",
            LockAcquired {
                mode: LockMode::Exclusive,
                ..
            } => "lock-acquired",
            LockAcquired {
                mode: LockMode::Shared,
                ..
            } => "read-lock-acquired",
            LockFailed { .. } => "lock-failed",
            LockTry {
                acquired: true,
                mode: LockMode::Exclusive,
                ..
            } => "trylock",
            LockTry {
                acquired: true,
                mode: LockMode::Shared,
                ..
            } => "read-trylock",
            LockTry {
                acquired: false,
                mode: LockMode::Exclusive,
                ..
            } => "trylock-failed",
            LockTry {
                acquired: false,
                mode: LockMode::Shared,
                ..
            } => "read-trylock-failed",
            LockRelease { .. } => "lock-release",
            ObjectInit { .. } => "init",
            ObjectDestroy { .. } => "destroy",
            CondWaitBegin { .. } => "cond-wait",
            CondWaitEnd {
                outcome: WaitOutcome::Woken,
                ..
            } => "cond-woken",
            CondWaitEnd {
                outcome: WaitOutcome::TimedOut,
                ..
            } => "cond-timed-out",
            CondSignal { .. } => "cond-signal",
            CondBroadcast { .. } => "cond-broadcast",
            BarrierInit { .. } => "barrier-init",
            BarrierWaitBegin { .. } => "barrier-arrive",
            BarrierWaitEnd { .. } => "barrier-depart",
            OnceBegin { .. } => "once-begin",
            OnceRun { .. } => "once-run",
            OnceEnd { .. } => "once-end",
            OnceSkip { .. } => "once-skip",
            SemInit { .. } => "sem-init",
            SemPost { .. } => "sem-post",
            SemWaitBegin { .. } => "sem-wait",
            SemWaitEnd { acquired: true, .. } => "sem-acquired",
            SemWaitEnd {
                acquired: false, ..
            } => "sem-wait-failed",
            SemTry { acquired: true, .. } => "sem-trywait",
            SemTry {
                acquired: false, ..
            } => "sem-trywait-failed",
            Read { .. } => "read",
            Write { .. } => "write",
            Atomic {
                op: AtomicOp::Load, ..
            } => "atomic-load",
            Atomic {
                op: AtomicOp::Store,
                ..
            } => "atomic-store",
            Atomic {
                op: AtomicOp::Rmw, ..
            } => "atomic-rmw",
            Atomic {
                op: AtomicOp::CasSuccess,
                ..
            } => "atomic-cas",
            Atomic {
                op: AtomicOp::CasFailure,
                ..
            } => "atomic-cas-failed",
            Fence { .. } => "fence",
            Alloc { .. } => "alloc",
            Free { .. } => "free",
            LockClassName { .. } => "annotate-class",
            LockSubclass { .. } => "annotate-subclass",
            LockRank { .. } => "annotate-rank",
            HappensBefore { .. } => "happens-before",
            HappensAfter { .. } => "happens-after",
            BlockingBegin { .. } => "blocking-begin",
            BlockingEnd { .. } => "blocking-end",
            SignalEnter { .. } => "signal-enter",
            SignalExit { .. } => "signal-exit",
            SignalMask { .. } => "signal-mask",
            HandoffWrite { .. } => "handoff-write",
            HandoffRead { .. } => "handoff-read",
        }
    }

    pub fn category(&self) -> Category {
        use EventKind::*;
        match self {
            ThreadStart
            | ThreadExit
            | ThreadCreate { .. }
            | JoinRequest { .. }
            | JoinEnd { .. }
            | ThreadDetach { .. }
            | Fork { .. }
            | Exec { .. } => Category::Thread,
            LockRequest { .. }
            | LockAcquired { .. }
            | LockFailed { .. }
            | LockTry { .. }
            | LockRelease { .. }
            | ObjectInit { .. }
            | ObjectDestroy { .. } => Category::Lock,
            CondWaitBegin { .. }
            | CondWaitEnd { .. }
            | CondSignal { .. }
            | CondBroadcast { .. } => Category::Condition,
            BarrierInit { .. } | BarrierWaitBegin { .. } | BarrierWaitEnd { .. } => {
                Category::Barrier
            }
            OnceBegin { .. } | OnceRun { .. } | OnceEnd { .. } | OnceSkip { .. } => Category::Once,
            SemInit { .. }
            | SemPost { .. }
            | SemWaitBegin { .. }
            | SemWaitEnd { .. }
            | SemTry { .. } => Category::Semaphore,
            Read { .. } | Write { .. } => Category::Memory,
            Atomic { .. } | Fence { .. } => Category::Atomic,
            Alloc { .. } | Free { .. } => Category::Allocation,
            LockClassName { .. }
            | LockSubclass { .. }
            | LockRank { .. }
            | HappensBefore { .. }
            | HappensAfter { .. } => Category::Annotation,
            BlockingBegin { .. } | BlockingEnd { .. } => Category::Blocking,
            SignalEnter { .. } | SignalExit { .. } | SignalMask { .. } => Category::Signal,
            HandoffWrite { .. } | HandoffRead { .. } => Category::Handoff,
        }
    }

    /// Whether this event takes part in cross-thread ordering and so needs a key of its own,
    /// taken inside the operation's critical window. The others (requests, plain memory
    /// accesses, failed attempts, annotations) may reuse their thread's previous key.
    pub fn synchronises(&self) -> bool {
        use EventKind::*;
        !matches!(
            self,
            LockRequest { .. }
                | JoinRequest { .. }
                | SemWaitBegin { .. }
                | OnceBegin { .. }
                | LockTry {
                    acquired: false,
                    ..
                }
                | SemTry {
                    acquired: false,
                    ..
                }
                | LockFailed { .. }
                | Read { .. }
                | Write { .. }
                | LockClassName { .. }
                | LockSubclass { .. }
                | LockRank { .. }
                | BlockingBegin { .. }
                | BlockingEnd { .. }
                | SignalEnter { .. }
                | SignalExit { .. }
                | SignalMask { .. }
        )
    }

    /// Whether this event is written as an extension event (§6.6): not counted in a chunk's
    /// event count, skipped by readers that do not ask for it.
    pub fn is_extension(&self) -> bool {
        matches!(
            self,
            EventKind::BlockingBegin { .. }
                | EventKind::BlockingEnd { .. }
                | EventKind::SignalEnter { .. }
                | EventKind::SignalExit { .. }
                | EventKind::SignalMask { .. }
                | EventKind::HandoffWrite { .. }
                | EventKind::HandoffRead { .. }
        )
    }

    /// The object this event is about, if any (the lock, condition, barrier, once, semaphore).
    pub fn object(&self) -> Option<ObjectId> {
        use EventKind::*;
        match *self {
            LockRequest { lock, .. }
            | LockAcquired { lock, .. }
            | LockFailed { lock, .. }
            | LockTry { lock, .. }
            | LockRelease { lock, .. }
            | LockClassName { lock, .. }
            | LockSubclass { lock, .. }
            | LockRank { lock, .. } => Some(lock),
            ObjectInit { object, .. } | ObjectDestroy { object, .. } => Some(object),
            CondWaitBegin { cond, .. }
            | CondWaitEnd { cond, .. }
            | CondSignal { cond, .. }
            | CondBroadcast { cond, .. } => Some(cond),
            BarrierInit { barrier, .. }
            | BarrierWaitBegin { barrier, .. }
            | BarrierWaitEnd { barrier, .. } => Some(barrier),
            OnceBegin { once, .. } | OnceRun { once } | OnceEnd { once } | OnceSkip { once } => {
                Some(once)
            }
            SemInit { sem, .. }
            | SemPost { sem, .. }
            | SemWaitBegin { sem, .. }
            | SemWaitEnd { sem, .. }
            | SemTry { sem, .. } => Some(sem),
            _ => None,
        }
    }

    /// The call site recorded with this event, if it has its own.
    pub fn site(&self) -> Option<SiteId> {
        use EventKind::*;
        match *self {
            ThreadCreate { site, .. }
            | JoinRequest { site, .. }
            | ThreadDetach { site, .. }
            | Fork { site, .. }
            | Exec { site }
            | LockRequest { site, .. }
            | LockTry { site, .. }
            | LockRelease { site, .. }
            | ObjectInit { site, .. }
            | ObjectDestroy { site, .. }
            | CondWaitBegin { site, .. }
            | CondSignal { site, .. }
            | CondBroadcast { site, .. }
            | BarrierInit { site, .. }
            | BarrierWaitBegin { site, .. }
            | OnceBegin { site, .. }
            | SemInit { site, .. }
            | SemPost { site, .. }
            | SemWaitBegin { site, .. }
            | SemTry { site, .. }
            | Read { site, .. }
            | Write { site, .. }
            | Atomic { site, .. }
            | Fence { site, .. }
            | Alloc { site, .. }
            | Free { site, .. }
            | HappensBefore { site, .. }
            | HappensAfter { site, .. }
            | BlockingBegin { site, .. }
            | HandoffWrite { site, .. }
            | HandoffRead { site, .. } => Some(site),
            _ => None,
        }
    }
}
