//! Paths that are not what a trace reader expects: a FIFO, a directory, a character device, a
//! file that shrinks or grows while it is read, a sparse file on a full tmpfs. No reader may
//! block on them, be killed by a signal, or panic: each gives an error that names the file, or
//! reads what is there and says what was wrong, with the byte offset.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use foresight_trace::builder::TraceBuilder;
use foresight_trace::stream::TraceStream;
use foresight_trace::{ProblemKind, ThreadId, Trace, TraceError, TraceFile};

/// A directory of its own for each test, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("foresight-hostile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Three threads taking a lock many times, in small chunks: a file of many chunks.
fn three_threads() -> (Vec<u8>, Vec<Vec<foresight_trace::Event>>) {
    let mut b = TraceBuilder::new("hostile");
    b.chunk_bytes(64);
    let main = b.main_thread();
    let site = b.site("main", "hostile.c", 3);
    let m = b.mutex("m");
    let workers = [b.spawn(main, site, "a"), b.spawn(main, site, "b")];
    for _ in 0..100 {
        for t in [main, workers[0], workers[1]] {
            b.lock(t, m, site);
            b.unlock(t, m, site);
        }
    }
    for w in workers {
        b.exit(w);
        b.join(main, w, site);
    }
    b.exit(main);
    let events = b.events().to_vec();
    (b.finish(), events)
}

/// Every way of opening a trace, each in a thread of its own so that one that blocks fails the
/// test instead of hanging it.
fn open_every_way(path: &Path) -> Vec<(&'static str, Result<(), TraceError>)> {
    type Opener = fn(&Path) -> Result<(), TraceError>;
    let openers: [(&'static str, Opener); 3] = [
        ("Trace::open", |p| Trace::open(p).map(drop)),
        ("TraceFile::open", |p| TraceFile::open(p).map(drop)),
        ("TraceStream::open", |p| TraceStream::open(p).map(drop)),
    ];
    openers
        .into_iter()
        .map(|(name, open)| {
            let (tx, rx) = mpsc::channel();
            let p = path.to_path_buf();
            std::thread::spawn(move || {
                let _ = tx.send(open(&p));
            });
            let result = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("{name} blocked on {}", path.display()));
            (name, result)
        })
        .collect()
}

fn assert_refused(path: &Path, what: &str) {
    for (name, result) in open_every_way(path) {
        match result {
            Err(e @ TraceError::NotARegularFile { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(&path.display().to_string())
                        && msg.contains("not a regular file")
                        && msg.contains(what),
                    "{name}: {msg}"
                );
            }
            other => panic!("{name} on {}: {other:?}", path.display()),
        }
    }
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = TempDir::new("fifo");
    let path = dir.0.join("run.trace");
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call.
    let rc = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
    // No writer ever opens the FIFO: a reader that opened it for reading in the usual
    // (blocking) way would wait for ever.
    assert_refused(&path, "a FIFO");
}

#[test]
fn a_directory_is_refused() {
    let dir = TempDir::new("dir");
    assert_refused(&dir.0, "a directory");
}

#[test]
fn a_character_device_is_refused() {
    // /dev/zero never ends; /dev/null is empty.
    for dev in ["/dev/zero", "/dev/null"] {
        assert_refused(Path::new(dev), "a character device");
    }
}

/// Truncates the file at `path` to `len` bytes, as another process could while it is read.
fn shrink(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn a_file_that_shrinks_while_it_is_read_is_reported_cut_short() {
    let dir = TempDir::new("shrink");
    let path = dir.0.join("run.trace");
    let (bytes, written) = three_threads();
    let cut = bytes.len() as u64 / 2;

    // The streaming reader: the chunks that are gone are reported with their offsets, and each
    // thread gives a prefix of its events.
    std::fs::write(&path, &bytes).unwrap();
    let stream = TraceStream::open(&path).unwrap();
    shrink(&path, cut);
    let mut merged = stream.merged();
    let mut per_thread = vec![Vec::new(); written.len()];
    for e in merged.by_ref() {
        per_thread[e.thread as usize].push(e.event);
    }
    for (t, got) in per_thread.iter().enumerate() {
        assert!(written[t].starts_with(got), "thread {t}: not a prefix");
    }
    assert!(per_thread.iter().map(Vec::len).sum::<usize>() < bytes.len());
    let problems = merged.problems();
    let shrank: Vec<_> = problems
        .iter()
        .filter(|p| matches!(p.kind, ProblemKind::ShrankWhileReading { .. }))
        .collect();
    // Once, at the chunk the cut falls in: every chunk after it is gone too.
    assert_eq!(shrank.len(), 1, "{problems:?}");
    let ProblemKind::ShrankWhileReading { missing } = shrank[0].kind else {
        unreachable!()
    };
    let chunk_header = foresight_trace::frame::CHUNK_HEADER_LEN as u64;
    assert!(shrank[0].offset < cut, "{shrank:?}");
    assert!(
        cut - shrank[0].offset < chunk_header + 200 && missing > 0,
        "{shrank:?}"
    );
    assert!(
        shrank[0]
            .to_string()
            .contains("cut short while it was being read"),
        "{}",
        shrank[0]
    );
    assert!(problems.iter().all(|p| !p.is_damage()), "{problems:?}");

    // The chunk-at-a-time reader and the decoding reader of an opened file, the same way.
    std::fs::write(&path, &bytes).unwrap();
    let file = TraceFile::open(&path).unwrap();
    shrink(&path, cut);
    let found = file.for_each_chunk(|_| {});
    assert!(found
        .iter()
        .any(|p| matches!(p.kind, ProblemKind::ShrankWhileReading { .. })));
    let trace = file.decode();
    assert!(trace
        .problems
        .iter()
        .any(|p| matches!(p.kind, ProblemKind::ShrankWhileReading { .. })));
    for t in &trace.threads {
        assert!(written[t.thread as usize].starts_with(&t.events));
    }
}

#[test]
fn a_file_that_grows_while_it_is_read_reads_as_it_was_when_opened() {
    let dir = TempDir::new("grow");
    let path = dir.0.join("run.trace");
    let (bytes, written) = three_threads();
    std::fs::write(&path, &bytes).unwrap();
    let stream = TraceStream::open(&path).unwrap();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&[0xF5; 4096]).unwrap();
    }
    let mut merged = stream.merged();
    let n = merged.by_ref().count();
    assert_eq!(n, written.iter().map(Vec::len).sum::<usize>());
    assert_eq!(
        merged.problems(),
        vec![],
        "nothing past the end seen at open"
    );
}

/// A tmpfs of 256 KiB mounted for the test and unmounted when it ends.
struct SmallTmpfs(PathBuf);

impl SmallTmpfs {
    fn mount(at: PathBuf) -> std::io::Result<Self> {
        let target = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                c"size=256k".as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SmallTmpfs(at))
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let target = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `target` is a NUL-terminated string that outlives the call.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A sparse trace on a full tmpfs: a memory-mapped reader dies of SIGBUS when it touches the
/// hole (tmpfs allocates a page on a read fault and has none left); a positioned read gives
/// zeros, which read as garbage after the last chunk.
#[test]
fn a_sparse_file_on_a_full_tmpfs_reads_without_a_signal() {
    let dir = TempDir::new("tmpfs");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mounted = if root {
        SmallTmpfs::mount(dir.0.clone())
    } else {
        Err(std::io::Error::other("not root"))
    };
    let fs = match mounted {
        Ok(fs) => fs,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must mount a tmpfs for this test (run as root): {e}"
            );
            eprintln!("SKIPPED: cannot mount a small tmpfs ({e}); this test needs root");
            return;
        }
    };
    let path = fs.0.join("run.trace");
    let (bytes, written) = three_threads();
    std::fs::write(&path, &bytes).unwrap();
    // A hole of 1 MiB after the trace, then fill the file system.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(bytes.len() as u64 + (1 << 20))
        .unwrap();
    {
        use std::io::Write;
        let mut fill = std::fs::File::create(fs.0.join("fill")).unwrap();
        let block = [0u8; 4096];
        while fill.write_all(&block).and_then(|()| fill.flush()).is_ok() {}
    }

    let expect_garbage =
        |problems: &[foresight_trace::Problem]| {
            assert!(
                problems.iter().any(|p| p.offset == bytes.len() as u64
                    && matches!(p.kind, ProblemKind::Garbage { .. })),
                "{problems:?}"
            );
        };
    let stream = TraceStream::open(&path).unwrap();
    let mut merged = stream.merged();
    assert_eq!(
        merged.by_ref().count(),
        written.iter().map(Vec::len).sum::<usize>()
    );
    expect_garbage(&merged.problems());
    let trace = Trace::open(&path).unwrap();
    expect_garbage(&trace.problems);
    let file = TraceFile::open(&path).unwrap();
    expect_garbage(file.problems());
    drop(fs);
}

/// Threads created one after another, each taking a lock many times (a chunk of some KiB):
/// every thread but the first waits for its turn when the merged pass starts.
fn threads_one_after_another(n: usize) -> Vec<u8> {
    let mut b = TraceBuilder::new("hostile");
    let main = b.main_thread();
    let site = b.site("main", "hostile.c", 3);
    let m = b.mutex("m");
    for _ in 0..n {
        let w = b.spawn(main, site, "w");
        for _ in 0..3000 {
            b.lock(w, m, site);
            b.unlock(w, m, site);
        }
        b.exit(w);
        b.join(main, w, site);
    }
    b.exit(main);
    b.finish()
}

/// What a merged pass gave after a byte of a waiting thread's chunk changed.
struct ChangedWhileWaiting {
    _dir: TempDir,
    path: PathBuf,
    /// The offset of the last thread's chunk, which changed.
    chunk: u64,
    last: ThreadId,
    /// Events the pass gave over the unchanged file, and of those the last thread's.
    before: usize,
    of_last: usize,
    /// Events the pass gave once the chunk changed, and its problems.
    after: Vec<foresight_trace::stream::StreamEvent>,
    problems: Vec<foresight_trace::Problem>,
}

/// Six threads one after another; a merged pass decodes the last thread's first event, to
/// place it, and lets the thread's chunk go until its turn; the byte at `at(chunk)` changes
/// meanwhile.
fn change_a_waiting_chunk(name: &str, at: impl Fn(usize) -> usize) -> ChangedWhileWaiting {
    let dir = TempDir::new(name);
    let path = dir.0.join("run.trace");
    let bytes = threads_one_after_another(6);
    std::fs::write(&path, &bytes).unwrap();
    let stream = TraceStream::open(&path).unwrap();
    let all: Vec<_> = stream.merged().collect();
    let last = all.iter().map(|e| e.thread).max().unwrap();
    let chunk = all.iter().find(|e| e.thread == last).unwrap().chunk_offset;
    let of_last = all.iter().filter(|e| e.thread == last).count();
    let mut merged = stream.merged();
    let mut changed = bytes.clone();
    changed[at(chunk as usize)] ^= 0xFF;
    std::fs::write(&path, &changed).unwrap();
    let after: Vec<_> = merged.by_ref().collect();
    ChangedWhileWaiting {
        path: path.clone(),
        _dir: dir,
        chunk,
        last,
        before: all.len(),
        of_last,
        after,
        problems: merged.problems(),
    }
}

impl ChangedWhileWaiting {
    /// Nothing of the changed chunk was given, the first event included, and the pass said
    /// the file changed under it.
    fn assert_reported(&self) {
        assert!(
            self.after.iter().all(|e| e.thread != self.last),
            "nothing of the changed chunk"
        );
        assert_eq!(self.after.len(), self.before - self.of_last);
        assert!(
            self.problems.iter().any(|p| p.offset == self.chunk
                && p.to_string()
                    .contains("the chunk changed while the trace was being read")),
            "{:?}",
            self.problems
        );
    }
}

#[test]
fn a_waiting_threads_chunk_that_changes_before_its_turn_is_reported() {
    // Read again, the chunk no longer passes its checksum.
    let c = change_a_waiting_chunk("waiting", |chunk| {
        chunk + foresight_trace::frame::CHUNK_HEADER_LEN + foresight_trace::frame::EVENTS_PREFIX_LEN
    });
    assert!(
        c.of_last > 10,
        "{} events: the locks and unlocks, at least",
        c.of_last
    );
    c.assert_reported();

    // Read again from the start, the changed chunk is damaged and named as such.
    let again = TraceStream::open(&c.path).unwrap();
    let mut merged = again.merged();
    assert!(merged.by_ref().all(|e| e.thread != c.last));
    assert!(merged.problems().iter().any(|p| p.offset == c.chunk));
}

#[test]
fn a_waiting_threads_chunk_header_that_changes_before_its_turn_is_reported() {
    // The stream's index keeps no chunk header: it is read again with the payload. A header
    // that no longer passes its own checksum (its payload's checksum changed) is the file
    // changing under the reader, whatever the payload now holds. The payload checksum's first
    // byte: magic, kind, flags, reserved, length, checksum.
    change_a_waiting_chunk("waiting-header", |chunk| chunk + 12).assert_reported();
}
