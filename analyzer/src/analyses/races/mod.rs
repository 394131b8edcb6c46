//! The race findings of one run, from what its race pass kept (`races/`, in the walk): every
//! happens-before race, then the candidates the sync-preserving closure confirms, each pair of
//! lines reported once, with its witness. Read from the run after the walk.

use crate::closure::{closure_before_within, Budget, NotPredicted, PatternEvent};
use crate::describe;
use crate::model::Run;
use crate::races::shadow::AccessKind;
use crate::races::{Pair, RaceAccess, RaceOutput};
use crate::report::{
    AccessReport, BlockReport, Detail, Finding, FindingLocation, Kind, Message, RaceMemory,
    RaceReport, RaceSide, Role, Rule, VariableReport, Verdict,
};

/// Closure steps the race candidate checks of one part may take, per check the candidate
/// budget allows: the budget bounds their time as well as their number (one check may take
/// more, the next less; most are refused within their first few steps).
pub const STEPS_PER_CHECK: u64 = 1 << 10;

/// What the race findings of one run cost, for the summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct RaceStats {
    pub happens_before: usize,
    pub predicted: usize,
    /// Pairs of sites the predictor was asked about, and those it could not decide within
    /// the budget.
    pub candidate_pairs: usize,
    pub undecided: usize,
    /// Pairs of sites none of whose kept instances was confirmed while more were found than
    /// kept: a race there that only an unkept instance shows is missed.
    pub capped: usize,
}

/// The race findings of one run: every happens-before race, then the candidates the
/// sync-preserving closure confirms (each instance costs one candidate check of `budget`).
pub(crate) fn race_findings(
    run: &Run,
    out: &RaceOutput,
    budget: &mut Budget,
) -> (Vec<Finding>, RaceStats) {
    let mut stats = RaceStats::default();
    let mut findings = Vec::new();
    if !out.complete {
        return (findings, stats);
    }
    // One finding per variable (or heap block by its allocation site) and pair of lines: two
    // instructions of one line are one site, two elements of one array one variable, and a
    // line's read and write one thing to fix. The instances fold into it; it shows (and its
    // key names) the strongest instance, writes over reads, so that which instances a run
    // happened to show changes its count, not its key.
    let mut groups: foldhash::HashMap<RaceGroup, usize> = Default::default();
    for r in &out.races {
        let f = finding(
            run,
            out,
            &r.first,
            r.count,
            Rule::HappensBefore,
            "nothing orders the two accesses in the recorded run: no lock both hold, and no \
             thread creation or join, barrier, pthread_once, semaphore, condition hand-off or \
             release/acquire atomic between them. C11 calls this a data race of the run \
             itself (5.1.2.4); it needed no unlucky timing to happen"
                .to_string(),
            None,
        );
        match groups.entry(race_group(&f)) {
            std::collections::hash_map::Entry::Occupied(e) => fold(&mut findings[*e.get()], f),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(findings.len());
                stats.happens_before += 1;
                findings.push(f);
            }
        }
    }
    if !run.hb.complete {
        return (findings, stats);
    }
    for c in &out.candidates {
        let probe = finding(
            run,
            out,
            &c.instances[0],
            c.count,
            Rule::SyncPreserving,
            String::new(),
            None,
        );
        let probe = race_group(&probe);
        if let Some(&i) = groups.get(&probe) {
            // Already a race of the run (or confirmed): these instances are more of it.
            findings[i].occurrences += c.count;
            continue;
        }
        stats.candidate_pairs += 1;
        let mut decided = false;
        let mut checked = 0u64;
        let mut confirmed = false;
        for pair in c.kept() {
            checked += 1;
            if budget.steps_left == 0 || !budget.take() {
                budget.exhausted = true;
                break;
            }
            let events = [
                PatternEvent {
                    thread: pair[0].access.thread,
                    pos: pair[0].access.pos,
                },
                PatternEvent {
                    thread: pair[1].access.thread,
                    pos: pair[1].access.pos,
                },
            ];
            let (closed, steps) = closure_before_within(run, &events, budget.steps_left);
            budget.steps_left = budget.steps_left.saturating_sub(steps);
            match closed {
                Ok(closure) => {
                    let next: Vec<(PatternEvent, String)> = pair
                        .iter()
                        .zip(events)
                        .map(|(a, e)| {
                            (
                                e,
                                format!(
                                    "{}s {} at {}",
                                    verb(a.access.kind),
                                    describe_address(a),
                                    run.location(a.access.site).text
                                ),
                            )
                        })
                        .collect();
                    let witness = describe::witness(run, &closure, &next);
                    stats.predicted += 1;
                    findings.push(finding(
                        run,
                        out,
                        pair,
                        c.count,
                        Rule::SyncPreserving,
                        "in the recorded run only lock hand-offs order the two accesses, and \
                         they hold no common lock. The witness keeps every critical section \
                         in its order, every read's writer and all other synchronisation, \
                         and then runs both accesses back to back: a schedule that \
                         happens-before alone (ThreadSanitizer) cannot see"
                            .to_string(),
                        Some(witness),
                    ));
                    let at = findings.len() - 1;
                    groups.insert(race_group(&findings[at]), at);
                    groups.insert(probe.clone(), at);
                    decided = true;
                    confirmed = true;
                    break;
                }
                Err(NotPredicted::OutOfBudget) => {
                    budget.exhausted = true;
                    break;
                }
                Err(_) => decided = true,
            }
        }
        if !decided {
            stats.undecided += 1;
        } else if !confirmed && c.count > checked {
            stats.capped += 1;
        }
    }
    (findings, stats)
}

/// What one race finding stands for: its memory (the key's class) and its sites without
/// their access kinds. The merge of segments and traces folds races by it too.
pub(crate) type RaceGroup = (
    Vec<String>,
    std::collections::BTreeSet<(Option<String>, Option<u32>, Option<String>)>,
);

pub(crate) fn race_group(f: &Finding) -> RaceGroup {
    let key = f.key();
    (
        key.classes,
        key.sites
            .into_iter()
            .map(|s| (s.file, s.line, s.function))
            .collect(),
    )
}

/// How strong an instance is: writes over reads, plain over atomic.
fn strength(f: &Finding) -> u32 {
    f.locations
        .iter()
        .map(|l| match l.role {
            Role::Writes => 3,
            Role::AtomicWrites => 2,
            Role::Reads => 1,
            _ => 0,
        })
        .sum()
}

/// Folds another instance of a race into its finding, which then shows the stronger one.
fn fold(into: &mut Finding, other: Finding) {
    let occurrences = into.occurrences + other.occurrences;
    if strength(&other) > strength(into) {
        *into = other;
    }
    into.occurrences = occurrences;
}

/// The two source lines of a pair, in a fixed order (`module+offset` when not symbolised).
pub(crate) type LineKey = (String, String);

pub(crate) fn line_key(run: &Run, pair: &Pair) -> LineKey {
    let line = |a: &RaceAccess| {
        let l = run.location(a.access.site);
        match (&l.file, l.line) {
            (Some(f), n) if n > 0 => format!("{f}:{n}"),
            _ => l.text,
        }
    };
    let (a, b) = (line(&pair[0]), line(&pair[1]));
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

pub(crate) fn verb(kind: AccessKind) -> &'static str {
    match kind {
        AccessKind::Read => "read",
        AccessKind::Write => "write",
        AccessKind::AtomicRead => "atomically read",
        AccessKind::AtomicWrite => "atomically write",
        AccessKind::Free => "free",
    }
}

pub(crate) fn describe_address(a: &RaceAccess) -> String {
    if let Some(v) = &a.variable {
        return format!("{} ({} bytes)", v.name, a.access.size);
    }
    match a.block {
        Some(b) if a.access.kind == AccessKind::Free => {
            format!("the {}-byte heap block", b.size)
        }
        Some(b) => format!(
            "{} bytes at offset {} of a {}-byte heap block",
            a.access.size,
            a.access.addr - b.addr,
            b.size
        ),
        None => format!("{} bytes at {:#x}", a.access.size, a.access.addr),
    }
}

fn lock_name(run: &Run, object: u32) -> String {
    run.locks
        .iter()
        .find(|l| l.object == object)
        .map(|l| l.name.clone())
        .or_else(|| run.object_names.get(&object).cloned())
        .unwrap_or_else(|| format!("lock#{object}"))
}

/// The race pass's access kind as the reports name it.
fn access_kind(k: AccessKind) -> crate::report::AccessKind {
    match k {
        AccessKind::Read => crate::report::AccessKind::Read,
        AccessKind::Write => crate::report::AccessKind::Write,
        AccessKind::AtomicRead => crate::report::AccessKind::AtomicRead,
        AccessKind::AtomicWrite => crate::report::AccessKind::AtomicWrite,
        AccessKind::Free => crate::report::AccessKind::Free,
    }
}

fn access_report(run: &Run, out: &RaceOutput, a: &RaceAccess) -> AccessReport {
    let s = &a.access;
    AccessReport {
        kind: access_kind(s.kind),
        size: s.size,
        address: format!("{:#x}", s.addr),
        thread: describe::thread(run, s.thread),
        position: s.pos,
        site: describe::site(run, s.site),
        locks_held: out
            .locksets
            .get(s.lockset)
            .iter()
            .map(|h| {
                let name = lock_name(run, h.lock);
                if h.shared {
                    format!("{name} (read)")
                } else {
                    name
                }
            })
            .collect(),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn finding(
    run: &Run,
    out: &RaceOutput,
    pair: &Pair,
    count: u64,
    rule: Rule,
    reason: String,
    witness: Option<crate::report::Witness>,
) -> Finding {
    let [a, b] = pair;
    let block = a.block.or(b.block).map(|blk| BlockReport {
        size: blk.size,
        offset: a.access.addr.saturating_sub(blk.addr),
        allocated_at: describe::site(run, blk.site),
        thread: describe::thread(run, blk.thread),
    });
    let variable = a.variable.as_ref().or(b.variable.as_ref());
    let memory = match (variable, &block) {
        (Some(v), _) => RaceMemory::Variable(v.name.clone()),
        (None, Some(b)) => RaceMemory::HeapBlock {
            offset: b.offset,
            size: b.size,
            allocated_at: b.allocated_at.location.clone(),
        },
        (None, None) => RaceMemory::Address(a.access.addr),
    };
    let side = |x: &RaceAccess| RaceSide {
        kind: access_kind(x.access.kind),
        thread: describe::thread(run, x.access.thread),
        at: run.location(x.access.site).text,
    };
    let message = Message::Race {
        memory,
        accesses: [side(a), side(b)],
    };
    let role = |x: &RaceAccess| -> Role {
        match x.access.kind {
            AccessKind::Read => Role::Reads,
            AccessKind::Write => Role::Writes,
            AccessKind::AtomicRead => Role::AtomicReads,
            AccessKind::AtomicWrite => Role::AtomicWrites,
            AccessKind::Free => Role::Frees,
        }
    };
    let locations: Vec<FindingLocation> = pair
        .iter()
        .map(|x| describe::location(run, x.access.site, x.access.thread, role(x)))
        .collect();
    Finding {
        id: 0,
        kind: Kind::Race,
        verdict: Verdict::Predicted,
        rule,
        message,
        reason,
        traces: vec![run.source.clone()],
        witness,
        occurrences: count,
        locations,
        detail: Detail::Race(Box::new(RaceReport {
            address: format!("{:#x}", a.access.addr),
            variable: variable.map(|v| VariableReport {
                name: v.name.clone(),
                file: v.file.clone(),
                line: (v.line > 0).then_some(v.line),
            }),
            block,
            accesses: [access_report(run, out, a), access_report(run, out, b)],
        })),
    }
}

/// Races as an analysis of the registry (`analyses/mod.rs`): what each run's race pass kept.
pub struct Races;

impl super::Analysis for Races {
    fn name(&self) -> &'static str {
        "races"
    }

    fn analyze(
        &self,
        part: &super::Part,
        budgets: &mut super::Budgets,
        summary: &mut crate::report::Summary,
        out: &mut super::Output,
    ) {
        for run in part.runs {
            let (races, stats) = race_findings(run, &run.races, &mut budgets.race);
            summary.race_candidates += stats.candidate_pairs;
            summary.race_pairs_capped += stats.capped;
            out.findings.extend(races);
        }
    }
}

/// Lines named in a warning of what the race pass left out; the others are counted.
const LINES_NAMED: usize = 5;

/// What the race pass's bounds cut from this run, each warning naming what was not checked:
/// the lines whose accesses went unchecked or lost their shadow entries, and how to check
/// them.
pub fn cut_warnings(run: &Run) -> Vec<String> {
    let races = &run.races;
    let mut warnings = Vec::new();
    let lines = |counts: &crate::races::shadow::SiteCounts| {
        // Sites of one line (inlined into several callers) count as that line.
        let mut by_line: std::collections::HashMap<String, u64> = Default::default();
        for (site, n) in counts.most(usize::MAX) {
            *by_line.entry(run.location(site).text).or_default() += n;
        }
        let mut by_line: Vec<(String, u64)> = by_line.into_iter().collect();
        by_line.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let more_lines = by_line.len().saturating_sub(LINES_NAMED);
        by_line.truncate(LINES_NAMED);
        let shown: u64 = by_line.iter().map(|(_, n)| n).sum();
        let mut named: Vec<String> = by_line
            .into_iter()
            .map(|(line, n)| format!("{n} at {line}"))
            .collect();
        if more_lines > 0 || counts.other_sites > 0 {
            let plus = if counts.other_sites > 0 { "+" } else { "" };
            named.push(format!(
                "{} at {more_lines}{plus} more lines",
                counts.total - shown
            ));
        }
        named.join(", ")
    };
    let mib = races.memory_budget >> 20;
    let u = &races.untracked;
    if u.accesses.total > 0 {
        warnings.push(format!(
            "the race pass's memory budget ({mib} MiB) was full: {} memory accesses to \
             {:#x}..={:#x} that it had no room to track were not checked for races ({}); \
             raise it with --race-memory <MiB> to check them",
            u.accesses.total,
            u.lowest,
            u.highest,
            lines(&u.accesses)
        ));
    }
    if races.evicted.total > 0 {
        warnings.push(format!(
            "{} shadow entries were dropped from full granules ({}): races of these lines \
             with later accesses may be missing{}",
            races.evicted.total,
            lines(&races.evicted),
            if u.accesses.total > 0 || races.granules_given_way > 0 {
                " (a full memory budget leaves granules fewer entries: --race-memory)"
            } else {
                ""
            }
        ));
    }
    if races.granules_given_way > 0 {
        warnings.push(format!(
            "the race pass's memory budget ({mib} MiB) was full: {} granules (8 bytes each) \
             gave way to memory not tracked yet, dropping {} shadow entries ({}): races of \
             these lines with later accesses may be missing; raise it with --race-memory \
             <MiB> to keep them",
            races.granules_given_way,
            races.given_way.total,
            lines(&races.given_way)
        ));
    }
    if races.untracked_blocks > 0 {
        warnings.push(format!(
            "the race pass's memory budget ({mib} MiB) had no room for {} heap blocks: races \
             in them are reported without their allocation",
            races.untracked_blocks
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::build_run;
    use foresight_trace::builder::TraceBuilder;
    use foresight_trace::Trace;

    /// Two writes of one variable by two threads, ordered only by a lock hand-off between
    /// sections that touch nothing: a race the sync-preserving closure predicts.
    fn handed_off() -> Run {
        let mut b = TraceBuilder::new("t");
        let main = b.main_thread();
        let s = b.site("f", "t.c", 1);
        let a = b.spawn(main, s, "a");
        let c = b.spawn(main, s, "b");
        let m = b.mutex("m");
        let w = b.site("first", "t.c", 10);
        b.write(a, 0x1000, 4, w);
        b.lock(a, m, s);
        b.unlock(a, m, s);
        b.lock(c, m, s);
        b.unlock(c, m, s);
        let v = b.site("second", "t.c", 20);
        b.write(c, 0x1000, 4, v);
        let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
        build_run(&trace, &mut |_| {})
    }

    #[test]
    fn a_candidate_is_checked_within_the_steps_of_the_budget() {
        let run = handed_off();
        assert_eq!(
            run.races.candidates.len(),
            1,
            "lock hand-off orders the pair"
        );
        let mut budget = Budget::new(100, 100 * STEPS_PER_CHECK);
        let (findings, stats) = race_findings(&run, &run.races, &mut budget);
        assert_eq!(
            (findings.len(), stats.predicted, stats.undecided),
            (1, 1, 0)
        );
        assert!(!budget.exhausted);
        assert!(
            budget.steps_left < 100 * STEPS_PER_CHECK,
            "the check's steps are spent"
        );
        // Checks left, but no steps: the pair is left undecided, and the budget says so.
        let mut budget = Budget::new(100, 0);
        let (findings, stats) = race_findings(&run, &run.races, &mut budget);
        assert_eq!((findings.len(), stats.undecided), (0, 1));
        assert!(budget.exhausted);
        // Steps for less than the check's start: stopped before its rules run.
        let mut budget = Budget::new(100, 1);
        let (findings, stats) = race_findings(&run, &run.races, &mut budget);
        assert_eq!((findings.len(), stats.undecided), (0, 1));
        assert!(budget.exhausted);
    }
}
