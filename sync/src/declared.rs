//! What every lock of the crate carries: where it was declared, and at which address the
//! runtime was told of it.

use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::runtime::{Kind, Mode, Runtime};

/// `Declared::announced` while a thread declares the lock (no lock is at address 1).
const DECLARING: usize = 1;

/// The first field of each lock (`repr(C)`), so that its address is the lock's: a `static`
/// lock is then named by its variable.
pub(crate) struct Declared {
    /// `Mutex::new`'s caller: the lock's class.
    pub(crate) at: &'static Location<'static>,
    /// The address at which the runtime was told of this lock (0: never): a lock moved since
    /// is declared again at its new address.
    announced: AtomicUsize,
}

impl Declared {
    #[track_caller]
    pub(crate) const fn here() -> Self {
        Declared {
            at: Location::caller(),
            announced: AtomicUsize::new(0),
        }
    }

    /// The lock's address for the runtime.
    #[inline(always)]
    pub(crate) fn addr(&self) -> usize {
        self as *const Declared as usize
    }

    /// Tells the runtime of the lock (once per address), and returns its address.
    #[inline(always)]
    pub(crate) fn announce(&self, rt: Runtime, kind: Kind, count: u32) -> usize {
        let addr = self.addr();
        if self.announced.load(Ordering::Acquire) != addr {
            self.announce_slow(rt, kind, count, addr);
        }
        addr
    }

    /// One thread declares the lock; threads that use it meanwhile wait the moment it takes
    /// (a declaration never blocks), so that none records an event on the lock before the
    /// runtime knows it as declared: the declaration starts a new object at the address.
    #[cold]
    fn announce_slow(&self, rt: Runtime, kind: Kind, count: u32, addr: usize) {
        loop {
            let seen = self.announced.load(Ordering::Acquire);
            if seen == addr {
                return;
            }
            if seen == DECLARING {
                std::hint::spin_loop();
                continue;
            }
            if self
                .announced
                .compare_exchange(seen, DECLARING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                rt.declare(addr, kind, count, self.at);
                self.announced.store(addr, Ordering::Release);
                return;
            }
        }
    }
}

impl Drop for Declared {
    fn drop(&mut self) {
        let addr = self.addr();
        if *self.announced.get_mut() == addr {
            if let Some(rt) = crate::runtime::get() {
                rt.forget(addr, self.at);
            }
        }
    }
}

/// Records a guard's release when it drops: the guards' first field, so that it drops (and
/// the release is recorded) before the `std` guard after it unlocks.
pub(crate) struct Release {
    /// The lock's address, its kind and where it was taken; `None` when not recorded.
    pub(crate) held: Option<(usize, Kind, &'static Location<'static>)>,
}

impl Release {
    #[inline(always)]
    pub(crate) fn none() -> Self {
        Release { held: None }
    }

    /// Stops recording a release for this guard (its `std` guard goes to a condition wait).
    pub(crate) fn disarm(&mut self) -> Option<(usize, Kind, &'static Location<'static>)> {
        self.held.take()
    }
}

impl Drop for Release {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some((addr, kind, at)) = self.held {
            if let Some(rt) = crate::runtime::get() {
                rt.release(addr, kind, at);
            }
        }
    }
}

/// Takes a lock through `try_first`, then `block` if it did not take it, recording the
/// acquisition; returns the `std` result and the guard's release.
#[inline(always)]
pub(crate) fn acquire<R>(
    rt: Runtime,
    addr: usize,
    mode: Mode,
    kind: Kind,
    at: &'static Location<'static>,
    try_first: impl FnOnce() -> Option<R>,
    block: impl FnOnce() -> R,
) -> (R, Release) {
    let held = Some((addr, kind, at));
    if let Some(r) = try_first() {
        rt.lock_immediate(addr, mode, kind, at);
        return (r, Release { held });
    }
    let token = rt.lock_request(addr, mode, kind, at);
    let r = block();
    rt.lock_acquired(addr, mode, kind, at, token);
    (r, Release { held })
}
