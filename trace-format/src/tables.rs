//! The file header, the side tables and the trailer. These are encoded with postcard (serde);
//! `FORMAT.md` gives their field order, which is their wire format. [`Tables`] holds what a
//! reader gathered of them.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::event::{ObjectId, SiteId, StringId, ThreadId};

/// How event keys order events across threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ordering {
    /// Keys come from one global counter, taken inside the critical window of each
    /// synchronising operation: every key of a synchronising event is unique.
    GlobalSequence,
    /// Keys are readings of a clock shared by all cores (e.g. an invariant TSC), taken inside
    /// the critical window; `ticks_per_second` converts them to time. Ties are possible.
    Clock {
        /// Clock ticks per second.
        ticks_per_second: u64,
    },
    /// Keys are Lamport clocks: each thread keeps a counter and each synchronisation object
    /// remembers the largest key released through it; an acquire takes
    /// `max(thread, object) + 1`. Causally ordered events get increasing keys; concurrent ones
    /// may tie (the merged order breaks ties by thread id). No global counter is shared.
    Logical,
}

/// How foresight's recorder names itself in [`Header::producer`] (followed by its version):
/// readers may rely on what that recorder always writes (FORMAT.md §7.8's access counts).
pub const RECORDER_PRODUCER: &str = "foresight-recorder";

/// The file header, written once when recording starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Who wrote the trace, e.g. `foresight-recorder 0.1.0`.
    pub producer: String,
    /// The recorded process's id.
    pub pid: u32,
    /// Its parent's process id.
    pub parent_pid: u32,
    /// The recorded command line.
    pub command: Vec<String>,
    /// Wall-clock start of recording, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// How the keys order events across threads.
    pub ordering: Ordering,
    /// Size in bytes of a pointer of the recorded program.
    pub pointer_width: u8,
    /// Stack depth requested for sites (1: the return address only).
    pub stack_depth: u8,
}

/// What kind of synchronisation object an object id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ObjectKind {
    /// A `pthread_mutex_t` of the default or normal type.
    Mutex,
    /// A recursive mutex: its owner may lock it again.
    RecursiveMutex,
    /// An error-checking mutex: a relock fails with `EDEADLK`.
    ErrorCheckMutex,
    /// A `pthread_rwlock_t`.
    RwLock,
    /// A `pthread_spinlock_t`.
    SpinLock,
    /// A condition variable.
    Condition,
    /// A `pthread_barrier_t`.
    Barrier,
    /// A `pthread_once_t`.
    Once,
    /// A semaphore (`sem_t`).
    Semaphore,
}

impl ObjectKind {
    /// Whether a thread can hold it (a mutex of any type, a rwlock, a spinlock).
    pub fn is_lock(self) -> bool {
        matches!(
            self,
            Self::Mutex
                | Self::RecursiveMutex
                | Self::ErrorCheckMutex
                | Self::RwLock
                | Self::SpinLock
        )
    }

    /// The kind's name, as reports and `dump` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mutex => "mutex",
            Self::RecursiveMutex => "recursive-mutex",
            Self::ErrorCheckMutex => "errorcheck-mutex",
            Self::RwLock => "rwlock",
            Self::SpinLock => "spinlock",
            Self::Condition => "cond",
            Self::Barrier => "barrier",
            Self::Once => "once",
            Self::Semaphore => "semaphore",
        }
    }
}

/// The key that groups lock instances into a class (seed 001: "classes, not instances").
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ClassKey {
    /// A statically allocated object: its address as a module and an offset into it. The
    /// symbol it lives in is found by symbolising that address (a `FrameSymbol` record).
    Static(Frame),
    /// A dynamically allocated object: the call site of its `init`.
    InitSite(SiteId),
    /// Never initialised explicitly: the site of its first use.
    FirstUse(SiteId),
}

/// One synchronisation object: an address with one lifetime.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    /// The object's id, as events name it.
    pub id: ObjectId,
    /// What it is.
    pub kind: ObjectKind,
    /// Its address in the recorded process.
    pub address: u64,
    /// How many objects lived at this address before this one (0 for the first).
    pub generation: u32,
    /// The class it belongs to: what lock-order analysis groups objects by.
    pub class: ClassKey,
}

/// One thread of the recorded process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// The thread's id, as events name it.
    pub id: ThreadId,
    /// The kernel thread id.
    pub os_tid: u32,
    /// The creating thread; `None` for the main thread (or a thread the recorder did not see
    /// created).
    pub parent: Option<ThreadId>,
    /// The thread's name, when the program set one.
    pub name: Option<StringId>,
}

/// A code address: a module and an offset into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Frame {
    /// The module's id.
    pub module: u32,
    /// Offset from the module's load address.
    pub offset: u64,
}

/// A call site: the return address of the hooked call first, then its callers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteInfo {
    /// The site's id, as events name it.
    pub id: SiteId,
    /// Return addresses, innermost first.
    pub frames: Vec<Frame>,
    /// Version 1.13 (appended, skippable): the caller of the function the last frame is in,
    /// at the site's first occurrence, when `frames` holds no callers (one frame per site,
    /// `stack_depth` 1): later occurrences may have had other callers. A record written
    /// before 1.13 reads as none (`scan::decode_site`).
    pub first_caller: Option<Frame>,
}

/// A loaded module (the executable, a shared library).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleInfo {
    /// The module's id, as frames name it.
    pub id: u32,
    /// Its file path.
    pub path: StringId,
    /// The GNU build-id note, when the module has one.
    pub build_id: Vec<u8>,
    /// Load address of the module in the recorded process.
    pub base: u64,
    /// Bytes mapped.
    pub size: u64,
}

/// One source location of a code address; inlined calls give several, innermost first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLocation {
    /// The function, when known.
    pub function: Option<StringId>,
    /// The source file, when known.
    pub file: Option<StringId>,
    /// The line (0: unknown).
    pub line: u32,
    /// The column (0: unknown).
    pub column: u32,
}

/// The symbolised form of one code or data address, written when recording ends. For a data
/// address (a static lock) the location's `function` is the name of the variable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameSymbol {
    /// The address.
    pub frame: Frame,
    /// Its source locations, innermost first.
    pub locations: Vec<SourceLocation>,
}

/// One interned string.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StringEntry {
    /// The string's id.
    pub id: StringId,
    /// The text.
    pub text: String,
}

/// Memory accesses of one thread that reached the recorder (`executed`) and that it wrote
/// (`recorded`): the rest were repeats it dropped (FORMAT.md §7.8). Records of one thread add
/// up: a recorder writes one whenever it closes a stretch of the thread's recording (thread
/// exit, process exit, exec).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessCounts {
    /// The thread.
    pub thread: ThreadId,
    /// Accesses that reached the recorder.
    pub executed: u64,
    /// Accesses written to the trace.
    pub recorded: u64,
}

/// A static variable of a module (FORMAT.md §7.9): a global, a file-level `static` or a
/// function-level `static`, written by the symbolisation pass for the variables that memory
/// accesses touched. Its address is a module and an offset, as a [`Frame`]'s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataVariable {
    /// The module it is in.
    pub module: u32,
    /// Offset of the variable's first byte from the module's load address.
    pub offset: u64,
    /// Bytes the variable occupies.
    pub size: u64,
    /// String id of its name: `counters`, `worker::m` (a function's `static`), `ns::x` (C++).
    pub name: StringId,
    /// String id of the file that declares it, and the line (0 if unknown).
    pub file: Option<StringId>,
    /// The line of the declaration (0: unknown).
    pub line: u32,
    /// The [`DataType`] that lays it out; `None` when it has no parts to name (a scalar, a
    /// pointer) or nothing is known of its type (a name from the ELF symbol table).
    pub ty: Option<u32>,
}

/// The layout of a type, as far as naming an address inside it needs (FORMAT.md §7.10):
/// arrays and records (structs, unions, classes); scalars need no record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataType {
    /// Type id, used by [`DataVariable::ty`], [`TypeShape::Array`] and [`DataMember::ty`].
    pub id: u32,
    /// What it is made of.
    pub shape: TypeShape,
}

/// What a [`DataType`] is made of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TypeShape {
    /// `count` elements of `element_size` bytes (a C array; a multi-dimensional array is an
    /// array of arrays). `count` is `None` when unknown (`extern int x[]`, a flexible member).
    Array {
        /// The element type, when it has a record.
        element: Option<u32>,
        /// Bytes of one element.
        element_size: u64,
        /// Elements, when known.
        count: Option<u64>,
    },
    /// Members at byte offsets (a struct, union or class; base classes are unnamed members).
    Record {
        /// The members, by offset.
        members: Vec<DataMember>,
    },
}

/// One member of a [`TypeShape::Record`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataMember {
    /// String id of its name; `None` for an anonymous struct or union member, or a base class,
    /// whose own members are named as if they were the record's.
    pub name: Option<StringId>,
    /// Its first byte, from the start of the record.
    pub offset: u64,
    /// Bytes it occupies (a bit-field: the bytes its bits touch).
    pub size: u64,
    /// Its type, when it has a record.
    pub ty: Option<u32>,
}

/// A thread that had not exited when its process's trace was completed (version 1.4): the
/// process ended, or recording was stopped, while the thread ran or waited. Such a thread has
/// no `thread-exit` event; this record says what it was doing (FORMAT.md §7.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadEnd {
    /// The thread.
    pub thread: ThreadId,
    /// What it was doing.
    pub state: ThreadEndState,
}

/// What a thread that had not exited was doing when the trace was completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ThreadEndState {
    /// Not inside a recorded wait: running, or blocked in a call the recorder does not
    /// interpose (I/O, sleep, a lock of its own).
    Running,
    /// Inside the blocking call announced by its last event without an outcome: a lock
    /// request (`lock-request`, `read-lock-request`, also a spinlock's), `join-request`,
    /// `cond-wait`, `barrier-arrive`, `sem-wait` or `once-begin`. (A signal handler's events
    /// may follow that event: the innermost such event is the call.)
    Blocked,
    /// The same, in a call with a timeout (`timedlock`, `timedwait`, `timedjoin_np`): it would
    /// have returned when the timeout expired.
    BlockedWithTimeout,
}

/// Recording stopped before the process ended, and why (version 1.4; FORMAT.md §7.13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingStopped {
    /// When it stopped, nanoseconds since the Unix epoch.
    pub unix_ns: u64,
    /// Why it stopped.
    pub cause: StopCause,
}

/// Why recording stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopCause {
    /// A write to the trace failed with this `errno` (`ENOSPC`: the disk is full, `EDQUOT`,
    /// `EIO`, …): the events after it are not in the trace; the program ran on.
    WriteFailed {
        /// The write's `errno`.
        errno: i32,
    },
    /// The next write would have made the file larger than the process may write
    /// (`RLIMIT_FSIZE`, `ulimit -f`), `limit` bytes: the program ran on.
    FileSizeLimit {
        /// The limit, bytes.
        limit: u64,
    },
    /// No thread recorded an event for `ms` milliseconds (`foresight record --hang-timeout`):
    /// the trace was completed and the program stopped. `ms` 0: `foresight record` was killed
    /// while the run went on, and the run was stopped with it.
    HangTimeout {
        /// The timeout, milliseconds (0: the recorder was killed).
        ms: u64,
    },
}

/// The trace holds a window of the run, per thread (version 1.6; FORMAT.md §7.14): what the
/// flight recorder (`foresight record --keep-last`) kept of one thread and what it dropped.
/// A trace with at least one such record is a window; a thread without one lost nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingWindow {
    /// The thread.
    pub thread: ThreadId,
    /// The sequence number of the thread's first chunk in the window (its chunks before it
    /// were dropped, not lost): a reader expects the thread's chunks from here.
    pub first_sequence: u32,
    /// Events of the thread recorded and dropped before the window.
    pub events_dropped: u64,
    /// Wall-clock end of the last dropped chunk, nanoseconds since the Unix epoch (0: none
    /// dropped): the thread's window starts after it.
    pub dropped_until_ns: u64,
    /// The bound the window was kept within (`--keep-last`), bytes.
    pub keep_last: u64,
    /// Version 1.8 (appended, skippable): the signal on which the window was written as a
    /// snapshot while the process ran on (`foresight record --dump-on`); 0: not a snapshot.
    /// A 1.6 or 1.7 record, which ends before it, reads as 0 (`scan::decode_window`).
    pub snapshot_signal: u32,
}

/// A lock-order edge seen in events dropped before the window (version 1.6; FORMAT.md §7.15):
/// a thread holding `held` requested `requested`, `count` times before the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlierLockOrder {
    /// The lock held.
    pub held: ObjectId,
    /// The lock requested while `held` was held.
    pub requested: ObjectId,
    /// How many times.
    pub count: u64,
    /// One thread that took the pair, the site where it acquired `held` and where it
    /// requested `requested` (its first time).
    pub thread: ThreadId,
    /// Where that thread acquired `held`.
    pub held_site: SiteId,
    /// Where it requested `requested`.
    pub site: SiteId,
}

/// A record of a table chunk. Records are framed by a tag and a length in the chunk, so that a
/// reader skips the tags it does not know (a later minor version may add some).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableRecord {
    /// An interned string.
    String(StringEntry),
    /// A thread.
    Thread(ThreadInfo),
    /// A synchronisation object.
    Object(ObjectInfo),
    /// A call site.
    Site(SiteInfo),
    /// A loaded module.
    Module(ModuleInfo),
    /// The symbols of a code or data address.
    Symbol(FrameSymbol),
    /// A thread's access counts.
    AccessCounts(AccessCounts),
    /// A static variable.
    DataVariable(DataVariable),
    /// A type layout.
    DataType(DataType),
    /// A thread that had not exited.
    ThreadEnd(ThreadEnd),
    /// Recording stopped early.
    RecordingStopped(RecordingStopped),
    /// A thread's flight-recorder window.
    RecordingWindow(RecordingWindow),
    /// A lock-order edge from before the window.
    EarlierLockOrder(EarlierLockOrder),
}

impl TableRecord {
    pub(crate) fn tag(&self) -> u8 {
        match self {
            Self::String(_) => 1,
            Self::Thread(_) => 2,
            Self::Object(_) => 3,
            Self::Site(_) => 4,
            Self::Module(_) => 5,
            Self::Symbol(_) => 6,
            Self::AccessCounts(_) => 7,
            Self::DataVariable(_) => 8,
            Self::DataType(_) => 9,
            Self::ThreadEnd(_) => 10,
            Self::RecordingStopped(_) => 11,
            Self::RecordingWindow(_) => 12,
            Self::EarlierLockOrder(_) => 13,
        }
    }
}

/// How recording ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// `main` returned or `exit` was called.
    Exit {
        /// The exit status.
        status: i32,
    },
    /// `_exit` was called.
    ImmediateExit {
        /// The exit status.
        status: i32,
    },
    /// A signal (`SIGINT`, `SIGTERM`) ended the process.
    Signal {
        /// The signal number.
        signal: i32,
    },
    /// The trace was written by a tool (builder, import), not a recorded process.
    Synthetic,
}

/// The last chunk of a trace that ended cleanly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trailer {
    /// Wall-clock end of recording, nanoseconds since the Unix epoch.
    pub end_unix_ns: u64,
    /// How recording ended.
    pub reason: EndReason,
    /// Event chunks written, and events in them: a reader compares them with what it found.
    pub event_chunks: u64,
    /// Events in them.
    pub events: u64,
    /// Events the recorder could not write (for example because the disk was full).
    pub events_lost: u64,
}

/// The threads' records by id, with a map's look-ups: a list sorted by id (24 bytes a thread,
/// and a process may create 10^5 threads) while the records come in id order, as a recorder
/// writes them; the few that do not wait in a map until the tables are read
/// ([`ThreadTable::finish`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadTable {
    sorted: Vec<ThreadInfo>,
    out_of_order: BTreeMap<ThreadId, ThreadInfo>,
}

impl ThreadTable {
    /// The record of thread `id`.
    pub fn get(&self, id: &ThreadId) -> Option<&ThreadInfo> {
        match self.sorted.binary_search_by_key(id, |t| t.id) {
            Ok(i) => Some(&self.sorted[i]),
            Err(_) => self.out_of_order.get(id),
        }
    }

    /// Whether thread `id` has a record.
    pub fn contains_key(&self, id: &ThreadId) -> bool {
        self.get(id).is_some()
    }

    /// Adds thread `info.id`'s record, replacing one of the same id.
    pub fn insert(&mut self, info: ThreadInfo) {
        match self.sorted.last() {
            Some(last) if last.id >= info.id => {
                match self.sorted.binary_search_by_key(&info.id, |t| t.id) {
                    Ok(i) => self.sorted[i] = info,
                    Err(_) => {
                        self.out_of_order.insert(info.id, info);
                    }
                }
            }
            _ if self.out_of_order.is_empty() => self.sorted.push(info),
            _ => {
                self.out_of_order.insert(info.id, info);
            }
        }
    }

    /// Merges the records that came out of id order into the sorted list.
    pub fn finish(&mut self) {
        if self.out_of_order.is_empty() {
            self.sorted.shrink_to_fit();
            return;
        }
        let sorted = std::mem::take(&mut self.sorted);
        let more = std::mem::take(&mut self.out_of_order);
        let mut merged = Vec::with_capacity(sorted.len() + more.len());
        let mut more = more.into_values().peekable();
        for t in sorted {
            while let Some(m) = more.next_if(|m| m.id < t.id) {
                merged.push(m);
            }
            merged.push(t);
        }
        merged.extend(more);
        self.sorted = merged;
    }

    /// Threads with a record.
    pub fn len(&self) -> usize {
        self.sorted.len() + self.out_of_order.len()
    }

    /// No thread has a record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records by id.
    pub fn values(&self) -> impl Iterator<Item = &ThreadInfo> + '_ {
        let mut sorted = self.sorted.iter().peekable();
        let mut more = self.out_of_order.values().peekable();
        std::iter::from_fn(move || match (sorted.peek(), more.peek()) {
            (Some(a), Some(b)) if b.id < a.id => more.next(),
            (Some(_), _) => sorted.next(),
            (None, _) => more.next(),
        })
    }

    /// The threads' ids, in order.
    pub fn keys(&self) -> impl Iterator<Item = &ThreadId> + '_ {
        self.values().map(|t| &t.id)
    }

    /// (id, record) by id.
    pub fn iter(&self) -> impl Iterator<Item = (&ThreadId, &ThreadInfo)> + '_ {
        self.values().map(|t| (&t.id, t))
    }
}

/// The side tables of a trace.
#[derive(Clone, Debug, Default)]
pub struct Tables {
    /// Interned strings by id.
    pub strings: HashMap<StringId, String>,
    /// Threads by id.
    pub threads: ThreadTable,
    /// Synchronisation objects by id.
    pub objects: HashMap<ObjectId, ObjectInfo>,
    /// Call sites by id.
    pub sites: HashMap<SiteId, SiteInfo>,
    /// Loaded modules by id.
    pub modules: BTreeMap<u32, ModuleInfo>,
    /// Symbols of the addresses the symbolisation pass resolved.
    pub symbols: HashMap<Frame, FrameSymbol>,
    /// Memory accesses per thread, executed and recorded (the sum of its `AccessCounts`
    /// records; FORMAT.md §7.8).
    pub access_counts: BTreeMap<ThreadId, AccessCounts>,
    /// Static variables by (module, offset) (FORMAT.md §7.9); [`Tables::data_symbol`] names an
    /// address with them.
    pub data_variables: BTreeMap<(u32, u64), DataVariable>,
    /// The layouts of their types, by type id (FORMAT.md §7.10).
    pub data_types: HashMap<u32, DataType>,
    /// The threads that had not exited when the trace was completed, and what each was doing
    /// (FORMAT.md §7.12): they have no `thread-exit`. Empty in a trace cut short (its threads'
    /// ends are unknown) and in traces older than version 1.4 (whose recorder wrote a
    /// `thread-exit` for every thread at the end).
    pub thread_ends: BTreeMap<ThreadId, ThreadEndState>,
    /// Recording stopped before the process ended (FORMAT.md §7.13).
    pub recording_stopped: Option<RecordingStopped>,
    /// The trace is a window of the run (flight recorder, FORMAT.md §7.14): per thread, what
    /// was kept and dropped. Empty: the trace holds the whole run.
    pub window: BTreeMap<ThreadId, RecordingWindow>,
    /// Lock-order edges seen before the window (FORMAT.md §7.15), in file order.
    pub earlier_lock_order: Vec<EarlierLockOrder>,
}

impl Tables {
    /// The sequence number of a thread's first chunk: 0, or in a window (FORMAT.md §7.14)
    /// the first one kept (the dropped ones before it are not missing).
    pub fn first_sequence(&self, thread: ThreadId) -> u32 {
        self.window.get(&thread).map_or(0, |w| w.first_sequence)
    }

    /// Whether the trace is a window of its run (`foresight record --keep-last`).
    pub fn is_window(&self) -> bool {
        !self.window.is_empty()
    }

    /// The signal on which this window was written as a snapshot while the process ran on
    /// (`foresight record --dump-on`, FORMAT.md §7.14): such a trace has no trailer, and is not
    /// cut short.
    pub fn snapshot_signal(&self) -> Option<u32> {
        self.window
            .values()
            .map(|w| w.snapshot_signal)
            .find(|&s| s != 0)
    }

    /// The text of string `id`.
    pub fn string(&self, id: StringId) -> Option<&str> {
        self.strings.get(&id).map(String::as_str)
    }

    /// The innermost source location of a site's first frame, when it was symbolised.
    pub fn site_location(&self, site: SiteId) -> Option<&SourceLocation> {
        let frame = self.sites.get(&site)?.frames.first()?;
        self.symbols.get(frame)?.locations.first()
    }

    /// `function (file:line)` when symbolised, else `module+0xoffset`, else `site#N`.
    pub fn describe_site(&self, site: SiteId) -> String {
        let Some(info) = self.sites.get(&site) else {
            return format!("site#{site}");
        };
        let Some(frame) = info.frames.first() else {
            return format!("site#{site}");
        };
        self.describe_frame(frame)
    }

    /// `function (file:line)` when symbolised, else `module+0xoffset`.
    pub fn describe_frame(&self, frame: &Frame) -> String {
        if let Some(loc) = self.symbols.get(frame).and_then(|s| s.locations.first()) {
            let function = loc.function.and_then(|f| self.string(f));
            let file = loc.file.and_then(|f| self.string(f));
            // A location the program named itself (a Rust `#[track_caller]` site, FORMAT.md
            // §7.7) has a file and line but no function.
            if let (None, Some(file), 1..) = (function, file, loc.line) {
                return format!("{}:{}", short_path(file), loc.line);
            }
            let func = function.unwrap_or("??");
            return match file {
                Some(file) if loc.line > 0 => format!("{func} ({}:{})", short_path(file), loc.line),
                Some(file) => format!("{func} ({})", short_path(file)),
                None => func.to_string(),
            };
        }
        let module = self
            .modules
            .get(&frame.module)
            .and_then(|m| self.string(m.path))
            .map(short_path)
            .unwrap_or("?");
        format!("{module}+{:#x}", frame.offset)
    }

    /// A name for an object: its static variable, else its kind and id.
    pub fn describe_object(&self, id: ObjectId) -> String {
        let Some(info) = self.objects.get(&id) else {
            return format!("object#{id}");
        };
        if let ClassKey::Static(frame) = &info.class {
            if let Some(name) = self
                .symbols
                .get(frame)
                .and_then(|s| s.locations.first())
                .and_then(|l| l.function)
                .and_then(|f| self.string(f))
            {
                return name.to_string();
            }
        }
        format!("{}#{id}", info.kind.name())
    }

    /// The name the program gave thread `id`, if any.
    pub fn thread_name(&self, id: ThreadId) -> Option<&str> {
        self.threads.get(&id)?.name.and_then(|n| self.string(n))
    }
}

fn short_path(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_table_looks_up_and_lists_by_id_whatever_order_its_records_came_in() {
        let info = |id, os_tid| ThreadInfo {
            id,
            os_tid,
            parent: None,
            name: None,
        };
        let mut table = ThreadTable::default();
        for id in [0, 1, 5, 9, 3, 2, 12, 7] {
            table.insert(info(id, 100 + id));
        }
        // A record of an id already there replaces it, in order or not.
        table.insert(info(5, 55));
        table.insert(info(3, 33));
        let ids = [0, 1, 2, 3, 5, 7, 9, 12];
        let check = |table: &ThreadTable| {
            assert_eq!(table.len(), ids.len());
            assert_eq!(table.keys().copied().collect::<Vec<_>>(), ids);
            assert_eq!(
                table.iter().map(|(&id, t)| (id, t.id)).collect::<Vec<_>>(),
                ids.map(|id| (id, id))
            );
            assert_eq!(table.get(&5).map(|t| t.os_tid), Some(55));
            assert_eq!(table.get(&3).map(|t| t.os_tid), Some(33));
            assert_eq!(table.get(&7).map(|t| t.os_tid), Some(107));
            assert!(!table.contains_key(&4) && !table.contains_key(&13));
        };
        check(&table);
        table.finish();
        assert!(table.out_of_order.is_empty());
        check(&table);
    }
}
