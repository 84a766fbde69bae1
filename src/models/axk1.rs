//! SK Telecom's A.X-K1 (`axk1`): DeepSeek-V3 ([`super::deepseek`]: multi-head latent attention
//! with a low-rank q always, grouped sigmoid routing, a shared expert) whose MoE blocks end in
//! an RMSNorm of their output (`post_mlp_layernorm`, stored at the layer level in released
//! checkpoints; transformers' `mlp.post_mlp_layernorm`). The MoE layers are those
//! `mlp_layer_types` names `sparse`, by default those from `first_k_dense_replace` (1) on whose
//! index `moe_layer_freq` (1) divides. Released checkpoints have no `e_score_correction_bias`
//! and transformers routes them with zeros: the router adds none.

use super::components::{AttentionSpec, GroupedRouter, Mla, RopeTables};
use super::decoder::Family;
use super::deepseek::{
    mla_rope, read_mla_decoder, sigmoid_router, Deepseek, DeepseekExperts, DeepseekMoe, MlaDefaults,
};
use super::family::{without_windows, FamilySpec};
use super::glm4_moe::mlp_layer_types;
use crate::config::{
    ArchConfig, Biases, CheckpointRenaming, DecoderFields, Fields, HfConfig, ModelType,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_LAYERS;
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `axk1` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "axk1",
    summary: "DeepSeek-V3 with an RMSNorm on each MoE block's output (`post_mlp_layernorm`), \
              no score correction, MoE layers by `mlp_layer_types` or `moe_layer_freq`",
    model_types: &[ModelType::generative("axk1", "decoder", read)],
};

/// transformers' AXK1Config: DeepSeek-V3's fields (`attention_bias` on the attention's
/// projections, no MLP bias, RoPE theta 1e4 on `qk_rope_head_dim` channels, pairs interleaved
/// with `rope_interleave`, untied), `rms_norm_eps` 1e-6.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, _, f| mla_rope(raw, 64, raw.rope_interleave.unwrap_or(true), f),
    ..DecoderFields::LLAMA
};

/// AXK1Config's MLA: q rank 1536, latent 512, 128 + 64 q/k channels, 128 v channels.
const MLA: MlaDefaults = (Some(1536), 512, 128, 64, Some(128));

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    if raw.q_lora_rank == Some(None) {
        return Err(f.err(
            "q_lora_rank",
            "null (A.X-K1's attention always has a low-rank q: expected a positive integer)",
        ));
    }
    let raw = &without_windows(raw);
    read_mla_decoder(raw, t, f, &FIELDS, MLA, |mla: Mla| {
        let mut experts = DeepseekExperts::read(raw, f, (192, Some(8)), 2048, 1, 1)?;
        let layers = experts.moe_layers.len();
        experts.moe_layers = match &raw.mlp_layer_types {
            Some(types) => mlp_layer_types(types, layers, f)?,
            None => {
                let first = match raw.first_k_dense_replace {
                    Some(n) => f.index("first_k_dense_replace", n, MAX_LAYERS)?,
                    None => 1,
                };
                let every = match raw.moe_layer_freq {
                    Some(n) => f.count("moe_layer_freq", n, MAX_LAYERS)?,
                    None => 1,
                };
                (0..layers).map(|i| i >= first && i % every == 0).collect()
            }
        };
        let router = GroupedRouter {
            correction_bias: false,
            ..sigmoid_router(raw, f, experts.experts, (8, 4), (true, 2.5))?
        };
        Ok(AxK1(Deepseek {
            mla,
            moe: DeepseekMoe { experts, router },
        }))
    })
}

/// The name transformers gives tensor `name`, as the layer-level name released checkpoints
/// use: transformers' `mlp.post_mlp_layernorm` is `post_mlp_layernorm`.
pub fn checkpoint_name(name: &str) -> Option<String> {
    Some(name.replace(".mlp.post_mlp_layernorm.", ".post_mlp_layernorm."))
}

/// A.X-K1's knobs and hooks: DeepSeek's, with the MoE blocks' output norm.
#[derive(Debug, Clone, PartialEq)]
pub struct AxK1(pub Deepseek);

impl Family for AxK1 {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn attention_qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        i: usize,
        rotary: &[RopeTables],
        spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> [String; 3] {
        self.0
            .attention_qkv(b, cfg, x, attn, i, rotary, spec, dtype)
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.0.attention_scale(cfg)
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        self.0.o_proj(b, cfg, y, attn, dtype)
    }

    /// DeepSeek's block; a MoE block's output (routed plus shared experts) then goes through
    /// `{layer}.post_mlp_layernorm`.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let y = self.0.layer_mlp(b, cfg, x, layer, i, dtype);
        if !self.0.moe.experts.moe_layers[i] {
            return y;
        }
        let norm = format!("{layer}.post_mlp_layernorm");
        self.norm(cfg).apply(b, &y, &norm, cfg.hidden_size, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#""model_type": "axk1", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": 5, "vocab_size": 300,
        "max_position_embeddings": 128, "n_routed_experts": 16"#;

    #[test]
    fn axk1_reads_its_defaults() {
        let c = crate::models::parse_fields(BASE, "").unwrap();
        let k = &c.knobs::<AxK1>().unwrap().0;
        assert_eq!((k.mla.q_lora_rank, k.mla.kv_lora_rank), (Some(1536), 512));
        assert_eq!((c.rope.rotary_dim, c.rope.interleaved), (64, true));
        let (e, r) = (&k.moe.experts, &k.moe.router);
        assert_eq!((e.top_k, e.width, e.shared), (8, 2048, 1));
        assert_eq!(e.moe_layers, [false, true, true, true, true]);
        assert_eq!((r.groups, r.top_groups, r.scale), (8, 4, 2.5));
        assert!(r.sigmoid && !r.correction_bias && r.normalize);
    }

    #[test]
    fn axk1_reads_its_moe_layers() {
        let freq = r#", "first_k_dense_replace": 2, "moe_layer_freq": 2"#;
        let c = crate::models::parse_fields(BASE, freq).unwrap();
        let k = &c.knobs::<AxK1>().unwrap().0;
        assert_eq!(k.moe.experts.moe_layers, [false, false, true, false, true]);
        let types = r#", "mlp_layer_types": ["sparse", "dense", "dense", "dense", "sparse"]"#;
        let c = crate::models::parse_fields(BASE, &format!("{freq}{types}")).unwrap();
        let k = &c.knobs::<AxK1>().unwrap().0;
        assert_eq!(k.moe.experts.moe_layers, [true, false, false, false, true]);
        let err = crate::models::parse_fields(BASE, r#", "q_lora_rank": null"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("q_lora_rank"), "{err}");
        assert_eq!(
            checkpoint_name("model.layers.1.mlp.post_mlp_layernorm.weight").as_deref(),
            Some("model.layers.1.post_mlp_layernorm.weight")
        );
    }
}
