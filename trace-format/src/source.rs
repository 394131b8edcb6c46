//! Where a trace's bytes come from: a regular file read with positioned reads, or bytes already
//! in memory.
//!
//! A trace file is never memory-mapped. A mapped file turns the file system's trouble into
//! signals: a read fault on a hole of a sparse file on a full tmpfs, or past the end of a file
//! that another process truncated, kills the reader with SIGBUS. A positioned read (`pread`)
//! returns zeros for a hole and a short count past the end, which the reader reports as garbage
//! or as a trace cut short, with the offset. Reading costs no more than mapping did: decoding
//! a trace touches every byte once either way (docs/perf/reading-speed.md has the measurement).
//!
//! Only regular files are opened as traces. A FIFO would block the first read until some
//! writer appears, a terminal or a character device streams without end, and a directory has
//! no bytes: each is refused with an error that says what the path is. The open itself does not
//! block (`O_NONBLOCK`, which a regular file ignores) and never makes a terminal the
//! controlling one (`O_NOCTTY`).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::error::TraceError;

/// The bytes of a trace.
pub(crate) enum Source {
    /// A regular file and its length when it was opened: nothing past that length is read,
    /// so a file that is still growing reads as the prefix it had.
    File {
        file: File,
        len: u64,
    },
    Memory(Vec<u8>),
}

/// A read that could not give every byte asked for.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// The file ends (now) after `got` of the bytes: it shrank since it was opened.
    Short {
        got: usize,
    },
    Io(io::Error),
}

impl Source {
    /// Opens a regular file for positioned reads; anything else is refused.
    pub(crate) fn open(path: &Path) -> Result<Source, TraceError> {
        let io_error = |error| TraceError::Io {
            path: path.to_path_buf(),
            error,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(io_error)?;
        Self::from_file(path, file)
    }

    /// A file already open for reading (`path`: what errors call it); anything but a regular
    /// file is refused.
    pub(crate) fn from_file(path: &Path, file: File) -> Result<Source, TraceError> {
        let io_error = |error| TraceError::Io {
            path: path.to_path_buf(),
            error,
        };
        // The type of what was opened, not of what the path named a moment before.
        let meta = file.metadata().map_err(io_error)?;
        let kind = meta.file_type();
        if !kind.is_file() {
            let what = if kind.is_dir() {
                "a directory"
            } else if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_char_device() {
                "a character device"
            } else if kind.is_block_device() {
                "a block device"
            } else if kind.is_socket() {
                "a socket"
            } else {
                "not a file"
            };
            return Err(TraceError::NotARegularFile {
                path: path.to_path_buf(),
                what,
            });
        }
        Ok(Source::File {
            len: meta.len(),
            file,
        })
    }

    /// The number of bytes the trace has (for a file: its length when it was opened).
    pub(crate) fn len(&self) -> u64 {
        match self {
            Source::File { len, .. } => *len,
            Source::Memory(b) => b.len() as u64,
        }
    }

    /// The `len` bytes at `offset`: borrowed when in memory, else read into `buf`. Asking for
    /// bytes past [`Source::len`] is a short read.
    pub(crate) fn bytes_at<'a>(
        &'a self,
        offset: u64,
        len: usize,
        buf: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], ReadFailure> {
        let b = self.bytes_upto(offset, len, buf).map_err(ReadFailure::Io)?;
        if b.len() < len {
            return Err(ReadFailure::Short { got: b.len() });
        }
        Ok(b)
    }

    /// Up to `len` bytes at `offset`, fewer where the trace ends: for scanning, which must look
    /// at whatever is there.
    pub(crate) fn bytes_upto<'a>(
        &'a self,
        offset: u64,
        len: usize,
        buf: &'a mut Vec<u8>,
    ) -> io::Result<&'a [u8]> {
        match self {
            Source::Memory(b) => {
                let start = offset.min(b.len() as u64) as usize;
                let end = start.saturating_add(len).min(b.len());
                Ok(&b[start..end])
            }
            Source::File {
                file,
                len: file_len,
            } => {
                let within = file_len.saturating_sub(offset).min(len as u64) as usize;
                // Bytes already in the buffer are overwritten, not cleared first.
                buf.resize(within, 0);
                let got = read_full_at(file, buf, offset)?;
                buf.truncate(got);
                Ok(&buf[..])
            }
        }
    }

    /// The whole trace in memory (a file is read once, up to the length it had when opened;
    /// if it shrank meanwhile, what is left).
    pub(crate) fn into_memory(self) -> io::Result<Vec<u8>> {
        match self {
            Source::Memory(b) => Ok(b),
            Source::File { file, len } => {
                // The length was checked against nothing yet: a file larger than memory fails
                // the allocation cleanly rather than aborting.
                let mut buf = Vec::new();
                let want = usize::try_from(len)
                    .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "file too large"))?;
                buf.try_reserve_exact(want)
                    .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "file too large"))?;
                buf.resize(want, 0);
                let got = read_full_at(&file, &mut buf, 0)?;
                buf.truncate(got);
                Ok(buf)
            }
        }
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0usize;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
