//! A run is one artifact: the traces one `foresight record` wrote (`PATH`, and `PATH.<pid>` and
//! `PATH.<pid>.<n>` for the processes it forked and the programs it executed), or a pack of
//! them (`pack.rs`). Commands that read traces are given the run's path and read every trace
//! of it, each process with its own happens-before.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use foresight_trace::frame::FILE_MAGIC;
use foresight_trace::{StreamOptions, TraceStream};

use super::output::{open_file, open_for_analysis};
use super::pack_file::{Pack, PACK_MAGIC};
use super::safe_fs::untrusted_file;

/// One trace to read: a file, or a member of a pack.
pub struct Input {
    /// What reports call it: the path as given (a sibling: the given path and its suffix), or
    /// the member's name in its pack.
    pub name: String,
    pub source: Source,
}

pub enum Source {
    File(PathBuf),
    Packed {
        pack: std::sync::Arc<Pack>,
        member: usize,
    },
}

impl Input {
    fn file(name: String, path: PathBuf) -> Self {
        Self {
            name,
            source: Source::File(path),
        }
    }

    /// Opens the trace for one streaming pass (a packed one is decompressed into a temporary
    /// file and checked against its checksum first).
    pub fn open_stream(&self) -> anyhow::Result<TraceStream> {
        self.open_stream_with(StreamOptions::default())
    }

    /// [`Input::open_stream`], keeping of the tables what `options` asks for.
    pub fn open_stream_with(&self, options: StreamOptions) -> anyhow::Result<TraceStream> {
        match &self.source {
            Source::File(p) => open_file(p, options),
            Source::Packed { pack, member } => pack.open_member(*member, options),
        }
    }

    /// [`Input::open_stream_with`] for an analysis (`output::open_for_analysis`): a trace that
    /// was not symbolised is symbolised in memory, its static data named for the findings.
    pub fn open_for_analysis(
        &self,
        options: StreamOptions,
    ) -> anyhow::Result<(TraceStream, Option<foresight_symbols::StaticData>)> {
        match &self.source {
            Source::File(p) => open_for_analysis(p, options),
            Source::Packed { pack, member } => Ok((pack.open_member(*member, options)?, None)),
        }
    }

    /// The size the trace takes in its pack, and its own size, when it is packed.
    pub fn packed_sizes(&self) -> Option<(u64, u64)> {
        match &self.source {
            Source::File(_) => None,
            Source::Packed { pack, member } => {
                let m = &pack.manifest.traces[*member];
                Some((m.packed_size, m.size))
            }
        }
    }
}

/// The suffix of a sibling trace's file name, `.<pid>` or `.<pid>.<n>`, if `name` is one.
pub fn sibling_suffix<'a>(base: &str, name: &'a str) -> Option<&'a str> {
    let suffix = name.strip_prefix(base)?;
    let rest = suffix.strip_prefix('.')?;
    let mut parts = rest.split('.');
    let pid = parts.next()?;
    let n = parts.next();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && n.is_none_or(digits) && parts.next().is_none()).then_some(suffix)
}

/// The files next to `output` named like its siblings: (suffix, path), by pid, then by exec
/// count, numerically.
pub fn siblings(output: &Path) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = names_beside(output, |base, name| {
        let suffix = sibling_suffix(base, name)?.to_string();
        Some((suffix, output.with_file_name(name)))
    });
    sort_siblings(&mut found);
    found
}

fn sort_siblings(found: &mut [(String, PathBuf)]) {
    found.sort_by_key(|(s, _)| {
        s.split('.')
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u64>().unwrap_or(u64::MAX))
            .collect::<Vec<_>>()
    });
}

/// `siblings` and `snapshots` of `output` from one listing of its directory (a directory of
/// thousands of files, as `/tmp` often is, takes a millisecond or more to list).
pub fn siblings_and_snapshots(output: &Path) -> (Vec<(String, PathBuf)>, Vec<PathBuf>) {
    enum Found {
        Sibling(String, PathBuf),
        Snapshot(PathBuf),
    }
    let found = names_beside(output, |base, name| {
        if is_snapshot_of(base, name) {
            Some(Found::Snapshot(output.with_file_name(name)))
        } else {
            let suffix = sibling_suffix(base, name)?.to_string();
            Some(Found::Sibling(suffix, output.with_file_name(name)))
        }
    });
    let (mut siblings, mut snapshots) = (Vec::new(), Vec::new());
    for f in found {
        match f {
            Found::Sibling(suffix, p) => siblings.push((suffix, p)),
            Found::Snapshot(p) => snapshots.push(p),
        }
    }
    sort_siblings(&mut siblings);
    snapshots.sort();
    (siblings, snapshots)
}

/// Whether `name` is a `--dump-on` snapshot of the run `base`: `base.snapshot-<n>`, or the
/// same after a sibling's suffix (`base.<pid>[.<n>].snapshot-<n>`). Snapshots are not
/// processes of the run (`siblings` leaves them out): they are analysed by naming them.
pub fn is_snapshot_of(base: &str, name: &str) -> bool {
    let Some((head, n)) = name.rsplit_once(".snapshot-") else {
        return false;
    };
    !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && (head == base || sibling_suffix(base, head).is_some())
}

/// The snapshots next to `output` (`is_snapshot_of`), sorted by name.
pub fn snapshots(output: &Path) -> Vec<PathBuf> {
    let mut found = names_beside(output, |base, name| {
        is_snapshot_of(base, name).then(|| output.with_file_name(name))
    });
    found.sort();
    found
}

/// What `pick(base, name)` makes of each file in `output`'s directory (`base`: `output`'s own
/// name), in directory order; nothing when the directory cannot be read.
fn names_beside<T>(output: &Path, mut pick: impl FnMut(&str, &str) -> Option<T>) -> Vec<T> {
    let (Some(dir), Some(base)) = (output.parent(), output.file_name()) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let base = base.to_string_lossy();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| pick(&base, &e.file_name().into_string().ok()?))
        .collect()
}

/// The file is a regular file that starts with `magic` (a FIFO or a device is not opened: the
/// reader names it).
pub fn starts_with(p: &Path, magic: &[u8]) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    if !std::fs::metadata(p).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut buf = vec![0u8; magic.len()];
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok()
        && buf == magic
}

/// `name` is itself `<base>.<pid>[.<n>]` of a trace `<base>` beside it: a member of a run,
/// not the run's root.
fn is_a_sibling(p: &Path) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let mut cut = name;
    for _ in 0..2 {
        let Some((head, tail)) = cut.rsplit_once('.') else {
            return false;
        };
        if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let base = p.with_file_name(head);
        if starts_with(&base, &FILE_MAGIC) {
            return true;
        }
        cut = head;
    }
    false
}

/// The one trace a command that reads a single trace is given (`dump`, `export`): a trace
/// file, STD text, or the trace of a pack that `member` names (its only one without it). The
/// same `Input` as `expand` makes, so every command opens a file, STD text and a pack member
/// the one way (`Input::open_stream`).
pub fn single(path: &Path, member: Option<&str>) -> anyhow::Result<Input> {
    if !starts_with(path, &PACK_MAGIC) {
        if member.is_some() {
            anyhow::bail!(
                "{}: --member picks a trace of a pack, and this is not one",
                path.display()
            );
        }
        return Ok(Input::file(path.display().to_string(), path.to_path_buf()));
    }
    let pack = Pack::open(path)?;
    let names: Vec<&str> = pack
        .manifest
        .traces
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let i = match (member, names.as_slice()) {
        (Some(m), _) => names.iter().position(|&n| n == m).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: no trace named `{m}` in this pack (it holds {})",
                path.display(),
                names.join(", ")
            )
        })?,
        (None, [_]) => 0,
        (None, _) => anyhow::bail!(
            "{}: the pack holds {} traces; name one with --member ({})",
            path.display(),
            names.len(),
            names.join(", ")
        ),
    };
    Ok(Input {
        name: pack.manifest.traces[i].name.clone(),
        source: Source::Packed {
            pack: std::sync::Arc::new(pack),
            member: i,
        },
    })
}

/// The traces the command line names: a pack stands for its traces; a run's root trace
/// (`PATH`) for itself and its `PATH.<pid>[.<n>]` siblings that are traces, unless
/// `root_only`. Each trace once, in the order given (a run's siblings after its root).
/// Tells on stderr when a run adds traces.
pub fn expand(paths: &[PathBuf], root_only: bool) -> anyhow::Result<Vec<Input>> {
    let mut out: Vec<Input> = Vec::new();
    let mut seen: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    let mut once = |p: &Path| seen.insert(p.canonicalize().unwrap_or_else(|_| p.to_path_buf()));
    for path in paths {
        if starts_with(path, &PACK_MAGIC) {
            let pack = std::sync::Arc::new(Pack::open(path)?);
            for (i, m) in pack.manifest.traces.iter().enumerate() {
                out.push(Input {
                    name: m.name.clone(),
                    source: Source::Packed {
                        pack: std::sync::Arc::clone(&pack),
                        member: i,
                    },
                });
            }
            continue;
        }
        if !once(path) {
            continue;
        }
        let shown = path.display().to_string();
        out.push(Input::file(shown.clone(), path.clone()));
        if root_only || !starts_with(path, &FILE_MAGIC) || is_a_sibling(path) {
            continue;
        }
        // Only the user's own files are taken for processes of the run: another user's trace,
        // or a link planted beside it (to anyone's trace), is not.
        let root_owner = std::fs::metadata(path).map(|m| m.uid()).ok();
        let mut added = Vec::new();
        for (suffix, p) in siblings(path) {
            if !starts_with(&p, &FILE_MAGIC) {
                continue;
            }
            let meta = match std::fs::symlink_metadata(&p) {
                Ok(m) => m,
                Err(_) => continue,
            };
            if let Some(why) = untrusted_file(&meta, root_owner.as_slice()) {
                say!(
                    "foresight: warning: {}: left out of the run {shown}: {why}",
                    p.display()
                );
                continue;
            }
            if once(&p) {
                added.push(Input::file(format!("{shown}{suffix}"), p));
            }
        }
        if !added.is_empty() {
            say!(
                "foresight: {shown}: the run's {} traces are read together, each process on \
                 its own ({} of its children and the programs it executed; --root-only reads \
                 {shown} alone)",
                added.len() + 1,
                added.len()
            );
        }
        out.extend(added);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_listing_finds_what_the_two_find() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "t",
            "t.12",
            "t.12.3",
            "t.9",
            "t.snapshot-2",
            "t.12.snapshot-1",
            "t.x",
            "u.12",
            "t.12.3.4",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let output = dir.path().join("t");
        let (found_siblings, found_snapshots) = siblings_and_snapshots(&output);
        assert_eq!(found_siblings, siblings(&output));
        assert_eq!(found_snapshots, snapshots(&output));
        let suffixes: Vec<_> = found_siblings.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(suffixes, [".9", ".12", ".12.3"]);
        assert_eq!(found_snapshots.len(), 2);
    }

    #[test]
    fn sibling_names() {
        assert_eq!(sibling_suffix("a.trace", "a.trace.123"), Some(".123"));
        assert_eq!(sibling_suffix("a.trace", "a.trace.123.4"), Some(".123.4"));
        for not in [
            "a.trace",
            "a.trace.",
            "a.trace.x",
            "a.trace.1.2.3",
            "a.trace.1.",
            "b.trace.1",
        ] {
            assert_eq!(sibling_suffix("a.trace", not), None, "{not}");
        }
    }

    #[test]
    fn snapshots_are_not_processes_of_the_run() {
        for snap in [
            "a.trace.snapshot-1",
            "a.trace.123.snapshot-2",
            "a.trace.123.4.snapshot-10",
        ] {
            assert_eq!(sibling_suffix("a.trace", snap), None, "{snap}");
            assert!(is_snapshot_of("a.trace", snap), "{snap}");
        }
        for not in [
            "a.trace",
            "a.trace.123",
            "a.trace.snapshot-",
            "a.trace.snapshot-x",
            "b.trace.snapshot-1",
            "a.trace.x.snapshot-1",
        ] {
            assert!(!is_snapshot_of("a.trace", not), "{not}");
        }
    }
}
