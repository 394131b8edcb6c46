//! foresight trace → STD text, in one streaming pass over the merged order.
//!
//! STD has threads, exclusive re-entrant locks, variables and code regions. What a foresight
//! trace holds beyond that is left out and counted by kind ([`ExportSummary::left_out`]), so
//! that a user comparing tools on the exported file knows which orderings the other tool never
//! saw: condition hand-offs (a wait still releases and re-takes its mutex, which STD says),
//! barriers, once, semaphores, atomics and fences, shared (reader) lock modes, user
//! happens-before annotations. Thread starts and exits are implied by `fork` and `join`; a
//! lock request is implied by its `acq` (`--requests` writes it as a `req` line of its own).
//!
//! Names: a thread by its name, a lock by its static variable, a variable by the data it lies
//! in, a location as `FILE:LINE` or `FUNCTION(FILE:LINE)`; whatever has no unique name that STD
//! can carry (no `|`, no white space, no parentheses in a target) gets one made from its id.
//! The names of an imported trace come back as they were.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, Write};

use foresight_trace::region::{RegionKind, RegionMarker, RegionMarkers};
use foresight_trace::tables::ClassKey;
use foresight_trace::{EventKind, LockMode, ObjectId, SiteId, ThreadId, TraceStream};

use super::parse::Op;

/// What to write beyond the events every STD reader knows.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions {
    /// Write a `req` line for each lock request that has its own place in the trace (a
    /// recorded request, or a `req` line of an imported trace), and for a request never
    /// granted. RAPID does not read `req`; deadlock tools do.
    pub requests: bool,
    /// Write every location as a number, as RAPID's reader needs: the site's id, unless every
    /// location of the trace is a number already (an imported trace's), which is kept.
    pub numeric_locations: bool,
}

/// What an export wrote and left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Lines written, by operation.
    pub lines: u64,
    /// Lines written per operation (`acq`, `r`, …).
    pub by_op: BTreeMap<&'static str, u64>,
    /// Events STD cannot express, by event kind (`foresight dump`'s names).
    pub left_out: BTreeMap<&'static str, u64>,
    /// Threads, locks and variables that were given a made-up name.
    pub renamed: u64,
    /// What the reader met in a damaged trace (the events it could read are written).
    pub problems: Vec<String>,
}

impl ExportSummary {
    /// Events left out, of every kind.
    pub fn left_out_total(&self) -> u64 {
        self.left_out.values().sum()
    }
}

/// STD names for the ids of one trace.
struct Namer<'a> {
    stream: &'a TraceStream,
    threads: HashMap<ThreadId, String>,
    locks: HashMap<ObjectId, String>,
    variables: HashMap<u64, String>,
    sites: HashMap<SiteId, String>,
    used_variable_names: HashSet<String>,
    renamed: u64,
    /// Locations written as site ids.
    site_ids: bool,
}

/// Whether `name` can be an STD target as RAPID reads it: no `|`, no white space, no
/// parentheses, not empty.
fn clean_target(name: &str) -> bool {
    !name.is_empty()
        && !name
            .chars()
            .any(|c| c == '|' || c == '(' || c == ')' || c.is_whitespace())
}

/// Each id's own name where it is a clean STD target that no other id has; else `prefix`
/// and the id, counted in `renamed`.
fn unique_names<K: std::hash::Hash + Eq + std::fmt::Display>(
    names: Vec<(K, Option<String>)>,
    prefix: char,
    renamed: &mut u64,
) -> HashMap<K, String> {
    let mut counts: HashMap<String, u32> = HashMap::new();
    for n in names.iter().filter_map(|(_, n)| n.as_ref()) {
        *counts.entry(n.clone()).or_default() += 1;
    }
    names
        .into_iter()
        .map(|(id, n)| {
            let name = match n {
                Some(n) if clean_target(&n) && counts[&n] == 1 => n,
                _ => {
                    *renamed += 1;
                    format!("{prefix}{id}")
                }
            };
            (id, name)
        })
        .collect()
}

impl<'a> Namer<'a> {
    fn new(stream: &'a TraceStream, numeric_locations: bool) -> Self {
        let tables = stream.tables();
        let mut renamed = 0;
        // Threads and locks are named up front, so that a name two of them share goes to
        // neither.
        let thread_names: Vec<(ThreadId, Option<String>)> = stream
            .threads()
            .chain(tables.threads.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|id| (id, tables.thread_name(id).map(str::to_string)))
            .collect();
        let threads = unique_names(thread_names, 'T', &mut renamed);
        let lock_names: Vec<(ObjectId, Option<String>)> = tables
            .objects
            .iter()
            .filter(|(_, o)| o.kind.is_lock())
            .map(|(&id, o)| {
                let n = match &o.class {
                    ClassKey::Static(frame) => tables
                        .symbols
                        .get(frame)
                        .and_then(|s| s.locations.first())
                        .and_then(|l| l.function)
                        .and_then(|f| tables.string(f))
                        .map(str::to_string),
                    _ => None,
                };
                (id, n)
            })
            .collect();
        let locks = unique_names(lock_names, 'L', &mut renamed);
        Self {
            stream,
            threads,
            locks,
            variables: HashMap::new(),
            sites: HashMap::new(),
            used_variable_names: HashSet::new(),
            renamed,
            site_ids: false,
        }
        .numbering_sites(numeric_locations)
    }

    fn numbering_sites(mut self, numeric: bool) -> Self {
        if numeric {
            let ids: Vec<SiteId> = self.stream.tables().sites.keys().copied().collect();
            let all_numbers = ids.into_iter().all(|id| {
                let text = self.site(id);
                !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
            });
            self.site_ids = !all_numbers;
            self.sites.clear();
        }
        self
    }

    fn thread(&mut self, id: ThreadId) -> &str {
        self.threads.entry(id).or_insert_with(|| format!("T{id}"))
    }

    fn lock(&mut self, id: ObjectId) -> &str {
        self.locks.entry(id).or_insert_with(|| format!("L{id}"))
    }

    fn variable(&mut self, addr: u64, size: u32) -> &str {
        if !self.variables.contains_key(&addr) {
            let tables = self.stream.tables();
            let symbol = tables
                .data_symbol(addr, size.max(1) as u64)
                .map(|s| s.name)
                .filter(|n| clean_target(n) && !self.used_variable_names.contains(n));
            let name = match symbol {
                Some(n) => n,
                None => {
                    if tables.data_symbol(addr, size.max(1) as u64).is_some() {
                        self.renamed += 1;
                    }
                    format!("V{addr:#x}")
                }
            };
            self.used_variable_names.insert(name.clone());
            self.variables.insert(addr, name);
        }
        &self.variables[&addr]
    }

    fn site(&mut self, id: SiteId) -> &str {
        if self.site_ids {
            return self.sites.entry(id).or_insert_with(|| id.to_string());
        }
        if !self.sites.contains_key(&id) {
            let tables = self.stream.tables();
            let text = match tables.site_location(id) {
                Some(loc) => {
                    let function = loc.function.and_then(|f| tables.string(f));
                    let file = loc.file.and_then(|f| tables.string(f));
                    match (function, file) {
                        (Some(f), Some(file)) if loc.line > 0 => {
                            format!("{f}({file}:{})", loc.line)
                        }
                        (None, Some(file)) if loc.line > 0 => format!("{file}:{}", loc.line),
                        (Some(f), _) => f.to_string(),
                        _ => format!("site{id}"),
                    }
                }
                None => format!("site{id}"),
            };
            // A location is the last field: only `|` and line ends would break the line.
            let text = text.replace(['|', '\n', '\r'], "_");
            self.sites.insert(id, text);
        }
        &self.sites[&id]
    }
}

/// Per-thread state of the walk.
#[derive(Default)]
struct ThreadWalk {
    /// The site and key of the lock request waiting for its acquisition.
    request_site: Option<SiteId>,
    /// The key of the thread's previous event.
    last_key: Option<u64>,
    /// The site of the join request waiting for its end.
    join_site: Option<SiteId>,
    /// The site of the condition wait in progress: the mutex is taken again there.
    wait_site: Option<SiteId>,
    /// Locks held, innermost last, and whether in a shared mode (left out, with its release).
    held: Vec<(ObjectId, bool)>,
}

struct Out<'a, W: Write> {
    w: W,
    summary: &'a mut ExportSummary,
}

impl<W: Write> Out<'_, W> {
    #[inline]
    fn line(&mut self, thread: &str, op: Op, target: &str, location: &str) -> io::Result<()> {
        self.summary.lines += 1;
        *self.summary.by_op.entry(op.keyword()).or_default() += 1;
        let w = &mut self.w;
        w.write_all(thread.as_bytes())?;
        w.write_all(b"|")?;
        w.write_all(op.keyword().as_bytes())?;
        if op.has_target() {
            w.write_all(b"(")?;
            w.write_all(target.as_bytes())?;
            w.write_all(b")")?;
        }
        w.write_all(b"|")?;
        w.write_all(location.as_bytes())?;
        w.write_all(b"\n")
    }
}

/// The next region marker of each thread, in the merged order (FORMAT.md §6.6.1): a marker
/// comes before an event when (its key, its thread, its position) is not greater than the
/// event's (key, thread, index).
struct MarkerQueue<'m> {
    markers: Option<&'m mut RegionMarkers>,
    next: BTreeMap<(u64, ThreadId, u64), RegionMarker>,
}

impl<'m> MarkerQueue<'m> {
    fn new(mut markers: Option<&'m mut RegionMarkers>) -> Self {
        let mut next = BTreeMap::new();
        if let Some(m) = markers.as_deref_mut() {
            let threads: Vec<ThreadId> = m.threads().collect();
            for t in threads {
                if let Some(x) = m.take(t) {
                    next.insert((x.key, t, x.position), x);
                }
            }
        }
        Self { markers, next }
    }

    fn write_before<W: Write>(
        &mut self,
        o: &mut Out<'_, W>,
        namer: &mut Namer<'_>,
        walks: &mut HashMap<ThreadId, ThreadWalk>,
        upto: Option<(u64, ThreadId, u64)>,
    ) -> io::Result<()> {
        while let Some((&k, &m)) = self.next.iter().next() {
            if upto.is_some_and(|u| k > u) {
                break;
            }
            self.next.remove(&k);
            let t = k.1;
            let op = match m.kind {
                RegionKind::Begin => Op::Begin,
                RegionKind::End => Op::End,
            };
            let site = namer.site(m.site).to_string();
            o.line(namer.thread(t), op, "", &site)?;
            // A request with the key of a marker before it has no place of its own.
            walks.entry(t).or_default().last_key = Some(m.key);
            if let Some(x) = self.markers.as_deref_mut().and_then(|ms| ms.take(t)) {
                self.next.insert((x.key, t, x.position), x);
            }
        }
        Ok(())
    }
}

/// Writes the STD form of `stream` to `out`.
pub fn export(
    stream: &TraceStream,
    markers: Option<&mut RegionMarkers>,
    out: impl Write,
    opts: ExportOptions,
) -> io::Result<ExportSummary> {
    let mut summary = ExportSummary::default();
    let mut namer = Namer::new(stream, opts.numeric_locations);
    let mut o = Out {
        w: io::BufWriter::with_capacity(1 << 16, out),
        summary: &mut summary,
    };
    let mut walks: HashMap<ThreadId, ThreadWalk> = HashMap::new();
    let mut queue = MarkerQueue::new(markers);
    let mut merged = stream.merged();
    for e in merged.by_ref() {
        let t = e.thread;
        let key = e.event.key;
        if !queue.next.is_empty() {
            queue.write_before(
                &mut o,
                &mut namer,
                &mut walks,
                Some((key, t, e.index as u64)),
            )?;
        }
        let walk = walks.entry(t).or_default();
        let previous_key = walk.last_key.replace(key);
        match e.event.kind {
            EventKind::ThreadStart | EventKind::ThreadExit => {}
            EventKind::ThreadCreate { child, site } => {
                let child = namer.thread(child).to_string();
                let site = namer.site(site).to_string();
                o.line(namer.thread(t), Op::Fork, &child, &site)?;
            }
            EventKind::JoinRequest { site, .. } => walk.join_site = Some(site),
            EventKind::JoinEnd { child, joined } => {
                let site = walk.join_site.take();
                if joined {
                    let child = namer.thread(child).to_string();
                    let site = match site {
                        Some(s) => namer.site(s).to_string(),
                        None => String::new(),
                    };
                    o.line(namer.thread(t), Op::Join, &child, &site)?;
                }
            }
            EventKind::LockRequest { lock, mode, site } => {
                walk.request_site = Some(site);
                let own_place = previous_key.is_none_or(|p| p < key);
                if opts.requests && mode == LockMode::Exclusive && own_place {
                    let lock = namer.lock(lock).to_string();
                    let site = namer.site(site).to_string();
                    o.line(namer.thread(t), Op::Request, &lock, &site)?;
                }
            }
            EventKind::LockAcquired { lock, mode } => {
                let site = walk.request_site.take();
                let shared = mode != LockMode::Exclusive;
                walk.held.push((lock, shared));
                if shared {
                    *o.summary
                        .left_out
                        .entry("lock-acquired (shared)")
                        .or_default() += 1;
                } else {
                    let lock = namer.lock(lock).to_string();
                    let site = match site {
                        Some(s) => namer.site(s).to_string(),
                        None => String::new(),
                    };
                    o.line(namer.thread(t), Op::Acquire, &lock, &site)?;
                }
            }
            EventKind::LockFailed { .. } => walk.request_site = None,
            EventKind::LockTry {
                lock,
                mode,
                site,
                acquired,
            } => {
                if acquired {
                    let shared = mode != LockMode::Exclusive;
                    walk.held.push((lock, shared));
                    if shared {
                        *o.summary.left_out.entry("lock-try (shared)").or_default() += 1;
                    } else {
                        let lock = namer.lock(lock).to_string();
                        let site = namer.site(site).to_string();
                        o.line(namer.thread(t), Op::Acquire, &lock, &site)?;
                    }
                }
            }
            EventKind::LockRelease { lock, site } => {
                let shared = match walk.held.iter().rposition(|&(l, _)| l == lock) {
                    Some(i) => walk.held.remove(i).1,
                    None => false,
                };
                if shared {
                    *o.summary
                        .left_out
                        .entry("lock-release (shared)")
                        .or_default() += 1;
                } else {
                    let lock = namer.lock(lock).to_string();
                    let site = namer.site(site).to_string();
                    o.line(namer.thread(t), Op::Release, &lock, &site)?;
                }
            }
            EventKind::CondWaitBegin { mutex, site, .. } => {
                // The wait releases the mutex: that much STD says.
                *o.summary
                    .left_out
                    .entry("cond-wait (the hand-off)")
                    .or_default() += 1;
                let lock = namer.lock(mutex).to_string();
                walk.request_site = None;
                walk.wait_site = Some(site);
                let site = namer.site(site).to_string();
                o.line(namer.thread(t), Op::Release, &lock, &site)?;
            }
            EventKind::CondWaitEnd { mutex, .. } => {
                let lock = namer.lock(mutex).to_string();
                let site = match walk.wait_site.take() {
                    Some(s) => namer.site(s).to_string(),
                    None => String::new(),
                };
                o.line(namer.thread(t), Op::Acquire, &lock, &site)?;
            }
            EventKind::Read { addr, size, site } | EventKind::Write { addr, size, site } => {
                let op = if matches!(e.event.kind, EventKind::Read { .. }) {
                    Op::Read
                } else {
                    Op::Write
                };
                let var = namer.variable(addr, size).to_string();
                let site = namer.site(site).to_string();
                o.line(namer.thread(t), op, &var, &site)?;
            }
            other => {
                *o.summary.left_out.entry(other.name()).or_default() += 1;
            }
        }
    }
    queue.write_before(&mut o, &mut namer, &mut walks, None)?;
    // A request never granted: the thread was blocked when the trace ended.
    if !opts.requests {
        let blocked = walks.values().filter(|w| w.request_site.is_some()).count();
        if blocked > 0 {
            *o.summary
                .left_out
                .entry("lock-request (never granted)")
                .or_default() += blocked as u64;
        }
    }
    o.w.flush()?;
    drop(o);
    summary.renamed = namer.renamed;
    summary.problems = merged.problems().iter().map(|p| p.to_string()).collect();
    Ok(summary)
}
