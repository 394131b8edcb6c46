//! Hints about lock wrappers, from where the runs take their locks: a line that takes most
//! acquisitions of several locks looks like a wrapper, and acquisitions seen only inside
//! wrappers need `--wrapper` when recording. Read from the runs, after the walk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use foresight_trace::event::SiteId;

use crate::model::Run;
use crate::sites::{short_path, without_parameters};

/// Hints about wrappers, from where a trace's locks are taken (issue: a C library locks every
/// mutex through one function of its own, and every report then names that function):
/// - lock sites without line information (a program built without `-g`): every site of a
///   function reads as the function alone, so that no line can be told from another; the hint
///   says so, and those sites are not judged as wrappers;
/// - one line of one function takes more than half of all the acquisitions, of two locks or
///   more, and one thread takes two locks or more there (a thread's start routine that locks
///   its own lock, one per thread, is no wrapper), and it is not where a thread's own code
///   starts (when callers were recorded): it looks like a wrapper, and `--wrapper` would name
///   its callers instead;
/// - acquisitions whose sites are inside wrappers only (the recorder did not capture their
///   callers): the recording needs the same `--wrapper`.
///
/// What the hints are made of, counted over runs and added up over the segments of a trace, so
/// that a hint's counts are the trace's (the hints of several traces are listed each once). Acquisitions are
/// counted as the trace has them: granted (a request still pending when the trace ended is not
/// one), and once each (one held across a segment boundary is counted in the segment that
/// acquired it); locks are counted by name.
#[derive(Clone, Debug, Default)]
pub struct HintTally {
    total: u64,
    /// (function, `file:line`) → what is taken there.
    lines: BTreeMap<(String, String), LineTally>,
    /// Acquisitions inside wrappers whose callers were not recorded, per wrapper.
    unrecorded: BTreeMap<String, u64>,
    /// Acquisitions at sites with a function but no file and line, per function.
    without_lines: BTreeMap<String, u64>,
    /// The lock names the lines' threads took first, each once: [`ThreadLocks`] names them by
    /// their index here.
    lock_names: Vec<Arc<str>>,
    lock_ids: HashMap<Arc<str>, u32>,
    /// The traces whose last segment is in: no thread of theirs takes a lock any more.
    ended: Vec<Arc<str>>,
}

#[derive(Clone, Debug, Default)]
struct LineTally {
    acquisitions: u64,
    locks: BTreeSet<String>,
    /// Some thread took two different locks there.
    one_thread_several: bool,
    /// Until then, per trace: the lock each thread took there first, kept across the segments
    /// of a trace (a thread's two calls may be in two segments) while the thread lives: a
    /// thread that has exited takes no lock any more (a program may create 10^5 threads, a
    /// few alive at a time).
    first_lock: Vec<(Arc<str>, ThreadLocks)>,
    /// Per trace, the threads that took a lock there and exited in the run counted (sorted):
    /// [`HintTally::add`] lets what they took go once it has counted it.
    exited: Vec<(Arc<str>, Vec<u32>)>,
    /// The line is in a thread's start routine (its caller is where threads start).
    thread_entry: bool,
}

/// The lock each thread of a trace took first at a line (an index of
/// [`HintTally::lock_names`]): by the thread's dense index from `from` on, 4 bytes a thread,
/// not a map entry each, since a program may create 10^5 threads (a segment's cover the
/// threads it has, which a thread-per-request program creates one after another); in a map
/// once the threads that took a lock there are too few for their span (a line that two
/// threads far apart take).
#[derive(Clone, Debug)]
enum ThreadLocks {
    ByIndex {
        from: u32,
        first: Vec<u32>,
        /// Entries of `first` that are not `NONE`.
        taken: u32,
    },
    Sparse(HashMap<u32, u32>),
}

impl Default for ThreadLocks {
    fn default() -> Self {
        ThreadLocks::ByIndex {
            from: 0,
            first: Vec::new(),
            taken: 0,
        }
    }
}

impl ThreadLocks {
    const NONE: u32 = u32::MAX;

    /// Thread `thread` took lock `lock` there: whether it took another one there before.
    fn took(&mut self, thread: u32, lock: u32) -> bool {
        let ThreadLocks::ByIndex { from, first, taken } = self else {
            let ThreadLocks::Sparse(map) = self else {
                unreachable!()
            };
            return *map.entry(thread).or_insert(lock) != lock;
        };
        let (start, end) = if first.is_empty() {
            (thread, thread + 1)
        } else {
            (
                (*from).min(thread),
                (*from + first.len() as u32).max(thread + 1),
            )
        };
        // At most 16 bytes for each thread that took a lock there, as a map would take.
        if (end - start) as u64 > 4 * (u64::from(*taken) + 1) + 64 {
            let map: HashMap<u32, u32> = self.taken().collect();
            *self = ThreadLocks::Sparse(map);
            return self.took(thread, lock);
        }
        if first.is_empty() {
            *from = thread;
        } else if thread < *from {
            let more = (*from - thread) as usize;
            first.splice(0..0, std::iter::repeat_n(Self::NONE, more));
            *from = thread;
        }
        let i = (thread - *from) as usize;
        if i >= first.len() {
            first.resize(i + 1, Self::NONE);
        }
        match first[i] {
            Self::NONE => {
                first[i] = lock;
                *taken += 1;
                false
            }
            earlier => earlier != lock,
        }
    }

    /// Thread `thread` exited: it takes no lock there any more.
    fn forget(&mut self, thread: u32) {
        match self {
            ThreadLocks::ByIndex { from, first, taken } => {
                let Some(i) = thread.checked_sub(*from).map(|i| i as usize) else {
                    return;
                };
                if first.get(i).is_none_or(|&l| l == Self::NONE) {
                    return;
                }
                first[i] = Self::NONE;
                *taken -= 1;
            }
            ThreadLocks::Sparse(map) => {
                map.remove(&thread);
            }
        }
    }

    /// Starts the list at its first thread alive, once the threads that exited are
    /// forgotten (once for them all: a thread per request exits in order, and moving the list
    /// for each would cost its length each time).
    fn compact(&mut self) {
        if let ThreadLocks::ByIndex { from, first, .. } = self {
            let gone = first
                .iter()
                .position(|&l| l != Self::NONE)
                .unwrap_or(first.len());
            first.drain(..gone);
            *from = if first.is_empty() {
                0
            } else {
                *from + gone as u32
            };
        }
    }

    /// (thread, lock) of every thread that took a lock there.
    fn taken(&self) -> Box<dyn Iterator<Item = (u32, u32)> + '_> {
        match self {
            ThreadLocks::ByIndex { from, first, .. } => Box::new(
                first
                    .iter()
                    .enumerate()
                    .filter(|(_, &l)| l != Self::NONE)
                    .map(move |(i, &l)| (*from + i as u32, l)),
            ),
            ThreadLocks::Sparse(map) => Box::new(map.iter().map(|(&t, &l)| (t, l))),
        }
    }
}

impl LineTally {
    fn took(&mut self, trace: &Arc<str>, thread: u32, lock: u32) {
        if self.one_thread_several {
            return;
        }
        let at = match self.first_lock.iter().position(|(t, _)| t == trace) {
            Some(at) => at,
            None => {
                self.first_lock
                    .push((Arc::clone(trace), ThreadLocks::default()));
                self.first_lock.len() - 1
            }
        };
        if self.first_lock[at].1.took(thread, lock) {
            self.one_thread_several = true;
            self.first_lock = Vec::new();
            self.exited = Vec::new();
        }
    }

    /// Thread `thread` of `trace`, which took a lock there, has exited (threads come in
    /// order).
    fn exited_in(&mut self, trace: &Arc<str>, thread: u32) {
        let at = match self.exited.iter().position(|(t, _)| t == trace) {
            Some(at) => at,
            None => {
                self.exited.push((Arc::clone(trace), Vec::new()));
                self.exited.len() - 1
            }
        };
        let threads = &mut self.exited[at].1;
        if threads.last() != Some(&thread) {
            threads.push(thread);
        }
    }
}

impl HintTally {
    pub fn of_runs(runs: &[Run]) -> Self {
        let mut tally = HintTally::default();
        for run in runs {
            tally.add(Self::of_run(run));
        }
        tally
    }

    /// The index of lock name `name` in [`HintTally::lock_names`].
    fn lock_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.lock_ids.get(name) {
            return id;
        }
        let name: Arc<str> = Arc::from(name);
        let id = self.lock_names.len() as u32;
        self.lock_names.push(Arc::clone(&name));
        self.lock_ids.insert(name, id);
        id
    }

    fn of_run(run: &Run) -> Self {
        let mut t = HintTally {
            total: 0,
            ..HintTally::default()
        };
        // The sites of each line, to tell what each thread takes there.
        let mut line_of_site: HashMap<SiteId, (String, String)> = HashMap::new();
        let taken = taken_by_lock_and_site(run);
        t.total = taken.total;
        for ((site, lock), n) in taken.counts {
            let Some(loc) = run.sites.get(&site) else {
                continue;
            };
            let Some(function) = &loc.function else {
                continue;
            };
            let function = without_parameters(function).to_string();
            if loc.machinery_only {
                *t.unrecorded.entry(function).or_default() += n;
                continue;
            }
            let Some(file) = &loc.file else {
                *t.without_lines.entry(function).or_default() += n;
                continue;
            };
            let key = (function, format!("{}:{}", short_path(file), loc.line));
            let e = t.lines.entry(key.clone()).or_default();
            e.acquisitions += n;
            if let Some(l) = run.locks.get(lock as usize) {
                e.locks.insert(l.name.clone());
            }
            e.thread_entry |= is_thread_entry(loc);
            line_of_site.insert(site, key);
        }
        let source: Arc<str> = Arc::from(run.source.as_str());
        let mut lock_ids: Vec<Option<u32>> = vec![None; run.locks.len()];
        // By thread, so that a line's threads are noted from the first one on.
        let mut threads = taken.threads;
        threads.sort_unstable_by_key(|&(_, _, thread)| thread);
        for (site, lock, thread) in threads {
            let (Some(line), Some(l)) = (line_of_site.get(&site), run.locks.get(lock as usize))
            else {
                continue;
            };
            let id = match lock_ids[lock as usize] {
                Some(id) => id,
                None => *lock_ids[lock as usize].insert(t.lock_id(&l.name)),
            };
            if let Some(e) = t.lines.get_mut(line) {
                e.took(&source, thread, id);
                if run.whole_life(thread).is_some() && !e.one_thread_several {
                    e.exited_in(&source, thread);
                }
            }
        }
        if !run.segments_follow {
            t.ended.push(source);
        }
        t
    }

    /// Adds another run's, segment's or trace's counts.
    pub fn add(&mut self, other: HintTally) {
        self.total += other.total;
        let ids: Vec<u32> = other
            .lock_names
            .iter()
            .map(|name| self.lock_id(name))
            .collect();
        for (key, l) in other.lines {
            let e = self.lines.entry(key).or_default();
            e.acquisitions += l.acquisitions;
            e.locks.extend(l.locks);
            e.one_thread_several |= l.one_thread_several;
            for (trace, threads) in &l.first_lock {
                for (thread, lock) in threads.taken() {
                    e.took(trace, thread, ids[lock as usize]);
                }
            }
            for (trace, exited) in &l.exited {
                if let Some((_, threads)) = e.first_lock.iter_mut().find(|(t, _)| t == trace) {
                    for &thread in exited {
                        threads.forget(thread);
                    }
                    threads.compact();
                }
            }
            e.thread_entry |= l.thread_entry;
        }
        // A trace that ended takes no lock any more: what its threads took first is let go.
        if !other.ended.is_empty() {
            for l in self.lines.values_mut() {
                l.first_lock
                    .retain(|(trace, _)| !other.ended.contains(trace));
            }
            for trace in other.ended {
                if !self.ended.contains(&trace) {
                    self.ended.push(trace);
                }
            }
        }
        for (f, n) in other.unrecorded {
            *self.unrecorded.entry(f).or_default() += n;
        }
        for (f, n) in other.without_lines {
            *self.without_lines.entry(f).or_default() += n;
        }
    }

    pub fn hints(&self) -> Vec<String> {
        let total = self.total;
        let mut hints = Vec::new();
        if !self.without_lines.is_empty() {
            let n: u64 = self.without_lines.values().sum();
            let mut functions: Vec<(&String, &u64)> = self.without_lines.iter().collect();
            functions.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let named: Vec<String> = functions
                .iter()
                .take(3)
                .map(|(f, _)| format!("`{f}`"))
                .collect();
            let more = match functions.len().saturating_sub(3) {
                0 => String::new(),
                k => format!(" and {k} more"),
            };
            hints.push(format!(
                "no line information: {n} of {total} lock {} {} in {}{more}, which {} no file \
                 and line (built without -g, or stripped); compile with -g to see the lines",
                plural(n, "acquisition", "acquisitions"),
                if n == 1 { "is" } else { "are" },
                named.join(", "),
                if functions.len() == 1 { "has" } else { "have" },
            ));
        }
        if let Some(((function, at), line)) = self.lines.iter().max_by_key(|(_, l)| l.acquisitions)
        {
            let n = line.acquisitions;
            if 2 * n > total
                && line.locks.len() >= 2
                && line.one_thread_several
                && !line.thread_entry
            {
                hints.push(format!(
                    "most lock acquisitions ({n} of {total}) are at one line of `{function}` \
                     ({at}), for {} locks: is it a lock wrapper? `foresight record --wrapper \
                     {function}` reports its callers instead",
                    line.locks.len()
                ));
            }
        }
        for (function, &n) in &self.unrecorded {
            hints.push(format!(
                "{n} lock {} inside `{function}`, a wrapper whose callers the trace does not \
                 have: record with `foresight record --wrapper {function}` to see them",
                if n == 1 {
                    "acquisition is"
                } else {
                    "acquisitions are"
                }
            ));
        }
        hints
    }
}

fn plural<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// The acquisitions of a run that the trace holds as its own: granted, and acquired in this
/// segment (not carried in from an earlier one).
fn counted(run: &Run) -> impl Iterator<Item = &crate::model::Acquisition> {
    run.acquisitions
        .iter()
        .skip(run.carried as usize)
        .filter(|a| a.acquired != u32::MAX)
}

/// Whether the caller recorded after the program's frame is where the C library starts a
/// thread: the program's frame is then a thread's start routine (known only when callers were
/// recorded, `--stack-depth` 2 and more).
fn is_thread_entry(loc: &crate::sites::Location) -> bool {
    loc.stack.get(1).is_some_and(|caller| {
        let f = caller.split([' ', '+']).next().unwrap_or("");
        matches!(
            f,
            "start_thread" | "clone" | "clone3" | "__clone" | "__clone3"
        )
    })
}

/// What a run's counted acquisitions take where: their number, how many take each lock at
/// each site, and which threads do ([`LineTally::took`]).
struct Taken {
    total: u64,
    /// (site, lock) → acquisitions (those at sites the run does not name left out).
    counts: Vec<((SiteId, u32), u64)>,
    /// Distinct (site, lock, thread), in no particular order (`took` does not depend on it).
    threads: Vec<(SiteId, u32, u32)>,
}

/// How many of the run's acquisitions take each lock at each site (those at sites the run does
/// not name left out), and by which threads: counted first, so that a site is named once per
/// lock, not once per acquisition (a long trace takes the same few locks at the same few sites
/// millions of times). Counted in one pass over a table by (lock, site) when the site ids are
/// small (the recorder's are dense) and the table is — an entry's first thread, and a bit per
/// thread for an entry more threads take —, else per lock in a short list of sites, past which
/// a map, and the threads in a set looked up when a thread takes a (lock, site) it did not
/// take lately.
fn taken_by_lock_and_site(run: &Run) -> Taken {
    /// Entries of the (lock, site) table at most.
    const TABLE: usize = 1 << 18;
    let (locks, sites, threads) = (run.locks.len(), run.sites.len(), run.threads.len());
    let max_site = run.sites.keys().copied().max().unwrap_or(0) as usize;
    if max_site < TABLE && locks.saturating_mul(sites) <= TABLE {
        let mut slot = vec![u32::MAX; max_site + 1];
        let mut ids = Vec::with_capacity(sites);
        for &site in run.sites.keys() {
            slot[site as usize] = ids.len() as u32;
            ids.push(site);
        }
        let mut total = 0u64;
        let mut counts = vec![0u64; locks * sites];
        let mut first = vec![u32::MAX; locks * sites];
        let mut more: Vec<Vec<u64>> = vec![Vec::new(); locks * sites];
        for a in counted(run) {
            total += 1;
            let Some(&k) = slot.get(a.site as usize) else {
                continue;
            };
            if k == u32::MAX || a.lock as usize >= locks {
                continue;
            }
            let i = a.lock as usize * sites + k as usize;
            counts[i] += 1;
            if first[i] == u32::MAX {
                first[i] = a.thread;
            } else if first[i] != a.thread {
                let bits = &mut more[i];
                let w = a.thread as usize / 64;
                if w >= bits.len() {
                    bits.resize(threads.div_ceil(64).max(w + 1), 0);
                }
                bits[w] |= 1 << (a.thread % 64);
            }
        }
        // Of the exact length: a segment of 16,384 threads that each take a lock lists as
        // many, 12 bytes each, which doubling would have made room for twice.
        let listed = counts
            .iter()
            .zip(&more)
            .filter(|&(&n, _)| n > 0)
            .map(|(_, bits)| 1 + bits.iter().map(|w| w.count_ones() as usize).sum::<usize>())
            .sum();
        let mut taken = Taken {
            total,
            counts: Vec::new(),
            threads: Vec::with_capacity(listed),
        };
        for (i, &n) in counts.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let (site, lock) = (ids[i % sites], (i / sites) as u32);
            taken.counts.push(((site, lock), n));
            taken.threads.push((site, lock, first[i]));
            for (w, &word) in more[i].iter().enumerate() {
                let mut word = word;
                while word != 0 {
                    let thread = (w * 64) as u32 + word.trailing_zeros();
                    word &= word - 1;
                    if thread != first[i] {
                        taken.threads.push((site, lock, thread));
                    }
                }
            }
        }
        return taken;
    }
    const RECENT: usize = 4;
    let mut recent: Vec<[Option<(u32, SiteId)>; RECENT]> = vec![[None; RECENT]; threads];
    let mut seen: foldhash::HashSet<(SiteId, u32, u32)> = foldhash::HashSet::default();
    let mut total = 0u64;
    for a in counted(run) {
        total += 1;
        let pair = Some((a.lock, a.site));
        if let Some(r) = recent.get_mut(a.thread as usize) {
            if r.contains(&pair) {
                continue;
            }
            r.rotate_right(1);
            r[0] = pair;
        }
        seen.insert((a.site, a.lock, a.thread));
    }
    // As the table: only the sites the run names, and locks it has.
    let named = |site: &SiteId, lock: u32| run.sites.contains_key(site) && (lock as usize) < locks;
    Taken {
        total,
        counts: acquisitions_by_lock_and_site_in_lists(run),
        threads: seen
            .into_iter()
            .filter(|(site, lock, _)| named(site, *lock))
            .collect(),
    }
}

/// [`taken_by_lock_and_site`]'s counts without the table: per lock, a short list of sites, past
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
    for a in counted(run) {
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
    fn a_thread_taking_two_locks_at_a_line_is_seen_across_segments_until_its_trace_ends() {
        let trace: Arc<str> = Arc::from("requests.trace");
        let line = ("handle".to_string(), "server.c:12".to_string());
        let segment = |took: &[(u32, &str)], ended: bool| {
            let mut t = HintTally::default();
            for &(thread, lock) in took {
                let id = t.lock_id(lock);
                t.lines
                    .entry(line.clone())
                    .or_default()
                    .took(&trace, thread, id);
            }
            if ended {
                t.ended.push(Arc::clone(&trace));
            }
            t
        };
        let threads = |t: &HintTally| -> Vec<(u32, String)> {
            t.lines[&line]
                .first_lock
                .iter()
                .flat_map(|(_, l)| l.taken())
                .map(|(thread, id)| (thread, t.lock_names[id as usize].to_string()))
                .collect()
        };
        let mut tally = segment(&[(7, "m1"), (9, "m2")], false);
        // A later segment names its locks in another order, and has a thread below the
        // first one's.
        tally.add(segment(&[(5, "m2"), (7, "m1"), (9, "m2")], false));
        assert!(!tally.lines[&line].one_thread_several);
        assert_eq!(
            threads(&tally),
            [
                (5, "m2".to_string()),
                (7, "m1".to_string()),
                (9, "m2".to_string())
            ]
        );
        let mut several = tally.clone();
        several.add(segment(&[(5, "m1")], true));
        assert!(several.lines[&line].one_thread_several);
        assert!(several.lines[&line].first_lock.is_empty());
        // Two threads far apart: a map, not a list of 10^5.
        let mut far = segment(&[(3, "m1"), (100_000, "m2")], false);
        assert!(matches!(
            far.lines[&line].first_lock[0].1,
            ThreadLocks::Sparse(_)
        ));
        far.add(segment(&[(100_000, "m2"), (3, "m2")], false));
        assert!(far.lines[&line].one_thread_several);
        // A thread that exited takes no lock any more: what it took first is let go, and
        // the list starts at the first thread alive.
        let mut alive = segment(&[(20, "m1"), (21, "m2")], false);
        let mut exits = segment(&[(20, "m1"), (22, "m1")], false);
        for thread in [20, 22] {
            exits
                .lines
                .get_mut(&line)
                .unwrap()
                .exited_in(&trace, thread);
        }
        alive.add(exits);
        assert_eq!(threads(&alive), [(21, "m2".to_string())]);
        assert!(matches!(
            alive.lines[&line].first_lock[0].1,
            ThreadLocks::ByIndex { from: 21, .. }
        ));
        alive.add(segment(&[(21, "m1")], false));
        assert!(alive.lines[&line].one_thread_several);
        // The trace's last segment lets go of what its threads took first.
        tally.add(segment(&[(11, "m1")], true));
        assert!(!tally.lines[&line].one_thread_several);
        assert!(tally.lines[&line].first_lock.is_empty());
    }

    #[test]
    fn acquisitions_counted_by_table_and_by_lists_agree() {
        use crate::model::{Acquisition, LockModel};
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
        let acquisition = |lock, site| Acquisition::blocking_write(0, lock, site, 0);
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
        let table = sorted(taken_by_lock_and_site(&run).counts);
        let lists = sorted(acquisitions_by_lock_and_site_in_lists(&run));
        assert_eq!(table, lists);
        assert_eq!(table.len(), 12);
        assert_eq!(table.iter().map(|e| e.1).sum::<u64>(), 160);
    }
}
