//! Value names of an imported graph: each is assigned once (static single assignment). Graph
//! inputs and initializers are declared once each (and no name is both: an input with a default
//! value is not supported), and every node output names a new value —
//! not a graph input, not an initializer, not another node's output. A graph that breaks this
//! is ambiguous (which producer does a reader see?), so it is refused at import.

use std::collections::{BTreeMap, BTreeSet};

use crate::ir::{Graph, Node};

/// Checks that every value name of `graph` is assigned once; the error names the value and
/// both places that assign it.
pub fn check_single_assignment(graph: &Graph) -> Result<(), String> {
    let mut inputs = BTreeSet::new();
    for input in &graph.inputs {
        if !inputs.insert(input.name.as_str()) {
            return Err(format!("graph input `{}` is declared twice", input.name));
        }
    }
    let mut initializers = BTreeSet::new();
    for init in &graph.initializers {
        if !initializers.insert(init.name.as_str()) {
            return Err(format!("initializer `{}` is declared twice", init.name));
        }
        if inputs.contains(init.name.as_str()) {
            return Err(format!(
                "`{}` is both a graph input and an initializer (an input with a default value); \
                 mobius does not support input defaults",
                init.name
            ));
        }
    }
    let mut producers: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        // An empty name is an omitted optional output, not a value.
        for output in node.outputs.iter().filter(|o| !o.is_empty()) {
            let this = describe(node, i);
            if inputs.contains(output.as_str()) {
                return Err(format!(
                    "value `{output}` is both a graph input and an output of {this}"
                ));
            }
            if initializers.contains(output.as_str()) {
                return Err(format!(
                    "value `{output}` is both an initializer and an output of {this}"
                ));
            }
            if let Some(first) = producers.insert(output, i) {
                let first = describe(&graph.nodes[first], first);
                return Err(if first == this {
                    format!("value `{output}` is produced twice by {this}")
                } else {
                    format!("value `{output}` is produced by both {first} and {this}")
                });
            }
        }
    }
    Ok(())
}

/// `node `name` (Op)`, or `node #i (Op)` for an unnamed node.
pub(super) fn describe(node: &Node, index: usize) -> String {
    if node.name.is_empty() {
        format!("node #{index} ({})", node.op_type)
    } else {
        format!("node `{}` ({})", node.name, node.op_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Initializer, Shape, ValueInfo};

    fn node(name: &str, outputs: &[&str]) -> Node {
        Node {
            name: name.into(),
            domain: String::new(),
            op_type: "Relu".into(),
            inputs: vec!["x".into()],
            outputs: outputs.iter().map(|o| o.to_string()).collect(),
            attrs: Default::default(),
        }
    }

    fn graph(inputs: &[&str], inits: &[&str], nodes: Vec<Node>) -> Graph {
        let value = |n: &&str| ValueInfo {
            name: n.to_string(),
            dtype: DType::F32,
            shape: Shape(vec![]),
        };
        Graph {
            name: "g".into(),
            inputs: inputs.iter().map(value).collect(),
            outputs: vec![],
            value_info: vec![],
            unshaped: vec![],
            untyped: vec![],
            nodes,
            initializers: inits
                .iter()
                .map(|n| Initializer {
                    name: n.to_string(),
                    dtype: DType::F32,
                    shape: vec![],
                    source: None,
                })
                .collect(),
        }
    }

    #[test]
    fn each_name_once() {
        let ok = graph(
            &["x"],
            &["w"],
            vec![node("a", &["y", ""]), node("b", &["z", ""])],
        );
        assert_eq!(check_single_assignment(&ok), Ok(()));
        let cases = [
            (
                graph(&["x", "x"], &[], vec![]),
                "graph input `x` is declared twice",
            ),
            (
                graph(&["x"], &["w", "w"], vec![]),
                "initializer `w` is declared twice",
            ),
            (
                graph(&["x", "w"], &["w"], vec![]),
                "`w` is both a graph input and an initializer (an input with a default value); \
                 mobius does not support input defaults",
            ),
            (
                graph(&["x"], &[], vec![node("a", &["x"])]),
                "both a graph input and an output of node `a`",
            ),
            (
                graph(&["x"], &["w"], vec![node("a", &["w"])]),
                "both an initializer and an output",
            ),
            (
                graph(&["x"], &[], vec![node("a", &["y"]), node("", &["y"])]),
                "value `y` is produced by both node `a` (Relu) and node #1 (Relu)",
            ),
            (
                graph(&["x"], &[], vec![node("a", &["y", "y"])]),
                "produced twice by node `a`",
            ),
        ];
        for (g, needle) in cases {
            let e = check_single_assignment(&g).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }
}
