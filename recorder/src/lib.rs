//! The foresight runtime: an `LD_PRELOAD` library (`libforesight_rt.so`) that records the
//! synchronisation events of a C/C++ program into a foresight trace.
//!
//! Code map (see `ARCHITECTURE.md`, "recorder/" and invariants I3–I8):
//! - `hooks/`: the interposed functions, one module per primitive family, and the naked
//!   entries that capture the caller's return address (`hooks/naked.rs`).
//! - `runtime.rs`: start-up (`.init_array`), completion (exit, `_exit`, signals, exec), fork.
//! - `flusher.rs`: the runtime's thread that writes idle and old buffers, and stops the
//!   process on `--hang-timeout`.
//! - `signals.rs`: the runtime's handler for every signal that ends the process, chained to the
//!   program's (interposed `sigaction` and `signal`).
//! - `thread_state.rs`: per-thread buffers and clocks, the live-thread registry, `pthread_t` map.
//! - `sequence.rs`: event keys (Lamport clocks by default, or one global counter).
//! - `objects.rs`: address → object id with generations; per-object clocks.
//! - `stripes.rs`: per-address clocks (and locks) for atomics, allocations, annotations.
//! - `accesses.rs`: an instrumented thread's dedup cache, access-site cache, shadow stack.
//! - `sites.rs`, `modules.rs`: call sites as module + offset (unwound to the user's frame
//!   where the return address is in locking machinery); loaded modules and build-ids.
//! - `wrappers.rs`: which code addresses are locking machinery (runtime libraries, the
//!   standard library's lock functions, the program's wrappers), from ELF symbol tables.
//! - `flight.rs`: flight-recorder mode (`--keep-last`): the ring of recent chunks, the
//!   summary of lock-order edges before it, the window written at the end.
//! - `output.rs`: the trace file (pwrite at reserved offsets), table records, trailer.
//! - `alloc.rs`: the mmap-backed global allocator (never the program's malloc).
//! - `config.rs`, `spin.rs`, `real.rs`: the env contract, a spinlock, real-symbol lookup.

pub mod accesses;
pub mod alloc;
pub mod config;
pub mod flight;
pub mod flusher;
pub mod hooks;
pub mod modules;
pub mod objects;
pub mod output;
pub mod real;
pub mod runtime;
pub mod sequence;
pub mod signals;
pub mod sites;
pub mod spin;
pub mod stripes;
pub mod thread_state;
pub mod wrappers;

/// Every Rust allocation of the runtime comes from its own mmap regions (`alloc.rs`).
#[global_allocator]
pub static ALLOC: alloc::RtAlloc = alloc::RtAlloc::new();

/// Runs `runtime::init` when the library is loaded, before the program's constructors and
/// `main`.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = runtime::init;
