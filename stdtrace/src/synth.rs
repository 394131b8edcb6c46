//! Synthetic traces with ground truth, for scale tests and for comparing tools: a main thread
//! forks the workers, which run critical sections nested up to a depth (locks always taken in
//! increasing order, so they form no cycle) and touch shared variables only under the lock that
//! protects each (so they do not race) and variables of their own; then main joins them. Into
//! this background go, at evenly spaced lines, the planted patterns:
//!
//! - a happens-before race: two workers write a variable of its own in consecutive lines, with
//!   no release between them;
//! - a predictable race (sync-preserving, not happens-before): `a: w(x) acq(m) rel(m)` then
//!   `b: acq(m) rel(m) w(x)` — only the hand-off of `m` orders the writes, and `b`'s critical
//!   section could have come first;
//! - a deadlock: `a: acq(p) acq(q) rel(q) rel(p)` then `b: acq(q) acq(p) rel(p) rel(q)`, two
//!   locks of its own.
//!
//! Locations are numbers (RAPID's STD reader needs them to be). Every pattern uses variables,
//! locks and locations of its own, so each is exactly one finding; the background has none. The same lines are written as STD text or, through the
//! [`Importer`], as a foresight trace (the same events the import of the text gives).

use std::io::{self, Write};

use super::import::{Failure, Importer};
use super::parse::Op;

/// What to generate.
#[derive(Clone, Debug)]
pub struct SynthSpec {
    /// Worker threads (main, which forks and joins them, comes on top).
    pub threads: u32,
    /// Background locks.
    pub locks: u32,
    /// Deepest nesting of background critical sections.
    pub depth: u32,
    /// Shared background variables (each protected by lock `v % locks`).
    pub variables: u32,
    /// Lines to write, about (the last background block and the joins may add a few).
    pub events: u64,
    /// Happens-before races to plant.
    pub races: u32,
    /// Predictable races (sync-preserving, not happens-before) to plant.
    pub predictable_races: u32,
    /// Deadlocks to plant.
    pub deadlocks: u32,
    /// Seed of the background's choices: the same spec writes the same lines.
    pub seed: u64,
}

impl Default for SynthSpec {
    fn default() -> Self {
        Self {
            threads: 4,
            locks: 16,
            depth: 2,
            variables: 64,
            events: 1_000_000,
            races: 1,
            predictable_races: 1,
            deadlocks: 1,
            seed: 1,
        }
    }
}

/// One planted finding: its kind, the two threads and the lines (1-based) of its two events —
/// the two accesses of a race, the two inner acquisitions of a deadlock — and the variable or
/// the two locks it is about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Planted {
    /// `race`, `predictable-race` or `deadlock`.
    pub kind: &'static str,
    /// The two threads.
    pub threads: [String; 2],
    /// The lines of the two events.
    pub lines: [u64; 2],
    /// The variable, or the two locks.
    pub target: String,
}

/// What was written.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SynthTruth {
    /// Lines written.
    pub lines: u64,
    /// Threads, main included.
    pub threads: u32,
    /// The planted findings, in line order.
    pub planted: Vec<Planted>,
}

/// Where lines go: STD text, or a trace through the importer.
pub trait Sink {
    /// Names are declared once, before they are used: id `i` of each kind is the `i`-th name.
    fn thread(&mut self, name: &str) -> Result<(), Failure>;
    /// Declares the next lock name.
    fn lock(&mut self, name: &str) -> Result<(), Failure>;
    /// Declares the next variable name.
    fn variable(&mut self, name: &str) -> Result<(), Failure>;
    /// Declares the next location name.
    fn location(&mut self, name: &str) -> Result<(), Failure>;
    /// Writes line `n`: thread `t` does `op` on `target` (a lock, variable or thread id) at
    /// location `site`.
    fn line(&mut self, n: u64, t: u32, op: Op, target: u32, site: u32) -> Result<(), Failure>;
}

/// STD text.
pub struct TextSink<W: Write> {
    out: W,
    threads: Vec<String>,
    locks: Vec<String>,
    variables: Vec<String>,
    locations: Vec<String>,
}

impl<W: Write> TextSink<W> {
    /// STD text written to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out,
            threads: Vec::new(),
            locks: Vec::new(),
            variables: Vec::new(),
            locations: Vec::new(),
        }
    }

    /// The writer, once every line is written.
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> Sink for TextSink<W> {
    fn thread(&mut self, name: &str) -> Result<(), Failure> {
        self.threads.push(name.into());
        Ok(())
    }
    fn lock(&mut self, name: &str) -> Result<(), Failure> {
        self.locks.push(name.into());
        Ok(())
    }
    fn variable(&mut self, name: &str) -> Result<(), Failure> {
        self.variables.push(name.into());
        Ok(())
    }
    fn location(&mut self, name: &str) -> Result<(), Failure> {
        self.locations.push(name.into());
        Ok(())
    }
    #[inline]
    fn line(&mut self, _n: u64, t: u32, op: Op, target: u32, site: u32) -> Result<(), Failure> {
        let o = &mut self.out;
        o.write_all(self.threads[t as usize].as_bytes())?;
        o.write_all(b"|")?;
        o.write_all(op.keyword().as_bytes())?;
        let name = match op {
            Op::Acquire | Op::Release | Op::Request => Some(&self.locks[target as usize]),
            Op::Read | Op::Write => Some(&self.variables[target as usize]),
            Op::Fork | Op::Join => Some(&self.threads[target as usize]),
            Op::Begin | Op::End => None,
        };
        if let Some(name) = name {
            o.write_all(b"(")?;
            o.write_all(name.as_bytes())?;
            o.write_all(b")")?;
        }
        o.write_all(b"|")?;
        o.write_all(self.locations[site as usize].as_bytes())?;
        o.write_all(b"\n")?;
        Ok(())
    }
}

impl<W: Write> Sink for Importer<W> {
    fn thread(&mut self, name: &str) -> Result<(), Failure> {
        Importer::thread(self, name.as_bytes(), None, 0).map(drop)
    }
    fn lock(&mut self, name: &str) -> Result<(), Failure> {
        Importer::lock(self, name.as_bytes(), 0).map(drop)
    }
    fn variable(&mut self, name: &str) -> Result<(), Failure> {
        Importer::variable(self, name.as_bytes(), 0).map(drop)
    }
    fn location(&mut self, name: &str) -> Result<(), Failure> {
        Importer::location(self, name.as_bytes(), 0).map(drop)
    }
    #[inline]
    fn line(&mut self, n: u64, t: u32, op: Op, target: u32, site: u32) -> Result<(), Failure> {
        self.event(n, t, op, target, site)
    }
}

/// splitmix64: small, fast, and the same sequence on every machine.
struct Rng(u64);

impl Rng {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    #[inline]
    fn below(&mut self, n: u32) -> u32 {
        (((self.next() >> 32) * n as u64) >> 32) as u32
    }
}

/// Checks a spec: a clear message for what cannot be generated.
pub fn check(spec: &SynthSpec) -> Result<(), String> {
    if spec.threads < 2 && spec.races + spec.predictable_races + spec.deadlocks > 0 {
        return Err("planted races and deadlocks need at least 2 worker threads".into());
    }
    if spec.threads == 0 {
        return Err("at least one worker thread".into());
    }
    if spec.locks == 0 || spec.depth == 0 || spec.depth > spec.locks {
        return Err("the nesting depth must be between 1 and the number of locks".into());
    }
    if spec.threads > 1 << 20 || spec.locks > 1 << 20 || spec.variables > 1 << 24 {
        return Err("at most 2^20 threads, 2^20 locks and 2^24 variables".into());
    }
    Ok(())
}

/// Generates the trace `spec` describes into `sink`.
pub fn generate(spec: &SynthSpec, sink: &mut impl Sink) -> Result<SynthTruth, Failure> {
    check(spec).map_err(|m| Failure::Io(io::Error::new(io::ErrorKind::InvalidInput, m)))?;
    let workers = spec.threads;
    // Names: threads main, T1..; locks; variables; locations.
    let mut thread_names = vec!["main".to_string()];
    thread_names.extend((1..=workers).map(|i| format!("T{i}")));
    for n in &thread_names {
        sink.thread(n)?;
    }
    let l = spec.locks;
    for i in 0..l {
        sink.lock(&format!("L{i}"))?;
    }
    let v = spec.variables.max(1);
    for i in 0..v {
        sink.variable(&format!("V{i}"))?;
    }
    // A variable of each worker's own.
    for i in 1..=workers {
        sink.variable(&format!("local.T{i}"))?;
    }
    // Locations: one per background operation and lock or variable.
    let site_acq = 0;
    let site_rel = l;
    let site_read = 2 * l;
    let site_write = 2 * l + v;
    let site_local = 2 * l + 2 * v;
    let site_fork = site_local + 1;
    let site_join = site_local + 2;
    // Locations are numbers, as RAPID reads them: site id + 1.
    for id in 0..=site_join {
        sink.location(&(id + 1).to_string())?;
    }
    let mut next_site = site_join + 1;
    let mut next_lock = l;
    let mut next_var = v + workers;

    // Where the patterns go: evenly spaced, in a fixed rotation of kinds.
    let mut kinds: Vec<&'static str> = Vec::new();
    let (mut r, mut p, mut d) = (spec.races, spec.predictable_races, spec.deadlocks);
    while r + p + d > 0 {
        for (left, kind) in [
            (&mut r, "race"),
            (&mut p, "predictable-race"),
            (&mut d, "deadlock"),
        ] {
            if *left > 0 {
                *left -= 1;
                kinds.push(kind);
            }
        }
    }
    let slots = kinds.len() as u64 + 1;
    let body = spec.events.saturating_sub(2 * workers as u64);
    let mut plant_at: Vec<u64> = (1..slots)
        .map(|k| k * body / slots + workers as u64)
        .collect();
    plant_at.reverse();
    kinds.reverse();

    let mut rng = Rng(spec.seed ^ 0x5eed_f0e5_1247_0001);
    let mut truth = SynthTruth {
        threads: workers + 1,
        ..SynthTruth::default()
    };
    let mut out = Lines { sink, n: 0 };
    for w in 1..=workers {
        out.emit(0, Op::Fork, w, site_fork)?;
    }
    let end = spec.events.saturating_sub(workers as u64);
    let mut held: Vec<u32> = Vec::with_capacity(spec.depth as usize);
    while out.n < end {
        if plant_at.last().is_some_and(|&at| out.n >= at) {
            plant_at.pop();
            let kind = kinds.pop().expect("a kind per position");
            let k = truth.planted.len();
            let a = 1 + rng.below(workers);
            let b = 1 + (a - 1 + 1 + rng.below(workers - 1)) % workers;
            let names = [
                thread_names[a as usize].clone(),
                thread_names[b as usize].clone(),
            ];
            let s0 = next_site;
            next_site += 4;
            for i in 0..4 {
                out.sink.location(&(s0 + i + 1).to_string())?;
            }
            match kind {
                "race" | "predictable-race" => {
                    let x = next_var;
                    next_var += 1;
                    let name = format!("{kind}{k}");
                    out.sink.variable(&name)?;
                    let m = if kind == "predictable-race" {
                        let m = next_lock;
                        next_lock += 1;
                        out.sink.lock(&format!("handoff{k}"))?;
                        Some(m)
                    } else {
                        None
                    };
                    let first = out.emit(a, Op::Write, x, s0)?;
                    if let Some(m) = m {
                        out.emit(a, Op::Acquire, m, s0 + 1)?;
                        out.emit(a, Op::Release, m, s0 + 1)?;
                        out.emit(b, Op::Acquire, m, s0 + 2)?;
                        out.emit(b, Op::Release, m, s0 + 2)?;
                    }
                    let second = out.emit(b, Op::Write, x, s0 + 3)?;
                    truth.planted.push(Planted {
                        kind,
                        threads: names,
                        lines: [first, second],
                        target: name,
                    });
                }
                _ => {
                    let (lp, lq) = (next_lock, next_lock + 1);
                    next_lock += 2;
                    out.sink.lock(&format!("dl{k}.p"))?;
                    out.sink.lock(&format!("dl{k}.q"))?;
                    out.emit(a, Op::Acquire, lp, s0)?;
                    let first = out.emit(a, Op::Acquire, lq, s0 + 1)?;
                    out.emit(a, Op::Release, lq, s0 + 1)?;
                    out.emit(a, Op::Release, lp, s0)?;
                    out.emit(b, Op::Acquire, lq, s0 + 2)?;
                    let second = out.emit(b, Op::Acquire, lp, s0 + 3)?;
                    out.emit(b, Op::Release, lp, s0 + 3)?;
                    out.emit(b, Op::Release, lq, s0 + 2)?;
                    truth.planted.push(Planted {
                        kind,
                        threads: names,
                        lines: [first, second],
                        target: format!("dl{k}.p dl{k}.q"),
                    });
                }
            }
            continue;
        }
        // A background block: a thread takes 1..=depth locks in increasing order, touches
        // what they protect and its own variable, and releases them.
        let t = 1 + rng.below(workers);
        let nest = 1 + rng.below(spec.depth);
        held.clear();
        let mut lock = rng.below(l - nest + 1);
        for i in 0..nest {
            held.push(lock);
            out.emit(t, Op::Acquire, lock, site_acq + lock)?;
            let room = l - lock - (nest - i);
            if i + 1 < nest {
                lock += 1 + if room > 0 {
                    rng.below(room.min(4) + 1)
                } else {
                    0
                };
            }
        }
        let touches = 1 + rng.below(4);
        for _ in 0..touches {
            let pick = rng.next();
            if pick & 3 == 0 {
                let op = if pick & 4 == 0 { Op::Read } else { Op::Write };
                out.emit(t, op, v + t - 1, site_local)?;
                continue;
            }
            let h = held[(pick >> 8) as usize % held.len()];
            // The variables lock `h` protects: h, h + locks, h + 2 locks, …
            if h >= v {
                continue;
            }
            let count = (v - h).div_ceil(l);
            let var = h + l * ((pick >> 32) as u32 % count);
            let (op, site) = if pick & 4 == 0 {
                (Op::Read, site_read + var)
            } else {
                (Op::Write, site_write + var)
            };
            out.emit(t, op, var, site)?;
        }
        for &h in held.iter().rev() {
            out.emit(t, Op::Release, h, site_rel + h)?;
        }
    }
    for w in 1..=workers {
        out.emit(0, Op::Join, w, site_join)?;
    }
    truth.lines = out.n;
    Ok(truth)
}

/// The sink and the number of the last line written.
struct Lines<'a, S: Sink> {
    sink: &'a mut S,
    n: u64,
}

impl<S: Sink> Lines<'_, S> {
    #[inline]
    fn emit(&mut self, t: u32, op: Op, target: u32, site: u32) -> Result<u64, Failure> {
        self.n += 1;
        self.sink.line(self.n, t, op, target, site)?;
        Ok(self.n)
    }
}
