//! Resolution of the interposed functions' real definitions with `dlsym(RTLD_NEXT, …)` (or
//! `dlvsym` where glibc versions a symbol).
//!
//! Resolution is lazy and may happen very early (a hook called from another library's
//! constructor, before ours ran) or recursively (a hook called from inside `dlsym`'s own
//! bootstrap). `try_get` reports the recursive case — the same symbol again — as `None`, so
//! the hook can fall through instead of recursing forever. Another symbol is resolved even
//! inside `dlsym`: a failed lookup allocates its error message, and the allocation hook may
//! need `pthread_once` (through the unwinder) before the lookup has returned.
//!
//! Every symbol is also resolved when the library is loaded (an `.init_array` entry per
//! `real!`): a signal handler that interrupts a thread inside `dlsym` would otherwise find its
//! own hooks' symbols "being resolved", and an unlock that falls through without the real
//! call leaves the program's mutex locked for good.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many resolutions may nest on one thread (each a different symbol).
const NESTED: usize = 4;

thread_local! {
    /// The symbols this thread is inside `dlsym`/`dlvsym` for, innermost last (0: free).
    static RESOLVING: Cell<[usize; NESTED]> = const { Cell::new([0; NESTED]) };
}

/// One lazily resolved symbol; resolving twice concurrently is harmless (same answer).
pub struct RealFn {
    name: &'static [u8],
    /// NUL-terminated glibc symbol version, or empty for plain `dlsym`.
    version: &'static [u8],
    addr: AtomicUsize,
}

impl RealFn {
    /// `name` must end with a NUL byte.
    pub const fn new(name: &'static [u8]) -> Self {
        Self {
            name,
            version: b"",
            addr: AtomicUsize::new(0),
        }
    }

    /// A symbol that glibc versions: `dlvsym(RTLD_NEXT, name, version)` first (both
    /// NUL-terminated), plain `dlsym` if that version does not exist on this platform.
    pub const fn versioned(name: &'static [u8], version: &'static [u8]) -> Self {
        Self {
            name,
            version,
            addr: AtomicUsize::new(0),
        }
    }

    /// The real function's address; aborts if it does not exist (nothing sensible can continue).
    #[inline]
    pub fn get(&self) -> usize {
        match self.try_get() {
            Some(a) => a,
            None => std::process::abort(),
        }
    }

    /// The real function's address, or `None` when it cannot be resolved right now (we are
    /// inside `dlsym` on this thread) or at all.
    #[inline]
    pub fn try_get(&self) -> Option<usize> {
        let a = self.addr.load(Ordering::Relaxed);
        if a != 0 {
            return Some(a);
        }
        self.resolve()
    }

    /// The real function's address if it was resolved already (no attempt otherwise): for a
    /// hot path that leaves the resolution to its out-of-line path.
    #[inline(always)]
    pub fn resolved(&self) -> Option<usize> {
        let a = self.addr.load(Ordering::Relaxed);
        (a != 0).then_some(a)
    }

    /// Resolves the symbol now, if it is not yet (see the module's comment).
    pub fn resolve_at_load(&self) {
        let _ = self.try_get();
    }

    #[cold]
    fn resolve(&self) -> Option<usize> {
        let me = self as *const Self as usize;
        let outer = RESOLVING.with(|r| r.get());
        if outer.contains(&me) {
            return None;
        }
        let free = outer.iter().position(|&s| s == 0)?;
        let mut inner = outer;
        inner[free] = me;
        RESOLVING.with(|r| r.set(inner));
        let mut a = 0usize;
        if self.version.len() > 1 {
            // SAFETY: both strings are NUL-terminated statics; RTLD_NEXT asks for the
            // definition after this library (libc's).
            a = unsafe {
                libc::dlvsym(
                    libc::RTLD_NEXT,
                    self.name.as_ptr().cast(),
                    self.version.as_ptr().cast(),
                )
            } as usize;
        }
        if a == 0 {
            // SAFETY: as above.
            a = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr().cast()) } as usize;
        }
        RESOLVING.with(|r| r.set(outer));
        if a == 0 {
            return None;
        }
        self.addr.store(a, Ordering::Relaxed);
        Some(a)
    }
}

/// Declares a `RealFn` static and a typed accessor for it.
///
/// `real!(pub REAL_X: unsafe extern "C-unwind" fn(*mut T) -> c_int = b"x\0");`
macro_rules! real {
    ($vis:vis $name:ident : $ty:ty = $sym:literal) => {
        // SAFETY: the type written in the declaration is the C prototype of the symbol.
        $vis static $name: $crate::real::Typed<$ty> = unsafe { $crate::real::Typed::new($sym, b"") };
        $crate::real::resolve_at_load!($name);
    };
    ($vis:vis $name:ident : $ty:ty = $sym:literal @ $ver:literal) => {
        // SAFETY: the type written in the declaration is the C prototype of the symbol.
        $vis static $name: $crate::real::Typed<$ty> = unsafe { $crate::real::Typed::new($sym, $ver) };
        $crate::real::resolve_at_load!($name);
    };
}

/// An `.init_array` entry that resolves the static `$name` (a `RealFn` or `Typed`) when the
/// library is loaded, before the program's own constructors and threads. A numbered section
/// runs before the plain `.init_array` of `startup::init`: nothing is recorded yet, so what
/// the dynamic loader does for a lookup (a failed one allocates its message) is not taken
/// for the program's.
macro_rules! resolve_at_load {
    ($name:ident) => {
        #[cfg(not(test))]
        const _: () = {
            extern "C" fn resolve() {
                $name.resolve_at_load();
            }
            #[used]
            #[link_section = ".init_array.00100"]
            static RESOLVE: extern "C" fn() = resolve;
        };
    };
}
pub(crate) use real;
pub(crate) use resolve_at_load;

/// A `RealFn` with the function-pointer type of the real function.
pub struct Typed<F> {
    raw: RealFn,
    _ty: std::marker::PhantomData<F>,
}

// SAFETY: only holds an atomic address; F is a plain fn-pointer type.
unsafe impl<F> Sync for Typed<F> {}

impl<F: Copy> Typed<F> {
    /// # Safety
    /// `F` is a function-pointer type with the C prototype of the symbol `name` (both strings
    /// NUL-terminated), in the given glibc `version` when that is not empty.
    pub const unsafe fn new(name: &'static [u8], version: &'static [u8]) -> Self {
        Self {
            raw: RealFn::versioned(name, version),
            _ty: std::marker::PhantomData,
        }
    }

    /// Resolves the symbol now, if it is not yet (see the module's comment).
    pub fn resolve_at_load(&self) {
        self.raw.resolve_at_load();
    }

    /// The typed function pointer, or `None` during `dlsym`'s own bootstrap.
    #[inline]
    pub fn try_get(&self) -> Option<F> {
        const {
            assert!(
                std::mem::size_of::<F>() == std::mem::size_of::<usize>(),
                "a real function is one pointer"
            )
        };
        let a = self.raw.try_get()?;
        // SAFETY: `new`'s contract: F is the fn-pointer type of the symbol, one pointer wide
        // (checked when this is compiled), and `a` is that symbol's non-null address.
        Some(unsafe { std::mem::transmute_copy::<usize, F>(&a) })
    }

    /// The typed function pointer if it was resolved already (`RealFn::resolved`).
    #[inline(always)]
    pub fn resolved(&self) -> Option<F> {
        let a = self.raw.resolved()?;
        // SAFETY: as in `try_get`.
        Some(unsafe { std::mem::transmute_copy::<usize, F>(&a) })
    }

    /// The typed function pointer; aborts if the symbol is missing.
    #[inline]
    pub fn get(&self) -> F {
        match self.try_get() {
            Some(f) => f,
            None => std::process::abort(),
        }
    }
}

/// A thread's start routine, as `pthread_create` takes it.
pub type Start = unsafe extern "C-unwind" fn(*mut libc::c_void) -> *mut libc::c_void;

// The real thread functions: the `pthread_create` and `pthread_join` hooks call them, and so
// does the runtime for its own thread (`flusher.rs`).
real!(pub REAL_CREATE: unsafe extern "C-unwind" fn(*mut libc::pthread_t, *const libc::pthread_attr_t, Start, *mut libc::c_void) -> libc::c_int = b"pthread_create\0");
real!(pub REAL_JOIN: unsafe extern "C-unwind" fn(libc::pthread_t, *mut *mut libc::c_void) -> libc::c_int = b"pthread_join\0");
