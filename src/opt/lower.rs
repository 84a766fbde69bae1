//! Extracted e-graph → IR.
//!
//! Graph input and output names, order and declared types are kept exactly; value names of the
//! original graph are reused where their class survives; dead graph inputs are dropped except
//! `past_key_values.*`; nodes come out in a deterministic topological order.

use egg::{Id, Language};
use rustc_hash::{FxHashMap, FxHashSet};

use super::analysis::OnnxGraph;
use super::lang::{Onnx, OpNode};
use crate::ir::{Attrs, Dim, Graph, Initializer, Node, Shape, TensorSource, ValueInfo};
use crate::ops::types::{SymDim, TensorType};
use crate::ops::value::AttrValue;
use crate::weights::relayout_source;
use crate::{Error, Result};

/// Inputs kept even when nothing reads them (the KV-cache contract of onnxruntime-genai).
fn always_kept(name: &str) -> bool {
    name.starts_with("past_key_values.")
}

/// The extracted graph on its own: the needed classes with their chosen nodes, children
/// before parents, every child id canonical, and the little the lowering reads of the
/// e-graph's analysis (attribute values are the chosen nodes of their classes). Made while the
/// e-graph is alive, so that the e-graph and the extraction can be freed before the new graph
/// is built: their memory and the new graph's are not held at once.
pub struct Picked {
    /// The lifted value names (see [`super::lift::Lifted`]), their classes canonical.
    names: Vec<(String, Id)>,
    /// `(class, chosen node)`, children before parents (see [`topo_order`]).
    order: Vec<(Id, Onnx)>,
    /// Where each needed class is in `order`.
    at: ByClass<usize>,
    /// The root's children: the classes of the graph outputs, in order.
    outputs: Vec<Id>,
    /// The output types of the weight relayouts (folded into initializers by their shape).
    relayout_types: ByClass<TensorType>,
    /// The types of the 3-D q, k and v of standard `Attention` ops, declared as value_info: ONNX's
    /// shape inference (which onnxruntime runs at load) computes a 3-D Attention's output width
    /// from v's, and writes 0 when it cannot infer v's (a Split of a Reshape to a computed shape,
    /// as exporters write), which then fails the load.
    attention_inputs: Vec<(Id, TensorType)>,
}

impl Picked {
    /// The choice `chosen(class)` (one e-node per needed class) reachable from `root`, with
    /// the lifted value `names` to reuse.
    pub fn new(
        egraph: &OnnxGraph,
        root: Id,
        chosen: &dyn Fn(Id) -> Onnx,
        names: Vec<(String, Id)>,
    ) -> Result<Picked> {
        let root = egraph.find(root);
        let Onnx::Root(outputs) = chosen(root) else {
            return Err(Error::Graph("the root class lost its root node".into()));
        };
        let outputs: Vec<Id> = outputs.iter().map(|&c| egraph.find(c)).collect();
        let order = topo_order(egraph, &outputs, chosen)?;
        let mut at = ByClass::default();
        let mut relayout_types = ByClass::default();
        for (i, (class, node)) in order.iter().enumerate() {
            at.insert(*class, i);
            if let Onnx::Op(op) = node {
                if op.op.as_str().starts_with(RELAYOUT_DOMAIN) {
                    if let Some(t) = egraph[*class].data.tensor() {
                        relayout_types.insert(*class, t.clone());
                    }
                }
            }
        }
        let attention_inputs = untyped_attention_inputs(egraph, &order, &at);
        let names = names
            .into_iter()
            .map(|(name, class)| (name, egraph.find(class)))
            .collect();
        Ok(Picked {
            names,
            order,
            at,
            outputs,
            relayout_types,
            attention_inputs,
        })
    }

    /// The chosen node of a needed class.
    fn node(&self, class: Id) -> Option<&Onnx> {
        self.at.get(class).map(|&i| &self.order[i].1)
    }

    /// The value of an attribute class.
    fn attr(&self, class: Id) -> Option<&AttrValue> {
        match self.node(class)? {
            Onnx::Attr(v) => Some(v),
            _ => None,
        }
    }
}

/// The 3-D q, k and v of the chosen standard `Attention` ops (their types, width known) whose
/// width ONNX's shape inference cannot follow: the outputs of a `Split` (its sizes a computed
/// tensor) or of a `Reshape` to a computed shape, as exporters write them.
fn untyped_attention_inputs(
    egraph: &OnnxGraph,
    order: &[(Id, Onnx)],
    at: &ByClass<usize>,
) -> Vec<(Id, TensorType)> {
    let chosen = |class: Id| at.get(class).map(|&i| &order[i].1);
    let computed = |class: Id| match chosen(class) {
        Some(Onnx::Get { tuple, .. }) => {
            matches!(chosen(tuple[0]), Some(Onnx::Op(op)) if op.op.as_str() == "Split")
        }
        Some(Onnx::Op(op)) if op.op.as_str() == "Reshape" => op
            .input_ids()
            .get(1)
            .is_some_and(|&shape| !matches!(chosen(shape), Some(Onnx::Const(_) | Onnx::Init(_)))),
        _ => false,
    };
    let mut typed = Vec::new();
    for (_, node) in order {
        let Onnx::Op(op) = node else { continue };
        if op.op.as_str() != "Attention" {
            continue;
        }
        for &input in op.input_ids().iter().take(3) {
            let input = egraph.find(input);
            let t = egraph[input].data.tensor().filter(|t| {
                t.rank() == Some(3)
                    && t.dtype.is_some()
                    && t.shape.as_ref().is_some_and(|d| d[2].known().is_some())
            });
            if let Some(t) = t.filter(|_| computed(input)) {
                typed.push((input, t.clone()));
            }
        }
    }
    typed
}

/// Lowers `picked` back into a graph with the interface of `original`.
pub fn lower(original: &Graph, picked: Picked) -> Result<Graph> {
    // Output slots of tuple-valued ops, from the `get` classes that are needed.
    let mut slots: FxHashMap<(Id, usize), Id> = FxHashMap::default();
    for (class, node) in &picked.order {
        if let Onnx::Get { index, tuple } = node {
            slots.insert((tuple[0], *index), *class);
        }
    }

    let mut namer = Namer::new(original);
    for (out, &class) in original.outputs.iter().zip(&picked.outputs) {
        if matches!(picked.node(class), Some(Onnx::Op(_) | Onnx::Get { .. }))
            && namer.by_class.get(class).is_none()
        {
            namer.assign(class, out.name.clone());
        }
    }
    for (name, class) in &picked.names {
        if namer.by_class.get(*class).is_none() && !namer.used.contains(name.as_str()) {
            namer.assign(*class, name.clone());
        }
    }

    let mut graph = Graph {
        name: original.name.clone(),
        inputs: Vec::new(),
        outputs: original.outputs.clone(),
        nodes: Vec::new(),
        initializers: Vec::new(),
        value_info: Vec::new(),
        // The outputs keep their declarations, an output declared without a shape included.
        unshaped: original.unshaped.clone(),
        untyped: Vec::new(),
    };
    let mut folded = Folded::default();
    let initializers = InitializerIndex::new(original);
    let readers = reader_counts(&picked);
    for (class, node) in &picked.order {
        let class = *class;
        match node {
            Onnx::Input(name) | Onnx::Init(name) => {
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
            Onnx::Op(op) if op.op.as_str() == "Concat" => {
                if let Some(init) = fold_initializer_concat(&initializers, &picked, op) {
                    namer.by_class.insert(class, init.name.clone());
                    folded.push(init);
                    continue;
                }
                emit_op(&mut graph, &mut namer, &picked, &slots, class, op);
            }
            Onnx::Op(op) if op.op.as_str() == "Transpose" => {
                let source = (&initializers, &folded, &namer);
                if let Some(init) = fold_weight_transpose(source, &picked, &readers, op) {
                    namer.by_class.insert(class, init.name.clone());
                    folded.push(init);
                    continue;
                }
                emit_op(&mut graph, &mut namer, &picked, &slots, class, op);
            }
            Onnx::Op(op) if op.op.as_str().starts_with(RELAYOUT_DOMAIN) => {
                let init = fold_relayout(&initializers, &folded, &namer, &picked, class, op)?;
                namer.by_class.insert(class, init.name.clone());
                folded.push(init);
            }
            Onnx::Op(op) => emit_op(&mut graph, &mut namer, &picked, &slots, class, op),
            Onnx::Get { .. } => {
                // Named when its tuple op was emitted (tuples come first in the order).
                if namer.by_class.get(class).is_none() {
                    return Err(Error::Graph(
                        "a projection was lowered before its op".into(),
                    ));
                }
            }
            Onnx::Attr(_) | Onnx::Root(_) => {}
        }
    }
    let typed: Vec<ValueInfo> = picked
        .attention_inputs
        .iter()
        .filter_map(|(class, t)| {
            let dims = t.shape.as_ref()?.iter().map(|d| match d {
                SymDim::Known(v) => Dim::Fixed(*v),
                SymDim::Sym(s) => Dim::Sym(s.as_str().to_string()),
                SymDim::Unknown => Dim::Sym(String::new()),
            });
            Some(ValueInfo::new(
                namer.by_class.get(*class)?,
                t.dtype?,
                Shape::new(dims),
            ))
        })
        .collect();
    finish(original, graph, namer, &picked.outputs, folded.list, typed)
}

/// The original graph's initializers by name (the first of a name wins), so that looking one
/// up does not scan them all.
struct InitializerIndex<'g>(FxHashMap<&'g str, &'g Initializer>);

impl<'g> InitializerIndex<'g> {
    fn new(original: &'g Graph) -> InitializerIndex<'g> {
        let mut by_name =
            FxHashMap::with_capacity_and_hasher(original.initializers.len(), Default::default());
        for init in &original.initializers {
            by_name.entry(init.name.as_str()).or_insert(init);
        }
        InitializerIndex(by_name)
    }

    fn get(&self, name: &str) -> Option<&'g Initializer> {
        self.0.get(name).copied()
    }
}

/// How many chosen nodes (and graph outputs) read each needed class.
fn reader_counts(picked: &Picked) -> ByClass<usize> {
    let mut counts: ByClass<usize> = ByClass::default();
    let mut bump = |class: Id| {
        let n = counts.get(class).copied().unwrap_or(0);
        counts.insert(class, n + 1);
    };
    for (_, node) in &picked.order {
        node.children().iter().for_each(|&c| bump(c));
    }
    picked.outputs.iter().for_each(|&c| bump(c));
    counts
}

/// `Transpose(w)` of a 2-D initializer `w` that nothing else reads (perm `[1, 0]` or unset)
/// becomes the initializer `<w>__t`, transposed lazily when saved (as `mobius build` stores
/// HF's `[out, in]` weights): exporters that keep `Linear`'s weight transpose in the graph
/// (torch.onnx dynamo with `optimize=False`) then read their weights as the builder's do, a
/// packed q|k|v weight (a `Concat` of them, folded here or, when small, in the e-graph)
/// included. An initializer read elsewhere
/// too (a tied embedding) stays, so no weight is stored twice.
fn fold_weight_transpose(
    (initializers, folded, namer): (&InitializerIndex<'_>, &Folded, &Namer),
    picked: &Picked,
    readers: &ByClass<usize>,
    op: &OpNode,
) -> Option<Initializer> {
    let &[w] = op.input_ids() else {
        return None;
    };
    let init = match picked.node(w) {
        Some(Onnx::Init(name)) => initializers.get(name.as_str())?,
        Some(Onnx::Const(_)) => folded.get(namer.by_class.get(w)?)?,
        Some(Onnx::Op(c)) if c.op.as_str() == "Concat" => folded.get(namer.by_class.get(w)?)?,
        _ => return None,
    };
    let [rows, cols] = init.shape[..] else {
        return None;
    };
    let swaps = match op.attr_id("perm").and_then(|a| picked.attr(a)) {
        Some(AttrValue::Ints(p)) => p[..] == [1, 0],
        Some(AttrValue::Unset) | None => true,
        _ => false,
    };
    (swaps && readers.get(w).copied() == Some(1)).then(|| Initializer {
        name: format!("{}__t", init.name),
        dtype: init.dtype,
        shape: vec![cols, rows],
        source: init
            .source
            .clone()
            .map(|s| TensorSource::Transpose(Box::new(s))),
    })
}

/// A `Concat` of initializers becomes one initializer, concatenated lazily when saved (named
/// `<a>__<b>__…__axis_<n>__concat`).
fn fold_initializer_concat(
    initializers: &InitializerIndex<'_>,
    picked: &Picked,
    op: &OpNode,
) -> Option<Initializer> {
    let inits: Vec<&Initializer> = op
        .input_ids()
        .iter()
        .map(|&c| match picked.node(c) {
            Some(Onnx::Init(name)) => initializers.get(name.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let axis = match picked.attr(op.attr_id("axis")?)? {
        AttrValue::Int(a) => *a,
        _ => return None,
    };
    let first = inits.first()?;
    let rank = first.shape.len();
    let axis = usize::try_from(if axis < 0 { axis + rank as i64 } else { axis }).ok()?;
    let mut shape = first.shape.clone();
    shape[axis] = inits
        .iter()
        .map(|i| i.shape.get(axis).copied().unwrap_or(0))
        .sum();
    let names: Vec<&str> = inits.iter().map(|i| i.name.as_str()).collect();
    let sources: Option<Vec<TensorSource>> = inits.iter().map(|i| i.source.clone()).collect();
    Some(Initializer {
        name: format!("{}__axis_{axis}__concat", names.join("__")),
        dtype: first.dtype,
        shape,
        source: sources.map(|parts| TensorSource::Concat { parts, axis }),
    })
}

/// The initializers the lowering creates, in order, with an index by name (the first of a name
/// wins, as for the original ones) so that a relayout of one does not scan them all.
#[derive(Default)]
struct Folded {
    list: Vec<Initializer>,
    by_name: FxHashMap<String, usize>,
}

impl Folded {
    fn push(&mut self, init: Initializer) {
        self.by_name
            .entry(init.name.clone())
            .or_insert(self.list.len());
        self.list.push(init);
    }

    fn get(&self, name: &str) -> Option<&Initializer> {
        self.by_name.get(name).map(|&i| &self.list[i])
    }
}

/// The op-key prefix of weight relayouts (`ai.mobius::NBitsWeight`, …): never emitted as nodes,
/// always folded into initializers.
const RELAYOUT_DOMAIN: &str = "ai.mobius::";

/// A weight relayout of an initializer (original or folded) becomes one initializer,
/// computed lazily when saved: `<name>__nbits` (the MatMulNBits weight), `<name>__nbits_scales`
/// or `<name>__nbits_zero_points`, `<name>__from_nbits` (a MatMulNBits input read back into
/// the `DequantizeLinear` layout), `<name>__moe_fc1` / `<name>__moe_fc2` (MoE expert
/// weights of a dense block's stacks), `<name>__moe_gate` / `__moe_up` / `__moe_down` (the
/// stacks read back from them), `<name>__qmoe_fc1` / `__qmoe_fc2` (QMoE's packed expert
/// values) or `<name>__qmoe_gate` / `__qmoe_up` / `__qmoe_down` (the values read back).
fn fold_relayout(
    initializers: &InitializerIndex<'_>,
    folded: &Folded,
    namer: &Namer,
    picked: &Picked,
    class: Id,
    op: &OpNode,
) -> Result<Initializer> {
    let (_, kind) = op.domain_and_type();
    let child = op.input_ids()[0];
    let base = namer
        .by_class
        .get(child)
        .and_then(|name| initializers.get(name).or_else(|| folded.get(name)))
        .ok_or_else(|| {
            Error::Graph(format!(
                "{kind} of a computed value (weight relayouts apply to initializers only)"
            ))
        })?;
    let int = |name: &str| match op.attr_id(name).and_then(|id| picked.attr(id)) {
        Some(AttrValue::Int(v)) => Some(*v),
        _ => None,
    };
    let out = picked.relayout_types.get(class);
    let shape: Vec<usize> = out
        .and_then(|t| t.static_shape())
        .map(|s| s.iter().map(|&d| d as usize).collect())
        .ok_or_else(|| Error::Graph(format!("{kind} of `{}` has no static shape", base.name)))?;
    let dtype = out
        .and_then(|t| t.dtype)
        .ok_or_else(|| Error::Graph(format!("{kind} of `{}` has no type", base.name)))?;
    let suffix = match kind {
        "NBitsWeight" => "nbits",
        "NBitsScales" => "nbits_scales",
        "NBitsZeroPoints" => "nbits_zero_points",
        "MoEFc1" => "moe_fc1",
        "MoEFc2" => "moe_fc2",
        "MoEGateStack" => "moe_gate",
        "MoEUpStack" => "moe_up",
        "MoEDownStack" => "moe_down",
        "QMoEFc1Weight" => "qmoe_fc1",
        "QMoEFc2Weight" => "qmoe_fc2",
        "QMoEGateValues" => "qmoe_gate",
        "QMoEUpValues" => "qmoe_up",
        "QMoEDownValues" => "qmoe_down",
        _ => "from_nbits",
    };
    let source = match &base.source {
        Some(source) => Some(relayout_source(kind, source.clone(), base.dtype, &int)?),
        None => None,
    };
    Ok(Initializer {
        name: format!("{}__{suffix}", base.name),
        dtype,
        shape,
        source,
    })
}

fn emit_op(
    graph: &mut Graph,
    namer: &mut Namer,
    picked: &Picked,
    slots: &FxHashMap<(Id, usize), Id>,
    class: Id,
    op: &OpNode,
) {
    let (domain, op_type) = op.domain_and_type();
    let mut attrs: Attrs = op
        .attr_names()
        .iter()
        .zip(op.attr_ids())
        .filter_map(|(name, &c)| Some((name.to_string(), picked.attr(c)?.to_attr()?)))
        .collect();
    let mut inputs: Vec<String> = op
        .input_ids()
        .iter()
        .map(|&c| namer.by_class.name(c).to_string())
        .collect();
    // The trailing children of a node with subgraphs are the values they read ([`lift`]'s
    // captures): renamed inside the subgraphs where their producer now has another name.
    let probe = Node {
        attrs: attrs.clone(),
        ..Node::default()
    };
    let captures = probe.captures();
    if !captures.is_empty() {
        let held = inputs.split_off(inputs.len() - captures.len());
        let renames: rustc_hash::FxHashMap<String, String> = captures
            .into_iter()
            .zip(held)
            .filter(|(from, to)| from != to)
            .collect();
        let mut node = Node { attrs, ..probe };
        node.rename_captures(&renames);
        attrs = node.attrs;
    }
    trim_absent_layer_norm_bias(domain, op_type, &mut inputs);
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

/// A `LayerNormalization` whose optional bias is absent is written with two inputs, as
/// `mobius build` writes it: onnxruntime-genai's CPU session crashes (SIGSEGV) on the
/// trailing empty bias name of a bias-free norm (CohereLayerNorm read as LayerNormalization).
fn trim_absent_layer_norm_bias(domain: &str, op_type: &str, inputs: &mut Vec<String>) {
    if domain.is_empty()
        && op_type == "LayerNormalization"
        && inputs.len() == 3
        && inputs[2].is_empty()
    {
        inputs.pop();
    }
}

/// Output renaming, surviving value_info, inputs (dead ones dropped) and initializers.
fn finish(
    original: &Graph,
    mut graph: Graph,
    namer: Namer,
    outputs: &[Id],
    folded: Vec<Initializer>,
    typed: Vec<ValueInfo>,
) -> Result<Graph> {
    // Graph outputs whose value carries another name get an Identity.
    for (out, class) in original.outputs.iter().zip(outputs) {
        let value = namer.by_class.name(*class).to_string();
        if value != out.name {
            graph.nodes.push(Node {
                name: format!("{}_node", out.name),
                domain: String::new(),
                op_type: "Identity".into(),
                inputs: vec![value],
                outputs: vec![out.name.clone()],
                attrs: Attrs::new(),
            });
        }
    }
    let produced: FxHashSet<&str> = graph
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
    // The Attention inputs' types, for values produced here and not declared already.
    let mut declared: FxHashSet<String> = graph.value_info.iter().map(|v| v.name.clone()).collect();
    for v in typed {
        if produced.contains(v.name.as_str()) && declared.insert(v.name.clone()) {
            graph.value_info.push(v);
        }
    }
    // Leaves read by the emitted nodes (initializers folded into a concatenation are not).
    let captured: Vec<String> = graph.nodes.iter().flat_map(Node::captures).collect();
    let read: FxHashSet<&str> = graph
        .nodes
        .iter()
        .flat_map(|n| n.inputs.iter().map(String::as_str))
        .chain(captured.iter().map(String::as_str))
        .chain(original.outputs.iter().map(|o| o.name.as_str()))
        .collect();
    graph.inputs = original
        .inputs
        .iter()
        .filter(|v| read.contains(v.name.as_str()) || always_kept(&v.name))
        .cloned()
        .collect();
    graph.initializers = original
        .initializers
        .iter()
        .chain(&folded)
        .filter(|i| read.contains(i.name.as_str()))
        .cloned()
        .collect();
    graph.validate()?;
    Ok(graph)
}

/// Needed classes with their chosen nodes (children made canonical), children before parents,
/// in a deterministic depth-first order from the outputs; a cycle in the choice is an error.
fn topo_order(
    egraph: &OnnxGraph,
    roots: &[Id],
    chosen: &dyn Fn(Id) -> Onnx,
) -> Result<Vec<(Id, Onnx)>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    let mut marks: ByClass<Mark> = ByClass::default();
    let mut order = Vec::new();
    for &r in roots {
        // (class, its chosen node once expanded)
        let mut stack: Vec<(Id, Option<Onnx>)> = vec![(egraph.find(r), None)];
        while let Some((class, expanded)) = stack.pop() {
            if let Some(node) = expanded {
                marks.insert(class, Mark::Done);
                order.push((class, node));
                continue;
            }
            match marks.get(class) {
                Some(Mark::Done) => continue,
                Some(Mark::Visiting) => {
                    return Err(Error::Graph("the extracted graph has a cycle".into()));
                }
                None => {}
            }
            marks.insert(class, Mark::Visiting);
            let node = chosen(class).map_children(|c| egraph.find(c));
            let at = stack.len();
            for &child in node.children().iter().rev() {
                match marks.get(child) {
                    Some(Mark::Done) => {}
                    Some(Mark::Visiting) => {
                        return Err(Error::Graph("the extracted graph has a cycle".into()));
                    }
                    None => stack.push((child, None)),
                }
            }
            // Below its children, so that it is emitted after them.
            stack.insert(at, (class, Some(node)));
        }
    }
    Ok(order)
}

/// A map keyed by e-class id, stored densely over the id numbers (egg's ids are small
/// consecutive integers): a lookup neither hashes nor jumps around memory as a hash map over
/// tens of thousands of classes does.
struct ByClass<T>(Vec<Option<T>>);

impl<T> Default for ByClass<T> {
    fn default() -> ByClass<T> {
        ByClass(Vec::new())
    }
}

impl<T> ByClass<T> {
    fn get(&self, class: Id) -> Option<&T> {
        self.0.get(usize::from(class))?.as_ref()
    }

    fn insert(&mut self, class: Id, value: T) {
        let i = usize::from(class);
        if i >= self.0.len() {
            self.0.resize_with(i + 1, || None);
        }
        self.0[i] = Some(value);
    }
}

impl ByClass<String> {
    /// The name of a class that has one.
    ///
    /// # Panics
    /// If `class` has no name (a child lowered after its parent: a bug of the order).
    fn name(&self, class: Id) -> &str {
        match self.get(class) {
            Some(name) => name,
            None => panic!("e-class {class} has no value name yet"),
        }
    }
}

/// Unique value names.
struct Namer {
    used: FxHashSet<String>,
    by_class: ByClass<String>,
    counter: usize,
}

impl Namer {
    fn new(original: &Graph) -> Namer {
        let mut used = FxHashSet::with_capacity_and_hasher(
            original.inputs.len() + original.initializers.len() + original.nodes.len() * 2,
            Default::default(),
        );
        used.extend(original.inputs.iter().map(|v| v.name.clone()));
        used.extend(original.initializers.iter().map(|i| i.name.clone()));
        // Names defined inside subgraphs: a fresh name must not shadow them.
        for node in &original.nodes {
            for g in node.subgraphs() {
                used.extend(g.all_names().into_iter().map(str::to_string));
            }
        }
        Namer {
            used,
            by_class: ByClass::default(),
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
        if let Some(n) = self.by_class.get(class) {
            return n.clone();
        }
        let n = self.fresh(stem);
        self.by_class.insert(class, n.clone());
        n
    }
}
