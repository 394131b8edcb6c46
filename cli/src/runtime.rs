//! Which runtime `record` preloads, and whether the command can be recorded at all.
//!
//! The `foresight` binary carries the runtime (`build.rs` builds `libforesight_rt.so` and it is
//! embedded here), so that copying that one file to a host is the whole installation. At first
//! use the runtime is written into the private cache (`cache.rs`) as
//! `<cache>/runtime-<hash>/libforesight_rt.so`: under a temporary name, then renamed into place
//! (a concurrent `record` never sees half a file, and a program that has the old copy mapped
//! keeps it). A copy already there is used only if its bytes are the embedded ones: compared
//! byte for byte once, after which a stamp beside it (`libforesight_rt.so.checked`: its
//! device, inode, size, modification and change times then) stands for the comparison for as
//! long as the file's are the same, so that `record` does not read the whole runtime on every
//! run. No write, rename or `chmod` leaves a file's change time as it was, and `utimes` cannot
//! set it.
//!
//! Lookup order, first found wins:
//! 1. `FORESIGHT_RUNTIME=/path/to/libforesight_rt.so`: the user's explicit choice.
//! 2. The embedded runtime, put in place in the cache: it always matches this binary.
//! 3. Only for a binary built without one (`FORESIGHT_EMBED_RUNTIME=0`, or a target the
//!    runtime does not support): next to the executable, in its parent directory,
//!    `../lib/foresight` and `../lib` (how a package that installs the library lays it out).
//!
//! A host where the cache cannot hold it (read-only, mounted `noexec`: the loader would refuse
//! to map it and the program would run unrecorded) and a command LD_PRELOAD cannot reach (a
//! statically linked program, one linked against musl, one built with a sanitizer whose runtime
//! cannot share the process) are refused before anything runs,
//! with the way out.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};

use super::cache::{cache_root, create_private_dir, CACHE_VAR};

/// The runtime's file name (the `cdylib` of `foresight-recorder`).
pub const RUNTIME_NAME: &str = "libforesight_rt.so";

/// The runtime this binary carries (empty when it was built without one).
static EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libforesight_rt.so"));
/// Its FNV-1a hash (names its cache directory), computed by `build.rs`.
const EMBEDDED_HASH: &str = env!("FORESIGHT_RUNTIME_HASH");
/// Why nothing is embedded, if nothing is.
const NOT_EMBEDDED: &str = env!("FORESIGHT_RUNTIME_NOT_EMBEDDED");

/// The runtime to preload (an absolute path).
pub fn find_runtime() -> anyhow::Result<PathBuf> {
    if let Some(v) = std::env::var_os("FORESIGHT_RUNTIME").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(&v);
        if !p.is_file() {
            bail!(
                "FORESIGHT_RUNTIME={}: no such file; it must name the foresight runtime {RUNTIME_NAME}",
                p.display()
            );
        }
        // Absolute: LD_PRELOAD is resolved again by every process of the run, wherever it is.
        let p = p
            .canonicalize()
            .with_context(|| format!("FORESIGHT_RUNTIME={}", p.display()))?;
        check_runtime(&p).with_context(|| format!("FORESIGHT_RUNTIME={}", p.display()))?;
        return Ok(p);
    }
    if !EMBEDDED.is_empty() {
        let root = cache_root().map_err(|e| {
            anyhow!(
                "cannot put the foresight runtime in place: {e:#} (or set FORESIGHT_RUNTIME to \
                 a copy of {RUNTIME_NAME})"
            )
        })?;
        return put_in_place(&root, EMBEDDED, EMBEDDED_HASH);
    }
    beside_executable()
}

/// Writes `bytes` as `<root>/runtime-<hash>/libforesight_rt.so` unless an identical copy is
/// there, and checks that programs can map it from there.
///
/// What is loaded is what was checked: the directory must be the user's and writable by no
/// one else (else the command is refused: another user could swap the file after the check),
/// and the copy is read through a descriptor opened without following a link and without
/// blocking (a FIFO there would block the read forever), and trusted only if it is a regular
/// file of the user's that others cannot write, with the embedded bytes. Anything else at
/// that name (a link, a FIFO, another user's file, other bytes) is replaced by a new file,
/// written beside it and renamed over it. The loader opens the path later (`LD_PRELOAD` is
/// resolved again by every process of the run): in a directory only the user can write, the
/// file cannot change in between but by the user's own hand.
pub fn put_in_place(root: &Path, bytes: &[u8], hash: &str) -> anyhow::Result<PathBuf> {
    let dir = root.join(format!("runtime-{hash}"));
    let path = dir.join(RUNTIME_NAME);
    let way_out = format!(
        "set {CACHE_VAR} to a writable directory of your own on a file system that allows \
         executing (not mounted noexec), or FORESIGHT_RUNTIME to a copy of {RUNTIME_NAME}"
    );
    if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink()) {
        bail!(
            "the cache directory {} is a symbolic link, not a directory of foresight's; {way_out}",
            dir.display()
        );
    }
    create_private_dir(&dir).map_err(|e| anyhow!("{e:#}; {way_out}"))?;
    let stamp = dir.join(STAMP_NAME);
    if let Err(why) = cached_copy_is(&path, bytes, &stamp) {
        if let Some(why) = why {
            say!(
                "foresight: {}: {why}; writing the runtime there anew",
                path.display()
            );
        }
        write_atomically(&dir, &path, bytes, 0o700).map_err(|e| {
            anyhow!(
                "cannot put the foresight runtime in place at {}: {e}; {way_out}",
                path.display()
            )
        })?;
    }
    if mounted_noexec(&dir) {
        bail!(
            "the foresight runtime's cache {} is on a file system mounted noexec: the dynamic \
             loader would refuse to map {RUNTIME_NAME} from it and nothing would be recorded; \
             {way_out}",
            dir.display()
        );
    }
    Ok(path)
}

/// The stamp of a cached runtime whose bytes were found to be the embedded ones.
const STAMP_NAME: &str = "libforesight_rt.so.checked";

/// How old a file's change time must be before its stamp is written: the kernel stamps files
/// with a clock that advances in ticks of some milliseconds, so a change made in the same tick
/// as the one the stamp notes would leave the change time as noted (as git treats an index
/// entry as racily clean).
const STAMP_SETTLED: std::time::Duration = std::time::Duration::from_secs(2);

/// What identifies one state of a file's contents: device, inode, size, modification and
/// change times (seconds and nanoseconds), as the stamp writes them.
fn file_state(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "foresight-runtime-checked 1 {} {} {} {}.{:09} {}.{:09}\n",
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    )
}

/// Whether the stamp at `stamp` notes `meta`'s state (a missing, unreadable or foreign stamp
/// notes nothing: the bytes are then compared).
fn stamp_notes(stamp: &Path, meta: &std::fs::Metadata) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(stamp)
    else {
        return false;
    };
    let private_file = file
        .metadata()
        .is_ok_and(|m| m.is_file() && super::safe_fs::not_private(&m).is_none());
    let mut noted = String::new();
    private_file && file.take(256).read_to_string(&mut noted).is_ok() && noted == file_state(meta)
}

/// Notes `meta`'s state in the stamp, once its change time is `settle` old (`STAMP_SETTLED`);
/// a stamp that cannot be written only means the bytes are compared again next time.
fn write_stamp(dir: &Path, stamp: &Path, meta: &std::fs::Metadata, settle: std::time::Duration) {
    let settled = std::time::SystemTime::UNIX_EPOCH
        .checked_add(change_time(meta))
        .and_then(|changed| changed.elapsed().ok())
        .is_some_and(|age| age >= settle);
    if settled {
        let _ = write_atomically(dir, stamp, file_state(meta).as_bytes(), 0o600);
    }
}

/// The file's change time, since the epoch (zero if before it).
fn change_time(meta: &std::fs::Metadata) -> std::time::Duration {
    use std::os::unix::fs::MetadataExt;
    match (
        u64::try_from(meta.ctime()),
        u32::try_from(meta.ctime_nsec()),
    ) {
        (Ok(s), Ok(ns)) => std::time::Duration::new(s, ns),
        _ => std::time::Duration::ZERO,
    }
}

/// `Ok` when `path` is a regular file of the user's, writable by no one else, holding
/// `bytes` (compared, or noted so by `stamp` for the file as it is now); else why not
/// (`None`: there is no file, or an older runtime: nothing to say).
fn cached_copy_is(path: &Path, bytes: &[u8], stamp: &Path) -> Result<(), Option<String>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Some("it is a symbolic link".into()))
        }
        Err(e) => return Err(Some(format!("cannot be read ({e})"))),
    };
    let meta = file
        .metadata()
        .map_err(|e| Some(format!("cannot be read ({e})")))?;
    if !meta.is_file() {
        return Err(Some(format!(
            "it is not a regular file ({})",
            super::safe_fs::kind_name(&meta)
        )));
    }
    if let Some(why) = super::safe_fs::not_private(&meta) {
        return Err(Some(why));
    }
    if meta.len() != bytes.len() as u64 {
        return Err(None);
    }
    if stamp_notes(stamp, &meta) {
        return Ok(());
    }
    let mut held = Vec::with_capacity(bytes.len());
    file.take(bytes.len() as u64 + 1)
        .read_to_end(&mut held)
        .map_err(|e| Some(format!("cannot be read ({e})")))?;
    if held != bytes {
        return Err(None);
    }
    if let Some(dir) = path.parent() {
        write_stamp(dir, stamp, &meta, STAMP_SETTLED);
    }
    Ok(())
}

/// Writes `bytes` as `path` (in `dir`) with permissions `mode`: a new file written beside
/// it, then renamed over it.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().unwrap_or(RUNTIME_NAME.as_ref());
    let tmp = dir.join(format!(
        ".{}.{}.{n}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// True when the file system holding `dir` is mounted `noexec` (`statvfs`'s `ST_NOEXEC`).
pub fn mounted_noexec(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `statvfs` is plain data; zeroed is a valid value for it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid, writable statvfs.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_flag & libc::ST_NOEXEC != 0
}

/// Next to this executable (a binary built without the runtime inside).
fn beside_executable() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot locate the foresight executable")?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let mut candidates = vec![dir.join(RUNTIME_NAME)];
    if let Some(up) = dir.parent() {
        // target/debug/deps/… (tests) and an installed bin/ next to lib/.
        candidates.push(up.join(RUNTIME_NAME));
        candidates.push(up.join("lib/foresight").join(RUNTIME_NAME));
        candidates.push(up.join("lib").join(RUNTIME_NAME));
    }
    if let Some(found) = candidates.iter().find(|c| c.is_file()) {
        let found = found
            .canonicalize()
            .with_context(|| format!("{}", found.display()))?;
        check_runtime(&found).with_context(|| format!("{}", found.display()))?;
        return Ok(found);
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    Err(anyhow!(
        "cannot find the foresight runtime {RUNTIME_NAME}: this foresight does not carry it \
         ({NOT_EMBEDDED}); looked in: {}. Build it with `cargo build -p foresight-recorder`, \
         or set FORESIGHT_RUNTIME=/path/to/{RUNTIME_NAME}",
        looked.join(", ")
    ))
}

/// The library is the foresight runtime: a shared object that defines the runtime's table and
/// interposes `pthread_mutex_lock`. Anything else would let the command run unrecorded (or not
/// at all, when the loader cannot preload it).
fn check_runtime(path: &Path) -> anyhow::Result<()> {
    use object::{Object, ObjectSymbol};
    // Read on demand: the check needs the headers and the dynamic symbol table, a few KiB of
    // a runtime that is tens of MiB with its debug information (reading it all took 60 ms
    // and more of every `record` on a busy machine).
    let file = std::fs::File::open(path).context("cannot read it")?;
    let data = object::ReadCache::new(file);
    let obj = object::File::parse(&data)
        .map_err(|_| anyhow!("it is not a shared library ({RUNTIME_NAME} expected)"))?;
    let defines = |name: &str| {
        obj.dynamic_symbols()
            .any(|s| s.is_definition() && s.name() == Ok(name))
    };
    if obj.kind() != object::ObjectKind::Dynamic
        || !defines("__foresight_tsan_runtime_v1")
        || !defines("pthread_mutex_lock")
    {
        bail!("it is not the foresight runtime {RUNTIME_NAME}");
    }
    Ok(())
}

/// The runtime first, then whatever the caller preloads already.
pub fn ld_preload(runtime: &Path) -> anyhow::Result<OsString> {
    let bytes = runtime.as_os_str().as_encoded_bytes();
    if bytes
        .iter()
        .any(|b| matches!(b, b':' | b' ' | b'\t' | b'\n'))
    {
        bail!(
            "the runtime's path {} contains a space or a colon, which LD_PRELOAD cannot express; \
             set {CACHE_VAR} to another directory, or point FORESIGHT_RUNTIME at a copy \
             elsewhere",
            runtime.display()
        );
    }
    let mut v = runtime.as_os_str().to_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|e| !e.is_empty()) {
        v.push(":");
        v.push(existing);
    }
    Ok(v)
}

/// What the program `record` is about to start is, as far as LD_PRELOAD cares.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// A dynamically linked program for glibc's loader (or something not looked at: a file
    /// that is not ELF, another byte order, a command not found, which `exec` reports).
    Preloadable,
    /// An ELF executable without a program interpreter: nothing loads the runtime into it.
    Static(PathBuf),
    /// Linked against musl (its loader is `ld-musl-*`): the runtime is built for glibc.
    Musl(PathBuf, String),
    /// Built with a sanitizer whose runtime cannot share the process with foresight's.
    Sanitized(PathBuf, SanitizerFound),
}

/// A sanitizer runtime found in a program, and how it was found.
#[derive(Debug, PartialEq, Eq)]
pub struct SanitizerFound {
    pub sanitizer: Sanitizer,
    /// `loads libtsan.so.2`, or `has __asan_init linked in`.
    pub evidence: String,
}

/// The sanitizers whose runtimes keep foresight's from recording: each intercepts the same
/// calls (threads, locks, allocation) and insists on coming first. gcc 12's ThreadSanitizer
/// crashes the program as it starts under a preloaded runtime; AddressSanitizer refuses to
/// start it ("ASan runtime does not come first in initial library list"). MemorySanitizer and
/// HWAddressSanitizer (clang's; not run here) are built on the same runtime as
/// AddressSanitizer and have the same rule. LeakSanitizer and UndefinedBehaviorSanitizer
/// record normally (verified with gcc 12), and are not refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sanitizer {
    Thread,
    Address,
    HwAddress,
    Memory,
}

impl Sanitizer {
    /// (the sanitizer, its compiler flag, what its runtime's name holds, its init function).
    const ALL: [(
        Sanitizer,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ); 4] = [
        (
            Sanitizer::Thread,
            "ThreadSanitizer",
            "-fsanitize=thread",
            "tsan",
            "__tsan_init",
        ),
        (
            Sanitizer::HwAddress,
            "HWAddressSanitizer",
            "-fsanitize=hwaddress",
            "hwasan",
            "__hwasan_init",
        ),
        (
            Sanitizer::Address,
            "AddressSanitizer",
            "-fsanitize=address",
            "asan",
            "__asan_init",
        ),
        (
            Sanitizer::Memory,
            "MemorySanitizer",
            "-fsanitize=memory",
            "msan",
            "__msan_init",
        ),
    ];

    fn entry(
        self,
    ) -> (
        Sanitizer,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ) {
        Self::ALL
            .into_iter()
            .find(|e| e.0 == self)
            .expect("every sanitizer is listed")
    }

    pub fn name(self) -> &'static str {
        self.entry().1
    }

    pub fn flag(self) -> &'static str {
        self.entry().2
    }
}

/// Refuses a command the runtime cannot be loaded into, before it runs.
pub fn check_target(program: &OsStr) -> anyhow::Result<()> {
    match classify_target(program) {
        Target::Preloadable => Ok(()),
        Target::Static(p) => bail!(
            "{} is statically linked (it has no program interpreter): LD_PRELOAD cannot load \
             the foresight runtime into it, so nothing would be recorded. Record a dynamically \
             linked build of it",
            p.display()
        ),
        Target::Musl(p, interp) => bail!(
            "{} is linked against musl (its loader is {interp}): the foresight runtime is \
             built for glibc and cannot be loaded into it. Record a glibc build of it, or set \
             FORESIGHT_RUNTIME to a runtime built for musl",
            p.display()
        ),
        Target::Sanitized(p, found) => {
            let (name, flag) = (found.sanitizer.name(), found.sanitizer.flag());
            let why = match found.sanitizer {
                Sanitizer::Thread => {
                    "ThreadSanitizer's runtime and foresight's cannot share a \
                     process (the program would crash as it starts)"
                }
                Sanitizer::Address => {
                    "AddressSanitizer's runtime must be loaded before any \
                     other library and refuses to start the program under foresight's"
                }
                _ => {
                    "its runtime intercepts the calls foresight's records and cannot share a \
                      process with it"
                }
            };
            let instead = if found.sanitizer == Sanitizer::Thread {
                format!(
                    "Rebuild it with the flags of `foresight config --cflags` (compiling) and \
                     `foresight config --libs` (linking) instead of {flag}: they keep \
                     ThreadSanitizer's instrumentation of memory accesses and link foresight's \
                     stub in place of its runtime, so that `foresight record` records the \
                     program's memory accesses (races) as well as its locks"
                )
            } else {
                format!(
                    "Record a build without {flag}: a plain one for its locks, or one with the \
                     flags of `foresight config --cflags` (compiling) and `foresight config \
                     --libs` (linking) for its memory accesses (races) too; keep the {name} \
                     build for {name}'s own runs"
                )
            };
            bail!(
                "{} is built with {name} ({flag}: it {}): {why}, so foresight cannot record \
                 it. {instead}",
                p.display(),
                found.evidence
            )
        }
    }
}

/// The sanitizer runtime an ELF program carries or loads, if any: a needed library of a
/// sanitizer's (`libtsan.so.2`, `libclang_rt.asan-x86_64.so`), or a sanitizer's init function
/// defined as a global symbol (its runtime linked statically: clang's default, gcc's
/// `-static-libtsan`). The stub `foresight config` links defines `__tsan_init` too, but hidden:
/// in the program it is a local symbol, and the program refers to foresight's runtime table.
pub fn sanitizer_in(path: &Path) -> Option<SanitizerFound> {
    use object::read::elf::{Dyn, ElfFile64, SectionHeader, Sym};
    use object::Endianness;
    let file = std::fs::File::open(path).ok()?;
    let data = object::ReadCache::new(file);
    let elf = ElfFile64::<Endianness, _>::parse(&data).ok()?;
    let endian = elf.endian();
    let sections = elf.elf_section_table();
    if let Ok(Some((dynamic, link))) = sections.dynamic(endian, &data) {
        if let Ok(strings) = sections.strings(endian, &data, link) {
            for d in dynamic {
                if d.tag32(endian) != Some(object::elf::DT_NEEDED) {
                    continue;
                }
                let Some(Ok(needed)) = d.val32(endian).map(|at| strings.get(at)) else {
                    continue;
                };
                let needed = String::from_utf8_lossy(needed);
                if let Some(sanitizer) = sanitizer_library(&needed) {
                    return Some(SanitizerFound {
                        sanitizer,
                        evidence: format!("loads {needed}"),
                    });
                }
            }
        }
    }
    // (name, a global definition), the dynamic table first. Each table's names are read at
    // once: read one at a time through the cache, they cost two system calls each, thousands
    // for a program that keeps its symbol table (4 ms of SQLite's `record`).
    let mut symbols: Vec<(&[u8], bool)> = Vec::new();
    for table in [elf.elf_dynamic_symbol_table(), elf.elf_symbol_table()] {
        let Ok(names) = sections
            .section(table.string_section())
            .and_then(|s| s.data(endian, &data))
        else {
            continue;
        };
        let strings = object::read::StringTable::new(names, 0, names.len() as u64);
        for sym in table.symbols() {
            if let Ok(name) = sym.name(endian, strings) {
                symbols.push((name, sym.is_definition(endian) && !sym.is_local()));
            }
        }
    }
    let foresight_stub = symbols
        .iter()
        .any(|&(name, _)| name == b"__foresight_tsan_runtime_v1");
    for &(name, global_definition) in &symbols {
        if !global_definition {
            continue;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        let found = Sanitizer::ALL.iter().find(|e| e.4 == name);
        if let Some(&(sanitizer, ..)) = found {
            if sanitizer == Sanitizer::Thread && foresight_stub {
                continue;
            }
            return Some(SanitizerFound {
                sanitizer,
                evidence: format!("has its runtime linked in ({name})"),
            });
        }
    }
    None
}

/// The sanitizer whose runtime a needed library's name is: gcc's `lib<x>san.so.N`, clang's
/// `libclang_rt.<x>san-<arch>.so`.
fn sanitizer_library(needed: &str) -> Option<Sanitizer> {
    let base = needed
        .strip_prefix("libclang_rt.")
        .map(|rest| rest.split(['-', '.']).next().unwrap_or(rest))
        .or_else(|| needed.strip_prefix("lib").and_then(|r| r.split('.').next()))?;
    Sanitizer::ALL
        .iter()
        .find(|e| e.3 == base)
        .map(|&(sanitizer, ..)| sanitizer)
}

/// Looks at the file `program` names (searched in `PATH` like `exec` does), following `#!`
/// scripts to their interpreter.
pub fn classify_target(program: &OsStr) -> Target {
    let mut path = match resolve(program) {
        Some(p) => p,
        None => return Target::Preloadable,
    };
    for _ in 0..4 {
        match look_at(&path) {
            Look::Elf(None) => return Target::Static(path),
            Look::Elf(Some(interp)) => {
                return if interp.contains("ld-musl") {
                    Target::Musl(path, interp)
                } else if let Some(found) = sanitizer_in(&path) {
                    Target::Sanitized(path, found)
                } else {
                    Target::Preloadable
                };
            }
            Look::Script(interp) => path = interp,
            Look::Other => return Target::Preloadable,
        }
    }
    Target::Preloadable
}

fn resolve(program: &OsStr) -> Option<PathBuf> {
    let p = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return Some(p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| is_executable_file(c))
}

fn is_executable_file(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

enum Look {
    /// An ELF executable and its program interpreter, if it has one.
    Elf(Option<String>),
    /// A `#!` script and its interpreter.
    Script(PathBuf),
    Other,
}

fn look_at(path: &Path) -> Look {
    use std::os::unix::fs::FileExt;
    let Ok(f) = std::fs::File::open(path) else {
        return Look::Other;
    };
    let mut head = [0u8; 256];
    let n = read_at_most(&f, &mut head, 0);
    let head = &head[..n];
    if let Some(rest) = head.strip_prefix(b"#!") {
        let line = rest.split(|&b| b == b'\n').next().unwrap_or(rest);
        let line = String::from_utf8_lossy(line);
        return match line.split_whitespace().next() {
            Some(interp) if interp.starts_with('/') => Look::Script(PathBuf::from(interp)),
            _ => Look::Other,
        };
    }
    // ELF, little-endian (x86-64, AArch64, …); anything else is not looked at.
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[5] != 1 {
        return Look::Other;
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]) as u64;
    let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap()) as u64;
    let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap());
    let (is64, e_type) = (head[4] == 2, u16_at(16));
    // ET_EXEC or ET_DYN; a relocatable object or a core file is not a program.
    if e_type != 2 && e_type != 3 {
        return Look::Other;
    }
    let (phoff, phentsize, phnum) = if is64 {
        (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    } else {
        (u32_at(0x1c), u16_at(0x2a), u16_at(0x2c))
    };
    if phentsize < if is64 { 56 } else { 32 } || phnum == 0 || phnum > 512 {
        return Look::Other;
    }
    let mut ph = vec![0u8; (phentsize * phnum) as usize];
    if f.read_exact_at(&mut ph, phoff).is_err() {
        return Look::Other;
    }
    for e in ph.chunks_exact(phentsize as usize) {
        let p_type = u32::from_le_bytes(e[..4].try_into().unwrap());
        if p_type != 3 {
            continue; // not PT_INTERP
        }
        let (off, size) = if is64 {
            (
                u64::from_le_bytes(e[8..16].try_into().unwrap()),
                u64::from_le_bytes(e[32..40].try_into().unwrap()),
            )
        } else {
            (
                u32::from_le_bytes(e[4..8].try_into().unwrap()) as u64,
                u32::from_le_bytes(e[16..20].try_into().unwrap()) as u64,
            )
        };
        let mut interp = vec![0u8; size.min(4096) as usize];
        if f.read_exact_at(&mut interp, off).is_err() {
            return Look::Other;
        }
        let end = interp.iter().position(|&b| b == 0).unwrap_or(interp.len());
        return Look::Elf(Some(String::from_utf8_lossy(&interp[..end]).into_owned()));
    }
    Look::Elf(None)
}

fn read_at_most(f: &std::fs::File, buf: &mut [u8], offset: u64) -> usize {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "foresight-runtime-unit-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_runtime_is_put_in_place_once_and_replaced_when_it_differs() {
        use std::os::unix::fs::PermissionsExt;
        let root = temp("place");
        let p = put_in_place(&root, b"runtime bytes", "00ab").unwrap();
        assert_eq!(p, root.join("runtime-00ab").join(RUNTIME_NAME));
        assert_eq!(std::fs::read(&p).unwrap(), b"runtime bytes");
        let dir_mode = std::fs::metadata(p.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700, "the directory is private");
        // The same bytes: left alone (same inode).
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(&p).unwrap().ino();
        put_in_place(&root, b"runtime bytes", "00ab").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().ino(), ino);
        // Damaged: replaced by a new file (a program that maps the old one keeps it).
        std::fs::write(&p, b"runtime bytez").unwrap();
        put_in_place(&root, b"runtime bytes", "00ab").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"runtime bytes");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from(RUNTIME_NAME)]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_stamp_stands_for_the_comparison_only_while_the_copy_is_unchanged() {
        let root = temp("stamp");
        let p = put_in_place(&root, b"runtime bytes", "00cd").unwrap();
        let dir = p.parent().unwrap();
        let stamp = dir.join(STAMP_NAME);
        // Just written: its change time is too recent to be noted.
        put_in_place(&root, b"runtime bytes", "00cd").unwrap();
        assert!(
            !stamp.exists(),
            "a copy changed a moment ago is not stamped"
        );
        let meta = std::fs::metadata(&p).unwrap();
        write_stamp(dir, &stamp, &meta, std::time::Duration::ZERO);
        assert_eq!(std::fs::read_to_string(&stamp).unwrap(), file_state(&meta));
        // The stamp stands for the comparison: the bytes are not read again.
        assert_eq!(cached_copy_is(&p, b"runtime bytez", &stamp), Ok(()));
        // Changed after the stamp (the same length): the stamp no longer notes the file, the
        // bytes are compared, and the copy is replaced.
        std::fs::write(&p, b"runtime bytez").unwrap();
        assert_eq!(cached_copy_is(&p, b"runtime bytes", &stamp), Err(None));
        put_in_place(&root, b"runtime bytes", "00cd").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"runtime bytes");
        // A stamp that is a link, or another user's, or garbage, notes nothing.
        std::fs::remove_file(&stamp).unwrap();
        let meta = std::fs::metadata(&p).unwrap();
        std::fs::write(root.join("elsewhere"), file_state(&meta)).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), &stamp).unwrap();
        assert!(!stamp_notes(&stamp, &meta));
        std::fs::remove_file(&stamp).unwrap();
        std::fs::write(&stamp, "foresight-runtime-checked 1 0 0 0 0.0 0.0\n").unwrap();
        assert!(!stamp_notes(&stamp, &meta));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_cache_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let root = temp("shared");
        let dir = root.join("runtime-1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = put_in_place(&root, b"x", "1").unwrap_err().to_string();
        assert!(e.contains("not private") && e.contains(CACHE_VAR), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn sanitizer_libraries_are_known_by_name() {
        assert_eq!(sanitizer_library("libtsan.so.2"), Some(Sanitizer::Thread));
        assert_eq!(sanitizer_library("libasan.so.8"), Some(Sanitizer::Address));
        assert_eq!(sanitizer_library("liblsan.so.0"), None);
        assert_eq!(
            sanitizer_library("libclang_rt.tsan-x86_64.so"),
            Some(Sanitizer::Thread)
        );
        assert_eq!(
            sanitizer_library("libclang_rt.hwasan-aarch64.so"),
            Some(Sanitizer::HwAddress)
        );
        assert_eq!(sanitizer_library("libubsan.so.1"), None);
        assert_eq!(sanitizer_library("libc.so.6"), None);
        assert_eq!(sanitizer_library("libtsanity.so"), None);
    }

    #[test]
    fn programs_are_told_apart_by_their_interpreter() {
        assert_eq!(classify_target(OsStr::new("sh")), Target::Preloadable);
        assert_eq!(
            classify_target(OsStr::new("/no/such/program")),
            Target::Preloadable
        );
        let dir = temp("targets");
        let script = dir.join("s");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(classify_target(script.as_os_str()), Target::Preloadable);
        // A script whose interpreter is a static program is static.
        let fake = dir.join("static");
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[16] = 2; // ET_EXEC
        elf[0x20] = 64; // phoff
        elf[0x36] = 56; // phentsize
        elf[0x38] = 1; // phnum
        let mut ph = vec![0u8; 56];
        ph[0] = 1; // PT_LOAD
        elf.extend_from_slice(&ph);
        std::fs::write(&fake, &elf).unwrap();
        assert_eq!(
            classify_target(fake.as_os_str()),
            Target::Static(fake.clone())
        );
        std::fs::write(&script, format!("#!{} -x\n", fake.display())).unwrap();
        assert_eq!(
            classify_target(script.as_os_str()),
            Target::Static(fake.clone())
        );
        // With a musl interpreter.
        let musl = dir.join("musl");
        let interp = b"/lib/ld-musl-x86_64.so.1\0";
        let mut elf2 = elf.clone();
        elf2[64] = 3; // PT_INTERP
        elf2[64 + 8] = 120; // p_offset
        elf2[64 + 32] = interp.len() as u8; // p_filesz
        elf2.extend_from_slice(interp);
        std::fs::write(&musl, &elf2).unwrap();
        assert_eq!(
            classify_target(musl.as_os_str()),
            Target::Musl(musl.clone(), "/lib/ld-musl-x86_64.so.1".into())
        );
        // A truncated header is not judged.
        std::fs::write(&fake, &elf[..40]).unwrap();
        assert_eq!(classify_target(fake.as_os_str()), Target::Preloadable);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
