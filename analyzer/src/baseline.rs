//! The CI baseline (`foresight check`): the findings a project has accepted, as a text file of
//! one line per finding, sorted, so that it diffs well in review and is the same on every
//! machine. A line is a finding's [`BaselineKey`] written out: its kind, its lock classes and
//! its sites (function and file:line). Nothing that changes from one run or machine to the
//! next goes in: no addresses, thread ids, counts, trace paths or directories (files are
//! basenames). Reading the file gives the keys back, and `check` compares keys.
//!
//! `deadlock` (predicted) and `potential-deadlock` share the key kind `lock-cycle`: whether a
//! cycle is predicted depends on the schedule of the recorded run, not on the code, and a
//! baseline must not fail the build because a test ran with other timing.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;

use crate::report::{BaselineKey, Finding, KeyError};

/// `foresight check` reads and writes this file when `--baseline` is not given.
pub const DEFAULT_BASELINE: &str = "foresight-baseline.txt";

const HEADER: &str = "\
# foresight baseline: accepted lock-discipline findings, one per line:
#   kind | lock classes | sites (role function@file:line)
# `foresight check` fails (exit 1) on any finding not listed here.
# Regenerate after reviewing the findings with:
#   foresight check --update-baseline --baseline <this file> <traces...>
";

/// The accepted keys of a baseline file (blank lines and `#` comments skipped). A line that
/// is not a key is an error naming the file and the line: it would accept nothing.
pub fn read(path: &Path) -> anyhow::Result<BTreeSet<BaselineKey>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the baseline {}", path.display()))?;
    parse(&text).map_err(|(line, e)| anyhow::anyhow!("{}:{line}: {e}", path.display()))
}

/// The keys of a baseline file's text, or the first line (1-based) that is not one and why.
pub(crate) fn parse(text: &str) -> Result<BTreeSet<BaselineKey>, (usize, KeyError)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(n, l)| l.parse::<BaselineKey>().map_err(|e| (n, e)))
        .collect()
}

/// Whether a baseline accepts a finding's key. A race line with an empty class field (written
/// before race keys named their variable) accepts the race at the same sites on any memory,
/// so that an older baseline keeps passing until it is regenerated.
pub fn accepts(accepted: &BTreeSet<BaselineKey>, key: &BaselineKey) -> bool {
    accepted.contains(key)
        || (key.kind == crate::report::BaselineKind::Finding(crate::report::Kind::Race)
            && accepted.contains(&BaselineKey {
                classes: Vec::new(),
                ..key.clone()
            }))
}

/// The file's text for these findings: the header, then the sorted, distinct keys.
pub fn render(findings: &[Finding]) -> String {
    // Sorted as text, as baseline files have always been: regenerating one moves no line.
    let keys: BTreeSet<String> = findings
        .iter()
        .map(|f| f.key().baseline().to_string())
        .collect();
    let mut out = String::from(HEADER);
    for k in keys {
        out.push_str(&k);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_blank_lines_are_not_keys() {
        let keys = parse("# header\n\nlock-cycle | A -> B | holds f@a.c:1\n  \n").unwrap();
        assert_eq!(keys.len(), 1);
        let line = keys.iter().next().unwrap().to_string();
        assert_eq!(line, "lock-cycle | A -> B | holds f@a.c:1");
    }

    #[test]
    fn a_line_that_is_no_key_is_named_by_its_line() {
        let (line, e) =
            parse("# header\nlock-cycle | A -> B | holds f@a.c:1\nA -> B\n").unwrap_err();
        assert_eq!((line, e), (3, KeyError::Shape));
    }
}
