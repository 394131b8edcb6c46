//! The identity of a finding, as data: [`FindingKey`] (kind, verdict, lock classes, sites) is
//! what the merge of segments and traces folds findings by and what breaks ties in the
//! report's order; [`BaselineKey`], the same without what depends on the recorded schedule, is
//! what the CI baseline (`baseline.rs`) lists and SARIF's `partialFingerprints` carry. Neither
//! holds anything that changes from one run or machine to the next: no addresses, thread ids,
//! counts, trace paths or directories (files are basenames).
//!
//! A baseline line is a [`BaselineKey`] written out (`kind | classes | sites`, `docs/ci.md`),
//! and is read back into one: `foresight check` compares keys, not text.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use super::{Detail, Finding, FindingLocation, Kind, Role, Verdict};

/// What identifies a finding: two findings with equal keys are one finding seen twice (in two
/// segments, two traces, two instances).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FindingKey {
    pub(crate) kind: Kind,
    pub(crate) verdict: Verdict,
    /// The finding's lock classes ([`Finding::cycle`]); a lock cycle starts at its smallest
    /// class, so the same cycle from any start is one key.
    pub(crate) classes: Vec<String>,
    /// Every site of the finding, distinct.
    pub(crate) sites: BTreeSet<SiteKey>,
}

/// A site as a key names it: at which file (its basename: source trees live in different
/// directories on different machines) and line, in which function, what happened there.
/// Ordered by place in the code, which is the order of findings that tie on the rest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteKey {
    /// The file's basename; `line` is only given with a file.
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u32>,
    pub(crate) function: Option<String>,
    pub(crate) role: Role,
}

/// What a baseline accepts: a [`FindingKey`] without its verdict, and with `deadlock` and
/// `potential-deadlock` one kind, `lock-cycle`: whether a cycle is predicted depends on the
/// schedule of the recorded run, not on the code, and a baseline must not fail the build
/// because a test ran with other timing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BaselineKey {
    /// The finding kind, with both lock-cycle kinds as one.
    pub kind: BaselineKind,
    /// The lock classes of the finding, as in its key.
    pub classes: Vec<String>,
    /// The sites of the finding with their roles, as in its key.
    pub sites: BTreeSet<SiteKey>,
}

/// The kind of a baseline line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BaselineKind {
    /// A `deadlock` or a `potential-deadlock`.
    LockCycle,
    /// Any other kind of finding.
    Finding(Kind),
}

impl Finding {
    /// The finding's identity ([`FindingKey`]).
    pub fn key(&self) -> FindingKey {
        let mut classes: Vec<String> = self.cycle().iter().map(|c| one_line(c)).collect();
        match &self.detail {
            Detail::LockCycle { .. } => canonical_cycle(&mut classes),
            Detail::Race(r) => classes = vec![one_line(&race_memory(r))],
            _ => {}
        }
        FindingKey {
            kind: self.kind,
            verdict: self.verdict,
            classes,
            sites: self.locations.iter().map(SiteKey::of).collect(),
        }
    }
}

impl FindingKey {
    /// The key a baseline lists for this finding.
    pub fn baseline(&self) -> BaselineKey {
        let kind = match self.kind {
            Kind::Deadlock | Kind::PotentialDeadlock => BaselineKind::LockCycle,
            k => BaselineKind::Finding(k),
        };
        BaselineKey {
            kind,
            classes: self.classes.clone(),
            sites: self.sites.clone(),
        }
    }
}

impl SiteKey {
    fn of(l: &FindingLocation) -> SiteKey {
        let file = l.file.as_deref().map(|f| one_line(basename(f)));
        SiteKey {
            line: file.as_ref().and(l.line),
            file,
            // `?` is how a line names a function the symbols do not.
            function: l.function.as_deref().filter(|f| *f != "?").map(one_line),
            role: l.role,
        }
    }
}

/// What a race is on, as its key names it: the variable (array indices left out: elements
/// of one array are one variable to fix), else the heap block by its allocation site, else
/// `memory` (an address is never part of a key: it changes from run to run).
fn race_memory(r: &super::RaceReport) -> String {
    if let Some(v) = &r.variable {
        return without_indices(&v.name);
    }
    if let Some(b) = &r.block {
        let site = &b.allocated_at;
        let function = site.function.as_deref().unwrap_or("?");
        return match (&site.file, site.line) {
            (Some(f), Some(l)) => format!("heap block of {function}@{}:{l}", basename(f)),
            (Some(f), None) => format!("heap block of {function}@{}", basename(f)),
            _ => format!("heap block of {function}"),
        };
    }
    "memory".to_string()
}

/// `counters[3].hits` → `counters[].hits`.
fn without_indices(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_index = false;
    for c in name.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push(c);
            }
            ']' => {
                in_index = false;
                out.push(c);
            }
            _ if in_index && c.is_ascii_digit() => {}
            _ => {
                in_index = false;
                out.push(c);
            }
        }
    }
    out
}

/// A cycle is the same cycle from any start: it starts at its smallest class name.
fn canonical_cycle(cycle: &mut [String]) {
    let start = (0..cycle.len())
        .min_by_key(|&i| &cycle[i])
        .unwrap_or_default();
    cycle.rotate_left(start);
}

/// The last component of a path.
fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A key is one line of the baseline file, whatever the trace's names contain.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// Between the kind, the classes and the sites of a line.
const FIELDS: &str = " | ";
/// Between the classes of a line.
const CLASSES: &str = " -> ";
/// Between the sites of a line (each of which starts with its role).
const SITES: &str = ", ";

impl fmt::Display for BaselineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BaselineKind::LockCycle => f.write_str("lock-cycle"),
            BaselineKind::Finding(k) => write!(f, "{k}"),
        }
    }
}

impl fmt::Display for SiteKey {
    /// `role function@file:line`; `role file:line` for a site the symbols name no function of
    /// (a Rust `#[track_caller]` location is a file and line only), `?` for a function
    /// elsewhere.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (None, Some(file), Some(line)) = (&self.function, &self.file, self.line) {
            return write!(f, "{} {file}:{line}", self.role);
        }
        write!(
            f,
            "{} {}",
            self.role,
            self.function.as_deref().unwrap_or("?")
        )?;
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "@{file}:{line}"),
            (Some(file), None) => write!(f, "@{file}"),
            (None, _) => Ok(()),
        }
    }
}

impl fmt::Display for BaselineKey {
    /// The baseline line: `kind | classes | sites`, the sites in the order of their text (the
    /// order baseline files have always had, so that regenerating one changes no line).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sites: BTreeSet<String> = self.sites.iter().map(SiteKey::to_string).collect();
        let sites: Vec<String> = sites.into_iter().collect();
        write!(
            f,
            "{}{FIELDS}{}{FIELDS}{}",
            self.kind,
            self.classes.join(CLASSES),
            sites.join(SITES)
        )
    }
}

/// Why a line is not a baseline key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The line has not the three `|`-separated fields.
    #[error("not `kind | lock classes | sites`")]
    Shape,
    /// The first field names no kind.
    #[error("`{0}` is not a baseline kind (`lock-cycle`, `race`, `join-deadlock`, …)")]
    Kind(String),
    /// A site lacks its role.
    #[error("the site `{0}` does not start with a role (`holds`, `requests`, `reads`, …)")]
    Site(String),
}

impl FromStr for BaselineKey {
    type Err = KeyError;

    /// Reads a line [`Display`](fmt::Display) wrote. The fields are found by their separators:
    /// the first ` | ` ends the kind, the last one starts the sites, and a site starts after
    /// `, ` with a role and a space, a site's file after its last `@`. Names that hold these
    /// separators themselves (a lock class with ` -> ` or ` | ` in it, a function with `@` in
    /// it at a site without a file) do not read back.
    fn from_str(line: &str) -> Result<BaselineKey, KeyError> {
        let line = line.trim();
        // A finding without sites ends its line with the separator, which trimming shortened.
        let padded;
        let line = if line.ends_with(FIELDS.trim_end()) {
            padded = format!("{line} ");
            padded.as_str()
        } else {
            line
        };
        let (kind, rest) = line.split_once(FIELDS).ok_or(KeyError::Shape)?;
        let (classes, sites) = rest.rsplit_once(FIELDS).ok_or(KeyError::Shape)?;
        let kind = match kind {
            "lock-cycle" => BaselineKind::LockCycle,
            k => match k.parse::<Kind>() {
                Ok(Kind::Deadlock | Kind::PotentialDeadlock) | Err(_) => {
                    return Err(KeyError::Kind(k.to_string()))
                }
                Ok(k) => BaselineKind::Finding(k),
            },
        };
        let classes = if classes.is_empty() {
            Vec::new()
        } else {
            classes.split(CLASSES).map(str::to_string).collect()
        };
        let sites = split_sites(sites)
            .into_iter()
            .map(parse_site)
            .collect::<Result<_, _>>()?;
        Ok(BaselineKey {
            kind,
            classes,
            sites,
        })
    }
}

/// The sites of a line: split at each `, ` that a role and a space follow (a C++ function's
/// name has `, ` of its own: `Pool<int, 4>::get`).
fn split_sites(sites: &str) -> Vec<&str> {
    let mut out = Vec::new();
    if sites.is_empty() {
        return out;
    }
    let starts_a_site = |s: &str| {
        s.split_once(' ')
            .is_some_and(|(role, _)| role.parse::<Role>().is_ok())
    };
    let mut start = 0;
    let mut from = 0;
    while let Some(i) = sites[from..].find(SITES).map(|i| from + i) {
        let next = i + SITES.len();
        if starts_a_site(&sites[next..]) {
            out.push(&sites[start..i]);
            start = next;
        }
        from = next;
    }
    out.push(&sites[start..]);
    out
}

/// `role function@file:line`, `role function@file`, `role function` or `role file:line`
/// (also written `role ?@file:line`, as baselines did before).
fn parse_site(text: &str) -> Result<SiteKey, KeyError> {
    let bad = || KeyError::Site(text.to_string());
    let (role, rest) = text.split_once(' ').ok_or_else(bad)?;
    let role = role.parse::<Role>().map_err(|_| bad())?;
    if let Some((file, line)) = file_and_line(rest) {
        return Ok(SiteKey {
            role,
            function: None,
            file: Some(file.to_string()),
            line: Some(line),
        });
    }
    let (function, file, line) = match rest.rsplit_once('@') {
        Some((function, place)) => match place.rsplit_once(':') {
            Some((file, line)) if line.parse::<u32>().is_ok() => {
                (function, Some(file), line.parse::<u32>().ok())
            }
            _ => (function, Some(place), None),
        },
        None => (rest, None, None),
    };
    Ok(SiteKey {
        role,
        function: (function != "?").then(|| function.to_string()),
        file: file.map(str::to_string),
        line,
    })
}

/// `file:line` with no function: no `@`, and a file name with no `:` of its own, so that a
/// function with no file (`ns::f`, `Pool<int, 4>::get`) is never read as one.
fn file_and_line(text: &str) -> Option<(&str, u32)> {
    if text.contains('@') {
        return None;
    }
    let (file, line) = text.rsplit_once(':')?;
    let line = line.parse::<u32>().ok()?;
    (!file.is_empty() && !file.contains(':')).then_some((file, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(role: Role, function: Option<&str>, file: Option<&str>, line: Option<u32>) -> SiteKey {
        SiteKey {
            role,
            function: function.map(str::to_string),
            file: file.map(str::to_string),
            line,
        }
    }

    #[test]
    fn a_cycle_has_one_key_from_any_start() {
        let mut a = vec!["b".to_string(), "c".into(), "a".into()];
        canonical_cycle(&mut a);
        assert_eq!(a, vec!["a", "b", "c"]);
    }

    #[test]
    fn a_baseline_line_reads_back_into_its_key() {
        let keys = [
            BaselineKey {
                kind: BaselineKind::LockCycle,
                classes: vec!["accounts".into(), "ledger".into()],
                sites: [
                    site(Role::Holds, Some("pay"), Some("bank.c"), Some(31)),
                    site(Role::Requests, Some("pay"), Some("bank.c"), Some(32)),
                    site(Role::Holds, Some("refund"), Some("bank.c"), Some(58)),
                ]
                .into(),
            },
            // A race has no classes; C++ names have `, ` and `@`-free templates; a site may
            // lack a function, a line, or a file.
            BaselineKey {
                kind: BaselineKind::Finding(Kind::Race),
                classes: vec![],
                sites: [
                    site(
                        Role::Writes,
                        Some("Pool<int, 4>::get"),
                        Some("pool.h"),
                        Some(9),
                    ),
                    site(Role::AtomicReads, None, Some("a b.c"), None),
                    site(Role::Reads, Some("worker"), None, None),
                    site(Role::Reads, Some("ns::at"), None, None),
                    site(Role::Writes, None, Some("bank.rs"), Some(31)),
                ]
                .into(),
            },
            BaselineKey {
                kind: BaselineKind::Finding(Kind::ObservedStall),
                classes: vec![],
                sites: BTreeSet::new(),
            },
            BaselineKey {
                kind: BaselineKind::Finding(Kind::JoinDeadlock),
                classes: vec!["mutex initialised at main (m.c:3)".into()],
                sites: [site(Role::Joins, Some("main"), Some("m.c"), Some(12))].into(),
            },
        ];
        for k in keys {
            let line = k.to_string();
            assert_eq!(line.parse::<BaselineKey>(), Ok(k), "{line}");
        }
    }

    #[test]
    fn the_line_format_is_the_one_baseline_files_have() {
        let line =
            "lock-cycle | accounts -> ledger | holds pay@bank.c:31, holds refund@bank.c:58, \
                    requests pay@bank.c:32, requests refund@bank.c:59";
        let k: BaselineKey = line.parse().unwrap();
        assert_eq!(k.kind, BaselineKind::LockCycle);
        assert_eq!(k.sites.len(), 4);
        assert_eq!(k.to_string(), line);
        assert_eq!(
            "race |  | reads f@a.c:1, writes g@a.c:2"
                .parse::<BaselineKey>()
                .unwrap()
                .to_string(),
            "race |  | reads f@a.c:1, writes g@a.c:2"
        );
    }

    #[test]
    fn a_site_with_no_function_is_its_file_and_line_and_old_lines_still_match() {
        let line = "lock-cycle | a -> b | holds bank.rs:31, requests bank.rs:32";
        let k: BaselineKey = line.parse().unwrap();
        assert!(k.sites.iter().all(|s| s.function.is_none()));
        assert_eq!(k.to_string(), line);
        let old: BaselineKey = "lock-cycle | a -> b | holds ?@bank.rs:31, requests ?@bank.rs:32"
            .parse()
            .unwrap();
        assert_eq!(old, k);
    }

    #[test]
    fn a_line_that_is_no_key_says_what_is_wrong() {
        assert_eq!("lock-cycle A".parse::<BaselineKey>(), Err(KeyError::Shape));
        assert_eq!(
            "deadlock | A -> B | holds f@a.c:1".parse::<BaselineKey>(),
            Err(KeyError::Kind("deadlock".into()))
        );
        assert_eq!(
            "race |  | x".parse::<BaselineKey>(),
            Err(KeyError::Site("x".into()))
        );
    }
}
