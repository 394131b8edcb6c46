//! Loaded modules (the executable and shared libraries), found with `dl_iterate_phdr`.
//!
//! Sites and static objects are stored as module + offset (`FORMAT.md` §7.5), where the offset
//! is the address minus the module's load bias (`dlpi_addr`): for a PIE or a shared library that
//! is the ELF virtual address a symboliser looks up. Modules are rescanned when an address falls
//! outside every known module (a `dlopen` since the last scan). Scans happen only when a site or
//! object is seen for the first time, never on the hot path.

use std::ffi::CStr;

use foresight_trace::tables::{Frame, ModuleInfo, StringEntry, TableRecord};

use crate::output;
use crate::spin::SpinLock;

struct Module {
    id: u32,
    base: u64,
    lo: u64,
    hi: u64,
    path: String,
    build_id: Vec<u8>,
}

/// A module as `wrappers.rs` reads it: its file, and the bias that maps an address to the
/// file's virtual addresses.
pub struct ModuleFile {
    pub id: u32,
    pub base: u64,
    pub path: String,
    pub build_id: Vec<u8>,
}

/// The module holding `addr` (rescanning as `frame_of` does), or `None`.
pub fn module_at(addr: u64) -> Option<ModuleFile> {
    frame_of(addr)?;
    let m = MODULES.lock();
    m.list
        .iter()
        .find(|m| addr >= m.lo && addr < m.hi)
        .map(|m| ModuleFile {
            id: m.id,
            base: m.base,
            path: m.path.clone(),
            build_id: m.build_id.clone(),
        })
}

/// The module holding `addr` as a record with its path, for a trace of its own that names a
/// frame of it (a spawned child's: `spawned.rs`); the record's `path` is for the caller to set.
pub fn record_at(addr: u64) -> Option<(ModuleInfo, String)> {
    frame_of(addr)?;
    let m = MODULES.lock();
    m.list
        .iter()
        .find(|m| addr >= m.lo && addr < m.hi)
        .map(|m| {
            (
                ModuleInfo {
                    id: m.id,
                    path: 0,
                    build_id: m.build_id.clone(),
                    base: m.base,
                    size: m.hi - m.base,
                },
                m.path.clone(),
            )
        })
}

struct Modules {
    list: Vec<Module>,
    /// `dlpi_adds` at the last scan: the loader's count of objects ever loaded.
    adds: u64,
}

static MODULES: SpinLock<Modules> = SpinLock::new(Modules {
    list: Vec::new(),
    adds: u64::MAX,
});

/// The frame of `addr`, or `None` if it is in no loaded module (heap, stack, anonymous JIT).
pub fn frame_of(addr: u64) -> Option<Frame> {
    let mut m = MODULES.lock();
    if let Some(f) = find(&m.list, addr) {
        return Some(f);
    }
    // Most misses are heap or stack addresses (dynamically allocated locks): rescan only if
    // something was loaded since the last scan, which the loader's counter tells cheaply.
    let adds = loader_adds();
    if adds == m.adds {
        return None;
    }
    m.adds = adds;
    rescan(&mut m);
    find(&m.list, addr)
}

fn loader_adds() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: valid for the call; `data` is the u64 passed below.
        unsafe { *(data as *mut u64) = (*info).dlpi_adds };
        1 // stop after the first object
    }
    let mut adds = 0u64;
    // SAFETY: the callback only reads its info and writes `adds`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut adds as *mut u64).cast()) };
    adds
}

fn find(list: &[Module], addr: u64) -> Option<Frame> {
    list.iter()
        .find(|m| addr >= m.lo && addr < m.hi)
        .map(|m| Frame {
            module: m.id,
            offset: addr - m.base,
        })
}

/// The address range of the module holding this runtime, `(lo, hi)`; `(0, 0)` if not found.
/// The libc interceptors tell the runtime's own calls (Rust's `memcpy`s) from the program's by
/// it.
pub fn own_extent() -> (usize, usize) {
    struct Search {
        addr: u64,
        lo: u64,
        hi: u64,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call; `data` is
        // the `Search` passed below.
        let (info, s) = unsafe { (&*info, &mut *(data as *mut Search)) };
        let base = info.dlpi_addr;
        // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        for ph in phdrs.iter().filter(|ph| ph.p_type == libc::PT_LOAD) {
            lo = lo.min(base.wrapping_add(ph.p_vaddr));
            hi = hi.max(base.wrapping_add(ph.p_vaddr + ph.p_memsz));
        }
        if s.addr >= lo && s.addr < hi {
            s.lo = lo;
            s.hi = hi;
            return 1;
        }
        0
    }
    let mut s = Search {
        addr: own_extent as *const () as usize as u64,
        lo: 0,
        hi: 0,
    };
    // SAFETY: the callback only reads its info and writes `s`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut s as *mut Search).cast()) };
    (s.lo as usize, s.hi as usize)
}

/// Forget every module (fork child: its trace needs its own module records).
pub fn reset() {
    let mut m = MODULES.lock();
    m.list.clear();
    m.adds = u64::MAX;
}

pub fn lock_for_fork() {
    MODULES.raw_lock();
}

/// # Safety
/// Only after `lock_for_fork`.
pub unsafe fn unlock_after_fork() {
    // SAFETY: forwarded contract.
    unsafe { MODULES.force_unlock() };
}

struct Found {
    base: u64,
    lo: u64,
    hi: u64,
    path: Vec<u8>,
    build_id: Vec<u8>,
}

fn rescan(m: &mut Modules) {
    let mut found: Vec<Found> = Vec::new();
    // SAFETY: the callback only reads the `dl_phdr_info` it is given, during the call, and
    // `found` outlives the call.
    unsafe {
        libc::dl_iterate_phdr(Some(callback), (&mut found as *mut Vec<Found>).cast());
    }
    for f in found {
        if m.list
            .iter()
            .any(|k| k.base == f.base && k.lo == f.lo && k.hi == f.hi)
        {
            continue;
        }
        let id = m.list.len() as u32;
        let path = if f.path.is_empty() {
            exe_path()
        } else {
            String::from_utf8_lossy(&f.path).into_owned()
        };
        let sid = output::new_string_id();
        output::table_record(&TableRecord::String(StringEntry {
            id: sid,
            text: path.clone(),
        }));
        output::table_record(&TableRecord::Module(ModuleInfo {
            id,
            path: sid,
            build_id: f.build_id.clone(),
            base: f.base,
            size: f.hi - f.base,
        }));
        m.list.push(Module {
            id,
            base: f.base,
            lo: f.lo,
            hi: f.hi,
            path,
            build_id: f.build_id,
        });
    }
}

fn exe_path() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

unsafe extern "C" fn callback(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call; `data` is the
    // `Vec<Found>` passed by `rescan`.
    let (info, found) = unsafe { (&*info, &mut *(data as *mut Vec<Found>)) };
    let base = info.dlpi_addr;
    let mut lo = u64::MAX;
    let mut hi = 0u64;
    let mut build_id = Vec::new();
    // SAFETY: dlpi_phdr points at dlpi_phnum program headers.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    for ph in phdrs {
        if ph.p_type == libc::PT_LOAD {
            lo = lo.min(base.wrapping_add(ph.p_vaddr));
            hi = hi.max(base.wrapping_add(ph.p_vaddr + ph.p_memsz));
        } else if ph.p_type == libc::PT_NOTE && build_id.is_empty() {
            // SAFETY: a PT_NOTE segment is mapped (it lies inside a PT_LOAD segment) for
            // p_memsz bytes at base + p_vaddr.
            let notes = unsafe {
                std::slice::from_raw_parts(
                    base.wrapping_add(ph.p_vaddr) as *const u8,
                    ph.p_memsz as usize,
                )
            };
            build_id = gnu_build_id(notes).unwrap_or_default();
        }
    }
    if lo >= hi {
        return 0;
    }
    let path = if info.dlpi_name.is_null() {
        Vec::new()
    } else {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_bytes()
            .to_vec()
    };
    found.push(Found {
        base,
        lo,
        hi,
        path,
        build_id,
    });
    0
}

/// The descriptor of the `NT_GNU_BUILD_ID` note ("GNU", type 3) in a notes segment.
pub fn gnu_build_id(mut notes: &[u8]) -> Option<Vec<u8>> {
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let word = |i: usize| u32::from_ne_bytes(notes[i..i + 4].try_into().unwrap()) as usize;
        let (namesz, descsz, ty) = (word(0), word(4), word(8));
        let name_end = 12usize.checked_add(align4(namesz))?;
        let desc_end = name_end.checked_add(align4(descsz))?;
        if notes.len() < 12 + namesz || notes.len() < name_end + descsz {
            return None;
        }
        if ty == 3 && namesz == 4 && &notes[12..16] == b"GNU\0" {
            return Some(notes[name_end..name_end + descsz].to_vec());
        }
        if desc_end > notes.len() {
            return None;
        }
        notes = &notes[desc_end..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_note() {
        let mut n = Vec::new();
        // An unrelated note first ("ab", type 1, 2-byte descriptor), then the build id.
        n.extend_from_slice(&3u32.to_ne_bytes());
        n.extend_from_slice(&2u32.to_ne_bytes());
        n.extend_from_slice(&1u32.to_ne_bytes());
        n.extend_from_slice(b"ab\0\0\x01\x02\0\0");
        n.extend_from_slice(&4u32.to_ne_bytes());
        n.extend_from_slice(&3u32.to_ne_bytes());
        n.extend_from_slice(&3u32.to_ne_bytes());
        n.extend_from_slice(b"GNU\0\xaa\xbb\xcc\0");
        assert_eq!(gnu_build_id(&n), Some(vec![0xaa, 0xbb, 0xcc]));
        assert_eq!(gnu_build_id(&n[..20]), None);
    }
}
