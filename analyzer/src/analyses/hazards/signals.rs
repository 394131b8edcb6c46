//! `signal-unsafe-lock` findings: locks taken inside signal handlers. The recorder marks the
//! events a thread records inside a handler the program installed, and each thread's signal
//! mask (FORMAT.md §6.6.1; the model keeps both as `Run::signal_contexts`). Two rules:
//! - `handler-interrupts-holder`: a lock class the handler for signal S takes, also taken
//!   outside any handler by a thread that did not block S then. S may arrive while that
//!   thread holds the lock, and the handler then waits for a lock its own thread holds: a
//!   self-deadlock for a default mutex. One finding per handler site and holding site.
//! - `lock-in-handler`: any lock call in a handler (no lock function is async-signal-safe),
//!   one finding per handler site.

use foldhash::{HashMap, HashMapExt};

use foresight_trace::tables::ObjectKind;

use crate::describe::{location, lock, lock_mode, site, thread};
use crate::model::{AcquireHow, Acquisition, Run};
use crate::report::{
    signal_short_name, Detail, Finding, Kind, Message, Role, Rule, SignalReport, SignalSite,
    Verdict,
};
use crate::stream::Mode;

/// One lock call in a handler, as findings fold them: the signal, the class, the site.
type HandlerKey = (u8, String, String);

pub fn signal_findings(runs: &[Run]) -> Vec<Finding> {
    let mut findings: Vec<Finding> = Vec::new();
    let mut seen: HashMap<(Rule, HandlerKey, String), usize> = HashMap::new();
    for run in runs {
        if run.signal_contexts.is_empty() {
            continue;
        }
        // Acquisitions inside handlers, and by class those outside any.
        let mut in_handler: Vec<(u8, &Acquisition)> = Vec::new();
        let mut outside: HashMap<String, Vec<&Acquisition>> = HashMap::new();
        for a in &run.acquisitions {
            let ctx = run.signal_contexts.at(a.thread, a.request);
            if ctx.handler != 0 {
                in_handler.push((ctx.handler, a));
            } else {
                outside.entry(run.acquisition_class(a)).or_default().push(a);
            }
        }
        for &(signal, h) in &in_handler {
            let class = run.acquisition_class(h);
            let handler_at = run.location(h.site).text;
            let key: HandlerKey = (signal, class.clone(), handler_at);
            let mut add =
                |rule: Rule, holder: Option<&Acquisition>, findings: &mut Vec<Finding>| {
                    let holder_at = holder
                        .map(|o| run.location(o.site).text)
                        .unwrap_or_default();
                    if let Some(&i) = seen.get(&(rule, key.clone(), holder_at.clone())) {
                        let f: &mut Finding = &mut findings[i];
                        f.occurrences += 1;
                        if !f.traces.contains(&run.source) {
                            f.traces.push(run.source.clone());
                        }
                        return;
                    }
                    seen.insert((rule, key.clone(), holder_at), findings.len());
                    findings.push(finding(run, rule, signal, h, holder));
                };
            add(Rule::LockInHandler, None, &mut findings);
            // A trylock in the handler fails rather than waits.
            if h.how == AcquireHow::Try {
                continue;
            }
            let Some(others) = outside.get(&class) else {
                continue;
            };
            for o in others {
                let lets_in = run.signal_contexts.at(o.thread, o.request).lets_in(signal);
                // Readers on both sides share the lock.
                let shared = h.mode == Mode::Read && o.mode == Mode::Read;
                if lets_in && !shared {
                    add(Rule::HandlerInterruptsHolder, Some(o), &mut findings);
                }
            }
        }
    }
    findings
}

/// What a handler called to take a lock of this kind in this mode.
fn lock_function(kind: ObjectKind, mode: Mode, how: AcquireHow) -> &'static str {
    match (kind, mode, how) {
        (ObjectKind::RwLock, Mode::Read, AcquireHow::Try) => "pthread_rwlock_tryrdlock",
        (ObjectKind::RwLock, Mode::Read, _) => "pthread_rwlock_rdlock",
        (ObjectKind::RwLock, _, AcquireHow::Try) => "pthread_rwlock_trywrlock",
        (ObjectKind::RwLock, _, _) => "pthread_rwlock_wrlock",
        (ObjectKind::SpinLock, _, AcquireHow::Try) => "pthread_spin_trylock",
        (ObjectKind::SpinLock, _, _) => "pthread_spin_lock",
        (_, _, AcquireHow::Try) => "pthread_mutex_trylock",
        (_, _, AcquireHow::CondReacquire) => "pthread_cond_wait",
        _ => "pthread_mutex_lock",
    }
}

fn finding(
    run: &Run,
    rule: Rule,
    signal: u8,
    h: &Acquisition,
    holder: Option<&Acquisition>,
) -> Finding {
    let name = signal_short_name(signal);
    let l = &run.locks[h.lock as usize];
    let function = lock_function(l.kind, h.mode, h.how).to_string();
    let class = run.acquisition_class(h);
    let mut locations = vec![location(run, h.site, h.thread, Role::LocksInHandler)];
    if let Some(o) = holder {
        locations.push(location(run, o.site, o.thread, Role::Holds));
    }
    let reason = match holder {
        Some(_) if l.kind == ObjectKind::RecursiveMutex => format!(
            "{name} can arrive while a thread holds the lock outside the handler: the \
             handler takes it again on that thread and changes what the interrupted critical \
             section was changing"
        ),
        Some(_) => format!(
            "{name} can arrive while a thread holds the lock outside the handler: the handler \
             then waits for a lock its own thread holds and will never release"
        ),
        None => format!(
            "{function} is not async-signal-safe: a handler that interrupts the lock's own \
             code (or a thread holding it) corrupts or deadlocks it"
        ),
    };
    Finding {
        id: 0,
        kind: Kind::SignalUnsafeLock,
        verdict: Verdict::Hazard,
        rule,
        message: Message::SignalUnsafeLock {
            signal: name.clone(),
            function: function.clone(),
            lock: lock(run, h.lock),
            holder: holder.map(|o| thread(run, o.thread)),
        },
        reason,
        traces: vec![run.source.clone()],
        witness: None,
        occurrences: 1,
        locations,
        detail: Detail::Signal(Box::new(SignalReport {
            signal,
            signal_name: name,
            function,
            lock: lock(run, h.lock),
            lock_classes: vec![class],
            handler: SignalSite {
                thread: thread(run, h.thread),
                mode: lock_mode(h.mode),
                site: site(run, h.site),
            },
            holder: holder.map(|o| SignalSite {
                thread: thread(run, o.thread),
                mode: lock_mode(o.mode),
                site: site(run, o.site),
            }),
        })),
    }
}
