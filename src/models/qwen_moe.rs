//! Qwen2-MoE and Qwen3-MoE: the Qwen2 (Qwen3, with per-head q/k norms) decoder whose MLPs are
//! sparse mixtures of SwiGLU experts (router `mlp.gate`, experts `mlp.experts.{e}.*_proj`) in
//! the layers `decoder_sparse_step` selects and `mlp_only_layers` does not name; the others
//! keep a dense MLP of `intermediate_size`. Routing is softmax → top-k, renormalised only with
//! `norm_topk_prob`. Qwen2-MoE adds a shared expert to every MoE block, gated by the sigmoid of
//! a one-column linear (`shared_expert_gate`). The block is [`MoeSpec::build`].

use super::components::{gated_shared_expert, ExpertWeights, MoeSpec, Router};
use super::decoder::{Family, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Dims, Fields, HfConfig,
    SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "qwen_moe",
    summary: "Qwen2/Qwen3 with sparse SwiGLU experts in the layers `decoder_sparse_step` and \
              `mlp_only_layers` select, optional top-k renormalisation (`norm_topk_prob`); \
              qwen2_moe: sigmoid-gated shared expert",
    model_types: &[
        ModelType::generative("qwen2_moe", "qwen2", read_qwen2_moe),
        ModelType::generative("qwen3_moe", "qwen2", read_qwen3_moe),
    ],
};

/// transformers' Qwen2MoeConfig: q/k/v biases (`qkv_bias`, default on), windows off unless
/// enabled, then on even layers below `max_window_layers` (default 28).
const QWEN2_MOE: DecoderFields = DecoderFields {
    biases: Biases::Qkv,
    use_sliding_window: false,
    sliding_window: Some(4096),
    sliding_layers: SlidingLayers::Pattern(even_layers_below_max_window),
    ..DecoderFields::LLAMA
};

/// transformers' Qwen3MoeConfig: `attention_bias` on q/k/v/o, windows off unless enabled.
const QWEN3_MOE: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    use_sliding_window: false,
    sliding_window: Some(4096),
    ..DecoderFields::LLAMA
};

fn read_qwen2_moe(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let raw = &windows_only_when_enabled(raw);
    let mut cfg = read_decoder(raw, t, f, &QWEN2_MOE, |dims| {
        let shared = "shared_expert_intermediate_size";
        let shared =
            f.optional_count(shared, raw.shared_expert_intermediate_size, 5632, MAX_WIDTH)?;
        knobs(raw, f, dims, (60, 4), Some(shared), false)
    })?;
    cfg.qkv_bias = raw.qkv_bias.unwrap_or(true);
    Ok(cfg)
}

fn read_qwen3_moe(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let raw = &windows_only_when_enabled(raw);
    read_decoder(raw, t, f, &QWEN3_MOE, |dims| {
        knobs(raw, f, dims, (128, 8), None, true)
    })
}

/// transformers drops the window (writing `sliding_window` 0 or null) unless
/// `use_sliding_window` is set: the config without its window in that case.
fn windows_only_when_enabled(raw: &HfConfig) -> HfConfig {
    let mut raw = raw.clone();
    if !raw.use_sliding_window.unwrap_or(false) {
        raw.sliding_window = Some(None);
    }
    raw
}

/// Qwen2-MoE's window layers without `layer_types`: every even layer below
/// `max_window_layers`.
fn even_layers_below_max_window(
    raw: &HfConfig,
    layers: usize,
    f: &Fields<'_>,
) -> Result<Vec<bool>> {
    let below = match raw.max_window_layers {
        Some(m) => f.index("max_window_layers", m, MAX_LAYERS)?,
        None => 28,
    };
    Ok((0..layers).map(|i| i % 2 == 0 && i < below).collect())
}

/// The knobs both model types share, with `(experts, top_k)` defaults, the shared expert's
/// width and whether q and k are normed.
pub(super) fn knobs(
    raw: &HfConfig,
    f: &Fields<'_>,
    dims: Dims,
    defaults: (usize, usize),
    shared_expert: Option<usize>,
    qk_norm: bool,
) -> Result<QwenMoe> {
    let (experts, top_k) = read_routing(raw, f, defaults)?;
    let expert_width = f.optional_count(
        "moe_intermediate_size",
        raw.moe_intermediate_size,
        if qk_norm { 768 } else { 1408 },
        MAX_WIDTH,
    )?;
    let layers = dims.num_hidden_layers;
    let step = f.optional_count(
        "decoder_sparse_step",
        raw.decoder_sparse_step,
        1,
        MAX_LAYERS,
    )?;
    let mut moe_layers: Vec<bool> = (0..layers).map(|i| (i + 1) % step == 0).collect();
    for &i in raw.mlp_only_layers.iter().flatten() {
        let i = f.index("mlp_only_layers", i, MAX_LAYERS)?;
        let layer = moe_layers.get_mut(i).ok_or_else(|| {
            f.err(
                "mlp_only_layers",
                &format!("names layer {i}, but the model has {layers} layers"),
            )
        })?;
        *layer = false;
    }
    Ok(QwenMoe {
        experts,
        top_k,
        expert_width,
        normalize: raw.norm_topk_prob.unwrap_or(false),
        shared_expert,
        moe_layers,
        qk_norm,
    })
}

/// Qwen2/3-MoE's knobs and hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QwenMoe {
    /// `num_experts` per MoE layer.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
    /// `moe_intermediate_size`: each routed expert's width.
    pub expert_width: usize,
    /// `norm_topk_prob`.
    pub normalize: bool,
    /// The shared expert's width (Qwen2-MoE), `None` without one (Qwen3-MoE).
    pub shared_expert: Option<usize>,
    /// Per layer, whether its MLP is a MoE block.
    pub moe_layers: Vec<bool>,
    /// Per-head RMSNorm on q and k before RoPE (Qwen3-MoE).
    pub qk_norm: bool,
}

impl Family for QwenMoe {
    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        match self.qk_norm {
            true => QkNorm::PerHead,
            false => QkNorm::Off,
        }
    }

    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let mlp = format!("{layer}.mlp");
        if !self.moe_layers.get(i).copied().unwrap_or(false) {
            return self.mlp(b, cfg, x, &mlp, dtype);
        }
        let routing = (self.experts, self.top_k);
        let router = Router::Softmax {
            normalize: self.normalize,
        };
        let spec = MoeSpec::new(cfg, self.expert_width, routing, router, ExpertWeights::PROJ);
        let routed = spec.build(b, x, &mlp, dtype);
        match self.shared_expert {
            None => routed,
            Some(width) => {
                let sizes = (cfg.hidden_size, width);
                let shared = gated_shared_expert(b, x, &mlp, sizes, dtype);
                b.op("Add", &[&routed, &shared], vec![])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::QwenMoe;
    use crate::config::ArchConfig;

    fn parse(model_type: &str, extra: &str) -> crate::Result<ArchConfig> {
        let fields = format!(
            r#""model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 128"#
        );
        crate::models::parse_fields(&fields, extra)
    }

    #[test]
    fn moe_layers_follow_sparse_step_and_mlp_only_layers() {
        let c = parse(
            "qwen2_moe",
            r#", "decoder_sparse_step": 2, "mlp_only_layers": [3]"#,
        )
        .unwrap();
        let k = c.knobs::<QwenMoe>().unwrap();
        assert_eq!(k.moe_layers, [false, true, false, false]);
        assert_eq!((k.experts, k.top_k, k.shared_expert), (60, 4, Some(5632)));
        assert!(c.qkv_bias && !c.o_bias && !k.normalize && !k.qk_norm);
        let q3 = parse(
            "qwen3_moe",
            r#", "norm_topk_prob": true, "num_local_experts": 8"#,
        )
        .unwrap();
        let k = q3.knobs::<QwenMoe>().unwrap();
        assert_eq!(k.moe_layers, [true; 4]);
        assert!(k.normalize && k.qk_norm && k.shared_expert.is_none());
        assert_eq!((k.experts, k.top_k), (8, 8));
        let err = parse("qwen2_moe", r#", "mlp_only_layers": [4]"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("mlp_only_layers"), "{err}");
    }

    #[test]
    fn windows_need_use_sliding_window_and_slide_on_even_layers() {
        let off = parse("qwen2_moe", r#", "sliding_window": 0"#).unwrap();
        assert_eq!(off.layer_windows, [None; 4]);
        let on = parse(
            "qwen2_moe",
            r#", "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 3"#,
        )
        .unwrap();
        assert_eq!(on.layer_windows, [Some(8), None, Some(8), None]);
    }
}
