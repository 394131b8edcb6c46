//! Resolving the frames of one module: read the ELF file, check it is the recorded build, map
//! module offsets to the addresses of the file, and look them up in DWARF (code) or the symbol
//! table (code without debug information, and static data).
//!
//! A module file is as untrusted as the trace: it is read only if it is a regular file of
//! bounded size, and every parse error costs only that module or that frame.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use addr2line::gimli;
use foresight_trace::tables::{Frame, ModuleInfo};
use object::{
    CompressionFormat, Object, ObjectKind, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind,
};

use crate::{SkipReason, SymbolizeOptions, Use};

/// Module files larger than this are not read (they are read into memory, not mapped).
const MAX_MODULE_LEN: u64 = 4 << 30;
/// Inlined frames kept for one address; more means a malformed file.
const MAX_INLINE_DEPTH: usize = 64;

/// One source location, before its strings are interned into the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResolvedLocation {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: u32,
    pub column: u32,
}

pub(crate) struct ModuleOutcome {
    /// Every frame asked for; an empty list when nothing was found.
    pub resolved: Vec<(Frame, Vec<ResolvedLocation>)>,
    pub notes: Vec<String>,
}

type Reader<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

pub(crate) fn resolve(
    path: &Path,
    info: &ModuleInfo,
    frames: &[(Frame, Use)],
    opts: &SymbolizeOptions,
) -> Result<ModuleOutcome, SkipReason> {
    let data = read_regular_file(path).map_err(SkipReason::Unreadable)?;
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
        if let Some((p, d)) = find_debug_file(build_id, &opts.debug_dirs) {
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
    let sections = load_dwarf_sections(dwarf_obj);
    let dwarf = sections
        .as_ref()
        .map(|s| dwarf_view(s, dwarf_obj.is_little_endian()));
    let ctx = dwarf
        .as_ref()
        .and_then(|d| addr2line::Context::from_arc_dwarf(Arc::clone(d)).ok());
    let symbols = SymbolTable::new(std::iter::once(&obj).chain(extra_symbols));

    // Declarations of the static variables asked for (start addresses of their symbols).
    let data_starts: BTreeSet<u64> = frames
        .iter()
        .filter(|(_, u)| *u == Use::Data)
        .filter_map(|(f, _)| map.vaddr(f.offset))
        .filter_map(|v| symbols.data_sym(v).map(|s| s.start))
        .collect();
    let decls = match &dwarf {
        Some(d) if !data_starts.is_empty() => variable_decls(d, &data_starts),
        _ => HashMap::new(),
    };

    let mut resolved = Vec::with_capacity(frames.len());
    for &(frame, usage) in frames {
        let locs = match usage {
            Use::Code => map
                .vaddr(frame.offset)
                // A return address points after the call: look up the call itself.
                .and_then(|v| v.checked_sub(1))
                .filter(|&v| map.contains(v))
                .map(|probe| resolve_code(ctx.as_ref(), &symbols, probe, opts.demangle))
                .unwrap_or_default(),
            Use::Data => map
                .vaddr(frame.offset)
                .filter(|&v| map.contains(v))
                .and_then(|v| {
                    let sym = symbols.data_sym(v)?;
                    let (file, line) = decls.get(&sym.start).cloned().unwrap_or((None, 0));
                    Some(vec![ResolvedLocation {
                        function: Some(symbols.data_name(sym, v, opts.demangle)),
                        file,
                        line,
                        column: 0,
                    }])
                })
                .unwrap_or_default(),
        };
        resolved.push((frame, locs));
    }
    Ok(ModuleOutcome { resolved, notes })
}

/// Reads a module without blocking on a FIFO or a device and without unbounded allocation.
fn read_regular_file(path: &Path) -> Result<Vec<u8>, String> {
    let mut f = OpenOptions::new()
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
    let mut buf = Vec::with_capacity(meta.len() as usize);
    (&mut f)
        .take(MAX_MODULE_LEN)
        .read_to_end(&mut buf)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(buf)
}

fn find_debug_file(build_id: &[u8], dirs: &[PathBuf]) -> Option<(PathBuf, Vec<u8>)> {
    if build_id.len() < 2 {
        return None;
    }
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    dirs.iter().find_map(|dir| {
        let p = dir
            .join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]));
        read_regular_file(&p).ok().map(|d| (p, d))
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
    gimli::DwarfSections::load(|id: gimli::SectionId| -> Result<_, gimli::Error> {
        Ok(section_data(obj, id.name()).unwrap_or(Cow::Borrowed(&[])))
    })
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

/// Where the static variables starting at `wanted` are declared: (file, line), from
/// `DW_TAG_variable` entries whose location is the plain address (`DW_OP_addr`).
fn variable_decls(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    wanted: &BTreeSet<u64>,
) -> HashMap<u64, (Option<String>, u32)> {
    let mut out = HashMap::new();
    let mut units = dwarf.units();
    // A malformed unit ends the walk (or skips the unit); what was found is kept.
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut entries = unit.entries();
        while let Ok(Some((_, e))) = entries.next_dfs() {
            if e.tag() != gimli::DW_TAG_variable {
                continue;
            }
            let Ok(Some(gimli::AttributeValue::Exprloc(expr))) =
                e.attr_value(gimli::DW_AT_location)
            else {
                continue;
            };
            let mut ops = expr.operations(unit.encoding());
            let Ok(Some(gimli::Operation::Address { address })) = ops.next() else {
                continue;
            };
            if !matches!(ops.next(), Ok(None)) || !wanted.contains(&address) {
                continue;
            }
            let line = e
                .attr_value(gimli::DW_AT_decl_line)
                .ok()
                .flatten()
                .and_then(|v| v.udata_value())
                .and_then(|l| u32::try_from(l).ok())
                .unwrap_or(0);
            let file = match e.attr_value(gimli::DW_AT_decl_file).ok().flatten() {
                Some(gimli::AttributeValue::FileIndex(i)) => file_name(dwarf, &unit, i),
                Some(v) => v.udata_value().and_then(|i| file_name(dwarf, &unit, i)),
                None => None,
            };
            out.entry(address).or_insert((file, line));
            if out.len() == wanted.len() {
                return out;
            }
        }
    }
    out
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

fn resolve_code(
    ctx: Option<&addr2line::Context<Reader<'_>>>,
    symbols: &SymbolTable<'_>,
    probe: u64,
    demangle: bool,
) -> Vec<ResolvedLocation> {
    let mut locs = Vec::new();
    if let Some(ctx) = ctx {
        if let Ok(mut frames) = ctx.find_frames(probe).skip_all_loads() {
            // A malformed unit ends the walk with what was found so far.
            while let Ok(Some(f)) = frames.next() {
                let function = f.function.as_ref().and_then(|n| {
                    let name = if demangle { n.demangle() } else { n.raw_name() };
                    name.ok().map(Cow::into_owned)
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
                    SymbolKind::Data | SymbolKind::Tls => data.push(sym),
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
        Self::find(&self.code, addr).map(|s| display_name(s.name, demangle))
    }

    /// The variable containing `addr`.
    fn data_sym(&self, addr: u64) -> Option<&Sym<'a>> {
        Self::find(&self.data, addr)
    }

    /// The variable's name; `name+0x10` for an address inside it (a lock that is a field of a
    /// static struct, or an element of a static array).
    fn data_name(&self, s: &Sym<'a>, addr: u64, demangle: bool) -> String {
        let name = display_name(s.name, demangle);
        match addr - s.start {
            0 => name,
            d => format!("{name}+{d:#x}"),
        }
    }
}

fn display_name(raw: &str, demangle: bool) -> String {
    if demangle {
        addr2line::demangle_auto(Cow::Borrowed(raw), None).into_owned()
    } else {
        raw.to_string()
    }
}
