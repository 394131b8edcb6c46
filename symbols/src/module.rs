//! Resolving the frames of one module: read the ELF file, check it is the recorded build, map
//! module offsets to the addresses of the file, and look them up in DWARF (code) or the symbol
//! table (code without debug information, and static data). Static data (the variables that
//! memory accesses touched, and static locks) is described by its `DW_TAG_variable` and the
//! layout of its type (`FORMAT.md` §7.9–§7.10), which also gives a lock its member path.
//!
//! A module file is as untrusted as the trace: it is read only if it is a regular file of
//! bounded size, and every parse error costs only that module or that frame.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use addr2line::gimli;
use foresight_trace::data::{element_path, PathStop, TypeTable};
use foresight_trace::runtime_library::is_runtime_library;
use foresight_trace::tables::{DataMember, DataType, Frame, ModuleInfo, TypeShape};
use foresight_trace::StringId;
use object::{
    CompressionFormat, Object, ObjectKind, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind,
};

use crate::cache::FrameCache;
use crate::code;
use crate::{ResolvedLocation, SkipReason, SymbolizeOptions, Use};

/// Module files larger than this are not read (they are read into memory, not mapped).
const MAX_MODULE_LEN: u64 = 4 << 30;
/// Inlined frames kept for one address; more means a malformed file.
const MAX_INLINE_DEPTH: usize = 64;

pub(crate) struct ModuleOutcome {
    /// Every frame asked for; an empty list when nothing was found.
    pub resolved: Vec<(Frame, Vec<ResolvedLocation>)>,
    /// The static variables that hold the accessed data asked for.
    pub data: ModuleData,
    pub notes: Vec<String>,
    /// Some address of `check` ([`resolve_checked`]) may be named otherwise when more of the
    /// module's data is touched: `data` is not the answer for it.
    pub unsettled: bool,
}

/// What one module says of the data that accesses touched.
#[derive(Default)]
pub(crate) struct ModuleData {
    /// The variables, by module offset, not overlapping.
    pub variables: Vec<LocalVariable>,
    /// The layouts their types (and static locks' types) need.
    pub types: LocalTypes,
    /// 8-byte granules asked for that no variable holds (padding, data without a symbol).
    pub unnamed_granules: u64,
}

/// A static variable before its strings and type ids are the trace's.
pub(crate) struct LocalVariable {
    /// Module offset of its first byte (`FORMAT.md` §7.9).
    pub offset: u64,
    pub size: u64,
    pub name: String,
    pub file: Option<String>,
    pub line: u32,
    /// Index into `LocalTypes::types`.
    pub ty: Option<u32>,
}

/// Layouts exported from one module's DWARF. Type ids are indices into `types`; member names
/// are indices into `names`. The pass renumbers both into the trace's ids when it writes them.
#[derive(Default)]
pub(crate) struct LocalTypes {
    pub types: Vec<DataType>,
    pub names: Vec<String>,
    name_ids: HashMap<String, StringId>,
    /// (unit, type entry) → exported id (`None`: a scalar, or nothing to say).
    memo: HashMap<(gimli::UnitSectionOffset, TypeOffset), Option<u32>>,
}

impl TypeTable for LocalTypes {
    fn data_type(&self, id: u32) -> Option<&DataType> {
        self.types.get(id as usize)
    }

    fn member_name(&self, id: StringId) -> Option<&str> {
        self.names.get(id as usize).map(String::as_str)
    }
}

/// The module offsets of a module's touched data: sorted, disjoint `[start, end)` runs of
/// 8-byte granules.
pub(crate) type DataRuns = [(u64, u64)];

type Reader<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

pub(crate) fn resolve(
    path: &Path,
    info: &ModuleInfo,
    frames: &[(Frame, Use)],
    runs: &DataRuns,
    opts: &SymbolizeOptions,
) -> Result<ModuleOutcome, SkipReason> {
    resolve_checked(path, info, frames, runs, &[], opts)
}

/// [`resolve`], telling also whether the variable that holds each module offset of `check`
/// is the one the module's data gives it whatever else of the module was touched
/// ([`SymbolTable::settled`]): then `runs` need only hold the granules of `check`.
pub(crate) fn resolve_checked(
    path: &Path,
    info: &ModuleInfo,
    frames: &[(Frame, Use)],
    runs: &DataRuns,
    check: &[u64],
    opts: &SymbolizeOptions,
) -> Result<ModuleOutcome, SkipReason> {
    // A runtime library's frames are never a report's site (the analyzer looks through them
    // to the program's caller): its symbol table names them, and its line information, often
    // a separate compressed debug file larger than the program's, is not read.
    let line_info = !is_runtime_library(&path.to_string_lossy());
    let mut cache = opts
        .frame_cache
        .as_deref()
        .filter(|_| !info.build_id.is_empty())
        .map(|dir| FrameCache::open(dir, &info.build_id, opts));
    // Without data to name, a build whose frames were all resolved before is not read.
    if runs.is_empty() {
        if let Some(resolved) = cache.as_ref().and_then(|c| c.get_all(frames)) {
            return Ok(ModuleOutcome {
                resolved,
                data: ModuleData::default(),
                notes: Vec::new(),
                unsettled: false,
            });
        }
    }
    let data = read_module(path, line_info).map_err(SkipReason::Unreadable)?;
    let obj = object::File::parse(&*data).map_err(|e| SkipReason::NotElf(e.to_string()))?;
    let build_id = obj
        .build_id()
        .map_err(|e| SkipReason::NotElf(format!("bad build-id note: {e}")))?
        .unwrap_or(&[]);
    let mut notes = Vec::new();
    if info.build_id.is_empty() {
        notes.push(format!(
            "module {} ({}): the trace records no build-id for it; it was symbolised without \
             checking that the file is the recorded build",
            info.id,
            path.display()
        ));
    } else if build_id != info.build_id.as_slice() {
        return Err(SkipReason::BuildIdMismatch {
            recorded: info.build_id.clone(),
            found: build_id.to_vec(),
        });
    }

    let map = AddressMap::new(&obj, info);

    // Debug information of a stripped module may live in a separate file, found by build-id.
    let debug_data: Vec<u8>;
    let debug_obj: object::File<'_>;
    let mut dwarf_obj = &obj;
    let mut extra_symbols = None;
    if !has_dwarf(&obj) {
        if let Some((p, d)) = find_debug_file(build_id, &opts.debug_dirs, line_info) {
            debug_data = d;
            match object::File::parse(&*debug_data) {
                Ok(o) if o.build_id().ok().flatten() == Some(build_id) => {
                    debug_obj = o;
                    dwarf_obj = &debug_obj;
                    extra_symbols = Some(&debug_obj);
                }
                _ => notes.push(format!(
                    "{}: separate debug file is not readable or of another build; ignored",
                    p.display()
                )),
            }
        }
    }
    let sections = if line_info {
        load_dwarf_sections(dwarf_obj)
    } else {
        None
    };
    let dwarf = sections
        .as_ref()
        .map(|s| dwarf_view(s, dwarf_obj.is_little_endian()));
    let symbols = SymbolTable::new(std::iter::once(&obj).chain(extra_symbols));

    // The static variables asked for: those holding a static lock, and those holding accessed
    // data, by the start addresses of their symbols.
    let mut wanted: BTreeSet<u64> = BTreeSet::new();
    for (f, _) in frames.iter().filter(|(_, u)| *u == Use::Data) {
        if let Some(s) = map.vaddr(f.offset).and_then(|v| symbols.data_sym(v)) {
            wanted.insert(s.start);
        }
    }
    let touched = symbols.variables_touched(runs, &map);
    let unsettled = !symbols.settled(check.iter().filter_map(|&o| map.vaddr(o)));
    wanted.extend(touched.iter().map(|s| s.start));
    let mut types = LocalTypes::default();
    let decls = match &dwarf {
        Some(d) if !wanted.is_empty() => variable_decls(d, &wanted, &mut types),
        _ => HashMap::new(),
    };
    let describe = |sym: &Sym<'_>| {
        let decl = decls.get(&sym.start);
        let name = match decl {
            Some(d) => d.name(sym, opts.demangle),
            None => display_name(sym.name, opts.demangle),
        };
        (name, decl)
    };

    // A return address points after the call: look up the call itself.
    let code_probe = |offset: u64| {
        map.vaddr(offset)
            .and_then(|v| v.checked_sub(1))
            .filter(|&v| map.contains(v))
    };
    let mut probes: Vec<u64> = frames
        .iter()
        .filter(|(_, u)| *u == Use::Code)
        .filter_map(|(f, _)| code_probe(f.offset))
        .collect();
    probes.sort_unstable();
    probes.dedup();
    let lookups = dwarf.as_deref().and_then(|d| code::find_frames(d, &probes));
    // addr2line answers what the lookup above could not parse.
    let ctx = std::cell::OnceCell::new();
    let addr2line_ctx = || {
        ctx.get_or_init(|| {
            dwarf
                .as_ref()
                .and_then(|d| addr2line::Context::from_arc_dwarf(Arc::clone(d)).ok())
        })
        .as_ref()
    };

    let mut resolved = Vec::with_capacity(frames.len());
    for &(frame, usage) in frames {
        let locs = match usage {
            Use::Code => code_probe(frame.offset)
                .map(|probe| {
                    let found = probes
                        .binary_search(&probe)
                        .ok()
                        .and_then(|i| lookups.as_ref()?.get(i));
                    let dwarf_frames = match found {
                        Some(code::Lookup::Frames(f)) => {
                            f.iter().map(|f| located(f, opts.demangle)).collect()
                        }
                        _ => addr2line_frames(addr2line_ctx(), probe, opts.demangle),
                    };
                    name_code(dwarf_frames, &symbols, probe, opts.demangle)
                })
                .unwrap_or_default(),
            Use::Data => map
                .vaddr(frame.offset)
                .filter(|&v| map.contains(v))
                .and_then(|v| {
                    let sym = symbols.data_sym(v)?;
                    let (name, decl) = describe(sym);
                    // The lock is the outermost element that starts at its address.
                    let path = element_path(
                        &types,
                        decl.and_then(|d| d.ty),
                        sym.end - sym.start,
                        v - sym.start,
                        1,
                        PathStop::AtStart,
                    );
                    Some(vec![ResolvedLocation {
                        function: Some(path.name(&name)),
                        file: decl.and_then(|d| d.file.clone()),
                        line: decl.map_or(0, |d| d.line),
                        column: 0,
                    }])
                })
                .unwrap_or_default(),
        };
        resolved.push((frame, locs));
    }

    let mut out = ModuleData::default();
    for sym in &touched {
        let Some(offset) = map.offset_of(sym.start) else {
            continue;
        };
        let (name, decl) = describe(sym);
        out.variables.push(LocalVariable {
            offset,
            size: sym.end - sym.start,
            name,
            file: decl.and_then(|d| d.file.clone()),
            line: decl.map_or(0, |d| d.line),
            ty: decl.and_then(|d| d.ty),
        });
    }
    out.unnamed_granules = unnamed_granules(runs, &map, &touched);
    out.types = types;
    // A module that needed a note (a debug file ignored) is resolved again next time.
    if let Some(cache) = cache.as_mut().filter(|_| notes.is_empty()) {
        cache.add(frames, &resolved);
        cache.save();
    }
    Ok(ModuleOutcome {
        resolved,
        data: out,
        notes,
        unsettled,
    })
}

/// Granules of `data` that none of `vars` (sorted, not overlapping) holds.
fn unnamed_granules(data: &DataRuns, map: &AddressMap, vars: &[&Sym<'_>]) -> u64 {
    let mut unnamed = 0;
    for &(lo, hi) in data {
        let (Some(lo), Some(hi)) = (map.vaddr(lo), map.vaddr(hi)) else {
            continue;
        };
        // Granules before `done` are counted as held.
        let (mut done, mut held) = (lo, 0);
        let first = vars.partition_point(|s| s.end <= lo);
        for s in vars[first..].iter().take_while(|s| s.start < hi) {
            let from = (s.start & !7).max(done);
            let to = s
                .end
                .checked_next_multiple_of(8)
                .unwrap_or(u64::MAX)
                .min(hi);
            if to > from {
                held += (to - from).div_ceil(8);
                done = to;
            }
        }
        unnamed += (hi - lo).div_ceil(8).saturating_sub(held);
    }
    unnamed
}

/// Reads the parts of the module at `path` that symbolisation uses, into a buffer of the
/// file's size: the ELF and program headers, the notes, the section headers and every section
/// but code (`SHF_EXECINSTR`), the DWARF that nothing here reads (location lists, call frames,
/// macros, name indexes) and, unless `dwarf`, the other DWARF sections (`.debug_*`,
/// `.zdebug_*`: only a compressed one's header). The rest stays zero, and costs nothing: the
/// pages of a zeroed allocation that are never touched are never faulted in. (The runtime's
/// and the C library's code, and the C library's separate DWARF, which no runtime library's
/// symbolisation reads, were most of what `record` read after the program ended.) A file
/// that is not ELF, or whose headers are not as expected, is read whole.
fn read_module(path: &Path, dwarf: bool) -> Result<Vec<u8>, String> {
    let (f, len) = open_regular_file(path)?;
    let mut buf = vec![0u8; len as usize];
    let head = buf.len().min(64);
    let sparse = f.read_exact_at(&mut buf[..head], 0).is_ok()
        && match object::FileKind::parse(&buf[..head]) {
            Ok(object::FileKind::Elf64) => {
                read_parts::<object::elf::FileHeader64<object::Endianness>>(&f, &mut buf, dwarf)
            }
            Ok(object::FileKind::Elf32) => {
                read_parts::<object::elf::FileHeader32<object::Endianness>>(&f, &mut buf, dwarf)
            }
            _ => None,
        }
        .is_some();
    if !sparse {
        f.read_exact_at(&mut buf, 0)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(buf)
}

/// `read_module`'s parts of an ELF file; `None` when its headers are not as expected (the
/// caller then reads it whole).
fn read_parts<Elf: object::read::elf::FileHeader<Endian = object::Endianness>>(
    f: &std::fs::File,
    buf: &mut [u8],
    dwarf: bool,
) -> Option<()> {
    use object::elf::{PT_NOTE, SHF_COMPRESSED, SHF_EXECINSTR, SHN_XINDEX, SHT_NOBITS};
    use object::read::elf::{ProgramHeader, SectionHeader};
    let read = |buf: &mut [u8], offset: u64, size: u64| -> Option<()> {
        let end = offset
            .checked_add(size)
            .filter(|&e| e <= buf.len() as u64)?;
        f.read_exact_at(&mut buf[offset as usize..end as usize], offset)
            .ok()
    };
    let (endian, phoff, phlen, shoff, shlen, shstrndx) = {
        let h = Elf::parse(&*buf).ok()?;
        let endian = h.endian().ok()?;
        let (phnum, shnum) = (h.e_phnum(endian), h.e_shnum(endian));
        let shstrndx = h.e_shstrndx(endian);
        // Extended numbering (more than 0xfff0 sections or 0xffff segments): read whole.
        if phnum == 0xffff
            || (shnum == 0 && h.e_shoff(endian).into() != 0)
            || shstrndx == SHN_XINDEX
        {
            return None;
        }
        (
            endian,
            h.e_phoff(endian).into(),
            u64::from(h.e_phentsize(endian)) * u64::from(phnum),
            h.e_shoff(endian).into(),
            u64::from(h.e_shentsize(endian)) * u64::from(shnum),
            usize::from(shstrndx),
        )
    };
    read(buf, phoff, phlen)?;
    read(buf, shoff, shlen)?;
    let h = Elf::parse(&*buf).ok()?;
    let notes: Vec<(u64, u64)> = h
        .program_headers(endian, &*buf)
        .ok()?
        .iter()
        .filter(|p| p.p_type(endian) == PT_NOTE)
        .map(|p| (p.p_offset(endian).into(), p.p_filesz(endian).into()))
        .collect();
    // (name offset, type, flags, offset, size) of each section.
    let sections: Vec<(u32, u32, u64, u64, u64)> = h
        .section_headers(endian, &*buf)
        .ok()?
        .iter()
        .map(|s| {
            (
                s.sh_name(endian),
                s.sh_type(endian),
                s.sh_flags(endian).into(),
                s.sh_offset(endian).into(),
                s.sh_size(endian).into(),
            )
        })
        .collect();
    for (offset, size) in notes {
        read(buf, offset, size)?;
    }
    let names = match sections.get(shstrndx) {
        Some(&(_, t, _, offset, size)) if t != SHT_NOBITS => {
            read(buf, offset, size)?;
            Some((offset, size))
        }
        _ => None,
    };
    // The name at `name` in the section-name table, and what follows it there.
    fn section_name(buf: &[u8], names: Option<(u64, u64)>, name: u32) -> Option<&[u8]> {
        let (offset, size) = names?;
        let from = offset
            .checked_add(u64::from(name))
            .filter(|_| u64::from(name) < size)?;
        Some(&buf[from as usize..(offset + size) as usize])
    }
    let is_dwarf = |buf: &[u8], name: u32| -> bool {
        section_name(buf, names, name)
            .is_some_and(|tail| tail.starts_with(b".debug_") || tail.starts_with(b".zdebug_"))
    };
    // DWARF that nothing here reads: location lists (a third of an optimised C program's
    // DWARF), call frames, macros, name indexes.
    let is_unused_dwarf = |buf: &[u8], name: u32| -> bool {
        let Some(tail) = section_name(buf, names, name) else {
            return false;
        };
        let tail = tail
            .strip_prefix(b".z")
            .or(tail.strip_prefix(b"."))
            .unwrap_or(tail);
        let name = tail.split(|&b| b == 0).next().unwrap_or_default();
        [
            &b"debug_loc"[..],
            b"debug_loclists",
            b"debug_frame",
            b"debug_macro",
            b"debug_macinfo",
            b"debug_pubnames",
            b"debug_pubtypes",
            b"debug_gnu_pubnames",
            b"debug_gnu_pubtypes",
            b"debug_names",
        ]
        .contains(&name)
    };
    for (i, &(name, kind, flags, offset, size)) in sections.iter().enumerate() {
        if i == shstrndx || kind == SHT_NOBITS || flags & u64::from(SHF_EXECINSTR) != 0 {
            continue;
        }
        if is_unused_dwarf(buf, name) {
            continue;
        }
        if !dwarf && is_dwarf(buf, name) {
            // The header of a compressed one says how large it is (`has_dwarf`).
            if flags & u64::from(SHF_COMPRESSED) != 0 {
                read(buf, offset, size.min(64))?;
            }
            continue;
        }
        read(buf, offset, size)?;
    }
    Some(())
}

/// Opens a module without blocking on a FIFO or a device, and refuses one too large to read
/// into memory: the file and its length.
fn open_regular_file(path: &Path) -> Result<(std::fs::File, u64), String> {
    let f = OpenOptions::new()
        .read(true)
        // A path in a hostile trace may name a FIFO: opening one for reading would block.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if meta.len() > MAX_MODULE_LEN {
        return Err(format!(
            "{}: {} bytes is larger than the {} bytes this tool reads",
            path.display(),
            meta.len(),
            MAX_MODULE_LEN
        ));
    }
    Ok((f, meta.len()))
}

/// The separate debug file of the build `build_id` in `dirs`, read as `read_module` reads.
fn find_debug_file(build_id: &[u8], dirs: &[PathBuf], dwarf: bool) -> Option<(PathBuf, Vec<u8>)> {
    if build_id.len() < 2 {
        return None;
    }
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    dirs.iter().find_map(|dir| {
        let p = dir
            .join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]));
        read_module(&p, dwarf).ok().map(|d| (p, d))
    })
}

/// How module offsets map to the addresses the file's DWARF and symbols use.
///
/// A position-independent module (`ET_DYN`: shared objects and PIE executables) is recorded
/// relative to its load bias (the `dl_iterate_phdr` base, the gABI's "base address"), so the
/// offset is the file's virtual address. A non-PIE executable (`ET_EXEC`) is never relocated:
/// its run-time address, `base + offset`, is the file's virtual address, whether the recorder
/// stored the bias (0) or the start of the first mapping as its base.
struct AddressMap {
    fixed: bool,
    base: u64,
    /// `PT_LOAD` ranges: (virtual address, size in memory).
    loads: Vec<(u64, u64)>,
}

impl AddressMap {
    fn new(obj: &object::File<'_>, info: &ModuleInfo) -> Self {
        Self {
            fixed: obj.kind() == ObjectKind::Executable,
            base: info.base,
            loads: obj.segments().map(|s| (s.address(), s.size())).collect(),
        }
    }

    fn vaddr(&self, offset: u64) -> Option<u64> {
        if self.fixed {
            self.base.checked_add(offset)
        } else {
            Some(offset)
        }
    }

    /// The module offset of the file address `v` (the inverse of `vaddr`).
    fn offset_of(&self, v: u64) -> Option<u64> {
        if self.fixed {
            v.checked_sub(self.base)
        } else {
            Some(v)
        }
    }

    /// True when `v` is inside a loaded segment: anything else is a bogus offset.
    fn contains(&self, v: u64) -> bool {
        self.loads.is_empty() || self.loads.iter().any(|&(a, n)| v >= a && v - a < n.max(1))
    }
}

/// Uncompressed sections larger than this, or more than `MAX_RATIO` times their compressed
/// size, are not decompressed: a hostile module must not make us allocate gigabytes.
const MAX_SECTION_LEN: u64 = 1 << 30;
const MAX_RATIO: u64 = 256;

/// A section's data, decompressed if needed (`SHF_COMPRESSED`, `.zdebug_*`); `None` when absent,
/// empty, damaged or implausibly large.
fn section_data<'a>(obj: &object::File<'a>, name: &str) -> Option<Cow<'a, [u8]>> {
    let s = obj.section_by_name(name)?;
    let range = s.compressed_file_range().ok()?;
    if range.format != CompressionFormat::None
        && (range.uncompressed_size > MAX_SECTION_LEN
            || range.uncompressed_size
                > range.compressed_size.saturating_mul(MAX_RATIO) + (1 << 20))
    {
        return None;
    }
    s.uncompressed_data().ok().filter(|d| !d.is_empty())
}

fn has_dwarf(obj: &object::File<'_>) -> bool {
    [".debug_info", ".debug_line"].iter().any(|n| {
        obj.section_by_name(n).is_some_and(|s| {
            s.compressed_file_range()
                .is_ok_and(|r| r.uncompressed_size > 0)
        })
    })
}

/// The DWARF sections of `obj`, owned where they had to be decompressed. `dwarf_view` borrows
/// them for addr2line and gimli.
fn load_dwarf_sections<'a>(obj: &object::File<'a>) -> Option<gimli::DwarfSections<Cow<'a, [u8]>>> {
    if !has_dwarf(obj) {
        return None;
    }
    gimli::DwarfSections::load(
        |id: gimli::SectionId| -> Result<Cow<'a, [u8]>, gimli::Error> {
            use gimli::SectionId::{DebugLoc, DebugLocLists, DebugMacinfo, DebugMacro};
            // Not read here (nor by `read_module`).
            if matches!(id, DebugLoc | DebugLocLists | DebugMacinfo | DebugMacro) {
                return Ok(Cow::Borrowed(&[]));
            }
            Ok(section_data(obj, id.name()).unwrap_or(Cow::Borrowed(&[])))
        },
    )
    .ok()
}

fn dwarf_view<'s>(
    sections: &'s gimli::DwarfSections<Cow<'_, [u8]>>,
    little_endian: bool,
) -> Arc<gimli::Dwarf<Reader<'s>>> {
    let endian = if little_endian {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    Arc::new(sections.borrow(|s| gimli::EndianSlice::new(s.as_ref(), endian)))
}

/// What the DWARF says about one static variable.
#[derive(Debug, Default)]
struct VarDecl {
    /// `DW_AT_name`; absent on a definition that points at its declaration (a C++ static
    /// member), in which case the symbol's name is used.
    name: Option<String>,
    /// The function a function-local `static` belongs to.
    scope: Option<String>,
    /// Whether it is a function-local `static`, named or not: clang describes the statics of
    /// a function it inlined everywhere in a subprogram entry with no name.
    in_function: bool,
    file: Option<String>,
    line: u32,
    /// Its type's layout, exported into the module's `LocalTypes`.
    ty: Option<u32>,
}

impl VarDecl {
    /// The variable's name as the user spells it.
    fn name(&self, sym: &Sym<'_>, demangle: bool) -> String {
        if demangle && is_mangled(sym.name) {
            // A C++ name: the demangled symbol carries the namespace and, for a local static,
            // the function (`f()::m`); `DW_AT_name` has neither.
            return display_name(sym.name, demangle);
        }
        match (&self.scope, &self.name) {
            // The symbol of a function-local static is `m.0`, `m.1`: the DWARF names the
            // variable and its function, as gdb spells it (`f::m`), so that the statics of
            // two functions stay distinct and readable.
            (Some(f), Some(n)) => format!("{f}::{n}"),
            // Without the function's name in the DWARF, clang's symbol still has it
            // (`bump.calls`); GCC's (`calls.0`) does not.
            (None, Some(n)) if self.in_function => sym
                .name
                .strip_suffix(n.as_str())
                .and_then(|f| f.strip_suffix('.'))
                .filter(|f| is_identifier(f))
                .map_or_else(|| n.clone(), |f| format!("{f}::{n}")),
            (None, Some(n)) => n.clone(),
            (_, None) => display_name(sym.name, demangle),
        }
    }
}

fn is_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Walks at most this many DWARF entries per type lookup: a malformed (cyclic) type chain
/// must end.
const MAX_TYPE_STEPS: usize = 64;
/// Nesting exported into a layout: deeper parts are left as scalars (their bytes are then
/// named by the enclosing element and an offset).
const MAX_LAYOUT_DEPTH: usize = 24;
/// Layouts exported per module, and members kept per record: what a malformed or enormous
/// debug information may cost the trace.
const MAX_TYPES: usize = 1 << 16;
const MAX_MEMBERS: usize = 4096;

/// The static variables starting at `wanted`: their names and declarations, and their types'
/// layouts exported into `types`, from `DW_TAG_variable` entries whose location is the plain
/// address (`DW_OP_addr`, or `DW_OP_addrx`).
fn variable_decls(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    wanted: &BTreeSet<u64>,
    types: &mut LocalTypes,
) -> HashMap<u64, VarDecl> {
    let mut out = HashMap::new();
    let mut units = dwarf.units();
    // A malformed unit ends the walk (or skips the unit); what was found is kept.
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        // Entries are read raw, their attributes skipped, but for the variables' locations:
        // only a variable asked for is read in full.
        let Ok(mut entries) = unit.entries_raw(None) else {
            continue;
        };
        // The enclosing subprograms of the current entry: (depth, offset).
        let mut functions: Vec<(isize, TypeOffset)> = Vec::new();
        while !entries.is_empty() {
            let depth = entries.next_depth();
            let offset = entries.next_offset();
            let abbrev = match entries.read_abbreviation() {
                Ok(Some(a)) => a,
                Ok(None) => continue,
                Err(_) => break,
            };
            while functions.last().is_some_and(|&(d, _)| d >= depth) {
                functions.pop();
            }
            let mut location = None;
            if abbrev.tag() == gimli::DW_TAG_variable {
                let mut ok = true;
                for spec in abbrev.attributes() {
                    match entries.read_attribute(*spec) {
                        Ok(a) if a.name() == gimli::DW_AT_location && location.is_none() => {
                            location = Some(a.value());
                        }
                        Ok(_) => {}
                        Err(_) => {
                            ok = false;
                            break;
                        }
                    }
                }
                if !ok {
                    break;
                }
            } else {
                if entries.skip_attributes(abbrev.attributes()).is_err() {
                    break;
                }
                if abbrev.tag() == gimli::DW_TAG_subprogram {
                    functions.push((depth, offset));
                }
                continue;
            }
            let Some(gimli::AttributeValue::Exprloc(expr)) = location else {
                continue;
            };
            let mut ops = expr.operations(unit.encoding());
            // DWARF 5 producers (clang) give the address as an index into `.debug_addr`.
            let address = match ops.next() {
                Ok(Some(gimli::Operation::Address { address })) => address,
                Ok(Some(gimli::Operation::AddressIndex { index })) => {
                    match dwarf.address(&unit, index) {
                        Ok(a) => a,
                        Err(_) => continue,
                    }
                }
                _ => continue,
            };
            if !matches!(ops.next(), Ok(None))
                || out.contains_key(&address)
                || !wanted.contains(&address)
            {
                continue;
            }
            let Ok(e) = unit.entry(offset) else {
                continue;
            };
            let e = &e;
            // A definition that points at its declaration (C++ static members, namespace
            // variables declared `extern` first) may carry only the location.
            let spec = match e.attr_value(gimli::DW_AT_specification).ok().flatten() {
                Some(gimli::AttributeValue::UnitRef(o)) => unit.entry(o).ok(),
                _ => None,
            };
            let either = |at| {
                e.attr_value(at)
                    .ok()
                    .flatten()
                    .or_else(|| spec.as_ref()?.attr_value(at).ok().flatten())
            };
            let line = either(gimli::DW_AT_decl_line)
                .and_then(|v| v.udata_value())
                .and_then(|l| u32::try_from(l).ok())
                .unwrap_or(0);
            let file = match either(gimli::DW_AT_decl_file) {
                Some(gimli::AttributeValue::FileIndex(i)) => file_name(dwarf, &unit, i),
                Some(v) => v.udata_value().and_then(|i| file_name(dwarf, &unit, i)),
                None => None,
            };
            let ty = type_ref(e)
                .or_else(|| type_ref(spec.as_ref()?))
                .and_then(|t| types.export(dwarf, &unit, t, 0));
            let name = attr_string(dwarf, &unit, e, gimli::DW_AT_name)
                .or_else(|| attr_string(dwarf, &unit, spec.as_ref()?, gimli::DW_AT_name));
            out.insert(
                address,
                VarDecl {
                    name,
                    scope: functions.last().and_then(|&(_, f)| {
                        let f = unit.entry(f).ok()?;
                        attr_string(dwarf, &unit, &f, gimli::DW_AT_name)
                    }),
                    in_function: !functions.is_empty(),
                    file,
                    line,
                    ty,
                },
            );
            if out.len() == wanted.len() {
                return out;
            }
        }
    }
    out
}

type Entry<'a, 'u, 'r> = gimli::DebuggingInformationEntry<'a, 'u, Reader<'r>>;
type TypeOffset = gimli::UnitOffset<usize>;

fn attr_string(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    e: &Entry<'_, '_, '_>,
    at: gimli::DwAt,
) -> Option<String> {
    let v = e.attr_value(at).ok().flatten()?;
    let s = dwarf.attr_string(unit, v).ok()?;
    Some(s.to_string_lossy().into_owned())
}

/// `DW_AT_type` of an entry, when it refers into the same unit (what C compilers emit).
fn type_ref(e: &Entry<'_, '_, '_>) -> Option<TypeOffset> {
    match e.attr_value(gimli::DW_AT_type).ok().flatten()? {
        gimli::AttributeValue::UnitRef(o) => Some(o),
        _ => None,
    }
}

fn udata(e: &Entry<'_, '_, '_>, at: gimli::DwAt) -> Option<u64> {
    e.attr_value(at).ok().flatten()?.udata_value()
}

/// The type behind typedefs and qualifiers (`const`, `volatile`, `_Atomic`, `restrict`).
fn strip_type(unit: &gimli::Unit<Reader<'_>>, mut ty: TypeOffset) -> Option<TypeOffset> {
    for _ in 0..MAX_TYPE_STEPS {
        let e = unit.entry(ty).ok()?;
        match e.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_atomic_type
            | gimli::DW_TAG_restrict_type => ty = type_ref(&e)?,
            _ => return Some(ty),
        }
    }
    None
}

/// An array's element type and dimensions (element counts, outermost first; the first may be
/// unknown, as in `extern T x[]`).
fn array_shape(
    unit: &gimli::Unit<Reader<'_>>,
    ty: TypeOffset,
) -> Option<(TypeOffset, Vec<Option<u64>>)> {
    let e = unit.entry(ty).ok()?;
    let elem = type_ref(&e)?;
    let mut tree = unit.entries_tree(Some(ty)).ok()?;
    let root = tree.root().ok()?;
    let mut children = root.children();
    let mut dims = Vec::new();
    while let Ok(Some(c)) = children.next() {
        let c = c.entry();
        if c.tag() != gimli::DW_TAG_subrange_type {
            continue;
        }
        let lower = udata(c, gimli::DW_AT_lower_bound).unwrap_or(0);
        let count = udata(c, gimli::DW_AT_count).or_else(|| {
            udata(c, gimli::DW_AT_upper_bound).and_then(|u| (u + 1).checked_sub(lower))
        });
        dims.push(count);
        if dims.len() > MAX_TYPE_STEPS {
            return None;
        }
    }
    if dims.is_empty() {
        dims.push(None);
    }
    Some((elem, dims))
}

fn type_size(unit: &gimli::Unit<Reader<'_>>, ty: TypeOffset) -> Option<u64> {
    type_size_within(unit, ty, 0)
}

fn type_size_within(unit: &gimli::Unit<Reader<'_>>, ty: TypeOffset, depth: usize) -> Option<u64> {
    if depth > MAX_TYPE_STEPS {
        return None;
    }
    let ty = strip_type(unit, ty)?;
    let e = unit.entry(ty).ok()?;
    if let Some(n) = udata(&e, gimli::DW_AT_byte_size) {
        return Some(n);
    }
    match e.tag() {
        gimli::DW_TAG_array_type => {
            let (elem, dims) = array_shape(unit, ty)?;
            let mut n = type_size_within(unit, elem, depth + 1)?;
            for d in dims {
                n = n.checked_mul(d?)?;
            }
            Some(n)
        }
        // Some producers leave the size of a pointer to the unit's address size.
        gimli::DW_TAG_pointer_type
        | gimli::DW_TAG_reference_type
        | gimli::DW_TAG_rvalue_reference_type => Some(unit.encoding().address_size.into()),
        _ => None,
    }
}

impl LocalTypes {
    fn name_id(&mut self, name: String) -> StringId {
        if let Some(&id) = self.name_ids.get(&name) {
            return id;
        }
        let id = self.names.len() as StringId;
        self.names.push(name.clone());
        self.name_ids.insert(name, id);
        id
    }

    fn push(&mut self, shape: TypeShape) -> u32 {
        let id = self.types.len() as u32;
        self.types.push(DataType { id, shape });
        id
    }

    /// The layout of the type at `ty` (typedefs and qualifiers looked through): arrays and
    /// records become `DataType`s, anything else is a scalar (`None`). Memoised per unit and
    /// type, so a type shared by many variables, or a record that refers to itself, is
    /// exported once.
    fn export(
        &mut self,
        dwarf: &gimli::Dwarf<Reader<'_>>,
        unit: &gimli::Unit<Reader<'_>>,
        ty: TypeOffset,
        depth: usize,
    ) -> Option<u32> {
        let ty = strip_type(unit, ty)?;
        let key = (unit.header.offset(), ty);
        if let Some(&id) = self.memo.get(&key) {
            return id;
        }
        if depth > MAX_LAYOUT_DEPTH || self.types.len() >= MAX_TYPES {
            return None;
        }
        let e = unit.entry(ty).ok()?;
        match e.tag() {
            gimli::DW_TAG_array_type => {
                // Until it is built, a reference back to it (malformed DWARF) is a scalar.
                self.memo.insert(key, None);
                let (elem, dims) = array_shape(unit, ty)?;
                let mut size = type_size(unit, elem)?;
                let mut id = self.export(dwarf, unit, elem, depth + 1);
                // `T x[2][3]` is one DWARF array with two dimensions: an array of 2 arrays of
                // 3, built from the innermost out.
                for count in dims.into_iter().rev() {
                    id = Some(self.push(TypeShape::Array {
                        element: id,
                        element_size: size,
                        count,
                    }));
                    size = count.and_then(|n| size.checked_mul(n)).unwrap_or(0);
                }
                self.memo.insert(key, id);
                id
            }
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type => {
                if e.attr_value(gimli::DW_AT_declaration)
                    .ok()
                    .flatten()
                    .is_some()
                {
                    return None;
                }
                let id = self.push(TypeShape::Record {
                    members: Vec::new(),
                });
                self.memo.insert(key, Some(id));
                let members = self.members(dwarf, unit, ty, depth);
                self.types[id as usize].shape = TypeShape::Record { members };
                Some(id)
            }
            _ => None,
        }
    }

    /// The data members of a record, and its base classes (unnamed members).
    fn members(
        &mut self,
        dwarf: &gimli::Dwarf<Reader<'_>>,
        unit: &gimli::Unit<Reader<'_>>,
        ty: TypeOffset,
        depth: usize,
    ) -> Vec<DataMember> {
        // (name, offset, size, type) read first: the tree borrows the unit while it is walked.
        let mut found = Vec::new();
        let Ok(mut tree) = unit.entries_tree(Some(ty)) else {
            return Vec::new();
        };
        let Ok(root) = tree.root() else {
            return Vec::new();
        };
        let mut children = root.children();
        while let Ok(Some(c)) = children.next() {
            let c = c.entry();
            let named = match c.tag() {
                gimli::DW_TAG_member => true,
                gimli::DW_TAG_inheritance => false,
                _ => continue,
            };
            // A C++ static data member is a declaration, stored elsewhere.
            if c.attr_value(gimli::DW_AT_declaration)
                .ok()
                .flatten()
                .is_some()
            {
                continue;
            }
            let Some(mty) = type_ref(c) else { continue };
            let bits = udata(c, gimli::DW_AT_bit_size);
            // A constant offset (DWARF 3+); union members have none and start at 0; a
            // DWARF 4+ bit-field gives its first bit instead.
            let (offset, size) = match (
                c.attr_value(gimli::DW_AT_data_member_location),
                udata(c, gimli::DW_AT_data_bit_offset),
                bits,
            ) {
                (Ok(None), Some(first), Some(n)) => {
                    (first / 8, (first % 8).saturating_add(n).div_ceil(8))
                }
                (Ok(None), _, _) => (0, type_size(unit, mty).unwrap_or(0)),
                (Ok(Some(v)), _, _) => match v.udata_value() {
                    Some(o) => (o, type_size(unit, mty).unwrap_or(0)),
                    None => continue,
                },
                (Err(_), _, _) => continue,
            };
            if size == 0 && bits.is_none() {
                // A flexible array member: nothing of the record's own size is in it.
                continue;
            }
            let name = if named {
                attr_string(dwarf, unit, c, gimli::DW_AT_name)
            } else {
                None
            };
            found.push((name, offset, size, mty, bits.is_some()));
            if found.len() >= MAX_MEMBERS {
                break;
            }
        }
        found
            .into_iter()
            .map(|(name, offset, size, mty, bit_field)| DataMember {
                name: name.map(|n| self.name_id(n)),
                offset,
                size,
                // The bytes of a bit-field are the field, whatever type holds it.
                ty: if bit_field {
                    None
                } else {
                    self.export(dwarf, unit, mty, depth + 1)
                },
            })
            .collect()
    }
}

/// The path of file `index` of a unit's line program, joined to its directory and the unit's
/// compilation directory the way addr2line reports code locations.
fn file_name(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    index: u64,
) -> Option<String> {
    let header = unit.line_program.as_ref()?.header();
    let file = header.file(index)?;
    let name = dwarf.attr_string(unit, file.path_name()).ok()?;
    let mut path = PathBuf::from(name.to_string_lossy().as_ref());
    if path.is_relative() {
        let mut dir = PathBuf::new();
        if let Some(comp) = &unit.comp_dir {
            dir.push(comp.to_string_lossy().as_ref());
        }
        if let Some(d) = file
            .directory(header)
            .and_then(|d| dwarf.attr_string(unit, d).ok())
        {
            dir.push(d.to_string_lossy().as_ref());
        }
        path = dir.join(path);
    }
    Some(path.to_string_lossy().into_owned())
}

/// A frame of `code::find_frames` as a location, its function named as `addr2line_frames`
/// names it.
fn located(f: &code::RawFrame<'_>, demangle: bool) -> ResolvedLocation {
    let function = f.name.map(|n| {
        let raw = String::from_utf8_lossy(n.slice());
        if demangle {
            lambda_named(&addr2line::demangle_auto(raw, f.lang))
        } else {
            raw.into_owned()
        }
    });
    ResolvedLocation {
        function,
        file: f.file.clone(),
        line: f.line.unwrap_or(0),
        column: f.column.unwrap_or(0),
    }
}

/// The frames addr2line gives for `probe`, innermost first.
fn addr2line_frames(
    ctx: Option<&addr2line::Context<Reader<'_>>>,
    probe: u64,
    demangle: bool,
) -> Vec<ResolvedLocation> {
    let mut locs = Vec::new();
    if let Some(ctx) = ctx {
        if let Ok(mut frames) = ctx.find_frames(probe).skip_all_loads() {
            // A malformed unit ends the walk with what was found so far.
            while let Ok(Some(f)) = frames.next() {
                let function = f.function.as_ref().and_then(|n| {
                    if demangle {
                        n.demangle().ok().map(|n| lambda_named(&n))
                    } else {
                        n.raw_name().ok().map(Cow::into_owned)
                    }
                });
                let (file, line, column) = match &f.location {
                    Some(l) => (
                        l.file.map(str::to_string),
                        l.line.unwrap_or(0),
                        l.column.unwrap_or(0),
                    ),
                    None => (None, 0, 0),
                };
                locs.push(ResolvedLocation {
                    function,
                    file,
                    line,
                    column,
                });
                if locs.len() >= MAX_INLINE_DEPTH {
                    break;
                }
            }
        }
    }
    locs
}

/// Completes the DWARF frames of `probe` (innermost first) from the symbol table: a lambda's
/// name, and the function when DWARF does not name it.
fn name_code(
    mut locs: Vec<ResolvedLocation>,
    symbols: &SymbolTable<'_>,
    probe: u64,
    demangle: bool,
) -> Vec<ResolvedLocation> {
    locs.truncate(MAX_INLINE_DEPTH);
    // GCC describes a lambda's call operator by its bare name, with no linkage name: the
    // outermost frame is the function the code belongs to, which the symbol table names in
    // full (`main::{lambda()#1}::operator()() const`, read `lambda in main`); an inlined one
    // is a lambda whose enclosing function the frame does not say.
    let outermost = locs.len().saturating_sub(1);
    for (i, l) in locs.iter_mut().enumerate() {
        if demangle && l.function.as_deref() == Some("operator()") {
            l.function = Some(if i == outermost {
                symbols
                    .code_at(probe, demangle)
                    .filter(|n| n.starts_with("lambda"))
                    .unwrap_or_else(|| "lambda".to_string())
            } else {
                "lambda".to_string()
            });
        }
    }
    // Without DWARF for the function, the symbol table still names it (the outermost frame
    // is the function the code belongs to).
    match locs.last_mut() {
        Some(last) if last.function.is_none() => last.function = symbols.code_at(probe, demangle),
        Some(_) => {}
        None => {
            if let Some(name) = symbols.code_at(probe, demangle) {
                locs.push(ResolvedLocation {
                    function: Some(name),
                    file: None,
                    line: 0,
                    column: 0,
                });
            }
        }
    }
    locs
}

struct Sym<'a> {
    start: u64,
    end: u64,
    name: &'a str,
    /// Lower is preferred among aliases at the same address: global before local, then fewer
    /// leading underscores (`pthread_mutex_lock` before `__pthread_mutex_lock`).
    rank: (bool, usize),
}

/// The sized function and object symbols of a module (`.symtab` and `.dynsym`).
struct SymbolTable<'a> {
    code: Vec<Sym<'a>>,
    data: Vec<Sym<'a>>,
}

impl<'a> SymbolTable<'a> {
    fn new<'o>(objs: impl Iterator<Item = &'o object::File<'a>>) -> Self
    where
        'a: 'o,
    {
        let mut code = Vec::new();
        let mut data = Vec::new();
        for obj in objs {
            for s in obj.symbols().chain(obj.dynamic_symbols()) {
                if !s.is_definition() || s.size() == 0 {
                    continue;
                }
                let Ok(name) = s.name() else { continue };
                if name.is_empty() {
                    continue;
                }
                let sym = Sym {
                    start: s.address(),
                    end: s.address().saturating_add(s.size()),
                    name,
                    rank: (
                        !s.is_global(),
                        name.len() - name.trim_start_matches('_').len(),
                    ),
                };
                match s.kind() {
                    SymbolKind::Text => code.push(sym),
                    // A thread-local symbol's value is an offset into each thread's block,
                    // not an address of the image.
                    SymbolKind::Data => data.push(sym),
                    _ => {}
                }
            }
        }
        for list in [&mut code, &mut data] {
            list.sort_by(|a, b| (a.start, a.rank, a.name).cmp(&(b.start, b.rank, b.name)));
        }
        Self { code, data }
    }

    /// The preferred symbol that contains `addr`.
    fn find<'s>(list: &'s [Sym<'a>], addr: u64) -> Option<&'s Sym<'a>> {
        let upto = list.partition_point(|s| s.start <= addr);
        let candidates = &list[..upto];
        // Symbols nest rarely; look back a little past those that end before `addr`.
        let mut best: Option<&Sym<'a>> = None;
        for s in candidates.iter().rev().take(64) {
            if addr < s.end {
                match best {
                    // The innermost (latest start) wins, then the preferred alias.
                    Some(b) if b.start > s.start => {}
                    Some(b) if b.start == s.start && b.rank <= s.rank => {}
                    _ => best = Some(s),
                }
            }
        }
        best
    }

    fn code_at(&self, addr: u64, demangle: bool) -> Option<String> {
        Self::find(&self.code, addr).map(|s| {
            let name = display_name(s.name, demangle);
            if demangle {
                lambda_named(&name)
            } else {
                name
            }
        })
    }

    /// The variable containing `addr`.
    fn data_sym(&self, addr: u64) -> Option<&Sym<'a>> {
        Self::find(&self.data, addr)
    }

    /// Whether the variable [`SymbolTable::variables_touched`] chooses for each of `addrs`
    /// is the same whatever else was touched. The choice keeps, in symbol order, each symbol
    /// that holds touched data and does not start inside the one kept before it; so the first
    /// symbol (in that order) that contains an address is chosen for it whenever no symbol
    /// before it ends past its start, and then no other symbol can be; without a symbol that
    /// contains it an address is named by none. Otherwise (symbols that overlap without one
    /// holding the other, or aliases of different sizes) what was touched around it decides.
    fn settled(&self, mut addrs: impl Iterator<Item = u64>) -> bool {
        // `ends[i]`: the furthest end of the symbols up to `i`.
        let mut ends = Vec::with_capacity(self.data.len());
        let mut end = 0u64;
        for s in &self.data {
            end = end.max(s.end);
            ends.push(end);
        }
        addrs.all(|a| {
            let upto = self.data.partition_point(|s| s.start <= a);
            // The first symbol that starts at or before `a` and ends past it.
            let i = ends[..upto].partition_point(|&e| e <= a);
            match self.data.get(i).filter(|_| i < upto) {
                Some(first) => i == 0 || ends[i - 1] <= first.start,
                None => true,
            }
        })
    }

    /// The variables that hold some of `data` (module offsets), in address order: one symbol
    /// per address (the preferred alias), and none inside another one kept.
    fn variables_touched(&self, data: &DataRuns, map: &AddressMap) -> Vec<&Sym<'a>> {
        let runs: Vec<(u64, u64)> = data
            .iter()
            .filter_map(|&(lo, hi)| Some((map.vaddr(lo)?, map.vaddr(hi)?)))
            .collect();
        let mut out: Vec<&Sym<'a>> = Vec::new();
        if runs.is_empty() {
            return out;
        }
        for s in &self.data {
            if out.last().is_some_and(|k| s.start < k.end) {
                continue;
            }
            let i = runs.partition_point(|r| r.1 <= s.start);
            if runs.get(i).is_some_and(|r| r.0 < s.end) {
                out.push(s);
            }
        }
        out
    }
}

/// Whether `raw` carries a mangling prefix: Itanium C++ and legacy Rust (`_Z`, `__Z`), Rust v0
/// (`_R`).
fn is_mangled(raw: &str) -> bool {
    raw.starts_with("_Z") || raw.starts_with("__Z") || raw.starts_with("_R")
}

fn display_name(raw: &str, demangle: bool) -> String {
    // The demanglers also accept a bare *type* encoding, so a C variable or function called
    // `a` came out as `signed char`, `b` as `bool`, `i` as `int`: only names that carry a
    // mangling prefix are handed to them, and a Rust v0 name only to the Rust demangler.
    if !demangle {
        return raw.to_string();
    }
    if raw.starts_with("_Z") || raw.starts_with("__Z") {
        // Itanium C++, and legacy Rust (`_ZN…17h<hash>E`), which `demangle_auto` tries first.
        addr2line::demangle_auto(Cow::Borrowed(raw), None).into_owned()
    } else if raw.starts_with("_R") {
        addr2line::demangle(raw, gimli::DW_LANG_Rust).unwrap_or_else(|| raw.to_string())
    } else {
        raw.to_string()
    }
}

/// A C++ lambda's call operator by the function that encloses it: the demangled
/// `main::{lambda()#1}::operator()() const` reads `lambda in main`, and with the site's line
/// (`lambda in main (prog.cpp:21)`) says which lambda. A lambda inside a lambda is `lambda in
/// lambda in main`; the static invoker a lambda converted to a function pointer calls
/// (`…::{lambda()#1}::_FUN()`) is the lambda too. Any other name, a lambda that is only a
/// template argument (`std::thread::_State_impl<…{lambda()#1}…>::_M_run()`) and the standard
/// library's own lambdas (whose names tell the locking machinery apart) are kept as they are.
fn lambda_named(name: &str) -> String {
    let parts = scope_parts(name);
    let [scope @ .., lambda, call] = parts.as_slice() else {
        return name.to_string();
    };
    let is_call = call.starts_with("operator()") || call.starts_with("_FUN(");
    // GCC's closure types are `{lambda(…)#n}`; clang's, in a function of internal linkage,
    // `$_n`.
    let is_closure = (lambda.starts_with("{lambda(") && lambda.ends_with('}'))
        || lambda
            .strip_prefix("$_")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if !is_call || !is_closure {
        return name.to_string();
    }
    let enclosing = scope.join("::");
    if enclosing.is_empty() {
        return "lambda".to_string();
    }
    if enclosing.starts_with("std::") || enclosing.starts_with("__gnu_cxx::") {
        return name.to_string();
    }
    let named = lambda_named(&enclosing);
    format!("lambda in {}", without_parameters(&named))
}

/// A demangled name cut at its top-level `::` (not inside a parameter list, template
/// arguments or a `{lambda(…)#n}`).
fn scope_parts(name: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    let bytes = name.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'(' | b'<' | b'{' | b'[' => depth += 1,
            b')' | b'>' | b'}' | b']' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                parts.push(&name[start..i]);
                i += 2;
                start = i;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parts.push(&name[start..]);
    parts
}

/// `Shop::run() const` → `Shop::run`; a name without a parameter list is kept.
fn without_parameters(name: &str) -> &str {
    let trimmed = name.trim_end();
    let trimmed = trimmed.strip_suffix(" const").unwrap_or(trimmed);
    if !trimmed.ends_with(')') {
        return name;
    }
    let mut depth = 0usize;
    for (i, c) in trimmed.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return &trimmed[..i];
                }
            }
            _ => {}
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::{display_name, lambda_named, AddressMap, Sym, SymbolTable};

    /// The variable `variables_touched` chooses for `a` among `syms` (sorted as the table
    /// sorts them) when `touched` granules were touched.
    fn chosen<'a>(syms: &SymbolTable<'a>, touched: &[(u64, u64)], a: u64) -> Option<&'a str> {
        let map = AddressMap {
            fixed: false,
            base: 0,
            loads: Vec::new(),
        };
        syms.variables_touched(touched, &map)
            .into_iter()
            .find(|s| s.start <= a && a < s.end)
            .map(|s| s.name)
    }

    /// Whenever `settled` says an address's variable does not depend on what else was
    /// touched, the variable chosen with its granule alone is the one chosen with any more:
    /// random layouts of nested, overlapping and aliased symbols, random touched sets.
    #[test]
    fn a_settled_address_is_named_alike_whatever_else_was_touched() {
        let names: Vec<String> = (0..12).map(|i| format!("v{i}")).collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut settled, mut unsettled) = (0, 0);
        for _ in 0..20_000 {
            let mut data: Vec<Sym<'_>> = (0..1 + next(6))
                .map(|i| {
                    let start = 8 * next(12);
                    Sym {
                        start,
                        end: start + 1 + next(40),
                        name: &names[i as usize],
                        rank: (next(2) == 1, next(2) as usize),
                    }
                })
                .collect();
            data.sort_by(|a, b| (a.start, a.rank, a.name).cmp(&(b.start, b.rank, b.name)));
            let syms = SymbolTable {
                code: Vec::new(),
                data,
            };
            let a = next(140);
            let granule = (a & !7, (a & !7) + 8);
            let mut more: Vec<(u64, u64)> = (0..next(5))
                .map(|_| {
                    let g = 8 * next(18);
                    (g, g + 8)
                })
                .chain([granule])
                .collect();
            more.sort_unstable();
            more.dedup();
            if syms.settled([a].into_iter()) {
                settled += 1;
                assert_eq!(
                    chosen(&syms, &[granule], a),
                    chosen(&syms, &more, a),
                    "{a:#x} in {:?} touched {more:?}",
                    syms.data
                        .iter()
                        .map(|s| (s.name, s.start, s.end))
                        .collect::<Vec<_>>()
                );
            } else {
                unsettled += 1;
            }
        }
        assert!(
            settled > 1000 && unsettled > 1000,
            "{settled} / {unsettled}"
        );
    }

    /// Every `stride`-th address of `path`'s code, looked up by `code::find_frames` and by
    /// addr2line: the frames must be the same, inlined ones included. Returns how many
    /// addresses had frames.
    fn same_frames_as_addr2line(path: &std::path::Path, stride: u64) -> usize {
        use super::{
            addr2line_frames, code, dwarf_view, load_dwarf_sections, located, read_module,
        };
        use object::{Object, ObjectSection, SectionKind};
        let data = read_module(path, true).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let sections = load_dwarf_sections(&obj).expect("the module has DWARF");
        let dwarf = dwarf_view(&sections, obj.is_little_endian());
        let ctx = addr2line::Context::from_arc_dwarf(std::sync::Arc::clone(&dwarf)).unwrap();
        let mut probes: Vec<u64> = obj
            .sections()
            .filter(|s| s.kind() == SectionKind::Text)
            .flat_map(|s| (s.address()..s.address() + s.size()).step_by(stride as usize))
            .collect();
        probes.sort_unstable();
        probes.dedup();
        // All of them, and few (as a trace asks: the line program is then read only as far as
        // they need).
        let few: Vec<u64> = probes[..probes.len() / 50]
            .iter()
            .step_by(7)
            .copied()
            .collect();
        let some: Vec<u64> = probes[..probes.len() / 2]
            .iter()
            .step_by(97)
            .copied()
            .collect();
        let mut resolved = 0;
        for (set, probes) in [("all", &probes), ("few", &few), ("some", &some)] {
            let lookups = code::find_frames(&dwarf, probes).expect("the units parse");
            for (&probe, lookup) in probes.iter().zip(&lookups) {
                let code::Lookup::Frames(frames) = lookup else {
                    panic!("{}: {probe:#x}: not parsed", path.display());
                };
                for demangle in [true, false] {
                    let ours: Vec<_> = frames.iter().map(|f| located(f, demangle)).collect();
                    let theirs = addr2line_frames(Some(&ctx), probe, demangle);
                    assert_eq!(ours, theirs, "{}: {probe:#x} ({set})", path.display());
                }
                resolved += usize::from(set == "all" && !frames.is_empty());
            }
        }
        resolved
    }

    #[test]
    fn code_frames_are_addr2line_ones() {
        // This test program: Rust, many units, deep inlining.
        let exe = std::env::current_exe().unwrap();
        assert!(same_frames_as_addr2line(&exe, 61) > 1000);
        // More modules to compare, such as a C program built as one unit:
        // FORESIGHT_COMPARE_FRAMES=/path/a:/path/b.
        if let Some(list) = std::env::var_os("FORESIGHT_COMPARE_FRAMES") {
            for path in std::env::split_paths(&list) {
                let n = same_frames_as_addr2line(&path, 3);
                eprintln!(
                    "{}: {n} addresses with frames, as addr2line",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn lambdas_are_named_by_their_enclosing_function() {
        let cases = [
            ("main::{lambda()#1}::operator()() const", "lambda in main"),
            (
                "worker(int)::{lambda(int)#2}::operator()(int) const",
                "lambda in worker",
            ),
            (
                "Shop::run() const::{lambda()#1}::operator()() const",
                "lambda in Shop::run",
            ),
            (
                "main::{lambda()#1}::operator()() const::{lambda()#1}::operator()() const",
                "lambda in lambda in main",
            ),
            (
                "main::{lambda(auto:1)#1}::operator()<int>(int) const",
                "lambda in main",
            ),
            ("main::{lambda(void*)#1}::_FUN(void*)", "lambda in main"),
            ("{lambda()#1}::operator()() const", "lambda"),
            ("main::$_0::operator()() const", "lambda in main"),
            (
                "Shop::run()::$_12::operator()(int) const",
                "lambda in Shop::run",
            ),
        ];
        for (demangled, named) in cases {
            assert_eq!(lambda_named(demangled), named, "{demangled}");
        }
        for kept in [
            "main",
            "operator()",
            "Functor::operator()() const",
            "std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#1}> > >::_M_run()",
            "std::call_once<f()::{lambda()#1}>(std::once_flag&, f()::{lambda()#1}&&)::{lambda()#1}::operator()() const",
            "main::{lambda()#1}::operator()() const::counter",
            "a::{{closure}}",
            "main::$_x::operator()() const",
        ] {
            assert_eq!(lambda_named(kept), kept);
        }
        // What the demangler makes of a lambda's mangled name.
        assert_eq!(
            lambda_named(&display_name("_ZZ4mainENKUlvE_clEv", true)),
            "lambda in main"
        );
    }

    #[test]
    fn plain_c_names_are_not_demangled_as_types() {
        for name in [
            "a",
            "b",
            "i",
            "c",
            "lock",
            "Ss",
            "St",
            "_start",
            "_Restrict",
        ] {
            assert_eq!(display_name(name, true), name);
        }
    }

    #[test]
    fn mangled_names_are_demangled() {
        assert_eq!(display_name("_ZN3foo3barEv", true), "foo::bar()");
        assert_eq!(display_name("_ZN3foo3barEv", false), "_ZN3foo3barEv");
        assert_eq!(display_name("_RNvC7mycrate4main", true), "mycrate::main");
    }
}
