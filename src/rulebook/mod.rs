//! The rulebook: what the optimizer engine ([`crate::opt`]) rewrites with. The rule files of
//! `rewrites/` (embedded at build time, [`RULE_FILES`]), the side conditions and appliers they
//! name ([`conditions`], [`appliers`], and `decompose`: the appliers of the lowering rules), the
//! recognizers those read exported graphs with (`recognize`, `recognize_gemm`,
//! `recognize_rotary`, `head_layout`, `genai_contract`), the decomposed shapes `--trace` reports
//! as left over ([`leftovers`]), and the standard-ONNX function bodies of the contrib ops, read
//! from the inline rules ([`contrib_functions`]). The engine does not import this module: the
//! optimizer is the engine run with [`rules`] ([`optimize`]).

pub mod appliers;
pub mod conditions;
pub mod contrib_functions;
mod decompose;
mod genai_contract;
mod head_layout;
pub mod leftovers;
mod recognize;
mod recognize_flat_rows;
mod recognize_gemm;
mod recognize_interleave;
mod recognize_q_scale;
mod recognize_rotary;

use std::collections::HashSet;

use crate::ep::EpCapabilities;
use crate::ir::{Graph, Model, Node};
use crate::opt::rules::{parse_rules, RuleSet, Vocabulary};
use crate::opt::{KvCache, OptimizeOptions, OptimizeReport, Role};
use crate::{Error, Result};

/// The rule files, by path under `rewrites/`.
pub const RULE_FILES: &[(&str, &str)] = &[
    (
        "recognize/rms_norm.rules",
        include_str!("../../rewrites/recognize/rms_norm.rules"),
    ),
    (
        "recognize/layer_norm.rules",
        include_str!("../../rewrites/recognize/layer_norm.rules"),
    ),
    (
        "recognize/norm_casts.rules",
        include_str!("../../rewrites/recognize/norm_casts.rules"),
    ),
    (
        "recognize/norm_scale.rules",
        include_str!("../../rewrites/recognize/norm_scale.rules"),
    ),
    (
        "recognize/bias_order.rules",
        include_str!("../../rewrites/recognize/bias_order.rules"),
    ),
    (
        "recognize/gemm.rules",
        include_str!("../../rewrites/recognize/gemm.rules"),
    ),
    (
        "recognize/flat_rows.rules",
        include_str!("../../rewrites/recognize/flat_rows.rules"),
    ),
    (
        "recognize/attention_q_scale.rules",
        include_str!("../../rewrites/recognize/attention_q_scale.rules"),
    ),
    (
        "recognize/attention.rules",
        include_str!("../../rewrites/recognize/attention.rules"),
    ),
    (
        "recognize/rotary.rules",
        include_str!("../../rewrites/recognize/rotary.rules"),
    ),
    (
        "recognize/rotary_interleaved.rules",
        include_str!("../../rewrites/recognize/rotary_interleaved.rules"),
    ),
    (
        "recognize/head_layout.rules",
        include_str!("../../rewrites/recognize/head_layout.rules"),
    ),
    (
        "recognize/grouped_qkv.rules",
        include_str!("../../rewrites/recognize/grouped_qkv.rules"),
    ),
    (
        "recognize/moe_loop.rules",
        include_str!("../../rewrites/recognize/moe_loop.rules"),
    ),
    (
        "fusion/gqa.rules",
        include_str!("../../rewrites/fusion/gqa.rules"),
    ),
    (
        "fusion/gqa_genai.rules",
        include_str!("../../rewrites/fusion/gqa_genai.rules"),
    ),
    (
        "fusion/alibi_genai.rules",
        include_str!("../../rewrites/fusion/alibi_genai.rules"),
    ),
    (
        "fusion/gelu.rules",
        include_str!("../../rewrites/fusion/gelu.rules"),
    ),
    (
        "fusion/pack_qkv.rules",
        include_str!("../../rewrites/fusion/pack_qkv.rules"),
    ),
    (
        "fusion/matmul_nbits.rules",
        include_str!("../../rewrites/fusion/matmul_nbits.rules"),
    ),
    (
        "fusion/moe.rules",
        include_str!("../../rewrites/fusion/moe.rules"),
    ),
    (
        "fusion/moe_clamped.rules",
        include_str!("../../rewrites/fusion/moe_clamped.rules"),
    ),
    (
        "fusion/linear_attention.rules",
        include_str!("../../rewrites/fusion/linear_attention.rules"),
    ),
    (
        "fusion/skip_norm.rules",
        include_str!("../../rewrites/fusion/skip_norm.rules"),
    ),
    (
        "fusion/skip_layer_norm.rules",
        include_str!("../../rewrites/fusion/skip_layer_norm.rules"),
    ),
    (
        "fusion/bias_gelu.rules",
        include_str!("../../rewrites/fusion/bias_gelu.rules"),
    ),
    (
        "inline/linear_attention.rules",
        include_str!("../../rewrites/inline/linear_attention.rules"),
    ),
    (
        "inline/bias_gelu.rules",
        include_str!("../../rewrites/inline/bias_gelu.rules"),
    ),
    (
        "inline/matmul_nbits.rules",
        include_str!("../../rewrites/inline/matmul_nbits.rules"),
    ),
    (
        "inline/moe.rules",
        include_str!("../../rewrites/inline/moe.rules"),
    ),
    (
        "inline/moe_clamped.rules",
        include_str!("../../rewrites/inline/moe_clamped.rules"),
    ),
    (
        "inline/skip_layer_norm.rules",
        include_str!("../../rewrites/inline/skip_layer_norm.rules"),
    ),
    (
        "inline/skip_norm.rules",
        include_str!("../../rewrites/inline/skip_norm.rules"),
    ),
    (
        "cleanup/algebraic.rules",
        include_str!("../../rewrites/cleanup/algebraic.rules"),
    ),
    (
        "cleanup/shape_slice.rules",
        include_str!("../../rewrites/cleanup/shape_slice.rules"),
    ),
    (
        "cleanup/tile.rules",
        include_str!("../../rewrites/cleanup/tile.rules"),
    ),
    (
        "cleanup/identity.rules",
        include_str!("../../rewrites/cleanup/identity.rules"),
    ),
    (
        "lowering/decompose_rotary.rules",
        include_str!("../../rewrites/lowering/decompose_rotary.rules"),
    ),
    (
        "lowering/decompose_attention.rules",
        include_str!("../../rewrites/lowering/decompose_attention.rules"),
    ),
    (
        "lowering/htp_rank4_rmsnorm.rules",
        include_str!("../../rewrites/lowering/htp_rank4_rmsnorm.rules"),
    ),
    (
        "lowering/range.rules",
        include_str!("../../rewrites/lowering/range.rules"),
    ),
    (
        "lowering/tensor_scatter.rules",
        include_str!("../../rewrites/lowering/tensor_scatter.rules"),
    ),
];

/// The conditions and appliers the rule files name.
pub const VOCABULARY: Vocabulary = Vocabulary {
    conditions: conditions::CONDITIONS,
    appliers: appliers::APPLIERS,
};

/// Every rule of every embedded rule file (rule names are unique), with the leftover report
/// of the shapes they recognise.
pub fn rules() -> Result<RuleSet> {
    let mut rules = Vec::new();
    for (file, text) in RULE_FILES {
        rules.extend(parse_rules(file, text, &VOCABULARY)?);
    }
    let mut seen = HashSet::new();
    for r in &rules {
        if !seen.insert(r.name.clone()) {
            return Err(Error::Graph(format!(
                "{}: rule name `{}` is used twice",
                r.origin, r.name
            )));
        }
    }
    Ok(RuleSet {
        rules,
        leftovers: leftovers::leftovers,
    })
}

/// Optimizes `model` for the EP `caps` with every rule ([`crate::opt::optimize`] with
/// [`rules`]); returns the new model and what each stage did. Warns when a decoder's attention
/// stayed `Attention` where the EP runs GroupQueryAttention (and says why for ALiBi attention).
pub fn optimize(
    model: &Model,
    caps: &EpCapabilities,
    opts: &OptimizeOptions,
) -> Result<(Model, OptimizeReport)> {
    let (out, report) = crate::opt::optimize(model, caps, opts, &rules()?)?;
    warn_without_gqa(&out.graph, caps, opts);
    Ok((out, report))
}

/// Whether Attention node `n` reads an ALiBi bias as its mask (input 3), by the name the builder
/// gives it ([`crate::models::components::ALIBI_BIAS`]).
fn reads_alibi_bias(n: &Node) -> bool {
    n.inputs
        .get(3)
        .is_some_and(|m| m.starts_with(crate::models::components::ALIBI_BIAS))
}

/// Whether Attention node `n` reads a chunked-attention mask (input 3), by the name the builder
/// gives it ([`crate::models::components::CHUNKED_MASK`]).
fn reads_chunked_mask(n: &Node) -> bool {
    n.inputs
        .get(3)
        .is_some_and(|m| m.starts_with(crate::models::components::CHUNKED_MASK))
}

/// Whether Attention node `n` reads a learned indexer's mask (input 3), by the name the builder
/// gives it ([`crate::models::components::INDEX_MASK`]).
fn reads_index_mask(n: &Node) -> bool {
    n.inputs
        .get(3)
        .is_some_and(|m| m.starts_with(crate::models::components::INDEX_MASK))
}

/// Where the GroupQueryAttention fusion was expected of `graph` (a decoder optimized for an EP
/// that runs GroupQueryAttention in its dtype): says how many Attention nodes read an ALiBi bias,
/// a chunked-attention mask or a learned indexer's mask (GroupQueryAttention takes none, so they
/// stay `Attention` by design), and warns when none of its attention became GroupQueryAttention for another reason.
fn warn_without_gqa(graph: &Graph, caps: &EpCapabilities, opts: &OptimizeOptions) {
    let count = |op: &str| graph.nodes.iter().filter(|n| n.op_type == op).count();
    let attention = count("Attention");
    let expected = opts.role == Role::Decoder
        && opts.kv_cache != KvCache::Static
        && caps.gqa_dtypes.contains(&opts.dtype);
    let alibi = graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "Attention" && reads_alibi_bias(n))
        .count();
    if expected && alibi > 0 {
        tracing::info!(
            "ALiBi: {alibi} Attention nodes add the ALiBi bias to their scores (their float \
             mask); GroupQueryAttention takes no additive bias, so on ep='{}'/dtype={} they \
             stay opset-24 Attention",
            caps.name,
            opts.dtype
        );
    }
    let chunked = graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "Attention" && reads_chunked_mask(n))
        .count();
    if expected && chunked > 0 {
        tracing::info!(
            "chunked attention: {chunked} Attention nodes see only the keys of their query's \
             chunk; GroupQueryAttention has no chunked mask, so on ep='{}'/dtype={} they stay \
             opset-24 Attention",
            caps.name,
            opts.dtype
        );
    }
    let indexed = graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "Attention" && reads_index_mask(n))
        .count();
    if expected && indexed > 0 {
        tracing::info!(
            "sparse attention: {indexed} Attention nodes see only the keys a learned indexer \
             selects (an additive index mask); GroupQueryAttention takes no such mask, so on \
             ep='{}'/dtype={} they stay opset-24 Attention",
            caps.name,
            opts.dtype
        );
    }
    if expected && count("GroupQueryAttention") == 0 && attention > alibi + chunked + indexed {
        let hint = match opts.kv_cache {
            KvCache::AsIs => {
                "; an exported graph's attention mask becomes GroupQueryAttention only when you \
                 declare onnxruntime-genai's KV-cache contract (mobius optimize --kv-cache genai)"
            }
            KvCache::Genai | KvCache::Static => "",
        };
        tracing::warn!(
            "GQA fusion expected for ep='{}'/dtype={} but found 0 GroupQueryAttention and {attention} \
             Attention nodes; the model may run slower than expected on this EP (the attention \
             pattern did not meet the GroupQueryAttention conditions){hint}",
            caps.name,
            opts.dtype
        );
    }
}
