//! `foresight stats`: what a trace holds, how big it is, and whether it ended cleanly.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use foldhash::{HashMap, HashMapExt};

use foresight_trace::event::{Category, ObjectId};
use foresight_trace::stream::ThreadSummary;
use foresight_trace::tables::Tables;
use foresight_trace::tables::{EndReason, Ordering};
use foresight_trace::{Problem, TraceStream};

use super::dump::thread_label;
use super::output::ignore_broken_pipe;
use super::run_files::{expand, Input};
use foresight_analyzer::report::counted;

#[derive(clap::Args)]
#[command(after_long_help = "\
A run's trace PATH brings the rest of the run (PATH.<pid>[.<n>]) with it, and a pack stands for \
its traces: each trace gets its own statistics, after an overview of the run (busiest first), \
and a packed trace says how much smaller it is in the pack.")]
pub struct Args {
    /// The trace files, runs or packs.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Read only the traces named, not the rest of their run.
    #[arg(long)]
    root_only: bool,
    /// How many locks and sites to list (the busiest first).
    #[arg(long, default_value_t = 10, value_name = "N")]
    top: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let inputs = expand(&args.traces, args.root_only)?;
    let mut out = foresight_analyzer::escape::Escaping::new(std::io::BufWriter::new(
        std::io::stdout().lock(),
    ));
    let mut packs_shown = HashSet::new();
    for p in &args.traces {
        if super::run_files::starts_with(p, &super::pack_file::PACK_MAGIC) && packs_shown.insert(p)
        {
            ignore_broken_pipe(write_pack(&mut out, p))?;
        }
    }
    let mut all = Vec::new();
    for input in &inputs {
        let stream = input.open_stream()?;
        let counts = count(&stream);
        all.push((input, stream, counts));
    }
    if all.len() > 1 {
        ignore_broken_pipe(write_overview(&mut out, &all))?;
    }
    for (i, (input, stream, counts)) in all.iter().enumerate() {
        if i > 0 {
            ignore_broken_pipe(writeln!(out))?;
        }
        ignore_broken_pipe(write_stats(&mut out, &input.name, stream, counts, args.top))?;
        if let Some((packed, size)) = input.packed_sizes() {
            ignore_broken_pipe(writeln!(
                out,
                "packed     {packed} bytes in the pack for {size} ({})",
                super::pack::ratio(size, packed)
            ))?;
        }
    }
    ignore_broken_pipe(out.flush())?;
    Ok(ExitCode::SUCCESS)
}

/// A pack's manifest in a few lines: its traces, their sizes and the compression ratio.
fn write_pack(out: &mut impl Write, path: &std::path::Path) -> std::io::Result<()> {
    let pack = match super::pack_file::Pack::open(path) {
        Ok(p) => p,
        // `expand` opened it already; it cannot fail now but for a race with a writer.
        Err(e) => return writeln!(out, "pack       {}: {e:#}", path.display()),
    };
    let m = &pack.manifest;
    let raw: u64 = m.traces.iter().map(|t| t.size).sum();
    let packed: u64 = m.traces.iter().map(|t| t.packed_size).sum();
    writeln!(
        out,
        "pack       {}: {} ({}), {} bytes for {raw} bytes of traces ({}, zstd level {})",
        path.display(),
        counted(m.traces.len(), "trace", "traces"),
        m.producer,
        pack.file_len,
        super::pack::ratio(raw, pack.file_len),
        m.level
    )?;
    writeln!(
        out,
        "           traces alone: {packed} bytes ({})",
        super::pack::ratio(raw, packed)
    )?;
    writeln!(out)
}

/// The run's traces, busiest first: which process, how many events and threads.
fn write_overview(
    out: &mut impl Write,
    all: &[(&Input, TraceStream, Counts)],
) -> std::io::Result<()> {
    let mut order: Vec<usize> = (0..all.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(all[i].2.events));
    writeln!(out, "run        {} traces, busiest first:", all.len())?;
    let width = all.iter().map(|a| a.0.name.len()).max().unwrap_or(0);
    for i in order {
        let (input, stream, counts) = &all[i];
        let h = stream.header();
        writeln!(
            out,
            "  {:<width$}  {:>10} events  {:>12}  pid {:<7} {}",
            input.name,
            counts.events,
            counted(
                counts.threads.len().max(stream.tables().threads.len()),
                "thread",
                "threads"
            ),
            h.pid,
            h.command.join(" ")
        )?;
    }
    writeln!(out)
}

/// What one streaming pass over the events counts.
struct Counts {
    events: u64,
    by_kind: BTreeMap<&'static str, u64>,
    lock_use: HashMap<ObjectId, u64>,
    /// Uses of each site, by what the events do: synchronisation, memory accesses, the heap.
    site_use: HashMap<u32, u64>,
    access_use: HashMap<u32, u64>,
    heap_use: HashMap<u32, u64>,
    /// Sites some event names.
    sites_seen: usize,
    /// Bytes allocated.
    heap_bytes: u64,
    /// Threads with events, by id.
    threads: Vec<ThreadSummary>,
    /// Every problem, the ordering invariant's breaks included, by offset.
    problems: Vec<Problem>,
}

/// Reads every event once, in the merged order (which the ordering check needs), in memory
/// bounded by the number of threads.
fn count(stream: &TraceStream) -> Counts {
    // Kinds by where their name lies (and its length) while counting: a name is a string to
    // compare. By name after.
    let mut by_name_at: HashMap<(usize, usize), (&'static str, u64)> = HashMap::new();
    let mut lock_use: HashMap<ObjectId, u64> = HashMap::new();
    let mut site_use: HashMap<u32, u64> = HashMap::new();
    let mut access_use: HashMap<u32, u64> = HashMap::new();
    let mut heap_use: HashMap<u32, u64> = HashMap::new();
    let mut heap_bytes = 0u64;
    let mut merged = stream.merged().with_ordering_check();
    for m in merged.by_ref() {
        let ev = m.event;
        let name = ev.kind.name();
        by_name_at
            .entry((name.as_ptr() as usize, name.len()))
            .or_insert((name, 0))
            .1 += 1;
        if let foresight_trace::EventKind::LockRequest { lock, .. }
        | foresight_trace::EventKind::LockTry { lock, .. } = ev.kind
        {
            *lock_use.entry(lock).or_default() += 1;
        }
        if let foresight_trace::EventKind::Alloc { size, .. } = ev.kind {
            heap_bytes = heap_bytes.saturating_add(size);
        }
        if let Some(s) = ev.kind.site() {
            // Busiest sites by what they do: synchronisation, memory accesses, the heap.
            let map = match ev.kind.category() {
                Category::Memory => &mut access_use,
                Category::Allocation => &mut heap_use,
                _ => &mut site_use,
            };
            *map.entry(s).or_default() += 1;
        }
    }
    let outcome = merged.outcome();
    let mut by_kind: BTreeMap<&'static str, u64> = BTreeMap::new();
    for (name, n) in by_name_at.into_values() {
        *by_kind.entry(name).or_default() += n;
    }
    // Every site an event names is counted in one of the three.
    let sites_seen = site_use
        .keys()
        .chain(access_use.keys())
        .chain(heap_use.keys())
        .collect::<foldhash::HashSet<_>>()
        .len();
    Counts {
        events: outcome.events,
        by_kind,
        lock_use,
        site_use,
        access_use,
        heap_use,
        sites_seen,
        heap_bytes,
        threads: outcome.threads,
        problems: outcome.problems,
    }
}

fn write_stats(
    out: &mut impl Write,
    name: &str,
    stream: &TraceStream,
    counts: &Counts,
    top: usize,
) -> std::io::Result<()> {
    let h = stream.header();
    let tables = stream.tables();
    let events = counts.events;
    // The name the user gave (an STD file is read through a temporary trace).
    writeln!(out, "trace      {name}")?;
    let (major, minor) = stream.version();
    writeln!(out, "format     {major}.{minor} ({})", h.producer)?;
    if !h.command.is_empty() {
        writeln!(out, "command    {} (pid {})", h.command.join(" "), h.pid)?;
    }
    let ordering = match h.ordering {
        Ordering::GlobalSequence => "global sequence".to_string(),
        Ordering::Clock { ticks_per_second } => format!("shared clock, {ticks_per_second} ticks/s"),
        Ordering::Logical => "logical (Lamport) clocks".to_string(),
    };
    writeln!(out, "ordering   {ordering}")?;

    // Ended cleanly?
    let damaged = counts.problems.iter().any(Problem::is_damage);
    match (stream.trailer(), damaged) {
        (Some(t), false) => {
            let how = match t.reason {
                EndReason::Exit { status } => format!("exit status {status}"),
                EndReason::ImmediateExit { status } => format!("_exit status {status}"),
                EndReason::Signal { signal } => format!("signal {signal}"),
                EndReason::Synthetic => "written by a tool".to_string(),
            };
            writeln!(out, "ended      cleanly ({how})")?;
            if t.events_lost > 0 {
                writeln!(
                    out,
                    "lost       {} events the recorder could not write",
                    t.events_lost
                )?;
            }
        }
        (None, _) if stream.tables().snapshot_signal().is_some() => writeln!(
            out,
            "ended      not: a snapshot taken on {} while the process ran (record --dump-on); \
             {} read",
            foresight_analyzer::report::signal_name(
                stream.tables().snapshot_signal().unwrap_or(0) as i32
            ),
            counted(stream.chunk_count(), "chunk was", "chunks were")
        )?,
        (None, _) => writeln!(
            out,
            "ended      CUT SHORT: no trailer; {} read",
            counted(
                stream.chunk_count(),
                "complete chunk was",
                "complete chunks were"
            )
        )?,
        (Some(_), true) => writeln!(
            out,
            "ended      with a trailer, but chunks are damaged or missing"
        )?,
    }
    if let Some(stop) = stream.tables().recording_stopped {
        writeln!(
            out,
            "stopped    {}",
            super::record::stop_cause(stop.cause, None)
        )?;
    }
    if let Some(w) = super::record::window_summary(stream.tables()) {
        writeln!(out, "window     {w}")?;
    }
    if let Some(d) = duration_ns(stream, &counts.threads) {
        writeln!(out, "duration   {:.3} s", d as f64 / 1e9)?;
    }
    let event_bytes: u64 = counts.threads.iter().map(|t| t.encoded_bytes).sum();
    writeln!(
        out,
        "size       {} bytes in {} ({}); events take {} bytes, {:.2} bytes/event",
        stream.file_len(),
        counted(stream.chunk_count(), "chunk", "chunks"),
        counted(stream.table_chunk_count(), "table chunk", "table chunks"),
        event_bytes,
        if events > 0 {
            event_bytes as f64 / events as f64
        } else {
            0.0
        }
    )?;
    write_compression(out, stream, &counts.threads)?;
    writeln!(out)?;

    writeln!(out, "events     {events}")?;
    for (kind, n) in &counts.by_kind {
        writeln!(out, "  {kind:<22} {n:>12}")?;
    }
    writeln!(out)?;
    write_accesses(out, tables, &counts.by_kind, &counts.access_use, top)?;
    write_heap(out, tables, counts, top)?;

    writeln!(
        out,
        "threads    {}",
        counts.threads.len().max(tables.threads.len())
    )?;
    for t in &counts.threads {
        let info = tables.threads.get(&t.thread);
        let parent = info
            .and_then(|i| i.parent)
            .map(|p| format!(", created by T{p}"))
            .unwrap_or_default();
        let tid = info
            .map(|i| format!(", tid {}", i.os_tid))
            .unwrap_or_default();
        writeln!(
            out,
            "  {:<20} {:>12} events{tid}{parent}",
            thread_label(tables, t.thread),
            t.events
        )?;
    }
    writeln!(out)?;

    let locks: Vec<_> = tables
        .objects
        .values()
        .filter(|o| o.kind.is_lock())
        .collect();
    let others = tables.objects.len() - locks.len();
    writeln!(
        out,
        "locks      {} ({} other synchronisation objects)",
        locks.len(),
        others
    )?;
    let mut busiest: Vec<_> = locks
        .iter()
        .map(|o| (counts.lock_use.get(&o.id).copied().unwrap_or(0), o))
        .collect();
    busiest.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    for (n, o) in busiest.iter().take(top) {
        let class = match &o.class {
            foresight_trace::tables::ClassKey::Static(f) => {
                format!("static {}", tables.describe_frame(f))
            }
            foresight_trace::tables::ClassKey::InitSite(s) => {
                format!("initialised at {}", tables.describe_site(*s))
            }
            foresight_trace::tables::ClassKey::FirstUse(s) => {
                format!("first used at {}", tables.describe_site(*s))
            }
        };
        writeln!(
            out,
            "  {:<20} {:>12} acquisitions  {} at {:#x}, {class}",
            tables.describe_object(o.id),
            n,
            o.kind.name(),
            o.address
        )?;
    }
    writeln!(out)?;

    let symbolised = tables.sites.values().filter(|s| {
        s.frames
            .first()
            .is_some_and(|f| tables.symbols.contains_key(f))
    });
    writeln!(
        out,
        "sites      {} ({} used by events, {} symbolised); the busiest for synchronisation:",
        tables.sites.len(),
        counts.sites_seen,
        symbolised.count()
    )?;
    let mut busiest_sites: Vec<_> = counts.site_use.iter().map(|(s, n)| (*s, *n)).collect();
    busiest_sites.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (s, n) in busiest_sites.iter().take(top) {
        writeln!(out, "  {:>12}  {}", n, tables.describe_site(*s))?;
    }

    if !counts.problems.is_empty() {
        writeln!(out)?;
        writeln!(out, "problems   {}", counts.problems.len())?;
        for p in counts.problems.iter().take(50) {
            writeln!(out, "  {p}")?;
        }
    }
    Ok(())
}

/// Memory accesses: how many the program executed and how many the recorder kept (it drops an
/// access that repeats one of the same epoch, FORMAT.md §7.8), per thread.
fn write_accesses(
    out: &mut impl Write,
    tables: &Tables,
    by_kind: &BTreeMap<&'static str, u64>,
    site_use: &HashMap<u32, u64>,
    top: usize,
) -> std::io::Result<()> {
    let n = |k: &str| by_kind.get(k).copied().unwrap_or(0);
    let in_trace = n("read") + n("write");
    let counts = &tables.access_counts;
    if in_trace == 0 && counts.is_empty() {
        return Ok(());
    }
    let executed: u64 = counts.iter().map(|c| c.executed).sum();
    let recorded: u64 = counts.iter().map(|c| c.recorded).sum();
    writeln!(
        out,
        "accesses   {in_trace} in the trace ({} reads, {} writes)",
        n("read"),
        n("write")
    )?;
    if counts.is_empty() {
        writeln!(
            out,
            "  executed             unknown (the trace has no access counts: cut short?)"
        )?;
    } else {
        writeln!(out, "  executed             {executed:>12}")?;
        writeln!(
            out,
            "  recorded             {recorded:>12}  ({} of executed; repeats within an epoch dropped)",
            percent(recorded, executed)
        )?;
        for c in counts.iter() {
            writeln!(
                out,
                "  {:<20} {:>12} executed, {:>12} recorded ({})",
                thread_label(tables, c.thread),
                c.executed,
                c.recorded,
                percent(c.recorded, c.executed)
            )?;
        }
    }
    write_busiest(
        out,
        tables,
        "busiest access sites (recorded)",
        site_use,
        top,
    )?;
    writeln!(out)?;
    Ok(())
}

/// Heap blocks allocated and freed, and where.
fn write_heap(
    out: &mut impl Write,
    tables: &Tables,
    counts: &Counts,
    top: usize,
) -> std::io::Result<()> {
    let n = |k: &str| counts.by_kind.get(k).copied().unwrap_or(0);
    if n("alloc") + n("free") == 0 {
        return Ok(());
    }
    writeln!(
        out,
        "heap       {} allocated ({} bytes), {} freed",
        counted(n("alloc"), "block", "blocks"),
        counts.heap_bytes,
        n("free")
    )?;
    write_busiest(
        out,
        tables,
        "busiest allocation and free sites",
        &counts.heap_use,
        top,
    )?;
    writeln!(out)?;
    Ok(())
}

fn write_busiest(
    out: &mut impl Write,
    tables: &Tables,
    title: &str,
    site_use: &HashMap<u32, u64>,
    top: usize,
) -> std::io::Result<()> {
    if site_use.is_empty() || top == 0 {
        return Ok(());
    }
    writeln!(out, "  {title}")?;
    let mut busiest: Vec<_> = site_use.iter().map(|(s, n)| (*s, *n)).collect();
    busiest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (s, n) in busiest.iter().take(top) {
        writeln!(out, "  {:>12}  {}", n, tables.describe_site(*s))?;
    }
    Ok(())
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

fn duration_ns(stream: &TraceStream, threads: &[ThreadSummary]) -> Option<u64> {
    let start = Some(stream.header().start_unix_ns)
        .filter(|&s| s > 0)
        .or_else(|| threads.iter().map(|t| t.start_ns).filter(|&s| s > 0).min())?;
    let end = stream
        .trailer()
        .map(|t| t.end_unix_ns)
        .filter(|&e| e > 0)
        .or_else(|| threads.iter().map(|t| t.end_ns).max())?;
    end.checked_sub(start)
}

/// How the event chunks are stored: on disk against decoded (FORMAT.md §5.3). A 1.x trace
/// cannot hold compressed chunks and says nothing.
fn write_compression(
    out: &mut impl Write,
    stream: &TraceStream,
    threads: &[ThreadSummary],
) -> std::io::Result<()> {
    let (major, _) = stream.version();
    if major < foresight_trace::frame::VERSION_MAJOR_FEATURES {
        return Ok(());
    }
    let decoded: u64 = threads.iter().map(|t| t.encoded_bytes).sum();
    let stored: u64 = threads.iter().map(|t| t.stored_bytes).sum();
    let compressed: u64 = threads.iter().map(|t| t.compressed_chunks as u64).sum();
    let zstd: u64 = threads.iter().map(|t| t.zstd_chunks as u64).sum();
    let codecs = match (zstd, compressed - zstd) {
        (0, 0) => "no codec used".to_string(),
        (_, 0) => "zstd".to_string(),
        (0, _) => "LZ4".to_string(),
        (z, l) => format!("{z} zstd, {l} LZ4"),
    };
    let chunks = stream
        .chunk_count()
        .saturating_sub(stream.table_chunk_count() + stream.trailer().is_some() as usize);
    let events: u64 = threads.iter().map(|t| t.events).sum();
    writeln!(
        out,
        "compressed {compressed} of {} ({codecs}); events take {stored} bytes on disk for {decoded} \
         decoded, ratio {:.1}x, {:.3} bytes/event on disk",
        counted(chunks, "event chunk", "event chunks"),
        if stored > 0 {
            decoded as f64 / stored as f64
        } else {
            1.0
        },
        if events > 0 {
            stored as f64 / events as f64
        } else {
            0.0
        }
    )
}
