//! Sets of access sites, interned: the lines a shadow entry stands for once accesses of one
//! thread, kind and bytes within one epoch were merged into it (`shadow.rs`).
//!
//! A compressor reads each granule of its input from a dozen lines, in the same few orders over
//! and over, so the sets repeat across granules: a set is stored once and an entry holds its
//! id. The sets are bounded ([`MAX_SET_SITES`] sites in all, [`MAX_SET_LEN`] per set): when
//! they are full the shadow drops an entry as it did before, and counts it.

use foldhash::HashMap;

/// Sites held by all sets together: 16 MiB of sites, about twice that with the map.
pub const MAX_SET_SITES: usize = 1 << 22;

/// Sites one set holds at most: a granule read from more lines than this in one epoch keeps
/// the newest and drops the rest (counted by line).
pub const MAX_SET_LEN: usize = 64;

/// Slots of the cache of recent unions: the same set grown by the same line, granule after
/// granule, is found without hashing the set.
const RECENT: usize = 1 << 12;

/// A site or a set of sites, as an entry holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lines {
    Site(u32),
    Set(u32),
}

impl Lines {
    fn key(self) -> u64 {
        match self {
            Lines::Site(s) => u64::from(s),
            Lines::Set(i) => 1 << 32 | u64::from(i),
        }
    }
}

#[derive(Debug)]
pub struct SiteSets {
    /// The sites of each set, sorted, without repeats.
    sets: Vec<Box<[u32]>>,
    ids: HashMap<Box<[u32]>, u32>,
    sites: usize,
    /// (the set or site grown, the site added, the union's id), by a hash of the first two.
    recent: Box<[(u64, u32, u32)]>,
}

impl Default for SiteSets {
    fn default() -> Self {
        SiteSets {
            sets: Vec::new(),
            ids: HashMap::default(),
            sites: 0,
            recent: vec![(u64::MAX, 0, 0); RECENT].into_boxed_slice(),
        }
    }
}

impl SiteSets {
    /// The sites of set `id`, sorted.
    pub fn set(&self, id: u32) -> &[u32] {
        &self.sets[id as usize]
    }

    /// The id of the set of `lines` and `site`; `None` when the sets are full or the set would
    /// be longer than [`MAX_SET_LEN`].
    pub fn union(&mut self, lines: Lines, site: u32) -> Option<u32> {
        let key = lines.key();
        let slot = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(site))
            .wrapping_mul(0xff51_afd7_ed55_8ccd)
            >> 52;
        let slot = slot as usize % RECENT;
        let (k, s, id) = self.recent[slot];
        if k == key && s == site {
            return Some(id);
        }
        let mut set: Vec<u32> = match lines {
            Lines::Site(s) => vec![s],
            Lines::Set(i) => self.sets[i as usize].to_vec(),
        };
        if let Err(at) = set.binary_search(&site) {
            set.insert(at, site);
        }
        if set.len() > MAX_SET_LEN {
            return None;
        }
        let id = match self.ids.get(set.as_slice()) {
            Some(&id) => id,
            None => {
                if self.sites + set.len() > MAX_SET_SITES {
                    return None;
                }
                let id = self.sets.len() as u32;
                self.sites += set.len();
                let set = set.into_boxed_slice();
                self.sets.push(set.clone());
                self.ids.insert(set, id);
                id
            }
        };
        self.recent[slot] = (key, site, id);
        Some(id)
    }
}
