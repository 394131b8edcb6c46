//! The bundled example trace (`fixtures/traces/example.trace`), written with the builder: a
//! small bank in which two tellers move money between two accounts, taking the account locks
//! in opposite orders, after a start barrier, a one-time initialisation and a hand-off through
//! a condition variable and a semaphore.

use foresight_trace::builder::TraceBuilder;
use foresight_trace::event::EventKind;
use foresight_trace::tables::ObjectKind;

pub fn example_trace() -> Vec<u8> {
    let mut b = TraceBuilder::new("bank");
    let main = b.main_thread();
    let a = b.mutex("account_a");
    let acct_b = b.mutex("account_b");
    let log = b.mutex("log_lock");
    let start = b.object(ObjectKind::Barrier, "start_line");
    let once = b.object(ObjectKind::Once, "rates_once");
    let ready = b.object(ObjectKind::Condition, "ready");
    let slots = b.object(ObjectKind::Semaphore, "slots");

    let s_init = b.site("main", "bank.c", 40);
    let s_spawn = b.site("main", "bank.c", 44);
    let s_join = b.site("main", "bank.c", 52);
    let s_wait = b.site("teller", "bank.c", 18);
    let s_once = b.site("teller", "bank.c", 20);
    let s_lock_a = b.site("transfer", "bank.c", 26);
    let s_lock_b = b.site("transfer", "bank.c", 27);
    let s_unlock = b.site("transfer", "bank.c", 30);
    let s_log = b.site("audit", "bank.c", 34);
    let s_post = b.site("audit", "bank.c", 36);
    let s_cond = b.site("main", "bank.c", 48);
    let balance = 0x60_1000u64;

    b.event(
        main,
        EventKind::BarrierInit {
            barrier: start,
            count: 3,
            site: s_init,
        },
    );
    b.event(
        main,
        EventKind::SemInit {
            sem: slots,
            value: 0,
            site: s_init,
        },
    );
    let t1 = b.spawn(main, s_spawn, "teller-1");
    let t2 = b.spawn(main, s_spawn, "teller-2");
    for t in [main, t1, t2] {
        b.event(
            t,
            EventKind::BarrierWaitBegin {
                barrier: start,
                site: s_wait,
                generation: None,
            },
        );
    }
    for (t, serial) in [(t1, false), (main, true), (t2, false)] {
        b.event(
            t,
            EventKind::BarrierWaitEnd {
                barrier: start,
                generation: 0,
                serial,
            },
        );
    }
    // teller-1 runs the one-time initialisation; teller-2 finds it done.
    b.event(t1, EventKind::OnceBegin { once, site: s_once });
    b.event(t1, EventKind::OnceRun { once });
    b.event(t1, EventKind::OnceEnd { once });
    b.event(t2, EventKind::OnceBegin { once, site: s_once });
    b.event(t2, EventKind::OnceSkip { once });
    // teller-1: a then b.
    b.lock(t1, a, s_lock_a);
    b.lock(t1, acct_b, s_lock_b);
    b.read(t1, balance, 8, s_lock_b);
    b.write(t1, balance, 8, s_lock_b);
    b.unlock(t1, acct_b, s_unlock);
    b.unlock(t1, a, s_unlock);
    // teller-2: b then a — the inverted order.
    b.lock(t2, acct_b, s_lock_a);
    b.lock(t2, a, s_lock_b);
    b.read(t2, balance, 8, s_lock_b);
    b.write(t2, balance, 8, s_lock_b);
    b.unlock(t2, a, s_unlock);
    b.unlock(t2, acct_b, s_unlock);
    // teller-2 signals main under the log lock, and posts a slot.
    b.lock(main, log, s_cond);
    b.event(
        main,
        EventKind::CondWaitBegin {
            cond: ready,
            mutex: log,
            site: s_cond,
        },
    );
    b.lock(t2, log, s_log);
    b.event(
        t2,
        EventKind::CondSignal {
            cond: ready,
            site: s_log,
        },
    );
    b.unlock(t2, log, s_log);
    b.event(
        main,
        EventKind::CondWaitEnd {
            cond: ready,
            mutex: log,
            outcome: foresight_trace::event::WaitOutcome::Woken,
        },
    );
    b.unlock(main, log, s_cond);
    b.event(
        t2,
        EventKind::SemPost {
            sem: slots,
            site: s_post,
        },
    );
    b.event(
        main,
        EventKind::SemWaitBegin {
            sem: slots,
            site: s_cond,
        },
    );
    b.event(
        main,
        EventKind::SemWaitEnd {
            sem: slots,
            acquired: true,
        },
    );
    b.join(main, t1, s_join);
    b.join(main, t2, s_join);
    b.finish()
}
