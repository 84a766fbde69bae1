//! SK Telecom's A.X-K2 (`axk2`): DeepSeek-V3.2 ([`super::deepseek_v32`]: multi-head latent
//! attention made sparse by a learned indexer, its keys cached as
//! `past_key_values.{i}.index_key`; DeepSeek-V3's experts) with three changes. q and a per-head
//! output gate come from one projection of the q latent and its normalised form side by side
//! (transformers' `q_gate_proj`, stored as the released checkpoints' `q_b_proj`, of
//! `[q_a_layernorm(q_a_proj(x)) | q_a_proj(x)]`, per head `[q | gate]`), the
//! gate's sigmoid multiplying the attention's values before `o_proj`; the layer's input norm,
//! and the post-attention norm of its MoE layers, are gated RMSNorms (`y = RMSNorm(x)`, then
//! `y · sigmoid(fc2(SiLU(fc1(y))))`, `fc1` `gated_norm_rank` wide: modules `{norm}.norm`,
//! `{norm}.W_down` and `{norm}.W_up`); the router has no expert groups (A.X-K2-Light; grouped routing, which masks
//! the other groups with 0, is refused). The MoE layers are those `mlp_layer_types` names
//! `sparse`, by default those from `first_k_dense_replace` (1) on whose index `moe_layer_freq`
//! (1) divides. No genai_config.json (the index-key cache), no GroupQueryAttention (the index
//! mask).

use super::components::{
    linear, rotary_embedding, AttentionSpec, IndexedLayer, Indexer, Mla, Norm, NormKind, RopeTables,
};
use super::decoder::{Family, LayerNorms};
use super::deepseek::{
    mla_rope, read_mla_decoder, sigmoid_router, Deepseek, DeepseekExperts, DeepseekMoe,
};
use super::deepseek_v32::{every_layer_indexed, read_indexer};
use super::family::FamilySpec;
use crate::config::{
    read_sparse_layers, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType,
};
use crate::ir::{Attr, DType, GraphBuilder};
use crate::limits::config::{MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "axk2",
    summary: "A.X-K2: DeepSeek-V3.2's sparse multi-head latent attention (learned indexer, \
              `past_key_values.{i}.index_key`, no genai_config) with q and a per-head sigmoid \
              output gate from one `q_gate_proj` of the q latent and its norm, gated RMSNorms \
              (input, and post-attention on MoE layers), experts without groups",
    model_types: &[ModelType {
        name: "axk2",
        genai_type: None,
        read,
        builds_longrope: false,
    }],
};

/// transformers' AXK2Config.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, _, f| mla_rope(raw, 32, true, f),
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    every_layer_indexed(raw, f)?;
    // `n_group` / `topk_group` null: no expert groups (one group, kept).
    let raw = &HfConfig {
        layer_types: None,
        n_group: raw.n_group.filter(|g| g.is_some()),
        topk_group: raw.topk_group.filter(|g| g.is_some()),
        ..raw.clone()
    };
    read_mla_decoder(
        raw,
        t,
        f,
        &FIELDS,
        (Some(384), 128, 64, 32, Some(64)),
        |mla| {
            let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
            let mut experts = DeepseekExperts::read(raw, f, (128, Some(8)), 512, 1, 1)?;
            experts.moe_layers = match &raw.mlp_layer_types {
                Some(types) => read_sparse_layers(types, layers, f)?,
                None => {
                    let freq =
                        f.optional_count("moe_layer_freq", raw.moe_layer_freq, 1, MAX_LAYERS)?;
                    let first = experts.moe_layers.iter().position(|&m| m).unwrap_or(layers);
                    (0..layers).map(|i| i >= first && i % freq == 0).collect()
                }
            };
            let router = sigmoid_router(raw, f, experts.experts, (1, 1), (true, 2.5))?;
            if router.groups > 1 {
                return Err(f.err(
                    "n_group",
                    &format!(
                        "{} (A.X-K2's grouped routing scores the experts of the other groups 0, \
                     which mobius does not build; expected null)",
                        router.groups
                    ),
                ));
            }
            let reads_q = "the indexer and the output gate read the q latent";
            let indexer = read_indexer(raw, f, &mla, (16, false), reads_q)?;
            Ok(Axk2 {
                deepseek: Deepseek {
                    mla,
                    moe: DeepseekMoe { experts, router },
                },
                indexer,
                gate_rank: f.optional_count(
                    "gated_norm_rank",
                    raw.gated_norm_rank,
                    16,
                    MAX_WIDTH,
                )?,
            })
        },
    )
}

/// The family's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Axk2 {
    /// The attention's shape and the experts, as DeepSeek-V3's.
    pub deepseek: Deepseek,
    /// Every layer's indexer.
    pub indexer: Indexer,
    /// `gated_norm_rank`: the width of the gated norms' `fc1`.
    pub gate_rank: usize,
}

impl Axk2 {
    /// The gate of a gated RMSNorm on its normalised `y`: `y · sigmoid(fc2(SiLU(fc1(y))))`,
    /// `fc1` and `fc2` stored as the released checkpoints name them, `{norm}.W_down` and
    /// `{norm}.W_up` (transformers' `{norm}.mlp.fc1` / `.fc2`).
    fn gated(&self, b: &mut GraphBuilder, y: &str, norm: &str, dtype: DType) -> String {
        let h = self.deepseek.mla.hidden;
        let fc1 = linear(
            b,
            y,
            &format!("{norm}.W_down"),
            h,
            self.gate_rank,
            false,
            dtype,
        );
        let act = b.op("Sigmoid", &[&fc1], vec![]);
        let act = b.op("Mul", &[&fc1, &act], vec![]);
        let fc2 = linear(
            b,
            &act,
            &format!("{norm}.W_up"),
            self.gate_rank,
            h,
            false,
            dtype,
        );
        let gate = b.op("Sigmoid", &[&fc2], vec![]);
        b.op("Mul", &[y, &gate], vec![])
    }

    /// The name of attention module `attn`'s output gate (its sigmoid, `[B, S, heads ·
    /// v_head_dim]`), written by [`Family::attention_qkv`] and read by
    /// [`Family::attention_output`].
    fn gate_name(attn: &str) -> String {
        format!("{attn}.output_gate")
    }

    /// Whether layer `i` has experts (and so a gated post-attention norm).
    fn sparse(&self, i: usize) -> bool {
        let layers = &self.deepseek.moe.experts.moe_layers;
        layers.get(i).copied().unwrap_or(false)
    }
}

impl Family for Axk2 {
    fn layer_norms_of(&self, i: usize) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("input_layernorm.norm"),
            pre_mlp: Some(match self.sparse(i) {
                true => "post_attention_layernorm.norm",
                false => "post_attention_layernorm",
            }),
            ..LayerNorms::PRE
        }
    }

    fn layer_indexer(&self, _cfg: &ArchConfig, _i: usize) -> Option<IndexedLayer> {
        Some(IndexedLayer::Own(self.indexer))
    }

    fn attention_qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        _i: usize,
        rotary: &[RopeTables],
        spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> [String; 3] {
        let mla: &Mla = &self.deepseek.mla;
        let layer = attn.strip_suffix(".self_attn").unwrap_or(attn);
        let x = self.gated(b, x, &format!("{layer}.input_layernorm"), dtype);
        let rank = self.indexer.q_rank;
        let a = format!("{attn}.q_a_proj");
        let compressed = linear(b, &x, &a, mla.hidden, rank, mla.bias, dtype);
        let norm = Norm {
            kind: NormKind::Rms,
            eps: mla.latent_eps,
        };
        let latent = norm.apply(
            b,
            &compressed,
            &format!("{attn}.q_a_layernorm"),
            rank,
            dtype,
        );
        let both = b.op(
            "Concat",
            &[&latent, &compressed],
            vec![("axis", Attr::Int(-1))],
        );
        let (n, d, v) = (mla.heads, mla.head_dim(), mla.v_head);
        let proj = format!("{attn}.q_b_proj");
        let q = mla.strided_q(b, &both, (&proj, 2 * rank), d + v, dtype);
        let q = rotary_embedding(b, &q, &rotary[0], &cfg.rope, n, d);
        let rows: Vec<_> = (0..n).map(|j| (j * (d + v) + d, v)).collect();
        let shape = (proj.as_str(), 2 * rank, n * (d + v));
        let gate = Mla::projection_rows(b, &both, shape, "gate", &rows, dtype);
        b.op_into("Sigmoid", &[&gate], vec![], &Self::gate_name(attn));
        let [k, v] = mla.kv(b, &x, attn, &rotary[0], &cfg.rope, dtype);
        if let Some(io) = &spec.index {
            let module = format!("{attn}.indexer");
            let rope = (&rotary[0], &cfg.rope);
            self.indexer
                .mask(b, &x, &latent, &module, rope, io, spec.mask, dtype);
        }
        [q, k, v]
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.deepseek.attention_scale(cfg)
    }

    fn attention_output(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _x: &str,
        y: &str,
        attn: &str,
        _spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> String {
        let mla = &self.deepseek.mla;
        let values = mla.values(b, y);
        let gated = b.op("Mul", &[&values, &Self::gate_name(attn)], vec![]);
        let (inner, o_proj) = (mla.heads * mla.v_head, format!("{attn}.o_proj"));
        linear(b, &gated, &o_proj, inner, mla.hidden, mla.bias, dtype)
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
        let x = match self.sparse(i) {
            true => self.gated(b, x, &format!("{layer}.post_attention_layernorm"), dtype),
            false => x.to_string(),
        };
        self.deepseek.layer_mlp(b, cfg, &x, layer, i, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::Axk2;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        let fields = r#""model_type": "axk2", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 128, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "v_head_dim": 16, "kv_lora_rank": 32, "q_lora_rank": 48, "n_routed_experts": 16"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn defaults_follow_transformers() {
        let c = parse("").unwrap();
        let k = c.knobs::<Axk2>().unwrap();
        assert_eq!(
            (k.indexer.heads, k.indexer.head_dim, k.gate_rank),
            (16, 128, 16)
        );
        assert!(!k.indexer.interleaved && c.rope.interleaved);
        assert_eq!(k.deepseek.moe.experts.moe_layers, [false, true, true, true]);
        assert_eq!(k.deepseek.moe.router.groups, 1);
        let c = parse(r#", "moe_layer_freq": 2"#).unwrap();
        let k = c.knobs::<Axk2>().unwrap();
        assert_eq!(
            k.deepseek.moe.experts.moe_layers,
            [false, false, true, false]
        );
        for (extra, field) in [
            (r#", "n_group": 4, "topk_group": 2"#, "n_group"),
            (r#", "q_lora_rank": null"#, "q_lora_rank"),
            (r#", "layer_types": ["full_attention"]"#, "layer_types"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
