//! `Once`, `OnceLock` and `LazyLock`: `std`'s, recorded (the initialiser's run, and every
//! call that found it done or waited for it).

use std::fmt;
use std::ops::Deref;
use std::panic::Location;

pub use std::sync::OnceState;

use crate::runtime::{self, Runtime};

/// Records one call that may run an initialiser: `once_begin` now, `once_finish` when it
/// drops (also when the initialiser panics).
pub(crate) struct Call {
    rt: Runtime,
    addr: usize,
    at: &'static Location<'static>,
    token: usize,
    ran: bool,
}

impl Call {
    pub(crate) fn begin(rt: Runtime, addr: usize, at: &'static Location<'static>) -> Call {
        let token = rt.once_begin(addr, at);
        Call {
            rt,
            addr,
            at,
            token,
            ran: false,
        }
    }

    /// Runs the initialiser `f`, recorded as this call's.
    pub(crate) fn run<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.ran = true;
        self.rt.once_run(self.addr, self.at);
        let _end = End(self.rt, self.addr, self.at);
        f()
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.rt
            .once_finish(self.addr, self.at, self.token, self.ran);
    }
}

/// The initialiser's end, when it returns or unwinds.
struct End(Runtime, usize, &'static Location<'static>);

impl Drop for End {
    fn drop(&mut self) {
        self.0.once_end(self.1, self.2);
    }
}

/// A one-time initialisation: `std::sync::Once` with the same API, recorded.
pub struct Once {
    inner: std::sync::Once,
}

impl Once {
    /// A new `Once`.
    #[allow(clippy::new_without_default)] // as std's
    pub const fn new() -> Once {
        Once {
            inner: std::sync::Once::new(),
        }
    }

    fn addr(&self) -> usize {
        self as *const Once as usize
    }

    /// Runs `f` if no call has run an initialiser yet; otherwise waits for the one running.
    #[track_caller]
    pub fn call_once<F: FnOnce()>(&self, f: F) {
        let Some(rt) = runtime::get() else {
            return self.inner.call_once(f);
        };
        let mut call = Call::begin(rt, self.addr(), Location::caller());
        self.inner.call_once(|| call.run(f));
    }

    /// `call_once`, also after a panicked initialiser (poisoned).
    #[track_caller]
    pub fn call_once_force<F: FnOnce(&OnceState)>(&self, f: F) {
        let Some(rt) = runtime::get() else {
            return self.inner.call_once_force(f);
        };
        let mut call = Call::begin(rt, self.addr(), Location::caller());
        self.inner.call_once_force(|state| call.run(|| f(state)));
    }

    /// Whether an initialiser has completed.
    pub fn is_completed(&self) -> bool {
        self.inner.is_completed()
    }
}

impl fmt::Debug for Once {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Once").finish_non_exhaustive()
    }
}

/// A cell written once: `std::sync::OnceLock` with the same API, recorded.
pub struct OnceLock<T> {
    inner: std::sync::OnceLock<T>,
}

impl<T> OnceLock<T> {
    /// An empty cell.
    pub const fn new() -> OnceLock<T> {
        OnceLock {
            inner: std::sync::OnceLock::new(),
        }
    }

    fn addr(&self) -> usize {
        self as *const OnceLock<T> as usize
    }

    /// The value, if it was set.
    pub fn get(&self) -> Option<&T> {
        self.inner.get()
    }

    /// The value, through the exclusive borrow.
    pub fn get_mut(&mut self) -> Option<&mut T> {
        self.inner.get_mut()
    }

    /// Sets the value if it is not set; otherwise gives `value` back.
    #[track_caller]
    pub fn set(&self, value: T) -> Result<(), T> {
        let mut value = Some(value);
        self.get_or_init(|| value.take().expect("the value is there until used"));
        match value {
            None => Ok(()),
            Some(v) => Err(v),
        }
    }

    /// The value, set by `f` if it was not set (`f` runs on one thread only; others wait).
    #[track_caller]
    pub fn get_or_init<F: FnOnce() -> T>(&self, f: F) -> &T {
        let Some(rt) = runtime::get() else {
            return self.inner.get_or_init(f);
        };
        let mut call = Call::begin(rt, self.addr(), Location::caller());
        self.inner.get_or_init(|| call.run(f))
    }

    /// The value, if it was set, taking it out of the cell.
    pub fn take(&mut self) -> Option<T> {
        self.inner.take()
    }

    /// The value, if it was set.
    pub fn into_inner(self) -> Option<T> {
        self.inner.into_inner()
    }
}

impl<T> Default for OnceLock<T> {
    fn default() -> OnceLock<T> {
        OnceLock::new()
    }
}

impl<T> From<T> for OnceLock<T> {
    fn from(value: T) -> Self {
        OnceLock {
            inner: std::sync::OnceLock::from(value),
        }
    }
}

impl<T: Clone> Clone for OnceLock<T> {
    fn clone(&self) -> Self {
        OnceLock {
            inner: self.inner.clone(),
        }
    }
}

impl<T: PartialEq> PartialEq for OnceLock<T> {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl<T: Eq> Eq for OnceLock<T> {}

impl<T: fmt::Debug> fmt::Debug for OnceLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

/// A value initialised on first use: `std::sync::LazyLock` with the same API, recorded.
pub struct LazyLock<T, F = fn() -> T> {
    cell: OnceLock<T>,
    // Taken by the one call that initialises; never locked while another lock is held, and
    // not a `crate::Mutex`, so foresight does not see it.
    init: std::sync::Mutex<Option<F>>,
}

impl<T, F: FnOnce() -> T> LazyLock<T, F> {
    /// A value that `f` makes on first use.
    pub const fn new(f: F) -> LazyLock<T, F> {
        LazyLock {
            cell: OnceLock::new(),
            init: std::sync::Mutex::new(Some(f)),
        }
    }

    /// The value, made now if it was not made yet.
    #[track_caller]
    pub fn force(this: &LazyLock<T, F>) -> &T {
        this.cell.get_or_init(|| {
            let f = this
                .init
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            match f {
                Some(f) => f(),
                None => panic!("LazyLock instance has previously been poisoned"),
            }
        })
    }

    /// The value if it was made, else the function that would have made it.
    pub fn into_inner(this: Self) -> Result<T, F> {
        let LazyLock { cell, init } = this;
        match cell.into_inner() {
            Some(v) => Ok(v),
            None => match init
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
            {
                Some(f) => Err(f),
                None => panic!("LazyLock instance has previously been poisoned"),
            },
        }
    }
}

impl<T, F: FnOnce() -> T> Deref for LazyLock<T, F> {
    type Target = T;
    #[track_caller]
    fn deref(&self) -> &T {
        LazyLock::force(self)
    }
}

impl<T: Default> Default for LazyLock<T> {
    fn default() -> LazyLock<T> {
        LazyLock::new(T::default)
    }
}

impl<T: fmt::Debug, F> fmt::Debug for LazyLock<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_tuple("LazyLock");
        match self.cell.get() {
            Some(v) => d.field(v),
            None => d.field(&format_args!("<uninit>")),
        };
        d.finish()
    }
}
