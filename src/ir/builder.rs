//! A small helper for emitting graphs in topological order with unique value names.

use std::collections::HashMap;

use super::{
    Attr, Attrs, DType, Graph, Initializer, Node, Shape, TensorData, TensorSource, ValueInfo,
};

/// Emits nodes into a [`Graph`], naming values `"{scope}/{op}_{n}"` and sharing identical
/// small constants.
#[derive(Debug)]
pub struct GraphBuilder {
    graph: Graph,
    scope: String,
    counter: usize,
    constants: HashMap<(DType, Vec<usize>, Vec<u8>), String>,
}

impl GraphBuilder {
    /// Starts an empty graph with the given name.
    pub fn new(name: &str) -> GraphBuilder {
        GraphBuilder {
            graph: Graph {
                name: name.to_string(),
                ..Graph::default()
            },
            scope: String::new(),
            counter: 0,
            constants: HashMap::new(),
        }
    }

    /// Sets the name prefix of the values and nodes emitted next (e.g. `model.layers.0.mlp`).
    pub fn set_scope(&mut self, scope: &str) {
        self.scope = scope.to_string();
    }

    /// Declares a graph input and returns its name.
    pub fn input(&mut self, name: &str, dtype: DType, shape: Shape) -> String {
        self.graph.inputs.push(ValueInfo {
            name: name.to_string(),
            dtype,
            shape,
        });
        name.to_string()
    }

    /// Declares a graph output: `value` must be produced under the same name.
    pub fn output(&mut self, name: &str, dtype: DType, shape: Shape) {
        self.graph.outputs.push(ValueInfo {
            name: name.to_string(),
            dtype,
            shape,
        });
    }

    /// Adds an initializer and returns its name.
    pub fn initializer(&mut self, init: Initializer) -> String {
        let name = init.name.clone();
        self.graph.initializers.push(init);
        name
    }

    /// A constant tensor as an initializer, shared with any identical constant.
    pub fn constant(&mut self, data: TensorData) -> String {
        let key = (data.dtype, data.shape.clone(), data.bytes.clone());
        if let Some(name) = self.constants.get(&key) {
            return name.clone();
        }
        let name = format!("const_{}", self.constants.len());
        self.constants.insert(key, name.clone());
        self.initializer(Initializer {
            name: name.clone(),
            dtype: data.dtype,
            shape: data.shape.clone(),
            source: Some(TensorSource::Inline(data)),
        })
    }

    /// A 1-D int64 constant.
    pub fn const_i64(&mut self, values: &[i64]) -> String {
        self.constant(TensorData::from_i64(vec![values.len()], values))
    }

    /// A scalar int64 constant.
    pub fn scalar_i64(&mut self, value: i64) -> String {
        self.constant(TensorData::from_i64(vec![], &[value]))
    }

    fn fresh(&mut self, op_type: &str) -> String {
        self.counter += 1;
        if self.scope.is_empty() {
            format!("{}_{}", op_type, self.counter)
        } else {
            format!("{}/{}_{}", self.scope, op_type, self.counter)
        }
    }

    /// Emits a standard-domain node with one output and returns the output name.
    pub fn op(&mut self, op_type: &str, inputs: &[&str], attrs: Vec<(&str, Attr)>) -> String {
        let out = self.fresh(op_type);
        self.op_into(op_type, inputs, attrs, &out);
        out
    }

    /// Emits a standard-domain node whose single output gets the given name.
    pub fn op_into(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        attrs: Vec<(&str, Attr)>,
        output: &str,
    ) {
        self.node("", op_type, inputs, attrs, vec![output.to_string()]);
    }

    /// Emits a node with explicit domain and output names.
    pub fn node(
        &mut self,
        domain: &str,
        op_type: &str,
        inputs: &[&str],
        attrs: Vec<(&str, Attr)>,
        outputs: Vec<String>,
    ) {
        let name = format!(
            "{}_node",
            outputs
                .first()
                .cloned()
                .unwrap_or_else(|| self.fresh(op_type))
        );
        let attrs: Attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        self.graph.nodes.push(Node {
            name,
            domain: domain.to_string(),
            op_type: op_type.to_string(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs,
            attrs,
        });
    }

    /// A fresh value name in the current scope, for multi-output nodes.
    pub fn fresh_name(&mut self, op_type: &str) -> String {
        self.fresh(op_type)
    }

    /// Finishes the graph.
    pub fn finish(self) -> Graph {
        self.graph
    }
}
