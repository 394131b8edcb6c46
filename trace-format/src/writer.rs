//! Writing traces: a per-thread chunk encoder for the recorder's hot path, a table encoder, and a
//! whole-file writer for tools and tests.

use std::io::{self, Write};

use serde::Serialize;

use crate::codec::{self, DeltaState, EncodeError, MAX_EVENT_LEN};
use crate::compress::{CompressMode, Compressor};
use crate::event::{Event, EventKind, LockMode, ObjectId, SiteId, ThreadId};
use crate::frame::{
    write_chunk_header, ChunkKind, EventsPrefix, CHUNK_HEADER_LEN, EVENTS_PREFIX_LEN, FILE_MAGIC,
    MAX_PAYLOAD_LEN, VERSION_MAJOR, VERSION_MAJOR_FEATURES, VERSION_MINOR,
};
use crate::tables::{Header, TableRecord, Trailer};

const EVENTS_START: usize = CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN;

/// Encodes the events of one thread into chunks.
///
/// The buffer is allocated once, in `new`; `push` never reallocates as long as the caller
/// flushes when `is_full` says so (the buffer keeps room for one more event of any kind beyond
/// the chunk size). That makes it usable from the recorder's hooks, where calling the program's
/// allocator is not allowed.
pub struct ChunkWriter {
    buf: Vec<u8>,
    chunk_bytes: usize,
    thread: ThreadId,
    sequence: u32,
    base_key: u64,
    count: u32,
    start_ns: u64,
    /// Pushes while the buffer is shorter than this need nothing else first
    /// (`needs_service`): 0 until the chunk is started (`set_start_ns`), then the flush
    /// threshold. Never more than the threshold, so below it there are at least
    /// `MAX_EVENT_LEN` bytes of spare capacity (`new` reserves them beyond the threshold).
    room_until: usize,
    state: DeltaState,
    /// Compresses each chunk as it is flushed (FORMAT.md §5.3); `None`: chunks are stored.
    compressor: Option<Compressor>,
    /// Where the last event pushed starts and ends, when it is a lock-request at the last key
    /// (no key delta); `request_end` is 0 otherwise (no event ends at 0). The acquisition
    /// that follows it is folded into it ([`fold_request`](Self::fold_request)).
    request_at: usize,
    request_end: usize,
}

/// An object id and a site id encoded once, as the two varints that follow the tag and key
/// delta of a lock event (FORMAT.md §6.4), for a producer that records the same pair again and
/// again: the `ChunkWriter::try_push_*` functions then copy the bytes instead of encoding them.
/// Both ids must fit two varint bytes (below 2^14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedFields {
    /// The object's varint, then the site's, little-endian from bit 16: where they go in a
    /// keyed event's first word (tag, key delta, fields), so that the lane's push only ORs
    /// in the tag and the delta.
    shifted: u64,
    object_len: u8,
    len: u8,
}

impl PackedFields {
    /// Object 0 at site 0: a placeholder for a slot that holds none.
    pub const EMPTY: Self = Self {
        shifted: 0,
        object_len: 1,
        len: 2,
    };

    /// `None` when either id needs more than two varint bytes.
    pub fn new(object: ObjectId, site: SiteId) -> Option<Self> {
        fn two(v: u32) -> Option<(u32, u8)> {
            match v {
                0..0x80 => Some((v, 1)),
                0x80..0x4000 => Some(((v & 0x7f) | 0x80 | (v >> 7) << 8, 2)),
                _ => None,
            }
        }
        let (o, object_len) = two(object)?;
        let (s, site_len) = two(site)?;
        Some(Self {
            shifted: u64::from(o | s << (8 * object_len)) << 16,
            object_len,
            len: object_len + site_len,
        })
    }

    /// The object's id.
    fn object(self) -> ObjectId {
        let bytes = self.bytes();
        if self.object_len == 1 {
            bytes & 0x7f
        } else {
            (bytes & 0x7f) | (bytes >> 8 & 0x7f) << 7
        }
    }

    /// The two varints, from the low byte.
    fn bytes(self) -> u32 {
        (self.shifted >> 16) as u32
    }

    /// The object's bytes alone (a lock-acquired names no site).
    #[inline(always)]
    fn object_only(self) -> Self {
        let mask = if self.object_len == 1 { 0xff } else { 0xffff };
        Self {
            shifted: self.shifted & mask << 16,
            object_len: self.object_len,
            len: self.object_len,
        }
    }
}

impl ChunkWriter {
    /// A writer whose chunks hold about `chunk_bytes` bytes of events.
    pub fn new(thread: ThreadId, chunk_bytes: usize) -> Self {
        Self::with_compression(thread, chunk_bytes, CompressMode::Never)
    }

    /// A writer that compresses its chunks as `mode` says, for a 2.x trace with compressed
    /// chunks (`file_prefix_with`): everything compression needs is allocated here, so that a
    /// flush allocates nothing.
    pub fn with_compression(thread: ThreadId, chunk_bytes: usize, mode: CompressMode) -> Self {
        let chunk_bytes = chunk_bytes.clamp(64, MAX_PAYLOAD_LEN as usize / 2);
        let mut buf = Vec::with_capacity(EVENTS_START + chunk_bytes + MAX_EVENT_LEN);
        buf.resize(EVENTS_START, 0);
        Self {
            buf,
            chunk_bytes,
            thread,
            sequence: 0,
            base_key: 0,
            count: 0,
            start_ns: 0,
            room_until: 0,
            state: DeltaState::starting_at(0),
            compressor: Compressor::new(mode, chunk_bytes + MAX_EVENT_LEN),
            request_at: 0,
            request_end: 0,
        }
    }

    /// How this writer compresses its chunks.
    pub fn compress_mode(&self) -> CompressMode {
        self.compressor
            .as_ref()
            .map_or(CompressMode::Never, Compressor::mode)
    }

    /// The thread whose events this writer encodes.
    pub fn thread(&self) -> ThreadId {
        self.thread
    }

    /// Events in the current chunk.
    pub fn pending_events(&self) -> u32 {
        self.count
    }

    /// The key of the last event pushed (0 before the first).
    pub fn last_key(&self) -> u64 {
        self.state.key
    }

    /// The wall-clock time given for the current chunk's first event (`set_start_ns`).
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// True when the next `push` might not fit without reallocating: flush first.
    ///
    /// The event count needs no check of its own: a chunk holds at most
    /// `MAX_PAYLOAD_LEN / 2` bytes of events plus one, every event takes at least one byte (a
    /// lock-immediate, which counts two, takes three), so the count stays far below `u32::MAX`.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.buf.len() >= EVENTS_START + self.chunk_bytes
    }

    /// True when the chunk is full (flush it) or has not been started since the last flush
    /// (`set_start_ns`): one comparison that lets a producer keep both rare cases out of
    /// its hot path.
    #[inline(always)]
    pub fn needs_service(&self) -> bool {
        self.buf.len() >= self.room_until
    }

    /// Starts the chunk: sets the wall-clock time of its first event (only before it) and
    /// clears `needs_service` until the chunk is full.
    pub fn set_start_ns(&mut self, ns: u64) {
        if self.count == 0 {
            self.start_ns = ns;
        }
        self.room_until = EVENTS_START + self.chunk_bytes;
    }

    /// Appends one event. Keys must not decrease within a thread.
    ///
    /// A lock-acquired that follows its own request, with nothing of the thread between them
    /// in the chunk, is folded into that request: the two become one lock-immediate (FORMAT.md
    /// §6.4, tag `0x1C`/`0x1D`), which every reader decodes as the same two events.
    #[inline]
    pub fn push(&mut self, ev: &Event) -> Result<(), EncodeError> {
        if let EventKind::LockAcquired { lock, mode } = ev.kind {
            if self.buf.len() == self.request_end && self.fold_request(lock, mode, ev.key) {
                return Ok(());
            }
        }
        let at = self.buf.len();
        codec::encode(&mut self.buf, &mut self.state, ev)?;
        // An extension event is not counted (FORMAT.md §6.6).
        self.count += u32::from(!ev.kind.is_extension());
        if matches!(ev.kind, EventKind::LockRequest { .. }) {
            self.note_request(at);
        }
        Ok(())
    }

    /// The event just written at `at` is a lock-request: remembered for `fold_request` when
    /// it took no key delta (a lock-immediate's request is at the previous key).
    #[inline(always)]
    fn note_request(&mut self, at: usize) {
        if self.buf[at] & crate::codec::KEY_FLAG == 0 {
            self.request_at = at;
            self.request_end = self.buf.len();
        }
    }

    /// Folds a lock-acquired of `lock` in `mode` at `key` into the lock-request that is the
    /// chunk's last event (the caller checked that `request_end` is the buffer's end): the
    /// request's tag becomes the lock-immediate's and the acquisition's key delta goes in
    /// after it. The bytes decode to exactly the events that the request and a separate
    /// lock-acquired would, and the event count is the same (a lock-immediate counts two).
    ///
    /// Why: a producer writes the request before it blocks (so that a thread that never gets
    /// the lock shows what it waits for), and whether it had to block depends on the
    /// schedule. Unfolded, a contended lock alternates between two encodings at random, and
    /// a compressor sees noise in a stream that is otherwise the same few events over and
    /// over: on a lock-heavy recording (SQLite, four threads on two free cores) folding took
    /// zstd's output from 0.25 to 0.10 bytes per event.
    ///
    /// False, and nothing changed, when the request is not one of `lock` in `mode` or `key`
    /// is below the last key.
    #[cold]
    #[inline(never)]
    fn fold_request(&mut self, lock: ObjectId, mode: LockMode, key: u64) -> bool {
        use crate::codec::tag;
        let at = self.request_at;
        self.request_end = 0;
        let (request, immediate) = match mode {
            LockMode::Exclusive => (tag::LOCK_REQUEST, tag::LOCK_IMMEDIATE),
            LockMode::Shared => (tag::LOCK_REQUEST_SHARED, tag::LOCK_IMMEDIATE_SHARED),
        };
        if key < self.state.key || self.buf[at] != request {
            return false;
        }
        let mut pos = at + 1;
        if crate::varint::get(&self.buf, &mut pos) != Ok(lock as u64) {
            return false;
        }
        if key == self.state.key {
            self.buf[at] = immediate;
        } else {
            // The delta goes on the end (within the spare room every push keeps) and turns
            // round to just after the tag: the request's object and site move up by its
            // length.
            let end = self.buf.len();
            crate::varint::put(&mut self.buf, key - self.state.key);
            let n = self.buf.len() - end;
            self.buf[at + 1..].rotate_right(n);
            self.buf[at] = immediate | crate::codec::KEY_FLAG;
        }
        self.state.key = key;
        self.count += 1;
        true
    }

    /// Same bytes as [`push`](Self::push), faster for the lock events that dominate a
    /// recording (request, acquired, release): they are written straight into the buffer's
    /// reserved spare room, without the general encoder's per-byte capacity checks. Other
    /// events go through `push`.
    #[inline(always)]
    pub fn push_fast(&mut self, ev: &Event) -> Result<(), EncodeError> {
        use crate::codec::tag;
        match ev.kind {
            EventKind::LockRequest { lock, mode, site } => {
                let t = if mode == LockMode::Exclusive {
                    tag::LOCK_REQUEST
                } else {
                    tag::LOCK_REQUEST_SHARED
                };
                let at = self.buf.len();
                self.put_small(t, ev.key, lock, Some(site), 1)?;
                self.note_request(at);
                Ok(())
            }
            EventKind::LockAcquired { lock, mode } => {
                if self.buf.len() == self.request_end && self.fold_request(lock, mode, ev.key) {
                    return Ok(());
                }
                let t = if mode == LockMode::Exclusive {
                    tag::LOCK_ACQUIRED
                } else {
                    tag::LOCK_ACQUIRED_SHARED
                };
                self.put_small(t, ev.key, lock, None, 1)
            }
            EventKind::LockRelease { lock, site } => {
                self.put_small(tag::LOCK_RELEASE, ev.key, lock, Some(site), 1)
            }
            _ => self.push(ev),
        }
    }

    /// Appends a lock-request of `lock` at `site` immediately followed by its lock-acquired
    /// at `key` (FORMAT.md §6.4, tag `0x1C`/`0x1D`): the request takes the previous key, as
    /// a request pushed on its own would. One event in the bytes, two for every reader (and
    /// in the chunk's event count). For a producer that knows the lock was taken without
    /// waiting; `codec::encode` never produces it, and the pushes of a request
    /// and then its acquisition give it (see [`push`](Self::push)).
    #[inline(always)]
    pub fn push_lock_immediate(
        &mut self,
        lock: ObjectId,
        mode: LockMode,
        site: SiteId,
        key: u64,
    ) -> Result<(), EncodeError> {
        use crate::codec::tag;
        let t = if mode == LockMode::Exclusive {
            tag::LOCK_IMMEDIATE
        } else {
            tag::LOCK_IMMEDIATE_SHARED
        };
        self.put_small(t, key, lock, Some(site), 2)
    }

    /// Tag, key delta and one or two u32 fields, written through a raw pointer into room
    /// reserved up front (at most 1 + 10 + 5 + 5 bytes); `events`: how many events it decodes
    /// to.
    #[inline(always)]
    fn put_small(
        &mut self,
        t: u8,
        key: u64,
        a: u32,
        b: Option<u32>,
        events: u32,
    ) -> Result<(), EncodeError> {
        if self.try_put_small(t, key, a, b, events) {
            return Ok(());
        }
        self.put_small_general(t, key, a, b, events)
    }

    /// The usual case of `put_small`, inline: the key delta and both fields below 128 (one
    /// byte each), and the buffer below `room_until` (room enough, see the field). The event,
    /// at most four bytes, is assembled in a register and stored at once. False, and nothing
    /// changed, otherwise (a key that went backwards wraps to a huge delta and lands here).
    #[inline(always)]
    fn try_put_small(&mut self, t: u8, key: u64, a: u32, b: Option<u32>, events: u32) -> bool {
        if key == self.state.key {
            self.try_put_unkeyed(t, a, b, events)
        } else {
            self.try_put_keyed(t, key, a, b, events)
        }
    }

    /// `try_put_small` for an event at the last key (no key delta).
    #[inline(always)]
    fn try_put_unkeyed(&mut self, t: u8, a: u32, b: Option<u32>, events: u32) -> bool {
        let site = b.unwrap_or(0);
        let len = self.buf.len();
        if a | site >= 0x80 || len >= self.room_until {
            return false;
        }
        let word = t as u32 | a << 8 | site << 16;
        self.put_word(len, word, 2 + b.is_some() as usize, events);
        true
    }

    /// `try_put_small` for an event after the last key (a key delta of 1 to 127).
    #[inline(always)]
    fn try_put_keyed(&mut self, t: u8, key: u64, a: u32, b: Option<u32>, events: u32) -> bool {
        let delta = key.wrapping_sub(self.state.key);
        let site = b.unwrap_or(0);
        let len = self.buf.len();
        if delta | a as u64 | site as u64 >= 0x80 || delta == 0 || len >= self.room_until {
            return false;
        }
        let word = (t | crate::codec::KEY_FLAG) as u32 | (delta as u32) << 8 | a << 16 | site << 24;
        self.put_word(len, word, 3 + b.is_some() as usize, events);
        self.state.key = key;
        true
    }

    /// Stores an event of `n` ≤ 4 bytes, assembled in `word`, at `len` (< `room_until`).
    #[inline(always)]
    fn put_word(&mut self, len: usize, word: u32, n: usize, events: u32) {
        debug_assert!(len < self.room_until && n <= 4);
        // SAFETY: below `room_until` at least MAX_EVENT_LEN (> 4) bytes of spare capacity
        // follow `len` (the callers checked it); the bytes past `n` are spare capacity that
        // later pushes overwrite.
        unsafe {
            self.buf
                .as_mut_ptr()
                .add(len)
                .cast::<u32>()
                .write_unaligned(word.to_le());
            self.buf.set_len(len + n);
        }
        self.count += events;
    }

    /// An event of tag `t` whose fields are `f` (the lock-acquired takes only its object):
    /// the lane's one store. `key` must be 1 to 127 above the last key, or equal to it when
    /// `unkeyed_ok` (a request); the chunk must not need service. False, and nothing changed,
    /// otherwise.
    #[inline(always)]
    fn try_put_packed(
        &mut self,
        t: u8,
        key: u64,
        f: PackedFields,
        unkeyed_ok: bool,
        events: u32,
    ) -> bool {
        let len = self.buf.len();
        if len >= self.room_until {
            return false;
        }
        let delta = key.wrapping_sub(self.state.key);
        let (word, n) = if delta == 0 && unkeyed_ok {
            (t as u64 | f.shifted >> 8, 1 + f.len as usize)
        } else if delta.wrapping_sub(1) < 0x7f {
            let head = (t | crate::codec::KEY_FLAG) as u64 | delta << 8;
            (head | f.shifted, 2 + f.len as usize)
        } else {
            return false;
        };
        // SAFETY: below `room_until` at least MAX_EVENT_LEN (> 8) bytes of spare capacity
        // follow `len`; the bytes past `n` (at most 6) are spare capacity that later pushes
        // overwrite.
        unsafe {
            self.buf
                .as_mut_ptr()
                .add(len)
                .cast::<u64>()
                .write_unaligned(word.to_le());
            self.buf.set_len(len + n);
        }
        self.state.key = key;
        self.count += events;
        true
    }

    /// [`push_lock_immediate`](Self::push_lock_immediate) of the object and site packed in `f`,
    /// when it is cheap: the chunk is started and not full (`needs_service` is false) and `key`
    /// is 1 to 127 above the last key. Otherwise returns false and changes nothing. For a
    /// producer that keeps its hot path free of calls and falls back to the general push.
    #[inline(always)]
    pub fn try_push_lock_immediate(&mut self, f: PackedFields, mode: LockMode, key: u64) -> bool {
        use crate::codec::tag;
        let t = if mode == LockMode::Exclusive {
            tag::LOCK_IMMEDIATE
        } else {
            tag::LOCK_IMMEDIATE_SHARED
        };
        self.try_put_packed(t, key, f, false, 2)
    }

    /// A lock-request, on the terms of
    /// [`try_push_lock_immediate`](Self::try_push_lock_immediate), except that `key` may also
    /// equal the last key.
    #[inline(always)]
    pub fn try_push_lock_request(&mut self, f: PackedFields, mode: LockMode, key: u64) -> bool {
        use crate::codec::tag;
        let t = if mode == LockMode::Exclusive {
            tag::LOCK_REQUEST
        } else {
            tag::LOCK_REQUEST_SHARED
        };
        let at = self.buf.len();
        let done = self.try_put_packed(t, key, f, true, 1);
        if done {
            self.note_request(at);
        }
        done
    }

    /// A lock-acquired of the object in `f` (its site is not part of the event), on the terms
    /// of [`try_push_lock_immediate`](Self::try_push_lock_immediate); folded into its request
    /// when that is the chunk's last event, as [`push`](Self::push) does.
    #[inline(always)]
    pub fn try_push_lock_acquired(&mut self, f: PackedFields, mode: LockMode, key: u64) -> bool {
        use crate::codec::tag;
        if self.buf.len() == self.request_end
            && self.buf.len() < self.room_until
            && self.fold_request(f.object(), mode, key)
        {
            return true;
        }
        let t = if mode == LockMode::Exclusive {
            tag::LOCK_ACQUIRED
        } else {
            tag::LOCK_ACQUIRED_SHARED
        };
        self.try_put_packed(t, key, f.object_only(), false, 1)
    }

    /// A lock-release, on the terms of
    /// [`try_push_lock_immediate`](Self::try_push_lock_immediate).
    #[inline(always)]
    pub fn try_push_lock_release(&mut self, f: PackedFields, key: u64) -> bool {
        self.try_put_packed(crate::codec::tag::LOCK_RELEASE, key, f, false, 1)
    }

    /// A plain read or write (`write`) of `size` bytes at `addr` from `site`, at the last key
    /// (plain accesses take no key of their own), when it is cheap: the chunk is started and
    /// not full, `key` equals the last key and `size` is 1, 2, 4, 8 or 16. The same bytes as
    /// [`push`](Self::push), written straight into the reserved room. Otherwise returns false
    /// and changes nothing.
    #[inline(always)]
    pub fn try_push_access(
        &mut self,
        write: bool,
        size: u32,
        addr: u64,
        site: SiteId,
        key: u64,
    ) -> bool {
        if !size.is_power_of_two() || size > 16 {
            return false;
        }
        self.try_push_access_of(write, size.trailing_zeros(), addr, site, key)
    }

    /// [`try_push_access`](Self::try_push_access) of `1 << log_size` bytes, for a caller that
    /// knows `log_size` is at most 4 (it returns false otherwise).
    #[inline(always)]
    pub fn try_push_access_of(
        &mut self,
        write: bool,
        log_size: u32,
        addr: u64,
        site: SiteId,
        key: u64,
    ) -> bool {
        use crate::codec::tag;
        let len = self.buf.len();
        if len >= self.room_until || key != self.state.key || log_size > 4 {
            return false;
        }
        let t = if write { tag::WRITE_1 } else { tag::READ_1 } + log_size as u8;
        let da = crate::varint::zigzag(addr.wrapping_sub(self.state.addr) as i64);
        let ds = crate::varint::zigzag(site as i64 - self.state.mem_site as i64);
        // SAFETY: below `room_until` at least MAX_EVENT_LEN bytes of spare capacity follow
        // `len`; this writes at most 1 + 10 + 10 of them.
        unsafe {
            let p = self.buf.as_mut_ptr().add(len);
            *p = t;
            let mut n = 1 + put_varint_unrolled(p.add(1), da);
            n += put_varint_unrolled(p.add(n), ds);
            self.buf.set_len(len + n);
        }
        self.state.addr = addr;
        self.state.mem_site = site;
        self.count += 1;
        true
    }

    /// `put_small` for any field values, out of line.
    #[cold]
    #[inline(never)]
    fn put_small_general(
        &mut self,
        t: u8,
        key: u64,
        a: u32,
        b: Option<u32>,
        events: u32,
    ) -> Result<(), EncodeError> {
        if key < self.state.key {
            return Err(EncodeError::KeyWentBackwards {
                key,
                previous: self.state.key,
            });
        }
        const ROOM: usize = 21;
        if self.buf.capacity() - self.buf.len() < ROOM {
            self.buf.reserve(ROOM);
        }
        let delta = key - self.state.key;
        let len = self.buf.len();
        // SAFETY: at least ROOM bytes of spare capacity follow `len` (checked above), and at
        // most 1 + 10 + 5 + 5 = ROOM bytes are written: a tag, a u64 varint, two u32 varints.
        unsafe {
            let p = self.buf.as_mut_ptr().add(len);
            let mut n = 1;
            if delta != 0 {
                *p = t | crate::codec::KEY_FLAG;
                n += put_varint_raw(p.add(n), delta);
            } else {
                *p = t;
            }
            n += put_varint_raw(p.add(n), a as u64);
            if let Some(b) = b {
                n += put_varint_raw(p.add(n), b as u64);
            }
            self.buf.set_len(len + n);
        }
        self.state.key = key;
        self.count += events;
        Ok(())
    }

    /// Appends an extension event (FORMAT.md §6.6): `tag` (in `0x60..=0x7F`), a key delta when
    /// `key` differs from the last key, the body's length and the body. It is not counted in
    /// the chunk's event count and leaves the memory delta state alone, as readers that skip it
    /// expect. For tools (the region markers of `region.rs`), not the recorder's hot path: it
    /// may grow the buffer.
    pub fn push_extension(&mut self, tag: u8, key: u64, body: &[u8]) -> Result<(), EncodeError> {
        debug_assert!(crate::codec::EXTENSION_TAGS.contains(&tag));
        if key < self.state.key {
            return Err(EncodeError::KeyWentBackwards {
                key,
                previous: self.state.key,
            });
        }
        if key != self.state.key {
            self.buf.push(tag | crate::codec::KEY_FLAG);
            crate::varint::put(&mut self.buf, key - self.state.key);
            self.state.key = key;
        } else {
            self.buf.push(tag);
        }
        crate::varint::put(&mut self.buf, body.len() as u64);
        self.buf.extend_from_slice(body);
        Ok(())
    }

    /// Frames the current chunk, hands its bytes to `sink` and starts the next chunk. Does
    /// nothing (and does not call `sink`) when the chunk is empty.
    pub fn flush_into<R>(&mut self, end_ns: u64, sink: impl FnOnce(&[u8]) -> R) -> Option<R> {
        // Empty: no events and no extension events (a chunk of extension events alone is
        // flushed too, so that none is lost).
        if self.buf.len() == EVENTS_START {
            return None;
        }
        let prefix = EventsPrefix {
            thread: self.thread,
            sequence: self.sequence,
            base_key: self.base_key,
            event_count: self.count,
            start_ns: self.start_ns,
            end_ns,
        };
        prefix.write_to(&mut self.buf[CHUNK_HEADER_LEN..EVENTS_START]);
        let compressed = match &mut self.compressor {
            Some(c) => c.compress_chunk(&self.buf),
            None => None,
        };
        let r = match compressed {
            Some(bytes) => sink(bytes),
            None => {
                let (header, payload) = self.buf.split_at_mut(CHUNK_HEADER_LEN);
                write_chunk_header(header, ChunkKind::Events, payload);
                sink(&self.buf)
            }
        };
        self.sequence = self.sequence.wrapping_add(1);
        self.base_key = self.state.key;
        self.state = DeltaState::starting_at(self.base_key);
        self.count = 0;
        self.start_ns = end_ns;
        self.room_until = 0;
        self.request_end = 0;
        self.buf.truncate(EVENTS_START);
        Some(r)
    }
}

/// LEB128 of `v` at `p`; returns the bytes written (at most 10).
///
/// # Safety
/// `p` is valid for writing 10 bytes (5 when `v` fits in 32 bits).
#[inline(always)]
unsafe fn put_varint_raw(p: *mut u8, mut v: u64) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        // SAFETY: n < 10 here (a u64 has at most 10 groups of 7 bits); the caller's contract.
        unsafe { *p.add(n) = v as u8 | 0x80 };
        n += 1;
        v >>= 7;
    }
    // SAFETY: as above.
    unsafe { *p.add(n) = v as u8 };
    n + 1
}

/// `put_varint_raw` without a loop for values below 2^14 (most address and site deltas of
/// a program's accesses): one or two bytes written at once, so that the varint's length
/// costs no branch (a plain access writes two varints of varying lengths, and the loop's
/// exit was mispredicted about once an event). The same bytes.
///
/// # Safety
/// `p` is valid for writing 10 bytes.
#[inline(always)]
unsafe fn put_varint_unrolled(p: *mut u8, v: u64) -> usize {
    if v >= 1 << 14 {
        // SAFETY: the caller's contract.
        return unsafe { put_varint_raw(p, v) };
    }
    let two = u64::from(v >= 0x80);
    let word = (v & 0x7f) | (two << 7) | ((v << 1) & 0x7f00);
    // SAFETY: the caller's contract: 2 ≤ 10 bytes; the second is spare room when `two` is 0.
    unsafe { std::ptr::write_unaligned(p.cast::<u16>(), (word as u16).to_le()) };
    1 + two as usize
}

/// Encodes side-table records into table chunks.
#[derive(Default)]
pub struct TableWriter {
    buf: Vec<u8>,
    scratch: Vec<u8>,
    records: usize,
}

impl TableWriter {
    /// An empty table chunk.
    pub fn new() -> Self {
        let mut buf = Vec::with_capacity(4096);
        buf.resize(CHUNK_HEADER_LEN, 0);
        Self {
            buf,
            scratch: Vec::new(),
            records: 0,
        }
    }

    /// Whether no record was pushed since the last flush.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Bytes of records waiting to be flushed.
    pub fn pending_bytes(&self) -> usize {
        self.buf.len().saturating_sub(CHUNK_HEADER_LEN)
    }

    /// Appends one record.
    pub fn push(&mut self, record: &TableRecord) {
        if self.buf.len() < CHUNK_HEADER_LEN {
            self.buf.resize(CHUNK_HEADER_LEN, 0);
        }
        self.scratch.clear();
        let scratch = std::mem::take(&mut self.scratch);
        let scratch = match record {
            TableRecord::String(r) => serialize(r, scratch),
            TableRecord::Thread(r) => serialize(r, scratch),
            TableRecord::Object(r) => serialize(r, scratch),
            TableRecord::Site(r) => serialize(r, scratch),
            TableRecord::Module(r) => serialize(r, scratch),
            TableRecord::Symbol(r) => serialize(r, scratch),
            TableRecord::AccessCounts(r) => serialize(r, scratch),
            TableRecord::DataVariable(r) => serialize(r, scratch),
            TableRecord::DataType(r) => serialize(r, scratch),
            TableRecord::ThreadEnd(r) => serialize(r, scratch),
            TableRecord::RecordingStopped(r) => serialize(r, scratch),
            TableRecord::RecordingWindow(r) => serialize(r, scratch),
            TableRecord::EarlierLockOrder(r) => serialize(r, scratch),
        };
        self.buf.push(record.tag());
        crate::varint::put(&mut self.buf, scratch.len() as u64);
        self.buf.extend_from_slice(&scratch);
        self.scratch = scratch;
        self.records += 1;
    }

    /// Frames the pending records as one chunk and hands it to `sink`.
    pub fn flush_into<R>(&mut self, sink: impl FnOnce(&[u8]) -> R) -> Option<R> {
        if self.records == 0 {
            return None;
        }
        let (header, payload) = self.buf.split_at_mut(CHUNK_HEADER_LEN);
        write_chunk_header(header, ChunkKind::Table, payload);
        let r = sink(&self.buf);
        self.buf.truncate(CHUNK_HEADER_LEN);
        self.records = 0;
        Some(r)
    }
}

/// A table chunk built in a caller's buffer, without allocating: the recorder completes a
/// trace from signal handlers, where the allocator's lock may be held by the code they
/// interrupted.
pub struct TableChunkBuf<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> TableChunkBuf<'a> {
    /// An empty chunk in `buf`; `None` if `buf` cannot even hold a chunk header.
    pub fn new(buf: &'a mut [u8]) -> Option<Self> {
        (buf.len() >= CHUNK_HEADER_LEN).then_some(Self {
            buf,
            len: CHUNK_HEADER_LEN,
        })
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == CHUNK_HEADER_LEN
    }

    /// Appends one record; false (and nothing appended) when it does not fit.
    pub fn push(&mut self, record: &TableRecord) -> bool {
        match record_into(record, &mut self.buf[self.len..]) {
            Some(n) => {
                self.len += n;
                true
            }
            None => false,
        }
    }

    /// Frames the records as one chunk: its bytes. The buffer may be filled again after
    /// `clear`.
    pub fn framed(&mut self) -> &[u8] {
        let (header, payload) = self.buf.split_at_mut(CHUNK_HEADER_LEN);
        write_chunk_header(
            header,
            ChunkKind::Table,
            &payload[..self.len - CHUNK_HEADER_LEN],
        );
        &self.buf[..self.len]
    }

    /// Empties it for the next chunk.
    pub fn clear(&mut self) {
        self.len = CHUNK_HEADER_LEN;
    }
}

/// One framed record (tag, length, body) at the start of `out`; its length.
fn record_into(record: &TableRecord, out: &mut [u8]) -> Option<usize> {
    // The body goes after room for the tag and the longest length varint (a u32 takes at
    // most 5 bytes), then moves down next to its length.
    const ROOM: usize = 1 + 5;
    let body = out.get_mut(ROOM..)?;
    let n = match record {
        TableRecord::String(r) => postcard::to_slice(r, body),
        TableRecord::Thread(r) => postcard::to_slice(r, body),
        TableRecord::Object(r) => postcard::to_slice(r, body),
        TableRecord::Site(r) => postcard::to_slice(r, body),
        TableRecord::Module(r) => postcard::to_slice(r, body),
        TableRecord::Symbol(r) => postcard::to_slice(r, body),
        TableRecord::AccessCounts(r) => postcard::to_slice(r, body),
        TableRecord::DataVariable(r) => postcard::to_slice(r, body),
        TableRecord::DataType(r) => postcard::to_slice(r, body),
        TableRecord::ThreadEnd(r) => postcard::to_slice(r, body),
        TableRecord::RecordingStopped(r) => postcard::to_slice(r, body),
        TableRecord::RecordingWindow(r) => postcard::to_slice(r, body),
        TableRecord::EarlierLockOrder(r) => postcard::to_slice(r, body),
    }
    .ok()?
    .len();
    let mut head = [0u8; ROOM];
    head[0] = record.tag();
    let mut v = n as u64;
    let mut h = 1;
    while v >= 0x80 {
        head[h] = (v as u8) | 0x80;
        v >>= 7;
        h += 1;
    }
    head[h] = v as u8;
    h += 1;
    out.copy_within(ROOM..ROOM + n, h);
    out[..h].copy_from_slice(&head[..h]);
    Some(h + n)
}

fn serialize<T: Serialize>(value: &T, out: Vec<u8>) -> Vec<u8> {
    // Serialising plain structs into a Vec cannot fail.
    postcard::to_extend(value, out).expect("postcard serialisation into a Vec")
}

/// The bytes that start a trace: magic, version, and the header.
///
/// A reader refuses a header longer than `MAX_HEADER_LEN` (1 MiB); a command line can be
/// longer than that (Linux allows 2 MiB of arguments), so the command is shortened to fit,
/// with its last kept argument saying how many were dropped, rather than writing a trace no
/// reader opens.
pub fn file_prefix(header: &Header) -> Vec<u8> {
    file_prefix_with(header, 0)
}

/// The bytes that start a trace whose writer may use the required `features` (FORMAT.md §2.1,
/// §3.1): a 1.x prefix when there are none, else a 2.x prefix that lists them.
pub fn file_prefix_with(header: &Header, features: u64) -> Vec<u8> {
    let mut body = serialize(header, Vec::new());
    if body.len() > crate::frame::MAX_HEADER_LEN as usize {
        body = serialize(&header_that_fits(header), Vec::new());
    }
    let mut out = Vec::with_capacity(crate::frame::FILE_PREFIX_LEN_V2 + body.len());
    out.extend_from_slice(&FILE_MAGIC);
    let major = if features == 0 {
        VERSION_MAJOR
    } else {
        VERSION_MAJOR_FEATURES
    };
    out.extend_from_slice(&major.to_le_bytes());
    out.extend_from_slice(&VERSION_MINOR.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    if features == 0 {
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    } else {
        let mut h = crc32fast::Hasher::new();
        h.update(&features.to_le_bytes());
        h.update(&body);
        out.extend_from_slice(&h.finalize().to_le_bytes());
        out.extend_from_slice(&features.to_le_bytes());
    }
    out.extend_from_slice(&body);
    out
}

/// The required features a trace written with `mode` declares.
pub fn features_for(mode: CompressMode) -> u64 {
    mode.features()
}

/// `header` with its command cut to fit the reader's header limit (with room to spare).
fn header_that_fits(header: &Header) -> Header {
    let budget = crate::frame::MAX_HEADER_LEN as usize / 2;
    let mut short = header.clone();
    short.command.clear();
    let mut used = 0usize;
    for arg in &header.command {
        // An argument alone over the budget is cut too (at a character boundary).
        let room = budget.saturating_sub(used);
        if arg.len() + 8 > room {
            let mut end = room.saturating_sub(8).min(arg.len());
            while !arg.is_char_boundary(end) {
                end -= 1;
            }
            if end > 0 {
                short.command.push(arg[..end].to_string());
            }
            break;
        }
        used += arg.len() + 8;
        short.command.push(arg.clone());
    }
    let dropped = header.command.len() - short.command.len();
    short.command.push(format!(
        "[foresight: command shortened to fit the trace header; {dropped} more arguments]"
    ));
    short
}

/// The trailer chunk that marks a clean end.
pub fn trailer_chunk(trailer: &Trailer) -> Vec<u8> {
    let mut out = vec![0; CHUNK_HEADER_LEN];
    let out_payload = serialize(trailer, Vec::new());
    out.extend_from_slice(&out_payload);
    let (header, payload) = out.split_at_mut(CHUNK_HEADER_LEN);
    write_chunk_header(header, ChunkKind::Trailer, payload);
    out
}

/// The trailer chunk written into `buf` without allocating (for a recorder finishing from a
/// signal handler); returns its length, or `None` if `buf` is too small (64 bytes always
/// suffice).
pub fn trailer_chunk_into(trailer: &Trailer, buf: &mut [u8]) -> Option<usize> {
    if buf.len() < CHUNK_HEADER_LEN {
        return None;
    }
    let (header, rest) = buf.split_at_mut(CHUNK_HEADER_LEN);
    let n = postcard::to_slice(trailer, rest).ok()?.len();
    write_chunk_header(header, ChunkKind::Trailer, &rest[..n]);
    Some(CHUNK_HEADER_LEN + n)
}

/// Writes a whole trace to any `Write`: for tools (import, the builder) and tests. The recorder
/// uses the pieces above directly.
pub struct TraceWriter<W: Write> {
    out: W,
    tables: TableWriter,
    event_chunks: u64,
    events: u64,
    compress: CompressMode,
}

impl<W: Write> TraceWriter<W> {
    /// A writer of a 1.x trace: chunks stored as they are.
    pub fn new(out: W, header: &Header) -> io::Result<Self> {
        Self::with_compression(out, header, CompressMode::Never)
    }

    /// A writer whose `thread_events` compress as `mode` says (a 2.x trace unless `Never`).
    pub fn with_compression(mut out: W, header: &Header, mode: CompressMode) -> io::Result<Self> {
        out.write_all(&file_prefix_with(header, features_for(mode)))?;
        Ok(Self {
            out,
            tables: TableWriter::new(),
            event_chunks: 0,
            events: 0,
            compress: mode,
        })
    }

    /// A chunk writer for this trace (compressing as the trace allows).
    pub(crate) fn chunk_writer(&self, thread: ThreadId, chunk_bytes: usize) -> ChunkWriter {
        ChunkWriter::with_compression(thread, chunk_bytes, self.compress)
    }

    /// Appends a table record; the table chunk is written once it holds 32 KiB.
    pub fn table(&mut self, record: &TableRecord) -> io::Result<()> {
        self.tables.push(record);
        if self.tables.pending_bytes() > 32 << 10 {
            self.flush_tables()?;
        }
        Ok(())
    }

    /// Writes the pending table records as one chunk.
    pub fn flush_tables(&mut self) -> io::Result<()> {
        let out = &mut self.out;
        self.tables
            .flush_into(|b| out.write_all(b))
            .unwrap_or(Ok(()))
    }

    /// Writes the events of one thread, in chunks of about `chunk_bytes` bytes.
    pub fn thread_events(
        &mut self,
        thread: ThreadId,
        events: &[Event],
        chunk_bytes: usize,
    ) -> io::Result<()> {
        self.flush_tables()?;
        let mut w = self.chunk_writer(thread, chunk_bytes);
        for ev in events {
            if w.is_full() {
                self.write_chunk(&mut w)?;
            }
            w.push(ev)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        }
        self.write_chunk(&mut w)
    }

    /// Flushes a chunk writer the caller drives itself.
    pub fn write_chunk(&mut self, w: &mut ChunkWriter) -> io::Result<()> {
        let n = w.pending_events() as u64;
        let out = &mut self.out;
        if let Some(r) = w.flush_into(0, |b| out.write_all(b)) {
            r?;
            self.event_chunks += 1;
            self.events += n;
        }
        Ok(())
    }

    /// Writes the trailer (with the chunk and event counts filled in) and returns the sink.
    pub fn finish(mut self, mut trailer: Trailer) -> io::Result<W> {
        self.flush_tables()?;
        trailer.event_chunks = self.event_chunks;
        trailer.events = self.events;
        self.out.write_all(&trailer_chunk(&trailer))?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Ends the file without a trailer, as a writer that died would.
    pub fn abandon(mut self) -> io::Result<W> {
        self.flush_tables()?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_unrolled_varint_writes_the_bytes_of_the_loop() {
        let mut values = vec![
            0u64,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            u64::MAX,
            1 << 56,
            (1 << 56) - 1,
        ];
        // Every length's edges.
        for k in 1..=9 {
            values.extend([(1u64 << (7 * k)) - 1, 1 << (7 * k), (1 << (7 * k)) + 1]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for shift in 0..64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            values.push(x >> shift);
        }
        for v in values {
            let (mut a, mut b) = ([0xaau8; 10], [0xaau8; 10]);
            // SAFETY: both buffers hold 10 bytes.
            let (na, nb) = unsafe {
                (
                    put_varint_raw(a.as_mut_ptr(), v),
                    put_varint_unrolled(b.as_mut_ptr(), v),
                )
            };
            assert_eq!((na, &a[..na]), (nb, &b[..nb]), "{v:#x}");
        }
    }

    use super::*;
    use crate::tables::EndReason;

    /// Encodes `records` as one table chunk into `buf`, as the recorder's allocation-free
    /// paths do: the chunk's length, or `None` when they do not fit.
    fn table_chunk_into(records: &[TableRecord], buf: &mut [u8]) -> Option<usize> {
        let mut chunk = TableChunkBuf::new(buf)?;
        for r in records {
            if !chunk.push(r) {
                return None;
            }
        }
        Some(chunk.framed().len())
    }

    #[test]
    fn table_chunk_into_matches_the_table_writer() {
        use crate::tables::{RecordingStopped, StopCause, ThreadEnd, ThreadEndState};
        let records = [
            TableRecord::ThreadEnd(ThreadEnd {
                thread: 3,
                state: ThreadEndState::Blocked,
            }),
            TableRecord::ThreadEnd(ThreadEnd {
                thread: 300,
                state: ThreadEndState::Running,
            }),
            TableRecord::RecordingStopped(RecordingStopped {
                unix_ns: 1 << 60,
                cause: StopCause::WriteFailed { errno: 28 },
            }),
            TableRecord::String(crate::tables::StringEntry {
                id: 9,
                text: "x".repeat(200),
            }),
        ];
        let mut w = TableWriter::new();
        for r in &records {
            w.push(r);
        }
        let expected = w.flush_into(|b| b.to_vec()).unwrap();
        let mut buf = [0u8; 512];
        let n = table_chunk_into(&records, &mut buf).unwrap();
        assert_eq!(&buf[..n], &expected[..]);
        assert_eq!(
            table_chunk_into(&records, &mut buf[..100]),
            None,
            "too small"
        );
    }

    #[test]
    fn trailer_into_matches_trailer_chunk() {
        let t = Trailer {
            end_unix_ns: u64::MAX,
            reason: EndReason::Signal { signal: -15 },
            event_chunks: u64::MAX,
            events: u64::MAX,
            events_lost: u64::MAX,
        };
        let mut buf = [0u8; 64];
        let n = trailer_chunk_into(&t, &mut buf).unwrap();
        assert_eq!(&buf[..n], &trailer_chunk(&t)[..]);
        assert_eq!(trailer_chunk_into(&t, &mut [0u8; 30]), None);
    }

    #[test]
    fn push_fast_matches_push() {
        use crate::event::{EventKind, LockMode};
        let kinds = |lock: u32, site: u32| {
            vec![
                EventKind::LockRequest {
                    lock,
                    mode: LockMode::Exclusive,
                    site,
                },
                EventKind::LockRequest {
                    lock,
                    mode: LockMode::Shared,
                    site,
                },
                EventKind::LockAcquired {
                    lock,
                    mode: LockMode::Exclusive,
                },
                EventKind::LockAcquired {
                    lock,
                    mode: LockMode::Shared,
                },
                EventKind::LockRelease { lock, site },
                EventKind::ThreadStart,
                EventKind::Read {
                    addr: 0x1000,
                    size: 8,
                    site,
                },
            ]
        };
        let mut a = ChunkWriter::new(3, 1 << 16);
        let mut b = ChunkWriter::new(3, 1 << 16);
        // A started chunk: `push_fast` takes its inline path for small fields.
        a.set_start_ns(5);
        b.set_start_ns(5);
        let mut key = 0u64;
        for (i, (lock, site)) in [(0, 0), (1, 127), (128, 300), (u32::MAX, u32::MAX)]
            .into_iter()
            .enumerate()
        {
            for (j, kind) in kinds(lock, site).into_iter().enumerate() {
                key += [0, 1, 127, 128, 1 << 40][(i + j) % 5];
                let ev = Event { key, kind };
                a.push(&ev).unwrap();
                b.push_fast(&ev).unwrap();
            }
        }
        let back = Event {
            key: 0,
            kind: EventKind::LockRelease { lock: 1, site: 1 },
        };
        assert!(b.push_fast(&back).is_err());
        let ca = a.flush_into(5, |x| x.to_vec()).unwrap();
        let cb = b.flush_into(5, |x| x.to_vec()).unwrap();
        assert_eq!(ca, cb);
    }

    #[test]
    fn packed_fields_fit_two_varint_bytes_each() {
        assert!(PackedFields::new(0, 0).is_some());
        assert!(PackedFields::new(16383, 16383).is_some());
        assert!(PackedFields::new(16384, 0).is_none());
        assert!(PackedFields::new(0, 16384).is_none());
        assert!(PackedFields::new(u32::MAX, 0).is_none());
    }

    #[test]
    fn try_pushes_write_what_push_writes_or_nothing() {
        use crate::event::{EventKind, LockMode};
        let mut general = ChunkWriter::new(1, 1 << 12);
        let mut lane = ChunkWriter::new(1, 1 << 12);
        let f = PackedFields::new(1, 2).unwrap();
        // Not started: the lane refuses and changes nothing.
        assert!(lane.needs_service());
        assert!(!lane.try_push_lock_release(f, 1));
        assert_eq!(lane.pending_events(), 0);
        general.set_start_ns(0);
        lane.set_start_ns(0);
        assert!(!lane.needs_service());
        let mut key = 0;
        let pairs = [
            (1, 2, 0),
            (127, 127, 1),
            (128, 5, 127),
            (5, 300, 2),
            (16383, 16383, 1),
        ];
        for (i, (lock, site, step)) in pairs.into_iter().enumerate() {
            let mode = if i % 2 == 0 {
                LockMode::Exclusive
            } else {
                LockMode::Shared
            };
            let f = PackedFields::new(lock, site).unwrap();
            key += step;
            assert!(lane.try_push_lock_request(f, mode, key));
            general
                .push(&Event {
                    key,
                    kind: EventKind::LockRequest { lock, mode, site },
                })
                .unwrap();
            key += 1;
            assert!(lane.try_push_lock_acquired(f, mode, key));
            general
                .push(&Event {
                    key,
                    kind: EventKind::LockAcquired { lock, mode },
                })
                .unwrap();
            key += 1;
            assert!(lane.try_push_lock_release(f, key));
            general
                .push(&Event {
                    key,
                    kind: EventKind::LockRelease { lock, site },
                })
                .unwrap();
            key += 3;
            assert!(lane.try_push_lock_immediate(f, mode, key));
            general.push_lock_immediate(lock, mode, site, key).unwrap();
        }
        // A key delta too large, a key that went backwards, or one that stayed (only a
        // request may share the last key): refused, nothing changed.
        let before = lane.pending_events();
        let mode = LockMode::Exclusive;
        assert!(!lane.try_push_lock_release(f, key + 128));
        assert!(!lane.try_push_lock_immediate(f, mode, key - 1));
        assert!(!lane.try_push_lock_release(f, key));
        assert!(!lane.try_push_lock_acquired(f, mode, key));
        assert!(!lane.try_push_lock_immediate(f, mode, key));
        assert_eq!(lane.pending_events(), before);
        let a = general.flush_into(9, |b| b.to_vec()).unwrap();
        let b = lane.flush_into(9, |b| b.to_vec()).unwrap();
        assert_eq!(a, b);
        // Flushed: not started again until `set_start_ns`.
        assert!(lane.needs_service());
    }

    #[test]
    fn lock_immediate_decodes_to_request_then_acquired() {
        use crate::codec::Decoder;
        use crate::event::{EventKind, LockMode};
        for (prev, key, lock, site) in [
            (0u64, 0u64, 0u32, 0u32),
            (5, 9, 300, 127),
            (1, 1 << 40, u32::MAX, u32::MAX),
        ] {
            for mode in [LockMode::Exclusive, LockMode::Shared] {
                let mut w = ChunkWriter::new(1, 1 << 16);
                w.push_fast(&Event {
                    key: prev,
                    kind: EventKind::ThreadStart,
                })
                .unwrap();
                w.push_lock_immediate(lock, mode, site, key).unwrap();
                assert_eq!(w.pending_events(), 3);
                assert_eq!(w.last_key(), key);
                if key > 0 {
                    assert!(w.push_lock_immediate(lock, mode, site, key - 1).is_err());
                }
                let body = w.buf[EVENTS_START..].to_vec();
                let want = [
                    Event {
                        key: prev,
                        kind: EventKind::ThreadStart,
                    },
                    Event {
                        key: prev,
                        kind: EventKind::LockRequest { lock, mode, site },
                    },
                    Event {
                        key,
                        kind: EventKind::LockAcquired { lock, mode },
                    },
                ];
                let mut got = Vec::new();
                Decoder::new(&body, 0)
                    .for_each(|e| {
                        got.push(e);
                        true
                    })
                    .unwrap();
                assert_eq!(got, want);
                let mut d = Decoder::new(&body, 0);
                let mut got = Vec::new();
                while let Some(e) = d.next_event().unwrap() {
                    got.push(e);
                }
                assert!(d.is_at_end());
                assert_eq!(got, want);
                // A sink that stops after the request does not see the acquisition.
                let mut n = 0;
                Decoder::new(&body, 0)
                    .for_each(|_| {
                        n += 1;
                        n < 2
                    })
                    .unwrap();
                assert_eq!(n, 2);
            }
        }
    }

    fn decoded(w: &ChunkWriter) -> Vec<Event> {
        let mut got = Vec::new();
        crate::codec::Decoder::new(&w.buf[EVENTS_START..], w.base_key)
            .for_each(|e| {
                got.push(e);
                true
            })
            .unwrap();
        got
    }

    /// A request and its acquisition, pushed one after the other through any of the three
    /// ways in, are written as the lock-immediate that `push_lock_immediate` writes.
    #[test]
    fn an_acquisition_folds_into_its_request() {
        for (prev, key, lock, site) in [
            (3u64, 4u64, 7u32, 2u32),
            (3, 3, 7, 2),
            (5, 9 + (1 << 20), 300, 127),
            (1, 1 << 40, u32::MAX, u32::MAX),
        ] {
            for mode in [LockMode::Exclusive, LockMode::Shared] {
                let start = Event {
                    key: prev,
                    kind: EventKind::ThreadStart,
                };
                let request = Event {
                    key: prev,
                    kind: EventKind::LockRequest { lock, mode, site },
                };
                let acquired = Event {
                    key,
                    kind: EventKind::LockAcquired { lock, mode },
                };
                let mut want = ChunkWriter::new(1, 1 << 16);
                want.push(&start).unwrap();
                want.push_lock_immediate(lock, mode, site, key).unwrap();
                let mut by_push = ChunkWriter::new(1, 1 << 16);
                let mut by_push_fast = ChunkWriter::new(1, 1 << 16);
                for (w, fast) in [(&mut by_push, false), (&mut by_push_fast, true)] {
                    for ev in [&start, &request, &acquired] {
                        if fast {
                            w.push_fast(ev).unwrap();
                        } else {
                            w.push(ev).unwrap();
                        }
                    }
                }
                for w in [&by_push, &by_push_fast] {
                    assert_eq!(w.buf, want.buf, "{prev} {key} {lock} {site} {mode:?}");
                    assert_eq!(w.pending_events(), 3);
                    assert_eq!(w.last_key(), key);
                    assert_eq!(decoded(w), [start, request, acquired]);
                }
                if let (Some(f), true) = (PackedFields::new(lock, site), key - prev < 0x80) {
                    let mut lane = ChunkWriter::new(1, 1 << 16);
                    lane.set_start_ns(1);
                    lane.push(&start).unwrap();
                    assert!(lane.try_push_lock_request(f, mode, prev));
                    assert!(lane.try_push_lock_acquired(f, mode, key));
                    assert_eq!(lane.buf, want.buf);
                    assert_eq!(lane.pending_events(), 3);
                }
            }
        }
    }

    /// Only the request that is the chunk's last event, at the last key, of the same lock in
    /// the same mode is folded; whatever is written, it decodes to the events pushed.
    #[test]
    fn an_acquisition_folds_into_nothing_else() {
        let (lock, site) = (9u32, 4u32);
        let ev = |key, kind| Event { key, kind };
        let request = |key, mode| ev(key, EventKind::LockRequest { lock, mode, site });
        let acquired = |key, lock, mode| ev(key, EventKind::LockAcquired { lock, mode });
        let ex = LockMode::Exclusive;
        let start = ev(2, EventKind::ThreadStart);
        let cases: [(&str, Vec<Event>, bool); 6] = [
            (
                "folded",
                vec![start, request(2, ex), acquired(5, lock, ex)],
                true,
            ),
            (
                "another lock",
                vec![start, request(2, ex), acquired(5, lock + 1, ex)],
                false,
            ),
            (
                "another mode",
                vec![start, request(2, ex), acquired(5, lock, LockMode::Shared)],
                false,
            ),
            (
                "the request took a key",
                vec![start, request(3, ex), acquired(5, lock, ex)],
                false,
            ),
            (
                "an event between",
                vec![
                    start,
                    request(2, ex),
                    ev(2, EventKind::ThreadExit),
                    acquired(5, lock, ex),
                ],
                false,
            ),
            (
                "a release of another lock between",
                vec![
                    start,
                    request(2, ex),
                    ev(3, EventKind::LockRelease { lock: 1, site }),
                    acquired(5, lock, ex),
                ],
                false,
            ),
        ];
        for (what, events, folds) in cases {
            let mut w = ChunkWriter::new(1, 1 << 16);
            for e in &events {
                w.push_fast(e).unwrap();
            }
            assert_eq!(decoded(&w), events, "{what}");
            let immediates = w.buf[EVENTS_START..]
                .iter()
                .filter(|&&b| b == crate::codec::tag::LOCK_IMMEDIATE | crate::codec::KEY_FLAG)
                .count();
            assert_eq!(immediates, folds as usize, "{what}");
        }
        // A flush between the two: the request is on its way, the acquisition stands alone.
        let mut w = ChunkWriter::new(1, 1 << 16);
        w.push_fast(&start).unwrap();
        w.push_fast(&request(2, ex)).unwrap();
        w.flush_into(0, |_| ());
        w.push_fast(&acquired(5, lock, ex)).unwrap();
        assert_eq!(decoded(&w), [acquired(5, lock, ex)]);
    }
}
