//! `rank-violation` findings: the program declared lock ranks (`foresight_lock_rank`), and a
//! thread acquired a ranked lock while holding one of the same or a higher rank (seed 001:
//! "never acquire a lock of rank ≤ the highest rank you already hold"). The check itself runs
//! while the model is built (`model/locks.rs`, `model::RankViolation`, one comparison per acquisition against the
//! top of the thread's held stack); this module turns the violations into findings, one per
//! pair of sites and classes over all traces.

use foldhash::{HashMap, HashMapExt};

use crate::describe::{edge_report, location};
use crate::lock_graph::LockOrderGraph;
use crate::model::Run;
use crate::report::{Detail, Finding, Kind, Message, Role, Rule, Verdict};

pub fn rank_findings(runs: &[Run], graph: &LockOrderGraph) -> Vec<Finding> {
    let mut findings: Vec<Finding> = Vec::new();
    let mut seen: HashMap<(String, String, u32, u32, String), usize> = HashMap::new();
    for run in runs {
        if run.rank_violations.is_empty() {
            continue;
        }
        for v in &run.rank_violations {
            let (h, a) = (
                &run.acquisitions[v.held as usize],
                &run.acquisitions[v.acquisition as usize],
            );
            let (held_lock, lock) = (&run.locks[h.lock as usize], &run.locks[a.lock as usize]);
            // Sites by symbolised text, so that the same code in several traces folds together.
            let (held_class, class) = (run.acquisition_class(h), run.acquisition_class(a));
            let key = (
                held_class.clone(),
                class.clone(),
                v.held_rank,
                v.rank,
                format!(
                    "{}|{}",
                    run.location(h.site).text,
                    run.location(a.site).text
                ),
            );
            if let Some(&i) = seen.get(&key) {
                let f: &mut Finding = &mut findings[i];
                f.occurrences += 1;
                if !f.traces.contains(&run.source) {
                    f.traces.push(run.source.clone());
                }
                continue;
            }
            seen.insert(key, findings.len());
            findings.push(Finding {
                id: 0,
                kind: Kind::RankViolation,
                verdict: Verdict::Violation,
                rule: Rule::LockRank,
                message: Message::RankViolation {
                    lock: crate::describe::lock(run, a.lock),
                    rank: v.rank,
                    held: crate::describe::lock(run, h.lock),
                    held_rank: v.held_rank,
                },
                reason: format!(
                    "locks must be acquired in increasing rank, and {} has the highest rank \
                     held ({}), which is not below {}'s ({}); whatever the schedule, this order \
                     breaks the declared lock discipline",
                    held_lock.name, v.held_rank, lock.name, v.rank
                ),
                traces: vec![run.source.clone()],
                witness: None,
                occurrences: 1,
                locations: vec![
                    location(run, h.site, h.thread, Role::Holds),
                    location(run, a.site, a.thread, Role::Requests),
                ],
                detail: Detail::RankViolation {
                    classes: [held_class, class],
                    edge: edge_report(run, graph, v.held, v.acquisition),
                },
            });
        }
    }
    findings
}

/// Declared ranks as an analysis of the registry (`analyses/mod.rs`).
pub struct Ranks;

impl super::Analysis for Ranks {
    fn name(&self) -> &'static str {
        "ranks"
    }

    fn analyze(
        &self,
        part: &super::Part,
        _budgets: &mut super::Budgets,
        _summary: &mut crate::report::Summary,
        out: &mut super::Output,
    ) {
        out.findings.extend(rank_findings(part.runs, part.graph));
    }
}
