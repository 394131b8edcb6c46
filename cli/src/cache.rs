//! foresight's private cache directory: the runtime put in place at first use
//! (`runtime.rs`) and the compiled ThreadSanitizer-ABI stub (`config.rs`).
//!
//! The root is `$FORESIGHT_CACHE_DIR`, else `$XDG_CACHE_HOME/foresight`, else
//! `~/.cache/foresight`, else `foresight-<uid>` in the temporary directory. It and everything
//! foresight makes in it are private (mode 0700): what is there is loaded into programs.

use std::path::{Path, PathBuf};

use anyhow::bail;

/// The variable that chooses the cache directory.
pub const CACHE_VAR: &str = "FORESIGHT_CACHE_DIR";

/// The cache root as configured (not created).
pub fn cache_root_path() -> PathBuf {
    if let Some(dir) = std::env::var_os(CACHE_VAR).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let home_cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| Path::new(v).is_absolute())
                .map(|h| PathBuf::from(h).join(".cache"))
        });
    match home_cache {
        Some(c) => c.join("foresight"),
        None => {
            // SAFETY: getuid has no preconditions.
            let uid = unsafe { libc::getuid() };
            std::env::temp_dir().join(format!("foresight-{uid}"))
        }
    }
}

/// The cache root, created private if missing.
pub fn cache_root() -> anyhow::Result<PathBuf> {
    let root = cache_root_path();
    let root = if root.is_absolute() {
        root
    } else {
        std::env::current_dir()?.join(root)
    };
    create_private_dir(&root)?;
    Ok(root)
}

/// Creates `dir` (mode 0700) if it is missing, and refuses one that another user owns or
/// others can write: what is in it is linked or loaded into programs.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        bail!(
            "cannot create the cache directory {}: {e}; set {CACHE_VAR} to a directory of \
             your own",
            dir.display()
        );
    }
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    // A link of the user's own (`~/.cache` on another disk) is followed; one that another user
    // planted (`$TMPDIR/foresight-<uid>` in /tmp) could lead anywhere the user may write.
    if let Ok(link) = std::fs::symlink_metadata(dir) {
        if link.file_type().is_symlink() && link.uid() != me {
            bail!(
                "the cache directory {} is a symbolic link that another user owns (uid {}); set \
                 {CACHE_VAR} to a directory of your own",
                dir.display(),
                link.uid()
            );
        }
    }
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) => bail!("cannot read the cache directory {}: {e}", dir.display()),
    };
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        bail!(
            "the cache directory {} is not private (owned by uid {}, mode {:o}); set \
             {CACHE_VAR} to a directory of your own",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

/// FNV-1a, 64 bits: names cache entries (not a security boundary: the directory is the
/// user's own, and the runtime's bytes are compared before a cached copy is used).
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xff]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The variable that turns the frame cache off (`off` or `0`).
pub const FRAME_CACHE_VAR: &str = "FORESIGHT_FRAME_CACHE";

/// Where `record` keeps the frames it resolved, per module build
/// (`SymbolizeOptions::frame_cache`): `frames-<stamp>` in the cache root, the stamp naming this
/// foresight executable (its version, size and modification time), so that a rebuilt
/// foresight, which may name frames differently, starts afresh — and removes the directories
/// of other foresight executables, which would otherwise pile up with every upgrade or rebuild.
/// `None` when turned off or when the directory cannot be made: symbolisation then reads every
/// module, as it did before.
pub fn frame_cache_dir() -> Option<PathBuf> {
    if std::env::var_os(FRAME_CACHE_VAR).is_some_and(|v| v == "off" || v == "0") {
        return None;
    }
    let exe = std::fs::metadata(std::env::current_exe().ok()?).ok()?;
    let modified = exe
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    let stamp = fnv1a(&[
        env!("CARGO_PKG_VERSION").as_bytes(),
        &exe.len().to_le_bytes(),
        &modified.to_le_bytes(),
    ]);
    let root = cache_root().ok()?;
    let name = format!("frames-{stamp:016x}");
    let dir = root.join(&name);
    let fresh = !dir.exists();
    create_private_dir(&dir).ok()?;
    if fresh {
        remove_other_frame_caches(&root, &name);
    }
    Some(dir)
}

/// Removes the `frames-*` directories of `root` but `keep`. Best effort: a recording by another
/// foresight that loses its directory this way only resolves its frames again.
fn remove_other_frame_caches(root: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("frames-") && name != keep && e.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
