//! The byte encoding of events inside an event chunk (`FORMAT.md`, "Event encoding").
//!
//! Each event is a tag byte, then (when bit 7 of the tag is set) the key delta, then the fields of
//! its kind as varints. Memory addresses and memory sites are deltas from the previous memory
//! event of the chunk; everything else is absolute. The delta state starts afresh in each chunk,
//! so chunks decode independently.

use crate::event::{
    AtomicOp, BlockingCall, ChannelKind, Event, EventKind, LockMode, MemoryOrder, WaitOutcome,
};
use crate::varint::{self, unzigzag, zigzag, VarintError};

/// Bit 7 of a tag: a key delta follows.
pub(crate) const KEY_FLAG: u8 = 0x80;
/// Tags in this range carry a varint length and may be skipped by readers that do not know them.
pub(crate) const EXTENSION_TAGS: std::ops::RangeInclusive<u8> = 0x60..=0x7f;
/// The most bytes one event takes.
pub(crate) const MAX_EVENT_LEN: usize = 1 + 6 * varint::MAX_LEN;

/// The tag byte of each event kind (FORMAT.md §6); the extension tags are public for tools and tests that write extension events by hand.
pub mod tag {
    pub(crate) const THREAD_START: u8 = 0x01;
    pub(crate) const THREAD_EXIT: u8 = 0x02;
    pub(crate) const THREAD_CREATE: u8 = 0x03;
    pub(crate) const JOIN_REQUEST: u8 = 0x04;
    pub(crate) const JOIN_END: u8 = 0x05;
    pub(crate) const JOIN_FAILED: u8 = 0x06;
    pub(crate) const THREAD_DETACH: u8 = 0x07;
    pub(crate) const FORK: u8 = 0x08;
    pub(crate) const EXEC: u8 = 0x09;
    pub(crate) const LOCK_REQUEST: u8 = 0x10;
    pub(crate) const LOCK_REQUEST_SHARED: u8 = 0x11;
    pub(crate) const LOCK_ACQUIRED: u8 = 0x12;
    pub(crate) const LOCK_ACQUIRED_SHARED: u8 = 0x13;
    pub(crate) const LOCK_FAILED: u8 = 0x14;
    pub(crate) const TRYLOCK: u8 = 0x15;
    pub(crate) const TRYLOCK_SHARED: u8 = 0x16;
    pub(crate) const TRYLOCK_FAILED: u8 = 0x17;
    pub(crate) const TRYLOCK_SHARED_FAILED: u8 = 0x18;
    pub(crate) const LOCK_RELEASE: u8 = 0x19;
    pub(crate) const OBJECT_INIT: u8 = 0x1a;
    pub(crate) const OBJECT_DESTROY: u8 = 0x1b;
    /// Producer shorthand, never produced by [`encode`](super::encode): a lock-request
    /// immediately followed by its lock-acquired (the lock was free). Decodes into those two
    /// events: the request at the previous key, the acquisition at the event's key.
    pub(crate) const LOCK_IMMEDIATE: u8 = 0x1c;
    pub(crate) const LOCK_IMMEDIATE_SHARED: u8 = 0x1d;
    pub(crate) const COND_WAIT: u8 = 0x20;
    pub(crate) const COND_WOKEN: u8 = 0x21;
    pub(crate) const COND_TIMED_OUT: u8 = 0x22;
    pub(crate) const COND_SIGNAL: u8 = 0x23;
    pub(crate) const COND_BROADCAST: u8 = 0x24;
    pub(crate) const BARRIER_INIT: u8 = 0x28;
    pub(crate) const BARRIER_ARRIVE: u8 = 0x29;
    pub(crate) const BARRIER_DEPART: u8 = 0x2a;
    pub(crate) const BARRIER_DEPART_SERIAL: u8 = 0x2b;
    pub(crate) const ONCE_BEGIN: u8 = 0x30;
    pub(crate) const ONCE_RUN: u8 = 0x31;
    pub(crate) const ONCE_END: u8 = 0x32;
    pub(crate) const ONCE_SKIP: u8 = 0x33;
    pub(crate) const SEM_INIT: u8 = 0x38;
    pub(crate) const SEM_POST: u8 = 0x39;
    pub(crate) const SEM_WAIT: u8 = 0x3a;
    pub(crate) const SEM_ACQUIRED: u8 = 0x3b;
    pub(crate) const SEM_WAIT_FAILED: u8 = 0x3c;
    pub(crate) const SEM_TRY: u8 = 0x3d;
    pub(crate) const SEM_TRY_FAILED: u8 = 0x3e;
    /// `READ_1 + n` reads `1 << n` bytes, n in 0..=4; `READ_1 + 5` reads another size.
    pub(crate) const READ_1: u8 = 0x40;
    /// `WRITE_1 + n` writes `1 << n` bytes, n in 0..=4; `WRITE_1 + 5` writes another size.
    pub(crate) const WRITE_1: u8 = 0x48;
    pub(crate) const ATOMIC: u8 = 0x50;
    pub(crate) const FENCE: u8 = 0x51;
    pub(crate) const ALLOC: u8 = 0x52;
    pub(crate) const FREE: u8 = 0x53;
    pub(crate) const LOCK_CLASS_NAME: u8 = 0x58;
    pub(crate) const LOCK_SUBCLASS: u8 = 0x59;
    pub(crate) const LOCK_RANK: u8 = 0x5a;
    pub(crate) const HAPPENS_BEFORE: u8 = 0x5b;
    pub(crate) const HAPPENS_AFTER: u8 = 0x5c;
    /// Extension (version 1.3): the generation of the barrier arrival just before it.
    pub(crate) const ARRIVAL_GENERATION: u8 = 0x60;
    /// Extension (version 1.10): a blocking call begins.
    pub const BLOCKING_BEGIN: u8 = 0x63;
    /// Extension (version 1.10): the blocking call ended.
    pub const BLOCKING_END: u8 = 0x64;
    /// Extension (version 1.11): a signal handler begins (phase 0) or returns (phase 1).
    pub const SIGNAL_HANDLER: u8 = 0x65;
    /// Extension (version 1.11): the thread's signal mask.
    pub const SIGNAL_MASK: u8 = 0x66;
    /// Extension (version 1.12): bytes put into a hand-off channel.
    pub const HANDOFF_WRITE: u8 = 0x67;
    /// Extension (version 1.12): bytes taken out of a hand-off channel.
    pub const HANDOFF_READ: u8 = 0x68;
}

/// The phase byte of a `SIGNAL_HANDLER` event.
const HANDLER_ENTER: u8 = 0;
const HANDLER_EXIT: u8 = 1;

/// The number of bytes LEB128 takes for `x`.
fn varint_len(x: u64) -> usize {
    (64 - (x | 1).leading_zeros() as usize).div_ceil(7)
}

/// The delta state of one chunk, shared by its encoder and decoder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeltaState {
    pub key: u64,
    pub addr: u64,
    pub(crate) mem_site: u32,
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
    /// A thread's keys must not decrease.
    #[error("event key {key} is lower than the previous key {previous} of the same thread")]
    KeyWentBackwards {
        /// The key of the event refused.
        key: u64,
        /// The key of the thread's event before it.
        previous: u64,
    },
}

/// Why bytes could not be decoded as an event, and where (offset into the event bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Offset of the bad event in the event bytes.
    pub offset: usize,
    /// What is wrong with it.
    pub what: DecodeProblem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
/// What is wrong with the bytes of an event.
pub enum DecodeProblem {
    /// The bytes end inside the event.
    #[error("the event is cut short")]
    Truncated,
    /// A varint is longer than 10 bytes or not minimal.
    #[error("a number is too large or not minimally encoded")]
    BadNumber,
    /// A tag this version does not know, outside the extension range.
    #[error("unknown event tag {0:#04x}")]
    UnknownTag(u8),
    /// A field does not fit its type (a thread id above `u32`, an unknown lock mode).
    #[error("a field is out of range")]
    FieldOutOfRange,
    /// The key delta takes the key past `u64::MAX`.
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
pub(crate) fn encode(
    out: &mut Vec<u8>,
    st: &mut DeltaState,
    ev: &Event,
) -> Result<(), EncodeError> {
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
        BlockingBegin {
            call,
            site,
            timeout_ns,
        } => {
            // The timeout as ns + 1; 0: none.
            let timeout = timeout_ns.map_or(0, |t| t.saturating_add(1));
            put(out, BLOCKING_BEGIN);
            v(
                out,
                (1 + varint_len(site as u64) + varint_len(timeout)) as u64,
            );
            out.push(call.code());
            v(out, site as u64);
            v(out, timeout);
        }
        BlockingEnd { call, duration_ns } => {
            put(out, BLOCKING_END);
            v(out, 1 + varint_len(duration_ns) as u64);
            out.push(call.code());
            v(out, duration_ns);
        }
        SignalEnter { signal } | SignalExit { signal } => {
            put(out, SIGNAL_HANDLER);
            v(out, 2);
            out.push(if matches!(ev.kind, SignalEnter { .. }) {
                HANDLER_ENTER
            } else {
                HANDLER_EXIT
            });
            out.push(signal);
        }
        SignalMask { blocked } => {
            put(out, SIGNAL_MASK);
            v(out, varint_len(blocked) as u64);
            v(out, blocked);
        }
        HandoffWrite {
            channel,
            kind,
            fd,
            amount,
            site,
        }
        | HandoffRead {
            channel,
            kind,
            fd,
            amount,
            site,
        } => {
            let t = if matches!(ev.kind, HandoffWrite { .. }) {
                HANDOFF_WRITE
            } else {
                HANDOFF_READ
            };
            put(out, t);
            let len = 1
                + varint_len(channel as u64)
                + varint_len(fd as u64)
                + varint_len(amount)
                + varint_len(site as u64);
            v(out, len as u64);
            out.push(kind.code());
            v(out, channel as u64);
            v(out, fd as u64);
            v(out, amount);
            v(out, site as u64);
        }
    }
    Ok(())
}

/// A hand-off event's body (FORMAT.md §6.6.1): kind byte, channel, fd, amount, site; `None`
/// for a body too short, a kind this version does not know, or a number out of range (the
/// event is then skipped as an unknown extension). Fields a later version appends are ignored.
fn handoff_body(body: &[u8], write: bool) -> Option<EventKind> {
    let kind = ChannelKind::from_code(*body.first()? as u64)?;
    let mut pos = 1usize;
    let channel = u32::try_from(varint::get(body, &mut pos).ok()?).ok()?;
    let fd = u32::try_from(varint::get(body, &mut pos).ok()?).ok()?;
    let amount = varint::get(body, &mut pos).ok()?;
    let site = u32::try_from(varint::get(body, &mut pos).ok()?).ok()?;
    Some(if write {
        EventKind::HandoffWrite {
            channel,
            kind,
            fd,
            amount,
            site,
        }
    } else {
        EventKind::HandoffRead {
            channel,
            kind,
            fd,
            amount,
            site,
        }
    })
}

/// Bytes the fast loop of [`Decoder::decode_to`] wants left in the chunk before it decodes an
/// event there: one bounds check then covers every byte the event can take on that path.
const FAST_WINDOW: usize = 16;
/// The same for a plain access (`Decoder::access_run`): a tag and two numbers of up to eight
/// bytes.
const ACCESS_WINDOW: usize = 1 + 2 * 8;
/// The same for a memory event: a tag and four numbers of up to eight bytes.
const MEMORY_WINDOW: usize = 1 + 4 * 8;

/// A place [`Decoder::decode_to`] writes an event into: an event (a reused buffer) or an
/// uninitialised slot (the decoding reader's window of a thread's vector).
pub(crate) trait EventSlot {
    fn set(&mut self, ev: Event);
}

impl EventSlot for Event {
    #[inline(always)]
    fn set(&mut self, ev: Event) {
        *self = ev;
    }
}

impl EventSlot for std::mem::MaybeUninit<Event> {
    #[inline(always)]
    fn set(&mut self, ev: Event) {
        self.write(ev);
    }
}

/// An event to fill buffers with before [`Decoder::decode_to`] writes over them.
pub(crate) const PLACEHOLDER: Event = Event {
    key: 0,
    kind: EventKind::ThreadStart,
};

/// What one call of [`Decoder::decode_to`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Batch {
    /// Events written, to the first slots.
    pub events: usize,
    /// The key of the last event written, if any.
    pub last_key: Option<u64>,
    /// The event that did not decode; decoding stopped there.
    pub error: Option<DecodeError>,
    /// How many of `events` are extension events (not counted in the chunk's event count).
    pub(crate) extensions: usize,
}

/// The key (after the delta, when `FLAG`: bit 7 of the tag) and `N` fields (one or two) of the
/// event whose bytes start `word` (little-endian), when the delta and each field take one
/// byte, the delta is not zero and the key does not overflow; then also the event's length.
/// Otherwise `None`, and the general decoder takes the event (and reports it if it is bad).
#[inline(always)]
fn one_byte_fields<const FLAG: bool, const N: u32>(
    word: u64,
    key: u64,
) -> Option<(u64, u32, u32, usize)> {
    let numbers = FLAG as u32 + N;
    // Bit 7 of each of the numbers' bytes (bytes 1..=numbers): all clear, or one is longer.
    let continuation = 0x8080_8080_8080_8000u64 & ((1u64 << (8 * (numbers + 1))) - 1);
    if word & continuation != 0 {
        return None;
    }
    let (key, fields) = if FLAG {
        let delta = (word >> 8) & 0xff;
        if delta == 0 {
            return None;
        }
        (key.checked_add(delta)?, word >> 16)
    } else {
        (key, word >> 8)
    };
    Some((
        key,
        (fields & 0xff) as u32,
        ((fields >> 8) & 0xff) as u32,
        1 + numbers as usize,
    ))
}

/// For each tag byte, the size of a plain access (a read or write of 1, 2, 4, 8 or 16 bytes
/// without a key delta: tags `0x40`–`0x44`, `0x48`–`0x4c`), 0 for any other: one load tells
/// `Decoder::access_run` both whether the event is its and the size.
static PLAIN_ACCESS_SIZE: [u32; 256] = {
    let mut sizes = [0; 256];
    let mut class = 0;
    while class < 5 {
        sizes[(tag::READ_1 + class) as usize] = 1 << class;
        sizes[(tag::WRITE_1 + class) as usize] = 1 << class;
        class += 1;
    }
    sizes
};

/// The mode of the lock tags that come in pairs, exclusive at the even tag.
#[inline(always)]
fn mode_of(t: u8) -> LockMode {
    if t & 1 == 0 {
        LockMode::Exclusive
    } else {
        LockMode::Shared
    }
}

/// The lock event of tag byte `RAW` (a request, acquisition, release or lock-immediate, with
/// a key delta when bit 7 is set) whose bytes start `word`, when its numbers take one byte
/// each ([`one_byte_fields`]): written to `out[0]` (and `out[1]` for a lock-immediate, which
/// gives two events), the ids noted in `objects` and `sites` (one more than the
/// largest). Returns the new key, the event's length and the events written; `None` (and
/// nothing written) otherwise.
#[inline(always)]
fn lock_event<S: EventSlot, const RAW: u8>(
    word: u64,
    key: u64,
    out: &mut [S; 2],
    objects: &mut u32,
    sites: &mut u32,
) -> Option<(u64, usize, usize)> {
    use tag::*;
    use EventKind::*;
    const { assert!(matches!(RAW & !KEY_FLAG, 0x10..=0x13 | 0x19 | 0x1c | 0x1d)) };
    let flag = RAW & KEY_FLAG != 0;
    let t = RAW & !KEY_FLAG;
    let fields = if matches!(t, LOCK_ACQUIRED | LOCK_ACQUIRED_SHARED) {
        if flag {
            one_byte_fields::<true, 1>(word, key)
        } else {
            one_byte_fields::<false, 1>(word, key)
        }
    } else if flag {
        one_byte_fields::<true, 2>(word, key)
    } else {
        one_byte_fields::<false, 2>(word, key)
    };
    let (next, a, b, len) = fields?;
    *objects = (*objects).max(a + 1);
    let mode = mode_of(t);
    let kind = match t {
        LOCK_ACQUIRED | LOCK_ACQUIRED_SHARED => LockAcquired { lock: a, mode },
        LOCK_REQUEST | LOCK_REQUEST_SHARED => {
            *sites = (*sites).max(b + 1);
            LockRequest {
                lock: a,
                mode,
                site: b,
            }
        }
        LOCK_RELEASE => {
            *sites = (*sites).max(b + 1);
            LockRelease { lock: a, site: b }
        }
        _ => {
            *sites = (*sites).max(b + 1);
            // A lock-immediate: the request at the previous key, then the acquisition at the
            // event's.
            out[0].set(Event {
                key,
                kind: LockRequest {
                    lock: a,
                    mode,
                    site: b,
                },
            });
            out[1].set(Event {
                key: next,
                kind: LockAcquired { lock: a, mode },
            });
            return Some((next, len, 2));
        }
    };
    out[0].set(Event { key: next, kind });
    Some((next, len, 1))
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
    /// Whether the extension events this version knows as events (`EventKind::is_extension`)
    /// are handed out, or skipped as every other extension.
    keep_extensions: bool,
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
    keep_extensions: bool,
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
            keep_extensions: false,
        }
    }

    /// The same, for a decoder that hands out the extension events it knows as events
    /// (blocking calls): their reader counts them apart (`Batch::extensions`).
    pub fn with_extensions(mut self) -> Self {
        self.keep_extensions = true;
        self
    }
}

impl<'a> Decoder<'a> {
    /// A decoder for the event bytes `buf` of one chunk, whose thread's last key before it was `base_key`.
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
            keep_extensions: s.keep_extensions,
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
            keep_extensions: self.keep_extensions,
        }
    }

    /// How many bytes of `buf` were decoded.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// One more than the largest object id in the events decoded so far; 0 if none named one.
    pub(crate) fn objects_below(&self) -> u64 {
        self.objects_below
    }

    /// One more than the largest site id of a synchronisation event decoded so far (memory
    /// access sites are code addresses, not table ids); 0 if none.
    pub(crate) fn sites_below(&self) -> u64 {
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

    pub(crate) fn is_at_end(&self) -> bool {
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
    /// skipped: call `Decoder::skip_extension` first, or use [`Decoder::for_each`].
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
                if let Some(ev) = self.extension()? {
                    if !sink(ev) {
                        break;
                    }
                }
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

    /// Decodes events into `out`, from its first slot, skipping extension events; stops when
    /// `out` is full, at the end of the bytes, or at the first event that does not decode
    /// (the error, at that event's offset). The same events, state and errors as
    /// [`Decoder::for_each`] with a sink that stops after `out.len()` events, but faster: lock
    /// events whose numbers take one byte each (almost all of them) are decoded in a tight
    /// loop that reads the bytes a word at a time (`fast_run`); every other event goes through
    /// the general decoder.
    #[inline]
    pub(crate) fn decode_to<S: EventSlot>(&mut self, out: &mut [S]) -> Batch {
        let mut done = Batch {
            events: 0,
            last_key: None,
            error: None,
            extensions: 0,
        };
        loop {
            if done.events < out.len() {
                if let Some(ev) = self.pending.take() {
                    out[done.events].set(ev);
                    done.events += 1;
                    done.last_key = Some(ev.key);
                }
            }
            self.fast_run(out, &mut done);
            if done.events >= out.len() {
                return done;
            }
            // One event the fast loop left: another kind, a long number, the chunk's last
            // bytes, or an error.
            let Some(&raw) = self.buf.get(self.pos) else {
                return done;
            };
            if EXTENSION_TAGS.contains(&(raw & !KEY_FLAG)) {
                match self.extension() {
                    Ok(Some(ev)) => {
                        out[done.events].set(ev);
                        done.events += 1;
                        done.extensions += 1;
                        done.last_key = Some(ev.key);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        done.error = Some(e);
                        return done;
                    }
                }
                continue;
            }
            let start = self.pos;
            match self.decode_one() {
                Ok(ev) => {
                    out[done.events].set(ev);
                    done.events += 1;
                    done.last_key = Some(ev.key);
                }
                Err(what) => {
                    done.error = Some(DecodeError {
                        offset: start,
                        what,
                    });
                    return done;
                }
            }
        }
    }

    /// The fast loop of [`Decoder::decode_to`]: decodes events while each is a lock event whose
    /// key delta and fields take one byte each, at least `FAST_WINDOW` bytes remain (so a
    /// single bounds check covers the event) and `out` has room for two more (a lock-immediate
    /// gives two). Runs of plain accesses go to `access_run`, other memory events to
    /// `memory_event`. Leaves anything else, untouched, to the general decoder: bad bytes are
    /// never decided here.
    #[inline(never)]
    fn fast_run<S: EventSlot>(&mut self, out: &mut [S], done: &mut Batch) {
        use tag::*;
        let buf = self.buf;
        // The bytes from the cursor on: a slice whose length is checked once per event.
        let mut rest = buf.get(self.pos..).unwrap_or_default();
        let mut key = self.st.key;
        // One more than the largest id seen here (ids on this path are below 128).
        let mut objects = 0u32;
        let mut sites = 0u32;
        let mut i = done.events;
        let start = i;
        while i + 2 <= out.len() && rest.len() >= FAST_WINDOW {
            let word = u64::from_le_bytes(rest[..8].try_into().expect("eight bytes"));
            let raw = word as u8;
            let t = raw & !KEY_FLAG;
            // The lock events, one arm per tag byte (with and without a key delta), so that
            // each is straight-line code with its kind and mode as constants.
            macro_rules! lock {
                ($t:expr) => {{
                    let pair: &mut [S; 2] = (&mut out[i..i + 2]).try_into().expect("two slots");
                    let step = if raw & KEY_FLAG != 0 {
                        lock_event::<S, { $t | KEY_FLAG }>(
                            word,
                            key,
                            pair,
                            &mut objects,
                            &mut sites,
                        )
                    } else {
                        lock_event::<S, { $t }>(word, key, pair, &mut objects, &mut sites)
                    };
                    match step {
                        Some((next, len, events)) => {
                            key = next;
                            rest = &rest[len..];
                            i += events;
                            continue;
                        }
                        None => break,
                    }
                }};
            }
            match t {
                LOCK_REQUEST => lock!(LOCK_REQUEST),
                LOCK_REQUEST_SHARED => lock!(LOCK_REQUEST_SHARED),
                LOCK_ACQUIRED => lock!(LOCK_ACQUIRED),
                LOCK_ACQUIRED_SHARED => lock!(LOCK_ACQUIRED_SHARED),
                LOCK_RELEASE => lock!(LOCK_RELEASE),
                LOCK_IMMEDIATE => lock!(LOCK_IMMEDIATE),
                LOCK_IMMEDIATE_SHARED => lock!(LOCK_IMMEDIATE_SHARED),
                0x40..=0x44 | 0x48..=0x4c if raw & KEY_FLAG == 0 => {
                    // Plain accesses, what instrumented code records most, come in runs: a
                    // loop of their own, whose state (the memory deltas) stays in registers.
                    let len = self.access_run(rest, key, out, &mut i);
                    if len == 0 {
                        break;
                    }
                    rest = &rest[len..];
                }
                0x40..=0x44 | 0x48..=0x4c | ALLOC | FREE => {
                    // An access with a key delta, an allocation or a free. Written where it
                    // is decoded, so that the lock events' path above does not carry a
                    // memory event's fields.
                    let slot = &mut out[i];
                    let (next, len) = match t {
                        ALLOC => self.memory_event::<S, ALLOC>(raw, key, rest, slot),
                        FREE => self.memory_event::<S, FREE>(raw, key, rest, slot),
                        _ => self.memory_event::<S, READ_1>(raw, key, rest, slot),
                    };
                    if len == 0 {
                        break;
                    }
                    key = next;
                    rest = &rest[len..];
                    i += 1;
                }
                _ => break,
            }
        }
        if i > start {
            self.pos = buf.len() - rest.len();
            self.st.key = key;
            self.objects_below = self.objects_below.max(objects as u64);
            self.sites_below = self.sites_below.max(sites as u64);
            done.events = i;
            done.last_key = Some(key);
        }
    }

    /// The plain accesses at the start of `rest` (reads and writes of 1 to 16 bytes without a
    /// key delta, so all at `key`) whose address and site deltas take at most eight bytes
    /// each, while `ACCESS_WINDOW` bytes remain: written to `out` from slot `*i` on (which
    /// moves on), the delta state moved on. Returns the bytes read; 0 when the first event is
    /// not one of them, and then nothing changes.
    #[inline(never)]
    fn access_run<S: EventSlot>(
        &mut self,
        rest: &[u8],
        key: u64,
        out: &mut [S],
        i: &mut usize,
    ) -> usize {
        use EventKind::*;
        let mut addr = self.st.addr;
        let mut mem_site = self.st.mem_site;
        let mut cursor = rest;
        let mut n = *i;
        while n < out.len() {
            let Some(window) = cursor.first_chunk::<ACCESS_WINDOW>() else {
                break;
            };
            let raw = window[0];
            let size = PLAIN_ACCESS_SIZE[raw as usize];
            if size == 0 {
                break;
            }
            let word = u64::from_le_bytes(window[1..9].try_into().expect("eight bytes"));
            let (da, ds, len) = if word & 0x8080 == 0 {
                // Both deltas one byte: an access near the one before, at a site near its.
                (word & 0x7f, (word >> 8) & 0x7f, 3)
            } else {
                // The address delta takes up to eight bytes (a jump between the heap, the
                // stack and static data), so the site delta's bytes are in the window.
                let (da, da_len) = match varint::from_word(word) {
                    Some(n) => n,
                    None => break,
                };
                let at = 1 + da_len;
                let (ds, ds_len) = match window[at] {
                    b if b < 0x80 => (b as u64, 1),
                    _ => {
                        let word =
                            u64::from_le_bytes(window[at..at + 8].try_into().expect("eight bytes"));
                        match varint::from_word(word) {
                            Some(n) => n,
                            None => break,
                        }
                    }
                };
                (da, ds, at + ds_len)
            };
            // `ds` has at most 56 bits, so adding it to a 32-bit site cannot wrap: the sum is
            // the general decoder's checked one, and it must fit a u32.
            let Ok(site) = u32::try_from((mem_site as i64).wrapping_add(unzigzag(ds))) else {
                break;
            };
            addr = addr.wrapping_add(unzigzag(da) as u64);
            mem_site = site;
            let kind = if raw >= tag::WRITE_1 {
                Write { addr, size, site }
            } else {
                Read { addr, size, site }
            };
            out[n].set(Event { key, kind });
            n += 1;
            cursor = &cursor[len..];
        }
        self.st.addr = addr;
        self.st.mem_site = mem_site;
        *i = n;
        rest.len() - cursor.len()
    }

    /// A memory event of the fast loop at the start of `rest`: an allocation (`KIND` is
    /// `tag::ALLOC`), a free (`tag::FREE`), or a read or write of 1 to 16 bytes (`tag::READ_1`),
    /// whose numbers take at most eight bytes each and are minimal, with at least
    /// `MEMORY_WINDOW` bytes left: written to `slot`, the delta state moves on, and its key and
    /// length are returned. Otherwise length 0, and nothing changes.
    #[cold]
    #[inline(never)]
    fn memory_event<S: EventSlot, const KIND: u8>(
        &mut self,
        raw: u8,
        key: u64,
        rest: &[u8],
        slot: &mut S,
    ) -> (u64, usize) {
        use tag::*;
        let Some(bytes) = rest.get(..MEMORY_WINDOW) else {
            return (key, 0);
        };
        let mut at = 1;
        let mut number = || {
            let word = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
            let (v, len) = varint::from_word(word)?;
            at += len;
            Some(v)
        };
        let fields = (|| {
            let key = if raw & KEY_FLAG != 0 {
                let delta = number()?;
                if delta == 0 {
                    return None;
                }
                key.checked_add(delta)?
            } else {
                key
            };
            let alloc_size = if KIND == ALLOC { number()? } else { 0 };
            let da = unzigzag(number()?);
            let ds = unzigzag(number()?);
            let site = u32::try_from((self.st.mem_site as i64).checked_add(ds)?).ok()?;
            Some((key, alloc_size, da, site))
        })();
        let Some((key, alloc_size, da, site)) = fields else {
            return (key, 0);
        };
        let addr = self.st.addr.wrapping_add(da as u64);
        self.st.addr = addr;
        self.st.mem_site = site;
        let t = raw & !KEY_FLAG;
        let kind = match KIND {
            ALLOC => EventKind::Alloc {
                addr,
                size: alloc_size,
                site,
            },
            FREE => EventKind::Free { addr, site },
            _ if t >= WRITE_1 => EventKind::Write {
                addr,
                size: 1 << (t - WRITE_1),
                site,
            },
            _ => EventKind::Read {
                addr,
                size: 1 << (t - READ_1),
                site,
            },
        };
        slot.set(Event { key, kind });
        (key, at)
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
    /// After a barrier arrival: the generation extension that follows it, if there is one
    /// (it is consumed; one naming another barrier is left for the loop to skip).
    #[inline(never)]
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

    /// An extension event at the cursor, consumed: the event when this decoder keeps
    /// extensions and knows this one (blocking calls, signal context), else `None` (skipped).
    /// A body too short for its fields, or with a code (call, phase) this version does not know, is
    /// skipped as an unknown extension would be; later minors may append fields.
    fn extension(&mut self) -> Result<Option<Event>, DecodeError> {
        let start = self.pos;
        self.skip_extension()?;
        if !self.keep_extensions {
            return Ok(None);
        }
        let end = self.pos;
        // Re-read the header the skip validated: tag, key delta, length.
        let raw = self.buf[start];
        let mut at = start + 1;
        if raw & KEY_FLAG != 0 {
            let _ = varint::get(self.buf, &mut at);
        }
        let Ok(len) = varint::get(self.buf, &mut at) else {
            return Ok(None);
        };
        let Some(body) = self.buf.get(at..end).filter(|b| b.len() as u64 == len) else {
            return Ok(None);
        };
        let kind = match raw & !KEY_FLAG {
            tag::BLOCKING_BEGIN | tag::BLOCKING_END => {
                let Some(kind) = self.blocking_body(raw & !KEY_FLAG, body) else {
                    return Ok(None);
                };
                kind
            }
            tag::SIGNAL_HANDLER => match body {
                [HANDLER_ENTER, signal, ..] => EventKind::SignalEnter { signal: *signal },
                [HANDLER_EXIT, signal, ..] => EventKind::SignalExit { signal: *signal },
                _ => return Ok(None),
            },
            tag::HANDOFF_WRITE | tag::HANDOFF_READ => {
                match handoff_body(body, raw & !KEY_FLAG == tag::HANDOFF_WRITE) {
                    Some(k) => k,
                    None => return Ok(None),
                }
            }
            tag::SIGNAL_MASK => {
                let Ok(blocked) = varint::get(body, &mut 0) else {
                    return Ok(None);
                };
                EventKind::SignalMask { blocked }
            }
            _ => return Ok(None),
        };
        if let Some(site) = kind.site() {
            self.sites_below = self.sites_below.max(site as u64 + 1);
        }
        Ok(Some(Event {
            key: self.st.key,
            kind,
        }))
    }

    /// The body of a blocking-begin or blocking-end (`tag`); `None` when it is too short or
    /// names a call this version does not know.
    fn blocking_body(&mut self, tag: u8, body: &[u8]) -> Option<EventKind> {
        let mut pos = 1usize;
        let call = body
            .first()
            .and_then(|&c| BlockingCall::from_code(c as u64))?;
        let value = varint::get(body, &mut pos).ok()?;
        Some(match tag {
            tag::BLOCKING_BEGIN => {
                let site = u32::try_from(value).ok()?;
                self.sites_below = self.sites_below.max(site as u64 + 1);
                // Absent or 0: no timeout.
                let timeout_ns = varint::get(body, &mut pos)
                    .ok()
                    .and_then(|t| t.checked_sub(1));
                EventKind::BlockingBegin {
                    call,
                    site,
                    timeout_ns,
                }
            }
            _ => EventKind::BlockingEnd {
                call,
                duration_ns: value,
            },
        })
    }

    pub(crate) fn skip_extension(&mut self) -> Result<bool, DecodeError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `for_each` gives when its sink stops after `max` events: the reference.
    fn reference(bytes: &[u8], base: u64, max: usize) -> (Vec<Event>, Option<DecodeError>, u64) {
        let mut dec = Decoder::new(bytes, base);
        let mut events = Vec::new();
        let error = if max == 0 {
            None
        } else {
            dec.for_each(|ev| {
                events.push(ev);
                events.len() < max
            })
            .err()
        };
        (events, error, fingerprint(&dec))
    }

    /// Everything a decoder carries to its next call.
    fn fingerprint(dec: &Decoder<'_>) -> u64 {
        let s = dec.state();
        let text = format!("{s:?} {} {}", dec.objects_below(), dec.sites_below());
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        })
    }

    /// Decodes all of `bytes` with `decode_to` in batches of the given sizes (cycled), and also
    /// checks each batch against the reference from the same state.
    fn batched(bytes: &[u8], base: u64, sizes: &[usize]) -> (Vec<Event>, Option<DecodeError>) {
        let mut state = DecoderState::starting_at(base);
        let mut all = Vec::new();
        for &size in sizes.iter().cycle().take(10_000) {
            let mut dec = Decoder::resume(bytes, state);
            let mut out = vec![PLACEHOLDER; size];
            let batch = dec.decode_to(&mut out[..]);
            // The same batch through the general decoder, from the same state.
            let mut again = Decoder::resume(bytes, state);
            let mut want = Vec::new();
            let want_error = if size == 0 {
                None
            } else {
                again
                    .for_each(|ev| {
                        want.push(ev);
                        want.len() < size
                    })
                    .err()
            };
            assert_eq!(&out[..batch.events], &want[..]);
            assert_eq!(batch.error, want_error);
            assert_eq!(batch.last_key, want.last().map(|e| e.key));
            assert_eq!(fingerprint(&dec), fingerprint(&again));
            all.extend_from_slice(&out[..batch.events]);
            state = dec.state();
            if batch.error.is_some() || dec.is_at_end() {
                return (all, batch.error);
            }
        }
        panic!("no progress");
    }

    /// Event bytes the fast loop sees: lock events with small and large ids and key deltas,
    /// lock-immediates, memory events with near and far addresses, other kinds, extension
    /// events, and damage.
    fn chunk_bytes() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            8 => (
                prop_oneof![
                    3 => proptest::sample::select(vec![0x10u8, 0x11, 0x12, 0x13, 0x19, 0x1c, 0x1d]),
                    1 => 0u8..0x1e,
                ],
                any::<bool>(),
                prop_oneof![3 => 0u64..128, 1 => 0u64..300],
                prop_oneof![3 => 0u32..128, 1 => 0u32..300],
                prop_oneof![3 => 0u32..128, 1 => 0u32..300],
            )
                .prop_map(
                |(t, flag, delta, a, b)| {
                    let mut v = vec![if flag { t | KEY_FLAG } else { t }];
                    if flag {
                        varint::put(&mut v, delta);
                    }
                    varint::put(&mut v, a as u64);
                    varint::put(&mut v, b as u64);
                    v
                }
            ),
            6 => (
                prop_oneof![0x40u8..0x46, 0x48u8..0x4e, Just(tag::ALLOC), Just(tag::FREE)],
                any::<bool>(),
                0u64..300,
                prop_oneof![0u64..300, any::<u64>()],
                prop_oneof![0u64..300, any::<u64>()],
                prop_oneof![0u64..300, any::<u64>()],
            )
                .prop_map(|(t, flag, delta, x, y, z)| {
                    let mut v = vec![if flag { t | KEY_FLAG } else { t }];
                    if flag {
                        varint::put(&mut v, delta);
                    }
                    for n in [x, y, z] {
                        varint::put(&mut v, n);
                    }
                    v
                }),
            // Runs of plain accesses (`access_run`): address deltas of one to ten bytes, site
            // deltas that leave the u32 range or take five bytes, and some not minimal.
            4 => proptest::collection::vec(
                (
                    prop_oneof![0x40u8..0x45, 0x48u8..0x4d],
                    prop_oneof![3 => 0u64..128, 2 => (any::<u64>(), 0u32..64).prop_map(|(v, s)| v >> s)],
                    prop_oneof![3 => 0u64..128, 1 => 0u64..(1 << 34)],
                    0u8..16,
                ),
                1..12,
            )
            .prop_map(|accesses| {
                let mut v = Vec::new();
                for (t, da, ds, odd) in accesses {
                    v.push(t);
                    varint::put(&mut v, da);
                    if odd == 0 {
                        // The last group repeated as a zero: not minimal.
                        *v.last_mut().unwrap() |= 0x80;
                        v.push(0);
                    }
                    varint::put(&mut v, ds);
                }
                v
            }),
            1 => (0x60u8..0x80, 0usize..4).prop_map(|(t, n)| {
                let mut v = vec![t, n as u8];
                v.extend(std::iter::repeat_n(7u8, n));
                v
            }),
            1 => proptest::collection::vec(any::<u8>(), 1..4),
            1 => Just(vec![tag::LOCK_REQUEST | KEY_FLAG, 0x80, 0x00, 1, 1]),
            1 => Just(vec![0xff; 11]),
        ];
        proptest::collection::vec(piece, 0..80).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn decode_to_gives_what_the_general_decoder_gives(
            bytes in chunk_bytes(),
            base in prop_oneof![0u64..1000, Just(u64::MAX - 200), Just(u64::MAX - 3), Just(u64::MAX)],
            sizes in proptest::collection::vec(0usize..40, 1..6),
        ) {
            let (want, want_error, _) = reference(&bytes, base, usize::MAX);
            let sizes: Vec<usize> = if sizes.iter().all(|&s| s == 0) { vec![1] } else { sizes };
            let (got, got_error) = batched(&bytes, base, &sizes);
            prop_assert_eq!(got, want);
            prop_assert_eq!(got_error, want_error);
        }
    }

    #[test]
    fn the_fast_loop_reads_every_lock_and_memory_event_it_is_given() {
        // Encoded events of the fast kinds, many of them, round-trip through `decode_to`.
        let mut st = DeltaState::starting_at(5);
        let mut bytes = Vec::new();
        let mut events = Vec::new();
        let mut key = 5;
        for i in 0..5000u32 {
            key += (i % 3 == 0) as u64 * (1 + (i as u64 % 200));
            let kind = match i % 7 {
                0 => EventKind::LockRequest {
                    lock: i % 150,
                    mode: if i % 2 == 0 {
                        LockMode::Exclusive
                    } else {
                        LockMode::Shared
                    },
                    site: i % 130,
                },
                1 => EventKind::LockAcquired {
                    lock: i % 150,
                    mode: LockMode::Shared,
                },
                2 => EventKind::LockRelease {
                    lock: i % 90,
                    site: i % 300,
                },
                3 => EventKind::Read {
                    addr: 0x7f00_0000_0000 + (i as u64 * 0x9e37) % 0x10_0000,
                    size: 8,
                    site: 1000 + i % 5,
                },
                4 => EventKind::Alloc {
                    addr: 0x5500_0000 + i as u64 * 64,
                    size: i as u64 * 3,
                    site: 7,
                },
                5 if i % 2 == 0 => EventKind::Free {
                    addr: 0x5500_0000 + i as u64 * 32,
                    site: 9,
                },
                5 => EventKind::Read {
                    // Far from the access before, at a site far from its.
                    addr: u64::MAX - i as u64,
                    size: 1 << (i % 5),
                    site: if i % 4 == 1 { u32::MAX } else { 0 },
                },
                _ => EventKind::Write {
                    addr: i as u64,
                    size: 16,
                    site: 4,
                },
            };
            let ev = Event { key, kind };
            encode(&mut bytes, &mut st, &ev).unwrap();
            events.push(ev);
        }
        let mut dec = Decoder::new(&bytes, 5);
        let mut out = vec![PLACEHOLDER; events.len() + 3];
        let batch = dec.decode_to(&mut out[..]);
        assert_eq!(batch.error, None);
        assert_eq!(&out[..batch.events], &events[..]);
        assert!(dec.is_at_end());
        assert_eq!(dec.objects_below(), 150);
        assert_eq!(dec.sites_below(), 300);
    }
}
