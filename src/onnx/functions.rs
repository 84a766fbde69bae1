//! Model-local functions: each call site is replaced by the function's body (values renamed
//! per call, attribute references resolved from the call), recursively; and [`KnownFunctions`],
//! the bodies of the contrib ops mobius writes itself, which export and import are given.

use std::collections::HashMap;

use super::proto::{AttributeProto, FunctionProto, NodeProto};
use crate::ir::Model;
use crate::limits::MAX_EXPANDED_NODES;

/// How deep function calls may nest before expansion stops with an error.
const MAX_DEPTH: usize = 16;
/// How many calls may be expanded in one model (guards against exponential fan-out).
const MAX_CALLS: usize = 100_000;

/// The standard-ONNX bodies of the contrib ops mobius emits, as their caller gives them to
/// export and import (the rulebook derives them from its inline rules).
pub trait KnownFunctions: Sync {
    /// The model-local functions to write into `model`, in a fixed order.
    fn functions_for(&self, model: &Model) -> Vec<FunctionProto>;

    /// Whether the body of `domain::name` is one of these: import keeps calls of it as the op
    /// (its body is written again on save) rather than expanding them.
    fn is_known(&self, domain: &str, name: &str) -> bool;
}

/// Replaces every call of a model-local function in `nodes` by the function's body. Refuses,
/// before expanding anything, a model whose calls would expand to more than
/// [`MAX_EXPANDED_NODES`] nodes.
pub fn expand(
    nodes: Vec<NodeProto>,
    functions: &[FunctionProto],
) -> Result<Vec<NodeProto>, String> {
    if functions.is_empty() {
        return Ok(nodes);
    }
    let table: HashMap<(&str, &str), &FunctionProto> = functions
        .iter()
        .map(|f| ((f.domain.as_str(), f.name.as_str()), f))
        .collect();
    check_expanded_size(&nodes, &table)?;
    let mut counter = 0usize;
    expand_with(nodes, &table, 0, &mut counter)
}

type Table<'a> = HashMap<(&'a str, &'a str), &'a FunctionProto>;

/// Checks that `nodes` expand to at most [`MAX_EXPANDED_NODES`] nodes, computing each
/// function's expanded size once (memoized, depth-bounded by [`MAX_DEPTH`]) with checked
/// arithmetic.
fn check_expanded_size(nodes: &[NodeProto], table: &Table<'_>) -> Result<(), String> {
    let mut sizes: HashMap<(&str, &str), u64> = HashMap::new();
    let total = expanded_size(nodes, table, &mut sizes, 0)?;
    if total > MAX_EXPANDED_NODES {
        return Err(format!(
            "the graph's function calls expand to {total} nodes, more than the limit of \
             {MAX_EXPANDED_NODES}"
        ));
    }
    Ok(())
}

/// How many nodes `nodes` expand to (capped just past the limit); errors name the function
/// whose expansion passes [`MAX_EXPANDED_NODES`] or that nests too deep.
fn expanded_size<'a>(
    nodes: &'a [NodeProto],
    table: &Table<'a>,
    sizes: &mut HashMap<(&'a str, &'a str), u64>,
    depth: usize,
) -> Result<u64, String> {
    let mut total = 0u64;
    for node in nodes {
        let key = (node.domain.as_str(), node.op_type.as_str());
        let size = match table.get(&key) {
            None => 1,
            Some(f) => match sizes.get(&key) {
                Some(&n) => n,
                None => {
                    if depth >= MAX_DEPTH {
                        return Err(format!(
                            "function `{}` nests more than {MAX_DEPTH} calls deep",
                            f.name
                        ));
                    }
                    let n = expanded_size(&f.node, table, sizes, depth + 1)?;
                    if n > MAX_EXPANDED_NODES {
                        return Err(format!(
                            "function `{}` expands to more than {MAX_EXPANDED_NODES} nodes (the \
                             limit for a whole model): its body calls functions that call \
                             functions, multiplying the node count",
                            f.name
                        ));
                    }
                    sizes.insert(key, n);
                    n
                }
            },
        };
        total = total
            .checked_add(size)
            .filter(|&t| t <= MAX_EXPANDED_NODES)
            .unwrap_or(MAX_EXPANDED_NODES + 1);
    }
    Ok(total)
}

fn expand_with(
    nodes: Vec<NodeProto>,
    table: &Table<'_>,
    depth: usize,
    counter: &mut usize,
) -> Result<Vec<NodeProto>, String> {
    let mut out = Vec::with_capacity(nodes.len());
    for node in nodes {
        let Some(f) = table.get(&(node.domain.as_str(), node.op_type.as_str())) else {
            out.push(node);
            continue;
        };
        if depth >= MAX_DEPTH {
            return Err(format!(
                "function `{}` nests more than {MAX_DEPTH} calls deep",
                f.name
            ));
        }
        *counter += 1;
        if *counter > MAX_CALLS {
            return Err(format!("more than {MAX_CALLS} function calls to expand"));
        }
        let prefix = format!(
            "{}__{}_{}",
            f.name,
            if node.name.is_empty() {
                "call"
            } else {
                &node.name
            },
            counter
        );
        out.extend(expand_with(
            inline_call(&node, f, &prefix),
            table,
            depth + 1,
            counter,
        )?);
    }
    Ok(out)
}

/// The body of `f` for the call `call`: formal inputs/outputs bound to the call's values,
/// internal values prefixed, `ref_attr_name` attributes taken from the call (or the
/// function's defaults; dropped when neither sets them).
fn inline_call(call: &NodeProto, f: &FunctionProto, prefix: &str) -> Vec<NodeProto> {
    let mut names: HashMap<&str, String> = HashMap::new();
    for (i, formal) in f.input.iter().enumerate() {
        names.insert(formal, call.input.get(i).cloned().unwrap_or_default());
    }
    // An output the call leaves unnamed keeps an internal name: body nodes may still read it.
    for (i, formal) in f.output.iter().enumerate() {
        if let Some(actual) = call.output.get(i).filter(|v| !v.is_empty()) {
            names.insert(formal, actual.clone());
        }
    }
    let rename = |v: &String, names: &HashMap<&str, String>| -> String {
        if v.is_empty() {
            return String::new();
        }
        names
            .get(v.as_str())
            .cloned()
            .unwrap_or_else(|| format!("{prefix}/{v}"))
    };
    let caller_attr = |name: &str| -> Option<AttributeProto> {
        call.attribute
            .iter()
            .chain(&f.attribute_proto)
            .find(|a| a.name == name)
            .cloned()
    };
    f.node
        .iter()
        .map(|n| NodeProto {
            input: n.input.iter().map(|v| rename(v, &names)).collect(),
            output: n.output.iter().map(|v| rename(v, &names)).collect(),
            name: format!("{prefix}/{}", n.name),
            attribute: n
                .attribute
                .iter()
                .filter_map(|a| {
                    if a.ref_attr_name.is_empty() {
                        return Some(a.clone());
                    }
                    caller_attr(&a.ref_attr_name).map(|mut v| {
                        v.name = a.name.clone();
                        v
                    })
                })
                .collect(),
            ..n.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(op: &str, input: &str, output: &str) -> NodeProto {
        NodeProto {
            input: vec![input.into()],
            output: vec![output.into()],
            op_type: op.into(),
            domain: if op.starts_with('f') {
                "local".into()
            } else {
                String::new()
            },
            ..Default::default()
        }
    }

    /// `f0` … `f{levels-1}`: each has `width` Identity nodes and calls the next `calls` times.
    fn nested(levels: usize, width: usize, calls: usize) -> Vec<FunctionProto> {
        (0..levels)
            .map(|i| {
                let mut body: Vec<NodeProto> = (0..width)
                    .map(|j| node("Identity", "x", &format!("i{j}")))
                    .collect();
                if i + 1 < levels {
                    body.extend(
                        (0..calls).map(|j| node(&format!("f{}", i + 1), "x", &format!("c{j}"))),
                    );
                }
                FunctionProto {
                    name: format!("f{i}"),
                    domain: "local".into(),
                    input: vec!["x".into()],
                    output: vec!["y".into()],
                    node: body,
                    ..Default::default()
                }
            })
            .collect()
    }

    #[test]
    fn nested_calls_that_multiply_past_the_limit_are_refused_before_expanding() {
        let functions = nested(6, 2000, 10);
        let e = expand(vec![node("f0", "a", "b")], &functions).unwrap_err();
        assert!(
            e.contains("function `f1` expands to more than 10000000 nodes"),
            "{e}"
        );
    }

    #[test]
    fn many_calls_of_a_small_function_are_summed_against_the_limit() {
        let functions = nested(1, 1000, 0);
        let calls: Vec<NodeProto> = (0..10_001)
            .map(|j| node("f0", "a", &format!("b{j}")))
            .collect();
        let e = expand(calls, &functions).unwrap_err();
        assert!(e.contains("expand to") && e.contains("10000000"), "{e}");
    }

    #[test]
    fn nested_calls_within_the_limit_expand() {
        let functions = nested(3, 2, 3);
        let nodes = expand(vec![node("f0", "a", "b")], &functions).unwrap();
        // f2: 2 nodes; f1: 2 + 3·2; f0: 2 + 3·8.
        assert_eq!(nodes.len(), 26);
    }
}
