//! What a recording could not show: the coverage notes of a trace's summary. foresight sees
//! the pthread and semaphore calls a program makes through the C library and, in a build with
//! `foresight config`, its memory accesses; a program that synchronises some other way (Rust's
//! standard library and Go lock with futexes of their own, Python's locks are semaphores, a
//! JVM's monitors are its own) leaves nothing for the lock analysis, and a build without the
//! stub leaves nothing for the race analysis. A report that found nothing must not read as
//! one that saw everything: these notes say which half was blind, and why.

use serde::Serialize;

use super::{counted, TraceSummary};

/// A language runtime whose own synchronisation the recorder cannot attribute to the
/// program's locks, recognised by what the trace's tables name (modules, source files).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Serialize,
    strum::Display,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum LanguageRuntime {
    /// Rust's standard library (`std::sync::Mutex` is a futex of its own; `parking_lot` too).
    Rust,
    /// CPython (`threading.Lock` is a semaphore, the GIL a condition of its own).
    Python,
    /// A Java virtual machine (`synchronized` is the JVM's own monitor).
    Jvm,
    /// Go's runtime (goroutines and `sync.Mutex` never reach pthreads).
    Go,
}

impl LanguageRuntime {
    /// The runtime a string of the trace's tables (a module's path, a source file's name, a
    /// function's name) belongs to, if any.
    pub fn of_name(name: &str) -> Option<LanguageRuntime> {
        let base = name.rsplit('/').next().unwrap_or(name);
        if base.starts_with("libjvm.") {
            Some(LanguageRuntime::Jvm)
        } else if base.starts_with("libpython")
            || base
                .strip_prefix("python")
                .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        {
            Some(LanguageRuntime::Python)
        } else if base.ends_with(".rs") {
            Some(LanguageRuntime::Rust)
        } else if base.ends_with(".go") || base.starts_with("libgo.") {
            Some(LanguageRuntime::Go)
        } else {
            None
        }
    }

    /// What the recorder misses of it, for the report.
    fn unseen(self) -> &'static str {
        match self {
            LanguageRuntime::Rust => {
                "Rust's std::sync locks (and parking_lot's) are futexes of their own, which \
                 the recorder does not see"
            }
            LanguageRuntime::Python => {
                "Python's threading.Lock is a semaphore, seen only as ordering, never as a lock"
            }
            LanguageRuntime::Jvm => {
                "a JVM's synchronized blocks and java.util.concurrent locks are its own, which \
                 the recorder does not see (the JVM's internal mutexes are not the program's)"
            }
            LanguageRuntime::Go => {
                "Go's sync.Mutex and channels never reach pthreads, which the recorder does \
                 not see"
            }
        }
    }
}

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
    /// The process executed another program (at `at`), and no trace of that program is among
    /// the traces analysed: it could not be recorded (statically linked, set-user-ID).
    ExecNotRecorded { pid: u32, at: String },
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
    pub runtime: Option<LanguageRuntime>,
    /// Semaphores the program used.
    pub semaphores: usize,
    /// What the recording did not show (empty: nothing known to be missing).
    pub notes: Vec<CoverageNote>,
    /// The recorded process: its pid and when recording started (the header's).
    #[serde(skip)]
    pub process: Option<(u32, u64)>,
    /// The trace ended with an `exec` at this site: the process became another program.
    #[serde(skip)]
    pub exec_at: Option<String>,
}

impl Coverage {
    /// The notes of every trace analysed together: [`Coverage::settle`] each, and a trace
    /// that ended in an `exec` with no trace of the same process started after it (the
    /// program it executed) says that program was not seen.
    pub fn settle_all(traces: &mut [TraceSummary]) {
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
