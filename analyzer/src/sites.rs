//! Sites as the program's author reads them: the user's frame of a site.
//!
//! A recorded site is the return address of the hooked call first, then (when the recorder
//! captured them) its callers; each frame symbolises to the calls inlined there, innermost
//! first. The frame that called `pthread_mutex_lock` is rarely the code to fix: C++ locks
//! through `std::mutex` and its guards, whose code lives in libstdc++'s headers (inlined at
//! `-O2`, out-of-line copies in the program at `-O0`), and C libraries through wrappers of
//! their own (`pthreadMutexEnter`). [`user_location`] walks the frames, and within each the
//! inlined calls, innermost first, and names the first location that is not locking
//! machinery:
//! - code in the C and C++ runtime libraries (libc, libpthread, libstdc++, libc++, libgcc, the
//!   dynamic loader, foresight's own runtime), by module;
//! - code from the system's headers (`/usr/include/…`, any `…/include/c++/…`), by file;
//! - the standard library's lock types, guards and thread functions (`std::…`, `__gnu_cxx::…`,
//!   gthreads), by function name, for code without line information;
//! - the project's own wrapper layers: [`Wrappers`], the `--wrapper GLOB` patterns (and the
//!   `wrappers` entry of the configuration file), matched against function names;
//! - in a trace recorded one frame per site, every frame of a site but the last: the recorder
//!   unwound such a call because it was made inside machinery (its own wrappers included), so
//!   `foresight record --wrapper` alone is enough.
//!
//! The same selection serves every kind of site (lock operations, waits, allocations, memory
//! accesses): an access inlined from `atomic_base.h` or an STL container is reported at the
//! user's line. The full stack (every frame, every inlined call) stays in
//! [`Location::full_stack`].

use foresight_trace::event::SiteId;
use foresight_trace::name_glob::glob_match;
use foresight_trace::runtime_library::is_runtime_library;
use foresight_trace::tables::Tables;
use foresight_trace::tables::{Frame, SourceLocation};

/// A source location, symbolised when the trace has symbols.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// The function, when symbolised.
    pub function: Option<String>,
    pub(crate) file: Option<String>,
    /// The source line, 0 when unknown.
    pub line: u32,
    /// `function (file:line)`, or `module+0xoffset` when not symbolised.
    pub text: String,
    /// The site's frames as the user reads them, innermost first: the user's location, then
    /// each recorded caller's (`sites.rs`).
    pub stack: Vec<String>,
    /// Every frame and every call inlined in it, innermost first, the locking machinery
    /// (standard library, wrappers) included.
    pub full_stack: Vec<String>,
    /// No recorded frame is outside the locking machinery (a wrapper recorded without its
    /// callers): the location is the machinery's nearest to the program's code.
    pub machinery_only: bool,
    /// Where the user's function was called from, when the trace knows: the next recorded
    /// frame's location outside the machinery, or the caller the recorder noted at the site's
    /// first occurrence (a trace recorded one frame per site).
    pub(crate) caller: Option<Caller>,
}

/// The caller of a site's function, as the report names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) function: Option<String>,
    pub(crate) file: Option<String>,
    pub(crate) line: u32,
    /// `function (file:line)`, or `module+0xoffset` when not symbolised.
    pub(crate) text: String,
    /// Only the caller of the site's first occurrence is known (the recorder notes one
    /// caller per site): later occurrences may have come from elsewhere.
    pub(crate) first_only: bool,
}

/// The project's own lock wrappers: glob patterns (`*` any run of characters, `?` one
/// character) matched against a function's name, with and without its parameter list
/// (`Db::lock` matches `Db::lock()`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wrappers {
    patterns: Vec<String>,
    /// The trace records one frame per site, so that a site of several frames is a call from
    /// inside machinery that the recorder unwound to the first frame outside it (judged with
    /// the recorder's wrappers, which this analysis need not be given again).
    one_frame_sites: bool,
}

impl Wrappers {
    /// The project's wrapper functions, as glob patterns over function names (empty ones dropped).
    pub fn new<S: Into<String>>(patterns: impl IntoIterator<Item = S>) -> Self {
        let mut patterns: Vec<String> = patterns
            .into_iter()
            .map(Into::into)
            .filter(|p| !p.is_empty())
            .collect();
        patterns.sort();
        patterns.dedup();
        Wrappers {
            patterns,
            one_frame_sites: false,
        }
    }

    /// For a trace recorded with `stack_depth` frames per site (its header's): at depth 1,
    /// every frame of a site but the last is machinery, as the recorder judged it when it
    /// unwound the call (`foresight record --wrapper` is then enough).
    pub fn for_recorded_depth(mut self, stack_depth: u8) -> Self {
        self.one_frame_sites = stack_depth == 1;
        self
    }

    /// The patterns, sorted, without duplicates.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Adds the patterns of `other` (the command line's to the configuration file's).
    pub fn extend(&mut self, other: &Wrappers) {
        self.patterns.extend(other.patterns.iter().cloned());
        self.patterns.sort();
        self.patterns.dedup();
    }

    /// Whether a function of this name is one of the project's wrappers.
    pub(crate) fn matches(&self, function: &str) -> bool {
        if self.patterns.is_empty() {
            return false;
        }
        let bare = without_parameters(function);
        self.patterns
            .iter()
            .any(|p| glob_match(p, function) || glob_match(p, bare))
    }
}

/// `f(int) const` → `f`; a name without a parameter list is returned as it is.
pub(crate) fn without_parameters(name: &str) -> &str {
    let trimmed = name.trim_end();
    let trimmed = trimmed.strip_suffix(" const").unwrap_or(trimmed);
    if !trimmed.ends_with(')') {
        return name;
    }
    // The parameter list is the last balanced (…) group.
    let mut depth = 0usize;
    for (i, c) in trimmed.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return &trimmed[..i];
                }
            }
            _ => {}
        }
    }
    name
}

/// Code from the system's headers: the C++ standard library's templates and inline
/// functions, glibc's inline wrappers.
fn is_system_header(file: &str) -> bool {
    file.starts_with("/usr/include/")
        || file.contains("/include/c++/")
        || file.starts_with("/usr/lib/gcc/")
}

/// The standard library's locking and threading functions by name, for frames without line
/// information (a program built without `-g` still has its symbol table). The inline
/// namespaces of libc++ (`std::__1::`) and libstdc++ (`std::_V2::`) are looked through.
fn is_standard_function(name: &str) -> bool {
    let name = name.trim_start_matches("::");
    name.starts_with("std::")
        || name.starts_with("__gnu_cxx::")
        || name.starts_with("__gthread_")
        || name.starts_with("__gthrw_")
}

/// One symbolised location of a frame, with what the selection needs to know of it.
struct Candidate<'t> {
    loc: Option<&'t SourceLocation>,
    frame: &'t Frame,
    machinery: bool,
}

fn location_text(tables: &Tables, frame: &Frame, loc: Option<&SourceLocation>) -> String {
    match loc {
        None => tables.describe_frame(frame),
        Some(l) => {
            let function = l.function.and_then(|f| tables.string(f));
            let file = l.file.and_then(|f| tables.string(f));
            // A location the program named itself (a Rust `#[track_caller]` site) has a file
            // and line but no function.
            if let (None, Some(file), 1..) = (function, file, l.line) {
                return format!("{}:{}", short_path(file), l.line);
            }
            let func = function.unwrap_or("??");
            match file {
                Some(file) if l.line > 0 => format!("{func} ({}:{})", short_path(file), l.line),
                Some(file) => format!("{func} ({})", short_path(file)),
                None => func.to_string(),
            }
        }
    }
}

pub(crate) fn short_path(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// Whether a location of a frame in `module` is locking machinery rather than the program's.
fn is_machinery(
    tables: &Tables,
    module: Option<&str>,
    loc: Option<&SourceLocation>,
    wrappers: &Wrappers,
) -> bool {
    if module.is_some_and(is_runtime_library) {
        return true;
    }
    let Some(loc) = loc else {
        return false;
    };
    if let Some(file) = loc.file.and_then(|f| tables.string(f)) {
        if is_system_header(file) {
            return true;
        }
    }
    match loc.function.and_then(|f| tables.string(f)) {
        Some(f) => is_standard_function(f) || wrappers.matches(f),
        None => false,
    }
}

/// The user's location of a site, with its stack; `site#N` for a site the trace does not
/// describe. This is the one place that decides which frame a report names, for every kind of
/// site (see the module's documentation).
pub fn user_location(tables: &Tables, site: SiteId, wrappers: &Wrappers) -> Location {
    let Some(info) = tables.sites.get(&site) else {
        return Location {
            text: format!("site#{site}"),
            ..Location::default()
        };
    };
    // Every frame's locations, innermost first; a frame without symbols is one location
    // (`module+0x…`) that only its module can make machinery.
    let mut frames: Vec<Vec<Candidate>> = Vec::with_capacity(info.frames.len());
    let unwound = if wrappers.one_frame_sites {
        info.frames.len().saturating_sub(1)
    } else {
        0
    };
    for (i, frame) in info.frames.iter().enumerate() {
        let module = tables
            .modules
            .get(&frame.module)
            .and_then(|m| tables.string(m.path));
        let locs: Vec<Candidate> = match tables.symbols.get(frame) {
            Some(s) if !s.locations.is_empty() => s
                .locations
                .iter()
                .map(|l| Candidate {
                    loc: Some(l),
                    frame,
                    machinery: i < unwound || is_machinery(tables, module, Some(l), wrappers),
                })
                .collect(),
            _ => vec![Candidate {
                loc: None,
                frame,
                machinery: i < unwound || is_machinery(tables, module, None, wrappers),
            }],
        };
        frames.push(locs);
    }
    let Some(last) = frames.last() else {
        return Location {
            text: format!("site#{site}"),
            ..Location::default()
        };
    };
    let full_stack = frames
        .iter()
        .flatten()
        .map(|c| location_text(tables, c.frame, c.loc))
        .collect();
    let user = frames
        .iter()
        .enumerate()
        .find_map(|(i, f)| f.iter().position(|c| !c.machinery).map(|j| (i, j)));
    let (machinery_only, (fi, li)) = match user {
        Some(at) => (false, at),
        // Only machinery was recorded (a wrapper whose callers the recorder did not capture):
        // the location nearest the program's code, the outermost of the last frame.
        None => (true, (frames.len() - 1, last.len() - 1)),
    };
    let chosen = &frames[fi][li];
    // The stack as the user reads it: the user's location, then each caller's own location
    // (its first one outside the machinery).
    let mut stack = vec![location_text(tables, chosen.frame, chosen.loc)];
    for f in &frames[fi + 1..] {
        let c = f.iter().find(|c| !c.machinery).unwrap_or(&f[0]);
        stack.push(location_text(tables, c.frame, c.loc));
    }
    let string = |id: Option<foresight_trace::StringId>| {
        id.and_then(|s| tables.string(s)).map(str::to_string)
    };
    let caller_of = |c: &Candidate, first_only: bool| Caller {
        function: c.loc.and_then(|l| string(l.function)),
        file: c.loc.and_then(|l| string(l.file)),
        line: c.loc.map_or(0, |l| l.line),
        text: location_text(tables, c.frame, c.loc),
        first_only,
    };
    // A caller that is machinery itself (the thread's start in the C library, a standard
    // thread's invoker) names nothing the user wrote: none is given.
    let caller = match frames.get(fi + 1) {
        Some(f) => f.iter().find(|c| !c.machinery).map(|c| caller_of(c, false)),
        None => info.first_caller.as_ref().and_then(|frame| {
            let module = tables
                .modules
                .get(&frame.module)
                .and_then(|m| tables.string(m.path));
            let candidates: Vec<Candidate> = match tables.symbols.get(frame) {
                Some(s) if !s.locations.is_empty() => s
                    .locations
                    .iter()
                    .map(|l| Candidate {
                        loc: Some(l),
                        frame,
                        machinery: is_machinery(tables, module, Some(l), wrappers),
                    })
                    .collect(),
                _ => vec![Candidate {
                    loc: None,
                    frame,
                    machinery: is_machinery(tables, module, None, wrappers),
                }],
            };
            candidates
                .iter()
                .find(|c| !c.machinery)
                .map(|c| caller_of(c, true))
        }),
    };
    Location {
        function: chosen.loc.and_then(|l| string(l.function)),
        file: chosen.loc.and_then(|l| string(l.file)),
        line: chosen.loc.map_or(0, |l| l.line),
        text: stack[0].clone(),
        stack,
        full_stack,
        machinery_only,
        caller,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_match_with_or_without_parameters() {
        let w = Wrappers::new(["Db::lock", "my_*"]);
        assert!(w.matches("Db::lock()"));
        assert!(w.matches("Db::lock(int) const"));
        assert!(w.matches("Db::lock"));
        assert!(w.matches("my_mutex_enter"));
        assert!(!w.matches("Db::unlock()"));
        assert!(!Wrappers::default().matches("anything"));
        assert_eq!(without_parameters("f(g(int))"), "f");
        assert_eq!(
            without_parameters("std::lock_guard<std::mutex>::lock_guard(std::mutex&)"),
            "std::lock_guard<std::mutex>::lock_guard"
        );
        assert_eq!(without_parameters("operator()"), "operator");
        assert_eq!(without_parameters("plain"), "plain");
    }

    #[test]
    fn system_headers_and_standard_functions_are_machinery() {
        assert!(is_system_header(
            "/usr/include/x86_64-linux-gnu/c++/12/bits/gthr-default.h"
        ));
        assert!(is_system_header("/opt/gcc/include/c++/13/bits/std_mutex.h"));
        assert!(!is_system_header("/home/u/project/include/lock.h"));
        assert!(is_standard_function("std::mutex::lock()"));
        assert!(is_standard_function("__gthread_mutex_lock"));
        assert!(!is_standard_function("pay"));
    }
}
