//! Hints about lock wrappers, from where the runs take their locks: a line that takes most
//! acquisitions of several locks looks like a wrapper, and acquisitions seen only inside
//! wrappers need `--wrapper` when recording. Read from the runs, after the walk.

use foresight_trace::event::SiteId;

use crate::model::Run;
use crate::sites::{short_path, without_parameters};

/// Hints about wrappers, from where a trace's locks are taken (issue: a C library locks every
/// mutex through one function of its own, and every report then names that function):
/// - one line of one function takes more than half of all the acquisitions, of two locks or
///   more: it looks like a wrapper, and `--wrapper` would name its callers instead;
/// - acquisitions whose sites are inside wrappers only (the recorder did not capture their
///   callers): the recording needs the same `--wrapper`.
pub fn wrapper_hints(runs: &[Run]) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut total = 0u64;
    /// Acquisitions at one line, and the distinct (run, lock) pairs they take.
    #[derive(Default)]
    struct Line {
        acquisitions: u64,
        locks: BTreeSet<(usize, u32)>,
    }
    // (function, location text) → what is taken there
    let mut lines: BTreeMap<(String, String), Line> = BTreeMap::new();
    let mut unrecorded: BTreeMap<String, u64> = BTreeMap::new();
    for (ri, run) in runs.iter().enumerate() {
        total += run.acquisitions.len() as u64;
        for ((site, lock), n) in acquisitions_by_lock_and_site(run) {
            let Some(loc) = run.sites.get(&site) else {
                continue;
            };
            let Some(function) = &loc.function else {
                continue;
            };
            let function = without_parameters(function).to_string();
            if loc.machinery_only {
                *unrecorded.entry(function).or_default() += n;
                continue;
            }
            let at = match &loc.file {
                Some(f) => format!("{}:{}", short_path(f), loc.line),
                None => loc.text.clone(),
            };
            let e = lines.entry((function, at)).or_default();
            e.acquisitions += n;
            e.locks.insert((ri, lock));
        }
    }
    let mut hints = Vec::new();
    if let Some(((function, at), line)) = lines.iter().max_by_key(|(_, l)| l.acquisitions) {
        let (n, locks) = (line.acquisitions, &line.locks);
        if 2 * n > total && locks.len() >= 2 {
            hints.push(format!(
                "most lock acquisitions ({n} of {total}) are at one line of `{function}` ({at}), \
                 for {} locks: is it a lock wrapper? `foresight record --wrapper {function}` \
                 reports its callers instead",
                locks.len()
            ));
        }
    }
    for (function, n) in unrecorded {
        hints.push(format!(
            "{n} lock acquisitions are inside `{function}`, a wrapper whose callers the trace \
             does not have: record with `foresight record --wrapper {function}` to see them"
        ));
    }
    hints
}

/// How many of the run's acquisitions take each lock at each site (those at sites the run does
/// not name left out): counted first, so that a site is named once per lock, not once per
/// acquisition (a long trace takes the same few locks at the same few sites millions of
/// times). Counted in a table by (lock, site) when the site ids are small (the recorder's are
/// dense) and the table is, else per lock in a short list of sites, past which a map.
fn acquisitions_by_lock_and_site(run: &Run) -> Vec<((SiteId, u32), u64)> {
    /// Entries of the (lock, site) table at most.
    const TABLE: usize = 1 << 18;
    let (locks, sites) = (run.locks.len(), run.sites.len());
    let max_site = run.sites.keys().copied().max().unwrap_or(0) as usize;
    if max_site < TABLE && locks.saturating_mul(sites) <= TABLE {
        let mut slot = vec![u32::MAX; max_site + 1];
        let mut ids = Vec::with_capacity(sites);
        for &site in run.sites.keys() {
            slot[site as usize] = ids.len() as u32;
            ids.push(site);
        }
        let mut counts = vec![0u64; locks * sites];
        for a in &run.acquisitions {
            if let Some(&k) = slot.get(a.site as usize) {
                if k != u32::MAX && (a.lock as usize) < locks {
                    counts[a.lock as usize * sites + k as usize] += 1;
                }
            }
        }
        return counts
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(i, &n)| ((ids[i % sites], (i / sites) as u32), n))
            .collect();
    }
    acquisitions_by_lock_and_site_in_lists(run)
}

/// [`acquisitions_by_lock_and_site`] without the table: per lock, a short list of sites, past
/// which a map.
fn acquisitions_by_lock_and_site_in_lists(run: &Run) -> Vec<((SiteId, u32), u64)> {
    let locks = run.locks.len();
    #[derive(Clone, Default)]
    struct Sites {
        few: Vec<(SiteId, u64)>,
        many: foldhash::HashMap<SiteId, u64>,
    }
    const FEW: usize = 16;
    let mut taken: Vec<Sites> = vec![Sites::default(); locks];
    for a in &run.acquisitions {
        let Some(sites) = taken.get_mut(a.lock as usize) else {
            continue;
        };
        if let Some(e) = sites.few.iter_mut().find(|e| e.0 == a.site) {
            e.1 += 1;
        } else if sites.few.len() < FEW {
            sites.few.push((a.site, 1));
        } else {
            *sites.many.entry(a.site).or_default() += 1;
        }
    }
    taken
        .into_iter()
        .enumerate()
        .flat_map(|(lock, s)| {
            let lock = lock as u32;
            s.few
                .into_iter()
                .chain(s.many)
                .map(move |(site, n)| ((site, lock), n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sites::Location;

    #[test]
    fn acquisitions_counted_by_table_and_by_lists_agree() {
        use crate::model::{AcquireHow, Acquisition, LockModel};
        use crate::stream::Mode;
        use foresight_trace::tables::ObjectKind;
        let lock = |object| LockModel {
            object,
            name: String::new(),
            class: String::new(),
            kind: ObjectKind::Mutex,
            rank: None,
            subclass: 0,
            monitor: false,
            block: None,
        };
        let acquisition = |lock, site| Acquisition {
            thread: 0,
            lock,
            mode: Mode::Write,
            how: AcquireHow::Blocking,
            request: 0,
            acquired: 0,
            release: None,
            seq: 0,
            site,
            held: 0..0,
            subclass: 0,
        };
        let mut run = Run::default();
        run.locks = (0..3).map(lock).collect();
        // Site 7 is not named: its acquisitions are left out.
        run.sites = std::sync::Arc::new(
            [0, 2, 5, 40]
                .into_iter()
                .map(|s| (s, Location::default()))
                .collect(),
        );
        for i in 0..200u32 {
            run.acquisitions
                .push(acquisition(i % 3, [0, 2, 5, 40, 7][(i % 5) as usize]));
        }
        let sorted = |mut v: Vec<((SiteId, u32), u64)>| {
            v.retain(|((site, _), _)| run.sites.contains_key(site));
            v.sort_unstable();
            v
        };
        let table = sorted(acquisitions_by_lock_and_site(&run));
        let lists = sorted(acquisitions_by_lock_and_site_in_lists(&run));
        assert_eq!(table, lists);
        assert_eq!(table.len(), 12);
        assert_eq!(table.iter().map(|e| e.1).sum::<u64>(), 160);
    }
}
