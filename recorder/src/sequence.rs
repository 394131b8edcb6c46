//! Event keys: how events of different threads are ordered (`FORMAT.md` §6.3, §10).
//!
//! Default `Ordering::Logical`: Lamport clocks. Each thread has a counter; each object slot
//! (`objects.rs`) has an `AtomicU64` holding the largest key released through the object. A
//! releasing event (unlock, post, signal, barrier arrival, once end, cond-wait entry) takes
//! `thread + 1` and raises the object's clock to it *before* the real release; an acquiring
//! event (lock acquired, wait returned, barrier departure, once skip) takes
//! `max(thread, object) + 1` *after* the real acquire returned. Because the real operation
//! orders the two (the acquirer cannot return before the release), the acquire reads a clock at
//! least as large as the release's key: causally ordered events get increasing keys, and the
//! merged order `(key, thread, position)` is a linear extension of happens-before. No cache line
//! is shared between threads that do not share an object, which keeps the overhead flat.
//!
//! `FORESIGHT_ORDERING=global` selects `Ordering::GlobalSequence`: one process-wide
//! `fetch_add` per synchronising event, taken at the same points.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static GLOBAL: AtomicBool = AtomicBool::new(false);
/// The global counter, alone in its (pair of) cache lines: every thread writes it on every
/// synchronising event, and it must not drag read-mostly data (`GLOBAL`, table counters)
/// along between cores.
#[repr(align(128))]
struct Padded(AtomicU64);

static SEQUENCE: Padded = Padded(AtomicU64::new(0));

pub fn set_global(on: bool) {
    GLOBAL.store(on, Ordering::Relaxed);
}

pub fn is_global() -> bool {
    GLOBAL.load(Ordering::Relaxed)
}

/// What a synchronising event does to the clocks.
#[derive(Clone, Copy)]
pub enum Key<'a> {
    /// Not synchronising: reuse the thread's last key.
    Same,
    /// A fresh key with no object (create, detach, exit, fork, exec, failed waits).
    Tick,
    /// Acquire through one object.
    Acquire(&'a AtomicU64),
    /// Acquire through two objects (a condition wait returns: the mutex and the condition).
    Acquire2(&'a AtomicU64, &'a AtomicU64),
    /// Release through an object that other threads may release concurrently (rwlock readers,
    /// semaphore posts, signals, barrier arrivals): `fetch_max`.
    Release(&'a AtomicU64),
    /// Release of an object this thread holds exclusively (a mutex, a spinlock): nobody else
    /// can write its clock until the real unlock, and the clock only grows (our key exceeds the
    /// clock we acquired through), so a plain store suffices — no atomic read-modify-write on
    /// the hot path.
    ReleaseExclusive(&'a AtomicU64),
    /// Acquire from a known key (join: the child's exit key; thread start: the create key).
    After(u64),
    /// Acquire and release through one clock at once: an atomic operation, under its stripe's
    /// lock (`stripes.rs`), reads what the previous operation on the address left and leaves
    /// its own key for the next.
    Exchange(&'a AtomicU64),
}

/// The key of the next event of a thread whose clock is `*clock`; updates the clocks.
#[inline]
pub fn next(clock: &mut u64, key: Key<'_>) -> u64 {
    if let Key::Same = key {
        return *clock;
    }
    if is_global() {
        let k = SEQUENCE.0.fetch_add(1, Ordering::AcqRel) + 1;
        *clock = k.max(*clock);
        return *clock;
    }
    let k = match key {
        Key::Same => *clock,
        Key::Tick => *clock + 1,
        Key::Acquire(o) => (*clock).max(o.load(Ordering::Acquire)) + 1,
        Key::Acquire2(a, b) => {
            (*clock)
                .max(a.load(Ordering::Acquire))
                .max(b.load(Ordering::Acquire))
                + 1
        }
        Key::Release(o) => {
            let k = *clock + 1;
            // fetch_max, not store: readers of an rwlock (and posters of a semaphore) release
            // concurrently.
            if o.load(Ordering::Relaxed) < k {
                o.fetch_max(k, Ordering::AcqRel);
            }
            k
        }
        Key::ReleaseExclusive(o) => {
            let k = *clock + 1;
            // Relaxed: the real unlock (a release) orders it before the next owner's read,
            // which follows that owner's real lock (an acquire).
            o.store(k, Ordering::Relaxed);
            k
        }
        Key::After(v) => (*clock).max(v) + 1,
        Key::Exchange(o) => {
            let k = (*clock).max(o.load(Ordering::Acquire)) + 1;
            // fetch_max: the happens-before annotations release through the same clocks
            // without the stripe's lock.
            o.fetch_max(k, Ordering::AcqRel);
            k
        }
    };
    *clock = k;
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lamport() {
        let obj = AtomicU64::new(0);
        let (mut a, mut b) = (0u64, 0u64);
        assert_eq!(next(&mut a, Key::Acquire(&obj)), 1);
        assert_eq!(next(&mut a, Key::Same), 1);
        assert_eq!(next(&mut a, Key::Release(&obj)), 2);
        assert_eq!(next(&mut b, Key::Acquire(&obj)), 3);
        assert_eq!(next(&mut b, Key::After(10)), 11);
        assert_eq!(next(&mut b, Key::Tick), 12);
        assert_eq!(next(&mut a, Key::Exchange(&obj)), 3);
        assert_eq!(obj.load(Ordering::Relaxed), 3);
        assert_eq!(next(&mut b, Key::Exchange(&obj)), 13);
        assert_eq!(obj.load(Ordering::Relaxed), 13);
    }
}
