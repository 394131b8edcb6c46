//! How each thread's recording ended: the blocking call it was inside when the trace was
//! completed (a lock request, join, condition, barrier, semaphore or once wait without its
//! outcome), whether it exited, and the end states the trace's thread-end records give
//! (FORMAT.md §7.12). `observed.rs` reads them to report what really hung.
//!
//! Calls nest only through signal handlers (a handler that runs while its thread waits), so
//! each thread keeps a short stack of calls without an outcome; the innermost is the call the
//! end state refers to. A hostile trace can open calls without end: the stack keeps the
//! innermost [`MAX_NESTED`].

use foldhash::{HashMap, HashMapExt};

use foresight_trace::event::{ObjectId, SiteId};
use foresight_trace::tables::Tables;
use foresight_trace::tables::{EndReason, RecordingStopped, ThreadEndState};

use super::{Mode, ThreadIds};
use crate::alive::{Alive, BySlot};
use crate::stream::{Op, StreamEvent};

/// Blocking calls kept open per thread (a signal handler inside a wait inside a handler…).
const MAX_NESTED: usize = 16;

/// What a blocking call waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocking {
    /// A lock request not yet granted.
    Lock {
        /// The lock.
        lock: ObjectId,
        /// The mode asked for.
        mode: Mode,
    },
    /// `child` is the dense index of the joined thread, when the trace knows it.
    Join {
        /// The joined thread's dense index, when the trace knows it.
        child: Option<u32>,
    },
    /// A condition wait (the mutex is released during it).
    Condition {
        /// The condition variable.
        cond: ObjectId,
        /// The mutex it reacquires.
        mutex: ObjectId,
    },
    /// A barrier wait.
    Barrier {
        /// The barrier.
        barrier: ObjectId,
    },
    /// A semaphore wait.
    Semaphore {
        /// The semaphore.
        sem: ObjectId,
    },
    /// A once initialisation (`pthread_once`, `call_once`): waits until its initialiser has run.
    Once {
        /// The once object.
        once: ObjectId,
    },
}

/// A blocking call without an outcome in the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingCall {
    /// Position of the request or wait in its thread.
    pub(crate) pos: u32,
    pub(crate) site: SiteId,
    pub(crate) what: Blocking,
}

/// How the run's threads ended, as far as the trace says.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunEnd {
    /// Per thread: its end state, for a thread that had not exited in a trace completed by a
    /// recorder of format 1.4 or later (none for an older trace or one cut short).
    pub(crate) states: Vec<Option<ThreadEndState>>,
    /// The threads with a blocking call without an outcome at the end of their events, and
    /// the innermost such call, by thread: a few threads of the many a program may have
    /// created ([`RunEnd::pending_of`]).
    pending: Vec<(u32, PendingCall)>,
    /// Per thread: it has a `thread-exit`.
    pub(crate) exited: Vec<bool>,
    /// The thread running each once routine that had not ended, by once object.
    pub(crate) once_runners: HashMap<ObjectId, u32>,
    /// How the process ended (the trailer's reason), when the trace was completed.
    pub(crate) reason: Option<EndReason>,
    /// Recording stopped before the process ended, and why.
    pub(crate) stopped: Option<RecordingStopped>,
    /// The trace is a snapshot taken on this signal while the process ran on (`record
    /// --dump-on`): its end states are those of that moment.
    pub(crate) snapshot: Option<u32>,
    /// The `exec` after which its thread recorded nothing more: the process became another
    /// program (the last exec of the part, by its site).
    pub(crate) exec: Option<SiteId>,
    /// The recorded process (its pid, and when recording started), from the trace's header:
    /// what the trace of a program it executed has too.
    pub(crate) process: Option<(u32, u64)>,
}

impl RunEnd {
    /// The innermost blocking call of thread `t` without an outcome at the end of its events.
    pub(crate) fn pending_of(&self, t: u32) -> Option<&PendingCall> {
        let i = self.pending.binary_search_by_key(&t, |&(u, _)| u).ok()?;
        Some(&self.pending[i].1)
    }
}

pub(super) struct PendingCalls {
    /// Per slot of a thread alive (`LockSections::alive`): the calls it is in, innermost last.
    open: BySlot<Vec<PendingCall>>,
    /// Bit `t % 64` of word `t / 64`: thread `t` has a `thread-exit` among the events so far.
    exited: Vec<u64>,
    once_runners: HashMap<ObjectId, u32>,
    /// The last `exec` (thread, site), until its thread records anything after it (the exec
    /// failed).
    exec: Option<(usize, SiteId)>,
}

impl PendingCalls {
    pub fn new(threads: usize) -> Self {
        PendingCalls {
            open: BySlot::default(),
            exited: vec![0; threads.div_ceil(64)],
            once_runners: HashMap::new(),
            exec: None,
        }
    }

    /// One event of the thread in slot `slot`.
    #[inline]
    pub fn handle(&mut self, ev: &StreamEvent, slot: usize) {
        let t = ev.thread as usize;
        self.after_exec(t);
        let begin = |site, what| PendingCall {
            pos: ev.pos,
            site,
            what,
        };
        match ev.op {
            Op::LockRequest { lock, mode, site } => {
                self.lock_request(t, slot, ev.pos, site, lock, mode)
            }
            Op::LockAcquired { lock, .. } | Op::LockFailed { lock } => {
                self.lock_outcome(slot, lock)
            }
            Op::JoinRequest { child, site } => {
                self.open(slot, begin(site, Blocking::Join { child }))
            }
            Op::Join { child, .. } => self.close(
                slot,
                |w| matches!(w, Blocking::Join { child: c } if c == child),
            ),
            Op::CondWaitBegin { cond, mutex, site } => {
                self.open(slot, begin(site, Blocking::Condition { cond, mutex }))
            }
            Op::CondWaitEnd { cond, .. } => self.close(
                slot,
                |w| matches!(w, Blocking::Condition { cond: c, .. } if c == cond),
            ),
            Op::BarrierArrive { barrier, site, .. } => {
                self.open(slot, begin(site, Blocking::Barrier { barrier }))
            }
            Op::BarrierDepart { barrier, .. } => self.close(
                slot,
                |w| matches!(w, Blocking::Barrier { barrier: b } if b == barrier),
            ),
            Op::SemWaitBegin { sem, site } => {
                self.open(slot, begin(site, Blocking::Semaphore { sem }))
            }
            Op::SemWaitEnd { sem, .. } => self.close(
                slot,
                |w| matches!(w, Blocking::Semaphore { sem: s } if s == sem),
            ),
            Op::OnceBegin { once, site } => self.open(slot, begin(site, Blocking::Once { once })),
            Op::OnceRun { once } => {
                self.close(
                    slot,
                    |w| matches!(w, Blocking::Once { once: o } if o == once),
                );
                self.once_runners.insert(once, t as u32);
            }
            Op::OnceSkip { once } => self.close(
                slot,
                |w| matches!(w, Blocking::Once { once: o } if o == once),
            ),
            Op::OnceEnd { once } => {
                self.once_runners.remove(&once);
            }
            Op::ThreadExit => {
                if let Some(w) = self.exited.get_mut(t / 64) {
                    *w |= 1 << (t % 64);
                }
                // Its slot may go to a later thread (`LockSections`): memory follows the
                // threads alive, not those created.
                self.open.get_mut(slot).clear();
            }
            Op::Exec { site } => self.exec = Some((t, site)),
            _ => {}
        }
    }

    /// Bit `t % 64` of word `t / 64`: thread `t` has a `thread-exit` among the events so far.
    pub fn exited(&self) -> &[u64] {
        &self.exited
    }

    /// Thread `t` records an event: an exec of its before this one did not replace the
    /// program.
    #[inline(always)]
    fn after_exec(&mut self, t: usize) {
        if self.exec.is_some_and(|(e, _)| e == t) {
            self.exec = None;
        }
    }

    /// A lock request: what [`PendingCalls::handle`] does with one.
    #[inline(always)]
    pub fn lock_request(
        &mut self,
        t: usize,
        s: usize,
        pos: u32,
        site: SiteId,
        lock: ObjectId,
        mode: Mode,
    ) {
        self.after_exec(t);
        self.open(
            s,
            PendingCall {
                pos,
                site,
                what: Blocking::Lock { lock, mode },
            },
        )
    }

    /// A lock acquired or failed by the thread in slot `s`: what [`PendingCalls::handle`]
    /// does with one.
    #[inline(always)]
    pub fn lock_outcome(&mut self, s: usize, lock: ObjectId) {
        self.close(
            s,
            |w| matches!(w, Blocking::Lock { lock: l, .. } if l == lock),
        )
    }

    #[inline]
    fn open(&mut self, s: usize, call: PendingCall) {
        let open = self.open.get_mut(s);
        if open.len() == MAX_NESTED {
            open.remove(0);
        }
        open.push(call);
    }

    /// The outcome of the innermost open call that `is` matches: it and the calls opened
    /// after it (which a well-formed trace has closed already) are done.
    #[inline]
    fn close(&mut self, s: usize, is: impl Fn(Blocking) -> bool) {
        let Some(open) = self.open.get_mut_if_any(s) else {
            return;
        };
        if let Some(i) = open.iter().rposition(|c| is(c.what)) {
            open.truncate(i);
        }
    }

    /// The run's end; `alive` says which slot each thread holds.
    pub fn finish(
        self,
        alive: &Alive,
        tables: &Tables,
        threads: &ThreadIds,
        reason: Option<EndReason>,
        process: Option<(u32, u64)>,
    ) -> RunEnd {
        RunEnd {
            states: threads
                .iter()
                .map(|id| tables.thread_ends.get(&id).copied())
                .collect(),
            pending: (0..alive.threads())
                .filter_map(|t| {
                    let s = alive.get(t)?;
                    let call = self.open.get(s).and_then(|o| o.last().copied())?;
                    Some((t as u32, call))
                })
                .collect(),
            exited: (0..alive.threads())
                .map(|t| self.exited[t / 64] >> (t % 64) & 1 == 1)
                .collect(),
            once_runners: self.once_runners,
            reason,
            stopped: tables.recording_stopped,
            snapshot: tables.snapshot_signal(),
            exec: self.exec.map(|(_, site)| site),
            process,
        }
    }
}
