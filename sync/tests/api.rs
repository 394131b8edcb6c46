//! `foresight-sync` behaves as `std::sync` and `std::thread` do: guards, poisoning, `try_lock`,
//! `into_inner`, `get_mut`, timeouts, once-only initialisation, scopes. These run plainly here,
//! and recorded, one per trace, by `cargo-foresight`'s tests (`cargo foresight test -p
//! foresight-sync --test api`), where the recording paths must change nothing.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use foresight_sync::{
    thread, Arc, Barrier, Condvar, LazyLock, Mutex, Once, OnceLock, RwLock, TryLockError,
};

#[test]
fn mutex_guards_try_lock_and_into_inner() {
    let m = Mutex::new(vec![1]);
    {
        let mut g = m.lock().unwrap();
        g.push(2);
        assert!(matches!(m.try_lock(), Err(TryLockError::WouldBlock)));
    }
    m.try_lock().unwrap().push(3);
    assert_eq!(format!("{:?}", m.lock().unwrap()), "[1, 2, 3]");
    let mut m = m;
    m.get_mut().unwrap().push(4);
    assert_eq!(m.into_inner().unwrap(), [1, 2, 3, 4]);
    assert_eq!(*Mutex::<u8>::default().lock().unwrap(), 0);
    assert_eq!(*Mutex::from(5).lock().unwrap(), 5);
}

#[test]
fn a_panic_while_holding_a_mutex_poisons_it() {
    let m = Arc::new(Mutex::new(1));
    let m2 = m.clone();
    let r = thread::spawn(move || {
        let _g = m2.lock().unwrap();
        panic!("poisoning on purpose");
    })
    .join();
    assert!(r.is_err());
    assert!(m.is_poisoned());
    let err = m.lock().unwrap_err();
    assert_eq!(**err.get_ref(), 1);
    drop(err);
    assert!(matches!(m.try_lock(), Err(TryLockError::Poisoned(_))));
    m.clear_poison();
    assert!(!m.is_poisoned());
    assert_eq!(*m.lock().unwrap(), 1);
}

#[test]
fn rwlock_readers_share_and_writers_exclude() {
    let l = RwLock::new(10);
    {
        let r1 = l.read().unwrap();
        let r2 = l.try_read().unwrap();
        assert_eq!(*r1 + *r2, 20);
        assert!(matches!(l.try_write(), Err(TryLockError::WouldBlock)));
    }
    *l.write().unwrap() += 1;
    {
        let _w = l.try_write().unwrap();
        assert!(matches!(l.try_read(), Err(TryLockError::WouldBlock)));
    }
    let mut l = l;
    *l.get_mut().unwrap() += 1;
    assert_eq!(l.into_inner().unwrap(), 12);
}

#[test]
fn condvar_hand_off_and_timeouts() {
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let p2 = pair.clone();
    let t = thread::spawn(move || {
        let (lock, cv) = &*p2;
        *lock.lock().unwrap() = true;
        cv.notify_all();
    });
    let (lock, cv) = &*pair;
    let g = cv
        .wait_while(lock.lock().unwrap(), |ready| !*ready)
        .unwrap();
    assert!(*g);
    drop(g);
    t.join().unwrap();

    let (g, res) = cv
        .wait_timeout(lock.lock().unwrap(), Duration::from_millis(20))
        .unwrap();
    assert!(res.timed_out());
    drop(g);
    let start = Instant::now();
    let (g, res) = cv
        .wait_timeout_while(lock.lock().unwrap(), Duration::from_millis(30), |ready| {
            *ready
        })
        .unwrap();
    assert!(res.timed_out());
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert!(*g);
    drop(g);
    let (_g, res) = cv
        .wait_timeout_while(lock.lock().unwrap(), Duration::from_secs(5), |ready| {
            !*ready
        })
        .unwrap();
    assert!(!res.timed_out());
}

#[test]
fn condvar_wait_wakes_on_notify_one() {
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    let (tx, rx) = mpsc::channel();
    let p2 = pair.clone();
    let waiter = thread::spawn(move || {
        let (lock, cv) = &*p2;
        let mut g = lock.lock().unwrap();
        tx.send(()).unwrap();
        while *g == 0 {
            g = cv.wait(g).unwrap();
        }
        *g
    });
    rx.recv().unwrap();
    let (lock, cv) = &*pair;
    *lock.lock().unwrap() = 7;
    cv.notify_one();
    assert_eq!(waiter.join().unwrap(), 7);
}

#[test]
fn barrier_has_one_leader_per_generation() {
    let barrier = Arc::new(Barrier::new(3));
    let leaders: usize = (0..3)
        .map(|_| {
            let b = barrier.clone();
            thread::spawn(move || (0..4).filter(|_| b.wait().is_leader()).count())
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .sum();
    assert_eq!(leaders, 4);
}

#[test]
fn once_runs_its_initialiser_once() {
    static ONCE: Once = Once::new();
    static RUNS: Mutex<u32> = Mutex::new(0);
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| ONCE.call_once(|| *RUNS.lock().unwrap() += 1));
        }
    });
    assert!(ONCE.is_completed());
    assert_eq!(*RUNS.lock().unwrap(), 1);

    let forced = Once::new();
    let r = std::panic::catch_unwind(|| forced.call_once(|| panic!("initialiser panics")));
    assert!(r.is_err());
    let mut saw_poison = false;
    forced.call_once_force(|state| saw_poison = state.is_poisoned());
    assert!(saw_poison && forced.is_completed());
}

#[test]
fn once_lock_and_lazy_lock() {
    let cell = OnceLock::new();
    assert!(cell.get().is_none());
    assert_eq!(cell.set(1), Ok(()));
    assert_eq!(cell.set(2), Err(2));
    assert_eq!(*cell.get_or_init(|| 3), 1);
    assert_eq!(cell.into_inner(), Some(1));

    static CALLS: Mutex<u32> = Mutex::new(0);
    static LAZY: LazyLock<String> = LazyLock::new(|| {
        *CALLS.lock().unwrap() += 1;
        "made".to_string()
    });
    thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| assert_eq!(LAZY.as_str(), "made"));
        }
    });
    assert_eq!(*CALLS.lock().unwrap(), 1);
    let lazy = LazyLock::new(|| 5);
    assert!(LazyLock::into_inner(lazy).is_err());
    let lazy = LazyLock::new(|| 6);
    assert_eq!(*lazy, 6);
    assert!(matches!(LazyLock::into_inner(lazy), Ok(6)));
}

#[test]
fn scopes_and_builders() {
    let mut data = vec![1, 2, 3];
    let total = Mutex::new(0);
    thread::scope(|s| {
        for x in &data {
            s.spawn(|| *total.lock().unwrap() += *x);
        }
        let h = thread::Builder::new()
            .name("named".into())
            .spawn_scoped(s, || thread::current().name().map(str::to_string))
            .unwrap();
        assert_eq!(h.join().unwrap().as_deref(), Some("named"));
    });
    data.push(4);
    assert_eq!(*total.lock().unwrap(), 6);
    let h = thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(|| 42)
        .unwrap();
    assert_eq!(h.join().unwrap(), 42);
    assert_eq!(thread::spawn(|| 1).join().unwrap(), 1);
}
