//! Synchronisation objects: address → `ObjectId`, with a generation per address.
//!
//! A fixed-size static open-addressing table of 64-byte slots (no malloc, no lock on lookup;
//! one slot per cache line so that unrelated objects do not share one). A slot is claimed for
//! an address with one CAS; the claimer assigns the id, writes the object's table record and
//! publishes the id; others wait for it (only on the object's first use). `destroy` retires the
//! slot's id; the next `init` or use gives the address a new id and generation. The slot also
//! holds the object's Lamport clock (`sequence.rs`) and, for barriers, the arrival count.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use foresight_trace::event::{ObjectId, SiteId};
use foresight_trace::tables::{ClassKey, ObjectInfo, ObjectKind, TableRecord};

use crate::{modules, output};

/// 2^20 slots of 64 bytes: 64 MiB of zero-initialised address space (`.bss`), of which only
/// the pages holding used slots are ever touched.
const SLOTS: usize = 1 << 20;
/// Probes before giving up on an insertion (a full or badly clustered table must not make every
/// new object cost a scan of the whole table); the object is then not recorded.
const MAX_PROBES: usize = 512;

/// `id` values: 0 and `BUSY` mean "being set up, wait"; `RETIRED` means destroyed.
const BUSY: u32 = u32::MAX - 1;
const RETIRED: u32 = u32::MAX;

#[repr(align(64))]
pub struct Slot {
    addr: AtomicUsize,
    /// The current object's id + 1.
    id: AtomicU32,
    /// Objects that lived at this address before the current one.
    generation: AtomicU32,
    kind: AtomicU8,
    /// Lamport clock: the largest key released through the object.
    pub clock: AtomicU64,
    /// Barriers: arrivals so far, and the count from `barrier_init`.
    pub arrivals: AtomicU64,
    pub count: AtomicU32,
}

impl Slot {
    const fn new() -> Self {
        Self {
            addr: AtomicUsize::new(0),
            id: AtomicU32::new(0),
            generation: AtomicU32::new(0),
            kind: AtomicU8::new(0),
            clock: AtomicU64::new(0),
            arrivals: AtomicU64::new(0),
            count: AtomicU32::new(0),
        }
    }

    /// Whether this slot currently holds a live object at `addr` (a cached slot is still
    /// good: not reused for another address, not destroyed, not being set up).
    #[inline]
    pub fn is_live_at(&self, addr: usize) -> bool {
        let id = self.id.load(Ordering::Acquire);
        self.addr.load(Ordering::Relaxed) == addr && id != 0 && id < BUSY
    }

    /// The id field as stored: the live object's id + 1, or a set-up or destroyed marker. Two
    /// equal readings with a live object in between name the same object.
    #[inline(always)]
    pub fn stored_id(&self) -> u32 {
        self.id.load(Ordering::Acquire)
    }

    /// The id of the object this slot holds now, if one is live (not being set up, not
    /// destroyed). A slot belongs to one address for good (only a fork child clears the table,
    /// and the thread caches with it), so a slot found for an address needs no other check: a
    /// re-initialised object there simply has a new id.
    #[inline(always)]
    pub fn live_id(&self) -> Option<ObjectId> {
        let id = self.id.load(Ordering::Acquire);
        // 1..BUSY in one comparison (0 and BUSY..: set-up or destroyed).
        (id.wrapping_sub(1) < BUSY - 1).then(|| id - 1)
    }

    #[inline]
    pub fn id(&self) -> ObjectId {
        self.id.load(Ordering::Acquire).wrapping_sub(1)
    }
}

/// Page-aligned so that the fork child can zero it with `madvise(MADV_DONTNEED)`.
#[repr(C, align(4096))]
struct Table([Slot; SLOTS]);

static TABLE: Table = Table([const { Slot::new() }; SLOTS]);
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

fn kind_code(k: ObjectKind) -> u8 {
    k as u8 + 1
}

/// How the object came to be seen.
#[derive(Clone, Copy)]
pub enum Origin {
    /// `*_init` at this site: always a new object (a re-init is a new generation).
    Init(SiteId),
    /// First use at this site (statically initialised, or initialised before recording).
    Use(SiteId),
}

#[inline]
fn hash(addr: usize) -> usize {
    (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) & (SLOTS - 1)
}

/// The slot of the object at `addr`, creating it (and its table record) on first sight.
/// `kind_of` gives the object's kind when it is new. `None` if the table is full.
#[inline]
pub fn get(addr: usize, origin: Origin, kind_of: impl Fn() -> ObjectKind) -> Option<&'static Slot> {
    if addr == 0 {
        // A null object (the program's call fails or faults): 0 marks a free slot, nothing
        // is at that address.
        return None;
    }
    let mut i = hash(addr);
    for _ in 0..MAX_PROBES {
        let s = &TABLE.0[i];
        // The slot is claimed, or found, by one compare-exchange, not by a load first, so
        // that a page's first touch is a write (`first_touch`). This runs once per object and
        // thread (the threads' caches answer after it).
        match s
            .addr
            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                create(s, addr, origin, kind_of(), 0);
                return Some(s);
            }
            Err(v) if v == addr => return settle(s, addr, origin, &kind_of),
            Err(_) => {}
        }
        i = (i + 1) & (SLOTS - 1);
    }
    None
}

/// An existing slot for `addr`: wait for its id, and start a new generation where needed
/// (an init, a use after destroy, or memory reused for another kind of object).
#[inline]
fn settle(
    s: &'static Slot,
    addr: usize,
    origin: Origin,
    kind_of: &impl Fn() -> ObjectKind,
) -> Option<&'static Slot> {
    loop {
        let id = s.id.load(Ordering::Acquire);
        if id == 0 || id == BUSY {
            std::hint::spin_loop();
            continue;
        }
        let fresh = match origin {
            Origin::Init(_) => true,
            Origin::Use(_) => id == RETIRED,
        };
        if !fresh {
            return Some(s);
        }
        // A new generation: claim the slot for set-up.
        if s.id
            .compare_exchange(id, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let g = s.generation.load(Ordering::Relaxed) + 1;
            create(s, addr, origin, kind_of(), g);
            return Some(s);
        }
    }
}

fn create(s: &Slot, addr: usize, origin: Origin, kind: ObjectKind, generation: u32) {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let class = match modules::frame_of(addr as u64) {
        Some(frame) => ClassKey::Static(frame),
        None => match origin {
            Origin::Init(site) => ClassKey::InitSite(site),
            Origin::Use(site) => ClassKey::FirstUse(site),
        },
    };
    output::table_record(&TableRecord::Object(ObjectInfo {
        id,
        kind,
        address: addr as u64,
        generation,
        class,
    }));
    s.generation.store(generation, Ordering::Relaxed);
    s.kind.store(kind_code(kind), Ordering::Relaxed);
    s.clock.store(0, Ordering::Relaxed);
    s.arrivals.store(0, Ordering::Relaxed);
    s.id.store(id + 1, Ordering::Release);
}

/// After `destroy`: the next use of the address is a new object.
pub fn retire(s: &Slot) {
    s.id.store(RETIRED, Ordering::Release);
}

/// Lookup without creating (`destroy` of an object never seen: nothing to record).
pub fn find(addr: usize) -> Option<&'static Slot> {
    if addr == 0 {
        return None;
    }
    let mut i = hash(addr);
    for _ in 0..MAX_PROBES {
        let s = &TABLE.0[i];
        let cur = s.addr.load(Ordering::Acquire);
        if cur == addr {
            let id = s.id.load(Ordering::Acquire);
            return (id != 0 && id != BUSY && id != RETIRED).then_some(s);
        }
        if cur == 0 {
            return None;
        }
        i = (i + 1) & (SLOTS - 1);
    }
    None
}

/// fork child: forget the parent's objects (the child's trace defines its own).
///
/// # Safety
/// Only in a fork child, on its only thread.
pub unsafe fn reset() {
    // SAFETY: the table is a page-aligned static of atomics, zero when unused, and the
    // caller's only thread is not using it.
    unsafe {
        crate::output::zero_static(
            &TABLE as *const Table as *mut u8,
            std::mem::size_of::<Table>(),
            || {
                for s in TABLE.0.iter() {
                    if s.addr.load(Ordering::Relaxed) != 0 {
                        s.addr.store(0, Ordering::Relaxed);
                        s.id.store(0, Ordering::Relaxed);
                        s.generation.store(0, Ordering::Relaxed);
                    }
                }
            },
        );
    }
    NEXT_ID.store(0, Ordering::Relaxed);
}
