//! Naming data addresses: the static variable an address lies in, and the element of it
//! (`counters[3]`, `cfg.limits.max`, `table[2].name[5]`), from the data-variable and data-type
//! records the symbolisation pass writes (`FORMAT.md` §7.9, §7.10).
//!
//! ```
//! use foresight_trace::builder::TraceBuilder;
//! let mut b = TraceBuilder::new("example");
//! let counters = b.array_variable("counters", "race.c", 4, 4, 8);
//! let t = foresight_trace::Trace::from_bytes("example", b.finish()).unwrap();
//! let s = t.tables.data_symbol(counters + 12, 4).unwrap();
//! assert_eq!(s.name, "counters[3]");
//! assert_eq!((s.file, s.line), (Some("race.c"), 4));
//! // A heap (or stack) address is in no module's variables.
//! assert!(t.tables.data_symbol(0x7f00_0000_1000, 4).is_none());
//! ```
//!
//! The records hold one entry per variable and one per type, not one per accessed address: an
//! address's element path is worked out here, when asked for, by walking the type's layout.

use std::fmt::Write as _;

use crate::event::StringId;
use crate::tables::{DataType, DataVariable, ModuleInfo, Tables, TypeShape};

/// How far a layout walk goes: a hostile trace may describe a type that contains itself.
pub(crate) const MAX_PATH_STEPS: usize = 64;

/// Variables looked at before an address when they may overlap (aliases, a variable inside
/// another): the symbolisation pass writes non-overlapping ones, so the first usually answers.
const LOOK_BACK: usize = 8;

/// What an address of static data is: the answer of [`Tables::data_symbol`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSymbol<'t> {
    /// The variable the address lies in.
    pub variable: &'t DataVariable,
    /// The variable's name with the path to the smallest element that holds the whole access
    /// (`counters[3]`, `cfg.limits.max`, `table[2].name[5]`), and `+0x…` when the access
    /// starts inside that element rather than at its start (`counters[3]+0x1`; with no type
    /// information, `buf+0x10`).
    pub name: String,
    /// Run-time address and size of the element named.
    pub element_addr: u64,
    /// Size in bytes of the element named.
    pub element_size: u64,
    /// Where the variable is declared, when known (line 0: unknown).
    pub file: Option<&'t str>,
    /// The line of the declaration (0: unknown).
    pub line: u32,
}

/// Where a layout walk stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathStop {
    /// At the smallest element that holds the whole access: what an access touched.
    Innermost,
    /// At the outermost element that starts at the offset and is not an array: what an object
    /// at that address is (a lock that is a member, `accounts[1].lock`, is not opened up into
    /// its own fields; the first of an array of locks is `L[0]`).
    AtStart,
}

/// The result of [`element_path`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElementPath {
    /// The path to append to the variable's name: `[3]`, `.limits.max`, `[2].name[5]`; empty
    /// when the walk stopped at the variable itself.
    pub path: String,
    /// The element's first byte and size, relative to the variable.
    pub start: u64,
    /// Size in bytes of the element.
    pub size: u64,
    /// How far into the element the access starts.
    pub rest: u64,
}

impl ElementPath {
    /// `name` followed by the path and, when the access starts inside the element, `+0x…`.
    pub fn name(&self, name: &str) -> String {
        let mut out = format!("{name}{}", self.path);
        if self.rest != 0 {
            let _ = write!(out, "+{:#x}", self.rest);
        }
        out
    }
}

/// Where layouts and member names come from: the trace's tables, or a symboliser's own tables
/// before it writes them.
pub trait TypeTable {
    /// The type with id `id`, if the table has it.
    fn data_type(&self, id: u32) -> Option<&DataType>;
    /// The text of member name `id`, if the table has it.
    fn member_name(&self, id: StringId) -> Option<&str>;
}

impl TypeTable for Tables {
    fn data_type(&self, id: u32) -> Option<&DataType> {
        self.data_types.get(&id)
    }

    fn member_name(&self, id: StringId) -> Option<&str> {
        self.string(id)
    }
}

/// The element at `offset` (with `len` bytes from there, at least one) of a value of `size`
/// bytes and type `ty`, found by walking the type's layout. Bounded by `MAX_PATH_STEPS`; any
/// inconsistency (an index past the array, an offset no member covers, a missing type) stops
/// the walk where it is, so the answer is always a prefix of the true path.
pub fn element_path(
    types: &(impl TypeTable + ?Sized),
    ty: Option<u32>,
    size: u64,
    offset: u64,
    len: u64,
    stop: PathStop,
) -> ElementPath {
    let len = len.max(1);
    let mut out = ElementPath {
        path: String::new(),
        start: 0,
        size,
        rest: offset,
    };
    let mut ty = ty;
    for _ in 0..MAX_PATH_STEPS {
        let off = out.rest;
        if stop == PathStop::AtStart && off == 0 && ty.is_none() {
            break;
        }
        let Some(t) = ty.and_then(|id| types.data_type(id)) else {
            break;
        };
        // An array is not an object of its own: what starts at its address is its first
        // element (`L[0]`, as the program names it, not `L`).
        if stop == PathStop::AtStart && off == 0 && !matches!(t.shape, TypeShape::Array { .. }) {
            break;
        }
        // (path step, start within the current element, size, its type)
        let step = match &t.shape {
            TypeShape::Array {
                element,
                element_size,
                count,
            } => {
                let stride = *element_size;
                if stride == 0 {
                    break;
                }
                let index = off / stride;
                if count.is_some_and(|n| index >= n) {
                    break;
                }
                (
                    Step::Index(index),
                    index.saturating_mul(stride),
                    stride,
                    *element,
                )
            }
            TypeShape::Record { members } => {
                let fits = |start: u64, n: u64| {
                    off >= start
                        && off - start < n
                        && (stop == PathStop::AtStart || (off - start).saturating_add(len) <= n)
                        && start.saturating_add(n) <= out.size
                };
                let Some(m) = members.iter().find(|m| fits(m.offset, m.size)) else {
                    break;
                };
                (Step::Member(m.name), m.offset, m.size, m.ty)
            }
        };
        let (what, start, n, next) = step;
        let within = off - start;
        // The element must hold the access, and lie inside the element it is part of.
        if (stop == PathStop::Innermost && within.saturating_add(len) > n)
            || start.saturating_add(n) > out.size
        {
            break;
        }
        match what {
            Step::Index(i) => {
                let _ = write!(out.path, "[{i}]");
            }
            Step::Member(Some(name)) => {
                out.path.push('.');
                out.path.push_str(types.member_name(name).unwrap_or("?"));
            }
            // An anonymous struct or union, or a base class, adds no name of its own.
            Step::Member(None) => {}
        }
        out.start += start;
        out.size = n;
        out.rest = within;
        ty = next;
    }
    out
}

enum Step {
    Index(u64),
    Member(Option<StringId>),
}

impl Tables {
    /// The module whose image holds the run-time address `addr`: the smallest of those whose
    /// `[base, base + size)` contains it (a non-PIE executable's range starts at 0).
    pub fn module_of(&self, addr: u64) -> Option<&ModuleInfo> {
        self.modules
            .values()
            .filter(|m| addr >= m.base && addr - m.base < m.size)
            .min_by_key(|m| (m.size, m.id))
    }

    /// The static variable that holds the run-time address `addr`, and how far into it the
    /// address is.
    pub fn data_variable(&self, addr: u64) -> Option<(&DataVariable, u64)> {
        let m = self.module_of(addr)?;
        let offset = addr - m.base;
        self.data_variables
            .range((m.id, 0)..=(m.id, offset))
            .rev()
            .take(LOOK_BACK)
            .map(|(_, v)| v)
            .find(|v| offset - v.offset < v.size)
            .map(|v| (v, offset - v.offset))
    }

    /// Names the static data that an access of `len` bytes at the run-time address `addr`
    /// touches: the variable, with the path to the element (`counters[3]`), and where it is
    /// declared. `None` for an address that is in no variable the trace describes: the heap,
    /// a stack, thread-local storage, or a trace that was not symbolised (or whose module
    /// could not be read). An access that runs past its variable's end is named by the
    /// variable alone.
    pub fn data_symbol(&self, addr: u64, len: u64) -> Option<DataSymbol<'_>> {
        let (v, offset) = self.data_variable(addr)?;
        let len = len.max(1).min(v.size - offset);
        let p = element_path(self, v.ty, v.size, offset, len, PathStop::Innermost);
        let name = self.string(v.name).unwrap_or("?");
        Some(DataSymbol {
            variable: v,
            name: p.name(name),
            element_addr: addr - p.rest,
            element_size: p.size,
            file: v.file.and_then(|f| self.string(f)),
            line: v.line,
        })
    }
}
