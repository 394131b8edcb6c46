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
