//! Direct-mapped caches in front of the shared site and object tables: a hooked call usually
//! repeats a recent site and object, and a hit costs no hashing or probing.

use foresight_trace::event::SiteId;
use foresight_trace::PackedFields;

use super::ThreadState;
use crate::objects::Slot;
use crate::sites;

/// What the lane needs of a cached (object, call site) pair: the object's slot (its clock) and
/// the two ids, encoded.
#[derive(Clone, Copy)]
pub struct LanePair {
    pub slot: &'static Slot,
    pub fields: PackedFields,
}

/// One line each: the index is a shift, and a lookup touches one cache line.
#[derive(Clone, Copy)]
#[repr(align(64))]
pub(super) struct PairEntry {
    addr: usize,
    ra: usize,
    slot: usize,
    site: SiteId,
    /// The slot's stored id when the entry was made: the lane's hit needs it unchanged (a
    /// destroyed or re-initialised object fails the comparison and takes the general path).
    /// `NO_LANE` when the ids do not fit `PackedFields`: no slot stores 0 once its first
    /// object exists, so such an entry never passes the lane's check.
    stored_id: u32,
    /// The object and site ids, encoded for the lane (meaningless with `NO_LANE`).
    fields: PackedFields,
}

const NO_LANE: u32 = 0;

/// Matches no hook: no object lives at the (misaligned) last address, so a hit needs no
/// separate test for an empty entry.
pub(super) const EMPTY_PAIR: PairEntry = PairEntry {
    addr: usize::MAX,
    ra: usize::MAX,
    slot: 0,
    site: 0,
    stored_id: NO_LANE,
    fields: PackedFields::EMPTY,
};

#[inline(always)]
fn pair_index(addr: usize, ra: usize) -> usize {
    // Objects are at least 8-byte aligned, call sites are not: the low bits of both, folded.
    // Written as one shift of the sum, which the entry's address then scales (as
    // `((addr >> 3) ^ ra) & (CACHE - 1)`, in fewer instructions).
    ((addr ^ (ra << 3)) >> 3) & (CACHE - 1)
}

const CACHE_BITS: u32 = 6;
pub(super) const CACHE: usize = 1 << CACHE_BITS;

#[inline]
fn cache_index(x: usize) -> usize {
    (x ^ (x >> 6) ^ (x >> 12)) & (CACHE - 1)
}

impl ThreadState {
    /// The site of an allocation called from `ra` (owner only).
    #[inline(always)]
    pub fn site(&self, ra: usize) -> SiteId {
        if !sites::shallow() {
            return sites::site(ra);
        }
        let c = &self.site_cache[cache_index(ra)];
        let (k, v) = c.get();
        if k == ra {
            return v;
        }
        let v = sites::site(ra);
        c.set((ra, v));
        v
    }

    /// The site of a synchronisation hook called from `ra`, and whether it may be cached by
    /// `ra` (`sites::call_site`; owner only).
    #[inline(always)]
    pub fn call_site(&self, ra: usize) -> (SiteId, bool) {
        if !sites::shallow() {
            return sites::call_site(ra);
        }
        let c = &self.site_cache[cache_index(ra)];
        let (k, v) = c.get();
        if k == ra {
            return (v, true);
        }
        let (v, cacheable) = sites::call_site(ra);
        if cacheable {
            c.set((ra, v));
        }
        (v, cacheable)
    }

    #[inline(always)]
    pub fn cached_object(&self, addr: usize) -> Option<&'static Slot> {
        let (k, v) = self.obj_cache[cache_index(addr)].get();
        if k != addr || v == 0 {
            return None;
        }
        // SAFETY: cached values are `&'static Slot` pointers (slots live in a static table).
        let s: &'static Slot = unsafe { &*(v as *const Slot) };
        s.is_live_at(addr).then_some(s)
    }

    /// `cached_pair` for the lane: the slot and the packed ids, when the entry is for this
    /// (object, call site), the object it was made for is still the slot's, and the ids fit.
    #[inline(always)]
    pub fn lane_pair(&self, addr: usize, ra: usize) -> Option<LanePair> {
        let e = self.pair_cache[pair_index(addr, ra)].get();
        if (e.addr ^ addr) | (e.ra ^ ra) != 0 {
            return None;
        }
        // SAFETY: cached slots are `&'static Slot` pointers (slots live in a static table).
        let slot: &'static Slot = unsafe { &*(e.slot as *const Slot) };
        if slot.stored_id() != e.stored_id {
            return None;
        }
        Some(LanePair {
            slot,
            fields: e.fields,
        })
    }

    /// The slot and site cached for a hook on `addr` called from `ra` (owner only).
    #[inline(always)]
    pub fn cached_pair(&self, addr: usize, ra: usize) -> Option<(&'static Slot, SiteId)> {
        let e = self.pair_cache[pair_index(addr, ra)].get();
        if (e.addr ^ addr) | (e.ra ^ ra) != 0 {
            return None;
        }
        // SAFETY: cached slots are `&'static Slot` pointers (slots live in a static table).
        let s: &'static Slot = unsafe { &*(e.slot as *const Slot) };
        s.is_live_at(addr).then_some((s, e.site))
    }

    #[inline]
    pub fn cache_pair(&self, addr: usize, ra: usize, s: &'static Slot, site: SiteId) {
        if sites::shallow() {
            let stored_id = s.stored_id();
            let fields = s
                .live_id()
                .and_then(|id| PackedFields::new(id, site))
                .filter(|_| s.stored_id() == stored_id);
            self.pair_cache[pair_index(addr, ra)].set(PairEntry {
                addr,
                ra,
                slot: s as *const Slot as usize,
                site,
                stored_id: if fields.is_some() { stored_id } else { NO_LANE },
                fields: fields.unwrap_or(PackedFields::EMPTY),
            });
        }
    }

    #[inline]
    pub fn cache_object(&self, addr: usize, s: &'static Slot) {
        self.obj_cache[cache_index(addr)].set((addr, s as *const Slot as usize));
    }

    /// Empties the caches (a fork child: the tables they point into are reset).
    pub(super) fn clear_caches(&self) {
        for c in &self.site_cache {
            c.set((0, 0));
        }
        for c in &self.obj_cache {
            c.set((0, 0));
        }
        for c in &self.pair_cache {
            c.set(EMPTY_PAIR);
        }
    }
}
