//! Where the threads' event chunks go: one interface over the two sinks.
//!
//! - the trace file (`output.rs`): each chunk is written at once, after the pending table
//!   records;
//! - the flight recorder's ring (`flight.rs`, `--keep-last`): the table records still go to
//!   the file at once, the chunks to the ring, and only the most recent ones reach the file, as
//!   the window written when the trace is completed, before an `exec`, or into a `--dump-on`
//!   snapshot.
//!
//! The code that fills and completes the trace (`thread_state/`, `runtime.rs`, `flusher.rs`,
//! `startup.rs`) goes through here and does not ask which sink is in use. The ring writes its
//! window through the file sink; neither sink knows of this module.

use crate::context::Context;
use crate::{flight, output};

/// The sink in use: chosen once at start-up (`flight::configure`), the same in a fork child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// The trace file.
    File,
    /// The flight recorder's ring in memory.
    Ring,
}

impl Sink {
    #[inline]
    pub fn in_use() -> Sink {
        if flight::active() {
            Sink::Ring
        } else {
            Sink::File
        }
    }
}

/// Takes one framed event chunk holding `events` events, after the pending table records
/// (written to the file first, so that a record precedes every chunk that names it). A chunk
/// the sink could not take counts as lost events in the trailer.
pub fn write_event_chunk(chunk: &[u8], events: u32, context: Context) {
    match Sink::in_use() {
        Sink::File => output::write_event_chunk(chunk, events, context),
        Sink::Ring => {
            output::flush_tables(context);
            // Counted when the window is written.
            if !flight::push(chunk, context) {
                output::count_lost(events as u64);
            }
        }
    }
}

/// What the sink still holds goes to the file (the ring's window; the file sink holds
/// nothing), leaving `end_room` bytes of the bound for the end of the trace. Before the end
/// states and trailer (`runtime::finish`) and before an `exec`.
pub fn write_held(context: Context, end_room: u64) {
    if Sink::in_use() == Sink::Ring {
        flight::dump(context, end_room);
    }
}

/// `--dump-on`: what the sink holds, written to the snapshot file `fd` from offset `at`
/// (`flight::snapshot`); the offset after it, or `None`. Only the ring keeps a window apart
/// from the trace.
pub fn write_snapshot(
    context: Context,
    signal: u32,
    at: u64,
    write: &dyn Fn(&[u8], u64) -> bool,
) -> Option<u64> {
    match Sink::in_use() {
        Sink::Ring => flight::snapshot(context, signal, at, write),
        Sink::File => None,
    }
}

/// The flusher's round: the ring's sign of life (see `flight::touch_on_progress`); a file
/// grows by itself.
pub fn touch_on_progress() {
    if Sink::in_use() == Sink::Ring {
        flight::touch_on_progress();
    }
}

/// Fork: both sinks' locks are held across it (the ring's first), so that the child inherits
/// consistent ones.
pub fn lock_for_fork() {
    flight::lock_for_fork();
    output::lock_for_fork();
}

/// # Safety
/// Only after `lock_for_fork`.
pub unsafe fn unlock_after_fork() {
    // SAFETY: forwarded contract.
    unsafe {
        output::unlock_after_fork();
        flight::unlock_after_fork();
    }
}
