//! `foresight dump`: every event, one line each, in the merged causal order.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use foresight_trace::event::{EventKind, MemoryOrder};
use foresight_trace::tables::Tables;

use super::output::{ignore_broken_pipe, warn_problems};
use super::run_files::single;

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
    let input = single(&args.trace, args.member.as_deref())?;
    let stream = input.open_stream()?;
    let tables = stream.tables();
    let mut merged = stream.merged().with_ordering_check();
    let stdout = std::io::stdout();
    let mut out = foresight_analyzer::escape::Escaping::new(std::io::BufWriter::new(stdout.lock()));
    let result = (|| -> std::io::Result<()> {
        writeln!(
            out,
            "{:>8}  {:>10}  {:<14} {:>6}  {:<20} {:<24} site",
            "seq", "key", "thread", "event", "kind", "object"
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
                "{seq:>8}  {:>10}  {thread:<14} {:>6}  {:<20} {:<24} {site}",
                ev.key,
                // The event's position in its thread: what a report's `[event N]` names.
                m.index,
                ev.kind.name(),
                describe_operand(tables, &ev.kind),
            )?;
        }
        out.flush()
    })();
    ignore_broken_pipe(result)?;
    // A packed trace by its member's name; a file by the name given (an STD file is read
    // through a temporary trace).
    let shown = Path::new(&input.name);
    warn_problems(shown, &merged.problems());
    Ok(ExitCode::SUCCESS)
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
        // The call family, as reports and suppressions name it, and how long it may or did
        // block: what a blocking-under-lock finding is about.
        BlockingBegin {
            call, timeout_ns, ..
        } => match timeout_ns {
            Some(ns) => format!("{} timeout={}", call.name(), duration(ns)),
            None => call.name().to_string(),
        },
        BlockingEnd { call, duration_ns } => {
            format!("{} took={}", call.name(), duration(duration_ns))
        }
        SignalEnter { signal } | SignalExit { signal } => format!("signal={signal}"),
        SignalMask { blocked } => format!("blocked={blocked:#x}"),
        // The channel, the descriptor and how much moved: what pairs a read with its writes.
        HandoffWrite {
            channel,
            kind,
            fd,
            amount,
            ..
        }
        | HandoffRead {
            channel,
            kind,
            fd,
            amount,
            ..
        } => format!("{} #{channel} fd={fd} amount={amount}", kind.name()),
        _ => kind
            .object()
            .map(|o| tables.describe_object(o))
            .unwrap_or_default(),
    }
}

/// A duration in the largest unit that keeps it at least 1, as `ms`/`us` a person reads.
fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{:.1}us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
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
