//! The user's frame of a site (`sites.rs`) and lock classes named by their role, on traces
//! written with the builder: inlined standard-library calls and wrapper frames are skipped,
//! the full stack is kept, heap locks are keyed by the block that holds them.

use foresight_analyzer::analysis::analyze;
use foresight_analyzer::model::{build_run, build_run_with, Run};
use foresight_analyzer::options::Options;
use foresight_analyzer::sites::{user_location, Wrappers};
use foresight_trace::builder::TraceBuilder;
use foresight_trace::event::EventKind;
use foresight_trace::tables::{ClassKey, ObjectKind};
use foresight_trace::Trace;

const GTHR: &str = "/usr/include/x86_64-linux-gnu/c++/12/bits/gthr-default.h";
const STD_MUTEX: &str = "/usr/include/c++/12/bits/std_mutex.h";

fn run_of(b: TraceBuilder, wrappers: &Wrappers) -> Run {
    let trace = Trace::from_bytes("t.trace", b.finish()).expect("trace reads");
    build_run_with(&trace, wrappers, &mut |_| {})
}

#[test]
fn inlined_standard_library_calls_are_skipped() {
    let mut b = TraceBuilder::new("t");
    // -O2: everything inlined into `pay` at one return address.
    let site = b.stack_site(&[&[
        ("__gthread_mutex_lock", GTHR, 749),
        ("std::mutex::lock()", STD_MUTEX, 100),
        ("lock_guard", STD_MUTEX, 229),
        ("pay", "/src/bank.cc", 15),
    ]]);
    let trace = Trace::from_bytes("t.trace", b.finish()).unwrap();
    let l = user_location(&trace.tables, site, &Wrappers::default());
    assert_eq!(l.text, "pay (bank.cc:15)");
    assert_eq!((l.function.as_deref(), l.line), (Some("pay"), 15));
    assert_eq!(l.stack, ["pay (bank.cc:15)"]);
    assert_eq!(l.full_stack.len(), 4, "{:?}", l.full_stack);
    assert_eq!(l.full_stack[0], "__gthread_mutex_lock (gthr-default.h:749)");
    assert!(!l.machinery_only);
}

#[test]
fn wrapper_frames_are_skipped_and_callers_kept() {
    let mut b = TraceBuilder::new("t");
    // -O0 through a wrapper of the program's: one frame each, the wrapper's caller third.
    let site = b.stack_site(&[
        &[("__gthread_mutex_lock", GTHR, 749)],
        &[("db_lock", "/src/db.c", 10)],
        &[("checkpoint", "/src/db.c", 40)],
        &[("main", "/src/db.c", 90)],
    ]);
    let trace = Trace::from_bytes("t.trace", b.finish()).unwrap();
    let plain = user_location(&trace.tables, site, &Wrappers::default());
    assert_eq!(
        plain.text, "db_lock (db.c:10)",
        "not a wrapper unless named"
    );
    assert_eq!(
        plain.stack,
        [
            "db_lock (db.c:10)",
            "checkpoint (db.c:40)",
            "main (db.c:90)"
        ]
    );
    let w = Wrappers::new(["db_*"]);
    let wrapped = user_location(&trace.tables, site, &w);
    assert_eq!(wrapped.text, "checkpoint (db.c:40)");
    assert_eq!(wrapped.stack, ["checkpoint (db.c:40)", "main (db.c:90)"]);
    assert_eq!(wrapped.full_stack.len(), 4);
}

#[test]
fn a_wrapper_recorded_without_callers_is_named_and_marked() {
    let mut b = TraceBuilder::new("t");
    let site = b.stack_site(&[&[("db_lock", "/src/db.c", 10)]]);
    let trace = Trace::from_bytes("t.trace", b.finish()).unwrap();
    let l = user_location(&trace.tables, site, &Wrappers::new(["db_lock"]));
    assert_eq!(l.text, "db_lock (db.c:10)");
    assert!(l.machinery_only);
}

#[test]
fn heap_locks_are_keyed_by_the_block_that_holds_them() {
    let mut b = TraceBuilder::new("t");
    let main = b.main_thread();
    let first_use = b.site("pay", "/src/bank.cc", 15);
    let accounts = b.site("open_accounts", "/src/bank.cc", 30);
    let ledger = b.site("open_ledger", "/src/bank.cc", 40);
    let alice = b.object_with_class(ObjectKind::Mutex, ClassKey::FirstUse(first_use));
    let bob = b.object_with_class(ObjectKind::Mutex, ClassKey::FirstUse(first_use));
    let journal = b.object_with_class(ObjectKind::Mutex, ClassKey::FirstUse(first_use));
    let stray = b.object_with_class(ObjectKind::Mutex, ClassKey::FirstUse(first_use));
    // Alice's and Bob's accounts come from one allocation site; the journal is the second
    // lock of the ledger's block; the stray lock's block was freed before it was used.
    for (lock, site, offset) in [
        (alice, accounts, 0),
        (bob, accounts, 0),
        (journal, ledger, 8),
    ] {
        let addr = b.address_of(lock) - offset;
        b.event(
            main,
            EventKind::Alloc {
                addr,
                size: 48,
                site,
            },
        );
    }
    let addr = b.address_of(stray);
    b.event(
        main,
        EventKind::Alloc {
            addr,
            size: 48,
            site: ledger,
        },
    );
    b.event(main, EventKind::Free { addr, site: ledger });
    for l in [alice, bob, journal, stray] {
        b.lock(main, l, first_use);
        b.unlock(main, l, first_use);
    }
    let run = run_of(b, &Wrappers::default());
    let class = |o| {
        run.locks
            .iter()
            .find(|l| l.object == o)
            .map(|l| l.class.clone())
            .unwrap()
    };
    assert_eq!(
        class(alice),
        "mutex in a block allocated at open_accounts (bank.cc:30)"
    );
    assert_eq!(class(alice), class(bob), "one role, one class");
    assert_eq!(
        class(journal),
        "mutex at offset 8 of a block allocated at open_ledger (bank.cc:40)"
    );
    assert_eq!(class(stray), "mutex first used at pay (bank.cc:15)");
}

#[test]
fn init_sites_inside_a_wrapper_are_keyed_by_its_callers() {
    let mut b = TraceBuilder::new("t");
    let main = b.main_thread();
    let from_db = b.stack_site(&[
        &[("mtx_alloc", "/src/db.c", 18)],
        &[("db_open", "/src/db.c", 52)],
    ]);
    let from_cache = b.stack_site(&[
        &[("mtx_alloc", "/src/db.c", 18)],
        &[("cache_open", "/src/db.c", 46)],
    ]);
    let db = b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(from_db));
    let cache = b.object_with_class(ObjectKind::Mutex, ClassKey::InitSite(from_cache));
    let at = b.site("query", "/src/db.c", 61);
    b.lock(main, db, at);
    b.lock(main, cache, at);
    b.unlock(main, cache, at);
    b.unlock(main, db, at);
    let trace = Trace::from_bytes("t.trace", b.finish()).unwrap();
    let classes = |wrappers: &Wrappers| {
        let mut c: Vec<String> = [from_db, from_cache]
            .iter()
            .map(|&s| user_location(&trace.tables, s, wrappers).text)
            .collect();
        c.sort();
        c
    };
    let callers = ["cache_open (db.c:46)", "db_open (db.c:52)"];
    assert_eq!(
        classes(&Wrappers::default()),
        ["mtx_alloc (db.c:18)", "mtx_alloc (db.c:18)"]
    );
    assert_eq!(classes(&Wrappers::new(["mtx_*"])), callers);
    // Recorded one frame per site, the frames the recorder unwound through are its wrappers:
    // the analysis need not be told again.
    assert_eq!(trace.header.stack_depth, 1);
    assert_eq!(classes(&Wrappers::default().for_recorded_depth(1)), callers);
    assert_eq!(
        classes(&Wrappers::default().for_recorded_depth(4)),
        ["mtx_alloc (db.c:18)", "mtx_alloc (db.c:18)"],
        "deeper stacks are callers, not wrappers"
    );
    let run = build_run(&trace, &mut |_| {});
    let mut names: Vec<&str> = run.locks.iter().map(|l| l.class.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "mutex initialised at cache_open (db.c:46)",
            "mutex initialised at db_open (db.c:52)"
        ]
    );
}

#[test]
fn one_line_taking_most_locks_gets_a_hint() {
    let mut b = TraceBuilder::new("t");
    let main = b.main_thread();
    let wrapper = b.site("mtx_enter", "/src/db.c", 24);
    let other = b.site("main", "/src/db.c", 80);
    let locks: Vec<_> = (0..3).map(|i| b.mutex(&format!("m{i}"))).collect();
    for &l in &locks {
        b.lock(main, l, wrapper);
        b.unlock(main, l, wrapper);
    }
    b.lock(main, locks[0], other);
    b.unlock(main, locks[0], other);
    let trace = Trace::from_bytes("t.trace", b.finish()).unwrap();
    let report = analyze(&[build_run(&trace, &mut |_| {})], &[], &Options::default());
    assert_eq!(report.hints.len(), 1, "{:?}", report.hints);
    assert!(
        report.hints[0].contains("3 of 4") && report.hints[0].contains("--wrapper mtx_enter"),
        "{}",
        report.hints[0]
    );
}

#[test]
fn two_lines_taking_two_locks_get_no_hint() {
    // pay(alice, bob) and pay(bob, alice): the function takes every lock, at two lines.
    let mut b = TraceBuilder::new("t");
    let main = b.main_thread();
    let (first, second) = (
        b.site("pay", "/src/bank.c", 7),
        b.site("pay", "/src/bank.c", 8),
    );
    let (alice, bob) = (b.mutex("alice"), b.mutex("bob"));
    for (x, y) in [(alice, bob), (bob, alice)] {
        b.lock(main, x, first);
        b.lock(main, y, second);
        b.unlock(main, y, second);
        b.unlock(main, x, first);
    }
    let trace = Trace::from_bytes("t.trace", b.finish()).unwrap();
    let report = analyze(&[build_run(&trace, &mut |_| {})], &[], &Options::default());
    assert!(report.hints.is_empty(), "{:?}", report.hints);
}
