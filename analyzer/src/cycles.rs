//! Elementary cycles of a directed graph, up to a length, shortest first, with a work budget.
//!
//! Lock graphs are usually small and sparse, but a trace of a program that nests many locks of
//! many instances can make a dense one, where the number of elementary cycles is exponential.
//! So the enumeration is bounded twice: by length (cycles longer than a few locks are rare and
//! need as many threads to meet) and by a budget of search steps. When the budget cuts the
//! enumeration, the result says so and the report tells the user.
//!
//! Method: strongly connected components first (a cycle never leaves one), then for each
//! length k = 1..=max and each start node s, a depth-first search for paths of exactly k nodes
//! through nodes greater than s that return to s. Every elementary cycle is found exactly
//! once, rotated to start at its smallest node. Work is O(max · paths explored), bounded by the
//! budget.

/// The cycles found; each is a list of nodes, the edge from the last back to the first implied.
#[derive(Debug, Default)]
pub struct Cycles {
    pub cycles: Vec<Vec<usize>>,
    /// The budget ran out before every cycle up to the length was enumerated.
    pub truncated: bool,
    pub steps: u64,
}

/// `adjacency[v]` lists the successors of `v` (each at most once).
pub fn elementary_cycles(adjacency: &[Vec<usize>], max_len: usize, budget: u64) -> Cycles {
    let n = adjacency.len();
    let scc = strongly_connected_components(adjacency);
    let mut out = Cycles::default();
    let mut path: Vec<usize> = Vec::new();
    let mut on_path = vec![false; n];
    'lengths: for k in 1..=max_len {
        for s in 0..n {
            // A node with no edge inside its component is on no cycle (a self-loop counts).
            if !adjacency[s].iter().any(|&w| scc[w] == scc[s]) {
                continue;
            }
            path.clear();
            path.push(s);
            on_path[s] = true;
            let finished = search(
                adjacency,
                &scc,
                s,
                k,
                &mut path,
                &mut on_path,
                &mut out,
                budget,
            );
            on_path[s] = false;
            if !finished {
                out.truncated = true;
                break 'lengths;
            }
        }
    }
    out
}

/// Extends `path` (which starts at `s`) to exactly `k` nodes and closes it. Returns false when
/// the budget ran out.
#[allow(clippy::too_many_arguments)]
fn search(
    adjacency: &[Vec<usize>],
    scc: &[usize],
    s: usize,
    k: usize,
    path: &mut Vec<usize>,
    on_path: &mut [bool],
    out: &mut Cycles,
    budget: u64,
) -> bool {
    let v = *path.last().expect("path starts at s");
    for &w in &adjacency[v] {
        out.steps += 1;
        if out.steps > budget {
            return false;
        }
        if path.len() == k {
            if w == s {
                out.cycles.push(path.clone());
            }
            continue;
        }
        if w <= s || on_path[w] || scc[w] != scc[s] {
            continue;
        }
        path.push(w);
        on_path[w] = true;
        let ok = search(adjacency, scc, s, k, path, on_path, out, budget);
        on_path[w] = false;
        path.pop();
        if !ok {
            return false;
        }
    }
    true
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
        let c = elementary_cycles(&adj, 4, 1_000);
        assert_eq!(c.cycles, vec![vec![2], vec![0, 1], vec![0, 1, 2]]);
        assert!(!c.truncated);
    }

    #[test]
    fn respects_length_and_budget() {
        let n = 8;
        let adj: Vec<Vec<usize>> = (0..n)
            .map(|v| (0..n).filter(|&w| w != v).collect())
            .collect();
        let c = elementary_cycles(&adj, 2, 1_000_000);
        assert_eq!(c.cycles.len(), n * (n - 1) / 2);
        let c = elementary_cycles(&adj, 6, 500);
        assert!(c.truncated);
    }
}
