//! Lamport clocks for synchronisation through plain memory addresses: atomic operations and
//! the happens-before annotations (allocation and free have a smaller table of their own,
//! `hooks/heap.rs`). These need no
//! object id, only a clock per address, so the addresses share a fixed table of stripes by
//! hash: two addresses on one stripe only order their events more than needed, never less
//! (a shared clock is the larger of the two), which keeps the merged order a linear
//! extension of happens-before (`sequence.rs`).
//!
//! Atomic operations also take the stripe's lock around the real operation (`lock`/`unlock`,
//! from the ThreadSanitizer-ABI hooks): the key is then taken in the same order as the
//! operations on the address happen, so that the merged order of a trace puts every atomic
//! load after the store it read and before the next store to that address. The lock guards one
//! machine instruction (or a `cmpxchg16b` loop) and the event push; it never waits on the
//! program.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// 2^16 stripes of one cache line each: 4 MiB of zero-initialised address space, of which
/// only the pages of stripes in use are touched.
const STRIPES: usize = 1 << 16;

#[repr(align(64))]
pub struct Stripe {
    lock: AtomicBool,
    /// The largest key released through an address of this stripe.
    pub clock: AtomicU64,
}

static TABLE: [Stripe; STRIPES] = [const {
    Stripe {
        lock: AtomicBool::new(false),
        clock: AtomicU64::new(0),
    }
}; STRIPES];

/// The stripe of `addr` (atomics of up to 16 bytes are aligned: byte addresses of one
/// location hash alike once the low bits are dropped).
#[inline(always)]
pub fn of(addr: usize) -> &'static Stripe {
    let h = ((addr >> 3) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48;
    &TABLE[h as usize & (STRIPES - 1)]
}

impl Stripe {
    /// Takes the stripe's lock. A holder keeps it for one atomic instruction and one event;
    /// past a few spins the waiter yields (the holder may have been preempted).
    #[inline]
    pub fn lock(&self) {
        if self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        self.lock_slow();
    }

    #[cold]
    fn lock_slow(&self) {
        let mut spins = 0u32;
        loop {
            while self.lock.load(Ordering::Relaxed) {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    // SAFETY: sched_yield has no preconditions.
                    unsafe { libc::sched_yield() };
                }
            }
            if self
                .lock
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    #[inline]
    pub fn unlock(&self) {
        self.lock.store(false, Ordering::Release);
    }
}
