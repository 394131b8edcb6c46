//! A finding's one-line message (JSON's `message`, the text report's headline, SARIF's result
//! text) as the facts it states: the pass that finds a finding fills in the facts, and the
//! sentence is written only when a renderer prints it. One place words every kind, so a
//! change of wording is a change here, and nothing compares or sorts findings by it.

use std::fmt;

use serde::Serialize;

use super::{AccessKind, BlockingCall, HazardCall, Kind, LockRef, ThreadRef};

/// A duration for people: `850 µs`, `12.3 ms`, `2.00 s`.
pub fn duration_text(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{} µs", ns / 1000)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

/// What a finding's message says, by kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A predicted lock cycle: the locks each thread holds, in cycle order.
    Deadlock {
        /// The locks, in cycle order.
        locks: Vec<LockRef>,
    },
    /// A class-level cycle: the classes in cycle order.
    InconsistentOrder {
        /// The classes, in cycle order.
        classes: Vec<String>,
    },
    /// A class-level self-edge: locks of one class nested.
    NestedClass {
        /// The class.
        class: String,
    },
    /// A thread holds `lock` while it waits for `other`, which needs `lock` first. `kind` is
    /// named when the deadlock is predicted; a potential one says so instead.
    WaitWhileHolding {
        /// The finding's kind, named when predicted.
        kind: Kind,
        /// Predicted (else potential).
        predicted: bool,
        /// The thread that holds `lock` and waits.
        holder: ThreadRef,
        /// The lock held.
        lock: LockRef,
        /// What it waits for.
        wait: WaitFor,
        /// The thread that needs `lock` before it can wake the holder.
        other: ThreadRef,
    },
    /// A read-lock taken again while a writer waits.
    ReadRecursion {
        /// The thread that read-locks twice.
        holder: ThreadRef,
        /// The rwlock.
        lock: LockRef,
        /// The writer waiting between the two reads.
        other: ThreadRef,
    },
    /// A lock acquired at or below the highest rank held.
    RankViolation {
        /// The lock acquired.
        lock: LockRef,
        /// Its rank.
        rank: u32,
        /// The highest-ranked lock held.
        held: LockRef,
        /// Its rank.
        held_rank: u32,
    },
    /// Two accesses to the same memory.
    Race {
        /// The memory.
        memory: RaceMemory,
        /// The two accesses, the earlier first.
        accesses: [RaceSide; 2],
    },
    /// An observed thread blocked on a lock it holds itself (`lock` as the report names what
    /// it waits on).
    ObservedSelfDeadlock {
        /// The blocked thread.
        thread: ThreadRef,
        /// What it waits on.
        lock: String,
    },
    /// Observed threads waiting for each other.
    ObservedDeadlock {
        /// The threads of the cycle.
        threads: Vec<ThreadRef>,
    },
    /// Observed threads blocked in no cycle, and the calls they were blocked in.
    ObservedStall {
        /// The blocked threads.
        threads: Vec<ThreadRef>,
        /// The calls they were blocked in.
        calls: Vec<BlockingCall>,
    },
    /// A thread made a blocking call (`call`, a family of C functions) while holding `locks`;
    /// the longest such call took `longest_ns` (`None`: none was seen to return).
    BlockingUnderLock {
        /// The thread.
        thread: ThreadRef,
        /// The call's family.
        call: HazardCall,
        /// The locks held, outermost first.
        locks: Vec<LockRef>,
        /// The longest such call, when one returned.
        longest_ns: Option<u64>,
    },
    /// A signal handler takes `lock`; `holder`: a thread also holds it outside any handler
    /// with the signal unblocked (the handler can interrupt it there).
    SignalUnsafeLock {
        /// The signal's name (`SIGUSR1`).
        signal: String,
        /// The handler function.
        function: String,
        /// The lock the handler takes.
        lock: LockRef,
        /// A thread that holds it outside any handler with the signal unblocked.
        holder: Option<ThreadRef>,
    },
}

/// What a thread that holds a lock waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitFor {
    /// A join of a thread.
    Join,
    /// A barrier, by name.
    Barrier(String),
    /// A condition variable, by name.
    Condition(String),
    /// A semaphore, by name.
    Semaphore(String),
    /// A pipe, socketpair or eventfd read (`pipe #2 (fd 5)`).
    Handoff(String),
}

/// The memory a race is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RaceMemory {
    /// A static variable and element (`counters[3]`).
    Variable(String),
    /// An offset in a heap block, and where the block was allocated.
    HeapBlock {
        /// Offset of the access in the block.
        offset: u64,
        /// Size of the block.
        size: u64,
        /// Where the block was allocated.
        allocated_at: String,
    },
    /// Memory the trace does not name: its address.
    Address(u64),
}

/// One access of a race as the message names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaceSide {
    pub(crate) kind: AccessKind,
    pub(crate) thread: ThreadRef,
    /// The site's location (`worker (bank.c:53)`).
    pub(crate) at: String,
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Deadlock { locks } => write!(
                f,
                "deadlock: {} threads take {} in a cycle; a reordering of this run deadlocks",
                locks.len(),
                cycle_text(locks)
            ),
            Message::InconsistentOrder { classes } => write!(
                f,
                "potential deadlock: inconsistent lock order {} ({} classes)",
                cycle_text(classes),
                classes.len()
            ),
            Message::NestedClass { class } => write!(
                f,
                "potential deadlock: locks of class {class} are nested inside each other"
            ),
            Message::WaitWhileHolding {
                kind,
                predicted,
                holder,
                lock,
                wait,
                other,
            } => {
                if *predicted {
                    write!(f, "{kind}")?;
                } else {
                    f.write_str("potential deadlock")?;
                }
                write!(
                    f,
                    ": {holder} holds {lock} while it {}, and {other} needs {lock} first",
                    wait.text(other)
                )
            }
            Message::ReadRecursion {
                holder,
                lock,
                other,
            } => write!(
                f,
                "potential deadlock: {holder} read-locks {lock} again while holding it for read, \
                 and {other} write-locks it"
            ),
            Message::RankViolation {
                lock,
                rank,
                held,
                held_rank,
            } => write!(
                f,
                "rank violation: {lock} (rank {rank}) acquired while holding {held} (rank \
                 {held_rank})"
            ),
            Message::Race { memory, accesses } => {
                f.write_str("data race on ")?;
                match memory {
                    RaceMemory::Variable(name) => write!(f, "`{name}`")?,
                    RaceMemory::HeapBlock {
                        offset,
                        size,
                        allocated_at,
                    } => write!(
                        f,
                        "offset {offset} of a {size}-byte heap block allocated at {allocated_at}"
                    )?,
                    RaceMemory::Address(a) => write!(f, "{a:#x}")?,
                }
                let [a, b] = accesses;
                write!(f, ": {a} and {b}")
            }
            Message::ObservedSelfDeadlock { thread, lock } => write!(
                f,
                "observed self-deadlock: {thread} requests {lock}, which it holds"
            ),
            Message::ObservedDeadlock { threads } => write!(
                f,
                "observed deadlock: {} wait for each other",
                joined(threads, " and ")
            ),
            Message::ObservedStall { threads, calls } => write!(
                f,
                "observed stall: {} blocked when the trace ended ({})",
                joined(threads, ", "),
                joined(calls, ", ")
            ),
            Message::BlockingUnderLock {
                thread,
                call,
                locks,
                longest_ns,
            } => {
                write!(
                    f,
                    "blocking call under a lock: {thread} calls {call} while holding {}",
                    joined(locks, " and ")
                )?;
                match longest_ns {
                    Some(ns) => write!(f, " (longest {})", duration_text(*ns)),
                    None => f.write_str(" (it had not returned when the trace ended)"),
                }
            }
            Message::SignalUnsafeLock {
                signal,
                function,
                lock,
                holder: Some(holder),
            } => write!(
                f,
                "lock taken in a signal handler and where the signal can interrupt: the \
                 {signal} handler takes {lock}, which {holder} holds with {signal} unblocked \
                 (the handler can interrupt a thread holding it: {function} then waits for \
                 itself)"
            ),
            Message::SignalUnsafeLock {
                signal,
                function,
                lock,
                holder: None,
            } => write!(
                f,
                "lock call in a signal handler: the {signal} handler calls {function} on {lock}, \
                 which is not async-signal-safe"
            ),
        }
    }
}

impl WaitFor {
    /// What the holder does, waiting for `other`: `joins thread 2 "worker"`.
    pub(crate) fn text(&self, other: &ThreadRef) -> String {
        match self {
            WaitFor::Join => format!("joins {other}"),
            WaitFor::Barrier(name) => {
                format!("waits at barrier {name}, which {other} reaches only later")
            }
            WaitFor::Condition(name) => {
                format!("waits on condition {name}, which {other} signals only later")
            }
            WaitFor::Semaphore(name) => {
                format!("waits on semaphore {name}, which {other} posts only later")
            }
            WaitFor::Handoff(name) => {
                format!("reads {name}, which {other} writes only later")
            }
        }
    }
}

impl fmt::Display for RaceSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} by {} at {}", self.kind, self.thread, self.at)
    }
}

impl Serialize for Message {
    /// As printed: the JSON schema's `message` is the sentence.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A cycle's items in order, back to the first: `A → B → A`.
pub fn cycle_text<T: fmt::Display>(items: &[T]) -> String {
    let mut s = joined(items, " → ");
    if let Some(first) = items.first() {
        s.push_str(&format!(" → {first}"));
    }
    s
}

/// The items as text, with `sep` between them.
pub fn joined<T: fmt::Display>(items: &[T], sep: &str) -> String {
    items.iter().map(T::to_string).collect::<Vec<_>>().join(sep)
}

#[cfg(test)]
mod tests {
    use super::super::{LockId, ThreadId};
    use super::*;

    fn thread(id: u32, name: &str) -> ThreadRef {
        ThreadRef {
            id: ThreadId(id),
            name: Some(name.to_string()),
        }
    }

    fn lock(id: u32, name: &str) -> LockRef {
        LockRef {
            id: LockId(id),
            name: name.to_string(),
        }
    }

    /// The sentences every report has printed, word for word: JSON consumers and users'
    /// scripts read them.
    #[test]
    fn each_kind_is_worded_as_the_reports_have_it() {
        let (t1, t2) = (thread(1, "teller"), thread(2, "auditor"));
        let cases = [
            (
                Message::Deadlock {
                    locks: vec![lock(7, "a"), lock(8, "b")],
                },
                "deadlock: 2 threads take a → b → a in a cycle; a reordering of this run deadlocks",
            ),
            (
                Message::InconsistentOrder {
                    classes: vec!["A".into(), "B".into(), "C".into()],
                },
                "potential deadlock: inconsistent lock order A → B → C → A (3 classes)",
            ),
            (
                Message::NestedClass { class: "A".into() },
                "potential deadlock: locks of class A are nested inside each other",
            ),
            (
                Message::WaitWhileHolding {
                    kind: Kind::JoinDeadlock,
                    predicted: true,
                    holder: t1.clone(),
                    lock: lock(7, "m"),
                    wait: WaitFor::Join,
                    other: t2.clone(),
                },
                "join-deadlock: thread 1 \"teller\" holds m while it joins thread 2 \"auditor\", \
                 and thread 2 \"auditor\" needs m first",
            ),
            (
                Message::WaitWhileHolding {
                    kind: Kind::WaitDeadlock,
                    predicted: false,
                    holder: t1.clone(),
                    lock: lock(7, "m"),
                    wait: WaitFor::Semaphore("s".into()),
                    other: t2.clone(),
                },
                "potential deadlock: thread 1 \"teller\" holds m while it waits on semaphore s, \
                 which thread 2 \"auditor\" posts only later, and thread 2 \"auditor\" needs m \
                 first",
            ),
            (
                Message::ReadRecursion {
                    holder: t1.clone(),
                    lock: lock(7, "rw"),
                    other: t2.clone(),
                },
                "potential deadlock: thread 1 \"teller\" read-locks rw again while holding it \
                 for read, and thread 2 \"auditor\" write-locks it",
            ),
            (
                Message::RankViolation {
                    lock: lock(7, "a"),
                    rank: 1,
                    held: lock(8, "b"),
                    held_rank: 2,
                },
                "rank violation: a (rank 1) acquired while holding b (rank 2)",
            ),
            (
                Message::Race {
                    memory: RaceMemory::HeapBlock {
                        offset: 12,
                        size: 64,
                        allocated_at: "main (m.c:3)".into(),
                    },
                    accesses: [
                        RaceSide {
                            kind: AccessKind::AtomicWrite,
                            thread: t1.clone(),
                            at: "f (m.c:9)".into(),
                        },
                        RaceSide {
                            kind: AccessKind::Read,
                            thread: t2.clone(),
                            at: "g (m.c:11)".into(),
                        },
                    ],
                },
                "data race on offset 12 of a 64-byte heap block allocated at main (m.c:3): \
                 atomic write by thread 1 \"teller\" at f (m.c:9) and read by thread 2 \
                 \"auditor\" at g (m.c:11)",
            ),
            (
                Message::ObservedSelfDeadlock {
                    thread: t1.clone(),
                    lock: "m".into(),
                },
                "observed self-deadlock: thread 1 \"teller\" requests m, which it holds",
            ),
            (
                Message::ObservedDeadlock {
                    threads: vec![t1.clone(), t2.clone()],
                },
                "observed deadlock: thread 1 \"teller\" and thread 2 \"auditor\" wait for each \
                 other",
            ),
            (
                Message::ObservedStall {
                    threads: vec![t1, t2],
                    calls: vec![BlockingCall::Condition, BlockingCall::Join],
                },
                "observed stall: thread 1 \"teller\", thread 2 \"auditor\" blocked when the \
                 trace ended (condition, join)",
            ),
        ];
        for (message, text) in cases {
            assert_eq!(message.to_string(), text);
            assert_eq!(
                serde_json::to_string(&message).unwrap(),
                serde_json::to_string(text).unwrap()
            );
        }
        let address = Message::Race {
            memory: RaceMemory::Address(0x7fff_e4af),
            accesses: [
                RaceSide {
                    kind: AccessKind::Write,
                    thread: thread(0, "main"),
                    at: "main (m.c:1)".into(),
                },
                RaceSide {
                    kind: AccessKind::Write,
                    thread: thread(3, "w"),
                    at: "w (m.c:2)".into(),
                },
            ],
        };
        assert!(address
            .to_string()
            .starts_with("data race on 0x7fffe4af: write by"));
    }
}
