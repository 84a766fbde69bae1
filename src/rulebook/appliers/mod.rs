//! The appliers rule files name (`apply NAME`): Rust that builds the replacement of a match in
//! the e-graph, one file per rule group, registered here by name. Each declares the pattern
//! variables it reads and takes their classes in that order (see [`crate::opt::bind`]). The
//! appliers of the lowering rules are in `src/rulebook/decompose/`.

mod algebraic;
mod alibi_genai;
mod attention_batched;
mod attention_q_scale;
mod attention_recognize;
mod from_nbits;
mod gqa;
mod gqa_genai;
mod gqa_genai_positions;
mod gqa_mask;
mod gqa_sink;
mod grouped_qkv;
mod head_layout;
mod head_parts;
mod linear_attention;
mod matmul_nbits;
mod moe;
mod moe_clamped;
mod moe_loop;
mod norm_recognize;
mod pack_qkv;
mod per_head_norm;
mod rotary_interleaved;
mod rotary_recognize;
mod shape_slice;
mod skip_layer_norm;
mod skip_norm;
mod sliced_qkv;
mod unsqueezed_heads;

use super::decompose::{attention, range, rms_norm, rotary, scatter};
use crate::opt::bind::AnyApplier;

/// The appliers, by the name rule files give them.
pub const APPLIERS: &[(&str, &dyn AnyApplier)] = &[
    ("compose-transposes", &algebraic::COMPOSE_TRANSPOSES),
    ("castlike-to-cast", &algebraic::CASTLIKE_TO_CAST),
    ("slice-of-shape", &shape_slice::SLICE_OF_SHAPE),
    (
        "slice-of-shape-on-axis",
        &shape_slice::SLICE_OF_SHAPE_ON_AXIS,
    ),
    ("reshape-copying-dims", &algebraic::RESHAPE_COPYING_DIMS),
    ("rms-norm-unit", &norm_recognize::RMS_NORM_UNIT),
    ("layer-norm-unit", &norm_recognize::LAYER_NORM_UNIT),
    (
        "rms-norm-without-casts",
        &norm_recognize::RMS_NORM_WITHOUT_CASTS,
    ),
    ("sdpa-to-attention", &attention_recognize::SDPA_TO_ATTENTION),
    (
        "q-scale-into-attention",
        &attention_q_scale::Q_SCALE_INTO_ATTENTION,
    ),
    (
        "batched-sdpa-to-attention",
        &attention_batched::BATCHED_SDPA_TO_ATTENTION,
    ),
    (
        "masked-scores-to-attention",
        &attention_recognize::MASKED_SCORES_TO_ATTENTION,
    ),
    (
        "transposed-key-through-3d",
        &attention_recognize::TRANSPOSED_KEY_THROUGH_3D,
    ),
    ("rotate-half", &rotary_recognize::ROTATE_HALF),
    ("partial-rotation", &rotary_recognize::PARTIAL_ROTATION),
    ("outer-angles", &rotary_recognize::OUTER_ANGLES),
    ("repeat-interleave", &rotary_interleaved::REPEAT_INTERLEAVE),
    ("rotate-pairs", &rotary_interleaved::ROTATE_PAIRS),
    (
        "rotate-pairs-heads-last",
        &rotary_interleaved::ROTATE_PAIRS_HEADS_LAST,
    ),
    ("rotary-on-3d-heads", &head_layout::ROTARY_ON_3D_HEADS),
    ("sliced-head-view", &head_layout::SLICED_HEAD_VIEW),
    ("head-slice-of-split", &head_parts::HEAD_SLICE_OF_SPLIT),
    (
        "head-slice-of-split-with-steps",
        &head_parts::HEAD_SLICE_OF_SPLIT_WITH_STEPS,
    ),
    ("head-gather-of-split", &head_parts::HEAD_GATHER_OF_SPLIT),
    (
        "sliced-head-view-with-steps",
        &head_layout::SLICED_HEAD_VIEW_WITH_STEPS,
    ),
    ("gathered-head-view", &head_layout::GATHERED_HEAD_VIEW),
    ("attention-on-3d-heads", &head_layout::ATTENTION_ON_3D_HEADS),
    (
        "attention-on-3d-heads-without-cache",
        &head_layout::ATTENTION_ON_3D_HEADS_WITHOUT_CACHE,
    ),
    (
        "per-head-rms-norm-as-view",
        &per_head_norm::PER_HEAD_RMS_NORM_AS_VIEW,
    ),
    (
        "per-head-layer-norm-as-view",
        &per_head_norm::PER_HEAD_LAYER_NORM_AS_VIEW,
    ),
    (
        "rms-norm-before-transpose",
        &per_head_norm::RMS_NORM_BEFORE_TRANSPOSE,
    ),
    (
        "split-of-unsqueezed",
        &unsqueezed_heads::SPLIT_OF_UNSQUEEZED,
    ),
    (
        "unsqueezed-single-head",
        &unsqueezed_heads::UNSQUEEZED_SINGLE_HEAD,
    ),
    ("skip-layer-norm", &skip_layer_norm::SKIP_LAYER_NORM),
    (
        "skip-layer-norm-with-bias",
        &skip_layer_norm::SKIP_LAYER_NORM_WITH_BIAS,
    ),
    (
        "skip-simplified-layer-norm",
        &skip_norm::SKIP_SIMPLIFIED_LAYER_NORM,
    ),
    ("attention-to-gqa", &gqa::ATTENTION_TO_GQA),
    ("rotary-attention-to-gqa", &gqa::ROTARY_ATTENTION_TO_GQA),
    ("sink-attention-to-gqa", &gqa_sink::SINK_ATTENTION_TO_GQA),
    (
        "export-attention-to-gqa",
        &gqa_genai::EXPORT_ATTENTION_TO_GQA,
    ),
    (
        "export-alibi-attention",
        &alibi_genai::EXPORT_ALIBI_ATTENTION,
    ),
    (
        "export-rotary-attention-to-gqa",
        &gqa_genai::EXPORT_ROTARY_ATTENTION_TO_GQA,
    ),
    (
        "export-partial-rotary-attention-to-gqa",
        &gqa_genai_positions::EXPORT_PARTIAL_ROTARY_ATTENTION_TO_GQA,
    ),
    ("pack-qkv", &pack_qkv::PACK_QKV),
    ("pack-qkv-with-bias", &pack_qkv::PACK_QKV_WITH_BIAS),
    ("split-qkv", &pack_qkv::SPLIT_QKV),
    ("split-qkv-with-sizes", &pack_qkv::SPLIT_QKV_WITH_SIZES),
    ("sliced-qkv", &sliced_qkv::SLICED_QKV),
    (
        "split-of-grouped-columns",
        &grouped_qkv::SPLIT_OF_GROUPED_COLUMNS,
    ),
    ("matmul-nbits", &matmul_nbits::MATMUL_NBITS),
    (
        "matmul-nbits-without-zero-points",
        &matmul_nbits::MATMUL_NBITS_WITHOUT_ZERO_POINTS,
    ),
    (
        "matmul-nbits-to-dequantize",
        &from_nbits::MATMUL_NBITS_TO_DEQUANTIZE,
    ),
    (
        "matmul-nbits-with-zero-points-to-dequantize",
        &from_nbits::MATMUL_NBITS_WITH_ZERO_POINTS_TO_DEQUANTIZE,
    ),
    (
        "matmul-nbits-with-bias-to-dequantize",
        &from_nbits::MATMUL_NBITS_WITH_BIAS_TO_DEQUANTIZE,
    ),
    (
        "gated-delta-linear-attention",
        &linear_attention::GATED_DELTA_LINEAR_ATTENTION,
    ),
    (
        "linear-attention-output-as-scan",
        &linear_attention::LINEAR_ATTENTION_OUTPUT_AS_SCAN,
    ),
    (
        "linear-attention-state-as-scan",
        &linear_attention::LINEAR_ATTENTION_STATE_AS_SCAN,
    ),
    ("dense-moe", &moe::DENSE_MOE),
    ("moe-expert-loop", &moe_loop::MOE_EXPERT_LOOP),
    ("dense-qmoe", &moe::DENSE_QMOE),
    ("moe-to-dense", &moe::MOE_TO_DENSE),
    ("qmoe-to-dense", &moe::QMOE_TO_DENSE),
    ("dense-moe-clamped", &moe_clamped::DENSE_MOE_CLAMPED),
    ("moe-clamped-to-dense", &moe_clamped::MOE_CLAMPED_TO_DENSE),
    ("decompose-rotary", &rotary::DECOMPOSE_ROTARY),
    (
        "decompose-rotary-with-positions",
        &rotary::DECOMPOSE_ROTARY_WITH_POSITIONS,
    ),
    ("attention-output", &attention::ATTENTION_OUTPUT),
    (
        "attention-output-without-cache",
        &attention::ATTENTION_OUTPUT_WITHOUT_CACHE,
    ),
    (
        "attention-output-nonpad",
        &attention::ATTENTION_OUTPUT_NONPAD,
    ),
    ("attention-present-key", &attention::ATTENTION_PRESENT_KEY),
    (
        "attention-present-value",
        &attention::ATTENTION_PRESENT_VALUE,
    ),
    (
        "rank4-rms-norm-via-rank3",
        &rms_norm::RANK4_RMS_NORM_VIA_RANK3,
    ),
    ("range-to-cumsum", &range::RANGE_TO_CUMSUM),
    (
        "tensor-scatter-to-scatternd",
        &scatter::TENSOR_SCATTER_TO_SCATTER_ND,
    ),
];

#[cfg(test)]
mod tests {
    use crate::opt::rules::Replacement;

    /// Loading the embedded rules resolves the variables of every applier they name; this
    /// makes sure that is every registered one.
    #[test]
    fn every_registered_applier_is_named_by_a_rule() {
        let rules = crate::rulebook::rules().unwrap().rules;
        for (name, _) in super::APPLIERS {
            let named = rules.iter().any(
                |r| matches!(&r.replacement, Replacement::Applier { name: n, .. } if n == name),
            );
            assert!(named, "no rule applies `{name}`");
        }
    }
}
