//! Resolution of the interposed functions' real definitions with `dlsym(RTLD_NEXT, …)`.

use std::sync::atomic::{AtomicUsize, Ordering};

/// One lazily resolved symbol; resolving twice concurrently is harmless (same answer).
pub struct RealFn {
    name: &'static [u8],
    addr: AtomicUsize,
}

impl RealFn {
    /// `name` must end with a NUL byte.
    pub const fn new(name: &'static [u8]) -> Self {
        Self {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    #[inline]
    pub fn get(&self) -> usize {
        let a = self.addr.load(Ordering::Relaxed);
        if a != 0 {
            return a;
        }
        // SAFETY: `name` is NUL-terminated (checked by the constructors' callers) and
        // `RTLD_NEXT` asks for the definition after this library, i.e. libc's.
        let a = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr().cast()) } as usize;
        if a == 0 {
            // Nothing sensible can continue without the real function.
            std::process::abort();
        }
        self.addr.store(a, Ordering::Relaxed);
        a
    }
}
