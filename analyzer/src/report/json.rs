//! `--format json`: the report as one JSON document (schema `foresight-report`, version 1,
//! documented in `docs/report-schema.md`). Every finding has the same fields, whatever its
//! kind: the common ones, then `cycle`, `edges`, `wait`, `race`, `observed`, `blocking`, `signal` and `witness` (empty or `null` when
//! the kind has none).

use std::io::Write;

use serde::Serialize;

use super::{
    BlockingReport, EdgeReport, Finding, FindingLocation, Kind, Message, ObservedReport,
    RaceReport, Report, Rule, SignalReport, Verdict, WaitReport, Witness,
};

/// Writes `report` as one pretty-printed JSON document (`docs/report-schema.md`).
pub fn write(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    writeln!(out)
}

/// A finding as the schema lays it out (field order included).
#[derive(Serialize)]
struct FindingJson<'f> {
    id: usize,
    kind: Kind,
    verdict: Verdict,
    rule: Rule,
    message: &'f Message,
    reason: &'f str,
    traces: &'f [String],
    cycle: &'f [String],
    edges: &'f [EdgeReport],
    wait: Option<&'f WaitReport>,
    race: Option<&'f RaceReport>,
    observed: Option<&'f ObservedReport>,
    blocking: Option<&'f BlockingReport>,
    signal: Option<&'f SignalReport>,
    witness: Option<&'f Witness>,
    occurrences: u64,
    locations: &'f [FindingLocation],
}

impl Serialize for Finding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        FindingJson {
            id: self.id,
            kind: self.kind,
            verdict: self.verdict,
            rule: self.rule,
            message: &self.message,
            reason: &self.reason,
            traces: &self.traces,
            cycle: self.cycle(),
            edges: self.edges(),
            wait: self.wait(),
            race: self.race(),
            observed: self.observed(),
            blocking: self.blocking(),
            signal: self.signal(),
            witness: self.witness.as_ref(),
            occurrences: self.occurrences,
            locations: &self.locations,
        }
        .serialize(s)
    }
}
