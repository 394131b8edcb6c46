//! Property tests of the format: any event sequence round-trips bit-exactly, and no corruption
//! or truncation of a valid trace makes the reader panic, hang, or invent events.

use foresight_trace::event::{AtomicOp, Event, EventKind, LockMode, MemoryOrder, WaitOutcome};
use foresight_trace::tables::{EndReason, Header, Ordering, Trailer};
use foresight_trace::{CompressMode, Trace, TraceWriter};
use proptest::prelude::*;

fn mode() -> impl Strategy<Value = LockMode> {
    prop_oneof![Just(LockMode::Exclusive), Just(LockMode::Shared)]
}

fn order() -> impl Strategy<Value = MemoryOrder> {
    (0u8..6).prop_map(|v| MemoryOrder::from_u8(v).unwrap())
}

fn atomic_op() -> impl Strategy<Value = AtomicOp> {
    prop_oneof![
        Just(AtomicOp::Load),
        Just(AtomicOp::Store),
        Just(AtomicOp::Rmw),
        Just(AtomicOp::CasSuccess),
        Just(AtomicOp::CasFailure)
    ]
}

/// Small ids most of the time (the common case), any value sometimes (the edges).
fn id() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..200, 1 => any::<u32>()]
}

fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![3 => (0x1000u64..0x1100).prop_map(|a| a * 8), 1 => any::<u64>()]
}

fn size() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(1u32),
        Just(2),
        Just(4),
        Just(8),
        Just(16),
        any::<u32>()
    ]
}

fn kind() -> impl Strategy<Value = EventKind> {
    use EventKind::*;
    prop_oneof![
        Just(ThreadStart),
        Just(ThreadExit),
        (id(), id()).prop_map(|(child, site)| ThreadCreate { child, site }),
        (id(), id()).prop_map(|(child, site)| JoinRequest { child, site }),
        (id(), any::<bool>()).prop_map(|(child, joined)| JoinEnd { child, joined }),
        (id(), id()).prop_map(|(child, site)| ThreadDetach { child, site }),
        (id(), id()).prop_map(|(child_pid, site)| Fork { child_pid, site }),
        id().prop_map(|site| Exec { site }),
        (id(), mode(), id()).prop_map(|(lock, mode, site)| LockRequest { lock, mode, site }),
        (id(), mode()).prop_map(|(lock, mode)| LockAcquired { lock, mode }),
        (id(), any::<u32>()).prop_map(|(lock, errno)| LockFailed { lock, errno }),
        (id(), mode(), id(), any::<bool>()).prop_map(|(lock, mode, site, acquired)| LockTry {
            lock,
            mode,
            site,
            acquired
        }),
        (id(), id()).prop_map(|(lock, site)| LockRelease { lock, site }),
        (id(), id()).prop_map(|(object, site)| ObjectInit { object, site }),
        (id(), id()).prop_map(|(object, site)| ObjectDestroy { object, site }),
        (id(), id(), id()).prop_map(|(cond, mutex, site)| CondWaitBegin { cond, mutex, site }),
        (id(), id(), any::<bool>()).prop_map(|(cond, mutex, t)| CondWaitEnd {
            cond,
            mutex,
            outcome: if t {
                WaitOutcome::TimedOut
            } else {
                WaitOutcome::Woken
            }
        }),
        (id(), id()).prop_map(|(cond, site)| CondSignal { cond, site }),
        (id(), id()).prop_map(|(cond, site)| CondBroadcast { cond, site }),
        (id(), id(), id()).prop_map(|(barrier, count, site)| BarrierInit {
            barrier,
            count,
            site
        }),
        (id(), id(), proptest::option::of(any::<u64>())).prop_map(|(barrier, site, generation)| {
            BarrierWaitBegin {
                barrier,
                site,
                generation,
            }
        }),
        (id(), any::<u64>(), any::<bool>()).prop_map(|(barrier, generation, serial)| {
            BarrierWaitEnd {
                barrier,
                generation,
                serial,
            }
        }),
        (id(), id()).prop_map(|(once, site)| OnceBegin { once, site }),
        id().prop_map(|once| OnceRun { once }),
        id().prop_map(|once| OnceEnd { once }),
        id().prop_map(|once| OnceSkip { once }),
        (id(), id(), id()).prop_map(|(sem, value, site)| SemInit { sem, value, site }),
        (id(), id()).prop_map(|(sem, site)| SemPost { sem, site }),
        (id(), id()).prop_map(|(sem, site)| SemWaitBegin { sem, site }),
        (id(), any::<bool>()).prop_map(|(sem, acquired)| SemWaitEnd { sem, acquired }),
        (id(), id(), any::<bool>()).prop_map(|(sem, site, acquired)| SemTry {
            sem,
            site,
            acquired
        }),
        (addr(), size(), id()).prop_map(|(addr, size, site)| Read { addr, size, site }),
        (addr(), size(), id()).prop_map(|(addr, size, site)| Write { addr, size, site }),
        (atomic_op(), addr(), size(), order(), id()).prop_map(|(op, addr, size, order, site)| {
            Atomic {
                op,
                addr,
                size,
                order,
                site,
            }
        }),
        (order(), id()).prop_map(|(order, site)| Fence { order, site }),
        (addr(), any::<u64>(), id()).prop_map(|(addr, size, site)| Alloc { addr, size, site }),
        (addr(), id()).prop_map(|(addr, site)| Free { addr, site }),
        (id(), id()).prop_map(|(lock, name)| LockClassName { lock, name }),
        (id(), id()).prop_map(|(lock, subclass)| LockSubclass { lock, subclass }),
        (id(), id()).prop_map(|(lock, rank)| LockRank { lock, rank }),
        (any::<u64>(), id()).prop_map(|(tag, site)| HappensBefore { tag, site }),
        (any::<u64>(), id()).prop_map(|(tag, site)| HappensAfter { tag, site }),
    ]
}

/// Events of one thread with non-decreasing keys: most keep the previous key or step a little,
/// some jump far.
fn thread_events() -> impl Strategy<Value = Vec<Event>> {
    let step = prop_oneof![3 => Just(0u64), 3 => 1u64..4, 1 => 0u64..(1 << 40)];
    prop::collection::vec((step, kind()), 0..120).prop_map(|v| {
        let mut key = 0u64;
        v.into_iter()
            .map(|(d, kind)| {
                key = key.saturating_add(d);
                Event { key, kind }
            })
            .collect()
    })
}

fn header() -> Header {
    Header {
        producer: "properties".into(),
        pid: 7,
        parent_pid: 1,
        command: vec!["prog".into(), "arg".into()],
        start_unix_ns: 123,
        ordering: Ordering::GlobalSequence,
        pointer_width: 8,
        stack_depth: 1,
    }
}

fn compress_mode() -> impl Strategy<Value = CompressMode> {
    prop_oneof![
        Just(CompressMode::Never),
        Just(CompressMode::Auto),
        Just(CompressMode::Always),
        Just(CompressMode::Lz4)
    ]
}

fn encode(threads: &[Vec<Event>], chunk_bytes: usize, trailer: bool) -> Vec<u8> {
    encode_with(threads, chunk_bytes, trailer, CompressMode::Never)
}

/// The same, compressing event chunks as `mode` says (a 2.x trace unless `Never`).
fn encode_with(
    threads: &[Vec<Event>],
    chunk_bytes: usize,
    trailer: bool,
    mode: CompressMode,
) -> Vec<u8> {
    let mut w = TraceWriter::with_compression(Vec::new(), &header(), mode).unwrap();
    for (t, evs) in threads.iter().enumerate() {
        w.thread_events(t as u32, evs, chunk_bytes).unwrap();
    }
    if trailer {
        w.finish(Trailer {
            end_unix_ns: 456,
            reason: EndReason::Exit { status: 0 },
            event_chunks: 0,
            events: 0,
            events_lost: 0,
        })
        .unwrap()
    } else {
        w.abandon().unwrap()
    }
}

fn decoded_events(trace: &Trace, threads: usize) -> Vec<Vec<Event>> {
    let mut out = vec![Vec::new(); threads];
    for t in &trace.threads {
        out[t.thread as usize] = t.events.clone();
    }
    out
}

/// Collects each thread's events through `TraceFile::for_each_chunk`, putting chunks back in
/// their order.
fn streamed_events(bytes: &[u8], threads: usize) -> Vec<Vec<Event>> {
    let file = foresight_trace::TraceFile::from_bytes("stream", bytes.to_vec()).unwrap();
    let chunks = std::sync::Mutex::new(Vec::new());
    let problems = file.for_each_chunk(|c| {
        chunks
            .lock()
            .unwrap()
            .push((c.thread, c.sequence, c.events.to_vec()))
    });
    assert!(!problems.iter().any(|p| p.is_damage()), "{problems:?}");
    let mut chunks = chunks.into_inner().unwrap();
    chunks.sort_by_key(|c| (c.0, c.1));
    let mut out = vec![Vec::new(); threads];
    for (t, _, events) in chunks {
        out[t as usize].extend(events);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_event_sequence_round_trips_bit_exactly(
        threads in prop::collection::vec(thread_events(), 1..4),
        chunk_bytes in prop_oneof![Just(64usize), Just(300), Just(1 << 16)],
        mode in compress_mode(),
    ) {
        let bytes = encode_with(&threads, chunk_bytes, true, mode);
        let trace = Trace::from_bytes("prop", bytes.clone()).unwrap();
        prop_assert!(trace.ended_cleanly(), "problems: {:?}", trace.problems);
        prop_assert_eq!(&decoded_events(&trace, threads.len()), &threads);
        prop_assert_eq!(&trace.header, &header());
        let major = if mode == CompressMode::Never { 1 } else { 2 };
        prop_assert_eq!(trace.version.0, major);
        let again = encode_with(&decoded_events(&trace, threads.len()), chunk_bytes, true, mode);
        prop_assert_eq!(&again, &bytes);
        // The streaming path sees the same events, chunk by chunk.
        prop_assert_eq!(&streamed_events(&bytes, threads.len()), &threads);
    }

    #[test]
    fn declared_counts_and_thread_tails_agree_with_decoding(
        threads in prop::collection::vec(thread_events(), 1..4),
        chunk_bytes in prop_oneof![Just(64usize), Just(300), Just(1 << 16)],
        mode in compress_mode(),
        tail in 1usize..4,
    ) {
        // What `foresight record` says of a trace without decoding it: the events the chunk
        // prefixes declare, and a thread's last chunks, which must be the end of its events.
        let bytes = encode_with(&threads, chunk_bytes, true, mode);
        let stream = foresight_trace::stream::TraceStream::from_bytes("tail", bytes).unwrap();
        let all: usize = threads.iter().map(Vec::len).sum();
        prop_assert_eq!(stream.declared_events(), all as u64);
        for (t, events) in threads.iter().enumerate() {
            let last: Vec<Event> = stream.thread_tail(t as u32, tail).collect();
            prop_assert!(last.len() <= events.len());
            prop_assert_eq!(&last[..], &events[events.len() - last.len()..]);
            if !events.is_empty() {
                prop_assert!(!last.is_empty());
            }
            let whole: Vec<Event> = stream.thread_tail(t as u32, usize::MAX).collect();
            prop_assert_eq!(&whole, events);
        }
    }

    #[test]
    fn truncation_yields_a_prefix_of_every_thread(
        threads in prop::collection::vec(thread_events(), 1..3),
        mode in compress_mode(),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = encode_with(&threads, 200, true, mode);
        let at = cut.index(bytes.len()); // always < len
        match Trace::from_bytes("cut", bytes[..at].to_vec()) {
            Err(_) => {} // cut inside the file header: a clear error is the right answer
            Ok(trace) => {
                // The trailer is the last chunk: any cut loses it, and the reader says so.
                prop_assert!(trace.trailer.is_none());
                prop_assert!(!trace.ended_cleanly());
                prop_assert!(trace.problems.iter().any(|p| matches!(p.kind,
                    foresight_trace::ProblemKind::NoTrailer)));
                for t in &trace.threads {
                    let original = &threads[t.thread as usize];
                    prop_assert!(original.starts_with(&t.events),
                        "thread {} decoded events that are not a prefix", t.thread);
                }
            }
        }
    }

    #[test]
    fn corruption_never_panics_and_never_invents_events(
        threads in prop::collection::vec(thread_events(), 1..3),
        mode in compress_mode(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8),
    ) {
        let mut bytes = encode_with(&threads, 200, true, mode);
        for (i, x) in &flips {
            let at = i.index(bytes.len());
            bytes[at] ^= x;
        }
        if let Ok(file) = foresight_trace::TraceFile::from_bytes("flipped", bytes.clone()) {
            let _ = file.for_each_chunk(|_| {});
        }
        if let Ok(trace) = Trace::from_bytes("flipped", bytes) {
            let _ = foresight_trace::ordering::check(&trace);
            let _: Vec<_> = trace.merged().collect();
            // Checksums reject damaged chunks: what survives is whole chunks of the original.
            for t in &trace.threads {
                if let Some(original) = threads.get(t.thread as usize) {
                    let mut rest: &[Event] = original;
                    for ev in &t.events {
                        match rest.iter().position(|o| o == ev) {
                            Some(p) => rest = &rest[p + 1..],
                            None => prop_assert!(false, "event {:?} was invented", ev),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_after_the_header_never_panic(
        tail in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut bytes = encode(&[], 64, false);
        bytes.extend_from_slice(&tail);
        let trace = Trace::from_bytes("noise", bytes).unwrap();
        let _ = foresight_trace::ordering::check(&trace);
    }
}

/// A chunk that declares more events than it holds (with a valid checksum: a writer bug, not
/// line noise) costs only the count: the thread keeps every event, in order, with no gap where
/// the missing ones were reserved.
#[test]
fn a_chunk_declaring_too_many_events_leaves_no_gap() {
    use foresight_trace::frame::{read_chunk_header, write_chunk_header, ChunkKind};
    use foresight_trace::frame::{CHUNK_HEADER_LEN, FILE_PREFIX_LEN};
    let events: Vec<Event> = (1..=60)
        .map(|i| Event {
            key: i,
            kind: EventKind::OnceRun { once: i as u32 % 3 },
        })
        .collect();
    let mut bytes = encode(std::slice::from_ref(&events), 64, true);
    // Find the first events chunk and raise its declared count by 5.
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let mut pos = FILE_PREFIX_LEN + hlen;
    loop {
        let h = read_chunk_header(&bytes[pos..]).unwrap();
        let payload = pos + CHUNK_HEADER_LEN..pos + CHUNK_HEADER_LEN + h.payload_len as usize;
        if h.kind == ChunkKind::Events {
            let count_at = payload.start + 16;
            let declared = u32::from_le_bytes(bytes[count_at..count_at + 4].try_into().unwrap());
            bytes[count_at..count_at + 4].copy_from_slice(&(declared + 5).to_le_bytes());
            let body = bytes[payload.clone()].to_vec();
            write_chunk_header(
                &mut bytes[pos..pos + CHUNK_HEADER_LEN],
                ChunkKind::Events,
                &body,
            );
            break;
        }
        pos = payload.end;
    }
    let trace = Trace::from_bytes("overcount", bytes).unwrap();
    assert_eq!(trace.threads[0].events, events);
    assert!(trace.problems.iter().any(|p| matches!(
        p.kind,
        foresight_trace::ProblemKind::EventCountMismatch { .. }
    )));
}

/// One step of a producer: an ordinary event, or a lock taken without waiting, written with
/// `ChunkWriter::push_lock_immediate` (lock, mode, site).
#[derive(Clone, Debug)]
enum Step {
    Event(EventKind),
    Immediate(u32, LockMode, u32),
}

fn producer_steps() -> impl Strategy<Value = Vec<(u64, Step)>> {
    let step = prop_oneof![3 => Just(0u64), 3 => 1u64..4, 1 => 0u64..(1 << 40)];
    let s = prop_oneof![
        2 => kind().prop_map(Step::Event),
        1 => (id(), mode(), id()).prop_map(|(l, m, s)| Step::Immediate(l, m, s)),
    ];
    prop::collection::vec((step, s), 0..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The lock-immediate shorthand reads back as exactly a lock-request at the previous key
    /// followed by a lock-acquired at its own key, through both readers, across chunk
    /// boundaries, with the chunk's declared count matching.
    #[test]
    fn lock_immediate_reads_back_as_request_then_acquired(
        steps in producer_steps(),
        chunk_bytes in prop_oneof![Just(64usize), Just(300), Just(1 << 16)],
    ) {
        let mut w = TraceWriter::new(Vec::new(), &header()).unwrap();
        let mut cw = foresight_trace::ChunkWriter::new(0, chunk_bytes);
        let mut want = Vec::new();
        let mut key = 0u64;
        for (d, step) in steps {
            if cw.is_full() {
                w.write_chunk(&mut cw).unwrap();
            }
            let previous = key;
            key = key.saturating_add(d);
            match step {
                Step::Event(kind) => {
                    let ev = Event { key, kind };
                    cw.push(&ev).unwrap();
                    want.push(ev);
                }
                Step::Immediate(lock, mode, site) => {
                    cw.push_lock_immediate(lock, mode, site, key).unwrap();
                    want.push(Event { key: previous, kind: EventKind::LockRequest { lock, mode, site } });
                    want.push(Event { key, kind: EventKind::LockAcquired { lock, mode } });
                }
            }
        }
        w.write_chunk(&mut cw).unwrap();
        let bytes = w
            .finish(Trailer {
                end_unix_ns: 1,
                reason: EndReason::Exit { status: 0 },
                event_chunks: 0,
                events: 0,
                events_lost: 0,
            })
            .unwrap();
        let trace = Trace::from_bytes("immediate", bytes.clone()).unwrap();
        prop_assert!(trace.ended_cleanly(), "problems: {:?}", trace.problems);
        let want = vec![want];
        prop_assert_eq!(&decoded_events(&trace, 1), &want);
        prop_assert_eq!(&streamed_events(&bytes, 1), &want);
    }
}

/// A command line longer than the reader's header limit (Linux allows 2 MiB of arguments)
/// still gives a trace that opens: the writer shortens the command and says so.
#[test]
fn a_huge_command_line_is_shortened_not_fatal() {
    let mut h = header();
    h.command = vec!["prog".into(), "x".repeat(700 << 10), "y".repeat(700 << 10)];
    let w = TraceWriter::new(Vec::new(), &h).unwrap();
    let bytes = w.abandon().unwrap();
    let trace = Trace::from_bytes("huge-command", bytes).expect("the header fits");
    let cmd = &trace.header.command;
    assert_eq!(cmd[0], "prog");
    assert!(
        cmd.last().unwrap().contains("command shortened"),
        "{:?}",
        cmd.last()
    );
    assert!(cmd.iter().map(String::len).sum::<usize>() < 1 << 20);
}

/// What the streaming reader gives for `bytes`: every merged event and, once it is exhausted,
/// every problem.
fn streamed_merged(
    stream: &foresight_trace::stream::TraceStream,
) -> (
    Vec<foresight_trace::stream::StreamEvent>,
    Vec<foresight_trace::Problem>,
) {
    let mut it = stream.merged();
    let events: Vec<_> = it.by_ref().collect();
    assert!(it.next().is_none(), "an exhausted stream stays exhausted");
    (events, it.problems())
}

/// The merged order with the ordering check, one event at a time: the events and, once
/// exhausted, the problems.
fn checked_merged(
    stream: &foresight_trace::stream::TraceStream,
) -> (
    Vec<foresight_trace::stream::StreamEvent>,
    Vec<foresight_trace::Problem>,
) {
    let mut it = stream.merged().with_ordering_check();
    let events: Vec<_> = it.by_ref().collect();
    (events, it.problems())
}

/// The same, read a run at a time (`next_run`), mixed with single events when `mix` says so.
fn run_merged(
    stream: &foresight_trace::stream::TraceStream,
    mix: bool,
) -> (
    Vec<foresight_trace::stream::StreamEvent>,
    Vec<foresight_trace::Problem>,
) {
    let mut it = stream.merged().with_ordering_check();
    let mut events = Vec::new();
    for turn in 1.. {
        if mix && turn % 3 == 0 {
            match it.next() {
                Some(e) => events.push(e),
                None => break,
            }
            continue;
        }
        let Some(run) = it.next_run() else { break };
        assert!(!run.events.is_empty(), "a run has events");
        for (i, e) in run.events.iter().enumerate() {
            events.push(foresight_trace::stream::StreamEvent {
                thread: run.thread,
                index: run.first_index + i,
                event: *e,
                chunk_offset: run.chunk_offset,
            });
        }
    }
    assert!(
        it.next_run().is_none() && it.next().is_none(),
        "exhausted stays exhausted"
    );
    (events, it.problems())
}

/// A thread that joins itself is reported when it has events after the join, and not when the
/// join is its last event; a run that ends with such a join knows which only once the thread
/// has been read further.
#[test]
fn runs_report_a_self_join_as_single_events_do() {
    let ev = |key, kind| Event { key, kind };
    let join_self = EventKind::JoinEnd {
        child: 0,
        joined: true,
    };
    let read = |addr| EventKind::Read {
        addr,
        size: 4,
        site: 0,
    };
    for more_after in [false, true] {
        let mut t0 = vec![ev(5, join_self)];
        if more_after {
            t0.push(ev(10, read(0x10)));
        }
        let t1 = vec![ev(7, read(0x20))];
        let bytes = encode(&[t0, t1], 1 << 16, true);
        let stream = foresight_trace::stream::TraceStream::from_bytes("self", bytes).unwrap();
        let checked = checked_merged(&stream);
        let reported = checked
            .1
            .iter()
            .any(|p| p.to_string().contains("joins thread 0 before it finished"));
        assert_eq!(reported, more_after, "{:?}", checked.1);
        for mix in [false, true] {
            assert_eq!(run_merged(&stream, mix), checked);
        }
    }
}

/// The decoding reader's merged order, in the streaming reader's terms.
fn decoded_merged(trace: &Trace) -> Vec<foresight_trace::stream::StreamEvent> {
    let owned: Vec<_> = trace.merged_owned().collect();
    let by_hand: Vec<_> = trace
        .merged()
        .map(|m| foresight_trace::stream::StreamEvent {
            thread: m.thread,
            index: m.index,
            event: *m.event,
            chunk_offset: trace.thread(m.thread).unwrap().offset_of(m.index),
        })
        .collect();
    assert_eq!(owned, by_hand);
    owned
}

/// A file of its own for each case, removed when the case ends.
struct TempTrace(std::path::PathBuf);

impl TempTrace {
    fn new(bytes: &[u8]) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!("foresight-props-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.trace", NEXT.fetch_add(1, Relaxed)));
        std::fs::write(&path, bytes).unwrap();
        TempTrace(path)
    }
}

impl Drop for TempTrace {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The streaming reader gives the decoding reader's merged order, event for event (thread,
    /// index, event, chunk), and the same problems, from memory and from a file.
    #[test]
    fn streaming_merged_order_is_the_decoded_merged_order(
        threads in prop::collection::vec(thread_events(), 0..5),
        chunk_bytes in prop_oneof![Just(64usize), Just(300), Just(1 << 16)],
        trailer in any::<bool>(),
        mode in compress_mode(),
    ) {
        let bytes = encode_with(&threads, chunk_bytes, trailer, mode);
        let trace = Trace::from_bytes("prop", bytes.clone()).unwrap();
        let want = decoded_merged(&trace);
        let stream = foresight_trace::stream::TraceStream::from_bytes("prop", bytes.clone()).unwrap();
        let mut it = stream.merged();
        let events: Vec<_> = it.by_ref().collect();
        prop_assert_eq!(&events, &want);
        let outcome = it.outcome();
        prop_assert_eq!(&outcome.problems, &trace.problems);
        // What the pass learnt of each thread is what the decoded trace says.
        let summaries: Vec<_> = trace
            .threads
            .iter()
            .map(|t| foresight_trace::stream::ThreadSummary {
                thread: t.thread,
                events: t.events.len() as u64,
                encoded_bytes: t.encoded_bytes,
                stored_bytes: t.stored_bytes,
                compressed_chunks: t.compressed_chunks,
                zstd_chunks: t.zstd_chunks,
                start_ns: t.chunks.first().map_or(0, |c| c.start_ns),
                end_ns: t.chunks.last().map_or(0, |c| c.end_ns),
            })
            .collect();
        prop_assert_eq!(&outcome.threads, &summaries);
        prop_assert_eq!(stream.chunk_count(), trace.chunk_count);
        prop_assert_eq!(stream.table_chunk_count(), trace.table_chunk_count);
        // Runs give the same events and the same problems, ordering breaks included.
        let checked = checked_merged(&stream);
        prop_assert_eq!(&checked.0, &want);
        for mix in [false, true] {
            prop_assert_eq!(&run_merged(&stream, mix), &checked);
        }
        prop_assert_eq!(stream.file_len(), trace.file_len);
        let file = TempTrace::new(&bytes);
        let stream = foresight_trace::stream::TraceStream::open(&file.0).unwrap();
        let (events, problems) = streamed_merged(&stream);
        prop_assert_eq!(&events, &want);
        prop_assert_eq!(&problems, &trace.problems);
        // One thread at a time, too.
        for t in &trace.threads {
            let mut one = stream.thread_events(t.thread);
            let got: Vec<Event> = one.by_ref().collect();
            prop_assert_eq!(&got, &t.events);
            prop_assert!(one.next().is_none());
        }
    }

    /// A cut anywhere gives, per thread, a prefix of its events; the streaming reader says the
    /// trace was cut short and agrees with the decoding reader on the events and problems.
    #[test]
    fn streaming_a_truncated_trace_yields_a_prefix_and_says_it_was_cut_short(
        threads in prop::collection::vec(thread_events(), 1..4),
        mode in compress_mode(),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = encode_with(&threads, 200, true, mode);
        let at = cut.index(bytes.len());
        let cut_bytes = bytes[..at].to_vec();
        let decoded = Trace::from_bytes("cut", cut_bytes.clone());
        let file = TempTrace::new(&cut_bytes);
        match foresight_trace::stream::TraceStream::open(&file.0) {
            Err(e) => prop_assert!(decoded.is_err(), "only a cut header is an error: {e}"),
            Ok(stream) => {
                let trace = decoded.unwrap();
                let (events, problems) = streamed_merged(&stream);
                prop_assert!(problems.iter().any(|p| matches!(p.kind,
                    foresight_trace::ProblemKind::NoTrailer)));
                let mut per_thread = vec![Vec::new(); threads.len()];
                for e in &events {
                    prop_assert_eq!(e.index, per_thread[e.thread as usize].len());
                    per_thread[e.thread as usize].push(e.event);
                }
                for (t, got) in per_thread.iter().enumerate() {
                    prop_assert!(threads[t].starts_with(got), "thread {} is not a prefix", t);
                }
                prop_assert_eq!(&events, &decoded_merged(&trace));
                prop_assert_eq!(&problems, &trace.problems);
            }
        }
    }

    /// Damage never makes the streaming reader panic or invent events: what it gives of a
    /// thread is a subsequence of what was written.
    #[test]
    fn streaming_a_corrupted_trace_never_panics_and_never_invents_events(
        threads in prop::collection::vec(thread_events(), 1..3),
        mode in compress_mode(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8),
    ) {
        let mut bytes = encode_with(&threads, 200, true, mode);
        for (i, x) in &flips {
            let at = i.index(bytes.len());
            bytes[at] ^= x;
        }
        let decoded = Trace::from_bytes("flipped", bytes.clone());
        match foresight_trace::stream::TraceStream::from_bytes("flipped", bytes) {
            Err(_) => prop_assert!(decoded.is_err()),
            Ok(stream) => {
                prop_assert!(decoded.is_ok());
                let mut it = stream.merged().with_ordering_check();
                let mut rest: Vec<&[Event]> = threads.iter().map(|t| &t[..]).collect();
                for e in it.by_ref() {
                    if let Some(r) = rest.get_mut(e.thread as usize) {
                        match r.iter().position(|o| *o == e.event) {
                            Some(p) => *r = &r[p + 1..],
                            None => prop_assert!(false, "event {:?} was invented", e.event),
                        }
                    }
                }
                let _ = it.problems();
                let checked = checked_merged(&stream);
                prop_assert_eq!(&run_merged(&stream, true), &checked);
                prop_assert_eq!(&run_merged(&stream, false), &checked);
            }
        }
    }
}
