//! The lock-order graph (seed 001): nodes are lock *classes*, an edge A → B each time a thread
//! acquires a lock of class B while holding one of class A, with witnesses. Cumulative over any
//! number of traces: classes are matched by name (`model::LockModel::class`), never by id.
//!
//! A trylock creates no edge to the lock it tried (it never waits), but once held it is in the
//! held set of later acquisitions. The mutex re-taken when a condition wait returns does wait,
//! so it creates edges from the other locks held.
//!
//! Beside the class graph, `InstanceGraph` is the same relation over the lock *objects* of one
//! trace: deadlock prediction needs concrete locks of one execution.

use foldhash::{HashMap, HashMapExt};

use crate::model::{AcquireHow, Acquisition, IndexMap, Run};
use crate::stream::Mode;

/// The strongly connected components of a graph given by its adjacency lists (what `graph`
/// colours and `--scc-only` keeps).
pub use crate::cycles::strongly_connected_components;

/// At most this many witnesses are kept per class edge (distinct thread and site pairs).
pub(crate) const WITNESSES_PER_EDGE: usize = 8;

/// One acquisition that made an edge: in run `run`, acquisition `acquisition` requested while
/// acquisition `held` was held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeWitness {
    /// Index of the run, in the order the runs were added.
    pub run: usize,
    pub(crate) held: u32,
    /// The acquisition (index in the run's `acquisitions`) requested while `held` was held.
    pub acquisition: u32,
}

/// The (held, acquired) mode pairs an edge was seen with, as a 4-bit set.
pub(crate) fn mode_bit(held: Mode, acquired: Mode) -> u8 {
    let h = (held == Mode::Read) as u8;
    let a = (acquired == Mode::Read) as u8;
    1 << (h * 2 + a)
}

/// An edge between two lock classes: a thread acquired `to` while holding `from`.
#[derive(Clone, Debug)]
pub struct ClassEdge {
    /// The class held (index in [`LockOrderGraph::classes`]).
    pub from: usize,
    /// The class acquired.
    pub to: usize,
    /// How many acquisitions made this edge.
    pub count: u64,
    pub(crate) modes: u8,
    /// Acquisitions that made it, at most `WITNESSES_PER_EDGE`, distinct in thread and sites.
    pub witnesses: Vec<EdgeWitness>,
    /// The runs this edge was seen in.
    pub(crate) runs: Vec<usize>,
    /// Seen before a flight recorder's window (FORMAT.md §7.15): (run, index in its
    /// `Run::earlier`), at most `WITNESSES_PER_EDGE`. An edge with no `witnesses` was seen only
    /// there: no reordering of the window can use it.
    pub(crate) earlier: Vec<(usize, u32)>,
}

/// The lock-order graph of one or more runs: an edge A → B for each lock class acquired while
/// another was held (`foresight graph` draws it; the cycle searches read it).
#[derive(Debug, Default)]
pub struct LockOrderGraph {
    /// The classes, by node index (the class names of [`crate::model::LockModel::class`]).
    pub classes: Vec<String>,
    class_index: HashMap<String, usize>,
    /// The edges, in the order first seen.
    pub edges: Vec<ClassEdge>,
    /// Dense class indices as keys: the cheap hasher (the cycle searches look edges up once
    /// per cycle edge).
    edge_index: IndexMap<(usize, usize), usize>,
}

impl LockOrderGraph {
    pub(crate) fn class_id(&mut self, name: &str) -> usize {
        if let Some(&i) = self.class_index.get(name) {
            return i;
        }
        let i = self.classes.len();
        self.classes.push(name.to_string());
        self.class_index.insert(name.to_string(), i);
        i
    }

    /// The node of a class name, when the graph has it.
    pub(crate) fn class_index(&self, name: &str) -> Option<usize> {
        self.class_index.get(name).copied()
    }

    pub(crate) fn edge(&self, from: usize, to: usize) -> Option<&ClassEdge> {
        self.edge_index.get(&(from, to)).map(|&i| &self.edges[i])
    }

    /// Adds every edge of one trace (its index among the runs is `run_index`). Linear in the
    /// number of acquisitions times the nesting depth.
    pub fn add_run(&mut self, run_index: usize, run: &Run) {
        let classes: Vec<usize> = run.locks.iter().map(|l| self.class_id(&l.class)).collect();
        // Subclassed acquisitions: (lock, subclass) → class, so that names are made once.
        let mut subclassed: HashMap<(u32, u32), usize> = HashMap::new();
        // Inlined for the common case, a lock's own class; a subclass is looked up aside.
        #[inline(always)]
        fn class_of(
            graph: &mut LockOrderGraph,
            classes: &[usize],
            subclassed: &mut HashMap<(u32, u32), usize>,
            run: &Run,
            a: &Acquisition,
        ) -> usize {
            if a.subclass == 0 {
                classes[a.lock as usize]
            } else {
                graph.subclass_id(subclassed, run, a)
            }
        }
        self.add_earlier(run_index, run);
        // The edge counted last: a loop's acquisitions count the same edge over and over.
        let mut last: Option<((usize, usize), usize)> = None;
        for (i, acq) in run.acquisitions.iter().enumerate() {
            if acq.how == AcquireHow::Try {
                continue;
            }
            for &h in run.held(acq) {
                let held = &run.acquisitions[h as usize];
                let from = class_of(self, &classes, &mut subclassed, run, held);
                let to = class_of(self, &classes, &mut subclassed, run, acq);
                let e = match last {
                    Some((key, e)) if key == (from, to) => e,
                    _ => {
                        let e = self.edge_id(from, to);
                        last = Some(((from, to), e));
                        e
                    }
                };
                let edge = self.count_at(e, 1, mode_bit(held.mode, acq.mode), run_index);
                if edge.witnesses.len() < WITNESSES_PER_EDGE {
                    let new = EdgeWitness {
                        run: run_index,
                        held: h,
                        acquisition: i as u32,
                    };
                    let same = |w: &EdgeWitness| {
                        if w.run != run_index {
                            return false;
                        }
                        let (wa, wh) = (
                            &run.acquisitions[w.acquisition as usize],
                            &run.acquisitions[w.held as usize],
                        );
                        wa.thread == acq.thread && wa.site == acq.site && wh.site == held.site
                    };
                    if !edge.witnesses.iter().any(same) {
                        edge.witnesses.push(new);
                    }
                }
            }
        }
    }

    /// The class of a subclassed acquisition, made on first sight.
    #[cold]
    #[inline(never)]
    fn subclass_id(
        &mut self,
        subclassed: &mut HashMap<(u32, u32), usize>,
        run: &Run,
        a: &Acquisition,
    ) -> usize {
        *subclassed
            .entry((a.lock, a.subclass))
            .or_insert_with(|| self.class_id(&run.acquisition_class(a)))
    }

    /// Adds the edges a flight recorder saw before the window of run `run_index` (evidence
    /// `earlier`: they count in the class graph, but never in an instance cycle).
    fn add_earlier(&mut self, run_index: usize, run: &Run) {
        for (i, e) in run.earlier.iter().enumerate() {
            let from = self.class_id(&run.locks[e.held as usize].class);
            let to = self.class_id(&run.locks[e.lock as usize].class);
            let bit = mode_bit(Mode::Write, Mode::Write);
            let edge = self.count_edge(from, to, e.count, bit, run_index);
            if edge.earlier.len() < WITNESSES_PER_EDGE {
                edge.earlier.push((run_index, i as u32));
            }
        }
    }

    /// The edges of a class cycle (`cycle[i]` → `cycle[i + 1]`, the last back to the first)
    /// into `edges`, which is reused: a dense graph has hundreds of thousands of cycles.
    pub(crate) fn cycle_edges<'g>(&'g self, cycle: &[usize], edges: &mut Vec<&'g ClassEdge>) {
        let k = cycle.len();
        edges.clear();
        edges.extend((0..k).map(|i| {
            self.edge(cycle[i], cycle[(i + 1) % k])
                .expect("cycle edges exist")
        }));
    }

    /// Adds `count` occurrences of the class edge `from` → `to` seen with `modes` in trace
    /// `trace`, without witnesses (merging per-trace graphs: `merge.rs`).
    pub(crate) fn add_class_edge(
        &mut self,
        from: usize,
        to: usize,
        count: u64,
        modes: u8,
        trace: usize,
    ) {
        self.count_edge(from, to, count, modes, trace);
    }

    /// The class edge `from` → `to`, made if new, with `count` more occurrences in `modes`
    /// seen in run `run`.
    fn count_edge(
        &mut self,
        from: usize,
        to: usize,
        count: u64,
        modes: u8,
        run: usize,
    ) -> &mut ClassEdge {
        let e = self.edge_id(from, to);
        self.count_at(e, count, modes, run)
    }

    /// The index of the edge `from` → `to`, added (uncounted) if new.
    fn edge_id(&mut self, from: usize, to: usize) -> usize {
        *self.edge_index.entry((from, to)).or_insert_with(|| {
            self.edges.push(ClassEdge {
                from,
                to,
                count: 0,
                modes: 0,
                witnesses: Vec::new(),
                runs: Vec::new(),
                earlier: Vec::new(),
            });
            self.edges.len() - 1
        })
    }

    /// Counts `count` more of edge `e` (its index), seen in run `run` with the mode pair
    /// `modes`.
    fn count_at(&mut self, e: usize, count: u64, modes: u8, run: usize) -> &mut ClassEdge {
        let edge = &mut self.edges[e];
        edge.count += count;
        edge.modes |= modes;
        if edge.runs.last() != Some(&run) {
            edge.runs.push(run);
        }
        edge
    }

    /// The node of an acquisition's class (with its subclass), when the graph has it.
    pub(crate) fn acquisition_class(&self, run: &Run, a: &Acquisition) -> Option<usize> {
        if a.subclass == 0 {
            self.class_index(&run.locks[a.lock as usize].class)
        } else {
            self.class_index(&run.acquisition_class(a))
        }
    }

    /// Successor lists, for the cycle search.
    pub fn adjacency(&self) -> Vec<Vec<usize>> {
        let mut adj = vec![Vec::new(); self.classes.len()];
        for e in &self.edges {
            adj[e.from].push(e.to);
        }
        adj
    }
}

/// Whether a cycle of edges whose mode sets are `modes` (edge i goes from node i to node i+1)
/// can block at every node: at node i+1, the request of edge i and the holding of edge i+1
/// must exclude each other (read-read never blocks).
pub(crate) fn modes_can_block(modes: &[u8]) -> bool {
    let k = modes.len();
    if k == 0 {
        return false;
    }
    // Try each choice for the first edge, then walk around keeping the reachable choices.
    (0..4u8).any(|first| {
        if modes[0] & (1 << first) == 0 {
            return false;
        }
        let mut reachable: u8 = 1 << first;
        for m in modes.iter().skip(1) {
            let mut next = 0u8;
            for prev in 0..4u8 {
                if reachable & (1 << prev) == 0 {
                    continue;
                }
                for cur in 0..4u8 {
                    if m & (1 << cur) != 0 && bits_block(prev, cur) {
                        next |= 1 << cur;
                    }
                }
            }
            reachable = next;
        }
        (0..4u8).any(|last| reachable & (1 << last) != 0 && bits_block(last, first))
    })
}

/// Edge `a`'s request against edge `b`'s holding (bit = held_read * 2 + acquired_read).
fn bits_block(a: u8, b: u8) -> bool {
    let a_request_read = a & 1 == 1;
    let b_held_read = b & 2 == 2;
    !(a_request_read && b_held_read)
}

/// The instance-level edges of one trace: lock object → lock object, each with every
/// (held, request) pair of acquisitions that realises it, in trace order. Keeping them all (8
/// bytes each) lets prediction pick occurrences of the different edges that are close in the
/// trace, which are the ones likeliest to be concurrent.
#[derive(Debug, Default)]
pub(crate) struct InstanceGraph {
    pub(crate) edges: HashMap<(u32, u32), Vec<(u32, u32)>>,
    pub(crate) adjacency: Vec<Vec<usize>>,
}

impl InstanceGraph {
    pub(crate) fn build(run: &Run) -> Self {
        // Each edge's list by index; per requested lock, the held lock of the edge it was last
        // requested under and that edge's list: a loop that takes its locks in one order finds
        // its list without hashing.
        let mut index: HashMap<(u32, u32), u32> = HashMap::new();
        let mut lists: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut last: Vec<(u32, u32)> = vec![(u32::MAX, 0); run.locks.len()];
        for (i, acq) in run.acquisitions.iter().enumerate() {
            if acq.how == AcquireHow::Try {
                continue;
            }
            for &h in run.held(acq) {
                let held = run.acquisitions[h as usize].lock;
                let list = match last.get(acq.lock as usize) {
                    Some(&(l, list)) if l == held => list,
                    _ => {
                        let next = lists.len() as u32;
                        let list = *index.entry((held, acq.lock)).or_insert(next);
                        if list == next {
                            lists.push(Vec::new());
                        }
                        if let Some(slot) = last.get_mut(acq.lock as usize) {
                            *slot = (held, list);
                        }
                        list
                    }
                };
                lists[list as usize].push((h, i as u32));
            }
        }
        let edges: HashMap<(u32, u32), Vec<(u32, u32)>> = index
            .into_iter()
            .map(|(k, list)| (k, std::mem::take(&mut lists[list as usize])))
            .collect();
        let mut adjacency = vec![Vec::new(); run.locks.len()];
        let mut keys: Vec<(u32, u32)> = edges.keys().copied().collect();
        keys.sort_unstable();
        for (from, to) in keys {
            adjacency[from as usize].push(to as usize);
        }
        InstanceGraph { edges, adjacency }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_read_at_a_node_breaks_the_cycle() {
        let rr = mode_bit(Mode::Read, Mode::Read);
        let ww = mode_bit(Mode::Write, Mode::Write);
        assert!(modes_can_block(&[ww, ww]));
        assert!(!modes_can_block(&[rr, rr]));
        assert!(modes_can_block(&[rr | ww, rr]));
        // Held for write, requested for read on both edges: each request meets a writer.
        let wr = mode_bit(Mode::Write, Mode::Read);
        assert!(modes_can_block(&[wr, wr]));
    }
}
