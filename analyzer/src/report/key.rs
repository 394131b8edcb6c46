//! The stable key of a finding, `kind | classes | sites`: one line that names what to fix and
//! nothing that changes from one run or machine to the next. The CI baseline
//! (`baseline.rs`) is a list of them, and SARIF's `partialFingerprints` carry them.

use std::collections::BTreeSet;

use super::{Detail, Finding, FindingLocation};

/// The stable key of a finding: `kind | classes | sites`.
pub fn finding_key(f: &Finding) -> String {
    let (kind, classes) = match &f.detail {
        Detail::LockCycle { cycle, .. } => ("lock-cycle", canonical_cycle(cycle)),
        _ => (f.kind.name(), f.cycle().to_vec()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_has_one_key_from_any_start() {
        let a = canonical_cycle(&["b".into(), "c".into(), "a".into()]);
        assert_eq!(a, vec!["a", "b", "c"]);
    }
}
