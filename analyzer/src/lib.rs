//! The foresight analyzer: reads traces and predicts deadlocks and races; and the CLI.
//!
//! Pipeline of `foresight analyze` (see ARCHITECTURE.md): [`stream`] walks each trace's merged
//! events once and feeds them to passes, [`model`]'s passes convert the trace into the
//! analyzer's types (with the [`hb`] clocks), [`lock_graph`] builds the class-level lock-order
//! graph over all traces, [`cycles`] enumerates its elementary cycles, the lock-cycle pass
//! decides which are predicted at instance level with the sync-preserving [`closure`] (patterns
//! and searches in [`deadlock`]), [`waits`] covers join/barrier/condition/semaphore waits and
//! rwlocks, [`ranks`] the declared lock ranks, [`races`] the data races (a happens-before pass in
//! the same walk; `race_findings` reports them, with the sync-preserving closure for what only
//! lock hand-offs order),
//! `observed` the deadlocks and stalls a run was really in when its trace ended — each making
//! its own findings — [`analysis`] runs them within the [`options`]' budgets and assembles the
//! [`report`], which renders them. ARCHITECTURE.md ("Layers") says which module may use which.

pub mod analysis;
pub mod baseline;
pub mod cli;
pub mod closure;
pub mod cycles;
pub mod deadlock;
mod describe;
pub mod escape;
pub mod hb;
mod last_writers;
mod lock_cycles;
pub mod lock_graph;
pub mod merge;
pub mod model;
mod observed;
pub mod options;
mod race_findings;
pub mod races;
pub mod ranks;
pub mod report;
pub mod sites;
pub mod stdtrace;
pub mod stream;
pub mod suppressions;
pub mod vector_clock;
pub mod waits;
mod wrapper_hints;
