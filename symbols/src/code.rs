//! Code addresses to source frames, for all the addresses of one module at once, reading only
//! what they need.
//!
//! The answers are addr2line's `Context::find_frames` ones, frame for frame (same units tried in
//! the same order, same function and inlined chain, same line rows, same file names); what
//! differs is the work. addr2line, on the first address of a unit, records the ranges of every
//! function of the unit, walking every entry of the unit, and decodes and keeps every row of
//! its line program. A C program built as one compilation unit (SQLite's amalgamation) pays for
//! all of it to name a few dozen sites. Here:
//!
//! - the walk for functions reads every function's ranges but skips its subtree (parameters,
//!   locals, blocks, inlined calls) through its `DW_AT_sibling`; only the functions that hold an
//!   asked address have their inlined calls parsed. A function nested in another one's subtree
//!   is therefore not seen: an address that no function holds is looked up again with the full
//!   walk;
//! - the line program runs once for all the unit's addresses, keeping the rows of only the
//!   sequences that hold one of them, and stops once its rows are past the last address asked
//!   (files that the rest of a DWARF 4 program would define with `DW_LNE_define_file`, which
//!   compilers no longer emit, are then not known to an inlined call's `DW_AT_call_file`).
//!
//! Anything that fails to parse sends its addresses back to the caller, which asks addr2line
//! (so a malformed unit costs what it did, and answers what it did).

use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::mem;
use std::num::NonZeroU64;

use addr2line::gimli;

type R<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;
type UnitOffset = gimli::UnitOffset<usize>;

/// One frame of a code address, innermost first: the function's raw (linkage) name and the
/// language of its unit, and the source location.
pub(crate) struct RawFrame<'a> {
    pub name: Option<R<'a>>,
    pub lang: Option<gimli::DwLang>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

/// What the lookup gives for one address.
pub(crate) enum Lookup<'a> {
    /// The frames (empty: no unit knows the address).
    Frames(Vec<RawFrame<'a>>),
    /// The DWARF did not parse where the address is: ask addr2line.
    Failed,
}

/// Looks up `probes` (sorted, distinct); one answer per probe, in order. `None` when the
/// module's list of units does not parse.
pub(crate) fn find_frames<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    probes: &[u64],
) -> Option<Vec<Lookup<'a>>> {
    let units = Units::parse(dwarf).ok()?;
    // Each probe tries the units that may hold it in turn, until one has a function or a
    // line row for it; a round looks up every waiting probe in its next unit, a batch per unit.
    let candidates: Vec<Vec<usize>> = probes.iter().map(|&p| units.find(p)).collect();
    let mut answers: Vec<Option<Lookup<'a>>> = probes.iter().map(|_| None).collect();
    let mut round = 0;
    loop {
        let mut batches: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, answer) in answers.iter_mut().enumerate() {
            if answer.is_some() {
                continue;
            }
            match candidates[i].get(round) {
                None => *answer = Some(Lookup::Frames(Vec::new())),
                Some(&u) => batches.entry(u).or_default().push(i),
            }
        }
        if batches.is_empty() {
            break;
        }
        for (u, list) in batches {
            let asked: Vec<u64> = list.iter().map(|&i| probes[i]).collect();
            match units.lookup(dwarf, u, &asked) {
                Ok(found) => {
                    for (i, f) in list.into_iter().zip(found) {
                        if let Some(frames) = f {
                            answers[i] = Some(Lookup::Frames(frames));
                        }
                    }
                }
                Err(_) => {
                    for i in list {
                        answers[i] = Some(Lookup::Failed);
                    }
                }
            }
        }
        round += 1;
    }
    Some(
        answers
            .into_iter()
            .map(|a| a.unwrap_or(Lookup::Failed))
            .collect(),
    )
}

struct Unit<'a> {
    offset: gimli::DebugInfoOffset<usize>,
    unit: gimli::Unit<R<'a>>,
    lang: Option<gimli::DwLang>,
}

struct UnitRange {
    unit: usize,
    /// The lowest begin of this range and every later one (sorted by end).
    min_begin: u64,
    range: gimli::Range,
}

/// The compilation units and their address ranges, found as addr2line finds them.
struct Units<'a> {
    units: Vec<Unit<'a>>,
    ranges: Vec<UnitRange>,
}

#[derive(Default)]
struct RangeAttributes {
    low_pc: Option<u64>,
    high_pc: Option<u64>,
    size: Option<u64>,
    ranges_offset: Option<gimli::RangeListsOffset<usize>>,
}

impl RangeAttributes {
    /// Reads a range attribute; false when `attr` is not one.
    fn read<'a>(
        &mut self,
        unit: gimli::UnitRef<'_, R<'a>>,
        attr: &gimli::Attribute<R<'a>>,
    ) -> Result<bool, gimli::Error> {
        match attr.name() {
            gimli::DW_AT_low_pc => match attr.value() {
                gimli::AttributeValue::Addr(v) => self.low_pc = Some(v),
                gimli::AttributeValue::DebugAddrIndex(i) => self.low_pc = Some(unit.address(i)?),
                _ => {}
            },
            gimli::DW_AT_high_pc => match attr.value() {
                gimli::AttributeValue::Addr(v) => self.high_pc = Some(v),
                gimli::AttributeValue::DebugAddrIndex(i) => self.high_pc = Some(unit.address(i)?),
                gimli::AttributeValue::Udata(v) => self.size = Some(v),
                _ => {}
            },
            gimli::DW_AT_ranges => self.ranges_offset = unit.attr_ranges_offset(attr.value())?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Calls `f` on each non-empty range; whether there was one.
    fn for_each_range(
        &self,
        unit: gimli::UnitRef<'_, R<'_>>,
        mut f: impl FnMut(gimli::Range),
    ) -> Result<bool, gimli::Error> {
        let mut any = false;
        let mut add = |r: gimli::Range| {
            if r.begin < r.end {
                f(r);
                any = true;
            }
        };
        if let Some(offset) = self.ranges_offset {
            let mut list = unit.ranges(offset)?;
            while let Some(r) = list.next()? {
                add(r);
            }
        } else if let (Some(begin), Some(end)) = (self.low_pc, self.high_pc) {
            add(gimli::Range { begin, end });
        } else if let (Some(begin), Some(size)) = (self.low_pc, self.size) {
            // A -1 tombstone wraps and is dropped as empty.
            add(gimli::Range {
                begin,
                end: begin.wrapping_add(size),
            });
        }
        Ok(any)
    }
}

impl<'a> Units<'a> {
    fn parse(dwarf: &gimli::Dwarf<R<'a>>) -> Result<Self, gimli::Error> {
        let mut aranges = Vec::new();
        let mut headers = dwarf.debug_aranges.headers();
        while let Some(h) = headers.next()? {
            aranges.push((h.debug_info_offset(), h.offset()));
        }
        aranges.sort_by_key(|a| a.0);

        let mut units = Vec::new();
        let mut ranges = Vec::new();
        let mut headers = dwarf.units();
        while let Some(header) = headers.next()? {
            let id = units.len();
            let Some(offset) = header.offset().as_debug_info_offset() else {
                continue;
            };
            let mut need_range = match header.type_() {
                gimli::UnitType::Type { .. } | gimli::UnitType::SplitType { .. } => continue,
                // Partial units are only the target of references.
                gimli::UnitType::Partial => false,
                _ => true,
            };
            let Ok(unit) = dwarf.unit(header) else {
                continue;
            };
            let uref = gimli::UnitRef::new(dwarf, &unit);
            let mut lang = None;
            if need_range {
                let mut entries = uref.entries_raw(None)?;
                let Some(abbrev) = entries.read_abbreviation()? else {
                    continue;
                };
                let mut attrs = RangeAttributes::default();
                for spec in abbrev.attributes() {
                    let attr = entries.read_attribute(*spec)?;
                    if !attrs.read(uref, &attr)? && attr.name() == gimli::DW_AT_language {
                        if let gimli::AttributeValue::Language(l) = attr.value() {
                            lang = Some(l);
                        }
                    }
                }
                // The unit's ranges: DW_AT_ranges, else .debug_aranges, else low/high pc.
                let first = match attrs.ranges_offset {
                    Some(_) => None,
                    None => aranges.binary_search_by_key(&offset, |a| a.0).ok(),
                };
                if let Some(mut i) = first {
                    while i > 0 && aranges[i - 1].0 == offset {
                        i -= 1;
                    }
                    for (_, at) in aranges[i..].iter().take_while(|a| a.0 == offset) {
                        let h = dwarf.debug_aranges.header(*at)?;
                        let mut entries = h.entries();
                        while let Some(e) = entries.next().transpose() {
                            // An entry that does not parse (an address overflow) is ignored.
                            let Ok(e) = e else { continue };
                            if e.length() != 0 {
                                ranges.push(UnitRange {
                                    unit: id,
                                    min_begin: 0,
                                    range: e.range(),
                                });
                                need_range = false;
                            }
                        }
                    }
                }
                if need_range {
                    need_range = !attrs.for_each_range(uref, |range| {
                        ranges.push(UnitRange {
                            unit: id,
                            min_begin: 0,
                            range,
                        })
                    })?;
                }
            }
            if need_range {
                // No declared ranges: those of its line sequences.
                if let Ok(Some(lines)) = LinePass::run(uref, &[]) {
                    for &(begin, end, _) in &lines.sequences {
                        ranges.push(UnitRange {
                            unit: id,
                            min_begin: 0,
                            range: gimli::Range { begin, end },
                        });
                    }
                }
            }
            units.push(Unit { offset, unit, lang });
        }
        ranges.sort_by_key(|r| r.range.end);
        let mut min = !0;
        for r in ranges.iter_mut().rev() {
            min = min.min(r.range.begin);
            r.min_begin = min;
        }
        Ok(Self { units, ranges })
    }

    /// The units whose ranges hold `probe`, in the order they are tried.
    fn find(&self, probe: u64) -> Vec<usize> {
        let high = probe.wrapping_add(1);
        let pos = match self.ranges.binary_search_by_key(&probe, |r| r.range.end) {
            Ok(i) => i + 1,
            Err(i) => i,
        };
        self.ranges[pos..]
            .iter()
            // No later range begins at or below `probe`.
            .take_while(|r| high > r.min_begin)
            .filter(|r| probe < r.range.end && high > r.range.begin)
            .map(|r| r.unit)
            .collect()
    }

    /// The unit holding the entry at `offset` of .debug_info.
    fn unit_at(
        &self,
        offset: gimli::DebugInfoOffset<usize>,
    ) -> Result<(&gimli::Unit<R<'a>>, UnitOffset), gimli::Error> {
        let unit = match self.units.binary_search_by_key(&offset.0, |u| u.offset.0) {
            Ok(_) | Err(0) => return Err(gimli::Error::NoEntryAtGivenOffset),
            Err(i) => &self.units[i - 1].unit,
        };
        let at = offset
            .to_unit_offset(&unit.header)
            .ok_or(gimli::Error::NoEntryAtGivenOffset)?;
        Ok((unit, at))
    }

    /// Looks up `probes` (sorted) in unit `id`: the frames of each, or `None` when the unit
    /// has neither a function nor a line row for it.
    #[allow(clippy::type_complexity)]
    fn lookup(
        &self,
        dwarf: &gimli::Dwarf<R<'a>>,
        id: usize,
        probes: &[u64],
    ) -> Result<Vec<Option<Vec<RawFrame<'a>>>>, gimli::Error> {
        let u = &self.units[id];
        let uref = gimli::UnitRef::new(dwarf, &u.unit);
        let mut functions = Functions::walk(uref, true)?;
        let mut holders: Vec<Option<usize>> = probes.iter().map(|&p| functions.find(p)).collect();
        if functions.skipped && holders.iter().any(Option::is_none) {
            // A function nested in a skipped subtree may hold them.
            functions = Functions::walk(uref, false)?;
            holders = probes.iter().map(|&p| functions.find(p)).collect();
        }
        let lines = LinePass::run(uref, probes)?;
        let mut parsed: HashMap<usize, Function<'a>> = HashMap::new();
        let mut out = Vec::with_capacity(probes.len());
        for (k, (&probe, holder)) in probes.iter().zip(&holders).enumerate() {
            let location = lines.as_ref().and_then(|l| l.location(k));
            let Some(f) = *holder else {
                out.push(location.map(|loc| {
                    vec![RawFrame {
                        name: None,
                        lang: u.lang,
                        file: loc.file,
                        line: loc.line,
                        column: loc.column,
                    }]
                }));
                continue;
            };
            let function = match parsed.entry(f) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(Function::parse(self, uref, functions.offsets[f])?),
            };
            let inlined = function.inlined_at(probe);
            let mut frames = Vec::with_capacity(inlined.len() + 1);
            let mut next = location;
            for call in inlined.iter().rev() {
                let loc = next.take();
                frames.push(RawFrame {
                    name: call.name,
                    lang: u.lang,
                    file: loc.as_ref().and_then(|l| l.file.clone()),
                    line: loc.as_ref().and_then(|l| l.line),
                    column: loc.as_ref().and_then(|l| l.column),
                });
                next = Some(Location {
                    file: call
                        .call_file
                        .and_then(|i| lines.as_ref()?.files.get(i as usize).cloned()),
                    line: (call.call_line != 0).then_some(call.call_line),
                    column: (call.call_column != 0).then_some(call.call_column),
                });
            }
            frames.push(RawFrame {
                name: function.name,
                lang: u.lang,
                file: next.as_ref().and_then(|l| l.file.clone()),
                line: next.as_ref().and_then(|l| l.line),
                column: next.as_ref().and_then(|l| l.column),
            });
            out.push(Some(frames));
        }
        Ok(out)
    }
}

/// The functions of a unit that have addresses, and their ranges sorted by start.
struct Functions {
    offsets: Vec<UnitOffset>,
    /// (range, index into `offsets`).
    addresses: Vec<(gimli::Range, usize)>,
    /// Whether the subtree of a function with children was skipped.
    skipped: bool,
}

impl Functions {
    /// Every `DW_TAG_subprogram` of the unit with its ranges, in the order of the entries;
    /// with `skip_bodies`, without looking into a function's children.
    fn walk(unit: gimli::UnitRef<'_, R<'_>>, skip_bodies: bool) -> Result<Self, gimli::Error> {
        let mut offsets = Vec::new();
        let mut addresses = Vec::new();
        let mut skipped = false;
        let mut entries = unit.entries_raw(None)?;
        while !entries.is_empty() {
            let at = entries.next_offset();
            let depth = entries.next_depth();
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            if abbrev.tag() != gimli::DW_TAG_subprogram {
                entries.skip_attributes(abbrev.attributes())?;
                continue;
            }
            let mut attrs = RangeAttributes::default();
            let mut sibling = None;
            for spec in abbrev.attributes() {
                let attr = entries.read_attribute(*spec)?;
                if !attrs.read(unit, &attr)? && attr.name() == gimli::DW_AT_sibling {
                    if let gimli::AttributeValue::UnitRef(o) = attr.value() {
                        sibling = Some(o);
                    }
                }
            }
            let index = offsets.len();
            if attrs.for_each_range(unit, |r| addresses.push((r, index)))? {
                offsets.push(at);
            }
            if skip_bodies && abbrev.has_children() {
                skipped = true;
                // A sibling reference must move forward, or the walk would not end.
                let jumped = match sibling.filter(|s| s.0 > at.0) {
                    Some(s) => unit.entries_raw(Some(s)).ok(),
                    None => None,
                };
                match jumped {
                    Some(e) => entries = e,
                    None => {
                        while entries.next_depth() > depth {
                            if let Some(a) = entries.read_abbreviation()? {
                                entries.skip_attributes(a.attributes())?;
                            }
                        }
                    }
                }
            }
        }
        // Stable, as the binary search below must see the ranges in the order addr2line does.
        addresses.sort_by_key(|a| a.0.begin);
        Ok(Self {
            offsets,
            addresses,
            skipped,
        })
    }

    fn find(&self, probe: u64) -> Option<usize> {
        self.addresses
            .binary_search_by(|(r, _)| {
                if probe < r.begin {
                    Ordering::Greater
                } else if probe >= r.end {
                    Ordering::Less
                } else {
                    Ordering::Equal
                }
            })
            .ok()
            .map(|i| self.addresses[i].1)
    }
}

struct InlinedCall<'a> {
    name: Option<R<'a>>,
    call_file: Option<u64>,
    call_line: u32,
    call_column: u32,
}

struct InlinedRange {
    range: gimli::Range,
    depth: usize,
    call: usize,
}

/// One function: its name and the calls inlined into it.
struct Function<'a> {
    name: Option<R<'a>>,
    calls: Vec<InlinedCall<'a>>,
    /// Sorted by depth, then start.
    ranges: Vec<InlinedRange>,
}

impl<'a> Function<'a> {
    fn parse(
        units: &Units<'a>,
        unit: gimli::UnitRef<'_, R<'a>>,
        at: UnitOffset,
    ) -> Result<Self, gimli::Error> {
        let mut entries = unit.entries_raw(Some(at))?;
        let depth = entries.next_depth();
        let abbrev = entries
            .read_abbreviation()?
            .ok_or(gimli::Error::NoEntryAtGivenOffset)?;
        let mut name = None;
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec)?;
            match attr.name() {
                gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                    if let Ok(v) = unit.attr_string(attr.value()) {
                        name = Some(v);
                    }
                }
                gimli::DW_AT_name if name.is_none() => name = unit.attr_string(attr.value()).ok(),
                gimli::DW_AT_abstract_origin | gimli::DW_AT_specification if name.is_none() => {
                    name = name_of(units, unit, attr.value(), 16)?;
                }
                _ => {}
            }
        }
        let mut f = Function {
            name,
            calls: Vec::new(),
            ranges: Vec::new(),
        };
        f.parse_children(units, unit, &mut entries, depth, 0)?;
        // Breadth first (by depth, then start), so that a binary search finds the range at a
        // given depth.
        f.ranges.sort_by_key(|r| (r.depth, r.range.begin));
        Ok(f)
    }

    fn parse_children(
        &mut self,
        units: &Units<'a>,
        unit: gimli::UnitRef<'_, R<'a>>,
        entries: &mut gimli::EntriesRaw<'_, '_, R<'a>>,
        depth: isize,
        inlined_depth: usize,
    ) -> Result<(), gimli::Error> {
        loop {
            let next_depth = entries.next_depth();
            if next_depth <= depth {
                return Ok(());
            }
            let Some(abbrev) = entries.read_abbreviation()? else {
                continue;
            };
            match abbrev.tag() {
                gimli::DW_TAG_subprogram => {
                    entries.skip_attributes(abbrev.attributes())?;
                    while entries.next_depth() > next_depth {
                        if let Some(a) = entries.read_abbreviation()? {
                            entries.skip_attributes(a.attributes())?;
                        }
                    }
                }
                gimli::DW_TAG_inlined_subroutine => {
                    let mut attrs = RangeAttributes::default();
                    let mut call = InlinedCall {
                        name: None,
                        call_file: None,
                        call_line: 0,
                        call_column: 0,
                    };
                    for spec in abbrev.attributes() {
                        let attr = entries.read_attribute(*spec)?;
                        if attrs.read(unit, &attr)? {
                            continue;
                        }
                        match attr.name() {
                            gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                                if let Ok(v) = unit.attr_string(attr.value()) {
                                    call.name = Some(v);
                                }
                            }
                            gimli::DW_AT_name if call.name.is_none() => {
                                call.name = unit.attr_string(attr.value()).ok();
                            }
                            gimli::DW_AT_abstract_origin | gimli::DW_AT_specification
                                if call.name.is_none() =>
                            {
                                call.name = name_of(units, unit, attr.value(), 16)?;
                            }
                            gimli::DW_AT_call_file => {
                                // DWARF 5 numbers files from 0; before, 0 means none.
                                if let gimli::AttributeValue::FileIndex(i) = attr.value() {
                                    if i > 0 || unit.header.version() >= 5 {
                                        call.call_file = Some(i);
                                    }
                                }
                            }
                            gimli::DW_AT_call_line => {
                                call.call_line = attr.udata_value().unwrap_or(0) as u32;
                            }
                            gimli::DW_AT_call_column => {
                                call.call_column = attr.udata_value().unwrap_or(0) as u32;
                            }
                            _ => {}
                        }
                    }
                    let index = self.calls.len();
                    self.calls.push(call);
                    let ranges = &mut self.ranges;
                    attrs.for_each_range(unit, |range| {
                        ranges.push(InlinedRange {
                            range,
                            depth: inlined_depth,
                            call: index,
                        })
                    })?;
                    self.parse_children(units, unit, entries, next_depth, inlined_depth + 1)?;
                }
                _ => entries.skip_attributes(abbrev.attributes())?,
            }
        }
    }

    /// The inlined calls that hold `probe`, outermost first.
    fn inlined_at(&self, probe: u64) -> Vec<&InlinedCall<'a>> {
        let mut found = Vec::new();
        let mut ranges = &self.ranges[..];
        loop {
            let depth = found.len();
            let search = ranges.binary_search_by(|r| {
                if r.depth > depth {
                    Ordering::Greater
                } else if r.depth < depth {
                    Ordering::Less
                } else if r.range.begin > probe {
                    Ordering::Greater
                } else if r.range.end <= probe {
                    Ordering::Less
                } else {
                    Ordering::Equal
                }
            });
            match search {
                Ok(i) => {
                    found.push(&self.calls[ranges[i].call]);
                    ranges = &ranges[i + 1..];
                }
                Err(_) => return found,
            }
        }
    }
}

/// The name of the entry an `DW_AT_abstract_origin` or `DW_AT_specification` points at.
fn name_of<'a>(
    units: &Units<'a>,
    unit: gimli::UnitRef<'_, R<'a>>,
    value: gimli::AttributeValue<R<'a>>,
    limit: usize,
) -> Result<Option<R<'a>>, gimli::Error> {
    if limit == 0 {
        return Ok(None);
    }
    match value {
        gimli::AttributeValue::UnitRef(o) => name_at(units, unit, o, limit),
        gimli::AttributeValue::DebugInfoRef(o) => {
            let (other, at) = units.unit_at(o)?;
            name_at(units, gimli::UnitRef::new(unit.dwarf, other), at, limit)
        }
        // No supplementary file is loaded.
        _ => Ok(None),
    }
}

fn name_at<'a>(
    units: &Units<'a>,
    unit: gimli::UnitRef<'_, R<'a>>,
    at: UnitOffset,
    limit: usize,
) -> Result<Option<R<'a>>, gimli::Error> {
    let mut entries = unit.entries_raw(Some(at))?;
    let abbrev = entries
        .read_abbreviation()?
        .ok_or(gimli::Error::NoEntryAtGivenOffset)?;
    let mut name = None;
    let mut next = None;
    for spec in abbrev.attributes() {
        let attr = entries.read_attribute(*spec)?;
        match attr.name() {
            gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                if let Ok(v) = unit.attr_string(attr.value()) {
                    return Ok(Some(v));
                }
            }
            gimli::DW_AT_name => {
                if let Ok(v) = unit.attr_string(attr.value()) {
                    name = Some(v);
                }
            }
            gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => next = Some(attr.value()),
            _ => {}
        }
    }
    if name.is_some() {
        return Ok(name);
    }
    match next {
        Some(n) => name_of(units, unit, n, limit - 1),
        None => Ok(None),
    }
}

#[derive(Clone)]
struct Location {
    file: Option<String>,
    line: Option<u32>,
    column: Option<u32>,
}

struct Row {
    address: u64,
    file: u64,
    line: u32,
    column: u32,
}

/// One run of a unit's line program for a set of addresses.
struct LinePass {
    /// The unit's files, rendered as addr2line renders them.
    files: Vec<String>,
    /// Every sequence, sorted by start: (start, end, index into `rows` when it holds a probe).
    sequences: Vec<(u64, u64, Option<usize>)>,
    rows: Vec<Vec<Row>>,
    /// Per probe, its row: (index into `rows`, row).
    found: Vec<Option<(usize, usize)>>,
}

impl LinePass {
    /// `None` when the unit has no line program.
    fn run(unit: gimli::UnitRef<'_, R<'_>>, probes: &[u64]) -> Result<Option<Self>, gimli::Error> {
        let Some(program) = unit.line_program.clone() else {
            return Ok(None);
        };
        let mut sequences = Vec::new();
        let mut kept: Vec<Vec<Row>> = Vec::new();
        let mut current: Vec<Row> = Vec::new();
        // The probes no finished sequence holds, sorted. Once the sequence being read holds
        // them all and its rows are past the last of them, the rest of the program cannot
        // change their rows (addresses only grow within a sequence, and sequences do not
        // overlap): the run stops there, which for a few addresses near the start of a large
        // unit is most of the program left unread.
        let mut waiting: Vec<u64> = probes.to_vec();
        let mut rows = program.rows();
        while let Some((_, row)) = rows.next_row()? {
            if row.end_sequence() {
                if let Some(start) = current.first().map(|r| r.address) {
                    let end = row.address();
                    let i = probes.partition_point(|&p| p < start);
                    let holds = probes.get(i).is_some_and(|&p| p < end);
                    let index = if holds {
                        let from = waiting.partition_point(|&p| p < start);
                        let to = waiting.partition_point(|&p| p < end).max(from);
                        waiting.drain(from..to);
                        kept.push(mem::take(&mut current));
                        Some(kept.len() - 1)
                    } else {
                        current.clear();
                        None
                    };
                    sequences.push((start, end, index));
                    if waiting.is_empty() && !probes.is_empty() {
                        break;
                    }
                }
                continue;
            }
            let address = row.address();
            if let (Some(start), Some(&first), Some(&last)) = (
                current.first().map(|r| r.address),
                waiting.first(),
                waiting.last(),
            ) {
                if start <= first && last < address {
                    kept.push(mem::take(&mut current));
                    sequences.push((start, address, Some(kept.len() - 1)));
                    break;
                }
            }
            let file = row.file_index();
            let line = row.line().map_or(0, NonZeroU64::get) as u32;
            let column = match row.column() {
                gimli::ColumnType::LeftEdge => 0,
                gimli::ColumnType::Column(c) => c.get() as u32,
            };
            // A later row at the same address replaces the earlier one.
            if let Some(last) = current.last_mut().filter(|l| l.address == address) {
                last.file = file;
                last.line = line;
                last.column = column;
                continue;
            }
            current.push(Row {
                address,
                file,
                line,
                column,
            });
        }
        sequences.sort_by_key(|s| s.0);

        let header = rows.header();
        let mut files = Vec::new();
        match header.file(0) {
            Some(f) => files.push(render_file(unit, f, header)?),
            // Before DWARF 5 there may be no file 0.
            None => files.push(String::new()),
        }
        let mut index = 1;
        while let Some(f) = header.file(index) {
            files.push(render_file(unit, f, header)?);
            index += 1;
        }

        let found = probes
            .iter()
            .map(|&p| {
                let s = sequences
                    .binary_search_by(|&(start, end, _)| {
                        if p < start {
                            Ordering::Greater
                        } else if p >= end {
                            Ordering::Less
                        } else {
                            Ordering::Equal
                        }
                    })
                    .ok()?;
                let k = sequences[s].2?;
                let row = match kept[k].binary_search_by(|r| r.address.cmp(&p)) {
                    Ok(i) => i,
                    Err(0) => return None,
                    Err(i) => i - 1,
                };
                Some((k, row))
            })
            .collect();
        Ok(Some(Self {
            files,
            sequences,
            rows: kept,
            found,
        }))
    }

    /// The location of probe `k` (an index into the probes the pass ran for).
    fn location(&self, k: usize) -> Option<Location> {
        let (s, r) = self.found.get(k).copied().flatten()?;
        let row = &self.rows[s][r];
        let known = row.line != 0;
        Some(Location {
            file: self.files.get(row.file as usize).cloned(),
            line: known.then_some(row.line),
            // With a line, column 0 is the left edge; without, the column means nothing.
            column: known.then_some(row.column),
        })
    }
}

fn render_file<'a>(
    unit: gimli::UnitRef<'_, R<'a>>,
    file: &gimli::FileEntry<R<'a>, usize>,
    header: &gimli::LineProgramHeader<R<'a>, usize>,
) -> Result<String, gimli::Error> {
    let mut path = match &unit.comp_dir {
        Some(dir) => dir.to_string_lossy().into_owned(),
        None => String::new(),
    };
    // Directory 0 is the compilation directory.
    if file.directory_index() != 0 {
        if let Some(dir) = file.directory(header) {
            path_push(&mut path, &unit.attr_string(dir)?.to_string_lossy());
        }
    }
    path_push(
        &mut path,
        &unit.attr_string(file.path_name())?.to_string_lossy(),
    );
    Ok(path)
}

fn path_push(path: &mut String, p: &str) {
    let forward_root = |s: &str| s.starts_with('/') || s.get(1..3) == Some(":/");
    let backward_root = |s: &str| s.starts_with('\\') || s.get(1..3) == Some(":\\");
    if forward_root(p) || backward_root(p) {
        *path = p.to_string();
    } else {
        let separator = if backward_root(path) { '\\' } else { '/' };
        if !path.is_empty() && !path.ends_with(separator) {
            path.push(separator);
        }
        path.push_str(p);
    }
}
