//! Whole-graph evaluation, within the run's budgets ([`InterpLimits`]).

use std::collections::{HashMap, HashSet};

use super::eval_node;
use crate::ir::{DType, Graph, Initializer, TensorData};
use crate::limits::InterpLimits;
use crate::ops::control::Scope;
use crate::ops::{OpCall, Tensor, Values};
use crate::weights::eval::Evaluator;
use crate::{Error, Result};

/// The value of an initializer, read through `weights` (error when it is declared without data).
pub fn initializer_tensor(init: &Initializer, weights: &mut Evaluator<'_>) -> Result<Tensor> {
    let src = init
        .source
        .as_ref()
        .ok_or_else(|| Error::Graph(format!("initializer `{}` has no data", init.name)))?;
    Tensor::from_data(&TensorData {
        dtype: init.dtype,
        shape: init.shape.clone(),
        bytes: weights.read(src, init.dtype)?,
    })
    .map_err(|e| match e {
        Error::Graph(m) => Error::Graph(format!("initializer `{}`: {m}", init.name)),
        e => e,
    })
}

/// Runs `graph` on a copy of `inputs` (by graph input name) within the default
/// [`InterpLimits`]; initializers are read through `weights`. Returns the graph outputs by
/// name. Callers that do not reuse their inputs should move them into [`run_graph_with`].
pub fn run_graph(
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    weights: &mut Evaluator<'_>,
) -> Result<HashMap<String, Tensor>> {
    run_graph_with(graph, inputs.clone(), weights, &InterpLimits::default())
}

/// Bytes the interpreter holds per element of `dtype`: floats are held as f32, integers as
/// i64, booleans as one byte.
pub fn held_bytes_per_element(dtype: DType) -> u64 {
    match dtype {
        DType::Bool => 1,
        d if d.is_float() => 4,
        _ => 8,
    }
}

/// Bytes the interpreter holds for `t`.
fn held_bytes(t: &Tensor) -> u64 {
    match &t.values {
        Values::Float(v) => 4 * v.len() as u64,
        Values::Int(v) => 8 * v.len() as u64,
        Values::Bool(v) => v.len() as u64,
    }
}

/// Checks that graph input `name` holds what its shape and dtype say: as many values as the
/// shape has elements, stored as its dtype is (floats, integers or booleans).
fn check_input(name: &str, t: &Tensor) -> Result<()> {
    let (count, storage) = match &t.values {
        Values::Float(v) => (v.len(), "float"),
        Values::Int(v) => (v.len(), "integer"),
        Values::Bool(v) => (v.len(), "bool"),
    };
    let expected = match t.dtype {
        DType::Bool => "bool",
        d if d.is_float() => "float",
        _ => "integer",
    };
    if storage != expected {
        return Err(Error::Graph(format!(
            "graph input `{name}`: a {} tensor holding {storage} values",
            t.dtype
        )));
    }
    let elements = t
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if elements != Some(count) {
        return Err(Error::Graph(format!(
            "graph input `{name}`: shape {:?} needs {} values, the tensor holds {count}",
            t.shape,
            elements.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
        )));
    }
    Ok(())
}

/// The values of one run and the bytes they hold, within the budgets.
struct Live<'l> {
    map: HashMap<String, Tensor>,
    held: u64,
    limits: &'l InterpLimits,
}

impl Live<'_> {
    /// Adds a value named `name`; `what` describes it for errors.
    fn insert(&mut self, name: &str, what: &str, t: Tensor) -> Result<()> {
        self.limits.elements(what, &t.shape)?;
        self.held += held_bytes(&t);
        self.limits.run_bytes(what, self.held)?;
        if let Some(old) = self.map.insert(name.to_string(), t) {
            self.held -= held_bytes(&old);
        }
        Ok(())
    }

    /// Drops the value named `name`.
    fn remove(&mut self, name: &str) {
        if let Some(old) = self.map.remove(name) {
            self.held -= held_bytes(&old);
        }
    }
}

/// Runs `graph` on `inputs` (by graph input name, moved into the run so they are held once);
/// initializers are read through `weights`. Each input must hold as many values as its shape
/// has elements, stored as its dtype says (an error naming the input otherwise). Every tensor
/// is checked against `limits` (inputs and initializers before they are read,
/// computed values as they arrive) and values are dropped after their last reader, so the run
/// holds at most `limits.max_run_bytes`. Returns the graph outputs by name.
pub fn run_graph_with(
    graph: &Graph,
    mut inputs: HashMap<String, Tensor>,
    weights: &mut Evaluator<'_>,
    limits: &InterpLimits,
) -> Result<HashMap<String, Tensor>> {
    let mut bound = HashMap::with_capacity(graph.inputs.len());
    for v in &graph.inputs {
        let Some(t) = inputs.remove(&v.name) else {
            if bound.contains_key(&v.name) {
                // Declared twice: the value was taken by the first declaration.
                continue;
            }
            return Err(Error::Graph(format!(
                "no value given for graph input `{}`",
                v.name
            )));
        };
        limits.elements(&format!("graph input `{}`", v.name), &t.shape)?;
        check_input(&v.name, &t)?;
        bound.insert(v.name.clone(), t);
    }
    let outputs = run_scope(graph, bound, weights, limits, None)?;
    Ok(graph
        .outputs
        .iter()
        .map(|o| o.name.clone())
        .zip(outputs)
        .collect())
}

/// The values of the graphs around a subgraph being run, innermost first.
#[derive(Debug, Clone, Copy)]
struct Outer<'e> {
    values: &'e HashMap<String, Tensor>,
    parent: Option<&'e Outer<'e>>,
}

impl<'e> Outer<'e> {
    fn get(&self, name: &str) -> Option<&'e Tensor> {
        self.values
            .get(name)
            .or_else(|| self.parent.and_then(|p| p.get(name)))
    }
}

/// Runs the subgraphs of one control-flow node: the graph holding the node, and the graphs
/// around that one, are visible to them.
#[derive(Debug)]
struct Runner<'e> {
    outer: Outer<'e>,
    limits: &'e InterpLimits,
}

impl Scope for Runner<'_> {
    fn run(&self, graph: &Graph, inputs: Vec<Tensor>) -> Result<Vec<Tensor>> {
        let bound = graph
            .inputs
            .iter()
            .map(|v| v.name.clone())
            .zip(inputs)
            .collect();
        // A subgraph holds no initializers of its own once imported (they are hoisted), and
        // those a builder gives it inline need no store.
        run_scope(
            graph,
            bound,
            &mut Evaluator::new(None),
            self.limits,
            Some(&self.outer),
        )
    }
}

/// Calls `f` with a scope that runs subgraphs reading nothing from enclosing graphs (for an op
/// evaluated outside a graph, [`super::eval_op`]): a subgraph that reads an enclosing graph's
/// value fails there, naming it.
pub(crate) fn with_closed_scope<R>(limits: &InterpLimits, f: impl FnOnce(&dyn Scope) -> R) -> R {
    let nothing = HashMap::new();
    let runner = Runner {
        outer: Outer {
            values: &nothing,
            parent: None,
        },
        limits,
    };
    f(&runner)
}

/// Runs `graph` with its inputs `bound` (checked by the caller), the values of `outer` visible
/// to it; returns its outputs in order.
fn run_scope(
    graph: &Graph,
    bound: HashMap<String, Tensor>,
    weights: &mut Evaluator<'_>,
    limits: &InterpLimits,
    outer: Option<&Outer<'_>>,
) -> Result<Vec<Tensor>> {
    let mut values = Live {
        map: HashMap::new(),
        held: 0,
        limits,
    };
    for (name, t) in bound {
        let what = format!("graph input `{name}`");
        values.insert(&name, &what, t)?;
    }
    for init in &graph.initializers {
        let what = format!("initializer `{}`", init.name);
        limits.elements(&what, &init.shape)?;
        values.insert(&init.name, &what, initializer_tensor(init, weights)?)?;
    }
    // The last node that reads each value (its subgraphs' reads included); graph outputs are
    // kept to the end.
    let kept: HashSet<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
    let reads: Vec<Vec<String>> = graph.nodes.iter().map(|n| n.reads()).collect();
    let mut last_reader: HashMap<&str, usize> = HashMap::new();
    for (i, names) in reads.iter().enumerate() {
        for name in names {
            last_reader.insert(name.as_str(), i);
        }
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        let outputs = {
            let visible = |name: &str| {
                values
                    .map
                    .get(name)
                    .or_else(|| outer.and_then(|o| o.get(name)))
            };
            let runner = Runner {
                outer: Outer {
                    values: &values.map,
                    parent: outer,
                },
                limits,
            };
            let call = OpCall {
                node,
                inputs: node
                    .inputs
                    .iter()
                    .map(|name| {
                        if name.is_empty() {
                            Ok(None)
                        } else {
                            visible(name).map(Some).ok_or_else(|| {
                                Error::Graph(format!(
                                    "node `{}` reads unknown value `{name}`",
                                    node.name
                                ))
                            })
                        }
                    })
                    .collect::<Result<_>>()?,
                limits,
                scope: Some(&runner),
            };
            eval_node(&call)?
        };
        for (name, t) in node.outputs.iter().zip(outputs) {
            if !name.is_empty() {
                let what = format!("value `{name}` ({} `{}`)", node.op_type, node.name);
                values.insert(name, &what, t)?;
                if !last_reader.contains_key(name.as_str()) && !kept.contains(name.as_str()) {
                    values.remove(name);
                }
            }
        }
        for name in &reads[i] {
            if last_reader.get(name.as_str()) == Some(&i) && !kept.contains(name.as_str()) {
                values.remove(name);
            }
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| {
            values
                .map
                .get(&o.name)
                .or_else(|| outer.and_then(|p| p.get(&o.name)))
                .cloned()
                .ok_or_else(|| Error::Graph(format!("graph output `{}` was not computed", o.name)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{GraphBuilder, Shape};

    /// `y = x + x` with `x` i64 `[1, 7]`.
    fn doubling() -> Graph {
        let mut b = GraphBuilder::new("g");
        b.input("x", DType::I64, Shape::new([1i64, 7]));
        b.op_into("Add", &["x", "x"], vec![], "y");
        b.output("y", DType::I64, Shape::new([1i64, 7]));
        b.finish()
    }

    fn run(t: Tensor) -> Result<HashMap<String, Tensor>> {
        let inputs = HashMap::from([("x".to_string(), t)]);
        run_graph_with(
            &doubling(),
            inputs,
            &mut Evaluator::new(None),
            &InterpLimits::default(),
        )
    }

    #[test]
    fn inputs_must_hold_what_their_shape_and_dtype_say() {
        let ok = run(Tensor::int(DType::I64, vec![1, 7], vec![1; 7])).unwrap();
        assert_eq!(ok["y"].ints().unwrap(), &[2; 7]);
        // Too few values for the shape (reading past them panicked in Add).
        let e = run(Tensor::int(DType::I64, vec![1, 7], vec![1; 2]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("graph input `x`") && e.contains("needs 7 values, the tensor holds 2"),
            "{e}"
        );
        // Integer storage tagged as a float dtype.
        let mislabeled = Tensor {
            dtype: DType::F32,
            shape: vec![1, 7],
            values: Values::Int(vec![1; 7]),
        };
        let e = run(mislabeled).unwrap_err().to_string();
        assert!(
            e.contains("graph input `x`") && e.contains("f32 tensor holding integer values"),
            "{e}"
        );
    }
}
