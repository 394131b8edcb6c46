//! The foresight analyzer: reads traces and predicts deadlocks and races; and the CLI.

pub mod cli;
