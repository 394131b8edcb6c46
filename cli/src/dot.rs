//! `foresight graph`: the class-level lock-order graph in graphviz DOT. Each edge says how often
//! it was seen and where first (the request site of its first witness); edges on a cycle (both
//! ends in one strongly connected component: every such edge lies on an elementary cycle) are
//! red and bold. `scc_only` keeps only the classes on some cycle.

use std::fmt::Write;

use foresight_analyzer::lock_graph::strongly_connected_components;
use foresight_analyzer::lock_graph::LockOrderGraph;
use std::collections::HashMap;

/// `first_sites`: per edge (from, to), the site text of its first witness.
pub fn write_dot(
    graph: &LockOrderGraph,
    first_sites: &HashMap<(usize, usize), String>,
    scc_only: bool,
) -> String {
    let adjacency = graph.adjacency();
    let scc = strongly_connected_components(&adjacency);
    let mut size = vec![0usize; graph.classes.len()];
    for &c in &scc {
        size[c] += 1;
    }
    let self_loop = |v: usize| adjacency[v].contains(&v);
    let on_cycle = |v: usize| size[scc[v]] > 1 || self_loop(v);
    // Sorted by name so that the file is the same for the same graph (diff-friendly).
    let mut nodes: Vec<usize> = (0..graph.classes.len())
        .filter(|&v| !scc_only || on_cycle(v))
        .collect();
    nodes.sort_by(|&a, &b| graph.classes[a].cmp(&graph.classes[b]));
    let mut id = vec![usize::MAX; graph.classes.len()];
    for (i, &v) in nodes.iter().enumerate() {
        id[v] = i;
    }

    let mut out = String::new();
    out.push_str("digraph lock_order {\n");
    out.push_str("  rankdir=LR;\n");
    out.push_str("  node [shape=box, fontname=\"monospace\"];\n");
    out.push_str("  edge [fontname=\"monospace\", fontsize=10];\n");
    for &v in &nodes {
        let style = if on_cycle(v) {
            ", color=red, fontcolor=red"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  n{} [label=\"{}\"{style}];",
            id[v],
            escape(&graph.classes[v])
        );
    }
    let mut edges: Vec<_> = graph
        .edges
        .iter()
        .filter(|e| id[e.from] != usize::MAX && id[e.to] != usize::MAX)
        .collect();
    edges.sort_by_key(|e| (id[e.from], id[e.to]));
    for e in edges {
        let first = first_sites.get(&(e.from, e.to));
        let label = match first {
            Some(site) => format!("{}× first: {site}", e.count),
            None => format!("{}×", e.count),
        };
        let style = if scc[e.from] == scc[e.to] {
            ", color=red, fontcolor=red, style=bold, penwidth=2"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  n{} -> n{} [label=\"{}\"{style}];",
            id[e.from],
            id[e.to],
            escape(&label)
        );
    }
    out.push_str("}\n");
    out
}

/// A DOT double-quoted string: quotes and backslashes escaped, newlines as `\n`.
fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}
