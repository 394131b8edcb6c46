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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

/// The memory accesses of every thread of a trace: each thread's [`AccessCounts`] records added
/// up, in thread order. One entry of 24 bytes a thread, in one vector (a map's nodes took about
/// 88 bytes a thread, 8.8 MB while a trace of a process that created 10^5 threads was opened).
/// The vector is not shrunk to its length: that would copy it, while the one who keeps the
/// table for long is `stats`, and `analyze` lets it go once the trace is open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessCountTable {
    /// Records as read until [`AccessCountTable::finish`]; then one per thread, by thread.
    counts: Vec<AccessCounts>,
}

impl AccessCountTable {
    /// Takes a record as read. Records are added up by [`AccessCountTable::finish`], so that a
    /// file whose records come in any order costs a sort, never a shift per record.
    pub(crate) fn push(&mut self, record: AccessCounts) {
        self.counts.push(record);
    }

    /// Sorts the records by thread and adds up each thread's.
    pub(crate) fn finish(&mut self) {
        if !self.counts.is_sorted_by_key(|c| c.thread) {
            self.counts.sort_by_key(|c| c.thread);
        }
        self.counts.dedup_by(|later, kept| {
            let same = later.thread == kept.thread;
            if same {
                kept.executed = kept.executed.saturating_add(later.executed);
                kept.recorded = kept.recorded.saturating_add(later.recorded);
            }
            same
        });
    }

    /// The counts of `thread`, if the trace has any.
    pub fn get(&self, thread: ThreadId) -> Option<&AccessCounts> {
        self.counts
            .binary_search_by_key(&thread, |c| c.thread)
            .ok()
            .map(|i| &self.counts[i])
    }

    /// Every thread's counts, in thread order.
    pub fn iter(&self) -> std::slice::Iter<'_, AccessCounts> {
        self.counts.iter()
    }

    /// How many threads have counts.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether the trace has no access counts (a trace cut short, or one older than version
    /// 1.1).
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
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

/// The threads' records by id, packed (a process may create 10^5 threads): a record is a
/// slot by its id from the first one's (a recorder numbers its threads from 0 on, and writes a
/// thread's record whenever it likes, so they come in any order) with a bit for whether it is
/// there, the kernel thread ids and parents are two words a slot (let go by
/// [`ThreadTable::forget_details`] for a pass that does not report them), and the names are
/// kept for the threads the program named only. Records whose id is far from the others (more
/// empty slots than records), or whose parent is the one id a word cannot tell from none, are
/// kept in a map.
#[derive(Clone, Debug, Default)]
pub struct ThreadTable {
    /// The id of slot 0.
    first: ThreadId,
    /// Bit `i % 64` of word `i / 64`: slot `i` holds a record.
    present: Vec<u64>,
    /// Records in slots.
    slotted: usize,
    /// Per slot; empty once the details are let go.
    os_tids: Vec<u32>,
    /// Per slot, [`NO_PARENT`] for none.
    parents: Vec<u32>,
    details_kept: bool,
    /// (slot, name) of the slotted records with a name, by slot.
    names: Vec<(u32, StringId)>,
    other: BTreeMap<ThreadId, ThreadInfo>,
}

/// A slot's parent word for none: a record whose parent is this id is kept in the map.
const NO_PARENT: u32 = u32::MAX;

impl PartialEq for ThreadTable {
    fn eq(&self, other: &Self) -> bool {
        self.values().eq(other.values())
    }
}

impl Eq for ThreadTable {}

impl ThreadTable {
    fn slots(&self) -> usize {
        self.present.len() * 64
    }

    fn is_present(&self, slot: usize) -> bool {
        self.present
            .get(slot / 64)
            .is_some_and(|w| w >> (slot % 64) & 1 == 1)
    }

    /// The slot of `id`'s record, when it has one.
    fn slot(&self, id: ThreadId) -> Option<usize> {
        let slot = id.checked_sub(self.first)? as usize;
        self.is_present(slot).then_some(slot)
    }

    fn name_at(&self, slot: usize) -> Option<StringId> {
        self.names
            .binary_search_by_key(&(slot as u32), |&(s, _)| s)
            .ok()
            .map(|i| self.names[i].1)
    }

    fn slotted_info(&self, slot: usize) -> ThreadInfo {
        let (os_tid, parent) = if self.details_kept {
            let parent = self.parents[slot];
            (self.os_tids[slot], (parent != NO_PARENT).then_some(parent))
        } else {
            (0, None)
        };
        ThreadInfo {
            id: self.first + slot as ThreadId,
            os_tid,
            parent,
            name: self.name_at(slot),
        }
    }

    /// The record of thread `id` (its kernel thread id 0 and parent none once
    /// [`ThreadTable::forget_details`] let them go).
    pub fn get(&self, id: &ThreadId) -> Option<ThreadInfo> {
        match self.slot(*id) {
            Some(slot) => Some(self.slotted_info(slot)),
            None => self.other.get(id).copied(),
        }
    }

    /// The name the program gave thread `id`, as a string id.
    pub fn name(&self, id: ThreadId) -> Option<StringId> {
        match self.slot(id) {
            Some(slot) => self.name_at(slot),
            None => self.other.get(&id)?.name,
        }
    }

    /// Whether thread `id` has a record.
    pub fn contains_key(&self, id: &ThreadId) -> bool {
        self.slot(*id).is_some() || self.other.contains_key(id)
    }

    /// Adds thread `info.id`'s record, replacing one of the same id.
    pub fn insert(&mut self, info: ThreadInfo) {
        if self.slotted == 0 && self.other.is_empty() {
            *self = ThreadTable {
                first: info.id,
                details_kept: true,
                ..ThreadTable::default()
            };
        }
        if info.id < self.first && self.details_kept && !self.other.contains_key(&info.id) {
            self.move_first_to(info.id);
        }
        let slot = info.id.checked_sub(self.first).map(|s| s as usize);
        let fits = slot.filter(|&slot| {
            self.details_kept
                && info.parent != Some(NO_PARENT)
                && !self.other.contains_key(&info.id)
                // No more empty slots than records.
                && (slot < self.slots() || slot < 2 * (self.slotted + 1) + 64)
        });
        let Some(slot) = fits else {
            if let Some(slot) = self.slot(info.id) {
                self.clear_slot(slot);
            }
            self.other.insert(info.id, info);
            return;
        };
        if slot >= self.slots() {
            let words = (slot / 64 + 1).max(2 * self.present.len());
            self.present.resize(words, 0);
            self.os_tids.resize(words * 64, 0);
            self.parents.resize(words * 64, NO_PARENT);
        }
        if !self.is_present(slot) {
            self.present[slot / 64] |= 1 << (slot % 64);
            self.slotted += 1;
        }
        self.os_tids[slot] = info.os_tid;
        self.parents[slot] = info.parent.unwrap_or(NO_PARENT);
        let key = slot as u32;
        match (
            self.names.binary_search_by_key(&key, |&(s, _)| s),
            info.name,
        ) {
            (Ok(i), Some(name)) => self.names[i].1 = name,
            (Ok(i), None) => {
                self.names.remove(i);
            }
            (Err(i), Some(name)) => self.names.insert(i, (key, name)),
            (Err(_), None) => {}
        }
    }

    /// Moves slot 0 down to `id` or below (by as many slots as there are, at least, so that
    /// records that come in falling order move the slots a few times only), when the slots
    /// up to the last record stay no more than twice the records.
    fn move_first_to(&mut self, id: ThreadId) {
        let need = (self.first - id) as usize;
        let used = self
            .present
            .iter()
            .rposition(|&w| w != 0)
            .map_or(0, |w| (w + 1) * 64);
        if used + need >= 2 * (self.slotted + 1) + 64 {
            return;
        }
        let shift = need.max(used).min(self.first as usize);
        let old = std::mem::take(&mut self.present);
        let words = (used + shift).div_ceil(64);
        self.present = vec![0; words];
        for (w, &word) in old.iter().enumerate() {
            let mut word = word;
            while word != 0 {
                let slot = w * 64 + word.trailing_zeros() as usize + shift;
                word &= word - 1;
                self.present[slot / 64] |= 1 << (slot % 64);
            }
        }
        self.os_tids.truncate(used);
        self.parents.truncate(used);
        self.os_tids.splice(0..0, std::iter::repeat_n(0, shift));
        self.parents
            .splice(0..0, std::iter::repeat_n(NO_PARENT, shift));
        self.os_tids.resize(words * 64, 0);
        self.parents.resize(words * 64, NO_PARENT);
        for (slot, _) in &mut self.names {
            *slot += shift as u32;
        }
        self.first -= shift as ThreadId;
    }

    fn clear_slot(&mut self, slot: usize) {
        self.present[slot / 64] &= !(1 << (slot % 64));
        self.slotted -= 1;
        if let Ok(i) = self.names.binary_search_by_key(&(slot as u32), |&(s, _)| s) {
            self.names.remove(i);
        }
    }

    /// Lets the room the records did not take go, once every record is in.
    pub fn finish(&mut self) {
        let used = self
            .present
            .iter()
            .rposition(|&w| w != 0)
            .map_or(0, |w| w + 1);
        self.present.truncate(used);
        self.present.shrink_to_fit();
        if self.details_kept {
            self.os_tids.truncate(used * 64);
            self.os_tids.shrink_to_fit();
            self.parents.truncate(used * 64);
            self.parents.shrink_to_fit();
        }
        self.names.shrink_to_fit();
    }

    /// Lets the kernel thread ids and parents go, for a pass that does not report them (what
    /// `stats` shows): [`ThreadTable::get`] gives 0 and none for them from then on.
    pub fn forget_details(&mut self) {
        self.os_tids = Vec::new();
        self.parents = Vec::new();
        self.details_kept = false;
        for info in self.other.values_mut() {
            info.os_tid = 0;
            info.parent = None;
        }
    }

    /// Threads with a record.
    pub fn len(&self) -> usize {
        self.slotted + self.other.len()
    }

    /// No thread has a record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records by id.
    pub fn values(&self) -> impl Iterator<Item = ThreadInfo> + '_ {
        let mut slotted = self
            .present
            .iter()
            .enumerate()
            .flat_map(|(w, &word)| {
                let mut word = word;
                std::iter::from_fn(move || {
                    (word != 0).then(|| {
                        let bit = word.trailing_zeros() as usize;
                        word &= word - 1;
                        w * 64 + bit
                    })
                })
            })
            .peekable();
        let mut more = self.other.values().peekable();
        std::iter::from_fn(move || match (slotted.peek(), more.peek()) {
            (Some(&slot), Some(b)) if b.id < self.first + slot as ThreadId => more.next().copied(),
            (Some(_), _) => slotted.next().map(|slot| self.slotted_info(slot)),
            (None, _) => more.next().copied(),
        })
    }

    /// The threads' ids, in order.
    pub fn keys(&self) -> impl Iterator<Item = ThreadId> + '_ {
        self.values().map(|t| t.id)
    }

    /// (id, record) by id.
    pub fn iter(&self) -> impl Iterator<Item = (ThreadId, ThreadInfo)> + '_ {
        self.values().map(|t| (t.id, t))
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
    pub access_counts: AccessCountTable,
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
        self.threads.name(id).and_then(|n| self.string(n))
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
            parent: id.checked_sub(1),
            name: (id % 3 == 0).then_some(1000 + id),
        };
        let mut table = ThreadTable::default();
        for id in [0, 1, 5, 9, 3, 2, 12, 7] {
            table.insert(info(id, 100 + id));
        }
        // A record of an id already there replaces it, in order or not.
        table.insert(ThreadInfo {
            name: None,
            ..info(5, 55)
        });
        table.insert(ThreadInfo {
            name: Some(7),
            ..info(3, 33)
        });
        let ids = [0, 1, 2, 3, 5, 7, 9, 12];
        let check = |table: &ThreadTable| {
            assert_eq!(table.len(), ids.len());
            assert_eq!(table.keys().collect::<Vec<_>>(), ids);
            assert_eq!(
                table.iter().map(|(id, t)| (id, t.id)).collect::<Vec<_>>(),
                ids.map(|id| (id, id))
            );
            assert_eq!(table.get(&5).map(|t| (t.os_tid, t.name)), Some((55, None)));
            assert_eq!(
                table.get(&3).map(|t| (t.os_tid, t.name)),
                Some((33, Some(7)))
            );
            assert_eq!(table.get(&7), Some(info(7, 107)));
            assert_eq!(table.get(&9), Some(info(9, 109)));
            assert_eq!(table.name(12), Some(1012));
            assert_eq!(table.name(7), None);
            assert!(!table.contains_key(&4) && !table.contains_key(&13));
        };
        check(&table);
        table.finish();
        assert!(table.other.is_empty());
        check(&table);
        table.forget_details();
        assert_eq!(table.get(&9).map(|t| (t.os_tid, t.parent)), Some((0, None)));
        assert_eq!(table.name(12), Some(1012));
    }

    #[test]
    fn a_thread_table_slots_its_records_by_id_and_keeps_what_a_word_cannot_say() {
        let info = |id, parent| ThreadInfo {
            id,
            os_tid: 7000 + id,
            parent,
            name: None,
        };
        let mut table = ThreadTable::default();
        // Records in no particular order, as threads exit.
        for id in (4..1000).rev().chain(1000..1200) {
            table.insert(info(id, Some(3)));
        }
        assert!(table.other.is_empty());
        // A parent whose id is a slot's "none", and an id far past the others, go to the map.
        table.insert(info(1200, Some(u32::MAX)));
        table.insert(info(1201, None));
        table.insert(info(1_000_000, Some(1)));
        // Below the first slot: the slots move.
        table.insert(info(2, Some(1)));
        table.finish();
        assert_eq!(table.other.len(), 2);
        assert!(table.parents.len() < 2 * 1300);
        assert_eq!(table.len(), 1200);
        assert_eq!(table.get(&1200), Some(info(1200, Some(u32::MAX))));
        assert_eq!(table.get(&1201), Some(info(1201, None)));
        assert_eq!(table.get(&1_000_000), Some(info(1_000_000, Some(1))));
        assert_eq!(table.get(&2), Some(info(2, Some(1))));
        assert_eq!(table.get(&4), Some(info(4, Some(3))));
        assert!(!table.contains_key(&3) && !table.contains_key(&1202));
        let again: Vec<ThreadInfo> = table.values().collect();
        assert_eq!(again.len(), 1200);
        assert!(again.windows(2).all(|w| w[0].id < w[1].id));
        // A slotted record replaced by one whose parent does not fit a slot.
        table.insert(info(10, Some(u32::MAX)));
        assert_eq!(table.get(&10), Some(info(10, Some(u32::MAX))));
        assert_eq!(table.get(&11), Some(info(11, Some(3))));
        assert_eq!(table.values().count(), 1200);
        // What a pass that does not report them lets go.
        table.forget_details();
        let bare = |id| ThreadInfo {
            os_tid: 0,
            parent: None,
            ..info(id, None)
        };
        assert_eq!(table.get(&11), Some(bare(11)));
        assert_eq!(table.get(&10), Some(bare(10)));
        assert!(table.contains_key(&1_000_000));
    }
}
