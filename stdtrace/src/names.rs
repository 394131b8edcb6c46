//! Interning the names of an STD trace (threads, locks, variables, locations): each distinct
//! name gets a dense id the first time it is seen. A lookup per field of every line, so the
//! hash reads eight bytes at a time instead of SipHash's byte stream; the names come from an
//! untrusted file, so it is keyed by a random value drawn per table, and a file cannot be
//! crafted to make every name collide.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// Dense ids for byte strings, and the strings back by id.
pub struct Names {
    ids: HashMap<Box<[u8]>, u32, NameHasherBuilder>,
    names: Vec<Box<str>>,
    /// Names of 1 to 15 bytes seen lately, packed with their length into two words, by a hash
    /// of those: most STD names are short (`T1`, `L3`, `V12`, `120`, `local.T1`), and two
    /// compares of a word cost less than hashing the bytes and comparing them in the table.
    recent: Box<[(u64, u64, u32)]>,
    key: u64,
}

const RECENT: usize = 1 << 10;

/// `name` packed with its length when it has 1 to 15 bytes: its bytes in order, little-endian,
/// in two words padded with zeros, the length in the top byte of the second: two names have
/// the same words exactly when they are the same, and the second word is never 0. A few loads
/// that may overlap (the length tells how), no copy of a length known only at run time (that
/// costs a call); [`pack_at`] gives the same from a buffer with room after the name.
#[inline(always)]
pub(super) fn pack(name: &[u8]) -> Option<(u64, u64)> {
    let len = name.len();
    let word = |at: usize| u64::from_le_bytes(name[at..at + 8].try_into().expect("eight bytes"));
    let half =
        |at: usize| u32::from_le_bytes(name[at..at + 4].try_into().expect("four bytes")) as u64;
    let (lo, tail) = match len {
        0 => return None,
        // Overlapping bytes are ORed with themselves.
        1..=3 => (
            name[0] as u64
                | (name[len / 2] as u64) << (8 * (len / 2))
                | (name[len - 1] as u64) << (8 * (len - 1)),
            0,
        ),
        4..=7 => (half(0) | half(len - 4) << (8 * (len - 4)), 0),
        // The bytes after the first eight, from the last eight (whose top byte is the last).
        8..=15 => (word(0), (word(len - 8) >> 8) >> (8 * (15 - len))),
        _ => return None,
    };
    Some((lo, tail | (len as u64) << 56))
}

/// [`pack`] of `data[at..at + len]`, reading 16 bytes from `at` (which `data` must hold) and
/// keeping those of the name: two loads and two masks from a table by length, no branch on
/// the length but one for a long name. `(0, 0)` when `len` is 0 or above 15.
#[inline(always)]
pub(super) fn pack_at(data: &[u8], at: usize, len: usize) -> (u64, u64) {
    if len > 15 {
        return (0, 0);
    }
    let bytes: &[u8; 16] = data[at..at + 16].try_into().expect("sixteen bytes");
    let lo = u64::from_le_bytes(bytes[..8].try_into().expect("eight bytes"));
    let hi = u64::from_le_bytes(bytes[8..].try_into().expect("eight bytes"));
    let (keep_lo, keep_hi, top) = PACK_MASKS[len];
    (lo & keep_lo, (hi & keep_hi) | top)
}

/// By length: the bits of the first word and of the second that are the name's, and the
/// length in the top byte (all 0 for length 0, so that it packs to (0, 0)).
const PACK_MASKS: [(u64, u64, u64); 16] = {
    let mut t = [(0, 0, 0); 16];
    let mut len = 1;
    while len < 16 {
        let lo = if len >= 8 {
            u64::MAX
        } else {
            (1 << (8 * len)) - 1
        };
        let hi = if len <= 8 {
            0
        } else {
            (1 << (8 * (len - 8))) - 1
        };
        t[len] = (lo, hi, (len as u64) << 56);
        len += 1;
    }
    t
};

/// The name [`pack`] packed, back: its bytes (the first `len`) and `len`.
pub(super) fn unpack((lo, hi): (u64, u64)) -> ([u8; 15], usize) {
    let mut name = [0u8; 15];
    name[..8].copy_from_slice(&lo.to_le_bytes());
    name[8..].copy_from_slice(&hi.to_le_bytes()[..7]);
    (name, ((hi >> 56) as usize).min(15))
}

/// What [`Names::intern`] found.
pub enum Interned {
    Known(u32),
    /// A name seen for the first time, now given this id.
    New(u32),
}

impl Names {
    pub fn new() -> Self {
        let ids = HashMap::with_hasher(NameHasherBuilder::new());
        let key = ids.hasher().key;
        Self {
            ids,
            names: Vec::new(),
            // No packed name has a second word of 0 (its length is at least 1).
            recent: vec![(0, 0, 0); RECENT].into_boxed_slice(),
            key,
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// The id of `name`, new if it was never seen; `Err` when it is not UTF-8 (the byte
    /// offset of the first bad byte) or when 2^32 names are already known.
    #[inline(always)]
    pub fn intern(&mut self, name: &[u8]) -> Result<Interned, NameError> {
        self.intern_packed(name, pack(name))
    }

    /// The same, with `name` already packed ([`pack`]).
    #[inline(always)]
    pub fn intern_packed(
        &mut self,
        name: &[u8],
        packed: Option<(u64, u64)>,
    ) -> Result<Interned, NameError> {
        let slot = packed.map(|(lo, hi)| {
            let h = (lo ^ hi.rotate_left(29) ^ self.key).wrapping_mul(MUL);
            (h >> 54) as usize
        });
        if let (Some((lo, hi)), Some(slot)) = (packed, slot) {
            let (a, b, id) = self.recent[slot];
            if (a, b) == (lo, hi) {
                return Ok(Interned::Known(id));
            }
        }
        self.intern_slow(name, packed, slot)
    }

    #[inline(never)]
    fn intern_slow(
        &mut self,
        name: &[u8],
        packed: Option<(u64, u64)>,
        slot: Option<usize>,
    ) -> Result<Interned, NameError> {
        let found = self.ids.get(name).copied();
        if let Some(id) = found {
            if let (Some((lo, hi)), Some(slot)) = (packed, slot) {
                self.recent[slot] = (lo, hi, id);
            }
            return Ok(Interned::Known(id));
        }
        let text = std::str::from_utf8(name).map_err(|e| NameError::NotUtf8(e.valid_up_to()))?;
        let id = u32::try_from(self.names.len()).map_err(|_| NameError::TooMany)?;
        self.ids.insert(name.into(), id);
        self.names.push(text.into());
        if let (Some((lo, hi)), Some(slot)) = (packed, slot) {
            self.recent[slot] = (lo, hi, id);
        }
        Ok(Interned::New(id))
    }

    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

impl Default for Names {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameError {
    NotUtf8(usize),
    TooMany,
}

/// A keyed hash of byte strings, eight bytes at a time.
#[derive(Clone, Copy, Debug)]
pub struct NameHasherBuilder {
    key: u64,
}

impl NameHasherBuilder {
    pub fn new() -> Self {
        let key = std::collections::hash_map::RandomState::new().hash_one(0x57d_u64) | 1;
        Self { key }
    }
}

impl Default for NameHasherBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BuildHasher for NameHasherBuilder {
    type Hasher = NameHasher;
    fn build_hasher(&self) -> NameHasher {
        NameHasher { state: self.key }
    }
}

pub struct NameHasher {
    state: u64,
}

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

impl NameHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        // One multiply per word, with the high half folded back so that every input bit
        // reaches the low bits the table indexes with.
        let m = ((self.state ^ word) as u128).wrapping_mul(MUL as u128);
        self.state = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl Hasher for NameHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let h = self.state.wrapping_mul(MUL);
        h ^ (h >> 29)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            // The length goes in too: "a" and "a\0" differ.
            self.mix(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_and_stable() {
        let mut n = Names::new();
        assert!(matches!(n.intern(b"T0"), Ok(Interned::New(0))));
        assert!(matches!(n.intern(b"T1"), Ok(Interned::New(1))));
        assert!(matches!(n.intern(b"T0"), Ok(Interned::Known(0))));
        assert!(matches!(n.intern(b"a\0"), Ok(Interned::New(2))));
        assert!(matches!(n.intern(b"a"), Ok(Interned::New(3))));
        assert_eq!(n.name(1), "T1");
        assert!(matches!(n.intern(b"a"), Ok(Interned::Known(3))));
        assert_eq!(n.intern(b"x\xffy").err(), Some(NameError::NotUtf8(1)));
        assert_eq!(n.len(), 4);
    }

    #[test]
    fn packed_names_are_distinct() {
        // Every name of 0 to 16 bytes over a small alphabet, up to length 4, and longer names
        // that differ in one byte: equal words exactly when equal names.
        let mut names: Vec<Vec<u8>> = vec![Vec::new()];
        let mut level = vec![Vec::new()];
        for _ in 0..4 {
            level = level
                .iter()
                .flat_map(|n: &Vec<u8>| {
                    [b'a', b'b', 0].map(|c| {
                        let mut m = n.clone();
                        m.push(c);
                        m
                    })
                })
                .collect();
            names.extend(level.iter().cloned());
        }
        for len in 5..=17 {
            for at in 0..len {
                for c in [b'x', b'y', 0] {
                    let mut m = vec![b'a'; len];
                    m[at] = c;
                    names.push(m);
                }
            }
        }
        names.sort();
        names.dedup();
        let mut seen = std::collections::HashMap::new();
        for name in &names {
            match pack(name) {
                None => assert!(name.is_empty() || name.len() >= 16, "{name:?}"),
                Some(p) => {
                    assert_ne!(p.1, 0);
                    let mut padded = name.clone();
                    padded.resize(name.len() + 16, 0xa5);
                    assert_eq!(pack_at(&padded, 0, name.len()), p, "pack_at");
                    let (bytes, len) = unpack(p);
                    assert_eq!(&bytes[..len], &name[..], "unpacked");
                    if let Some(other) = seen.insert(p, name.clone()) {
                        panic!("{name:?} and {other:?} pack the same");
                    }
                }
            }
        }
        // And the cache gives each its own id.
        let mut n = Names::new();
        let ids: Vec<u32> = names
            .iter()
            .map(|name| match n.intern(name).unwrap() {
                Interned::New(id) | Interned::Known(id) => id,
            })
            .collect();
        for (name, &id) in names.iter().zip(&ids) {
            assert!(matches!(n.intern(name), Ok(Interned::Known(i)) if i == id));
            assert_eq!(n.name(id).as_bytes(), &name[..]);
        }
    }
}
