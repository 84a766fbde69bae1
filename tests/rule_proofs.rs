//! Every rule in `rewrites/` is proven here: random instances of its left-hand side (random
//! shapes, attributes and values within its conditions) are optimized with that rule alone, and
//! - the rule must fire: the result differs from the same pipeline run with no rules (so
//!   constant folding or dead-code removal cannot pass for the rule), by the rule's own ops;
//! - every union the rule makes is checked on values, initializers included (a union that
//!   cannot be evaluated fails the proof);
//! - the rewritten graph computes what the original did through the reference interpreter.
//!
//! A rule without a proof fails `every_rule_has_a_proof`; a proof that still passes with its
//! rule removed fails `every_proof_fails_without_its_rule` (mutation testing of the rule set).
//! Planted wrong rules check that verification stops them, over inputs and over initializers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use common::compare::{atol, compare};
use egg::Symbol;
use mobius::ep::get_ep;
use mobius::interp::run_graph;
use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, Model, Shape, TensorData};
use mobius::ops::Tensor;
use mobius::opt::fingerprint::LeafValues;
use mobius::opt::gate::GateAtom;
use mobius::opt::rules::{parse_rules, RuleSet, RuleSpec};
use mobius::opt::{KvCache, Limits, OptimizeOptions, OptimizeReport, Role};
use mobius::weights::eval::Evaluator;
use proptest::prelude::*;

#[path = "rule_proofs/alibi_genai.rs"]
mod alibi_genai;
#[path = "rule_proofs/alibi_table_genai.rs"]
mod alibi_table_genai;
#[path = "rule_proofs/attention_batched.rs"]
mod attention_batched;
#[path = "rule_proofs/attention_q_scale.rs"]
mod attention_q_scale;
#[path = "rule_proofs/attention_recognize.rs"]
mod attention_recognize;
#[path = "rule_proofs/attention_scale.rs"]
mod attention_scale;
mod common;
#[path = "rule_proofs/flat_rows.rs"]
mod flat_rows;
#[path = "rule_proofs/gemm.rs"]
mod gemm;
#[path = "rule_proofs/gqa_genai.rs"]
mod gqa_genai;
#[path = "rule_proofs/grouped_qkv.rs"]
mod grouped_qkv;
#[path = "rule_proofs/head_layout.rs"]
mod head_layout;
#[path = "rule_proofs/linear_attention.rs"]
mod linear_attention;
#[path = "rule_proofs/lowering.rs"]
mod lowering;
#[path = "rule_proofs/moe.rs"]
mod moe;
#[path = "rule_proofs/moe_clamped.rs"]
mod moe_clamped;
#[path = "rule_proofs/moe_loop.rs"]
mod moe_loop;
#[path = "common/norm_spellings.rs"]
mod norm_spellings;
#[path = "rule_proofs/quant.rs"]
mod quant;
#[path = "rule_proofs/recognize.rs"]
mod recognize;
#[path = "common/rope_spellings.rs"]
mod rope_spellings;
#[path = "rule_proofs/rotary.rs"]
mod rotary;
#[path = "rule_proofs/rotary_interleaved.rs"]
mod rotary_interleaved;
#[path = "rule_proofs/scaled_float_mask.rs"]
mod scaled_float_mask;
#[path = "rule_proofs/sliced_qkv.rs"]
mod sliced_qkv;
#[path = "rule_proofs/split_qkv.rs"]
mod split_qkv;

/// Every rule and the test that proves it (a test may prove several rules).
const PROOFS: &[(&str, &str)] = &[
    ("rms-norm-reciprocal", "recognize::rms_norm_recognition"),
    (
        "rms-norm-reciprocal-first",
        "recognize::rms_norm_recognition",
    ),
    ("rms-norm-div-one", "recognize::rms_norm_recognition"),
    ("rms-norm-div-one-first", "recognize::rms_norm_recognition"),
    ("rms-norm-div", "recognize::rms_norm_recognition"),
    ("layer-norm-div", "recognize::layer_norm_recognition"),
    ("layer-norm-reciprocal", "recognize::layer_norm_recognition"),
    (
        "layer-norm-reciprocal-first",
        "recognize::layer_norm_recognition",
    ),
    ("layer-norm-div-one", "recognize::layer_norm_recognition"),
    (
        "layer-norm-div-one-first",
        "recognize::layer_norm_recognition",
    ),
    (
        "rms-norm-f32-round-trip",
        "recognize::rms_norm_f32_round_trip",
    ),
    ("rms-norm-weight", "recognize::norm_scale_folding"),
    ("bias-second", "recognize::bias_second"),
    ("rms-norm-weight-second", "recognize::norm_scale_folding"),
    ("layer-norm-weight", "recognize::norm_scale_folding"),
    ("layer-norm-weight-second", "recognize::norm_scale_folding"),
    ("layer-norm-bias", "recognize::norm_scale_folding"),
    ("layer-norm-bias-first", "recognize::norm_scale_folding"),
    ("rotate-half", "rotary::rotate_half_recognition"),
    ("rotate-half-sin-first", "rotary::rotate_half_recognition"),
    ("rotate-half-cos-first", "rotary::rotate_half_recognition"),
    (
        "rotate-half-cos-first-sin-first",
        "rotary::rotate_half_recognition",
    ),
    (
        "rotate-half-rotated-first",
        "rotary::rotate_half_recognition",
    ),
    (
        "rotate-half-rotated-first-sin-first",
        "rotary::rotate_half_recognition",
    ),
    (
        "rotate-half-rotated-first-cos-first",
        "rotary::rotate_half_recognition",
    ),
    (
        "rotate-half-rotated-first-cos-first-sin-first",
        "rotary::rotate_half_recognition",
    ),
    ("rotary-partial", "rotary::partial_rotation_folding"),
    ("outer-angles", "rotary::outer_product_angles"),
    (
        "repeat-interleave",
        "rotary_interleaved::repeat_interleave_subgraph",
    ),
    (
        "rotate-pairs",
        "rotary_interleaved::rotate_pairs_recognition",
    ),
    (
        "rotate-pairs-heads-last",
        "rotary_interleaved::rotate_pairs_heads_last",
    ),
    (
        "tile-of-ones-as-expand",
        "rotary_interleaved::tile_of_ones_as_expand",
    ),
    ("sliced-head-view", "head_layout::sliced_head_view"),
    ("gathered-head-view", "head_layout::gathered_head_view"),
    (
        "sliced-head-view-with-steps",
        "head_layout::sliced_head_view",
    ),
    ("head-slice-of-split", "head_layout::head_slice_of_split"),
    (
        "head-slice-of-split-with-steps",
        "head_layout::head_slice_of_split",
    ),
    ("head-gather-of-split", "head_layout::head_gather_of_split"),
    ("rotary-on-3d-heads", "head_layout::rotary_on_3d_heads"),
    (
        "attention-on-3d-heads",
        "head_layout::attention_on_3d_heads",
    ),
    (
        "attention-on-3d-heads-without-cache",
        "head_layout::attention_on_3d_heads_without_cache",
    ),
    ("heads-merged-back", "head_layout::heads_merged_back"),
    (
        "per-head-rms-norm-as-view",
        "head_layout::per_head_rms_norm_as_view",
    ),
    (
        "per-head-layer-norm-as-view",
        "head_layout::per_head_layer_norm_as_view",
    ),
    (
        "rms-norm-before-transpose",
        "head_layout::rms_norm_before_transpose",
    ),
    ("split-then-reshaped", "head_layout::split_then_reshaped"),
    ("split-of-unsqueezed", "head_layout::split_of_unsqueezed"),
    (
        "split-of-grouped-columns",
        "grouped_qkv::split_of_grouped_columns",
    ),
    ("reshape-of-reshape", "grouped_qkv::reshape_of_reshape"),
    (
        "reshape-of-unsqueezed",
        "head_layout::reshape_of_unsqueezed",
    ),
    (
        "unsqueezed-single-head",
        "head_layout::unsqueezed_single_head",
    ),
    ("gemm-as-matmul-add", "gemm::gemm_as_matmul_add"),
    (
        "residual-through-row-flattening",
        "flat_rows::residual_through_row_flattening",
    ),
    (
        "layer-norm-through-row-flattening",
        "flat_rows::layer_norm_through_row_flattening",
    ),
    ("erf-gelu", "gelu_fusions"),
    ("erf-gelu-half-first", "gelu_fusions"),
    ("erf-gelu-half-inside", "gelu_fusions"),
    ("tanh-gelu-half-first", "gelu_fusions"),
    ("tanh-gelu", "gelu_fusions"),
    ("tanh-gelu-cubed-constants-first", "gelu_fusions"),
    ("tanh-gelu-factored", "gelu_fusions"),
    ("bias-gelu", "biased_gelu_fusions"),
    ("fast-gelu", "biased_gelu_fusions"),
    ("bias-gelu-body", "contrib_gelu_bodies"),
    ("fast-gelu-body", "contrib_gelu_bodies"),
    ("fast-gelu-no-bias-body", "contrib_gelu_bodies"),
    (
        "add-layernorm-to-skip-layer-norm",
        "add_layernorm_to_skip_layer_norm",
    ),
    (
        "add-layernorm-no-bias-to-skip-layer-norm",
        "add_layernorm_no_bias_to_skip_layer_norm",
    ),
    ("skip-layer-norm-body", "skip_layer_norm_bodies"),
    ("skip-layer-norm-no-beta-body", "skip_layer_norm_bodies"),
    ("skip-layer-norm-sum", "skip_layer_norm_bodies"),
    ("skip-layer-norm-no-beta-sum", "skip_layer_norm_bodies"),
    ("skip-layer-norm-mean", "skip_layer_norm_statistics"),
    ("skip-layer-norm-no-beta-mean", "skip_layer_norm_statistics"),
    ("skip-layer-norm-inv-std-var", "skip_layer_norm_statistics"),
    (
        "skip-layer-norm-no-beta-inv-std-var",
        "skip_layer_norm_statistics",
    ),
    ("attention-to-gqa", "attention_to_gqa"),
    ("pack-qkv-for-gqa", "pack_qkv_for_gqa"),
    ("pack-qkv-with-bias-for-gqa", "pack_qkv_with_bias_for_gqa"),
    ("split-qkv-for-gqa", "split_qkv::split_qkv_for_gqa"),
    (
        "split-qkv-with-sizes-for-gqa",
        "split_qkv::split_qkv_with_sizes_for_gqa",
    ),
    ("sliced-qkv-for-gqa", "sliced_qkv::sliced_qkv_for_gqa"),
    ("rotary-attention-to-gqa", "rotary_attention_to_gqa"),
    ("sink-attention-to-gqa", "sink_attention_to_gqa"),
    (
        "export-attention-to-gqa",
        "gqa_genai::export_attention_to_gqa",
    ),
    (
        "export-attention-to-gqa",
        "scaled_float_mask::scaled_float_mask_to_gqa",
    ),
    (
        "export-rotary-attention-to-gqa",
        "gqa_genai::export_rotary_attention_to_gqa",
    ),
    (
        "export-partial-rotary-attention-to-gqa",
        "gqa_genai::export_partial_rotary_attention_to_gqa",
    ),
    (
        "export-alibi-attention",
        "alibi_genai::export_alibi_attention",
    ),
    (
        "export-alibi-attention",
        "alibi_table_genai::export_table_alibi_attention",
    ),
    (
        "add-rmsnorm-to-skip-simplified-layer-norm",
        "add_rmsnorm_to_skip_simplified_layer_norm",
    ),
    (
        "skip-simplified-layer-norm-body",
        "skip_simplified_layer_norm_body",
    ),
    (
        "skip-simplified-layer-norm-sum",
        "skip_simplified_layer_norm_sum",
    ),
    (
        "skip-simplified-layer-norm-mean",
        "skip_simplified_layer_norm_statistics",
    ),
    (
        "skip-simplified-layer-norm-inv-std-var",
        "skip_simplified_layer_norm_statistics",
    ),
    ("identity-elimination", "identity_elimination"),
    (
        "sdpa-to-attention",
        "attention_recognize::sdpa_to_attention",
    ),
    (
        "guarded-sdpa-to-attention",
        "attention_recognize::guarded_sdpa_to_attention",
    ),
    (
        "masked-scores-to-attention",
        "attention_recognize::masked_scores_to_attention",
    ),
    (
        "transposed-key-through-3d",
        "attention_recognize::transposed_key_through_3d",
    ),
    (
        "batched-sdpa-to-attention",
        "attention_batched::batched_sdpa_to_attention",
    ),
    (
        "masked-scores-as-bias",
        "attention_batched::masked_scores_as_bias",
    ),
    ("scaled-after-mask", "attention_scale::scaled_after_mask"),
    (
        "q-scale-into-attention",
        "attention_q_scale::q_scale_into_attention",
    ),
    ("transpose-of-transpose", "transpose_of_transpose"),
    ("cast-to-own-dtype", "cast_to_own_dtype"),
    ("transpose-identity", "transpose_identity"),
    ("slice-whole-axes", "slice_whole_axes"),
    ("slice-whole-axes-unit-steps", "slice_whole_axes"),
    ("castlike-to-cast", "castlike_to_cast"),
    ("reshape-to-own-shape", "reshape_to_own_shape"),
    ("squeeze-of-unsqueeze", "squeeze_of_unsqueeze"),
    ("slice-of-shape", "slice_of_shape"),
    ("slice-of-shape-on-axis", "slice_of_shape"),
    ("reshape-copying-dims", "reshape_copying_dims"),
    ("concat-of-one", "concat_of_one"),
    ("mul-by-one", "mul_by_one"),
    ("mul-by-one-first", "mul_by_one"),
    (
        "decompose-rotary-embedding",
        "lowering::decompose_rotary_embedding",
    ),
    (
        "decompose-rotary-embedding-with-positions",
        "lowering::decompose_rotary_embedding",
    ),
    (
        "decompose-attention-output",
        "lowering::decompose_attention",
    ),
    (
        "decompose-attention-present-key",
        "lowering::decompose_attention",
    ),
    (
        "decompose-attention-present-value",
        "lowering::decompose_attention",
    ),
    (
        "decompose-attention-without-cache",
        "lowering::decompose_attention_without_cache",
    ),
    (
        "decompose-attention-nonpad",
        "lowering::decompose_attention_nonpad",
    ),
    ("htp-rank4-rmsnorm", "lowering::htp_rank4_rmsnorm"),
    ("range-to-cumsum", "lowering::range_to_cumsum"),
    (
        "tensor-scatter-to-scatternd",
        "lowering::tensor_scatter_to_scatternd",
    ),
    ("matmul-nbits", "quant::matmul_nbits"),
    ("matmul-nbits-without-zero-points", "quant::matmul_nbits"),
    ("matmul-nbits-bias", "quant::matmul_nbits_bias"),
    (
        "matmul-nbits-with-zero-points-bias",
        "quant::matmul_nbits_bias",
    ),
    (
        "matmul-nbits-to-dequantize",
        "quant::matmul_nbits_to_dequantize",
    ),
    (
        "matmul-nbits-with-zero-points-to-dequantize",
        "quant::matmul_nbits_to_dequantize",
    ),
    (
        "matmul-nbits-with-bias-to-dequantize",
        "quant::matmul_nbits_to_dequantize",
    ),
    (
        "gated-delta-scan-to-linear-attention",
        "linear_attention::gated_delta_scan_fusion",
    ),
    (
        "linear-attention-output-as-scan",
        "linear_attention::linear_attention_as_scan",
    ),
    (
        "linear-attention-state-as-scan",
        "linear_attention::linear_attention_as_scan",
    ),
    ("dense-moe", "moe::dense_moe_fusion"),
    ("dense-moe", "moe::dense_moe_fusion_of_expert_concats"),
    ("moe-expert-loop", "moe_loop::moe_expert_loop_recognition"),
    ("moe-to-dense", "moe::moe_to_dense_inline"),
    ("dense-qmoe", "moe::dense_qmoe_fusion"),
    ("qmoe-to-dense", "moe::qmoe_to_dense_inline"),
    ("dense-moe-clamped", "moe_clamped::dense_moe_clamped_fusion"),
    (
        "moe-clamped-to-dense",
        "moe_clamped::moe_clamped_to_dense_inline",
    ),
];

#[test]
fn every_rule_has_a_proof() {
    for rule in mobius::rulebook::rules().unwrap().rules {
        assert!(
            PROOFS.iter().any(|(r, _)| *r == rule.name),
            "{} ({}) has no proof in tests/rule_proofs.rs",
            rule.name,
            rule.origin
        );
    }
}

/// The environment variable naming a rule the proofs must run without (mutation testing:
/// [`every_proof_fails_without_its_rule`]).
const DISABLED_RULE: &str = "MOBIUS_PROOF_WITHOUT_RULE";

/// Mutation testing of the proofs: each proof test, run with its rule removed from the rule
/// set, must fail (a proof that passes without its rule proves nothing). Runs this test binary
/// once per rule, on that rule's test only, with failure persistence and shrinking off.
#[test]
fn every_proof_fails_without_its_rule() {
    let exe = std::env::current_exe().unwrap();
    let mut passed = Vec::new();
    for (rule, test) in PROOFS {
        let out = std::process::Command::new(&exe)
            .args([test, "--exact", "--test-threads", "1"])
            .env(DISABLED_RULE, rule)
            .env("PROPTEST_DISABLE_FAILURE_PERSISTENCE", "1")
            .env("PROPTEST_MAX_SHRINK_ITERS", "0")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("running 1 test"),
            "{test} is not a test of this binary: {stdout}"
        );
        if out.status.success() {
            passed.push(format!("{rule} ({test})"));
        }
    }
    assert!(
        passed.is_empty(),
        "these proofs pass with their rule removed: {passed:?}"
    );
}

/// The optimizer run with `rules` (some of the rulebook's, or planted ones) in place of the
/// rulebook's.
fn optimize_with_rules(
    model: &Model,
    caps: &mobius::EpCapabilities,
    options: &OptimizeOptions,
    rules: &[RuleSpec],
) -> mobius::Result<(Model, OptimizeReport)> {
    let rules = RuleSet {
        rules: rules.to_vec(),
        leftovers: mobius::rulebook::leftovers::leftovers,
    };
    mobius::opt::optimize(model, caps, options, &rules)
}

fn rule(name: &str) -> RuleSpec {
    mobius::rulebook::rules()
        .map(|set| set.rules)
        .unwrap()
        .into_iter()
        .find(|r| r.name == name)
        .unwrap()
}

/// The rule set a proof of `name` runs with: the rule, or nothing when mutation testing
/// removes it.
fn rules_for(name: &str) -> Vec<RuleSpec> {
    match std::env::var(DISABLED_RULE) {
        Ok(disabled) if disabled == name => Vec::new(),
        _ => vec![rule(name)],
    }
}

fn model(graph: Graph) -> Model {
    Model {
        graph,
        opsets: BTreeMap::from([(String::new(), 24)]),
        ir_version: 11,
        producer_name: "proof".into(),
        producer_version: "0".into(),
    }
}

fn random_tensor(dtype: DType, shape: &[usize], rng: &mut Rng) -> Tensor {
    let n = shape.iter().product();
    match dtype {
        DType::I64 => Tensor::int(
            dtype,
            shape.to_vec(),
            (0..n).map(|_| rng.below(200) as i64 - 100).collect(),
        ),
        DType::Bool => Tensor::bool(shape.to_vec(), (0..n).map(|_| rng.below(2) == 1).collect()),
        _ => Tensor::float(
            dtype,
            shape.to_vec(),
            (0..n).map(|_| (rng.unit() * 8.0 - 4.0) as f32).collect(),
        ),
    }
}

fn options(leaves: Option<LeafValues>) -> OptimizeOptions {
    options_for(DType::F32, leaves)
}

/// [`options`] for a model of `dtype`.
fn options_for(dtype: DType, leaves: Option<LeafValues>) -> OptimizeOptions {
    OptimizeOptions {
        dtype,
        role: Role::Decoder,
        limits: Limits::default(),
        fingerprint_leaves: leaves,
        accuracy_level: None,
        kv_cache: mobius::opt::KvCache::AsIs,
        trace: false,
    }
}

/// The op type at the root of `pattern` (through a `get<i>` projection), if it is an op.
fn root_op(pattern: &egg::Pattern<mobius::opt::lang::Onnx>) -> Option<String> {
    use egg::ENodeOrVar;
    use mobius::opt::lang::Onnx;
    let nodes = pattern.ast.as_ref();
    let mut node = nodes.last()?;
    loop {
        match node {
            ENodeOrVar::ENode(Onnx::Op(op)) => return Some(op.op.to_string()),
            ENodeOrVar::ENode(Onnx::Get { tuple, .. }) => node = &nodes[usize::from(tuple[0])],
            _ => return None,
        }
    }
}

/// Optimizes `graph` for `ep` with the rule `rule_name` alone (in verification mode, every
/// union checked against the values of the graph's initializers and `inputs`), and checks:
/// - the rule fired: the result differs from the same pipeline run with no rules at all
///   (constant folding and dead-code removal alone change nothing then), and a rule with a
///   pattern replacement removed its pattern's root op or added its replacement's;
/// - no union went unchecked (every class on both sides had a value);
/// - both graphs agree on `inputs` within `tol` (0 = exactly) through the interpreter.
fn prove_on(
    rule_name: &str,
    ep: &str,
    graph: Graph,
    inputs: HashMap<String, Tensor>,
    tol: f64,
) -> Result<(), TestCaseError> {
    prove_with(
        &rule(rule_name),
        rules_for(rule_name),
        ep,
        graph,
        inputs,
        tol,
    )
}

/// [`prove_on`] for the rule `spec`, run as the rule set `rules` (`spec` alone, or nothing in
/// mutation testing).
fn prove_with(
    spec: &RuleSpec,
    rules: Vec<RuleSpec>,
    ep: &str,
    graph: Graph,
    inputs: HashMap<String, Tensor>,
    tol: f64,
) -> Result<(), TestCaseError> {
    let rule_name = spec.name.as_str();
    let fail = |e: mobius::Error| TestCaseError::fail(e.to_string());
    let mut values: HashMap<Symbol, Arc<Tensor>> = HashMap::new();
    for init in &graph.initializers {
        let value = mobius::interp::run::initializer_tensor(init, &mut Evaluator::new(None))
            .map_err(fail)?;
        values.insert(Symbol::from(init.name.as_str()), Arc::new(value));
    }
    for (k, v) in &inputs {
        values.insert(Symbol::from(k.as_str()), Arc::new(v.clone()));
    }
    let leaves = LeafValues::new(values);
    let caps = get_ep(ep).unwrap();
    // The model dtype gates rules (GQA per dtype): the first float graph output's.
    let dtype = graph
        .outputs
        .iter()
        .map(|o| o.dtype)
        .find(|d| d.is_float())
        .unwrap_or(DType::F32);
    // A rule gated on a declared contract is proven under it (on inputs that follow it).
    let contract = if spec.gate.0.contains(&GateAtom::GenaiKvCache) {
        KvCache::Genai
    } else {
        KvCache::AsIs
    };
    let run = |rules: &[RuleSpec]| {
        let options = OptimizeOptions {
            kv_cache: contract,
            ..options_for(dtype, Some(leaves.clone()))
        };
        optimize_with_rules(&model(graph.clone()), &caps, &options, rules)
    };
    let (rewritten, _) = run(&rules).map_err(fail)?;
    let after = rewritten.graph.op_counts();
    let before = match run(&[]) {
        Ok((baseline, _)) => baseline.graph.op_counts(),
        // Without the rule the EP cannot run the graph at all: the rule made it runnable.
        Err(mobius::Error::EpCannotRun { .. }) => graph.op_counts(),
        Err(e) => return Err(fail(e)),
    };
    prop_assert!(
        before != after,
        "{rule_name} did not fire: the same ops as with no rules ({after:?}) on {graph:#?}"
    );
    if let mobius::opt::rules::Replacement::Pattern(replacement) = &spec.replacement {
        let count = |c: &BTreeMap<String, usize>, op: &Option<String>| {
            op.as_ref().map_or(0, |o| c.get(o).copied().unwrap_or(0))
        };
        let (root, new) = (root_op(&spec.pattern), root_op(replacement));
        prop_assert!(
            count(&after, &root) < count(&before, &root) || count(&after, &new) > count(&before, &new),
            "{rule_name} changed the graph, but not by its own ops ({root:?} → {new:?}): {before:?} → {after:?}"
        );
    }
    let unchecked = leaves.stats().unchecked_unions;
    prop_assert_eq!(
        unchecked,
        0,
        "{}: {} unions could not be checked on values",
        rule_name,
        unchecked
    );
    let before = run_graph(&graph, &inputs, &mut Evaluator::new(None)).map_err(fail)?;
    let after = run_graph(&rewritten.graph, &inputs, &mut Evaluator::new(None)).map_err(fail)?;
    for (name, x) in &before {
        let y = &after[name];
        let what = format!("{rule_name}: output {name}");
        compare(
            &what,
            (&x.shape, &x.as_f64()),
            (&y.shape, &y.as_f64()),
            atol(tol),
        )
        .map_err(TestCaseError::fail)?;
    }
    Ok(())
}

/// [`prove_on`] for single-input graphs on the default EP, exactly.
fn prove(rule_name: &str, graph: Graph, x: Tensor) -> Result<(), TestCaseError> {
    prove_on(
        rule_name,
        "default",
        graph,
        HashMap::from([("x".to_string(), x)]),
        0.0,
    )
}

fn shape_strategy(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..4, 1..=max_rank)
}

fn dtype_strategy() -> impl Strategy<Value = DType> {
    prop_oneof![
        Just(DType::F32),
        Just(DType::F16),
        Just(DType::I64),
        Just(DType::Bool)
    ]
}

fn dims(shape: &[usize]) -> Shape {
    Shape::new(shape.iter().map(|&d| d as i64))
}

/// Random values for every input of `g`, its named dims sized by `size` (a dim's name → its
/// extent), drawn from `seed` in input order.
fn feeds_sized(g: &Graph, size: impl Fn(&str) -> usize, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    g.inputs
        .iter()
        .map(|v| {
            let shape: Vec<usize> = v
                .shape
                .0
                .iter()
                .map(|d| match d {
                    mobius::ir::Dim::Fixed(x) => *x as usize,
                    mobius::ir::Dim::Sym(s) => size(s),
                })
                .collect();
            (v.name.clone(), random_tensor(v.dtype, &shape, &mut rng))
        })
        .collect()
}

/// Each row's valid length in a case that follows onnxruntime-genai's contract: without past a
/// right-padded prompt of `1 + lens[r] % seq` tokens, with a past every row full.
fn contract_lengths(batch: usize, seq: usize, past: usize, lens: &[usize]) -> Vec<usize> {
    (0..batch)
        .map(|r| {
            if past == 0 {
                1 + lens[r] % seq
            } else {
                past + seq
            }
        })
        .collect()
}

/// `g` optimized for cpu with every rule, under `contract`.
fn optimized_under(g: &Graph, contract: KvCache) -> Graph {
    let opts = OptimizeOptions {
        kv_cache: contract,
        ..options(None)
    };
    let rules = mobius::rulebook::rules().unwrap().rules;
    let cpu = get_ep("cpu").unwrap();
    optimize_with_rules(&model(g.clone()), &cpu, &opts, &rules)
        .unwrap()
        .0
        .graph
}

/// The frame of the q/k/v packing proofs: GroupQueryAttention (`kv_heads` key/value heads of
/// 16 channels, `group` query heads to each) over the q, k and v that `parts` computes from the
/// graph input `input` (its name and width: `[B, S, width]`), with past_key/past_value,
/// seqlens_k and total_sequence_length graph inputs fed as a full cache of `past` positions.
/// `parts` draws from the rng before the feeds do.
fn gqa_frame(
    (batch, seq, past): (usize, usize, usize),
    (kv_heads, group): (usize, usize),
    (input, width): (&str, usize),
    seed: u64,
    parts: impl FnOnce(&mut GraphBuilder, &str, &mut Rng) -> [String; 3],
) -> (Graph, HashMap<String, Tensor>) {
    let (d, heads) = (16usize, kv_heads * group);
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new("g");
    let x = b.input(input, DType::F32, dims(&[batch, seq, width]));
    let pk = b.input("past_key", DType::F32, dims(&[batch, kv_heads, past, d]));
    let pv = b.input("past_value", DType::F32, dims(&[batch, kv_heads, past, d]));
    let seqlens = b.input("seqlens_k", DType::I32, dims(&[batch]));
    let total = b.input(
        "total_sequence_length",
        DType::I32,
        Shape::new(Vec::<i64>::new()),
    );
    b.output("y", DType::F32, dims(&[batch, seq, heads * d]));
    for name in ["present_key", "present_value"] {
        b.output(name, DType::F32, dims(&[batch, kv_heads, past + seq, d]));
    }
    let [q, k, v] = parts(&mut b, &x, &mut rng);
    b.node(
        "com.microsoft",
        "GroupQueryAttention",
        &[&q, &k, &v, &pk, &pv, &seqlens, &total, "", ""],
        vec![
            ("kv_num_heads", Attr::Int(kv_heads as i64)),
            ("num_heads", Attr::Int(heads as i64)),
        ],
        vec!["y".into(), "present_key".into(), "present_value".into()],
    );
    let cache = [batch, kv_heads, past, d];
    let inputs = HashMap::from([
        (
            input.to_string(),
            random_tensor(DType::F32, &[batch, seq, width], &mut rng),
        ),
        (
            "past_key".to_string(),
            random_tensor(DType::F32, &cache, &mut rng),
        ),
        (
            "past_value".to_string(),
            random_tensor(DType::F32, &cache, &mut rng),
        ),
        (
            "seqlens_k".to_string(),
            Tensor::int(
                DType::I32,
                vec![batch],
                vec![(past + seq - 1) as i64; batch],
            ),
        ),
        (
            "total_sequence_length".to_string(),
            Tensor::int(DType::I32, vec![], vec![(past + seq) as i64]),
        ),
    ]);
    (b.finish(), inputs)
}

/// The attention inputs and outputs of an exported decoder block, named as optimum names layer
/// 0's: 3-D `q` `[B, S, Hq·D]`, `k` and `v` `[B, S, Hkv·D]`, the cache `past_key_values.0.key`
/// and `.value` `[B, Hkv, P, D]`; outputs `y` `[B, S, Hq·D]` and `present.0.key` / `.value`
/// `[B, Hkv, P + S, D]`.
struct ExportIo {
    q: String,
    k: String,
    v: String,
    pk: String,
    pv: String,
}

/// Declares [`ExportIo`] on `b` for `(B, S, P)` rows and `(Hq, Hkv, D)` heads.
fn export_io(
    b: &mut GraphBuilder,
    (bsz, s, p): (usize, usize, usize),
    (heads, kv_heads, d): (usize, usize, usize),
) -> ExportIo {
    let t = p + s;
    let q = b.input("q", DType::F32, dims(&[bsz, s, heads * d]));
    let k = b.input("k", DType::F32, dims(&[bsz, s, kv_heads * d]));
    let v = b.input("v", DType::F32, dims(&[bsz, s, kv_heads * d]));
    let cache = dims(&[bsz, kv_heads, p, d]);
    let pk = b.input("past_key_values.0.key", DType::F32, cache.clone());
    let pv = b.input("past_key_values.0.value", DType::F32, cache);
    b.output("y", DType::F32, dims(&[bsz, s, heads * d]));
    for name in ["present.0.key", "present.0.value"] {
        b.output(name, DType::F32, dims(&[bsz, kv_heads, t, d]));
    }
    ExportIo { q, k, v, pk, pv }
}

/// `[batch, seq, past, past + seq]` as scalars, as an export reads them: batch and past from
/// the cache `(past_key, past_value)`, seq from axis 1 of `seq_of`.
fn export_sizes(b: &mut GraphBuilder, (pk, pv): (&str, &str), seq_of: &str) -> [String; 4] {
    let mut size = |x: &str, axis: i64| {
        let one = b.op(
            "Shape",
            &[x],
            vec![("start", Attr::Int(axis)), ("end", Attr::Int(axis + 1))],
        );
        b.op("Squeeze", &[&one], vec![])
    };
    let (batch, past, seq) = (size(pv, 0), size(pk, 2), size(seq_of, 1));
    let total = b.op("Add", &[&past, &seq], vec![]);
    [batch, seq, past, total]
}

/// [`gqa_frame`] over `x: [B, S, (Hq + 2·Hkv)·16]`, the packed width q, k and v are cut from.
fn packed_gqa(
    rows: (usize, usize, usize),
    kv_heads: usize,
    group: usize,
    seed: u64,
    parts: impl FnOnce(&mut GraphBuilder, &str) -> [String; 3],
) -> (Graph, HashMap<String, Tensor>) {
    let width = (kv_heads * group + 2 * kv_heads) * 16;
    gqa_frame(rows, (kv_heads, group), ("x", width), seed, |b, x, _| {
        parts(b, x)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn identity_elimination(shape in shape_strategy(4), dtype in dtype_strategy(), seed in any::<u64>()) {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", dtype, dims(&shape));
        b.output("y", dtype, dims(&shape));
        let i = b.op("Identity", &[&x], vec![]);
        b.op_into("Neg", &[&i], vec![], "y");
        let dtype = if dtype == DType::Bool { DType::F32 } else { dtype };
        let mut g = b.finish();
        g.inputs[0].dtype = dtype;
        g.outputs[0].dtype = dtype;
        prove("identity-elimination", g, random_tensor(dtype, &shape, &mut Rng::new(seed)))?;
    }

    #[test]
    fn transpose_of_transpose(
        (shape, p, q) in shape_strategy(4).prop_flat_map(|s| {
            let perm: Vec<i64> = (0..s.len() as i64).collect();
            (Just(s), Just(perm.clone()).prop_shuffle(), Just(perm).prop_shuffle())
        }),
        seed in any::<u64>(),
    ) {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, dims(&shape));
        let out: Vec<usize> = q.iter().map(|&i| shape[p[i as usize] as usize]).collect();
        b.output("y", DType::F32, dims(&out));
        let t = b.op("Transpose", &[&x], vec![("perm", Attr::Ints(p.clone()))]);
        b.op_into("Transpose", &[&t], vec![("perm", Attr::Ints(q.clone()))], "y");
        prove("transpose-of-transpose", b.finish(), random_tensor(DType::F32, &shape, &mut Rng::new(seed)))?;
    }

    #[test]
    fn cast_to_own_dtype(shape in shape_strategy(3), dtype in dtype_strategy(), seed in any::<u64>()) {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", dtype, dims(&shape));
        b.output("y", dtype, dims(&shape));
        let c = b.op("Cast", &[&x], vec![("to", Attr::Int(dtype.onnx_code() as i64))]);
        b.op_into("Identity", &[&c], vec![], "y");
        prove("cast-to-own-dtype", b.finish(), random_tensor(dtype, &shape, &mut Rng::new(seed)))?;
    }

    #[test]
    fn transpose_identity(shape in shape_strategy(4), dtype in dtype_strategy(), seed in any::<u64>()) {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", dtype, dims(&shape));
        b.output("y", dtype, dims(&shape));
        let perm: Vec<i64> = (0..shape.len() as i64).collect();
        let t = b.op("Transpose", &[&x], vec![("perm", Attr::Ints(perm))]);
        b.op_into("Identity", &[&t], vec![], "y");
        prove("transpose-identity", b.finish(), random_tensor(dtype, &shape, &mut Rng::new(seed)))?;
    }

    #[test]
    fn slice_whole_axes(
        (shape, axes) in shape_strategy(4).prop_flat_map(|s| {
            let all: Vec<i64> = (0..s.len() as i64).collect();
            (Just(s), Just(all).prop_shuffle())
        }),
        count in 1usize..4,
        to_max in any::<bool>(),
        negative in any::<bool>(),
        with_steps in any::<bool>(),
        seed in any::<u64>(),
    ) {
        // Slice(x, 0, end, axes[, 1]) of some distinct axes (negative or not), end INT64_MAX
        // or the axis' extent.
        let rank = shape.len() as i64;
        let axes: Vec<i64> = axes.into_iter().take(count).map(|a| if negative { a - rank } else { a }).collect();
        let ends: Vec<i64> = axes
            .iter()
            .map(|&a| if to_max { i64::MAX } else { shape[((a + rank) % rank) as usize] as i64 })
            .collect();
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, dims(&shape));
        b.output("y", DType::F32, dims(&shape));
        let starts = b.const_i64(&vec![0; axes.len()]);
        let ends = b.const_i64(&ends);
        let axes_c = b.const_i64(&axes);
        let mut ins = vec![x, starts, ends, axes_c];
        if with_steps {
            ins.push(b.const_i64(&vec![1; axes.len()]));
        }
        let refs: Vec<&str> = ins.iter().map(String::as_str).collect();
        let sliced = b.op("Slice", &refs, vec![]);
        b.op_into("Neg", &[&sliced], vec![], "y");
        let rule = if with_steps { "slice-whole-axes" } else { "slice-whole-axes-unit-steps" };
        prove(rule, b.finish(), random_tensor(DType::F32, &shape, &mut Rng::new(seed)))?;
    }

    #[test]
    fn castlike_to_cast(
        values in proptest::collection::vec(-1e3f32..1e3, 1..6),
        float_x in any::<bool>(),
        to in prop_oneof![Just(DType::F32), Just(DType::I64), Just(DType::Bool)],
        seed in any::<u64>(),
    ) {
        // x a constant (so the Cast the rule writes folds, which CastLike does not: the rule's
        // effect shows), `like` a graph input of the target dtype.
        let mut b = GraphBuilder::new("g");
        let n = values.len();
        let x = if float_x {
            b.constant(TensorData::from_f32(vec![n], &values))
        } else {
            b.const_i64(&values.iter().map(|&v| v as i64).collect::<Vec<_>>())
        };
        let like = b.input("like", to, dims(&[2]));
        b.output("y", to, dims(&[n]));
        b.op_into("CastLike", &[&x, &like], vec![], "y");
        let inputs = HashMap::from([("like".to_string(), random_tensor(to, &[2], &mut Rng::new(seed)))]);
        prove_on("castlike-to-cast", "default", b.finish(), inputs, 0.0)?;
    }

    /// A constant target reading as x's shape, or a computed one reading as x's own dims, the
    /// first named (`Concat(Shape(x)[0:1], rest)`), under every allowzero (the dynamo
    /// exporter's `optimize=False` attention output view writes allowzero 1), zero-size dims
    /// included; a constant entry written as the dim, a 0 copying it (allowzero unset or 0) or
    /// one −1 (where the other dims multiply to more than 0: else the Reshape is an error).
    #[test]
    fn reshape_to_own_shape(
        shape in proptest::collection::vec(0usize..4, 1..5),
        computed in any::<bool>(),
        allowzero in prop_oneof![Just(None), Just(Some(0i64)), Just(Some(1))],
        spellings in proptest::collection::vec(0u8..3, 4),
        seed in any::<u64>(),
    ) {
        let mut b = GraphBuilder::new("g");
        let mut x_dims = dims(&shape);
        if computed {
            x_dims.0[0] = mobius::ir::Dim::Sym("batch".into());
        }
        let x = b.input("x", DType::F32, x_dims.clone());
        b.output("y", DType::F32, x_dims);
        let mut entries: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let mut minus = false;
        for (i, &how) in spellings.iter().enumerate().take(shape.len()).skip(computed as usize) {
            let others: usize = shape.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &d)| d).product();
            match how {
                1 if allowzero != Some(1) => entries[i] = 0,
                2 if !minus && others > 0 => {
                    entries[i] = -1;
                    minus = true;
                }
                _ => {}
            }
        }
        let target = if computed {
            let lead = b.op("Shape", &[&x], vec![("start", Attr::Int(0)), ("end", Attr::Int(1))]);
            let rest = b.const_i64(&entries[1..]);
            b.op("Concat", &[&lead, &rest], vec![("axis", Attr::Int(0))])
        } else {
            b.const_i64(&entries)
        };
        let attrs = allowzero.map(|a| vec![("allowzero", Attr::Int(a))]).unwrap_or_default();
        let r = b.op("Reshape", &[&x, &target], attrs);
        b.op_into("Neg", &[&r], vec![], "y");
        prove("reshape-to-own-shape", b.finish(), random_tensor(DType::F32, &shape, &mut Rng::new(seed)))?;
    }

    #[test]
    fn reshape_copying_dims(
        (batch, seq, heads, head_dim) in (1usize..4, 1usize..4, 1usize..4, 1usize..5),
        split in any::<bool>(),
        minus in any::<bool>(),
        seed in any::<u64>(),
    ) {
        // Reshape(x [B, S, H·D], Concat(Shape(x)[0:1], Shape(x)[1:2], tail)): split into
        // [B, S, H, D] (D or −1 in the tail) or merged back [B, S, H·D] of a [B, S, H, D] x;
        // B and S named (with static dims the target folds to a constant without the rule).
        use mobius::ir::Dim;
        let lead = [Dim::Sym("batch".into()), Dim::Sym("seq".into())];
        let with = |tail: &[usize]| {
            Shape(lead.iter().cloned().chain(tail.iter().map(|&d| Dim::Fixed(d as i64))).collect())
        };
        let (x_tail, y_tail, tail): (Vec<usize>, Vec<usize>, Vec<i64>) = if split {
            let last = if minus { -1 } else { head_dim as i64 };
            (vec![heads * head_dim], vec![heads, head_dim], vec![heads as i64, last])
        } else {
            let last = if minus { -1 } else { (heads * head_dim) as i64 };
            (vec![heads, head_dim], vec![heads * head_dim], vec![last])
        };
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, with(&x_tail));
        b.output("y", DType::F32, with(&y_tail));
        let part = |b: &mut GraphBuilder, start: i64, end: i64| {
            b.op("Shape", &[&x], vec![("start", Attr::Int(start)), ("end", Attr::Int(end))])
        };
        let (rows, cols) = (part(&mut b, 0, 1), part(&mut b, 1, 2));
        let tail = b.const_i64(&tail);
        let target = b.op("Concat", &[&rows, &cols, &tail], vec![("axis", Attr::Int(0))]);
        let r = b.op("Reshape", &[&x, &target], vec![]);
        b.op_into("Neg", &[&r], vec![], "y");
        let mut x_dims = vec![batch, seq];
        x_dims.extend(&x_tail);
        prove("reshape-copying-dims", b.finish(), random_tensor(DType::F32, &x_dims, &mut Rng::new(seed)))?;
    }

    #[test]
    fn concat_of_one(shape in shape_strategy(3), axis in 0i64..3, seed in any::<u64>()) {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, dims(&shape));
        b.output("y", DType::F32, dims(&shape));
        let axis = axis % shape.len() as i64;
        let c = b.op("Concat", &[&x], vec![("axis", Attr::Int(axis))]);
        b.op_into("Neg", &[&c], vec![], "y");
        prove("concat-of-one", b.finish(), random_tensor(DType::F32, &shape, &mut Rng::new(seed)))?;
    }

    /// `x · 1` and `1 · x`, the one of rank 0 … rank(x) (all dims 1), x with ±0 among its values
    /// (NaN and ±inf would stay themselves too, but the soundness check's value comparison does
    /// not meet non-finite values).
    #[test]
    fn mul_by_one(
        (shape, one_rank) in shape_strategy(3).prop_flat_map(|s| {
            let r = s.len();
            (Just(s), 0..=r)
        }),
        first in any::<bool>(),
        special in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, dims(&shape));
        b.output("y", DType::F32, dims(&shape));
        let one = b.constant(TensorData::from_f32(vec![1; one_rank], &[1.0]));
        let product = if first {
            b.op("Mul", &[&one, &x], vec![])
        } else {
            b.op("Mul", &[&x, &one], vec![])
        };
        b.op_into("Neg", &[&product], vec![], "y");
        let mut values = random_tensor(DType::F32, &shape, &mut Rng::new(seed));
        if special {
            let mut v: Vec<f32> = values.as_f64().iter().map(|&v| v as f32).collect();
            for (i, s) in [-0.0f32, 0.0].iter().enumerate() {
                if let Some(slot) = v.get_mut(i) {
                    *slot = *s;
                }
            }
            values = Tensor::float(DType::F32, shape.clone(), v);
        }
        let rule = if first { "mul-by-one-first" } else { "mul-by-one" };
        prove(rule, b.finish(), values)?;
    }

    #[test]
    fn squeeze_of_unsqueeze(
        (shape, axis) in shape_strategy(3).prop_flat_map(|s| {
            let r = s.len() as i64 + 1;
            (Just(s), -r..r)
        }),
        seed in any::<u64>(),
    ) {
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, dims(&shape));
        b.output("y", DType::F32, dims(&shape));
        let axes = b.const_i64(&[axis]);
        let u = b.op("Unsqueeze", &[&x, &axes], vec![]);
        let s = b.op("Squeeze", &[&u, &axes], vec![]);
        b.op_into("Neg", &[&s], vec![], "y");
        prove("squeeze-of-unsqueeze", b.finish(), random_tensor(DType::F32, &shape, &mut Rng::new(seed)))?;
    }

    /// `Slice(Shape(x), [s], [e][, [axis]])` of an x whose first dim is named (so the shape
    /// is not a constant), bounds anywhere from before the first axis to past the last.
    #[test]
    fn slice_of_shape(
        shape in shape_strategy(4),
        (start, end) in (-6i64..6, prop_oneof![-6i64..6, Just(i64::MAX)]),
        axes in prop_oneof![Just(None), Just(Some(0i64)), Just(Some(-1))],
        seed in any::<u64>(),
    ) {
        let rank = shape.len() as i64;
        let norm = |v: i64| if v < 0 { (v + rank).max(0) } else { v.min(rank) };
        let (from, to) = (norm(start), norm(end));
        // The named first dim must be kept: a slice of known dims is a constant either way.
        prop_assume!(from == 0 && to > 0);
        let mut b = GraphBuilder::new("g");
        let mut dims_x = dims(&shape);
        dims_x.0[0] = mobius::ir::Dim::Sym("batch".into());
        let x = b.input("x", DType::F32, dims_x);
        b.output("y", DType::I64, dims(&[(to - from) as usize]));
        let s = b.op("Shape", &[&x], vec![]);
        let (st, en) = (b.const_i64(&[start]), b.const_i64(&[end]));
        let name = match axes {
            None => {
                b.op_into("Slice", &[&s, &st, &en], vec![], "y");
                "slice-of-shape"
            }
            Some(a) => {
                let a = b.const_i64(&[a]);
                b.op_into("Slice", &[&s, &st, &en, &a], vec![], "y");
                "slice-of-shape-on-axis"
            }
        };
        prove(name, b.finish(), random_tensor(DType::F32, &shape, &mut Rng::new(seed)))?;
    }
}

/// `[batch, seq, hidden]` with a norm weight, for the SkipNorm rules.
fn norm_case() -> impl Strategy<Value = (Vec<usize>, f32, u64)> {
    (
        prop::collection::vec(1usize..4, 2..=2),
        1usize..9,
        prop_oneof![Just(1e-5f32), Just(1e-6f32)],
        any::<u64>(),
    )
        .prop_map(|(bs, h, eps, seed)| (vec![bs[0], bs[1], h], eps, seed))
}

fn norm_inputs(shape: &[usize], seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    HashMap::from([
        ("a".to_string(), random_tensor(DType::F32, shape, &mut rng)),
        ("b".to_string(), random_tensor(DType::F32, shape, &mut rng)),
        (
            "w".to_string(),
            random_tensor(DType::F32, &shape[2..], &mut rng),
        ),
    ])
}

fn norm_graph_inputs(b: &mut GraphBuilder, shape: &[usize]) -> (String, String, String) {
    (
        b.input("a", DType::F32, dims(shape)),
        b.input("b", DType::F32, dims(shape)),
        b.input("w", DType::F32, dims(&shape[2..])),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn add_rmsnorm_to_skip_simplified_layer_norm((shape, eps, seed) in norm_case(), axis_last in any::<bool>()) {
        let mut b = GraphBuilder::new("g");
        let (x, y, w) = norm_graph_inputs(&mut b, &shape);
        b.output("norm", DType::F32, dims(&shape));
        b.output("residual", DType::F32, dims(&shape));
        let sum = b.op("Add", &[&x, &y], vec![]);
        let axis = if axis_last { -1 } else { 2 };
        b.op_into("RMSNormalization", &[&sum, &w], vec![("axis", Attr::Int(axis)), ("epsilon", Attr::Float(eps))], "norm");
        b.op_into("Neg", &[&sum], vec![], "residual");
        prove_on("add-rmsnorm-to-skip-simplified-layer-norm", "cpu", b.finish(), norm_inputs(&shape, seed), 1e-5)?;
    }

    #[test]
    fn skip_simplified_layer_norm_body((shape, eps, seed) in norm_case()) {
        let mut b = GraphBuilder::new("g");
        let (x, y, w) = norm_graph_inputs(&mut b, &shape);
        b.output("norm", DType::F32, dims(&shape));
        b.node("com.microsoft", "SkipSimplifiedLayerNormalization", &[&x, &y, &w], vec![("epsilon", Attr::Float(eps))],
            vec!["norm".into(), String::new(), String::new(), String::new()]);
        prove_on("skip-simplified-layer-norm-body", "onnx-standard", b.finish(), norm_inputs(&shape, seed), 1e-5)?;
    }

    #[test]
    fn skip_simplified_layer_norm_sum((shape, eps, seed) in norm_case()) {
        let mut b = GraphBuilder::new("g");
        let (x, y, w) = norm_graph_inputs(&mut b, &shape);
        b.output("sum", DType::F32, dims(&shape));
        b.node("com.microsoft", "SkipSimplifiedLayerNormalization", &[&x, &y, &w], vec![("epsilon", Attr::Float(eps))],
            vec![String::new(), String::new(), String::new(), "sum".into()]);
        prove_on("skip-simplified-layer-norm-sum", "onnx-standard", b.finish(), norm_inputs(&shape, seed), 0.0)?;
    }

    #[test]
    fn skip_simplified_layer_norm_statistics((shape, eps, seed) in norm_case()) {
        for (slot, rule) in [(1, "skip-simplified-layer-norm-mean"), (2, "skip-simplified-layer-norm-inv-std-var")] {
            let mut b = GraphBuilder::new("g");
            let (x, y, w) = norm_graph_inputs(&mut b, &shape);
            b.output("stat", DType::F32, dims(&statistics_shape(&shape)));
            let mut outputs = vec![String::new(); 4];
            outputs[slot] = "stat".into();
            b.node("com.microsoft", "SkipSimplifiedLayerNormalization", &[&x, &y, &w], vec![("epsilon", Attr::Float(eps))], outputs);
            prove_on(rule, "onnx-standard", b.finish(), norm_inputs(&shape, seed), 1e-5)?;
        }
    }
}

/// The shape of a Skip*Normalization `mean` / `inv_std_var`: the input's with the last axis 1.
fn statistics_shape(shape: &[usize]) -> Vec<usize> {
    let mut s = shape.to_vec();
    *s.last_mut().unwrap() = 1;
    s
}

fn with_beta(mut inputs: HashMap<String, Tensor>, h: usize, seed: u64) -> HashMap<String, Tensor> {
    inputs.insert(
        "beta".to_string(),
        random_tensor(DType::F32, &[h], &mut Rng::new(seed ^ 0xbe7a)),
    );
    inputs
}

/// `Add(a, b)` → LayerNormalization (with `beta` when `bias`), plus another reader of the sum.
fn add_layer_norm(shape: &[usize], eps: f32, bias: bool) -> Graph {
    let mut b = GraphBuilder::new("g");
    let (x, y, w) = norm_graph_inputs(&mut b, shape);
    let beta = b.input("beta", DType::F32, dims(&shape[2..]));
    b.output("norm", DType::F32, dims(shape));
    b.output("residual", DType::F32, dims(shape));
    let sum = b.op("Add", &[&x, &y], vec![]);
    let inputs: Vec<&str> = if bias {
        vec![&sum, &w, &beta]
    } else {
        vec![&sum, &w]
    };
    b.op_into(
        "LayerNormalization",
        &inputs,
        vec![("epsilon", Attr::Float(eps))],
        "norm",
    );
    b.op_into("Neg", &[&sum], vec![], "residual");
    let mut g = b.finish();
    if !bias {
        g.inputs.retain(|v| v.name != "beta");
    }
    g
}

/// A SkipLayerNormalization (with `beta` when `bias`) exposing output `slot` only.
fn skip_layer_norm(shape: &[usize], eps: f32, bias: bool, slot: usize) -> Graph {
    let mut b = GraphBuilder::new("g");
    let (x, y, w) = norm_graph_inputs(&mut b, shape);
    let beta = b.input("beta", DType::F32, dims(&shape[2..]));
    let statistic = slot == 1 || slot == 2;
    let out_shape = if statistic {
        statistics_shape(shape)
    } else {
        shape.to_vec()
    };
    b.output("out", DType::F32, dims(&out_shape));
    let inputs: Vec<&str> = if bias {
        vec![&x, &y, &w, &beta]
    } else {
        vec![&x, &y, &w]
    };
    let mut outputs = vec![String::new(); 4];
    outputs[slot] = "out".into();
    b.node(
        "com.microsoft",
        "SkipLayerNormalization",
        &inputs,
        vec![("epsilon", Attr::Float(eps))],
        outputs,
    );
    let mut g = b.finish();
    if !bias {
        g.inputs.retain(|v| v.name != "beta");
    }
    g
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn add_layernorm_to_skip_layer_norm((shape, eps, seed) in norm_case()) {
        let inputs = with_beta(norm_inputs(&shape, seed), shape[2], seed);
        prove_on("add-layernorm-to-skip-layer-norm", "cpu", add_layer_norm(&shape, eps, true), inputs, 1e-5)?;
    }

    #[test]
    fn add_layernorm_no_bias_to_skip_layer_norm((shape, eps, seed) in norm_case()) {
        prove_on("add-layernorm-no-bias-to-skip-layer-norm", "cpu", add_layer_norm(&shape, eps, false), norm_inputs(&shape, seed), 1e-5)?;
    }

    #[test]
    fn skip_layer_norm_bodies((shape, eps, seed) in norm_case()) {
        let with = with_beta(norm_inputs(&shape, seed), shape[2], seed);
        prove_on("skip-layer-norm-body", "onnx-standard", skip_layer_norm(&shape, eps, true, 0), with.clone(), 1e-5)?;
        prove_on("skip-layer-norm-sum", "onnx-standard", skip_layer_norm(&shape, eps, true, 3), with, 0.0)?;
        let without = norm_inputs(&shape, seed);
        prove_on("skip-layer-norm-no-beta-body", "onnx-standard", skip_layer_norm(&shape, eps, false, 0), without.clone(), 1e-5)?;
        prove_on("skip-layer-norm-no-beta-sum", "onnx-standard", skip_layer_norm(&shape, eps, false, 3), without, 0.0)?;
    }

    #[test]
    fn skip_layer_norm_statistics((shape, eps, seed) in norm_case()) {
        let with = with_beta(norm_inputs(&shape, seed), shape[2], seed);
        let without = norm_inputs(&shape, seed);
        prove_on("skip-layer-norm-mean", "onnx-standard", skip_layer_norm(&shape, eps, true, 1), with.clone(), 1e-5)?;
        prove_on("skip-layer-norm-inv-std-var", "onnx-standard", skip_layer_norm(&shape, eps, true, 2), with, 1e-5)?;
        prove_on("skip-layer-norm-no-beta-mean", "onnx-standard", skip_layer_norm(&shape, eps, false, 1), without.clone(), 1e-5)?;
        prove_on("skip-layer-norm-no-beta-inv-std-var", "onnx-standard", skip_layer_norm(&shape, eps, false, 2), without, 1e-5)?;
    }
}

/// A decoder attention block: RoPE on q and k from tables gathered by `position_ids`, the
/// boolean padding mask of `attention_mask`, causal Attention with a KV cache.
fn attention_block(
    batch: usize,
    seq: usize,
    past: usize,
    heads: usize,
    kv_heads: usize,
    interleaved: bool,
) -> Graph {
    attention_block_with(
        batch,
        seq,
        past,
        heads,
        kv_heads,
        Some(interleaved),
        None,
        0.0,
    )
}

/// [`attention_block`], with RoPE (`Some(interleaved)`) or without (`None`), an optional
/// sliding window and soft-capping (0 = none).
#[allow(clippy::too_many_arguments)]
fn attention_block_with(
    batch: usize,
    seq: usize,
    past: usize,
    heads: usize,
    kv_heads: usize,
    rope: Option<bool>,
    window: Option<usize>,
    softcap: f32,
) -> Graph {
    let shape = (batch, seq, past, heads, kv_heads);
    attention_block_masked(shape, rope, window, softcap, MaskExtra::None)
}

/// What [`attention_block_masked`] adds to its padding (or sliding-window) mask.
#[derive(Debug, Clone, Copy, PartialEq)]
enum MaskExtra {
    /// Nothing.
    None,
    /// The ALiBi bias of the block's heads ([`mobius::models::components::alibi_bias`]).
    Alibi,
    /// A chunked-attention restriction ([`mobius::models::components::chunked_mask`]).
    Chunked(usize),
}

/// [`attention_block_with`] of `(batch, seq, past, heads, kv_heads)`, its mask carrying
/// `extra`.
fn attention_block_masked(
    (batch, seq, past, heads, kv_heads): (usize, usize, usize, usize, usize),
    rope: Option<bool>,
    window: Option<usize>,
    softcap: f32,
    extra: MaskExtra,
) -> Graph {
    let d = 16usize;
    let max_pos = 32usize;
    let mut b = GraphBuilder::new("g");
    let ids = b.input("input_ids", DType::I64, dims(&[batch, seq]));
    let mask = b.input("attention_mask", DType::I64, dims(&[batch, past + seq]));
    let pos = b.input("position_ids", DType::I64, dims(&[batch, seq]));
    let q = b.input("q", DType::F32, dims(&[batch, seq, heads * d]));
    let k = b.input("k", DType::F32, dims(&[batch, seq, kv_heads * d]));
    let v = b.input("v", DType::F32, dims(&[batch, seq, kv_heads * d]));
    let pk = b.input(
        "past_key_values.0.key",
        DType::F32,
        dims(&[batch, kv_heads, past, d]),
    );
    let pv = b.input(
        "past_key_values.0.value",
        DType::F32,
        dims(&[batch, kv_heads, past, d]),
    );
    b.output("y", DType::F32, dims(&[batch, seq, heads * d]));
    b.output(
        "present.0.key",
        DType::F32,
        dims(&[batch, kv_heads, past + seq, d]),
    );
    b.output(
        "present.0.value",
        DType::F32,
        dims(&[batch, kv_heads, past + seq, d]),
    );
    let mut rng = Rng::new(11);
    let mut table = |name: &str| {
        let values: Vec<f32> = (0..max_pos * d / 2)
            .map(|_| (rng.unit() * 2.0 - 1.0) as f32)
            .collect();
        b.initializer(mobius::ir::Initializer {
            name: name.into(),
            dtype: DType::F32,
            shape: vec![max_pos, d / 2],
            source: Some(mobius::ir::TensorSource::Inline(
                mobius::ir::TensorData::from_f32(vec![max_pos, d / 2], &values),
            )),
        })
    };
    let (cos, sin) = (table("cos_cache"), table("sin_cache"));
    let cos = b.op("Gather", &[&cos, &pos], vec![("axis", Attr::Int(0))]);
    let sin = b.op("Gather", &[&sin, &pos], vec![("axis", Attr::Int(0))]);
    let rotate = |b: &mut GraphBuilder, x: &str, n: usize| match rope {
        Some(interleaved) => b.op(
            "RotaryEmbedding",
            &[x, &cos, &sin],
            vec![
                ("interleaved", Attr::Int(interleaved as i64)),
                ("num_heads", Attr::Int(n as i64)),
                ("rotary_embedding_dim", Attr::Int(0)),
            ],
        ),
        None => x.to_string(),
    };
    let (qr, kr) = (rotate(&mut b, &q, heads), rotate(&mut b, &k, kv_heads));
    let mut padding = mobius::models::components::padding_mask(&mut b, &ids, &mask);
    if let Some(w) = window {
        padding = mobius::models::components::sliding_window_mask(&mut b, &padding, &ids, &mask, w);
    }
    match extra {
        MaskExtra::None => {}
        MaskExtra::Alibi => {
            let slopes = mobius::models::components::alibi_slopes(heads);
            padding = mobius::models::components::alibi_bias(
                &mut b,
                &padding,
                &mask,
                &slopes,
                DType::F32,
                "",
            );
        }
        MaskExtra::Chunked(chunk) => {
            padding =
                mobius::models::components::chunked_mask(&mut b, &padding, &ids, &mask, chunk);
        }
    }
    b.node(
        "",
        "Attention",
        &[&qr, &kr, &v, &padding, &pk, &pv],
        vec![
            ("is_causal", Attr::Int(1)),
            ("kv_num_heads", Attr::Int(kv_heads as i64)),
            ("q_num_heads", Attr::Int(heads as i64)),
            ("scale", Attr::Float((d as f32).powf(-0.5))),
            ("softcap", Attr::Float(softcap)),
        ],
        vec!["y".into(), "present.0.key".into(), "present.0.value".into()],
    );
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Equal on inputs that follow the decoder contract: no padding, positions continue the cache.
    #[test]
    fn rotary_attention_to_gqa(batch in 1usize..3, seq in 1usize..4, past in 0usize..4, kv_heads in 1usize..3, group in 1usize..3, interleaved in any::<bool>(), seed in any::<u64>()) {
        let heads = kv_heads * group;
        let graph = attention_block(batch, seq, past, heads, kv_heads, interleaved);
        let inputs = contract_inputs(&graph, batch, seq, past, seed);
        prove_on("rotary-attention-to-gqa", "cpu", graph, inputs, 1e-4)?;
    }

    /// The sliding window and soft-capping are carried (as local_window_size and softcap).
    #[test]
    fn rotary_attention_to_gqa_window_softcap(batch in 1usize..3, seq in 1usize..5, past in 0usize..5, kv_heads in 1usize..3, window in 1usize..5, softcap in prop_oneof![Just(0.0f32), 0.5f32..4.0], seed in any::<u64>()) {
        let graph = attention_block_with(batch, seq, past, 2 * kv_heads, kv_heads, Some(false), Some(window), softcap);
        let inputs = contract_inputs(&graph, batch, seq, past, seed);
        prove_on("rotary-attention-to-gqa", "cpu", graph, inputs, 1e-4)?;
    }

    /// Equal on inputs that follow the decoder contract (no padding).
    #[test]
    fn attention_to_gqa(batch in 1usize..3, seq in 1usize..4, past in 0usize..4, kv_heads in 1usize..3, group in 1usize..3, rope in any::<bool>(), window in prop::option::of(1usize..5), softcap in prop_oneof![Just(0.0f32), 0.5f32..4.0], seed in any::<u64>()) {
        let heads = kv_heads * group;
        // dml: GroupQueryAttention for f16 models, RoPE kept apart (no fused rotary).
        let graph = as_f16(attention_block_with(batch, seq, past, heads, kv_heads, rope.then_some(false), window, softcap));
        // Values in [-1, 1): onnxruntime's f16 Attention rounds the scores to f16 and
        // GroupQueryAttention keeps them in f32, so the two differ by the f16 rounding of the
        // scores; at |score| <= 4 that stays inside the f16 value check (1e-2 + 1e-2·|x|),
        // at the [-4, 4) inputs of the f32 proofs (scores up to 16) it does not.
        let inputs = shrink_floats(contract_inputs(&graph, batch, seq, past, seed), 0.25);
        let graph = decoder_dims(graph);
        prove_on("attention-to-gqa", "dml", graph, inputs, 2e-2)?;
    }
}

/// gpt-oss's attention block: RoPE on q and k from tables gathered by `position_ids` (scaled
/// by `factor` when given, as YaRN's attention factor scales them), sink attention in standard
/// ops ([`mobius::models::components::sink_attention`]) over the padding mask (restricted to
/// `window` when given) and a KV cache, random sink logits.
fn sink_attention_block(
    (batch, seq, past): (usize, usize, usize),
    (heads, kv_heads): (usize, usize),
    window: Option<usize>,
    factor: Option<f32>,
    seed: u64,
) -> Graph {
    use mobius::ir::{Initializer, TensorData, TensorSource};
    use mobius::models::components::{
        padding_mask, sink_attention, sliding_window_mask, AttentionSpec, DecoderInputs, LayerPast,
    };
    let (d, max_pos) = (16usize, 32usize);
    let mut b = GraphBuilder::new("g");
    let ids = b.input("input_ids", DType::I64, dims(&[batch, seq]));
    let mask = b.input("attention_mask", DType::I64, dims(&[batch, past + seq]));
    let pos = b.input("position_ids", DType::I64, dims(&[batch, seq]));
    let q = b.input("q", DType::F32, dims(&[batch, seq, heads * d]));
    let k = b.input("k", DType::F32, dims(&[batch, seq, kv_heads * d]));
    let v = b.input("v", DType::F32, dims(&[batch, seq, kv_heads * d]));
    let cache = dims(&[batch, kv_heads, past, d]);
    let pk = b.input("past_key_values.0.key", DType::F32, cache.clone());
    let pv = b.input("past_key_values.0.value", DType::F32, cache);
    b.output("y", DType::F32, dims(&[batch, seq, heads * d]));
    let present = dims(&[batch, kv_heads, past + seq, d]);
    b.output("present.0.key", DType::F32, present.clone());
    b.output("present.0.value", DType::F32, present);
    let mut rng = Rng::new(seed);
    let mut constant = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>, scale: f64| {
        let n = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|_| ((rng.unit() * 2.0 - 1.0) * scale) as f32)
            .collect();
        b.initializer(Initializer {
            name: name.into(),
            dtype: DType::F32,
            shape: shape.clone(),
            source: Some(TensorSource::Inline(TensorData::from_f32(shape, &values))),
        })
    };
    let sinks = constant(&mut b, "sinks", vec![1, heads, 1, 1], 4.0);
    let mut table = |b: &mut GraphBuilder, name: &str| {
        let t = constant(b, name, vec![max_pos, d / 2], 1.0);
        let t = b.op("Gather", &[&t, &pos], vec![("axis", Attr::Int(0))]);
        match factor {
            Some(f) => {
                let f = mobius::models::components::scalar(b, f, DType::F32);
                b.op("Mul", &[&t, &f], vec![])
            }
            None => t,
        }
    };
    let (cos, sin) = (table(&mut b, "cos_cache"), table(&mut b, "sin_cache"));
    let rotate = |b: &mut GraphBuilder, x: &str, n: usize| {
        b.op(
            "RotaryEmbedding",
            &[x, &cos, &sin],
            vec![
                ("interleaved", Attr::Int(0)),
                ("num_heads", Attr::Int(n as i64)),
                ("rotary_embedding_dim", Attr::Int(0)),
            ],
        )
    };
    let (qr, kr) = (rotate(&mut b, &q, heads), rotate(&mut b, &k, kv_heads));
    let mut padding = padding_mask(&mut b, &ids, &mask);
    if let Some(w) = window {
        padding = sliding_window_mask(&mut b, &padding, &ids, &mask, w);
    }
    let io = DecoderInputs {
        input_ids: ids,
        attention_mask: mask,
        position_ids: pos.clone(),
        past: vec![LayerPast::Kv {
            key: pk.clone(),
            value: pv.clone(),
        }],
    };
    let spec = AttentionSpec {
        q_heads: heads,
        kv_heads,
        scale: (d as f32).powf(-0.5),
        mask: &padding,
        past: (&pk, &pv),
        present: ("present.0.key", "present.0.value"),
        index: None,
    };
    let y = sink_attention(&mut b, &io, [&qr, &kr, &v], &sinks, &spec, (d, DType::F32));
    b.op_into("Identity", &[&y], vec![], "y");
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Equal on inputs that follow the decoder contract (no padding, positions continuing the
    /// cache), with and without a sliding window and YaRN's table factor.
    #[test]
    fn sink_attention_to_gqa(batch in 1usize..3, seq in 1usize..5, past in 0usize..5, kv_heads in 1usize..3, group in 1usize..3, window in prop::option::of(1usize..5), factor in prop::option::of(0.5f32..2.0), seed in any::<u64>()) {
        let graph = sink_attention_block((batch, seq, past), (kv_heads * group, kv_heads), window, factor, seed);
        let inputs = contract_inputs(&graph, batch, seq, past, seed);
        prove_on("sink-attention-to-gqa", "cpu", graph, inputs, 1e-4)?;
    }
}

/// `graph` with the symbolic dims of a decoder's inputs and outputs (`batch`, `sequence_len`,
/// `past_sequence_len`, and their sum for the mask and the present cache), so the cost model
/// prices it at its prefill workload as it does a built model (not at the proof's tiny sizes).
fn decoder_dims(mut graph: Graph) -> Graph {
    use mobius::ir::Dim;
    let (b, s, p) = ("batch", "sequence_len", "past_sequence_len");
    let total = "past_sequence_len + sequence_len";
    for v in graph.inputs.iter_mut().chain(&mut graph.outputs) {
        let named: Vec<Option<&str>> = match v.name.as_str() {
            "input_ids" | "position_ids" => vec![Some(b), Some(s)],
            "attention_mask" => vec![Some(b), Some(total)],
            "q" | "k" | "v" | "y" => vec![Some(b), Some(s), None],
            n if n.starts_with("past_key_values.") => vec![Some(b), None, Some(p), None],
            n if n.starts_with("present.") => vec![Some(b), None, Some(total), None],
            _ => continue,
        };
        for (dim, name) in v.shape.0.iter_mut().zip(named) {
            if let Some(name) = name {
                *dim = Dim::sym(name);
            }
        }
    }
    graph
}

/// `inputs` with every float value multiplied by `factor`.
fn shrink_floats(inputs: HashMap<String, Tensor>, factor: f64) -> HashMap<String, Tensor> {
    inputs
        .into_iter()
        .map(|(name, t)| {
            let t = if t.dtype.is_float() {
                let values = t.as_f64().iter().map(|v| (v * factor) as f32).collect();
                Tensor::float(t.dtype, t.shape.clone(), values)
            } else {
                t
            };
            (name, t)
        })
        .collect()
}

/// `graph` with every f32 value, initializer and cast target made f16.
fn as_f16(mut graph: Graph) -> Graph {
    for v in graph.inputs.iter_mut().chain(&mut graph.outputs) {
        if v.dtype == DType::F32 {
            v.dtype = DType::F16;
        }
    }
    for init in &mut graph.initializers {
        if let Some(mobius::ir::TensorSource::Inline(data)) = &mut init.source {
            if data.dtype == DType::F32 {
                let (bytes, _) =
                    mobius::weights::convert::convert(&data.bytes, DType::F32, DType::F16);
                *data = mobius::ir::TensorData {
                    dtype: DType::F16,
                    shape: data.shape.clone(),
                    bytes,
                };
                init.dtype = DType::F16;
            }
        }
    }
    let f32_code = Attr::Int(DType::F32.onnx_code() as i64);
    for node in &mut graph.nodes {
        if node.op_type == "Cast" && node.attrs.get("to") == Some(&f32_code) {
            node.attrs
                .insert("to".into(), Attr::Int(DType::F16.onnx_code() as i64));
        }
    }
    graph
}

/// Inputs that follow the decoder contract: all-ones mask, positions continuing the cache.
fn contract_inputs(
    graph: &Graph,
    batch: usize,
    seq: usize,
    past: usize,
    seed: u64,
) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    let mut inputs = HashMap::new();
    for v in &graph.inputs {
        let shape: Vec<usize> = v
            .shape
            .0
            .iter()
            .map(|d| match d {
                mobius::ir::Dim::Fixed(x) => *x as usize,
                _ => unreachable!(),
            })
            .collect();
        let t = match v.name.as_str() {
            "input_ids" => Tensor::int(DType::I64, shape, vec![0; batch * seq]),
            "attention_mask" => Tensor::int(DType::I64, shape, vec![1; batch * (past + seq)]),
            "position_ids" => Tensor::int(
                DType::I64,
                shape,
                (0..batch)
                    .flat_map(|_| (past..past + seq).map(|p| p as i64))
                    .collect(),
            ),
            _ => random_tensor(v.dtype, &shape, &mut rng),
        };
        inputs.insert(v.name.clone(), t);
    }
    inputs
}

/// GroupQueryAttention over three projections of `h` (with biases when `bias`; each weight
/// stored `[out, in]` and transposed in the graph when `transposed`, as torch.onnx dynamo
/// with `optimize=False` writes Linear), with `seqlens_k` and `total_sequence_length` as
/// graph inputs.
#[allow(clippy::too_many_arguments)]
fn projected_gqa(
    batch: usize,
    seq: usize,
    past: usize,
    kv_heads: usize,
    group: usize,
    bias: bool,
    transposed: bool,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>) {
    let (d, hidden, heads) = (16usize, 8usize, kv_heads * group);
    let rows = (batch, seq, past);
    gqa_frame(rows, (kv_heads, group), ("h", hidden), seed, |b, h, rng| {
        let mut init = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>| {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|_| (rng.unit() - 0.5) as f32).collect();
            b.initializer(mobius::ir::Initializer {
                name: name.into(),
                dtype: DType::F32,
                shape: shape.clone(),
                source: Some(mobius::ir::TensorSource::Inline(
                    mobius::ir::TensorData::from_f32(shape, &values),
                )),
            })
        };
        let mut project = |b: &mut GraphBuilder, name: &str, width: usize| {
            let w = if transposed {
                let stored = init(b, &format!("{name}.weight"), vec![width, hidden]);
                b.op(
                    "Transpose",
                    &[&stored],
                    vec![("perm", Attr::Ints(vec![1, 0]))],
                )
            } else {
                init(b, &format!("{name}.weight_t"), vec![hidden, width])
            };
            let y = b.op("MatMul", &[h, &w], vec![]);
            if bias {
                let bias = init(b, &format!("{name}.bias"), vec![width]);
                b.op("Add", &[&y, &bias], vec![])
            } else {
                y
            }
        };
        [
            project(b, "q", heads * d),
            project(b, "k", kv_heads * d),
            project(b, "v", kv_heads * d),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn pack_qkv_for_gqa(batch in 1usize..3, seq in 1usize..4, past in 0usize..3, kv in 1usize..3, group in 1usize..3, transposed in any::<bool>(), seed in any::<u64>()) {
        let (graph, inputs) = projected_gqa(batch, seq, past, kv, group, false, transposed, seed);
        prove_on("pack-qkv-for-gqa", "cpu", graph, inputs, 1e-4)?;
    }

    #[test]
    fn pack_qkv_with_bias_for_gqa(batch in 1usize..3, seq in 1usize..4, past in 0usize..3, kv in 1usize..3, group in 1usize..3, transposed in any::<bool>(), seed in any::<u64>()) {
        let (graph, inputs) = projected_gqa(batch, seq, past, kv, group, true, transposed, seed);
        prove_on("pack-qkv-with-bias-for-gqa", "cpu", graph, inputs, 1e-4)?;
    }
}

fn scalar(b: &mut GraphBuilder, value: f32) -> String {
    b.constant(mobius::ir::TensorData::from_f32(vec![], &[value]))
}

/// A decomposed GELU of input `x`: `erf` (with ½ last, first or inside), `tanh`,
/// `tanh-half-first`, `tanh-cubed` or `tanh-factored`.
fn decomposed_gelu(shape: &[usize], form: &str) -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(shape));
    b.output("y", DType::F32, dims(shape));
    let (one, half) = (scalar(&mut b, 1.0), scalar(&mut b, 0.5));
    if form == "tanh-factored" {
        // BLOOM: (x · ½) · (tanh((x · 0.79788456) · ((x · 0.044715) · x + 1)) + 1), each
        // constant its own node as TorchScript exports them.
        let (c4, c5, inner_one) = (
            scalar(&mut b, 0.797_884_6),
            scalar(&mut b, 0.044715),
            scalar(&mut b, 1.0),
        );
        let halved = b.op("Mul", &[&x, &half], vec![]);
        let scaled = b.op("Mul", &[&x, &c4], vec![]);
        let small = b.op("Mul", &[&x, &c5], vec![]);
        let square = b.op("Mul", &[&small, &x], vec![]);
        let factor = b.op("Add", &[&square, &inner_one], vec![]);
        let arg = b.op("Mul", &[&scaled, &factor], vec![]);
        let t = b.op("Tanh", &[&arg], vec![]);
        let plus = b.op("Add", &[&t, &one], vec![]);
        b.op_into("Mul", &[&halved, &plus], vec![], "y");
        return b.finish();
    }
    if form == "tanh-cubed" {
        // ½ · (x · (1 + tanh(√(2/π) · (x + 0.044715 · (x · (x · x)))))), constants first.
        let (c4, c5) = (
            scalar(&mut b, (2.0f32 / std::f32::consts::PI).sqrt()),
            scalar(&mut b, 0.044715),
        );
        let square = b.op("Mul", &[&x, &x], vec![]);
        let cube = b.op("Mul", &[&x, &square], vec![]);
        let scaled = b.op("Mul", &[&c5, &cube], vec![]);
        let sum = b.op("Add", &[&x, &scaled], vec![]);
        let arg = b.op("Mul", &[&c4, &sum], vec![]);
        let t = b.op("Tanh", &[&arg], vec![]);
        let plus = b.op("Add", &[&one, &t], vec![]);
        let prod = b.op("Mul", &[&x, &plus], vec![]);
        b.op_into("Mul", &[&half, &prod], vec![], "y");
        return b.finish();
    }
    if form == "tanh-half-first" {
        // (x · ½) · (tanh((x + x³ · 0.044715) · √(2/π)) + 1), constants second.
        let (c4, c5, c6) = (
            scalar(&mut b, (2.0f32 / std::f32::consts::PI).sqrt()),
            scalar(&mut b, 0.044715),
            scalar(&mut b, 3.0),
        );
        let cube = b.op("Pow", &[&x, &c6], vec![]);
        let scaled = b.op("Mul", &[&cube, &c5], vec![]);
        let sum = b.op("Add", &[&x, &scaled], vec![]);
        let arg = b.op("Mul", &[&sum, &c4], vec![]);
        let t = b.op("Tanh", &[&arg], vec![]);
        let plus = b.op("Add", &[&t, &one], vec![]);
        let halved = b.op("Mul", &[&x, &half], vec![]);
        b.op_into("Mul", &[&halved, &plus], vec![], "y");
        return b.finish();
    }
    let inner = if form == "tanh" {
        let (c4, c5, c6) = (
            scalar(&mut b, (2.0f32 / std::f32::consts::PI).sqrt()),
            scalar(&mut b, 0.044715),
            scalar(&mut b, 3.0),
        );
        let cube = b.op("Pow", &[&x, &c6], vec![]);
        let scaled = b.op("Mul", &[&c5, &cube], vec![]);
        let sum = b.op("Add", &[&x, &scaled], vec![]);
        let arg = b.op("Mul", &[&c4, &sum], vec![]);
        b.op("Tanh", &[&arg], vec![])
    } else {
        let sqrt2 = scalar(&mut b, std::f32::consts::SQRT_2);
        let div = b.op("Div", &[&x, &sqrt2], vec![]);
        b.op("Erf", &[&div], vec![])
    };
    let plus = b.op("Add", &[&inner, &one], vec![]);
    if form == "erf-half-inside" {
        // x · (½ · (erf(x/√2) + 1)).
        let halved = b.op("Mul", &[&half, &plus], vec![]);
        b.op_into("Mul", &[&x, &halved], vec![], "y");
        return b.finish();
    }
    let prod = b.op("Mul", &[&x, &plus], vec![]);
    if form == "erf-half-first" {
        b.op_into("Mul", &[&half, &prod], vec![], "y");
    } else {
        b.op_into("Mul", &[&prod, &half], vec![], "y");
    }
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn gelu_fusions(shape in shape_strategy(3), seed in any::<u64>()) {
        let x = random_tensor(DType::F32, &shape, &mut Rng::new(seed));
        for (rule, form) in [
            ("erf-gelu", "erf"),
            ("erf-gelu-half-first", "erf-half-first"),
            ("erf-gelu-half-inside", "erf-half-inside"),
            ("tanh-gelu", "tanh"),
            ("tanh-gelu-half-first", "tanh-half-first"),
            ("tanh-gelu-cubed-constants-first", "tanh-cubed"),
            ("tanh-gelu-factored", "tanh-factored"),
        ] {
            let inputs = HashMap::from([("x".to_string(), x.clone())]);
            prove_on(rule, "default", decomposed_gelu(&shape, form), inputs, 1e-5)?;
        }
    }
}

/// `Gelu(Add(x, bias); approximate)` with `bias` a `[last]` initializer (or, with
/// `bias_input`, a graph input), as the GELU-MLP builders emit it.
fn biased_gelu(shape: &[usize], approximate: Option<&str>, seed: u64, bias_input: bool) -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(shape));
    b.output("y", DType::F32, dims(shape));
    let last = *shape.last().unwrap();
    let bias = if bias_input {
        b.input("bias", DType::F32, dims(&[last]))
    } else {
        let values = random_tensor(DType::F32, &[last], &mut Rng::new(seed ^ 0xb1a5));
        b.initializer(mobius::ir::Initializer {
            name: "bias".into(),
            dtype: DType::F32,
            shape: vec![last],
            source: Some(mobius::ir::TensorSource::Inline(
                mobius::ir::TensorData::from_f32(
                    vec![last],
                    &values
                        .as_f64()
                        .iter()
                        .map(|&v| v as f32)
                        .collect::<Vec<_>>(),
                ),
            )),
        })
    };
    let sum = b.op("Add", &[&x, &bias], vec![]);
    let attrs = approximate.map_or(vec![], |a| vec![("approximate", Attr::String(a.into()))]);
    b.op_into("Gelu", &[&sum], attrs, "y");
    b.finish()
}

/// A contrib GELU (`BiasGelu` or `FastGelu`, with or without its bias initializer).
fn contrib_gelu(shape: &[usize], op: &str, with_bias: bool, seed: u64) -> Graph {
    let mut g = biased_gelu(shape, None, seed, false);
    g.nodes.retain(|n| n.op_type != "Add");
    let gelu = g.nodes.iter_mut().find(|n| n.op_type == "Gelu").unwrap();
    gelu.domain = "com.microsoft".into();
    gelu.op_type = op.into();
    gelu.attrs = Default::default();
    gelu.inputs = if with_bias {
        vec!["x".into(), "bias".into()]
    } else {
        vec!["x".into()]
    };
    if !with_bias {
        g.initializers.clear();
    }
    g
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn biased_gelu_fusions(shape in shape_strategy(3), seed in any::<u64>()) {
        let inputs = HashMap::from([("x".to_string(), random_tensor(DType::F32, &shape, &mut Rng::new(seed)))]);
        prove_on("bias-gelu", "cpu", biased_gelu(&shape, None, seed, false), inputs.clone(), 1e-6)?;
        prove_on("bias-gelu", "cuda", biased_gelu(&shape, Some("none"), seed, false), inputs.clone(), 1e-6)?;
        prove_on("fast-gelu", "cpu", biased_gelu(&shape, Some("tanh"), seed, false), inputs, 1e-6)?;
    }

    #[test]
    fn contrib_gelu_bodies(shape in shape_strategy(3), seed in any::<u64>()) {
        let inputs = HashMap::from([("x".to_string(), random_tensor(DType::F32, &shape, &mut Rng::new(seed)))]);
        prove_on("bias-gelu-body", "onnx-standard", contrib_gelu(&shape, "BiasGelu", true, seed), inputs.clone(), 1e-6)?;
        prove_on("fast-gelu-body", "trt-rtx", contrib_gelu(&shape, "FastGelu", true, seed), inputs.clone(), 1e-6)?;
        prove_on("fast-gelu-no-bias-body", "onnx-standard", contrib_gelu(&shape, "FastGelu", false, seed), inputs, 1e-6)?;
    }
}

/// The op counts after optimizing `graph` for `ep` with the one rule `rule_name`.
fn counts_after(rule_name: &str, ep: &str, graph: &Graph) -> BTreeMap<String, usize> {
    let (out, _) = optimize_with_rules(
        &model(graph.clone()),
        &get_ep(ep).unwrap(),
        &options(None),
        &[rule(rule_name)],
    )
    .unwrap();
    out.graph.op_counts()
}

#[test]
fn biased_gelu_fusions_keep_their_forms_apart_and_need_an_initializer_bias() {
    let shape = [2, 3, 8];
    let exact = biased_gelu(&shape, None, 1, false);
    let tanh = biased_gelu(&shape, Some("tanh"), 1, false);
    let unchanged = |rule: &str, ep: &str, g: &Graph| {
        assert_eq!(
            counts_after(rule, ep, g),
            g.op_counts(),
            "{rule} on {ep} changed {g:#?}"
        );
    };
    // BiasGelu is erf-based, FastGelu tanh-based: neither takes the other's GELU.
    unchanged("bias-gelu", "cpu", &tanh);
    unchanged("fast-gelu", "cpu", &exact);
    // A bias that is a graph input (not an initializer) is left alone.
    unchanged("bias-gelu", "cpu", &biased_gelu(&shape, None, 1, true));
    unchanged(
        "fast-gelu",
        "cpu",
        &biased_gelu(&shape, Some("tanh"), 1, true),
    );
    // EPs without the fused kernels keep Add + Gelu.
    for ep in ["trt-rtx", "onnx-standard", "openvino"] {
        unchanged("bias-gelu", ep, &exact);
        unchanged("fast-gelu", ep, &tanh);
    }
}

const WRONG: &str = "
rule sigmoid-is-tanh
  group Bad
  stage cleanup
  gate always
  pattern (Sigmoid ?x)
  replace (Tanh ?x)
";

#[test]
fn fingerprint_mode_stops_a_wrong_rule_naming_it() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, Shape::new([2i64, 3]));
    b.output("y", DType::F32, Shape::new([2i64, 3]));
    b.op_into("Sigmoid", &[&x], vec![], "y");
    let graph = b.finish();
    let wrong = parse_rules("planted.rules", WRONG, &mobius::rulebook::VOCABULARY).unwrap();
    let leaves = HashMap::from([(
        Symbol::from("x"),
        Arc::new(random_tensor(DType::F32, &[2, 3], &mut Rng::new(7))),
    )]);
    let err = optimize_with_rules(
        &model(graph.clone()),
        &get_ep("default").unwrap(),
        &options(Some(leaves.into())),
        &wrong,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("unsound rewrite `sigmoid-is-tanh`"), "{err}");
    // The real rules pass the same check (no false alarm).
    let leaves = HashMap::from([(
        Symbol::from("x"),
        Arc::new(random_tensor(DType::F32, &[2, 3], &mut Rng::new(7))),
    )]);
    optimize_with_rules(
        &model(graph),
        &get_ep("default").unwrap(),
        &options(Some(leaves.into())),
        &mobius::rulebook::rules().unwrap().rules,
    )
    .unwrap();
}

/// A wrong rule over a multi-output op whose operand is an initializer: the sum output of
/// SkipSimplifiedLayerNormalization "is" `a − b`. Proofs (leaf values of initializers and
/// inputs) and `--verify-rewrites` (its leaf values, `leaf_values`) both stop it.
const WRONG_OVER_INITIALIZERS: &str = "
rule sum-is-difference
  group Bad
  stage inline
  gate always
  pattern (get3 (com.microsoft::SkipSimplifiedLayerNormalization/4 ?a ?b ?w ?eps))
  replace (Sub ?a ?b)
";

#[test]
fn a_wrong_rule_over_initializers_is_caught() {
    let shape = [1usize, 2, 4];
    let mut b = GraphBuilder::new("g");
    let a = b.input("a", DType::F32, dims(&shape));
    let w = b.input("w", DType::F32, dims(&shape[2..]));
    let values = random_tensor(DType::F32, &shape, &mut Rng::new(3));
    let bias: Vec<f32> = values.as_f64().iter().map(|&v| v as f32).collect();
    let b_init = b.initializer(mobius::ir::Initializer {
        name: "b".into(),
        dtype: DType::F32,
        shape: shape.to_vec(),
        source: Some(mobius::ir::TensorSource::Inline(
            mobius::ir::TensorData::from_f32(shape.to_vec(), &bias),
        )),
    });
    b.output("norm", DType::F32, dims(&shape));
    b.output("sum", DType::F32, dims(&shape));
    b.node(
        "com.microsoft",
        "SkipSimplifiedLayerNormalization",
        &[&a, &b_init, &w],
        vec![("epsilon", Attr::Float(1e-5))],
        vec!["norm".into(), String::new(), String::new(), "sum".into()],
    );
    let graph = b.finish();
    let wrong = parse_rules(
        "planted.rules",
        WRONG_OVER_INITIALIZERS,
        &mobius::rulebook::VOCABULARY,
    )
    .unwrap();
    // --verify-rewrites' leaf values: random inputs and every initializer.
    let leaves = mobius::opt::fingerprint::leaf_values(&graph, &mut Evaluator::new(None)).unwrap();
    let err = optimize_with_rules(
        &model(graph.clone()),
        &get_ep("onnx-standard").unwrap(),
        &options(Some(leaves)),
        &wrong,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("unsound rewrite `sum-is-difference`"), "{err}");
    // The proof harness catches it too.
    let inputs = HashMap::from([
        (
            "a".to_string(),
            random_tensor(DType::F32, &shape, &mut Rng::new(4)),
        ),
        (
            "w".to_string(),
            random_tensor(DType::F32, &shape[2..], &mut Rng::new(5)),
        ),
    ]);
    let failure = prove_with(
        &wrong[0],
        vec![wrong[0].clone()],
        "onnx-standard",
        graph,
        inputs,
        1e-5,
    )
    .unwrap_err()
    .to_string();
    assert!(
        failure.contains("unsound rewrite `sum-is-difference`"),
        "{failure}"
    );
}

/// GQA reads padding from `attention_mask` itself: an Attention whose mask is the mask cast to
/// float (an additive bias) is not the padding mask, and neither GQA rule may take it. Each rule
/// runs where it extracts GroupQueryAttention (checked on the unmodified block first, so the
/// refusal is the rule's, not the cost model's).
#[test]
fn gqa_rules_decline_a_mask_cast_to_float() {
    let cases = [
        (
            "rotary-attention-to-gqa",
            "cpu",
            attention_block(1, 2, 1, 2, 1, false),
        ),
        (
            "attention-to-gqa",
            "dml",
            decoder_dims(as_f16(attention_block_with(1, 2, 1, 2, 1, None, None, 0.0))),
        ),
    ];
    for (name, ep, graph) in cases {
        let dtype = graph.outputs[0].dtype;
        let optimized = |g: &Graph| {
            let (out, _) = optimize_with_rules(
                &model(g.clone()),
                &get_ep(ep).unwrap(),
                &options_for(dtype, None),
                &[rule(name)],
            )
            .unwrap();
            out.graph.op_counts()
        };
        let fused = optimized(&graph);
        assert_eq!(
            fused.get("com.microsoft::GroupQueryAttention"),
            Some(&1),
            "{name} on {ep}: {fused:?}"
        );
        let mut cast_to_float = graph.clone();
        let cast = cast_to_float
            .nodes
            .iter_mut()
            .find(|n| n.op_type == "Cast")
            .expect("the padding mask casts attention_mask");
        cast.attrs
            .insert("to".into(), Attr::Int(dtype.onnx_code() as i64));
        let counts = optimized(&cast_to_float);
        assert_eq!(counts.get("Attention"), Some(&1), "{name}: {counts:?}");
        assert_eq!(
            counts.get("com.microsoft::GroupQueryAttention"),
            None,
            "{name}: {counts:?}"
        );
    }
}

/// GroupQueryAttention takes no additive bias and has no chunked mask: an Attention whose mask
/// carries the ALiBi bias ([`mobius::models::components::alibi_bias`]) or a chunk restriction
/// ([`mobius::models::components::chunked_mask`], Llama 4) of the padding mask, alone or
/// restricted to a sliding window, is not the padding mask, and neither GQA rule may take it; it
/// stays `Attention`. Each rule runs where it extracts GroupQueryAttention (checked on the same
/// block without the extra first, so the refusal is the rule's, not the cost model's).
#[test]
fn gqa_rules_decline_an_alibi_bias_and_a_chunked_mask() {
    for (name, rope) in [
        ("rotary-attention-to-gqa", Some(false)),
        ("attention-to-gqa", None),
    ] {
        for window in [None, Some(2)] {
            let block = |extra| attention_block_masked((1, 2, 1, 2, 1), rope, window, 0.0, extra);
            let optimized = |g: Graph| {
                let (out, _) = optimize_with_rules(
                    &model(g),
                    &get_ep("cpu").unwrap(),
                    &options_for(DType::F32, None),
                    &[rule(name)],
                )
                .unwrap();
                out.graph.op_counts()
            };
            let fused = optimized(block(MaskExtra::None));
            assert_eq!(
                fused.get("com.microsoft::GroupQueryAttention"),
                Some(&1),
                "{name} {window:?}: {fused:?}"
            );
            for extra in [MaskExtra::Alibi, MaskExtra::Chunked(2)] {
                let counts = optimized(block(extra));
                assert_eq!(counts.get("Attention"), Some(&1), "{name}: {counts:?}");
                assert_eq!(
                    counts.get("com.microsoft::GroupQueryAttention"),
                    None,
                    "{name} {window:?} {extra:?}: {counts:?}"
                );
            }
        }
    }
}

/// `sink-attention-to-gqa` declines for a causal mask that is not GroupQueryAttention's: a
/// strict one (queries do not see themselves) or one counting tokens with an exclusive CumSum
/// (checked on the unmodified block first, so the refusal is the rule's).
#[test]
fn sink_attention_to_gqa_declines_other_causal_masks() {
    let graph = sink_attention_block((1, 2, 1), (2, 1), Some(2), None, 7);
    let gqa = |g: &Graph| {
        let (out, _) = optimize_with_rules(
            &model(g.clone()),
            &get_ep("cpu").unwrap(),
            &options_for(DType::F32, None),
            &[rule("sink-attention-to-gqa")],
        )
        .unwrap();
        out.graph
            .op_counts()
            .get("com.microsoft::GroupQueryAttention")
            .copied()
    };
    assert_eq!(gqa(&graph), Some(1));
    let mut strict = graph.clone();
    let ge = strict
        .nodes
        .iter_mut()
        .find(|n| n.op_type == "GreaterOrEqual");
    ge.expect("the causal mask compares distances").op_type = "Greater".into();
    assert_eq!(gqa(&strict), None, "strict causal mask");
    let mut exclusive = graph.clone();
    let cumsum = exclusive.nodes.iter_mut().find(|n| n.op_type == "CumSum");
    let cumsum = cumsum.expect("tokens are counted by CumSum");
    cumsum.attrs.insert("exclusive".into(), Attr::Int(1));
    assert_eq!(gqa(&exclusive), None, "exclusive token count");
}
