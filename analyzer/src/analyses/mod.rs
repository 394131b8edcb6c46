//! The analyses: each turns the models of one part of the input (a trace, or a segment of
//! one) into findings, behind one interface ([`Analysis`]), and each lives in a folder of its
//! own. [`REGISTRY`] lists them in the order the driver (`analysis.rs`) runs them.
//!
//! Adding an analysis: a folder here with a type that implements [`Analysis`], and one line in
//! [`REGISTRY`]. It reads the part's runs (`model::Run`: what the walk's passes kept), the
//! part's lock-order graph and the options; it spends the budgets it shares with the others
//! and writes its counters into the summary; it returns its findings. The driver orders the
//! findings of every analysis and merges parts and traces (`merge.rs`), so an analysis never
//! sees another part.

use crate::closure::Budget;
use crate::lock_graph::LockOrderGraph;
use crate::model::Run;
use crate::options::Options;
use crate::report::{ComponentSummary, Finding, Summary};

pub mod hazards;
pub mod lock_cycles;
pub mod observed;
pub mod races;
pub mod ranks;
pub mod sync_reversal;
pub mod waits;

/// Every analysis, in the order they run: the lock cycles spend the deadlock budget before the
/// waits do; rank violations come last in a report whatever the order here.
pub const REGISTRY: &[&dyn Analysis] = &[
    &lock_cycles::LockCycles,
    &waits::Waits,
    &observed::Observed,
    &races::Races,
    &sync_reversal::SyncReversal,
    &ranks::Ranks,
    &hazards::Hazards,
];

/// What an analysis receives: one part of the input.
pub struct Part<'a> {
    /// The part's runs: one, the trace or the segment (`analysis::analyze_part`); several
    /// runs' edges in one graph stay possible (each run by its index), as the lock cycles
    /// distinguish them.
    pub runs: &'a [Run],
    /// The class-level lock-order graph of those runs, each run's edges by its index.
    pub graph: &'a LockOrderGraph,
    pub opts: &'a Options,
}

/// The budgets the analyses of one part share; the summary says what each spent.
pub struct Budgets {
    /// Instance-level deadlock patterns checked with the closure (lock cycles, then waits).
    pub(crate) deadlock: Budget,
    /// Race candidates checked with the closure.
    pub(crate) race: Budget,
    /// Race candidates searched for a reordering that reverses critical sections, and the
    /// closure steps that search may take.
    pub(crate) reversal: Budget,
}

impl Budgets {
    pub fn new(opts: &Options) -> Self {
        Budgets {
            deadlock: Budget::new(opts.candidate_budget, opts.closure_steps),
            race: Budget::new(
                opts.race_candidate_budget,
                opts.race_candidate_budget
                    .saturating_mul(races::STEPS_PER_CHECK),
            ),
            reversal: Budget::new(opts.race_candidate_budget, sync_reversal::STEP_BUDGET),
        }
    }
}

/// What an analysis returns besides its counters (which it adds to the summary it is handed).
#[derive(Default)]
pub struct Output {
    pub findings: Vec<Finding>,
    /// Per strongly connected component of the lock-order graph with cycles: what was found
    /// there (the lock cycles alone fill it).
    pub components: Vec<ComponentSummary>,
}

/// One analysis.
pub trait Analysis: Sync {
    /// A short name: its folder's, for readers of the registry (the registry's test holds
    /// them distinct); no report prints it.
    #[allow(dead_code)]
    fn name(&self) -> &'static str;

    /// The part's findings, appended to `out`; counters into `summary`.
    fn analyze(&self, part: &Part, budgets: &mut Budgets, summary: &mut Summary, out: &mut Output);

    /// Once every analysis of the part has run: drops what another analysis's findings already
    /// say (an observed deadlock supersedes the predictions of the same blocked calls).
    fn settle(&self, _findings: &mut Vec<Finding>) {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_registered_analysis_has_a_name_of_its_own() {
        let mut names: Vec<&str> = super::REGISTRY.iter().map(|a| a.name()).collect();
        let registered = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), registered, "{names:?}");
    }
}
