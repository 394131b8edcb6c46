//! The foresight analyzer: reads traces, predicts deadlocks and races, and renders the reports.
//! The command-line tool is the `foresight-cli` crate; RAPID's STD text format is
//! `foresight-stdtrace`.
//!
//! Pipeline of `foresight analyze` (see ARCHITECTURE.md, `analyzer/`, "The pipeline"): one walk
//! over each trace's merged events ([`walk`], [`stream`]) feeds the passes ([`model`]'s
//! visitors with their clocks, and the [`races`] pass), which hand out a [`Run`] per part of
//! the trace (the whole trace, or each segment of it); [`analysis`], the one driver
//! ([`analyze`], [`analyze_part`], [`SegmentFold`]), runs every analysis of the registry over
//! each part (lock cycles with the sync-preserving closure and the patterns of `deadlock.rs`,
//! waits and rwlocks, observed hangs, races, sync-reversal races, ranks, hazards: each in its
//! folder under `analyses/`, each making its own findings), within the [`Options`]' budgets;
//! [`merge`] ([`Merger`]) folds the parts of every trace into one [`Report`] of [`Finding`]s,
//! which [`report`]'s renderers print. ARCHITECTURE.md ("Layers") says which module may use
//! which.
//!
//! The root re-exports what a caller of the pipeline needs; the `pub` modules hold the rest
//! the CLI, the tests and the benches use; the others are the analyzer's own.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// What the CLI, the other crates, the tests and the benches use: the pipeline's entry points,
// findings and renderers, options, and the pieces a command reads on its own (the
// lock-order graph for `graph`, baselines and suppressions for `check`, escaping).
pub mod analysis;
pub mod baseline;
pub mod escape;
mod handoffs;
pub mod lock_graph;
pub mod merge;
pub mod model;
pub mod options;
pub mod races;
pub mod report;
pub mod sites;
pub mod stream;
pub mod suppressions;

// The analyzer's own rooms: the analyses behind the registry and what they are built from.
mod alive;
mod analyses;
mod closure;
mod cycles;
mod deadlock;
mod describe;
mod hb;
mod last_writers;
mod recording;
mod vector_clock;
mod wrapper_hints;

pub use analyses::observed::descriptor_taken;
pub use analysis::{analyze, analyze_in_segments, analyze_part, SegmentFold};
pub use lock_graph::LockOrderGraph;
pub use merge::{Merger, TraceAnalysis};
pub use model::{build_run, walk, ModelPass, Run};
pub use options::Options;
pub use report::{Finding, FindingKey, Kind, Report, Rule, Verdict};
