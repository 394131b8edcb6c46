//! The foresight runtime: an `LD_PRELOAD` library (`libforesight_rt.so`) that records the
//! synchronisation events of a C/C++ program into a foresight trace.
//!
//! Code map (see `ARCHITECTURE.md`, "recorder/" and invariants I3–I8), from the top down; no
//! module uses one above it:
//! - `startup.rs`: start-up (`.init_array`) and the fork handlers.
//! - `hooks/`: the interposed functions, one module per primitive family, and the naked
//!   entries that capture the caller's return address (`hooks/naked.rs`).
//! - `signals.rs`: the runtime's handler for every signal that ends the process, chained to the
//!   program's (interposed `sigaction` and `signal`).
//! - `flusher.rs`: the runtime's thread that writes idle and old buffers, and stops the
//!   process on `--hang-timeout`.
//! - `runtime.rs`: completion and checkpoints (exit, `_exit`, signals, exec, `--dump-on`).
//! - `thread_state/`: per-thread buffers, lanes, caches and access recording, the live-thread
//!   registry, fork handling, the `pthread_t` map.
//! - `accesses.rs`: an instrumented thread's dedup cache, access-site cache, shadow stack.
//! - `sites.rs`: call sites as module + offset (unwound to the user's frame where the return
//!   address is in locking machinery).
//! - `wrappers.rs`: which code addresses are locking machinery (runtime libraries, the
//!   standard library's lock functions, the program's wrappers), from ELF symbol tables.
//! - `objects.rs`: address → object id with generations; per-object clocks.
//! - `modules.rs`: loaded modules and build-ids.
//! - `sink.rs`: where event chunks go, one interface over the two sinks below it:
//!   `flight.rs` (`--keep-last`: the ring of recent chunks, the summary of lock-order edges
//!   before it, the window written at the end) and `output.rs` (the trace file: pwrite at
//!   reserved offsets, table records, trailer, snapshots).
//! - `quiesce.rs`: the handshake between a thread's fast path and a foreign flush.
//! - `state.rs`: the life cycle (recording, paused, done, stopped), the owning pid, the
//!   flusher's presence.
//! - `sequence.rs`, `stripes.rs`: event keys; per-address clocks and locks.
//! - `alloc.rs`: the mmap-backed global allocator (never the program's malloc).
//! - `config.rs`, `spin.rs`, `real.rs`, `sigmask.rs`: the env contract, a spinlock,
//!   real-symbol lookup, signal masks.
//! - `context.rs`: whether code runs in a signal handler (every lock wait bounded there).

pub mod accesses;
pub mod alloc;
pub mod config;
pub mod context;
pub mod first_touch;
pub mod flight;
pub mod flusher;
pub mod hooks;
pub mod modules;
pub mod objects;
pub mod output;
pub mod quiesce;
pub mod real;
pub mod runtime;
pub mod sequence;
pub mod sigmask;
pub mod signals;
pub mod sink;
pub mod sites;
pub mod spawned;
pub mod spin;
pub mod startup;
pub mod state;
pub mod stripes;
pub mod thread_state;
pub mod trace_header;
pub mod wrappers;

/// Every Rust allocation of the runtime comes from its own mmap regions (`alloc.rs`).
#[global_allocator]
pub static ALLOC: alloc::RtAlloc = alloc::RtAlloc::new();

/// Runs `startup::init` when the library is loaded, before the program's constructors and
/// `main`.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = startup::init;
