//! Static data named for the few accesses a report names, without the data pass
//! ([`StaticData`]): what `analyze` of a trace that was not symbolised uses, instead of a
//! symbolised copy of the whole trace, so that the trace's events are decoded once, by the
//! analysis.
//!
//! The names are those [`crate::symbolize_in_place`] would give the same accesses. Its data pass
//! marks the granules every access touched, and a module's variables are the symbols
//! (`module.rs`, `SymbolTable::variables_touched`) that hold some of them. The variable that
//! holds an accessed address is the same whatever else was touched when no symbol of the
//! module overlaps it without holding it (`SymbolTable::settled`, checked for every address
//! asked about): then the granule of the address alone gives its variable and layout. When
//! that does not hold, or for the write a `free` makes of a block inside a module's image
//! (the data pass does not read frees), the module's data are resolved from the data pass
//! (run then, once).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use foresight_trace::tables::{TableRecord, Tables};

use crate::module;
use crate::touched;
use crate::{records, resolve_modules, wanted, DataByModule, SymbolizeOptions, SymbolizeSummary};

/// An access whose static data is to be named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataAccess {
    /// Run-time address of its first byte.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The write of a block by its `free`, which the data pass does not read.
    pub freed: bool,
}

/// What [`Tables::data_symbol`] says of an access: the variable and element, and where the
/// variable is declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataName {
    /// `counters[3]`, `cfg.limits.max`.
    pub name: String,
    /// The file of the declaration, when known.
    pub file: Option<String>,
    /// The line of the declaration (0: unknown).
    pub line: u32,
}

/// Names the static data of accesses of the trace at a path, reading the modules it names, as
/// the trace would name them had [`crate::symbolize_in_place`] symbolised it. Names found are
/// kept, so that an access asked about again costs a lookup.
pub struct StaticData {
    path: PathBuf,
    opts: SymbolizeOptions,
    known: HashMap<DataAccess, Option<DataName>>,
    /// The data pass's granules, by module, once a module needed them (`Err`: it failed).
    touched: Option<Result<DataByModule, String>>,
    data_passes: usize,
    warnings: Vec<String>,
}

impl StaticData {
    /// For the trace at `path`, with `opts` (its `data` is not read: the data pass runs only
    /// when a module's names need it).
    pub fn new(path: &Path, opts: SymbolizeOptions) -> Self {
        StaticData {
            path: path.to_path_buf(),
            opts,
            known: HashMap::new(),
            touched: None,
            data_passes: 0,
            warnings: Vec::new(),
        }
    }

    /// The name of each of `accesses`, in order, with `tables` the trace's tables (its modules,
    /// strings and any data records it already has).
    pub fn names(&mut self, tables: &Tables, accesses: &[DataAccess]) -> Vec<Option<DataName>> {
        let new: Vec<DataAccess> = {
            let mut seen: Vec<DataAccess> = accesses
                .iter()
                .filter(|a| !self.known.contains_key(a))
                .copied()
                .collect();
            seen.sort_unstable_by_key(|a| (a.addr, a.len, a.freed));
            seen.dedup();
            seen
        };
        if !new.is_empty() {
            self.resolve(tables, &new);
        }
        accesses
            .iter()
            .map(|a| self.known.get(a).cloned().flatten())
            .collect()
    }

    /// How many times the data pass ran (at most once): 0 when every module's names were
    /// settled by the accesses asked about.
    pub fn data_passes(&self) -> usize {
        self.data_passes
    }

    /// What the user should know (modules skipped, notes), since the last call.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    fn resolve(&mut self, tables: &Tables, new: &[DataAccess]) {
        // The granule of each address, by module: what the data pass marks first for it.
        let mut runs: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        let mut check: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut needs_pass: Vec<u32> = Vec::new();
        for a in new {
            let Some(m) = tables.module_of(a.addr) else {
                continue;
            };
            let offset = a.addr - m.base;
            let lo = (a.addr & !7).max(m.base) - m.base;
            let hi = (a.addr & !7)
                .saturating_add(8)
                .min(m.base.saturating_add(m.size))
                - m.base;
            runs.entry(m.id).or_default().push((lo, hi));
            check.entry(m.id).or_default().push(offset);
            if a.freed {
                needs_pass.push(m.id);
            }
        }
        for r in runs.values_mut() {
            r.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(r.len());
            for &(lo, hi) in r.iter() {
                match merged.last_mut() {
                    Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                    _ => merged.push((lo, hi)),
                }
            }
            *r = merged;
        }

        let mut want = wanted(tables);
        want.frames.clear();
        want.already = 0;
        let mut summary = SymbolizeSummary::default();
        let opts = &self.opts;
        let path = &self.path;
        let touched = &mut self.touched;
        let passes = &mut self.data_passes;
        let (_, data) = resolve_modules(&want, &runs, &mut summary, |p, info, frames, r| {
            let offsets = check.get(&info.id).map_or(&[][..], Vec::as_slice);
            if !needs_pass.contains(&info.id) {
                let out = module::resolve_checked(p, info, frames, r, offsets, opts)?;
                if !out.unsettled {
                    return Ok(out);
                }
            }
            // What else was touched decides: the module's data as the data pass gives them.
            let all = touched.get_or_insert_with(|| {
                *passes += 1;
                touched::collect(path)
                    .map(|t| t.by_module)
                    .map_err(|e| e.to_string())
            });
            let r = match all {
                Ok(all) => all.get(&info.id).map_or(&[][..], Vec::as_slice),
                Err(_) => &[][..],
            };
            module::resolve(p, info, frames, r, opts)
        });
        if let Some(Err(e)) = &self.touched {
            summary.notes.push(format!("static data not named: {e}"));
        }
        self.warnings.extend(summary.warnings());

        // The records the pass would write for them, read as a reader of the symbolised file
        // reads them, on the trace's own data records.
        let mut named = Tables {
            modules: tables.modules.clone(),
            strings: tables.strings.clone(),
            data_variables: tables.data_variables.clone(),
            data_types: tables.data_types.clone(),
            ..Tables::default()
        };
        match records(&self.path, &want, &BTreeMap::new(), &data) {
            Ok((new_records, counts)) => {
                if counts.types_exhausted {
                    self.warnings.push(
                        "no free type id is left: some variables were named without their \
                         layout"
                            .into(),
                    );
                }
                let data_records: Vec<TableRecord> = new_records;
                let _ = named.add_records(&data_records);
            }
            Err(e) => self.warnings.push(format!("static data not named: {e}")),
        }
        for a in new {
            let name = named.data_symbol(a.addr, a.len).map(|s| DataName {
                name: s.name,
                file: s.file.map(str::to_string),
                line: s.line,
            });
            self.known.insert(*a, name);
        }
    }
}
