//! Attribute schemas: for each known op, the names of all its attributes in a fixed order.
//!
//! In the e-graph an op's attributes are children after its inputs, one per schema entry, with
//! an `unset` leaf for an attribute the node does not carry. A fixed order lets rule patterns
//! bind attributes like inputs; `unset` keeps the round trip exact (nothing is defaulted).

/// Attribute names (sorted) of the ops mobius knows, keyed by `domain::op_type` (no prefix for
/// the standard domain).
const SCHEMAS: &[(&str, &[&str])] = &[
    ("Abs", &[]),
    ("Add", &[]),
    ("And", &[]),
    (
        "Attention",
        &[
            "is_causal",
            "kv_num_heads",
            "q_num_heads",
            "qk_matmul_output_mode",
            "scale",
            "softcap",
            "softmax_precision",
        ],
    ),
    ("Cast", &["round_mode", "saturate", "to"]),
    ("CastLike", &["round_mode", "saturate"]),
    ("Concat", &["axis"]),
    (
        "Constant",
        &[
            "value",
            "value_float",
            "value_floats",
            "value_int",
            "value_ints",
            "value_string",
            "value_strings",
        ],
    ),
    ("ConstantOfShape", &["value"]),
    ("Cos", &[]),
    ("CumSum", &["exclusive", "reverse"]),
    ("DequantizeLinear", &["axis", "block_size", "output_dtype"]),
    ("Div", &[]),
    ("Equal", &[]),
    ("Erf", &[]),
    ("Exp", &[]),
    ("Expand", &[]),
    ("Flatten", &["axis"]),
    ("Gather", &["axis"]),
    ("Gelu", &["approximate"]),
    ("Gemm", &["alpha", "beta", "transA", "transB"]),
    ("Greater", &[]),
    ("Identity", &[]),
    ("IsNaN", &[]),
    ("LayerNormalization", &["axis", "epsilon", "stash_type"]),
    ("Less", &[]),
    ("Log", &[]),
    ("MatMul", &[]),
    ("Max", &[]),
    ("Min", &[]),
    ("Mul", &[]),
    ("Neg", &[]),
    ("Not", &[]),
    ("Pow", &[]),
    ("RMSNormalization", &["axis", "epsilon", "stash_type"]),
    ("Range", &[]),
    ("Reciprocal", &[]),
    ("ReduceMax", &["keepdims", "noop_with_empty_axes"]),
    ("ReduceMean", &["keepdims", "noop_with_empty_axes"]),
    ("ReduceMin", &["keepdims", "noop_with_empty_axes"]),
    ("ReduceSum", &["keepdims", "noop_with_empty_axes"]),
    ("Relu", &[]),
    ("Reshape", &["allowzero"]),
    (
        "RotaryEmbedding",
        &["interleaved", "num_heads", "rotary_embedding_dim"],
    ),
    ("ScatterND", &["reduction"]),
    ("Shape", &["end", "start"]),
    ("Sigmoid", &[]),
    ("Sin", &[]),
    ("Size", &[]),
    ("Slice", &[]),
    ("Softmax", &["axis"]),
    ("Split", &["axis", "num_outputs"]),
    ("Sqrt", &[]),
    ("Squeeze", &[]),
    ("Sub", &[]),
    ("Tanh", &[]),
    ("TensorScatter", &["axis", "mode"]),
    ("Tile", &[]),
    ("TopK", &["axis", "largest", "sorted"]),
    ("Transpose", &["perm"]),
    ("Unsqueeze", &[]),
    ("Where", &[]),
    (
        "ai.mobius::FromNBitsScales",
        &["K", "bits", "block_size", "signed"],
    ),
    (
        "ai.mobius::FromNBitsWeight",
        &["K", "bits", "block_size", "signed"],
    ),
    (
        "ai.mobius::FromNBitsZeroPoints",
        &["K", "bits", "block_size", "signed"],
    ),
    ("ai.mobius::MoEDownStack", &["experts"]),
    ("ai.mobius::MoEFc1", &["experts"]),
    ("ai.mobius::MoEFc2", &["experts"]),
    ("ai.mobius::MoEGateStack", &["experts"]),
    ("ai.mobius::MoEUpStack", &["experts"]),
    ("ai.mobius::NBitsScales", &[]),
    ("ai.mobius::NBitsWeight", &["bits", "block_size"]),
    ("ai.mobius::NBitsZeroPoints", &["bits", "block_size"]),
    (
        "ai.mobius::QMoEDownValues",
        &["K", "N", "bits", "block_size", "experts"],
    ),
    (
        "ai.mobius::QMoEFc1Weight",
        &["K", "N", "bits", "block_size", "experts"],
    ),
    (
        "ai.mobius::QMoEFc2Weight",
        &["K", "N", "bits", "block_size", "experts"],
    ),
    (
        "ai.mobius::QMoEGateValues",
        &["K", "N", "bits", "block_size", "experts"],
    ),
    (
        "ai.mobius::QMoEUpValues",
        &["K", "N", "bits", "block_size", "experts"],
    ),
    ("com.microsoft::BiasGelu", &[]),
    ("com.microsoft::FastGelu", &[]),
    (
        "com.microsoft::GatherBlockQuantized",
        &["bits", "block_size", "gather_axis", "quantize_axis"],
    ),
    (
        "com.microsoft::GroupQueryAttention",
        &[
            "do_rotary",
            "kv_num_heads",
            "local_window_size",
            "num_heads",
            "qk_output",
            "rotary_interleaved",
            "scale",
            "smooth_softmax",
            "softcap",
        ],
    ),
    (
        "com.microsoft::MatMulNBits",
        &["K", "N", "accuracy_level", "bits", "block_size"],
    ),
    (
        "com.microsoft::MoE",
        &[
            "activation_alpha",
            "activation_beta",
            "activation_type",
            "k",
            "normalize_routing_weights",
            "swiglu_fusion",
            "swiglu_limit",
            "use_sparse_mixer",
        ],
    ),
    (
        "com.microsoft::QMoE",
        &[
            "accuracy_level",
            "activation_alpha",
            "activation_beta",
            "activation_type",
            "block_size",
            "expert_weight_bits",
            "k",
            "normalize_routing_weights",
            "quant_type",
            "swiglu_fusion",
            "swiglu_limit",
            "use_sparse_mixer",
            "weights_prepacked",
        ],
    ),
    (
        "com.microsoft::RotaryEmbedding",
        &[
            "interleaved",
            "is_packed_batching",
            "num_heads",
            "rotary_embedding_dim",
            "scale",
        ],
    ),
    ("com.microsoft::SkipLayerNormalization", &["epsilon"]),
    (
        "com.microsoft::SkipSimplifiedLayerNormalization",
        &["epsilon"],
    ),
];

/// The op key used in schemas and in the e-graph: `OpType` or `domain::OpType`.
pub fn op_key(domain: &str, op_type: &str) -> String {
    if domain.is_empty() || domain == "ai.onnx" {
        op_type.to_string()
    } else {
        format!("{domain}::{op_type}")
    }
}

/// The attribute names of a known op, in schema order.
pub fn schema(key: &str) -> Option<&'static [&'static str]> {
    SCHEMAS
        .binary_search_by(|(k, _)| (*k).cmp(key))
        .ok()
        .map(|i| SCHEMAS[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_sorted_for_lookup_and_attribute_names_are_sorted() {
        assert!(
            SCHEMAS.windows(2).all(|w| w[0].0 < w[1].0),
            "SCHEMAS must be sorted by key"
        );
        for (key, attrs) in SCHEMAS {
            assert!(
                attrs.windows(2).all(|w| w[0] < w[1]),
                "{key}: attributes must be sorted"
            );
        }
        assert_eq!(
            schema("RMSNormalization"),
            Some(&["axis", "epsilon", "stash_type"][..])
        );
        assert_eq!(schema("com.microsoft::FastGelu"), Some(&[][..]));
        assert_eq!(schema("NoSuchOp"), None);
    }
}
