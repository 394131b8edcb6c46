//! Elementary cycles of a directed graph, of any length (or up to one the user sets), shortest
//! first, with a work budget.
//!
//! Lock graphs are usually small and sparse, but a trace of a program that nests many locks of
//! many instances can make a dense one, where the number of elementary cycles is exponential.
//! So the enumeration is bounded by a budget of search steps, and by a length only when the
//! user asks for one. When either cuts the enumeration, the result names the strongly
//! connected components that were not finished, and [`shortest_cycle`] gives one cycle of each
//! so that a cut never hides a component's cycles entirely.
//!
//! Method: strongly connected components first (a cycle never leaves one), then for each
//! length k = 1, 2, … and each start node s, a depth-first search for paths of exactly k nodes
//! through nodes greater than s that return to s. Every elementary cycle is found exactly
//! once, rotated to start at its smallest node. A component is finished at the first length
//! where no such path reaches k nodes (no longer path exists either). Work is O(lengths ·
//! paths explored), bounded by the budget.

/// What the visitor of [`for_each_cycle`] wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// No more cycles of this strongly connected component (the one of the cycle just given).
    SkipComponent,
    Stop,
}

/// How a search went.
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// The budget ran out before every cycle up to the length was enumerated.
    pub truncated: bool,
    /// The length limit stopped the search in a component that has longer paths, so maybe
    /// longer cycles.
    pub length_cut: bool,
    /// The components (by id) whose enumeration the budget or the length limit cut: each holds
    /// cycles that were not visited, or may.
    pub cut_components: Vec<usize>,
    pub steps: u64,
}

/// The cycles found; each is a list of nodes, the edge from the last back to the first implied.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct Cycles {
    pub cycles: Vec<Vec<usize>>,
    /// The budget ran out before every cycle up to the length was enumerated.
    pub truncated: bool,
}

/// Every elementary cycle up to `max_len` (`None`: any length), collected (for small graphs
/// and tests: a dense graph has exponentially many; [`for_each_cycle`] holds none of them).
#[cfg(test)]
pub fn elementary_cycles(adjacency: &[Vec<usize>], max_len: Option<usize>, budget: u64) -> Cycles {
    let scc = strongly_connected_components(adjacency);
    let mut cycles = Vec::new();
    let search = for_each_cycle(adjacency, &scc, max_len, budget, |_, c| {
        cycles.push(c.to_vec());
        Flow::Continue
    });
    Cycles {
        cycles,
        truncated: search.truncated,
    }
}

/// Gives each elementary cycle up to `max_len` locks (`None`: any length) to `visit` with its
/// component (`scc`, from [`strongly_connected_components`]), shortest first, then by smallest
/// node; the slice is only valid during the call. Memory: the graph's nodes and one path,
/// whatever the number of cycles.
pub fn for_each_cycle(
    adjacency: &[Vec<usize>],
    scc: &[usize],
    max_len: Option<usize>,
    budget: u64,
    mut visit: impl FnMut(usize, &[usize]) -> Flow,
) -> Search {
    let n = adjacency.len();
    let mut out = Search::default();
    let mut path: Vec<usize> = Vec::new();
    let mut on_path = vec![false; n];
    let components = scc.iter().map(|&c| c + 1).max().unwrap_or(0);
    let mut size = vec![0usize; components];
    for &c in scc {
        size[c] += 1;
    }
    // Finished (every cycle visited), or left by the visitor's choice.
    let mut done = vec![false; components];
    let mut skipped = vec![false; components];
    // Per component, whether some path of the current length reached its full length.
    let mut reached = vec![false; components];
    let longest = size.iter().copied().max().unwrap_or(0);
    let last = max_len.unwrap_or(usize::MAX).min(longest);
    'lengths: for k in 1..=last {
        reached.iter_mut().for_each(|r| *r = false);
        for s in 0..n {
            if done[scc[s]] || skipped[scc[s]] || size[scc[s]] < k {
                continue;
            }
            // A node with no edge inside its component is on no cycle (a self-loop counts).
            if !adjacency[s].iter().any(|&w| scc[w] == scc[s]) {
                continue;
            }
            path.clear();
            path.push(s);
            on_path[s] = true;
            let mut walk = Walk {
                adjacency,
                scc,
                s,
                k,
                path: &mut path,
                on_path: &mut on_path,
                reached: &mut reached,
                out: &mut out,
                budget,
                visit: &mut visit,
            };
            let flow = walk.search();
            on_path[s] = false;
            match flow {
                Step::Go => {}
                Step::SkipComponent => skipped[scc[s]] = true,
                Step::Stop => return out,
                Step::OutOfBudget => {
                    out.truncated = true;
                    break 'lengths;
                }
            }
        }
        for c in 0..components {
            // No path of k nodes: no path, so no cycle, of more.
            if !reached[c] || size[c] <= k {
                done[c] = true;
            }
        }
    }
    // Components with a cycle (a node with an edge inside its own) that were not finished.
    for c in 0..components {
        if done[c] || skipped[c] {
            continue;
        }
        let has_cycle = (0..n).any(|v| scc[v] == c && adjacency[v].iter().any(|&w| scc[w] == c));
        if has_cycle {
            out.cut_components.push(c);
            if !out.truncated {
                out.length_cut = true;
            }
        }
    }
    out
}

/// A shortest cycle of component `c` (breadth-first from each of its nodes, within `budget`
/// steps), rotated to start at its smallest node; `None` if the component has none or the
/// budget ran out first. Used for a component whose enumeration was cut, so that it is still
/// reported with one of its cycles.
pub fn shortest_cycle(
    adjacency: &[Vec<usize>],
    scc: &[usize],
    c: usize,
    budget: u64,
) -> Option<Vec<usize>> {
    let n = adjacency.len();
    let mut best: Option<Vec<usize>> = None;
    let mut steps = 0u64;
    let mut parent = vec![usize::MAX; n];
    let mut queue = std::collections::VecDeque::new();
    for s in (0..n).filter(|&v| scc[v] == c) {
        parent.iter_mut().for_each(|p| *p = usize::MAX);
        queue.clear();
        queue.push_back(s);
        parent[s] = s;
        'bfs: while let Some(v) = queue.pop_front() {
            for &w in &adjacency[v] {
                steps += 1;
                if steps > budget {
                    return best;
                }
                if scc[w] != c {
                    continue;
                }
                if w == s {
                    let mut cycle = vec![v];
                    let mut u = v;
                    while u != s {
                        u = parent[u];
                        cycle.push(u);
                    }
                    cycle.reverse();
                    if best.as_ref().is_none_or(|b| cycle.len() < b.len()) {
                        best = Some(cycle);
                    }
                    break 'bfs;
                }
                if parent[w] == usize::MAX {
                    parent[w] = v;
                    queue.push_back(w);
                }
            }
        }
        if best.as_ref().is_some_and(|b| b.len() == 1) {
            break;
        }
    }
    let mut cycle = best?;
    let at = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
    cycle.rotate_left(at);
    Some(cycle)
}

enum Step {
    Go,
    SkipComponent,
    Stop,
    OutOfBudget,
}

struct Walk<'a, F> {
    adjacency: &'a [Vec<usize>],
    scc: &'a [usize],
    s: usize,
    k: usize,
    path: &'a mut Vec<usize>,
    on_path: &'a mut [bool],
    reached: &'a mut [bool],
    out: &'a mut Search,
    budget: u64,
    visit: &'a mut F,
}

impl<F: FnMut(usize, &[usize]) -> Flow> Walk<'_, F> {
    /// Extends `path` (which starts at `s`) to exactly `k` nodes and closes it.
    fn search(&mut self) -> Step {
        let v = *self.path.last().expect("path starts at s");
        let s = self.s;
        for &w in &self.adjacency[v] {
            self.out.steps += 1;
            if self.out.steps > self.budget {
                return Step::OutOfBudget;
            }
            if self.path.len() == self.k {
                self.reached[self.scc[s]] = true;
                if w == s {
                    match (self.visit)(self.scc[s], self.path) {
                        Flow::Continue => {}
                        Flow::SkipComponent => return Step::SkipComponent,
                        Flow::Stop => return Step::Stop,
                    }
                }
                continue;
            }
            if w <= s || self.on_path[w] || self.scc[w] != self.scc[s] {
                continue;
            }
            self.path.push(w);
            self.on_path[w] = true;
            let step = self.search();
            self.on_path[w] = false;
            self.path.pop();
            if !matches!(step, Step::Go) {
                return step;
            }
        }
        Step::Go
    }
}

/// Tarjan's algorithm, iterative (graphs from big traces are deep). Returns a component id per
/// node.
pub fn strongly_connected_components(adjacency: &[Vec<usize>]) -> Vec<usize> {
    let n = adjacency.len();
    const UNSEEN: usize = usize::MAX;
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut comp = vec![UNSEEN; n];
    let mut next_index = 0;
    let mut next_comp = 0;
    let mut call: Vec<(usize, usize)> = Vec::new();
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        call.push((root, 0));
        while let Some(&mut (v, ref mut edge)) = call.last_mut() {
            if *edge == 0 && index[v] == UNSEEN {
                index[v] = next_index;
                low[v] = next_index;
                next_index += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = adjacency[v].get(*edge) {
                *edge += 1;
                if index[w] == UNSEEN {
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            call.pop();
            if let Some(&(parent, _)) = call.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp[w] = next_comp;
                    if w == v {
                        break;
                    }
                }
                next_comp += 1;
            }
        }
    }
    comp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_elementary_cycle_once_shortest_first() {
        // 0 ⇄ 1, 1 → 2 → 0, 2 → 2.
        let adj = vec![vec![1], vec![0, 2], vec![0, 2]];
        let c = elementary_cycles(&adj, None, 1_000);
        assert_eq!(c.cycles, vec![vec![2], vec![0, 1], vec![0, 1, 2]]);
        assert!(!c.truncated);
    }

    #[test]
    fn any_length_by_default_and_a_cut_names_its_component() {
        // A ring of five, 0 → 1 → 2 → 3 → 4 → 0, and a separate pair 5 ⇄ 6.
        let mut adj: Vec<Vec<usize>> = (0..5).map(|v| vec![(v + 1) % 5]).collect();
        adj.push(vec![6]);
        adj.push(vec![5]);
        let c = elementary_cycles(&adj, None, 1_000);
        assert_eq!(c.cycles, vec![vec![5, 6], vec![0, 1, 2, 3, 4]]);
        let scc = strongly_connected_components(&adj);
        let s = for_each_cycle(&adj, &scc, Some(4), 1_000, |_, _| Flow::Continue);
        assert!(s.length_cut && !s.truncated);
        assert_eq!(s.cut_components, vec![scc[0]]);
        assert_eq!(
            shortest_cycle(&adj, &scc, scc[0], 1_000),
            Some(vec![0, 1, 2, 3, 4])
        );
        let s = for_each_cycle(&adj, &scc, None, 1_000, |_, _| Flow::Continue);
        assert!(!s.length_cut && s.cut_components.is_empty());
    }

    #[test]
    fn respects_length_and_budget() {
        let n = 8;
        let adj: Vec<Vec<usize>> = (0..n)
            .map(|v| (0..n).filter(|&w| w != v).collect())
            .collect();
        let c = elementary_cycles(&adj, Some(2), 1_000_000);
        assert_eq!(c.cycles.len(), n * (n - 1) / 2);
        let c = elementary_cycles(&adj, None, 500);
        assert!(c.truncated);
    }
}
