//! Replacing the tail of a trace (its trailer, or an incomplete last chunk) with new chunks, in
//! place, without a temporary file: the trace may be large and may live next to other traces of
//! the same run.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::SymbolizeError;

/// The longest tail that is replaced: a trailer, or one chunk cut short (a chunk header and at
/// most 64 MiB of payload). It is kept in memory to restore the file if writing fails.
pub(crate) const MAX_TAIL: u64 = (64 << 20) + 64;

pub(crate) struct Outcome {
    /// Bytes of the old tail that were replaced.
    pub removed: u64,
}

/// Writes `bytes` at `cut` and makes them the end of the file. The file must still be
/// `expected_len` bytes long (nobody appended since it was read). If writing fails, the old
/// tail is written back.
pub(crate) fn replace_tail(
    path: &Path,
    expected_len: u64,
    cut: u64,
    bytes: &[u8],
    sync: bool,
) -> Result<Outcome, SymbolizeError> {
    let io = |op, error| SymbolizeError::Io {
        path: path.to_path_buf(),
        op,
        error,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io("cannot open it for writing", e))?;
    let len = file
        .metadata()
        .map_err(|e| io("cannot read its metadata", e))?
        .len();
    if len != expected_len {
        return Err(SymbolizeError::Changed {
            path: path.to_path_buf(),
            expected: expected_len,
            found: len,
        });
    }
    let cut = cut.min(len);
    debug_assert!(len - cut <= MAX_TAIL);
    let mut saved = vec![0u8; (len - cut).min(MAX_TAIL) as usize];
    file.read_exact_at(&mut saved, cut)
        .map_err(|e| io("cannot read its last chunk", e))?;

    let write = || -> std::io::Result<()> {
        file.write_all_at(bytes, cut)?;
        file.set_len(cut + bytes.len() as u64)?;
        if sync {
            file.sync_data()?;
        }
        Ok(())
    };
    if let Err(error) = write() {
        let restore = || -> std::io::Result<()> {
            file.write_all_at(&saved, cut)?;
            file.set_len(len)?;
            file.sync_data()
        };
        return Err(match restore() {
            Ok(()) => SymbolizeError::WriteFailed {
                path: path.to_path_buf(),
                offset: cut,
                error,
            },
            Err(restore_error) => SymbolizeError::RestoreFailed {
                path: path.to_path_buf(),
                offset: cut,
                error,
                restore_error,
            },
        });
    }
    Ok(Outcome { removed: len - cut })
}
