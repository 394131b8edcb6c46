//! What `foresight analyze` reports, as data: the findings and the summary. [`text`], [`json`]
//! and [`sarif`] render it, `baseline.rs` keys it, `suppressions.rs` matches it. A finding is
//! the fields every kind has plus a `Detail` per kind; each pass builds its own findings
//! (with the helpers of `describe.rs`). These types are the JSON schema
//! (`docs/report-schema.md`, written by `json.rs`): a change of a field is a change of
//! `REPORT_VERSION`.

use serde::{Deserialize, Serialize};

use crate::sites::Location;

mod coverage;
pub mod explain;
pub mod json;
mod key;
mod message;
pub mod sarif;
pub mod text;

pub use coverage::{Coverage, CoverageNote, LanguageRuntime};
pub use key::{BaselineKey, BaselineKind, FindingKey, KeyError, SiteKey};
pub use message::{Message, RaceMemory, RaceSide, WaitFor};

/// `n` and the noun, singular for one: "1 cycle", "2 cycles", "1 class", "3 classes".
pub fn counted<N: std::fmt::Display + PartialEq + From<u8>>(n: N, one: &str, many: &str) -> String {
    let noun = if n == N::from(1) { one } else { many };
    format!("{n} {noun}")
}

/// A signal by name and number, "SIGTERM (signal 15)", or "signal N" for one not named here.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        12 => "SIGUSR2",
        15 => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    format!("{name} (signal {signal})")
}

pub(crate) const REPORT_SCHEMA: &str = "foresight-report";
pub(crate) const REPORT_VERSION: u32 = 1;

/// What `foresight analyze` found in one or more traces: the JSON report's document
/// (`docs/report-schema.md`), before a renderer prints it.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub(crate) schema: &'static str,
    pub(crate) version: u32,
    /// One summary per trace analysed, in the order given.
    pub traces: Vec<TraceSummary>,
    /// The counts over all traces.
    pub summary: Summary,
    /// The strongly connected components of the lock-order graph that have cycles: what each
    /// holds, and how many of its cycles the findings list.
    pub components: Vec<ComponentSummary>,
    /// Advice about the analysis itself (a function that looks like a lock wrapper), for
    /// humans; not findings.
    pub hints: Vec<String>,
    /// What `hints` were made of, to add up over the segments of a trace.
    #[serde(skip)]
    pub(crate) hint_tally: crate::wrapper_hints::HintTally,
    /// The findings, in report order.
    pub findings: Vec<Finding>,
}

/// What one trace held.
#[derive(Clone, Debug, Serialize)]
pub struct TraceSummary {
    /// The trace's path.
    pub path: String,
    /// Events it recorded.
    pub events: u64,
    pub(crate) threads: usize,
    pub(crate) locks: usize,
    /// Critical sections (outermost acquisitions) of its locks.
    pub critical_sections: usize,
    /// Memory accesses in the trace (a build with `foresight config` records them).
    pub(crate) accesses: u64,
    /// Problems the reader found (a damaged or cut-short trace is analysed as far as it reads).
    pub warnings: Vec<String>,
    /// The trace is a flight recorder's window of its run (`record --keep-last`): what it
    /// dropped. `null` for a whole recording.
    pub window: Option<WindowSummary>,
    /// What the recording could not show (no lock of the program's own, a language runtime's
    /// own synchronisation, no memory access).
    pub coverage: Coverage,
}

/// What a flight recorder's window left out of its trace.
#[derive(Clone, Debug, Serialize)]
pub struct WindowSummary {
    /// The bound the window was kept within, bytes.
    pub(crate) keep_last: u64,
    /// Events recorded before the window and dropped.
    pub events_dropped: u64,
    /// Threads that lost events to it.
    pub threads_dropped: usize,
    /// Lock-order edges seen before the window, kept as a summary.
    pub earlier_edges: usize,
    /// The window is a snapshot taken on this signal while the process ran on (`record
    /// --dump-on`); `None`: written when the process ended.
    pub(crate) snapshot_signal: Option<u32>,
}

/// The counts of a report: findings by verdict, what the searches covered, and where a budget
/// cut them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Findings of verdict `observed`: deadlocks and stalls the run was really in when its
    /// trace ended.
    pub(crate) observed: usize,
    /// Findings of verdict `predicted`.
    pub predicted: usize,
    /// Findings of verdict `potential`.
    pub potential: usize,
    /// Lock classes of the merged lock-order graph.
    pub lock_classes: usize,
    /// Edges of the merged lock-order graph.
    pub lock_order_edges: usize,
    /// Class-level elementary cycles found (those that can block: read-read breaks a cycle).
    pub class_cycles: usize,
    /// The longest cycle searched for (`--max-cycle-length`); `null`: any length.
    pub(crate) max_cycle_length: Option<usize>,
    /// The cycle search budget ran out: longer or later cycles may be missing.
    pub cycle_search_truncated: bool,
    /// `max_cycle_length` stopped the search in a component with longer paths: longer cycles
    /// may be missing.
    pub cycle_length_cut: bool,
    /// Lock cycles counted in `components` but not listed in `findings` (a component lists a
    /// few of each verdict, shortest first; `--all` up to `options::ALL_CYCLES_LISTED`).
    pub unlisted_predicted: u64,
    /// The same for potential lock cycles.
    pub unlisted_potential: u64,
    /// `--all` listed this many lock cycles of a verdict in some component and only counted
    /// the rest (`options::ALL_CYCLES_LISTED`); `null`: nothing was cut from the listing.
    pub listing_cap: Option<usize>,
    /// Instance-level candidate patterns checked with the sync-preserving closure.
    pub(crate) candidates_checked: u64,
    /// The candidate budget ran out: some cycles were reported as potential without every
    /// candidate being checked.
    pub(crate) candidate_budget_exhausted: bool,
    /// `rank-violation` findings (verdict `violation`).
    pub rank_violations: usize,
    /// `blocking-under-lock` findings (verdict `hazard`).
    pub(crate) hazards: usize,
    /// Findings removed by the suppressions file (not in `findings`).
    pub(crate) suppressed: usize,
    /// `race` findings (verdict `predicted`), and pairs of sites that only lock hand-offs
    /// order, which the sync-preserving closure was asked about.
    pub(crate) races: usize,
    /// Race candidates: pairs of lines that only lock hand-offs order, asked of the closure.
    pub race_candidates: usize,
    /// Race candidates checked with the closure, and whether the budget ran out first.
    pub race_candidates_checked: u64,
    /// The race candidate budget ran out before every candidate was checked.
    pub race_budget_exhausted: bool,
    /// Pairs of sites with more candidate instances than were kept, none of those kept
    /// confirmed: a race only an unkept instance shows is missed.
    pub(crate) race_pairs_capped: usize,
    /// Pairs of lines the sync-reversal search was asked about (candidates no other rule
    /// reported), and those it left unchecked because its budget ran out.
    pub(crate) reversal_candidates: usize,
    pub(crate) reversal_unchecked: usize,
    /// Segments the traces were analysed in (`--segment-events`; 0: each trace whole), and
    /// the events of a segment. Predictions reorder events within one segment.
    pub segments: usize,
    pub(crate) segment_events: u64,
}

/// A strongly connected component of the lock-order graph with cycles: every lock cycle lies
/// in one. Dense ones (messy locking) have far more cycles than a reader can go through, so the
/// findings list a few of each verdict per component and this counts the rest.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentSummary {
    /// 1, 2, … in the order of the graph's classes.
    pub(crate) id: usize,
    /// Lock classes in the component.
    pub classes: usize,
    /// The first classes of the component (at most 32).
    pub(crate) class_names: Vec<String>,
    /// Edges between classes of the component.
    pub edges: usize,
    /// Cycles that can block, of up to `max_cycle_length` locks; `cycles_by_length[i]` have
    /// i + 1 locks. When `search_cut`, at least these.
    pub(crate) cycles: u64,
    /// Cycles by length: `cycles_by_length[i]` have i + 1 locks.
    pub cycles_by_length: Vec<u64>,
    /// Distinct predicted deadlocks, and cycles no predicted deadlock covers (potential).
    pub predicted: u64,
    /// Cycles no predicted deadlock covers.
    pub potential: u64,
    /// How many of each are in `findings`.
    pub listed_predicted: usize,
    /// How many potential cycles are in `findings`.
    pub listed_potential: usize,
    /// Prediction stopped in this component once enough deadlocks were predicted to list, or
    /// kept no more reasons: some potential cycles were not checked at instance level.
    pub prediction_cut: bool,
    /// The cycle search (its budget, or `--max-cycle-length`) stopped before every cycle of
    /// this component was visited: one of its shortest cycles is still counted and listed, and
    /// more may exist.
    pub search_cut: bool,
    /// Pairs of classes taken in both orders, and the most seen of them (by the rarer of the
    /// two orders).
    pub inversions: usize,
    /// The most seen of them, at most a few.
    pub top_inversions: Vec<Inversion>,
}

/// Two classes taken in both orders: `counts[0]` times `classes[0]` → `classes[1]`,
/// `counts[1]` times the other way.
#[derive(Clone, Debug, Serialize)]
pub struct Inversion {
    pub(crate) classes: [String; 2],
    /// How often each order was seen.
    pub counts: [u64; 2],
}

/// How sure a finding is. Its name in the reports is the serde name, and `Display` gives the
/// same (one rename rule for both, checked by a test).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Verdict {
    /// It happened: the threads were blocked so when the trace ended (`observed.rs`).
    Observed,
    /// A reordering of a recorded run reaches it (the witness says which).
    Predicted,
    /// An inconsistent order or a wait for which no reordering reaching the deadlock was found.
    Potential,
    /// A declared discipline was broken (a rank annotation): not a prediction, a rule.
    Violation,
    /// The run did something that risks a stall or a deadlock (a lock held across a blocking
    /// call): not a deadlock found, a hazard seen.
    Hazard,
}

impl Verdict {
    /// The name the reports give it.
    pub(crate) fn name(self) -> &'static str {
        self.into()
    }
}

impl Report {
    /// Recounts the summary's verdict counts and renumbers the findings after some were removed.
    pub fn recount(&mut self) {
        for (i, f) in self.findings.iter_mut().enumerate() {
            f.id = i + 1;
        }
        let count = |v: Verdict| self.findings.iter().filter(|f| f.verdict == v).count();
        self.summary.observed = count(Verdict::Observed);
        self.summary.predicted = count(Verdict::Predicted);
        self.summary.potential = count(Verdict::Potential);
        self.summary.rank_violations = count(Verdict::Violation);
        self.summary.hazards = count(Verdict::Hazard);
        self.summary.races = self
            .findings
            .iter()
            .filter(|f| f.kind == Kind::Race)
            .count();
    }
}

/// A finding: the fields every kind has, and the details of its kind.
#[derive(Clone, Debug)]
pub struct Finding {
    pub(crate) id: usize,
    /// What kind of defect (`deadlock`, `race`, …).
    pub kind: Kind,
    /// How sure it is.
    pub verdict: Verdict,
    /// The rule that produced the finding (see `docs/report-schema.md`).
    pub rule: Rule,
    /// What the finding says in one line, as facts (worded when printed).
    pub message: Message,
    /// Why it is predicted, or why it is only potential.
    pub reason: String,
    /// The traces it was found in.
    pub traces: Vec<String>,
    /// The reordering that reaches it, where there is one.
    pub witness: Option<Witness>,
    /// Distinct instance-level occurrences folded into this finding.
    pub(crate) occurrences: u64,
    /// Every site involved (for JSON consumers, SARIF, the baseline key, suppressions).
    pub locations: Vec<FindingLocation>,
    pub(crate) detail: Detail,
}

impl Finding {
    /// Where the finding goes in a report: deadlocks before races, by verdict, shortest cycle
    /// first, by kind name, then by key, so that the order is the same however the findings
    /// were found (one analysis, segments, traces merged) and never depends on wording.
    pub fn report_order(&self) -> (Verdict, bool, usize, &'static str, FindingKey) {
        (
            self.verdict,
            self.kind == Kind::Race,
            self.cycle().len(),
            self.kind.name(),
            self.key(),
        )
    }

    /// The lock classes of the finding (JSON's `cycle`): a cycle's classes in order, the held
    /// lock's class for a wait, [held, acquired] for a rank violation.
    pub fn cycle(&self) -> &[String] {
        match &self.detail {
            Detail::LockCycle { cycle, .. } => cycle,
            Detail::WaitDeadlock { lock_class, .. } | Detail::ReadRecursion { lock_class, .. } => {
                std::slice::from_ref(lock_class)
            }
            Detail::RankViolation { classes, .. } => classes,
            Detail::Observed(o) => &o.lock_classes,
            Detail::Blocking(b) => &b.lock_classes,
            Detail::Signal(r) => &r.lock_classes,
            Detail::Race(_) => &[],
        }
    }

    /// The lock-order edges of the finding (JSON's `edges`).
    pub fn edges(&self) -> &[EdgeReport] {
        match &self.detail {
            Detail::LockCycle { edges, .. } => edges,
            Detail::RankViolation { edge, .. } => std::slice::from_ref(edge),
            Detail::WaitDeadlock { .. }
            | Detail::ReadRecursion { .. }
            | Detail::Race(_)
            | Detail::Observed(_)
            | Detail::Blocking(_)
            | Detail::Signal(_) => &[],
        }
    }

    /// The wait that holds a lock hostage (JSON's `wait`).
    pub fn wait(&self) -> Option<&WaitReport> {
        match &self.detail {
            Detail::WaitDeadlock { wait, .. } | Detail::ReadRecursion { wait, .. } => Some(wait),
            Detail::LockCycle { .. }
            | Detail::RankViolation { .. }
            | Detail::Race(_)
            | Detail::Observed(_)
            | Detail::Blocking(_)
            | Detail::Signal(_) => None,
        }
    }

    /// The two accesses of a race (JSON's `race`).
    pub fn race(&self) -> Option<&RaceReport> {
        match &self.detail {
            Detail::Race(r) => Some(r),
            _ => None,
        }
    }

    /// The blocking call of a `blocking-under-lock` finding (JSON's `blocking`).
    pub(crate) fn blocking(&self) -> Option<&BlockingReport> {
        match &self.detail {
            Detail::Blocking(b) => Some(b),
            _ => None,
        }
    }

    /// The handler and the lock of a `signal-unsafe-lock` finding (JSON's `signal`).
    pub(crate) fn signal(&self) -> Option<&SignalReport> {
        match &self.detail {
            Detail::Signal(r) => Some(r),
            _ => None,
        }
    }

    /// The blocked threads of an observed deadlock or stall (JSON's `observed`).
    pub fn observed(&self) -> Option<&ObservedReport> {
        match &self.detail {
            Detail::Observed(o) => Some(o),
            _ => None,
        }
    }
}

/// What a finding is about, by kind. Each pass that makes findings makes its own variant; the
/// renderers (`text.rs`, `json.rs`, `sarif.rs`) and the baseline key (`baseline.rs`) work from
/// it.
#[derive(Clone, Debug)]
pub(crate) enum Detail {
    /// Locks taken in a cycle: `deadlock` (predicted in one trace) or `potential-deadlock`
    /// (class level). `cycle`: the classes in order (the last → first edge implied); `edges`:
    /// one per edge, in cycle order.
    LockCycle {
        cycle: Vec<String>,
        edges: Vec<EdgeReport>,
    },
    /// A thread holds a lock while it waits (join, barrier, condition, semaphore) for a thread
    /// that needs that lock first.
    WaitDeadlock {
        /// The class of the held lock.
        lock_class: String,
        wait: WaitReport,
    },
    /// A read-recursive rwlock acquisition while another thread write-locks it.
    ReadRecursion {
        lock_class: String,
        wait: WaitReport,
    },
    /// A lock acquired while one of the same or a higher declared rank was held: `classes` is
    /// [held, acquired], `edge` the (held, acquired) pair.
    RankViolation {
        classes: [String; 2],
        edge: EdgeReport,
    },
    /// Two accesses to the same memory, at least one a write, not both atomic, that a schedule
    /// runs back to back (`races/`).
    Race(Box<RaceReport>),
    /// Threads blocked when the trace ended: in a cycle (`observed-deadlock`) or not
    /// (`observed-stall`) (`observed.rs`).
    Observed(Box<ObservedReport>),
    /// A lock held across a blocking call (`analyses/hazards`).
    Blocking(Box<BlockingReport>),
    /// A lock taken in a signal handler (`analyses/hazards/signals.rs`).
    Signal(Box<SignalReport>),
}

/// The kind of a finding: JSON's `kind`, SARIF's rule id, the suppressions file's `kind`.
/// Declared in the order SARIF lists its rules ([`strum::VariantArray`]).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Kind {
    /// A predicted lock cycle.
    Deadlock,
    /// A lock-order cycle with no predicted instance.
    PotentialDeadlock,
    /// A thread holds a lock while joining a thread that needs it.
    JoinDeadlock,
    /// A thread holds a lock at a barrier that another participant reaches only after taking it.
    BarrierDeadlock,
    /// A thread holds a lock while waiting on a condition, a semaphore or a hand-off read whose
    /// waker needs that lock first.
    WaitDeadlock,
    /// A read-recursive rwlock acquisition while another thread write-locks it.
    RwlockDeadlock,
    /// A lock acquired against the declared ranks.
    RankViolation,
    /// A data race.
    Race,
    /// Threads were blocked waiting for each other when the trace ended.
    ObservedDeadlock,
    /// Threads were blocked, in no cycle, when the run was stopped.
    ObservedStall,
    /// Locks held across a call that can block for as long as another thread decides.
    BlockingUnderLock,
    /// A lock taken in a signal handler that can interrupt a holder of the same lock.
    SignalUnsafeLock,
}

impl Kind {
    /// The name the reports give it (`potential-deadlock`).
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// The rule that produced a finding: JSON's `rule` (`docs/report-schema.md` says what each
/// finds).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Rule {
    /// `deadlock`: a cycle of acquisitions whose sync-preserving closure avoids every request.
    LockCycle,
    /// `potential-deadlock`: a class-level cycle with no predicted instance.
    LockOrder,
    /// `potential-deadlock`: locks of one class nested, with no instance-level cycle.
    SameClassNesting,
    /// `join-deadlock`.
    JoinWhileHolding,
    /// `barrier-deadlock`.
    BarrierWhileHolding,
    /// `wait-deadlock` on a condition variable.
    CondWaitWhileHolding,
    /// `wait-deadlock` on a semaphore.
    SemWaitWhileHolding,
    /// `wait-deadlock` in a read of a pipe, socketpair or eventfd.
    HandoffReadWhileHolding,
    /// `rwlock-deadlock`.
    RwlockReadRecursion,
    /// `rank-violation`.
    LockRank,
    /// `race`: nothing orders the two accesses in the recorded run (C11 happens-before).
    HappensBefore,
    /// `race`: the run ordered the accesses only through lock hand-offs, and a reordering that
    /// keeps every critical section's order runs them back to back.
    SyncPreserving,
    /// `race`: a reordering that runs later critical sections on a lock first enables both.
    SyncReversal,
    /// `observed-deadlock`: a thread requesting a non-recursive lock it holds.
    BlockedSelfLock,
    /// `observed-deadlock`: a cycle of lock requests, each held by the next thread.
    BlockedLockCycle,
    /// `observed-deadlock`: a cycle with a join or a once in it.
    BlockedWaitCycle,
    /// `observed-stall`.
    BlockedWait,
    /// `blocking-under-lock`.
    BlockingWhileHolding,
    /// A lock class taken in a signal's handler and, elsewhere, with that signal unblocked.
    HandlerInterruptsHolder,
    /// A lock function called in a signal handler (none is async-signal-safe).
    LockInHandler,
}

/// What a site did in a finding: JSON's `locations[].role`, the baseline key's role.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Role {
    /// Where a held lock was acquired.
    Holds,
    /// Where a lock was requested while the other was held.
    Requests,
    /// Where a thread was joined.
    Joins,
    /// Where the joined thread exited.
    Exits,
    /// Where a thread waited (condition, semaphore, hand-off read).
    Waits,
    /// Where a thread arrived at a barrier.
    Arrives,
    /// Where a condition was signalled.
    Signals,
    /// Where a semaphore was posted.
    Posts,
    /// Where a read lock was taken.
    ReadLocks,
    /// Where the same thread took the read lock again.
    ReadLocksAgain,
    /// Where a write lock was requested.
    WriteLocks,
    /// Where memory was read.
    Reads,
    /// Where memory was written (or a hand-off channel, by a wait's waker).
    Writes,
    /// Where memory was read atomically.
    AtomicReads,
    /// Where memory was written atomically.
    AtomicWrites,
    /// Where a block was freed (or reallocated) while another thread's access to it was
    /// unordered with the free.
    Frees,
    /// Where a blocking call was made while the locks were held.
    Blocks,
    /// Where a signal handler took a lock.
    LocksInHandler,
}

impl Role {
    /// The name the reports give it (`read-locks-again`).
    pub fn name(self) -> &'static str {
        self.into()
    }
}

/// What an access of a race did: JSON's `race.accesses[].kind`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum AccessKind {
    /// A plain read.
    Read,
    /// A plain write.
    Write,
    /// An atomic read (it races only with a plain access).
    #[serde(rename = "atomic read")]
    #[strum(serialize = "atomic read")]
    AtomicRead,
    /// An atomic write (it races only with a plain access).
    #[serde(rename = "atomic write")]
    #[strum(serialize = "atomic write")]
    AtomicWrite,
    /// A `free` or `realloc` of the block: a write of all of it.
    Free,
}

/// The wait of a wait finding: JSON's `wait.wait`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub(crate) enum WaitCall {
    Join,
    Barrier,
    Condition,
    Semaphore,
    /// A blocking read of a pipe, socketpair or eventfd.
    Handoff,
    RwlockRead,
}

/// How an observed thread was when its trace ended: JSON's `observed.threads[].state`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ThreadState {
    /// Blocked in a call with no time limit.
    Blocked,
    /// Blocked in a timed call (it would have returned by itself).
    BlockedWithTimeout,
    /// Running (not blocked in a recorded call).
    Running,
    /// Exited.
    Exited,
}

/// The call an observed thread was blocked in: JSON's `observed.threads[].waits`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum BlockingCall {
    /// Requesting a lock (or a rwlock's write side).
    Lock,
    /// Requesting a rwlock's read side.
    ReadLock,
    /// Joining a thread.
    Join,
    /// Waiting on a condition variable.
    Condition,
    /// Waiting at a barrier.
    Barrier,
    /// Waiting on a semaphore.
    Semaphore,
    /// Waiting for a once initialiser another thread runs.
    Once,
}

impl BlockingCall {
    /// The name the reports give it (`read-lock`).
    pub(crate) fn name(self) -> &'static str {
        self.into()
    }
}

/// The mode a lock is held or requested in: JSON's `mode`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub(crate) enum LockMode {
    Write,
    Read,
}

/// A thread's id in its trace: the recorder's numbering, as `foresight dump --thread` takes
/// it. Not the analyzer's index of the thread in a run (which a segment numbers anew).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub(crate) struct ThreadId(pub u32);

impl std::fmt::Display for ThreadId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A thread a finding refers to: its id, and its name where the trace has the thread's
/// events (a thread seen only in a flight recorder's summary of earlier edges has none).
/// Reports print it as `thread 2 "worker"`; findings compare threads by it, not by that text.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadRef {
    pub(crate) id: ThreadId,
    pub(crate) name: Option<String>,
}

impl std::fmt::Display for ThreadRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "thread {} \"{name}\"", self.id),
            None => write!(f, "thread {}", self.id),
        }
    }
}

impl Serialize for ThreadRef {
    /// As the text reports print it: the JSON schema's thread fields are strings.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A lock's object id in its trace (`foresight dump` shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub(crate) struct LockId(pub u32);

/// A lock a finding refers to: its id and its name (its variable when static, else its kind
/// and id). Reports print the name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockRef {
    pub(crate) id: LockId,
    /// Its name as reports print it.
    pub name: String,
}

impl std::fmt::Display for LockRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Serialize for LockRef {
    /// By name: the JSON schema's lock fields are strings.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name)
    }
}

/// A source location involved in a finding.
#[derive(Clone, Debug, Serialize)]
pub struct FindingLocation {
    /// The source file, when symbolised.
    pub file: Option<String>,
    /// The source line, when symbolised.
    pub line: Option<u32>,
    pub(crate) function: Option<String>,
    pub(crate) thread: ThreadRef,
    /// What the site did in the finding.
    pub role: Role,
    pub(crate) trace: String,
    /// Where the site's function was called from, when known (`sites.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) called_from: Option<CallerReport>,
}

/// A site as reports show it: where, and the stack that led there.
#[derive(Clone, Debug, Serialize)]
pub struct SiteReport {
    pub(crate) location: String,
    pub(crate) file: Option<String>,
    /// The source line, when symbolised.
    pub line: Option<u32>,
    pub(crate) function: Option<String>,
    /// The frames from the user's outward (`sites.rs`), innermost first.
    pub(crate) stack: Vec<String>,
    /// Every recorded frame and every call inlined in it, innermost first, the standard
    /// library's and the wrappers' included.
    pub(crate) full_stack: Vec<String>,
    /// Where the site's function was called from, when known (`sites.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) called_from: Option<CallerReport>,
}

/// The caller of a site's function: JSON's `called_from`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct CallerReport {
    pub(crate) location: String,
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u32>,
    pub(crate) function: Option<String>,
    /// Only the caller of the site's first occurrence is known (a trace recorded one frame
    /// per site): other occurrences may have come from elsewhere.
    pub(crate) first_call_only: bool,
}

impl From<crate::sites::Caller> for CallerReport {
    fn from(c: crate::sites::Caller) -> Self {
        CallerReport {
            location: c.text,
            file: c.file,
            line: (c.line > 0).then_some(c.line),
            function: c.function,
            first_call_only: c.first_only,
        }
    }
}

impl From<Location> for SiteReport {
    fn from(l: Location) -> Self {
        SiteReport {
            location: l.text,
            file: l.file,
            line: (l.line > 0).then_some(l.line),
            function: l.function,
            stack: l.stack,
            full_stack: l.full_stack,
            called_from: l.caller.map(CallerReport::from),
        }
    }
}

/// A lock held at some point, where it was acquired.
#[derive(Clone, Debug, Serialize)]
pub struct HeldLock {
    /// The lock.
    pub lock: LockRef,
    pub(crate) class: String,
    pub(crate) mode: LockMode,
    pub(crate) site: SiteReport,
}

/// One edge of a cycle: `thread` held `held` and requested `lock`.
#[derive(Clone, Debug, Serialize)]
pub struct EdgeReport {
    pub(crate) from_class: String,
    pub(crate) to_class: String,
    pub(crate) trace: String,
    pub(crate) thread: ThreadRef,
    pub(crate) held: HeldLock,
    pub(crate) lock: LockRef,
    pub(crate) mode: LockMode,
    pub(crate) site: SiteReport,
    /// Every lock held at the request (the held set).
    pub(crate) held_set: Vec<HeldLock>,
    /// Event positions in the thread: the held lock's acquire and the request.
    pub(crate) held_position: u32,
    pub(crate) request_position: u32,
    /// How many times the class edge was seen in all traces.
    pub(crate) edge_count: u64,
    /// The edge was seen only before a flight recorder's window (its summary, FORMAT.md
    /// §7.15): no event positions, the held set is the held lock alone.
    pub(crate) earlier: bool,
}

/// A wait that holds locks hostage.
#[derive(Clone, Debug, Serialize)]
pub struct WaitReport {
    pub(crate) wait: WaitCall,
    pub(crate) trace: String,
    pub(crate) thread: ThreadRef,
    pub(crate) object: String,
    pub(crate) site: SiteReport,
    pub(crate) position: u32,
    /// The locks the waiting thread holds.
    pub held: Vec<HeldLock>,
    /// The thread the wait depends on, its acquisition of the held lock, and what it would do
    /// after (exit, arrive, signal, post).
    pub(crate) other_thread: ThreadRef,
    pub(crate) other_lock: LockRef,
    pub(crate) other_site: SiteReport,
    pub(crate) other_position: u32,
    pub(crate) other_then: Option<SiteReport>,
}

/// The reordered schedule prefix that reaches the deadlock.
#[derive(Clone, Debug, Serialize)]
pub struct Witness {
    pub(crate) trace: String,
    /// Each thread's part of the reordering, but for the threads counted in `others`.
    pub threads: Vec<WitnessThread>,
    /// The threads that run their whole recorded life, holding nothing, counted rather than
    /// listed when there are more than [`LISTED_WHOLE_THREADS`] of them (a program that made
    /// a thread per request); `None` when every thread is in `threads`.
    pub others: Option<WitnessOthers>,
    /// Lock operations of the prefix, in the order the witness runs them (the last ones).
    pub schedule: Vec<String>,
    pub(crate) schedule_truncated: bool,
}

/// A witness lists each thread that runs its whole recorded life holding nothing when there
/// are at most this many of them (every small program's witness reads as before); more are
/// counted in [`Witness::others`].
pub const LISTED_WHOLE_THREADS: usize = 8;

/// The threads of a witness that run every event they recorded (their exit included) and
/// hold nothing at the end: they run as recorded, and what is left to say is which they are.
#[derive(Clone, Debug, Serialize)]
pub struct WitnessOthers {
    /// How many threads.
    pub threads: u64,
    /// Their events, all together.
    pub events: u64,
    /// Their trace ids, as ranges `[first, last]` (inclusive), in increasing order.
    pub ids: Vec<[u32; 2]>,
}

impl WitnessOthers {
    /// Counts the threads of `ids` (trace ids, any order) that run `events` events in all.
    pub(crate) fn of(mut ids: Vec<u32>, events: u64) -> Self {
        ids.sort_unstable();
        ids.dedup();
        let mut ranges: Vec<[u32; 2]> = Vec::new();
        for id in &ids {
            match ranges.last_mut() {
                Some(r) if r[1].checked_add(1) == Some(*id) => r[1] = *id,
                _ => ranges.push([*id, *id]),
            }
        }
        WitnessOthers {
            threads: ids.len() as u64,
            events,
            ids: ranges,
        }
    }

    /// The ids as text: `2–991, 993–996, 1000`.
    pub(crate) fn ids_text(&self) -> String {
        let mut s = String::new();
        for (i, [first, last]) in self.ids.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            if first == last {
                s.push_str(&first.to_string());
            } else {
                s.push_str(&format!("{first}–{last}"));
            }
        }
        s
    }

    /// One line for humans, exact enough to replay: which threads, and that they run whole.
    pub(crate) fn text(&self) -> String {
        format!(
            "{} other threads run their whole recorded lives, holding nothing ({} events in \
             all): threads {}",
            self.threads,
            self.events,
            self.ids_text()
        )
    }
}

/// One thread of a witness.
#[derive(Clone, Debug, Serialize)]
pub struct WitnessThread {
    pub(crate) thread: ThreadRef,
    /// The thread runs its first `prefix_events` events…
    pub(crate) prefix_events: u32,
    /// …holding these locks at the end…
    pub(crate) holds: Vec<String>,
    /// …and then blocks here (empty for threads that just run their prefix).
    pub blocks: Option<String>,
}

/// A data race: the memory and both accesses, the earlier one in the trace first.
#[derive(Clone, Debug, Serialize)]
pub struct RaceReport {
    /// Where the earlier access starts.
    pub(crate) address: String,
    /// The static variable and element (`counters[3]`), when the trace's symbols name it.
    pub variable: Option<VariableReport>,
    /// The heap block the memory belongs to, when it is heap memory.
    pub block: Option<BlockReport>,
    /// The two accesses, the earlier in the trace first.
    pub accesses: [AccessReport; 2],
}

/// A heap block, from the recorder's allocation events.
#[derive(Clone, Debug, Serialize)]
pub struct BlockReport {
    /// Size of the block in bytes.
    pub size: u64,
    /// Offset of the earlier access in the block.
    pub offset: u64,
    /// Where it was allocated.
    pub allocated_at: SiteReport,
    pub(crate) thread: ThreadRef,
}

/// One access of a race.
#[derive(Clone, Debug, Serialize)]
pub struct AccessReport {
    /// What the access did.
    pub kind: AccessKind,
    /// Bytes accessed.
    pub size: u32,
    pub(crate) address: String,
    pub(crate) thread: ThreadRef,
    /// Position of the access in its thread (`foresight dump --thread`).
    pub(crate) position: u32,
    pub(crate) site: SiteReport,
    /// The locks the thread held (`name (read)` for the read side of an rwlock).
    pub locks_held: Vec<String>,
}

/// A lock held across a blocking call: JSON's `blocking`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct BlockingReport {
    /// The call's family (`read`, `recv`, `sleep`, …).
    pub(crate) call: HazardCall,
    pub(crate) thread: ThreadRef,
    /// Where the call was made.
    pub(crate) site: SiteReport,
    /// The locks held across it, outermost first.
    pub(crate) held: Vec<HeldLock>,
    /// Their classes, outermost first (JSON's `cycle`, the baseline key's and the
    /// suppressions' classes).
    pub(crate) lock_classes: Vec<String>,
    /// The longest such call seen, in nanoseconds; null when none was seen to return.
    pub(crate) longest_ns: Option<u64>,
    /// The longest wait such a call asked for (a sleep's duration, a poll's timeout), in
    /// nanoseconds; null when one had no limit, or took none.
    pub(crate) timeout_ns: Option<u64>,
    /// How many such calls the traces hold.
    pub(crate) calls: u64,
}

/// The family of a blocking call made under a lock: JSON's `blocking.call`, the suppressions'
/// `call`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum HazardCall {
    /// `read`, `readv` on a pipe, FIFO or socket.
    Read,
    /// `write`, `writev` on a pipe, FIFO or socket.
    Write,
    /// `recv`, `recvfrom`, `recvmsg`.
    Recv,
    /// `send`, `sendmsg`.
    Send,
    /// `accept`, `accept4`.
    Accept,
    /// `connect`.
    Connect,
    /// `poll`, `ppoll`.
    Poll,
    /// `select`.
    Select,
    /// `epoll_wait`, `epoll_pwait`.
    EpollWait,
    /// A sleep (`sleep`, `usleep`, `nanosleep`, `clock_nanosleep`).
    Sleep,
    /// A wait for a child (`wait`, `waitpid`, `wait4`, `waitid`).
    Waitpid,
    /// `fsync`, `fdatasync`.
    Fsync,
}

impl From<foresight_trace::event::BlockingCall> for HazardCall {
    fn from(c: foresight_trace::event::BlockingCall) -> Self {
        use foresight_trace::event::BlockingCall as B;
        match c {
            B::Read => Self::Read,
            B::Write => Self::Write,
            B::Recv => Self::Recv,
            B::Send => Self::Send,
            B::Accept => Self::Accept,
            B::Connect => Self::Connect,
            B::Poll => Self::Poll,
            B::Select => Self::Select,
            B::EpollWait => Self::EpollWait,
            B::Sleep => Self::Sleep,
            B::WaitChild => Self::Waitpid,
            B::Sync => Self::Fsync,
        }
    }
}

/// A lock a signal handler takes: JSON's `signal`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SignalReport {
    /// The signal's number and name (`SIGUSR1`, `SIGRTMIN+2`).
    pub(crate) signal: u8,
    pub(crate) signal_name: String,
    /// What the handler called (`pthread_mutex_lock`, …).
    pub(crate) function: String,
    pub(crate) lock: LockRef,
    /// The lock's class (the suppressions' and the baseline key's).
    pub(crate) lock_classes: Vec<String>,
    /// Where the handler took it.
    pub(crate) handler: SignalSite,
    /// Where the lock was held outside any handler with the signal unblocked
    /// (`handler-interrupts-holder`); null for `lock-in-handler`.
    pub(crate) holder: Option<SignalSite>,
}

/// A site of a `signal-unsafe-lock` finding and the thread seen there.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SignalSite {
    pub(crate) thread: ThreadRef,
    pub(crate) mode: LockMode,
    pub(crate) site: SiteReport,
}

/// A signal's name as `kill -l` gives it (`SIGUSR1`; real-time ones from glibc's `SIGRTMIN`,
/// 34: `SIGRTMIN+2`).
pub(crate) fn signal_short_name(signal: u8) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match signal {
        1..=31 => NAMES[signal as usize].to_string(),
        34 => "SIGRTMIN".to_string(),
        35..=64 => format!("SIGRTMIN+{}", signal - 34),
        _ => format!("signal {signal}"),
    }
}

/// What the run was really doing when its trace ended: threads blocked for good.
#[derive(Clone, Debug, Serialize)]
pub struct ObservedReport {
    pub(crate) trace: String,
    /// How the trace ended: the process's end, or why recording stopped.
    pub(crate) ended: String,
    /// The threads of the cycle in wait-for order: each waits for the next, the last for the
    /// first (one thread: it waits for itself). Empty for a stall.
    pub cycle: Vec<ThreadRef>,
    /// The lock classes the cycle's threads request, in the cycle's order (JSON's `cycle`,
    /// the baseline key's classes); empty when the cycle has no lock request, and for stalls.
    pub(crate) lock_classes: Vec<String>,
    /// Every thread involved: the cycle's first, then those blocked behind them, then the
    /// holders that were not blocked (running, exited, in a timed wait).
    pub threads: Vec<BlockedThread>,
}

/// One thread of an observed deadlock or stall.
#[derive(Clone, Debug, Serialize)]
pub struct BlockedThread {
    pub(crate) thread: ThreadRef,
    /// How the thread was when the trace ended.
    pub state: ThreadState,
    /// The call it was blocked in: `lock`, `read-lock`, `join`, `condition`, `barrier`,
    /// `semaphore`, `once`; null when not blocked in a recorded call.
    pub waits: Option<BlockingCall>,
    /// What that call waits on (a lock, a thread, a condition…).
    pub(crate) object: Option<String>,
    pub(crate) site: Option<SiteReport>,
    /// Position of the call in the thread (`foresight dump --thread`).
    pub(crate) position: Option<u32>,
    /// Every lock it held.
    pub held: Vec<HeldLock>,
    /// The threads it waits for, where the trace says (the holders of the lock, the joined
    /// thread, the thread running the once routine).
    pub waits_for: Vec<ThreadRef>,
}

/// A static variable, and where it is declared.
#[derive(Clone, Debug, Serialize)]
pub struct VariableReport {
    /// With the path to the element accessed: `counters[3]`, `cfg.limits.max`.
    pub name: String,
    pub(crate) file: Option<String>,
    /// The line of its declaration, when known.
    pub line: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    #[test]
    fn the_threads_a_witness_counts_are_named_by_ranges_of_ids() {
        let others = WitnessOthers::of(vec![9, 3, 4, 5, 12, 10, 7, 4], 70);
        assert_eq!(others.threads, 7);
        assert_eq!(others.ids, [[3, 5], [7, 7], [9, 10], [12, 12]]);
        assert_eq!(others.ids_text(), "3–5, 7, 9–10, 12");
        assert_eq!(
            serde_json::to_value(&others).unwrap(),
            serde_json::json!({"threads": 7, "events": 70, "ids": [[3, 5], [7, 7], [9, 10], [12, 12]]})
        );
        let edge = WitnessOthers::of(vec![u32::MAX, u32::MAX - 1, 0], 3);
        assert_eq!(edge.ids, [[0, 0], [u32::MAX - 1, u32::MAX]]);
    }

    /// serde names the enums in JSON and strum in text: one rename rule, two derives, so a
    /// test keeps them the same name.
    fn same_names<T: Serialize + std::fmt::Display>(values: &[T]) {
        for v in values {
            let json = serde_json::to_string(v).unwrap();
            assert_eq!(json, format!("\"{v}\""));
        }
    }

    #[test]
    fn json_and_text_give_each_enum_one_name() {
        same_names(Kind::VARIANTS);
        same_names(Role::VARIANTS);
        same_names(AccessKind::VARIANTS);
        same_names(Rule::VARIANTS);
        same_names(WaitCall::VARIANTS);
        same_names(ThreadState::VARIANTS);
        same_names(BlockingCall::VARIANTS);
        same_names(&[
            Verdict::Observed,
            Verdict::Predicted,
            Verdict::Potential,
            Verdict::Violation,
        ]);
        same_names(&[LockMode::Write, LockMode::Read]);
        assert_eq!(Kind::RwlockDeadlock.name(), "rwlock-deadlock");
        assert_eq!(Role::ReadLocksAgain.name(), "read-locks-again");
        assert_eq!(
            "potential-deadlock".parse::<Kind>().ok(),
            Some(Kind::PotentialDeadlock)
        );
    }
}
