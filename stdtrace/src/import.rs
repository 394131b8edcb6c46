//! STD text → foresight trace, in one streaming pass.
//!
//! Every name is interned the first time a line uses it, and its table records (a thread, a
//! lock as a static object named after it, a variable as an eight-byte static datum, a
//! location as a symbolised site) are written before the first chunk that can refer to it.
//! Events go into one chunk writer per thread. Memory is the interning tables, a chunk per
//! thread and a state per thread and lock: nothing grows with the number of lines.
//!
//! The line order is the causal order: line *n*'s event gets key 2*n*, the events the import
//! adds (a thread's start before its first line, a joined thread's exit before the join) key
//! 2*n* − 1, so that the merged order is the line order (FORMAT.md §3.3). The lines must make
//! sense as an execution, which is checked as they come, with the line of each mistake: a lock
//! is held by one thread at a time (re-entrantly, as RAPID's locks, Java's monitors, are), a
//! thread is forked before it runs, runs only until it is joined, and waits after a `req`
//! until its `acq`.

use std::io::{self, Read, Write};

use foresight_trace::region::{push_region, RegionKind};
use foresight_trace::tables::{
    ClassKey, DataVariable, EndReason, Frame, FrameSymbol, Header, ModuleInfo, ObjectInfo,
    ObjectKind, Ordering, SiteInfo, SourceLocation, StringEntry, TableRecord, ThreadInfo, Trailer,
};
use foresight_trace::{ChunkWriter, Event, EventKind, LockMode, TraceWriter};

use super::names::{self, Interned, NameError, Names};
use super::parse::{self, Line, Op};

/// The module every imported site, lock and variable lives in: its load address and size.
pub const MODULE_BASE: u64 = 0x1000_0000_0000;
const MODULE_SIZE: u64 = 1 << 44;
/// Where in the module each kind of name is placed (eight bytes each).
const VARIABLES_AT: u64 = 0x1000;
const SITES_AT: u64 = 1 << 40;
const LOCKS_AT: u64 = 1 << 41;

/// The run-time address of variable `v` of an imported trace.
pub fn variable_address(v: u32) -> u64 {
    MODULE_BASE + VARIABLES_AT + 8 * v as u64
}

fn site_frame(s: u32) -> Frame {
    Frame {
        module: 0,
        offset: SITES_AT + 8 * s as u64,
    }
}

fn lock_frame(l: u32) -> Frame {
    Frame {
        module: 0,
        offset: LOCKS_AT + 8 * l as u64,
    }
}

/// Bytes of events per chunk.
const CHUNK_BYTES: usize = 64 << 10;
/// The longest line read.
const MAX_LINE: usize = 1 << 20;

/// A line that cannot be imported: where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    /// The line, 1-based.
    pub line: u64,
    /// The byte column, 1-based, when the fault is in one field.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.column {
            Some(c) => write!(f, "line {}, column {}: {}", self.line, c, self.message),
            None => write!(f, "line {}: {}", self.line, self.message),
        }
    }
}

impl std::error::Error for ImportError {}

/// Why an import stopped.
#[derive(Debug)]
pub enum Failure {
    /// The input is not an STD trace that makes sense.
    Input(ImportError),
    /// Reading the input or writing the trace failed.
    Io(io::Error),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Input(e) => e.fmt(f),
            Failure::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Failure {}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

impl From<ImportError> for Failure {
    fn from(e: ImportError) -> Self {
        Failure::Input(e)
    }
}

/// What an import read and wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// Lines read (blank ones included) and lines that were events, by operation.
    pub lines: u64,
    /// Event lines per operation.
    pub by_op: Vec<(Op, u64)>,
    /// Threads named.
    pub threads: usize,
    /// Locks named.
    pub locks: usize,
    /// Variables named.
    pub variables: usize,
    /// Locations named.
    pub locations: usize,
    /// Events written to the trace (the added thread starts, exits and lock requests too).
    pub events: u64,
    /// `acq` lines after a `req` of another location: the acquisition keeps the request's
    /// site (a foresight acquisition has the site of its request).
    pub acquire_sites_merged: u64,
}

const NO_THREAD: u32 = u32::MAX;

struct ThreadState {
    w: ChunkWriter,
    started: bool,
    /// The line that forked it.
    forked_at: Option<u64>,
    /// The line that joined it: it has exited.
    joined_at: Option<u64>,
    /// The line it first ran at.
    first_line: u64,
    /// A `req` not yet granted: the lock and its line.
    pending: Option<(u32, u64)>,
    /// The site of that request.
    pending_site: u32,
}

#[derive(Clone, Copy)]
struct LockState {
    holder: u32,
    depth: u32,
    since: u64,
}

/// Writes a foresight trace from STD events given one at a time, by line.
pub struct Importer<W: Write> {
    out: TraceWriter<W>,
    threads: Names,
    locks: Names,
    variables: Names,
    locations: Names,
    thread_state: Vec<ThreadState>,
    lock_state: Vec<LockState>,
    next_string: u32,
    by_op: [u64; 9],
    last_line: u64,
    events: u64,
    acquire_sites_merged: u64,
    /// The thread of the last line, by name: consecutive lines are often one thread's.
    last_thread: (Vec<u8>, u32),
}

impl<W: Write> Importer<W> {
    /// An importer writing to `out`; `source` names the input (the module's path).
    pub fn new(out: W, source: &str) -> io::Result<Self> {
        let header = Header {
            producer: format!(
                "foresight {} (import of RAPID STD)",
                env!("CARGO_PKG_VERSION")
            ),
            pid: 0,
            parent_pid: 0,
            command: vec![
                "foresight".into(),
                "import".into(),
                "--from".into(),
                "std".into(),
                source.into(),
            ],
            start_unix_ns: 0,
            ordering: Ordering::GlobalSequence,
            pointer_width: 8,
            stack_depth: 1,
        };
        let mut out = TraceWriter::new(out, &header)?;
        out.table(&TableRecord::String(StringEntry {
            id: 0,
            text: source.into(),
        }))?;
        out.table(&TableRecord::Module(ModuleInfo {
            id: 0,
            path: 0,
            build_id: Vec::new(),
            base: MODULE_BASE,
            size: MODULE_SIZE,
        }))?;
        Ok(Self {
            out,
            threads: Names::new(),
            locks: Names::new(),
            variables: Names::new(),
            locations: Names::new(),
            thread_state: Vec::new(),
            lock_state: Vec::new(),
            next_string: 1,
            by_op: [0; 9],
            last_line: 0,
            events: 0,
            acquire_sites_merged: 0,
            last_thread: (Vec::new(), NO_THREAD),
        })
    }

    fn string(&mut self, text: &str) -> io::Result<u32> {
        let id = self.next_string;
        self.next_string += 1;
        self.out.table(&TableRecord::String(StringEntry {
            id,
            text: text.into(),
        }))?;
        Ok(id)
    }

    /// The id of thread `name`, writing its record when it is new (`parent`: the thread that
    /// forks it, when the fork is where it is first named).
    pub fn thread(&mut self, name: &[u8], parent: Option<u32>, line: u64) -> Result<u32, Failure> {
        let id = match self.threads.intern(name) {
            Ok(Interned::Known(id)) => return Ok(id),
            Ok(Interned::New(id)) => id,
            Err(e) => return Err(name_error(e, line, "thread").into()),
        };
        let text = self.threads.name(id).to_string();
        let s = self.string(&text)?;
        self.out.table(&TableRecord::Thread(ThreadInfo {
            id,
            os_tid: id,
            parent,
            name: Some(s),
        }))?;
        self.thread_state.push(ThreadState {
            w: ChunkWriter::new(id, CHUNK_BYTES),
            started: false,
            forked_at: None,
            joined_at: None,
            first_line: 0,
            pending: None,
            pending_site: 0,
        });
        Ok(id)
    }

    /// The id of lock `name`: a re-entrant mutex whose class is a static variable of that name.
    pub fn lock(&mut self, name: &[u8], line: u64) -> Result<u32, Failure> {
        let id = match self.locks.intern(name) {
            Ok(Interned::Known(id)) => return Ok(id),
            Ok(Interned::New(id)) => id,
            Err(e) => return Err(name_error(e, line, "lock").into()),
        };
        let text = self.locks.name(id).to_string();
        let s = self.string(&text)?;
        let frame = lock_frame(id);
        self.out.table(&TableRecord::Symbol(FrameSymbol {
            frame,
            locations: vec![SourceLocation {
                function: Some(s),
                file: None,
                line: 0,
                column: 0,
            }],
        }))?;
        self.out.table(&TableRecord::Object(ObjectInfo {
            id,
            kind: ObjectKind::RecursiveMutex,
            address: MODULE_BASE + frame.offset,
            generation: 0,
            class: ClassKey::Static(frame),
        }))?;
        self.lock_state.push(LockState {
            holder: NO_THREAD,
            depth: 0,
            since: 0,
        });
        Ok(id)
    }

    /// The id of variable `name`: eight bytes of static data of that name.
    pub fn variable(&mut self, name: &[u8], line: u64) -> Result<u32, Failure> {
        let id = match self.variables.intern(name) {
            Ok(Interned::Known(id)) => return Ok(id),
            Ok(Interned::New(id)) => id,
            Err(e) => return Err(name_error(e, line, "variable").into()),
        };
        if variable_address(id) + 8 > MODULE_BASE + SITES_AT {
            return Err(ImportError {
                line,
                column: None,
                message: "more variables than an imported trace has room for".into(),
            }
            .into());
        }
        let text = self.variables.name(id).to_string();
        let s = self.string(&text)?;
        self.out.table(&TableRecord::DataVariable(DataVariable {
            module: 0,
            offset: VARIABLES_AT + 8 * id as u64,
            size: 8,
            name: s,
            file: None,
            line: 0,
            ty: None,
        }))?;
        Ok(id)
    }

    /// The site of location `text`: symbolised with a file and line when it reads as
    /// `FILE:LINE` or `FUNCTION(FILE:LINE)`, else named by the text itself.
    pub fn location(&mut self, text: &[u8], line: u64) -> Result<u32, Failure> {
        let id = match self.locations.intern(text) {
            Ok(Interned::Known(id)) => return Ok(id),
            Ok(Interned::New(id)) => id,
            Err(e) => return Err(name_error(e, line, "location").into()),
        };
        let text = self.locations.name(id).to_string();
        let loc = match split_location(&text) {
            Some((function, file, n)) => SourceLocation {
                function: match function {
                    Some(f) => Some(self.string(f)?),
                    None => None,
                },
                file: Some(self.string(file)?),
                line: n,
                column: 0,
            },
            None => SourceLocation {
                function: Some(self.string(&text)?),
                file: None,
                line: 0,
                column: 0,
            },
        };
        let frame = site_frame(id);
        self.out.table(&TableRecord::Symbol(FrameSymbol {
            frame,
            locations: vec![loc],
        }))?;
        self.out.table(&TableRecord::Site(SiteInfo {
            id,
            frames: vec![frame],
            first_caller: None,
        }))?;
        Ok(id)
    }

    /// Imports one parsed line.
    pub fn line(&mut self, n: u64, l: &Line<'_>) -> Result<(), Failure> {
        let t = if self.last_thread.0 == l.thread {
            self.last_thread.1
        } else {
            let t = self.thread(l.thread, None, n)?;
            self.last_thread.0.clear();
            self.last_thread.0.extend_from_slice(l.thread);
            self.last_thread.1 = t;
            t
        };
        let target = match l.op {
            Op::Acquire | Op::Release | Op::Request => self.lock(l.target, n)?,
            Op::Read | Op::Write => self.variable(l.target, n)?,
            Op::Fork => self.thread(l.target, Some(t), n)?,
            Op::Join => self.thread(l.target, None, n)?,
            Op::Begin | Op::End => 0,
        };
        let site = self.location(l.location, n)?;
        self.event(n, t, l.op, target, site)
    }

    fn fail(&self, line: u64, message: String) -> Failure {
        Failure::Input(ImportError {
            line,
            column: None,
            message,
        })
    }

    fn push(&mut self, t: u32, key: u64, kind: EventKind) -> Result<(), Failure> {
        let w = &mut self.thread_state[t as usize].w;
        w.push(&Event { key, kind })
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.events += 1;
        Ok(())
    }

    /// Writes thread `t`'s start, before line `n`, if it has not started.
    fn start(&mut self, t: u32, n: u64) -> Result<(), Failure> {
        let s = &mut self.thread_state[t as usize];
        if !s.started {
            s.started = true;
            s.first_line = n;
            self.push(t, 2 * n - 1, EventKind::ThreadStart)?;
        }
        Ok(())
    }

    /// Imports one event: line `n`, thread `t`, and the ids of its target (a lock, a variable
    /// or a thread, by operation) and location.
    pub fn event(&mut self, n: u64, t: u32, op: Op, target: u32, site: u32) -> Result<(), Failure> {
        if n <= self.last_line {
            return Err(self.fail(n, "lines must be given in increasing order".into()));
        }
        self.last_line = n;
        self.by_op[op as usize] += 1;
        let key = 2 * n;
        let state = &self.thread_state[t as usize];
        if let Some(j) = state.joined_at {
            return Err(self.fail(
                n,
                format!(
                    "{} runs after it was joined (line {j})",
                    self.threads.name(t)
                ),
            ));
        }
        if let Some((l, at)) = state.pending {
            if !(op == Op::Acquire && target == l) {
                return Err(self.fail(
                    n,
                    format!(
                        "{} is waiting for {} (its `req` at line {at}) and does something else \
                         before its `acq`",
                        self.threads.name(t),
                        self.locks.name(l)
                    ),
                ));
            }
        }
        self.start(t, n)?;
        match op {
            Op::Acquire => {
                let held = self.lock_state[target as usize];
                if held.holder != NO_THREAD && held.holder != t {
                    return Err(self.fail(
                        n,
                        format!(
                            "{} acquires {}, which {} holds (since line {})",
                            self.threads.name(t),
                            self.locks.name(target),
                            self.threads.name(held.holder),
                            held.since
                        ),
                    ));
                }
                let s = &mut self.thread_state[t as usize];
                if s.pending.take().is_some() {
                    if s.pending_site != site {
                        self.acquire_sites_merged += 1;
                    }
                } else {
                    let previous = s.w.last_key();
                    self.push(
                        t,
                        previous,
                        EventKind::LockRequest {
                            lock: target,
                            mode: LockMode::Exclusive,
                            site,
                        },
                    )?;
                }
                self.push(
                    t,
                    key,
                    EventKind::LockAcquired {
                        lock: target,
                        mode: LockMode::Exclusive,
                    },
                )?;
                let l = &mut self.lock_state[target as usize];
                if l.holder == t {
                    l.depth += 1;
                } else {
                    *l = LockState {
                        holder: t,
                        depth: 1,
                        since: n,
                    };
                }
            }
            Op::Request => {
                let s = &mut self.thread_state[t as usize];
                s.pending = Some((target, n));
                s.pending_site = site;
                self.push(
                    t,
                    key,
                    EventKind::LockRequest {
                        lock: target,
                        mode: LockMode::Exclusive,
                        site,
                    },
                )?;
            }
            Op::Release => {
                let held = self.lock_state[target as usize];
                if held.holder != t {
                    let who = if held.holder == NO_THREAD {
                        "no thread holds it".to_string()
                    } else {
                        format!(
                            "{} holds it (since line {})",
                            self.threads.name(held.holder),
                            held.since
                        )
                    };
                    return Err(self.fail(
                        n,
                        format!(
                            "{} releases {}, which it does not hold: {who}",
                            self.threads.name(t),
                            self.locks.name(target)
                        ),
                    ));
                }
                self.push(t, key, EventKind::LockRelease { lock: target, site })?;
                let l = &mut self.lock_state[target as usize];
                l.depth -= 1;
                if l.depth == 0 {
                    l.holder = NO_THREAD;
                }
            }
            Op::Read | Op::Write => {
                let addr = variable_address(target);
                let kind = if op == Op::Read {
                    EventKind::Read {
                        addr,
                        size: 8,
                        site,
                    }
                } else {
                    EventKind::Write {
                        addr,
                        size: 8,
                        site,
                    }
                };
                self.push(t, key, kind)?;
            }
            Op::Fork => {
                let c = target;
                let child = &self.thread_state[c as usize];
                let name = |s: &Self| s.threads.name(c).to_string();
                if c == t {
                    return Err(self.fail(n, format!("{} forks itself", name(self))));
                }
                if let Some(f) = child.forked_at {
                    return Err(self.fail(
                        n,
                        format!("{} is forked a second time (first at line {f})", name(self)),
                    ));
                }
                if child.started {
                    let first = child.first_line;
                    return Err(self.fail(
                        n,
                        format!(
                            "{} is forked after it ran (its first line is {first})",
                            name(self)
                        ),
                    ));
                }
                self.thread_state[c as usize].forked_at = Some(n);
                self.push(t, key, EventKind::ThreadCreate { child: c, site })?;
            }
            Op::Join => {
                let c = target;
                let child = &self.thread_state[c as usize];
                let name = |s: &Self| s.threads.name(c).to_string();
                if c == t {
                    return Err(self.fail(n, format!("{} joins itself", name(self))));
                }
                if let Some(j) = child.joined_at {
                    return Err(self.fail(
                        n,
                        format!("{} is joined a second time (first at line {j})", name(self)),
                    ));
                }
                if let Some((l, at)) = child.pending {
                    return Err(self.fail(
                        n,
                        format!(
                            "{} is joined while it waits for {} (its `req` at line {at})",
                            name(self),
                            self.locks.name(l)
                        ),
                    ));
                }
                self.start(c, n)?;
                self.push(c, key - 1, EventKind::ThreadExit)?;
                self.thread_state[c as usize].joined_at = Some(n);
                // It has no more events: write them out and free its buffer.
                self.flush_thread(c)?;
                self.thread_state[c as usize].w = ChunkWriter::new(c, 64);
                let previous = self.thread_state[t as usize].w.last_key();
                self.push(t, previous, EventKind::JoinRequest { child: c, site })?;
                self.push(
                    t,
                    key,
                    EventKind::JoinEnd {
                        child: c,
                        joined: true,
                    },
                )?;
            }
            Op::Begin | Op::End => {
                let kind = if op == Op::Begin {
                    RegionKind::Begin
                } else {
                    RegionKind::End
                };
                push_region(&mut self.thread_state[t as usize].w, kind, key, site)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
        }
        if self.thread_state[t as usize].w.is_full() {
            self.flush_thread(t)?;
        }
        Ok(())
    }

    fn flush_thread(&mut self, t: u32) -> io::Result<()> {
        // Records before the chunks that use them (FORMAT.md §4.3).
        self.out.flush_tables()?;
        self.out.write_chunk(&mut self.thread_state[t as usize].w)
    }

    /// Ends every thread that ran and was not joined (a thread still waiting for a lock does
    /// not end: it is blocked), writes the trailer and returns the output and the summary.
    pub fn finish(mut self) -> io::Result<(W, ImportSummary)> {
        let key = 2 * (self.last_line + 1) - 1;
        for t in 0..self.thread_state.len() {
            let s = &self.thread_state[t];
            if s.started && s.joined_at.is_none() && s.pending.is_none() {
                let w = &mut self.thread_state[t].w;
                w.push(&Event {
                    key,
                    kind: EventKind::ThreadExit,
                })
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                self.events += 1;
            }
            self.flush_thread(t as u32)?;
        }
        let summary = ImportSummary {
            lines: self.last_line,
            by_op: ALL_OPS
                .iter()
                .map(|&op| (op, self.by_op[op as usize]))
                .filter(|&(_, n)| n > 0)
                .collect(),
            threads: self.threads.len(),
            locks: self.locks.len(),
            variables: self.variables.len(),
            locations: self.locations.len(),
            events: self.events,
            acquire_sites_merged: self.acquire_sites_merged,
        };
        let out = self.out.finish(Trailer {
            end_unix_ns: 0,
            reason: EndReason::Synthetic,
            event_chunks: 0,
            events: 0,
            events_lost: 0,
        })?;
        Ok((out, summary))
    }
}

const ALL_OPS: [Op; 9] = [
    Op::Acquire,
    Op::Release,
    Op::Read,
    Op::Write,
    Op::Fork,
    Op::Join,
    Op::Begin,
    Op::End,
    Op::Request,
];

fn name_error(e: NameError, line: u64, what: &str) -> ImportError {
    match e {
        NameError::NotUtf8(at) => ImportError {
            line,
            column: None,
            message: format!("the {what} name is not UTF-8 (byte {} of it)", at + 1),
        },
        NameError::TooMany => ImportError {
            line,
            column: None,
            message: format!("more than 2^32 {what} names"),
        },
    }
}

/// `FILE:LINE` → (None, FILE, LINE); `FUNCTION(FILE:LINE)` → (Some(FUNCTION), FILE, LINE).
/// Only the forms that print back to the same text: a line number without a leading zero, above
/// 0, and a non-empty file.
pub fn split_location(text: &str) -> Option<(Option<&str>, &str, u32)> {
    let (function, inner) = match text.strip_suffix(')') {
        Some(t) => {
            let open = t.rfind('(')?;
            let function = &t[..open];
            if function.is_empty() {
                return None;
            }
            (Some(function), &t[open + 1..])
        }
        None => (None, text),
    };
    let colon = inner.rfind(':')?;
    let (file, digits) = (&inner[..colon], &inner[colon + 1..]);
    if file.is_empty()
        || file.contains(['(', ')'])
        || digits.is_empty()
        || digits.starts_with('0')
        || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let line: u32 = digits.parse().ok()?;
    Some((function, file, line))
}

/// Reads STD lines from `input` and imports them: one pass, a buffer of at most a line's
/// length beyond the read size. Blank lines are skipped (they still count in line numbers).
pub fn import_from<R: Read, W: Write>(input: R, importer: &mut Importer<W>) -> Result<(), Failure> {
    for_each_line(input, |n, line| match parse::parse(line) {
        Ok(l) => importer.line(n, &l),
        Err(e) => Err(ImportError {
            line: n,
            column: Some(e.column),
            message: e.message,
        }
        .into()),
    })?;
    Ok(())
}

/// Bytes read from STD input at a time.
const READ: usize = 1 << 20;

/// Bytes left unread at the end of the buffer, so that a name can be read 16 bytes at a time
/// from wherever it starts ([`names::pack_at`]), and a line 24 bytes at a time ([`line_key`]).
const SLACK: usize = 32;

/// Moves the partial line `buf[start..end]` to the front, makes room, and reads more after it:
/// the bytes read (0 at the end of the input). `lines` is the number of lines before the
/// partial one, for the error of a line longer than [`MAX_LINE`].
fn read_more(
    input: &mut impl Read,
    buf: &mut Vec<u8>,
    start: &mut usize,
    end: &mut usize,
    lines: u64,
) -> Result<usize, Failure> {
    if *start > 0 {
        buf.copy_within(*start..*end, 0);
        *end -= *start;
        *start = 0;
    }
    if buf.len() - *end < READ / 2 {
        if *end >= MAX_LINE {
            return Err(ImportError {
                line: lines + 1,
                column: None,
                message: format!("the line is longer than {MAX_LINE} bytes"),
            }
            .into());
        }
        buf.resize(*end + READ, 0);
    }
    loop {
        let room = buf.len() - SLACK;
        match input.read(&mut buf[*end..room]) {
            Ok(k) => return Ok(k),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Calls `f` with each line of `input` that is not blank, and its number (from 1), without its
/// line end (`\n` or `\r\n`); returns the number of lines. One pass, a buffer of at most a
/// line's length beyond the read size.
pub fn for_each_line<R: Read>(
    mut input: R,
    mut f: impl FnMut(u64, &[u8]) -> Result<(), Failure>,
) -> Result<u64, Failure> {
    let mut buf = vec![0u8; READ];
    let mut start = 0usize; // first byte of the current line
    let mut end = 0usize; // bytes held
    let mut n = 0u64;
    let mut one = |n: u64, line: &[u8]| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        f(n, line)
    };
    loop {
        let got = read_more(&mut input, &mut buf, &mut start, &mut end, n)?;
        let eof = got == 0;
        let scan_from = end;
        end += got;
        let mut from = start;
        for nl in memchr::memchr_iter(b'\n', &buf[scan_from..end]) {
            let at = scan_from + nl;
            n += 1;
            one(n, &buf[from..at])?;
            from = at + 1;
        }
        start = from;
        if eof {
            if start < end {
                n += 1;
                one(n, &buf[start..end])?;
            }
            return Ok(n);
        }
    }
}

/// What [`for_each_parsed_line`] hands each line to.
pub(super) trait ParsedLines {
    /// Before line `n` is parsed: its bytes as [`line_key`] packs them, when it has 1 to 23
    /// bytes (the same key, the same bytes); `true` when the sink has dealt with the line (one
    /// it has seen before), and it is not parsed.
    #[inline(always)]
    fn seen(&mut self, _n: u64, _key: Option<[u64; 3]>) -> Result<bool, Failure> {
        Ok(false)
    }

    /// Line `n` (from 1), parsed, and where its names are, to pack them.
    fn line(&mut self, n: u64, l: &Line<'_>, names: Packable<'_>) -> Result<(), Failure>;
}

/// Where the thread, target and location of a line are in the reader's buffer, to pack them
/// as [`names::pack`] does without a branch on their length ([`names::pack_at`]); or, for a
/// line the careful parse read, nothing (they are packed from the slices then).
#[derive(Clone, Copy)]
pub(super) struct Packable<'a> {
    /// Empty, or the buffer with at least 16 bytes after each name.
    buf: &'a [u8],
    starts: [usize; 3],
}

impl Packable<'_> {
    /// Field `k` (0 thread, 1 target, 2 location), which is `name`, packed; (0, 0) for a name
    /// `pack` does not pack (empty, or longer than 15 bytes).
    #[inline(always)]
    pub(super) fn pack(&self, k: usize, name: &[u8]) -> (u64, u64) {
        if self.buf.is_empty() {
            names::pack(name).unwrap_or((0, 0))
        } else {
            names::pack_at(self.buf, self.starts[k], name.len())
        }
    }
}

/// A function as [`ParsedLines`], for the tests.
#[cfg(test)]
struct Each<F>(F);

#[cfg(test)]
impl<F: FnMut(u64, &Line<'_>) -> Result<(), Failure>> ParsedLines for Each<F> {
    fn line(&mut self, n: u64, l: &Line<'_>, names: Packable<'_>) -> Result<(), Failure> {
        for (k, name) in [l.thread, l.target, l.location].into_iter().enumerate() {
            let want = super::names::pack(name).unwrap_or((0, 0));
            assert_eq!(names.pack(k, name), want, "line {n}, field {k}");
        }
        (self.0)(n, l)
    }
}

/// Hands `sink` each line of `input` that is not blank, parsed, and its number (from 1); a
/// line that is not STD is an error naming its line and column. The same lines as
/// [`for_each_line`] and [`parse::parse`] give, found faster: one scan of the buffer, 64
/// bytes at a time, finds each line's end and its two `|` together; a line whose shape is
/// anything but the usual is handed to [`parse::parse`] whole. The names can be packed from
/// the buffer where they are (16 bytes from where each starts: the buffer keeps [`SLACK`]
/// bytes after what it holds).
pub(super) fn for_each_parsed_line<R: Read, S: ParsedLines>(
    mut input: R,
    sink: &mut S,
) -> Result<u64, Failure> {
    let mut buf = vec![0u8; READ];
    let mut start = 0usize; // first byte of the current line
    let mut end = 0usize; // bytes held
    let mut n = 0u64;
    // The careful way, for a line the scan did not make sense of (blank, malformed, `\r\n`
    // with nothing after the second `|`, more than two `|`).
    #[cold]
    fn slow<S: ParsedLines>(sink: &mut S, n: u64, line: &[u8]) -> Result<(), Failure> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        match parse::parse(line) {
            Ok(l) => sink.line(
                n,
                &l,
                Packable {
                    buf: &[],
                    starts: [0; 3],
                },
            ),
            Err(e) => Err(ImportError {
                line: n,
                column: Some(e.column),
                message: e.message,
            }
            .into()),
        }
    }
    loop {
        let got = read_more(&mut input, &mut buf, &mut start, &mut end, n)?;
        let eof = got == 0;
        end += got;
        let whole: &[u8] = &buf;
        let data = &whole[..end];
        // The lines ending in this buffer, 64 bytes at a time: a line for each `\n`, its `|`
        // from the masks of this block and the one before (a line that starts before that one
        // is read the slower way). One branch per line, none per `|`. The partial line left by
        // the last read is scanned again from its start.
        let mut from = start;
        let mut i = start;
        let mut before = 0u64; // the `|` of the 64 bytes before `i`
        while i < end {
            let (newlines, bars) = match data.get(i..i + 64) {
                Some(block) => parse::newlines_and_bars(block.try_into().expect("64 bytes")),
                None => {
                    let mut last = [0u8; 64];
                    last[..end - i].copy_from_slice(&data[i..]);
                    parse::newlines_and_bars(&last)
                }
            };
            let window = before as u128 | (bars as u128) << 64;
            let mut newlines = newlines;
            while newlines != 0 {
                let at = i + newlines.trailing_zeros() as usize;
                newlines &= newlines - 1;
                n += 1;
                if sink.seen(n, line_key(whole, from, at))? {
                    from = at + 1;
                    continue;
                }
                let line = if from + 64 >= i && at - from <= 64 {
                    // The `|` from the line's start on: bit 0 for `from`.
                    let mine = (window >> (from + 64 - i)) as u64;
                    fast_line(whole, from, at, mine)
                } else {
                    None
                };
                match line {
                    Some((l, starts)) => sink.line(n, &l, Packable { buf: whole, starts })?,
                    None => slow(sink, n, &data[from..at])?,
                }
                from = at + 1;
            }
            before = bars;
            i += 64;
        }
        start = from;
        if eof {
            if start < end {
                n += 1;
                sink.seen(n, None)?;
                slow(sink, n, &buf[start..end])?;
            }
            return Ok(n);
        }
    }
}

/// The line `buf[from..at]` packed in three words when it has 1 to 23 bytes: its bytes in
/// order, zeros after them, the length in the top byte; `buf` holds 24 bytes from `from`.
#[inline(always)]
pub(super) fn line_key(buf: &[u8], from: usize, at: usize) -> Option<[u64; 3]> {
    let len = at - from;
    if len == 0 || len > 23 {
        return None;
    }
    let bytes: &[u8; 24] = buf[from..from + 24].try_into().expect("24 bytes");
    let word = |k: usize| u64::from_le_bytes(bytes[8 * k..8 * k + 8].try_into().expect("8"));
    let keep = &LINE_MASKS[len];
    Some([
        word(0) & keep[0],
        word(1) & keep[1],
        (word(2) & keep[2]) | (len as u64) << 56,
    ])
}

/// By length: the bits of each of three words that hold a line's bytes.
const LINE_MASKS: [[u64; 3]; 24] = {
    let mut t = [[0; 3]; 24];
    let mut len: usize = 0;
    while len < 24 {
        let mut k = 0;
        while k < 3 {
            let bytes = len.saturating_sub(8 * k);
            t[len][k] = if bytes >= 8 {
                u64::MAX
            } else {
                (1 << (8 * bytes)) - 1
            };
            k += 1;
        }
        len += 1;
    }
    t
};

/// The line `buf[from..at]` (at most 64 bytes), whose `|` are the bits of `bars` (bit 0 for
/// `from`; more bits after the line's end), when it has
/// the usual shape (what [`parse::parse`] would return for it), and where its names start;
/// `None` for anything else. `buf` holds at least 16 bytes after `at`. The operation is
/// recognised by its first two bytes (a table by their xor), then checked whole: one
/// branch on what it is, where comparing the words would take several.
#[inline(always)]
fn fast_line(buf: &[u8], from: usize, at: usize, bars: u64) -> Option<(Line<'_>, [usize; 3])> {
    // The first three `|`: two in the line, not at its start, and no third (64 for none).
    let second = bars & bars.wrapping_sub(1);
    let third = second & second.wrapping_sub(1);
    let (first, second, third) = (
        bars.trailing_zeros() as usize,
        second.trailing_zeros() as usize,
        third.trailing_zeros() as usize,
    );
    if first == 0 || second >= at - from || third < at - from {
        return None;
    }
    let (bar1, bar2) = (from + first, from + second);
    let word = u64::from_le_bytes(buf[bar1 + 1..bar1 + 9].try_into().expect("eight bytes"));
    let field_len = bar2 - bar1 - 1;
    let kind = &KEYWORDS[((word ^ word >> 8) & 31) as usize];
    let (op, open) = match kind.op {
        Some(op) if word & kind.mask == kind.word => (op, kind.open),
        // `req`, which shares `re` with `rel`, and anything unusual: by the slices.
        _ => {
            let field = &buf[bar1 + 1..bar2];
            let open = field.iter().position(|&b| b == b'(').unwrap_or(field.len());
            (Op::from_keyword(&field[..open])?, open)
        }
    };
    let (target, target_at) = if op.has_target() {
        // `OP(` then at least a byte, and `)` ending the field.
        if field_len < open + 3 || buf[bar2 - 1] != b')' {
            return None;
        }
        (&buf[bar1 + open + 2..bar2 - 1], bar1 + open + 2)
    } else {
        if open != field_len {
            return None;
        }
        (&buf[..0], bar2)
    };
    let location = &buf[bar2 + 1..at];
    let location = location.strip_suffix(b"\r").unwrap_or(location);
    Some((
        Line {
            thread: &buf[from..bar1],
            op,
            target,
            location,
        },
        [from, target_at, bar2 + 1],
    ))
}

/// An operation as the field starts: its keyword and `(` (or, without a target, the `|`
/// after it), as the low bytes of a word and the mask of those bytes.
struct Keyword {
    op: Option<Op>,
    word: u64,
    mask: u64,
    /// Where the keyword ends in the field.
    open: usize,
}

/// By the xor of the first two bytes of the field, low five bits: distinct for `r(`, `w(`,
/// `ac`, `re`, `fo`, `jo`, `be` and `en` (`req` is checked the slow way).
const KEYWORDS: [Keyword; 32] = {
    const NONE: Keyword = Keyword {
        op: None,
        word: 0,
        mask: 0,
        open: 0,
    };
    let mut t = [NONE; 32];
    let ops = [
        (Op::Read, b"r(" as &[u8]),
        (Op::Write, b"w("),
        (Op::Acquire, b"acq("),
        (Op::Release, b"rel("),
        (Op::Fork, b"fork("),
        (Op::Join, b"join("),
        (Op::Begin, b"begin|"),
        (Op::End, b"end|"),
    ];
    let mut k = 0;
    while k < ops.len() {
        let (op, text) = ops[k];
        let mut word = 0u64;
        let mut i = 0;
        while i < text.len() {
            word |= (text[i] as u64) << (8 * i);
            i += 1;
        }
        let slot = ((text[0] ^ text[1]) & 31) as usize;
        assert!(t[slot].op.is_none(), "two keywords in one slot");
        t[slot] = Keyword {
            op: Some(op),
            word,
            mask: u64::MAX >> (64 - 8 * text.len()),
            open: text.len() - 1,
        };
        k += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_keys_are_equal_exactly_for_equal_lines() {
        let lines: &[&[u8]] = &[
            b"T",
            b"T\0",
            b"T1|w(x)|1",
            b"T1|w(x)|2",
            b"T1|w(x)|1\r",
            b"T1|r(x)|1",
            b"T12|acq(L3)|1234567",
            b"T12|acq(L3)|12345678",
            b"T12|acq(L3)|123456789ab",
            b"T12|acq(L3)|123456789ac",
            b"",
            b"T12|acq(L3)|123456789abc",
        ];
        let mut seen = std::collections::HashMap::new();
        for &line in lines {
            // Other bytes after the line, as in the reader's buffer.
            let mut buf = line.to_vec();
            buf.extend_from_slice(&[b'|'; 24]);
            let key = line_key(&buf, 0, line.len());
            assert_eq!(key.is_some(), (1..=23).contains(&line.len()), "{line:?}");
            if let Some(key) = key {
                assert_ne!(key[2], 0);
                assert_eq!(seen.insert(key, line), None, "{line:?}");
            }
        }
    }

    /// A reader that hands out a few bytes at a time, so that lines are cut between reads.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 = self.1 % 7 + 1;
            let k = self.1.min(buf.len()).min(self.0.len());
            buf[..k].copy_from_slice(&self.0[..k]);
            self.0 = &self.0[k..];
            Ok(k)
        }
    }

    type Got = (
        Vec<(u64, String)>,
        Result<u64, (u64, Option<usize>, String)>,
    );

    fn collect(r: Result<u64, Failure>, lines: Vec<(u64, String)>) -> Got {
        let r = r.map_err(|e| match e {
            Failure::Input(e) => (e.line, e.column, e.message),
            other => panic!("{other:?}"),
        });
        (lines, r)
    }

    fn show(l: &Line<'_>) -> String {
        format!(
            "{:?} {:?} {:?} {:?}",
            String::from_utf8_lossy(l.thread),
            l.op,
            String::from_utf8_lossy(l.target),
            String::from_utf8_lossy(l.location)
        )
    }

    fn parsed_lines(text: &[u8], trickle: bool) -> Got {
        let mut got = Vec::new();
        let mut each = Each(|n: u64, l: &Line<'_>| {
            got.push((n, show(l)));
            Ok(())
        });
        let r = if trickle {
            for_each_parsed_line(Trickle(text, 0), &mut each)
        } else {
            for_each_parsed_line(text, &mut each)
        };
        collect(r, got)
    }

    fn careful_lines(text: &[u8]) -> Got {
        let mut got = Vec::new();
        let r = for_each_line(text, |n, line| match parse::parse(line) {
            Ok(l) => {
                got.push((n, show(&l)));
                Ok(())
            }
            Err(e) => Err(ImportError {
                line: n,
                column: Some(e.column),
                message: e.message,
            }
            .into()),
        });
        collect(r, got)
    }

    #[test]
    fn the_one_scan_reads_lines_as_the_careful_parse_does() {
        let good = "T0|acq(L34)|120\nmain|fork(T1)|1\r\nT1|r(local.T1)|161\n\n  \n\
                    T1|w(x)|\nT1|begin|7\nT1|end|(\nT1|acq(f()::m)|1\nT1|req(a(b))|c(d)\n\
                    a-long-thread-name|w(some.variable[12])|File.java:1234\nT1|join(T2)|\
                    x\nT1|rel(L34)|a(b\nT2|r(v)|1\r\n\r\nT2|w(v)|last";
        let bad = [
            "T0 acq(l) 1",
            "|acq(l)|1",
            "T0|acq(l)",
            "T0|acq(l)|1|2",
            "T0|lock(l)|1",
            "T0||1",
            "T0|acq|1",
            "T0|acq(l|1",
            "T0|acq()|1",
            "T0|begin(x)|1",
            "T0|end|",
            "T0|r(|1",
            "T0|(x)|1",
            "T0|fork(T1))|1",
            "T0|acq(x)\r|1",
            "T0|rr(x)|1",
            "T0|begin|1\r",
        ];
        let mut texts: Vec<String> = vec![good.to_string(), format!("{good}\n")];
        for b in bad {
            texts.push(format!("{good}\n{b}\nT9|w(y)|2\n"));
            texts.push(b.to_string());
        }
        for text in &texts {
            let want = careful_lines(text.as_bytes());
            for trickle in [false, true] {
                assert_eq!(parsed_lines(text.as_bytes(), trickle), want, "{text:?}");
            }
        }
        assert_eq!(careful_lines(good.as_bytes()).0.len(), 13);
    }

    #[test]
    fn locations_that_name_a_file_and_line() {
        assert_eq!(
            split_location("Account.java:67"),
            Some((None, "Account.java", 67))
        );
        assert_eq!(
            split_location("bank.Account.run(Account.java:67)"),
            Some((Some("bank.Account.run"), "Account.java", 67))
        );
        for other in [
            "345", "a.c:0", "a.c:07", ":3", "f(:3)", "a.c:", "(a.c:3)", "x:1a",
        ] {
            assert_eq!(split_location(other), None, "{other}");
        }
    }
}
