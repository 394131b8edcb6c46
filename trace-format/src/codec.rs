//! The byte encoding of events inside an event chunk (`FORMAT.md`, "Event encoding").
//!
//! Each event is a tag byte, then (when bit 7 of the tag is set) the key delta, then the fields of
//! its kind as varints. Memory addresses and memory sites are deltas from the previous memory
//! event of the chunk; everything else is absolute. The delta state starts afresh in each chunk,
//! so chunks decode independently.

use crate::event::{AtomicOp, Event, EventKind, LockMode, MemoryOrder, WaitOutcome};
use crate::varint::{self, unzigzag, zigzag, VarintError};

/// Bit 7 of a tag: a key delta follows.
pub const KEY_FLAG: u8 = 0x80;
/// Tags in this range carry a varint length and may be skipped by readers that do not know them.
pub const EXTENSION_TAGS: std::ops::RangeInclusive<u8> = 0x60..=0x7f;
/// The most bytes one event takes.
pub const MAX_EVENT_LEN: usize = 1 + 6 * varint::MAX_LEN;

pub mod tag {
    pub const THREAD_START: u8 = 0x01;
    pub const THREAD_EXIT: u8 = 0x02;
    pub const THREAD_CREATE: u8 = 0x03;
    pub const JOIN_REQUEST: u8 = 0x04;
    pub const JOIN_END: u8 = 0x05;
    pub const JOIN_FAILED: u8 = 0x06;
    pub const THREAD_DETACH: u8 = 0x07;
    pub const FORK: u8 = 0x08;
    pub const EXEC: u8 = 0x09;
    pub const LOCK_REQUEST: u8 = 0x10;
    pub const LOCK_REQUEST_SHARED: u8 = 0x11;
    pub const LOCK_ACQUIRED: u8 = 0x12;
    pub const LOCK_ACQUIRED_SHARED: u8 = 0x13;
    pub const LOCK_FAILED: u8 = 0x14;
    pub const TRYLOCK: u8 = 0x15;
    pub const TRYLOCK_SHARED: u8 = 0x16;
    pub const TRYLOCK_FAILED: u8 = 0x17;
    pub const TRYLOCK_SHARED_FAILED: u8 = 0x18;
    pub const LOCK_RELEASE: u8 = 0x19;
    pub const OBJECT_INIT: u8 = 0x1a;
    pub const OBJECT_DESTROY: u8 = 0x1b;
    /// Producer shorthand, never produced by [`encode`](super::encode): a lock-request
    /// immediately followed by its lock-acquired (the lock was free). Decodes into those two
    /// events: the request at the previous key, the acquisition at the event's key.
    pub const LOCK_IMMEDIATE: u8 = 0x1c;
    pub const LOCK_IMMEDIATE_SHARED: u8 = 0x1d;
    pub const COND_WAIT: u8 = 0x20;
    pub const COND_WOKEN: u8 = 0x21;
    pub const COND_TIMED_OUT: u8 = 0x22;
    pub const COND_SIGNAL: u8 = 0x23;
    pub const COND_BROADCAST: u8 = 0x24;
    pub const BARRIER_INIT: u8 = 0x28;
    pub const BARRIER_ARRIVE: u8 = 0x29;
    pub const BARRIER_DEPART: u8 = 0x2a;
    pub const BARRIER_DEPART_SERIAL: u8 = 0x2b;
    pub const ONCE_BEGIN: u8 = 0x30;
    pub const ONCE_RUN: u8 = 0x31;
    pub const ONCE_END: u8 = 0x32;
    pub const ONCE_SKIP: u8 = 0x33;
    pub const SEM_INIT: u8 = 0x38;
    pub const SEM_POST: u8 = 0x39;
    pub const SEM_WAIT: u8 = 0x3a;
    pub const SEM_ACQUIRED: u8 = 0x3b;
    pub const SEM_WAIT_FAILED: u8 = 0x3c;
    pub const SEM_TRY: u8 = 0x3d;
    pub const SEM_TRY_FAILED: u8 = 0x3e;
    /// `READ_1 + n` reads `1 << n` bytes, n in 0..=4.
    pub const READ_1: u8 = 0x40;
    pub const READ_N: u8 = 0x45;
    /// `WRITE_1 + n` writes `1 << n` bytes, n in 0..=4.
    pub const WRITE_1: u8 = 0x48;
    pub const WRITE_N: u8 = 0x4d;
    pub const ATOMIC: u8 = 0x50;
    pub const FENCE: u8 = 0x51;
    pub const ALLOC: u8 = 0x52;
    pub const FREE: u8 = 0x53;
    pub const LOCK_CLASS_NAME: u8 = 0x58;
    pub const LOCK_SUBCLASS: u8 = 0x59;
    pub const LOCK_RANK: u8 = 0x5a;
    pub const HAPPENS_BEFORE: u8 = 0x5b;
    pub const HAPPENS_AFTER: u8 = 0x5c;
    /// Extension (version 1.3): the generation of the barrier arrival just before it.
    pub const ARRIVAL_GENERATION: u8 = 0x60;
}

/// The delta state of one chunk, shared by its encoder and decoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaState {
    pub key: u64,
    pub addr: u64,
    pub mem_site: u32,
}

impl DeltaState {
    pub fn starting_at(base_key: u64) -> Self {
        Self {
            key: base_key,
            addr: 0,
            mem_site: 0,
        }
    }
}

/// Why an event could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("event key {key} is lower than the previous key {previous} of the same thread")]
    KeyWentBackwards { key: u64, previous: u64 },
}

/// Why bytes could not be decoded as an event, and where (offset into the event bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: usize,
    pub what: DecodeProblem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeProblem {
    #[error("the event is cut short")]
    Truncated,
    #[error("a number is too large or not minimally encoded")]
    BadNumber,
    #[error("unknown event tag {0:#04x}")]
    UnknownTag(u8),
    #[error("a field is out of range")]
    FieldOutOfRange,
    #[error("the key delta overflows")]
    KeyOverflow,
}

impl From<VarintError> for DecodeProblem {
    fn from(e: VarintError) -> Self {
        match e {
            VarintError::Truncated => DecodeProblem::Truncated,
            VarintError::Overflow => DecodeProblem::BadNumber,
        }
    }
}

#[inline]
fn mem_fields(out: &mut Vec<u8>, st: &mut DeltaState, addr: u64, site: u32) {
    varint::put(out, zigzag(addr.wrapping_sub(st.addr) as i64));
    varint::put(out, zigzag((site as i64) - (st.mem_site as i64)));
    st.addr = addr;
    st.mem_site = site;
}

fn size_class(size: u32) -> Option<u8> {
    match size {
        1 => Some(0),
        2 => Some(1),
        4 => Some(2),
        8 => Some(3),
        16 => Some(4),
        _ => None,
    }
}

/// Appends the encoding of `ev` to `out`.
#[inline]
pub fn encode(out: &mut Vec<u8>, st: &mut DeltaState, ev: &Event) -> Result<(), EncodeError> {
    use tag::*;
    use EventKind::*;
    if ev.key < st.key {
        return Err(EncodeError::KeyWentBackwards {
            key: ev.key,
            previous: st.key,
        });
    }
    let delta = ev.key - st.key;
    let flag = if delta != 0 { KEY_FLAG } else { 0 };
    let put = |out: &mut Vec<u8>, t: u8| {
        out.push(t | flag);
        if delta != 0 {
            varint::put(out, delta);
        }
    };
    let v = |out: &mut Vec<u8>, x: u64| varint::put(out, x);
    st.key = ev.key;
    match ev.kind {
        ThreadStart => put(out, THREAD_START),
        ThreadExit => put(out, THREAD_EXIT),
        ThreadCreate { child, site } => {
            put(out, THREAD_CREATE);
            v(out, child as u64);
            v(out, site as u64);
        }
        JoinRequest { child, site } => {
            put(out, JOIN_REQUEST);
            v(out, child as u64);
            v(out, site as u64);
        }
        JoinEnd { child, joined } => {
            put(out, if joined { JOIN_END } else { JOIN_FAILED });
            v(out, child as u64);
        }
        ThreadDetach { child, site } => {
            put(out, THREAD_DETACH);
            v(out, child as u64);
            v(out, site as u64);
        }
        Fork { child_pid, site } => {
            put(out, FORK);
            v(out, child_pid as u64);
            v(out, site as u64);
        }
        Exec { site } => {
            put(out, EXEC);
            v(out, site as u64);
        }
        LockRequest { lock, mode, site } => {
            put(
                out,
                if mode == LockMode::Exclusive {
                    LOCK_REQUEST
                } else {
                    LOCK_REQUEST_SHARED
                },
            );
            v(out, lock as u64);
            v(out, site as u64);
        }
        LockAcquired { lock, mode } => {
            put(
                out,
                if mode == LockMode::Exclusive {
                    LOCK_ACQUIRED
                } else {
                    LOCK_ACQUIRED_SHARED
                },
            );
            v(out, lock as u64);
        }
        LockFailed { lock, errno } => {
            put(out, LOCK_FAILED);
            v(out, lock as u64);
            v(out, errno as u64);
        }
        LockTry {
            lock,
            mode,
            site,
            acquired,
        } => {
            let t = match (mode, acquired) {
                (LockMode::Exclusive, true) => TRYLOCK,
                (LockMode::Shared, true) => TRYLOCK_SHARED,
                (LockMode::Exclusive, false) => TRYLOCK_FAILED,
                (LockMode::Shared, false) => TRYLOCK_SHARED_FAILED,
            };
            put(out, t);
            v(out, lock as u64);
            v(out, site as u64);
        }
        LockRelease { lock, site } => {
            put(out, LOCK_RELEASE);
            v(out, lock as u64);
            v(out, site as u64);
        }
        ObjectInit { object, site } => {
            put(out, OBJECT_INIT);
            v(out, object as u64);
            v(out, site as u64);
        }
        ObjectDestroy { object, site } => {
            put(out, OBJECT_DESTROY);
            v(out, object as u64);
            v(out, site as u64);
        }
        CondWaitBegin { cond, mutex, site } => {
            put(out, COND_WAIT);
            v(out, cond as u64);
            v(out, mutex as u64);
            v(out, site as u64);
        }
        CondWaitEnd {
            cond,
            mutex,
            outcome,
        } => {
            put(
                out,
                if outcome == WaitOutcome::Woken {
                    COND_WOKEN
                } else {
                    COND_TIMED_OUT
                },
            );
            v(out, cond as u64);
            v(out, mutex as u64);
        }
        CondSignal { cond, site } => {
            put(out, COND_SIGNAL);
            v(out, cond as u64);
            v(out, site as u64);
        }
        CondBroadcast { cond, site } => {
            put(out, COND_BROADCAST);
            v(out, cond as u64);
            v(out, site as u64);
        }
        BarrierInit {
            barrier,
            count,
            site,
        } => {
            put(out, BARRIER_INIT);
            v(out, barrier as u64);
            v(out, count as u64);
            v(out, site as u64);
        }
        BarrierWaitBegin {
            barrier,
            site,
            generation,
        } => {
            put(out, BARRIER_ARRIVE);
            v(out, barrier as u64);
            v(out, site as u64);
            if let Some(g) = generation {
                // An extension event right after, at the same key: readers that do not know
                // it skip it and still have the arrival.
                let mut body = Vec::with_capacity(12);
                varint::put(&mut body, barrier as u64);
                varint::put(&mut body, g);
                out.push(ARRIVAL_GENERATION);
                varint::put(out, body.len() as u64);
                out.extend_from_slice(&body);
            }
        }
        BarrierWaitEnd {
            barrier,
            generation,
            serial,
        } => {
            put(
                out,
                if serial {
                    BARRIER_DEPART_SERIAL
                } else {
                    BARRIER_DEPART
                },
            );
            v(out, barrier as u64);
            v(out, generation);
        }
        OnceBegin { once, site } => {
            put(out, ONCE_BEGIN);
            v(out, once as u64);
            v(out, site as u64);
        }
        OnceRun { once } => {
            put(out, ONCE_RUN);
            v(out, once as u64);
        }
        OnceEnd { once } => {
            put(out, ONCE_END);
            v(out, once as u64);
        }
        OnceSkip { once } => {
            put(out, ONCE_SKIP);
            v(out, once as u64);
        }
        SemInit { sem, value, site } => {
            put(out, SEM_INIT);
            v(out, sem as u64);
            v(out, value as u64);
            v(out, site as u64);
        }
        SemPost { sem, site } => {
            put(out, SEM_POST);
            v(out, sem as u64);
            v(out, site as u64);
        }
        SemWaitBegin { sem, site } => {
            put(out, SEM_WAIT);
            v(out, sem as u64);
            v(out, site as u64);
        }
        SemWaitEnd { sem, acquired } => {
            put(
                out,
                if acquired {
                    SEM_ACQUIRED
                } else {
                    SEM_WAIT_FAILED
                },
            );
            v(out, sem as u64);
        }
        SemTry {
            sem,
            site,
            acquired,
        } => {
            put(out, if acquired { SEM_TRY } else { SEM_TRY_FAILED });
            v(out, sem as u64);
            v(out, site as u64);
        }
        Read { addr, size, site } | Write { addr, size, site } => {
            let base = if matches!(ev.kind, Read { .. }) {
                READ_1
            } else {
                WRITE_1
            };
            match size_class(size) {
                Some(c) => put(out, base + c),
                None => {
                    put(out, base + 5);
                    v(out, size as u64);
                }
            }
            mem_fields(out, st, addr, site);
        }
        Atomic {
            op,
            addr,
            size,
            order,
            site,
        } => {
            put(out, ATOMIC);
            let op = match op {
                AtomicOp::Load => 0u8,
                AtomicOp::Store => 1,
                AtomicOp::Rmw => 2,
                AtomicOp::CasSuccess => 3,
                AtomicOp::CasFailure => 4,
            };
            out.push((op << 4) | order as u8);
            v(out, size as u64);
            mem_fields(out, st, addr, site);
        }
        Fence { order, site } => {
            put(out, FENCE);
            out.push(order as u8);
            v(out, site as u64);
        }
        Alloc { addr, size, site } => {
            put(out, ALLOC);
            v(out, size);
            mem_fields(out, st, addr, site);
        }
        Free { addr, site } => {
            put(out, FREE);
            mem_fields(out, st, addr, site);
        }
        LockClassName { lock, name } => {
            put(out, LOCK_CLASS_NAME);
            v(out, lock as u64);
            v(out, name as u64);
        }
        LockSubclass { lock, subclass } => {
            put(out, LOCK_SUBCLASS);
            v(out, lock as u64);
            v(out, subclass as u64);
        }
        LockRank { lock, rank } => {
            put(out, LOCK_RANK);
            v(out, lock as u64);
            v(out, rank as u64);
        }
        HappensBefore { tag, site } => {
            put(out, HAPPENS_BEFORE);
            v(out, tag);
            v(out, site as u64);
        }
        HappensAfter { tag, site } => {
            put(out, HAPPENS_AFTER);
            v(out, tag);
            v(out, site as u64);
        }
    }
    Ok(())
}

/// A cursor over the event bytes of one chunk.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    st: DeltaState,
    /// One more than the largest object id decoded so far (0: none), and the same for the
    /// sites of synchronisation events: a reader whose tables define every id below these
    /// knows the chunk names nothing undefined without looking at each event again.
    objects_below: u64,
    sites_below: u64,
    /// The second event of a lock-immediate (`tag::LOCK_IMMEDIATE`), decoded together with
    /// the first and handed out next.
    pending: Option<Event>,
}

/// Where a [`Decoder`] stands in its chunk's bytes, kept apart from the bytes so that a reader
/// that owns the bytes can stop decoding and resume later ([`Decoder::resume`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderState {
    pos: usize,
    st: DeltaState,
    objects_below: u64,
    sites_below: u64,
    pending: Option<Event>,
}

impl DecoderState {
    /// The state at the start of a chunk whose `base_key` is given.
    pub fn starting_at(base_key: u64) -> Self {
        Self {
            pos: 0,
            st: DeltaState::starting_at(base_key),
            objects_below: 0,
            sites_below: 0,
            pending: None,
        }
    }
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8], base_key: u64) -> Self {
        Self::resume(buf, DecoderState::starting_at(base_key))
    }

    /// Continues decoding `buf` (the same bytes the state was saved from) where
    /// [`Decoder::state`] left off.
    #[inline]
    pub fn resume(buf: &'a [u8], s: DecoderState) -> Self {
        Self {
            buf,
            pos: s.pos,
            st: s.st,
            objects_below: s.objects_below,
            sites_below: s.sites_below,
            pending: s.pending,
        }
    }

    /// Where the decoder stands, to resume from later.
    #[inline]
    pub fn state(&self) -> DecoderState {
        DecoderState {
            pos: self.pos,
            st: self.st,
            objects_below: self.objects_below,
            sites_below: self.sites_below,
            pending: self.pending,
        }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    /// One more than the largest object id in the events decoded so far; 0 if none named one.
    pub fn objects_below(&self) -> u64 {
        self.objects_below
    }

    /// One more than the largest site id of a synchronisation event decoded so far (memory
    /// access sites are code addresses, not table ids); 0 if none.
    pub fn sites_below(&self) -> u64 {
        self.sites_below
    }

    #[inline(always)]
    fn object_id(&mut self) -> Result<u32, DecodeProblem> {
        let id = self.u32()?;
        self.objects_below = self.objects_below.max(id as u64 + 1);
        Ok(id)
    }

    #[inline(always)]
    fn sync_site(&mut self) -> Result<u32, DecodeProblem> {
        let id = self.u32()?;
        self.sites_below = self.sites_below.max(id as u64 + 1);
        Ok(id)
    }

    pub fn is_at_end(&self) -> bool {
        self.pos >= self.buf.len() && self.pending.is_none()
    }

    // Most fields are ids and deltas below 128: one byte. That case stays inline; longer numbers
    // take the general path out of line, which keeps the per-tag code small.
    #[inline(always)]
    fn u64(&mut self) -> Result<u64, DecodeProblem> {
        match self.buf.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Ok(b as u64)
            }
            _ => self.u64_long(),
        }
    }

    #[inline(never)]
    fn u64_long(&mut self) -> Result<u64, DecodeProblem> {
        Ok(varint::get(self.buf, &mut self.pos)?)
    }

    #[inline(always)]
    fn u32(&mut self) -> Result<u32, DecodeProblem> {
        match self.buf.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1;
                Ok(b as u32)
            }
            _ => self.u32_long(),
        }
    }

    #[inline(never)]
    fn u32_long(&mut self) -> Result<u32, DecodeProblem> {
        u32::try_from(varint::get(self.buf, &mut self.pos)?)
            .map_err(|_| DecodeProblem::FieldOutOfRange)
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, DecodeProblem> {
        let b = *self.buf.get(self.pos).ok_or(DecodeProblem::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    fn mem(&mut self) -> Result<(u64, u32), DecodeProblem> {
        let da = unzigzag(self.u64()?);
        let ds = unzigzag(self.u64()?);
        let addr = self.st.addr.wrapping_add(da as u64);
        let site = (self.st.mem_site as i64)
            .checked_add(ds)
            .and_then(|s| u32::try_from(s).ok())
            .ok_or(DecodeProblem::FieldOutOfRange)?;
        // A delta of the wrong sign or a wrapped address decodes to a value the encoder would
        // have produced from a different delta; requiring the canonical delta keeps decoding
        // the inverse of encoding.
        if zigzag(addr.wrapping_sub(self.st.addr) as i64) != zigzag(da) {
            return Err(DecodeProblem::FieldOutOfRange);
        }
        self.st.addr = addr;
        self.st.mem_site = site;
        Ok((addr, site))
    }

    /// Decodes the next event; `Ok(None)` at the end of the bytes. Extension events are not
    /// skipped: call [`Decoder::skip_extension`] first, or use [`Decoder::for_each`].
    #[inline]
    pub fn next_event(&mut self) -> Result<Option<Event>, DecodeError> {
        if let Some(ev) = self.pending.take() {
            return Ok(Some(ev));
        }
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let start = self.pos;
        self.decode_one().map(Some).map_err(|what| DecodeError {
            offset: start,
            what,
        })
    }

    /// Decodes every remaining event, skipping extension events, and hands each to `sink` until
    /// it returns `false`. This is the fast path: one loop, no per-event `Option`.
    #[inline]
    pub fn for_each(&mut self, mut sink: impl FnMut(Event) -> bool) -> Result<(), DecodeError> {
        loop {
            if let Some(ev) = self.pending.take() {
                if !sink(ev) {
                    break;
                }
            }
            let Some(&raw) = self.buf.get(self.pos) else {
                break;
            };
            if EXTENSION_TAGS.contains(&(raw & !KEY_FLAG)) {
                self.skip_extension()?;
                continue;
            }
            let start = self.pos;
            match self.decode_one() {
                Ok(ev) => {
                    if !sink(ev) {
                        break;
                    }
                }
                Err(what) => {
                    return Err(DecodeError {
                        offset: start,
                        what,
                    })
                }
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn decode_one(&mut self) -> Result<Event, DecodeProblem> {
        use tag::*;
        use EventKind::*;
        let raw = self.byte()?;
        let t = raw & !KEY_FLAG;
        let previous = self.st.key;
        if raw & KEY_FLAG != 0 {
            let delta = self.u64()?;
            if delta == 0 {
                // The encoder never sets the flag for a zero delta.
                return Err(DecodeProblem::BadNumber);
            }
            self.st.key = self
                .st
                .key
                .checked_add(delta)
                .ok_or(DecodeProblem::KeyOverflow)?;
        }
        let key = self.st.key;
        let kind = match t {
            THREAD_START => ThreadStart,
            THREAD_EXIT => ThreadExit,
            THREAD_CREATE => ThreadCreate {
                child: self.u32()?,
                site: self.sync_site()?,
            },
            JOIN_REQUEST => JoinRequest {
                child: self.u32()?,
                site: self.sync_site()?,
            },
            JOIN_END => JoinEnd {
                child: self.u32()?,
                joined: true,
            },
            JOIN_FAILED => JoinEnd {
                child: self.u32()?,
                joined: false,
            },
            THREAD_DETACH => ThreadDetach {
                child: self.u32()?,
                site: self.sync_site()?,
            },
            FORK => Fork {
                child_pid: self.u32()?,
                site: self.sync_site()?,
            },
            EXEC => Exec {
                site: self.sync_site()?,
            },
            LOCK_REQUEST => LockRequest {
                lock: self.object_id()?,
                mode: LockMode::Exclusive,
                site: self.sync_site()?,
            },
            LOCK_REQUEST_SHARED => LockRequest {
                lock: self.object_id()?,
                mode: LockMode::Shared,
                site: self.sync_site()?,
            },
            LOCK_ACQUIRED => LockAcquired {
                lock: self.object_id()?,
                mode: LockMode::Exclusive,
            },
            LOCK_ACQUIRED_SHARED => LockAcquired {
                lock: self.object_id()?,
                mode: LockMode::Shared,
            },
            LOCK_IMMEDIATE | LOCK_IMMEDIATE_SHARED => {
                let mode = if t == LOCK_IMMEDIATE {
                    LockMode::Exclusive
                } else {
                    LockMode::Shared
                };
                let lock = self.object_id()?;
                let site = self.sync_site()?;
                self.pending = Some(Event {
                    key,
                    kind: LockAcquired { lock, mode },
                });
                return Ok(Event {
                    key: previous,
                    kind: LockRequest { lock, mode, site },
                });
            }
            LOCK_FAILED => LockFailed {
                lock: self.object_id()?,
                errno: self.u32()?,
            },
            TRYLOCK | TRYLOCK_SHARED | TRYLOCK_FAILED | TRYLOCK_SHARED_FAILED => {
                let mode = if t == TRYLOCK || t == TRYLOCK_FAILED {
                    LockMode::Exclusive
                } else {
                    LockMode::Shared
                };
                let acquired = t == TRYLOCK || t == TRYLOCK_SHARED;
                LockTry {
                    lock: self.object_id()?,
                    mode,
                    site: self.sync_site()?,
                    acquired,
                }
            }
            LOCK_RELEASE => LockRelease {
                lock: self.object_id()?,
                site: self.sync_site()?,
            },
            OBJECT_INIT => ObjectInit {
                object: self.object_id()?,
                site: self.sync_site()?,
            },
            OBJECT_DESTROY => ObjectDestroy {
                object: self.object_id()?,
                site: self.sync_site()?,
            },
            COND_WAIT => CondWaitBegin {
                cond: self.object_id()?,
                mutex: self.object_id()?,
                site: self.sync_site()?,
            },
            COND_WOKEN => CondWaitEnd {
                cond: self.object_id()?,
                mutex: self.object_id()?,
                outcome: WaitOutcome::Woken,
            },
            COND_TIMED_OUT => CondWaitEnd {
                cond: self.object_id()?,
                mutex: self.object_id()?,
                outcome: WaitOutcome::TimedOut,
            },
            COND_SIGNAL => CondSignal {
                cond: self.object_id()?,
                site: self.sync_site()?,
            },
            COND_BROADCAST => CondBroadcast {
                cond: self.object_id()?,
                site: self.sync_site()?,
            },
            BARRIER_INIT => BarrierInit {
                barrier: self.object_id()?,
                count: self.u32()?,
                site: self.sync_site()?,
            },
            BARRIER_ARRIVE => {
                let barrier = self.object_id()?;
                let site = self.sync_site()?;
                BarrierWaitBegin {
                    barrier,
                    site,
                    generation: self.arrival_generation(barrier)?,
                }
            }
            BARRIER_DEPART => BarrierWaitEnd {
                barrier: self.object_id()?,
                generation: self.u64()?,
                serial: false,
            },
            BARRIER_DEPART_SERIAL => BarrierWaitEnd {
                barrier: self.object_id()?,
                generation: self.u64()?,
                serial: true,
            },
            ONCE_BEGIN => OnceBegin {
                once: self.object_id()?,
                site: self.sync_site()?,
            },
            ONCE_RUN => OnceRun {
                once: self.object_id()?,
            },
            ONCE_END => OnceEnd {
                once: self.object_id()?,
            },
            ONCE_SKIP => OnceSkip {
                once: self.object_id()?,
            },
            SEM_INIT => SemInit {
                sem: self.object_id()?,
                value: self.u32()?,
                site: self.sync_site()?,
            },
            SEM_POST => SemPost {
                sem: self.object_id()?,
                site: self.sync_site()?,
            },
            SEM_WAIT => SemWaitBegin {
                sem: self.object_id()?,
                site: self.sync_site()?,
            },
            SEM_ACQUIRED => SemWaitEnd {
                sem: self.object_id()?,
                acquired: true,
            },
            SEM_WAIT_FAILED => SemWaitEnd {
                sem: self.object_id()?,
                acquired: false,
            },
            SEM_TRY => SemTry {
                sem: self.object_id()?,
                site: self.sync_site()?,
                acquired: true,
            },
            SEM_TRY_FAILED => SemTry {
                sem: self.object_id()?,
                site: self.sync_site()?,
                acquired: false,
            },
            0x40..=0x45 | 0x48..=0x4d => {
                let write = t >= WRITE_1;
                let class = t - if write { WRITE_1 } else { READ_1 };
                let size = if class == 5 {
                    let s = self.u32()?;
                    if size_class(s).is_some() {
                        return Err(DecodeProblem::FieldOutOfRange);
                    }
                    s
                } else {
                    1u32 << class
                };
                let (addr, site) = self.mem()?;
                if write {
                    Write { addr, size, site }
                } else {
                    Read { addr, size, site }
                }
            }
            ATOMIC => {
                let b = self.byte()?;
                let op = match b >> 4 {
                    0 => AtomicOp::Load,
                    1 => AtomicOp::Store,
                    2 => AtomicOp::Rmw,
                    3 => AtomicOp::CasSuccess,
                    4 => AtomicOp::CasFailure,
                    _ => return Err(DecodeProblem::FieldOutOfRange),
                };
                let order = MemoryOrder::from_u8(b & 0x0f).ok_or(DecodeProblem::FieldOutOfRange)?;
                let size = self.u32()?;
                let (addr, site) = self.mem()?;
                Atomic {
                    op,
                    addr,
                    size,
                    order,
                    site,
                }
            }
            FENCE => {
                let order =
                    MemoryOrder::from_u8(self.byte()?).ok_or(DecodeProblem::FieldOutOfRange)?;
                Fence {
                    order,
                    site: self.u32()?,
                }
            }
            ALLOC => {
                let size = self.u64()?;
                let (addr, site) = self.mem()?;
                Alloc { addr, size, site }
            }
            FREE => {
                let (addr, site) = self.mem()?;
                Free { addr, site }
            }
            LOCK_CLASS_NAME => LockClassName {
                lock: self.object_id()?,
                name: self.u32()?,
            },
            LOCK_SUBCLASS => LockSubclass {
                lock: self.object_id()?,
                subclass: self.u32()?,
            },
            LOCK_RANK => LockRank {
                lock: self.object_id()?,
                rank: self.u32()?,
            },
            HAPPENS_BEFORE => HappensBefore {
                tag: self.u64()?,
                site: self.sync_site()?,
            },
            HAPPENS_AFTER => HappensAfter {
                tag: self.u64()?,
                site: self.sync_site()?,
            },
            other => return Err(DecodeProblem::UnknownTag(other)),
        };
        Ok(Event { key, kind })
    }

    /// Skips an extension event (tag in `EXTENSION_TAGS`) at the cursor, if there is one.
    /// Returns whether it skipped.
    #[inline(never)]
    /// After a barrier arrival: the generation extension that follows it, if there is one
    /// (it is consumed; one naming another barrier is left for the loop to skip).
    fn arrival_generation(
        &mut self,
        barrier: crate::ObjectId,
    ) -> Result<Option<u64>, DecodeProblem> {
        if self.buf.get(self.pos) != Some(&tag::ARRIVAL_GENERATION) {
            return Ok(None);
        }
        let start = self.pos;
        self.pos += 1;
        let parsed = (|| {
            let len = self.u64().ok()?;
            let end = (self.pos as u64).checked_add(len)?;
            if end > self.buf.len() as u64 {
                return None;
            }
            let of = self.u32().ok()?;
            let generation = self.u64().ok()?;
            // Later minor versions may append fields: skipped with the rest of the body.
            (self.pos as u64 <= end && of == barrier).then_some((end as usize, generation))
        })();
        match parsed {
            Some((end, generation)) => {
                self.pos = end;
                Ok(Some(generation))
            }
            None => {
                // Not ours, or malformed: the loop skips (or reports) it as any extension.
                self.pos = start;
                Ok(None)
            }
        }
    }

    pub fn skip_extension(&mut self) -> Result<bool, DecodeError> {
        let start = self.pos;
        let Some(&raw) = self.buf.get(self.pos) else {
            return Ok(false);
        };
        if !EXTENSION_TAGS.contains(&(raw & !KEY_FLAG)) {
            return Ok(false);
        }
        let err = |what| DecodeError {
            offset: start,
            what,
        };
        self.pos += 1;
        if raw & KEY_FLAG != 0 {
            let delta = self.u64().map_err(err)?;
            if delta == 0 {
                // As for known events: the encoder never flags a zero delta.
                return Err(err(DecodeProblem::BadNumber));
            }
            self.st.key = self
                .st
                .key
                .checked_add(delta)
                .ok_or(err(DecodeProblem::KeyOverflow))?;
        }
        let len = self.u64().map_err(err)?;
        let end = (self.pos as u64)
            .checked_add(len)
            .ok_or(err(DecodeProblem::Truncated))?;
        if end > self.buf.len() as u64 {
            return Err(err(DecodeProblem::Truncated));
        }
        self.pos = end as usize;
        Ok(true)
    }
}
