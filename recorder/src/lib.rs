//! The foresight runtime: an `LD_PRELOAD` library that records synchronisation events.
//!
//! Work in progress: only the resolution of real symbols exists so far.

pub mod real;
