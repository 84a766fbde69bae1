//! The sparse mixture-of-experts block in standard ONNX: a router picks `top_k` of `experts`
//! SwiGLU MLPs per token and the block returns their outputs weighted by the routing weights.
//!
//! # Form and cost
//!
//! Every expert is computed for every token and the experts a token did not pick are weighted
//! by exactly 0 (a dense "routing matrix" `[B, S, E]` that holds the top-k weights at the
//! picked experts' columns). With the expert weights stacked at save time, the whole block is
//! three plain 2-D weight MatMuls:
//!
//! ```text
//! g = x @ Wg          Wg = [gate_0ᵀ | … | gate_{E-1}ᵀ]  [H, E·I]
//! u = x @ Wu          Wu = [up_0ᵀ   | … | up_{E-1}ᵀ]    [H, E·I]
//! a = (g·σ(g)·u)[B, S, E, I] · R[B, S, E, 1]            (R: routing matrix)
//! y = a[B, S, E·I] @ Wd   Wd = [down_0ᵀ; …; down_{E-1}ᵀ] [E·I, H]
//! ```
//!
//! The trade-off: compute and weight traffic grow with the number of experts (E/k times a
//! sparse implementation: 4× for Mixtral's 2 of 8, 16× for 8 of 128), in exchange for an exact
//! result (an unpicked expert adds exact zeros), static shapes (NPU-class EPs), a fixed handful
//! of ops per layer whatever E is, and weights that every weight rewrite (int4 MatMulNBits,
//! packing) already handles. The alternatives in standard ONNX either gather each token's
//! k expert matrices (`Gather` of `[E, H, I]` stacks by the top-k indices: cost ∝ k, but it
//! materialises `T·k` weight matrices, prohibitive for a prefill of T tokens) or unroll one
//! `NonZero`/`Gather`/`ScatterND` branch per expert (cost ∝ k for every T, but data-dependent
//! shapes and E branches per layer). Where the EP has a fused kernel
//! (`com.microsoft::MoE`), that kernel is the sparse implementation.
//!
//! Zero experts (LongCat-Flash, [`MoeSpec::zero_experts`]) are router choices past the experts
//! that pass the token through: the routing matrix has their columns too, and the block adds the
//! token times their summed weights to the experts' output.
//!
//! Ungated squared-ReLU experts whose outputs are RMS-normalised one by one before they are
//! weighted (Ergo, [`ExpertWeights::Relu2InOut`] with [`MoeSpec::expert_norm`]) cannot sum
//! their down projections in one MatMul: each expert's down projection is its own MatMul.
//! Without that norm (Nemotron-H, [`ExpertWeights::Relu2PerExpert`]) they are the block above
//! with `relu(u)²` for the gated activation and no gate projection.
//!
//! # Routing
//!
//! As transformers computes it: router logits `x @ Wrᵀ` in the model dtype, then in f32
//! (a Cast around it in f16/bf16 builds, as transformers' `router_logits.float()`) the
//! [`Router`]'s weights: Softmax over the experts, TopK, and the top-k weights divided by their
//! sum when `normalize` is set (the softmax of the top-k logits, Granite-MoE's order, is the
//! same); Phi-3.5-MoE's sparsemixer (see [`Router::SparseMixer`]); or score-corrected routing
//! (see [`Router::Corrected`]: softmax or sigmoid scores, the top-k picked on the scores plus
//! a per-expert bias, weighted by the scores renormalised).

use super::{gated_mlp, linear, scalar, GateActivation};
use crate::config::ArchConfig;
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// The per-expert scores a [`Router::Corrected`] router computes from its logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scores {
    /// Softmax over the experts (ERNIE 4.5 MoE).
    Softmax,
    /// Sigmoid of each logit (MiniMax-M2).
    Sigmoid,
}

/// How a MoE block's router turns its logits into each token's expert weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Router {
    /// Softmax over the experts, then the top-k probabilities, divided by their sum when
    /// `normalize` is set (`norm_topk_prob`; Mixtral always).
    Softmax {
        /// Whether the top-k weights are renormalised.
        normalize: bool,
    },
    /// Phi-3.5-MoE's sparsemixer at inference (always 2 experts): the first pick is the
    /// top logit `m₁`, weighted by the softmax of the logits with every logit `s` for which
    /// `(m₁ − s) / max(|s|, m₁) > 2·jitter_eps` masked to −∞; the second pick is the top
    /// logit `m₂` once the first is masked, weighted by the softmax of those logits with the
    /// same test against `m₂` (`max(|s|, m₂)` on the unmasked `s`). The weights are not
    /// renormalised.
    SparseMixer {
        /// `router_jitter_noise`.
        jitter_eps: f32,
    },
    /// Score-corrected routing: the experts' `scores`; the top-k of `scores + bias` (one
    /// f32 correction per expert, checkpoint tensor `{prefix}.{bias}` of `E` values in any
    /// shape) are picked, weighted by their scores (without the bias) divided by their sum,
    /// the sum clamped below at `min_sum` where one is given.
    Corrected {
        /// Softmax or sigmoid.
        scores: Scores,
        /// The correction's module path and name inside the block (`e_score_correction_bias`).
        bias: &'static str,
        /// The least divisor of the renormalisation (ERNIE 4.5 MoE's `moe_norm_min`).
        min_sum: Option<f32>,
    },
    /// DeepSeek's router: see [`GroupedRouter`].
    Grouped(GroupedRouter),
    /// Kolibri's: the top-k of the logits plus a per-expert bias (one f32 correction per
    /// expert, checkpoint tensor `{prefix}.{bias}` of `E` values), weighted by the sigmoids of
    /// their logits, divided by their sum when `normalize` is set.
    BiasedLogits {
        /// The correction's module path and name inside the block.
        bias: &'static str,
        /// Whether the top-k weights are renormalised (`norm_topk_prob`).
        normalize: bool,
    },
}

/// DeepSeek's router (V2, V3, and the models that copy it): each expert gets a score (the
/// sigmoid of its logit, or the softmax over the experts) and a choice score (the score, plus
/// the checkpoint's `{gate}.e_score_correction_bias` with `correction_bias`); the experts are
/// split into `groups` equal groups, of which each token keeps the `top_groups` worth most
/// ([`GroupScore`]); the top-k choice scores of the kept experts pick the experts, weighted
/// as [`GroupScore`] says, divided by their sum (plus 1e-20) with `normalize`, times `scale`.
/// With `top_groups ≥ groups` every group is kept (no group limit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupedRouter {
    /// Sigmoid scores (DeepSeek-V3) instead of the softmax (DeepSeek-V2).
    pub sigmoid: bool,
    /// Whether the choice adds `{gate}.e_score_correction_bias` (`[E]`, f32) to the scores.
    pub correction_bias: bool,
    /// `n_group`.
    pub groups: usize,
    /// `topk_group`.
    pub top_groups: usize,
    /// How a group's worth is measured, the other groups masked and the picks weighted.
    pub group_score: GroupScore,
    /// `norm_topk_prob`.
    pub normalize: bool,
    /// `routed_scaling_factor`.
    pub scale: f32,
}

/// How [`GroupedRouter`] ranks the groups, masks the experts outside the kept ones and weights
/// its picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupScore {
    /// DeepSeek-V2's `group_limited_greedy`: a group is worth its best score; the experts of
    /// the other groups score 0, and each pick is weighted by its (masked) score.
    Max,
    /// DeepSeek-V3's: a group is worth the sum of its two best choice scores; the experts of
    /// the other groups are never picked (−∞), and each pick is weighted by its score (without
    /// the correction bias).
    TopTwoSum,
}

/// The shape of a sparse MoE block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeSpec {
    /// Width of the residual stream (H).
    pub hidden: usize,
    /// Width of each expert's MLP (I).
    pub intermediate: usize,
    /// Number of experts (E).
    pub experts: usize,
    /// Experts picked per token (k).
    pub top_k: usize,
    /// How the router weights the picked experts.
    pub router: Router,
    /// How the checkpoint stores the router and the experts.
    pub weights: ExpertWeights,
    /// Whether each expert takes the token scaled by its routing weight and its output is
    /// summed unweighted, `Σₑ expertₑ(rₑ·x)` (Llama 4), instead of `Σₑ rₑ·expertₑ(x)`.
    pub scaled_inputs: bool,
    /// Each expert's output RMS-normalised before it is weighted, `Σₑ rₑ·norm(expertₑ(x))·gₑ`
    /// (Ergo): the checkpoint tensor `{prefix}.{name}` (`[E, H]`, one gain per expert) and the
    /// epsilon; `None` (the default) for none. Only [`ExpertWeights::Relu2InOut`] experts take
    /// it.
    pub expert_norm: Option<(&'static str, f32)>,
    /// Zero experts (LongCat-Flash's `zero_expert_num`): the router scores `experts +
    /// zero_experts` choices, the last `zero_experts` of them identities that pass the token
    /// through, weighted by their routing weight, `Σₑ rₑ·expertₑ(x) + (Σ_z r_z)·x`; 0 (the
    /// default) for none.
    pub zero_experts: usize,
}

impl MoeSpec {
    /// A block on `cfg`'s residual stream (`hidden_size`) with experts of width
    /// `intermediate`, each token routed to `top_k` of `experts` by `router`, the weights
    /// stored as `weights`: what a family states about its MoE layers.
    pub fn new(
        cfg: &ArchConfig,
        intermediate: usize,
        (experts, top_k): (usize, usize),
        router: Router,
        weights: ExpertWeights,
    ) -> MoeSpec {
        MoeSpec {
            hidden: cfg.hidden_size,
            intermediate,
            experts,
            top_k,
            router,
            weights,
            scaled_inputs: false,
            expert_norm: None,
            zero_experts: 0,
        }
    }

    /// This block with `zero` identity experts after its experts ([`MoeSpec::zero_experts`]).
    pub fn with_zero_experts(self, zero: usize) -> MoeSpec {
        MoeSpec {
            zero_experts: zero,
            ..self
        }
    }

    /// The router's choices: the experts and the zero experts.
    fn routed(&self) -> usize {
        self.experts + self.zero_experts
    }

    /// This block with each expert's output RMS-normalised by its own gain
    /// ([`MoeSpec::expert_norm`]).
    pub fn with_expert_norm(self, name: &'static str, eps: f32) -> MoeSpec {
        MoeSpec {
            expert_norm: Some((name, eps)),
            ..self
        }
    }

    /// This block with each expert taking the token scaled by its routing weight
    /// ([`MoeSpec::scaled_inputs`]).
    pub fn with_scaled_inputs(self) -> MoeSpec {
        MoeSpec {
            scaled_inputs: true,
            ..self
        }
    }

    /// This block on `x` (`[B, S, H]`), checkpoint module `prefix`: [`sparse_moe`].
    pub fn build(&self, b: &mut GraphBuilder, x: &str, prefix: &str, dtype: DType) -> String {
        sparse_moe(b, x, prefix, self, dtype)
    }
}

/// How a checkpoint stores a MoE block's router and experts (module names relative to the
/// block's prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertWeights {
    /// Router `{router}.weight` `[E, H]` (`gate` but where the names say otherwise), one tensor
    /// per expert and projection: `experts.{e}.{proj}.weight` (HF `[out, in]`).
    PerExpert(ExpertNames),
    /// Every expert in one tensor per layer: `{gate_up}` `[E, 2·I, H]` (each expert's gate
    /// rows, then its up rows) and `{down}` `[E, H, I]` (tensor names); router
    /// `{router}.weight` `[E, H]` (Granite-MoE's `input_linear.weight`,
    /// `output_linear.weight`, `router.layer`).
    Stacked {
        /// The router module.
        router: &'static str,
        /// The gate and up projections of every expert (the tensor's name).
        gate_up: &'static str,
        /// The down projections of every expert (the tensor's name).
        down: &'static str,
    },
    /// Every expert in one tensor per layer, laid out `[in, out]`: `{gate_up}` `[E, H, 2·I]`
    /// (each expert's gate columns, then its up columns) and `{down}` `[E, I, H]` (tensor
    /// names); router `{router}.weight` `[E, H]` (Llama 4's `experts.gate_up_proj`,
    /// `experts.down_proj`, `router`).
    StackedInOut {
        /// The router module.
        router: &'static str,
        /// The gate and up projections of every expert (the tensor's name).
        gate_up: &'static str,
        /// The down projections of every expert (the tensor's name).
        down: &'static str,
    },
    /// Every expert's rows in one `[E·I, H]` tensor per projection, without a `.weight`
    /// suffix: `{gate}`, `{up}` (HF `[out, in]` per expert) and `{down}` (each expert's down
    /// projection transposed, `[I, H]`); router `{router}.weight` `[E, H]` (DBRX's
    /// `experts.mlp.w1`, `v1`, `w2` and `router.layer`).
    Flat {
        /// The router module.
        router: &'static str,
        /// The gate projections of every expert.
        gate: &'static str,
        /// The up projections of every expert.
        up: &'static str,
        /// The transposed down projections of every expert.
        down: &'static str,
    },
    /// Ungated squared-ReLU experts, `down(relu(up(x))²)`, every expert in one tensor per
    /// projection laid out `[in, out]`: `{up}` `[E, H, I]` and `{down}` `[E, I, H]`; the
    /// router stored `[in, out]` too, `{router}` `[H, E]` (tensor names; Ergo's
    /// `up_proj`, `down_proj` and `gate_kernel`).
    Relu2InOut {
        /// The router's `[H, E]` tensor.
        router: &'static str,
        /// The up projections of every expert.
        up: &'static str,
        /// The down projections of every expert.
        down: &'static str,
    },
    /// Ungated squared-ReLU experts, `down(relu(up(x))²)`, one tensor per expert and
    /// projection: `experts.{e}.{up}.weight` `[I, H]` and `experts.{e}.{down}.weight` `[H, I]`
    /// (HF `[out, in]`); router `{router}.weight` `[E, H]` (Nemotron-H's `up_proj`,
    /// `down_proj` and `gate`).
    Relu2PerExpert {
        /// The router module.
        router: &'static str,
        /// The up projection of an expert.
        up: &'static str,
        /// The down projection of an expert.
        down: &'static str,
    },
}

impl ExpertWeights {
    /// One tensor per expert named `gate_proj`, `up_proj`, `down_proj` (Qwen2/3-MoE, OLMoE).
    pub const PROJ: ExpertWeights = ExpertWeights::PerExpert(ExpertNames::PROJ);
    /// One tensor per expert named as Mixtral's (also Phi-3.5-MoE's).
    pub const MIXTRAL: ExpertWeights = ExpertWeights::PerExpert(ExpertNames::MIXTRAL);
    /// Granite-MoE's stacked experts.
    pub const GRANITE_MOE: ExpertWeights = ExpertWeights::Stacked {
        router: "router.layer",
        gate_up: "input_linear.weight",
        down: "output_linear.weight",
    };
    /// Granite-MoE SWA's stacked experts, in transformers 5's names (`experts.gate_up_proj`,
    /// `experts.down_proj`, router `router`).
    pub const GRANITE_MOE_V5: ExpertWeights = ExpertWeights::Stacked {
        router: "router",
        gate_up: "experts.gate_up_proj",
        down: "experts.down_proj",
    };

    /// The router's module name.
    fn router(&self) -> &'static str {
        match self {
            ExpertWeights::PerExpert(names) => names.router,
            ExpertWeights::Stacked { router, .. }
            | ExpertWeights::StackedInOut { router, .. }
            | ExpertWeights::Flat { router, .. }
            | ExpertWeights::Relu2InOut { router, .. }
            | ExpertWeights::Relu2PerExpert { router, .. } => router,
        }
    }
}

/// The module names of the router (`{prefix}.{router}.weight`) and of an expert's gate, up and
/// down projections (`{prefix}.experts.{e}.{gate}.weight`…).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertNames {
    /// The router.
    pub router: &'static str,
    /// The gate projection (SiLU side).
    pub gate: &'static str,
    /// The up projection.
    pub up: &'static str,
    /// The down projection.
    pub down: &'static str,
}

impl ExpertNames {
    /// Router `gate`, experts `gate_proj`, `up_proj`, `down_proj` (Qwen2/3-MoE, OLMoE).
    pub const PROJ: ExpertNames = ExpertNames {
        router: "gate",
        gate: "gate_proj",
        up: "up_proj",
        down: "down_proj",
    };
    /// Mixtral's router `gate`, experts `w1` (gate), `w3` (up), `w2` (down).
    pub const MIXTRAL: ExpertNames = ExpertNames {
        router: "gate",
        gate: "w1",
        up: "w3",
        down: "w2",
    };
}

/// The MoE block of checkpoint module `prefix` on `x` (`[B, S, H]`), its router and experts
/// read as `spec.weights` says. Returns the block output `[B, S, H]`.
pub fn sparse_moe(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    spec: &MoeSpec,
    dtype: DType,
) -> String {
    let e = spec.experts;
    let routing = routing_matrix(b, x, prefix, spec, dtype);
    if spec.zero_experts > 0 {
        // The experts' columns of the routing, and the zero experts' weights summed: [B, S, 1].
        let axis = b.const_i64(&[2]);
        let (start, split, end) = (
            b.const_i64(&[0]),
            b.const_i64(&[e as i64]),
            b.const_i64(&[spec.routed() as i64]),
        );
        let experts = b.op("Slice", &[&routing, &start, &split, &axis], vec![]);
        let zero = b.op("Slice", &[&routing, &split, &end, &axis], vec![]);
        let no_keepdims = vec![("keepdims", Attr::Int(0))];
        let identity = b.op("ReduceSum", &[&zero, &axis], no_keepdims);
        let identity = b.op("Mul", &[x, &identity], vec![]);
        let spec = MoeSpec {
            zero_experts: 0,
            ..*spec
        };
        let routed = experts_of(b, x, prefix, &spec, &experts, dtype);
        return b.op("Add", &[&routed, &identity], vec![]);
    }
    experts_of(b, x, prefix, spec, &routing, dtype)
}

/// The experts of the MoE block `prefix` on `x` weighted by `routing` (`[B, S, E, 1]`).
fn experts_of(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    spec: &MoeSpec,
    routing: &str,
    dtype: DType,
) -> String {
    let (h, i, e) = (spec.hidden, spec.intermediate, spec.experts);
    if let ExpertWeights::Relu2InOut { up, down, .. } = spec.weights {
        return relu2_experts(b, x, prefix, spec, (up, down), routing, dtype);
    }

    // Expert j's projection `which` (0 gate, 1 up, 2 down), HF `[out, in]`.
    let expert = |j: usize, which: usize| -> TensorSource {
        match spec.weights {
            ExpertWeights::PerExpert(names) => {
                let proj = [names.gate, names.up, names.down][which];
                TensorSource::Checkpoint(format!("{prefix}.experts.{j}.{proj}.weight"))
            }
            ExpertWeights::Relu2PerExpert { up, down, .. } => {
                // No gate: 0 is never asked for.
                let proj = if which == 2 { down } else { up };
                TensorSource::Checkpoint(format!("{prefix}.experts.{j}.{proj}.weight"))
            }
            ExpertWeights::Stacked { gate_up, down, .. } => {
                let stacked = if which == 2 { down } else { gate_up };
                let one = TensorSource::Slice {
                    source: Box::new(TensorSource::Checkpoint(format!("{prefix}.{stacked}"))),
                    axis: 0,
                    start: j,
                    len: 1,
                    total: e,
                };
                let rows = if which == 2 { h } else { 2 * i };
                let cols = if which == 2 { i } else { h };
                let matrix = TensorSource::Reshape {
                    source: Box::new(one),
                    shape: vec![rows, cols],
                };
                match which {
                    2 => matrix,
                    _ => TensorSource::Slice {
                        source: Box::new(matrix),
                        axis: 0,
                        start: which * i,
                        len: i,
                        total: 2 * i,
                    },
                }
            }
            ExpertWeights::StackedInOut { gate_up, down, .. } => {
                let stacked = if which == 2 { down } else { gate_up };
                let one = TensorSource::Slice {
                    source: Box::new(TensorSource::Checkpoint(format!("{prefix}.{stacked}"))),
                    axis: 0,
                    start: j,
                    len: 1,
                    total: e,
                };
                let (rows, cols) = if which == 2 { (i, h) } else { (h, 2 * i) };
                let matrix = TensorSource::Reshape {
                    source: Box::new(one),
                    shape: vec![rows, cols],
                };
                // `[in, out]`: the HF `[out, in]` form is its transpose.
                TensorSource::Transpose(Box::new(match which {
                    2 => matrix,
                    _ => TensorSource::Slice {
                        source: Box::new(matrix),
                        axis: 1,
                        start: which * i,
                        len: i,
                        total: 2 * i,
                    },
                }))
            }
            ExpertWeights::Relu2InOut { .. } => unreachable!("built by relu2_experts"),
            ExpertWeights::Flat { gate, up, down, .. } => {
                let rows = TensorSource::Slice {
                    source: Box::new(TensorSource::Checkpoint(format!(
                        "{prefix}.{}",
                        [gate, up, down][which]
                    ))),
                    axis: 0,
                    start: j * i,
                    len: i,
                    total: e * i,
                };
                match which {
                    // `[I, H]`: the HF `[out, in]` form is its transpose.
                    2 => TensorSource::Transpose(Box::new(rows)),
                    _ => rows,
                }
            }
        }
    };
    let stack = |b: &mut GraphBuilder, which: usize, shape: Vec<usize>, axis: usize| {
        let parts = (0..e)
            .map(|j| TensorSource::Transpose(Box::new(expert(j, which))))
            .collect();
        let name = match spec.weights {
            ExpertWeights::PerExpert(names) => [names.gate, names.up, names.down][which],
            ExpertWeights::Stacked { .. }
            | ExpertWeights::StackedInOut { .. }
            | ExpertWeights::Flat { .. }
            | ExpertWeights::Relu2InOut { .. }
            | ExpertWeights::Relu2PerExpert { .. } => ["gate", "up", "down"][which],
        };
        b.initializer(Initializer {
            name: format!("{prefix}.experts.{name}.weight_t"),
            dtype,
            shape,
            source: Some(TensorSource::Concat { parts, axis }),
        })
    };
    if let ExpertWeights::Relu2PerExpert { .. } = spec.weights {
        let up_w = stack(b, 1, vec![h, e * i], 1);
        let down_w = stack(b, 2, vec![e * i, h], 0);
        let per_expert = b.const_i64(&[0, 0, e as i64, i as i64]);
        let merged = b.const_i64(&[0, 0, (e * i) as i64]);
        let up = b.op("MatMul", &[x, &up_w], vec![]);
        let relu = b.op("Relu", &[&up], vec![]);
        let act = b.op("Mul", &[&relu, &relu], vec![]);
        let act = b.op("Reshape", &[&act, &per_expert], vec![]);
        let weighted = b.op("Mul", &[&act, routing], vec![]);
        let weighted = b.op("Reshape", &[&weighted, &merged], vec![]);
        return b.op("MatMul", &[&weighted, &down_w], vec![]);
    }
    let gate_w = stack(b, 0, vec![h, e * i], 1);
    let up_w = stack(b, 1, vec![h, e * i], 1);
    let down_w = stack(b, 2, vec![e * i, h], 0);

    let gate = b.op("MatMul", &[x, &gate_w], vec![]);
    let weighted = if spec.scaled_inputs {
        // Each expert's projections of `r·x` are `r` times those of `x` (no biases).
        let up = b.op("MatMul", &[x, &up_w], vec![]);
        let per_expert = b.const_i64(&[0, 0, e as i64, i as i64]);
        let gate = b.op("Reshape", &[&gate, &per_expert], vec![]);
        let gate = b.op("Mul", &[&gate, routing], vec![]);
        let up = b.op("Reshape", &[&up, &per_expert], vec![]);
        let up = b.op("Mul", &[&up, routing], vec![]);
        let sig = b.op("Sigmoid", &[&gate], vec![]);
        let gate = b.op("Mul", &[&gate, &sig], vec![]);
        b.op("Mul", &[&gate, &up], vec![])
    } else {
        let sig = b.op("Sigmoid", &[&gate], vec![]);
        let gate = b.op("Mul", &[&gate, &sig], vec![]);
        let up = b.op("MatMul", &[x, &up_w], vec![]);
        let act = b.op("Mul", &[&gate, &up], vec![]);
        let per_expert = b.const_i64(&[0, 0, e as i64, i as i64]);
        let act = b.op("Reshape", &[&act, &per_expert], vec![]);
        b.op("Mul", &[&act, routing], vec![])
    };
    let merged = b.const_i64(&[0, 0, (e * i) as i64]);
    let weighted = b.op("Reshape", &[&weighted, &merged], vec![]);
    b.op("MatMul", &[&weighted, &down_w], vec![])
}

/// The [`ExpertWeights::Relu2InOut`] experts of module `prefix` on `x` weighted by `routing`
/// (`[B, S, E, 1]`): `up` (`[H, E·I]` once the experts are side by side), `relu(·)²`; with
/// [`MoeSpec::expert_norm`] each expert's output `[B, S, E, H]` (a batched MatMul by the
/// `[E, I, H]` stack) is RMS-normalised, times its gain, weighted and summed over the experts;
/// without, the weighted activations go through the down projections in one MatMul.
fn relu2_experts(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    spec: &MoeSpec,
    (up, down): (&str, &str),
    routing: &str,
    dtype: DType,
) -> String {
    let (h, i, e) = (spec.hidden, spec.intermediate, spec.experts);
    let stacked = |name: &str| TensorSource::Checkpoint(format!("{prefix}.{name}"));
    let parts = (0..e)
        .map(|j| TensorSource::Reshape {
            source: Box::new(TensorSource::Slice {
                source: Box::new(stacked(up)),
                axis: 0,
                start: j,
                len: 1,
                total: e,
            }),
            shape: vec![h, i],
        })
        .collect();
    let up_w = b.initializer(Initializer {
        name: format!("{prefix}.experts.up.weight_t"),
        dtype,
        shape: vec![h, e * i],
        source: Some(TensorSource::Concat { parts, axis: 1 }),
    });
    let act = b.op("MatMul", &[x, &up_w], vec![]);
    let relu = b.op("Relu", &[&act], vec![]);
    let act = b.op("Mul", &[&relu, &relu], vec![]);
    let per_expert = b.const_i64(&[0, 0, e as i64, i as i64]);
    let act = b.op("Reshape", &[&act, &per_expert], vec![]);
    // Each expert's output [B, S, 1, H]: its activations times its own [I, H] down
    // projection (a 2-D weight each, as the weight rewrites take them), side by side.
    let expert_axis = b.const_i64(&[2]);
    let outs: Vec<String> = (0..e)
        .map(|j| {
            let index = b.scalar_i64(j as i64);
            let a = b.op("Gather", &[&act, &index], vec![("axis", Attr::Int(2))]);
            let w = b.initializer(Initializer {
                name: format!("{prefix}.experts.{j}.down.weight_t"),
                dtype,
                shape: vec![i, h],
                source: Some(TensorSource::Reshape {
                    source: Box::new(TensorSource::Slice {
                        source: Box::new(stacked(down)),
                        axis: 0,
                        start: j,
                        len: 1,
                        total: e,
                    }),
                    shape: vec![i, h],
                }),
            });
            let o = b.op("MatMul", &[&a, &w], vec![]);
            b.op("Unsqueeze", &[&o, &expert_axis], vec![])
        })
        .collect();
    let parts: Vec<&str> = outs.iter().map(String::as_str).collect();
    let mut out = b.op("Concat", &parts, vec![("axis", Attr::Int(2))]);
    if let Some((norm, eps)) = spec.expert_norm {
        let square = b.op("Mul", &[&out, &out], vec![]);
        let last = b.const_i64(&[-1]);
        let keep = vec![("keepdims", Attr::Int(1))];
        let mean = b.op("ReduceMean", &[&square, &last], keep);
        let eps = scalar(b, eps, dtype);
        let var = b.op("Add", &[&mean, &eps], vec![]);
        let rms = b.op("Sqrt", &[&var], vec![]);
        let normed = b.op("Div", &[&out, &rms], vec![]);
        let gain = format!("{prefix}.{norm}");
        let gain = b.initializer(Initializer {
            name: gain.clone(),
            dtype,
            shape: vec![e, h],
            source: Some(TensorSource::Checkpoint(gain)),
        });
        out = b.op("Mul", &[&normed, &gain], vec![]);
    }
    let weighted = b.op("Mul", &[&out, routing], vec![]);
    let drop = vec![("keepdims", Attr::Int(0))];
    b.op("ReduceSum", &[&weighted, &expert_axis], drop)
}

/// The routing matrix `[B, S, E, 1]` in `dtype`: each token's top-k routing weights at the
/// columns of its picked experts, 0 elsewhere.
fn routing_matrix(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    spec: &MoeSpec,
    dtype: DType,
) -> String {
    let cast = |b: &mut GraphBuilder, v: &str, to: DType| {
        b.op("Cast", &[v], vec![("to", Attr::Int(to.onnx_code() as i64))])
    };
    let gate = format!("{prefix}.{}", spec.weights.router());
    let logits = match spec.weights {
        ExpertWeights::Relu2InOut { router, .. } => {
            let name = format!("{prefix}.{router}");
            let w = b.initializer(Initializer {
                name: name.clone(),
                dtype,
                shape: vec![spec.hidden, spec.routed()],
                source: Some(TensorSource::Checkpoint(name)),
            });
            b.op("MatMul", &[x, &w], vec![])
        }
        _ => linear(b, x, &gate, spec.hidden, spec.routed(), false, dtype),
    };
    let logits = match dtype {
        DType::F32 => logits,
        _ => cast(b, &logits, DType::F32),
    };
    let (weights, picked) = match spec.router {
        Router::Softmax { normalize } => softmax_top_k(b, &logits, spec.top_k, normalize),
        Router::SparseMixer { jitter_eps } => sparse_mixer(b, &logits, spec.routed(), jitter_eps),
        Router::Corrected {
            scores,
            bias,
            min_sum,
        } => {
            let bias = format!("{prefix}.{bias}");
            corrected_top_k(b, &logits, spec, (scores, &bias, min_sum))
        }
        Router::Grouped(router) => grouped_top_k(b, &logits, &gate, spec, &router),
        Router::BiasedLogits { bias, normalize } => {
            let bias = format!("{prefix}.{bias}");
            biased_logit_top_k(b, &logits, spec, &bias, normalize)
        }
    };
    // [B, S, k, 1] == [E] → one-hot rows [B, S, k, E], weighted and summed over k.
    let last = b.const_i64(&[-1]);
    let picked = b.op("Unsqueeze", &[&picked, &last], vec![]);
    let ids: Vec<i64> = (0..spec.routed() as i64).collect();
    let ids = b.const_i64(&ids);
    let one_hot = b.op("Equal", &[&picked, &ids], vec![]);
    let one_hot = cast(b, &one_hot, DType::F32);
    let weights = b.op("Unsqueeze", &[&weights, &last], vec![]);
    let spread = b.op("Mul", &[&one_hot, &weights], vec![]);
    let over_k = b.const_i64(&[-2]);
    let routing = b.op("ReduceSum", &[&spread, &over_k], vec![]);
    let routing = match dtype {
        DType::F32 => routing,
        _ => cast(b, &routing, dtype),
    };
    // ReduceSum keeps the reduced axis: [B, S, 1, E] → [B, S, E, 1].
    let column = b.const_i64(&[0, 0, spec.routed() as i64, 1]);
    b.op("Reshape", &[&routing, &column], vec![])
}

/// Softmax → TopK of the f32 router `logits`, renormalised when `normalize` is set: the
/// top-k weights and expert indices (`[B, S, k]`).
fn softmax_top_k(
    b: &mut GraphBuilder,
    logits: &str,
    top_k: usize,
    normalize: bool,
) -> (String, String) {
    let probs = b.op("Softmax", &[logits], vec![("axis", Attr::Int(-1))]);
    let k = b.const_i64(&[top_k as i64]);
    let (weights, picked) = (b.fresh_name("TopK"), b.fresh_name("TopK"));
    b.node(
        "",
        "TopK",
        &[&probs, &k],
        vec![("axis", Attr::Int(-1))],
        vec![weights.clone(), picked.clone()],
    );
    let weights = if normalize {
        let last = b.const_i64(&[-1]);
        let sum = b.op("ReduceSum", &[&weights, &last], vec![]);
        b.op("Div", &[&weights, &sum], vec![])
    } else {
        weights
    };
    (weights, picked)
}

/// [`Router::Corrected`] on the f32 router `logits` (`[B, S, E]`) with its scores, the
/// correction's checkpoint name and the least renormalisation divisor: the top-k weights and
/// expert indices (`[B, S, k]`).
fn corrected_top_k(
    b: &mut GraphBuilder,
    logits: &str,
    spec: &MoeSpec,
    (scores, bias, min_sum): (Scores, &str, Option<f32>),
) -> (String, String) {
    let scores = match scores {
        Scores::Softmax => b.op("Softmax", &[logits], vec![("axis", Attr::Int(-1))]),
        Scores::Sigmoid => b.op("Sigmoid", &[logits], vec![]),
    };
    let bias = b.initializer(Initializer {
        name: bias.to_string(),
        dtype: DType::F32,
        shape: vec![spec.routed()],
        source: Some(TensorSource::Reshape {
            source: Box::new(TensorSource::Checkpoint(bias.to_string())),
            shape: vec![spec.routed()],
        }),
    });
    let choice = b.op("Add", &[&scores, &bias], vec![]);
    let k = b.const_i64(&[spec.top_k as i64]);
    let (top, picked) = (b.fresh_name("TopK"), b.fresh_name("TopK"));
    b.node(
        "",
        "TopK",
        &[&choice, &k],
        vec![("axis", Attr::Int(-1))],
        vec![top, picked.clone()],
    );
    let weights = scores_at(b, &scores, &picked, spec.routed());
    let last = b.const_i64(&[-1]);
    let sum = b.op("ReduceSum", &[&weights, &last], vec![]);
    let sum = match min_sum {
        None => sum,
        Some(least) => {
            let least = scalar(b, least, DType::F32);
            b.op("Max", &[&sum, &least], vec![])
        }
    };
    (b.op("Div", &[&weights, &sum], vec![]), picked)
}

/// [`Router::BiasedLogits`] on the f32 router `logits` (`[B, S, E]`) with the correction's
/// checkpoint name: the top-k weights and expert indices (`[B, S, k]`).
fn biased_logit_top_k(
    b: &mut GraphBuilder,
    logits: &str,
    spec: &MoeSpec,
    bias: &str,
    normalize: bool,
) -> (String, String) {
    let bias = b.initializer(Initializer {
        name: bias.to_string(),
        dtype: DType::F32,
        shape: vec![spec.routed()],
        source: Some(TensorSource::Reshape {
            source: Box::new(TensorSource::Checkpoint(bias.to_string())),
            shape: vec![spec.routed()],
        }),
    });
    let choice = b.op("Add", &[logits, &bias], vec![]);
    let k = b.const_i64(&[spec.top_k as i64]);
    let (top, picked) = (b.fresh_name("TopK"), b.fresh_name("TopK"));
    b.node(
        "",
        "TopK",
        &[&choice, &k],
        vec![("axis", Attr::Int(-1))],
        vec![top, picked.clone()],
    );
    let scores = b.op("Sigmoid", &[logits], vec![]);
    let weights = scores_at(b, &scores, &picked, spec.routed());
    if !normalize {
        return (weights, picked);
    }
    let last = b.const_i64(&[-1]);
    let sum = b.op("ReduceSum", &[&weights, &last], vec![]);
    (b.op("Div", &[&weights, &sum], vec![]), picked)
}

/// The f32 `scores` (`[B, S, E]`) at the `picked` experts (`[B, S, k]`): one-hot rows
/// `[B, S, k, E]` times the scores `[B, S, 1, E]`, summed over the experts (one term each, so
/// exact; what `GatherElements` would give, in ops every EP and the reference interpreter run).
fn scores_at(b: &mut GraphBuilder, scores: &str, picked: &str, experts: usize) -> String {
    let last = b.const_i64(&[-1]);
    let ids: Vec<i64> = (0..experts as i64).collect();
    let ids = b.const_i64(&ids);
    let column = b.op("Unsqueeze", &[picked, &last], vec![]);
    let one_hot = b.op("Equal", &[&column, &ids], vec![]);
    let one_hot = b.op(
        "Cast",
        &[&one_hot],
        vec![("to", Attr::Int(DType::F32.onnx_code() as i64))],
    );
    let row = b.const_i64(&[-2]);
    let per_pick = b.op("Unsqueeze", &[scores, &row], vec![]);
    let at_picks = b.op("Mul", &[&one_hot, &per_pick], vec![]);
    let no_keepdims = vec![("keepdims", Attr::Int(0))];
    b.op("ReduceSum", &[&at_picks, &last], no_keepdims)
}

/// [`GroupedRouter`] on the f32 router `logits` (`[B, S, E]`) of router module `gate`: the
/// top-k weights and expert indices (`[B, S, k]`), as transformers' DeepSeek routers compute
/// them.
fn grouped_top_k(
    b: &mut GraphBuilder,
    logits: &str,
    gate: &str,
    spec: &MoeSpec,
    router: &GroupedRouter,
) -> (String, String) {
    let (e, last) = (spec.routed(), b.const_i64(&[-1]));
    let scores = match router.sigmoid {
        true => b.op("Sigmoid", &[logits], vec![]),
        false => b.op("Softmax", &[logits], vec![("axis", Attr::Int(-1))]),
    };
    let choice = match router.correction_bias {
        true => {
            let bias = b.initializer(Initializer {
                name: format!("{gate}.e_score_correction_bias"),
                dtype: DType::F32,
                shape: vec![e],
                source: Some(TensorSource::Checkpoint(format!(
                    "{gate}.e_score_correction_bias"
                ))),
            });
            b.op("Add", &[&scores, &bias], vec![])
        }
        false => scores.clone(),
    };
    let top = |b: &mut GraphBuilder, x: &str, k: usize| {
        let k = b.const_i64(&[k as i64]);
        let (values, indices) = (b.fresh_name("TopK"), b.fresh_name("TopK"));
        b.node(
            "",
            "TopK",
            &[x, &k],
            vec![("axis", Attr::Int(-1))],
            vec![values.clone(), indices.clone()],
        );
        (values, indices)
    };
    let (g, kept) = (router.groups, router.top_groups);
    let choice = if kept < g {
        let grouped_shape = b.const_i64(&[0, 0, g as i64, (e / g) as i64]);
        let grouped = b.op("Reshape", &[&choice, &grouped_shape], vec![]);
        let no_keepdims = vec![("keepdims", Attr::Int(0))];
        let worth = match router.group_score {
            GroupScore::Max => b.op("ReduceMax", &[&grouped, &last], no_keepdims),
            GroupScore::TopTwoSum => {
                let (two, _) = top(b, &grouped, 2);
                b.op("ReduceSum", &[&two, &last], no_keepdims)
            }
        };
        // The kept groups' one-hot rows [B, S, kept, G], merged over the kept axis → [B, S, G, 1].
        let (_, best) = top(b, &worth, kept);
        let best = b.op("Unsqueeze", &[&best, &last], vec![]);
        let ids: Vec<i64> = (0..g as i64).collect();
        let ids = b.const_i64(&ids);
        let one_hot = b.op("Equal", &[&best, &ids], vec![]);
        let one_hot = b.op(
            "Cast",
            &[&one_hot],
            vec![("to", Attr::Int(DType::F32.onnx_code() as i64))],
        );
        let over_kept = b.const_i64(&[-2]);
        let mask = b.op("ReduceMax", &[&one_hot, &over_kept], vec![]);
        let column = b.const_i64(&[0, 0, g as i64, 1]);
        let mask = b.op("Reshape", &[&mask, &column], vec![]);
        let mask = b.op(
            "Cast",
            &[&mask],
            vec![("to", Attr::Int(DType::Bool.onnx_code() as i64))],
        );
        let fill = match router.group_score {
            GroupScore::Max => 0.0,
            GroupScore::TopTwoSum => f32::NEG_INFINITY,
        };
        let fill = scalar(b, fill, DType::F32);
        let masked = b.op("Where", &[&mask, &grouped, &fill], vec![]);
        let flat = b.const_i64(&[0, 0, e as i64]);
        b.op("Reshape", &[&masked, &flat], vec![])
    } else {
        choice
    };
    let (values, picked) = top(b, &choice, spec.top_k);
    let mut weights = match router.group_score {
        GroupScore::Max => values,
        GroupScore::TopTwoSum => scores_at(b, &scores, &picked, e),
    };
    if router.normalize {
        let sum = b.op("ReduceSum", &[&weights, &last], vec![]);
        let tiny = scalar(b, 1e-20, DType::F32);
        let sum = b.op("Add", &[&sum, &tiny], vec![]);
        weights = b.op("Div", &[&weights, &sum], vec![]);
    }
    if router.scale != 1.0 {
        let scale = scalar(b, router.scale, DType::F32);
        weights = b.op("Mul", &[&weights, &scale], vec![]);
    }
    (weights, picked)
}

/// [`Router::SparseMixer`] on the f32 router `logits` (`[B, S, E]`): the two weights and
/// expert indices (`[B, S, 2]`), as transformers' `sparsemixer` computes them in eval mode.
fn sparse_mixer(
    b: &mut GraphBuilder,
    logits: &str,
    experts: usize,
    jitter_eps: f32,
) -> (String, String) {
    let last = b.const_i64(&[-1]);
    let one = b.const_i64(&[1]);
    let abs = b.op("Abs", &[logits], vec![]);
    let threshold = scalar(b, 2.0 * jitter_eps, DType::F32);
    let neg_inf = scalar(b, f32::NEG_INFINITY, DType::F32);
    // One pick from `scores` (the logits with the earlier pick at −∞): the index of its top
    // `m` (TopK 1: the lowest index among ties, as torch's max) and the softmax weight there,
    // every logit with (m − s) / max(|s|, m) above the threshold masked out. The pick is
    // never masked, and softmax keeps the order: its weight is the largest probability.
    let pick = |b: &mut GraphBuilder, scores: &str| {
        let (top, index) = (b.fresh_name("TopK"), b.fresh_name("TopK"));
        b.node(
            "",
            "TopK",
            &[scores, &one],
            vec![("axis", Attr::Int(-1))],
            vec![top.clone(), index.clone()],
        );
        let factor = b.op("Max", &[&abs, &top], vec![]);
        let gap = b.op("Sub", &[&top, logits], vec![]);
        let ratio = b.op("Div", &[&gap, &factor], vec![]);
        let masked = b.op("Greater", &[&ratio, &threshold], vec![]);
        let gates = b.op("Where", &[&masked, &neg_inf, scores], vec![]);
        let probs = b.op("Softmax", &[&gates], vec![("axis", Attr::Int(-1))]);
        let weight = b.op(
            "ReduceMax",
            &[&probs, &last],
            vec![("keepdims", Attr::Int(1))],
        );
        (weight, index)
    };
    let (w1, i1) = pick(b, logits);
    let ids: Vec<i64> = (0..experts as i64).collect();
    let ids = b.const_i64(&ids);
    let first = b.op("Equal", &[&i1, &ids], vec![]);
    let rest = b.op("Where", &[&first, &neg_inf, logits], vec![]);
    let (w2, i2) = pick(b, &rest);
    let concat = vec![("axis", Attr::Int(-1))];
    let weights = b.op("Concat", &[&w1, &w2], concat.clone());
    let picked = b.op("Concat", &[&i1, &i2], concat);
    (weights, picked)
}

/// `y · σ(x @ wᵀ)`: a block output `y` scaled by the sigmoid of a one-column linear gate of
/// `x` (checkpoint `{gate}.weight`, `[1, H]`), as Qwen2-MoE gates its shared expert.
fn sigmoid_gated(
    b: &mut GraphBuilder,
    x: &str,
    y: &str,
    gate: &str,
    hidden: usize,
    dtype: DType,
) -> String {
    let g = linear(b, x, gate, hidden, 1, false, dtype);
    let g = b.op("Sigmoid", &[&g], vec![]);
    b.op("Mul", &[y, &g], vec![])
}

/// The shared expert of module `{prefix}.shared_expert` (a SwiGLU MLP of width
/// `intermediate`) gated by `{prefix}.shared_expert_gate`.
pub fn gated_shared_expert(
    b: &mut GraphBuilder,
    x: &str,
    prefix: &str,
    (hidden, intermediate): (usize, usize),
    dtype: DType,
) -> String {
    let shared = format!("{prefix}.shared_expert");
    let sizes = (hidden, intermediate);
    let y = gated_mlp(b, x, &shared, sizes, false, GateActivation::Silu, dtype);
    let gate = format!("{prefix}.shared_expert_gate");
    sigmoid_gated(b, x, &y, &gate, hidden, dtype)
}
