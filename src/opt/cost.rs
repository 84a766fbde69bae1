//! The EP cost model: which ops the EP can run (others cost infinity) and a roofline estimate
//! of each op's time for a stated workload (prefill of `prefill_tokens` tokens, batch 1, empty
//! cache): `launch + max(bytes / bandwidth, flops / peak)` in microseconds.
//!
//! Extraction weighs the prefill workload only; `mobius cost` reports the same estimate
//! ([`CostModel::estimate`]) under the prefill and the decode workload ([`Workload::decode`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use egg::{Id, Symbol};

use super::analysis::{Kind, OnnxGraph};
use super::lang::{Onnx, OpNode};
use crate::ep::EpCapabilities;
use crate::ir::DType;
use crate::ops;
use crate::ops::cost::{Cost, Reads, Work};
use crate::ops::types::{SymDim, TensorType};
use crate::ops::value::AttrValue;

/// Cost of leaves, projections and attribute values: tiny but positive (keeps extraction
/// acyclic).
pub const EPSILON: f64 = 1e-3;

/// Concrete sizes substituted for symbolic dims.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    /// `batch`.
    pub batch: i64,
    /// `sequence_len` / `seq_len`.
    pub sequence: i64,
    /// `past_sequence_len` / `past_seq_len`.
    pub past: i64,
}

impl Workload {
    /// The workload extraction weighs: a prompt of `prefill_tokens` tokens, batch 1, no cache.
    pub fn prefill(p: &crate::ep::CostParams) -> Workload {
        Workload {
            batch: 1,
            sequence: i64::from(p.prefill_tokens),
            past: 0,
        }
    }

    /// One decoding step after that prompt: one new token, `prefill_tokens` in the cache.
    pub fn decode(p: &crate::ep::CostParams) -> Workload {
        Workload {
            batch: 1,
            sequence: 1,
            past: i64::from(p.prefill_tokens),
        }
    }

    /// The size of one term of a symbolic dim (`past_sequence_len`, `batch`, …) by its name.
    fn term(&self, term: &str) -> i64 {
        if term.contains("past") {
            self.past
        } else if term.contains("batch") {
            self.batch
        } else if term.contains("seq") {
            self.sequence
        } else {
            1
        }
    }

    /// The size of one term of a symbolic sum: the product of its `*` factors, integers as
    /// written and names sized by `named` (else [`Workload::term`]), so the flattened rows
    /// `batch_size*sequence_length` of a Gemm count `batch · sequence`, not `batch`.
    fn product(&self, term: &str, named: impl Fn(&str) -> Option<i64>) -> i64 {
        term.split('*')
            .map(str::trim)
            .map(|f| {
                f.parse::<i64>()
                    .ok()
                    .or_else(|| named(f))
                    .unwrap_or_else(|| self.term(f))
            })
            .fold(1i64, i64::saturating_mul)
    }

    /// The size of one dim under this workload (unknown dims count 1).
    pub fn dim(&self, d: &SymDim) -> i64 {
        match d {
            SymDim::Known(v) => *v,
            SymDim::Unknown => 1,
            SymDim::Sym(s) => s
                .as_str()
                .split(" + ")
                .map(|t| self.product(t, |_| None))
                .sum(),
        }
    }

    /// Elements of a tensor of type `t` (unknown rank counts 1).
    pub fn numel(&self, t: &TensorType) -> f64 {
        t.shape.as_ref().map_or(1.0, |s| {
            s.iter().map(|d| self.dim(d).max(0) as f64).product()
        })
    }
}

/// Which term of the roofline decides an estimate ([`Estimate::bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// The kernel's fixed launch overhead exceeds its memory and compute time.
    Launch,
    /// Bytes moved ÷ bandwidth exceeds launch overhead and compute time.
    Memory,
    /// FLOPs ÷ peak throughput exceeds launch overhead and memory time.
    Compute,
    /// Small integer shape arithmetic, run on the host (a tenth of a launch).
    Host,
    /// A constant or initializer-only value, folded into an initializer when saved.
    Folded,
    /// Not a kernel: a graph input, initializer, attribute or output projection.
    Leaf,
    /// The EP cannot run the op (infinite cost).
    Unsupported,
}

impl Bound {
    /// The lowercase name (`launch`, `memory`, …).
    pub fn name(self) -> &'static str {
        match self {
            Bound::Launch => "launch",
            Bound::Memory => "memory",
            Bound::Compute => "compute",
            Bound::Host => "host",
            Bound::Folded => "folded",
            Bound::Leaf => "leaf",
            Bound::Unsupported => "unsupported",
        }
    }
}

/// The cost model's estimate of one e-node under one workload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Predicted time, in microseconds (what extraction minimizes; infinite: unsupported).
    pub time_us: f64,
    /// Bytes read and written (0 when no kernel runs).
    pub bytes: f64,
    /// Floating-point operations (0 when no kernel runs).
    pub flops: f64,
    /// The term that decides `time_us`.
    pub bound: Bound,
}

impl Estimate {
    /// An estimate of `time_us` with no kernel traffic.
    fn fixed(time_us: f64, bound: Bound) -> Estimate {
        Estimate {
            time_us,
            bytes: 0.0,
            flops: 0.0,
            bound,
        }
    }
}

/// The cost model of one EP.
#[derive(Debug, Clone)]
pub struct CostModel<'a> {
    caps: &'a EpCapabilities,
    workload: Workload,
    /// The newest default-domain opset the model may declare: standard ops introduced later
    /// cost infinity.
    opset_ceiling: i64,
    /// Sizes of named dims that replace the workload's ([`CostModel::with_dims`]).
    dims: BTreeMap<String, i64>,
    /// [`Workload::dim`] of the symbolic dims met so far (a graph has a handful, met on
    /// almost every node).
    sym_dims: RefCell<HashMap<Symbol, i64>>,
}

impl<'a> CostModel<'a> {
    /// The model for `caps`, with its prefill workload.
    pub fn new(caps: &'a EpCapabilities) -> CostModel<'a> {
        CostModel {
            caps,
            workload: Workload::prefill(&caps.cost),
            opset_ceiling: super::opset::NEWEST,
            dims: BTreeMap::new(),
            sym_dims: RefCell::default(),
        }
    }

    /// This model under `workload` instead of the prefill one.
    pub fn with_workload(mut self, workload: Workload) -> CostModel<'a> {
        self.workload = workload;
        self.sym_dims = RefCell::default();
        self
    }

    /// This model with the named dims (a whole symbol such as `total_sequence_len`, or one
    /// term of a sum such as `past_sequence_len`) fixed to the given sizes; other dims follow
    /// the workload.
    pub fn with_dims(mut self, dims: BTreeMap<String, i64>) -> CostModel<'a> {
        self.dims = dims;
        self.sym_dims = RefCell::default();
        self
    }

    /// This model for a graph whose default-domain opset may rise to `ceiling` at most
    /// ([`super::opset::ceiling`]).
    pub fn with_opset_ceiling(mut self, ceiling: i64) -> CostModel<'a> {
        self.opset_ceiling = ceiling;
        self
    }

    /// [`Workload::dim`], remembered per symbol.
    fn dim(&self, d: &SymDim) -> i64 {
        match d {
            SymDim::Sym(s) => *self.sym_dims.borrow_mut().entry(*s).or_insert_with(|| {
                if self.dims.is_empty() {
                    return self.workload.dim(d);
                }
                let name = s.as_str();
                self.dims.get(name).copied().unwrap_or_else(|| {
                    name.split(" + ")
                        .map(|t| {
                            self.dims.get(t).copied().unwrap_or_else(|| {
                                self.workload.product(t, |f| self.dims.get(f).copied())
                            })
                        })
                        .sum()
                })
            }),
            _ => self.workload.dim(d),
        }
    }

    /// [`Workload::numel`] through [`CostModel::dim`].
    fn numel(&self, t: &TensorType) -> f64 {
        t.shape.as_ref().map_or(1.0, |s| {
            s.iter().map(|d| self.dim(d).max(0) as f64).product()
        })
    }

    /// The EP's name.
    pub fn ep_name(&self) -> &str {
        &self.caps.name
    }

    /// Whether the EP can run `op` producing `dtype` (`None`: unknown) with an input of
    /// rank `rank`.
    pub fn supports(&self, op: &OpNode, dtype: Option<DType>, rank: Option<usize>) -> bool {
        let c = self.caps;
        let (domain, op_type) = op.domain_and_type();
        let def = ops::find_in(domain, op_type);
        let runs = || {
            def.and_then(|d| d.cost.support)
                .is_none_or(|f| f(c, dtype, rank))
        };
        match domain {
            "" => {
                // An op newer than the opset the model may declare cannot be picked.
                let too_new = def
                    .and_then(|d| d.since)
                    .is_some_and(|v| v > self.opset_ceiling);
                !too_new && runs()
            }
            // Weight relayouts, always folded into initializers when the graph is saved.
            ops::MOBIUS_DOMAIN => true,
            _ => c.supports_contrib_ops && runs(),
        }
    }

    /// The kernels a `Scan` runs besides its own: its body's nodes once per step, the steps
    /// the first scan input's extent along its scan axis (0 for other ops). The rest of its
    /// estimate counts its inputs and outputs once, as for any kernel.
    fn scan_body_launches(&self, egraph: &OnnxGraph, op: &OpNode) -> f64 {
        if op.op.as_str() != "Scan" {
            return 0.0;
        }
        let attr = |name: &str| op.attr_id(name).and_then(|a| egraph[a].data.attr());
        let Some(AttrValue::Graph(body)) = attr("body") else {
            return 0.0;
        };
        let scanned = attr("num_scan_inputs")
            .and_then(AttrValue::int)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0);
        let axis = attr("scan_input_axes")
            .and_then(AttrValue::ints)
            .and_then(|a| a.first().copied())
            .unwrap_or(0);
        let first = op.input_ids().len().checked_sub(scanned);
        let steps = first
            .and_then(|i| op.input_ids().get(i))
            .and_then(|&i| egraph[i].data.tensor()?.shape.clone())
            .and_then(|s| {
                let axis = usize::try_from(axis.rem_euclid(s.len().max(1) as i64)).ok()?;
                s.get(axis).map(|d| self.dim(d))
            })
            .unwrap_or(1)
            .max(1);
        body.graph().nodes.len() as f64 * steps as f64
    }

    /// Whether the attributes set on `op` exist at the opset the model may declare: `Shape`'s
    /// `start` and `end` appeared in opset 15 (a rule may set them on a model that declares an
    /// older opset and keeps it).
    fn attributes_declarable(&self, egraph: &OnnxGraph, op: &OpNode) -> bool {
        if op.op.as_str() != "Shape"
            || !op.domain_and_type().0.is_empty()
            || self.opset_ceiling >= 15
        {
            return true;
        }
        ["start", "end"].iter().all(|name| {
            op.attr_id(name)
                .is_none_or(|a| matches!(egraph[a].data.attr(), None | Some(AttrValue::Unset)))
        })
    }

    /// The cost of choosing `node` for `class` (children not included): the time of
    /// [`CostModel::estimate`].
    pub fn node_cost(&self, egraph: &OnnxGraph, class: Id, node: &Onnx) -> f64 {
        self.estimate(egraph, class, node).time_us
    }

    /// The estimate of choosing `node` for `class` (children not included).
    pub fn estimate(&self, egraph: &OnnxGraph, class: Id, node: &Onnx) -> Estimate {
        let Onnx::Op(op) = node else {
            return Estimate::fixed(EPSILON, Bound::Leaf);
        };
        let data = &egraph[class].data;
        let outputs: &[TensorType] = match &data.kind {
            Kind::Tensor(t) => std::slice::from_ref(t),
            Kind::Tuple(ts) => ts,
            _ => &[],
        };
        let inputs = || {
            op.input_ids()
                .iter()
                .filter_map(|&i| egraph[i].data.tensor())
        };
        let dtype = outputs.first().and_then(|t| t.dtype);
        if !self.supports(op, dtype, inputs().next().and_then(|t| t.rank()))
            || !self.attributes_declarable(egraph, op)
        {
            return Estimate::fixed(f64::INFINITY, Bound::Unsupported);
        }
        let name = op.op.as_str();
        let facts = ops::find(name).map_or(Cost::KERNEL, |d| d.cost);
        if data.konst.is_some() || (data.init_only && facts.folds_on_initializers) {
            return Estimate::fixed(EPSILON, Bound::Folded); // folded into an initializer when saved
        }
        let w = &self.workload;
        let p = &self.caps.cost;
        // Shape arithmetic (small integer or boolean results, e.g. sequence lengths) runs on
        // the host in practice: a tenth of a kernel launch.
        let small_index_math = outputs.iter().all(|t| {
            matches!(t.dtype, Some(DType::I64 | DType::I32 | DType::Bool)) && self.numel(t) <= 64.0
        });
        if small_index_math && !outputs.is_empty() {
            return Estimate::fixed(p.launch_overhead_us * 0.1, Bound::Host);
        }
        let size = |t: &TensorType| self.numel(t) * t.dtype.map_or(4, DType::size) as f64;
        let read: f64 = match facts.reads {
            Reads::Lookup => {
                inputs().skip(1).map(size).sum::<f64>() + outputs.iter().map(size).sum::<f64>()
            }
            Reads::Leading(n) => op.input_ids()[..op.inputs.min(n)]
                .iter()
                .filter_map(|&i| egraph[i].data.tensor())
                .map(size)
                .sum(),
            Reads::All => inputs().map(size).sum(),
        };
        let bytes = read + outputs.iter().map(size).sum::<f64>();
        let out_elems = outputs.first().map_or(1.0, |t| self.numel(t));
        let flops = match facts.work {
            Work::Product => {
                let k = inputs()
                    .next()
                    .and_then(|t| t.shape.as_ref()?.last().map(|d| self.dim(d)))
                    .unwrap_or(1) as f64;
                2.0 * out_elems * k
            }
            Work::Experts => {
                let k = op
                    .attr_id("k")
                    .and_then(|a| egraph[a].data.attr()?.int())
                    .unwrap_or(1) as f64;
                let inter = op
                    .input_ids()
                    .get(4)
                    .and_then(|&i| egraph[i].data.tensor()?.shape.as_ref()?.last().cloned())
                    .map_or(1, |d| self.dim(&d)) as f64;
                6.0 * k * inter * out_elems
            }
            Work::PackedExperts => {
                let int = |name: &str, default: i64| {
                    op.attr_id(name)
                        .and_then(|a| egraph[a].data.attr()?.int())
                        .unwrap_or(default)
                };
                let packed = op
                    .input_ids()
                    .get(5)
                    .and_then(|&i| egraph[i].data.tensor()?.shape.as_ref()?.last().cloned())
                    .map_or(1, |d| self.dim(&d)) as f64;
                let bits = int("expert_weight_bits", 4).clamp(1, 8) as f64;
                6.0 * int("k", 1) as f64 * packed * 8.0 / bits * out_elems
            }
            Work::Attention => {
                let total = outputs
                    .get(1)
                    .and_then(|t| t.shape.as_ref()?.get(2).map(|d| self.dim(d)))
                    .unwrap_or(w.sequence) as f64;
                4.0 * out_elems * total
            }
            Work::PerElement => out_elems,
        };
        let peak = match dtype {
            Some(DType::F16 | DType::BF16) => p.peak_tflops_f16,
            _ => p.peak_tflops_f32,
        };
        let memory_us = bytes / (p.memory_bandwidth_gbps * 1e3);
        let compute_us = flops / (peak * 1e6);
        let (fixed_us, roofline_us) = match self.caps.cost_ops.get(name) {
            Some(c) => (
                p.launch_overhead_us + c.overhead_us,
                c.scale * memory_us.max(compute_us),
            ),
            None => (p.launch_overhead_us, memory_us.max(compute_us)),
        };
        let fixed_us = fixed_us + p.launch_overhead_us * self.scan_body_launches(egraph, op);
        let bound = if fixed_us >= roofline_us {
            Bound::Launch
        } else if memory_us >= compute_us {
            Bound::Memory
        } else {
            Bound::Compute
        };
        Estimate {
            time_us: fixed_us + roofline_us,
            bytes,
            flops,
            bound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_products_multiply_their_factors() {
        let w = Workload {
            batch: 2,
            sequence: 128,
            past: 7,
        };
        let d = |s: &str| w.dim(&SymDim::Sym(Symbol::from(s)));
        assert_eq!(d("batch_size*sequence_length"), 256);
        assert_eq!(d("2*sequence_length"), 256);
        assert_eq!(d("past_sequence_length + sequence_length"), 135);
        assert_eq!(d("sequence_length + -1"), 127);
    }
}
