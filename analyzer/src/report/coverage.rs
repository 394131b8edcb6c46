//! What a recording could not show: the coverage notes of a trace's summary. foresight sees
//! the pthread and semaphore calls a program makes through the C library and, in a build with
//! `foresight config`, its memory accesses; a program that synchronises some other way (Rust's
//! standard library and Go lock with futexes of their own, Python's locks are semaphores, a
//! JVM's monitors are its own) leaves nothing for the lock analysis, and a build without the
//! stub leaves nothing for the race analysis. A report that found nothing must not read as
//! one that saw everything: these notes say which half was blind, and why.

use serde::Serialize;

use super::{counted, TraceSummary};
pub use crate::recording::LanguageRuntime;

/// One thing the recording did not show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "note", rename_all = "kebab-case")]
pub enum CoverageNote {
    /// Several threads ran, but no lock was recorded: the lock analysis had nothing to order.
    NoLocks {
        /// Threads the trace recorded.
        threads: usize,
    },
    /// The program runs on a language runtime whose synchronisation the recorder cannot
    /// attribute to locks.
    Runtime {
        /// Which runtime.
        runtime: LanguageRuntime,
    },
    /// Semaphores (and no lock) were the only synchronisation recorded.
    SemaphoresOnly {
        /// Semaphores the trace recorded.
        semaphores: usize,
    },
    /// No memory access was recorded: races were not checked.
    NoAccesses,
    /// The process executed another program (at `at`), and no trace of that program is among
    /// the traces analysed: it could not be recorded (statically linked, set-user-ID).
    ExecNotRecorded {
        /// The process that executed it.
        pid: u32,
        /// Where, as a site's text.
        at: String,
    },
}

impl std::fmt::Display for CoverageNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoverageNote::NoLocks { threads } => write!(
                f,
                "{} ran but no lock was recorded: nothing of the program's own locking was \
                 visible, so \"0 deadlocks\" means none could be seen, not none exist",
                counted(*threads, "thread", "threads")
            ),
            CoverageNote::Runtime { runtime } => write!(
                f,
                "the program runs on {}: {}",
                match runtime {
                    LanguageRuntime::Rust => "Rust's standard library",
                    LanguageRuntime::Python => "Python",
                    LanguageRuntime::Jvm => "a JVM",
                    LanguageRuntime::Go => "Go's runtime",
                },
                runtime.unseen()
            ),
            CoverageNote::SemaphoresOnly { semaphores } => write!(
                f,
                "{} and no lock: semaphores order threads but are not locks, so no lock \
                 cycle can be seen",
                counted(*semaphores, "semaphore", "semaphores")
            ),
            CoverageNote::ExecNotRecorded { pid, at } => write!(
                f,
                "process {pid} executed another program at {at}, and no trace of that program \
                 was recorded: a statically linked or set-user-ID program ignores LD_PRELOAD, \
                 so nothing it did was seen (`file PROGRAM` says whether it is static; record \
                 a dynamically linked build)"
            ),
            CoverageNote::NoAccesses => write!(
                f,
                "no memory access was recorded, so data races were not checked: build the \
                 program with the flags `foresight config --cflags` and `--libs` print"
            ),
        }
    }
}

/// What a trace's recording shows of the program's synchronisation, for its summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// The language runtime the trace's tables name, if any.
    pub(crate) runtime: Option<LanguageRuntime>,
    /// Semaphores the program used.
    pub(crate) semaphores: usize,
    /// What the recording did not show (empty: nothing known to be missing).
    pub notes: Vec<CoverageNote>,
    /// The recorded process: its pid and when recording started (the header's).
    #[serde(skip)]
    pub(crate) process: Option<(u32, u64)>,
    /// The trace ended with an `exec` at this site: the process became another program.
    #[serde(skip)]
    pub(crate) exec_at: Option<String>,
}

impl Coverage {
    /// The notes of every trace analysed together: [`Coverage::settle`] each, and a trace
    /// that ended in an `exec` with no trace of the same process started after it (the
    /// program it executed) says that program was not seen.
    pub(crate) fn settle_all(traces: &mut [TraceSummary]) {
        let processes: Vec<Option<(u32, u64)>> =
            traces.iter().map(|t| t.coverage.process).collect();
        for (i, t) in traces.iter_mut().enumerate() {
            Coverage::settle(t);
            let (Some(at), Some((pid, start))) = (&t.coverage.exec_at, t.coverage.process) else {
                continue;
            };
            let continued = processes
                .iter()
                .enumerate()
                .any(|(j, p)| j != i && p.is_some_and(|(q, s)| q == pid && s >= start));
            if !continued {
                t.coverage.notes.push(CoverageNote::ExecNotRecorded {
                    pid,
                    at: at.clone(),
                });
            }
        }
    }

    /// The notes of a trace, from its summary's counts (called once its parts are folded).
    pub(crate) fn settle(t: &mut TraceSummary) {
        let c = &mut t.coverage;
        c.notes.clear();
        if let Some(runtime) = c.runtime {
            c.notes.push(CoverageNote::Runtime { runtime });
        }
        if t.threads > 1 && t.locks == 0 {
            if c.semaphores > 0 {
                c.notes.push(CoverageNote::SemaphoresOnly {
                    semaphores: c.semaphores,
                });
            } else {
                c.notes.push(CoverageNote::NoLocks { threads: t.threads });
            }
        }
        if t.threads > 1 && t.accesses == 0 {
            c.notes.push(CoverageNote::NoAccesses);
        }
    }

    /// Nothing of the program's synchronisation and no memory access was visible: no lock,
    /// no access (`check --fail-if-blind`).
    pub fn blind(t: &TraceSummary) -> bool {
        t.locks == 0 && t.accesses == 0
    }
}
