//! Deadlock prediction, behaviour by behaviour, on traces written with the builder.

mod common;

use common::T;
use foresight_analyzer::analysis::analyze;
use foresight_analyzer::model::build_run;
use foresight_analyzer::options::Options;
use foresight_analyzer::report::{Finding, Report, Rule, Verdict};
use foresight_trace::builder::TraceBuilder;
use foresight_trace::event::{EventKind, LockMode, ObjectId, ThreadId};
use foresight_trace::tables::{ClassKey, ObjectKind};
use foresight_trace::Trace;

impl T {
    /// `t` takes `first` then `second` and releases both.
    fn bytes(self) -> Vec<u8> {
        self.b.finish()
    }
}

fn report_of(traces: Vec<Vec<u8>>) -> Report {
    let runs: Vec<_> = traces
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| {
            let trace = Trace::from_bytes(format!("t{i}.trace"), bytes).expect("trace reads");
            build_run(&trace, &mut |_| {})
        })
        .collect();
    analyze(&runs, &[], &Options::default())
}

fn report(t: T) -> Report {
    report_of(vec![t.bytes()])
}

fn with(r: &Report, kind: &str, verdict: Verdict) -> Vec<Finding> {
    r.findings
        .iter()
        .filter(|f| f.kind.name() == kind && f.verdict == verdict)
        .cloned()
        .collect()
}

fn predicted(r: &Report) -> Vec<Finding> {
    r.findings
        .iter()
        .filter(|f| f.verdict == Verdict::Predicted)
        .cloned()
        .collect()
}

fn show(r: &Report) -> String {
    let mut v = Vec::new();
    foresight_analyzer::report::text::write(&mut v, r).unwrap();
    String::from_utf8(v).unwrap()
}

#[test]
fn a_two_thread_inversion_that_can_collide_is_predicted() {
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.nest(t1, a, b, 10);
    t.nest(t2, b, a, 20);
    let r = report(t);
    let d = with(&r, "deadlock", Verdict::Predicted);
    assert_eq!(d.len(), 1, "{}", show(&r));
    let f = &d[0];
    assert_eq!(f.rule, Rule::LockCycle);
    assert_eq!(f.edges().len(), 2);
    assert_eq!(f.locations.len(), 4);
    assert!(f.locations.iter().all(|l| l.file.as_deref() == Some("t.c")));
    let w = f.witness.as_ref().expect("a witness");
    assert!(w.threads.iter().filter(|t| t.blocks.is_some()).count() == 2);
    // The class-level cycle is covered by the prediction: no duplicate potential finding.
    assert!(
        with(&r, "potential-deadlock", Verdict::Potential).is_empty(),
        "{}",
        show(&r)
    );
    assert_eq!(r.summary.predicted, 1);
}

#[test]
fn an_inversion_after_the_first_thread_was_joined_is_only_potential() {
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    t.nest(t1, a, b, 10);
    t.join(t1);
    let t2 = t.spawn("two");
    t.nest(t2, b, a, 20);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
    let p = with(&r, "potential-deadlock", Verdict::Potential);
    assert_eq!(p.len(), 1);
    assert!(p[0].reason.contains("happens-before"), "{}", p[0].reason);
}

#[test]
fn an_inversion_under_a_common_gate_lock_is_not_predicted() {
    let mut t = T::new();
    let g = t.b.mutex("G");
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.lock(t1, g, 5);
    t.nest(t1, a, b, 10);
    t.unlock(t1, g);
    t.lock(t2, g, 6);
    t.nest(t2, b, a, 20);
    t.unlock(t2, g);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
    let p = with(&r, "potential-deadlock", Verdict::Potential);
    assert_eq!(p.len(), 1, "{}", show(&r));
    assert!(p[0].reason.contains("gate lock"), "{}", p[0].reason);
}

#[test]
fn one_thread_taking_both_orders_is_not_predicted() {
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    t.nest(t1, a, b, 10);
    t.nest(t1, b, a, 20);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
    let p = with(&r, "potential-deadlock", Verdict::Potential);
    assert_eq!(p.len(), 1);
    assert!(p[0].reason.contains("one thread"), "{}", p[0].reason);
}

#[test]
fn three_and_four_thread_cycles_are_predicted() {
    for n in [3usize, 4] {
        let mut t = T::new();
        let locks: Vec<ObjectId> = (0..n).map(|i| t.b.mutex(&format!("L{i}"))).collect();
        let threads: Vec<ThreadId> = (0..n).map(|i| t.spawn(&format!("w{i}"))).collect();
        for i in 0..n {
            t.nest(
                threads[i],
                locks[i],
                locks[(i + 1) % n],
                10 * (i as u32 + 1),
            );
        }
        let r = report(t);
        let d = with(&r, "deadlock", Verdict::Predicted);
        assert_eq!(d.len(), 1, "n={n}: {}", show(&r));
        assert_eq!(d[0].cycle().len(), n);
        assert_eq!(d[0].edges().len(), n);
        assert_eq!(r.summary.potential, 0, "{}", show(&r));
    }
}

#[test]
fn a_cycle_across_two_traces_is_reported_as_potential() {
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    t.nest(t1, a, b, 10);
    let first = t.bytes();
    let mut t = T::new();
    // Declared in the other order: ids differ, classes (by name) match.
    let b = t.b.mutex("B");
    let a = t.b.mutex("A");
    let t1 = t.spawn("one");
    t.nest(t1, b, a, 20);
    let second = t.bytes();
    let r = report_of(vec![first, second]);
    assert!(predicted(&r).is_empty());
    let p = with(&r, "potential-deadlock", Verdict::Potential);
    assert_eq!(p.len(), 1, "{}", show(&r));
    assert_eq!(p[0].traces.len(), 2);
    assert!(p[0].reason.contains("different traces"), "{}", p[0].reason);
}

#[test]
fn joining_while_holding_a_lock_the_child_takes_is_predicted() {
    let mut t = T::new();
    let l = t.b.mutex("L");
    let child = t.spawn("child");
    t.lock(child, l, 10);
    t.unlock(child, l);
    let main = t.main;
    t.lock(main, l, 20);
    t.join(child);
    t.unlock(main, l);
    let r = report(t);
    let d = with(&r, "join-deadlock", Verdict::Predicted);
    assert_eq!(d.len(), 1, "{}", show(&r));
    assert_eq!(d[0].rule, Rule::JoinWhileHolding);
    let roles: Vec<&str> = d[0].locations.iter().map(|l| l.role.name()).collect();
    assert_eq!(roles, ["holds", "joins", "requests"]);
    assert!(d[0].witness.is_some());
}

#[test]
fn joining_while_holding_a_lock_the_child_took_before_the_parent_could_is_not_predicted() {
    // The child takes L and only then tells the parent (semaphore) to go on and lock L.
    let mut t = T::new();
    let l = t.b.mutex("L");
    let s = t.b.object(ObjectKind::Semaphore, "S");
    let child = t.spawn("child");
    t.lock(child, l, 10);
    t.unlock(child, l);
    let site = t.at(11);
    t.ev(child, EventKind::SemPost { sem: s, site });
    let main = t.main;
    t.ev(main, EventKind::SemWaitBegin { sem: s, site });
    t.ev(
        main,
        EventKind::SemWaitEnd {
            sem: s,
            acquired: true,
        },
    );
    t.lock(main, l, 20);
    t.join(child);
    t.unlock(main, l);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
}

fn barrier_events(t: &mut T, barrier: ObjectId, order: &[(ThreadId, bool)], generation: u64) {
    let site = t.at(30);
    for &(th, arrive) in order {
        if arrive {
            t.ev(
                th,
                EventKind::BarrierWaitBegin {
                    barrier,
                    site,
                    generation: None,
                },
            );
        } else {
            t.ev(
                th,
                EventKind::BarrierWaitEnd {
                    barrier,
                    generation,
                    serial: false,
                },
            );
        }
    }
}

#[test]
fn waiting_at_a_barrier_while_holding_a_lock_another_participant_needs_is_predicted() {
    let mut t = T::new();
    let l = t.b.mutex("L");
    let bar = t.b.object(ObjectKind::Barrier, "start");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.lock(t2, l, 10);
    t.unlock(t2, l);
    t.lock(t1, l, 20);
    barrier_events(
        &mut t,
        bar,
        &[(t1, true), (t2, true), (t1, false), (t2, false)],
        0,
    );
    t.unlock(t1, l);
    let r = report(t);
    let d = with(&r, "barrier-deadlock", Verdict::Predicted);
    assert_eq!(d.len(), 1, "{}", show(&r));
    assert!(d[0].locations.iter().any(|l| l.role.name() == "arrives"));
}

#[test]
fn a_condition_wait_holding_a_lock_the_signaller_needs_is_predicted() {
    let mut t = T::new();
    let l = t.b.mutex("L");
    let m = t.b.mutex("M");
    let c = t.b.object(ObjectKind::Condition, "ready");
    let t1 = t.spawn("waiter");
    let t2 = t.spawn("signaller");
    t.lock(t2, l, 10);
    t.unlock(t2, l);
    t.lock(t1, l, 20);
    t.lock(t1, m, 21);
    let site = t.at(22);
    t.ev(
        t1,
        EventKind::CondWaitBegin {
            cond: c,
            mutex: m,
            site,
        },
    );
    t.lock(t2, m, 11);
    let site = t.at(12);
    t.ev(t2, EventKind::CondSignal { cond: c, site });
    t.unlock(t2, m);
    t.ev(
        t1,
        EventKind::CondWaitEnd {
            cond: c,
            mutex: m,
            outcome: foresight_trace::event::WaitOutcome::Woken,
        },
    );
    t.unlock(t1, m);
    t.unlock(t1, l);
    let r = report(t);
    let d = with(&r, "wait-deadlock", Verdict::Predicted);
    assert_eq!(d.len(), 1, "{}", show(&r));
    assert_eq!(d[0].rule, Rule::CondWaitWhileHolding);
    // Its own mutex is released by the wait: only L is held hostage.
    let w = d[0].wait().unwrap();
    assert_eq!(w.held.len(), 1);
    assert_eq!(w.held[0].lock.name, "L");
}

#[test]
fn a_semaphore_wait_holding_a_lock_the_poster_needs_is_predicted() {
    let mut t = T::new();
    let l = t.b.mutex("L");
    let s = t.b.object(ObjectKind::Semaphore, "items");
    let t1 = t.spawn("consumer");
    let t2 = t.spawn("producer");
    t.lock(t2, l, 10);
    t.unlock(t2, l);
    t.lock(t1, l, 20);
    let site = t.at(21);
    t.ev(t1, EventKind::SemWaitBegin { sem: s, site });
    let site = t.at(11);
    t.ev(t2, EventKind::SemPost { sem: s, site });
    t.ev(
        t1,
        EventKind::SemWaitEnd {
            sem: s,
            acquired: true,
        },
    );
    t.unlock(t1, l);
    let r = report(t);
    let d = with(&r, "wait-deadlock", Verdict::Predicted);
    assert_eq!(d.len(), 1, "{}", show(&r));
    assert_eq!(d[0].rule, Rule::SemWaitWhileHolding);
}

#[test]
fn read_read_inversions_of_rwlocks_report_nothing() {
    let mut t = T::new();
    let a = t.b.object(ObjectKind::RwLock, "A");
    let b = t.b.object(ObjectKind::RwLock, "B");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.read_lock(t1, a, 10);
    t.read_lock(t1, b, 11);
    t.unlock(t1, b);
    t.unlock(t1, a);
    t.read_lock(t2, b, 20);
    t.read_lock(t2, a, 21);
    t.unlock(t2, a);
    t.unlock(t2, b);
    let r = report(t);
    assert!(r.findings.is_empty(), "{}", show(&r));
}

#[test]
fn a_write_inversion_of_rwlocks_is_predicted() {
    let mut t = T::new();
    let a = t.b.object(ObjectKind::RwLock, "A");
    let b = t.b.object(ObjectKind::RwLock, "B");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.read_lock(t1, a, 10);
    t.lock(t1, b, 11);
    t.unlock(t1, b);
    t.unlock(t1, a);
    t.read_lock(t2, b, 20);
    t.lock(t2, a, 21);
    t.unlock(t2, a);
    t.unlock(t2, b);
    let r = report(t);
    assert_eq!(
        with(&r, "deadlock", Verdict::Predicted).len(),
        1,
        "{}",
        show(&r)
    );
}

#[test]
fn a_recursive_read_against_a_writer_is_potential() {
    let mut t = T::new();
    let a = t.b.object(ObjectKind::RwLock, "A");
    let t1 = t.spawn("reader");
    let t2 = t.spawn("writer");
    t.read_lock(t1, a, 10);
    t.read_lock(t1, a, 11);
    t.unlock(t1, a);
    t.unlock(t1, a);
    t.lock(t2, a, 20);
    t.unlock(t2, a);
    let r = report(t);
    let p = with(&r, "rwlock-deadlock", Verdict::Potential);
    assert_eq!(p.len(), 1, "{}", show(&r));
    assert!(predicted(&r).is_empty());
}

#[test]
fn a_trylock_makes_no_edge_to_the_lock_tried_but_holds_it_afterwards() {
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let c = t.b.mutex("C");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.lock(t1, a, 10);
    let site = t.at(11);
    t.ev(
        t1,
        EventKind::LockTry {
            lock: b,
            mode: LockMode::Exclusive,
            site,
            acquired: true,
        },
    );
    // Held through the trylock: B → C is an edge (and A → C).
    t.lock(t1, c, 12);
    t.unlock(t1, c);
    t.unlock(t1, b);
    t.unlock(t1, a);
    t.nest(t2, b, a, 20);
    let r = report(t);
    assert!(r.findings.is_empty(), "{}", show(&r));
    // A→C, B→C, B→A; not A→B.
    assert_eq!(r.summary.lock_order_edges, 3);
}

#[test]
fn inversions_ordered_by_semaphore_once_or_barrier_are_not_predicted() {
    // Semaphore.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let s = t.b.object(ObjectKind::Semaphore, "S");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.nest(t1, a, b, 10);
    let site = t.at(15);
    t.ev(t1, EventKind::SemPost { sem: s, site });
    t.ev(t2, EventKind::SemWaitBegin { sem: s, site });
    t.ev(
        t2,
        EventKind::SemWaitEnd {
            sem: s,
            acquired: true,
        },
    );
    t.nest(t2, b, a, 20);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "semaphore: {}", show(&r));
    assert_eq!(r.summary.potential, 1);

    // Once: the first thread's order is inside the initialiser the second one skips.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let once = t.b.object(ObjectKind::Once, "init");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    let site = t.at(5);
    t.ev(t1, EventKind::OnceBegin { once, site });
    t.ev(t1, EventKind::OnceRun { once });
    t.nest(t1, a, b, 10);
    t.ev(t1, EventKind::OnceEnd { once });
    t.ev(t2, EventKind::OnceBegin { once, site });
    t.ev(t2, EventKind::OnceSkip { once });
    t.nest(t2, b, a, 20);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "once: {}", show(&r));
    assert_eq!(r.summary.potential, 1);

    // Barrier: one order before it, the other after it.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let bar = t.b.object(ObjectKind::Barrier, "phase");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.nest(t1, a, b, 10);
    barrier_events(
        &mut t,
        bar,
        &[(t1, true), (t2, true), (t1, false), (t2, false)],
        0,
    );
    t.nest(t2, b, a, 20);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "barrier: {}", show(&r));
    assert_eq!(r.summary.potential, 1);
}

#[test]
fn same_class_locks_taken_lower_id_first_are_not_predicted() {
    let mut t = T::new();
    let init = t.at(3);
    let acct1 =
        t.b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(init));
    let acct2 =
        t.b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(init));
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    // transfer(1 → 2) and transfer(2 → 1) both lock the lower id first.
    t.nest(t1, acct1, acct2, 10);
    t.nest(t2, acct1, acct2, 10);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
    let p = with(&r, "potential-deadlock", Verdict::Potential);
    assert_eq!(p.len(), 1, "{}", show(&r));
    assert_eq!(p[0].rule, Rule::SameClassNesting);
}

#[test]
fn same_class_locks_taken_in_opposite_orders_are_predicted() {
    let mut t = T::new();
    let init = t.at(3);
    let acct1 =
        t.b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(init));
    let acct2 =
        t.b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(init));
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.nest(t1, acct1, acct2, 10);
    t.nest(t2, acct2, acct1, 10);
    let r = report(t);
    assert_eq!(
        with(&r, "deadlock", Verdict::Predicted).len(),
        1,
        "{}",
        show(&r)
    );
    // The self-edge of the class is explained by the prediction.
    assert_eq!(r.summary.potential, 0, "{}", show(&r));
}

#[test]
fn critical_sections_that_cannot_be_reordered_are_not_predicted() {
    // The lock rule is what keeps this sound. t1 posts S inside A; t2 waits for S, then takes
    // A, then nests B → A. t2's section on A must follow t1's (it starts after the post, made
    // while t1 held A), so t1 released A — and took and released B — before t2 holds B.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let s = t.b.object(ObjectKind::Semaphore, "S");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.lock(t1, a, 10);
    let site = t.at(11);
    t.ev(t1, EventKind::SemPost { sem: s, site });
    t.lock(t1, b, 12);
    t.unlock(t1, b);
    t.unlock(t1, a);
    t.ev(t2, EventKind::SemWaitBegin { sem: s, site });
    t.ev(
        t2,
        EventKind::SemWaitEnd {
            sem: s,
            acquired: true,
        },
    );
    t.lock(t2, a, 19);
    t.unlock(t2, a);
    t.nest(t2, b, a, 20);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
    let p = with(&r, "potential-deadlock", Verdict::Potential);
    assert_eq!(p.len(), 1);
    assert!(
        p[0].reason.contains("critical sections on A"),
        "{}",
        p[0].reason
    );
}

#[test]
fn the_lock_rule_and_happens_before_are_closed_together() {
    // The closure must iterate: t2 waits for t3's post (HB), t3 posted inside C, t2 takes C
    // later (lock rule: t3's release of C is in the closure), t3 released C only after waiting
    // for t1's post (HB), which t1 made after taking B. So t1's request of B is in the closure.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let c = t.b.mutex("C");
    let s = t.b.object(ObjectKind::Semaphore, "S");
    let s3 = t.b.object(ObjectKind::Semaphore, "S3");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    let t3 = t.spawn("three");
    let site = t.at(50);
    let sem_wait = |t: &mut T, th: ThreadId, sem: ObjectId| {
        t.ev(th, EventKind::SemWaitBegin { sem, site });
        t.ev(
            th,
            EventKind::SemWaitEnd {
                sem,
                acquired: true,
            },
        );
    };
    t.lock(t3, c, 30);
    t.ev(t3, EventKind::SemPost { sem: s3, site });
    t.lock(t1, a, 10);
    t.lock(t1, b, 11);
    t.ev(t1, EventKind::SemPost { sem: s, site });
    t.unlock(t1, b);
    t.unlock(t1, a);
    sem_wait(&mut t, t3, s);
    t.unlock(t3, c);
    sem_wait(&mut t, t2, s3);
    t.lock(t2, c, 19);
    t.unlock(t2, c);
    t.nest(t2, b, a, 20);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
}

#[test]
fn a_read_keeps_the_write_it_read_from() {
    // t2 spins on a (relaxed) atomic flag t1 sets after its nested section: reads-from orders
    // the inversion even without acquire/release.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    let site = t.at(40);
    t.nest(t1, a, b, 10);
    let atomic = |op| EventKind::Atomic {
        op,
        addr: 0x7000,
        size: 4,
        order: foresight_trace::event::MemoryOrder::Relaxed,
        site,
    };
    t.ev(t1, atomic(foresight_trace::event::AtomicOp::Store));
    t.ev(t2, atomic(foresight_trace::event::AtomicOp::Load));
    t.nest(t2, b, a, 20);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
    assert_eq!(r.summary.potential, 1);
}

#[test]
fn a_timed_condition_wait_is_only_potential() {
    let mut t = T::new();
    let l = t.b.mutex("L");
    let m = t.b.mutex("M");
    let c = t.b.object(ObjectKind::Condition, "ready");
    let t1 = t.spawn("waiter");
    let t2 = t.spawn("signaller");
    t.lock(t2, l, 10);
    t.unlock(t2, l);
    t.lock(t1, l, 20);
    t.lock(t1, m, 21);
    let site = t.at(22);
    t.ev(
        t1,
        EventKind::CondWaitBegin {
            cond: c,
            mutex: m,
            site,
        },
    );
    t.lock(t2, m, 11);
    let site = t.at(12);
    t.ev(t2, EventKind::CondSignal { cond: c, site });
    t.unlock(t2, m);
    t.ev(
        t1,
        EventKind::CondWaitEnd {
            cond: c,
            mutex: m,
            outcome: foresight_trace::event::WaitOutcome::TimedOut,
        },
    );
    t.unlock(t1, m);
    t.unlock(t1, l);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
    let p = with(&r, "wait-deadlock", Verdict::Potential);
    assert_eq!(p.len(), 1, "{}", show(&r));
    assert!(p[0].reason.contains("timed"), "{}", p[0].reason);
}

#[test]
fn an_earlier_critical_section_that_may_move_does_not_hide_a_deadlock() {
    // Same shape without the semaphore: t2's first section on A may run before t1's, so the
    // deadlock is predictable… but only by reordering two critical sections on A, which a
    // sync-preserving reordering does not do. Documented incompleteness: potential.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.nest(t1, a, b, 10);
    t.lock(t2, a, 19);
    t.unlock(t2, a);
    t.nest(t2, b, a, 20);
    let r = report(t);
    assert_eq!(r.summary.predicted + r.summary.potential, 1, "{}", show(&r));
}

#[test]
fn the_cycle_bound_is_configurable_and_reported() {
    let mut t = T::new();
    let n = 5;
    let locks: Vec<ObjectId> = (0..n).map(|i| t.b.mutex(&format!("L{i}"))).collect();
    let threads: Vec<ThreadId> = (0..n).map(|i| t.spawn(&format!("w{i}"))).collect();
    for i in 0..n {
        t.nest(
            threads[i],
            locks[i],
            locks[(i + 1) % n],
            10 * (i as u32 + 1),
        );
    }
    let bytes = t.bytes();
    let r = report_of(vec![bytes.clone()]);
    assert_eq!(r.summary.predicted, 1, "no length bound by default");
    assert!(!r.summary.cycle_length_cut);
    let trace = Trace::from_bytes("t.trace", bytes).unwrap();
    let run = build_run(&trace, &mut |_| {});
    let opts = Options {
        max_cycle_length: Some(4),
        ..Options::default()
    };
    let r = analyze(&[run], &[], &opts);
    // The bound cuts the cycle, and says so: its component is still listed, potential.
    assert_eq!((r.summary.predicted, r.summary.potential), (0, 1));
    assert!(r.summary.cycle_length_cut);
    assert!(r.components[0].search_cut);
    assert_eq!(r.findings[0].cycle().len(), 5);
}

// --- the command line ---------------------------------------------------------------------

fn foresight(args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(args)
        .output()
        .expect("run foresight")
}

fn temp_trace(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("foresight-deadlock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// An inversion between two tellers and a join while holding a lock.
fn bank() -> TraceBuilder {
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let l = t.b.mutex("L");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.nest(t1, a, b, 10);
    t.nest(t2, b, a, 20);
    t.lock(t2, l, 30);
    t.unlock(t2, l);
    let main = t.main;
    t.lock(main, l, 40);
    t.join(t2);
    t.unlock(main, l);
    t.b
}

#[test]
fn json_output_follows_the_documented_schema() {
    let path = temp_trace("bank.trace", &bank().finish());
    let o = foresight(&[
        "analyze".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        path.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["schema"], "foresight-report");
    assert_eq!(v["version"], 1);
    assert!(v["summary"]["predicted"].as_u64().unwrap() >= 2);
    assert_eq!(v["traces"][0]["path"], path.display().to_string());
    let findings = v["findings"].as_array().unwrap();
    let kinds: Vec<&str> = findings
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"deadlock") && kinds.contains(&"join-deadlock"),
        "{kinds:?}"
    );
    for f in findings {
        for field in [
            "id",
            "kind",
            "verdict",
            "rule",
            "message",
            "reason",
            "locations",
        ] {
            assert!(!f[field].is_null(), "finding without {field}: {f}");
        }
        assert!(["predicted", "potential"].contains(&f["verdict"].as_str().unwrap()));
        let locations = f["locations"].as_array().unwrap();
        assert!(!locations.is_empty());
        for l in locations {
            assert_eq!(l["file"], "t.c");
            assert!(l["line"].as_u64().unwrap() > 0);
            assert_eq!(l["function"], "f");
            assert!(l["thread"].as_str().unwrap().starts_with("thread "));
        }
    }
    let d = findings.iter().find(|f| f["kind"] == "deadlock").unwrap();
    assert_eq!(d["edges"].as_array().unwrap().len(), 2);
    assert!(!d["witness"]["schedule"].as_array().unwrap().is_empty());
}

#[test]
fn text_output_separates_predicted_from_potential_and_exits_zero() {
    let mut t = T::new();
    let a = t.b.mutex("C");
    let b = t.b.mutex("D");
    let t1 = t.spawn("one");
    t.nest(t1, a, b, 10);
    t.join(t1);
    let t2 = t.spawn("two");
    t.nest(t2, b, a, 20);
    let potential = temp_trace("potential.trace", &t.bytes());
    let predicted = temp_trace("predicted.trace", &bank().finish());
    let o = foresight(&[
        "analyze".as_ref(),
        potential.as_os_str(),
        predicted.as_os_str(),
    ]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("== PREDICTED deadlocks"), "{out}");
    assert!(out.contains("== POTENTIAL deadlocks"), "{out}");
    assert!(out.contains("witness"), "{out}");
    assert!(out.contains("held set: {A}"), "{out}");
}

#[test]
fn bad_input_exits_2_naming_the_file() {
    let missing = std::env::temp_dir().join("foresight-no-such-file.trace");
    let o = foresight(&["analyze".as_ref(), missing.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("foresight-no-such-file.trace"));

    let junk = temp_trace("junk.trace", b"this is not a trace at all, just some text");
    let o = foresight(&["analyze".as_ref(), junk.as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("junk.trace") && err.contains("not a foresight trace"),
        "{err}"
    );
}

#[test]
fn a_cut_short_trace_is_analysed_as_far_as_it_reads() {
    let mut b = bank();
    b.chunk_bytes(64);
    let whole = b.finish_without_trailer();
    let cut = &whole[..whole.len() - 10];
    let path = temp_trace("cut.trace", cut);
    let o = foresight(&["analyze".as_ref(), path.as_os_str()]);
    assert_eq!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning") && err.contains("cut.trace"),
        "{err}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("warning:"),
        "the report carries the reader's problems: {out}"
    );
}

#[test]
fn a_recursive_read_against_an_ordered_writer_reports_nothing() {
    let mut t = T::new();
    let a = t.b.object(ObjectKind::RwLock, "A");
    let w = t.spawn("writer");
    t.lock(w, a, 20);
    t.unlock(w, a);
    t.join(w);
    let r1 = t.spawn("reader");
    t.read_lock(r1, a, 10);
    t.read_lock(r1, a, 11);
    t.unlock(r1, a);
    t.unlock(r1, a);
    let r = report(t);
    assert!(r.findings.is_empty(), "{}", show(&r));
}

#[test]
fn a_semaphore_wait_with_tokens_left_or_another_poster_is_not_predicted() {
    for (initial, third_poster) in [(1u32, false), (0, true)] {
        let mut t = T::new();
        let l = t.b.mutex("L");
        let s = t.b.object(ObjectKind::Semaphore, "items");
        let site = t.at(5);
        let main = t.main;
        t.ev(
            main,
            EventKind::SemInit {
                sem: s,
                value: initial,
                site,
            },
        );
        let t1 = t.spawn("consumer");
        let t2 = t.spawn("producer");
        let t3 = t.spawn("other");
        t.lock(t2, l, 10);
        t.unlock(t2, l);
        t.lock(t1, l, 20);
        let site = t.at(21);
        t.ev(t1, EventKind::SemWaitBegin { sem: s, site });
        let site = t.at(11);
        t.ev(t2, EventKind::SemPost { sem: s, site });
        if third_poster {
            t.ev(t3, EventKind::SemPost { sem: s, site });
        }
        t.ev(
            t1,
            EventKind::SemWaitEnd {
                sem: s,
                acquired: true,
            },
        );
        t.unlock(t1, l);
        let r = report(t);
        assert!(
            predicted(&r).is_empty(),
            "initial {initial}, third poster {third_poster}: {}",
            show(&r)
        );
        assert_eq!(with(&r, "wait-deadlock", Verdict::Potential).len(), 1);
    }
}

#[test]
fn a_barrier_participant_that_took_the_lock_in_an_earlier_generation_is_not_predicted() {
    let mut t = T::new();
    let l = t.b.mutex("L");
    let bar = t.b.object(ObjectKind::Barrier, "phase");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.lock(t2, l, 10);
    t.unlock(t2, l);
    barrier_events(
        &mut t,
        bar,
        &[(t1, true), (t2, true), (t1, false), (t2, false)],
        0,
    );
    t.lock(t1, l, 20);
    barrier_events(
        &mut t,
        bar,
        &[(t1, true), (t2, true), (t1, false), (t2, false)],
        1,
    );
    t.unlock(t1, l);
    let r = report(t);
    assert!(predicted(&r).is_empty(), "{}", show(&r));
}

#[test]
fn a_cut_cycle_search_is_flagged() {
    let mut t = T::new();
    let n = 7;
    let locks: Vec<ObjectId> = (0..n).map(|i| t.b.mutex(&format!("L{i}"))).collect();
    let w = t.spawn("w");
    for i in 0..n {
        for j in 0..n {
            if i != j {
                t.nest(w, locks[i], locks[j], 10);
            }
        }
    }
    let trace = Trace::from_bytes("dense.trace", t.bytes()).unwrap();
    let run = build_run(&trace, &mut |_| {});
    let opts = Options {
        cycle_budget: 100,
        ..Options::default()
    };
    let r = analyze(&[run], &[], &opts);
    assert!(r.summary.cycle_search_truncated);
    assert!(show(&r).contains("cycle search budget ran out"));
}

#[test]
fn a_recording_that_ended_in_the_deadlock_is_predicted() {
    // The program hung: both threads hold one lock and wait for the other when recording stops.
    let mut t = T::new();
    let a = t.b.mutex("A");
    let b = t.b.mutex("B");
    let t1 = t.spawn("one");
    let t2 = t.spawn("two");
    t.lock(t1, a, 10);
    t.lock(t2, b, 20);
    let s1 = t.at(11);
    let s2 = t.at(21);
    t.ev(
        t1,
        EventKind::LockRequest {
            lock: b,
            mode: LockMode::Exclusive,
            site: s1,
        },
    );
    t.ev(
        t2,
        EventKind::LockRequest {
            lock: a,
            mode: LockMode::Exclusive,
            site: s2,
        },
    );
    let r = report_of(vec![t.b.finish_without_trailer()]);
    assert_eq!(
        with(&r, "deadlock", Verdict::Predicted).len(),
        1,
        "{}",
        show(&r)
    );
}

/// Two threads that nest every ordered pair of `n` locks, the second after the first joined
/// (nothing predictable), and a separate inversion of two other locks that can collide.
fn dense_and_one_inversion(n: usize) -> Vec<u8> {
    let mut t = T::new();
    let locks: Vec<ObjectId> = (0..n).map(|i| t.b.mutex(&format!("L{i}"))).collect();
    let (x, y) = (t.b.mutex("X"), t.b.mutex("Y"));
    for name in ["w1", "w2"] {
        let w = t.spawn(name);
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    t.nest(w, locks[i], locks[j], 10);
                }
            }
        }
        t.join(w);
    }
    let a = t.spawn("a");
    let b = t.spawn("b");
    t.nest(a, x, y, 30);
    t.nest(b, y, x, 40);
    t.bytes()
}

#[test]
fn a_dense_component_lists_its_shortest_cycles_and_counts_the_rest() {
    let r = report_of(vec![dense_and_one_inversion(6)]);
    // 6 locks, every order: 15 cycles of 2, 40 of 3, 90 of 4, 144 of 5, 120 of 6; plus X ⇄ Y.
    assert_eq!(r.summary.class_cycles, 15 + 40 + 90 + 144 + 120 + 1);
    assert_eq!(r.components.len(), 2, "{:#?}", r.components);
    let dense = r.components.iter().find(|c| c.classes == 6).unwrap();
    assert_eq!(dense.edges, 30);
    assert_eq!(dense.cycles_by_length, vec![0, 15, 40, 90, 144, 120]);
    assert_eq!((dense.predicted, dense.potential), (0, 409));
    assert_eq!(dense.listed_potential, 3);
    assert_eq!(dense.inversions, 15);
    assert_eq!(dense.top_inversions[0].counts, [2, 2]);
    let listed = with(&r, "potential-deadlock", Verdict::Potential);
    assert_eq!(listed.len(), 3);
    assert!(
        listed.iter().all(|f| f.cycle().len() == 2),
        "shortest first"
    );
    // The small component is listed whole, and predicted as before.
    let p = predicted(&r);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].cycle().len(), 2);
    assert!(p[0].cycle().iter().all(|c| c == "X" || c == "Y"));
    assert_eq!(r.summary.unlisted_potential, 406);
    let text = show(&r);
    assert!(
        text.contains("component 1: 6 classes, 30 edges, 409 cycles"),
        "{text}"
    );
    assert!(text.contains("406 more lock cycles not listed"), "{text}");
    // One component listed whole needs no summary line.
    assert!(!text.contains("component 2"), "{text}");

    // Listing everything gives every cycle, with the same verdicts.
    let trace = Trace::from_bytes("t.trace", dense_and_one_inversion(6)).unwrap();
    let run = build_run(&trace, &mut |_| {});
    let opts = Options {
        cycles_listed: usize::MAX,
        ..Options::default()
    };
    let all = analyze(&[run], &[], &opts);
    assert_eq!(
        with(&all, "potential-deadlock", Verdict::Potential).len(),
        409
    );
    assert_eq!(predicted(&all).len(), 1);
    assert_eq!(all.summary.unlisted_potential, 0);
}

#[test]
fn prediction_in_a_component_stops_once_enough_deadlocks_are_listed() {
    // Four threads run one after another with nothing ordering them: every inversion of
    // 5 locks can collide.
    let mut t = T::new();
    let locks: Vec<ObjectId> = (0..5).map(|i| t.b.mutex(&format!("L{i}"))).collect();
    let ws: Vec<ThreadId> = (0..4).map(|i| t.spawn(&format!("w{i}"))).collect();
    for (k, &w) in ws.iter().enumerate() {
        for i in 0..5 {
            for j in 0..5 {
                if i != j && (i < j) == (k % 2 == 0) {
                    t.nest(w, locks[i], locks[j], 10);
                }
            }
        }
    }
    let bytes = t.bytes();
    let r = report_of(vec![bytes.clone()]);
    let c = &r.components[0];
    assert_eq!(c.listed_predicted, 3);
    assert!(c.prediction_cut);
    assert_eq!(predicted(&r).len(), 3);
    assert!(show(&r).contains("prediction stopped once 3 deadlocks were predicted"));
    let trace = Trace::from_bytes("t.trace", bytes).unwrap();
    let run = build_run(&trace, &mut |_| {});
    let opts = Options {
        cycles_listed: usize::MAX,
        ..Options::default()
    };
    let all = analyze(&[run], &[], &opts);
    // Every pair of locks is inverted between an even and an odd thread: more deadlocks than
    // the default lists.
    assert!(predicted(&all).len() > 3, "{}", show(&all));
    assert!(!all.components[0].prediction_cut);
}
