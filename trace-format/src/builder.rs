//! Writing traces by hand, for tests and examples: threads, objects and symbolised sites by
//! name, events in the order they are given, keys assigned as a recorder would.
//!
//! ```
//! use foresight_trace::builder::TraceBuilder;
//! let mut b = TraceBuilder::new("example");
//! let main = b.main_thread();
//! let m = b.mutex("m");
//! let here = b.site("main", "example.c", 10);
//! let worker = b.spawn(main, here, "worker");
//! b.lock(worker, m, here);
//! b.unlock(worker, m, here);
//! b.join(main, worker, here);
//! let trace = foresight_trace::Trace::from_bytes("example", b.finish()).unwrap();
//! assert_eq!(trace.threads.len(), 2);
//! ```

use std::collections::HashMap;

use crate::event::{Event, EventKind, LockMode, ObjectId, SiteId, StringId, ThreadId};
use crate::tables::{
    ClassKey, DataType, DataVariable, EndReason, Frame, FrameSymbol, Header, ModuleInfo,
    ObjectInfo, ObjectKind, Ordering, RecordingStopped, SiteInfo, SourceLocation, StringEntry,
    TableRecord, ThreadEnd, ThreadEndState, ThreadInfo, Trailer, TypeShape,
};
use crate::writer::TraceWriter;

/// The module that builder sites and static objects pretend to live in.
const MODULE: u32 = 0;
/// Its load address and size; static variables take the upper half of it.
const MODULE_BASE: u64 = 0x40_0000;
const MODULE_SIZE: u64 = 0x10_0000;
const DATA_START: u64 = 0x8_0000;

/// Builds a trace in memory, thread by thread, for tests and examples: tables, events with keys that respect the ordering invariant, and a trailer.
pub struct TraceBuilder {
    name: String,
    strings: HashMap<String, StringId>,
    records: Vec<TableRecord>,
    events: Vec<Vec<Event>>,
    next_key: u64,
    next_object: ObjectId,
    next_site: SiteId,
    next_offset: u64,
    next_data: u64,
    next_type: u32,
    chunk_bytes: usize,
    compress: crate::compress::CompressMode,
    sites: HashMap<(String, String, u32), SiteId>,
}

impl TraceBuilder {
    /// A builder for a trace of a program called `name`.
    pub fn new(name: &str) -> Self {
        let mut b = Self {
            name: name.to_string(),
            strings: HashMap::new(),
            records: Vec::new(),
            events: Vec::new(),
            next_key: 1,
            next_object: 0,
            next_site: 0,
            next_offset: 0x1000,
            next_data: DATA_START,
            next_type: 0,
            chunk_bytes: 64 << 10,
            compress: crate::compress::CompressMode::Never,
            sites: HashMap::new(),
        };
        let path = b.string(name);
        b.records.push(TableRecord::Module(ModuleInfo {
            id: MODULE,
            path,
            build_id: Vec::new(),
            base: MODULE_BASE,
            size: MODULE_SIZE,
        }));
        b
    }

    /// Compress the event chunks as `mode` says (a 2.x trace unless `Never`, the default).
    pub fn compress(&mut self, mode: crate::compress::CompressMode) -> &mut Self {
        self.compress = mode;
        self
    }

    /// Chunks of about this many bytes (small values make multi-chunk traces for tests).
    pub fn chunk_bytes(&mut self, n: usize) -> &mut Self {
        self.chunk_bytes = n;
        self
    }

    /// Interns `s` in the string table: its id (the same id for the same text).
    pub fn string(&mut self, s: &str) -> StringId {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.strings.len() as StringId;
        self.strings.insert(s.to_string(), id);
        self.records.push(TableRecord::String(StringEntry {
            id,
            text: s.to_string(),
        }));
        id
    }

    fn symbolised_frame(&mut self, function: &str, file: Option<&str>, line: u32) -> Frame {
        let frame = Frame {
            module: MODULE,
            offset: self.next_offset,
        };
        self.next_offset += 0x10;
        let function = Some(self.string(function));
        let file = file.map(|f| self.string(f));
        self.records.push(TableRecord::Symbol(FrameSymbol {
            frame,
            locations: vec![SourceLocation {
                function,
                file,
                line,
                column: 0,
            }],
        }));
        frame
    }

    /// A call site in `function` at `file:line` (the same triple gives the same site).
    pub fn site(&mut self, function: &str, file: &str, line: u32) -> SiteId {
        let key = (function.to_string(), file.to_string(), line);
        if let Some(&id) = self.sites.get(&key) {
            return id;
        }
        let frame = self.symbolised_frame(function, Some(file), line);
        let id = self.next_site;
        self.next_site += 1;
        self.records.push(TableRecord::Site(SiteInfo {
            id,
            frames: vec![frame],
            first_caller: None,
        }));
        self.sites.insert(key, id);
        id
    }

    /// A call site of several frames (the return address first, then its callers), each
    /// symbolised to its inlined calls, innermost first: `(function, file, line)`.
    pub fn stack_site(&mut self, frames: &[&[(&str, &str, u32)]]) -> SiteId {
        let mut out = Vec::with_capacity(frames.len());
        for locations in frames {
            let frame = Frame {
                module: MODULE,
                offset: self.next_offset,
            };
            self.next_offset += 0x10;
            let locations = locations
                .iter()
                .map(|&(function, file, line)| SourceLocation {
                    function: Some(self.string(function)),
                    file: Some(self.string(file)),
                    line,
                    column: 0,
                })
                .collect();
            self.records
                .push(TableRecord::Symbol(FrameSymbol { frame, locations }));
            out.push(frame);
        }
        let id = self.next_site;
        self.next_site += 1;
        self.records.push(TableRecord::Site(SiteInfo {
            id,
            frames: out,
            first_caller: None,
        }));
        id
    }

    /// The address of an object (objects the builder makes live at fixed addresses).
    pub fn address_of(&self, object: ObjectId) -> u64 {
        0x60_0000 + 0x40 * object as u64
    }

    /// A type layout for [`Self::variable`] (member names with [`Self::string`]); its id.
    pub fn data_type(&mut self, shape: TypeShape) -> u32 {
        let id = self.next_type;
        self.next_type += 1;
        self.records
            .push(TableRecord::DataType(DataType { id, shape }));
        id
    }

    /// A static variable of `size` bytes declared at `file:line`, laid out by `ty`, as the
    /// symbolisation pass describes one (FORMAT.md §7.9); its run-time address (16-aligned).
    pub fn variable(
        &mut self,
        name: &str,
        file: &str,
        line: u32,
        size: u64,
        ty: Option<u32>,
    ) -> u64 {
        let offset = self.next_data;
        self.next_data = (offset + size.max(1) + 15) & !15;
        assert!(
            self.next_data <= MODULE_SIZE,
            "the builder's module has room for {} bytes of static variables",
            MODULE_SIZE - DATA_START
        );
        let name = self.string(name);
        let file = Some(self.string(file));
        self.records.push(TableRecord::DataVariable(DataVariable {
            module: MODULE,
            offset,
            size,
            name,
            file,
            line,
            ty,
        }));
        MODULE_BASE + offset
    }

    /// A static array of `count` elements of `element_size` bytes (`int counters[8]`: 4, 8);
    /// its run-time address.
    pub fn array_variable(
        &mut self,
        name: &str,
        file: &str,
        line: u32,
        element_size: u64,
        count: u64,
    ) -> u64 {
        let ty = self.data_type(TypeShape::Array {
            element: None,
            element_size,
            count: Some(count),
        });
        self.variable(name, file, line, element_size * count, Some(ty))
    }

    fn thread_record(&mut self, parent: Option<ThreadId>, name: &str) -> ThreadId {
        let id = self.events.len() as ThreadId;
        let name = Some(self.string(name));
        self.records.push(TableRecord::Thread(ThreadInfo {
            id,
            os_tid: 1000 + id,
            parent,
            name,
        }));
        self.events.push(Vec::new());
        id
    }

    /// The main thread (thread 0), started.
    pub fn main_thread(&mut self) -> ThreadId {
        assert!(
            self.events.is_empty(),
            "main_thread must be the first thread"
        );
        let t = self.thread_record(None, "main");
        self.event(t, EventKind::ThreadStart);
        t
    }

    /// `parent` creates a thread, which starts.
    pub fn spawn(&mut self, parent: ThreadId, site: SiteId, name: &str) -> ThreadId {
        let child = self.thread_record(Some(parent), name);
        self.event(parent, EventKind::ThreadCreate { child, site });
        self.event(child, EventKind::ThreadStart);
        child
    }

    /// A thread that started but whose creation event the trace lacks, as when the process
    /// ended while `parent` was still inside `pthread_create`.
    pub fn spawn_unrecorded(&mut self, parent: ThreadId, name: &str) -> ThreadId {
        let child = self.thread_record(Some(parent), name);
        self.event(child, EventKind::ThreadStart);
        child
    }

    /// `parent` joins `child`; the child exits first if it has not.
    pub fn join(&mut self, parent: ThreadId, child: ThreadId, site: SiteId) {
        self.exit(child);
        self.event(parent, EventKind::JoinRequest { child, site });
        self.event(
            parent,
            EventKind::JoinEnd {
                child,
                joined: true,
            },
        );
    }

    /// The thread's last event (once).
    pub fn exit(&mut self, t: ThreadId) {
        if self.events[t as usize].last().map(|e| e.kind) != Some(EventKind::ThreadExit) {
            self.event(t, EventKind::ThreadExit);
        }
    }

    /// A synchronisation object whose class is a static variable called `name`.
    pub fn object(&mut self, kind: ObjectKind, name: &str) -> ObjectId {
        let frame = self.symbolised_frame(name, None, 0);
        self.object_with_class(kind, ClassKey::Static(frame))
    }

    /// A synchronisation object with an explicit class key.
    pub fn object_with_class(&mut self, kind: ObjectKind, class: ClassKey) -> ObjectId {
        let id = self.next_object;
        self.next_object += 1;
        self.records.push(TableRecord::Object(ObjectInfo {
            id,
            kind,
            address: self.address_of(id),
            generation: 0,
            class,
        }));
        id
    }

    /// A new mutex named `name` (its static variable): its object id.
    pub fn mutex(&mut self, name: &str) -> ObjectId {
        self.object(ObjectKind::Mutex, name)
    }

    /// Appends one event to `t`, with a fresh key when it synchronises.
    pub fn event(&mut self, t: ThreadId, kind: EventKind) {
        let list = &mut self.events[t as usize];
        let key = if kind.synchronises() {
            let k = self.next_key;
            self.next_key += 1;
            k
        } else {
            list.last().map_or(0, |e| e.key)
        };
        list.push(Event { key, kind });
    }

    /// Adds a table record as it is (a flight recorder's window and summary edges, for tests).
    pub fn table_record(&mut self, r: TableRecord) {
        self.records.push(r);
    }

    /// Request then acquire, exclusively.
    pub fn lock(&mut self, t: ThreadId, lock: ObjectId, site: SiteId) {
        self.lock_mode(t, lock, LockMode::Exclusive, site);
    }

    /// Request then acquire, in `mode`.
    pub fn lock_mode(&mut self, t: ThreadId, lock: ObjectId, mode: LockMode, site: SiteId) {
        self.event(t, EventKind::LockRequest { lock, mode, site });
        self.event(t, EventKind::LockAcquired { lock, mode });
    }

    /// Releases `lock`.
    pub fn unlock(&mut self, t: ThreadId, lock: ObjectId, site: SiteId) {
        self.event(t, EventKind::LockRelease { lock, site });
    }

    /// A read of `size` bytes at `addr`.
    pub fn read(&mut self, t: ThreadId, addr: u64, size: u32, site: SiteId) {
        self.event(t, EventKind::Read { addr, size, site });
    }

    /// A write of `size` bytes at `addr`.
    pub fn write(&mut self, t: ThreadId, addr: u64, size: u32, site: SiteId) {
        self.event(t, EventKind::Write { addr, size, site });
    }

    /// The events given so far, per thread.
    pub fn events(&self) -> &[Vec<Event>] {
        &self.events
    }

    fn header(&self) -> Header {
        Header {
            producer: format!("foresight-trace {} (builder)", env!("CARGO_PKG_VERSION")),
            pid: 1,
            parent_pid: 0,
            command: vec![self.name.clone()],
            start_unix_ns: 0,
            ordering: Ordering::GlobalSequence,
            pointer_width: 8,
            stack_depth: 1,
        }
    }

    fn encode(&self, clean: bool) -> Vec<u8> {
        self.encode_ending(clean, EndReason::Synthetic)
    }

    fn encode_ending(&self, clean: bool, reason: EndReason) -> Vec<u8> {
        fn io<T>(e: std::io::Error) -> T {
            panic!("writing to a Vec cannot fail: {e}")
        }
        let mut w = TraceWriter::with_compression(Vec::new(), &self.header(), self.compress)
            .unwrap_or_else(io);
        for r in &self.records {
            w.table(r).unwrap_or_else(io);
        }
        for (t, events) in self.events.iter().enumerate() {
            w.thread_events(t as ThreadId, events, self.chunk_bytes)
                .unwrap_or_else(io);
        }
        if clean {
            let trailer = Trailer {
                end_unix_ns: 0,
                reason,
                event_chunks: 0,
                events: 0,
                events_lost: 0,
            };
            w.finish(trailer).unwrap_or_else(io)
        } else {
            w.abandon().unwrap_or_else(io)
        }
    }

    /// The trace's bytes, ending cleanly: every thread that did not exit exits.
    pub fn finish(mut self) -> Vec<u8> {
        for t in 0..self.events.len() as ThreadId {
            self.exit(t);
        }
        self.encode(true)
    }

    /// The trace's bytes as a recorder leaves them when the process ends (by `reason`) or
    /// recording stops (`stopped`) while threads have not exited: each thread of `ends` gets
    /// that end state and no `thread-exit` (FORMAT.md §7.12); every other thread exits.
    pub fn finish_ended(
        mut self,
        reason: EndReason,
        ends: &[(ThreadId, ThreadEndState)],
        stopped: Option<RecordingStopped>,
    ) -> Vec<u8> {
        for t in 0..self.events.len() as ThreadId {
            if !ends.iter().any(|&(e, _)| e == t) {
                self.exit(t);
            }
        }
        for &(thread, state) in ends {
            self.records
                .push(TableRecord::ThreadEnd(ThreadEnd { thread, state }));
        }
        if let Some(r) = stopped {
            self.records.push(TableRecord::RecordingStopped(r));
        }
        self.encode_ending(true, reason)
    }

    /// The trace's bytes without a trailer, as a recorder that died would leave them.
    pub fn finish_without_trailer(&self) -> Vec<u8> {
        self.encode(false)
    }
}
