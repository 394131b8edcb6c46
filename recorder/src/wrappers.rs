//! Which code is locking machinery, decided once per code address: whether a hooked call's
//! site needs its callers.
//!
//! A lock taken through `std::lock_guard` in a program built at `-O0` calls
//! `pthread_mutex_lock` from `__gthread_mutex_lock`, an out-of-line copy of a libstdc++ header
//! function in the program's own module; a C library calls it from its own wrapper
//! (`pthreadMutexEnter`). The return address alone then names the wrapper, and reports need the
//! first frame outside it (the analyzer's `sites.rs` chooses that frame; this module decides
//! which sites must record enough frames for it to be there). An address is machinery when
//! - its module is a C or C++ runtime library (libc, libpthread, libstdc++, libc++, libgcc,
//!   the dynamic loader) or this runtime; or
//! - the function containing it, by the module's ELF symbol table (`.symtab`, else the
//!   separate debug file's, else `.dynsym`), is one of the standard library's lock types,
//!   guards, `call_once`, threads or gthreads functions, or matches one of the program's
//!   wrapper patterns (`FORESIGHT_WRAPPERS`, one glob a line; C++ names demangled, without
//!   their parameters).
//!
//! Only the standard library's *lock* machinery is listed, not all of `std::`: a function of
//! the program inlined into `std::thread`'s launcher is the program's code, and calling it
//! machinery would make every lock it takes unwind.
//!
//! Everything here runs on cold paths: the first time an address is classified (then a
//! lock-free table answers), and the first time a module's symbols are needed (read from its
//! file with positioned reads, never mapped: functions only, 24 bytes each; names are read
//! with them when the string table is small, else from the file when an address is looked
//! up).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

use foresight_trace::name_glob::glob_match;
use foresight_trace::runtime_library::is_runtime_library;

use crate::modules;
use crate::spin::SpinLock;

/// The program's wrapper patterns (`FORESIGHT_WRAPPERS`).
static PATTERNS: SpinLock<Vec<String>> = SpinLock::new(Vec::new());

/// Sets the program's wrapper patterns: one glob a line (C++ names hold commas and spaces).
pub fn configure(value: Option<&[u8]>) {
    let patterns = value
        .map(|v| {
            String::from_utf8_lossy(v)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    *PATTERNS.lock() = patterns;
    // Looked up on every unwound frame, the class table is read far more often than written,
    // so its pages are written once here instead (`first_touch`): a recording program
    // classifies addresses over most of its 32 pages.
    crate::first_touch::pages(&CLASS, |c| c);
}

const CLASS_SLOTS: usize = 1 << 14;
/// Classified addresses: `pc << 1 | machinery`, 0 for an empty slot. A full table classifies
/// again (correct, only slower).
static CLASS: [AtomicU64; CLASS_SLOTS] = [const { AtomicU64::new(0) }; CLASS_SLOTS];
const CLASS_PROBES: usize = 32;

/// Whether the code at `pc` is locking machinery (see the module's documentation).
pub fn is_machinery(pc: usize) -> bool {
    let pc = pc as u64;
    let mut i = (pc.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 50) as usize & (CLASS_SLOTS - 1);
    for _ in 0..CLASS_PROBES {
        let v = CLASS[i].load(Ordering::Acquire);
        if v == 0 {
            let machinery = classify(pc);
            // A slot another thread took meanwhile is fine: the next probe finds either entry.
            let _ = CLASS[i].compare_exchange(
                0,
                pc << 1 | machinery as u64,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            return machinery;
        }
        if v >> 1 == pc {
            return v & 1 == 1;
        }
        i = (i + 1) & (CLASS_SLOTS - 1);
    }
    classify(pc)
}

/// fork child: module ids start again, and so do the symbol tables kept by id.
pub fn reset() {
    SYMBOLS.lock().clear();
}

pub fn lock_for_fork() {
    SYMBOLS.raw_lock();
    PATTERNS.raw_lock();
}

/// # Safety
/// Only after `lock_for_fork`.
pub unsafe fn unlock_after_fork() {
    // SAFETY: forwarded contract.
    unsafe {
        PATTERNS.force_unlock();
        SYMBOLS.force_unlock();
    }
}

// glibc's cancellation state (not in the `libc` crate for Linux): `PTHREAD_CANCEL_DISABLE`.
extern "C" {
    fn pthread_setcancelstate(state: libc::c_int, old: *mut libc::c_int) -> libc::c_int;
}
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;

/// Classifies with the thread's cancellation disabled: reading a module's file calls `open`
/// and `pread`, cancellation points, and a hook is inside a runtime session here. A
/// cancellation acted on now would unwind out of the session and leave it open, and the
/// thread's later calls (its cleanup handlers' unlocks) unrecorded. A pending cancellation is
/// acted on at the program's next cancellation point instead.
#[cold]
fn classify(pc: u64) -> bool {
    let mut old: libc::c_int = 0;
    // SAFETY: sets the calling thread's cancellation state, keeping the old one in `old`.
    unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
    let machinery = classify_uncancelled(pc);
    let mut ignored: libc::c_int = 0;
    // SAFETY: restores the state saved above.
    unsafe { pthread_setcancelstate(old, &mut ignored) };
    machinery
}

fn classify_uncancelled(pc: u64) -> bool {
    let Some(m) = modules::module_at(pc) else {
        return false;
    };
    if is_runtime_library(&m.path) {
        return true;
    }
    let Some(raw) = function_name(&m, pc - m.base) else {
        return false;
    };
    let name = demangled(&raw);
    if is_standard_machinery(&name) {
        return true;
    }
    let patterns = PATTERNS.lock();
    patterns
        .iter()
        .any(|p| glob_match(p, &name) || glob_match(p, &raw))
}

fn demangled(raw: &str) -> String {
    if raw.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(raw) {
            let opts = cpp_demangle::DemangleOptions::new()
                .no_params()
                .no_return_type();
            if let Ok(s) = sym.demangle(&opts) {
                return s;
            }
        }
    }
    raw.to_string()
}

/// The standard library's lock types, guards, `call_once`, threads and their gthreads layer
/// (libstdc++ and libc++, whose inline namespaces are looked through), by demangled name
/// without parameters.
pub fn is_standard_machinery(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "std::mutex::",
        "std::recursive_mutex::",
        "std::timed_mutex::",
        "std::recursive_timed_mutex::",
        "std::shared_mutex::",
        "std::shared_timed_mutex::",
        "std::__mutex_base::",
        "std::__recursive_mutex_base::",
        "std::__timed_mutex_impl<",
        "std::__shared_mutex_pthread::",
        "std::__shared_mutex_cv::",
        "std::lock_guard<",
        "std::unique_lock<",
        "std::scoped_lock<",
        "std::shared_lock<",
        "std::lock<",
        "std::try_lock<",
        "std::__detail::__lock_impl<",
        "std::__detail::__try_lock_impl<",
        "std::__try_lock_impl<",
        "std::__lock_impl",
        "std::condition_variable::",
        "std::condition_variable_any::",
        "std::call_once<",
        "std::thread::thread<",
        "std::thread::join",
        "std::thread::detach",
        "std::thread::_M_start_thread",
        "std::jthread::",
        "std::counting_semaphore<",
        "std::__atomic_semaphore",
        "std::__platform_semaphore",
        "std::latch::",
        "std::barrier<",
        "std::__libcpp_",
        "std::__glibcxx_",
        "__glibcxx_",
        "__gthread_",
        "__gthrw_",
    ];
    let mut name = name.trim_start_matches("::");
    let owned;
    for inline_ns in ["std::__1::", "std::_V2::"] {
        if let Some(rest) = name.strip_prefix(inline_ns) {
            owned = format!("std::{rest}");
            name = &owned;
            break;
        }
    }
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The function symbols of one module: sorted `(start, end, name offset)` in its string
/// table, which is kept in memory when it is small (`NAMES_KEPT`), else stays in the file.
struct Functions {
    file: String,
    strtab_offset: u64,
    strtab_size: u64,
    ranges: Vec<(u64, u64, u32)>,
    /// The string table, when it is at most `NAMES_KEPT` bytes: a program whose lock calls
    /// come from a wrapper classifies one address per calling function (SQLite: 120), and
    /// each would otherwise open the file and read it again.
    names: Option<Vec<u8>>,
}

/// The largest string table kept in memory (SQLite's amalgamation: 34 KiB).
const NAMES_KEPT: u64 = 1 << 20;

/// Per module id: its functions, once loaded (`None`: no symbol table found).
static SYMBOLS: SpinLock<Vec<Option<Option<Functions>>>> = SpinLock::new(Vec::new());

fn function_name(m: &modules::ModuleFile, vaddr: u64) -> Option<String> {
    let mut tables = SYMBOLS.lock();
    let i = m.id as usize;
    if tables.len() <= i {
        tables.resize_with(i + 1, || None);
    }
    let funcs = tables[i].get_or_insert_with(|| load_functions(m));
    let f = funcs.as_ref()?;
    let at = f.ranges.partition_point(|r| r.0 <= vaddr).checked_sub(1)?;
    let (start, end, name) = f.ranges[at];
    if vaddr < start || vaddr >= end || u64::from(name) >= f.strtab_size {
        return None;
    }
    name_at(f, name)
}

/// The name at offset `name` of the module's string table.
fn name_at(f: &Functions, name: u32) -> Option<String> {
    let Some(names) = &f.names else {
        return name_from_file(f, name);
    };
    let from = names.get(name as usize..)?;
    let len = from.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&from[..len]).into_owned())
}

/// `name_at` for a string table left in the file.
fn name_from_file(f: &Functions, name: u32) -> Option<String> {
    let file = File::open(&f.file).ok()?;
    let mut buf = [0u8; 4096];
    let want = (f.strtab_size - u64::from(name)).min(buf.len() as u64) as usize;
    let n = file
        .read_at(&mut buf[..want], f.strtab_offset + u64::from(name))
        .ok()?;
    let len = buf[..n].iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
}

/// The module's own `.symtab`, else that of its separate debug file (by build-id), else its
/// `.dynsym`.
fn load_functions(m: &modules::ModuleFile) -> Option<Functions> {
    let debug_file = (!m.build_id.is_empty()).then(|| {
        let hex: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
        format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..])
    });
    read_functions(&m.path, SHT_SYMTAB)
        .or_else(|| read_functions(debug_file.as_deref()?, SHT_SYMTAB))
        .or_else(|| read_functions(&m.path, SHT_DYNSYM))
}

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
/// Bounds on what a module's file may make this read: section headers and symbols.
const MAX_SECTIONS: u64 = 1 << 16;
const MAX_SYMBOLS: u64 = 1 << 24;

/// The sized function symbols of the first section of type `kind` in an ELF64
/// little-endian file (the targets this runtime is built for).
fn read_functions(path: &str, kind: u32) -> Option<Functions> {
    let file = File::open(path).ok()?;
    // A FIFO or device must neither block nor be read.
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut eh = [0u8; 64];
    file.read_exact_at(&mut eh, 0).ok()?;
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let shoff = u64_at(&eh, 0x28);
    let shentsize = u64::from(u16_at(&eh, 0x3a));
    let shnum = u64::from(u16_at(&eh, 0x3c));
    if shentsize < 64 || shnum == 0 || shnum > MAX_SECTIONS {
        return None;
    }
    let mut sh = vec![0u8; (shentsize * shnum) as usize];
    file.read_exact_at(&mut sh, shoff).ok()?;
    let section = |i: u64| &sh[(i * shentsize) as usize..(i * shentsize + 64) as usize];
    let symtab = (0..shnum).map(section).find(|s| u32_at(s, 4) == kind)?;
    let (sym_off, sym_size, link) = (
        u64_at(symtab, 0x18),
        u64_at(symtab, 0x20),
        u32_at(symtab, 0x28),
    );
    if u64::from(link) >= shnum {
        return None;
    }
    let strtab = section(u64::from(link));
    let (strtab_offset, strtab_size) = (u64_at(strtab, 0x18), u64_at(strtab, 0x20));
    let count = (sym_size / 24).min(MAX_SYMBOLS);
    let mut ranges = Vec::new();
    let mut chunk = vec![0u8; 24 * 2730];
    let mut done = 0u64;
    while done < count {
        let n = (count - done).min(2730);
        let bytes = &mut chunk[..(n * 24) as usize];
        file.read_exact_at(bytes, sym_off + done * 24).ok()?;
        for s in bytes.chunks_exact(24) {
            let (name, info, shndx) = (u32_at(s, 0), s[4], u16_at(s, 6));
            let (value, size) = (u64_at(s, 8), u64_at(s, 16));
            // STT_FUNC or STT_GNU_IFUNC, defined, sized.
            if matches!(info & 0xf, 2 | 10) && shndx != 0 && size > 0 {
                ranges.push((value, value.saturating_add(size), name));
            }
        }
        done += n;
    }
    ranges.sort_unstable();
    let names = (strtab_size <= NAMES_KEPT)
        .then(|| read_names(&file, strtab_offset, strtab_size))
        .flatten();
    Some(Functions {
        file: path.to_string(),
        strtab_offset,
        strtab_size,
        ranges,
        names,
    })
}

fn read_names(file: &File, offset: u64, size: u64) -> Option<Vec<u8>> {
    let mut names = vec![0u8; usize::try_from(size).ok()?];
    file.read_exact_at(&mut names, offset).ok()?;
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_lock_machinery_by_name() {
        assert!(is_standard_machinery("__gthread_mutex_lock"));
        assert!(is_standard_machinery("std::mutex::lock"));
        assert!(is_standard_machinery(
            "std::lock_guard<std::mutex>::lock_guard"
        ));
        assert!(is_standard_machinery("std::__1::mutex::lock"));
        assert!(is_standard_machinery(
            "std::_V2::condition_variable_any::wait<std::unique_lock<std::mutex> >"
        ));
        assert!(is_standard_machinery("std::call_once<main::{lambda()#1}>"));
        assert!(is_standard_machinery("std::__glibcxx_rwlock_rdlock"));
        // A program's function inlined into the thread launcher is the program's code.
        assert!(!is_standard_machinery(
            "std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#1}> > >::_M_run"
        ));
        assert!(!is_standard_machinery("pay"));
        assert!(!is_standard_machinery(
            "std::vector<int, std::allocator<int> >::push_back"
        ));
    }

    #[test]
    fn demangled_names_without_parameters() {
        assert_eq!(demangled("_ZNSt5mutex4lockEv"), "std::mutex::lock");
        assert_eq!(
            demangled("_ZL20__gthread_mutex_lockP15pthread_mutex_t"),
            "__gthread_mutex_lock"
        );
        assert_eq!(demangled("pthreadMutexEnter"), "pthreadMutexEnter");
        assert_eq!(demangled("_Zgarbage"), "_Zgarbage");
    }

    #[test]
    fn the_test_binary_s_own_functions_are_found() {
        // This test executable has a symbol table: a function of it is found by address.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let f = read_functions(exe.to_str().unwrap(), SHT_SYMTAB).expect("a symbol table");
        assert!(f.ranges.len() > 100);
        assert!(f.ranges.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn names_kept_in_memory_are_the_names_in_the_file() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mut f = read_functions(exe.to_str().unwrap(), SHT_SYMTAB).expect("a symbol table");
        let file = File::open(&f.file).unwrap();
        f.names = read_names(&file, f.strtab_offset, f.strtab_size);
        assert!(f.names.is_some());
        assert!(f
            .ranges
            .iter()
            .any(|r| name_at(&f, r.2).is_some_and(|n| n.contains("names_kept_in_memory"))));
        // A thousand of them compared (each read from the file opens it).
        let step = (f.ranges.len() / 1000).max(1);
        let sample: Vec<u32> = f.ranges.iter().step_by(step).map(|r| r.2).collect();
        let kept: Vec<_> = sample.iter().map(|&n| name_at(&f, n)).collect();
        f.names = None;
        let read: Vec<_> = sample.iter().map(|&n| name_at(&f, n)).collect();
        assert_eq!(kept, read);
    }
}
