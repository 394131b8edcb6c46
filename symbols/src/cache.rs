//! The frames already resolved for a build, kept between symbolisations
//! (`SymbolizeOptions::frame_cache`): a second recording of the same program names its sites
//! from here, without reading the module or its DWARF.
//!
//! One file per module build (the build-id the trace recorded) and per way of resolving
//! (demangling, debug directories, whether a separate debug file is there): every frame asked
//! of that build so far, by module offset and use, with its locations. The entries were
//! resolved from the recorded build, so they hold whatever file is now at the module's path.
//! The file is as untrusted as a trace: one that does not parse, or is too large, is ignored
//! (and replaced); it is replaced whole, by a rename, so that a reader never sees half of it.
//!
//! A directory keeps the files of at most [`MAX_FILES`] builds: a program rebuilt and recorded
//! again and again would otherwise leave a file for every build. The files written or used
//! longest ago go first; a file in use is touched at most once a day, so that its time says
//! when it was last used without a write at every recording.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use foresight_trace::tables::Frame;

use crate::{ResolvedLocation, SymbolizeOptions, Use};

const MAGIC: &[u8] = b"foresight resolved frames 1\n";
/// Files larger than this are not read.
const MAX_FILE_LEN: u64 = 64 << 20;
/// Locations of one frame; more means a damaged file.
const MAX_LOCATIONS: u32 = 1024;
const NONE: u32 = u32::MAX;
/// Builds whose frames one directory keeps.
pub(crate) const MAX_FILES: usize = 256;
/// A file used is touched when its time is older than this.
const TOUCH_AFTER: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

pub(crate) struct FrameCache {
    path: PathBuf,
    entries: HashMap<(bool, u64), Vec<ResolvedLocation>>,
    changed: bool,
    /// The file was there when opened (a new one may push an old one out).
    existed: bool,
}

impl FrameCache {
    /// The cache of the build `build_id` in `dir` (empty if there is none yet, or it does not
    /// parse).
    pub(crate) fn open(dir: &Path, build_id: &[u8], opts: &SymbolizeOptions) -> Self {
        let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        opts.demangle.hash(&mut h);
        for d in &opts.debug_dirs {
            d.hash(&mut h);
            // A separate debug file installed later changes what the module resolves to.
            if hex.len() > 2 {
                d.join(".build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..]))
                    .exists()
                    .hash(&mut h);
            }
        }
        let path = dir.join(format!("{hex}-{:016x}.frames", h.finish()));
        let file = std::fs::File::open(&path).ok();
        let existed = file.is_some();
        if let Some(f) = &file {
            touch_if_old(f, &path);
        }
        let entries = file
            .filter(|f| f.metadata().is_ok_and(|m| m.len() <= MAX_FILE_LEN))
            .and_then(|f| {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::io::BufReader::new(f), &mut bytes).ok()?;
                decode(&bytes)
            })
            .unwrap_or_default();
        Self {
            path,
            entries,
            changed: false,
            existed,
        }
    }

    /// The locations of every frame of `frames`, if the cache has them all.
    pub(crate) fn get_all(
        &self,
        frames: &[(Frame, Use)],
    ) -> Option<Vec<(Frame, Vec<ResolvedLocation>)>> {
        frames
            .iter()
            .map(|&(f, u)| Some((f, self.entries.get(&(u == Use::Data, f.offset))?.clone())))
            .collect()
    }

    /// Adds what `resolved` (in the order of `frames`) says.
    pub(crate) fn add(
        &mut self,
        frames: &[(Frame, Use)],
        resolved: &[(Frame, Vec<ResolvedLocation>)],
    ) {
        for ((f, u), (_, locs)) in frames.iter().zip(resolved) {
            let key = (*u == Use::Data, f.offset);
            if let std::collections::hash_map::Entry::Vacant(e) = self.entries.entry(key) {
                e.insert(locs.clone());
                self.changed = true;
            }
        }
    }

    /// Writes the file if anything was added. A cache that cannot be written costs only the
    /// next symbolisation's time.
    pub(crate) fn save(&self) {
        if !self.changed {
            return;
        }
        let mut bytes = MAGIC.to_vec();
        let mut keys: Vec<&(bool, u64)> = self.entries.keys().collect();
        keys.sort();
        for key in keys {
            encode(&mut bytes, *key, &self.entries[key]);
        }
        // A private file of a name no other writer has, renamed over the cache when whole: a
        // reader sees the old file or the new one, never a part.
        let Some(dir) = self.path.parent() else {
            return;
        };
        let written = tempfile::NamedTempFile::new_in(dir)
            .and_then(|mut f| f.write_all(&bytes).map(|()| f))
            .and_then(|f| f.persist(&self.path).map_err(|e| e.error));
        if written.is_ok() && !self.existed {
            keep_newest(dir, MAX_FILES);
        }
    }
}

/// Sets the modification time of the cache file `f` (at `path`) to now when it is older than
/// [`TOUCH_AFTER`]: it was used, and [`keep_newest`] goes by that time.
fn touch_if_old(f: &std::fs::File, path: &Path) {
    let now = std::time::SystemTime::now();
    let old = f
        .metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > TOUCH_AFTER));
    if old {
        if let Ok(w) = std::fs::OpenOptions::new().write(true).open(path) {
            let _ = w.set_modified(now);
        }
    }
}

/// Removes the oldest `.frames` files of `dir` (by modification time) until `keep` are left.
/// Best effort: a file another recording removes first, or that cannot be removed, is passed.
pub(crate) fn keep_newest(dir: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "frames"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= keep {
        return;
    }
    files.sort();
    for (_, path) in &files[..files.len() - keep] {
        let _ = std::fs::remove_file(path);
    }
}

fn put_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        None => out.extend_from_slice(&NONE.to_le_bytes()),
    }
}

fn encode(out: &mut Vec<u8>, (data, offset): (bool, u64), locs: &[ResolvedLocation]) {
    out.push(u8::from(data));
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(locs.len() as u32).to_le_bytes());
    for l in locs {
        put_str(out, l.function.as_deref());
        put_str(out, l.file.as_deref());
        out.extend_from_slice(&l.line.to_le_bytes());
        out.extend_from_slice(&l.column.to_le_bytes());
    }
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// `Some(None)` for an absent string; `None` when the bytes are not a string.
    fn string(&mut self) -> Option<Option<String>> {
        match self.u32()? {
            NONE => Some(None),
            n => Some(Some(
                std::str::from_utf8(self.take(n as usize)?)
                    .ok()?
                    .to_string(),
            )),
        }
    }
}

type Entries = HashMap<(bool, u64), Vec<ResolvedLocation>>;

fn decode(bytes: &[u8]) -> Option<Entries> {
    let mut c = Cursor(bytes.strip_prefix(MAGIC)?);
    let mut entries = HashMap::new();
    while !c.0.is_empty() {
        let data = match c.take(1)?[0] {
            0 => false,
            1 => true,
            _ => return None,
        };
        let offset = c.u64()?;
        let n = c.u32()?;
        if n > MAX_LOCATIONS {
            return None;
        }
        let mut locs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            locs.push(ResolvedLocation {
                function: c.string()?,
                file: c.string()?,
                line: c.u32()?,
                column: c.u32()?,
            });
        }
        entries.insert((data, offset), locs);
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_a_round_trip_and_damage_is_ignored() {
        let locs = vec![
            ResolvedLocation {
                function: Some("sqlite3_mutex_enter".into()),
                file: Some("/src/sqlite3.c".into()),
                line: 29058,
                column: 3,
            },
            ResolvedLocation {
                function: None,
                file: None,
                line: 0,
                column: 0,
            },
        ];
        let mut bytes = MAGIC.to_vec();
        encode(&mut bytes, (false, 0x1234), &locs);
        encode(&mut bytes, (true, 0x40), &[]);
        let back = decode(&bytes).unwrap();
        assert_eq!(back[&(false, 0x1234)], locs);
        assert!(back[&(true, 0x40)].is_empty());
        for cut in 0..bytes.len() {
            // Cut anywhere but between entries, the file does not parse.
            let d = decode(&bytes[..cut]);
            assert!(d.is_none() || d.unwrap().len() < 2, "cut at {cut}");
        }
        let mut bad = bytes.clone();
        bad[MAGIC.len()] = 7;
        assert!(decode(&bad).is_none());
    }

    #[test]
    fn a_directory_keeps_the_newest_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let day = std::time::Duration::from_secs(24 * 60 * 60);
        let now = std::time::SystemTime::now();
        for i in 0..6u32 {
            let f = std::fs::File::create(dir.path().join(format!("{i}.frames"))).unwrap();
            // File 0 is the newest, file 5 the oldest.
            f.set_modified(now - day * i).unwrap();
        }
        std::fs::write(dir.path().join("other"), b"not a cache file").unwrap();
        keep_newest(dir.path(), 4);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["0.frames", "1.frames", "2.frames", "3.frames", "other"]
        );

        // A file used after a day is touched, and so kept over newer ones.
        let old = dir.path().join("3.frames");
        touch_if_old(&std::fs::File::open(&old).unwrap(), &old);
        keep_newest(dir.path(), 1);
        assert!(old.exists());
        assert!(!dir.path().join("0.frames").exists());
    }
}
