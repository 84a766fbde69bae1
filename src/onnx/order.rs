//! Node order of an imported graph: every node reads only graph inputs, initializers and
//! outputs of earlier nodes (ONNX requires topological order). A node that reads a value no
//! one defines, or a cycle of nodes that read each other's outputs, is refused at import,
//! naming the nodes.

use std::collections::{BTreeSet, HashMap};

use super::names::describe;
use crate::ir::Graph;

/// Checks that `graph`'s nodes are in topological order; the error names the value read
/// before (or without) being defined and, for a cycle, the nodes that form it.
pub fn check_order(graph: &Graph) -> Result<(), String> {
    check_scope(graph, false)
}

/// [`check_order`] for `graph`; in a subgraph (`nested`), a value no node of the graph
/// defines is read from the enclosing scope (the node holding the subgraph reads it there).
/// A node's subgraphs are checked in turn, and the values they read from this graph count as
/// the node's inputs.
fn check_scope(graph: &Graph, nested: bool) -> Result<(), String> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        for output in node.outputs.iter().filter(|o| !o.is_empty()) {
            producer.insert(output, i);
        }
    }
    let leaves: BTreeSet<&str> = graph
        .inputs
        .iter()
        .map(|v| v.name.as_str())
        .chain(graph.initializers.iter().map(|i| i.name.as_str()))
        .collect();
    for (i, node) in graph.nodes.iter().enumerate() {
        for sub in node.subgraphs() {
            check_scope(sub, true)
                .map_err(|m| format!("in a subgraph of {}: {m}", describe(node, i)))?;
        }
        for input in node.reads() {
            if leaves.contains(input.as_str()) {
                continue;
            }
            match producer.get(input.as_str()) {
                None if nested => {}
                None => {
                    return Err(format!(
                        "{} reads value `{input}`, which is no graph input, initializer or node \
                         output",
                        describe(node, i)
                    ))
                }
                Some(&p) if p >= i => {
                    return Err(match cycle_through(graph, &producer, i) {
                        Some(cycle) => format!(
                            "the graph has a cycle: {} (each reads an output of the next)",
                            cycle
                                .iter()
                                .map(|&n| describe(&graph.nodes[n], n))
                                .collect::<Vec<_>>()
                                .join(" → ")
                        ),
                        None => format!(
                            "{} reads value `{input}` before {} computes it; nodes must be in \
                             topological order",
                            describe(node, i),
                            describe(&graph.nodes[p], p)
                        ),
                    })
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// A cycle of nodes from `start` back to it through the producers of their inputs (`start`
/// first; a node reading its own output is a cycle of one), if there is one.
fn cycle_through(
    graph: &Graph,
    producer: &HashMap<&str, usize>,
    start: usize,
) -> Option<Vec<usize>> {
    // Depth-first search over "reads an output of" edges; `path` is the current chain.
    let mut path = vec![start];
    let mut next_input = vec![0usize];
    let mut visited = vec![false; graph.nodes.len()];
    visited[start] = true;
    while let Some(&node) = path.last() {
        let k = next_input.last_mut().expect("same length as path");
        let inputs = &graph.nodes[node].inputs;
        if *k == inputs.len() {
            path.pop();
            next_input.pop();
            continue;
        }
        let input = &inputs[*k];
        *k += 1;
        let Some(&p) = producer.get(input.as_str()) else {
            continue;
        };
        if p == start {
            return Some(path);
        }
        if !visited[p] {
            visited[p] = true;
            path.push(p);
            next_input.push(0);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Node, Shape, ValueInfo};

    fn node(name: &str, input: &str, output: &str) -> Node {
        Node {
            name: name.into(),
            domain: String::new(),
            op_type: "Relu".into(),
            inputs: vec![input.into()],
            outputs: vec![output.into()],
            attrs: Default::default(),
        }
    }

    fn graph(nodes: Vec<Node>) -> Graph {
        Graph {
            name: "g".into(),
            inputs: vec![ValueInfo::new("x", DType::F32, Shape::new(["2"]))],
            outputs: vec![],
            value_info: vec![],
            unshaped: vec![],
            untyped: vec![],
            nodes,
            initializers: vec![],
        }
    }

    #[test]
    fn cycles_name_their_nodes() {
        let e = check_order(&graph(vec![node("a", "a_out", "a_out")])).unwrap_err();
        assert!(e.contains("cycle: node `a` (Relu)"), "{e}");
        let e = check_order(&graph(vec![
            node("a", "b_out", "a_out"),
            node("b", "a_out", "b_out"),
        ]))
        .unwrap_err();
        assert!(
            e.contains("cycle: node `a` (Relu) → node `b` (Relu)"),
            "{e}"
        );
    }

    #[test]
    fn order_and_undefined_values() {
        assert_eq!(
            check_order(&graph(vec![node("a", "x", "y"), node("b", "y", "z")])),
            Ok(())
        );
        let e = check_order(&graph(vec![node("b", "y", "z"), node("a", "x", "y")])).unwrap_err();
        assert!(e.contains("reads value `y` before node `a`"), "{e}");
        let e = check_order(&graph(vec![node("a", "nowhere", "y")])).unwrap_err();
        assert!(e.contains("node `a` (Relu) reads value `nowhere`"), "{e}");
    }
}
