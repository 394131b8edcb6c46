//! `Barrier`: `std::sync::Barrier`, recorded (each wait an arrival of its generation).

use std::fmt;
use std::panic::Location;

pub use std::sync::BarrierWaitResult;

use crate::declared::Declared;
use crate::runtime::{self, Kind};

/// A barrier: `std::sync::Barrier` with the same API, whose waits foresight records.
#[repr(C)]
pub struct Barrier {
    declared: Declared,
    count: u32,
    inner: std::sync::Barrier,
}

impl Barrier {
    /// A barrier that releases its waiters `n` at a time; its class for foresight is the
    /// caller's line.
    #[track_caller]
    pub const fn new(n: usize) -> Barrier {
        Barrier {
            declared: Declared::here(),
            count: if n > u32::MAX as usize {
                u32::MAX
            } else {
                n as u32
            },
            inner: std::sync::Barrier::new(n),
        }
    }

    /// Blocks until `n` threads have called `wait`; one of them is the leader.
    #[track_caller]
    pub fn wait(&self) -> BarrierWaitResult {
        let Some(rt) = runtime::get() else {
            return self.inner.wait();
        };
        let at = Location::caller();
        let addr = self.declared.announce(rt, Kind::Barrier, self.count);
        let token = rt.barrier_wait_begin(addr, at);
        let r = self.inner.wait();
        rt.barrier_wait_end(addr, at, token, r.is_leader());
        r
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier").finish_non_exhaustive()
    }
}
