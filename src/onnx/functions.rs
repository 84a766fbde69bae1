//! Model-local functions: each call site is replaced by the function's body (values renamed
//! per call, attribute references resolved from the call), recursively.

use std::collections::HashMap;

use super::proto::{AttributeProto, FunctionProto, NodeProto};

/// How deep function calls may nest before expansion stops with an error.
const MAX_DEPTH: usize = 16;
/// How many calls may be expanded in one model (guards against exponential fan-out).
const MAX_CALLS: usize = 100_000;

/// Replaces every call of a model-local function in `nodes` by the function's body.
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
    let mut counter = 0usize;
    expand_with(nodes, &table, 0, &mut counter)
}

fn expand_with(
    nodes: Vec<NodeProto>,
    table: &HashMap<(&str, &str), &FunctionProto>,
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
