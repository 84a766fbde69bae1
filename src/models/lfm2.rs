//! LFM2 (Liquid AI): a hybrid decoder whose layers are either GQA attention (per-head q/k
//! RMSNorm, RoPE) or a gated short convolution (`in_proj` → `B`, `C`, `x`; a depthwise causal
//! convolution of width `conv_L_cache` over `B · x`; `C` times it; `out_proj`) that carries
//! its conv state between calls instead of a KV cache ([`super::components::short_conv`]);
//! every layer ends in a SwiGLU MLP (`feed_forward.w1/w3/w2`, its width derived from
//! `intermediate_size`), and the final norm is `model.embedding_norm`.

use super::components::ShortConv;
use super::decoder::{Family, LayerNorms, Names, QkNorm};
use super::family::FamilySpec;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, CheckpointRenaming, DecoderFields, Fields,
    HfConfig, ModelType, Sign,
};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "lfm2",
    summary: "hybrid: gated short-convolution layers (conv state carried as `past.{i}.conv`) \
              and GQA layers with per-head q/k RMSNorm; SwiGLU MLP",
    model_types: &[ModelType::generative("lfm2", "lfm2", read)],
};

/// transformers' Lfm2Config: RoPE theta 1e6, tied embeddings, `norm_eps` 1e-5, no biases.
pub(super) const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    silu_mlp: false,
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 1_000_000.0, f),
    tie_word_embeddings: true,
    use_sliding_window: false,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// LFM2's knobs: which layers are short convolutions, and their shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lfm2 {
    /// Per layer, whether it is a `conv` layer (else full attention).
    pub conv_layers: Vec<bool>,
    /// The convolution of every `conv` layer.
    pub conv: ShortConv,
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let layout = |hidden| read_layout(raw, layers, hidden, f);
    let plain = HfConfig {
        intermediate_size: Some(mlp_width(raw, f)? as i64),
        ..plain_config(raw)
    };
    read_decoder(&plain, t, f, &FIELDS, |dims| layout(dims.hidden_size))
}

/// `raw` with LFM2's spellings as the decoder reader reads them (`norm_eps`, default 1e-5;
/// `tie_embedding`) and without the layer types and window the generic reader would take for
/// sliding-window attention.
pub(super) fn plain_config(raw: &HfConfig) -> HfConfig {
    HfConfig {
        rms_norm_eps: Some(raw.norm_eps.unwrap_or(1e-5)),
        tie_word_embeddings: raw.tie_embedding.or(raw.tie_word_embeddings),
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    }
}

/// LFM2's hybrid layout for `layers` layers on a residual stream of `hidden` channels: which
/// layers are short convolutions and their kernel (`conv_L_cache`, default 3, at least 2) and
/// bias (`conv_bias`).
pub(super) fn read_layout(
    raw: &HfConfig,
    layers: usize,
    hidden: usize,
    f: &Fields<'_>,
) -> Result<Lfm2> {
    let conv_layers = conv_layers(raw, layers, f)?;
    let kernel = f.optional_count("conv_L_cache", raw.conv_l_cache, 3, MAX_CONV_KERNEL)?;
    if kernel < 2 {
        return Err(f.err(
            "conv_L_cache",
            "must be at least 2 (the conv state holds conv_L_cache − 1 steps)",
        ));
    }
    Ok(Lfm2 {
        conv_layers,
        conv: ShortConv {
            channels: hidden,
            kernel,
            bias: raw.conv_bias.unwrap_or(false),
        },
    })
}

/// Per layer, whether it is a `conv` layer: from `layer_types` (`full_attention` or `conv`),
/// else every layer not in `full_attn_idxs` (which defaults to every layer).
fn conv_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    if let Some(types) = &raw.layer_types {
        if types.len() != layers {
            return Err(f.err(
                "layer_types",
                &format!(
                    "{} entries for {layers} layers (num_hidden_layers)",
                    types.len()
                ),
            ));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                "full_attention" => Ok(false),
                "conv" => Ok(true),
                other => Err(f.err(
                    "layer_types",
                    &format!("`{other}` is not an LFM2 layer type (full_attention or conv)"),
                )),
            })
            .collect();
    }
    Ok(match &raw.full_attn_idxs {
        None => vec![false; layers],
        Some(idxs) => (0..layers).map(|i| !idxs.contains(&(i as i64))).collect(),
    })
}

/// The MLP width as transformers derives it: `intermediate_size` (or `block_ff_dim`), with
/// `block_auto_adjust_ff_dim` two thirds of it, times `block_ffn_dim_multiplier` and rounded up
/// to a multiple of `block_multiple_of` unless the multiplier is `null`.
fn mlp_width(raw: &HfConfig, f: &Fields<'_>) -> Result<usize> {
    let (field, value) = match raw.block_ff_dim {
        Some(v) => ("block_ff_dim", Some(v)),
        None => ("intermediate_size", raw.intermediate_size),
    };
    let size = f.positive(field, value, MAX_WIDTH)?;
    if !raw.block_auto_adjust_ff_dim.unwrap_or(true) {
        return Ok(size);
    }
    let adjusted = 2 * size / 3;
    let multiplier = match &raw.block_ffn_dim_multiplier {
        None => Some(1.0),
        Some(v) => f.json_number("block_ffn_dim_multiplier", Some(v))?,
    };
    let width = match multiplier {
        None => adjusted,
        Some(m) => {
            f.number("block_ffn_dim_multiplier", Some(m), m, Sign::Positive)?;
            // Saturates past usize::MAX; anything past MAX_WIDTH is refused below.
            let scaled = ((m * adjusted as f64) as usize).min(MAX_WIDTH + 1);
            let of =
                f.optional_count("block_multiple_of", raw.block_multiple_of, 256, MAX_WIDTH)?;
            scaled.div_ceil(of) * of
        }
    };
    if width == 0 || width > MAX_WIDTH {
        return Err(f.err(
            field,
            &format!("gives an MLP width of {width} (expected 1..={MAX_WIDTH})"),
        ));
    }
    Ok(width)
}

/// The builder's names for LFM2's checkpoint tensors: the MLP's `feed_forward.w1/w3/w2` as
/// `mlp.gate_proj/up_proj/down_proj`, the q/k norms `q_layernorm`/`k_layernorm` as
/// `q_norm`/`k_norm`.
pub(super) fn checkpoint_name(name: &str) -> Option<String> {
    const RENAMED: [(&str, &str); 5] = [
        (".feed_forward.w1.", ".mlp.gate_proj."),
        (".feed_forward.w3.", ".mlp.up_proj."),
        (".feed_forward.w2.", ".mlp.down_proj."),
        (".self_attn.q_layernorm.", ".self_attn.q_norm."),
        (".self_attn.k_layernorm.", ".self_attn.k_norm."),
    ];
    for (from, to) in RENAMED {
        if name.contains(from) {
            return Some(name.replacen(from, to, 1));
        }
    }
    Some(name.to_string())
}

impl Family for Lfm2 {
    fn names(&self) -> Names {
        Names {
            o_proj: "out_proj",
            final_norm: "embedding_norm",
            ..Names::LLAMA
        }
    }

    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("operator_norm"),
            pre_mlp: Some("ffn_norm"),
            ..LayerNorms::PRE
        }
    }

    fn short_conv(&self, _cfg: &ArchConfig, i: usize) -> Option<ShortConv> {
        self.conv_layers[i].then_some(self.conv)
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }
}

#[cfg(test)]
mod tests {
    use super::Lfm2;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "lfm2", "hidden_size": 64, "intermediate_size": 192,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
            "vocab_size": 300, "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn layer_kinds_come_from_layer_types_or_full_attn_idxs() {
        let c = parse(r#", "layer_types": ["conv", "full_attention", "conv"]"#).unwrap();
        let k = c.knobs::<Lfm2>().unwrap();
        assert_eq!(k.conv_layers, [true, false, true]);
        assert_eq!(k.conv.kernel, 3);
        let c = parse(r#", "full_attn_idxs": [2]"#).unwrap();
        assert_eq!(c.knobs::<Lfm2>().unwrap().conv_layers, [true, true, false]);
        let all = parse("").unwrap();
        assert_eq!(all.knobs::<Lfm2>().unwrap().conv_layers, [false; 3]);
        let err = parse(r#", "layer_types": ["conv", "mamba", "conv"]"#).unwrap_err();
        assert!(err.to_string().contains("layer_types"), "{err}");
        let err = parse(r#", "layer_types": ["conv"]"#).unwrap_err();
        assert!(err.to_string().contains("layer_types"), "{err}");
    }

    #[test]
    fn mlp_width_is_derived_as_transformers_derives_it() {
        // 2 · 192 / 3 = 128, rounded up to a multiple of 256.
        assert_eq!(parse("").unwrap().intermediate_size, 256);
        let c = parse(r#", "block_multiple_of": 48, "block_ffn_dim_multiplier": 1.5"#).unwrap();
        assert_eq!(c.intermediate_size, 192);
        let c = parse(r#", "block_ffn_dim_multiplier": null"#).unwrap();
        assert_eq!(c.intermediate_size, 128);
        let c = parse(r#", "block_auto_adjust_ff_dim": false"#).unwrap();
        assert_eq!(c.intermediate_size, 192);
        let err = parse(r#", "block_ffn_dim_multiplier": -1"#).unwrap_err();
        assert!(
            err.to_string().contains("block_ffn_dim_multiplier"),
            "{err}"
        );
        let err = parse(r#", "block_ffn_dim_multiplier": 1e30"#).unwrap_err();
        assert!(err.to_string().contains("intermediate_size"), "{err}");
        let err = parse(r#", "block_multiple_of": 0"#).unwrap_err();
        assert!(err.to_string().contains("block_multiple_of"), "{err}");
    }

    #[test]
    fn genai_config_lays_out_the_cache_with_or_without_conv_layers() {
        let ep = crate::ep::get_ep("default").unwrap();
        let cases = [
            ("", ["full_attention"; 3], false),
            (
                r#", "full_attn_idxs": [1]"#,
                ["conv", "full_attention", "conv"],
                true,
            ),
        ];
        for (extra, types, conv) in cases {
            let cfg = parse(extra).unwrap();
            let graph = crate::models::build_model(&cfg, crate::ir::DType::F32)
                .unwrap()
                .graph;
            let genai =
                crate::package::genai_config::genai_config(&cfg, "lfm2", &ep, &graph, "model.onnx");
            let decoder = &genai["model"]["decoder"];
            assert_eq!(decoder["layer_types"], serde_json::json!(types), "{extra}");
            assert_eq!(decoder["conv_cache_size"], 2, "{extra}");
            let names = decoder["inputs"].get("past_conv_names");
            assert_eq!(names.is_some(), conv, "{extra}");
        }
    }

    #[test]
    fn hostile_kernel_widths_are_refused_by_name() {
        for bad in ["1", "0", "-3", "65", "1000000"] {
            let err = parse(&format!(r#", "conv_L_cache": {bad}"#)).unwrap_err();
            assert!(err.to_string().contains("conv_L_cache"), "{bad}: {err}");
        }
    }
}
