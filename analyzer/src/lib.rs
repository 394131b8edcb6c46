//! The foresight analyzer: reads traces, predicts deadlocks and races, and renders the reports.
//! The command-line tool is the `foresight-cli` crate; RAPID's STD text format is
//! `foresight-stdtrace`.
//!
//! Pipeline of `foresight analyze` (see ARCHITECTURE.md, `analyzer/`, "The pipeline"): one walk
//! over each trace's merged events ([`model::walk`], [`stream`]) feeds the passes ([`model`]'s
//! visitors with the [`hb`] clocks, and the [`races`] pass), which hand out a `Run` per part of
//! the trace (the whole trace, or each segment of it); [`analysis`], the one driver, runs every
//! analysis of [`analyses::REGISTRY`] over each part (lock cycles with the sync-preserving
//! [`closure`] and the patterns of [`deadlock`], waits and rwlocks, observed hangs, races,
//! ranks: each in its folder under `analyses/`, each making its own findings), within the
//! [`options`]' budgets; [`merge`] folds the parts of every trace into one [`report`], which
//! renders them. ARCHITECTURE.md ("Layers") says which module may use which.

#![forbid(unsafe_code)]

pub mod analyses;
pub mod analysis;
pub mod baseline;
pub mod closure;
pub mod cycles;
pub mod deadlock;
mod describe;
pub mod escape;
mod handoffs;
pub mod hb;
mod last_writers;
pub mod lock_graph;
pub mod merge;
pub mod model;
pub mod options;
pub mod races;
pub mod recording;
pub mod report;
pub mod sites;
pub mod stream;
pub mod suppressions;
pub mod vector_clock;
mod wrapper_hints;
