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
    NoLocks { threads: usize },
    /// The program runs on a language runtime whose synchronisation the recorder cannot
    /// attribute to locks.
    Runtime { runtime: LanguageRuntime },
    /// Semaphores (and no lock) were the only synchronisation recorded.
    SemaphoresOnly { semaphores: usize },
    /// No memory access was recorded: races were not checked.
    NoAccesses,
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
    pub runtime: Option<LanguageRuntime>,
    /// Semaphores the program used.
    pub semaphores: usize,
    /// What the recording did not show (empty: nothing known to be missing).
    pub notes: Vec<CoverageNote>,
}

impl Coverage {
    /// The notes of a trace, from its summary's counts (called once its parts are folded).
    pub fn settle(t: &mut TraceSummary) {
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
