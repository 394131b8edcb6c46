//! What the analyses may spend and how much they list: the budgets and limits of `foresight
//! analyze`, read by every analysis and by the driver that runs them.

/// Lock cycles `--all` lists per component and verdict: every cycle the search finds is
/// checked and counted, but a dense lock-order graph has millions (12 locks taken in every
/// order have over 10^8), and listing each would make the report, and the memory that holds
/// it, grow with them. The rest are counted, and the report says the listing was cut.
pub const ALL_CYCLES_LISTED: usize = 1_000;

/// The budgets and limits of one analysis; `Options::default()` is `foresight analyze`'s.
#[derive(Clone, Debug)]
pub struct Options {
    /// Longest cycle enumerated (in locks, which is also in threads); `None`: any length, within
    /// the budget.
    pub max_cycle_length: Option<usize>,
    /// Search steps for the cycle enumeration, per graph.
    pub cycle_budget: u64,
    /// Instance-level patterns checked with the closure, over the whole analysis.
    pub candidate_budget: u64,
    /// Patterns tried per instance-level cycle.
    pub candidates_per_cycle: u64,
    /// Work (events entering closures) allowed to the complete search of abstract patterns,
    /// over the whole analysis.
    pub closure_steps: u64,
    /// Race candidates (pairs ordered only through lock hand-offs) checked with the
    /// sync-preserving closure, over the whole analysis.
    pub race_candidate_budget: u64,
    /// Lock cycles listed per strongly connected component of the lock-order graph and per
    /// verdict (shortest first); the others are counted. Prediction in a component stops once
    /// this many deadlocks are predicted there. `--all` sets [`ALL_CYCLES_LISTED`].
    pub cycles_listed: usize,
    /// A sleep (`sleep`, `usleep`, `nanosleep`, `clock_nanosleep`) under a lock is reported
    /// only when one took at least this long (1 ms by default, `docs/report-schema.md`): a
    /// short back-off under a lock is a cost, not a hazard. Other blocking calls are always
    /// reported: how long they take is another thread's or process's choice.
    pub sleep_threshold_ns: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_cycle_length: None,
            cycle_budget: 20_000_000,
            candidate_budget: 50_000,
            candidates_per_cycle: 64,
            closure_steps: 400_000_000,
            race_candidate_budget: 100_000,
            cycles_listed: 3,
            sleep_threshold_ns: 1_000_000,
        }
    }
}
