//! The CI baseline (`foresight check`): the findings a project has accepted, as a text file of
//! one line per finding, sorted, so that it diffs well in review and is the same on every
//! machine. A line is the finding's key ([`finding_key`]): its kind, its lock classes and its sites
//! (function and file:line). Nothing that changes from one run or machine to the next goes in:
//! no addresses, thread ids, counts, trace paths or directories (files are basenames).
//!
//! `deadlock` (predicted) and `potential-deadlock` share the key kind `lock-cycle`: whether a
//! cycle is predicted depends on the schedule of the recorded run, not on the code, and a
//! baseline must not fail the build because a test ran with other timing.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;

use crate::report::{finding_key, Finding};

/// `foresight check` reads and writes this file when `--baseline` is not given.
pub const DEFAULT_BASELINE: &str = "foresight-baseline.txt";

const HEADER: &str = "\
# foresight baseline: accepted lock-discipline findings, one per line:
#   kind | lock classes | sites (role function@file:line)
# `foresight check` fails (exit 1) on any finding not listed here.
# Regenerate after reviewing the findings with:
#   foresight check --update-baseline --baseline <this file> <traces...>
";

/// The accepted keys of a baseline file (blank lines and `#` comments skipped).
pub fn read(path: &Path) -> anyhow::Result<BTreeSet<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the baseline {}", path.display()))?;
    Ok(parse(&text))
}

pub fn parse(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The file's text for these findings: the header, then the sorted, distinct keys.
pub fn render(findings: &[Finding]) -> String {
    let keys: BTreeSet<String> = findings.iter().map(finding_key).collect();
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
        let keys = parse("# header\n\nlock-cycle | A -> B | x\n  \n");
        assert_eq!(keys.len(), 1);
        assert!(keys.contains("lock-cycle | A -> B | x"));
    }
}
