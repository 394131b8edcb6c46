//! `std::thread`, with scopes whose end foresight sees.
//!
//! Threads are created and joined through `pthread_create` and `pthread_join`, which
//! foresight records for any program, so `spawn`, `Builder` and `JoinHandle` are `std`'s,
//! except that each spawn first names its caller's line as the new thread's site. A
//! scope is different: `std` waits for its threads without joining them, so each thread this
//! crate's `Scope` spawns declares, when its closure returns, that it happens before the
//! scope's end (a happens-before edge in the trace), as a join would.

use std::io;
use std::panic::Location;

pub use std::thread::{
    available_parallelism, current, panicking, park, park_timeout, sleep, yield_now, AccessError,
    JoinHandle, LocalKey, Result, ScopedJoinHandle, Thread, ThreadId,
};

use crate::runtime;

/// Spawns a thread running `f`: `std::thread::spawn`.
#[track_caller]
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let _named = SpawnSite::name(Location::caller());
    std::thread::spawn(f)
}

/// The caller's line named as the site of the thread `std` creates next (the runtime would
/// see a line of `std` make it), until `std`'s spawn has returned or unwound: a spawn that
/// fails before creating a thread leaves nothing for the next.
struct SpawnSite(Option<runtime::Runtime>);

impl SpawnSite {
    #[inline]
    fn name(at: &'static Location<'static>) -> SpawnSite {
        let rt = runtime::get();
        if let Some(rt) = rt {
            rt.spawn_site(Some(at));
        }
        SpawnSite(rt)
    }
}

impl Drop for SpawnSite {
    fn drop(&mut self) {
        if let Some(rt) = self.0 {
            rt.spawn_site(None);
        }
    }
}

pub use crate::scope::Scope;

/// The tag of a scope's happens-before edges: its address, unique while it lives.
fn tag(s: &std::thread::Scope<'_, '_>) -> u64 {
    s as *const std::thread::Scope<'_, '_> as u64
}

/// Runs `f` with a scope; every thread spawned in it has ended when this returns.
#[track_caller]
pub fn scope<'env, F, T>(f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    let at = Location::caller();
    let mut ended = 0;
    let r = std::thread::scope(|s| {
        ended = tag(s);
        f(runtime::scope_ref(s))
    });
    if let Some(rt) = runtime::get() {
        rt.happens(ended, false, at);
    }
    r
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Spawns a thread in the scope.
    #[track_caller]
    pub fn spawn<F, T>(&'scope self, f: F) -> ScopedJoinHandle<'scope, T>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let at = Location::caller();
        let tag = tag(&self.inner);
        let _named = SpawnSite::name(at);
        self.inner.spawn(move || ended_in_scope(f, tag, at))
    }
}

fn ended_in_scope<T>(f: impl FnOnce() -> T, tag: u64, at: &'static Location<'static>) -> T {
    let r = f();
    if let Some(rt) = runtime::get() {
        rt.happens(tag, true, at);
    }
    r
}

/// A thread's configuration: `std::thread::Builder`.
#[derive(Debug)]
pub struct Builder {
    inner: std::thread::Builder,
}

impl Builder {
    /// A builder with the default configuration.
    #[allow(clippy::new_without_default)] // as std's
    pub fn new() -> Builder {
        Builder {
            inner: std::thread::Builder::new(),
        }
    }

    /// Names the thread.
    pub fn name(self, name: String) -> Builder {
        Builder {
            inner: self.inner.name(name),
        }
    }

    /// Sets the thread's stack size.
    pub fn stack_size(self, size: usize) -> Builder {
        Builder {
            inner: self.inner.stack_size(size),
        }
    }

    /// Spawns the thread.
    #[track_caller]
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let _named = SpawnSite::name(Location::caller());
        self.inner.spawn(f)
    }

    /// Spawns the thread in a scope.
    #[track_caller]
    pub fn spawn_scoped<'scope, 'env, F, T>(
        self,
        scope: &'scope Scope<'scope, 'env>,
        f: F,
    ) -> io::Result<ScopedJoinHandle<'scope, T>>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        let at = Location::caller();
        let tag = tag(&scope.inner);
        let _named = SpawnSite::name(at);
        self.inner
            .spawn_scoped(&scope.inner, move || ended_in_scope(f, tag, at))
    }
}
