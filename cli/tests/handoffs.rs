//! Hand-offs through pipes, socketpairs and eventfds (FORMAT.md §6.6.1, `0x67`/`0x68`), read by
//! `foresight analyze` as a user runs it: a blocking read under a lock the writer needs first is
//! a predicted `wait-deadlock`, unless something else can still fill the channel — another
//! writer, or bytes already in it.

mod common;

use std::process::Command;

use common::T;
use foresight_trace::event::{BlockingCall, ChannelKind, EventKind, ThreadId};

const PIPE: u32 = 1;

impl T {
    fn put(&mut self, t: ThreadId, amount: u64, line: u32) {
        let site = self.at(line);
        self.ev(
            t,
            EventKind::HandoffWrite {
                channel: PIPE,
                kind: ChannelKind::Pipe,
                fd: 4,
                amount,
                site,
            },
        );
    }

    /// `t` blocks reading the pipe at `line` (a blocking read under a lock) and takes `amount`.
    fn blocking_take(&mut self, t: ThreadId, amount: u64, line: u32) {
        let site = self.at(line);
        self.ev(
            t,
            EventKind::BlockingBegin {
                call: BlockingCall::Read,
                site,
                timeout_ns: None,
            },
        );
        self.ev(
            t,
            EventKind::HandoffRead {
                channel: PIPE,
                kind: ChannelKind::Pipe,
                fd: 3,
                amount,
                site,
            },
        );
        self.ev(
            t,
            EventKind::BlockingEnd {
                call: BlockingCall::Read,
                duration_ns: 1000,
            },
        );
    }
}

/// The `wait-deadlock` findings of `foresight analyze --format json` on the trace, as
/// (verdict, rule, lines named).
fn wait_deadlocks(t: T) -> Vec<(String, String, Vec<u64>)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handoff.trace");
    std::fs::write(&path, t.b.finish()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(["analyze", "--format", "json"])
        .arg(&path)
        .output()
        .expect("run foresight analyze");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "wait-deadlock")
        .map(|f| {
            let lines = f["locations"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|l| l["line"].as_u64())
                .collect();
            (
                f["verdict"].as_str().unwrap().to_string(),
                f["rule"].as_str().unwrap().to_string(),
                lines,
            )
        })
        .collect()
}

/// The producer takes L (line 10) and later writes (11); the consumer holds L (20) and blocks
/// reading (21).
fn consumer_holds_l(t: &mut T) -> (ThreadId, ThreadId) {
    let l = t.b.mutex("L");
    let consumer = t.spawn("consumer");
    let producer = t.spawn("producer");
    t.lock(producer, l, 10);
    t.unlock(producer, l);
    t.lock(consumer, l, 20);
    (consumer, producer)
}

#[test]
fn a_read_holding_the_lock_the_writer_needs_is_a_predicted_wait_deadlock() {
    let mut t = T::new();
    let (consumer, producer) = consumer_holds_l(&mut t);
    t.put(producer, 1, 11);
    t.blocking_take(consumer, 1, 21);
    let d = wait_deadlocks(t);
    assert_eq!(d.len(), 1, "{d:?}");
    let (verdict, rule, lines) = &d[0];
    assert_eq!(verdict, "predicted");
    assert_eq!(rule, "handoff-read-while-holding");
    // Held, read, requested, written: every side.
    for line in [20, 21, 10, 11] {
        assert!(lines.contains(&line), "{line} in {lines:?}");
    }
}

#[test]
fn another_writer_that_needs_no_lock_keeps_the_read_wakeable() {
    let mut t = T::new();
    let (consumer, producer) = consumer_holds_l(&mut t);
    let helper = t.spawn("helper");
    t.put(producer, 1, 11);
    t.put(helper, 1, 30);
    t.blocking_take(consumer, 2, 21);
    let d = wait_deadlocks(t);
    // Found, and not predicted: the wait can still end.
    assert!(d.iter().all(|(v, ..)| v != "predicted"), "{d:?}");
    assert!(
        d.iter()
            .any(|(v, r, _)| v == "potential" && r == "handoff-read-while-holding"),
        "{d:?}"
    );
}

#[test]
fn bytes_already_in_the_pipe_keep_the_read_from_blocking() {
    let mut t = T::new();
    let l = t.b.mutex("L");
    let consumer = t.spawn("consumer");
    let producer = t.spawn("producer");
    // Two bytes in the pipe before the producer takes L: the consumer's read takes one.
    t.put(producer, 2, 9);
    t.lock(producer, l, 10);
    t.unlock(producer, l);
    t.lock(consumer, l, 20);
    t.put(producer, 1, 11);
    t.blocking_take(consumer, 1, 21);
    let d = wait_deadlocks(t);
    // Found, and not predicted: the wait can still end.
    assert!(d.iter().all(|(v, ..)| v != "predicted"), "{d:?}");
    assert!(
        d.iter()
            .any(|(v, r, _)| v == "potential" && r == "handoff-read-while-holding"),
        "{d:?}"
    );
}
