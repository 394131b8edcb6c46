//! Races whose witness reverses critical sections on a lock (rule `sync-reversal`).
//!
//! Sync-preserving prediction (`analyses/races`) keeps every pair of critical sections on one
//! lock in its recorded order. The simplest race it cannot see: thread A writes `x` inside a
//! critical section on `m`; thread B, later, takes `m` for a moment and then reads `x` outside
//! it. Lock hand-off orders the two accesses in the run, and keeping the sections' order keeps
//! them ordered; running B's section first leaves both enabled. This analysis looks for such
//! reorderings among the race pass's candidates (pairs on one address, at least one a write,
//! not both atomic, that only lock hand-offs order and that hold no common lock) which the
//! sync-preserving check left unreported. The idea follows optimistic sync-reversal prediction
//! (Shi, Mathur and Pavlogiannis, ICSE 2024): close the events the two accesses need under
//! thread order, reads-from and the synchronisation no reordering may change, let the critical
//! sections the accesses sit in come *last* on their locks, and check that the result is a
//! correct reordering. Here the reordering is built and checked, not assumed:
//!
//! 1. **Closure.** S starts with every event before either access; thread order and the
//!    run's clocks (create/join, barriers, once, semaphores, conditions, annotations,
//!    release/acquire atomics, reads-from: `hb.rs` with `EdgeKinds::DEADLOCK`, never lock
//!    hand-off) pull in what they need; a critical section of another thread open at S's edge
//!    on a lock other threads take is completed (its release pulled in). The sections open at
//!    the two accesses stay open.
//! 2. **Reversal.** A section open at an access whose lock has a conflicting section in S
//!    that came *later* in the run is reversed: the access's thread, from that section's
//!    acquisition on (its *tail* T), is run after the rest of S. Sections on a monitor lock
//!    (a condition's mutex, whose state decides what a thread does next and is not always
//!    recorded) are never reversed.
//! 3. **Check.** The schedule is S without T in trace order, then T in trace order, then the
//!    two accesses. It is accepted only if (a) nothing in S without T depends, by the clocks,
//!    on an event of T; (b) every lock is free when the schedule takes it (the sections of
//!    each lock, in schedule order, each released before the next conflicting one is taken);
//!    (c) no read can see another write: the events moved ahead of T (L: those of S without T
//!    that the clocks do not order before T's start) write no byte that T reads — the only
//!    pairs whose order changes are one event of T and one of L, and only a read of T or a
//!    write of L can change what a read returns (a read of L that saw a write of T is a
//!    reads-from edge, refused by (a)). `model/marks.rs` says where reads and writes are and
//!    which bytes they touch; past the bytes it keeps, L writes nothing or T reads nothing; (d) neither T nor L holds an event whose outcome depended on timing (a
//!    failed trylock, a timed-out wait).
//!
//! Every finding therefore has a correct reordering of the recorded run — each read keeping
//! its writer, each lock free when taken, all other synchronisation kept — in which both
//! accesses are enabled; it is the witness the report carries. What is lost is completeness:
//! a reordering that needs sections reversed elsewhere than where the accesses sit, or whose
//! moved events write what the tail reads, is not found. The search is bounded: per part, the
//! candidate budget the race predictor has and [`STEP_BUDGET`] steps of closure; the summary
//! counts the pairs it left unchecked (`reversal_unchecked`).

use foldhash::{HashMap, HashMapExt};

use crate::analyses::races::{describe_address, finding, line_key, verb, LineKey};
use crate::closure::{Budget, PatternEvent};
use crate::model::Run;
use crate::races::Pair;
use crate::report::{Finding, Kind, Message, Rule, Witness};
use crate::stream::Mode;

/// Closure steps (receives and acquisitions visited, sections checked) one part may spend on
/// the search; a candidate that would need more is left unchecked, and counted.
pub const STEP_BUDGET: u64 = 1 << 26;

/// Schedule lines a witness shows before the two accesses (the last ones).
const SCHEDULE_LINES: usize = 24;

/// Races found by reversing critical sections: an analysis of the registry.
pub struct SyncReversal;

impl super::Analysis for SyncReversal {
    fn name(&self) -> &'static str {
        "sync-reversal"
    }

    fn analyze(
        &self,
        part: &super::Part,
        budgets: &mut super::Budgets,
        summary: &mut crate::report::Summary,
        out: &mut super::Output,
    ) {
        for run in part.runs {
            // Lines the other race rules already report for this run.
            let reported: Vec<LineKey> = out
                .findings
                .iter()
                .filter(|f| f.kind == Kind::Race)
                .filter_map(finding_lines)
                .collect();
            let (findings, asked, unchecked) =
                reversal_findings(run, &reported, &mut budgets.reversal);
            summary.reversal_candidates += asked;
            summary.reversal_unchecked += unchecked;
            out.findings.extend(findings);
        }
    }
}

/// The two lines of a race finding, as `line_key` makes them (`file:line`, or the site's
/// text when it has no line).
fn finding_lines(f: &Finding) -> Option<LineKey> {
    let Message::Race { accesses, .. } = &f.message else {
        return None;
    };
    let line = |i: usize| match f.locations.get(i).map(|l| (&l.file, l.line)) {
        Some((Some(file), Some(n))) if n > 0 => format!("{file}:{n}"),
        _ => accesses[i].at.clone(),
    };
    let (a, b) = (line(0), line(1));
    Some(if a <= b { (a, b) } else { (b, a) })
}

/// The race findings of one run that need a reversal: (findings, pairs of lines asked about,
/// pairs left unchecked for want of budget).
pub(crate) fn reversal_findings(
    run: &Run,
    reported: &[LineKey],
    budget: &mut Budget,
) -> (Vec<Finding>, usize, usize) {
    let out = &run.races;
    let mut findings = Vec::new();
    let (mut asked, mut unchecked) = (0, 0);
    if !out.complete || !run.hb.complete {
        return (findings, asked, unchecked);
    }
    let mut found: Vec<LineKey> = Vec::new();
    for c in &out.candidates {
        let key = line_key(run, &c.instances[0]);
        if reported.contains(&key) || found.contains(&key) {
            continue;
        }
        asked += 1;
        let mut decided = true;
        for pair in c.kept() {
            if budget.steps_left == 0 || !budget.take() {
                budget.exhausted = true;
                decided = false;
                break;
            }
            match reversal(run, pair, budget.steps_left) {
                Ok((reordering, steps)) => {
                    budget.steps_left = budget.steps_left.saturating_sub(steps);
                    let witness = witness(run, pair, &reordering);
                    findings.push(finding(
                        run,
                        out,
                        pair,
                        c.count,
                        Rule::SyncReversal,
                        reason(run, &reordering),
                        Some(witness),
                    ));
                    found.push(key.clone());
                    break;
                }
                Err(Refused { steps, cut }) => {
                    budget.steps_left = budget.steps_left.saturating_sub(steps);
                    if cut {
                        budget.exhausted = true;
                        decided = false;
                        break;
                    }
                }
            }
        }
        if !decided {
            unchecked += 1;
        }
    }
    (findings, asked, unchecked)
}

/// A reordering found: the closure, each access's tail and the sections reversed.
#[derive(Debug)]
pub(crate) struct Reordering {
    /// Per thread, the events of S (a prefix length).
    pub frontier: Vec<u32>,
    /// The two accesses.
    pub pattern: [PatternEvent; 2],
    /// Per access, where its thread's tail starts (`None`: no tail, nothing reversed there).
    pub tail: [Option<u32>; 2],
    /// The sections that run before a tail although they came after it in the run
    /// (acquisition indices), and the tail's sections they overtake.
    pub reversed: Vec<(u32, u32)>,
}

/// Why no reordering was found, and what the attempt cost.
#[derive(Debug)]
pub(crate) struct Refused {
    pub steps: u64,
    /// The step budget ran out: undecided.
    pub cut: bool,
}

/// One section of S for the lock check: where its acquisition and release fall.
#[derive(Clone, Copy, Debug)]
struct Section {
    thread: u32,
    seq: u64,
    write: bool,
    /// Block of the acquisition (0: S without the tails, 1: the tails).
    acquired_in: u8,
    /// Block of the release, `None` when it is not in S.
    released_in: Option<u8>,
}

impl Section {
    /// Whether `self`, scheduled before `next`, is released before `next` takes the lock.
    fn released_before(&self, next: &Section) -> bool {
        match self.released_in {
            None => false,
            Some(r) => r < next.acquired_in || (r == next.acquired_in && self.seq < next.seq),
        }
    }
}

/// Looks for a reordering in which both accesses of `pair` are enabled, reversing the
/// critical sections they sit in; at most `max_steps` steps.
pub(crate) fn reversal(
    run: &Run,
    pair: &Pair,
    max_steps: u64,
) -> Result<(Reordering, u64), Refused> {
    let pattern = [
        PatternEvent {
            thread: pair[0].access.thread,
            pos: pair[0].access.pos,
        },
        PatternEvent {
            thread: pair[1].access.thread,
            pos: pair[1].access.pos,
        },
    ];
    let mut steps = 0u64;
    let refuse = |steps: u64| Refused { steps, cut: false };
    if pattern[0].thread == pattern[1].thread {
        return Err(refuse(steps));
    }
    let n = run.threads.len();
    let mut frontier: Vec<u32> = (0..n as u32).map(|t| run.start_of(t)).collect();
    let mut limit = vec![u32::MAX; n];
    for p in pattern {
        let t = p.thread as usize;
        if t >= n || run.start_of(p.thread) > p.pos || frontier[t] > p.pos {
            return Err(refuse(steps));
        }
        frontier[t] = p.pos;
        limit[t] = p.pos;
    }
    // 1. The closure: receives and open sections, each visited once.
    let mut receive_cursor = vec![0usize; n];
    let mut acquisition_cursor = vec![0usize; n];
    let mut clock_buf = crate::hb::DecodedClock::default();
    loop {
        let mut moved = false;
        for t in 0..n {
            while let Some((pos, clock)) = run.hb.receive(t, receive_cursor[t], &mut clock_buf) {
                if pos >= frontier[t] {
                    break;
                }
                steps += 1;
                for (u, v) in run.hb.known(clock) {
                    if u != t && v > frontier[u] {
                        if v > limit[u] {
                            return Err(refuse(steps));
                        }
                        frontier[u] = v;
                        moved = true;
                    }
                }
                receive_cursor[t] += 1;
            }
            let acquisitions = run.thread_acquisitions(t);
            while let Some(&a) = acquisitions.get(acquisition_cursor[t]) {
                let acq = &run.acquisitions[a as usize];
                if acq.acquired >= frontier[t] {
                    break;
                }
                steps += 1;
                acquisition_cursor[t] += 1;
                let open = acq.release.is_none_or(|r| r >= frontier[t]);
                let shared = run.lock_threads[acq.lock as usize].len() >= 2;
                if !open || !shared || limit[t] != u32::MAX {
                    continue;
                }
                // Another thread's section left open on a lock others take: completed.
                match acq.release {
                    Some(r) if r < limit[t] => {
                        frontier[t] = r + 1;
                        moved = true;
                    }
                    _ => return Err(refuse(steps)),
                }
            }
        }
        if steps > max_steps {
            return Err(Refused { steps, cut: true });
        }
        if !moved {
            break;
        }
    }
    // 2. The reversals: per access, the open sections some later conflicting section of S
    // must overtake.
    let in_s = |t: u32, pos: u32| pos < frontier[t as usize];
    let mut tail: [Option<u32>; 2] = [None, None];
    let mut reversed: Vec<(u32, u32)> = Vec::new();
    for (i, p) in pattern.iter().enumerate() {
        for &h in run.thread_acquisitions(p.thread as usize) {
            let held = &run.acquisitions[h as usize];
            if held.acquired >= p.pos {
                break;
            }
            if held.release.is_some_and(|r| r < p.pos) {
                continue;
            }
            for &u in &run.lock_threads[held.lock as usize] {
                if u == p.thread {
                    continue;
                }
                for &a in run.pair_acquisitions_of(u, held.lock) {
                    let other = &run.acquisitions[a as usize];
                    steps += 1;
                    if !in_s(u, other.acquired) {
                        break;
                    }
                    let conflicting = held.mode == Mode::Write || other.mode == Mode::Write;
                    if other.seq > held.seq && conflicting {
                        if run.locks[held.lock as usize].monitor {
                            return Err(refuse(steps));
                        }
                        reversed.push((a, h));
                        tail[i] = Some(tail[i].map_or(held.acquired, |s| s.min(held.acquired)));
                    }
                }
            }
        }
    }
    if reversed.is_empty() {
        // Nothing to reverse: the sync-preserving check decides such pairs.
        return Err(refuse(steps));
    }
    let tails: Vec<(u32, u32, u32)> = pattern
        .iter()
        .zip(tail)
        .filter_map(|(p, s)| s.map(|s| (p.thread, s, p.pos)))
        .collect();
    if tails.iter().any(|&(t, s, _)| s < run.start_of(t)) {
        // A section open since an earlier segment: what ran before the segment stays as it
        // ran.
        return Err(refuse(steps));
    }
    // The end of each thread's part of S without the tails.
    let head_end = |t: u32| -> u32 {
        tails
            .iter()
            .find(|(u, _, _)| *u == t)
            .map_or(frontier[t as usize], |&(_, s, _)| s)
    };
    // 3a. Nothing outside the tails depends on them.
    for t in 0..n as u32 {
        let end = head_end(t);
        if end <= run.start_of(t) {
            continue;
        }
        steps += 1;
        let Some(clock) = run.hb.receive_before(t as usize, end - 1, &mut clock_buf) else {
            continue;
        };
        if tails
            .iter()
            .any(|&(u, s, _)| u != t && run.hb.prefix(clock, u as usize) > s)
        {
            return Err(refuse(steps));
        }
    }
    // 3b. Every lock free when taken, in schedule order.
    let block = |t: u32, pos: u32| -> u8 {
        u8::from(
            tails
                .iter()
                .any(|&(u, s, end)| u == t && pos >= s && pos < end),
        )
    };
    let mut by_lock: HashMap<u32, Vec<Section>> = HashMap::new();
    for t in 0..n as u32 {
        for &a in run.thread_acquisitions(t as usize) {
            let acq = &run.acquisitions[a as usize];
            if !in_s(t, acq.acquired) {
                break;
            }
            steps += 1;
            let released_in = acq.release.filter(|&r| in_s(t, r)).map(|r| block(t, r));
            by_lock.entry(acq.lock).or_default().push(Section {
                thread: t,
                seq: acq.seq,
                write: acq.mode == Mode::Write,
                acquired_in: block(t, acq.acquired),
                released_in,
            });
        }
    }
    if steps > max_steps {
        return Err(Refused { steps, cut: true });
    }
    let mut locks: Vec<(u32, Vec<Section>)> = by_lock.into_iter().collect();
    locks.sort_unstable_by_key(|(l, _)| *l);
    for (_, mut sections) in locks {
        sections.sort_unstable_by_key(|s| (s.acquired_in, s.seq, s.thread));
        let mut writer: Option<Section> = None;
        let mut readers: Vec<Section> = Vec::new();
        for s in sections {
            if writer.is_some_and(|w| !w.released_before(&s)) {
                return Err(refuse(steps));
            }
            if s.write {
                if readers.iter().any(|r| !r.released_before(&s)) {
                    return Err(refuse(steps));
                }
                readers.clear();
                writer = Some(s);
            } else {
                readers.push(s);
            }
        }
    }
    // 3c, 3d. No read sees another write; no outcome that depended on timing is moved.
    let marks = run.marks.get();
    for &(t, s, end) in &tails {
        if marks.fragile_in(t, s, end) {
            return Err(refuse(steps));
        }
    }
    let known: Vec<Vec<u32>> = tails
        .iter()
        .filter_map(|&(t, s, _)| {
            run.hb
                .receive_before(t as usize, s.saturating_sub(1), &mut clock_buf)
                .map(<[u32]>::to_vec)
        })
        .collect();
    let every_tail_knows = known.len() == tails.len();
    for t in 0..n as u32 {
        if tails.iter().any(|&(u, _, _)| u == t) && tails.len() == 1 {
            // The only tail's own thread: its events before the tail stay before it.
            continue;
        }
        // Events the clocks order before every tail's start stay where they were.
        let ordered = if every_tail_knows {
            known
                .iter()
                .map(|c| run.hb.prefix(c, t as usize))
                .min()
                .unwrap_or(0)
        } else {
            0
        };
        let from = ordered.max(run.start_of(t));
        let end = head_end(t);
        steps += 1;
        if marks.fragile_in(t, from, end) || marks.may_read_written(&tails, (t, from, end)) {
            return Err(refuse(steps));
        }
    }
    Ok((
        Reordering {
            frontier,
            pattern,
            tail,
            reversed,
        },
        steps,
    ))
}

/// Why the finding is a race, in its reader's terms.
fn reason(run: &Run, r: &Reordering) -> String {
    let (moved, held) = r.reversed[0];
    let (moved, held) = (
        &run.acquisitions[moved as usize],
        &run.acquisitions[held as usize],
    );
    format!(
        "only a lock hand-off orders the two accesses: {} took {} first in the recorded run. \
         Running {}'s critical section on it first instead keeps every read's writer (what \
         moves ahead writes nothing that is read after it moved) and all other \
         synchronisation, and leaves both accesses enabled at once. Sync-preserving \
         prediction keeps the sections in their recorded order and cannot see this",
        run.thread_label(held.thread),
        run.locks[held.lock as usize].name,
        run.thread_label(moved.thread),
    )
}

/// The witness: each thread's prefix, the lock operations in the order the reordering runs
/// them (the sections moved ahead marked), then the two accesses.
fn witness(run: &Run, pair: &Pair, r: &Reordering) -> Witness {
    let tail_of = |t: u32| -> Option<u32> {
        r.pattern
            .iter()
            .zip(r.tail)
            .find(|(p, _)| p.thread == t)
            .and_then(|(_, s)| s)
    };
    let (threads, others) = crate::describe::witness_threads(
        run,
        &r.frontier,
        |t| {
            r.pattern
                .iter()
                .zip(pair.iter())
                .find(|(p, _)| p.thread == t)
                .map(|(_, a)| access_text(run, a))
        },
        |t, f| {
            run.thread_acquisitions(t as usize)
                .iter()
                .filter(|&&a| {
                    let a = &run.acquisitions[a as usize];
                    a.acquired < f && a.release.is_none_or(|rel| rel >= f)
                })
                .map(|&a| crate::describe::held_text(run, a))
                .collect()
        },
    );
    // Lock operations of S: the part without the tails in trace order, then the tails.
    let mut ops: Vec<((u8, u64), u32)> = Vec::new();
    for (t, &f) in r.frontier.iter().enumerate() {
        let tail = tail_of(t as u32);
        for &a in run.thread_acquisitions(t) {
            let acq = &run.acquisitions[a as usize];
            if acq.acquired >= f {
                break;
            }
            let in_tail = tail.is_some_and(|s| acq.acquired >= s);
            ops.push(((u8::from(in_tail), acq.seq), a));
        }
    }
    ops.sort_unstable();
    let truncated = ops.len() > SCHEDULE_LINES;
    let mut schedule: Vec<String> = ops[ops.len().saturating_sub(SCHEDULE_LINES)..]
        .iter()
        .map(|&((in_tail, _), a)| {
            let acq = &run.acquisitions[a as usize];
            let f = r.frontier[acq.thread as usize];
            let released = acq.release.is_some_and(|rel| rel < f);
            let note = if let Some(&(_, h)) = r.reversed.iter().find(|(m, _)| *m == a) {
                format!(
                    " (moved ahead of {}'s section at {}, which came first in the run)",
                    run.thread_label(run.acquisitions[h as usize].thread),
                    run.location(run.acquisitions[h as usize].site).text
                )
            } else if in_tail == 1 && r.reversed.iter().any(|(_, h)| *h == a) {
                " (now after the sections moved ahead)".to_string()
            } else {
                String::new()
            };
            format!("{}{note}", crate::describe::schedule_step(run, a, released))
        })
        .collect();
    for (p, a) in r.pattern.iter().zip(pair.iter()) {
        schedule.push(format!(
            "{}: {}",
            run.thread_label(p.thread),
            access_text(run, a)
        ));
    }
    Witness {
        trace: run.source.clone(),
        threads,
        others,
        schedule,
        schedule_truncated: truncated,
    }
}

fn access_text(run: &Run, a: &crate::races::RaceAccess) -> String {
    format!(
        "{}s {} at {}",
        verb(a.access.kind),
        describe_address(a),
        run.location(a.access.site).text
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::build_run;
    use foresight_trace::builder::TraceBuilder;
    use foresight_trace::Trace;

    const X: u64 = 0x10;
    const OTHER: u64 = 0x40;

    /// Thread 1 writes `X` inside a section on one lock; thread 2 then takes the lock, doing
    /// `inside` in its section, and reads `X` outside it. `first_reads` makes thread 1 read
    /// `OTHER` in its section before the write.
    fn shape(first_reads: bool, inside: impl Fn(&mut TraceBuilder, ThreadIdOf, u32)) -> Run {
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let a = b.spawn(main, s, "a");
        let c = b.spawn(main, s, "b");
        let m = b.mutex("m");
        b.lock(a, m, s);
        if first_reads {
            let g = b_site(&mut b, 2);
            b.read(a, OTHER, 4, g);
        }
        let w = b.site("writer", "t.c", 10);
        b.write(a, X, 4, w);
        b.unlock(a, m, s);
        b.lock(c, m, s);
        inside(&mut b, c, 0);
        b.unlock(c, m, s);
        let r = b.site("reader", "t.c", 20);
        b.read(c, X, 4, r);
        let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
        build_run(&trace, &mut |_| {})
    }

    type ThreadIdOf = foresight_trace::ThreadId;

    fn b_site(b: &mut TraceBuilder, line: u32) -> foresight_trace::SiteId {
        b.site("g", "t.c", line)
    }

    fn found(run: &Run) -> (Vec<Finding>, usize, usize) {
        let mut budget = Budget::new(100, STEP_BUDGET);
        reversal_findings(run, &[], &mut budget)
    }

    #[test]
    fn a_later_empty_section_runs_first_and_the_accesses_meet() {
        let run = shape(false, |_, _, _| {});
        assert_eq!(
            run.races.candidates.len(),
            1,
            "lock hand-off orders the pair"
        );
        let (findings, asked, unchecked) = found(&run);
        assert_eq!((findings.len(), asked, unchecked), (1, 1, 0));
        let f = &findings[0];
        assert_eq!(f.rule, Rule::SyncReversal);
        let schedule = &f.witness.as_ref().expect("a witness").schedule;
        assert!(schedule[0].contains("moved ahead"), "{schedule:?}");
        assert!(
            schedule[schedule.len() - 2].contains("writes"),
            "{schedule:?}"
        );
        assert!(
            schedule[schedule.len() - 1].contains("reads"),
            "{schedule:?}"
        );
    }

    #[test]
    fn a_moved_section_may_not_write_what_the_tail_reads() {
        // Thread 2's section writes; thread 1 reads before its write: refused (the read could
        // return thread 2's write once its section runs first).
        let write_other = |b: &mut TraceBuilder, t, _| {
            let s = b.site("g", "t.c", 3);
            b.write(t, OTHER, 4, s);
        };
        assert_eq!(found(&shape(true, write_other)).0.len(), 0);
        // Without the read in thread 1's section, the write moves ahead harmlessly.
        assert_eq!(found(&shape(false, write_other)).0.len(), 1);
        // So it does when it writes other bytes than the ones thread 1 reads.
        let write_next_to_it = |b: &mut TraceBuilder, t, _| {
            let s = b.site("g", "t.c", 3);
            b.write(t, OTHER + 4, 4, s);
        };
        assert_eq!(found(&shape(true, write_next_to_it)).0.len(), 1);
        // A read moved ahead is harmless too.
        let read_other = |b: &mut TraceBuilder, t, _| {
            let s = b.site("g", "t.c", 3);
            b.read(t, OTHER, 4, s);
        };
        assert_eq!(found(&shape(true, read_other)).0.len(), 1);
    }

    #[test]
    fn a_read_whose_writer_is_in_the_overtaken_section_keeps_it_in_order() {
        // Thread 2's section reads what thread 1 wrote after `X` in its section.
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let a = b.spawn(main, s, "a");
        let c = b.spawn(main, s, "b");
        let m = b.mutex("m");
        b.lock(a, m, s);
        let w = b.site("writer", "t.c", 10);
        b.write(a, X, 4, w);
        let f = b.site("writer", "t.c", 11);
        b.write(a, OTHER, 4, f);
        b.unlock(a, m, s);
        b.lock(c, m, s);
        let g = b.site("reader", "t.c", 19);
        b.read(c, OTHER, 4, g);
        b.unlock(c, m, s);
        let r = b.site("reader", "t.c", 20);
        b.read(c, X, 4, r);
        let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
        let run = build_run(&trace, &mut |_| {});
        assert_eq!(found(&run).0.len(), 0);
    }

    #[test]
    fn the_budget_says_what_it_left_unchecked() {
        let run = shape(false, |_, _, _| {});
        let mut budget = Budget::new(100, 0);
        let (findings, asked, unchecked) = reversal_findings(&run, &[], &mut budget);
        assert_eq!((findings.len(), asked, unchecked), (0, 1, 1));
        assert!(budget.exhausted);
    }

    #[test]
    fn pairs_other_rules_reported_are_not_asked_again() {
        let run = shape(false, |_, _, _| {});
        let key = line_key(&run, &run.races.candidates[0].instances[0]);
        let mut budget = Budget::new(100, STEP_BUDGET);
        let (findings, asked, _) = reversal_findings(&run, &[key], &mut budget);
        assert_eq!((findings.len(), asked), (0, 0));
    }
}
