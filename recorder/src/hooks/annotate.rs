//! The annotation API (`recorder/include/foresight.h`): the program names a lock's class,
//! declares a subclass (the nesting level of instances of one class, lockdep's
//! `mutex_lock_nested`) or a rank. The header looks these symbols up with
//! `dlsym(RTLD_DEFAULT, …)`, so a program built with it runs unchanged without the runtime.
//!
//! Each call records one annotation event for the lock object (created on first sight, like a
//! first use at the annotation's call site; an unseen lock is taken to be a plain mutex, which
//! only matters for its description: annotate after `*_init` to keep its kind). Annotations
//! are not synchronising: they reuse the thread's last key. Class names go into the string
//! table once per distinct name (interned), not once per call.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_uint, c_void};

use foresight_trace::event::EventKind;
use foresight_trace::tables::{ObjectKind, StringEntry, TableRecord};

use super::{object, rt};
use crate::output;
use crate::sequence::Key;
use crate::spin::SpinLock;

entry!(__foresight_annotate_lock_class, 2, annotate_lock_class);
entry!(
    __foresight_annotate_lock_subclass,
    2,
    annotate_lock_subclass
);
entry!(__foresight_annotate_lock_rank, 2, annotate_lock_rank);

/// Longest class name kept (bytes); longer names are cut.
const MAX_NAME: usize = 256;
/// Distinct names interned; past this, names still get a string record each (never lost).
const MAX_INTERNED: usize = 4096;

/// Interned class names of this process's trace. A fork child writes its own trace with its
/// own string table, so the map remembers the process it belongs to and starts afresh in a
/// child. Only ever `try_lock`ed: a child forked while another thread held it (a lock that
/// then stays held forever) just stops interning.
struct Interned {
    pid: u32,
    ids: BTreeMap<Vec<u8>, u32>,
}

static INTERNED: SpinLock<Interned> = SpinLock::new(Interned {
    pid: 0,
    ids: BTreeMap::new(),
});

pub(super) fn string_id(name: &[u8]) -> u32 {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut table = INTERNED.try_lock_for(1 << 10);
    if let Some(t) = table.as_mut() {
        if t.pid != pid {
            t.pid = pid;
            t.ids.clear();
        }
        if let Some(&id) = t.ids.get(name) {
            return id;
        }
    }
    // The record is buffered before the id is published (FORMAT.md §4.3).
    let id = output::new_string_id();
    output::table_record(&TableRecord::String(StringEntry {
        id,
        text: String::from_utf8_lossy(name).into_owned(),
    }));
    if let Some(t) = table.as_mut() {
        if t.ids.len() < MAX_INTERNED {
            t.ids.insert(name.to_vec(), id);
        }
    }
    id
}

/// Records `event(object id)` for the lock at `lock`, inside the reentrancy guard.
pub(super) fn annotate(lock: *mut c_void, ra: usize, event: impl FnOnce(u32) -> Option<EventKind>) {
    if lock.is_null() {
        return;
    }
    if let Some(t) = rt() {
        t.with(|t| {
            if let Some((s, _site)) = object(t, lock as usize, ra, false, || ObjectKind::Mutex) {
                if let Some(kind) = event(s.id()) {
                    t.emit(kind, Key::Same);
                }
            }
        });
    }
}

unsafe extern "C-unwind" fn annotate_lock_class(lock: *mut c_void, name: *const c_char, ra: usize) {
    if name.is_null() {
        return;
    }
    annotate(lock, ra, |id| {
        // SAFETY: the caller passes a NUL-terminated string (the header's contract); strnlen
        // bounds the read to MAX_NAME bytes.
        let len = unsafe { libc::strnlen(name, MAX_NAME) };
        // SAFETY: `len` bytes from `name` were just found readable by strnlen.
        let bytes = unsafe { std::slice::from_raw_parts(name as *const u8, len) };
        Some(EventKind::LockClassName {
            lock: id,
            name: string_id(bytes),
        })
    });
}

unsafe extern "C-unwind" fn annotate_lock_subclass(lock: *mut c_void, subclass: c_uint, ra: usize) {
    annotate(lock, ra, |id| {
        Some(EventKind::LockSubclass { lock: id, subclass })
    });
}

unsafe extern "C-unwind" fn annotate_lock_rank(lock: *mut c_void, rank: c_uint, ra: usize) {
    annotate(lock, ra, |id| Some(EventKind::LockRank { lock: id, rank }));
}
