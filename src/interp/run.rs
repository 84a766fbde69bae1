//! Whole-graph evaluation.

use std::collections::HashMap;

use super::{eval_node, OpCall, Tensor};
use crate::ir::{Graph, Initializer, TensorData};
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
}

/// Runs `graph` on `inputs` (by graph input name); initializers are read through `weights`.
/// Returns the graph outputs by name.
pub fn run_graph(
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    weights: &mut Evaluator<'_>,
) -> Result<HashMap<String, Tensor>> {
    let mut values: HashMap<String, Tensor> = HashMap::new();
    for v in &graph.inputs {
        let t = inputs
            .get(&v.name)
            .ok_or_else(|| Error::Graph(format!("no value given for graph input `{}`", v.name)))?;
        values.insert(v.name.clone(), t.clone());
    }
    for init in &graph.initializers {
        values.insert(init.name.clone(), initializer_tensor(init, weights)?);
    }
    for node in &graph.nodes {
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
                            values.get(name).map(Some).ok_or_else(|| {
                                Error::Graph(format!(
                                    "node `{}` reads unknown value `{name}`",
                                    node.name
                                ))
                            })
                        }
                    })
                    .collect::<Result<_>>()?,
            };
            eval_node(&call)?
        };
        for (name, t) in node.outputs.iter().zip(outputs) {
            if !name.is_empty() {
                values.insert(name.clone(), t);
            }
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| {
            values
                .get(&o.name)
                .map(|t| (o.name.clone(), t.clone()))
                .ok_or_else(|| Error::Graph(format!("graph output `{}` was not computed", o.name)))
        })
        .collect()
}
