//! Creating and trusting files where another user may have been first: `foresight` runs as the
//! user, often root in staging, in directories such as `/tmp` that everyone can write. A name
//! there may already be a link to a file of the user's, a FIFO, or a file someone else
//! planted. Files foresight creates are new (`O_CREAT|O_EXCL`, which never follows a link,
//! and `O_NOFOLLOW`); its temporary directories are fresh and private (`mkdtemp`, mode 0700);
//! a file it reads back and trusts (a run's sibling traces, its cache) is a regular file of
//! the user's.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The real user id foresight runs as.
pub fn my_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Creates `path` for writing: a new file only, never through a link (dangling or not) and
/// never over a file that is there, whoever made it (`EEXIST` then).
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// A new private directory (mode 0700, a name no one could have taken before) in `parent`,
/// removed with everything in it when the value is dropped.
pub fn private_dir_in(parent: &Path, prefix: &str) -> io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(parent)
}

/// Why a file must not be trusted as the user's own regular file (read without following a
/// link: `symlink_metadata`), or `None` when it can be. `owners`: the users whose files are
/// accepted besides ours.
pub fn untrusted_file(meta: &Metadata, owners: &[u32]) -> Option<String> {
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Some("it is a symbolic link".into());
    }
    if !kind.is_file() {
        return Some(format!("it is not a regular file ({})", kind_name(meta)));
    }
    let uid = meta.uid();
    if uid != my_uid() && !owners.contains(&uid) {
        return Some(format!("it belongs to another user (uid {uid})"));
    }
    None
}

/// Why a directory or a file is not private to the user — another user owns it, or others
/// may write it — or `None`.
pub fn not_private(meta: &Metadata) -> Option<String> {
    let uid = meta.uid();
    if uid != my_uid() {
        return Some(format!("it belongs to another user (uid {uid})"));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "others may write it (mode {mode:04o}: group or world writable)"
        ));
    }
    None
}

/// What kind of file `meta` is, for messages.
pub fn kind_name(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "a regular file"
    }
}

/// Opens `path`, a file the user named for output (`import -o`, `export -o`, `synth`'s files,
/// the baseline), for writing from its start: created if missing; never through a link
/// (`O_NOFOLLOW`), never blocking on a FIFO no one reads (`O_NONBLOCK` while opening), and
/// an existing regular file is truncated only if it is the user's own — in a directory such
/// as `/tmp`, a file of that name may have been put there by someone else.
pub fn create_output(path: &Path) -> anyhow::Result<File> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => anyhow::anyhow!(
                "{} is a symbolic link; foresight does not write through one (remove it, or \
                 choose another path)",
                path.display()
            ),
            Some(libc::ENXIO) => {
                anyhow::anyhow!("{} is a FIFO that no one reads", path.display())
            }
            _ => anyhow::anyhow!("cannot write {}: {e}", path.display()),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    if meta.is_file() {
        if meta.uid() != my_uid() {
            anyhow::bail!(
                "{} exists and belongs to another user (uid {}); not overwriting it (remove \
                 it, or choose another path)",
                path.display(),
                meta.uid()
            );
        }
        file.set_len(0)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    // Blocking writes from here on (a pipe or a FIFO with a reader waits for it).
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor this function owns, with plain integer arguments.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}
