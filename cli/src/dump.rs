//! `foresight dump`: every event, one line each, in the merged causal order.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use foresight_trace::event::{EventKind, MemoryOrder};
use foresight_trace::tables::Tables;
use foresight_trace::TraceStream;

use super::output::{ignore_broken_pipe, open_stream, warn_problems};
use super::pack_file::{Pack, PACK_MAGIC};
use super::run_files::starts_with;

#[derive(clap::Args)]
pub struct Args {
    /// The trace file, or a pack (`foresight pack`): its one trace, or the one `--member` names.
    trace: PathBuf,
    /// In a pack of several traces, the trace to print, by its name in the pack (`foresight
    /// stats PACK` lists them).
    #[arg(long, value_name = "NAME")]
    member: Option<String>,
    /// Only the events of this thread (by foresight's thread number, as `dump` prints it).
    #[arg(long, value_name = "N")]
    thread: Option<u32>,
    /// Stop after this many events.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
}

/// One streaming pass: events are printed as they are read, in memory bounded by the number of
/// threads. With `--limit`, reading stops there too, and the problems reported are those of
/// what was read.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let stream = if starts_with(&args.trace, &PACK_MAGIC) {
        open_member(&args.trace, args.member.as_deref())?
    } else if args.member.is_some() {
        anyhow::bail!(
            "{}: --member picks a trace of a pack, and this is not one",
            args.trace.display()
        );
    } else {
        open_stream(&args.trace)?
    };
    let tables = stream.tables();
    let mut merged = stream.merged().with_ordering_check();
    let stdout = std::io::stdout();
    let mut out = foresight_analyzer::escape::Escaping::new(std::io::BufWriter::new(stdout.lock()));
    let result = (|| -> std::io::Result<()> {
        writeln!(
            out,
            "{:>8}  {:>10}  {:<14} {:<20} {:<24} site",
            "seq", "key", "thread", "event", "object"
        )?;
        let mut n = 0u64;
        for (seq, m) in merged.by_ref().enumerate() {
            if args.thread.is_some_and(|t| t != m.thread) {
                continue;
            }
            if args.limit.is_some_and(|l| n >= l) {
                break;
            }
            n += 1;
            let thread = thread_label(tables, m.thread);
            let ev = m.event;
            let site = ev
                .kind
                .site()
                .map(|s| tables.describe_site(s))
                .unwrap_or_default();
            writeln!(
                out,
                "{seq:>8}  {:>10}  {thread:<14} {:<20} {:<24} {site}",
                ev.key,
                ev.kind.name(),
                describe_operand(tables, &ev.kind),
            )?;
        }
        out.flush()
    })();
    ignore_broken_pipe(result)?;
    // A packed trace by its member's name; a file by the name given (an STD file is read
    // through a temporary trace).
    let shown = if args.member.is_some() || starts_with(&args.trace, &PACK_MAGIC) {
        stream.path()
    } else {
        &args.trace
    };
    warn_problems(shown, &merged.problems());
    Ok(ExitCode::SUCCESS)
}

/// The trace of the pack at `path` that `member` names, or its only one.
fn open_member(path: &Path, member: Option<&str>) -> anyhow::Result<TraceStream> {
    let pack = Pack::open(path)?;
    let names: Vec<&str> = pack
        .manifest
        .traces
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let i = match (member, names.as_slice()) {
        (Some(m), _) => names.iter().position(|&n| n == m).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: no trace named `{m}` in this pack (it holds {})",
                path.display(),
                names.join(", ")
            )
        })?,
        (None, [_]) => 0,
        (None, _) => anyhow::bail!(
            "{}: the pack holds {} traces; name one with --member ({})",
            path.display(),
            names.len(),
            names.join(", ")
        ),
    };
    pack.open_member(i)
}

pub(crate) fn thread_label(tables: &Tables, t: u32) -> String {
    match tables.thread_name(t) {
        Some(name) => format!("T{t} {name}"),
        None => format!("T{t}"),
    }
}

/// What the event acts on: the object, the other thread, the address.
pub(crate) fn describe_operand(tables: &Tables, kind: &EventKind) -> String {
    use EventKind::*;
    match *kind {
        ThreadCreate { child, .. }
        | JoinRequest { child, .. }
        | JoinEnd { child, .. }
        | ThreadDetach { child, .. } => format!("T{child}"),
        Fork { child_pid, .. } => format!("pid {child_pid}"),
        LockFailed { lock, errno } => format!("{} errno={errno}", tables.describe_object(lock)),
        CondWaitBegin { cond, mutex, .. } | CondWaitEnd { cond, mutex, .. } => {
            format!(
                "{} with {}",
                tables.describe_object(cond),
                tables.describe_object(mutex)
            )
        }
        BarrierInit { barrier, count, .. } => {
            format!("{} count={count}", tables.describe_object(barrier))
        }
        BarrierWaitEnd {
            barrier,
            generation,
            serial,
        } => format!(
            "{} gen={generation}{}",
            tables.describe_object(barrier),
            if serial { " serial" } else { "" }
        ),
        SemInit { sem, value, .. } => format!("{} value={value}", tables.describe_object(sem)),
        Read { addr, size, .. } | Write { addr, size, .. } => format!("{addr:#x}/{size}"),
        Atomic {
            addr, size, order, ..
        } => format!("{addr:#x}/{size} {}", order_name(order)),
        Fence { order, .. } => order_name(order).to_string(),
        Alloc { addr, size, .. } => format!("{addr:#x}/{size}"),
        Free { addr, .. } => format!("{addr:#x}"),
        LockClassName { lock, name } => format!(
            "{} \"{}\"",
            tables.describe_object(lock),
            tables.string(name).unwrap_or("?")
        ),
        LockSubclass { lock, subclass } => {
            format!("{} subclass={subclass}", tables.describe_object(lock))
        }
        LockRank { lock, rank } => format!("{} rank={rank}", tables.describe_object(lock)),
        HappensBefore { tag, .. } | HappensAfter { tag, .. } => format!("tag={tag:#x}"),
        _ => kind
            .object()
            .map(|o| tables.describe_object(o))
            .unwrap_or_default(),
    }
}

/// A memory order as C11 spells it.
pub(crate) fn order_name(order: MemoryOrder) -> &'static str {
    match order {
        MemoryOrder::Relaxed => "relaxed",
        MemoryOrder::Consume => "consume",
        MemoryOrder::Acquire => "acquire",
        MemoryOrder::Release => "release",
        MemoryOrder::AcqRel => "acq_rel",
        MemoryOrder::SeqCst => "seq_cst",
    }
}
