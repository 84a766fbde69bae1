//! Extracted e-graph → IR.
//!
//! Graph input and output names, order and declared types are kept exactly; value names of the
//! original graph are reused where their class survives; dead graph inputs are dropped except
//! `past_key_values.*`; nodes come out in a deterministic topological order.

use std::collections::{BTreeMap, HashMap, HashSet};

use egg::{Id, Language};

use super::analysis::{Kind, OnnxGraph};
use super::lang::Onnx;
use crate::ir::{Graph, Initializer, Node, TensorSource};
use crate::{Error, Result};

/// Inputs kept even when nothing reads them (the KV-cache contract of onnxruntime-genai).
fn always_kept(name: &str) -> bool {
    name.starts_with("past_key_values.")
}

/// Lowers the choice `chosen(class)` (one e-node per needed class) back into a graph with the
/// interface of `original`. `names` are the lifted value names (see [`super::lift::Lifted`]).
pub fn lower(
    original: &Graph,
    egraph: &OnnxGraph,
    root: Id,
    names: &[(String, Id)],
    chosen: &dyn Fn(Id) -> Onnx,
) -> Result<Graph> {
    let root = egraph.find(root);
    let Onnx::Root(outputs) = chosen(root) else {
        return Err(Error::Graph("the root class lost its root node".into()));
    };
    let order = topo_order(egraph, &outputs, chosen)?;

    // Output slots of tuple-valued ops, from the `get` classes that are needed.
    let mut slots: HashMap<(Id, usize), Id> = HashMap::new();
    for &class in &order {
        if let Onnx::Get { index, tuple } = chosen(class) {
            slots.insert((egraph.find(tuple[0]), index), class);
        }
    }

    let mut namer = Namer::new(original);
    for (out, class) in original.outputs.iter().zip(&outputs) {
        let class = egraph.find(*class);
        if matches!(chosen(class), Onnx::Op(_) | Onnx::Get { .. })
            && !namer.by_class.contains_key(&class)
        {
            namer.assign(class, out.name.clone());
        }
    }
    for (name, class) in names {
        let class = egraph.find(*class);
        if !namer.by_class.contains_key(&class) && !namer.used.contains(name) {
            namer.assign(class, name.clone());
        }
    }

    let mut graph = Graph {
        name: original.name.clone(),
        inputs: Vec::new(),
        outputs: original.outputs.clone(),
        nodes: Vec::new(),
        initializers: Vec::new(),
        value_info: Vec::new(),
    };
    let mut used_leaves: HashSet<String> = HashSet::new();
    let mut folded: Vec<Initializer> = Vec::new();
    for &class in &order {
        match chosen(class) {
            Onnx::Input(name) | Onnx::Init(name) => {
                used_leaves.insert(name.to_string());
                namer.by_class.insert(class, name.to_string());
            }
            Onnx::Const(lit) => {
                let name = namer.name(class, "const_fold");
                folded.push(Initializer {
                    name,
                    dtype: lit.dtype,
                    shape: lit.shape.clone(),
                    source: Some(TensorSource::Inline(lit.to_tensor())),
                });
            }
            Onnx::Absent => {
                namer.by_class.insert(class, String::new());
            }
            Onnx::Op(op) => {
                let (domain, op_type) = op.domain_and_type();
                let inputs = op
                    .input_ids()
                    .iter()
                    .map(|&c| namer.by_class[&egraph.find(c)].clone())
                    .collect();
                let mut attrs = BTreeMap::new();
                for (name, &c) in op.attr_names().iter().zip(op.attr_ids()) {
                    if let Kind::Attr(v) = &egraph[c].data.kind {
                        if let Some(a) = v.to_attr() {
                            attrs.insert(name.to_string(), a);
                        }
                    }
                }
                let outputs: Vec<String> = if op.outputs == 1 {
                    vec![namer.name(class, op_type)]
                } else {
                    (0..op.outputs)
                        .map(|i| match slots.get(&(class, i)) {
                            Some(&get) => namer.name(get, op_type),
                            None => namer.fresh(&format!("{op_type}_unused")),
                        })
                        .collect()
                };
                graph.nodes.push(Node {
                    name: format!("{}_node", outputs[0]),
                    domain: domain.to_string(),
                    op_type: op_type.to_string(),
                    inputs,
                    outputs,
                    attrs,
                });
            }
            Onnx::Get { .. } => {
                // Named when its tuple op was emitted (tuples come first in the order).
                if !namer.by_class.contains_key(&class) {
                    return Err(Error::Graph(
                        "a projection was lowered before its op".into(),
                    ));
                }
            }
            Onnx::Attr(_) | Onnx::Root(_) => {}
        }
    }
    // Graph outputs whose value carries another name get an Identity.
    for (out, class) in original.outputs.iter().zip(&outputs) {
        let value = namer.by_class[&egraph.find(*class)].clone();
        if value != out.name {
            graph.nodes.push(Node {
                name: format!("{}_node", out.name),
                domain: String::new(),
                op_type: "Identity".into(),
                inputs: vec![value],
                outputs: vec![out.name.clone()],
                attrs: BTreeMap::new(),
            });
        }
    }
    let produced: HashSet<&str> = graph
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().map(String::as_str))
        .collect();
    graph.value_info = original
        .value_info
        .iter()
        .filter(|v| produced.contains(v.name.as_str()))
        .cloned()
        .collect();
    graph.inputs = original
        .inputs
        .iter()
        .filter(|v| used_leaves.contains(&v.name) || always_kept(&v.name))
        .cloned()
        .collect();
    graph.initializers = original
        .initializers
        .iter()
        .filter(|i| used_leaves.contains(&i.name))
        .cloned()
        .chain(folded)
        .collect();
    graph.validate()?;
    Ok(graph)
}

/// Needed classes, children before parents, in a deterministic depth-first order from the
/// outputs; a cycle in the choice is an error.
fn topo_order(egraph: &OnnxGraph, roots: &[Id], chosen: &dyn Fn(Id) -> Onnx) -> Result<Vec<Id>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    let mut marks: HashMap<Id, Mark> = HashMap::new();
    let mut order = Vec::new();
    for &r in roots {
        let mut stack = vec![(egraph.find(r), false)];
        while let Some((class, expanded)) = stack.pop() {
            if expanded {
                marks.insert(class, Mark::Done);
                order.push(class);
                continue;
            }
            match marks.get(&class) {
                Some(Mark::Done) => continue,
                Some(Mark::Visiting) => {
                    return Err(Error::Graph("the extracted graph has a cycle".into()));
                }
                None => {}
            }
            marks.insert(class, Mark::Visiting);
            stack.push((class, true));
            let node = chosen(class);
            for &child in node.children().iter().rev() {
                let child = egraph.find(child);
                match marks.get(&child) {
                    Some(Mark::Done) => {}
                    Some(Mark::Visiting) => {
                        return Err(Error::Graph("the extracted graph has a cycle".into()));
                    }
                    None => stack.push((child, false)),
                }
            }
        }
    }
    Ok(order)
}

/// Unique value names.
struct Namer {
    used: HashSet<String>,
    by_class: HashMap<Id, String>,
    counter: usize,
}

impl Namer {
    fn new(original: &Graph) -> Namer {
        let mut used: HashSet<String> = original.inputs.iter().map(|v| v.name.clone()).collect();
        used.extend(original.initializers.iter().map(|i| i.name.clone()));
        Namer {
            used,
            by_class: HashMap::new(),
            counter: 0,
        }
    }

    fn assign(&mut self, class: Id, name: String) {
        self.used.insert(name.clone());
        self.by_class.insert(class, name);
    }

    fn fresh(&mut self, stem: &str) -> String {
        loop {
            self.counter += 1;
            let name = format!("{stem}_{}", self.counter);
            if self.used.insert(name.clone()) {
                return name;
            }
        }
    }

    /// The class's assigned name, or a fresh one.
    fn name(&mut self, class: Id, stem: &str) -> String {
        if let Some(n) = self.by_class.get(&class) {
            return n.clone();
        }
        let n = self.fresh(stem);
        self.by_class.insert(class, n.clone());
        n
    }
}
