//! `--format sarif`: the report as SARIF 2.1.0, for code-scanning services. One result per
//! finding; its `ruleId` is the finding's kind, described in `tool.driver.rules`. `locations`
//! is the primary acquisition (the first request of a lock cycle, the wait of a wait finding),
//! `relatedLocations` every site of the finding (both sides of each edge), and a predicted
//! finding's witness is a `codeFlow` with one `threadFlow` per thread. `partialFingerprints`
//! carries the baseline key ([`BaselineKey`](super::BaselineKey)), which is stable across machines.
//!
//! File locations are what code-scanning services map onto a repository: a file under the
//! source root (`--source-root`, by default the git work tree) is a URI relative to it, with
//! `uriBaseId` `%SRCROOT%` and the root itself in `run.originalUriBaseIds`; a file outside it
//! (a system header) is an absolute `file://` URI, which SARIF allows only without a base. A
//! path the trace holds relative (as it was compiled) is taken as relative to the root.

use std::io::Write;
use std::path::{Component, Path, PathBuf};

use serde_json::{json, Value};

use strum::VariantArray;

use super::{Finding, FindingLocation, Kind, Report, Role, Rule, Verdict};

/// The level a kind's results have unless their verdict says otherwise.
fn default_level(kind: Kind) -> &'static str {
    match kind {
        Kind::PotentialDeadlock
        | Kind::RwlockDeadlock
        | Kind::ObservedStall
        | Kind::BlockingUnderLock
        | Kind::SignalUnsafeLock => "warning",
        _ => "error",
    }
}

fn level(f: &Finding) -> &'static str {
    if f.kind == Kind::ObservedStall {
        return default_level(f.kind);
    }
    match f.verdict {
        Verdict::Observed | Verdict::Predicted | Verdict::Violation => "error",
        Verdict::Potential | Verdict::Hazard => "warning",
    }
}

/// Writes the whole report. `baseline_state(f)`, when given, is SARIF's `baselineState` of each
/// result (`new` or `unchanged`, from `foresight check`).
pub fn write(
    out: &mut impl Write,
    report: &Report,
    baseline_state: Option<&dyn Fn(&Finding) -> &'static str>,
    source_root: Option<&Path>,
) -> std::io::Result<()> {
    let v = to_value(report, baseline_state, source_root);
    serde_json::to_writer_pretty(&mut *out, &v)?;
    writeln!(out)
}

/// The report as SARIF; `source_root` (absolute) is where relative file URIs start.
pub(crate) fn to_value(
    report: &Report,
    baseline_state: Option<&dyn Fn(&Finding) -> &'static str>,
    source_root: Option<&Path>,
) -> Value {
    let root = source_root.map(lexically_normal);
    let root = root.as_deref();
    let rules: Vec<Value> = Kind::VARIANTS
        .iter()
        .map(|&kind| {
            let (short, full) = super::explain::kind_description(kind);
            json!({
                "id": kind.name(),
                "name": rule_name(kind.name()),
                "shortDescription": { "text": short },
                "fullDescription": { "text": full },
                "defaultConfiguration": { "level": default_level(kind) },
            })
        })
        .collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| result(f, baseline_state, root))
        .collect();
    let mut v = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "foresight",
                    "version": env!("CARGO_PKG_VERSION"),
                    "rules": rules,
                }
            },
            "columnKind": "unicodeCodePoints",
            "results": results,
        }]
    });
    if let Some(root) = root {
        let mut base = format!("file://{}", uri(&root.to_string_lossy()));
        if !base.ends_with('/') {
            base.push('/');
        }
        v["runs"][0]["originalUriBaseIds"] = json!({ SRCROOT: { "uri": base } });
    }
    // What a trace's analysis left out (budgets that cut, events it could not use) is part of
    // the result a code-scanning view shows: the invocation's notifications.
    let notifications: Vec<Value> = report
        .traces
        .iter()
        .flat_map(|t| {
            t.warnings
                .iter()
                .map(move |w| {
                    json!({
                        "level": "warning",
                        "message": { "text": format!("{}: {w}", t.path) },
                    })
                })
                // What the recording could not show: a clean result is not a clean program.
                .chain(t.coverage.notes.iter().map(move |n| {
                    json!({
                        "level": "warning",
                        "message": { "text": format!("{}: not seen: {n}", t.path) },
                    })
                }))
        })
        .collect();
    let mut notifications = notifications;
    if let Some(cap) = report.summary.listing_cap {
        notifications.push(json!({
            "level": "warning",
            "message": { "text": format!(
                "--all lists at most {cap} lock cycles of each verdict per component; {} more \
                 were counted, not listed",
                report.summary.unlisted_predicted + report.summary.unlisted_potential
            ) },
        }));
    }
    if !notifications.is_empty() {
        v["runs"][0]["invocations"] = json!([{
            "executionSuccessful": true,
            "toolExecutionNotifications": notifications,
        }]);
    }
    v
}

/// `potential-deadlock` → `PotentialDeadlock` (SARIF's `name` is an identifier-like word).
fn rule_name(id: &str) -> String {
    id.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

fn result(
    f: &Finding,
    baseline_state: Option<&dyn Fn(&Finding) -> &'static str>,
    root: Option<&Path>,
) -> Value {
    let rule_index = Kind::VARIANTS.iter().position(|&k| k == f.kind);
    let primary = f
        .locations
        .iter()
        .find(|l| {
            matches!(
                l.role,
                Role::Requests | Role::Joins | Role::Waits | Role::Arrives | Role::ReadLocksAgain
            )
        })
        .or_else(|| f.locations.first());
    let related: Vec<Value> = f
        .locations
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut v = location(l, &format!("{} {}", l.thread, l.role), root);
            v["id"] = json!(i);
            v
        })
        .collect();
    let mut r = json!({
        "ruleId": f.kind.name(),
        "level": level(f),
        "message": { "text": f.message },
        "locations": primary.map(|l| vec![location(l, &f.message.to_string(), root)]).unwrap_or_default(),
        "relatedLocations": related,
        "partialFingerprints": { "foresight/v1": f.key().baseline().to_string() },
        "occurrenceCount": f.occurrences.max(1),
        "properties": {
            "verdict": f.verdict.name(),
            "rule": f.rule,
            "reason": f.reason,
            "lockClasses": f.cycle(),
            "traces": f.traces,
        },
    });
    if let Some(i) = rule_index {
        r["ruleIndex"] = json!(i);
    }
    if let Some(state) = baseline_state {
        r["baselineState"] = json!(state(f));
    }
    if let Some(flow) = code_flow(f, root) {
        r["codeFlows"] = json!([flow]);
    }
    let stacks: Vec<Value> = f.locations.iter().filter_map(|l| stack(l, root)).collect();
    if !stacks.is_empty() {
        r["stacks"] = json!(stacks);
    }
    r
}

/// A site with its caller as a SARIF `stack`: the site's frame, then its caller's (the one
/// of its first occurrence when that is all the trace knows, which the message says).
fn stack(l: &FindingLocation, root: Option<&Path>) -> Option<Value> {
    let c = l.called_from.as_ref()?;
    let caller = FindingLocation {
        file: c.file.clone(),
        line: c.line,
        function: c.function.clone(),
        called_from: None,
        ..l.clone()
    };
    let what = format!("{} {}", l.thread, l.role);
    let called = if c.first_call_only {
        "first called from"
    } else {
        "called from"
    };
    Some(json!({
        "message": { "text": format!("{what}, {called} {}", c.location) },
        "frames": [
            { "location": location(l, &what, root) },
            { "location": location(&caller, &format!("{called} {}", c.location), root) },
        ],
    }))
}

/// A SARIF location for a finding's site: the file and line when symbolised, the function as a
/// logical location.
fn location(l: &FindingLocation, message: &str, root: Option<&Path>) -> Value {
    let mut v = json!({ "message": { "text": message } });
    if let Some(file) = &l.file {
        let mut physical = json!({ "artifactLocation": artifact_location(file, root) });
        if let Some(line) = l.line.filter(|&n| n > 0) {
            physical["region"] = json!({ "startLine": line });
        }
        v["physicalLocation"] = physical;
    }
    if let Some(function) = &l.function {
        v["logicalLocations"] = json!([{ "name": function, "kind": "function" }]);
    }
    v
}

/// The base of relative file URIs.
const SRCROOT: &str = "%SRCROOT%";

/// A file as SARIF's `artifactLocation`: relative to the source root (with its `uriBaseId`)
/// when it is under it or relative already, else an absolute `file://` URI.
fn artifact_location(file: &str, root: Option<&Path>) -> Value {
    let path = Path::new(file);
    if !path.is_absolute() {
        return json!({ "uri": uri(&lexically_normal(path).to_string_lossy()), "uriBaseId": SRCROOT });
    }
    let path = lexically_normal(path);
    let under = |p: &Path| {
        root.and_then(|r| p.strip_prefix(r).ok())
            .map(|rel| rel.to_string_lossy().into_owned())
    };
    // Through links (a work tree reached by another path) when the file is on this machine.
    let relative = under(&path).or_else(|| path.canonicalize().ok().and_then(|c| under(&c)));
    match relative {
        Some(rel) if !rel.is_empty() => json!({ "uri": uri(&rel), "uriBaseId": SRCROOT }),
        _ => json!({ "uri": format!("file://{}", uri(&path.to_string_lossy())) }),
    }
}

/// `path` with `.` and `a/..` taken out, as the compiler's paths have them (`src/../lib/x.c`);
/// no link is followed.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// A file name as a URI reference, with the characters a URI cannot hold percent-encoded.
fn uri(path: &str) -> String {
    let mut o = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// The witness of a predicted finding: per thread, the locks it holds at the end of its prefix,
/// then where it blocks (a deadlock) or the access it makes next (a race).
fn code_flow(f: &Finding, root: Option<&Path>) -> Option<Value> {
    let w = f.witness.as_ref()?;
    let mut flows: Vec<Value> = w
        .threads
        .iter()
        .map(|t| {
            let mut steps: Vec<Value> = Vec::new();
            for h in &t.holds {
                let site = f
                    .locations
                    .iter()
                    .find(|l| l.thread == t.thread && l.role == Role::Holds);
                let text = format!("{} holds {h}", t.thread);
                steps.push(flow_step(site, &text, "acquire", root));
            }
            if let Some(b) = &t.blocks {
                let site = f
                    .locations
                    .iter()
                    .find(|l| l.thread == t.thread && l.role != Role::Holds);
                // A race's pattern threads make their access next; a deadlock's block.
                let kind = if f.kind == Kind::Race {
                    "access"
                } else {
                    "block"
                };
                steps.push(flow_step(site, &format!("{} {b}", t.thread), kind, root));
            }
            if steps.is_empty() {
                steps.push(flow_step(
                    None,
                    &format!("{} runs its first {} events", t.thread, t.prefix_events),
                    "run",
                    root,
                ));
            }
            json!({
                "id": t.thread,
                "message": { "text": format!("{}: first {} events", t.thread, t.prefix_events) },
                "locations": steps,
            })
        })
        .collect();
    if let Some(others) = &w.others {
        // One flow for the threads that run whole, with their ids for a tool to replay.
        let text = others.text();
        flows.push(json!({
            "id": "others",
            "message": { "text": text },
            "locations": [flow_step(None, &text, "run", root)],
            "properties": {
                "threads": others.threads,
                "events": others.events,
                "ids": others.ids,
            },
        }));
    }
    if flows.is_empty() {
        return None;
    }
    if f.rule == Rule::SyncReversal {
        // The order is what makes this witness: the sections moved ahead, step by step.
        return Some(json!({
            "message": { "text": format!(
                "a reordering of {} that runs later critical sections first, then both \
                 accesses: {}",
                w.trace,
                w.schedule.join("; ")
            ) },
            "threadFlows": flows,
            "properties": { "schedule": w.schedule, "scheduleTruncated": w.schedule_truncated },
        }));
    }
    let text = if f.kind == Kind::Race {
        format!(
            "a reordering of {} that keeps every critical section in its order and every \
             read's writer, then runs both accesses back to back",
            w.trace
        )
    } else {
        format!("a reordering of {} that deadlocks", w.trace)
    };
    Some(json!({
        "message": { "text": text },
        "threadFlows": flows,
    }))
}

fn flow_step(site: Option<&FindingLocation>, text: &str, kind: &str, root: Option<&Path>) -> Value {
    let location = match site {
        Some(l) => location(l, text, root),
        None => json!({ "message": { "text": text } }),
    };
    json!({ "location": location, "kinds": [kind] })
}
