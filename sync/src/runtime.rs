//! The way to foresight's runtime, and the crate's only `unsafe` code.
//!
//! Under `foresight record` the runtime (`libforesight_rt.so`, preloaded) exports the table
//! `__foresight_sync_v1` (`recorder/src/hooks/sync.rs`, which defines its layout); it is looked
//! up once with `dlsym(RTLD_DEFAULT, …)`, as `foresight.h` does for C, and cached. Without the
//! runtime the lookup finds nothing, and every operation of the crate costs one load and one
//! branch over `std`'s.

use std::panic::Location;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A `#[track_caller]` location as the runtime takes it.
#[repr(C)]
pub(crate) struct SourceSite {
    key: usize,
    file: *const u8,
    file_len: usize,
    line: u32,
    column: u32,
}

/// The runtime's table, laid out as `Runtime` in `recorder/src/hooks/sync.rs`.
#[repr(C)]
struct Table {
    size: usize,
    declare: unsafe extern "C" fn(usize, u32, u32, *const SourceSite),
    forget: unsafe extern "C" fn(usize, *const SourceSite),
    lock_immediate: unsafe extern "C" fn(usize, u32, u32, *const SourceSite),
    lock_request: unsafe extern "C" fn(usize, u32, u32, *const SourceSite) -> usize,
    lock_acquired: unsafe extern "C" fn(usize, u32, u32, *const SourceSite, usize),
    lock_try: unsafe extern "C" fn(usize, u32, u32, *const SourceSite, bool),
    release: unsafe extern "C" fn(usize, u32, *const SourceSite),
    cond_wait_begin: unsafe extern "C" fn(usize, usize, bool, *const SourceSite) -> usize,
    cond_wait_end: unsafe extern "C" fn(usize, usize, *const SourceSite, usize, bool),
    cond_notify: unsafe extern "C" fn(usize, bool, *const SourceSite),
    barrier_wait_begin: unsafe extern "C" fn(usize, *const SourceSite) -> u64,
    barrier_wait_end: unsafe extern "C" fn(usize, *const SourceSite, u64, bool),
    once_begin: unsafe extern "C" fn(usize, *const SourceSite) -> usize,
    once_run: unsafe extern "C" fn(usize, *const SourceSite),
    once_end: unsafe extern "C" fn(usize, *const SourceSite),
    once_finish: unsafe extern "C" fn(usize, *const SourceSite, usize, bool),
    happens: unsafe extern "C" fn(u64, bool, *const SourceSite),
    lock_class: unsafe extern "C" fn(usize, *const u8, usize, *const SourceSite),
    annotate: unsafe extern "C" fn(usize, u32, u32, *const SourceSite),
    access: unsafe extern "C" fn(usize, usize, bool, *const SourceSite),
}

/// The table with the entries appended since the first: an older runtime's table ends before
/// them, so they are reached through the looked-up pointer once its `size` says they are there.
#[repr(C)]
struct Appended {
    first: Table,
    spawn_site: unsafe extern "C" fn(*const SourceSite),
}

/// The table: null before the lookup, `ABSENT` when there is no runtime.
static TABLE: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());

fn absent() -> *mut Table {
    std::ptr::dangling_mut::<Table>()
}

const SYMBOL: &[u8] = b"__foresight_sync_v1\0";

/// Object kinds, as the runtime numbers them.
#[derive(Clone, Copy)]
#[repr(u32)]
pub(crate) enum Kind {
    Mutex = 0,
    RwLock = 1,
    Barrier = 3,
}

/// Lock modes, as the runtime numbers them.
#[derive(Clone, Copy)]
#[repr(u32)]
pub(crate) enum Mode {
    Exclusive = 0,
    Shared = 1,
}

/// What `annotate` declares.
#[derive(Clone, Copy)]
#[repr(u32)]
pub(crate) enum Annotation {
    Subclass = 1,
    Rank = 2,
}

/// The runtime, when this process is recorded.
#[derive(Clone, Copy)]
pub(crate) struct Runtime(&'static Table);

/// The runtime if the process is recorded: after the first call, one load and one branch.
#[inline(always)]
pub(crate) fn get() -> Option<Runtime> {
    let p = TABLE.load(Ordering::Acquire);
    if p == absent() {
        return None;
    }
    if p.is_null() {
        return lookup();
    }
    // SAFETY: a non-null, non-`ABSENT` value was stored by `lookup` from the runtime's
    // exported table, a static of a library that is never unloaded (it is preloaded).
    Some(Runtime(unsafe { &*p }))
}

#[cold]
#[inline(never)]
fn lookup() -> Option<Runtime> {
    // SAFETY: dlsym with the default handle and a NUL-terminated name has no precondition.
    let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, SYMBOL.as_ptr().cast()) } as *mut Table;
    // SAFETY: a table the runtime exports starts with its size; an older runtime's shorter
    // table lacks entries this crate calls, and counts as no runtime.
    let usable = !found.is_null() && unsafe { (*found).size } >= std::mem::size_of::<Table>();
    let p = if usable { found } else { absent() };
    // Racing first calls look up and store the same value.
    TABLE.store(p, Ordering::Release);
    if usable {
        // SAFETY: as in `get`.
        Some(Runtime(unsafe { &*p }))
    } else {
        None
    }
}

#[inline(always)]
fn site(loc: &'static Location<'static>) -> SourceSite {
    SourceSite {
        key: loc as *const Location<'static> as usize,
        file: loc.file().as_ptr(),
        file_len: loc.file().len(),
        line: loc.line(),
        column: loc.column(),
    }
}

// Every call below passes a `SourceSite` made from a `&'static Location` (its file is
// `file_len` readable bytes, for ever), which is each entry's contract, and the tokens a
// `*_begin` entry returned to its matching end on the same thread: the guard or the call
// that made the token ends it before returning.
impl Runtime {
    /// Names `at` as the site of the next thread this thread creates (`None`: forgets it).
    /// With an older runtime, which lacks the entry, the thread's site stays `std`'s line.
    pub(crate) fn spawn_site(self, at: Option<&'static Location>) {
        let p = TABLE.load(Ordering::Acquire).cast::<Appended>();
        // SAFETY: with a `Runtime`, `TABLE` holds the runtime's table as `lookup` found it,
        // which starts with its size; the entry is read only when that size covers it.
        let entry = unsafe {
            if (*p).first.size < std::mem::size_of::<Appended>() {
                return;
            }
            (*p).spawn_site
        };
        let named = at.map(site);
        let arg = named
            .as_ref()
            .map_or(std::ptr::null(), |s| s as *const SourceSite);
        // SAFETY: see above; null is the entry's "forget".
        unsafe { entry(arg) }
    }

    pub(crate) fn declare(self, addr: usize, kind: Kind, count: u32, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.declare)(addr, kind as u32, count, &site(at)) }
    }

    pub(crate) fn forget(self, addr: usize, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.forget)(addr, &site(at)) }
    }

    #[inline(always)]
    pub(crate) fn lock_immediate(self, addr: usize, mode: Mode, kind: Kind, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.lock_immediate)(addr, mode as u32, kind as u32, &site(at)) }
    }

    pub(crate) fn lock_request(
        self,
        addr: usize,
        mode: Mode,
        kind: Kind,
        at: &'static Location,
    ) -> usize {
        // SAFETY: see above.
        unsafe { (self.0.lock_request)(addr, mode as u32, kind as u32, &site(at)) }
    }

    pub(crate) fn lock_acquired(
        self,
        addr: usize,
        mode: Mode,
        kind: Kind,
        at: &'static Location,
        token: usize,
    ) {
        // SAFETY: see above.
        unsafe { (self.0.lock_acquired)(addr, mode as u32, kind as u32, &site(at), token) }
    }

    pub(crate) fn lock_try(
        self,
        addr: usize,
        mode: Mode,
        kind: Kind,
        at: &'static Location,
        acquired: bool,
    ) {
        // SAFETY: see above.
        unsafe { (self.0.lock_try)(addr, mode as u32, kind as u32, &site(at), acquired) }
    }

    #[inline(always)]
    pub(crate) fn release(self, addr: usize, kind: Kind, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.release)(addr, kind as u32, &site(at)) }
    }

    pub(crate) fn cond_wait_begin(
        self,
        cond: usize,
        mutex: usize,
        timed: bool,
        at: &'static Location,
    ) -> usize {
        // SAFETY: see above.
        unsafe { (self.0.cond_wait_begin)(cond, mutex, timed, &site(at)) }
    }

    pub(crate) fn cond_wait_end(
        self,
        cond: usize,
        mutex: usize,
        at: &'static Location,
        token: usize,
        timed_out: bool,
    ) {
        // SAFETY: see above.
        unsafe { (self.0.cond_wait_end)(cond, mutex, &site(at), token, timed_out) }
    }

    pub(crate) fn cond_notify(self, cond: usize, all: bool, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.cond_notify)(cond, all, &site(at)) }
    }

    pub(crate) fn barrier_wait_begin(self, barrier: usize, at: &'static Location) -> u64 {
        // SAFETY: see above.
        unsafe { (self.0.barrier_wait_begin)(barrier, &site(at)) }
    }

    pub(crate) fn barrier_wait_end(
        self,
        barrier: usize,
        at: &'static Location,
        token: u64,
        leader: bool,
    ) {
        // SAFETY: see above.
        unsafe { (self.0.barrier_wait_end)(barrier, &site(at), token, leader) }
    }

    pub(crate) fn once_begin(self, once: usize, at: &'static Location) -> usize {
        // SAFETY: see above.
        unsafe { (self.0.once_begin)(once, &site(at)) }
    }

    pub(crate) fn once_run(self, once: usize, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.once_run)(once, &site(at)) }
    }

    pub(crate) fn once_end(self, once: usize, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.once_end)(once, &site(at)) }
    }

    pub(crate) fn once_finish(self, once: usize, at: &'static Location, token: usize, ran: bool) {
        // SAFETY: see above.
        unsafe { (self.0.once_finish)(once, &site(at), token, ran) }
    }

    pub(crate) fn happens(self, tag: u64, before: bool, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.happens)(tag, before, &site(at)) }
    }

    pub(crate) fn lock_class(self, addr: usize, name: &str, at: &'static Location) {
        // SAFETY: see above; `name` is `len` readable bytes during the call.
        unsafe { (self.0.lock_class)(addr, name.as_ptr(), name.len(), &site(at)) }
    }

    pub(crate) fn access(self, addr: usize, size: usize, write: bool, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.access)(addr, size, write, &site(at)) }
    }

    pub(crate) fn annotate(self, addr: usize, what: Annotation, value: u32, at: &'static Location) {
        // SAFETY: see above.
        unsafe { (self.0.annotate)(addr, what as u32, value, &site(at)) }
    }
}

/// `std`'s scope, seen as this crate's (`thread::Scope`, a `repr(transparent)` wrapper).
pub(crate) fn scope_ref<'a, 'scope, 'env>(
    s: &'a std::thread::Scope<'scope, 'env>,
) -> &'a crate::scope::Scope<'scope, 'env> {
    // SAFETY: `thread::Scope` is `repr(transparent)` over `std::thread::Scope` with the same
    // lifetimes, so the two references have the same layout and validity.
    unsafe {
        &*(s as *const std::thread::Scope<'scope, 'env> as *const crate::scope::Scope<'scope, 'env>)
    }
}
