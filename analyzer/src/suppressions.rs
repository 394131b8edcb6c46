//! The suppressions file (`--suppressions FILE`, else `foresight-suppressions.toml` in the
//! working directory when it exists): findings a team reviewed and accepted, each entry with
//! the reason. The format is in `docs/ci.md`:
//!
//! ```toml
//! [[suppress]]
//! class = "accounts_lock"        # a lock class of the finding
//! function = "transfer"          # a function at one of its sites
//! file = "bank.c"                # a source file of one of its sites (path suffix)
//! site = "bank.c:42"             # file:line of one of its sites
//! kind = "potential-deadlock"    # optional: only findings of this kind
//! call = "recv"                  # optional: only blocking calls of this family under a lock
//! reason = "ordered by account id; reviewed in #123"
//! ```
//!
//! The same file lists the project's own lock wrappers (`sites.rs`), which every command
//! skips when it names a site, like `--wrapper`:
//!
//! ```toml
//! wrappers = ["pthreadMutexEnter", "db_lock_*"]
//! ```
//!
//! An entry matches a finding when every criterion it gives matches (at least one of `class`,
//! `function`, `file`, `site`). A finding is removed when any entry matches it; each entry
//! counts the findings it matches, so that stale entries can be pointed out.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::report::{Finding, HazardCall, Kind, Report};
use crate::sites::Wrappers;

/// Read when `--suppressions` is not given and the file exists in the working directory.
pub(crate) const DEFAULT_SUPPRESSIONS: &str = "foresight-suppressions.toml";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    suppress: Vec<toml::Spanned<RawEntry>>,
    #[serde(default)]
    wrappers: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    class: Option<String>,
    function: Option<String>,
    file: Option<String>,
    site: Option<String>,
    kind: Option<Kind>,
    call: Option<HazardCall>,
    reason: Option<String>,
}

/// One `[[suppress]]` entry of the file.
#[derive(Clone, Debug)]
pub struct Suppression {
    /// Line of the entry's `[[suppress]]` header in the file, 1-based.
    pub line: usize,
    pub(crate) class: Option<String>,
    pub(crate) function: Option<String>,
    pub(crate) file: Option<String>,
    pub(crate) site: Option<(String, u32)>,
    pub(crate) kind: Option<Kind>,
    /// Only `blocking-under-lock` findings of this call family.
    pub(crate) call: Option<HazardCall>,
    /// Why the finding is accepted (required: a suppression says why).
    pub reason: String,
}

/// A loaded suppressions file.
#[derive(Clone, Debug)]
pub struct Suppressions {
    /// The file, for messages.
    pub path: PathBuf,
    /// The entries, in file order.
    pub entries: Vec<Suppression>,
    /// The project's lock wrappers (`wrappers = [GLOB, …]`).
    pub wrappers: Wrappers,
}

/// What applying the suppressions did: per entry (same order), how many findings it matched.
#[derive(Clone, Debug)]
pub struct Applied {
    /// Findings each entry matched.
    pub matched: Vec<u64>,
}

impl Suppressions {
    pub(crate) fn load(path: &Path) -> anyhow::Result<Suppressions> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the suppressions file {}", path.display()))?;
        Self::parse(path, &text)
    }

    /// Parses the file's text; errors name the file and the line of the entry.
    pub(crate) fn parse(path: &Path, text: &str) -> anyhow::Result<Suppressions> {
        let raw: RawFile = match toml::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                let line = e.span().map_or(1, |s| line_of(text, s.start));
                bail!("{}:{line}: {}", path.display(), e.message());
            }
        };
        let mut entries = Vec::new();
        let wrappers = Wrappers::new(raw.wrappers);
        for spanned in raw.suppress {
            let line = entry_line(text, spanned.span().start);
            let e = spanned.into_inner();
            let at = format!("{}:{line}", path.display());
            let Some(reason) = e.reason.filter(|r| !r.trim().is_empty()) else {
                bail!("{at}: the suppression has no `reason`: every entry must say why the findings it silences are accepted");
            };
            if e.class.is_none()
                && e.function.is_none()
                && e.file.is_none()
                && e.site.is_none()
                && e.call.is_none()
            {
                bail!("{at}: the suppression matches nothing: give `class`, `function`, `file`, `site` or `call`");
            }
            let site = match e.site {
                None => None,
                Some(s) => match s.rsplit_once(':').map(|(f, l)| (f, l.parse::<u32>())) {
                    Some((file, Ok(line))) if !file.is_empty() => Some((file.to_string(), line)),
                    _ => bail!("{at}: `site = \"{s}\"` is not `file:line`"),
                },
            };
            entries.push(Suppression {
                line,
                class: e.class,
                function: e.function,
                file: e.file,
                site,
                kind: e.kind,
                call: e.call,
                reason,
            });
        }
        Ok(Suppressions {
            path: path.to_path_buf(),
            entries,
            wrappers,
        })
    }

    /// `--suppressions FILE` if given, else the default file if it exists, else none.
    pub fn discover(explicit: Option<&Path>) -> anyhow::Result<Option<Suppressions>> {
        match explicit {
            Some(p) => Ok(Some(Self::load(p)?)),
            None => {
                let p = Path::new(DEFAULT_SUPPRESSIONS);
                if p.is_file() {
                    Ok(Some(Self::load(p)?))
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// Removes the findings some entry matches, and recounts the report.
    pub fn apply(&self, report: &mut Report) -> Applied {
        let mut matched = vec![0u64; self.entries.len()];
        let before = report.findings.len();
        report.findings.retain(|f| {
            let mut keep = true;
            for (i, e) in self.entries.iter().enumerate() {
                if e.matches(f) {
                    matched[i] += 1;
                    keep = false;
                }
            }
            keep
        });
        report.summary.suppressed += before - report.findings.len();
        report.recount();
        Applied { matched }
    }
}

impl Suppression {
    pub(crate) fn matches(&self, f: &Finding) -> bool {
        if self.kind.is_some_and(|k| f.kind != k) {
            return false;
        }
        if let Some(call) = self.call {
            if f.blocking().is_none_or(|b| b.call != call) {
                return false;
            }
        }
        if let Some(class) = &self.class {
            let in_cycle = f.cycle().iter().any(|c| c == class);
            let in_edges = f
                .edges()
                .iter()
                .any(|e| &e.from_class == class || &e.to_class == class);
            let in_wait = f
                .wait()
                .is_some_and(|w| w.held.iter().any(|h| &h.class == class));
            if !(in_cycle || in_edges || in_wait) {
                return false;
            }
        }
        if let Some(function) = &self.function {
            if !f
                .locations
                .iter()
                .any(|l| l.function.as_deref() == Some(function))
            {
                return false;
            }
        }
        if let Some(file) = &self.file {
            if !f
                .locations
                .iter()
                .any(|l| l.file.as_deref().is_some_and(|lf| same_file(lf, file)))
            {
                return false;
            }
        }
        if let Some((file, line)) = &self.site {
            if !f.locations.iter().any(|l| {
                l.line == Some(*line) && l.file.as_deref().is_some_and(|lf| same_file(lf, file))
            }) {
                return false;
            }
        }
        true
    }
}

/// Whether a symbolised file names the file the user wrote: equal, or a path suffix at a `/`
/// (`src/bank.c` matches `/home/ci/proj/src/bank.c`).
fn same_file(symbolised: &str, wanted: &str) -> bool {
    symbolised == wanted
        || symbolised
            .strip_suffix(wanted)
            .is_some_and(|rest| rest.ends_with('/'))
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line of the `[[suppress]]` header of the entry whose table starts at `offset` (the span
/// of an array-of-tables entry may start at its first key).
fn entry_line(text: &str, offset: usize) -> usize {
    let line = line_of(text, offset);
    let lines: Vec<&str> = text.lines().collect();
    (1..=line.min(lines.len()))
        .rev()
        .find(|&l| lines[l - 1].trim_start().starts_with("[[suppress]]"))
        .unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_reason_names_the_file_and_the_entry_line() {
        let text =
            "[[suppress]]\nclass = \"A\"\nreason = \"ok\"\n\n[[suppress]]\nfunction = \"f\"\n";
        let e = Suppressions::parse(Path::new("s.toml"), text).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("s.toml:5: "), "{msg}");
        assert!(msg.contains("reason"), "{msg}");
    }

    #[test]
    fn sites_are_file_and_line() {
        let text = "[[suppress]]\nsite = \"bank.c\"\nreason = \"r\"\n";
        let e = Suppressions::parse(Path::new("s.toml"), text).unwrap_err();
        assert!(e.to_string().contains("not `file:line`"), "{e}");
        let ok = "[[suppress]]\nsite = \"src/bank.c:42\"\nreason = \"r\"\n";
        let s = Suppressions::parse(Path::new("s.toml"), ok).unwrap();
        assert_eq!(s.entries[0].site, Some(("src/bank.c".to_string(), 42)));
        assert_eq!(s.entries[0].line, 1);
    }

    #[test]
    fn wrappers_are_read_beside_the_entries() {
        let text = "wrappers = [\"pthreadMutexEnter\", \"db_*\"]\n";
        let s = Suppressions::parse(Path::new("s.toml"), text).unwrap();
        assert!(s.entries.is_empty());
        assert!(s.wrappers.matches("db_lock"));
        assert!(s.wrappers.matches("pthreadMutexEnter"));
        let bad = "wrappers = \"db_*\"\n";
        let e = Suppressions::parse(Path::new("s.toml"), bad).unwrap_err();
        assert!(e.to_string().starts_with("s.toml:1: "), "{e}");
    }

    #[test]
    fn a_kind_is_one_of_the_report_kinds() {
        let ok = "[[suppress]]\nclass = \"A\"\nkind = \"potential-deadlock\"\nreason = \"r\"\n";
        let s = Suppressions::parse(Path::new("s.toml"), ok).unwrap();
        assert_eq!(s.entries[0].kind, Some(Kind::PotentialDeadlock));
        // A misspelt kind would match nothing and silence nothing: it is an error instead.
        let typo = "[[suppress]]\nclass = \"A\"\nkind = \"potential_deadlock\"\nreason = \"r\"\n";
        let e = Suppressions::parse(Path::new("s.toml"), typo).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("s.toml:3: "), "{msg}");
        assert!(
            msg.contains("potential-deadlock"),
            "the error lists the kinds: {msg}"
        );
    }

    #[test]
    fn files_match_by_path_suffix() {
        assert!(same_file("/home/ci/src/bank.c", "bank.c"));
        assert!(same_file("/home/ci/src/bank.c", "src/bank.c"));
        assert!(!same_file("/home/ci/src/mybank.c", "bank.c"));
    }
}
