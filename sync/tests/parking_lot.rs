//! `foresight_sync::parking_lot` behaves as `parking_lot` does (run plainly, and recorded through
//! `cargo foresight test`): try-locks, timeouts, condition waits, values in and out.
#![cfg(feature = "parking_lot")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use foresight_sync::parking_lot::{Condvar, Mutex, Once, OnceState, ReentrantMutex, RwLock};

#[test]
fn mutex_try_lock_timeouts_and_values() {
    let mut m = Mutex::new(1);
    *m.get_mut() += 1;
    {
        let g = m.lock();
        assert!(m.is_locked());
        assert!(m.try_lock().is_none());
        assert!(m.try_lock_for(Duration::from_millis(10)).is_none());
        assert!(m
            .try_lock_until(Instant::now() + Duration::from_millis(10))
            .is_none());
        assert_eq!(*g, 2);
    }
    assert!(!m.is_locked());
    *m.try_lock_for(Duration::from_millis(10)).expect("free") += 1;
    assert_eq!(format!("{:?}", m.lock()), "3");
    assert_eq!(m.into_inner(), 3);
}

#[test]
fn rwlock_readers_share_writers_exclude() {
    let mut l = RwLock::new(String::from("a"));
    l.get_mut().push('b');
    {
        let r1 = l.read();
        let r2 = l.try_read().expect("readers share");
        assert!(l.try_write().is_none());
        assert!(l.try_write_for(Duration::from_millis(10)).is_none());
        assert_eq!((r1.as_str(), r2.as_str()), ("ab", "ab"));
    }
    {
        let mut w = l.write();
        assert!(l.is_locked_exclusive());
        assert!(l.try_read_for(Duration::from_millis(10)).is_none());
        w.push('c');
    }
    assert_eq!(l.into_inner(), "abc");
}

#[test]
fn condvar_waits_and_notifications() {
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    let (lock, cv) = &*pair;
    let mut g = lock.lock();
    assert!(cv.wait_for(&mut g, Duration::from_millis(10)).timed_out());
    assert!(cv
        .wait_while_for(&mut g, |v| *v == 0, Duration::from_millis(10))
        .timed_out());
    assert!(!cv.notify_one());
    drop(g);

    let other = Arc::clone(&pair);
    let t = foresight_sync::thread::spawn(move || {
        for _ in 0..3 {
            *other.0.lock() += 1;
            other.1.notify_all();
        }
    });
    let mut g = lock.lock();
    let r = cv.wait_while_until(&mut g, |v| *v < 3, Instant::now() + Duration::from_secs(30));
    assert!(!r.timed_out());
    assert_eq!(*g, 3);
    // The guard is the lock's again after the waits: it is released as it drops.
    drop(g);
    assert!(!lock.is_locked());
    t.join().unwrap();
}

#[test]
fn once_runs_one_initialiser() {
    static INIT: Once = Once::new();
    assert_eq!(INIT.state(), OnceState::New);
    let runs = Arc::new(Mutex::new(0));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let runs = Arc::clone(&runs);
            foresight_sync::thread::spawn(move || INIT.call_once(|| *runs.lock() += 1))
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(*runs.lock(), 1);
    assert!(INIT.state().done());
    INIT.call_once_force(|_| unreachable!("done already"));
}

#[test]
fn reentrant_mutex_lets_its_holder_in_again() {
    let r = Arc::new(ReentrantMutex::new(std::cell::Cell::new(1)));
    let outer = r.lock();
    let inner = r.try_lock().expect("the holder gets in again");
    inner.set(inner.get() + 1);
    drop(outer);
    // The lock is held until the holder's last guard drops.
    let other = Arc::clone(&r);
    let tried = foresight_sync::thread::spawn(move || other.try_lock().is_none());
    assert!(tried.join().unwrap());
    drop(inner);
    let other = Arc::clone(&r);
    let taken = foresight_sync::thread::spawn(move || other.lock().get());
    assert_eq!(taken.join().unwrap(), 2);
    assert!(!r.is_locked());
}
