//! `blocking-under-lock` findings (and `signal-unsafe-lock` ones, `signals.rs`): a thread held locks across a call that can block for as
//! long as another thread or process decides (I/O on a pipe, FIFO or socket, `accept`,
//! `connect`, `poll`/`select`/`epoll_wait`, a sleep, a wait for a child, `fsync`). Every
//! thread that needs one of those locks waits as long; if the call waits for one of them
//! (reads a pipe it writes after taking the lock), they deadlock. The recorder writes such
//! calls only while the thread holds a lock (FORMAT.md §6.6.1); the model keeps each with the
//! held set at the call and its duration (`model::HeldBlocking`). This module makes one
//! finding per call site and held set, with the longest duration seen. A sleep is reported
//! only when one took at least `Options::sleep_threshold_ns`.

mod signals;

use foldhash::{HashMap, HashMapExt};

use foresight_trace::event::BlockingCall;

use crate::describe::{held_lock, location, site, thread};
use crate::model::Run;
use crate::options::Options;
use crate::report::{
    BlockingReport, Detail, Finding, HazardCall, Kind, Message, Role, Rule, Verdict,
};

/// What makes two blocking calls one finding: the call, its site, and the held locks' classes
/// and acquisition sites (as symbolised text, so that the same code in several runs folds).
type CallKey = (HazardCall, String, Vec<(String, String)>);

pub fn blocking_findings(runs: &[Run], opts: &Options) -> Vec<Finding> {
    let mut findings: Vec<Finding> = Vec::new();
    let mut seen: HashMap<CallKey, usize> = HashMap::new();
    for run in runs {
        for b in &run.blocking {
            let held: Vec<u32> = run.held_range(&b.held).to_vec();
            if held.is_empty() {
                continue;
            }
            let call = HazardCall::from(b.call);
            let at = run.location(b.site).text;
            let held_key: Vec<(String, String)> = held
                .iter()
                .map(|&a| {
                    let acq = &run.acquisitions[a as usize];
                    (run.acquisition_class(acq), run.location(acq.site).text)
                })
                .collect();
            let key = (call, at, held_key);
            if let Some(&i) = seen.get(&key) {
                let f: &mut Finding = &mut findings[i];
                f.occurrences += 1;
                if !f.traces.contains(&run.source) {
                    f.traces.push(run.source.clone());
                }
                if let Detail::Blocking(r) = &mut f.detail {
                    r.calls += 1;
                    r.longest_ns = r.longest_ns.max(b.duration_ns);
                    r.timeout_ns = longest_timeout(r.timeout_ns, b.timeout_ns);
                    let longest = r.longest_ns;
                    if let Message::BlockingUnderLock { longest_ns, .. } = &mut f.message {
                        *longest_ns = longest;
                    }
                }
                continue;
            }
            seen.insert(key, findings.len());
            let held_locks: Vec<_> = held
                .iter()
                .map(|&a| held_lock(run, &run.acquisitions[a as usize]))
                .collect();
            let mut locations: Vec<_> = held
                .iter()
                .map(|&a| {
                    let acq = &run.acquisitions[a as usize];
                    location(run, acq.site, acq.thread, Role::Holds)
                })
                .collect();
            locations.push(location(run, b.site, b.thread, Role::Blocks));
            findings.push(Finding {
                id: 0,
                kind: Kind::BlockingUnderLock,
                verdict: Verdict::Hazard,
                rule: Rule::BlockingWhileHolding,
                message: Message::BlockingUnderLock {
                    thread: thread(run, b.thread),
                    call,
                    locks: held_locks.iter().map(|h| h.lock.clone()).collect(),
                    longest_ns: b.duration_ns,
                },
                reason: format!(
                    "the thread holds {} across {call}, which returns when another thread or \
                     process decides: every thread that needs {} waits as long, and deadlocks \
                     if the call waits for it",
                    if held_locks.len() == 1 {
                        "a lock"
                    } else {
                        "locks"
                    },
                    if held_locks.len() == 1 {
                        "it"
                    } else {
                        "one of them"
                    },
                ),
                traces: vec![run.source.clone()],
                witness: None,
                occurrences: 1,
                locations,
                detail: Detail::Blocking(Box::new(BlockingReport {
                    call,
                    thread: thread(run, b.thread),
                    site: site(run, b.site),
                    lock_classes: held_locks.iter().map(|h| h.class.clone()).collect(),
                    held: held_locks,
                    longest_ns: b.duration_ns,
                    timeout_ns: b.timeout_ns,
                    calls: 1,
                })),
            });
        }
    }
    findings.retain(|f| match &f.detail {
        Detail::Blocking(r) => reported(r, opts),
        _ => true,
    });
    findings
}

/// The longer of two timeouts, where `None` is no limit.
pub(crate) fn longest_timeout(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.zip(b).map(|(a, b)| a.max(b))
}

/// Whether a blocking call under a lock is a hazard: any call but a sleep; a sleep when it
/// asked for at least the threshold, or (its length unknown: an absolute deadline) took that
/// long or never returned. A short back-off under a lock is a cost, not a hazard, and is
/// judged by what the program asked for, not by how long a loaded machine took.
fn reported(r: &BlockingReport, opts: &Options) -> bool {
    if r.call != HazardCall::from(BlockingCall::Sleep) {
        return true;
    }
    match r.timeout_ns {
        Some(asked) => asked >= opts.sleep_threshold_ns,
        None => r.longest_ns.is_none_or(|ns| ns >= opts.sleep_threshold_ns),
    }
}

/// Hazards of the recorded run, as an analysis of the registry (`analyses/mod.rs`).
pub struct Hazards;

impl super::Analysis for Hazards {
    fn name(&self) -> &'static str {
        "hazards"
    }

    fn analyze(
        &self,
        part: &super::Part,
        _budgets: &mut super::Budgets,
        _summary: &mut crate::report::Summary,
        out: &mut super::Output,
    ) {
        out.findings.extend(blocking_findings(part.runs, part.opts));
        out.findings.extend(signals::signal_findings(part.runs));
    }
}
