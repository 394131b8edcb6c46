//! The CI baseline (`foresight check`): the findings a project has accepted, as a text file of
//! one line per finding, sorted, so that it diffs well in review and is the same on every
//! machine. A line is the finding's [`finding_key`]: its kind, its lock classes and its sites
//! (function and file:line). Nothing that changes from one run or machine to the next goes in:
//! no addresses, thread ids, counts, trace paths or directories (files are basenames).
//!
//! `deadlock` (predicted) and `potential-deadlock` share the key kind `lock-cycle`: whether a
//! cycle is predicted depends on the schedule of the recorded run, not on the code, and a
//! baseline must not fail the build because a test ran with other timing.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;

use crate::report::{Detail, Finding, FindingLocation};

/// `foresight check` reads and writes this file when `--baseline` is not given.
pub const DEFAULT_BASELINE: &str = "foresight-baseline.txt";

const HEADER: &str = "\
# foresight baseline: accepted lock-discipline findings, one per line:
#   kind | lock classes | sites (role function@file:line)
# `foresight check` fails (exit 1) on any finding not listed here.
# Regenerate after reviewing the findings with:
#   foresight check --update-baseline --baseline <this file> <traces...>
";

/// The stable key of a finding: `kind | classes | sites`.
pub fn finding_key(f: &Finding) -> String {
    let (kind, classes) = match &f.detail {
        Detail::LockCycle { cycle, .. } => ("lock-cycle", canonical_cycle(cycle)),
        _ => (f.kind.as_str(), f.cycle().to_vec()),
    };
    let sites: BTreeSet<String> = f.locations.iter().map(site_key).collect();
    let sites: Vec<String> = sites.into_iter().collect();
    one_line(&format!(
        "{kind} | {} | {}",
        classes.join(" -> "),
        sites.join(", ")
    ))
}

/// A cycle is the same cycle from any start: it starts at its smallest class name.
fn canonical_cycle(cycle: &[String]) -> Vec<String> {
    let start = (0..cycle.len())
        .min_by_key(|&i| &cycle[i])
        .unwrap_or_default();
    let mut c = cycle.to_vec();
    c.rotate_left(start);
    c
}

fn site_key(l: &FindingLocation) -> String {
    let function = l.function.as_deref().unwrap_or("?");
    match (&l.file, l.line) {
        (Some(file), Some(line)) => format!("{} {function}@{}:{line}", l.role, basename(file)),
        (Some(file), None) => format!("{} {function}@{}", l.role, basename(file)),
        (None, _) => format!("{} {function}", l.role),
    }
}

/// The last component of a path: source trees live in different directories on different
/// machines.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A key is one line of the file, whatever the names contain.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

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
    fn a_cycle_has_one_key_from_any_start() {
        let a = canonical_cycle(&["b".into(), "c".into(), "a".into()]);
        assert_eq!(a, vec!["a", "b", "c"]);
    }

    #[test]
    fn comments_and_blank_lines_are_not_keys() {
        let keys = parse("# header\n\nlock-cycle | A -> B | x\n  \n");
        assert_eq!(keys.len(), 1);
        assert!(keys.contains("lock-cycle | A -> B | x"));
    }
}
