//! The human-readable report: observed findings first (what the run was stuck in), then
//! predicted, then potential ones, each with its cycle, per edge the thread, both sites with
//! stacks and the held set, the witness, and why.

use std::io::Write;

use super::message::{cycle_text, joined};
use super::{
    counted, ComponentSummary, Detail, EdgeReport, Finding, HeldLock, Kind, Report, Rule,
    SiteReport, Verdict,
};

/// How much of each site's stack the text shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Every frame and inlined call, the standard library's and the wrappers' included
    /// (`--full-stacks`); else the frames from the user's outward, when there are several.
    pub full_stacks: bool,
}

/// Writes `report` for a terminal, with the default [`Style`].
pub fn write(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    write_with(out, report, Style::default())
}

/// Writes `report` for a terminal, showing stacks as `style` says.
pub fn write_with(out: &mut impl Write, report: &Report, style: Style) -> std::io::Result<()> {
    // Names come from traces and packs: no control character of theirs reaches the terminal.
    let mut escaped = crate::escape::Escaping::new(out);
    let out = &mut escaped;
    for t in &report.traces {
        write!(
            out,
            "trace {}: {}, {}, {}, {}",
            t.path,
            counted(t.events, "event", "events"),
            counted(t.threads, "thread", "threads"),
            counted(t.locks, "lock", "locks"),
            counted(t.critical_sections, "critical section", "critical sections")
        )?;
        if t.accesses > 0 {
            write!(
                out,
                ", {}",
                counted(t.accesses, "memory access", "memory accesses")
            )?;
        }
        writeln!(out)?;
        if let Some(w) = &t.window {
            writeln!(
                out,
                "  a flight recorder's window (--keep-last {} bytes): {} before it dropped, from \
                 {}; {} seen before it kept as a summary",
                w.keep_last,
                counted(w.events_dropped, "event", "events"),
                counted(w.threads_dropped, "thread", "threads"),
                counted(w.earlier_edges, "lock-order edge", "lock-order edges"),
            )?;
            if let Some(sig) = w.snapshot_signal {
                writeln!(
                    out,
                    "  a snapshot taken on {} while the process ran (record --dump-on): no \
                     trailer, the process went on",
                    super::signal_name(sig as i32)
                )?;
            }
        }
        for w in &t.warnings {
            writeln!(out, "  warning: {w}")?;
        }
        for n in &t.coverage.notes {
            writeln!(out, "  not seen: {n}")?;
        }
    }
    let s = &report.summary;
    write!(
        out,
        "lock-order graph: {}, {}, {}",
        counted(s.lock_classes, "class", "classes"),
        counted(s.lock_order_edges, "edge", "edges"),
        counted(s.class_cycles, "cycle", "cycles"),
    )?;
    match s.max_cycle_length {
        Some(n) => writeln!(out, " of up to {}", counted(n, "lock", "locks"))?,
        None => writeln!(out)?,
    }
    if s.segments > 1 {
        writeln!(
            out,
            "note: analysed in {} segments of {} events; predictions reorder events within a \
             segment (--segment-events; a cycle across segments is potential)",
            s.segments, s.segment_events
        )?;
    }
    if s.cycle_search_truncated {
        writeln!(
            out,
            "note: the cycle search budget ran out; some cycles may be missing (raise \
             --cycle-budget); a component it cut lists one of its shortest cycles"
        )?;
    }
    if s.cycle_length_cut {
        writeln!(
            out,
            "note: cycles longer than {} were not searched for (--max-cycle-length); a \
             component with longer paths lists one of its shortest cycles",
            counted(s.max_cycle_length.unwrap_or(0), "lock", "locks")
        )?;
    }
    if let Some(cap) = s.listing_cap {
        writeln!(
            out,
            "warning: --all lists at most {cap} lock cycles of each verdict per component; {} \
             more were counted, not listed (see the component summaries)",
            s.unlisted_predicted + s.unlisted_potential
        )?;
    }
    if s.candidate_budget_exhausted {
        writeln!(
            out,
            "note: the candidate budget ran out after {} checks; some potential findings may \
             be predictable (raise --candidate-budget)",
            s.candidates_checked
        )?;
    }
    for h in &report.hints {
        writeln!(out, "hint: {h}")?;
    }
    if s.race_pairs_capped > 0 {
        writeln!(
            out,
            "note: {} pairs of lines had more candidate instances than the predictor checks \
             (the first 8 and the latest 8 of each) and none of those checked was confirmed; \
             a race only another instance shows may be missing",
            s.race_pairs_capped
        )?;
    }
    if s.race_budget_exhausted {
        writeln!(
            out,
            "note: the race candidate budget ran out after {} checks (or their steps of \
             closure); some races only a reordering exposes may be missing (raise \
             --race-candidate-budget)",
            s.race_candidates_checked
        )?;
    }
    if s.reversal_unchecked > 0 {
        writeln!(
            out,
            "note: the sync-reversal search ran out of budget: {} pairs of lines were not \
             checked for races that reverse critical sections",
            s.reversal_unchecked
        )?;
    }
    for c in &report.components {
        component(out, c, s.max_cycle_length)?;
    }
    writeln!(out)?;
    let mut said = Said::new();
    let observed: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Observed)
        .collect();
    if !observed.is_empty() {
        writeln!(
            out,
            "== OBSERVED deadlocks and stalls ({}): the run was stuck when its trace ended ==",
            observed.len()
        )?;
        for f in observed {
            finding(out, f, style, &mut said)?;
        }
    }
    let predicted: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Predicted && f.kind != Kind::Race)
        .collect();
    let races: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.kind == Kind::Race)
        .collect();
    let potential: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Potential)
        .collect();
    if !predicted.is_empty() {
        writeln!(out, "== PREDICTED deadlocks ({}) ==", predicted.len())?;
        for f in predicted {
            finding(out, f, style, &mut said)?;
        }
    }
    if !races.is_empty() {
        writeln!(out, "== DATA RACES ({}) ==", races.len())?;
        for f in &races {
            finding(out, f, style, &mut said)?;
        }
    }
    if !potential.is_empty() {
        writeln!(
            out,
            "== POTENTIAL deadlocks ({}): inconsistent orders, not predicted for these runs ==",
            potential.len()
        )?;
        for f in potential {
            finding(out, f, style, &mut said)?;
        }
    }
    let violations: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Violation)
        .collect();
    if !violations.is_empty() {
        writeln!(
            out,
            "== RANK VIOLATIONS ({}): acquisitions against the declared lock ranks ==",
            violations.len()
        )?;
        for f in violations {
            finding(out, f, style, &mut said)?;
        }
    }
    let hazards: Vec<&Finding> = report
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Hazard)
        .collect();
    if !hazards.is_empty() {
        let blocking = hazards.iter().any(|f| f.kind == Kind::BlockingUnderLock);
        let signals = hazards.iter().any(|f| f.kind == Kind::SignalUnsafeLock);
        let what = match (blocking, signals) {
            (true, true) => "locks held across blocking calls or taken in signal handlers",
            (false, true) => "locks taken in signal handlers",
            _ => "locks held across blocking calls",
        };
        writeln!(out, "== HAZARDS ({}): {what} ==", hazards.len())?;
        for f in hazards {
            finding(out, f, style, &mut said)?;
        }
    }
    if report.summary.observed > 0 {
        write!(out, "{} observed, ", report.summary.observed)?;
    }
    write!(
        out,
        "{} predicted, {} potential",
        report.summary.predicted, report.summary.potential
    )?;
    if !races.is_empty() {
        write!(
            out,
            " ({} of the predicted: {})",
            counted(races.len(), "race", "races"),
            race_rules(&races)
        )?;
    }
    if report.summary.rank_violations > 0 {
        write!(
            out,
            ", {}",
            counted(
                report.summary.rank_violations,
                "rank violation",
                "rank violations"
            )
        )?;
    }
    if report.summary.hazards > 0 {
        write!(
            out,
            ", {}",
            counted(report.summary.hazards, "hazard", "hazards")
        )?;
    }
    let unlisted = report.summary.unlisted_predicted + report.summary.unlisted_potential;
    if unlisted > 0 {
        write!(
            out,
            "; {unlisted} more {} not listed ({} predicted, {} potential; {})",
            if unlisted == 1 {
                "lock cycle"
            } else {
                "lock cycles"
            },
            report.summary.unlisted_predicted,
            report.summary.unlisted_potential,
            if report.summary.listing_cap.is_some() {
                "over the --all listing cap"
            } else {
                "--all lists them"
            }
        )?;
    }
    if report.summary.suppressed > 0 {
        write!(out, " ({} suppressed)", report.summary.suppressed)?;
    }
    writeln!(out)?;
    // A finding's `why` is about its own locks and lines; the rule's general reason, what to
    // do and an example are said once, on request.
    let mut rules: Vec<Rule> = report.findings.iter().map(|f| f.rule).collect();
    rules.sort();
    rules.dedup();
    if !rules.is_empty() {
        let rules: Vec<String> = rules.iter().map(Rule::to_string).collect();
        writeln!(
            out,
            "what a rule means and what to do: foresight analyze --explain RULE ({})",
            rules.join(", ")
        )?;
    }
    Ok(())
}

/// Classes named on a component's line, at most.
const COMPONENT_CLASSES: usize = 8;

/// A component of the lock-order graph whose cycles are not all listed: what it holds, its
/// cycles by length, its most seen inversions, and how many cycles the findings below list.
/// (A component whose every cycle is listed needs no summary: its findings say it all.)
fn component(
    out: &mut impl Write,
    c: &ComponentSummary,
    max_len: Option<usize>,
) -> std::io::Result<()> {
    let unlisted = c.predicted + c.potential - (c.listed_predicted + c.listed_potential) as u64;
    if unlisted == 0 && !c.prediction_cut && !c.search_cut {
        return Ok(());
    }
    let by_length: Vec<String> = c
        .cycles_by_length
        .iter()
        .enumerate()
        .filter(|&(_, &n)| n > 0)
        .map(|(i, &n)| format!("{n} of {}", counted(i + 1, "lock", "locks")))
        .collect();
    let up_to = match max_len {
        Some(n) if !c.search_cut => format!(" of up to {}", counted(n, "lock", "locks")),
        _ => String::new(),
    };
    writeln!(
        out,
        "component {}: {}, {}, {}{}{} ({})",
        c.id,
        counted(c.classes, "class", "classes"),
        counted(c.edges, "edge", "edges"),
        if c.search_cut { "at least " } else { "" },
        counted(c.cycles, "cycle", "cycles"),
        up_to,
        by_length.join(", ")
    )?;
    let mut names = c
        .class_names
        .iter()
        .take(COMPONENT_CLASSES)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if c.classes > COMPONENT_CLASSES {
        names.push_str(&format!(" and {} more", c.classes - COMPONENT_CLASSES));
    }
    writeln!(out, "  classes: {names}")?;
    if !c.top_inversions.is_empty() {
        let inv: Vec<String> = c
            .top_inversions
            .iter()
            .map(|i| {
                format!(
                    "{} ⇄ {} ({}/{})",
                    i.classes[0], i.classes[1], i.counts[0], i.counts[1]
                )
            })
            .collect();
        writeln!(
            out,
            "  {} taken in both orders; most seen: {}",
            counted(c.inversions, "pair of classes", "pairs of classes"),
            inv.join(", ")
        )?;
    }
    writeln!(
        out,
        "  listed below: {} of {} predicted, {} of {} potential, shortest first; \
         --all lists up to {} of each",
        c.listed_predicted,
        c.predicted,
        c.listed_potential,
        c.potential,
        crate::options::ALL_CYCLES_LISTED
    )?;
    if c.search_cut {
        writeln!(
            out,
            "  the cycle search was cut here before every cycle was seen: more may exist \
             (--cycle-budget, --max-cycle-length)"
        )?;
    }
    if c.prediction_cut {
        writeln!(
            out,
            "  prediction stopped once {} were predicted: the other cycles are counted \
             unchecked (--all checks them)",
            counted(c.listed_predicted, "deadlock", "deadlocks")
        )?;
    }
    Ok(())
}

/// The reasons already printed, by finding: a reason is said once, and a later finding with
/// the same one refers to the first.
type Said = Vec<(usize, String)>;

fn finding(
    out: &mut impl Write,
    f: &Finding,
    style: Style,
    said: &mut Said,
) -> std::io::Result<()> {
    writeln!(
        out,
        "[{}] {} ({}, rule {})",
        f.id,
        f.message,
        f.verdict.name(),
        f.rule
    )?;
    match &f.detail {
        Detail::LockCycle { cycle, edges } => {
            let mut c = cycle.join(" → ");
            if let Some(first) = cycle.first() {
                c.push_str(" → ");
                c.push_str(first);
            }
            writeln!(out, "  cycle (lock classes): {c}")?;
            for (i, e) in edges.iter().enumerate() {
                edge(out, i + 1, e, style)?;
            }
        }
        Detail::RankViolation { edge: e, .. } => edge(out, 1, e, style)?,
        Detail::Race(r) => {
            if let Some(v) = &r.variable {
                match (&v.file, v.line) {
                    (Some(f), Some(l)) => {
                        writeln!(out, "  memory: `{}` (declared at {f}:{l})", v.name)?
                    }
                    _ => writeln!(out, "  memory: `{}`", v.name)?,
                }
            } else if let Some(b) = &r.block {
                writeln!(
                    out,
                    "  memory: offset {} of a {}-byte heap block allocated by {} at {}",
                    b.offset, b.size, b.thread, b.allocated_at.location
                )?;
            } else {
                writeln!(out, "  memory: {}", r.address)?;
            }
            for a in &r.accesses {
                let held = if a.locks_held.is_empty() {
                    "holding no lock".to_string()
                } else {
                    format!("holding {}", a.locks_held.join(", "))
                };
                writeln!(
                    out,
                    "  {} of {} bytes at {} by {} at {} [event {}], {held}",
                    a.kind, a.size, a.address, a.thread, a.site.location, a.position
                )?;
                stack(out, &a.site, "      ", style)?;
            }
        }
        Detail::Observed(o) => {
            writeln!(out, "  {} ({})", o.trace, o.ended)?;
            if o.cycle.len() > 1 {
                writeln!(out, "  cycle (threads): {}", cycle_text(&o.cycle))?;
            }
            for t in &o.threads {
                match (&t.waits, &t.object, &t.site) {
                    (Some(w), Some(obj), Some(s)) => writeln!(
                        out,
                        "  {} {} in {w} on {obj} at {} [event {}]",
                        t.thread,
                        t.state,
                        s.location,
                        t.position.unwrap_or_default()
                    )?,
                    _ => writeln!(out, "  {} {}", t.thread, t.state)?,
                }
                if let Some(s) = &t.site {
                    stack(out, s, "      ", style)?;
                }
                for h in &t.held {
                    held(out, "holding", h)?;
                }
                if !t.waits_for.is_empty() {
                    writeln!(out, "    waiting for {}", joined(&t.waits_for, ", "))?;
                }
            }
        }
        Detail::Blocking(b) => {
            let longest = match b.longest_ns {
                Some(ns) => format!("longest {}", super::message::duration_text(ns)),
                None => "not seen to return".to_string(),
            };
            writeln!(
                out,
                "  {} calls {} at {} ({} {}, {longest})",
                b.thread,
                b.call,
                b.site.location,
                b.calls,
                if b.calls == 1 { "call" } else { "calls" }
            )?;
            stack(out, &b.site, "      ", style)?;
            for h in &b.held {
                held(out, "holding", h)?;
            }
        }
        Detail::Signal(r) => {
            writeln!(
                out,
                "  {}, in the {} handler, calls {} on {} at {}",
                r.handler.thread, r.signal_name, r.function, r.lock, r.handler.site.location
            )?;
            stack(out, &r.handler.site, "      ", style)?;
            if let Some(h) = &r.holder {
                writeln!(
                    out,
                    "  {} holds it with {} unblocked at {}",
                    h.thread, r.signal_name, h.site.location
                )?;
                stack(out, &h.site, "      ", style)?;
            }
        }
        Detail::WaitDeadlock { wait: w, .. } | Detail::ReadRecursion { wait: w, .. } => {
            writeln!(
                out,
                "  {} in {} waits ({}) on {} at {}",
                w.thread, w.trace, w.wait, w.object, w.site.location
            )?;
            stack(out, &w.site, "      ", style)?;
            for h in &w.held {
                held(out, "holding", h)?;
            }
            writeln!(
                out,
                "  {} requests {} at {}",
                w.other_thread, w.other_lock, w.other_site.location
            )?;
            stack(out, &w.other_site, "      ", style)?;
            if let Some(t) = &w.other_then {
                writeln!(out, "    and only then reaches {}", t.location)?;
            }
        }
    }
    if let Some(w) = &f.witness {
        writeln!(out, "  witness (a reordering of {}):", w.trace)?;
        for t in &w.threads {
            let holds = if t.holds.is_empty() {
                String::new()
            } else {
                format!(", holding {}", t.holds.join(", "))
            };
            writeln!(
                out,
                "    {} runs its first {}{holds}",
                t.thread,
                counted(t.prefix_events, "event", "events")
            )?;
        }
        if let Some(others) = &w.others {
            writeln!(out, "    {}", others.text())?;
        }
        writeln!(
            out,
            "    schedule{}:",
            if w.schedule_truncated {
                " (last steps)"
            } else {
                ""
            }
        )?;
        let mut step = 1;
        for (block, times) in folded(&w.schedule) {
            if times == 1 {
                writeln!(out, "      {step:>2}. {}", block[0])?;
            } else if block.len() == 1 {
                let last = step + times - 1;
                writeln!(
                    out,
                    "      {step:>2}. {} × {times} (to step {last})",
                    block[0]
                )?;
            } else {
                let last = step + times * block.len() - 1;
                writeln!(
                    out,
                    "      {step:>2}. these {} steps × {times} (to step {last}):",
                    block.len()
                )?;
                for b in &block {
                    writeln!(out, "            {b}")?;
                }
            }
            step += times * block.len();
        }
    }
    match said.iter().find(|(_, r)| *r == f.reason) {
        Some((first, _)) => writeln!(out, "  why: as for [{first}]")?,
        None => {
            writeln!(out, "  why: {}", f.reason)?;
            said.push((f.id, f.reason.clone()));
        }
    }
    if f.traces.len() > 1 {
        const NAMED: usize = 3;
        let mut names = f
            .traces
            .iter()
            .take(NAMED)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if f.traces.len() > NAMED {
            names.push_str(&format!(" and {} more", f.traces.len() - NAMED));
        }
        writeln!(
            out,
            "  in {}: {names}",
            counted(f.traces.len(), "trace", "traces")
        )?;
    }
    if f.occurrences > 1 {
        writeln!(out, "  seen {}", counted(f.occurrences, "time", "times"))?;
    }
    writeln!(out)
}

/// Longest run of steps folded as one block ("these 2 steps × 3").
const FOLDED_BLOCK: usize = 4;

/// The schedule with its repetitions folded: each item is a block of steps and how many times
/// it runs back to back. A witness that takes the same locks in a loop says so once.
fn folded(steps: &[String]) -> Vec<(Vec<&str>, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        // The block length that covers the most steps by repeating, shortest on a tie.
        let mut best = (1, 1);
        for p in 1..=FOLDED_BLOCK.min(steps.len() - i) {
            let mut times = 1;
            while i + (times + 1) * p <= steps.len()
                && steps[i..i + p] == steps[i + times * p..i + (times + 1) * p]
            {
                times += 1;
            }
            if times > 1 && times * p > best.0 * best.1 {
                best = (p, times);
            }
        }
        let (p, times) = best;
        out.push((steps[i..i + p].iter().map(String::as_str).collect(), times));
        i += p * times;
    }
    out
}

/// A cycle's names in order, back to the first: `A → B → A`.
/// "3 by happens-before, 1 sync-preserving": how many races each rule found.
fn race_rules(races: &[&Finding]) -> String {
    let count = |rule: Rule| races.iter().filter(|f| f.rule == rule).count();
    let counts = [
        (Rule::HappensBefore, count(Rule::HappensBefore)),
        (Rule::SyncPreserving, count(Rule::SyncPreserving)),
        (Rule::SyncReversal, count(Rule::SyncReversal)),
    ];
    let found: Vec<_> = counts.iter().filter(|(_, n)| *n > 0).collect();
    match found.as_slice() {
        [] | [_] => found
            .first()
            .map_or(Rule::HappensBefore, |(r, _)| *r)
            .to_string(),
        _ => found
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn edge(out: &mut impl Write, i: usize, e: &EdgeReport, style: Style) -> std::io::Result<()> {
    if e.earlier {
        writeln!(
            out,
            "  edge {i}: {} → {} ({} in {}, seen {} before the flight recorder's window)",
            e.from_class,
            e.to_class,
            e.thread,
            e.trace,
            counted(e.edge_count, "time", "times")
        )?;
        writeln!(
            out,
            "    holds {} ({}), acquired at {}",
            e.held.lock, e.held.mode, e.held.site.location
        )?;
        stack(out, &e.held.site, "      ", style)?;
        writeln!(
            out,
            "    requests {} ({}) at {}",
            e.lock, e.mode, e.site.location
        )?;
        return stack(out, &e.site, "      ", style);
    }
    writeln!(
        out,
        "  edge {i}: {} → {} ({} in {}, seen {})",
        e.from_class,
        e.to_class,
        e.thread,
        e.trace,
        counted(e.edge_count, "time", "times")
    )?;
    writeln!(
        out,
        "    holds {} ({}), acquired at {} [event {}]",
        e.held.lock, e.held.mode, e.held.site.location, e.held_position
    )?;
    stack(out, &e.held.site, "      ", style)?;
    writeln!(
        out,
        "    requests {} ({}) at {} [event {}]",
        e.lock, e.mode, e.site.location, e.request_position
    )?;
    stack(out, &e.site, "      ", style)?;
    let names: Vec<String> = e.held_set.iter().map(|h| h.lock.to_string()).collect();
    writeln!(out, "    held set: {{{}}}", names.join(", "))
}

fn held(out: &mut impl Write, what: &str, h: &HeldLock) -> std::io::Result<()> {
    writeln!(
        out,
        "    {what} {} ({}), acquired at {}",
        h.lock, h.mode, h.site.location
    )
}

fn stack(out: &mut impl Write, s: &SiteReport, indent: &str, style: Style) -> std::io::Result<()> {
    let frames = if style.full_stacks {
        &s.full_stack
    } else {
        &s.stack
    };
    if frames.len() > 1 {
        for f in frames {
            writeln!(out, "{indent}at {f}")?;
        }
    }
    // A caller the frames above do not show: the one the recorder noted at the site's first
    // occurrence (a recording of one frame per site).
    if let Some(c) = s.called_from.as_ref().filter(|c| c.first_call_only) {
        writeln!(out, "{indent}first called from {}", c.location)?;
    }
    Ok(())
}
