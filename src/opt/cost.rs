//! The EP cost model: which ops the EP can run (others cost infinity) and a roofline estimate
//! of each op's time for a stated workload (prefill of `prefill_tokens` tokens, batch 1, empty
//! cache): `launch + max(bytes / bandwidth, flops / peak)` in microseconds.

use std::cell::RefCell;
use std::collections::HashMap;

use egg::{Id, Symbol};

use super::analysis::{Kind, OnnxGraph};
use super::lang::{Onnx, OpNode};
use super::types::{SymDim, TensorType};
use crate::ep::EpCapabilities;
use crate::ir::DType;

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
    /// The size of one dim under this workload (unknown dims count 1).
    pub fn dim(&self, d: &SymDim) -> i64 {
        match d {
            SymDim::Known(v) => *v,
            SymDim::Unknown => 1,
            SymDim::Sym(s) => s
                .as_str()
                .split(" + ")
                .map(|term| {
                    if term.contains("past") {
                        self.past
                    } else if term.contains("batch") {
                        self.batch
                    } else if term.contains("seq") {
                        self.sequence
                    } else {
                        1
                    }
                })
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

/// The cost model of one EP.
#[derive(Debug, Clone)]
pub struct CostModel<'a> {
    caps: &'a EpCapabilities,
    workload: Workload,
    /// The newest default-domain opset the model may declare: standard ops introduced later
    /// cost infinity.
    opset_ceiling: i64,
    /// [`Workload::dim`] of the symbolic dims met so far (a graph has a handful, met on
    /// almost every node).
    sym_dims: RefCell<HashMap<Symbol, i64>>,
}

impl<'a> CostModel<'a> {
    /// The model for `caps`, with its prefill workload.
    pub fn new(caps: &'a EpCapabilities) -> CostModel<'a> {
        CostModel {
            caps,
            workload: Workload {
                batch: 1,
                sequence: caps.cost.prefill_tokens as i64,
                past: 0,
            },
            opset_ceiling: super::opset::NEWEST,
            sym_dims: RefCell::default(),
        }
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
            SymDim::Sym(s) => *self
                .sym_dims
                .borrow_mut()
                .entry(*s)
                .or_insert_with(|| self.workload.dim(d)),
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
        if domain.is_empty()
            && super::opset::introduced_in(op_type).is_some_and(|v| v > self.opset_ceiling)
        {
            return false;
        }
        match (domain, op_type) {
            ("", "Attention") => c.supports_attention,
            ("", "RotaryEmbedding") => c.supports_rotary_embedding,
            ("", "Range") => c.supports_range,
            ("", "TensorScatter") => c.supports_tensor_scatter,
            ("", "RMSNormalization") => c.supports_rank4_rmsnorm || rank != Some(4),
            ("", _) => true,
            // Weight relayouts, always folded into initializers when the graph is saved.
            ("ai.mobius", _) => true,
            (_, _) if !c.supports_contrib_ops => false,
            ("com.microsoft", "GroupQueryAttention") => {
                dtype.is_some_and(|d| c.gqa_dtypes.contains(&d))
            }
            ("com.microsoft", "SkipSimplifiedLayerNormalization" | "SkipLayerNormalization") => {
                c.supports_skip_layer_norm
            }
            ("com.microsoft", "RotaryEmbedding") => c.supports_fused_rope,
            ("com.microsoft", "GatherBlockQuantized") => c.supports_matmul_nbits,
            ("com.microsoft", "MatMulNBits") => {
                c.supports_matmul_nbits && matches!(dtype, Some(DType::F32 | DType::F16))
            }
            ("com.microsoft", "PackedMultiHeadAttention") => c.supports_packed_multi_head_attention,
            // onnxruntime's CPU kernel takes f32 and f16 only (the CUDA one bf16 too, unverified).
            ("com.microsoft", "MoE") => {
                c.supports_fused_moe && matches!(dtype, Some(DType::F32 | DType::F16))
            }
            // The fused elementwise kernels come with the Skip*Normalization ones.
            ("com.microsoft", "BiasGelu" | "FastGelu") => c.supports_skip_layer_norm,
            _ => true,
        }
    }

    /// The cost of choosing `node` for `class` (children not included).
    pub fn node_cost(&self, egraph: &OnnxGraph, class: Id, node: &Onnx) -> f64 {
        let Onnx::Op(op) = node else { return EPSILON };
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
        if !self.supports(op, dtype, inputs().next().and_then(|t| t.rank())) {
            return f64::INFINITY;
        }
        let name = op.op.as_str();
        if data.konst.is_some()
            || (data.init_only && (name == "Concat" || name.starts_with("ai.mobius::")))
        {
            return EPSILON; // folded into an initializer when saved
        }
        let w = &self.workload;
        let p = &self.caps.cost;
        // Shape arithmetic (small integer or boolean results, e.g. sequence lengths) runs on
        // the host in practice: a tenth of a kernel launch.
        let small_index_math = outputs.iter().all(|t| {
            matches!(t.dtype, Some(DType::I64 | DType::I32 | DType::Bool)) && self.numel(t) <= 64.0
        });
        if small_index_math && !outputs.is_empty() {
            return p.launch_overhead_us * 0.1;
        }
        let size = |t: &TensorType| self.numel(t) * t.dtype.map_or(4, DType::size) as f64;
        // Lookups read only the rows they need: a Gather reads what it writes (plus indices),
        // and GroupQueryAttention reads one cos/sin row per new token, not the whole tables.
        let read: f64 = match name {
            "Gather" | "com.microsoft::GatherBlockQuantized" => {
                inputs().skip(1).map(size).sum::<f64>() + outputs.iter().map(size).sum::<f64>()
            }
            "com.microsoft::GroupQueryAttention" => op.input_ids()[..op.inputs.min(7)]
                .iter()
                .filter_map(|&i| egraph[i].data.tensor())
                .map(size)
                .sum(),
            _ => inputs().map(size).sum(),
        };
        let bytes = read + outputs.iter().map(size).sum::<f64>();
        let out_elems = outputs.first().map_or(1.0, |t| self.numel(t));
        let flops = match name {
            "MatMul" | "Gemm" | "com.microsoft::MatMulNBits" => {
                let k = inputs()
                    .next()
                    .and_then(|t| t.shape.as_ref()?.last().map(|d| self.dim(d)))
                    .unwrap_or(1) as f64;
                2.0 * out_elems * k
            }
            // Each token runs k experts of two projections to 2·I and one back to H.
            "com.microsoft::MoE" => {
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
            "Attention" | "com.microsoft::GroupQueryAttention" => {
                let total = outputs
                    .get(1)
                    .and_then(|t| t.shape.as_ref()?.get(2).map(|d| self.dim(d)))
                    .unwrap_or(w.sequence) as f64;
                4.0 * out_elems * total
            }
            _ => out_elems,
        };
        let peak = match dtype {
            Some(DType::F16 | DType::BF16) => p.peak_tflops_f16,
            _ => p.peak_tflops_f32,
        };
        let memory_us = bytes / (p.memory_bandwidth_gbps * 1e3);
        let compute_us = flops / (peak * 1e6);
        p.launch_overhead_us + memory_us.max(compute_us)
    }
}
