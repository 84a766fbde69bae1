//! `mobius cost`: the EP cost model's estimate of an ONNX model, node by node.
//!
//! The model is lifted into an e-graph as the optimizer lifts it, extracted with the cost
//! model extraction uses (so constants fold as they would), and every chosen node is
//! estimated by [`CostModel::estimate`] under the prefill workload extraction weighs and the
//! decode workload ([`Workload::decode`]). No rewrite runs: this is the cost of the graph as
//! written.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;

use egg::Id;
use serde::Serialize;

use crate::ep::EpCapabilities;
use crate::onnx::import;
use crate::ops::types::SymDim;
use crate::opt::analysis::OnnxGraph;
use crate::opt::cost::{Bound, CostModel, Estimate, Workload};
use crate::opt::extract::{greedy_dag, ExtractError};
use crate::opt::lang::Onnx;
use crate::opt::lift::{lift, Lifted};
use crate::opt::opset;
use crate::rulebook::contrib_functions::ContribFunctions;
use crate::{Error, Result};

/// The largest `--dims` size: 2^40 (sums of a few such dims and products with element sizes
/// stay far from overflowing).
pub const MAX_DIM: usize = 1 << 40;

/// Options of [`cost_file`].
#[derive(Debug, Clone)]
pub struct CostOptions {
    /// The model (external data is not read: only shapes matter).
    pub model: PathBuf,
    /// The EP whose cost model estimates it.
    pub ep: EpCapabilities,
    /// Sizes of named symbolic dims, in both workloads (a whole symbol or one term of a sum).
    pub dims: BTreeMap<String, usize>,
}

/// The two workloads of an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pair {
    /// A prompt of `prefill_tokens` tokens, batch 1, empty cache (what extraction weighs).
    pub prefill: Estimate,
    /// One new token after that prompt.
    pub decode: Estimate,
}

/// One node of the model and its estimates.
#[derive(Debug, Clone, Serialize)]
pub struct NodeCost {
    /// The node's first output name.
    pub name: String,
    /// `domain::op` (`MatMul`, `com.microsoft::GroupQueryAttention`).
    pub op: String,
    /// Its estimates.
    #[serde(flatten)]
    pub cost: Pair,
}

/// The nodes of one op type, together.
#[derive(Debug, Clone, Serialize)]
pub struct OpCost {
    /// `domain::op`.
    pub op: String,
    /// How many nodes.
    pub count: usize,
    /// Prefill time, bytes and FLOPs summed; bound: the one that decides most of the time.
    pub prefill: Estimate,
    /// Decode, likewise.
    pub decode: Estimate,
}

/// The estimate of a whole model.
#[derive(Debug, Clone, Serialize)]
pub struct CostReport {
    /// The EP.
    pub ep: String,
    /// The EP's roofline parameters.
    pub params: crate::ep::CostParams,
    /// Every node that runs (or folds), in execution order.
    pub nodes: Vec<NodeCost>,
    /// Per op type, most prefill time first.
    pub ops: Vec<OpCost>,
    /// The whole model's prefill estimate (bound: the one deciding most of its time).
    pub total_prefill: Estimate,
    /// The whole model's decode estimate.
    pub total_decode: Estimate,
}

/// Estimates the model at `opts.model` with `opts.ep`'s cost model.
///
/// A model the EP cannot run, an unreadable or an invalid model fail with [`Error::Onnx`]
/// naming the file (and the ops the EP cannot run); a `--dims` name the model lacks with
/// [`Error::Usage`].
pub fn cost_file(opts: &CostOptions) -> Result<CostReport> {
    let model = import::load(&opts.model, &ContribFunctions)?;
    let invalid = |message: String| Error::Onnx {
        path: opts.model.clone(),
        message: format!("invalid graph: {message}"),
    };
    let Lifted {
        egraph,
        root,
        names,
    } = lift(&model.graph).map_err(|e| match e {
        Error::Graph(m) => invalid(m),
        other => other,
    })?;
    let known = dim_names(&egraph);
    let mut dims = BTreeMap::new();
    for (name, &n) in &opts.dims {
        if !known.contains(name.as_str()) {
            let listed: Vec<&str> = known.iter().copied().collect();
            return Err(Error::Usage(format!(
                "--dims {name}: {} has no dim of that name (its symbolic dims: {})",
                opts.model.display(),
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed.join(", ")
                }
            )));
        }
        if n > MAX_DIM {
            return Err(Error::Usage(format!(
                "--dims {name}={n}: a size may be at most {MAX_DIM} (2^40)"
            )));
        }
        let n = n as i64;
        dims.insert(name.clone(), n);
    }
    let ceiling = opset::ceiling(&model);
    let p = &opts.ep.cost;
    let prefill = CostModel::new(&opts.ep)
        .with_opset_ceiling(ceiling)
        .with_dims(dims.clone());
    let decode = CostModel::new(&opts.ep)
        .with_opset_ceiling(ceiling)
        .with_workload(Workload::decode(p))
        .with_dims(dims);
    let extraction = greedy_dag(&egraph, &[root], |class, node| {
        prefill.node_cost(&egraph, class, node)
    })
    .map_err(|e| match e {
        ExtractError::Unextractable { .. } => {
            let mut ops: Vec<String> = egraph
                .classes()
                .flat_map(|c| c.nodes.iter().map(move |n| (c.id, n)))
                .filter(|(id, n)| prefill.node_cost(&egraph, *id, n).is_infinite())
                .map(|(_, n)| n.to_string())
                .collect();
            ops.sort();
            ops.dedup();
            Error::Onnx {
                path: opts.model.clone(),
                message: format!(
                    "execution provider `{}` cannot run {} (`mobius optimize` the model for \
                     it first, or cost it for the EP it was built for)",
                    opts.ep.name,
                    ops.join(", ")
                ),
            }
        }
        other => invalid(other.to_string()),
    })?;
    let labels = labels(&egraph, &names);
    let mut nodes = Vec::new();
    for class in extraction.topo_order(&egraph, &[root]) {
        let node = extraction.node(class);
        let Onnx::Op(op) = node else { continue };
        nodes.push(NodeCost {
            name: labels
                .get(&class)
                .cloned()
                .unwrap_or_else(|| format!("({} #{class})", op.op)),
            op: op.op.to_string(),
            cost: Pair {
                prefill: prefill.estimate(&egraph, class, node),
                decode: decode.estimate(&egraph, class, node),
            },
        });
    }
    let ops = by_op(&nodes);
    let all: Vec<&NodeCost> = nodes.iter().collect();
    let (total_prefill, total_decode) = sum(&all);
    Ok(CostReport {
        ep: opts.ep.name.clone(),
        params: *p,
        nodes,
        ops,
        total_prefill,
        total_decode,
    })
}

/// The names of the symbolic dims of `egraph`'s tensors, whole and term by term.
fn dim_names(egraph: &OnnxGraph) -> std::collections::BTreeSet<&'static str> {
    let mut names = std::collections::BTreeSet::new();
    for class in egraph.classes() {
        let Some(t) = class.data.tensor() else {
            continue;
        };
        for d in t.shape.iter().flatten() {
            if let SymDim::Sym(s) = d {
                names.insert(s.as_str());
                names.extend(s.as_str().split(" + "));
            }
        }
    }
    names
}

/// A name for each class: the output name the model gave it (a multi-output node takes the
/// name of its first named output).
fn labels(egraph: &OnnxGraph, names: &[(String, Id)]) -> HashMap<Id, String> {
    let mut labels = HashMap::new();
    for (name, id) in names {
        let id = egraph.find(*id);
        labels.entry(id).or_insert_with(|| name.clone());
        for node in &egraph[id].nodes {
            if let Onnx::Get { tuple: [t], .. } = node {
                labels
                    .entry(egraph.find(*t))
                    .or_insert_with(|| name.clone());
            }
        }
    }
    labels
}

/// The nodes of `nodes` summed per op type, most prefill time first.
fn by_op(nodes: &[NodeCost]) -> Vec<OpCost> {
    let mut groups: BTreeMap<&str, Vec<&NodeCost>> = BTreeMap::new();
    for n in nodes {
        groups.entry(&n.op).or_default().push(n);
    }
    let mut ops: Vec<OpCost> = groups
        .into_iter()
        .map(|(op, group)| {
            let (prefill, decode) = sum(&group);
            OpCost {
                op: op.to_string(),
                count: group.len(),
                prefill,
                decode,
            }
        })
        .collect();
    ops.sort_by(|a, b| {
        b.prefill
            .time_us
            .total_cmp(&a.prefill.time_us)
            .then_with(|| a.op.cmp(&b.op))
    });
    ops
}

/// The sums of `nodes`' prefill and decode estimates.
fn sum(nodes: &[&NodeCost]) -> (Estimate, Estimate) {
    (
        sum_of(nodes.iter().map(|n| n.cost.prefill)),
        sum_of(nodes.iter().map(|n| n.cost.decode)),
    )
}

/// Times, bytes and FLOPs summed; the bound is the one that decides the most time.
fn sum_of(estimates: impl Iterator<Item = Estimate>) -> Estimate {
    let mut time_by_bound: BTreeMap<Bound, f64> = BTreeMap::new();
    let mut total = Estimate {
        time_us: 0.0,
        bytes: 0.0,
        flops: 0.0,
        bound: Bound::Leaf,
    };
    for e in estimates {
        total.time_us += e.time_us;
        total.bytes += e.bytes;
        total.flops += e.flops;
        *time_by_bound.entry(e.bound).or_default() += e.time_us;
    }
    if let Some((&bound, _)) = time_by_bound
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1).then_with(|| b.0.cmp(a.0)))
    {
        total.bound = bound;
    }
    total
}

impl CostReport {
    /// The report as JSON (infinite times as `null`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("the report serialises")
    }
}

/// Microseconds, shortly.
fn us(t: f64) -> String {
    if t.is_infinite() {
        "inf".into()
    } else if t >= 100.0 {
        format!("{t:.0}")
    } else {
        format!("{t:.2}")
    }
}

/// A count with an SI suffix (`1.2M`).
fn si(v: f64) -> String {
    let (v, unit) = if v >= 1e12 {
        (v / 1e12, "T")
    } else if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    format!("{v:.1}{unit}")
}

impl fmt::Display for CostReport {
    /// Parameters, nodes, op types and totals as aligned text tables.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.params;
        writeln!(
            f,
            "EP {}: launch {} µs, {} GB/s, {} TFLOP/s f32, {} TFLOP/s f16; prefill {} tokens, decode 1 token after {}",
            self.ep,
            p.launch_overhead_us,
            p.memory_bandwidth_gbps,
            p.peak_tflops_f32,
            p.peak_tflops_f16,
            p.prefill_tokens,
            p.prefill_tokens
        )?;
        let row = |f: &mut fmt::Formatter<'_>, first: &str, second: &str, c: &Pair| {
            writeln!(
                f,
                "{first:<40} {second:<48} {:>10} {:>8} {:>8} {:<8} {:>9} {:>8} {:>8} {:<8}",
                us(c.prefill.time_us),
                si(c.prefill.bytes),
                si(c.prefill.flops),
                c.prefill.bound.name(),
                us(c.decode.time_us),
                si(c.decode.bytes),
                si(c.decode.flops),
                c.decode.bound.name(),
            )
        };
        let header = |f: &mut fmt::Formatter<'_>, first: &str, second: &str| {
            writeln!(
                f,
                "{first:<40} {second:<48} {:>10} {:>8} {:>8} {:<8} {:>9} {:>8} {:>8} {:<8}",
                "prefill µs", "bytes", "FLOPs", "bound", "decode µs", "bytes", "FLOPs", "bound"
            )
        };
        writeln!(f)?;
        header(f, "node", "op")?;
        for n in &self.nodes {
            row(f, &n.name, &n.op, &n.cost)?;
        }
        writeln!(f)?;
        header(f, "op type", "count")?;
        for o in &self.ops {
            let pair = Pair {
                prefill: o.prefill,
                decode: o.decode,
            };
            row(f, &o.op, &o.count.to_string(), &pair)?;
        }
        writeln!(f)?;
        let total = Pair {
            prefill: self.total_prefill,
            decode: self.total_decode,
        };
        row(f, "total", &format!("{} nodes", self.nodes.len()), &total)
    }
}
