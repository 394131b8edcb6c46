//! `foresight coverage`: which locking call sites of a program's machine code the recorded runs
//! executed, and which none did. A predicted deadlock can only hide in code a run drove, so a
//! lock site no trace reached is where the tests should go next.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use addr2line::gimli;
use anyhow::{bail, Context as _};
use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind};
use object::read::elf::{ElfFile64, SectionHeader as _};
use object::{Object, ObjectKind, ObjectSection, ObjectSymbol, SectionKind};
use serde::Serialize;

use super::output::ignore_broken_pipe;
use super::run_files::expand;

#[derive(clap::Args)]
#[command(after_long_help = "\
Every call of a lock, trylock, timed lock, rwlock lock, spin lock, condition wait, barrier wait, \
semaphore wait or join in the machine code (x86-64: calls through the PLT, `call *GOT(%rip)` \
and direct calls) is a locking site; a trace executed it when one of its sites returns to the \
instruction after the call. By default the modules the traces name are scanned, except the \
system's libraries (under /lib, /usr/lib) and foresight's runtime; --binary names them instead. \
Tail calls (`jmp` to a lock function) are not counted: their return address is their caller's.")]
pub struct Args {
    /// The trace files, runs or packs.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Scan these executables or shared objects instead of the modules the traces name.
    #[arg(long = "binary", value_name = "PATH")]
    binaries: Vec<PathBuf>,
    /// Read only the traces named, not the rest of their run.
    #[arg(long)]
    root_only: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Json,
}

/// The functions whose call sites are locking sites: each can block on, or try for, another
/// thread's synchronisation.
const LOCKING_FUNCTIONS: &[&str] = &[
    "pthread_mutex_lock",
    "pthread_mutex_trylock",
    "pthread_mutex_timedlock",
    "pthread_mutex_clocklock",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "pthread_rwlock_tryrdlock",
    "pthread_rwlock_trywrlock",
    "pthread_rwlock_timedrdlock",
    "pthread_rwlock_timedwrlock",
    "pthread_rwlock_clockrdlock",
    "pthread_rwlock_clockwrlock",
    "pthread_spin_lock",
    "pthread_spin_trylock",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_cond_clockwait",
    "pthread_barrier_wait",
    "sem_wait",
    "sem_trywait",
    "sem_timedwait",
    "sem_clockwait",
    "pthread_join",
    "pthread_tryjoin_np",
    "pthread_timedjoin_np",
    "pthread_clockjoin_np",
];

/// A symbol's name without its version (`pthread_cond_wait@GLIBC_2.3.2`), when it is a locking
/// function.
fn locking_name(raw: &[u8]) -> Option<&'static str> {
    let base = raw.split(|&b| b == b'@').next().unwrap_or(raw);
    LOCKING_FUNCTIONS
        .iter()
        .copied()
        .find(|n| n.as_bytes() == base)
}

/// One call of a locking function found in a module's code.
#[derive(Clone, Debug, Serialize)]
struct LockingSite {
    module: String,
    /// The function the call is in (the innermost inlined one), when known.
    function: Option<String>,
    file: Option<String>,
    line: Option<u32>,
    /// The locking function called.
    call: &'static str,
    /// The call instruction's address in the file (hexadecimal).
    address: String,
    #[serde(skip)]
    return_address: u64,
}

#[derive(Serialize)]
struct Report {
    schema: &'static str,
    modules: Vec<String>,
    sites: usize,
    executed_count: usize,
    executed: Vec<LockingSite>,
    never_executed: Vec<LockingSite>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let inputs = expand(&args.traces, args.root_only)?;
    // The offsets the sites of each module of each trace returned to, with its path, build id
    // and load address.
    let mut executed: Vec<(String, Vec<u8>, u64, HashSet<u64>)> = Vec::new();
    let mut named: BTreeMap<String, ()> = BTreeMap::new();
    for input in &inputs {
        let stream = input
            .open_stream()
            .with_context(|| format!("reading trace {}", input.name))?;
        let tables = stream.tables();
        let mut by_module: HashMap<u32, HashSet<u64>> = HashMap::new();
        for site in tables.sites.values() {
            for f in site.frames.iter().chain(site.first_caller.iter()) {
                by_module.entry(f.module).or_default().insert(f.offset);
            }
        }
        for m in tables.modules.values() {
            let Some(path) = tables.string(m.path).filter(|p| !p.is_empty()) else {
                continue;
            };
            named.insert(path.to_string(), ());
            let offsets = by_module.remove(&m.id).unwrap_or_default();
            executed.push((path.to_string(), m.build_id.clone(), m.base, offsets));
        }
    }
    let binaries: Vec<PathBuf> = if args.binaries.is_empty() {
        named
            .keys()
            .filter(|p| is_program_module(p))
            .map(PathBuf::from)
            .collect()
    } else {
        for b in &args.binaries {
            if !b.is_file() {
                bail!("binary {}: no such file", b.display());
            }
        }
        args.binaries.clone()
    };
    let mut done = Vec::new();
    let mut not_run = Vec::new();
    let mut modules = Vec::new();
    for path in &binaries {
        let data = match read_module(path) {
            Ok(d) => d,
            Err(e) if args.binaries.is_empty() => {
                say!(
                    "foresight coverage: skipping {} (named by the trace): {e}",
                    path.display()
                );
                continue;
            }
            Err(e) => bail!("binary {}: {e}", path.display()),
        };
        let scan = match scan_module(path, &data) {
            Ok(s) => s,
            Err(e) if args.binaries.is_empty() => {
                say!("foresight coverage: skipping a module the trace names: {e:#}");
                continue;
            }
            Err(e) => return Err(e),
        };
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        let mut returns: HashSet<u64> = HashSet::new();
        for (mpath, build_id, base, offsets) in &executed {
            let same = if !scan.build_id.is_empty() && !build_id.is_empty() {
                *build_id == scan.build_id
            } else {
                std::fs::canonicalize(mpath).unwrap_or_else(|_| PathBuf::from(mpath)) == canonical
            };
            if same {
                // A fixed-address executable's file addresses are its load address plus the
                // offset; a position-independent module's are the offsets (`symbols`' reading).
                returns.extend(offsets.iter().map(|&o| {
                    if scan.fixed {
                        o.wrapping_add(*base)
                    } else {
                        o
                    }
                }));
            }
        }
        modules.push(path.display().to_string());
        for site in scan.sites {
            if returns.contains(&site.return_address) {
                done.push(site);
            } else {
                not_run.push(site);
            }
        }
    }
    if modules.is_empty() {
        say!(
            "foresight coverage: no module scanned (the traces name only system libraries, or \
             their files are gone): name the program with --binary"
        );
    }
    let report = Report {
        schema: "foresight-coverage",
        modules,
        sites: done.len() + not_run.len(),
        executed_count: done.len(),
        executed: done,
        never_executed: not_run,
    };
    let mut out = foresight_analyzer::escape::Escaping::new(std::io::BufWriter::new(
        std::io::stdout().lock(),
    ));
    match args.format {
        Format::Json => {
            ignore_broken_pipe(
                serde_json::to_writer_pretty(std::io::stdout().lock(), &report)
                    .map_err(std::io::Error::from),
            )?;
            ignore_broken_pipe(writeln!(std::io::stdout()))?;
        }
        Format::Text => ignore_broken_pipe(write_text(&mut out, &report))?,
    }
    ignore_broken_pipe(out.flush())?;
    Ok(ExitCode::SUCCESS)
}

/// True for a module of the program itself: not the system's libraries, the dynamic loader,
/// the vDSO or foresight's runtime, whose internal locking no run of the program's tests is
/// asked to cover.
fn is_program_module(path: &str) -> bool {
    let name = Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let system = [
        "/lib/",
        "/lib64/",
        "/usr/lib/",
        "/usr/lib64/",
        "/usr/local/lib/",
    ]
    .iter()
    .any(|d| path.starts_with(d));
    !system
        && path.starts_with('/')
        && !name.starts_with("libforesight")
        && !name.starts_with("linux-vdso")
        && !name.starts_with("ld-linux")
}

fn site_label(s: &LockingSite) -> String {
    let f = s.function.as_deref().unwrap_or("?");
    match (&s.file, s.line) {
        (Some(file), Some(line)) => {
            let short = Path::new(file)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or(file);
            format!("`{f} ({short}:{line})`")
        }
        _ => format!("`{f} ({}+{})`", s.module, s.address),
    }
}

fn write_text(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    // Rounded down: 100% only when every site ran.
    let pct = (r.executed_count * 100).checked_div(r.sites).unwrap_or(100);
    write!(
        out,
        "{} locking sites, {} executed ({pct}%)",
        r.sites, r.executed_count
    )?;
    if r.never_executed.is_empty() {
        writeln!(out)?;
    } else {
        let labels: Vec<String> = r.never_executed.iter().map(site_label).collect();
        writeln!(out, "; never executed: {}", labels.join(", "))?;
    }
    for s in &r.never_executed {
        writeln!(
            out,
            "  never executed  {} calls {}  [{} {}]",
            site_label(s),
            s.call,
            s.module,
            s.address
        )?;
    }
    Ok(())
}

struct ModuleScan {
    build_id: Vec<u8>,
    /// A fixed-address executable (ET_EXEC): its addresses are absolute.
    fixed: bool,
    sites: Vec<LockingSite>,
}

/// Finds every call of a locking function in a module's executable sections.
fn scan_module(path: &Path, data: &[u8]) -> anyhow::Result<ModuleScan> {
    let what = || format!("binary {}", path.display());
    let obj =
        object::File::parse(data).with_context(|| format!("{}: not an object file", what()))?;
    if obj.architecture() != object::Architecture::X86_64 {
        bail!(
            "{}: {:?} machine code; coverage reads x86-64 only",
            what(),
            obj.architecture()
        );
    }
    let elf = ElfFile64::<object::Endianness>::parse(data)
        .with_context(|| format!("{}: not a 64-bit ELF file", what()))?;
    let targets = call_targets(&obj, &elf);
    let functions = Functions::new(&obj);
    let dwarf = load_dwarf(&obj);
    let ctx = dwarf.as_ref().and_then(|sections| {
        let endian = if obj.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        addr2line::Context::from_dwarf(
            sections.borrow(|s| gimli::EndianSlice::new(s.as_ref(), endian)),
        )
        .ok()
    });
    let mut sites = Vec::new();
    let display = path.display().to_string();
    for section in obj.sections() {
        if section.kind() != SectionKind::Text {
            continue;
        }
        let name = section.name().unwrap_or("");
        if name.starts_with(".plt") {
            continue;
        }
        let Ok(code) = section.data() else { continue };
        let mut decoder = Decoder::with_ip(64, code, section.address(), DecoderOptions::NONE);
        for ins in &mut decoder {
            if ins.mnemonic() != Mnemonic::Call {
                continue;
            }
            let callee = match ins.op0_kind() {
                OpKind::NearBranch64 => targets.direct.get(&ins.near_branch64()),
                OpKind::Memory if ins.is_ip_rel_memory_operand() => {
                    targets.got.get(&ins.ip_rel_memory_address())
                }
                _ => None,
            };
            let Some(&call) = callee else { continue };
            let (function, file, line) = locate(ctx.as_ref(), &functions, ins.ip());
            sites.push(LockingSite {
                module: display.clone(),
                function,
                file,
                line,
                call,
                address: format!("{:#x}", ins.ip()),
                return_address: ins.next_ip(),
            });
        }
    }
    let build_id = obj.build_id().ok().flatten().unwrap_or_default().to_vec();
    Ok(ModuleScan {
        build_id,
        fixed: obj.kind() == ObjectKind::Executable,
        sites,
    })
}

/// Where a call lands when it calls a locking function: a PLT stub, a defined symbol, or (for
/// `call *GOT(%rip)`) a GOT slot.
struct CallTargets {
    direct: HashMap<u64, &'static str>,
    got: HashMap<u64, &'static str>,
}

fn call_targets(obj: &object::File<'_>, elf: &ElfFile64<'_, object::Endianness>) -> CallTargets {
    let mut direct = HashMap::new();
    let mut got = HashMap::new();
    // Defined functions of this module (a static binary, or the library that implements them).
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if sym.is_definition() {
            if let Some(n) = sym.name_bytes().ok().and_then(locking_name) {
                direct.insert(sym.address(), n);
            }
        }
    }
    // GOT slots filled with a locking function's address by the dynamic loader.
    let endian = elf.endian();
    let dynsyms = obj.dynamic_symbol_table();
    if let Some(relocs) = obj.dynamic_relocations() {
        for (offset, reloc) in relocs {
            let object::RelocationTarget::Symbol(idx) = reloc.target() else {
                continue;
            };
            let Some(name) = dynsyms
                .as_ref()
                .and_then(|t| object::ObjectSymbolTable::symbol_by_index(t, idx).ok())
                .and_then(|s| s.name_bytes().ok().and_then(locking_name))
            else {
                continue;
            };
            got.insert(offset, name);
        }
    }
    // PLT stubs: each `jmp *GOT(%rip)` in a PLT section belongs to the 16-byte entry it is in.
    for section in elf.elf_section_table().iter() {
        let Ok(name) = elf.elf_section_table().section_name(endian, section) else {
            continue;
        };
        if !name.starts_with(b".plt") {
            continue;
        }
        let Ok(code) = section.data(endian, elf.data()) else {
            continue;
        };
        let start = section.sh_addr(endian);
        let entry_size = match section.sh_entsize(endian) {
            0 => 16,
            n => n,
        };
        let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
        for ins in &mut decoder {
            if ins.mnemonic() == Mnemonic::Jmp
                && ins.op0_kind() == OpKind::Memory
                && ins.is_ip_rel_memory_operand()
            {
                if let Some(&n) = got.get(&ins.ip_rel_memory_address()) {
                    let entry = start + (ins.ip() - start) / entry_size * entry_size;
                    direct.insert(entry, n);
                }
            }
        }
    }
    CallTargets { direct, got }
}

/// The function, file and line of a code address: DWARF first, the symbol table otherwise.
fn locate(
    ctx: Option<&addr2line::Context<gimli::EndianSlice<'_, gimli::RunTimeEndian>>>,
    functions: &Functions,
    addr: u64,
) -> (Option<String>, Option<String>, Option<u32>) {
    let mut function = None;
    let mut file = None;
    let mut line = None;
    if let Some(ctx) = ctx {
        if let Ok(mut frames) = ctx.find_frames(addr).skip_all_loads() {
            if let Ok(Some(f)) = frames.next() {
                function = f
                    .function
                    .as_ref()
                    .and_then(|n| n.demangle().ok().map(|s| s.into_owned()));
                if let Some(l) = f.location {
                    file = l.file.map(str::to_string);
                    line = l.line;
                }
            }
        }
    }
    if function.is_none() {
        function = functions.containing(addr).map(str::to_string);
    }
    (function, file, line)
}

/// The DWARF sections of a module, decompressed where they must be; `None` without DWARF.
fn load_dwarf<'a>(obj: &object::File<'a>) -> Option<gimli::DwarfSections<Cow<'a, [u8]>>> {
    obj.section_by_name(".debug_info")?;
    gimli::DwarfSections::load(|id: gimli::SectionId| -> Result<_, gimli::Error> {
        Ok(obj
            .section_by_name(id.name())
            .filter(|s| {
                s.compressed_file_range()
                    .is_ok_and(|r| r.uncompressed_size <= MAX_SECTION_LEN)
            })
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    })
    .ok()
}

/// Sections and files larger than this are not read: a trace is untrusted input and names the
/// files scanned.
const MAX_SECTION_LEN: u64 = 1 << 30;

/// A module's bytes: a regular file only (a trace could name a device or a FIFO), and not one
/// implausibly large.
fn read_module(path: &Path) -> std::io::Result<Vec<u8>> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > 4 * MAX_SECTION_LEN {
        return Err(std::io::Error::other("larger than 4 GiB"));
    }
    std::fs::read(path)
}

/// The module's functions by address, from its symbol table (or, stripped, its dynamic one):
/// what names a call site without DWARF.
struct Functions {
    /// (start, size, name), by start.
    by_start: Vec<(u64, u64, String)>,
}

impl Functions {
    fn new(obj: &object::File<'_>) -> Self {
        let from = |syms: &mut dyn Iterator<Item = object::Symbol<'_, '_>>| {
            syms.filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition())
                .filter_map(|s| {
                    let name = addr2line::demangle_auto(Cow::from(s.name().ok()?), None);
                    Some((s.address(), s.size(), name.into_owned()))
                })
                .collect::<Vec<_>>()
        };
        let mut by_start = from(&mut obj.symbols());
        if by_start.is_empty() {
            by_start = from(&mut obj.dynamic_symbols());
        }
        by_start.sort_unstable_by_key(|f| f.0);
        Self { by_start }
    }

    fn containing(&self, addr: u64) -> Option<&str> {
        let i = self
            .by_start
            .partition_point(|f| f.0 <= addr)
            .checked_sub(1)?;
        let (start, size, name) = &self.by_start[i];
        (*size == 0 || addr - start < *size).then_some(name.as_str())
    }
}
