//! Facts of a recording that say what it could show, read from a trace's tables: the language
//! runtime a program runs on (whose own locks the recorder cannot see) and the semaphores it
//! used. The report's coverage notes (`report::Coverage`) are made from them.

use serde::Serialize;

use foresight_trace::tables::{ObjectKind, Tables};

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
    pub(crate) fn of_name(name: &str) -> Option<LanguageRuntime> {
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
    pub(crate) fn unseen(self) -> &'static str {
        match self {
            LanguageRuntime::Rust => {
                "Rust's std::sync locks (and parking_lot's) are futexes of their own, which \
                 the recorder does not see; foresight-sync's types record them (README, Rust \
                 programs)"
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

/// What a trace's tables say of its recording's reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordingFacts {
    /// The language runtime the tables name, if any.
    pub runtime: Option<LanguageRuntime>,
    /// Semaphores the program used.
    pub semaphores: usize,
}

impl RecordingFacts {
    /// The language runtime the tables name (a module such as `libjvm.so` or `libpython3.12.so`,
    /// a Python executable, a source file `*.rs` or `*.go`) and the semaphores the program used.
    pub fn of(tables: &Tables) -> RecordingFacts {
        let runtime = tables
            .modules
            .values()
            .filter_map(|m| tables.string(m.path))
            .chain(tables.symbols.values().flat_map(|s| {
                s.locations
                    .iter()
                    .filter_map(|l| l.file.and_then(|f| tables.string(f)))
            }))
            .filter_map(LanguageRuntime::of_name)
            // One order whatever the hash map's: a JVM or Python over the Rust or Go it may load.
            .min_by_key(|r| match r {
                LanguageRuntime::Jvm => 0,
                LanguageRuntime::Python => 1,
                LanguageRuntime::Go => 2,
                LanguageRuntime::Rust => 3,
            });
        let semaphores = tables
            .objects
            .values()
            .filter(|o| o.kind == ObjectKind::Semaphore)
            .count();
        RecordingFacts {
            runtime,
            semaphores,
        }
    }
}
