//! A trace builder with a site per line number, shared by the integration tests that write
//! short builder traces (`deadlock.rs`, `observed.rs`, `segments.rs`); each adds its own
//! methods to [`T`]. And [`analyze_ok`], which runs `foresight analyze` as a user does.

// Each test binary uses part of it.
#![allow(dead_code)]

use std::path::Path;

use foresight_trace::builder::TraceBuilder;
use foresight_trace::event::{EventKind, LockMode, ObjectId, SiteId, ThreadId};

pub struct T {
    pub b: TraceBuilder,
    pub main: ThreadId,
}

impl T {
    pub fn new() -> Self {
        let mut b = TraceBuilder::new("test");
        let main = b.main_thread();
        T { b, main }
    }
    pub fn at(&mut self, line: u32) -> SiteId {
        self.b.site("f", "t.c", line)
    }
    pub fn spawn(&mut self, name: &str) -> ThreadId {
        let s = self.at(1);
        self.b.spawn(self.main, s, name)
    }
    pub fn lock(&mut self, t: ThreadId, l: ObjectId, line: u32) {
        let s = self.at(line);
        self.b.lock(t, l, s);
    }
    pub fn read_lock(&mut self, t: ThreadId, l: ObjectId, line: u32) {
        let s = self.at(line);
        self.b.lock_mode(t, l, LockMode::Shared, s);
    }
    pub fn unlock(&mut self, t: ThreadId, l: ObjectId) {
        let s = self.at(99);
        self.b.unlock(t, l, s);
    }
    /// `t` takes `first` then `second` and releases both.
    pub fn nest(&mut self, t: ThreadId, first: ObjectId, second: ObjectId, line: u32) {
        self.lock(t, first, line);
        self.lock(t, second, line + 1);
        self.unlock(t, second);
        self.unlock(t, first);
    }
    /// The main thread joins `child`.
    pub fn join(&mut self, child: ThreadId) {
        let s = self.at(2);
        self.b.join(self.main, child, s);
    }
    pub fn ev(&mut self, t: ThreadId, kind: EventKind) {
        self.b.event(t, kind);
    }
}

/// The report of `foresight analyze ARGS TRACE`, which must succeed.
pub fn analyze_ok(args: &[&str], trace: &Path) -> Vec<u8> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
        .arg("analyze")
        .args(args)
        .arg(trace)
        .output()
        .expect("run foresight analyze");
    assert!(
        out.status.success(),
        "foresight analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
