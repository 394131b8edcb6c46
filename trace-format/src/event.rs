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
    /// Exclusive (write) acquisition: a mutex, a write lock.
    Exclusive,
    /// Shared (read) acquisition of a rwlock.
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
    /// `memory_order_relaxed`.
    Relaxed = 0,
    /// `memory_order_consume`.
    Consume = 1,
    /// `memory_order_acquire`.
    Acquire = 2,
    /// `memory_order_release`.
    Release = 3,
    /// `memory_order_acq_rel`.
    AcqRel = 4,
    /// `memory_order_seq_cst`.
    SeqCst = 5,
}

impl MemoryOrder {
    /// The order with ThreadSanitizer's number `v`; `None` for a number it does not define.
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
    /// An atomic load.
    Load,
    /// An atomic store.
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
    /// `connect`.
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
    /// Every call family, in code order.
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

    /// The call's code in an event body.
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
    /// Every channel kind, in code order.
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

    /// The kind's code in an event body.
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
    /// Orders the event across threads (FORMAT.md, "The ordering invariant").
    pub key: u64,
    /// What happened.
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
        /// The thread created.
        child: ThreadId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// This thread is about to wait for `child` to finish.
    JoinRequest {
        /// The thread waited for.
        child: ThreadId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// The join of `child` returned; `joined` is false for a failed `tryjoin`/`timedjoin`.
    JoinEnd {
        /// The thread waited for.
        child: ThreadId,
        /// Whether the join took the thread (false: a failed `tryjoin`/`timedjoin`).
        joined: bool,
    },
    /// This thread detached `child`.
    ThreadDetach {
        /// The thread detached.
        child: ThreadId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// The process forked; the child process writes its own trace.
    Fork {
        /// The child process's id.
        child_pid: u32,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// The process is about to `exec`.
    Exec {
        /// Where in the program (the site table).
        site: SiteId,
    },

    // --- locks (mutex, recursive mutex, rwlock, spinlock) ------------------------------------
    /// About to block acquiring `lock`.
    LockRequest {
        /// The lock.
        lock: ObjectId,
        /// Shared or exclusive.
        mode: LockMode,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// The pending request of this thread for `lock` was granted. Its site is the request's.
    LockAcquired {
        /// The lock.
        lock: ObjectId,
        /// Shared or exclusive.
        mode: LockMode,
    },
    /// The pending request for `lock` ended without it (timeout, `EDEADLK`, …).
    LockFailed {
        /// The lock.
        lock: ObjectId,
        /// The `errno` the call failed with.
        errno: u32,
    },
    /// A non-blocking attempt (`trylock`); it never waits.
    LockTry {
        /// The lock.
        lock: ObjectId,
        /// Shared or exclusive.
        mode: LockMode,
        /// Where in the program (the site table).
        site: SiteId,
        /// Whether the lock was taken.
        acquired: bool,
    },
    /// `lock` released by this thread (one level of a recursive mutex).
    LockRelease {
        /// The lock.
        lock: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// `lock` initialised; its class key is in the object table.
    ObjectInit {
        /// The object initialised.
        object: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// `object` destroyed; its id is never used again.
    ObjectDestroy {
        /// The object destroyed.
        object: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
    },

    // --- condition variables ------------------------------------------------------------------
    /// Entering a wait: `mutex` is released, the thread blocks on `cond`.
    CondWaitBegin {
        /// The condition variable.
        cond: ObjectId,
        /// The mutex the wait releases and holds again.
        mutex: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// The wait returned with `mutex` held again.
    CondWaitEnd {
        /// The condition variable.
        cond: ObjectId,
        /// The mutex the wait releases and holds again.
        mutex: ObjectId,
        /// How the wait ended.
        outcome: WaitOutcome,
    },
    /// A `pthread_cond_signal` of `cond`.
    CondSignal {
        /// The condition variable.
        cond: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// A `pthread_cond_broadcast` of `cond`.
    CondBroadcast {
        /// The condition variable.
        cond: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
    },

    // --- barriers -----------------------------------------------------------------------------
    /// `barrier` initialised for `count` threads.
    BarrierInit {
        /// The barrier.
        barrier: ObjectId,
        /// The number of threads each generation waits for.
        count: u32,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// Arrival at the barrier. `generation`, when the recorder says (version 1.3, an extension
    /// after the arrival, §6.6), is the generation the arrival belongs to: known even when the
    /// thread never returns from the wait (the process ended first).
    BarrierWaitBegin {
        /// The barrier.
        barrier: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
        /// The generation of this arrival, when the recorder wrote it.
        generation: Option<u64>,
    },
    /// Departure from generation `generation`; `serial` for the one thread that got
    /// `PTHREAD_BARRIER_SERIAL_THREAD`.
    BarrierWaitEnd {
        /// The barrier.
        barrier: ObjectId,
        /// The generation this departure ends.
        generation: u64,
        /// Whether this thread got `PTHREAD_BARRIER_SERIAL_THREAD`.
        serial: bool,
    },

    // --- pthread_once ---------------------------------------------------------------------------
    /// This thread called `pthread_once` on `once`.
    OnceBegin {
        /// The `pthread_once_t`.
        once: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// This thread runs the initialiser.
    OnceRun {
        /// The `pthread_once_t`.
        once: ObjectId,
    },
    /// The initialiser returned.
    OnceEnd {
        /// The `pthread_once_t`.
        once: ObjectId,
    },
    /// Another thread ran (or is running and finished) the initialiser; this call did nothing.
    OnceSkip {
        /// The `pthread_once_t`.
        once: ObjectId,
    },

    // --- semaphores ---------------------------------------------------------------------------
    /// `sem` initialised to `value`.
    SemInit {
        /// The semaphore.
        sem: ObjectId,
        /// The initial count.
        value: u32,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// A `sem_post` of `sem`.
    SemPost {
        /// The semaphore.
        sem: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// About to block in `sem_wait`/`sem_timedwait`.
    SemWaitBegin {
        /// The semaphore.
        sem: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// The wait returned; `acquired` is false on timeout or error.
    SemWaitEnd {
        /// The semaphore.
        sem: ObjectId,
        /// Whether the semaphore was decremented.
        acquired: bool,
    },
    /// `sem_trywait`; it never waits.
    SemTry {
        /// The semaphore.
        sem: ObjectId,
        /// Where in the program (the site table).
        site: SiteId,
        /// Whether the semaphore was decremented.
        acquired: bool,
    },

    // --- memory -------------------------------------------------------------------------------
    /// A plain read of `size` bytes at `addr`.
    Read {
        /// The first byte accessed.
        addr: u64,
        /// Bytes accessed.
        size: u32,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// A plain write of `size` bytes at `addr`.
    Write {
        /// The first byte accessed.
        addr: u64,
        /// Bytes accessed.
        size: u32,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// An atomic access of `size` bytes at `addr`.
    Atomic {
        /// Which atomic operation.
        op: AtomicOp,
        /// The first byte accessed.
        addr: u64,
        /// Bytes accessed.
        size: u32,
        /// Its memory order.
        order: MemoryOrder,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// An atomic fence.
    Fence {
        /// Its memory order.
        order: MemoryOrder,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// A heap block of `size` bytes allocated at `addr` (`malloc` and friends).
    Alloc {
        /// The block's first byte.
        addr: u64,
        /// The block's size in bytes.
        size: u64,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// The heap block at `addr` freed.
    Free {
        /// The block's first byte.
        addr: u64,
        /// Where in the program (the site table).
        site: SiteId,
    },

    // --- annotations --------------------------------------------------------------------------
    /// The program named the class of `lock`.
    LockClassName {
        /// The lock.
        lock: ObjectId,
        /// The class name (the string table).
        name: StringId,
    },
    /// Instances of one class nested by a stated rule: this instance is at nesting level
    /// `subclass`.
    LockSubclass {
        /// The lock.
        lock: ObjectId,
        /// The nesting level.
        subclass: u32,
    },
    /// Declared rank of `lock`: locks must be acquired in increasing rank.
    LockRank {
        /// The lock.
        lock: ObjectId,
        /// The declared rank.
        rank: u32,
    },
    /// User-declared happens-before edge: everything before this event in this thread happens
    /// before everything after a `HappensAfter` with the same `tag`.
    HappensBefore {
        /// Pairs a `HappensBefore` with the `HappensAfter` events it orders.
        tag: u64,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// The other end of a `HappensBefore` with the same `tag`: everything after it happens after that event.
    HappensAfter {
        /// Pairs a `HappensBefore` with the `HappensAfter` events it orders.
        tag: u64,
        /// Where in the program (the site table).
        site: SiteId,
    },

    // --- blocking calls (extension events, FORMAT.md §6.6.1) ----------------------------------
    /// About to make a blocking `call` at `site`, which asked to wait at most `timeout_ns`
    /// (a sleep's duration, a poll's timeout; `None`: no limit, or none the call takes). An
    /// extension event: not counted in a chunk's event count, and only a reader that asks for
    /// extensions sees it.
    BlockingBegin {
        /// Which family of calls.
        call: BlockingCall,
        /// Where in the program (the site table).
        site: SiteId,
        /// The longest wait the call asked for, in nanoseconds; `None`: no limit.
        timeout_ns: Option<u64>,
    },
    /// The blocking call this thread began last returned, after `duration_ns`.
    BlockingEnd {
        /// Which family of calls.
        call: BlockingCall,
        /// How long the call took, in nanoseconds.
        duration_ns: u64,
    },

    // --- signal context (extension events, FORMAT.md §6.6.1) ---------------------------------
    /// The thread starts running the program's handler for `signal`: its events up to the
    /// matching `SignalExit` were recorded inside the handler.
    SignalEnter {
        /// The signal number.
        signal: u8,
    },
    /// The handler for `signal` returned.
    SignalExit {
        /// The signal number.
        signal: u8,
    },
    /// The thread's signal mask changed (`pthread_sigmask`, `sigprocmask`), or a thread started
    /// with signals blocked: bit `s - 1` of `blocked` is set when signal `s` is blocked.
    SignalMask {
        /// Bit `s - 1` is set when signal `s` is blocked.
        blocked: u64,
    },
    // --- hand-offs through a pipe, socketpair or eventfd (extension events, §6.6.1) -----------
    /// The thread put `amount` bytes (an eventfd: counter units) into hand-off channel
    /// `channel` through descriptor `fd`, at `site`. A release: its key is fresh, taken before
    /// the real call, so every read that took these bytes comes after it in the merged order.
    HandoffWrite {
        /// The hand-off channel, numbered by the recorder.
        channel: u32,
        /// What the channel is.
        kind: ChannelKind,
        /// The file descriptor of the call.
        fd: u32,
        /// Bytes written (an eventfd: counter units).
        amount: u64,
        /// Where in the program (the site table).
        site: SiteId,
    },
    /// The thread took `amount` bytes (units; a datagram channel: one message of `amount`
    /// bytes) out of `channel`: the oldest written and not yet taken. An acquire.
    HandoffRead {
        /// The hand-off channel, numbered by the recorder.
        channel: u32,
        /// What the channel is.
        kind: ChannelKind,
        /// The file descriptor of the call.
        fd: u32,
        /// Bytes taken (an eventfd: counter units; a datagram channel: the message's size).
        amount: u64,
        /// Where in the program (the site table).
        site: SiteId,
    },
}

/// The coarse category of an event, for statistics and filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// Thread creation, join, detach, exit, fork and exec.
    Thread,
    /// Lock requests, acquisitions and releases, object lifetimes.
    Lock,
    /// Condition-variable waits and wake-ups.
    Condition,
    /// Barrier arrivals and departures.
    Barrier,
    /// `pthread_once`.
    Once,
    /// Semaphore operations.
    Semaphore,
    /// Plain reads and writes.
    Memory,
    /// Atomic accesses and fences.
    Atomic,
    /// Heap allocations and frees.
    Allocation,
    /// Lock classes, ranks and happens-before annotations.
    Annotation,
    /// Blocking calls.
    Blocking,
    /// Signal handlers and masks.
    Signal,
    /// Hand-offs through pipes, socketpairs and eventfds.
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

    /// The event's coarse category.
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
