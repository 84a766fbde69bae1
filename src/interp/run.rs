//! Whole-graph evaluation, within the run's budgets ([`InterpLimits`]).

use std::collections::{HashMap, HashSet};

use super::{eval_node, OpCall, Tensor, Values};
use crate::ir::{Graph, Initializer, TensorData};
use crate::limits::InterpLimits;
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

/// Runs `graph` on `inputs` (by graph input name) within the default [`InterpLimits`];
/// initializers are read through `weights`. Returns the graph outputs by name.
pub fn run_graph(
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    weights: &mut Evaluator<'_>,
) -> Result<HashMap<String, Tensor>> {
    run_graph_with(graph, inputs, weights, &InterpLimits::default())
}

/// Bytes the interpreter holds for `t`.
fn held_bytes(t: &Tensor) -> u64 {
    match &t.values {
        Values::Float(v) => 4 * v.len() as u64,
        Values::Int(v) => 8 * v.len() as u64,
        Values::Bool(v) => v.len() as u64,
    }
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

/// Runs `graph` on `inputs` (by graph input name); initializers are read through `weights`.
/// Every tensor is checked against `limits` (inputs and initializers before they are read,
/// computed values as they arrive) and values are dropped after their last reader, so the run
/// holds at most `limits.max_run_bytes`. Returns the graph outputs by name.
pub fn run_graph_with(
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    weights: &mut Evaluator<'_>,
    limits: &InterpLimits,
) -> Result<HashMap<String, Tensor>> {
    let mut values = Live {
        map: HashMap::new(),
        held: 0,
        limits,
    };
    for v in &graph.inputs {
        let t = inputs
            .get(&v.name)
            .ok_or_else(|| Error::Graph(format!("no value given for graph input `{}`", v.name)))?;
        values.insert(&v.name, &format!("graph input `{}`", v.name), t.clone())?;
    }
    for init in &graph.initializers {
        let what = format!("initializer `{}`", init.name);
        limits.elements(&what, &init.shape)?;
        values.insert(&init.name, &what, initializer_tensor(init, weights)?)?;
    }
    // The last node that reads each value; graph outputs are kept to the end.
    let kept: HashSet<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
    let mut last_reader: HashMap<&str, usize> = HashMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        for name in &node.inputs {
            last_reader.insert(name.as_str(), i);
        }
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        let outputs = {
            let call = OpCall {
                node,
                inputs: node
                    .inputs
                    .iter()
                    .map(|name| {
                        if name.is_empty() {
                            Ok(None)
                        } else {
                            values.map.get(name).map(Some).ok_or_else(|| {
                                Error::Graph(format!(
                                    "node `{}` reads unknown value `{name}`",
                                    node.name
                                ))
                            })
                        }
                    })
                    .collect::<Result<_>>()?,
                limits,
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
        for name in &node.inputs {
            if !name.is_empty()
                && last_reader.get(name.as_str()) == Some(&i)
                && !kept.contains(name.as_str())
            {
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
                .map(|t| (o.name.clone(), t.clone()))
                .ok_or_else(|| Error::Graph(format!("graph output `{}` was not computed", o.name)))
        })
        .collect()
}
